#[dlq_core::dead_letter(event_type = "payment")]
struct Payment {
    amount: u64,
}

fn main() {}
