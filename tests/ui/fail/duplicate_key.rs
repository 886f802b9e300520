#[dlq_core::dead_letter(event_type = "payment", max_retries = 3, max_retries = 5)]
async fn handle(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

fn main() {}
