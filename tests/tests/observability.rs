//! The metrics as an operator scrapes them: a Prometheus exporter installed as the process's
//! recorder, the payment scenario run on PostgreSQL, and every documented metric checked
//! against the database.

mod support;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dlq_core::{
    CancellationToken, Classify, Retrier, RetrierConfig, Scope, Status, dead_letter, handlers, observe::METRICS,
    store::prelude::*,
};
use dlq_sqlx::{PgConfig, PgStore};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use std::sync::Arc;
use support::eventually;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payment {
    id: u64,
    currency: String,
}

#[derive(Debug, thiserror::Error, Classify)]
enum PaymentError {
    #[error("currency {0:?} is not ISO 4217")]
    #[dlq(permanent)]
    BadCurrency(String),
    #[error("ledger unavailable")]
    #[dlq(transient)]
    LedgerDown,
}

static LEDGER_UP: AtomicBool = AtomicBool::new(false);

#[dead_letter(event_type = "obs-payment", max_retries = 5, backoff = "none")]
async fn handle_payment(p: Payment) -> Result<(), PaymentError> {
    if p.currency.trim() != p.currency {
        return Err(PaymentError::BadCurrency(p.currency));
    }
    if !LEDGER_UP.load(Ordering::SeqCst) {
        return Err(PaymentError::LedgerDown);
    }
    Ok(())
}

/// Always fails: the ledger of refunds is down for good in these tests.
#[dead_letter(event_type = "obs-refund", backoff = "none")]
async fn handle_refund(_p: Payment) -> Result<(), PaymentError> {
    Err(PaymentError::LedgerDown)
}

fn exporter() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| PrometheusBuilder::new().install_recorder().expect("the only recorder of this test binary"))
}

/// The value of the sample `name{labels}` in a Prometheus text exposition (labels in any order).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (series_name, label_text) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let found: Vec<(&str, &str)> = label_text
            .split(',')
            .filter(|kv| !kv.is_empty())
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k, v.trim_matches('"'))))
            .collect();
        let same = series_name == name && found.len() == labels.len() && labels.iter().all(|l| found.contains(l));
        same.then(|| value.parse().ok()).flatten()
    })
}

async fn db_count(pool: &PgPool, status: &str) -> f64 {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM dlq_events WHERE event_type = 'obs-payment' AND status = $1")
        .bind(status)
        .fetch_one(pool)
        .await
        .unwrap();
    n as f64
}

