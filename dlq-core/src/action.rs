//! The values of operator actions as a store sees them: one batch in one transaction, the
//! rows it refuses and why, resumable operations, payload patches, and store health.
//!
//! The rules that decide what a batch may move live here ([`refusal`]), so every store
//! refuses the same rows for the same reasons.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::record::{AuditNote, DlqId, Payload, Status, hex, unhex};

/// What a batch does to its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// `FAILED_PERMANENTLY → PENDING`, due now, retry count reset, redrive count + 1.
    Redrive,
    /// `PENDING` or `FAILED_PERMANENTLY` → `DISCARDED`: a row being retried, finished or
    /// already discarded is refused.
    Discard,
    /// One RFC 6902 JSON Patch on the payload of each row but `PROCESSING` and `SUCCEEDED`
    /// ones, the status unchanged (`OperatorStore::patch_rows`).
    ///
    Patch,
}

// The action's name in the audit log and in `dlq_operations.action`.
text_forms!(ActionKind { Redrive => "redrive", Discard => "discard", Patch => "patch" });

/// One batch of an operator action, applied by `OperatorStore::apply` in one transaction.
///
#[derive(Debug, Clone, PartialEq)]
pub struct BatchAction {
    /// What to do.
    pub action: ActionKind,
    /// The rows, in ascending id order.
    pub ids: Vec<DlqId>,
    /// Who and why, written to each row's audit entry.
    pub note: AuditNote,
    /// For a redrive: refuse rows already redriven this many times (`None`: no limit).
    pub max_redrives: Option<u32>,
    /// The resumable operation this batch belongs to: its cursor moves in the same transaction.
    pub step: Option<OperationStep>,
}

/// The cursor move of a resumable operation that commits with its batch.
///
/// The store moves the cursor only from `from` (compare-and-set): when another process has
/// already moved it, the whole batch is rolled back with [`Error::Conflict`](crate::Error::Conflict),
/// so no row is moved twice even when two machines resume the same operation at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperationStep {
    /// The operation.
    pub operation: i64,
    /// The cursor this batch started from.
    pub from: DlqId,
    /// The cursor after it: the batch's last id.
    pub to: DlqId,
    /// Rows refused before the store saw them (by validation), added to the operation's count.
    pub refused_before: u64,
}

/// Why a row was not moved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Refused {
    /// No such row.
    NotFound,
    /// The row's status does not allow the action.
    Status {
        /// The row's status.
        status: Status,
    },
    /// The payload was cut to the size limit: it can never succeed until patched whole.
    TooLarge,
    /// The row was already redriven `count` times (the loop guard; `--force` overrides).
    RedriveLimit {
        /// How many times it was redriven.
        count: u32,
    },
    /// Validation refused it: its payload does not deserialize into the handler's event type,
    /// no handler is registered for its type, or the service's validator said no.
    Invalid {
        /// Why.
        message: String,
    },
    /// A patch does not fit the row: a `test` op failed, a path is missing, the payload is
    /// raw, the patch changes nothing, or the result is over the size limit.
    Unfit {
        /// Why, as a dry run shows it.
        message: String,
    },
    /// The row's payload changed between the read that computed the patch and the write: it
    /// is left as it is (run the patch again to patch what it holds now).
    Changed,
    /// The row was already patched by this operation (its audit log says so): a resumed run
    /// never applies a patch twice.
    AlreadyPatched {
        /// The operation.
        operation: i64,
    },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotFound => f.write_str("not found"),
            Self::Status { status } => write!(f, "status is {status}"),
            Self::TooLarge => f.write_str("payload too large (truncated): patch it whole first"),
            Self::RedriveLimit { count } => write!(f, "already redriven {count} times (use --force)"),
            Self::Invalid { message } => write!(f, "invalid: {message}"),
            Self::Unfit { message } => f.write_str(message),
            Self::Changed => f.write_str("the payload changed since it was read: left as it is"),
            Self::AlreadyPatched { operation } => write!(f, "already patched by operation {operation}"),
        }
    }
}

/// A row a batch did not move, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The row.
    pub id: DlqId,
    /// Why.
    #[serde(flatten)]
    pub why: Refused,
}

/// What one batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// The rows moved.
    pub moved: Vec<DlqId>,
    /// The rows refused.
    pub refused: Vec<Refusal>,
}

