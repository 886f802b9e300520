#[dlq_core::dead_letter(event_type = "payment", base = "30", max = "1h", max_age = "7 dayz", timeout = "0s")]
async fn handle(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

// humantime's spellings are accepted: spaces, long unit names, fractions.
#[dlq_core::dead_letter(event_type = "refund", base = "1.5s", max = "1 hour 30 minutes", max_age = "2 weeks")]
async fn handle_refund(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

fn main() {}
