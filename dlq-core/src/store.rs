//! For store implementers: the types of the claim/settle cycle a retrier drives, beside
//! [`DeadLetterStore`] itself. Applications never need them.
//!
//! A retrier claims due rows ([`ClaimRequest`] → [`Claimed`], each under a [`Lease`]), runs
//! their handlers, and writes every outcome back as a [`Settlement`] fenced by the lease's
//! token ([`SettleReport`] counts the fenced ones). A new store passes the conformance suite
//! of `dlq_core::testing` when it keeps this contract.
//!
//! # Writing a store
//! Implement the required methods of [`DeadLetterStore`] as their docs say, then run
//! `dlq_core::store_conformance_tests!` (feature `testing`) on it. Every method the admin layer,
//! erasure ([`erase`](DeadLetterStore::erase), [`erasures`](DeadLetterStore::erasures)) and
//! payload versions ([`upgrade`](DeadLetterStore::upgrade)) need is required, so a store that
//! lacks one does not compile (the subject key's check value and the count before an erasure,
//! [`subject_key_check`](DeadLetterStore::subject_key_check) and
//! [`count_subject`](DeadLetterStore::count_subject), among them); so are the type catalog's
//! ([`publish_types`](DeadLetterStore::publish_types), [`event_types`](DeadLetterStore::event_types),
//! [`version_schemas`](DeadLetterStore::version_schemas), [`accept_schema`](DeadLetterStore::accept_schema)),
//! which the stock CLI validates payloads with and a retrier checks its versions against. Of the methods with a default, the conformance
//! kit accepts these defaults as they are: `settle_and_claim`, `count`, `count_purgeable`,
//! `created_histogram`, `claim_capped` with `supports_claim_capped` (its test is skipped), `try_lock_singleton`
//! (skipped), `maintain`, `table_health`, `max_payload_bytes`, `capacity` and `store_id`. It
//! does not accept the defaults of [`wait_for_work`](DeadLetterStore::wait_for_work) (it must
//! wake on parks and redrives) nor of the circuit methods
//! ([`circuits`](DeadLetterStore::circuits), [`write_circuit`](DeadLetterStore::write_circuit),
//! [`circuit_log`](DeadLetterStore::circuit_log)). Bulk patches need
//! [`patch_rows`](DeadLetterStore::patch_rows) to keep each row's operation mark in its audit
//! entry and to check it under the row's lock: the kit's `patch_rows_patch_each_row_once`
//! presents a committed batch again and expects no row patched twice. A store kept in one
//! process can hold every table in a `Vec` behind one `Mutex` and do each call's work under the
//! lock: each call is then one transaction. The console (`dlq-web`) and
//! `Admin` work on any store that passes the kit.
//!
//! ```
//! use dlq_core::store::{ClaimRequest, Settlement};
//! use dlq_core::{DeadLetterStore, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload, Status};
//! use std::time::Duration;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let failure = FailureInfo::new(ErrorClass::Transient, "io", "ledger down".into(), vec![], None);
//! let id = store.park(NewDeadLetter::new("payment", Payload::Json(1.into()), failure)).await?.id;
//!
//! let request = ClaimRequest {
//!     event_types: vec!["payment".into()],
//!     limit: 10,
//!     lease: Duration::from_secs(30),
//!     owner: "retrier-1".into(),
//! };
//! let claimed = store.claim(request).await?;
//! assert_eq!(claimed[0].id(), id);
//!
//! let report = store.settle(vec![Settlement::Succeeded { lease: claimed[0].lease }]).await?;
//! assert_eq!((report.applied, report.fenced.len()), (1, 0));
//! assert_eq!(store.get(id).await?.unwrap().status, Status::Succeeded);
//! # Ok::<(), dlq_core::Error>(())
//! # }).unwrap();
//! ```

use std::time::Duration;

use crate::Error;
pub use crate::action::{
    ActionKind, BatchAction, BatchReport, Maintenance, Operation, OperationState, OperationStep, PatchBatch,
    PatchRequest, Refusal, Refused, RowEdit, TableHealth, operation_patch_diff, patch_diff, patched_by,
    payload_from_diff, refusal,
};
pub use crate::catalog::EventTypeInfo;
use crate::record::{
    AttemptRecord, AuditEntry, DeadLetter, DlqId, FailureGroup, ListFilter, RetrierHeartbeat, StatsRow, Status,
};
pub use crate::record::{
    AuditNote, ClaimCap, ClaimRequest, Claimed, DEFAULT_MAX_PAYLOAD_BYTES, DeadReason, Lease, NewDeadLetter, Order,
    Parked, SettleReport, Settlement, SourceMeta, TOO_LARGE_PREVIEW_BYTES, Truncation,
};
pub use crate::upcast::VersionUpgrade;
/// A boxed, sendable future (from `futures-util`): the return type of [`DeadLetterStore`]
/// methods, so the trait stays usable as `dyn DeadLetterStore`.
pub use futures_util::future::BoxFuture;

