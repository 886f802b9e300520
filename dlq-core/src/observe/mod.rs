//! Observability: the metrics dlq records through the `metrics` facade ([`METRICS`],
//! [`describe_metrics`], the store-wide [`StoreGauges`]) and the health a service reports
//! ([`health`]: saturation, stuck rows, retriers).
//!
//! Every metric's name, type and label is listed in `docs/METRICS.md`; the table there and
//! [`METRICS`] are kept in step by a test. Labels are bounded: classes, reasons and outcomes
//! (fixed sets), never ids or error messages, and event types through [`type_label`]: they
//! are read from the store, where anyone who can park an event can write any number of them.
//! Stores are labelled through [`store_label`], bounded the same way.

use std::time::Duration;

use metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

use crate::ErrorClass;
mod health;

pub use crate::record::Capacity;
use crate::record::{DeadReason, Status};
use crate::record::{RetrierHeartbeat, StatsRow};
pub(crate) use health::unreadable_problem;
pub use health::{Health, HealthStatus, SATURATION_ERROR, SATURATION_WARNING, health};

/// Every metric `dlq` records: name, unit and meaning (also in `docs/METRICS.md`).
pub const METRICS: &[(&str, &str, &str)] = &[
    (PARKED, "counter", "events parked by the live path or a dispatcher, by event_type, class and dead_reason"),
    (PARK_FAILURES, "counter", "events that could not be parked (store down, timeout), by event_type"),
    (RETRIES, "counter", "retries by event_type and outcome: succeeded, retry, dead, released, fenced, unwritten"),
    (RETRY_PANICS, "counter", "retries whose handler panicked, by event_type"),
    (RETRY_TIMEOUTS, "counter", "retries that ran past the handler's timeout, by event_type"),
    (STORE_ERRORS, "counter", "failed store calls of the retrier (claim, settle)"),
    (ADMIN_ACTIONS, "counter", "rows changed by operator actions (redrive, discard, patch, undo, purge), by action"),
    (OVERFLOW, "counter", "parks met by a full store (max_entries), by policy and outcome: rejected, dropped, blocked"),
    (ROWS, "gauge", "rows by event_type and status, refreshed by each retrier every heartbeat"),
    (OLDEST_DUE, "gauge", "age in seconds of the oldest PENDING row that is due, by event_type (0 when none)"),
    (LIVE_RETRIERS, "gauge", "retrier processes whose heartbeat is live"),
    (SATURATION, "gauge", "rows in the store over its max_entries limit (stores with a limit only)"),
    (
        CLAIM_SECONDS,
        "histogram",
        "time of one claim round trip (with the previous batch's outcomes when written together), in seconds",
    ),
    (HANDLER_SECONDS, "histogram", "time of one retried handler run, by event_type, in seconds"),
    (RECOVERY_SECONDS, "histogram", "time from an event's first failure to its successful retry, by event_type"),
    (
        CIRCUIT_TRANSITIONS,
        "counter",
        "circuit changes written by this process, by event_type and to: open, half_open, closed, paused, resumed",
    ),
    (
        CIRCUIT_STATE,
        "gauge",
        "each circuit as last read, by store and event_type: 0 closed, 1 half-open, 2 open, 3 paused",
    ),
    (
        SEALED_UNREADABLE,
        "counter",
        "claimed encrypted rows the retrier could not open (key not in its ring), left unrun, by event_type",
    ),
];

pub(crate) const PARKED: &str = "dlq_parked_total";
pub(crate) const PARK_FAILURES: &str = "dlq_park_failures_total";
pub(crate) const RETRIES: &str = "dlq_retries_total";
pub(crate) const RETRY_PANICS: &str = "dlq_retry_panics_total";
pub(crate) const RETRY_TIMEOUTS: &str = "dlq_retry_timeouts_total";
pub(crate) const STORE_ERRORS: &str = "dlq_store_errors_total";
pub(crate) const ADMIN_ACTIONS: &str = "dlq_admin_actions_total";
pub(crate) const OVERFLOW: &str = "dlq_overflow_total";
pub(crate) const ROWS: &str = "dlq_rows";
pub(crate) const OLDEST_DUE: &str = "dlq_oldest_due_seconds";
pub(crate) const LIVE_RETRIERS: &str = "dlq_live_retriers";
pub(crate) const SATURATION: &str = "dlq_saturation_ratio";
pub(crate) const CLAIM_SECONDS: &str = "dlq_claim_duration_seconds";
pub(crate) const HANDLER_SECONDS: &str = "dlq_handler_duration_seconds";
pub(crate) const RECOVERY_SECONDS: &str = "dlq_recovery_seconds";
pub(crate) const CIRCUIT_TRANSITIONS: &str = "dlq_circuit_transitions_total";
pub(crate) const CIRCUIT_STATE: &str = "dlq_circuit_state";
pub(crate) const SEALED_UNREADABLE: &str = "dlq_sealed_unreadable_total";