#[sqlx::test(migrations = false)]
async fn every_documented_metric_matches_the_database_after_the_payment_scenario(pool: PgPool) {
    let metrics = exporter();
    let store = Arc::new(PgStore::from_pool(pool.clone(), PgConfig::default()).await.unwrap());
    let scope = || Scope::new().store(store.clone());

    // The live path: one succeeds (records nothing), one fails transiently, one permanently.
    LEDGER_UP.store(false, Ordering::SeqCst);
    let ok = Payment { id: 1, currency: "EUR".into() };
    let bad = Payment { id: 2, currency: "USD ".into() };
    let later = Payment { id: 3, currency: "EUR".into() };
    LEDGER_UP.store(true, Ordering::SeqCst);
    scope().run(handle_payment(ok)).await.unwrap();
    LEDGER_UP.store(false, Ordering::SeqCst);
    assert!(scope().run(handle_payment(bad)).await.unwrap_err().is_parked());
    assert!(scope().run(handle_payment(later)).await.unwrap_err().is_parked());

    // The ledger comes back; a retrier drains and refreshes the gauges every heartbeat.
    LEDGER_UP.store(true, Ordering::SeqCst);
    let config = RetrierConfig::from_json_str(r#"{"heartbeat": "100ms", "poll-interval": "50ms"}"#).unwrap();
    let retrier = Retrier::new(store.clone(), handlers![handle_payment].unwrap()).config(config);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let (retrier, shutdown) = (retrier.clone(), shutdown.clone());
        async move { retrier.run_until(shutdown.cancelled_owned()).await }
    });
    eventually("the retrier to drain and gauge the rows", || async {
        let text = metrics.render();
        let drained = store.stats().await.unwrap().iter().all(|r| r.status != Status::Pending);
        drained && sample(&text, "dlq_rows", &[("event_type", "obs-payment"), ("status", "SUCCEEDED")]) == Some(1.0)
    })
    .await;
    shutdown.cancel();
    running.await.unwrap().unwrap();

    // An operator repairs the poison event: counted by action, the actor is in the audit log.
    let dead = store.list(dlq_core::ListFilter::default().status(Status::FailedPermanently)).await.unwrap();
    let fix = serde_json::json!([{ "op": "replace", "path": "/currency", "value": "USD" }]);
    let admin = dlq_core::admin::Admin::new(store.clone(), "on-call");
    admin.patch(dead[0].id, &fix, "trailing space in the currency").await.unwrap();
    let text = metrics.render();
    assert_eq!(sample(&text, "dlq_admin_actions_total", &[("action", "patch")]), Some(1.0), "{text}");

    let payment = ("event_type", "obs-payment");
    let parked =
        |class, reason| sample(&text, "dlq_parked_total", &[payment, ("class", class), ("dead_reason", reason)]);
    assert_eq!(parked("transient", "none"), Some(1.0), "{text}");
    assert_eq!(parked("permanent", "permanent"), Some(1.0));
    assert_eq!(sample(&text, "dlq_retries_total", &[payment, ("outcome", "succeeded")]), Some(1.0));
    assert_eq!(sample(&text, "dlq_park_failures_total", &[payment]), None, "no park failed");

    for (status, label) in [("SUCCEEDED", "SUCCEEDED"), ("FAILED_PERMANENTLY", "FAILED_PERMANENTLY")] {
        let gauge = sample(&text, "dlq_rows", &[payment, ("status", label)]);
        assert_eq!(gauge, Some(db_count(&pool, status).await), "dlq_rows{{status={label}}}");
    }
    // Every status is a series, 0 included, so `rate()` and absence alerts see it.
    for status in ["PENDING", "PROCESSING", "DISCARDED"] {
        assert_eq!(sample(&text, "dlq_rows", &[payment, ("status", status)]), Some(0.0), "{status}: {text}");
        assert_eq!(db_count(&pool, status).await, 0.0);
    }
    assert_eq!(sample(&text, "dlq_saturation_ratio", &[]), Some(0.0), "no max_entries: nothing fills up");
    assert_eq!(sample(&text, "dlq_oldest_due_seconds", &[payment]), Some(0.0), "nothing due once drained");
    assert_eq!(sample(&text, "dlq_live_retriers", &[]), Some(1.0));
    assert_eq!(sample(&text, "dlq_handler_duration_seconds_count", &[payment]), Some(1.0));
    assert_eq!(sample(&text, "dlq_recovery_seconds_count", &[payment]), Some(1.0));
    assert!(sample(&text, "dlq_claim_duration_seconds_count", &[]).is_some_and(|n| n >= 1.0));

    // Every documented metric that this scenario exercises is there, with its HELP text.
    for (name, _, _) in METRICS {
        let quiet = [
            "dlq_park_failures_total",
            "dlq_retry_panics_total",
            "dlq_retry_timeouts_total",
            "dlq_store_errors_total",
            "dlq_saturation_ratio",
            "dlq_overflow_total",
            // No circuit opens or is paused in this scenario.
            "dlq_circuit_transitions_total",
            "dlq_circuit_state",
            // No type here is encrypted.
            "dlq_sealed_unreadable_total",
        ];
        if !quiet.contains(name) {
            assert!(text.contains(&format!("# HELP {name} ")), "{name} missing:\n{text}");
        }
    }
}

#[test]
fn the_metrics_table_documents_every_metric() {
    let doc = include_str!("../../docs/METRICS.md");
    for (name, kind, _) in METRICS {
        assert!(doc.contains(&format!("| `{name}` | {kind} |")), "{name} ({kind}) is not in docs/METRICS.md");
    }
}

