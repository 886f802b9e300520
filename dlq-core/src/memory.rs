//! `MemoryStore`: the whole store contract in process memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::Error;
use crate::action::{
    ActionKind, BatchAction, BatchReport, Operation, OperationState, OperationStep, PatchBatch, PatchRequest, Refusal,
    Refused, RowEdit, operation_patch_diff, patch_diff, patched_by, refusal,
};
use crate::backoff::now;
use crate::record::RetrierHeartbeat;
use crate::record::{
    AttemptRecord, AuditEntry, AuditNote, ClaimCap, ClaimRequest, Claimed, DEFAULT_MAX_PAYLOAD_BYTES, DeadLetter,
    DlqId, FailureGroup, ListFilter, NewDeadLetter, Order, Parked, SettleReport, Settlement, StatsRow, Status,
};
use crate::store::{
    BoxFuture, Circuit, CircuitLogEntry, CircuitWrite, Circuits, EraseRequest, Erasure, SingletonLock, StoreId,
    StoreResult, SubjectHash, VersionUpgrade, WorkSignal, WorkTicket, prelude::*,
};

/// A [`DeadLetterStore`] in process memory, with the same semantics as the SQL stores:
/// leases with fencing tokens, dedupe keys, attempt history and audit log.
///
/// Use it in an application's own tests (with [`with_store`](crate::with_store)), in examples,
/// and wherever losing the dead letters with the process is acceptable. Its clock follows
/// tokio's, so tests with a paused clock (`tokio::time::pause`) control when rows fall due.
///
/// ```
/// use dlq_core::{dead_letter, with_store, store::prelude::*, ListFilter, MemoryStore, Status};
/// use std::sync::Arc;
///
/// #[dead_letter(event_type = "doc-memory", max_retries = 5)]
/// async fn handle(amount: i64) -> Result<(), std::io::Error> {
///     Err(std::io::Error::other("ledger down"))
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = Arc::new(MemoryStore::new());
/// let err = with_store(store.clone(), handle(42)).await.unwrap_err();
/// assert!(err.is_parked());
///
/// let parked = store.list(ListFilter::default().status(Status::Pending)).await?;
/// assert_eq!((parked.len(), parked[0].failure.reason.as_str()), (1, "ledger down"));
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<Inner>,
    work: WorkSignal,
    singleton: Arc<AtomicBool>,
    /// Its circuits are its own: no other store's views, even at a reused address.
    id: StoreId,
}

impl Default for Shared {
    fn default() -> Self {
        Self { state: Mutex::default(), work: WorkSignal::new(), singleton: Arc::default(), id: StoreId::unique() }
    }
}

#[derive(Debug, Default)]
struct Inner {
    rows: BTreeMap<DlqId, Row>,
    next_id: DlqId,
    /// The newest row of each event type and dedupe key.
    dedupe: HashMap<(String, String), DlqId>,
    attempts: Vec<AttemptRecord>,
    audit: Vec<AuditEntry>,
    retriers: BTreeMap<String, RetrierHeartbeat>,
    operations: BTreeMap<i64, Operation>,
    circuits: BTreeMap<String, Circuit>,
    circuit_log: Vec<CircuitLogEntry>,
    erasures: Vec<Erasure>,
    /// The subject key's check value, once one was given.
    key_check: Option<crate::subject::KeyCheck>,
    /// The type catalog, by event type.
    catalog: Vec<crate::catalog::EventTypeInfo>,
    /// The schemas each version was published with.
    schemas: Vec<crate::catalog::VersionSchema>,
    /// Capped claims per event type: when, and how many rows (for `claim_capped`'s window).
    starts: HashMap<String, std::collections::VecDeque<(DateTime<Utc>, usize)>>,
}

#[derive(Debug, Clone)]
struct Row {
    letter: DeadLetter,
    token: Option<Uuid>,
    /// The claim under which a retrier could not open the row (`mark_unreadable`).
    unreadable: Option<Uuid>,
    /// The keyed hash `erase` finds the row by.
    subject: Option<SubjectHash>,
}