/// How many event types that no handler of this process registers get an `event_type` label
/// of their own (the first seen); every later one is counted under [`OTHER_EVENT_TYPES`].
pub const MAX_UNREGISTERED_TYPE_LABELS: usize = 100;

/// The longest `event_type` label, in characters; a longer type is cut, ending in `…`.
pub const MAX_TYPE_LABEL_CHARS: usize = 64;

/// The `event_type` label of the event types past [`MAX_UNREGISTERED_TYPE_LABELS`].
pub const OTHER_EVENT_TYPES: &str = "other";

/// How many stores get a `store` label of their own (the first whose circuits this process
/// reads); every later one is counted under [`OTHER_STORES`].
pub const MAX_STORE_LABELS: usize = 20;

/// The `store` label of the stores past [`MAX_STORE_LABELS`].
pub const OTHER_STORES: &str = "other";

/// Labels given out first come, first served, at most `max` of them.
struct Given {
    labels: std::sync::Mutex<std::collections::BTreeSet<String>>,
    max: usize,
}

impl Given {
    const fn new(max: usize) -> Self {
        Self { labels: std::sync::Mutex::new(std::collections::BTreeSet::new()), max }
    }

    /// `label` if it was given out already or there is room for it, else `other`.
    fn label(&self, label: String, other: &str) -> String {
        let Ok(mut given) = self.labels.lock() else { return other.to_owned() };
        if given.contains(&label) || given.len() < self.max {
            given.insert(label.clone());
            return label;
        }
        other.to_owned()
    }
}

/// The unregistered event-type labels given out so far.
static UNREGISTERED: Given = Given::new(MAX_UNREGISTERED_TYPE_LABELS);

/// The store labels given out so far.
static STORES: Given = Given::new(MAX_STORE_LABELS);

/// `text` with its control characters replaced by `.`, cut to [`MAX_TYPE_LABEL_CHARS`]
/// ending in `…`.
fn neutralized(text: &str) -> String {
    let mut label: String = text.chars().map(|c| if c.is_control() { '.' } else { c }).collect();
    if label.chars().count() > MAX_TYPE_LABEL_CHARS {
        label = label.chars().take(MAX_TYPE_LABEL_CHARS - 1).collect();
        label.push('…');
    }
    label
}

/// The `event_type` label of `event_type`: the type itself when a handler of this process
/// registers it; otherwise one of at most [`MAX_UNREGISTERED_TYPE_LABELS`] others, given out
/// first come, first served, after which [`OTHER_EVENT_TYPES`]. Either way control
/// characters become `.` and it is cut to [`MAX_TYPE_LABEL_CHARS`]. So a flood of events
/// parked with endless distinct types (undecodable input, a hostile producer) adds at most
/// that many series to every metric, however long it lasts.
///
/// ```
/// let hostile = format!("t\x1b]0;{}", "x".repeat(1_000));
/// let label = dlq_core::observe::type_label(&hostile);
/// assert!(label.starts_with("t.]0;xx") && label.chars().count() <= dlq_core::observe::MAX_TYPE_LABEL_CHARS);
/// ```
pub fn type_label(event_type: &str) -> String {
    let label = neutralized(event_type);
    if crate::registry::registry().is_ok_and(|r| r.get(event_type).is_ok()) {
        return label;
    }
    UNREGISTERED.label(label, OTHER_EVENT_TYPES)
}

/// The `store` label of `store` ([`QueueStore::store_id`](crate::store::QueueStore::store_id)):
/// its name without credentials (a user and password in an address, a query parameter whose
/// name says password, secret or token), with control characters replaced by `.` and cut to
/// [`MAX_TYPE_LABEL_CHARS`]; at most [`MAX_STORE_LABELS`] of them, the first seen, after which
/// [`OTHER_STORES`]. A store that owns its data (in memory) is `unique-` and a number.
///
/// ```
/// use dlq_core::{observe::store_label, store::StoreId};
///
/// let id = StoreId::named("postgres://app:s3cret@db:5432/app?password=s3cret&schema=dlq");
/// assert_eq!(store_label(&id), "postgres://db:5432/app?schema=dlq");
/// ```
pub fn store_label(store: &crate::store::StoreId) -> String {
    STORES.label(neutralized(&store.text()), OTHER_STORES)
}