/// Whether `action` may move a row in `status` (with a cut payload or not, redriven
/// `redrive_count` times): `None` when it may, otherwise why not. Every store asks this.
///
/// ```
/// use dlq_core::store::{refusal, ActionKind, Refused};
/// use dlq_core::Status;
///
/// assert_eq!(refusal(ActionKind::Redrive, Status::FailedPermanently, false, 0, Some(3)), None);
/// assert_eq!(refusal(ActionKind::Redrive, Status::FailedPermanently, false, 3, Some(3)), Some(Refused::RedriveLimit { count: 3 }));
/// assert_eq!(refusal(ActionKind::Redrive, Status::FailedPermanently, true, 0, None), Some(Refused::TooLarge));
/// assert_eq!(refusal(ActionKind::Discard, Status::Processing, false, 0, None), Some(Refused::Status { status: Status::Processing }));
/// assert_eq!(refusal(ActionKind::Discard, Status::Succeeded, false, 0, None), Some(Refused::Status { status: Status::Succeeded }));
/// assert_eq!(refusal(ActionKind::Discard, Status::Pending, false, 0, None), None);
/// ```
pub fn refusal(
    action: ActionKind,
    status: Status,
    truncated: bool,
    redrive_count: u32,
    max_redrives: Option<u32>,
) -> Option<Refused> {
    match action {
        ActionKind::Redrive if status != Status::FailedPermanently => Some(Refused::Status { status }),
        ActionKind::Redrive if truncated => Some(Refused::TooLarge),
        ActionKind::Redrive if max_redrives.is_some_and(|max| redrive_count >= max) => {
            Some(Refused::RedriveLimit { count: redrive_count })
        }
        ActionKind::Discard if !matches!(status, Status::Pending | Status::FailedPermanently) => {
            Some(Refused::Status { status })
        }
        ActionKind::Patch if matches!(status, Status::Processing | Status::Succeeded) => {
            Some(Refused::Status { status })
        }
        _ => None,
    }
}

/// The state of a resumable operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationState {
    /// Started and not finished (or its process died: resume it).
    Running,
    /// Stopped before the end (Ctrl-C, a failed canary): resume it.
    Stopped,
    /// Every matching row was handled.
    Done,
}

// The stored name.
text_forms!(OperationState { Running => "running", Stopped => "stopped", Done => "done" });

/// A stored bulk operation (`dlq_operations`): what it does and how far it got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    /// Its id: `dlq redrive --resume ID`.
    pub id: i64,
    /// The action.
    pub action: ActionKind,
    /// What the admin layer needs to continue it (filter and options), opaque to the store.
    pub spec: serde_json::Value,
    /// Who started it and why.
    pub note: AuditNote,
    /// The last id handled (0 before the first batch); rows are handled in ascending id order.
    pub cursor: DlqId,
    /// Rows moved so far.
    pub moved: u64,
    /// Rows refused so far.
    pub refused: u64,
    /// Where it is.
    pub state: OperationState,
    /// When it started.
    pub created_at: DateTime<Utc>,
    /// When it last moved.
    pub updated_at: DateTime<Utc>,
}

/// One batch of a stored patch operation, written by
/// `OperatorStore::patch_rows` in one transaction
/// with the operation's cursor move.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchBatch {
    /// The rows and their payloads, in ascending id order.
    pub rows: Vec<RowEdit>,
    /// Who and why, written to each row's audit entry.
    pub note: AuditNote,
    /// The RFC 6902 patch, kept in each row's audit entry.
    pub patch: serde_json::Value,
    /// The operation this batch belongs to: its id is kept in each row's audit entry
    /// ([`operation_patch_diff`]), and its cursor moves in the same transaction.
    pub step: OperationStep,
}

/// One row of a [`PatchBatch`]: the payload the patch was computed from, and the result.
#[derive(Debug, Clone, PartialEq)]
pub struct RowEdit {
    /// The row.
    pub id: DlqId,
    /// The payload read before the batch: the row is written only while it still holds it.
    pub old: Payload,
    /// The patched payload.
    pub new: Payload,
}

/// The audit diff of a row written by a stored patch operation: [`patch_diff`] with the
/// operation's id under `"operation"`, the mark [`patched_by`] finds when the operation is
/// resumed, so that no row is patched twice.
///
/// ```
/// use dlq_core::Payload;
/// use dlq_core::store::{operation_patch_diff, patched_by};
///
/// let diff = operation_patch_diff(&Payload::Json(1.into()), &Payload::Json(2.into()), &serde_json::json!([]), 7);
/// assert!(patched_by(&diff, 7) && !patched_by(&diff, 8));
/// ```
pub fn operation_patch_diff(
    old: &Payload,
    new: &Payload,
    patch: &serde_json::Value,
    operation: i64,
) -> serde_json::Value {
    let mut diff = patch_diff(old, new, Some(patch), None);
    diff["operation"] = operation.into();
    diff
}

