//! Regressions of the "No event lost" issue, each named after what it reproduces, driving the
//! public API as an application does, on PostgreSQL (`#[sqlx::test]`, a fresh database each)
//! and on the embedded SQLite store.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlq_core::{
    CancellationToken, Context, HandlerError, Retrier, RetrierConfig, Scope, State, Status, adapter::DeadReason,
    adapter::Dispatched, adapter::Dispatcher, adapter::SourceMeta, dead_letter, handlers, store::prelude::*,
};
use dlq_sqlx::{PgConfig, PgStore, SqliteStore};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Upload {
    id: u64,
    blob: String,
}

static FAILED_ONCE: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());

/// Fails transiently on the first call for each upload id, then succeeds.
#[dead_letter(event_type = "nel-upload", max_retries = 5, backoff = "none")]
async fn handle_upload(u: Upload) -> Result<(), std::io::Error> {
    if FAILED_ONCE.lock().unwrap().insert(u.id) {
        return Err(std::io::Error::other("object store 503"));
    }
    Ok(())
}

fn five_mb(id: u64) -> Upload {
    Upload { id, blob: "x".repeat(5 * 1024 * 1024) }
}

async fn drain(store: Arc<dyn DeadLetterStore>) -> dlq_core::retry::RetrierStats {
    let config = RetrierConfig::from_json_str(r#"{"poll-interval": "50ms", "heartbeat": "100ms"}"#).unwrap();
    let retrier = Retrier::new(store, handlers![handle_upload].unwrap()).config(config);
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (retrier, stop) = (retrier.clone(), stop.clone());
        async move { retrier.run_until(stop.cancelled_owned()).await }
    });
    // Until the retry has succeeded; a minute is far past what a loaded machine needs, and
    // the stats below say what happened if it never does.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while retrier.stats().succeeded == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    running.await.unwrap().unwrap()
}

async fn five_mb_event_is_parked_whole_and_retried(store: Arc<dyn DeadLetterStore>, id: u64) {
    let err = Scope::new().store(store.clone()).run(handle_upload(five_mb(id))).await.unwrap_err();
    let HandlerError::Parked { id, .. } = err else { panic!("{err:?}") };
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!((row.status, row.payload.is_truncated()), (Status::Pending, false), "stored whole");
    let stats = drain(store.clone()).await;
    assert_eq!((stats.succeeded, stats.dead), (1, 0), "{stats:?}");
    assert_eq!(store.get(id).await.unwrap().unwrap().status, Status::Succeeded);
}

#[sqlx::test(migrations = false)]
async fn five_mb_event_failing_transiently_is_stored_whole_and_retried_on_postgres(pool: PgPool) {
    let store = PgStore::from_pool(pool, PgConfig::default()).await.unwrap();
    five_mb_event_is_parked_whole_and_retried(Arc::new(store), 1).await;
}

#[tokio::test]
async fn five_mb_event_failing_transiently_is_stored_whole_and_retried_on_sqlite() {
    let store = SqliteStore::in_memory().await.unwrap();
    five_mb_event_is_parked_whole_and_retried(Arc::new(store), 11).await;
}

#[dead_letter(event_type = "nel-always-down")]
async fn always_down(u: Upload) -> Result<(), std::io::Error> {
    Err(std::io::Error::other(format!("upload {} failed", u.id)))
}

#[sqlx::test(migrations = false)]
async fn event_over_the_limit_is_reported_too_large_not_parked(pool: PgPool) {
    let store = PgStore::from_pool(pool, PgConfig::default().max_payload_bytes(1 << 20)).await.unwrap();
    let store: Arc<dyn DeadLetterStore> = Arc::new(store);
    let err = Scope::new().store(store.clone()).run(always_down(five_mb(2))).await.unwrap_err();
    assert!(!err.is_parked(), "the event is not saved: the caller must not ack it blindly");
    let HandlerError::TooLarge { id, .. } = err else { panic!("{err:?}") };
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!((row.status, row.dead_reason), (Status::FailedPermanently, Some(DeadReason::TooLarge)));
    assert!(row.payload.is_truncated());

    // The consumer-loop path decodes the whole input and reports the same way.
    let dispatcher = Dispatcher::new(store.clone(), handlers![always_down].unwrap());
    let bytes = serde_json::to_vec(&five_mb(3)).unwrap();
    let out = dispatcher.dispatch("nel-always-down", &bytes).await.unwrap();
    assert!(matches!(out, Dispatched::TooLarge { .. }), "{out:?}");
}

