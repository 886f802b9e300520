//! The circuit breaker in the retrier, on `MemoryStore` with tokio's paused clock: a ledger
//! that is down then up, read from the context so that tests do not share it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use super::*;
use crate::admin::Admin;
use crate::classify::{ErrorClass, FailureInfo};
use crate::handler::{HandlerOutcome, Invocation, Registration};
use crate::{
    MemoryStore, Payload, Status, backoff::Backoff, backoff::RetryPolicy, breaker_config::BreakerConfig,
    record::CircuitState, store::NewDeadLetter,
};

#[derive(Default)]
struct Ledger {
    down: AtomicBool,
    calls: AtomicU32,
}

fn post(inv: Invocation) -> crate::store::BoxFuture<'static, HandlerOutcome> {
    Box::pin(async move {
        let ledger = inv.context.get::<Arc<Ledger>>().expect("ledger in the context");
        ledger.calls.fetch_add(1, Ordering::SeqCst);
        if ledger.down.load(Ordering::SeqCst) {
            let info = FailureInfo::new(ErrorClass::Transient, "LedgerDown", "ledger down".into(), vec![], None);
            return HandlerOutcome::Failed(info);
        }
        HandlerOutcome::Succeeded
    })
}

const POLICY: RetryPolicy =
    RetryPolicy { max_retries: 3, backoff: Backoff::fixed(Duration::from_secs(1)), max_age: None, timeout: None };

macro_rules! ledger_handler {
    ($name:ident, $event_type:literal) => {
        static $name: Registration = Registration {
            event_type: $event_type,
            version: 1,
            upcast: &[],
            handler: "breaker_tests::post",
            file: file!(),
            line: line!(),
            policy: POLICY,
            breaker: None,
            dispatch: post,
            missing_state: crate::handler::needs_no_state,
            sealing: None,
            check: crate::handler::accepts_any,
            subject: None,
            redact: &[],
            schemas: None,
        };
    };
}
ledger_handler!(TRIP, "breaker-trip");
ledger_handler!(PAUSE, "breaker-pause");
ledger_handler!(LIVE, "breaker-live");

fn retrier(store: &Arc<MemoryStore>, reg: &'static Registration, ledger: &Arc<Ledger>) -> Retrier<MemoryStore> {
    let mut breaker = BreakerConfig::parse_rule("50% of 5 in 1m").unwrap();
    breaker.cool_down = Duration::from_secs(10);
    breaker.max_cool_down = Duration::from_secs(40);
    breaker.ramp = Duration::from_secs(2);
    let config = RetrierConfig { batch_size: 10, concurrency: 1, breaker: Some(breaker), ..RetrierConfig::default() };
    Retrier::new(Arc::clone(store), Registry::from_registrations([reg]).unwrap())
        .config(config)
        .context(crate::Context::new().with(Arc::clone(ledger)))
}

async fn park_many(store: &MemoryStore, event_type: &str, n: usize) {
    let failure = FailureInfo::new(ErrorClass::Transient, "LedgerDown", "ledger down".into(), vec![], None);
    let letters = (0..n)
        .map(|i| NewDeadLetter::new(event_type, Payload::Json(i.into()), failure.clone()).retry(Duration::ZERO, 3))
        .collect();
    store.park_many(letters).await.unwrap();
}

fn calls(ledger: &Ledger) -> u32 {
    ledger.calls.load(Ordering::SeqCst)
}

