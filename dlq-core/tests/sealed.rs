//! Encryption at rest on `MemoryStore`, driven as an application would: a handler with
//! `encrypt = true` parks its failures sealed (payload, error text, stack trace), the retrier
//! opens them for the handler, rotation keeps old rows draining, and a row whose key the
//! retrier lacks is left alone, uncounted. No test here installs a global key ring: each
//! passes its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dlq_core::sealed::{self, KeyRing, SealError};
use dlq_core::{
    Error, HandlerError, MemoryStore, Retrier, Scope, Status, adapter::Dispatched, adapter::Dispatcher, dead_letter,
    handlers, handlers::Attempt, store::prelude::*,
};
use serde::{Deserialize, Serialize};

/// The string no stored byte may contain.
const MARKER: &str = "PAN-4111-1111-1111-1111";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Charge {
    id: u64,
    currency: String,
    pan: String,
}

static LEDGER_UP: AtomicBool = AtomicBool::new(false);

#[dead_letter(event_type = "sealed-charge", encrypt = true, clear = ["/id", "/currency"], backoff = "none")]
async fn charge(c: Charge) -> Result<(), std::io::Error> {
    assert!(c.pan.starts_with("PAN-"), "the handler sees plaintext");
    if LEDGER_UP.load(Ordering::SeqCst) {
        return Ok(());
    }
    Err(std::io::Error::other(format!("ledger refused card {}", c.pan)))
}

/// Ledger always down: every attempt fails, echoing the card.
#[dead_letter(event_type = "sealed-refund", encrypt = true, max_retries = 5, backoff = "none")]
async fn refund(c: Charge) -> Result<(), std::io::Error> {
    Err(std::io::Error::other(format!("refund refused for {}", c.pan)))
}

/// Fails on the live path, succeeds when retried.
#[dead_letter(event_type = "sealed-capture", encrypt = true, backoff = "none")]
async fn capture(c: Charge, attempt: Attempt) -> Result<(), std::io::Error> {
    assert!(c.pan.starts_with("PAN-"), "the handler sees plaintext");
    if attempt.id.is_none() {
        return Err(std::io::Error::other(format!("capture of {} timed out", c.pan)));
    }
    Ok(())
}

fn event() -> Charge {
    Charge { id: 7, currency: "EUR".into(), pan: MARKER.into() }
}

fn ring(active: &str, ids: &[&str]) -> KeyRing {
    let key = |id: &str| [id.as_bytes()[1]; 32];
    KeyRing::new(active, ids.iter().map(|id| (*id, key(id)))).unwrap()
}

/// Everything a store keeps of the row, its attempts and audit log, as text.
async fn stored_text(store: &MemoryStore, id: i64) -> String {
    let row = store.get(id).await.unwrap().unwrap();
    let attempts = store.attempts(id).await.unwrap();
    let audit = store.audit(id).await.unwrap();
    format!("{row:?}{attempts:?}{audit:?}{}", String::from_utf8_lossy(&row.payload.to_bytes()))
}

async fn park(
    store: &Arc<MemoryStore>,
    keys: KeyRing,
    f: impl std::future::Future<Output = Result<(), HandlerError<std::io::Error>>>,
) -> i64 {
    let err = Scope::new().store(store.clone()).keys(keys).run(f).await.unwrap_err();
    assert!(err.is_parked(), "{err:?}");
    err.dlq_id().unwrap()
}

#[tokio::test]
async fn a_parked_failure_is_sealed_and_the_retrier_runs_it_in_clear() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, ring("k1", &["k1"]), charge(event())).await;
    let row = store.get_now(id).unwrap();
    assert_eq!(sealed::sealed_key(&row.payload), Some("k1"));
    assert_eq!(row.failure.reason, "[encrypted, key k1]");
    let clear = sealed::clear_fields(&row.payload).unwrap();
    assert_eq!((clear["/id"].as_u64(), clear["/currency"].as_str()), (Some(7), Some("EUR")));
    assert!(!stored_text(&store, id).await.contains(MARKER), "{row:?}");

    // A failed retry writes its (card-echoing) error sealed too.
    let retrier = Retrier::new(store.clone(), handlers![charge].unwrap()).keys(ring("k1", &["k1"]));
    assert_eq!(retrier.run_once().await.unwrap(), 1);
    let row = store.get_now(id).unwrap();
    assert!(row.status == Status::Pending && row.retry_count >= 1, "{row:?}");
    assert!(!stored_text(&store, id).await.contains(MARKER));
    let opened = sealed::open_failure(&ring("k1", &["k1"]), "sealed-charge", row.failure).unwrap();
    assert!(opened.reason.contains(MARKER), "the key holder reads the error: {}", opened.reason);

    LEDGER_UP.store(true, Ordering::SeqCst);
    assert_eq!(retrier.run_once().await.unwrap(), 1);
    assert_eq!(store.get_now(id).unwrap().status, Status::Succeeded);
}