#[tokio::test]
async fn dispatcher_decodes_events_over_one_mebibyte() {
    FAILED_ONCE.lock().unwrap().insert(4); // past the first, failing call
    let store = Arc::new(SqliteStore::in_memory().await.unwrap());
    let dispatcher = Dispatcher::new(store, handlers![handle_upload].unwrap());
    let bytes = serde_json::to_vec(&five_mb(4)).unwrap();
    assert_eq!(dispatcher.dispatch("nel-upload", &bytes).await.unwrap(), Dispatched::Succeeded);
}

#[dead_letter(event_type = "nel-permanent", max_retries = 5)]
async fn rejects(u: u64) -> Result<(), dlq_core::Permanent> {
    Err(dlq_core::Permanent::new(std::io::Error::other(format!("bad record {u}"))))
}

#[tokio::test]
async fn permanent_failure_keeps_the_handlers_max_retries() {
    let store = Arc::new(SqliteStore::in_memory().await.unwrap());
    let err = Scope::new().store(store.clone()).run(rejects(1)).await.unwrap_err();
    let row = store.get(err.dlq_id().unwrap()).await.unwrap().unwrap();
    assert_eq!((row.status, row.max_retries), (Status::FailedPermanently, 5));
}

#[derive(Clone)]
struct Ledger;

#[dead_letter(event_type = "nel-ledger")]
async fn post(n: u64, _ledger: State<Ledger>) -> Result<(), std::io::Error> {
    let _ = n;
    Ok(())
}

#[tokio::test]
async fn missing_state_stops_the_retrier_at_start_up_instead_of_burning_retries() {
    let store = Arc::new(SqliteStore::in_memory().await.unwrap());
    let retrier = Retrier::new(store, handlers![post].unwrap());
    let err = retrier.run_until(std::future::pending::<()>()).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("no_event_lost::post") && message.contains("Ledger"), "{message}");
    let ok = retrier.context(Context::new().with(Ledger)).run_until(async {}).await;
    assert!(ok.is_ok(), "{ok:?}");
}

#[sqlx::test(migrations = false)]
async fn redelivered_event_with_its_source_parks_once(pool: PgPool) {
    let store: Arc<dyn DeadLetterStore> = Arc::new(PgStore::from_pool(pool, PgConfig::default()).await.unwrap());
    let from = SourceMeta::kafka("uploads", 0, 42);
    let first =
        Scope::new().store(store.clone()).source(from.clone()).run(always_down(Upload { id: 5, blob: "b".into() }));
    let first = first.await.unwrap_err().dlq_id();
    let again = Scope::new().store(store.clone()).source(from).run(always_down(Upload { id: 5, blob: "b".into() }));
    assert_eq!(again.await.unwrap_err().dlq_id(), first);
    assert_eq!(store.stats().await.unwrap().iter().map(|r| r.count).sum::<u64>(), 1);
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    id: u64,
}

/// One of two handlers consuming the same record (fan-out): the ledger is down.
#[dead_letter(event_type = "nel-fanout-payment")]
async fn fanout_payment(o: Order) -> Result<(), std::io::Error> {
    Err(std::io::Error::other(format!("ledger down for order {}", o.id)))
}

/// The other handler of the same record: the mailer is down.
#[dead_letter(event_type = "nel-fanout-receipt")]
async fn fanout_receipt(o: Order) -> Result<(), std::io::Error> {
    Err(std::io::Error::other(format!("mailer down for order {}", o.id)))
}