/// Registers the description and unit of every `dlq` metric with the installed recorder, so
/// exporters show `# HELP` lines. Call it once after installing a recorder; a
/// [`Retrier`](crate::Retrier) calls it when it starts. Recording works without it.
///
/// ```
/// dlq_core::observe::describe_metrics(); // a no-op without a recorder
/// ```
pub fn describe_metrics() {
    for &(name, kind, help) in METRICS {
        let unit = if name.ends_with("_seconds") { Unit::Seconds } else { Unit::Count };
        match kind {
            "counter" => describe_counter!(name, unit, help),
            "gauge" => describe_gauge!(name, unit, help),
            _ => describe_histogram!(name, unit, help),
        }
    }
}

/// A live-path or dispatcher park.
pub(crate) fn parked(event_type: &str, class: ErrorClass, dead_reason: Option<DeadReason>) {
    let reason = dead_reason.map_or("none", DeadReason::as_str);
    counter!(PARKED, "event_type" => type_label(event_type), "class" => class.as_str(), "dead_reason" => reason)
        .increment(1);
}

/// A park the store did not take.
pub(crate) fn park_failed(event_type: &str) {
    counter!(PARK_FAILURES, "event_type" => type_label(event_type)).increment(1);
}

/// A claimed sealed row the retrier could not open.
pub(crate) fn sealed_unreadable(event_type: &str) {
    counter!(SEALED_UNREADABLE, "event_type" => type_label(event_type)).increment(1);
}

/// One retried row's outcome.
pub(crate) fn retried(event_type: &str, outcome: &'static str) {
    counter!(RETRIES, "event_type" => type_label(event_type), "outcome" => outcome).increment(1);
}

pub(crate) fn retry_panicked(event_type: &str) {
    counter!(RETRY_PANICS, "event_type" => type_label(event_type)).increment(1);
}

pub(crate) fn retry_timed_out(event_type: &str) {
    counter!(RETRY_TIMEOUTS, "event_type" => type_label(event_type)).increment(1);
}

pub(crate) fn store_error() {
    counter!(STORE_ERRORS).increment(1);
}

/// Rows an operator action changed, through `Admin`.
pub(crate) fn admin_action(action: &'static str, rows: u64) {
    if rows > 0 {
        counter!(ADMIN_ACTIONS, "action" => action).increment(rows);
    }
}

/// A park that met a full store: `policy` is the store's overflow policy, `outcome` what
/// happened to the park or to older rows (`rejected`, `dropped` rows, `blocked` waits).
///
/// ```
/// dlq_core::observe::record_overflow("drop_oldest", "dropped", 3); // for store implementers
/// ```
pub fn record_overflow(policy: &'static str, outcome: &'static str, rows: u64) {
    counter!(OVERFLOW, "policy" => policy, "outcome" => outcome).increment(rows);
}

pub(crate) fn claim_took(took: Duration) {
    histogram!(CLAIM_SECONDS).record(took.as_secs_f64());
}

pub(crate) fn handler_took(event_type: &str, took: Duration) {
    histogram!(HANDLER_SECONDS, "event_type" => type_label(event_type)).record(took.as_secs_f64());
}

pub(crate) fn recovered(event_type: &str, after: chrono::Duration) {
    let seconds = after.to_std().unwrap_or_default().as_secs_f64();
    histogram!(RECOVERY_SECONDS, "event_type" => type_label(event_type)).record(seconds);
}

/// A circuit change this process wrote.
pub(crate) fn circuit_transition(event_type: &str, to: &'static str) {
    counter!(CIRCUIT_TRANSITIONS, "event_type" => type_label(event_type), "to" => to).increment(1);
}

/// A circuit of the store labelled `store` ([`store_label`]) as last read.
pub(crate) fn circuit_state(store: &str, event_type: &str, state: crate::record::CircuitState, paused: bool) {
    let value = match (paused, state) {
        (true, _) => 3.0,
        (false, crate::record::CircuitState::Open) => 2.0,
        (false, crate::record::CircuitState::HalfOpen) => 1.0,
        (false, crate::record::CircuitState::Closed) => 0.0,
    };
    gauge!(CIRCUIT_STATE, "store" => store.to_owned(), "event_type" => type_label(event_type)).set(value);
}

/// The store-wide gauges (rows by type and status, oldest due age, live retriers,
/// saturation) for a process that runs no retrier, such as `dlq serve`: a retrier refreshes
/// them every heartbeat; this refreshes them from the same three cheap store calls, never a
/// `count(*)`.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = dlq_core::MemoryStore::new();
/// let mut gauges = dlq_core::observe::StoreGauges::default();
/// gauges.refresh(&store).await; // call it on a timer, not per scrape
/// # });
/// ```
#[derive(Debug, Default)]
pub struct StoreGauges {
    /// Every event type label gauged so far ([`type_label`]): a type whose rows are all purged
    /// reads 0, not its last value.
    seen: std::collections::BTreeSet<String>,
}

