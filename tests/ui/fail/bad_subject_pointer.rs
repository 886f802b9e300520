#[dlq_core::dead_letter(event_type = "payment", subject = "customer_id")]
async fn handle(payment: serde_json::Value) -> Result<(), std::io::Error> {
    let _ = payment;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "refund", subject = "/customer~2id")]
async fn handle_refund(refund: serde_json::Value) -> Result<(), std::io::Error> {
    let _ = refund;
    Ok(())
}

fn main() {}
