struct Service;

impl Service {
    #[dlq_core::dead_letter(event_type = "payment")]
    async fn handle(&self, amount: u64) -> Result<(), std::io::Error> {
        let _ = amount;
        Ok(())
    }
}

fn main() {}
