#[dlq_core::dead_letter(event_type = "payment")]
async fn handle() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
