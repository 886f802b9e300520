//! `dlq_core::Retrier` on a `PgStore`, on real PostgreSQL: draining with wake-ups, the fixed-rate schedule, bad stored
//! payloads, orphaned event types, panics, singleton mode with two instances, heartbeats and
//! retention.

mod pg_support;

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use dlq_core::{
    CancellationToken, ListFilter, Payload, Retrier, RetrierConfig, Status, adapter::DeadReason, dead_letter, handlers,
    handlers::Registry, retry::RetrierStats, store::NewDeadLetter, store::prelude::*,
};
use dlq_sqlx::{PgConfig, PgStore};
use pg_support::*;
use sqlx::PgPool;

fn fast() -> RetrierConfig {
    let mut config = RetrierConfig::default();
    config.poll_interval = Duration::from_millis(200);
    config.heartbeat = Duration::from_millis(200);
    config.shutdown_grace = Duration::from_secs(2);
    config
}

/// Polls `check` until it holds; fails only if it never does (a minute: far past anything a
/// loaded machine needs, so the test waits on the event, not on the clock).
async fn wait_until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How long a test waits for something that must happen before it calls it lost.
const PATIENCE: Duration = Duration::from_secs(60);

/// When the heartbeat of the one retrier on `store` was last refreshed.
async fn last_seen(store: &PgStore) -> chrono::DateTime<chrono::Utc> {
    let beats = store.retriers().await.unwrap();
    assert_eq!(beats.len(), 1, "one retrier: {beats:?}");
    beats[0].last_seen
}

async fn count(store: &PgStore, status: Status) -> usize {
    store.list(ListFilter::default().status(status).limit(100_000)).await.unwrap().len()
}

type PgRetrier = Retrier<PgStore>;

/// A retrier on `store` with `config` and `handlers`, stopped by `shutdown`.
fn retrier(
    store: &PgStore,
    config: RetrierConfig,
    handlers: Registry,
    shutdown: &CancellationToken,
) -> (PgRetrier, CancellationToken) {
    (Retrier::new(std::sync::Arc::new(store.clone()), handlers).config(config), shutdown.clone())
}

fn start(
    (retrier, shutdown): &(PgRetrier, CancellationToken),
) -> tokio::task::JoinHandle<Result<RetrierStats, dlq_core::Error>> {
    let (retrier, shutdown) = (retrier.clone(), shutdown.clone());
    tokio::spawn(async move { retrier.run_until(shutdown.cancelled_owned()).await })
}

/// A pending row of `event_type` whose payload is the number `n`, due at once.
fn job(event_type: &str, n: u64) -> NewDeadLetter {
    NewDeadLetter::new(event_type, Payload::Json(serde_json::json!(n)), failure(dlq_core::ErrorClass::Transient, "x"))
        .retry(Duration::ZERO, 5)
}

static FAILED_ONCE: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());