impl StoreGauges {
    /// Reads `stats()`, `retriers()` and `capacity()` and sets the gauges; a store error
    /// leaves them as they were.
    pub async fn refresh(&mut self, store: &dyn crate::DeadLetterStore) {
        self.refresh_handling(store, std::iter::empty()).await;
    }

    /// [`refresh`](Self::refresh) for a retrier: the oldest-due age of each type it handles
    /// reads 0 when none is due. Returns the heartbeats read, for the retrier's limits.
    pub(crate) async fn refresh_handling<'a>(
        &mut self,
        store: &(impl crate::DeadLetterStore + ?Sized),
        handled: impl Iterator<Item = &'a str>,
    ) -> Option<Vec<RetrierHeartbeat>> {
        match store.stats().await {
            Ok(stats) => rows(&stats, handled, chrono::Utc::now(), &mut self.seen),
            Err(error) => tracing::debug!(%error, "could not read the row counts for the gauges"),
        }
        let beats = store.retriers().await.ok();
        if let Some(beats) = &beats {
            live_retriers(beats);
        }
        match store.capacity().await {
            Ok(Some(capacity)) => saturation(&capacity),
            // No `max_entries`: nothing can fill up.
            Ok(None) => gauge!(SATURATION).set(0.0),
            Err(_) => {}
        }
        beats
    }
}

/// Sets the row gauges from one `stats()` answer: for the label ([`type_label`]) of every
/// event type in the answer, of every type handled (`handled`) and every label seen before
/// (`seen`), the types of one label added up, `dlq_rows` for each of the
/// five statuses (0 for a status with no rows: a series that is absent until its first row
/// makes `rate()` and absence alerts misfire) and `dlq_oldest_due_seconds` (0 when none is due).
pub(crate) fn rows<'a>(
    stats: &[StatsRow],
    handled: impl Iterator<Item = &'a str>,
    now: chrono::DateTime<chrono::Utc>,
    seen: &mut std::collections::BTreeSet<String>,
) {
    // By label: the types folded into one label (`other`) add up, their oldest due is the oldest.
    let mut by_label: std::collections::BTreeMap<String, (Vec<u64>, f64)> = std::collections::BTreeMap::new();
    seen.extend(handled.map(type_label));
    for label in seen.iter() {
        by_label.insert(label.clone(), (vec![0; Status::ALL.len()], 0.0));
    }
    for row in stats {
        let label = type_label(&row.event_type);
        seen.insert(label.clone());
        let (counts, age) = by_label.entry(label).or_insert_with(|| (vec![0; Status::ALL.len()], 0.0));
        if let Some(i) = Status::ALL.iter().position(|s| *s == row.status) {
            counts[i] += row.count;
        }
        if let Some(due) = row.oldest_due.filter(|_| row.status == Status::Pending) {
            *age = age.max((now - due).to_std().unwrap_or_default().as_secs_f64());
        }
    }
    for (label, (counts, age)) in by_label {
        for (&status, &count) in Status::ALL.iter().zip(&counts) {
            #[allow(clippy::cast_precision_loss, reason = "a gauge is an f64")]
            gauge!(ROWS, "event_type" => label.clone(), "status" => status.as_str()).set(count as f64);
        }
        gauge!(OLDEST_DUE, "event_type" => label).set(age);
    }
}

/// Sets the live retrier gauge.
pub(crate) fn live_retriers(beats: &[RetrierHeartbeat]) {
    #[allow(clippy::cast_precision_loss, reason = "a gauge is an f64")]
    gauge!(LIVE_RETRIERS).set(beats.len() as f64);
}

/// Sets the saturation gauge and logs a warning from [`SATURATION_WARNING`] and an error from
/// [`SATURATION_ERROR`] of the limit.
pub(crate) fn saturation(capacity: &Capacity) {
    let ratio = capacity.saturation();
    gauge!(SATURATION).set(ratio);
    let (entries, max_entries) = (capacity.entries, capacity.max_entries);
    if ratio >= SATURATION_ERROR {
        tracing::error!(entries, max_entries, "dead-letter store {:.0}% full", ratio * 100.0);
    } else if ratio >= SATURATION_WARNING {
        tracing::warn!(entries, max_entries, "dead-letter store {:.0}% full", ratio * 100.0);
    }
}