#[tokio::test(start_paused = true)]
async fn an_outage_opens_the_circuit_and_spends_no_retries_until_recovery() {
    let (store, ledger) = (Arc::new(MemoryStore::new()), Arc::new(Ledger::default()));
    park_many(&store, "breaker-trip", 30).await;
    ledger.down.store(true, Ordering::SeqCst);
    let r = retrier(&store, &TRIP, &ledger);

    assert_eq!(r.run_once().await.unwrap(), 10);
    assert_eq!(calls(&ledger), 5, "the fifth failure trips the breaker; the other five rows do not run");
    let counted = store.snapshot().iter().filter(|l| l.retry_count > 0).count();
    assert_eq!(counted, 4, "rows failing as the circuit opens are released uncounted");
    assert_eq!(crate::circuit::circuit_of(&*store, "breaker-trip").state, CircuitState::Open, "the live path knows");

    for _ in 0..3 {
        assert_eq!(r.run_once().await.unwrap(), 0, "open: the type is not claimed");
        tokio::time::advance(Duration::from_secs(3)).await;
    }
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(r.run_once().await.unwrap(), 1, "cool-down over: one trial row");
    assert_eq!(calls(&ledger), 6);
    let c = store.circuits().await.unwrap().get("breaker-trip");
    assert_eq!((c.state, c.cool_down), (CircuitState::Open, Duration::from_secs(20)), "failed trial: doubled");

    ledger.down.store(false, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(r.run_once().await.unwrap(), 0, "20 s this time");
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(r.run_once().await.unwrap(), 1, "second trial");
    assert_eq!(store.circuits().await.unwrap().get("breaker-trip").state, CircuitState::Closed);

    // The ramp: a few rows at first, then the rest.
    let mut batches = Vec::new();
    for _ in 0..20 {
        tokio::time::advance(Duration::from_millis(500)).await;
        batches.push(r.run_once().await.unwrap());
    }
    assert!(batches[0] < 10, "slow start after closing: {batches:?}");
    let rows = store.snapshot();
    assert!(rows.iter().all(|l| l.status == Status::Succeeded), "all succeed after recovery");
    assert!(rows.iter().all(|l| l.retry_count <= 1), "no row spent more than one retry");

    let log = store.circuit_log(Some("breaker-trip".into()), 10).await.unwrap();
    let steps: Vec<&str> = log.iter().rev().map(|e| e.to.as_str()).collect();
    assert_eq!(steps, ["open", "half_open", "open", "half_open", "closed"]);
    assert!(log.last().unwrap().reason.contains("5 of 5 calls failed transiently"), "{:?}", log.last());
}

#[tokio::test(start_paused = true)]
async fn a_paused_type_is_not_claimed_and_keeps_its_retry_counts() {
    let (store, ledger) = (Arc::new(MemoryStore::new()), Arc::new(Ledger::default()));
    park_many(&store, "breaker-pause", 3).await;
    let r = retrier(&store, &PAUSE, &ledger);
    let admin = Admin::new(store.clone(), "alice");
    admin.pause_type("breaker-pause", "ledger migration").await.unwrap();
    assert!(admin.pause_type("breaker-pause", " ").await.is_err(), "a pause needs a reason");
    assert_eq!(r.run_once().await.unwrap(), 0, "paused");
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(r.run_once().await.unwrap(), 0, "still paused");
    assert_eq!(calls(&ledger), 0);
    assert!(store.snapshot().iter().all(|l| l.status == Status::Pending && l.retry_count == 0));
    let stats = admin.stats(5).await.unwrap();
    assert_eq!(stats.circuits.len(), 1);
    assert!(stats.warnings.iter().any(|w| w.contains("paused by alice: ledger migration")), "{:?}", stats.warnings);

    admin.resume_type("breaker-pause", Some("migration done")).await.unwrap();
    assert_eq!(r.run_once().await.unwrap(), 0, "honoured at the next read, within one poll interval");
    tokio::time::advance(r.config.poll_interval).await;
    assert_eq!(r.run_once().await.unwrap(), 3);
    assert!(store.snapshot().iter().all(|l| l.status == Status::Succeeded));
    let log = store.circuit_log(None, 10).await.unwrap();
    assert_eq!((log[0].to.as_str(), log[0].reason.as_str()), ("resumed", "migration done"));
}

#[tokio::test(start_paused = true)]
async fn live_failures_of_an_open_type_wait_for_the_next_probe() {
    let (store, ledger) = (Arc::new(MemoryStore::new()), Arc::new(Ledger::default()));
    park_many(&store, "breaker-live", 5).await;
    ledger.down.store(true, Ordering::SeqCst);
    let r = retrier(&store, &LIVE, &ledger);
    r.run_once().await.unwrap();
    assert!(crate::circuit::circuit_of(&*store, "breaker-live").is_open());
    tokio::time::advance(Duration::from_secs(4)).await;
    let failure = FailureInfo::new(ErrorClass::Transient, "LedgerDown", "ledger down".into(), vec![], None);
    // The live path of this store: its circuit is the one the retrier opened.
    let letter =
        crate::with_store(store.clone(), async { crate::live::letter_for(&LIVE, Payload::Json(0.into()), failure) })
            .await;
    assert_eq!(letter.retry_delay, Duration::from_secs(6), "parked until the probe, not after 1 s of backoff");
}

/// `backoff = "none"`, so that a failed attempt is due again at once.
static AT_ONCE: Registration = Registration {
    event_type: "breaker-rate",
    version: 1,
    upcast: &[],
    handler: "breaker_tests::post",
    file: file!(),
    line: line!(),
    policy: RetryPolicy { backoff: Backoff::NONE, ..POLICY },
    breaker: None,
    dispatch: post,
    missing_state: crate::handler::needs_no_state,
    sealing: None,
    check: crate::handler::accepts_any,
    subject: None,
    redact: &[],
    schemas: None,
};

#[tokio::test(start_paused = true)]
async fn a_rate_limited_type_runs_no_attempt_again_at_once() {
    // The downstream sees no more attempts per second than `max-rate` lets rows start.
    // Without the limit: the attempt and two more at once spend the row's 3 retries.
    let cases = [
        (r#"{"enabled": false, "max-rate": 40}"#, 1, Status::Pending),
        (r#"{"enabled": false}"#, 3, Status::FailedPermanently),
    ];
    for (limits, attempts, status) in cases {
        let store = Arc::new(MemoryStore::new());
        let ledger = Arc::new(Ledger::default());
        ledger.down.store(true, Ordering::SeqCst);
        park_many(&store, "breaker-rate", 1).await;
        let config = RetrierConfig::from_json_str(&format!(r#"{{"breakers": {{"breaker-rate": {limits}}}}}"#)).unwrap();
        let retrier = Retrier::new(Arc::clone(&store), Registry::from_registrations([&AT_ONCE]).unwrap())
            .config(config)
            .context(crate::Context::new().with(Arc::clone(&ledger)));
        assert_eq!(retrier.run_once().await.unwrap(), 1);
        assert_eq!(calls(&ledger), attempts, "{limits}");
        let row = store.list(crate::ListFilter::default()).await.unwrap().remove(0);
        assert_eq!((row.status, row.retry_count), (status, attempts), "{limits}");
    }
}

/// Two stores in one process with the same event type: each store's circuit views are its
/// own. The ledger behind store `down` fails and opens its circuit; store `up`'s circuit stays
/// closed, for `circuit_of`, for `circuit()` in each store's scope, and for the live path's
/// delay of a new failure.
#[tokio::test(start_paused = true)]
async fn two_stores_keep_their_own_circuit_views() {
    let (down, up) = (Arc::new(MemoryStore::new()), Arc::new(MemoryStore::new()));
    let (broken, working) = (Arc::new(Ledger::default()), Arc::new(Ledger::default()));
    broken.down.store(true, Ordering::SeqCst);
    park_many(&down, "breaker-trip", 10).await;
    park_many(&up, "breaker-trip", 10).await;
    retrier(&down, &TRIP, &broken).run_once().await.unwrap();
    retrier(&up, &TRIP, &working).run_once().await.unwrap();
    assert_eq!(calls(&working), 10, "store `up`'s rows all ran");

    assert!(crate::circuit::circuit_of(&*down, "breaker-trip").is_open());
    assert!(!crate::circuit::circuit_of(&*up, "breaker-trip").is_open(), "another store's open circuit");
    let seen_by =
        |store: &Arc<MemoryStore>| crate::with_store(store.clone(), async { crate::circuit::circuit("breaker-trip") });
    assert!(seen_by(&down).await.is_open());
    assert_eq!(seen_by(&up).await, crate::record::CircuitView::default(), "closed, as never written");

    let failure = FailureInfo::new(ErrorClass::Transient, "LedgerDown", "ledger down".into(), vec![], None);
    let parked_in = |store: &Arc<MemoryStore>| {
        let failure = failure.clone();
        crate::with_store(store.clone(), async move {
            crate::live::letter_for(&TRIP, Payload::Json(0.into()), failure).retry_delay
        })
    };
    assert_eq!(parked_in(&up).await, Duration::from_secs(1), "the backoff: `up`'s circuit is closed");
    assert_eq!(parked_in(&down).await, Duration::from_secs(10), "until `down`'s next probe");
}
