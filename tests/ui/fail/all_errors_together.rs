// Every mistake is reported in one compilation, each on its own token.
#[dlq_core::dead_letter(retries = 3, backoff = "expo", jitter = 2.0)]
fn handle<T>(&self) {}

fn main() {}
