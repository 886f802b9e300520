#[dlq_core::dead_letter(event_type = "payment", base = "5 minutes", max = "1h", timeout = "0s")]
async fn handle(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

fn main() {}
