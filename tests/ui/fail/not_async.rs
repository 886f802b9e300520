#[dlq_core::dead_letter(event_type = "payment")]
fn handle(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

fn main() {}
