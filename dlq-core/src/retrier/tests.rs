//! The retrier engine on `MemoryStore`, driven by tokio's paused clock.
//!
//! Handlers here are registered by hand (the attribute's own tests live in `tests/`); each
//! reads its behaviour from the payload: `{"fail": n}` fails transiently while fewer than `n`
//! retries have run, `{"permanent": true}` fails permanently, `{"panic": true}` panics,
//! `{"sleep_ms": n}` sleeps first.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::classify::{ErrorClass, FailureInfo};
use crate::handler::{HandlerOutcome, Invocation, Registration};
use crate::record::{ClaimRequest, Claimed, DeadReason, DlqId, RetrierHeartbeat, Settlement};
use crate::{MemoryStore, Payload, Status, backoff::Backoff, backoff::RetryPolicy, store::NewDeadLetter};

static RUNS: AtomicU32 = AtomicU32::new(0);

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Script {
    fail: u32,
    permanent: bool,
    panic: bool,
    sleep_ms: u64,
    hint_ms: Option<u64>,
}

fn scripted(inv: Invocation) -> crate::store::BoxFuture<'static, HandlerOutcome> {
    Box::pin(async move {
        let script: Script = match crate::handler::decode(&inv.payload) {
            Ok(s) => s,
            Err(outcome) => return outcome,
        };
        RUNS.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(script.sleep_ms)).await;
        assert!(!script.panic, "scripted panic");
        let class = if script.permanent {
            ErrorClass::Permanent
        } else if inv.attempt.retry_count < script.fail {
            ErrorClass::Transient
        } else {
            return HandlerOutcome::Succeeded;
        };
        let info = FailureInfo::new(class, "Scripted", "scripted failure".into(), vec![], None);
        HandlerOutcome::Failed(info.with_retry_after(script.hint_ms.map(Duration::from_millis)))
    })
}

const POLICY: RetryPolicy = RetryPolicy {
    max_retries: 3,
    backoff: Backoff::exponential(Duration::from_secs(10), Duration::from_secs(3600)),
    max_age: None,
    timeout: Some(Duration::from_secs(60)),
};

static SCRIPTED: Registration = Registration {
    event_type: "scripted",
    version: 1,
    upcast: &[],
    handler: "tests::scripted",
    file: file!(),
    line: line!(),
    policy: POLICY,
    breaker: None,
    dispatch: scripted,
    check: crate::handler::accepts_any,
    missing_state: crate::handler::needs_no_state,
    sealing: None,
    subject: None,
    redact: &[],
    schemas: None,
};

static AGED: Registration = Registration {
    event_type: "aged",
    version: 1,
    upcast: &[],
    handler: "tests::aged",
    file: file!(),
    line: line!(),
    policy: RetryPolicy { max_retries: 100, max_age: Some(Duration::from_secs(25)), ..POLICY },
    breaker: None,
    dispatch: scripted,
    check: crate::handler::accepts_any,
    missing_state: crate::handler::needs_no_state,
    sealing: None,
    subject: None,
    redact: &[],
    schemas: None,
};

/// `backoff = "none"`: a transient failure is due again at once.
static INSTANT: Registration = Registration {
    event_type: "instant",
    version: 1,
    upcast: &[],
    handler: "tests::instant",
    file: file!(),
    line: line!(),
    policy: RetryPolicy { max_retries: 5, backoff: Backoff::NONE, ..POLICY },
    breaker: None,
    dispatch: scripted,
    check: crate::handler::accepts_any,
    missing_state: crate::handler::needs_no_state,
    sealing: None,
    subject: None,
    redact: &[],
    schemas: None,
};

fn retrier(store: &Arc<MemoryStore>) -> Retrier<MemoryStore> {
    let registry = Registry::from_registrations([&SCRIPTED, &AGED, &INSTANT]).unwrap();
    Retrier::new(Arc::clone(store), registry)
}

