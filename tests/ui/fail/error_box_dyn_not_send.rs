// `Box<dyn Error>` cannot cross threads to be parked: it needs `+ Send + Sync`.
#[dlq_core::dead_letter(event_type = "payment")]
async fn handle(amount: u64) -> Result<(), Box<dyn std::error::Error>> {
    let _: u8 = amount.try_into()?;
    Ok(())
}

fn main() {}
