#[dlq_core::dead_letter(event_type = "payment")]
async fn handle_payment(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

async fn handle_refund(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

mod audit {
    pub async fn handle_audit(entry: String) -> Result<(), std::io::Error> {
        let _ = entry;
        Ok(())
    }
}

struct NotAHandler;

fn main() {
    let _ = dlq_core::handlers![handle_payment, handle_refund];
    let _ = dlq_core::handlers![audit::handle_audit];
    let _ = dlq_core::handlers![NotAHandler];
}
