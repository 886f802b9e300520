#[dlq_core::dead_letter(event_type = "payment", breaker = "half of twenty")]
async fn handle(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "refund", breaker = "50% of 20 in 0s")]
async fn handle_refund(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

// The configuration's spellings are accepted: spaces, parts left out, humantime's units.
#[dlq_core::dead_letter(event_type = "payout", breaker = " 25 % of 10 in 2 minutes")]
async fn handle_payout(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

fn main() {}
