struct LedgerDown;

#[dlq_core::dead_letter(event_type = "payment")]
async fn handle(amount: u64) -> Result<(), LedgerDown> {
    let _ = amount;
    Err(LedgerDown)
}

fn main() {}
