#[dlq_core::dead_letter(event_type = "payment")]
async fn handle_payment(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

fn main() {
    let _ = dlq_core::handlers![handle_payment, "refund"];
}
