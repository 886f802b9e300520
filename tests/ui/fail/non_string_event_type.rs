#[dlq_core::dead_letter(event_type = payment)]
async fn by_ident(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

#[dlq_core::dead_letter(event_type = 42)]
async fn by_number(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

fn main() {}