/// A point in a store's stream of wake-ups ([`DeadLetterStore::work_ticket`]).
///
/// ```
/// use dlq_core::store::WorkSignal;
///
/// let signal = WorkSignal::new();
/// let before = signal.ticket();
/// signal.announce();
/// assert_ne!(signal.ticket(), before, "an announcement moves the ticket on");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkTicket(u64);

/// The wake-ups of a store in one process, for implementers: [`announce`](Self::announce)
/// after a write that makes work due (a park, a redrive, a retry due again);
/// [`ticket`](Self::ticket) and [`wait`](Self::wait) implement
/// [`DeadLetterStore::work_ticket`] and [`DeadLetterStore::wait_for_work`]. Unlike a bare
/// `tokio::sync::Notify`, an announcement made while nobody waits is not lost: a wait on an
/// older ticket returns at once. Clones share the signal.
///
/// ```
/// use std::time::Duration;
/// use dlq_core::store::WorkSignal;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let signal = WorkSignal::new();
/// let ticket = signal.ticket();
/// signal.announce(); // nobody waits yet
/// tokio::time::timeout(Duration::from_secs(10), signal.wait(ticket, Duration::from_secs(3600))).await.unwrap();
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct WorkSignal {
    epoch: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
}

impl WorkSignal {
    /// A signal nobody has announced on.
    pub fn new() -> Self {
        Self { epoch: std::sync::Arc::new(tokio::sync::watch::Sender::new(0)) }
    }

    /// Work may be due: wakes every waiter, and every later wait on an older ticket.
    pub fn announce(&self) {
        self.epoch.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Where the announcements stand now.
    pub fn ticket(&self) -> WorkTicket {
        WorkTicket(*self.epoch.borrow())
    }

    /// Returns once an announcement was made after `after` was taken (at once if one was
    /// already), or after `max`.
    pub async fn wait(&self, after: WorkTicket, max: Duration) {
        let mut epoch = self.epoch.subscribe();
        let _ = tokio::time::timeout(max, epoch.wait_for(|now| *now != after.0)).await;
    }
}

impl Default for WorkSignal {
    fn default() -> Self {
        Self::new()
    }
}

/// The result type of store operations.
pub type StoreResult<T> = Result<T, Error>;

/// Durable storage of dead letters.
///
/// Implementations: [`MemoryStore`](crate::MemoryStore) here; `PgStore` and `SqliteStore`
/// in `dlq-sqlx`. All keep the same semantics, checked by one conformance suite:
///
/// - `park` with an event type and dedupe key that a live row (`PENDING`, `PROCESSING`,
///   `FAILED_PERMANENTLY`) already holds returns that row's id, `deduplicated: true`, and
///   stores nothing; the same key under another event type, or a key whose rows all finished
///   (`SUCCEEDED`, `DISCARDED`), parks a new row;
/// - `claim` moves due `PENDING` rows, and `PROCESSING` rows whose lease expired, to
///   `PROCESSING` with a fresh token, each event type an equal share of the batch, its oldest
///   `retry_after` first, skipping rows others hold;
/// - `settle` writes an outcome only while the presented token still holds the row; a stale
///   token changes nothing and is reported in [`SettleReport::fenced`];
/// - [`apply`](Self::apply) and [`patch`](Self::patch), the primitives of operator actions,
///   change rows only with an audit entry (actor, reason, diff) in the same transaction.
///
/// Applications read rows through the trait, and act on them (redrive, discard, patch, undo)
/// only through `Admin`, which adds what operators rely on: a reason
/// for the audit log, the loop guard, validation, and bulk actions that walk every matching
/// row in resumable batches. The methods it calls ([`apply`](Self::apply),
/// [`patch`](Self::patch), [`audit_entry`](Self::audit_entry) and the operation methods) are
/// for store implementers.
///
/// ```
/// use dlq_core::{DeadLetterStore, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let failure = FailureInfo::new(ErrorClass::Permanent, "io", "bad".into(), vec![], None);
/// let letter = NewDeadLetter::new("payment", Payload::Json(serde_json::json!({})), failure);
/// let parked = store.park(letter).await?;
/// assert_eq!(store.get(parked.id).await?.unwrap().event_type, "payment");
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
pub trait DeadLetterStore: Send + Sync + 'static {
    /// Parks one failed event.
    ///
    /// Unless a live row holds its event type and dedupe key (then that row's id comes back,
    /// `deduplicated: true`, and nothing is written, no attempt either), it stores
    /// `letter.fit(self.max_payload_bytes())` (a payload over the limit, or already cut, is
    /// kept cut and parked dead `too_large`, [`Parked::truncated`]) as a new row with a new,
    /// never reused id: in [`letter.status()`](NewDeadLetter::status), with `created_at`,
    /// `updated_at` and `first_failed_at` now, `retry_after` now + `retry_delay` (saturating:
    /// a huge delay is never due), the letter's other fields as they are, no lease
    /// ([`DeadLetter::new`] builds such a row). It appends attempt 0 to the row's history:
    /// outcome `failed`, the failure's class and reason, no owner. Then it wakes
    /// [`wait_for_work`](Self::wait_for_work).
    fn park(&self, letter: NewDeadLetter) -> BoxFuture<'_, StoreResult<Parked>>;

