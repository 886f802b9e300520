#[dlq_core::dead_letter(event_type = "payment", redact = ["card/number", "/customer/e~2mail"])]
async fn handle(payment: serde_json::Value) -> Result<(), std::io::Error> {
    let _ = payment;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "refund", redact = "/card/number")]
async fn handle_refund(refund: serde_json::Value) -> Result<(), std::io::Error> {
    let _ = refund;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "payout", redact = [42])]
async fn handle_payout(payout: serde_json::Value) -> Result<(), std::io::Error> {
    let _ = payout;
    Ok(())
}

fn main() {}
