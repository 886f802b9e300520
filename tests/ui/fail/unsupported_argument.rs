#[dlq_core::dead_letter(event_type = "payment")]
async fn handle(amount: u64, note: String) -> Result<(), std::io::Error> {
    let _ = (amount, note);
    Ok(())
}

fn main() {}