async fn park(store: &MemoryStore, event_type: &str, payload: serde_json::Value) -> crate::DlqId {
    let failure = FailureInfo::new(ErrorClass::Transient, "Scripted", "first failure".into(), vec![], None);
    let letter = NewDeadLetter::new(event_type, Payload::Json(payload), failure).retry(Duration::ZERO, 3);
    store.park(letter).await.unwrap().id
}

fn status(store: &MemoryStore, id: crate::DlqId) -> (Status, u32, Option<DeadReason>) {
    let l = store.get_now(id).unwrap();
    (l.status, l.retry_count, l.dead_reason)
}

/// Impls of store parts that hand every call to the wrapped store (`self.0`), for test
/// stores that change one part: `delegate_parts!(T: queue, reads)` implements those two
/// parts for `T`; a test store writes the part it changes itself, with [`delegate!`] for the
/// methods it keeps.
macro_rules! delegate_parts {
    ($ty:ty: $($part:ident),*) => { $(delegate_parts!(@ $part $ty);)* };
    (@ queue $ty:ty) => {
        impl crate::store::QueueStore for $ty {
            delegate_parts!(@queue_body);
        }
    };
    (@queue_body) => {
            delegate! {
                park(l: NewDeadLetter) -> crate::store::BoxFuture<'_, crate::store::StoreResult<crate::store::Parked>>;
                park_many(l: Vec<NewDeadLetter>) -> crate::store::BoxFuture<'_, crate::store::StoreResult<Vec<crate::store::Parked>>>;
                claim(r: ClaimRequest) -> crate::store::BoxFuture<'_, crate::store::StoreResult<Vec<Claimed>>>;
                settle(o: Vec<Settlement>) -> crate::store::BoxFuture<'_, crate::store::StoreResult<crate::store::SettleReport>>;
                get(id: DlqId) -> crate::store::BoxFuture<'_, crate::store::StoreResult<Option<crate::DeadLetter>>>;
                capped_claims() -> Option<&dyn crate::store::CappedClaimStore>;
            }
    };
    (@ reads $ty:ty) => {
        impl crate::store::ReadStore for $ty {
            delegate! {
                list(f: crate::ListFilter) -> crate::store::BoxFuture<'_, crate::store::StoreResult<Vec<crate::DeadLetter>>>;
                stats() -> crate::store::BoxFuture<'_, crate::store::StoreResult<Vec<crate::admin::StatsRow>>>;
                groups(f: crate::ListFilter) -> crate::store::BoxFuture<'_, crate::store::StoreResult<Vec<crate::admin::FailureGroup>>>;
                attempts(id: DlqId) -> crate::store::BoxFuture<'_, crate::store::StoreResult<Vec<crate::admin::AttemptRecord>>>;
                audit(id: DlqId) -> crate::store::BoxFuture<'_, crate::store::StoreResult<Vec<crate::admin::AuditEntry>>>;
                audit_entry(id: i64) -> crate::store::BoxFuture<'_, crate::store::StoreResult<Option<crate::admin::AuditEntry>>>;
            }
        }
    };
    (@ operator $ty:ty) => {
        impl crate::store::OperatorStore for $ty {
            delegate! {
                patch(r: crate::store::PatchRequest) -> crate::store::BoxFuture<'_, crate::store::StoreResult<i64>>;
            }
            delegate_parts!(@operator_but_patch);
        }
    };
    (@operator_but_patch) => {
        delegate! {
            apply(b: crate::store::BatchAction) -> crate::store::BoxFuture<'_, crate::store::StoreResult<crate::store::BatchReport>>;
            patch_rows(b: crate::store::PatchBatch) -> crate::store::BoxFuture<'_, crate::store::StoreResult<crate::store::BatchReport>>;
            upgrade(u: crate::store::VersionUpgrade) -> crate::store::BoxFuture<'_, crate::store::StoreResult<i64>>;
            create_operation(a: crate::store::ActionKind, s: serde_json::Value, n: crate::store::AuditNote) -> crate::store::BoxFuture<'_, crate::store::StoreResult<crate::store::Operation>>;
            operation(id: i64) -> crate::store::BoxFuture<'_, crate::store::StoreResult<Option<crate::store::Operation>>>;
            set_operation_state(id: i64, s: crate::store::OperationState) -> crate::store::BoxFuture<'_, crate::store::StoreResult<()>>;
            purge(d: Duration) -> crate::store::BoxFuture<'_, crate::store::StoreResult<u64>>;
        }
    };
    (@ fleet $ty:ty) => {
        impl crate::store::FleetStore for $ty {
            delegate! {
                singleton() -> Option<&dyn crate::store::SingletonStore>;
            }
            delegate_parts!(@fleet_but_singleton);
        }
    };
    (@fleet_but_singleton) => {
        delegate! {
            heartbeat(b: &RetrierHeartbeat, d: Duration) -> crate::store::BoxFuture<'_, crate::store::StoreResult<()>>;
            remove_heartbeat(o: &str) -> crate::store::BoxFuture<'_, crate::store::StoreResult<()>>;
            retriers() -> crate::store::BoxFuture<'_, crate::store::StoreResult<Vec<RetrierHeartbeat>>>;
            circuits() -> crate::store::BoxFuture<'_, crate::store::StoreResult<crate::store::Circuits>>;
            write_circuit(w: crate::store::CircuitWrite) -> crate::store::BoxFuture<'_, crate::store::StoreResult<Option<crate::store::Circuit>>>;
            circuit_log(t: Option<String>, n: usize) -> crate::store::BoxFuture<'_, crate::store::StoreResult<Vec<crate::store::CircuitLogEntry>>>;
            publish_types(t: Vec<crate::catalog::EventTypeInfo>) -> crate::store::BoxFuture<'_, crate::store::StoreResult<()>>;
            event_types() -> crate::store::BoxFuture<'_, crate::store::StoreResult<Vec<crate::catalog::EventTypeInfo>>>;
            version_schemas() -> crate::store::BoxFuture<'_, crate::store::StoreResult<Vec<crate::catalog::VersionSchema>>>;
            accept_schema(v: crate::catalog::VersionSchema) -> crate::store::BoxFuture<'_, crate::store::StoreResult<()>>;
        }
    };
    (@ privacy $ty:ty) => {
        impl crate::store::PrivacyStore for $ty {
            delegate! {
                erase(r: crate::store::EraseRequest) -> crate::store::BoxFuture<'_, crate::store::StoreResult<crate::store::Erasure>>;
                erasures(n: usize) -> crate::store::BoxFuture<'_, crate::store::StoreResult<Vec<crate::store::Erasure>>>;
                subject_key_check(c: crate::store::KeyCheck) -> crate::store::BoxFuture<'_, crate::store::StoreResult<crate::store::KeyCheck>>;
                count_subject(h: crate::store::SubjectHash) -> crate::store::BoxFuture<'_, crate::store::StoreResult<u64>>;
                mark_unreadable(l: Vec<crate::store::Lease>) -> crate::store::BoxFuture<'_, crate::store::StoreResult<()>>;
                count_unreadable() -> crate::store::BoxFuture<'_, crate::store::StoreResult<u64>>;
                reveal(id: DlqId, n: crate::store::AuditNote) -> crate::store::BoxFuture<'_, crate::store::StoreResult<i64>>;
            }
        }
    };
}

