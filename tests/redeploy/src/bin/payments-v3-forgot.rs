//! Version 3 of the payments service as first deployed, by mistake: `cents` renamed
//! `amount_cents`, but the attribute still says version 1 and names no upcaster. Its retrier
//! publishes its type (version 1, the JSON Schema of the new `Payment`) into the store's catalog
//! and runs: every parked payment fails for good, as undecodable (version 2's rows are ahead of
//! it, version 1's lack `amount_cents`).
//!
//! `cargo run --bin payments-v3-forgot -- /tmp/payments.db`

use dlq_core::schemars::JsonSchema;
use dlq_core::{dead_letter, handlers};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
struct Payment {
    id: u64,
    amount_cents: i64,
    currency: String,
}

#[dead_letter(event_type = "payment")]
async fn handle(payment: Payment) -> Result<(), std::io::Error> {
    assert!(payment.amount_cents >= 0 && !payment.currency.is_empty(), "{payment:?}");
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    redeploy::publish_and_drain(handlers![handle].expect("one handler"), "payments-v3-forgot").await;
}
