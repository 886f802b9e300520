#[dlq_core::dead_letter(event_type = "payment")]
async fn handle_payment(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

async fn handle_refund(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

struct NotAHandler;

fn main() {
    let _ = dlq_core::handlers![handle_payment, handle_refund];
    let _ = dlq_core::handlers![NotAHandler];
}