/// Two handlers fail on one Kafka record, in one `Scope` each with the record's source: each
/// failure gets a row of its own, of its own type and with its own error; the record delivered
/// again to both finds each handler's own row, and no third row is parked.
async fn fan_out_of_one_record_parks_a_row_per_handler(store: Arc<dyn DeadLetterStore>) {
    let from = SourceMeta::kafka("orders", 3, 42);
    let mut first = None;
    for delivery in 0..2 {
        let scope = || Scope::new().store(store.clone()).source(from.clone());
        let payment = scope().run(fanout_payment(Order { id: 42 })).await.unwrap_err();
        let receipt = scope().run(fanout_receipt(Order { id: 42 })).await.unwrap_err();
        let (
            HandlerError::Parked { id: payment, deduplicated: payment_dup, .. },
            HandlerError::Parked { id: receipt, deduplicated: receipt_dup, .. },
        ) = (&payment, &receipt)
        else {
            panic!("{payment:?} {receipt:?}")
        };
        assert_eq!((*payment_dup, *receipt_dup), (delivery == 1, delivery == 1), "delivery {delivery}");
        for (id, event_type, reason) in
            [(payment, "nel-fanout-payment", "ledger"), (receipt, "nel-fanout-receipt", "mailer")]
        {
            let row = store.get(*id).await.unwrap().unwrap();
            assert_eq!(row.event_type, event_type, "the caller's answer holds its own event type");
            assert!(row.failure.reason.starts_with(reason), "and its own failure: {:?}", row.failure.reason);
            assert_eq!(row.dedupe_key.as_deref(), Some("orders/3/42"));
        }
        assert_ne!(payment, receipt);
        let ids = (*payment, *receipt);
        assert_eq!(*first.get_or_insert(ids), ids, "a redelivery finds each handler's row");
    }
    assert_eq!(store.list(dlq_core::ListFilter::default()).await.unwrap().len(), 2);
}

#[sqlx::test(migrations = false)]
async fn fan_out_of_one_record_parks_a_row_per_handler_on_postgres(pool: PgPool) {
    let store = PgStore::from_pool(pool, PgConfig::default()).await.unwrap();
    fan_out_of_one_record_parks_a_row_per_handler(Arc::new(store)).await;
}

#[tokio::test]
async fn fan_out_of_one_record_parks_a_row_per_handler_on_sqlite() {
    let store = SqliteStore::in_memory().await.unwrap();
    fan_out_of_one_record_parks_a_row_per_handler(Arc::new(store)).await;
}

/// A new consumer group reads the original poison record after its row was discarded: the
/// failure is parked anew (`deduplicated: false`), not answered with the discarded row; the
/// same after the row succeeded.
async fn a_finished_row_does_not_swallow_a_new_failure(store: Arc<dyn DeadLetterStore>) {
    let dispatcher = Dispatcher::new(store.clone(), handlers![fanout_payment].unwrap());
    let from = SourceMeta::kafka("orders", 0, 7);
    let dispatch = || dispatcher.dispatch_from("nel-fanout-payment", br#"{"id": 7}"#, from.clone());
    let Dispatched::Parked { id: poison, deduplicated: false, .. } = dispatch().await.unwrap() else { panic!() };
    let ops = dlq_core::admin::Admin::new(store.clone(), "ops");
    ops.discard(dlq_core::ListFilter::default().ids([poison]), "replayed by hand").await.unwrap();
    let again = dispatch().await.unwrap();
    let Dispatched::Parked { id: reparked, deduplicated: false, .. } = again else { panic!("{again:?}") };
    assert_ne!(reparked, poison);
    assert_eq!(store.get(poison).await.unwrap().unwrap().status, Status::Discarded);
    assert_eq!(store.get(reparked).await.unwrap().unwrap().status, Status::Pending);
    let redelivered = dispatch().await.unwrap();
    assert!(
        matches!(redelivered, Dispatched::Parked { id, deduplicated: true, .. } if id == reparked),
        "{redelivered:?}"
    );
}

#[sqlx::test(migrations = false)]
async fn a_finished_row_does_not_swallow_a_new_failure_on_postgres(pool: PgPool) {
    let store = PgStore::from_pool(pool, PgConfig::default()).await.unwrap();
    a_finished_row_does_not_swallow_a_new_failure(Arc::new(store)).await;
}

#[tokio::test]
async fn a_finished_row_does_not_swallow_a_new_failure_on_sqlite() {
    let store = SqliteStore::in_memory().await.unwrap();
    a_finished_row_does_not_swallow_a_new_failure(Arc::new(store)).await;
}