#[sqlx::test(migrations = false)]
async fn health_reports_saturation_and_orphaned_types_and_a_store_that_is_down(pool: PgPool) {
    use dlq_core::{observe::HealthStatus, observe::health};
    use dlq_sqlx::postgres::Overflow;

    let metrics = exporter();
    // Parks that must land get a minute; the one that must be refused, 300 ms.
    let config = PgConfig::default().max_entries(4, Overflow::Block).park_timeout(Duration::from_secs(60));
    let store = Arc::new(PgStore::from_pool(pool.clone(), config).await.unwrap());
    let report = health(&*store).await;
    assert_eq!((report.status, report.saturation), (HealthStatus::Healthy, Some(0.0)), "{report:?}");

    for id in 10..14 {
        let p = Payment { id, currency: "EUR".into() };
        assert!(Scope::new().store(store.clone()).run(handle_refund(p)).await.unwrap_err().is_parked());
    }
    let report = health(&*store).await;
    assert_eq!((report.status, report.saturation), (HealthStatus::Degraded, Some(1.0)), "{report:?}");
    assert!(report.problems.iter().any(|p| p.contains("4 of its 4 rows: parks wait for room")), "{report:?}");
    assert_eq!(report.orphaned, ["obs-refund"], "due rows and no retrier");

    // A fifth failure waits for room, then is refused: the caller must not ack it. Its store
    // has counted the rows (full), so it is refused as full even if a count runs into its
    // deadline.
    let short = PgConfig::default().max_entries(4, Overflow::Block).park_timeout(Duration::from_millis(300));
    let short = Arc::new(PgStore::from_pool(pool.clone(), short.run_migrations(false)).await.unwrap());
    assert_eq!(short.refresh_saturation().await.unwrap(), 1.0);
    let p = Payment { id: 14, currency: "EUR".into() };
    let err = Scope::new().store(short.clone()).run(handle_refund(p)).await.unwrap_err();
    assert!(
        matches!(err, dlq_core::HandlerError::ParkFailed { store_error: dlq_core::Error::Full { .. }, .. }),
        "{err:?}"
    );
    let text = metrics.render();
    let overflow = |outcome| sample(&text, "dlq_overflow_total", &[("policy", "block"), ("outcome", outcome)]);
    assert_eq!(overflow("rejected"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "dlq_park_failures_total", &[("event_type", "obs-refund")]), Some(1.0));

    pool.close().await;
    let report = health(&*store).await;
    assert_eq!(report.status, HealthStatus::Down, "{report:?}");
}

/// Always fails: the downstream of this type is down for good.
#[dead_letter(event_type = "obs-circuit", backoff = "none", max_retries = 100)]
async fn handle_circuit(_p: Payment) -> Result<(), PaymentError> {
    Err(PaymentError::LedgerDown)
}

/// The circuit metrics: the breaker of `obs-circuit` opens on its failures (a transition to
/// `open`, state 2), and an operator's pause shows as a `paused` transition and state 3.
#[sqlx::test(migrations = false)]
async fn circuit_metrics_follow_the_breaker_and_the_operator(pool: PgPool) {
    let metrics = exporter();
    let store = Arc::new(PgStore::from_pool(pool, PgConfig::default()).await.unwrap());
    for id in 0..20 {
        let payment = Payment { id, currency: "EUR".into() };
        assert!(Scope::new().store(store.clone()).run(handle_circuit(payment)).await.unwrap_err().is_parked());
    }
    let labels = |to| [("event_type", "obs-circuit"), ("to", to)];
    let store_label = dlq_core::observe::store_label(&store.store_id());
    let state = [("store", store_label.as_str()), ("event_type", "obs-circuit")];

    let config = RetrierConfig::from_json_str(
        r#"{"heartbeat": "100ms", "poll-interval": "50ms", "breaker": {"threshold": "50% of 5 in 1m", "cool-down": "1m"}}"#,
    )
    .unwrap();
    let retrier = Retrier::new(store.clone(), handlers![handle_circuit].unwrap()).config(config);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let (retrier, shutdown) = (retrier.clone(), shutdown.clone());
        async move { retrier.run_until(shutdown.cancelled_owned()).await }
    });
    eventually("the circuit to show open", || async {
        let text = metrics.render();
        let opened = sample(&text, "dlq_circuit_transitions_total", &labels("open")) == Some(1.0);
        opened && sample(&text, "dlq_circuit_state", &state) == Some(2.0)
    })
    .await;
    shutdown.cancel();
    running.await.unwrap().unwrap();

    let admin = dlq_core::admin::Admin::new(store.clone(), "on-call");
    admin.pause_type("obs-circuit", "ledger migration").await.unwrap();
    dlq_core::adapter::refresh_circuits(store.as_ref()).await.unwrap();
    let text = metrics.render();
    assert_eq!(sample(&text, "dlq_circuit_transitions_total", &labels("paused")), Some(1.0), "{text}");
    assert_eq!(sample(&text, "dlq_circuit_state", &state), Some(3.0), "{text}");
}