fn later(at: DateTime<Utc>, delay: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(delay).ok().and_then(|d| at.checked_add_signed(d)).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

fn earlier(at: DateTime<Utc>, delay: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(delay).ok().and_then(|d| at.checked_sub_signed(d)).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves rows consistent (every mutation is one
        // assignment), so a poisoned lock is still safe to use.
        self.inner.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One row, read without `.await` (for tests and examples).
    pub fn get_now(&self, id: DlqId) -> Option<DeadLetter> {
        self.lock().rows.get(&id).map(|r| r.letter.clone())
    }

    /// Every row, in id order.
    pub fn snapshot(&self) -> Vec<DeadLetter> {
        self.lock().rows.values().map(|r| r.letter.clone()).collect()
    }

    /// How many rows are stored.
    pub fn len(&self) -> usize {
        self.lock().rows.len()
    }

    /// Whether no row is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn park_sync(&self, letters: Vec<NewDeadLetter>) -> Vec<Parked> {
        let at = now();
        let mut inner = self.lock();
        let parked = letters.into_iter().map(|l| inner.park(l, at)).collect();
        drop(inner);
        self.inner.work.announce();
        parked
    }
}

impl Inner {
    /// Deletes the subject's rows with their history, and records the erasure.
    fn erase(&mut self, request: EraseRequest, at: DateTime<Utc>) -> Erasure {
        let before = (self.rows.len(), self.attempts.len(), self.audit.len());
        self.rows.retain(|_, r| r.subject.as_ref() != Some(&request.subject));
        self.forget_removed();
        let gone = |was: usize, now: usize| (was - now) as u64;
        let counts =
            (gone(before.0, self.rows.len()), gone(before.1, self.attempts.len()), gone(before.2, self.audit.len()));
        let id = self.erasures.last().map_or(1, |e| e.id + 1);
        let erasure = Erasure::new(id, request.subject.prefix(), counts, request.note, at);
        self.erasures.push(erasure.clone());
        erasure
    }

    /// Drops the history and dedupe keys of rows no longer stored.
    fn forget_removed(&mut self) {
        let live: std::collections::HashSet<DlqId> = self.rows.keys().copied().collect();
        self.attempts.retain(|a| live.contains(&a.dlq_id));
        self.audit.retain(|a| live.contains(&a.dlq_id));
        self.dedupe.retain(|_, id| live.contains(id));
    }

    fn park(&mut self, new: NewDeadLetter, at: DateTime<Utc>) -> Parked {
        let new = new.fit(DEFAULT_MAX_PAYLOAD_BYTES);
        let truncated = new.payload.is_truncated();
        let identity = new.dedupe_key.as_ref().map(|key| (new.event_type.clone(), key.clone()));
        // The key's row, while it is alive: a finished event that fails again is a new failure.
        let live = identity.as_ref().and_then(|k| self.dedupe.get(k)).filter(|id| {
            self.rows.get(id).is_some_and(|r| !matches!(r.letter.status, Status::Succeeded | Status::Discarded))
        });
        if let Some(id) = live {
            return Parked { id: *id, deduplicated: true, truncated };
        }
        self.next_id += 1;
        let id = self.next_id;
        if let Some(identity) = identity {
            self.dedupe.insert(identity, id);
        }
        let status = new.status();
        let subject = new.subject;
        self.attempts.push(AttemptRecord {
            dlq_id: id,
            attempt: 0,
            outcome: "failed".into(),
            error_class: Some(new.failure.class.as_str().into()),
            error_reason: Some(new.failure.reason.clone()),
            owner: None,
            at,
        });
        let letter = DeadLetter {
            id,
            event_type: new.event_type,
            handler: new.handler,
            payload: new.payload,
            version: new.version,
            status,
            failure: stored(new.failure),
            retry_count: 0,
            max_retries: new.max_retries,
            retry_after: later(at, new.retry_delay),
            dead_reason: new.dead_reason,
            lease_owner: None,
            lease_until: None,
            dedupe_key: new.dedupe_key,
            source: new.source,
            redrive_count: 0,
            created_at: at,
            updated_at: at,
            first_failed_at: at,
            last_attempt_at: None,
        };
        self.rows.insert(id, Row { letter, token: None, unreadable: None, subject });
        Parked { id, deduplicated: false, truncated }
    }

    fn claim(&mut self, req: &ClaimRequest, at: DateTime<Utc>) -> Vec<Claimed> {
        let due: Vec<&Row> = self
            .rows
            .values()
            .filter(|r| req.event_types.contains(&r.letter.event_type))
            .filter(|r| match r.letter.status {
                Status::Pending => r.letter.retry_after <= at,
                Status::Processing => r.letter.lease_until.is_some_and(|u| u <= at),
                _ => false,
            })
            .collect();
        let due = req.share(due, |r| &r.letter.event_type, |r| (r.letter.retry_after, r.letter.id));
        let ids: Vec<DlqId> = due.iter().map(|r| r.letter.id).collect();
        ids.into_iter()
            .filter_map(|id| {
                let row = self.rows.get_mut(&id)?;
                let token = Uuid::new_v4();
                row.token = Some(token);
                let l = &mut row.letter;
                l.status = Status::Processing;
                l.lease_owner = Some(req.owner.clone());
                l.lease_until = Some(later(at, req.lease));
                l.last_attempt_at = Some(at);
                l.updated_at = at;
                Some(Claimed::of(l, token))
            })
            .collect()
    }

    /// Writes `outcome` if its lease still holds the row at `at`. Returns whether it was
    /// written; `false` means fenced (the token no longer holds the row), nothing changed.
    fn settle_if_held(&mut self, outcome: Settlement, at: DateTime<Utc>) -> bool {
        let lease = outcome.lease();
        let Some(row) = self.rows.get_mut(&lease.id) else { return false };
        let held = row.letter.status == Status::Processing
            && row.token == Some(lease.token)
            && row.letter.lease_until.is_some_and(|u| u > at);
        if !held {
            return false;
        }
        let owner = row.letter.lease_owner.take();
        row.token = None;
        let l = &mut row.letter;
        l.lease_until = None;
        l.updated_at = at;
        // Earlier attempts of the same claim, each written as a retry.
        for failure in outcome.earlier_failures() {
            l.retry_count += 1;
            l.failure = stored(failure.clone());
            self.attempts.push(AttemptRecord {
                dlq_id: lease.id,
                attempt: l.retry_count,
                outcome: "retry".into(),
                error_class: Some(failure.class.as_str().into()),
                error_reason: Some(failure.reason.clone()),
                owner: owner.clone(),
                at,
            });
        }
        let attempt = l.retry_count + 1;
        let outcome = outcome.last();
        match outcome {
            Settlement::Succeeded { .. } => l.status = Status::Succeeded,
            Settlement::Retry { delay, failure, .. } => {
                l.status = Status::Pending;
                l.retry_count += 1;
                l.retry_after = later(at, *delay);
                l.failure = stored(failure.clone());
            }
            Settlement::Dead { reason, failure, counts, .. } => {
                l.status = Status::FailedPermanently;
                l.dead_reason = Some(*reason);
                l.failure = stored(failure.clone());
                l.retry_count += u32::from(*counts);
            }
            Settlement::Release { .. } => {
                l.status = Status::Pending;
                l.retry_after = at;
                return true;
            }
            Settlement::Repeated { .. } => unreachable!("Settlement::last is never Repeated"),
        }
        self.attempts.push(AttemptRecord {
            dlq_id: lease.id,
            attempt,
            outcome: outcome.outcome_name().into(),
            error_class: outcome.failure().map(|f| f.class.as_str().into()),
            error_reason: outcome.failure().map(|f| f.reason.clone()),
            owner,
            at,
        });
        true
    }

    fn matching(&self, filter: &ListFilter) -> Vec<DlqId> {
        let rows = self.rows.values().filter(|r| filter.matches(&r.letter)).map(|r| r.letter.id);
        match filter.order {
            Order::NewestFirst => rows.rev().collect(),
            Order::OldestFirst => rows.collect(),
        }
    }

    fn record(
        &mut self,
        dlq_id: DlqId,
        action: &str,
        note: &AuditNote,
        diff: serde_json::Value,
        at: DateTime<Utc>,
    ) -> i64 {
        let id = self.audit.last().map_or(1, |a| a.id + 1);
        let (actor, reason) = (note.actor.clone(), note.reason.clone());
        self.audit.push(AuditEntry { id, dlq_id, action: action.into(), actor, reason, diff, at });
        id
    }

    fn apply(&mut self, batch: &BatchAction) -> StoreResult<BatchReport> {
        if let Some(step) = &batch.step {
            let op = self.operations.get(&step.operation).ok_or(Error::OperationNotFound(step.operation))?;
            if op.cursor != step.from {
                return Err(Error::Conflict { operation: step.operation });
            }
        }
        let mut report = BatchReport::default();
        for &id in &batch.ids {
            let Some(row) = self.rows.get(&id) else {
                report.refused.push(Refusal { id, why: Refused::NotFound });
                continue;
            };
            let l = &row.letter;
            let why = refusal(batch.action, l.status, l.payload.is_truncated(), l.redrive_count, batch.max_redrives);
            match why {
                Some(why) => report.refused.push(Refusal { id, why }),
                None => report.moved.push(id),
            }
        }
        let to = match batch.action {
            ActionKind::Redrive => Status::Pending,
            ActionKind::Discard => Status::Discarded,
            ActionKind::Patch => {
                return Err(Error::Invalid("a patch batch is written by patch_rows, not apply".into()));
            }
        };
        let at = now();
        for id in &report.moved {
            self.move_row(*id, to, batch.action.as_str(), &batch.note, at);
        }
        if let Some(step) = &batch.step {
            self.advance(step, &report, at);
        }
        Ok(report)
    }

    fn advance(&mut self, step: &OperationStep, report: &BatchReport, at: DateTime<Utc>) {
        if let Some(op) = self.operations.get_mut(&step.operation) {
            op.cursor = step.to;
            op.moved += report.moved.len() as u64;
            op.refused += report.refused.len() as u64 + step.refused_before;
            op.updated_at = at;
        }
    }

    fn patch_rows(&mut self, batch: PatchBatch) -> StoreResult<BatchReport> {
        let step = batch.step;
        let op = self.operations.get(&step.operation).ok_or(Error::OperationNotFound(step.operation))?;
        if op.cursor != step.from {
            return Err(Error::Conflict { operation: step.operation });
        }
        let mut report = BatchReport::default();
        let at = now();
        for edit in batch.rows {
            let id = edit.id;
            let why = match self.rows.get(&id) {
                None => Some(Refused::NotFound),
                Some(row) => self.patch_refusal(&row.letter, &edit, step.operation),
            };
            if let Some(why) = why {
                report.refused.push(Refusal { id, why });
                continue;
            }
            let diff = operation_patch_diff(&edit.old, &edit.new, &batch.patch, step.operation);
            if let Some(row) = self.rows.get_mut(&id) {
                row.letter.payload = edit.new;
                row.letter.updated_at = at;
            }
            self.record(id, "patch", &batch.note, diff, at);
            report.moved.push(id);
        }
        self.advance(&step, &report, at);
        Ok(report)
    }

    /// Why a row of a patch operation is not written, by the rule of `patch_rows`.
    fn patch_refusal(&self, letter: &DeadLetter, edit: &RowEdit, operation: i64) -> Option<Refused> {
        if let Some(why) = refusal(ActionKind::Patch, letter.status, false, 0, None) {
            return Some(why);
        }
        let marked =
            self.audit.iter().any(|a| a.dlq_id == letter.id && a.action == "patch" && patched_by(&a.diff, operation));
        if marked {
            return Some(Refused::AlreadyPatched { operation });
        }
        if letter.payload != edit.old {
            return Some(Refused::Changed);
        }
        edit.new.check_fits(DEFAULT_MAX_PAYLOAD_BYTES).err().map(|e| Refused::Unfit { message: e.to_string() })
    }

    fn move_row(&mut self, id: DlqId, to: Status, action: &str, note: &AuditNote, at: DateTime<Utc>) {
        let Some(row) = self.rows.get_mut(&id) else { return };
        let l = &mut row.letter;
        let from = l.status;
        l.status = to;
        l.updated_at = at;
        if to == Status::Pending {
            l.retry_after = at;
            l.retry_count = 0;
            l.dead_reason = None;
            l.redrive_count += 1;
        }
        let diff = serde_json::json!({ "status": [from.as_str(), to.as_str()] });
        self.record(id, action, note, diff, at);
    }

    fn patch(&mut self, request: PatchRequest) -> StoreResult<i64> {
        request.payload.check_fits(DEFAULT_MAX_PAYLOAD_BYTES)?;
        let id = request.id;
        let row = self.rows.get_mut(&id).ok_or(Error::NotFound(id))?;
        if matches!(row.letter.status, Status::Processing | Status::Succeeded) {
            return Err(Error::InvalidState {
                id,
                status: row.letter.status,
                action: "patch",
                needs: "any status but PROCESSING or SUCCEEDED",
            });
        }
        let at = now();
        let diff = patch_diff(&row.letter.payload, &request.payload, request.patch.as_ref(), request.undo_of);
        row.letter.payload = request.payload;
        row.letter.updated_at = at;
        Ok(self.record(id, "patch", &request.note, diff, at))
    }
}

impl Inner {
    fn upgrade(&mut self, upgrade: VersionUpgrade) -> StoreResult<i64> {
        upgrade.payload.check_fits(DEFAULT_MAX_PAYLOAD_BYTES)?;
        let id = upgrade.id;
        let row = self.rows.get_mut(&id).ok_or(Error::NotFound(id))?;
        let status = row.letter.status;
        if status == Status::Processing {
            return Err(Error::InvalidState { id, status, action: "upgrade", needs: "any status but PROCESSING" });
        }
        if row.letter.version != upgrade.from {
            return Err(Error::VersionChanged { id, expected: upgrade.from, found: row.letter.version });
        }
        let diff = upgrade.diff(&row.letter.payload);
        row.letter.payload = upgrade.payload;
        row.letter.version = upgrade.to;
        Ok(self.record(id, "upgrade", &upgrade.note, diff, now()))
    }
}

fn ready<T: Send + 'static>(value: T) -> BoxFuture<'static, T> {
    Box::pin(std::future::ready(value))
}

/// The singleton lock of a `MemoryStore`: held while the flag is set.
struct MemoryLock(Arc<AtomicBool>);

impl SingletonLock for MemoryLock {
    fn still_held(&mut self) -> BoxFuture<'_, bool> {
        ready(true)
    }

    fn release(self: Box<Self>) -> BoxFuture<'static, ()> {
        self.0.store(false, Ordering::SeqCst);
        ready(())
    }
}