#[tokio::test]
async fn a_failure_that_exhausts_its_retries_stays_sealed() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, ring("k1", &["k1"]), refund(event())).await;
    let retrier = Retrier::new(store.clone(), handlers![refund].unwrap()).keys(ring("k1", &["k1"]));
    while store.get_now(id).unwrap().status == Status::Pending {
        retrier.run_once().await.unwrap();
    }
    let row = store.get_now(id).unwrap();
    assert_eq!((row.status, row.retry_count), (Status::FailedPermanently, 5));
    assert!(!stored_text(&store, id).await.contains(MARKER));
}

#[tokio::test]
async fn rows_sealed_under_an_old_key_drain_after_rotation() {
    let store = Arc::new(MemoryStore::new());
    let old = park(&store, ring("k1", &["k1"]), capture(event(), Attempt::first())).await;
    // Rotation: k2 is active, k1 still opens.
    let rotated = ring("k2", &["k1", "k2"]);
    let new = park(&store, rotated.clone(), capture(event(), Attempt::first())).await;
    let retrier = Retrier::new(store.clone(), handlers![capture].unwrap()).keys(rotated);
    assert_eq!(sealed::sealed_key(&store.get_now(new).unwrap().payload), Some("k2"));
    retrier.run_once().await.unwrap();
    assert_eq!(store.get_now(old).unwrap().status, Status::Succeeded);
    assert_eq!(store.get_now(new).unwrap().status, Status::Succeeded);
}

#[tokio::test]
async fn a_row_whose_key_is_missing_is_left_uncounted() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, ring("k1", &["k1"]), capture(event(), Attempt::first())).await;
    let retrier = Retrier::new(store.clone(), handlers![capture].unwrap()).keys(ring("k2", &["k2"]));
    assert_eq!(retrier.run_once().await.unwrap(), 0, "nothing run");
    assert_eq!(retrier.stats().sealed_unreadable, 1);
    let row = store.get_now(id).unwrap();
    assert_eq!(row.retry_count, 0, "no retry burnt");
    assert_eq!(store.attempts(id).await.unwrap().len(), 1, "no attempt recorded");
    assert_eq!(sealed::sealed_key(&row.payload), Some("k1"), "untouched");
}

#[tokio::test]
async fn without_keys_nothing_is_parked_in_clear_and_the_retrier_does_not_start() {
    if sealed::installed_keys().is_some() {
        return; // another test binary's concern: this one installs none
    }
    let store = Arc::new(MemoryStore::new());
    let err = Scope::new().store(store.clone()).run(capture(event(), Attempt::first())).await.unwrap_err();
    let HandlerError::ParkFailed { store_error, .. } = &err else { panic!("{err:?}") };
    assert!(matches!(store_error, Error::Sealed(SealError::NotConfigured { .. })), "{store_error}");
    assert!(store_error.to_string().contains("`sealed-capture`"), "{store_error}");
    assert!(store.is_empty());
    let retrier = Retrier::new(store.clone(), handlers![capture].unwrap());
    let err = retrier.run_once().await.unwrap_err();
    assert!(err.to_string().contains("encrypt = true"), "{err}");
}

#[tokio::test]
async fn deferred_and_dispatched_letters_are_sealed() {
    let keys = ring("k1", &["k1"]);
    let deferred = Scope::new().keys(keys.clone()).defer_park().run(refund(event())).await.unwrap_err();
    let HandlerError::Deferred { letter, .. } = deferred else { panic!() };
    assert!(!format!("{letter:?}").contains(MARKER));

    let store = Arc::new(MemoryStore::new());
    let dispatcher = Dispatcher::new(store.clone(), handlers![refund].unwrap()).keys(keys);
    let bytes = serde_json::to_vec(&event()).unwrap();
    let Dispatched::Parked { id, .. } = dispatcher.dispatch("sealed-refund", &bytes).await.unwrap() else { panic!() };
    assert!(!stored_text(&store, id).await.contains(MARKER));
}

