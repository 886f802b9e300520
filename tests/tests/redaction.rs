//! Redaction end to end, as an application uses it: a handler with `redact = [...]` fails on
//! the live path and in the retrier with an error that quotes the card number and the email;
//! no log line or span this process emits, no operator read (rows, the row, groups, stats,
//! a patch's outcome, its preview) shows them; a reveal shows them after an audit entry.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use dlq_core::admin::Admin;
use dlq_core::{Classify, ListFilter, MemoryStore, Retrier, Scope, dead_letter, handlers, store::prelude::*};

const PAN: &str = "4000-0027-6000-3184";
const EMAIL: &str = "dave.redacted@example.com";

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Card {
    number: String,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Charge {
    id: u64,
    card: Card,
    email: String,
}

#[derive(Debug, thiserror::Error, Classify)]
enum ChargeError {
    /// Transient: retried, then dead.
    #[error("gateway refused card {0} for {1}")]
    Refused(String, String),
    /// Fatal: the retrier's error log line quotes it.
    #[dlq(fatal)]
    #[error("card {0} is on the fraud list")]
    Fraud(String),
}

/// Once retried, charge 13 turns out to be fraud (fatal: not parked on the live path).
static RETRYING: AtomicBool = AtomicBool::new(false);

#[dead_letter(event_type = "e2e-redacted-charge", redact = ["/card/number", "/email"], max_retries = 2, backoff = "none")]
async fn charge(c: Charge) -> Result<(), ChargeError> {
    if c.id == 13 && RETRYING.load(Ordering::SeqCst) {
        return Err(ChargeError::Fraud(c.card.number));
    }
    Err(ChargeError::Refused(c.card.number, c.email))
}

/// Every event, span and value recorded into a span later (`dlq.retry`'s `error`), as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<String>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Captured {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut text = self.0.lock().unwrap();
        event.record(&mut Fields(&mut text));
        text.push('\n');
    }

    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut text = self.0.lock().unwrap();
        text.push_str(attrs.metadata().name());
        text.push(' ');
        attrs.record(&mut Fields(&mut text));
        text.push('\n');
    }

    fn on_record(
        &self,
        _: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut text = self.0.lock().unwrap();
        values.record(&mut Fields(&mut text));
        text.push('\n');
    }
}

fn assert_hidden(what: &str, text: &str) {
    assert!(!text.contains(PAN) && !text.contains(EMAIL), "{what}: {text}");
}

#[tokio::test]
async fn redacted_values_reach_no_log_span_or_operator_read_until_revealed() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let captured = Captured::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(captured.clone()));
    let store = Arc::new(MemoryStore::new());
    let registry = handlers![charge].unwrap();

    let mut ids = Vec::new();
    for id in [7, 13] {
        let event = Charge { id, card: Card { number: PAN.into() }, email: EMAIL.into() };
        let err = Scope::new().store(store.clone()).run(charge(event)).await.unwrap_err();
        ids.push(err.dlq_id().unwrap());
    }
    // Two retries each: the first row dies of its retries, the fraud one is retried as transient.
    RETRYING.store(true, Ordering::SeqCst);
    let retrier = Retrier::new(store.clone(), registry.clone());
    for _ in 0..2 {
        retrier.run_once().await.unwrap();
    }
    let row = store.get(ids[0]).await.unwrap().unwrap();
    assert_eq!(row.status, dlq_core::Status::FailedPermanently);
    assert!(row.failure.reason.contains(PAN), "the row itself keeps the text: redaction is a view");
    let logged = captured.0.lock().unwrap().clone();
    assert!(
        logged.contains("dlq.retry") && logged.contains("fraud list"),
        "the spans and lines were captured: {logged}"
    );
    assert!(logged.contains("[redacted]"), "{logged}");
    assert_hidden("tracing output", &logged);
    let circuits = store.circuits().await.unwrap();
    assert_hidden("circuit reasons", &format!("{:?}", circuits.circuits));

    let admin = Admin::new(store.clone(), "erin").with_registry(registry);
    let page = admin.list(ListFilter::default()).await.unwrap();
    assert_hidden("list", &format!("{:?}", page.rows));
    let detail = admin.show(ids[0]).await.unwrap();
    let shown = dlq_core::admin::json::detail(&detail).to_string();
    assert_hidden("show", &shown);
    assert!(shown.contains("gateway refused card [redacted] for [redacted]"), "{shown}");
    assert_hidden("groups", &format!("{:?}", admin.groups(ListFilter::default()).await.unwrap()));
    assert_hidden("stats", &serde_json::to_string(&admin.stats(10).await.unwrap()).unwrap());
    let fix = serde_json::json!([{"op": "replace", "path": "/card/number", "value": "4000-0000-0000-0002"}]);
    let preview = admin.patch_preview(ListFilter::default().ids([ids[0]]), &fix, 10).await.unwrap();
    assert_eq!(preview.patched[0].changes[0].old, Some(serde_json::json!("[redacted]")));
    let outcome = admin.patch(ids[0], &fix, "new card").await.unwrap();
    assert_hidden("patch outcome", &dlq_core::admin::json::patched(&outcome).to_string());
    let after = dlq_core::admin::json::detail(&admin.show(ids[0]).await.unwrap()).to_string();
    assert_hidden("the audit log of the patch", &after);
    assert!(!after.contains("4000-0000-0000-0002"), "the value the patch wrote is redacted too: {after}");

    let revealed = admin.reveal(ids[0], "chargeback 118").await.unwrap();
    assert!(dlq_core::admin::json::detail(&revealed).to_string().contains(EMAIL));
    let audit = store.audit(ids[0]).await.unwrap();
    let last = audit.last().unwrap();
    assert_eq!(
        (last.action.as_str(), last.actor.as_str(), last.reason.as_deref()),
        ("reveal", "erin", Some("chargeback 118"))
    );
}