impl QueueStore for MemoryStore {
    fn park(&self, letter: NewDeadLetter) -> BoxFuture<'_, StoreResult<Parked>> {
        let parked = self.park_sync(vec![letter]).remove(0);
        ready(Ok(parked))
    }

    fn park_many(&self, letters: Vec<NewDeadLetter>) -> BoxFuture<'_, StoreResult<Vec<Parked>>> {
        ready(Ok(self.park_sync(letters)))
    }

    fn claim(&self, request: ClaimRequest) -> BoxFuture<'_, StoreResult<Vec<Claimed>>> {
        ready(Ok(self.lock().claim(&request, now())))
    }

    fn settle(&self, outcomes: Vec<Settlement>) -> BoxFuture<'_, StoreResult<SettleReport>> {
        let at = now();
        let mut inner = self.lock();
        let mut report = SettleReport::default();
        let mut wake = false;
        for outcome in outcomes {
            let id = outcome.lease().id;
            wake |= outcome.pending_again();
            if inner.settle_if_held(outcome, at) {
                report.applied += 1;
            } else {
                report.fenced.push(id);
            }
        }
        drop(inner);
        if wake {
            self.inner.work.announce();
        }
        ready(Ok(report))
    }

    fn work_ticket(&self) -> WorkTicket {
        self.inner.work.ticket()
    }

    fn wait_for_work(&self, after: WorkTicket, max: Duration) -> BoxFuture<'_, ()> {
        Box::pin(self.inner.work.wait(after, max))
    }

    fn get(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Option<DeadLetter>>> {
        ready(Ok(self.get_now(id)))
    }

    fn store_id(&self) -> StoreId {
        self.inner.id.clone()
    }

    fn capped_claims(&self) -> Option<&dyn CappedClaimStore> {
        Some(self)
    }
}