/// Each `name(args) -> out`, delegated to `self.0`.
macro_rules! delegate {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {
        $(fn $name(&self, $($arg: $ty),*) -> $out { self.0.$name($($arg),*) })*
    };
}

// For the test stores of other modules (the admin's).
pub(crate) use {delegate, delegate_parts};

#[tokio::test(start_paused = true)]
async fn success_marks_succeeded_and_records_the_attempt() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, "scripted", json!({})).await;
    assert_eq!(retrier(&store).run_once().await.unwrap(), 1);
    assert_eq!(status(&store, id), (Status::Succeeded, 0, None));
    let attempts = store.attempts(id).await.unwrap();
    assert_eq!(attempts.iter().map(|a| a.outcome.as_str()).collect::<Vec<_>>(), ["failed", "succeeded"]);
}

#[tokio::test(start_paused = true)]
async fn transient_failure_waits_out_the_exact_backoff() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, "scripted", json!({"fail": 2})).await;
    let r = retrier(&store);
    r.run_once().await.unwrap();
    assert_eq!(status(&store, id), (Status::Pending, 1, None));
    let letter = store.get_now(id).unwrap();
    // Retry 1 failed: retry 2 waits base * 2 = 20 s.
    assert_eq!(letter.retry_after - letter.updated_at, chrono::Duration::seconds(20));
    assert_eq!(r.run_once().await.unwrap(), 0, "not due yet");
    tokio::time::advance(Duration::from_secs(19)).await;
    assert_eq!(r.run_once().await.unwrap(), 0, "still not due");
    tokio::time::advance(Duration::from_secs(1)).await;
    r.run_once().await.unwrap();
    assert_eq!(status(&store, id), (Status::Pending, 2, None));
    tokio::time::advance(Duration::from_secs(40)).await;
    r.run_once().await.unwrap();
    assert_eq!(status(&store, id), (Status::Succeeded, 2, None));
}

