#[dlq_core::dead_letter(event_type = "none", backoff = "none", base = "1s", jitter = 0.1)]
async fn no_wait(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "fixed", backoff = "fixed", base = "1s", max = "1m")]
async fn fixed(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "exp", base = "1h", max = "1m")]
async fn shrinking(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

fn main() {}