impl ReadStore for MemoryStore {
    fn list(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>> {
        let inner = self.lock();
        let rows = inner.matching(&filter).into_iter().take(filter.limit).map(|id| inner.rows[&id].letter.clone());
        ready(Ok(rows.collect()))
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<Vec<StatsRow>>> {
        let at = now();
        let mut rows: BTreeMap<(String, Status), StatsRow> = BTreeMap::new();
        for row in self.lock().rows.values() {
            let l = &row.letter;
            let stats = rows.entry((l.event_type.clone(), l.status)).or_insert_with(|| StatsRow {
                event_type: l.event_type.clone(),
                status: l.status,
                count: 0,
                oldest_due: None,
            });
            stats.count += 1;
            if l.status == Status::Pending && l.retry_after <= at {
                stats.oldest_due = Some(stats.oldest_due.map_or(l.retry_after, |o| o.min(l.retry_after)));
            }
        }
        ready(Ok(rows.into_values().collect()))
    }

    fn groups(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<FailureGroup>>> {
        let inner = self.lock();
        let mut groups: BTreeMap<(String, String), FailureGroup> = BTreeMap::new();
        for id in inner.matching(&filter) {
            let l = &inner.rows[&id].letter;
            if !matches!(l.status, Status::Pending | Status::FailedPermanently) {
                continue;
            }
            let key = (l.failure.fingerprint.clone(), l.event_type.clone());
            groups
                .entry(key)
                .and_modify(|g| {
                    g.count += 1;
                    if l.id > g.sample_id {
                        g.sample_id = l.id;
                        l.failure.kind.clone_into(&mut g.kind);
                        l.failure.reason.clone_into(&mut g.sample_reason);
                    }
                    g.first_seen = g.first_seen.min(l.created_at);
                    g.last_seen = g.last_seen.max(l.created_at);
                })
                .or_insert_with(|| FailureGroup {
                    fingerprint: l.failure.fingerprint.clone(),
                    event_type: l.event_type.clone(),
                    kind: l.failure.kind.clone(),
                    sample_reason: l.failure.reason.clone(),
                    sample_id: l.id,
                    count: 1,
                    first_seen: l.created_at,
                    last_seen: l.created_at,
                });
        }
        let mut groups: Vec<_> = groups.into_values().collect();
        groups.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.fingerprint.cmp(&b.fingerprint)));
        groups.truncate(filter.limit);
        ready(Ok(groups))
    }

    fn attempts(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AttemptRecord>>> {
        let all = self.lock().attempts.iter().filter(|a| a.dlq_id == id).cloned().collect();
        ready(Ok(all))
    }

    fn audit(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AuditEntry>>> {
        let all = self.lock().audit.iter().filter(|a| a.dlq_id == id).cloned().collect();
        ready(Ok(all))
    }

    fn count(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<u64>> {
        let found = self.lock().matching(&filter).len().min(filter.limit);
        ready(Ok(found as u64))
    }

    fn audit_entry(&self, id: i64) -> BoxFuture<'_, StoreResult<Option<AuditEntry>>> {
        ready(Ok(self.lock().audit.iter().find(|a| a.id == id).cloned()))
    }
}

impl OperatorStore for MemoryStore {
    fn patch(&self, request: PatchRequest) -> BoxFuture<'_, StoreResult<i64>> {
        ready(self.lock().patch(request))
    }

    fn upgrade(&self, upgrade: VersionUpgrade) -> BoxFuture<'_, StoreResult<i64>> {
        ready(self.lock().upgrade(upgrade))
    }

    fn patch_rows(&self, batch: PatchBatch) -> BoxFuture<'_, StoreResult<BatchReport>> {
        ready(self.lock().patch_rows(batch))
    }