#[tokio::test]
async fn a_sealed_row_is_patched_in_memory_and_audited_without_plaintext() {
    use dlq_core::admin::Admin;
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, ring("k1", &["k1"]), refund(event())).await;
    let patch = serde_json::json!([{"op": "replace", "path": "/pan", "value": "PAN-5555-NEW"}]);

    let keyless = Admin::new(store.clone(), "alice");
    let err = keyless.patch(id, &patch, "new card").await.unwrap_err().to_string();
    assert!(err.contains("encrypted (key k1)") && err.contains("DLQ_KEYS"), "{err}");

    // Rotated since the park: the patched payload is sealed under the active key.
    let admin =
        Admin::new(store.clone(), "alice").keys(ring("k2", &["k1", "k2"])).with_registry(handlers![refund].unwrap());
    let outcome = admin.patch(id, &patch, "new card").await.unwrap();
    let row = store.get_now(id).unwrap();
    assert_eq!(sealed::sealed_key(&row.payload), Some("k2"));
    assert_eq!(outcome.new, row.payload, "the outcome is what is stored, sealed: no reveal, no plaintext");
    let shown = format!("{:?} {:?}", outcome.old, outcome.new);
    assert!(!shown.contains(MARKER) && !shown.contains("PAN-5555"), "{shown}");
    let opened = sealed::open_payload(&ring("k2", &["k1", "k2"]), "sealed-refund", row.payload).unwrap();
    assert!(String::from_utf8_lossy(&opened.to_bytes()).contains("PAN-5555-NEW"));
    // A dry run of one row opens it in memory and shows where it would change, not the values.
    let again = serde_json::json!([{"op": "replace", "path": "/pan", "value": "PAN-6666"}]);
    let dry = format!("{:?}", admin.patch_dry_run(id, &again).await.unwrap());
    assert!(dry.contains("/pan") && dry.contains("[encrypted]") && !dry.contains("PAN-"), "{dry}");
    let audit = format!("{:?}", store.audit(id).await.unwrap());
    assert!(!audit.contains(MARKER) && !audit.contains("PAN-5555"), "{audit}");
    assert_eq!(admin.check(&store.get_now(id).unwrap()), Ok(()), "validation opens in memory");

    // The undo restores the sealed original, which still opens to the event.
    admin.undo(outcome.audit_id, None, false).await.unwrap();
    let restored = store.get_now(id).unwrap().payload;
    let opened = sealed::open_payload(&ring("k2", &["k1", "k2"]), "sealed-refund", restored).unwrap();
    assert!(String::from_utf8_lossy(&opened.to_bytes()).contains(MARKER));
}

#[tokio::test]
async fn after_a_rekey_the_old_key_can_leave_the_ring() {
    use dlq_core::admin::Admin;
    let store = Arc::new(MemoryStore::new());
    let old = park(&store, ring("k1", &["k1"]), capture(event(), Attempt::first())).await;
    let new = park(&store, ring("k2", &["k1", "k2"]), capture(event(), Attempt::first())).await;
    let admin = Admin::new(store.clone(), "alice").keys(ring("k2", &["k1", "k2"]));
    let err = Admin::new(store.clone(), "alice").rekey(dlq_core::ListFilter::default(), "retire k1").await;
    if sealed::installed_keys().is_none() {
        assert!(err.unwrap_err().to_string().contains("key ring"), "no ring: nothing written");
    }
    let report = admin.rekey(dlq_core::ListFilter::default(), "retire k1").await.unwrap();
    assert_eq!((report.rekeyed.as_slice(), report.current), ([old].as_slice(), 1));
    let again = admin.rekey(dlq_core::ListFilter::default(), "retire k1").await.unwrap();
    assert_eq!((again.rekeyed.len(), again.current), (0, 2), "a second run finds nothing left");
    assert!(!stored_text(&store, old).await.contains(MARKER));
    // k1 is gone: the retrier opens both rows with k2 alone.
    let retrier = Retrier::new(store.clone(), handlers![capture].unwrap()).keys(ring("k2", &["k2"]));
    retrier.run_once().await.unwrap();
    assert_eq!(retrier.stats().sealed_unreadable, 0);
    assert_eq!(
        (store.get_now(old).unwrap().status, store.get_now(new).unwrap().status),
        (Status::Succeeded, Status::Succeeded)
    );
}

/// A group patch writes the payload its rule computes without opening anything: it refuses a
/// sealed row, naming its key, rather than patch (and break) the envelope.
#[tokio::test]
async fn a_group_patch_refuses_sealed_rows() {
    use dlq_core::admin::Admin;
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, ring("k1", &["k1"]), refund(event())).await;
    let admin = Admin::new(store.clone(), "alice").keys(ring("k1", &["k1"]));
    let patch = serde_json::json!([{"op": "add", "path": "/note", "value": "x"}]);
    let preview = admin.patch_preview(dlq_core::ListFilter::default(), &patch, 100).await.unwrap();
    assert!(preview.patched.is_empty(), "{preview:?}");
    assert_eq!(preview.refused[0].id, id);
    assert!(preview.refused[0].reason.contains("encrypted (key k1)"), "{preview:?}");
}
