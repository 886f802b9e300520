//! `dlq_core::testing` as an application's own test suite uses it: handlers run against a
//! fresh `MemoryStore`, their retries driven by tokio's paused clock, the outcome checked with
//! `assert_parked` and `assert_nothing_parked`.

use std::collections::HashMap;
use std::sync::Mutex;

use dlq_core::testing::{Harness, assert_nothing_parked, assert_parked};
use dlq_core::{Classify, ListFilter, Status, adapter::DeadReason, dead_letter, handlers, store::prelude::*};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payment {
    id: u64,
    currency: String,
}

#[derive(Debug, thiserror::Error, Classify)]
enum PaymentError {
    #[error("currency {0:?} is not ISO 4217")]
    #[dlq(permanent)]
    BadCurrency(String),
    #[error("ledger answered 503")]
    #[dlq(transient)]
    LedgerDown,
}

/// Calls of the ledger, by payment id: it answers 503 to the first two of each payment.
static LEDGER_CALLS: Mutex<Option<HashMap<u64, u32>>> = Mutex::new(None);

const EVENT_TYPE: &str = "e2e-testing-payment";

/// An hour between retries: without a paused clock these tests would take hours.
#[dead_letter(event_type = "e2e-testing-payment", max_retries = 5, backoff = "exp", base = "1h", max = "6h")]
async fn handle_payment(p: Payment) -> Result<(), PaymentError> {
    if p.currency.trim() != p.currency {
        return Err(PaymentError::BadCurrency(p.currency));
    }
    let calls = {
        let mut ledger = LEDGER_CALLS.lock().unwrap();
        let n = ledger.get_or_insert_with(HashMap::new).entry(p.id).or_insert(0);
        *n += 1;
        *n
    };
    if calls <= 2 {
        return Err(PaymentError::LedgerDown);
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_is_retried_to_success_on_a_paused_clock() {
    let harness = Harness::new(handlers![handle_payment].unwrap());
    let payment = Payment { id: 1, currency: "EUR".into() };
    let err = harness.call(handle_payment(payment)).await.unwrap_err();
    assert!(err.is_parked(), "{err}");

    let parked = assert_parked(harness.store(), EVENT_TYPE).await;
    assert_eq!((parked.status, parked.retry_count), (Status::Pending, 0));
    assert_eq!(parked.failure.reason, "ledger answered 503");
    assert_eq!(harness.retry_due().await, 0, "the first retry is an hour away");

    let started = tokio::time::Instant::now();
    assert_eq!(harness.retry_next().await, 1);
    let retried = assert_parked(harness.store(), EVENT_TYPE).await;
    assert_eq!((retried.id, retried.status, retried.retry_count), (parked.id, Status::Pending, 1));
    assert_eq!(harness.retry_due().await, 0, "the second retry waits out the backoff again");

    assert_eq!(harness.retry_next().await, 1);
    let done = harness.store().get_now(parked.id).unwrap();
    assert_eq!((done.status, done.retry_count), (Status::Succeeded, 1));
    assert_nothing_parked(harness.store()).await;
    // Two backoffs of an hour or more (less 15 % jitter), passed in no time.
    assert!(started.elapsed().as_secs() >= 2 * 3060, "{:?}", started.elapsed());
    let outcomes: Vec<_> = harness.store().attempts(parked.id).await.unwrap().into_iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, ["failed", "retry", "succeeded"]);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_is_parked_dead_at_once() {
    let harness = Harness::new(handlers![handle_payment].unwrap());
    let poison = Payment { id: 2, currency: "USD ".into() };
    let err = harness.call(handle_payment(poison)).await.unwrap_err();
    assert!(matches!(err.error(), PaymentError::BadCurrency(_)), "{err}");

    let dead = ListFilter::default().event_type(EVENT_TYPE).status(Status::FailedPermanently);
    let letter = assert_parked(harness.store(), dead).await;
    assert_eq!(letter.dead_reason, Some(DeadReason::Permanent));
    assert_eq!(letter.failure.reason, r#"currency "USD " is not ISO 4217"#);
    assert_eq!(letter.payload, dlq_core::Payload::Json(serde_json::json!({ "id": 2, "currency": "USD " })));
    assert_eq!(harness.retry_due().await, 0, "a dead row waits for an operator, not the retrier");
    assert_eq!(
        LEDGER_CALLS.lock().unwrap().as_ref().and_then(|calls| calls.get(&2)),
        None,
        "the ledger was never called"
    );
}