    fn apply(&self, batch: BatchAction) -> BoxFuture<'_, StoreResult<BatchReport>> {
        let report = self.lock().apply(&batch);
        if batch.action == ActionKind::Redrive {
            self.inner.work.announce();
        }
        ready(report)
    }

    fn create_operation(
        &self,
        action: ActionKind,
        spec: serde_json::Value,
        note: AuditNote,
    ) -> BoxFuture<'_, StoreResult<Operation>> {
        let at = now();
        let mut inner = self.lock();
        let id = inner.operations.keys().next_back().map_or(1, |id| id + 1);
        let op = Operation {
            id,
            action,
            spec,
            note,
            cursor: 0,
            moved: 0,
            refused: 0,
            state: OperationState::Running,
            created_at: at,
            updated_at: at,
        };
        inner.operations.insert(id, op.clone());
        ready(Ok(op))
    }

    fn operation(&self, id: i64) -> BoxFuture<'_, StoreResult<Option<Operation>>> {
        ready(Ok(self.lock().operations.get(&id).cloned()))
    }

    fn set_operation_state(&self, id: i64, state: OperationState) -> BoxFuture<'_, StoreResult<()>> {
        let mut inner = self.lock();
        let result = inner.operations.get_mut(&id).map(|op| op.state = state).ok_or(Error::OperationNotFound(id));
        ready(result)
    }

    fn purge(&self, older_than: Duration) -> BoxFuture<'_, StoreResult<u64>> {
        let cutoff = chrono::Duration::from_std(older_than)
            .ok()
            .and_then(|age| now().checked_sub_signed(age))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let mut inner = self.lock();
        let before = inner.rows.len();
        inner.rows.retain(|_, r| {
            !(matches!(r.letter.status, Status::Succeeded | Status::Discarded) && r.letter.updated_at < cutoff)
        });
        let purged = (before - inner.rows.len()) as u64;
        inner.forget_removed();
        ready(Ok(purged))
    }
}

