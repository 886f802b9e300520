//! The circuit of each event type as the store keeps it ([`Circuit`]), the compare-and-set
//! write every change goes through ([`CircuitWrite`]), its log ([`CircuitLogEntry`]), what a
//! process knows of one ([`CircuitView`]) and the store it knows it of ([`StoreId`]). The
//! design is in `docs/BREAKER.md`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

/// The breaker state of one event type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CircuitState {
    /// Retries run.
    #[default]
    Closed,
    /// The downstream looks down: the type is not claimed until `open_until`.
    Open,
    /// One trial row runs, on one retrier.
    HalfOpen,
}

// `closed`, `open` or `half_open`, as stored.
text_forms!(CircuitState { Closed => "closed", Open => "open", HalfOpen => "half_open" });

/// One event type's circuit, as stored and shared by every retrier.
///
/// ```
/// let c = dlq_core::store::Circuit::closed("payment");
/// assert_eq!((c.state, c.paused, c.version), (dlq_core::adapter::CircuitState::Closed, false, 0));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Circuit {
    /// The event type.
    pub event_type: String,
    /// The breaker state.
    pub state: CircuitState,
    /// While open: when the next trial may start (the store's clock).
    pub open_until: Option<DateTime<Utc>>,
    /// The current cool-down (doubles with each failed trial).
    #[serde(serialize_with = "ser_secs")]
    pub cool_down: Duration,
    /// While half-open: the retrier running the trial.
    pub trial_owner: Option<String>,
    /// While half-open: when the trial's hold expires (another retrier may then take it).
    pub trial_until: Option<DateTime<Utc>>,
    /// Paused by an operator: not claimed whatever the state.
    pub paused: bool,
    /// Who paused it.
    pub paused_by: Option<String>,
    /// Why it was paused.
    pub pause_reason: Option<String>,
    /// Why the last transition happened.
    pub reason: Option<String>,
    /// The compare-and-set token, bumped by every write; 0 for a type never written.
    pub version: i64,
    /// The last write (the store's clock).
    pub updated_at: Option<DateTime<Utc>>,
}

#[allow(clippy::trivially_copy_pass_by_ref, reason = "the signature serde's `serialize_with` calls")]
fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Circuit {
    /// The circuit of a type never written: closed, not paused, version 0.
    pub fn closed(event_type: &str) -> Self {
        Self {
            event_type: event_type.to_owned(),
            state: CircuitState::Closed,
            open_until: None,
            cool_down: Duration::ZERO,
            trial_owner: None,
            trial_until: None,
            paused: false,
            paused_by: None,
            pause_reason: None,
            reason: None,
            version: 0,
            updated_at: None,
        }
    }

    /// Whether a retrier may claim the type normally (closed and not paused).
    pub fn is_claimable(&self) -> bool {
        self.state == CircuitState::Closed && !self.paused
    }

    /// The write that moves this circuit to `state`, based on this version, by `actor` for
    /// `reason`; the other fields stay as they are until set on the write.
    pub fn write(&self, state: CircuitState, actor: &str, reason: impl Into<String>) -> CircuitWrite {
        CircuitWrite {
            event_type: self.event_type.clone(),
            expected_version: self.version,
            state,
            open_for: None,
            cool_down: self.cool_down,
            trial_owner: None,
            trial_for: None,
            paused: self.paused,
            paused_by: self.paused_by.clone(),
            pause_reason: self.pause_reason.clone(),
            reason: reason.into(),
            actor: actor.to_owned(),
            logged_as: state.as_str(),
        }
    }
}

/// The circuits of a store and the store's clock when they were read: what
/// `FleetStore::circuits` returns. Times in the circuits compare against `at`, never
/// against this host's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Circuits {
    /// The store's clock at the read.
    pub at: DateTime<Utc>,
    /// Every circuit ever written, by event type.
    pub circuits: Vec<Circuit>,
}

impl Circuits {
    /// The store's circuits read at `at`.
    pub fn new(at: DateTime<Utc>, circuits: Vec<Circuit>) -> Self {
        Self { at, circuits }
    }

    /// The circuit of `event_type` (closed when never written).
    pub fn get(&self, event_type: &str) -> Circuit {
        self.circuits
            .iter()
            .find(|c| c.event_type == event_type)
            .cloned()
            .unwrap_or_else(|| Circuit::closed(event_type))
    }
}