/// Whether a `patch` audit entry's diff was written by `operation` ([`operation_patch_diff`]).
pub fn patched_by(diff: &serde_json::Value, operation: i64) -> bool {
    diff.get("operation").and_then(serde_json::Value::as_i64) == Some(operation)
}

/// A payload replacement, audited (`OperatorStore::patch`).
#[derive(Debug, Clone, PartialEq)]
pub struct PatchRequest {
    /// The row.
    pub id: DlqId,
    /// The new payload.
    pub payload: Payload,
    /// Who and why.
    pub note: AuditNote,
    /// The RFC 6902 patch that produced it, kept in the audit entry.
    pub patch: Option<serde_json::Value>,
    /// The audit entry this patch undoes.
    pub undo_of: Option<i64>,
}

/// The audit diff of a patch: the old and new payloads (raw bytes as lossy text, and the old
/// bytes in hex so that an undo restores them exactly), the patch, the entry undone.
///
/// ```
/// use dlq_core::Payload;
/// use dlq_core::store::{patch_diff, payload_from_diff};
///
/// let old = Payload::from_bytes(b"\xffnot json");
/// let diff = patch_diff(&old, &Payload::from_bytes(b"{}"), None, None);
/// assert_eq!(payload_from_diff(&diff), Some(old));
/// ```
pub fn patch_diff(
    old: &Payload,
    new: &Payload,
    patch: Option<&serde_json::Value>,
    undo_of: Option<i64>,
) -> serde_json::Value {
    let mut payload = serde_json::json!({ "old": lossy_json(old), "new": lossy_json(new) });
    if let Payload::Raw { bytes, .. } = old {
        payload["old_hex"] = serde_json::Value::String(hex(bytes));
    }
    let mut diff = serde_json::json!({ "payload": payload });
    if let Some(patch) = patch {
        diff["patch"] = patch.clone();
    }
    if let Some(entry) = undo_of {
        diff["undo_of"] = entry.into();
    }
    diff
}

/// The payload a patch's audit diff replaced (what an undo restores), when the diff holds one.
pub fn payload_from_diff(diff: &serde_json::Value) -> Option<Payload> {
    let payload = diff.get("payload")?;
    if let Some(hex) = payload.get("old_hex").and_then(serde_json::Value::as_str) {
        return Some(Payload::Raw { bytes: unhex(hex)?, truncated: None });
    }
    payload.get("old").cloned().map(Payload::Json)
}

/// A payload as JSON: raw bytes as lossy text without NUL (which JSONB rejects).
fn lossy_json(payload: &Payload) -> serde_json::Value {
    match payload {
        Payload::Json(value) => value.clone(),
        Payload::Raw { bytes, .. } => {
            serde_json::Value::String(String::from_utf8_lossy(bytes).replace('\0', "\u{fffd}"))
        }
    }
}

/// The vacuum state of the events table (PostgreSQL's `pg_stat_user_tables`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TableHealth {
    /// Live tuples (an estimate).
    pub live_tuples: u64,
    /// Dead tuples: each slows the claim until a vacuum removes it.
    pub dead_tuples: u64,
    /// Whether autovacuum runs on the table (server setting and table option).
    pub autovacuum: bool,
    /// The last vacuum, manual or automatic.
    pub last_vacuum: Option<DateTime<Utc>>,
}

/// What a store's upkeep (`OperatorStore::maintain`) did.
///
/// ```
/// use dlq_core::store::Maintenance;
///
/// // A benchmark waiting for the vacuum before it measures claims again.
/// let reclaimed = |done: Maintenance| done == Maintenance::Vacuumed;
/// assert!(!reclaimed(Maintenance::Light));
/// ```
///
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Maintenance {
    /// Nothing heavy was due: at most light work (PostgreSQL: folding the tallies its stats
    /// read), or nothing at all.
    Light,
    /// The table of rows was vacuumed: the space of finished rows, which slows every claim,
    /// was reclaimed (PostgreSQL: `VACUUM (ANALYZE)` of `dlq_events`).
    Vacuumed,
}