#[tokio::test(start_paused = true)]
async fn retries_exhausted_parks_dead() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, "scripted", json!({"fail": 99})).await;
    let r = retrier(&store);
    for _ in 0..3 {
        r.run_once().await.unwrap();
        tokio::time::advance(Duration::from_secs(3600)).await;
    }
    assert_eq!(status(&store, id), (Status::FailedPermanently, 3, Some(DeadReason::RetriesExhausted)));
    assert_eq!(r.run_once().await.unwrap(), 0, "dead rows are never claimed");
}

#[tokio::test(start_paused = true)]
async fn max_retries_override_from_config() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, "scripted", json!({"fail": 99})).await;
    let r = retrier(&store).config(RetrierConfig { max_retries: Some(1), ..RetrierConfig::default() });
    r.run_once().await.unwrap();
    assert_eq!(status(&store, id), (Status::FailedPermanently, 1, Some(DeadReason::RetriesExhausted)));
}

#[tokio::test(start_paused = true)]
async fn permanent_failure_parks_dead_at_once() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, "scripted", json!({"permanent": true})).await;
    retrier(&store).run_once().await.unwrap();
    assert_eq!(status(&store, id), (Status::FailedPermanently, 1, Some(DeadReason::Permanent)));
}

#[tokio::test(start_paused = true)]
async fn undecodable_payload_parks_dead_untouched() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, "scripted", json!({"fail": "not a number"})).await;
    retrier(&store).run_once().await.unwrap();
    let letter = store.get_now(id).unwrap();
    assert_eq!((letter.status, letter.dead_reason), (Status::FailedPermanently, Some(DeadReason::Undecodable)));
    assert_eq!(letter.payload, Payload::Json(json!({"fail": "not a number"})));
}

#[tokio::test(start_paused = true)]
async fn panic_is_a_transient_failure_and_the_retrier_goes_on() {
    let store = Arc::new(MemoryStore::new());
    let bad = park(&store, "scripted", json!({"panic": true})).await;
    let good = park(&store, "scripted", json!({})).await;
    let r = retrier(&store);
    assert_eq!(r.run_once().await.unwrap(), 2);
    assert_eq!(status(&store, bad), (Status::Pending, 1, None));
    assert_eq!(store.get_now(bad).unwrap().failure.kind, "panic");
    assert!(store.get_now(bad).unwrap().failure.reason.contains("scripted panic"));
    assert_eq!(status(&store, good), (Status::Succeeded, 0, None));
    assert_eq!(r.stats().panics, 1);
}

#[tokio::test(start_paused = true)]
async fn timeout_is_a_transient_failure() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, "scripted", json!({"sleep_ms": 61_000})).await;
    let r = retrier(&store);
    r.run_once().await.unwrap();
    assert_eq!(status(&store, id), (Status::Pending, 1, None));
    assert_eq!(store.get_now(id).unwrap().failure.kind, "timeout");
    assert_eq!(r.stats().timeouts, 1);
}

