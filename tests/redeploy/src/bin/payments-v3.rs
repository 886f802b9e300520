//! Version 3 of the payments service: `cents` is renamed `amount_cents`, and the ledger is
//! back. Its retrier drains every parked payment, upcasting each from the version it was
//! parked in: version 1 through both links, version 2 through the last.
//!
//! `cargo run --bin payments-v3 -- /tmp/payments.db`

use dlq_core::schemars::JsonSchema;
use dlq_core::{handlers::UpcastError, dead_letter, handlers};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Its JSON Schema goes into the store's type catalog, for the stock `dlq redrive --validate`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
struct Payment {
    id: u64,
    amount_cents: i64,
    currency: String,
}

/// The version 1 payload gains its currency; the version 1 and 2 structs are gone, so the
/// links work on the JSON.
fn v1_to_v2(mut v: Value) -> Result<Value, UpcastError> {
    v["currency"] = "EUR".into();
    Ok(v)
}

fn v2_to_v3(mut v: Value) -> Result<Value, UpcastError> {
    let cents = v.as_object_mut().and_then(|o| o.remove("cents")).ok_or_else(|| UpcastError::new("no `cents`"))?;
    v["amount_cents"] = cents;
    Ok(v)
}

#[dead_letter(event_type = "payment", version = 3, upcast = [v1_to_v2, v2_to_v3])]
async fn handle(payment: Payment) -> Result<(), std::io::Error> {
    assert!(payment.amount_cents >= 0 && !payment.currency.is_empty(), "{payment:?}");
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    redeploy::publish_and_drain(handlers![handle].expect("one handler"), "payments-v3").await;
}
