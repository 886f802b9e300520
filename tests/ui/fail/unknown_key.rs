#[dlq_core::dead_letter(event_type = "payment", retries = 3)]
async fn handle(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

fn main() {}