impl FleetStore for MemoryStore {
    fn heartbeat(&self, beat: &RetrierHeartbeat, expire_after: Duration) -> BoxFuture<'_, StoreResult<()>> {
        let at = now();
        let mut inner = self.lock();
        let started_at = inner.retriers.get(&beat.owner).map_or(beat.started_at, |b| b.started_at);
        inner.retriers.insert(beat.owner.clone(), RetrierHeartbeat { started_at, last_seen: at, ..beat.clone() });
        let horizon = at - chrono::Duration::from_std(expire_after).unwrap_or(chrono::TimeDelta::MAX);
        inner.retriers.retain(|_, b| b.last_seen >= horizon);
        ready(Ok(()))
    }

    fn remove_heartbeat(&self, owner: &str) -> BoxFuture<'_, StoreResult<()>> {
        self.lock().retriers.remove(owner);
        ready(Ok(()))
    }

    fn retriers(&self) -> BoxFuture<'_, StoreResult<Vec<RetrierHeartbeat>>> {
        let mut all: Vec<_> = self.lock().retriers.values().cloned().collect();
        all.sort_by_key(|b| b.started_at);
        ready(Ok(all))
    }

    fn circuits(&self) -> BoxFuture<'_, StoreResult<Circuits>> {
        let circuits = self.lock().circuits.values().cloned().collect();
        ready(Ok(Circuits::new(now(), circuits)))
    }

    fn write_circuit(&self, write: CircuitWrite) -> BoxFuture<'_, StoreResult<Option<Circuit>>> {
        let at = now();
        let mut inner = self.lock();
        let current =
            inner.circuits.get(&write.event_type).cloned().unwrap_or_else(|| Circuit::closed(&write.event_type));
        let Some(next) = write.applied_to(&current, at) else { return ready(Ok(None)) };
        inner.circuit_log.push(CircuitLogEntry::new(&write, current.state, at));
        inner.circuits.insert(write.event_type, next.clone());
        ready(Ok(Some(next)))
    }

    fn circuit_log(
        &self,
        event_type: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<CircuitLogEntry>>> {
        let inner = self.lock();
        let wanted = |e: &&CircuitLogEntry| event_type.as_ref().is_none_or(|t| &e.event_type == t);
        ready(Ok(inner.circuit_log.iter().rev().filter(wanted).take(limit).cloned().collect()))
    }

    fn publish_types(&self, types: Vec<crate::catalog::EventTypeInfo>) -> BoxFuture<'_, StoreResult<()>> {
        let mut inner = self.lock();
        crate::catalog::merge_schemas(&mut inner.schemas, &types);
        crate::catalog::merge(&mut inner.catalog, types);
        ready(Ok(()))
    }

    fn version_schemas(&self) -> BoxFuture<'_, StoreResult<Vec<crate::catalog::VersionSchema>>> {
        ready(Ok(self.lock().schemas.clone()))
    }

    fn accept_schema(&self, schema: crate::catalog::VersionSchema) -> BoxFuture<'_, StoreResult<()>> {
        crate::catalog::accept_schema(&mut self.lock().schemas, schema);
        ready(Ok(()))
    }

    fn event_types(&self) -> BoxFuture<'_, StoreResult<Vec<crate::catalog::EventTypeInfo>>> {
        ready(Ok(self.lock().catalog.clone()))
    }

    fn singleton(&self) -> Option<&dyn SingletonStore> {
        Some(self)
    }
}

