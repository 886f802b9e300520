//! Four `Retrier` instances share one PostgreSQL database (`DATABASE_URL`, a fresh database
//! per test from `#[sqlx::test]`) and honour one operator pause and one open circuit: no row
//! of the paused type runs until it is resumed, and while the ledger is down the open type
//! runs exactly one trial row per half-open transition, whichever retrier wins it. No row
//! spends a retry; all succeed once the ledger is back and the pause is lifted.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use dlq_core::admin::Admin;
use dlq_core::{
    CancellationToken, ErrorClass, Payload, Retrier, RetrierConfig, State, Status, adapter::CircuitState,
    classify::FailureInfo, dead_letter, handlers, handlers::Attempt, store::NewDeadLetter, store::prelude::*,
};
use dlq_sqlx::{PgConfig, PgStore};
use sqlx::PgPool;
use support::{ClaimLog, eventually};

const ROWS: usize = 200;

#[derive(Clone, Default)]
struct Lab {
    down: Arc<AtomicBool>,
    open_calls: Arc<AtomicU64>,
    paused_calls: Arc<AtomicU64>,
}

#[dead_letter(event_type = "mp-open", max_retries = 3, backoff = "fixed", base = "100ms")]
async fn post_open(_id: usize, State(lab): State<Lab>, _attempt: Attempt) -> Result<(), std::io::Error> {
    lab.open_calls.fetch_add(1, Ordering::SeqCst);
    if lab.down.load(Ordering::SeqCst) {
        return Err(std::io::Error::other("ledger down"));
    }
    Ok(())
}

#[dead_letter(event_type = "mp-paused", max_retries = 3, backoff = "fixed", base = "100ms")]
async fn post_paused(_id: usize, State(lab): State<Lab>) -> Result<(), std::io::Error> {
    lab.paused_calls.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

async fn seed(store: &PgStore, event_type: &str) {
    let failure = FailureInfo::new(ErrorClass::Transient, "io", "ledger down".into(), vec![], None);
    let letters = (0..ROWS)
        .map(|i| NewDeadLetter::new(event_type, Payload::Json(i.into()), failure.clone()).retry(Duration::ZERO, 3))
        .collect();
    store.park_many(letters).await.unwrap();
}

async fn half_opens(store: &PgStore) -> usize {
    let log = store.circuit_log(Some("mp-open".into()), 1000).await.unwrap();
    log.iter().filter(|e| e.to == "half_open").count()
}

#[sqlx::test(migrations = false)]
async fn four_retriers_honour_one_pause_and_one_open_circuit(pool: PgPool) {
    let store = PgStore::from_pool(pool, PgConfig::default()).await.unwrap();
    seed(&store, "mp-open").await;
    seed(&store, "mp-paused").await;
    let lab = Lab::default();
    lab.down.store(true, Ordering::SeqCst);

    // An operator pauses one type; the other's circuit is open (as a retrier that saw the
    // ledger fail would have left it), its cool-down 300 ms.
    Admin::new(Arc::new(store.clone()), "alice").pause_type("mp-paused", "ledger migration").await.unwrap();
    let closed = store.circuits().await.unwrap().get("mp-open");
    let mut open = closed.write(CircuitState::Open, "a retrier", "20 of 20 calls failed transiently in 1m");
    open.cool_down = Duration::from_millis(300);
    open.open_for = Some(Duration::from_millis(300));
    store.write_circuit(open).await.unwrap().expect("opened");

    let config = RetrierConfig::from_json_str(
        r#"{"poll-interval": "100ms", "lease": "5s", "batch-size": 20, "heartbeat": "1s",
            "breaker": {"threshold": "50% of 20 in 1m", "cool-down": "300ms", "max-cool-down": "600ms", "ramp": "1s"}}"#,
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let retriers: Vec<_> = (0..4)
        .map(|_| {
            let retrier = Retrier::new(Arc::new(store.clone()), handlers![post_open, post_paused].unwrap())
                .config(config.clone())
                .context(dlq_core::Context::new().with(lab.clone()));
            let stop = shutdown.clone();
            tokio::spawn(async move { retrier.run_until(stop.cancelled_owned()).await })
        })
        .collect();

    // An outage that outlasts several cool-downs (300-600 ms each): the circuit goes half-open
    // again after each, for one trial each.
    eventually("three trials", || async { half_opens(&store).await >= 3 }).await;
    // A trial is logged before its call runs, so at any moment the calls trail the trials by
    // at most one. Read around the count of trials: the calls before it, the calls after it.
    let calls_before = lab.open_calls.load(Ordering::SeqCst);
    let trials = half_opens(&store).await as u64;
    let calls_after = lab.open_calls.load(Ordering::SeqCst);
    println!("during the outage: {trials} trials, {calls_before}-{calls_after} calls of the open type");
    assert!(
        calls_before <= trials && trials <= calls_after + 1,
        "one call per trial: {trials} trials, {calls_before} calls before and {calls_after} after"
    );
    assert_eq!(lab.paused_calls.load(Ordering::SeqCst), 0, "nothing of the paused type ran");
    let rows = store.list(dlq_core::ListFilter::default().limit(10_000)).await.unwrap();
    assert!(rows.iter().all(|l| l.retry_count == 0), "no retry spent during the outage");

    // The ledger is back and the pause lifted: everything drains.
    lab.down.store(false, Ordering::SeqCst);
    Admin::new(Arc::new(store.clone()), "alice").resume_type("mp-paused", Some("migration done")).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let stats = store.stats().await.unwrap();
        let open: u64 = stats.iter().filter(|s| s.status != Status::Succeeded).map(|s| s.count).sum();
        if open == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{open} rows not succeeded: {stats:?}");
    }
    shutdown.cancel();
    for retrier in retriers {
        retrier.await.unwrap().unwrap();
    }
    assert_eq!(store.circuits().await.unwrap().get("mp-open").state, CircuitState::Closed);
    let rows = store.list(dlq_core::ListFilter::default().limit(10_000)).await.unwrap();
    assert!(rows.iter().all(|l| l.retry_count == 0), "no row spent a retry");
    assert_eq!(lab.paused_calls.load(Ordering::SeqCst), ROWS as u64);
}