#[tokio::test(start_paused = true)]
async fn retry_after_hint_beats_the_backoff() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, "scripted", json!({"fail": 1, "hint_ms": 1500})).await;
    retrier(&store).run_once().await.unwrap();
    let letter = store.get_now(id).unwrap();
    assert_eq!(letter.retry_after - letter.updated_at, chrono::Duration::milliseconds(1500));
}

#[tokio::test(start_paused = true)]
async fn max_age_parks_dead_when_the_next_retry_is_past_the_horizon() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, "aged", json!({"fail": 99})).await;
    let r = retrier(&store);
    r.run_once().await.unwrap(); // next in 20 s: inside the 25 s horizon
    assert_eq!(status(&store, id), (Status::Pending, 1, None));
    tokio::time::advance(Duration::from_secs(20)).await;
    r.run_once().await.unwrap(); // next in 40 s: past it
    assert_eq!(status(&store, id), (Status::FailedPermanently, 2, Some(DeadReason::MaxAge)));
}

#[tokio::test(start_paused = true)]
async fn unknown_event_types_stay_pending() {
    let store = Arc::new(MemoryStore::new());
    let orphan = park(&store, "nobody-handles-this", json!({})).await;
    assert_eq!(retrier(&store).run_once().await.unwrap(), 0);
    assert_eq!(status(&store, orphan), (Status::Pending, 0, None));
}

#[tokio::test(start_paused = true)]
async fn expired_lease_is_fenced_and_reclaimed() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, "scripted", json!({"sleep_ms": 20_000})).await;
    let slow = retrier(&store).config(RetrierConfig { lease: Duration::from_secs(5), ..RetrierConfig::default() });
    let fast = retrier(&store);
    let slow_run = tokio::spawn({
        let slow = slow.clone();
        async move { slow.run_once().await }
    });
    tokio::time::sleep(Duration::from_millis(1)).await; // the slow retrier claims first
    tokio::time::advance(Duration::from_secs(6)).await;
    // The lease expired while the handler ran: another retrier takes the row.
    let fast_run = tokio::spawn({
        let fast = fast.clone();
        async move { fast.run_once().await }
    });
    assert_eq!(slow_run.await.unwrap().unwrap(), 1);
    assert_eq!(slow.stats().fenced, 1, "the late outcome was not written");
    assert_eq!(status(&store, id).0, Status::Processing);
    assert_eq!(fast_run.await.unwrap().unwrap(), 1);
    assert_eq!(status(&store, id), (Status::Succeeded, 0, None));
}