impl PrivacyStore for MemoryStore {
    fn mark_unreadable(&self, leases: Vec<crate::store::Lease>) -> BoxFuture<'_, StoreResult<()>> {
        let mut inner = self.lock();
        for lease in leases {
            if let Some(row) = inner.rows.get_mut(&lease.id)
                && row.letter.status == Status::Processing
                && row.token == Some(lease.token)
            {
                row.unreadable = Some(lease.token);
            }
        }
        ready(Ok(()))
    }

    fn count_unreadable(&self) -> BoxFuture<'_, StoreResult<u64>> {
        let inner = self.lock();
        let unreadable = inner
            .rows
            .values()
            .filter(|r| r.letter.status == Status::Processing && r.unreadable.is_some() && r.unreadable == r.token);
        ready(Ok(unreadable.count() as u64))
    }

    fn reveal(&self, id: DlqId, note: AuditNote) -> BoxFuture<'_, StoreResult<i64>> {
        let mut inner = self.lock();
        let found = inner.rows.contains_key(&id);
        ready(if found {
            Ok(inner.record(id, "reveal", &note, serde_json::json!({}), now()))
        } else {
            Err(Error::NotFound(id))
        })
    }

    fn erase(&self, request: EraseRequest) -> BoxFuture<'_, StoreResult<Erasure>> {
        ready(Ok(self.lock().erase(request, now())))
    }

    fn erasures(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<Erasure>>> {
        ready(Ok(self.lock().erasures.iter().rev().take(limit).cloned().collect()))
    }

    fn subject_key_check(
        &self,
        check: crate::subject::KeyCheck,
    ) -> BoxFuture<'_, StoreResult<crate::subject::KeyCheck>> {
        ready(Ok(self.lock().key_check.get_or_insert(check).clone()))
    }

    fn count_subject(&self, subject: SubjectHash) -> BoxFuture<'_, StoreResult<u64>> {
        ready(Ok(self.lock().rows.values().filter(|r| r.subject.as_ref() == Some(&subject)).count() as u64))
    }
}

