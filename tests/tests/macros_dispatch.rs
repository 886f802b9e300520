//! Handlers annotated with `#[dead_letter]` in two modules register through `inventory`, run
//! through `Dispatcher` on raw bytes and through their own name on the live path, and park
//! what fails the way its class says.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::Duration;

use dlq_core::{
    Context, ErrorClass, HandlerError, MemoryStore, Payload, State, Status, adapter::DeadReason, adapter::Dispatched,
    adapter::Dispatcher, handlers::Attempt, retry::BackoffKind, with_store,
};

mod payments {
    use dlq_core::{Classify, State, dead_letter, handlers::Attempt};
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub(crate) struct Payment {
        pub(crate) id: u64,
        pub(crate) currency: String,
    }

    #[derive(Debug, Clone)]
    pub(crate) struct Ledger {
        pub(crate) down: bool,
    }

    #[derive(Debug, thiserror::Error, Classify)]
    pub(crate) enum PaymentError {
        #[error("currency {0:?} is not ISO 4217")]
        #[dlq(permanent)]
        BadCurrency(String),
        #[error("ledger unavailable")]
        LedgerDown,
        #[error("ledger credentials refused")]
        #[dlq(fatal)]
        Unauthorized,
    }

    #[dead_letter(event_type = "macros-payment", max_retries = 5, backoff = "fixed", base = "30s", timeout = "10s")]
    pub(crate) async fn handle_payment(
        Payment { id, currency }: Payment,
        State(ledger): State<Ledger>,
        attempt: Attempt,
    ) -> Result<u64, PaymentError> {
        tokio::task::yield_now().await;
        if currency.trim() != currency {
            return Err(PaymentError::BadCurrency(currency));
        }
        if id == 401 {
            return Err(PaymentError::Unauthorized);
        }
        if ledger.down {
            return Err(PaymentError::LedgerDown);
        }
        Ok(id + u64::from(attempt.retry_count))
    }
}

mod refunds {
    use dlq_core::{classify::MarkError, dead_letter};

    #[dead_letter(event_type = "macros-refund")]
    pub(crate) async fn handle_refund(amount: i64) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if amount < 0 {
            return Err(Box::new(std::io::Error::other("negative refund").permanent()));
        }
        if amount == 0 {
            return Err("refund service unavailable".into());
        }
        Ok(())
    }
}

use payments::{Ledger, Payment};

fn dispatcher(store: &Arc<MemoryStore>, ledger_down: bool) -> Dispatcher {
    let context = Context::new().with(Ledger { down: ledger_down });
    Dispatcher::discover(store.clone()).unwrap().context(context)
}

fn parked(outcome: Dispatched, store: &MemoryStore) -> dlq_core::DeadLetter {
    match outcome {
        Dispatched::Parked { id, .. } => store.get_now(id).unwrap(),
        other => panic!("expected a parked event, got {other:?}"),
    }
}

/// The line of the first line of this file that contains `needle`, 1-based.
fn line_of(needle: &str) -> u32 {
    let index = include_str!("macros_dispatch.rs").lines().position(|l| l.contains(needle)).unwrap();
    u32::try_from(index + 1).unwrap()
}

#[test]
fn both_handlers_register_with_their_sites_and_policies() {
    let registry = dlq_core::handlers::registry().unwrap();
    let payment = registry.get("macros-payment").unwrap();
    assert_eq!(payment.handler(), "macros_dispatch::payments::handle_payment");
    let site = format!("macros_dispatch.rs:{}", line_of("pub(crate) async fn handle_payment("));
    assert!(payment.site().ends_with(&site), "{}", payment.site());
    assert_eq!(payment.policy().max_retries, 5);
    assert_eq!(payment.policy().backoff.kind, BackoffKind::Fixed);
    assert_eq!(
        (payment.policy().backoff.base, payment.policy().backoff.max),
        (Duration::from_secs(30), Duration::from_secs(30))
    );
    assert_eq!(payment.policy().timeout, Some(Duration::from_secs(10)));
    assert_eq!(payment.policy().max_age, None);

    let refund = registry.get("macros-refund").unwrap();
    assert_eq!(refund.handler(), "macros_dispatch::refunds::handle_refund");
    assert_eq!(*refund.policy(), dlq_core::retry::RetryPolicy::DEFAULT);

    let pinned = dlq_core::handlers![payments::handle_payment, refunds::handle_refund].unwrap();
    assert_eq!(pinned.event_types().collect::<Vec<_>>(), ["macros-payment", "macros-refund"]);
    assert_eq!(<payments::handle_payment as dlq_core::handlers::Handler>::EVENT_TYPE, "macros-payment");
}

