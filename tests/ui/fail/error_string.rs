// A `String` is not an error type: the note says what to return instead.
#[dlq_core::dead_letter(event_type = "payment")]
async fn handle(amount: u64) -> Result<(), String> {
    if amount == 0 {
        return Err("amount must be positive".to_owned());
    }
    Ok(())
}

fn main() {}
