//! `#[dead_letter(breaker = "...")]` through the public API: a handler whose attribute names a
//! breaker trips its circuit on `MemoryStore` with no breaker in the retrier's configuration,
//! and the configuration's entry for the type overrides the attribute. Tokio's paused clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use dlq_core::{MemoryStore, Retrier, RetrierConfig, State, Status, dead_letter, handlers, with_store};

#[derive(Clone, Default)]
struct Ledger {
    down: Arc<AtomicBool>,
    calls: Arc<AtomicU32>,
}

impl Ledger {
    fn post(&self) -> Result<(), std::io::Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("ledger unavailable"));
        }
        Ok(())
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

#[dead_letter(event_type = "attr-breaker", backoff = "fixed", base = "1s", breaker = "50% of 5 in 1m")]
async fn guarded(_id: u64, State(ledger): State<Ledger>) -> Result<(), std::io::Error> {
    ledger.post()
}

#[dead_letter(event_type = "attr-breaker-overridden", backoff = "fixed", base = "1s", breaker = "50% of 5 in 1m")]
async fn overridden(_id: u64, State(ledger): State<Ledger>) -> Result<(), std::io::Error> {
    ledger.post()
}

/// Twenty events fail on the live path and are parked, due in a second.
async fn park_twenty(store: &Arc<MemoryStore>, ledger: &Ledger, overridden_type: bool) {
    for id in 0..20 {
        let err = if overridden_type {
            with_store(store.clone(), overridden(id, State(ledger.clone()))).await.unwrap_err()
        } else {
            with_store(store.clone(), guarded(id, State(ledger.clone()))).await.unwrap_err()
        };
        assert!(err.is_parked(), "{err}");
    }
    tokio::time::advance(Duration::from_secs(2)).await;
}

#[tokio::test(start_paused = true)]
async fn the_attribute_alone_opens_the_circuit() {
    let (store, ledger) = (Arc::new(MemoryStore::new()), Ledger::default());
    ledger.down.store(true, Ordering::SeqCst);
    park_twenty(&store, &ledger, false).await;
    let config = RetrierConfig::from_json_str(r#"{"batch-size": 10, "concurrency": 1}"#).unwrap();
    assert!(config.breaker.is_none() && config.breakers.is_empty(), "no breaker in the configuration");
    let retrier = Retrier::new(Arc::clone(&store), handlers![guarded].unwrap())
        .config(config)
        .context(dlq_core::Context::new().with(ledger.clone()));

    assert_eq!(retrier.run_once().await.unwrap(), 10);
    assert_eq!(ledger.calls(), 20 + 5, "the fifth failed retry trips the breaker; the other five rows do not run");
    assert!(dlq_core::adapter::circuit_of(&*store, "attr-breaker").is_open());
    assert_eq!(retrier.run_once().await.unwrap(), 0, "open: the type is not claimed");
    assert_eq!(ledger.calls(), 25);
    assert!(store.snapshot().iter().all(|l| l.status == Status::Pending), "no row died");
}

#[tokio::test(start_paused = true)]
async fn the_configuration_for_the_type_overrides_the_attribute() {
    let (store, ledger) = (Arc::new(MemoryStore::new()), Ledger::default());
    ledger.down.store(true, Ordering::SeqCst);
    park_twenty(&store, &ledger, true).await;
    let config = RetrierConfig::from_json_str(
        r#"{"batch-size": 10, "concurrency": 1, "breakers": {"attr-breaker-overridden": {"enabled": false}}}"#,
    )
    .unwrap();
    let retrier = Retrier::new(Arc::clone(&store), handlers![overridden].unwrap())
        .config(config)
        .context(dlq_core::Context::new().with(ledger.clone()));

    assert_eq!(retrier.run_once().await.unwrap(), 10);
    assert_eq!(ledger.calls(), 20 + 10, "the operator turned the breaker off: every claimed row runs");
    assert!(!dlq_core::adapter::circuit_of(&*store, "attr-breaker-overridden").is_open());
}
