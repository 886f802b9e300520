//! Version 2 of the payments service: a payment now needs its currency. Rows parked by
//! version 1 are upcast by `v1_to_v2` (every payment before version 2 was in euros). The
//! ledger is still down: the events it handles are parked too, in version 2, beside version 1's.
//!
//! `cargo run --bin payments-v2 -- /tmp/payments.db 400`

use dlq_core::schemars::JsonSchema;
use dlq_core::{handlers::UpcastError, dead_letter, with_store};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
struct PaymentV1 {
    id: u64,
    cents: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
struct Payment {
    id: u64,
    cents: i64,
    currency: String,
}

fn v1_to_v2(old: PaymentV1) -> Result<Payment, UpcastError> {
    Ok(Payment { id: old.id, cents: old.cents, currency: "EUR".to_owned() })
}

#[dead_letter(event_type = "payment", version = 2, upcast = [v1_to_v2], backoff = "none")]
async fn handle(payment: Payment) -> Result<(), std::io::Error> {
    Err(std::io::Error::other(format!("ledger down: payment {} in {} not booked", payment.id, payment.currency)))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let store = redeploy::store().await;
    for id in 0..redeploy::count() {
        let payment = Payment { id: 1_000_000 + id, cents: 25, currency: "USD".to_owned() };
        let err = with_store(store.clone(), handle(payment)).await.expect_err("the ledger is down");
        assert!(err.is_parked(), "{err}");
    }
    // Its type in the store's catalog: version 2, and version 1's schema from `PaymentV1`.
    redeploy::publish(&dlq_core::handlers![handle].expect("one handler"), "payments-v2").await;
}
