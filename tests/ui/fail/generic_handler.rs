#[dlq_core::dead_letter(event_type = "payment")]
async fn handle<E: serde::de::DeserializeOwned>(event: E) -> Result<(), std::io::Error> {
    let _ = event;
    Ok(())
}

fn main() {}