/// A compare-and-set write of one circuit (`FleetStore::write_circuit`): applied only
/// while the stored version is still `expected_version` (0: no row yet), then the version is
/// bumped and one [`CircuitLogEntry`] appended. Times are relative to the store's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CircuitWrite {
    /// The event type.
    pub event_type: String,
    /// The version this write is based on.
    pub expected_version: i64,
    /// The new state.
    pub state: CircuitState,
    /// `open_until` = the store's now + this (`None` clears it).
    pub open_for: Option<Duration>,
    /// The new cool-down.
    pub cool_down: Duration,
    /// The trial's holder.
    pub trial_owner: Option<String>,
    /// `trial_until` = the store's now + this (`None` clears it).
    pub trial_for: Option<Duration>,
    /// The pause flag.
    pub paused: bool,
    /// Who paused.
    pub paused_by: Option<String>,
    /// Why it was paused.
    pub pause_reason: Option<String>,
    /// Why, for the circuit and its log.
    pub reason: String,
    /// Who writes: a retrier's owner name or an operator.
    pub actor: String,
    /// What the log calls this change: a state, `paused` or `resumed`.
    pub logged_as: &'static str,
}

impl CircuitWrite {
    /// The circuit after this write over `current` at the store's time `at`, or `None` when
    /// `current.version` is not the expected one (for store implementations).
    ///
    /// ```
    /// use dlq_core::{store::Circuit, adapter::CircuitState};
    /// let now = chrono::Utc::now();
    /// let closed = Circuit::closed("payment");
    /// let open = closed.write(CircuitState::Open, "retrier-1", "ledger down").applied_to(&closed, now).unwrap();
    /// assert_eq!((open.state, open.version), (CircuitState::Open, 1));
    /// assert!(closed.write(CircuitState::Open, "retrier-2", "stale").applied_to(&open, now).is_none());
    /// ```
    pub fn applied_to(&self, current: &Circuit, at: DateTime<Utc>) -> Option<Circuit> {
        if current.version != self.expected_version {
            return None;
        }
        let after = |d: Option<Duration>| d.and_then(|d| chrono::Duration::from_std(d).ok()).map(|d| at + d);
        Some(Circuit {
            event_type: self.event_type.clone(),
            state: self.state,
            open_until: after(self.open_for),
            cool_down: self.cool_down,
            trial_owner: self.trial_owner.clone(),
            trial_until: after(self.trial_for),
            paused: self.paused,
            paused_by: self.paused_by.clone(),
            pause_reason: self.pause_reason.clone(),
            reason: Some(self.reason.clone()),
            version: current.version + 1,
            updated_at: Some(at),
        })
    }
}

/// One change of a circuit, as logged by the store (the audit of pauses and resumes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CircuitLogEntry {
    /// The event type.
    pub event_type: String,
    /// The state before (`closed`, `open`, `half_open`).
    pub from: String,
    /// What happened: the new state, `paused` or `resumed`.
    pub to: String,
    /// Why.
    pub reason: String,
    /// Who: a retrier's owner name or an operator.
    pub actor: String,
    /// When (the store's clock).
    pub at: DateTime<Utc>,
}

impl CircuitLogEntry {
    /// A log entry read back from a store (for store implementations).
    pub fn from_parts(
        event_type: String,
        from: String,
        to: String,
        reason: String,
        actor: String,
        at: DateTime<Utc>,
    ) -> Self {
        Self { event_type, from, to, reason, actor, at }
    }

    /// The log entry of `write` over a circuit in state `from` (for store implementations).
    pub fn new(write: &CircuitWrite, from: CircuitState, at: DateTime<Utc>) -> Self {
        Self {
            event_type: write.event_type.clone(),
            from: from.as_str().to_owned(),
            to: write.logged_as.to_owned(),
            reason: write.reason.clone(),
            actor: write.actor.clone(),
            at,
        }
    }
}

/// What this process knows of one event type's circuit: `circuit()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CircuitView {
    /// The breaker state.
    pub state: CircuitState,
    /// Paused by an operator.
    pub paused: bool,
    /// While open: when the next trial may start (tokio's clock).
    pub probe_at: Option<tokio::time::Instant>,
}

impl CircuitView {
    /// Whether the type's downstream is considered down (open or half-open).
    pub fn is_open(&self) -> bool {
        self.state != CircuitState::Closed
    }