    /// Parks many failed events in one write; ids come back in input order. Each letter is
    /// parked as by [`park`](Self::park), in order: a later letter of the batch dedupes
    /// against an earlier one.
    fn park_many(&self, letters: Vec<NewDeadLetter>) -> BoxFuture<'_, StoreResult<Vec<Parked>>>;

    /// Claims due rows for a retry: of the request's event types, `PENDING` rows whose
    /// `retry_after` passed and `PROCESSING` rows whose `lease_until` passed, at most `limit`,
    /// each event type an equal share of them, its oldest first in `(retry_after, id)` order
    /// (a share a type cannot fill goes to the others: [`ClaimRequest::share`]), so that one
    /// type's backlog never holds back another type's due rows. Each becomes `PROCESSING` under a fresh
    /// token, with `lease_owner` the request's owner, `lease_until` now + `lease`
    /// (saturating), and `last_attempt_at` and `updated_at` now; it comes back as
    /// [`Claimed::of`] the updated row.
    fn claim(&self, request: ClaimRequest) -> BoxFuture<'_, StoreResult<Vec<Claimed>>>;

    /// Writes the outcomes of retries, each fenced by its lease token. A
    /// [`Settlement::Repeated`] (attempts a retrier ran back to back under one claim) is
    /// written as its earlier failures, each a counted retry appended to the attempt history,
    /// then its final outcome ([`Settlement::earlier_failures`], [`Settlement::last`] and
    /// [`Settlement::counted`] give the parts); `store_conformance_tests!` checks it.
    ///
    /// A lease holds its row while the row is `PROCESSING` under its token and `lease_until`
    /// has not passed: an expired lease is fenced even when nobody claimed the row again, and
    /// a token is spent by its first outcome (a second outcome of the same lease is fenced).
    /// Fenced ids are reported in input order. A written outcome clears the lease
    /// (`lease_owner`, `lease_until`), sets `updated_at`, and:
    /// - `Succeeded`: `SUCCEEDED`, the failure kept;
    /// - `Retry`: `PENDING`, `retry_count + 1`, `retry_after` now + `delay`, the new failure;
    /// - `Dead`: `FAILED_PERMANENTLY` with its reason and failure, `retry_count + 1` when it
    ///   `counts`;
    /// - `Release`: `PENDING`, due now, nothing counted or recorded.
    ///
    /// Every attempt but a release is appended to the row's history
    /// ([`attempts`](Self::attempts)): numbered the row's `retry_count` before it + 1 (so the
    /// numbers start again at 1 after a redrive), with its outcome name
    /// ([`Settlement::outcome_name`]; `retry` for each earlier failure of a `Repeated`), the
    /// class and reason of its failure (none for a success) and the lease's owner. An outcome
    /// that leaves the row pending ([`Settlement::pending_again`]) wakes
    /// [`wait_for_work`](Self::wait_for_work).
    fn settle(&self, outcomes: Vec<Settlement>) -> BoxFuture<'_, StoreResult<SettleReport>>;

