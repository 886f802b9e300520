#[dlq_core::dead_letter(event_type = "payment")]
async fn handle(amount: u64) -> Option<()> {
    let _ = amount;
    None
}

fn main() {}