    /// How long until the next trial, while open.
    pub fn next_probe_in(&self) -> Option<Duration> {
        let at = self.probe_at.filter(|_| self.state == CircuitState::Open)?;
        Some(at.saturating_duration_since(tokio::time::Instant::now()))
    }
}

/// Which circuits a store holds: the key of this process's circuit views (`circuit()`,
/// [`circuit_of`](crate::adapter::circuit_of)), returned by `QueueStore::store_id`.
///
/// Two store values that read and write the same circuits (two `PgStore`s on one database
/// and schema, two `SqliteStore`s on one file, clones of one `MemoryStore`) have equal ids,
/// so a retrier running on one keeps the views the other's live path reads; two stores whose
/// circuits differ (another schema, another file, another `MemoryStore`) must not, or one's
/// open circuit would delay the other's parks.
///
/// ```
/// use dlq_core::{store::prelude::*, MemoryStore, store::StoreId};
///
/// let (a, b) = (MemoryStore::new(), MemoryStore::new());
/// assert_eq!(a.store_id(), a.clone().store_id(), "clones share their rows and circuits");
/// assert_ne!(a.store_id(), b.store_id());
/// assert_eq!(StoreId::named("postgres://db:5432/app?schema=dlq"), StoreId::named("postgres://db:5432/app?schema=dlq"));
/// assert_ne!(StoreId::unique(), StoreId::unique());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreId(StoreIdRepr);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum StoreIdRepr {
    Named(std::sync::Arc<str>),
    Unique(u64),
    Address(usize),
}

impl StoreId {
    /// The id of a store whose circuits live where `name` says: the same name for every
    /// store value that reaches the same circuits, e.g. the database's address and schema.
    /// Leave passwords out: the id shows in debug output.
    ///
    /// ```
    /// use dlq_core::store::StoreId;
    ///
    /// let a = StoreId::named("postgres://db:5432/app?schema=dlq");
    /// assert_eq!(a, StoreId::named("postgres://db:5432/app?schema=dlq"), "same schema: same views");
    /// assert_ne!(a, StoreId::named("postgres://db:5432/app?schema=other"));
    /// assert_ne!(StoreId::unique(), StoreId::unique(), "an in-memory store owns its data");
    /// ```
    pub fn named(name: impl Into<String>) -> Self {
        Self(StoreIdRepr::Named(name.into().into()))
    }

    /// A fresh id, never returned again in this process: for a store value that owns its
    /// data (in memory). Take it once, when the store is created, and keep it in the store
    /// (shared by its clones).
    pub fn unique() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Self(StoreIdRepr::Unique(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)))
    }

    /// The id of `store` by its address: `QueueStore::store_id`'s default. Distinct for
    /// two values alive at once, but a store created where a dropped one lived gets the same
    /// id, and sees the dropped one's views until its own circuits are first read.
    pub fn of<T: ?Sized>(store: &T) -> Self {
        Self(StoreIdRepr::Address(std::ptr::from_ref(store).cast::<()>() as usize))
    }

    /// The id as text without credentials, for `store_label`.
    pub(crate) fn text(&self) -> String {
        match &self.0 {
            StoreIdRepr::Named(name) => without_credentials(name),
            StoreIdRepr::Unique(n) => format!("unique-{n}"),
            StoreIdRepr::Address(at) => format!("address-{at:x}"),
        }
    }
}

/// `name` without the user and password of an address (`scheme://user:password@host`) and
/// without the query parameters whose name says password, secret or token.
fn without_credentials(name: &str) -> String {
    let (address, query) = name.split_once('?').unwrap_or((name, ""));
    let mut text = match address.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            let host = rest[..authority_end].rsplit_once('@').map_or(&rest[..authority_end], |(_, host)| host);
            format!("{scheme}://{host}{}", &rest[authority_end..])
        }
        None => address.to_owned(),
    };
    let secret = |key: &str| ["pass", "secret", "token"].iter().any(|s| key.to_ascii_lowercase().contains(s));
    let kept: Vec<&str> =
        query.split('&').filter(|kv| !kv.is_empty() && !secret(kv.split('=').next().unwrap_or(kv))).collect();
    if !kept.is_empty() {
        text.push('?');
        text.push_str(&kept.join("&"));
    }
    text
}
