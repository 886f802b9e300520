//! Version 3 of the payments service as first deployed, by mistake: `cents` renamed
//! `amount_cents`, but the attribute still says version 1 and names no upcaster. Its retrier
//! finds version 1 of `payment` published with another event in the store's catalog and
//! refuses to start (exit 1, the fix on stderr) before any row is claimed; it publishes its
//! type all the same, so that `dlq redrive --validate` reports the mismatch. Were it to run,
//! every parked payment would fail for good, as undecodable.
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
