//! What operators read besides the rows: attempt history ([`AttemptRecord`]), the audit log
//! ([`AuditEntry`], written with an [`AuditNote`]), counts and failure groups
//! ([`StatsRow`], [`FailureGroup`]), and running retriers ([`RetrierHeartbeat`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{DeadLetter, DlqId, Status};

/// One attempt in a row's history (`dlq_attempts`).
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// The row.
    pub dlq_id: DlqId,
    /// 0 for the original failure, then 1, 2, … for retries.
    pub attempt: u32,
    /// `failed`, `succeeded`, `retry`, `dead`.
    pub outcome: String,
    /// The class of the failure, if it failed.
    pub error_class: Option<String>,
    /// The message, if it failed.
    pub error_reason: Option<String>,
    /// Who ran it.
    pub owner: Option<String>,
    /// When.
    pub at: DateTime<Utc>,
}

/// One operator action in the audit log (`dlq_audit`).
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// The entry's own id: `dlq undo ID` names it.
    pub id: i64,
    /// The row.
    pub dlq_id: DlqId,
    /// `redrive`, `patch`, `discard` (an undo is a `patch` whose diff names `undo_of`).
    pub action: String,
    /// Who did it.
    pub actor: String,
    /// Why, as the operator said it.
    pub reason: Option<String>,
    /// What changed, as JSON (`{"status": ["FAILED_PERMANENTLY", "PENDING"]}`, a payload diff).
    pub diff: serde_json::Value,
    /// When.
    pub at: DateTime<Utc>,
}

/// Who does an operator action and why: written to every audit entry the action makes.
///
/// ```
/// let note = dlq_core::store::AuditNote::new("alice", "ledger fixed in INC-42");
/// assert_eq!(note.reason.as_deref(), Some("ledger fixed in INC-42"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditNote {
    /// The operator (the OS user, or the console's authenticated user).
    pub actor: String,
    /// Why; required by the admin layer for discard, patch and undo.
    pub reason: Option<String>,
}

impl AuditNote {
    /// A note with a reason.
    pub fn new(actor: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { actor: actor.into(), reason: Some(reason.into()) }
    }
}

/// A count of rows by event type and status, for `dlq stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsRow {
    /// The event type.
    pub event_type: String,
    /// The status.
    pub status: Status,
    /// How many rows.
    pub count: u64,
    /// For `PENDING`: the oldest `retry_after` that has passed, so `now - oldest_due` is how
    /// long the oldest due row has waited for a retrier; `None` when no row is due.
    pub oldest_due: Option<DateTime<Utc>>,
}

/// A group of alike failures, for `dlq stats` and the console's group page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureGroup {
    /// The shared fingerprint.
    pub fingerprint: String,
    /// The event type.
    pub event_type: String,
    /// The error kind.
    pub kind: String,
    /// One message of the group (the newest row's).
    pub sample_reason: String,
    /// The newest row of the group.
    pub sample_id: DlqId,
    /// How many rows.
    pub count: u64,
    /// When the group's oldest row was parked.
    pub first_seen: DateTime<Utc>,
    /// When its newest row was parked.
    pub last_seen: DateTime<Utc>,
}

/// A running (or dead: see `last_seen`) retrier, from its heartbeat row in the store.
///
/// ```
/// let beat = dlq_core::admin::RetrierHeartbeat::new("host:42:ab12cd34", ["payment"], false);
/// assert_eq!(beat.pid, std::process::id() as i32);
/// assert_eq!(beat.event_types, ["payment"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetrierHeartbeat {
    /// The retrier's owner name, also its `lease_owner`.
    pub owner: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: i32,
    /// The event types it handles.
    pub event_types: Vec<String>,
    /// Whether it runs in singleton mode (then at most one of them claims at a time).
    pub singleton: bool,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it last refreshed the row; rows not refreshed for three heartbeats are removed.
    pub last_seen: DateTime<Utc>,
}

impl RetrierHeartbeat {
    /// The heartbeat of a retrier of this process starting now.
    pub fn new<'a>(owner: &str, event_types: impl IntoIterator<Item = &'a str>, singleton: bool) -> Self {
        let now = Utc::now();
        Self {
            owner: owner.to_owned(),
            host: host_name(),
            pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
            event_types: event_types.into_iter().map(str::to_owned).collect(),
            singleton,
            started_at: now,
            last_seen: now,
        }
    }
}

/// This machine's host name (`localhost` when it has none).
pub(crate) fn host_name() -> String {
    let name = gethostname::gethostname().to_string_lossy().trim().to_owned();
    if name.is_empty() { "localhost".to_owned() } else { name }
}

/// Everything about one row: what `Admin::show` answers.
#[derive(Debug, Clone)]
pub struct Detail {
    /// The row.
    pub letter: DeadLetter,
    /// Every attempt, oldest first.
    pub attempts: Vec<AttemptRecord>,
    /// Every operator action, oldest first.
    pub audit: Vec<AuditEntry>,
}

/// One value a patch changes, at an RFC 6901 JSON Pointer (`null` on a side where the value
/// is absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Where, e.g. `/currency`.
    pub path: String,
    /// The value before (`None`: added).
    pub old: Option<serde_json::Value>,
    /// The value after (`None`: removed).
    pub new: Option<serde_json::Value>,
}

/// How full a store with a row limit is (`ReadStore::capacity`).
///
/// ```
/// let capacity = dlq_core::observe::Capacity { entries: 850, max_entries: 1000, blocks_when_full: false };
/// assert_eq!(capacity.saturation(), 0.85);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Capacity {
    /// Rows in the store.
    pub entries: u64,
    /// The configured limit.
    pub max_entries: u64,
    /// Whether a park waits for room when the store is full (PostgreSQL's `Overflow::Block`),
    /// so a full store stalls the live path instead of refusing.
    pub blocks_when_full: bool,
}

impl Capacity {
    /// `entries / max_entries`; 1.0 when the limit is 0 and a row exists.
    pub fn saturation(&self) -> f64 {
        if self.max_entries == 0 {
            return if self.entries == 0 { 0.0 } else { 1.0 };
        }
        #[allow(clippy::cast_precision_loss, reason = "a ratio: 53 bits of precision are plenty")]
        let ratio = self.entries as f64 / self.max_entries as f64;
        ratio
    }
}
