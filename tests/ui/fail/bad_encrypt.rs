// `clear` keeps fields readable beside the ciphertext: it means nothing without `encrypt`.
#[dlq_core::dead_letter(event_type = "payment", clear = ["/id"])]
async fn handle(p: serde_json::Value) -> Result<(), std::io::Error> {
    let _ = p;
    Ok(())
}

// A pointer names a field: "" would keep the whole payload in clear.
#[dlq_core::dead_letter(event_type = "refund", encrypt = true, clear = ["id", ""])]
async fn handle_refund(p: serde_json::Value) -> Result<(), std::io::Error> {
    let _ = p;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "payout", encrypt = "yes", clear = "/id")]
async fn handle_payout(p: serde_json::Value) -> Result<(), std::io::Error> {
    let _ = p;
    Ok(())
}

fn main() {}