/// Two stores of one process can both hold a circuit of one event type: each has its own
/// `dlq_circuit_state` series, so one's state does not hide the other's.
#[tokio::test]
async fn circuit_state_has_one_series_per_store() {
    let metrics = exporter();
    let (paused, resumed) = (Arc::new(dlq_core::MemoryStore::new()), Arc::new(dlq_core::MemoryStore::new()));
    for store in [&paused, &resumed] {
        dlq_core::admin::Admin::new(store.clone(), "on-call")
            .pause_type("obs-refund", "ledger migration")
            .await
            .unwrap();
    }
    dlq_core::admin::Admin::new(resumed.clone(), "on-call").resume_type("obs-refund", None).await.unwrap();
    dlq_core::adapter::refresh_circuits(paused.as_ref()).await.unwrap();
    dlq_core::adapter::refresh_circuits(resumed.as_ref()).await.unwrap();

    let text = metrics.render();
    let state = |store: &dlq_core::MemoryStore| {
        let label = dlq_core::observe::store_label(&store.store_id());
        sample(&text, "dlq_circuit_state", &[("store", label.as_str()), ("event_type", "obs-refund")])
    };
    assert_eq!(state(&paused), Some(3.0), "{text}");
    assert_eq!(state(&resumed), Some(0.0), "{text}");
}

/// Event types come from the store, where anyone who can park an event writes any number of
/// them: the `event_type` label takes the registered types and at most
/// `MAX_UNREGISTERED_TYPE_LABELS` others, neutralized and cut; the rest add up under `other`.
#[sqlx::test(migrations = false)]
async fn event_type_labels_are_bounded_whatever_the_store_holds(pool: PgPool) {
    use dlq_core::{
        ErrorClass, Payload, adapter::DeadReason, classify::FailureInfo, observe::StoreGauges, store::NewDeadLetter,
    };

    let metrics = exporter();
    let store = PgStore::from_pool(pool.clone(), PgConfig::default()).await.unwrap();
    let flood = 2 * dlq_core::observe::MAX_UNREGISTERED_TYPE_LABELS + 7;
    let letters = (0..flood)
        .map(|n| {
            let event_type = format!("evil-{n}\x1b]0;<b>title</b>\x07{}", "x".repeat(200));
            let failure = FailureInfo::new(ErrorClass::Permanent, "E", "bad".into(), vec![], None);
            NewDeadLetter::new(&event_type, Payload::from_bytes(b"\xff"), failure).dead(DeadReason::Permanent)
        })
        .collect();
    store.park_many(letters).await.unwrap();
    StoreGauges::default().refresh(&store).await;

    let text = metrics.render();
    let label = |line: &str, key: &str| -> Option<String> {
        let from = line.find(&format!("{key}=\""))? + key.len() + 2;
        Some(line[from..].split('"').next()?.to_owned())
    };
    let mut labels = std::collections::BTreeSet::new();
    let mut dead = 0.0;
    for line in text.lines().filter(|l| l.starts_with("dlq_rows{")) {
        let event_type = label(line, "event_type").unwrap();
        if event_type.starts_with("obs-") {
            continue; // this binary's registered types, gauged by the other tests
        }
        assert!(!event_type.chars().any(char::is_control), "neutralized: {event_type:?}");
        assert!(event_type.chars().count() <= dlq_core::observe::MAX_TYPE_LABEL_CHARS, "cut: {event_type:?}");
        if label(line, "status").as_deref() == Some("FAILED_PERMANENTLY") {
            dead += line.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap();
        }
        labels.insert(event_type);
    }
    assert!(labels.contains(dlq_core::observe::OTHER_EVENT_TYPES), "{labels:?}");
    assert_eq!(labels.len(), dlq_core::observe::MAX_UNREGISTERED_TYPE_LABELS + 1, "{labels:?}");
    assert_eq!(dead, flood as f64, "every row is counted, under its own label or `other`");
    let other = sample(&text, "dlq_rows", &[("event_type", "other"), ("status", "FAILED_PERMANENTLY")]);
    assert_eq!(other, Some((flood - dlq_core::observe::MAX_UNREGISTERED_TYPE_LABELS) as f64));
    assert_eq!(dlq_core::observe::type_label("obs-payment"), "obs-payment", "a registered type keeps its own label");
}