    /// Writes the outcomes of one batch, then claims the next: what a retrier's claim loop
    /// does between two batches. The default makes the two calls one after the other;
    /// PostgreSQL does both in one statement (one round trip and one commit instead of two).
    /// Rows that the outcomes leave due at once may or may not be among those claimed (the
    /// default's claim sees them; PostgreSQL's single statement does not).
    ///
    /// The claim's own result comes back beside the report: when the outcomes were written
    /// and the claim failed, the caller still learns what was written.
    ///
    /// # Errors
    /// The outcome write's error; nothing was claimed then either.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlq_core::store::{ClaimRequest, Settlement};
    /// use dlq_core::{DeadLetterStore, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "503".into(), vec![], None);
    /// for n in 0..4 {
    ///     let letter = NewDeadLetter::new("payment", Payload::Json(n.into()), failure.clone());
    ///     store.park(letter.retry(Duration::ZERO, 5)).await?;
    /// }
    /// let request = ClaimRequest {
    ///     event_types: vec!["payment".into()],
    ///     limit: 2,
    ///     lease: Duration::from_secs(60),
    ///     owner: "doc".into(),
    /// };
    /// let first = store.claim(request.clone()).await?;
    /// let done = first.iter().map(|c| Settlement::Succeeded { lease: c.lease }).collect();
    /// let (report, next) = store.settle_and_claim(done, request).await?;
    /// assert_eq!(report.applied, 2);
    /// assert_eq!(next?.len(), 2, "the other two rows");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn settle_and_claim(
        &self,
        outcomes: Vec<Settlement>,
        next: ClaimRequest,
    ) -> BoxFuture<'_, StoreResult<(SettleReport, StoreResult<Vec<Claimed>>)>> {
        Box::pin(async move {
            let report = self.settle(outcomes).await?;
            Ok((report, self.claim(next).await))
        })
    }

    /// Where the store's wake-ups stand now: taken before looking for work (before a claim),
    /// handed to [`wait_for_work`](Self::wait_for_work), so that work announced between the
    /// two is not missed. The default (no wake-ups) is always the same ticket.
    fn work_ticket(&self) -> WorkTicket {
        WorkTicket::default()
    }

    /// Waits until new work may be due (a park, a redrive, a retry made due) since `after`
    /// was taken ([`work_ticket`](Self::work_ticket)), or `max` elapsed. It returns at once
    /// when work was announced after the ticket, even before this call: a retrier that
    /// claimed nothing and then waits does not sleep through a park that committed in
    /// between.
    ///
    /// The default sleeps for `max`; stores with a notification channel wake earlier
    /// ([`WorkSignal`] does it in one process). The conformance kit requires a wake-up soon
    /// after a park, after a redrive, and for an announcement made between the ticket and the
    /// wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlq_core::{DeadLetterStore, ErrorClass, classify::FailureInfo, MemoryStore, Payload, store::NewDeadLetter};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// let ticket = store.work_ticket(); // before the claim that found nothing
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// store.park(NewDeadLetter::new("payment", Payload::Json(1.into()), failure)).await?;
    /// // The park came before the wait: the wait returns at once, not after an hour.
    /// tokio::time::timeout(Duration::from_secs(10), store.wait_for_work(ticket, Duration::from_secs(3600)))
    ///     .await
    ///     .expect("woken");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn wait_for_work(&self, after: WorkTicket, max: Duration) -> BoxFuture<'_, ()> {
        let _ = after;
        Box::pin(tokio::time::sleep(max))
    }

    /// Reads one row.
    fn get(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Option<DeadLetter>>>;

    /// Lists the rows [`filter.matches`](ListFilter::matches) (every field of the filter, the
    /// keyset `after` included), in `filter.order` (by id: newest first by default), at most
    /// `filter.limit`.
    fn list(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>>;

    /// Counts rows by event type and status: one row per pair that has rows, ordered by event
    /// type, then status in lifecycle order ([`Status`]'s `Ord`), with
    /// [`oldest_due`](StatsRow::oldest_due) for `PENDING`.
    fn stats(&self) -> BoxFuture<'_, StoreResult<Vec<StatsRow>>>;

    /// Groups the `PENDING` and `FAILED_PERMANENTLY` rows that `filter` matches by event type
    /// and fingerprint, largest group first, at most `filter.limit` groups; each group's
    /// sample (id, reason) and kind are its newest row's.
    fn groups(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<FailureGroup>>>;

    /// The attempt history of one row, oldest first.
    fn attempts(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AttemptRecord>>>;

    /// The audit log of one row, oldest first.
    fn audit(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AuditEntry>>>;

    /// Deletes `SUCCEEDED` and `DISCARDED` rows last updated more than `older_than` ago, with
    /// their attempts and audit entries; returns how many rows. Their ids are not reused, and
    /// their dedupe keys are free.
    fn purge(&self, older_than: Duration) -> BoxFuture<'_, StoreResult<u64>>;

    /// Counts the rows [`purge`](Self::purge) would delete now (what `dlq purge` shows before
    /// it asks). The default pages through the `SUCCEEDED` and `DISCARDED` rows parked
    /// before the cutoff; the SQL stores count in one statement.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlq_core::{DeadLetterStore, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// store.park(NewDeadLetter::new("payment", Payload::Json(1.into()), failure)).await?;
    /// assert_eq!(store.count_purgeable(Duration::ZERO).await?, 0, "a pending row is never purged");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn count_purgeable(&self, older_than: Duration) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(async move {
            let cutoff = chrono::Duration::from_std(older_than)
                .ok()
                .and_then(|age| chrono::Utc::now().checked_sub_signed(age))
                .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
            let mut total = 0;
            for status in [Status::Succeeded, Status::Discarded] {
                let mut after = None;
                loop {
                    // A row last updated before the cutoff was parked before it too.
                    let mut page = ListFilter::default().status(status).oldest_first().limit(1_000);
                    page.until = Some(cutoff);
                    page.after = after;
                    let rows = self.list(page).await?;
                    total += rows.iter().filter(|r| r.updated_at < cutoff).count() as u64;
                    match rows.last() {
                        Some(last) if rows.len() == 1_000 => after = Some(last.id),
                        _ => break,
                    }
                }
            }
            Ok(total)
        })
    }

    /// Counts the rows matching `filter`, at most `filter.limit` (a bounded count: growth over
    /// a window, a dry run's size).
    fn count(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(async move { Ok(self.list(filter).await?.len() as u64) })
    }

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
    /// use dlq_core::{store::AuditNote, DeadLetterStore, adapter::DeadReason, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload, Status};
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
    /// [`max_payload_bytes`](Self::max_payload_bytes), or cut: [`Error::PayloadTooLarge`], as
    /// [`Payload::check_fits`](crate::Payload::check_fits) says), auditing (action `patch`) the
    /// note, the old and new payloads ([`patch_diff`]), the patch and the entry undone. Returns
    /// the audit entry's id. The row's status does not change.
    fn patch(&self, request: PatchRequest) -> BoxFuture<'_, StoreResult<i64>>;

    /// For store implementers; applications act through `Admin`, and a
    /// retrier calls it after a retry succeeded on an upcast payload. Rewrites a row's payload
    /// and version (not while `PROCESSING`: [`Error::InvalidState`]; a row whose version is not
    /// `upgrade.from`: [`Error::VersionChanged`]; an unknown id: [`Error::NotFound`]; a
    /// payload over [`max_payload_bytes`](Self::max_payload_bytes): [`Error::PayloadTooLarge`]),
    /// auditing (action `upgrade`) the note and [`VersionUpgrade::diff`]. Returns the audit
    /// entry's id. The row's status and `updated_at` do not change.
    fn upgrade(&self, upgrade: VersionUpgrade) -> BoxFuture<'_, StoreResult<i64>>;

    /// For store implementers; applications act through `Admin`.
    /// Writes one batch of a stored patch operation in one transaction: locks the rows and,
    /// in input order, refuses an unknown id ([`Refused::NotFound`]), a `PROCESSING` or
    /// `SUCCEEDED` row ([`Refused::Status`]), a row with a `patch` audit entry of the same
    /// operation ([`Refused::AlreadyPatched`], checked first: [`patched_by`]), a row whose
    /// payload is no longer `old` ([`Refused::Changed`]), and a `new` payload over
    /// [`max_payload_bytes`](Self::max_payload_bytes) ([`Refused::Unfit`] with the
    /// [`check_fits`](crate::Payload::check_fits) error); writes `new` over each other row's
    /// payload (status unchanged, `updated_at` now) with an audit entry (action `patch`, the
    /// note, the diff [`operation_patch_diff`]); and moves the operation's cursor as
    /// [`apply`](Self::apply) does (compare-and-set, [`Error::Conflict`] rolls everything
    /// back). The audit mark makes the operation exactly-once per row even when a batch is
    /// presented again after its commit.
    ///
    /// ```
    /// use dlq_core::store::{ActionKind, AuditNote, OperationStep, PatchBatch, Refused, RowEdit};
    /// use dlq_core::{DeadLetterStore, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
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

    /// For store implementers: one audit entry by its id (what `Admin::undo` reads).
    ///
    fn audit_entry(&self, id: i64) -> BoxFuture<'_, StoreResult<Option<AuditEntry>>>;

    /// Marks the rows of `leases` as claimed by a retrier that could not open them (sealed
    /// under a key it does not hold, [`crate::sealed`]), under that claim: the row is counted
    /// by [`count_unreadable`](Self::count_unreadable) while that claim is its latest (status
    /// `PROCESSING`, the same lease token), whichever process asks. A retrier that can open
    /// it claims it again in time (a new token) and runs it: it is no longer counted. A lease
    /// that no longer holds its row marks nothing. The default marks nothing; the conformance
    /// kit checks a store that counts (`unreadable_rows_are_counted`).
    fn mark_unreadable(&self, leases: Vec<Lease>) -> BoxFuture<'_, StoreResult<()>> {
        let _ = leases;
        Box::pin(async { Ok(()) })
    }

    /// How many rows are left unreadable under their latest claim
    /// ([`mark_unreadable`](Self::mark_unreadable)): what `dlq stats` and
    /// `health` report. The default says the store does not count
    /// them ([`Error::Unsupported`]).
    fn count_unreadable(&self) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(async { Err(unsupported("counting unreadable sealed rows")) })
    }

    /// For store implementers; applications reveal through
    /// `Admin::reveal`. Records that an operator was shown row
    /// `id` whole (its redacted fields, its sealed payload opened): an audit entry with action
    /// `reveal`, the note's actor and reason and an empty object as its diff; returns its id.
    /// [`Error::NotFound`] for an unknown id. The default refuses ([`Error::Unsupported`]): a
    /// store that cannot audit a reveal reveals nothing. The conformance kit expects it
    /// (`reveal_is_audited`).
    fn reveal(&self, id: DlqId, note: AuditNote) -> BoxFuture<'_, StoreResult<i64>> {
        let _ = (id, note);
        Box::pin(async { Err(unsupported("auditing a reveal")) })
    }

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

    /// Rows created per event type in `buckets` consecutive buckets of `step` from `since`
    /// (the console's charts): one entry per type and bucket that has rows. The default counts
    /// each bucket of each type with [`count`](Self::count); the SQL stores answer with one
    /// grouped query over the `created_at` index. PostgreSQL answers windows of whole hours
    /// that start on the hour (within the last 30 days) from its hourly count of parks, kept
    /// by the table's triggers: there a row counts in the hour it was parked even after a
    /// purge removed it.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use dlq_core::{DeadLetterStore, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
    /// use std::time::Duration;
    ///
    /// let store = MemoryStore::new();
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// store.park(NewDeadLetter::new("payment", Payload::from_bytes(b"{}"), failure)).await?;
    /// // Eight buckets of 15 minutes from 50 minutes ago: the row created now is in bucket 3.
    /// let since = chrono::Utc::now() - chrono::TimeDelta::minutes(50);
    /// let buckets = store.created_histogram(since, Duration::from_secs(900), 8).await?;
    /// assert_eq!((buckets.len(), buckets[0].bucket, buckets[0].count), (1, 3, 1));
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn created_histogram(
        &self,
        since: chrono::DateTime<chrono::Utc>,
        step: Duration,
        buckets: u32,
    ) -> BoxFuture<'_, StoreResult<Vec<HistogramBucket>>> {
        Box::pin(async move {
            let step = histogram_step(step)?;
            let mut types: Vec<String> = self.stats().await?.into_iter().map(|row| row.event_type).collect();
            types.sort();
            types.dedup();
            let mut found = Vec::new();
            for event_type in types {
                for bucket in 0..buckets {
                    let from = since + step * i32::try_from(bucket).unwrap_or(i32::MAX);
                    let filter =
                        ListFilter::default().event_type(&event_type).since(from).until(from + step).limit(usize::MAX);
                    let count = self.count(filter).await?;
                    if count > 0 {
                        found.push(HistogramBucket { event_type: event_type.clone(), bucket, count });
                    }
                }
            }
            Ok(found)
        })
    }

    /// Claims like [`claim`](Self::claim), for the one event type of `request`, within `cap`
    /// as a whole: the rows of that type under a live lease and those claimed within the
    /// cap's window, by any process sharing the store, are counted, the claim takes what the
    /// cap leaves (possibly nothing), and its rows are recorded, all in one atomic step. The
    /// retrier uses it for types with `max-concurrent`, `max-rate` or a ramp when
    /// [`supports_claim_capped`](Self::supports_claim_capped) says the store can; otherwise
    /// each retrier keeps its share of the limits. The default refuses.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use dlq_core::store::{ClaimCap, ClaimRequest};
    /// use dlq_core::{DeadLetterStore, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
    /// use std::time::Duration;
    ///
    /// let store = MemoryStore::new();
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// for n in 0..10 {
    ///     store.park(NewDeadLetter::new("payment", Payload::Json(n.into()), failure.clone())).await?;
    /// }
    /// let request = ClaimRequest {
    ///     event_types: vec!["payment".into()],
    ///     limit: 10,
    ///     lease: Duration::from_secs(60),
    ///     owner: "doc".into(),
    /// };
    /// let cap = ClaimCap { in_flight: Some(4), starts: None };
    /// assert!(store.supports_claim_capped());
    /// assert_eq!(store.claim_capped(request.clone(), cap).await?.len(), 4);
    /// assert_eq!(store.claim_capped(request, cap).await?.len(), 0, "4 are still held");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn claim_capped(&self, request: ClaimRequest, cap: ClaimCap) -> BoxFuture<'_, StoreResult<Vec<Claimed>>> {
        let _ = (request, cap);
        Box::pin(async { Err(unsupported("claim caps")) })
    }

    /// Whether [`claim_capped`](Self::claim_capped) works on this store. The default: no.
    fn supports_claim_capped(&self) -> bool {
        false
    }

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
    /// use dlq_core::{DeadLetterStore, MemoryStore};
    /// assert_eq!(MemoryStore::new().maintain().await?, Maintenance::Light, "nothing to clean up in memory");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn maintain(&self) -> BoxFuture<'_, StoreResult<Maintenance>> {
        Box::pin(async { Ok(Maintenance::Light) })
    }

    /// The vacuum state of the events table, for stores that have one (PostgreSQL): dead
    /// tuples slow every claim until a vacuum removes them. The default knows nothing.
    fn table_health(&self) -> BoxFuture<'_, StoreResult<Option<TableHealth>>> {
        Box::pin(async { Ok(None) })
    }

    /// The largest payload this store keeps whole, in bytes
    /// ([`DEFAULT_MAX_PAYLOAD_BYTES`] unless configured).
    /// A larger one is cut and parked dead ([`DeadReason::TooLarge`]).
    /// The live path and a [`Dispatcher`](crate::adapter::Dispatcher) read it to decide "too large" and
    /// cut the event themselves before they call [`park`](Self::park), so a store must report
    /// the limit its `park` applies.
    fn max_payload_bytes(&self) -> usize {
        crate::store::DEFAULT_MAX_PAYLOAD_BYTES
    }

    /// How full the store is, when it has a row limit (`None` otherwise, the default).
    /// `health()` and the retriers' saturation gauge read it; a store may
    /// count its rows to answer, so it is not called per park.
    fn capacity(&self) -> BoxFuture<'_, StoreResult<Option<crate::record::Capacity>>> {
        Box::pin(async { Ok(None) })
    }

    /// Inserts or refreshes the heartbeat row of `beat.owner` (`last_seen` now; a refresh
    /// keeps the row's `started_at`), and removes the rows of retriers not seen for
    /// `expire_after` (they crashed or were killed).
    fn heartbeat(&self, beat: &RetrierHeartbeat, expire_after: Duration) -> BoxFuture<'_, StoreResult<()>>;

    /// Removes the heartbeat row of `owner` (a retrier that stops).
    fn remove_heartbeat(&self, owner: &str) -> BoxFuture<'_, StoreResult<()>>;

    /// The heartbeat rows of the retriers sharing this store, oldest `started_at` first.
    fn retriers(&self) -> BoxFuture<'_, StoreResult<Vec<RetrierHeartbeat>>>;

    /// Which circuits this store holds: the key under which this process keeps what it knows
    /// of them (`circuit_of`, and `circuit()` for the live path's store). Two store values that read and write the same circuits return
    /// equal ids; two whose circuits differ must not (see [`StoreId`]).
    ///
    /// The default is the store's address ([`StoreId::of`]): right for a store that owns its
    /// circuits and lives as long as the process, but a store created where a dropped one
    /// lived would see the dropped one's views until its circuits are first read. A store
    /// created and dropped many times keeps a [`StoreId::unique`] taken at its creation; a
    /// store on a database names the database and schema ([`StoreId::named`]), so that two
    /// values on the same one share their views. A store that wraps another and forwards its
    /// circuits forwards this too.
    ///
    /// ```
    /// use dlq_core::{DeadLetterStore, MemoryStore};
    /// let store = MemoryStore::new();
    /// assert_eq!(store.store_id(), store.clone().store_id());
    /// assert_ne!(store.store_id(), MemoryStore::new().store_id());
    /// ```
    fn store_id(&self) -> StoreId {
        StoreId::of(self)
    }

    /// Every circuit written so far, with the store's clock (see `docs/BREAKER.md`). Types
    /// never written are closed. The default has no circuits ([`Error::Unsupported`]): the
    /// retrier then keeps its breakers in its own process. The conformance kit expects
    /// circuits (`circuits_compare_and_set`, `circuit_trial_taken_once`): a store keeps them
    /// as a table of [`Circuit`]s, written by [`write_circuit`](Self::write_circuit).
    fn circuits(&self) -> BoxFuture<'_, StoreResult<Circuits>> {
        Box::pin(async { Err(unsupported("circuits")) })
    }

    /// Writes one circuit by compare-and-set ([`CircuitWrite::applied_to`]) and appends the
    /// change to the circuit log, in one transaction: `Some(circuit)` as written, `None` when
    /// the stored version was not `write.expected_version` (nothing written). In one process:
    /// under the table's lock, `write.applied_to(&current, now)` (current being
    /// [`Circuit::closed`] for a type never written), and the log entry
    /// [`CircuitLogEntry::new`]`(&write, current.state, now)`.
    fn write_circuit(&self, write: CircuitWrite) -> BoxFuture<'_, StoreResult<Option<Circuit>>> {
        let _ = write;
        Box::pin(async { Err(unsupported("circuits")) })
    }

    /// The last `limit` circuit changes, newest first, of one type or of all.
    fn circuit_log(
        &self,
        event_type: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<CircuitLogEntry>>> {
        let _ = (event_type, limit);
        Box::pin(async { Err(unsupported("circuits")) })
    }

    /// For store implementers; applications erase through
    /// `Admin::erase`. Deletes every row stored under
    /// `request.subject` ([`NewDeadLetter::subject`]), whatever its status, with its attempts
    /// and audit entries, and records the erasure ([`Erasure`]: the hash's first
    /// [`RECORDED_PREFIX`](crate::subject::RECORDED_PREFIX) digits, the three counts, the
    /// note's actor and reason), all in one transaction.
    fn erase(&self, request: EraseRequest) -> BoxFuture<'_, StoreResult<Erasure>>;

    /// The newest `limit` erasure records ([`erase`](Self::erase)), newest first.
    fn erasures(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<Erasure>>>;

    /// For store implementers; `Admin::erase` and the live path
    /// call it. Keeps `check` as the check value of the subject key
    /// ([`SubjectKey::check`](crate::subject::SubjectKey::check)) unless the store keeps one
    /// already, and returns the one it keeps (`check` itself the first time), atomically: two
    /// first calls with different values both get the value of the one that won. Kept until
    /// the store is dropped; nothing else changes it.
    fn subject_key_check(&self, check: KeyCheck) -> BoxFuture<'_, StoreResult<KeyCheck>>;

    /// For store implementers: how many rows are stored under `subject`, whatever their
    /// status (what [`erase`](Self::erase) would delete now).
    fn count_subject(&self, subject: SubjectHash) -> BoxFuture<'_, StoreResult<u64>>;

    /// Writes records of the type catalog ([`crate::catalog`]), one per event type, in one
    /// transaction: a record whose type the catalog lacks is added; one whose version is the
    /// same as or newer than the stored record's replaces it; one with an older version
    /// changes nothing (the newest version wins: a process left on an old version during a
    /// rolling deploy does not hide the new contract). [`merge`](crate::catalog::merge) does
    /// it for a catalog kept in memory.
    ///
    /// ```
    /// use dlq_core::{DeadLetterStore, MemoryStore, catalog::EventTypeInfo};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// store.publish_types(vec![EventTypeInfo::new("payment", 2, "new-pod")]).await?;
    /// store.publish_types(vec![EventTypeInfo::new("payment", 1, "old-pod")]).await?;
    /// assert_eq!(store.event_types().await?[0].published_by, "new-pod");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn publish_types(&self, types: Vec<EventTypeInfo>) -> BoxFuture<'_, StoreResult<()>>;

    /// The type catalog: one record per event type ever published, by event type.
    fn event_types(&self) -> BoxFuture<'_, StoreResult<Vec<EventTypeInfo>>>;

    /// For store implementers: every JSON Schema each version of each type was published
    /// with, by event type, version, then first publication
    /// ([`VersionSchema`](crate::catalog::VersionSchema)). [`publish_types`](Self::publish_types)
    /// keeps them: for each record's [`version_schemas`](EventTypeInfo::version_schemas) (in
    /// the same transaction, whatever the newest-version rule did with the record), a shape
    /// ([`digest`](crate::catalog::VersionSchema::digest)) new to its type and version is
    /// added as it is; a known one keeps its `first_published_at` and takes the new
    /// `published_at` and `published_by`. [`merge_schemas`](crate::catalog::merge_schemas)
    /// does it for a catalog kept in memory. A retrier refuses to start when its event's shape
    /// is not the one its version was first published with.
    fn version_schemas(&self) -> BoxFuture<'_, StoreResult<Vec<crate::catalog::VersionSchema>>>;

    /// For store implementers: makes `schema` the only schema of its type and version (what
    /// a retrier started with [`accept_schema_change`](crate::Retrier::accept_schema_change)
    /// does), in one transaction ([`accept_schema`](crate::catalog::accept_schema) in memory).
    fn accept_schema(&self, schema: crate::catalog::VersionSchema) -> BoxFuture<'_, StoreResult<()>>;

    /// Tries to take the store-wide lock of `singleton` mode: `Some` while this process holds
    /// it, `None` when another one does. The default says the store has no such lock
    /// ([`Error::Unsupported`]), and a retrier configured as a singleton refuses to start.
    fn try_lock_singleton(&self) -> BoxFuture<'_, StoreResult<Option<Box<dyn SingletonLock>>>> {
        Box::pin(async { Err(Error::Unsupported { store: "this store", what: "singleton mode (use PostgreSQL)" }) })
    }
}