/// A service that parks but runs no retrier (or runs it elsewhere, or later): its first park
/// of a type publishes the type's catalog record, so a tool without the handlers (the stock
/// `dlq`, the console) masks that first row, and a reason filter cannot guess at it.
#[tokio::test]
async fn the_live_path_publishes_what_its_type_redacts_before_any_retrier_starts() {
    let store = Arc::new(MemoryStore::new());
    let event = Charge { id: 1, card: Card { number: PAN.into() }, email: EMAIL.into() };
    let id = Scope::new().store(store.clone()).run(charge(event)).await.unwrap_err().dlq_id().unwrap();
    let catalog = store.event_types().await.unwrap();
    let record = catalog.iter().find(|t| t.event_type == "e2e-redacted-charge").expect("published on the first park");
    assert_eq!(record.redact, ["/card/number", "/email"]);

    // No registry: what the store's catalog says is all this admin knows.
    let admin = Admin::new(store.clone(), "erin");
    let detail = admin.show(id).await.unwrap();
    assert_hidden("show without the handlers", &dlq_core::admin::json::detail(&detail).to_string());
    for guess in [PAN, "card 4000-0027", "for dave"] {
        let page = admin.list(ListFilter::default().reason_contains(guess)).await.unwrap();
        assert!(page.rows.is_empty(), "a reason filter matches the masked text, not {guess:?}");
    }
    assert_eq!(admin.list(ListFilter::default().reason_contains("gateway refused")).await.unwrap().rows.len(), 1);
}

#[dead_letter(event_type = "e2e-redacted-charge-exp", redact = ["/card/number", "/email"], backoff = "exp")]
async fn charge_later(c: Charge) -> Result<(), ChargeError> {
    Err(ChargeError::Refused(c.card.number, c.email))
}

/// A handler whose backoff waits runs once per claim, and that one attempt takes the event:
/// what its failure may say in the retry span, the log and the circuit's reason is worked out
/// from the event before the handler takes it, so the values are masked there too.
#[tokio::test(start_paused = true)]
async fn a_retry_that_takes_the_event_still_masks_its_failure_text() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let captured = Captured::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(captured.clone()));
    let store = Arc::new(MemoryStore::new());
    let registry = handlers![charge_later].unwrap();
    let event = Charge { id: 21, card: Card { number: PAN.into() }, email: EMAIL.into() };
    Scope::new().store(store.clone()).run(charge_later(event)).await.unwrap_err();

    let retrier = Retrier::new(store.clone(), registry);
    for _ in 0..3 {
        tokio::time::advance(std::time::Duration::from_secs(3600)).await;
        assert_eq!(retrier.run_once().await.unwrap(), 1, "one retry per claim");
    }
    let logged = captured.0.lock().unwrap().clone();
    assert!(
        logged.contains("gateway refused card [redacted] for [redacted]"),
        "the retry's error was recorded: {logged}"
    );
    assert_hidden("tracing output of retries that took the event", &logged);
    let circuits = store.circuits().await.unwrap();
    assert_hidden("circuit reasons", &format!("{:?}", circuits.circuits));
}
