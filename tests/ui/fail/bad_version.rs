#[dlq_core::dead_letter(event_type = "payment", version = 0)]
async fn zero(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "refund", version = "2")]
async fn quoted(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "invoice", version = 1.5)]
async fn fraction(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

fn main() {}
