//! The outage replay that shaped the circuit breaker (docs/BREAKER.md): a ledger down for ten minutes, 5,000 payment events parked
//! by the live path during its first five, retried by a `Retrier` on `MemoryStore`, then the
//! ledger back. Tokio's paused clock compresses the hour into well under a second of real
//! time; nothing here measures wall-clock speed.
//!
//! Without the breaker, rows parked early spend all their retries on the dead ledger and die
//! of `retries_exhausted`: every row parked in the first three minutes does, by construction
//! (six retries 5 s to 160 s apart, ±15 % jitter, end at most 363 s after the park, before the
//! ledger is back), and each of them cost the ledger six calls. With it, none do: the ledger
//! sees at most 40 retries during the outage, and every row succeeds once it is back, within
//! the cool-down and the ramp. docs/OUTAGES.md quotes these assertions, not the printed figures
//! (the jitter moves those from run to run). Run with `--nocapture` to see the numbers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dlq_core::{
    CancellationToken, MemoryStore, Payload, Retrier, RetrierConfig, State, Status, adapter::DeadReason, dead_letter,
    handlers, handlers::Attempt, handlers::Registry, with_store,
};
use tokio::time::Instant;

const EVENTS: u64 = 5_000;
const OUTAGE: Duration = Duration::from_secs(600);
/// The live path parks ten events every 600 ms: these are the ones parked in its first three
/// minutes, whose six retries all fall inside the outage whatever the jitter.
const PARKED_EARLY: u64 = 3_000;
/// `max_retries` of both handlers.
const RETRIES: u64 = 6;

#[derive(Clone)]
struct Ledger {
    back_at: Instant,
    /// Retries (not first calls) that reached the ledger while it was down.
    retried_while_down: Arc<AtomicU64>,
}

/// An I/O error: transient by default.
type LedgerDown = std::io::Error;

fn post(ledger: &Ledger, attempt: Attempt) -> Result<(), LedgerDown> {
    if Instant::now() >= ledger.back_at {
        return Ok(());
    }
    if attempt.id.is_some() {
        ledger.retried_while_down.fetch_add(1, Ordering::SeqCst);
    }
    Err(std::io::Error::other("ledger unavailable"))
}

#[dead_letter(event_type = "outage-payment", max_retries = 6, backoff = "exp", base = "5s", max = "5m")]
async fn protected(_id: u64, State(ledger): State<Ledger>, attempt: Attempt) -> Result<(), LedgerDown> {
    post(&ledger, attempt)
}

#[dead_letter(event_type = "outage-payment-bare", max_retries = 6, backoff = "exp", base = "5s", max = "5m")]
async fn unprotected(_id: u64, State(ledger): State<Ledger>, attempt: Attempt) -> Result<(), LedgerDown> {
    post(&ledger, attempt)
}

#[derive(Debug)]
struct Replay {
    retried_while_down: u64,
    dead: usize,
    /// Rows parked in the live path's first three minutes that died of `retries_exhausted`.
    dead_of_parked_early: usize,
    succeeded: usize,
    max_retry_count: u32,
    /// From the ledger's return to the last row settled.
    drained_after: Duration,
}

async fn replay(registry: Registry, breaker: bool) -> Replay {
    let store = Arc::new(MemoryStore::new());
    let ledger = Ledger { back_at: Instant::now() + OUTAGE, retried_while_down: Arc::default() };
    let breaker = if breaker {
        r#", "breaker": {"threshold": "50% of 20 in 1m", "cool-down": "5s", "max-cool-down": "1m", "ramp": "30s"}"#
    } else {
        ""
    };
    let config =
        RetrierConfig::from_json_str(&format!(r#"{{"poll-interval": "1s", "batch-size": 100{breaker}}}"#)).unwrap();
    let retrier = Retrier::new(Arc::clone(&store), registry)
        .config(config)
        .context(dlq_core::Context::new().with(ledger.clone()));
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let (retrier, shutdown) = (retrier.clone(), shutdown.clone());
        async move { retrier.run_until(shutdown.cancelled_owned()).await }
    });

    // The live path: 5,000 events over the first five minutes, every one parked.
    let protect = !breaker.is_empty();
    for id in 0..EVENTS {
        let first = Attempt::first();
        let err = if protect {
            with_store(store.clone(), protected(id, State(ledger.clone()), first)).await.unwrap_err()
        } else {
            with_store(store.clone(), unprotected(id, State(ledger.clone()), first)).await.unwrap_err()
        };
        assert!(err.is_parked(), "{err}");
        if id % 10 == 9 {
            tokio::time::sleep(Duration::from_millis(600)).await;
        }
    }
    tokio::time::sleep_until(ledger.back_at).await;
    let deadline = ledger.back_at + Duration::from_secs(3600);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let open = store.snapshot().iter().filter(|l| matches!(l.status, Status::Pending | Status::Processing)).count();
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} rows still not settled an hour after recovery");
    }
    let drained_after = Instant::now() - ledger.back_at;
    shutdown.cancel();
    running.await.unwrap().unwrap();
    let rows = store.snapshot();
    assert_eq!(rows.len(), EVENTS as usize);
    let dead: Vec<_> = rows.iter().filter(|l| l.dead_reason == Some(DeadReason::RetriesExhausted)).collect();
    let event_id = |l: &dlq_core::DeadLetter| match &l.payload {
        Payload::Json(id) => id.as_u64().expect("the payload is the event's id"),
        other => panic!("a payment parked as JSON, not {other:?}"),
    };
    Replay {
        retried_while_down: ledger.retried_while_down.load(Ordering::SeqCst),
        dead: dead.len(),
        dead_of_parked_early: dead.iter().filter(|l| event_id(l) < PARKED_EARLY).count(),
        succeeded: rows.iter().filter(|l| l.status == Status::Succeeded).count(),
        max_retry_count: rows.iter().map(|l| l.retry_count).max().unwrap_or(0),
        drained_after,
    }
}

#[tokio::test(start_paused = true)]
async fn without_the_breaker_an_outage_kills_recoverable_rows() {
    let replay = replay(handlers![unprotected].unwrap(), false).await;
    println!("without the breaker: {replay:?}");
    assert_eq!(
        replay.dead_of_parked_early, PARKED_EARLY as usize,
        "every row parked in the first three minutes spent its six retries on the dead ledger: {replay:?}"
    );
    assert_eq!(replay.dead + replay.succeeded, EVENTS as usize);
    assert!(replay.retried_while_down >= RETRIES * replay.dead as u64, "each dead row called six times: {replay:?}");
}

#[tokio::test(start_paused = true)]
async fn with_the_breaker_no_row_dies_and_the_ledger_is_spared() {
    let replay = replay(handlers![protected].unwrap(), true).await;
    println!("with the breaker: {replay:?}");
    assert_eq!((replay.dead, replay.succeeded), (0, EVENTS as usize), "{replay:?}");
    // 20 calls trip it (one retrier), then one trial per cool-down: 5 s doubling to 1 min
    // over ten minutes is about a dozen.
    assert!(replay.retried_while_down <= 40, "{replay:?}");
    assert!(replay.max_retry_count <= 1, "no row spent more than the retry that tripped the breaker: {replay:?}");
    // Back within one cool-down (1 min) and the ramp (30 s), with a poll interval of slack.
    assert!(replay.drained_after <= Duration::from_secs(95), "{replay:?}");
}
