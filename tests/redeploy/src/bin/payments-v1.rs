//! Version 1 of the payments service: amounts in cents, no currency. The ledger is down, so
//! each of the events it handles fails and is parked (in version 1).
//!
//! `cargo run --bin payments-v1 -- /tmp/payments.db 600`

use dlq_core::schemars::JsonSchema;
use dlq_core::{dead_letter, with_store};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
struct Payment {
    id: u64,
    cents: i64,
}

#[dead_letter(event_type = "payment", backoff = "none")]
async fn handle(payment: Payment) -> Result<(), std::io::Error> {
    Err(std::io::Error::other(format!("ledger down: payment {} not booked", payment.id)))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let store = redeploy::store().await;
    for id in 0..redeploy::count() {
        let payment = Payment { id, cents: i64::try_from(id).unwrap_or(i64::MAX) * 10 };
        let err = with_store(store.clone(), handle(payment)).await.expect_err("the ledger is down");
        assert!(err.is_parked(), "{err}");
    }
}