impl SingletonStore for MemoryStore {
    /// One retrier at a time among those sharing this `MemoryStore` (and its clones).
    fn try_lock_singleton(&self) -> BoxFuture<'_, StoreResult<Option<Box<dyn SingletonLock>>>> {
        let flag = &self.inner.singleton;
        let won = flag.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).is_ok();
        let lock: Option<Box<dyn SingletonLock>> = won.then(|| Box::new(MemoryLock(Arc::clone(flag))) as _);
        ready(Ok(lock))
    }
}

impl CappedClaimStore for MemoryStore {
    /// Counts, claims and records under the store's lock.
    fn claim_capped(&self, mut request: ClaimRequest, cap: ClaimCap) -> BoxFuture<'_, StoreResult<Vec<Claimed>>> {
        let at = now();
        let mut inner = self.lock();
        let Some(event_type) = request.event_types.first().cloned() else { return ready(Ok(Vec::new())) };
        let in_flight = inner
            .rows
            .values()
            .filter(|r| r.letter.event_type == event_type && r.letter.status == Status::Processing)
            .filter(|r| r.letter.lease_until.is_some_and(|u| u > at))
            .count();
        let mut starts = inner.starts.remove(&event_type).unwrap_or_default();
        if let Some(window) = cap.window() {
            let since = earlier(at, window);
            while starts.front().is_some_and(|(t, _)| *t <= since) {
                starts.pop_front();
            }
        }
        let started: usize = starts.iter().map(|(_, n)| n).sum();
        request.event_types.truncate(1);
        request.limit = cap.allows(request.limit, in_flight, started as u64);
        let claimed = if request.limit == 0 { Vec::new() } else { inner.claim(&request, at) };
        if cap.starts.is_some() && !claimed.is_empty() {
            starts.push_back((at, claimed.len()));
        }
        inner.starts.insert(event_type, starts);
        ready(Ok(claimed))
    }
}

/// A failure as the SQL stores keep it: the class by name, without the retry-after hint
/// (which was already applied to `retry_after`).
fn stored(mut failure: crate::classify::FailureInfo) -> crate::classify::FailureInfo {
    if failure.class.is_transient() {
        failure.class = crate::ErrorClass::Transient;
    }
    failure
}