#[tokio::test]
async fn success_parks_nothing() {
    let store = Arc::new(MemoryStore::new());
    let outcome = dispatcher(&store, false).dispatch("macros-payment", br#"{"id":1,"currency":"EUR"}"#).await;
    assert_eq!(outcome.unwrap(), Dispatched::Succeeded);
    assert_eq!(dispatcher(&store, false).dispatch("macros-refund", b"5").await.unwrap(), Dispatched::Succeeded);
    assert!(store.is_empty());
}

#[tokio::test]
async fn transient_failure_is_parked_pending() {
    let store = Arc::new(MemoryStore::new());
    let outcome = dispatcher(&store, true).dispatch("macros-payment", br#"{"id":2,"currency":"EUR"}"#).await;
    let letter = parked(outcome.unwrap(), &store);
    assert_eq!(letter.status, Status::Pending);
    assert_eq!(letter.failure.class, ErrorClass::Transient);
    assert_eq!(letter.failure.kind, "PaymentError::LedgerDown");
    assert_eq!(letter.failure.reason, "ledger unavailable");
    assert_eq!(letter.handler, "macros_dispatch::payments::handle_payment");
    assert_eq!((letter.retry_count, letter.max_retries), (0, 5));
    assert_eq!(letter.dead_reason, None);
}

#[tokio::test]
async fn permanent_failure_is_parked_failed_permanently() {
    let store = Arc::new(MemoryStore::new());
    let outcome = dispatcher(&store, false).dispatch("macros-payment", br#"{"id":3,"currency":"USD "}"#).await;
    let letter = parked(outcome.unwrap(), &store);
    assert_eq!(letter.status, Status::FailedPermanently);
    assert_eq!(letter.dead_reason, Some(DeadReason::Permanent));
    assert_eq!(letter.failure.kind, "PaymentError::BadCurrency");

    // A marker deep in a boxed error's chain is found too.
    let outcome = dispatcher(&store, false).dispatch("macros-refund", b"-5").await;
    assert_eq!(parked(outcome.unwrap(), &store).status, Status::FailedPermanently);
    let outcome = dispatcher(&store, false).dispatch("macros-refund", b"0").await;
    assert_eq!(parked(outcome.unwrap(), &store).status, Status::Pending);
}

#[tokio::test]
async fn fatal_failure_is_not_parked() {
    let store = Arc::new(MemoryStore::new());
    let outcome = dispatcher(&store, false).dispatch("macros-payment", br#"{"id":401,"currency":"EUR"}"#).await;
    assert!(matches!(outcome.unwrap(), Dispatched::Fatal(f) if f.kind == "PaymentError::Unauthorized"));
    assert!(store.is_empty());
}

#[tokio::test]
async fn undecodable_bytes_are_parked_raw() {
    let store = Arc::new(MemoryStore::new());
    let outcome = dispatcher(&store, false).dispatch("macros-payment", b"\xff not json").await;
    let letter = parked(outcome.unwrap(), &store);
    assert_eq!(letter.status, Status::FailedPermanently);
    assert_eq!(letter.dead_reason, Some(DeadReason::Undecodable));
    assert!(matches!(&letter.payload, Payload::Raw { bytes, .. } if bytes == b"\xff not json"));

    // Valid JSON of the wrong shape is kept as it came.
    let outcome = dispatcher(&store, false).dispatch("macros-payment", br#"{"id":"x"}"#).await;
    let letter = parked(outcome.unwrap(), &store);
    assert_eq!(letter.dead_reason, Some(DeadReason::Undecodable));
    assert_eq!(letter.payload, Payload::Json(serde_json::json!({"id": "x"})));
}

#[tokio::test]
async fn missing_state_is_a_transient_failure() {
    let store = Arc::new(MemoryStore::new());
    let no_context = Dispatcher::discover(store.clone()).unwrap();
    let outcome = no_context.dispatch("macros-payment", br#"{"id":4,"currency":"EUR"}"#).await;
    let letter = parked(outcome.unwrap(), &store);
    assert_eq!((letter.status, letter.failure.kind.as_str()), (Status::Pending, "missing_state"));
}

#[tokio::test]
async fn live_path_returns_ok_and_parks_failures() {
    let store = Arc::new(MemoryStore::new());
    let payment = Payment { id: 7, currency: "EUR".into() };
    let ok =
        with_store(store.clone(), payments::handle_payment(payment, State(Ledger { down: false }), Attempt::first()));
    assert_eq!(ok.await.unwrap(), 7);
    assert!(store.is_empty());

    let poison = Payment { id: 8, currency: "USD ".into() };
    let live = payments::handle_payment(poison.clone(), State(Ledger { down: false }), Attempt::first());
    let err = with_store(store.clone(), live).await.unwrap_err();
    let HandlerError::Parked { id, class, .. } = &err else { panic!("{err:?}") };
    assert_eq!(*class, ErrorClass::Permanent);
    let letter = store.get_now(*id).unwrap();
    assert_eq!(letter.payload, Payload::Json(serde_json::to_value(&poison).unwrap()));
    assert_eq!(letter.status, Status::FailedPermanently);
    assert!(matches!(err.into_error(), payments::PaymentError::BadCurrency(c) if c == "USD "));

    let fatal = Payment { id: 401, currency: "EUR".into() };
    let live = payments::handle_payment(fatal, State(Ledger { down: false }), Attempt::first());
    let err = with_store(store.clone(), live).await.unwrap_err();
    assert!(matches!(err, HandlerError::Fatal { .. }), "{err:?}");
    assert_eq!(store.len(), 1);
}

#[tokio::test]
async fn live_path_without_a_store_reports_park_failed() {
    let err = refunds::handle_refund(0).await.unwrap_err();
    assert!(matches!(err, HandlerError::ParkFailed { store_error: dlq_core::Error::NoStore, .. }), "{err:?}");
}
