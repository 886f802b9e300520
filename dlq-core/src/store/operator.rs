//! The writes of operators: batches, patches, bulk operations, payload upgrades and purges.

use super::*;

/// For store implementers: the primitives of operator actions, each one transaction with its
/// audit entries. Applications act through `Admin`, which adds the reason, the loop guard,
/// validation and resumable bulk walks on top of them.
///
/// ```
/// use dlq_core::store::{NewDeadLetter, prelude::*};
/// use dlq_core::{ErrorClass, ListFilter, MemoryStore, Payload, classify::FailureInfo};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
/// let id = store.park(NewDeadLetter::new("payment", Payload::Json(1.into()), failure)).await?.id;
/// // Nothing finished yet: a purge of everything finished deletes nothing.
/// assert_eq!(store.purge(std::time::Duration::ZERO).await?, 0);
/// assert!(store.get(id).await?.is_some());
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
pub trait OperatorStore: Send + Sync + 'static {
    /// For store implementers; applications act through `Admin`.
    /// Applies one batch of an operator action in one transaction: locks the rows, refuses
    /// those [`refusal`] rules out (and ids that do not exist), moves the others (a redrive:
    /// `FAILED_PERMANENTLY` → `PENDING`, due now, `retry_count` reset, `redrive_count + 1`,
    /// waking retriers; a discard: → `DISCARDED`), audits each with the note and its status
    /// change, and moves the operation's cursor when the batch belongs to one
    /// ([`OperationStep`], compare-and-set: [`Error::Conflict`] rolls the batch back).
    ///
    /// A redrive also clears `dead_reason` and keeps the last failure; a row's audit entry
    /// has the action's [`as_str`](ActionKind::as_str), the note's actor and reason, and the
    /// diff `{"status": [from, to]}`. Refusals come in input order, an unknown id as
    /// [`Refused::NotFound`]. With a step, the operation's `moved` and `refused` grow by the
    /// batch's (its `refused_before` included) and its cursor becomes `step.to`.
    ///
    /// ```
    /// use dlq_core::store::{ActionKind, BatchAction, Refused};
    /// use dlq_core::{store::AuditNote, store::prelude::*, adapter::DeadReason, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload, Status};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "io", "bad".into(), vec![], None);
    /// let dead = store.park(NewDeadLetter::new("payment", Payload::Json(1.into()), failure.clone()).dead(DeadReason::Permanent)).await?.id;
    /// let pending = store.park(NewDeadLetter::new("payment", Payload::Json(2.into()), failure)).await?.id;
    /// let batch = BatchAction {
    ///     action: ActionKind::Redrive,
    ///     ids: vec![dead, pending],
    ///     note: AuditNote::new("alice", "ledger fixed"),
    ///     max_redrives: Some(3),
    ///     step: None,
    /// };
    /// let report = store.apply(batch).await?;
    /// assert_eq!(report.moved, [dead]);
    /// assert_eq!(report.refused[0].why, Refused::Status { status: Status::Pending });
    /// assert_eq!(store.audit(dead).await?[0].reason.as_deref(), Some("ledger fixed"));
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn apply(&self, batch: BatchAction) -> BoxFuture<'_, StoreResult<BatchReport>>;

    /// For store implementers; applications act through `Admin`.
    /// Replaces a row's payload (not while `PROCESSING`, nor once `SUCCEEDED`:
    /// [`Error::InvalidState`]; an unknown id: [`Error::NotFound`]; over
    /// [`max_payload_bytes`](QueueStore::max_payload_bytes), or cut: [`Error::PayloadTooLarge`], as
    /// [`Payload::check_fits`](crate::Payload::check_fits) says), auditing (action `patch`) the
    /// note, the old and new payloads ([`patch_diff`]), the patch and the entry undone. Returns
    /// the audit entry's id. The row's status does not change.
    fn patch(&self, request: PatchRequest) -> BoxFuture<'_, StoreResult<i64>>;

    /// For store implementers; applications act through `Admin`.
    /// Writes one batch of a stored patch operation in one transaction: locks the rows and,
    /// in input order, refuses an unknown id ([`Refused::NotFound`]), a `PROCESSING` or
    /// `SUCCEEDED` row ([`Refused::Status`]), a row with a `patch` audit entry of the same
    /// operation ([`Refused::AlreadyPatched`], checked first: [`patched_by`]), a row whose
    /// payload is no longer `old` ([`Refused::Changed`]), and a `new` payload over
    /// [`max_payload_bytes`](QueueStore::max_payload_bytes) ([`Refused::Unfit`] with the
    /// [`check_fits`](crate::Payload::check_fits) error); writes `new` over each other row's
    /// payload (status unchanged, `updated_at` now) with an audit entry (action `patch`, the
    /// note, the diff [`operation_patch_diff`]); and moves the operation's cursor as
    /// [`apply`](Self::apply) does (compare-and-set, [`Error::Conflict`] rolls everything
    /// back). The audit mark makes the operation exactly-once per row even when a batch is
    /// presented again after its commit.
    ///
    /// ```
    /// use dlq_core::store::{ActionKind, AuditNote, OperationStep, PatchBatch, Refused, RowEdit};
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
    /// use serde_json::json;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "io", "bad".into(), vec![], None);
    /// let old = Payload::Json(json!({"tags": []}));
    /// let id = store.park(NewDeadLetter::new("payment", old.clone(), failure)).await?.id;
    /// let note = AuditNote::new("alice", "tag them");
    /// let op = store.create_operation(ActionKind::Patch, json!({}), note.clone()).await?;
    /// let new = Payload::Json(json!({"tags": ["x"]}));
    /// let batch = PatchBatch {
    ///     rows: vec![RowEdit { id, old, new: new.clone() }],
    ///     note,
    ///     patch: json!([{"op": "add", "path": "/tags/-", "value": "x"}]),
    ///     step: OperationStep { operation: op.id, from: 0, to: id, refused_before: 0 },
    /// };
    /// assert_eq!(store.patch_rows(batch.clone()).await?.moved, [id]);
    /// // The same batch again (from the new cursor): the row is not patched twice.
    /// let again = PatchBatch { step: OperationStep { from: id, ..batch.step }, ..batch };
    /// assert_eq!(store.patch_rows(again).await?.refused[0].why, Refused::AlreadyPatched { operation: op.id });
    /// assert_eq!(store.get(id).await?.unwrap().payload, new);
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn patch_rows(&self, batch: PatchBatch) -> BoxFuture<'_, StoreResult<BatchReport>>;

    /// For store implementers; applications act through `Admin`, and a
    /// retrier calls it after a retry succeeded on an upcast payload. Rewrites a row's payload
    /// and version (not while `PROCESSING`: [`Error::InvalidState`]; a row whose version is not
    /// `upgrade.from`: [`Error::VersionChanged`]; an unknown id: [`Error::NotFound`]; a
    /// payload over [`max_payload_bytes`](QueueStore::max_payload_bytes): [`Error::PayloadTooLarge`]),
    /// auditing (action `upgrade`) the note and [`VersionUpgrade::diff`]. Returns the audit
    /// entry's id. The row's status and `updated_at` do not change.
    fn upgrade(&self, upgrade: VersionUpgrade) -> BoxFuture<'_, StoreResult<i64>>;

    /// For store implementers: stores a new bulk operation of `Admin::start`, `running`,
    /// cursor 0, so that any process can resume it.
    ///
    fn create_operation(
        &self,
        action: ActionKind,
        spec: serde_json::Value,
        note: AuditNote,
    ) -> BoxFuture<'_, StoreResult<Operation>>;

    /// For store implementers: reads a bulk operation.
    fn operation(&self, id: i64) -> BoxFuture<'_, StoreResult<Option<Operation>>>;

    /// For store implementers: sets a bulk operation's state ([`Error::OperationNotFound`]
    /// for an unknown id).
    fn set_operation_state(&self, id: i64, state: OperationState) -> BoxFuture<'_, StoreResult<()>>;

    /// Deletes `SUCCEEDED` and `DISCARDED` rows last updated more than `older_than` ago, with
    /// their attempts and audit entries; returns how many rows. Their ids are not reused, and
    /// their dedupe keys are free.
    fn purge(&self, older_than: Duration) -> BoxFuture<'_, StoreResult<u64>>;

    /// Upkeep a running retrier asks for every `heartbeat` (one call at a time per retrier):
    /// a store whose claims slow down as finished rows pile up cleans up here (PostgreSQL
    /// vacuums its table when the dead tuples pass a threshold, without waiting for
    /// autovacuum, and folds the tallies its stats read). Says whether it vacuumed
    /// ([`Maintenance::Vacuumed`]) or did only light work ([`Maintenance::Light`]). The
    /// default does nothing.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use dlq_core::store::Maintenance;
    /// use dlq_core::{store::prelude::*, MemoryStore};
    /// assert_eq!(MemoryStore::new().maintain().await?, Maintenance::Light, "nothing to clean up in memory");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn maintain(&self) -> BoxFuture<'_, StoreResult<Maintenance>> {
        Box::pin(async { Ok(Maintenance::Light) })
    }
}