#[dead_letter(event_type = "pg-retrier-flaky", max_retries = 5, backoff = "none")]
async fn flaky(n: u64) -> Result<(), std::io::Error> {
    // Odd events fail on their first run and succeed on the second.
    if n % 2 == 1 && FAILED_ONCE.lock().unwrap().insert(n) {
        return Err(std::io::Error::other("downstream 503"));
    }
    Ok(())
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn drains_retries_and_keeps_a_heartbeat_until_shutdown(pool: PgPool) {
    let store = store(&pool).await;
    store.park_many((0..40).map(|n| job("pg-retrier-flaky", n)).collect()).await.unwrap();
    let shutdown = CancellationToken::new();
    let retrier = retrier(&store, fast(), handlers![flaky].unwrap(), &shutdown);
    let running = start(&retrier);
    wait_until("every row to succeed", || async { count(&store, Status::Succeeded).await == 40 }).await;
    let beats = store.retriers().await.unwrap();
    assert_eq!(beats.len(), 1);
    assert_eq!(beats[0].event_types, vec!["pg-retrier-flaky"]);
    assert_eq!(beats[0].pid, i32::try_from(std::process::id()).unwrap());
    let first_seen = beats[0].last_seen;
    wait_until("the heartbeat to be refreshed", || async { last_seen(&store).await > first_seen }).await;
    shutdown.cancel();
    let stats = running.await.unwrap().unwrap();
    // The odd rows' failures were run again at once under the same claim (no backoff): one
    // claim and one write per row, each failure still counted and in the history.
    assert_eq!((stats.succeeded, stats.retried, stats.retried_at_once, stats.claimed), (40, 0, 20, 40));
    assert_eq!(stats.fenced, 0);
    let rows = store.list(ListFilter::default().limit(100)).await.unwrap();
    for row in &rows {
        let Payload::Json(n) = &row.payload else { panic!("a JSON payload: {:?}", row.payload) };
        let odd = n.as_u64().unwrap() % 2 == 1;
        let history: Vec<(u32, String)> =
            store.attempts(row.id).await.unwrap().into_iter().skip(1).map(|a| (a.attempt, a.outcome)).collect();
        if odd {
            assert_eq!((row.retry_count, row.failure.reason.as_str()), (1, "downstream 503"), "attempt 1's failure");
            assert_eq!(history, [(1, "retry".to_owned()), (2, "succeeded".to_owned())]);
        } else {
            assert_eq!((row.retry_count, history), (0, vec![(1, "succeeded".to_owned())]));
        }
    }
    assert_eq!(rows.len(), 40);
    assert!(store.retriers().await.unwrap().is_empty(), "the heartbeat row is removed on shutdown");
    assert_eq!(retrier.0.stats(), stats);
}

#[dead_letter(event_type = "pg-retrier-typed")]
async fn typed(n: u64) -> Result<(), std::io::Error> {
    let _ = n;
    Ok(())
}

#[dead_letter(event_type = "pg-retrier-panics", max_retries = 2, backoff = "none")]
async fn panics(n: u64) -> Result<(), std::io::Error> {
    assert!(n == 0, "handler bug for event {n}");
    Ok(())
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn bad_stored_payloads_orphans_and_panics_are_handled(pool: PgPool) {
    let store = store(&pool).await;
    let pending = |event_type: &str, payload: serde_json::Value| {
        NewDeadLetter::new(event_type, Payload::Json(payload), failure(dlq_core::ErrorClass::Transient, "x"))
            .retry(Duration::ZERO, 5)
    };
    let undecodable = store.park(pending("pg-retrier-typed", serde_json::json!({"not": "a number"}))).await.unwrap().id;
    let orphan = store.park(pending("nobody-handles-this", serde_json::json!(1))).await.unwrap().id;
    let panicking = store.park(pending("pg-retrier-panics", serde_json::json!(7))).await.unwrap().id;
    let shutdown = CancellationToken::new();
    let retrier = retrier(&store, fast(), handlers![typed, panics].unwrap(), &shutdown);
    let running = start(&retrier);
    wait_until("the panicking row to die", || async {
        store.get(panicking).await.unwrap().unwrap().status == Status::FailedPermanently
    })
    .await;
    shutdown.cancel();
    let stats = running.await.unwrap().unwrap();
    let row = store.get(undecodable).await.unwrap().unwrap();
    assert_eq!((row.status, row.dead_reason), (Status::FailedPermanently, Some(DeadReason::Undecodable)));
    assert_eq!(row.payload, Payload::Json(serde_json::json!({"not": "a number"})), "payload untouched");
    let row = store.get(orphan).await.unwrap().unwrap();
    assert_eq!((row.status, row.retry_count), (Status::Pending, 0), "orphans wait for their handler");
    let row = store.get(panicking).await.unwrap().unwrap();
    assert_eq!(row.dead_reason, Some(DeadReason::RetriesExhausted));
    assert!(row.failure.reason.contains("handler bug for event 7"), "{}", row.failure.reason);
    assert_eq!(stats.panics, 5, "the row's stored limit: 5 attempts, every one a panic");
}

static FIXED_CALLS: AtomicU32 = AtomicU32::new(0);

#[dead_letter(event_type = "pg-retrier-fixed")]
async fn fixed(n: u64) -> Result<(), std::io::Error> {
    let _ = n;
    FIXED_CALLS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn fixed_rate_runs_one_batch_per_period(pool: PgPool) {
    let store = store(&pool).await;
    store.park_many((0..5).map(|n| job("pg-retrier-fixed", n)).collect()).await.unwrap();
    let config = RetrierConfig::from_json_str(
        r#"{"dlq": {"retry": {"enabled": true, "max-retries": 240, "batch-size": 2, "fixed-rate": "6h"}}}"#,
    )
    .unwrap();
    let mut config = config;
    config.heartbeat = Duration::from_millis(100);
    let shutdown = CancellationToken::new();
    let retrier = retrier(&store, config, handlers![fixed].unwrap(), &shutdown);
    let running = start(&retrier);
    wait_until("the first batch", || async { count(&store, Status::Succeeded).await == 2 }).await;
    // The retrier lives on: two heartbeats after the first batch was written, a loop that did
    // not wait for the next period would have claimed again long since.
    for _ in 0..2 {
        let seen = last_seen(&store).await;
        wait_until("a heartbeat after the first batch", || async { last_seen(&store).await > seen }).await;
    }
    assert_eq!(count(&store, Status::Succeeded).await, 2, "the next batch waits for the next period");
    shutdown.cancel();
    assert_eq!(running.await.unwrap().unwrap().claimed, 2);

    // Disabled, it returns instead of running until its shutdown (which never comes here).
    let mut off = fast();
    off.enabled = false;
    let disabled = Retrier::new(std::sync::Arc::new(store.clone()), handlers![fixed].unwrap()).config(off);
    let stats = tokio::time::timeout(PATIENCE, disabled.run_until(std::future::pending::<()>()))
        .await
        .expect("a disabled retrier returns at once")
        .unwrap();
    assert_eq!(stats.claimed, 0);
}

#[dead_letter(event_type = "pg-retrier-wake")]
async fn wake(n: u64) -> Result<(), std::io::Error> {
    let _ = n;
    Ok(())
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_park_wakes_an_idle_retrier_long_before_its_poll_interval(pool: PgPool) {
    let store = store(&pool).await;
    // The store's listener is up before the retrier starts (the first wait starts it, and it
    // wakes its waiters once its `LISTEN` holds), so no wake-up of its start reaches the
    // retrier: from here on only a `NOTIFY` does.
    tokio::time::timeout(PATIENCE, store.wait_for_work(store.work_ticket(), Duration::from_secs(3600)))
        .await
        .expect("the listener starts and wakes its waiters");
    let succeeded = |id| {
        let store = store.clone();
        async move { store.get(id).await.unwrap().unwrap().status == Status::Succeeded }
    };
    // A row parked first: once it has succeeded, the loop that ran it found nothing else due
    // and waits for work.
    let first = store.park(job("pg-retrier-wake", 1)).await.unwrap().id;
    let mut config = fast();
    // Far longer than the test waits: the next row runs only if the park wakes the retrier.
    config.poll_interval = Duration::from_secs(3600);
    let shutdown = CancellationToken::new();
    let retrier = retrier(&store, config, handlers![wake].unwrap(), &shutdown);
    let running = start(&retrier);
    wait_until("the first row to succeed", || succeeded(first)).await;
    let id = store.park(job("pg-retrier-wake", 2)).await.unwrap().id;
    wait_until("the row parked while the retrier waited to succeed", || succeeded(id)).await;
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[dead_letter(event_type = "pg-retrier-single")]
async fn single(n: u64) -> Result<(), std::io::Error> {
    let _ = n;
    Ok(())
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn singleton_mode_runs_one_instance_at_a_time(pool: PgPool) {
    let store = store(&pool).await;
    let mut config = fast();
    config.singleton = true;
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    let a = retrier(&store, config.clone(), handlers![single].unwrap(), &stop_a);
    let b = retrier(&store, config, handlers![single].unwrap(), &stop_b);
    let (run_a, run_b) = (start(&a), start(&b));
    for round in 0..3_u8 {
        store.park_many((0..10).map(|n| job("pg-retrier-single", u64::from(round) * 10 + n)).collect()).await.unwrap();
        wait_until("the round to drain", || async {
            count(&store, Status::Succeeded).await == (usize::from(round) + 1) * 10
        })
        .await;
    }
    assert_eq!(store.retriers().await.unwrap().len(), 2, "both register a heartbeat");
    let (leader, standby, stop_leader, stop_standby, run_leader, run_standby) = if a.0.stats().claimed > 0 {
        (a, b, stop_a, stop_b, run_a, run_b)
    } else {
        (b, a, stop_b, stop_a, run_b, run_a)
    };
    assert_eq!(leader.0.stats().claimed, 30);
    assert_eq!(standby.0.stats().claimed, 0, "the standby claims nothing while the leader runs");
    stop_leader.cancel();
    run_leader.await.unwrap().unwrap();
    store.park_many((0..10).map(|n| job("pg-retrier-single", 100 + n)).collect()).await.unwrap();
    wait_until("the standby to take over", || async { count(&store, Status::Succeeded).await == 40 }).await;
    assert_eq!(standby.0.stats().claimed, 10);
    assert_eq!(leader.0.stats().claimed, 30);
    stop_standby.cancel();
    run_standby.await.unwrap().unwrap();
    assert!(store.retriers().await.unwrap().is_empty());
}

#[dead_letter(event_type = "pg-retrier-retention")]
async fn retained(n: u64) -> Result<(), std::io::Error> {
    let _ = n;
    Ok(())
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn the_retrier_applies_retention_periodically(pool: PgPool) {
    let store = store_with(&pool, PgConfig::default()).await;
    let ids = store.park_many((0..3).map(|n| job("pg-retrier-retention", n)).collect()).await.unwrap();
    let dead = store.park(job("pg-retrier-retention", 9).dead(DeadReason::Permanent)).await.unwrap().id;
    let mut config = fast();
    config.purge_interval = Duration::from_millis(100);
    config.retention = Some(Duration::from_millis(200));
    let shutdown = CancellationToken::new();
    let retrier = retrier(&store, config, handlers![retained].unwrap(), &shutdown);
    let running = start(&retrier);
    wait_until("succeeded rows to be purged", || async {
        let mut gone = true;
        for p in &ids {
            gone &= store.get(p.id).await.unwrap().is_none();
        }
        gone
    })
    .await;
    assert!(store.get(dead).await.unwrap().is_some(), "dead rows are kept");
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

/// The permits of `pg-retrier-gated` handlers: the test lets the retrier through a round of
/// rows at a time.
static GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

#[dead_letter(event_type = "pg-retrier-gated")]
async fn gated(_n: u64) -> Result<(), std::io::Error> {
    GATE.acquire().await.expect("the gate is never closed").forget();
    Ok(())
}

/// The store keeps a busy retrier's connection between its statements (no pool round trips),
/// but never while the pool has none to spare: other callers of a small pool are not starved.
/// The retrier drains in ten rounds the test lets through one by one (a round is over when its
/// handlers took every permit), and between two the test calls the store: every call finds
/// the retrier mid-drain, with rows claimed and more handlers waiting.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_busy_retrier_leaves_a_small_pool_to_other_callers(
    _: sqlx::postgres::PgPoolOptions,
    options: sqlx::postgres::PgConnectOptions,
) {
    const ROUNDS: u64 = 10;
    const PER_ROUND: u64 = 200;
    let small = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(1))
        .connect_with(options)
        .await
        .unwrap();
    let store = store(&small).await;
    store.park_many((0..ROUNDS * PER_ROUND).map(|n| job("pg-retrier-gated", n)).collect()).await.unwrap();
    let shutdown = CancellationToken::new();
    let retrier = retrier(&store, fast(), handlers![gated].unwrap(), &shutdown);
    let running = start(&retrier);
    for round in 0..ROUNDS {
        wait_until("the retrier's handlers to take the round's permits", || async { GATE.available_permits() == 0 })
            .await;
        store.stats().await.expect("stats() while the retrier is busy");
        store.park(job("pg-retrier-other", round)).await.expect("park() while the retrier is busy");
        GATE.add_permits(PER_ROUND as usize);
    }
    let all = (ROUNDS * PER_ROUND) as usize;
    wait_until("the retrier to drain", || async { count(&store, Status::Succeeded).await >= all }).await;
    shutdown.cancel();
    let stats = running.await.unwrap().unwrap();
    assert_eq!((stats.succeeded, stats.store_errors), (ROUNDS * PER_ROUND, 0));
}
