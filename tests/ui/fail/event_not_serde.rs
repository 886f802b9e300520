struct Payment {
    amount: u64,
}

#[dlq_core::dead_letter(event_type = "payment")]
async fn handle(payment: Payment) -> Result<(), std::io::Error> {
    let _ = payment.amount;
    Ok(())
}

fn main() {}