pub use crate::record::{Circuit, CircuitLogEntry, CircuitWrite, Circuits, StoreId};
pub use crate::subject::{EraseRequest, Erasure, KeyCheck, SubjectHash};

/// The rows one event type created in one bucket of [`DeadLetterStore::created_histogram`].
///
/// ```
/// let bucket = dlq_core::store::HistogramBucket::new("payment", 3, 12);
/// assert_eq!((bucket.event_type.as_str(), bucket.bucket, bucket.count), ("payment", 3, 12));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct HistogramBucket {
    /// The event type.
    pub event_type: String,
    /// The bucket's index: it starts at `since + bucket × step`.
    pub bucket: u32,
    /// Rows created in it.
    pub count: u64,
}

impl HistogramBucket {
    /// A bucket's count, for stores outside this crate.
    pub fn new(event_type: impl Into<String>, bucket: u32, count: u64) -> Self {
        Self { event_type: event_type.into(), bucket, count }
    }
}

/// A histogram's step as a `TimeDelta`: positive and at most a year.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(dlq_core::store::histogram_step(Duration::from_secs(3600))?, chrono::TimeDelta::hours(1));
/// assert!(dlq_core::store::histogram_step(Duration::ZERO).is_err());
/// # Ok::<(), dlq_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::Config`] for a zero step or one over a year.
pub fn histogram_step(step: Duration) -> StoreResult<chrono::TimeDelta> {
    chrono::TimeDelta::from_std(step)
        .ok()
        .filter(|s| *s > chrono::TimeDelta::zero() && *s <= chrono::TimeDelta::days(366))
        .ok_or_else(|| Error::Config {
            key: "histogram step".into(),
            file: None,
            reason: format!("{step:?}: expected more than zero and at most a year"),
        })
}

fn unsupported(what: &'static str) -> Error {
    Error::Unsupported { store: "this store", what }
}

/// A held singleton lock ([`DeadLetterStore::try_lock_singleton`]).
///
/// ```
/// use dlq_core::{DeadLetterStore, MemoryStore};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let mut lock = store.try_lock_singleton().await?.expect("free");
/// assert!(store.try_lock_singleton().await?.is_none(), "one holder at a time");
/// assert!(lock.still_held().await);
/// lock.release().await;
/// assert!(store.try_lock_singleton().await?.is_some());
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
pub trait SingletonLock: Send {
    /// Whether the lock still holds (one round trip; `false` when the connection died).
    fn still_held(&mut self) -> BoxFuture<'_, bool>;

    /// Releases the lock.
    fn release(self: Box<Self>) -> BoxFuture<'static, ()>;
}
