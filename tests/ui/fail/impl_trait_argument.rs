#[dlq_core::dead_letter(event_type = "payment")]
async fn handle(event: impl serde::Serialize) -> Result<(), std::io::Error> {
    let _ = event;
    Ok(())
}

fn main() {}