/// What the handler of the limited type saw: how many ran at once, and when each started.
#[derive(Clone, Default)]
struct Meter {
    running: Arc<AtomicU64>,
    most: Arc<AtomicU64>,
    starts: Arc<std::sync::Mutex<Vec<tokio::time::Instant>>>,
}

#[dead_letter(event_type = "mp-limited", max_retries = 3, backoff = "fixed", base = "100ms")]
async fn post_limited(_id: usize, State(meter): State<Meter>) -> Result<(), std::io::Error> {
    meter.starts.lock().unwrap().push(tokio::time::Instant::now());
    let now = meter.running.fetch_add(1, Ordering::SeqCst) + 1;
    meter.most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    meter.running.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[sqlx::test(migrations = false)]
async fn four_retriers_keep_the_concurrency_and_rate_limits_of_a_type_together(pool: PgPool) {
    let store = PgStore::from_pool(pool.clone(), PgConfig::default()).await.unwrap();
    let meter = Meter::default();
    let config = RetrierConfig::from_json_str(
        r#"{"poll-interval": "100ms", "batch-size": 20, "heartbeat": "200ms",
            "breakers": {"mp-limited": {"enabled": false, "max-concurrent": 4, "max-rate": 40}}}"#,
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let retriers: Vec<_> = (0..4)
        .map(|_| {
            let retrier = Retrier::new(Arc::new(store.clone()), handlers![post_limited].unwrap())
                .config(config.clone())
                .context(dlq_core::Context::new().with(meter.clone()));
            let stop = shutdown.clone();
            tokio::spawn(async move { retrier.run_until(stop.cancelled_owned()).await })
        })
        .collect();
    // All four run before the rows come. The store keeps both limits across them whether or
    // not they have seen each other's heartbeats (each capped claim counts, under the type's
    // lock, the rows in flight and the rows claimed within the rate's window).
    eventually("four heartbeats", || async { store.retriers().await.unwrap().len() == 4 }).await;
    let claims = ClaimLog::start(&pool).await;
    seed(&store, "mp-limited").await;
    eventually("every row to run", || async { meter.starts.lock().unwrap().len() >= ROWS }).await;
    shutdown.cancel();
    for retrier in retriers {
        retrier.await.unwrap().unwrap();
    }
    let most = meter.most.load(Ordering::SeqCst);
    let (claimed, busiest_second) = claims.read(&pool).await;
    println!("limits: at most {most} at once; at most {busiest_second} claimed in any second (max-rate 40)");
    assert!(most <= 4, "max-concurrent 4 over four retriers: {most} ran at once");
    assert!(claimed >= ROWS as i64, "every row was claimed by a capped claim: {claimed} rows in the log");
    // No second, however placed, saw more than the rate claimed (on the database's clock:
    // when a handler starts after its claim depends on how busy the machine is).
    assert!(busiest_second <= 40, "max-rate 40: {busiest_second} claimed in one second");
}