#[tokio::test(start_paused = true)]
async fn shutdown_releases_rows_still_running_after_the_grace_period() {
    let store = Arc::new(MemoryStore::new());
    let quick = park(&store, "scripted", json!({"sleep_ms": 1_000})).await;
    let slow = park(&store, "scripted", json!({"sleep_ms": 50_000})).await;
    let shutdown = CancellationToken::new();
    let config = RetrierConfig { shutdown_grace: Duration::from_secs(10), ..RetrierConfig::default() };
    let r = retrier(&store).config(config);
    let run = tokio::spawn({
        let (r, shutdown) = (r.clone(), shutdown.clone());
        async move { r.run_until(shutdown.cancelled_owned()).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    shutdown.cancel();
    let stats = run.await.unwrap().unwrap();
    assert_eq!(status(&store, quick), (Status::Succeeded, 0, None));
    assert_eq!(status(&store, slow), (Status::Pending, 0, None), "released, attempt not counted");
    assert_eq!((stats.succeeded, stats.released), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn continuous_run_drains_new_work_and_stops_on_shutdown() {
    let store = Arc::new(MemoryStore::new());
    let shutdown = CancellationToken::new();
    let r = retrier(&store).config(RetrierConfig {
        batch_size: 7,
        poll_interval: Duration::from_secs(3600),
        ..RetrierConfig::default()
    });
    let run = tokio::spawn({
        let (r, shutdown) = (r.clone(), shutdown.clone());
        async move { r.run_until(shutdown.cancelled_owned()).await }
    });
    let mut ids = Vec::new();
    for _ in 0..30 {
        ids.push(park(&store, "scripted", json!({})).await);
    }
    // Woken by the parks, not by the hour-long poll.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(store.retriers().await.unwrap().len(), 1, "a heartbeat row while running");
    shutdown.cancel();
    let stats = run.await.unwrap().unwrap();
    assert_eq!(stats.succeeded, 30);
    assert!(store.retriers().await.unwrap().is_empty(), "removed on shutdown");
    assert!(ids.iter().all(|id| status(&store, *id).0 == Status::Succeeded));
}

#[tokio::test(start_paused = true)]
async fn fixed_rate_takes_one_batch_per_tick() {
    let store = Arc::new(MemoryStore::new());
    for _ in 0..120 {
        park(&store, "scripted", json!({})).await;
    }
    let shutdown = CancellationToken::new();
    let r = retrier(&store).config(RetrierConfig {
        batch_size: 50,
        fixed_rate: Some(Duration::from_secs(6 * 3600)),
        ..RetrierConfig::default()
    });
    let run = tokio::spawn({
        let (r, shutdown) = (r.clone(), shutdown.clone());
        async move { r.run_until(shutdown.cancelled_owned()).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(r.stats().succeeded, 50, "first tick at once");
    tokio::time::sleep(Duration::from_secs(6 * 3600)).await;
    assert_eq!(r.stats().succeeded, 100);
    tokio::time::sleep(Duration::from_secs(6 * 3600)).await;
    assert_eq!(r.stats().succeeded, 120);
    shutdown.cancel();
    run.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn singletons_take_turns_and_stale_heartbeats_expire() {
    let store = Arc::new(MemoryStore::new());
    let config = RetrierConfig { singleton: true, heartbeat: Duration::from_secs(1), ..RetrierConfig::default() };
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    let a = retrier(&store).config(config.clone());
    let b = retrier(&store).config(config);
    let run_a = tokio::spawn({
        let (a, stop) = (a.clone(), stop_a.clone());
        async move { a.run_until(stop.cancelled_owned()).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let run_b = tokio::spawn({
        let (b, stop) = (b.clone(), stop_b.clone());
        async move { b.run_until(stop.cancelled_owned()).await }
    });
    for _ in 0..10 {
        park(&store, "scripted", json!({})).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!((a.stats().succeeded, b.stats().succeeded), (10, 0), "only the leader claims");
    stop_a.cancel();
    run_a.await.unwrap().unwrap();
    for _ in 0..5 {
        park(&store, "scripted", json!({})).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(b.stats().succeeded, 5, "the standby took over");
    // A retrier that stopped beating (killed) is removed by the others after three heartbeats.
    let dead = RetrierHeartbeat::new("dead:1:x", ["scripted"], true);
    store.heartbeat(&dead, Duration::from_secs(3)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let owners: Vec<String> = store.retriers().await.unwrap().into_iter().map(|r| r.owner).collect();
    assert_eq!(owners, [b.owner().to_owned()]);
    stop_b.cancel();
    run_b.await.unwrap().unwrap();
}

#[tokio::test]
async fn singleton_on_a_store_without_a_lock_refuses_to_start() {
    // Delegates everything but the singleton lock: it offers none.
    struct NoLock(MemoryStore);
    delegate_parts!(NoLock: queue, reads, operator, privacy);
    impl crate::store::FleetStore for NoLock {
        fn singleton(&self) -> Option<&dyn crate::store::SingletonStore> {
            None
        }
        delegate_parts!(@fleet_but_singleton);
    }
    let registry = Registry::from_registrations([&SCRIPTED]).unwrap();
    let r = Retrier::new(Arc::new(NoLock(MemoryStore::new())), registry)
        .config(RetrierConfig { singleton: true, ..RetrierConfig::default() });
    let err = r.run_until(std::future::pending::<()>()).await.unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
}

#[tokio::test(start_paused = true)]
async fn concurrency_limit_bounds_handlers_in_flight() {
    let store = Arc::new(MemoryStore::new());
    for _ in 0..8 {
        park(&store, "scripted", json!({"sleep_ms": 1_000})).await;
    }
    let r = retrier(&store).config(RetrierConfig { concurrency: 2, ..RetrierConfig::default() });
    let started = tokio::time::Instant::now();
    r.run_once().await.unwrap();
    // 8 one-second handlers, two at a time.
    assert_eq!(started.elapsed(), Duration::from_secs(4));
}

#[tokio::test(start_paused = true)]
async fn a_stopped_retrier_runs_again() {
    let store = Arc::new(MemoryStore::new());
    let r = retrier(&store);
    r.run_until(async {}).await.unwrap();
    let id = park(&store, "scripted", json!({})).await;
    assert_eq!(r.run_once().await.unwrap(), 1, "a finished run leaves nothing cancelled");
    assert_eq!(status(&store, id).0, Status::Succeeded);
}

#[tokio::test(start_paused = true)]
async fn rows_claimed_with_the_last_outcomes_are_handed_back_on_shutdown() {
    // Shutdown arrives while the outcomes of the first batch are written and the next batch
    // claimed: that batch does not run, and its rows are released at once.
    struct StopsMidWrite(MemoryStore, CancellationToken);
    delegate_parts!(StopsMidWrite: reads, operator, fleet, privacy);
    impl crate::store::QueueStore for StopsMidWrite {
        delegate_parts!(@queue_body);
        fn settle_and_claim(
            &self,
            outcomes: Vec<Settlement>,
            next: ClaimRequest,
        ) -> crate::store::BoxFuture<
            '_,
            crate::store::StoreResult<(crate::store::SettleReport, crate::store::StoreResult<Vec<Claimed>>)>,
        > {
            Box::pin(async move {
                self.1.cancel();
                // Lets the retrier see the shutdown while this write is under way.
                tokio::task::yield_now().await;
                self.0.settle_and_claim(outcomes, next).await
            })
        }
    }
    let shutdown = CancellationToken::new();
    let store = Arc::new(StopsMidWrite(MemoryStore::new(), shutdown.clone()));
    for _ in 0..4 {
        park(&store.0, "scripted", json!({})).await;
    }
    let registry = Registry::from_registrations([&SCRIPTED]).unwrap();
    let config = RetrierConfig { batch_size: 2, workers: 1, ..RetrierConfig::default() };
    let r = Retrier::new(Arc::clone(&store), registry).config(config);
    let stats = r.run_until(shutdown.cancelled_owned()).await.unwrap();
    assert_eq!((stats.claimed, stats.succeeded, stats.released, stats.fenced), (4, 2, 2, 0));
    let rows = store.0.list(crate::ListFilter::default()).await.unwrap();
    let statuses: Vec<_> = rows.iter().map(|r| (r.status, r.retry_count, r.lease_owner.is_some())).collect();
    assert_eq!(statuses.iter().filter(|s| **s == (Status::Succeeded, 0, false)).count(), 2);
    assert_eq!(statuses.iter().filter(|s| **s == (Status::Pending, 0, false)).count(), 2, "released, not run");
}

/// Each attempt of the row's history: (attempt, outcome).
async fn history(store: &MemoryStore, id: crate::DlqId) -> Vec<(u32, String)> {
    store.attempts(id).await.unwrap().into_iter().map(|a| (a.attempt, a.outcome)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_retry_due_at_once_runs_again_under_the_same_claim() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, "instant", json!({"fail": 1})).await;
    let r = retrier(&store);
    assert_eq!(r.run_once().await.unwrap(), 1);
    assert_eq!(status(&store, id), (Status::Succeeded, 1, None), "the failed attempt counts");
    let attempts = history(&store, id).await;
    assert_eq!(attempts, [(0, "failed".into()), (1, "retry".into()), (2, "succeeded".into())]);
    assert_eq!(store.get_now(id).unwrap().failure.reason, "scripted failure", "the row keeps the latest failure");
    let stats = r.stats();
    assert_eq!((stats.claimed, stats.succeeded, stats.retried, stats.retried_at_once), (1, 1, 0, 1));
}

#[tokio::test(start_paused = true)]
async fn immediate_retries_stop_at_the_configured_count_and_at_max_retries() {
    let store = Arc::new(MemoryStore::new());
    let failure = FailureInfo::new(ErrorClass::Transient, "Scripted", "first failure".into(), vec![], None);
    let letter = NewDeadLetter::new("instant", Payload::Json(json!({"fail": 99})), failure).retry(Duration::ZERO, 5);
    let id = store.park(letter).await.unwrap().id;
    let r = retrier(&store);
    r.run_once().await.unwrap();
    // The attempt and two more at once, then the outcome is written: due again at once.
    assert_eq!(status(&store, id), (Status::Pending, 3, None));
    assert_eq!(history(&store, id).await.len(), 4);
    r.run_once().await.unwrap();
    // Attempt 4 fails at once, attempt 5 spends the budget of 5.
    assert_eq!(status(&store, id), (Status::FailedPermanently, 5, Some(DeadReason::RetriesExhausted)));
    let outcomes: Vec<String> = history(&store, id).await.into_iter().map(|(_, o)| o).collect();
    assert_eq!(outcomes, ["failed", "retry", "retry", "retry", "retry", "dead"]);
    let stats = r.stats();
    assert_eq!((stats.claimed, stats.retried, stats.dead, stats.retried_at_once), (2, 1, 1, 3));
}

#[tokio::test(start_paused = true)]
async fn zero_immediate_retries_writes_every_attempt() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, "instant", json!({"fail": 1})).await;
    let r = retrier(&store).config(RetrierConfig { immediate_retries: 0, ..RetrierConfig::default() });
    r.run_once().await.unwrap();
    assert_eq!(status(&store, id), (Status::Pending, 1, None));
    r.run_once().await.unwrap();
    assert_eq!(status(&store, id), (Status::Succeeded, 1, None));
}

#[tokio::test(start_paused = true)]
async fn no_immediate_retry_when_another_attempt_could_outlast_half_the_lease() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, "instant", json!({"fail": 1})).await;
    // The handler's 60 s timeout is more than half of a 100 s lease.
    let r = retrier(&store).config(RetrierConfig { lease: Duration::from_secs(100), ..RetrierConfig::default() });
    r.run_once().await.unwrap();
    assert_eq!(status(&store, id), (Status::Pending, 1, None));
    // The same after a first attempt of 50 s under a 200 s lease: 50 s + 60 s is past 100 s.
    let slow = park(&store, "instant", json!({"fail": 1, "sleep_ms": 50_000})).await;
    let r = retrier(&store).config(RetrierConfig { lease: Duration::from_secs(200), ..RetrierConfig::default() });
    r.run_once().await.unwrap();
    assert_eq!(status(&store, slow).1, 1);
    assert_eq!(status(&store, id), (Status::Succeeded, 1, None));
    assert_eq!(r.stats().retried_at_once, 0);
}

/// A starting retrier publishes one catalog record per registered type, under its owner name,
/// before it claims anything: tools without the handlers' code read it.
#[tokio::test(start_paused = true)]
async fn a_starting_retrier_publishes_its_types_into_the_catalog() {
    let store = Arc::new(MemoryStore::new());
    let config = RetrierConfig { owner: "worker-7".into(), ..RetrierConfig::default() };
    let r = retrier(&store).config(config);
    // A shutdown that has already come: the run starts, publishes, and stops.
    r.run_until(async {}).await.unwrap();
    let catalog = store.event_types().await.unwrap();
    let types: Vec<_> = catalog.iter().map(|i| (i.event_type.as_str(), i.version, i.published_by.as_str())).collect();
    assert_eq!(types, [("aged", 1, "worker-7"), ("instant", 1, "worker-7"), ("scripted", 1, "worker-7")]);
}
