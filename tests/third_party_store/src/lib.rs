//! `VecStore`: a dead-letter store as a stranger writes one, from the docs of
//! `dlq_core::store` and the conformance kit of `dlq_core::testing` alone. Every table is a
//! `Vec` behind one `Mutex`, and each call does its whole work under the lock, so each call is
//! one transaction and nothing is held across an `.await`.
//!
//! It is built part by part, one `impl` per part of the contract (`QueueStore`, `ReadStore`,
//! `OperatorStore`, `FleetStore`, `PrivacyStore`); together they make it a `DeadLetterStore`.
//! It offers neither optional part (no capped claims, no singleton lock: both accessors answer
//! `None`), and keeps the defaults of `settle_and_claim`, `count`, `count_purgeable`,
//! `created_histogram`, the payload limit and `store_id` (its address: a `VecStore` lives as
//! long as its test).

use std::future::ready;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use dlq_core::admin::{AttemptRecord, AuditEntry, FailureGroup, RetrierHeartbeat, StatsRow};
use dlq_core::store::{
    ActionKind, AuditNote, BatchAction, BatchReport, BoxFuture, Circuit, CircuitLogEntry, CircuitWrite, Circuits,
    ClaimRequest, Claimed, EraseRequest, Erasure, NewDeadLetter, Operation, OperationState, OperationStep, Parked,
    PatchBatch, PatchRequest, Refusal, Refused, SettleReport, Settlement, StoreResult, SubjectHash, WorkSignal,
    WorkTicket, operation_patch_diff, patch_diff, patched_by, refusal,
};
use dlq_core::{DeadLetter, store::prelude::*, DlqId, Error, classify::FailureInfo, ListFilter, admin::Order, Status};
use uuid::Uuid;

/// A stored row and the token of the lease that holds it (while `PROCESSING`).
struct Row {
    letter: DeadLetter,
    token: Option<Uuid>,
    /// The subject's keyed hash, that `erase` finds the row by.
    subject: Option<SubjectHash>,
    /// The lease under which a retrier could not open the row (`mark_unreadable`).
    unreadable: Option<Uuid>,
}

#[derive(Default)]
struct Tables {
    /// Rows in ascending id order (ids only grow).
    rows: Vec<Row>,
    last_id: DlqId,
    attempts: Vec<AttemptRecord>,
    audit: Vec<AuditEntry>,
    last_audit_id: i64,
    operations: Vec<Operation>,
    heartbeats: Vec<RetrierHeartbeat>,
    circuits: Vec<Circuit>,
    circuit_log: Vec<CircuitLogEntry>,
    erasures: Vec<Erasure>,
    /// The subject key's check value, once one was given.
    key_check: Option<dlq_core::store::KeyCheck>,
    /// The type catalog, by event type.
    catalog: Vec<dlq_core::catalog::EventTypeInfo>,
    /// The schemas each version was published with.
    schemas: Vec<dlq_core::catalog::VersionSchema>,
}

/// The store: see the crate's docs.
#[derive(Default)]
pub struct VecStore {
    tables: Mutex<Tables>,
    /// Wakes `wait_for_work` on parks, redrives and outcomes that leave a row pending.
    work: WorkSignal,
}

impl VecStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn done<T: Send + 'static>(result: StoreResult<T>) -> BoxFuture<'static, StoreResult<T>> {
    Box::pin(ready(result))
}

/// `at + delay`, saturating at the end of time.
fn later(at: DateTime<Utc>, delay: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(delay).ok().and_then(|d| at.checked_add_signed(d)).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

fn alive(status: Status) -> bool {
    matches!(status, Status::Pending | Status::Processing | Status::FailedPermanently)
}

impl Tables {
    fn row(&mut self, id: DlqId) -> Option<&mut Row> {
        self.rows.iter_mut().find(|r| r.letter.id == id)
    }

    /// A batch of an operation starts from its cursor (compare-and-set).
    fn check_cursor(&self, step: &OperationStep) -> StoreResult<()> {
        match self.operations.iter().find(|op| op.id == step.operation) {
            None => Err(Error::OperationNotFound(step.operation)),
            Some(op) if op.cursor != step.from => Err(Error::Conflict { operation: op.id }),
            Some(_) => Ok(()),
        }
    }

    /// Moves an operation's cursor and counts with its batch.
    fn advance(&mut self, step: &OperationStep, report: &BatchReport, now: DateTime<Utc>) {
        let refused = report.refused.len() as u64 + step.refused_before;
        if let Some(op) = self.operations.iter_mut().find(|op| op.id == step.operation) {
            op.cursor = step.to;
            op.moved += report.moved.len() as u64;
            op.refused += refused;
            op.updated_at = now;
        }
    }

    fn attempt(
        &mut self,
        id: DlqId,
        attempt: u32,
        outcome: &str,
        failure: Option<&FailureInfo>,
        owner: Option<String>,
    ) {
        self.attempts.push(AttemptRecord {
            dlq_id: id,
            attempt,
            outcome: outcome.to_owned(),
            error_class: failure.map(|f| f.class.as_str().to_owned()),
            error_reason: failure.map(|f| f.reason.clone()),
            owner,
            at: Utc::now(),
        });
    }

    fn audit(&mut self, id: DlqId, action: &str, note: &AuditNote, diff: serde_json::Value, at: DateTime<Utc>) -> i64 {
        self.last_audit_id += 1;
        let entry = AuditEntry {
            id: self.last_audit_id,
            dlq_id: id,
            action: action.to_owned(),
            actor: note.actor.clone(),
            reason: note.reason.clone(),
            diff,
            at,
        };
        self.audit.push(entry);
        self.last_audit_id
    }

    /// Deletes rows `gone` with their attempts and audit entries: how many of each.
    fn delete(&mut self, gone: &[DlqId]) -> (u64, u64, u64) {
        let before = (self.rows.len(), self.attempts.len(), self.audit.len());
        self.rows.retain(|r| !gone.contains(&r.letter.id));
        self.attempts.retain(|a| !gone.contains(&a.dlq_id));
        self.audit.retain(|a| !gone.contains(&a.dlq_id));
        let count = |was: usize, now: usize| (was - now) as u64;
        (count(before.0, self.rows.len()), count(before.1, self.attempts.len()), count(before.2, self.audit.len()))
    }

    fn park(&mut self, letter: NewDeadLetter, max_bytes: usize) -> Parked {
        // Cuts a payload over the limit (or already cut) and parks it dead, `too_large`.
        let letter = letter.fit(max_bytes);
        if let Some(key) = &letter.dedupe_key {
            let live = self.rows.iter().find(|r| {
                alive(r.letter.status)
                    && r.letter.event_type == letter.event_type
                    && r.letter.dedupe_key.as_ref() == Some(key)
            });
            if let Some(row) = live {
                return Parked { id: row.letter.id, deduplicated: true, truncated: false };
            }
        }
        let now = Utc::now();
        self.last_id += 1;
        let id = self.last_id;
        let status = letter.status();
        let truncated = letter.payload.is_truncated();
        let subject = letter.subject;
        let mut row = DeadLetter::new(id, &letter.event_type, letter.payload, letter.failure, now);
        row.handler = letter.handler;
        row.version = letter.version;
        row.status = status;
        row.dead_reason = letter.dead_reason;
        row.retry_after = later(now, letter.retry_delay);
        row.max_retries = letter.max_retries;
        row.dedupe_key = letter.dedupe_key;
        row.source = letter.source;
        let failure = row.failure.clone();
        self.rows.push(Row { letter: row, token: None, subject, unreadable: None });
        self.attempt(id, 0, "failed", Some(&failure), None);
        Parked { id, deduplicated: false, truncated }
    }

    /// Writes one outcome if its lease still holds the row; `false` when fenced.
    fn settle(&mut self, outcome: &Settlement, now: DateTime<Utc>) -> bool {
        let lease = outcome.lease();
        let Some(row) = self.row(lease.id) else { return false };
        let held = row.letter.status == Status::Processing
            && row.token == Some(lease.token)
            && row.letter.lease_until.is_some_and(|until| until > now);
        if !held {
            return false;
        }
        let l = &mut row.letter;
        let (id, owner) = (l.id, l.lease_owner.take());
        let mut history = Vec::new();
        for failure in outcome.earlier_failures() {
            l.retry_count += 1;
            l.failure = failure.clone();
            history.push((l.retry_count, "retry", Some(failure.clone())));
        }
        let number = l.retry_count + 1;
        match outcome.last() {
            Settlement::Succeeded { .. } => {
                l.status = Status::Succeeded;
                history.push((number, "succeeded", None));
            }
            Settlement::Retry { delay, failure, .. } => {
                l.status = Status::Pending;
                l.retry_count += 1;
                l.retry_after = later(now, *delay);
                l.failure = failure.clone();
                history.push((number, "retry", Some(failure.clone())));
            }
            Settlement::Dead { reason, failure, counts, .. } => {
                l.status = Status::FailedPermanently;
                l.retry_count += u32::from(*counts);
                l.dead_reason = Some(*reason);
                l.failure = failure.clone();
                history.push((number, "dead", Some(failure.clone())));
            }
            Settlement::Release { .. } => {
                l.status = Status::Pending;
                l.retry_after = now;
            }
            Settlement::Repeated { .. } => unreachable!("`last` is never itself repeated"),
        }
        l.lease_until = None;
        l.updated_at = now;
        row.token = None;
        for (number, name, failure) in history {
            self.attempt(id, number, name, failure.as_ref(), owner.clone());
        }
        true
    }
}

impl QueueStore for VecStore {
    fn park(&self, letter: NewDeadLetter) -> BoxFuture<'_, StoreResult<Parked>> {
        let parked = self.lock().park(letter, self.max_payload_bytes());
        self.work.announce();
        done(Ok(parked))
    }

    fn park_many(&self, letters: Vec<NewDeadLetter>) -> BoxFuture<'_, StoreResult<Vec<Parked>>> {
        let max = self.max_payload_bytes();
        let parked: Vec<Parked> = {
            let mut tables = self.lock();
            letters.into_iter().map(|letter| tables.park(letter, max)).collect()
        };
        self.work.announce();
        done(Ok(parked))
    }

    fn claim(&self, request: ClaimRequest) -> BoxFuture<'_, StoreResult<Vec<Claimed>>> {
        let now = Utc::now();
        let mut tables = self.lock();
        let due: Vec<&mut Row> = tables
            .rows
            .iter_mut()
            .filter(|r| request.event_types.contains(&r.letter.event_type))
            .filter(|r| match r.letter.status {
                Status::Pending => r.letter.retry_after <= now,
                Status::Processing => r.letter.lease_until.is_some_and(|until| until <= now),
                _ => false,
            })
            .collect();
        let claimed = request
            .share(due, |r| &r.letter.event_type, |r| (r.letter.retry_after, r.letter.id))
            .into_iter()
            .map(|row| {
                let token = Uuid::new_v4();
                row.token = Some(token);
                let l = &mut row.letter;
                l.status = Status::Processing;
                l.lease_owner = Some(request.owner.clone());
                l.lease_until = Some(later(now, request.lease));
                l.last_attempt_at = Some(now);
                l.updated_at = now;
                Claimed::of(l, token)
            })
            .collect();
        done(Ok(claimed))
    }

    fn settle(&self, outcomes: Vec<Settlement>) -> BoxFuture<'_, StoreResult<SettleReport>> {
        let now = Utc::now();
        let mut report = SettleReport::default();
        let mut wake = false;
        {
            let mut tables = self.lock();
            for outcome in &outcomes {
                if tables.settle(outcome, now) {
                    report.applied += 1;
                    wake |= outcome.pending_again();
                } else {
                    report.fenced.push(outcome.lease().id);
                }
            }
        }
        if wake {
            self.work.announce();
        }
        done(Ok(report))
    }

    fn work_ticket(&self) -> WorkTicket {
        self.work.ticket()
    }

    fn wait_for_work(&self, after: WorkTicket, max: Duration) -> BoxFuture<'_, ()> {
        Box::pin(self.work.wait(after, max))
    }

    fn get(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Option<DeadLetter>>> {
        done(Ok(self.lock().row(id).map(|r| r.letter.clone())))
    }

    fn capped_claims(&self) -> Option<&dyn CappedClaimStore> {
        None
    }
}

impl ReadStore for VecStore {
    fn list(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>> {
        let tables = self.lock();
        let matching = tables.rows.iter().map(|r| &r.letter).filter(|l| filter.matches(l));
        let rows: Vec<DeadLetter> = match filter.order {
            Order::OldestFirst => matching.take(filter.limit).cloned().collect(),
            _ => matching.rev().take(filter.limit).cloned().collect(),
        };
        done(Ok(rows))
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<Vec<StatsRow>>> {
        let now = Utc::now();
        let tables = self.lock();
        let mut stats: Vec<StatsRow> = Vec::new();
        for l in tables.rows.iter().map(|r| &r.letter) {
            let due = (l.status == Status::Pending && l.retry_after <= now).then_some(l.retry_after);
            match stats.iter_mut().find(|s| s.event_type == l.event_type && s.status == l.status) {
                Some(s) => {
                    s.count += 1;
                    s.oldest_due = match (s.oldest_due, due) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                None => stats.push(StatsRow {
                    event_type: l.event_type.clone(),
                    status: l.status,
                    count: 1,
                    oldest_due: due,
                }),
            }
        }
        stats.sort_by(|a, b| (&a.event_type, a.status).cmp(&(&b.event_type, b.status)));
        done(Ok(stats))
    }

    fn groups(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<FailureGroup>>> {
        let tables = self.lock();
        let mut groups: Vec<FailureGroup> = Vec::new();
        let waiting = |l: &&DeadLetter| matches!(l.status, Status::Pending | Status::FailedPermanently);
        for l in tables.rows.iter().map(|r| &r.letter).filter(waiting).filter(|l| filter.matches(l)) {
            let same = |g: &&mut FailureGroup| g.event_type == l.event_type && g.fingerprint == l.failure.fingerprint;
            match groups.iter_mut().find(same) {
                // Rows come oldest first: each later one is the group's newest.
                Some(g) => {
                    g.count += 1;
                    g.kind = l.failure.kind.clone();
                    g.sample_reason = l.failure.reason.clone();
                    g.sample_id = l.id;
                    g.first_seen = g.first_seen.min(l.created_at);
                    g.last_seen = g.last_seen.max(l.created_at);
                }
                None => groups.push(FailureGroup {
                    fingerprint: l.failure.fingerprint.clone(),
                    event_type: l.event_type.clone(),
                    kind: l.failure.kind.clone(),
                    sample_reason: l.failure.reason.clone(),
                    sample_id: l.id,
                    count: 1,
                    first_seen: l.created_at,
                    last_seen: l.created_at,
                }),
            }
        }
        groups.sort_by_key(|g| std::cmp::Reverse(g.count));
        groups.truncate(filter.limit);
        done(Ok(groups))
    }

    fn attempts(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AttemptRecord>>> {
        done(Ok(self.lock().attempts.iter().filter(|a| a.dlq_id == id).cloned().collect()))
    }

    fn audit(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AuditEntry>>> {
        done(Ok(self.lock().audit.iter().filter(|a| a.dlq_id == id).cloned().collect()))
    }

    fn audit_entry(&self, id: i64) -> BoxFuture<'_, StoreResult<Option<AuditEntry>>> {
        done(Ok(self.lock().audit.iter().find(|a| a.id == id).cloned()))
    }
}

impl OperatorStore for VecStore {
    fn purge(&self, older_than: Duration) -> BoxFuture<'_, StoreResult<u64>> {
        let cutoff = chrono::Duration::from_std(older_than)
            .ok()
            .and_then(|age| Utc::now().checked_sub_signed(age))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let mut tables = self.lock();
        let old = |l: &DeadLetter| matches!(l.status, Status::Succeeded | Status::Discarded) && l.updated_at < cutoff;
        let gone: Vec<DlqId> = tables.rows.iter().filter(|r| old(&r.letter)).map(|r| r.letter.id).collect();
        done(Ok(tables.delete(&gone).0))
    }

    fn apply(&self, batch: BatchAction) -> BoxFuture<'_, StoreResult<BatchReport>> {
        let now = Utc::now();
        let mut tables = self.lock();
        if let Some(Err(err)) = batch.step.map(|step| tables.check_cursor(&step)) {
            return done(Err(err));
        }
        let mut report = BatchReport::default();
        for &id in &batch.ids {
            let Some(row) = tables.row(id) else {
                report.refused.push(Refusal { id, why: Refused::NotFound });
                continue;
            };
            let l = &mut row.letter;
            let truncated = l.payload.is_truncated();
            if let Some(why) = refusal(batch.action, l.status, truncated, l.redrive_count, batch.max_redrives) {
                report.refused.push(Refusal { id, why });
                continue;
            }
            let from = l.status;
            match batch.action {
                ActionKind::Redrive => {
                    l.status = Status::Pending;
                    l.retry_after = now;
                    l.retry_count = 0;
                    l.redrive_count += 1;
                    l.dead_reason = None;
                }
                ActionKind::Discard => l.status = Status::Discarded,
                ActionKind::Patch => return done(Err(Error::Invalid("patches go through patch_rows".into()))),
            }
            l.updated_at = now;
            let diff = serde_json::json!({ "status": [from.as_str(), l.status.as_str()] });
            tables.audit(id, batch.action.as_str(), &batch.note, diff, now);
            report.moved.push(id);
        }
        if let Some(step) = batch.step {
            tables.advance(&step, &report, now);
        }
        drop(tables);
        if batch.action == ActionKind::Redrive && !report.moved.is_empty() {
            self.work.announce();
        }
        done(Ok(report))
    }

    fn patch(&self, request: PatchRequest) -> BoxFuture<'_, StoreResult<i64>> {
        let now = Utc::now();
        let max = self.max_payload_bytes();
        let mut tables = self.lock();
        let Some(row) = tables.row(request.id) else { return done(Err(Error::NotFound(request.id))) };
        let status = row.letter.status;
        if matches!(status, Status::Processing | Status::Succeeded) {
            let needs = "a row that is not PROCESSING or SUCCEEDED";
            return done(Err(Error::InvalidState { id: request.id, status, action: "patch", needs }));
        }
        if let Err(too_large) = request.payload.check_fits(max) {
            return done(Err(too_large));
        }
        let diff = patch_diff(&row.letter.payload, &request.payload, request.patch.as_ref(), request.undo_of);
        row.letter.payload = request.payload;
        row.letter.updated_at = now;
        done(Ok(tables.audit(request.id, "patch", &request.note, diff, now)))
    }

    fn upgrade(&self, upgrade: dlq_core::store::VersionUpgrade) -> BoxFuture<'_, StoreResult<i64>> {
        let max = self.max_payload_bytes();
        let mut tables = self.lock();
        let id = upgrade.id;
        let Some(row) = tables.row(id) else { return done(Err(Error::NotFound(id))) };
        let (status, found) = (row.letter.status, row.letter.version);
        if status == Status::Processing {
            let needs = "a row that is not PROCESSING";
            return done(Err(Error::InvalidState { id, status, action: "upgrade", needs }));
        }
        if found != upgrade.from {
            return done(Err(Error::VersionChanged { id, expected: upgrade.from, found }));
        }
        if let Err(too_large) = upgrade.payload.check_fits(max) {
            return done(Err(too_large));
        }
        let diff = upgrade.diff(&row.letter.payload);
        row.letter.payload = upgrade.payload;
        row.letter.version = upgrade.to;
        done(Ok(tables.audit(id, "upgrade", &upgrade.note, diff, Utc::now())))
    }

    fn patch_rows(&self, batch: PatchBatch) -> BoxFuture<'_, StoreResult<BatchReport>> {
        let now = Utc::now();
        let max = self.max_payload_bytes();
        let mut tables = self.lock();
        if let Err(err) = tables.check_cursor(&batch.step) {
            return done(Err(err));
        }
        let operation = batch.step.operation;
        let mut report = BatchReport::default();
        for edit in batch.rows {
            let id = edit.id;
            let marked =
                tables.audit.iter().any(|a| a.dlq_id == id && a.action == "patch" && patched_by(&a.diff, operation));
            let Some(row) = tables.row(id) else {
                report.refused.push(Refusal { id, why: Refused::NotFound });
                continue;
            };
            let why = match refusal(ActionKind::Patch, row.letter.status, false, 0, None) {
                Some(why) => Some(why),
                None if marked => Some(Refused::AlreadyPatched { operation }),
                None if row.letter.payload != edit.old => Some(Refused::Changed),
                None => edit.new.check_fits(max).err().map(|e| Refused::Unfit { message: e.to_string() }),
            };
            if let Some(why) = why {
                report.refused.push(Refusal { id, why });
                continue;
            }
            row.letter.payload = edit.new.clone();
            row.letter.updated_at = now;
            let diff = operation_patch_diff(&edit.old, &edit.new, &batch.patch, operation);
            tables.audit(id, "patch", &batch.note, diff, now);
            report.moved.push(id);
        }
        tables.advance(&batch.step, &report, now);
        done(Ok(report))
    }

    fn create_operation(
        &self,
        action: ActionKind,
        spec: serde_json::Value,
        note: AuditNote,
    ) -> BoxFuture<'_, StoreResult<Operation>> {
        let now = Utc::now();
        let mut tables = self.lock();
        let id = tables.operations.len() as i64 + 1;
        let operation = Operation {
            id,
            action,
            spec,
            note,
            cursor: 0,
            moved: 0,
            refused: 0,
            state: OperationState::Running,
            created_at: now,
            updated_at: now,
        };
        tables.operations.push(operation.clone());
        done(Ok(operation))
    }

    fn operation(&self, id: i64) -> BoxFuture<'_, StoreResult<Option<Operation>>> {
        done(Ok(self.lock().operations.iter().find(|op| op.id == id).cloned()))
    }

    fn set_operation_state(&self, id: i64, state: OperationState) -> BoxFuture<'_, StoreResult<()>> {
        let mut tables = self.lock();
        let result = match tables.operations.iter_mut().find(|op| op.id == id) {
            Some(op) => {
                op.state = state;
                op.updated_at = Utc::now();
                Ok(())
            }
            None => Err(Error::OperationNotFound(id)),
        };
        done(result)
    }
}

impl FleetStore for VecStore {
    fn publish_types(&self, types: Vec<dlq_core::catalog::EventTypeInfo>) -> BoxFuture<'_, StoreResult<()>> {
        let mut tables = self.lock();
        dlq_core::catalog::merge_schemas(&mut tables.schemas, &types);
        dlq_core::catalog::merge(&mut tables.catalog, types);
        done(Ok(()))
    }

    fn version_schemas(&self) -> BoxFuture<'_, StoreResult<Vec<dlq_core::catalog::VersionSchema>>> {
        done(Ok(self.lock().schemas.clone()))
    }

    fn accept_schema(&self, schema: dlq_core::catalog::VersionSchema) -> BoxFuture<'_, StoreResult<()>> {
        dlq_core::catalog::accept_schema(&mut self.lock().schemas, schema);
        done(Ok(()))
    }

    fn event_types(&self) -> BoxFuture<'_, StoreResult<Vec<dlq_core::catalog::EventTypeInfo>>> {
        done(Ok(self.lock().catalog.clone()))
    }

    fn heartbeat(&self, beat: &RetrierHeartbeat, expire_after: Duration) -> BoxFuture<'_, StoreResult<()>> {
        let now = Utc::now();
        let stale = chrono::Duration::from_std(expire_after)
            .ok()
            .and_then(|age| now.checked_sub_signed(age))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let mut tables = self.lock();
        tables.heartbeats.retain(|b| b.owner == beat.owner || b.last_seen >= stale);
        match tables.heartbeats.iter_mut().find(|b| b.owner == beat.owner) {
            Some(known) => *known = RetrierHeartbeat { started_at: known.started_at, last_seen: now, ..beat.clone() },
            None => tables.heartbeats.push(RetrierHeartbeat { last_seen: now, ..beat.clone() }),
        }
        done(Ok(()))
    }

    fn remove_heartbeat(&self, owner: &str) -> BoxFuture<'_, StoreResult<()>> {
        self.lock().heartbeats.retain(|b| b.owner != owner);
        done(Ok(()))
    }

    fn retriers(&self) -> BoxFuture<'_, StoreResult<Vec<RetrierHeartbeat>>> {
        let mut beats = self.lock().heartbeats.clone();
        beats.sort_by_key(|b| b.started_at);
        done(Ok(beats))
    }

    fn circuits(&self) -> BoxFuture<'_, StoreResult<Circuits>> {
        done(Ok(Circuits::new(Utc::now(), self.lock().circuits.clone())))
    }

    fn write_circuit(&self, write: CircuitWrite) -> BoxFuture<'_, StoreResult<Option<Circuit>>> {
        let now = Utc::now();
        let mut tables = self.lock();
        let current = tables
            .circuits
            .iter()
            .find(|c| c.event_type == write.event_type)
            .cloned()
            .unwrap_or_else(|| Circuit::closed(&write.event_type));
        let Some(written) = write.applied_to(&current, now) else { return done(Ok(None)) };
        tables.circuits.retain(|c| c.event_type != write.event_type);
        tables.circuits.push(written.clone());
        tables.circuit_log.push(CircuitLogEntry::new(&write, current.state, now));
        done(Ok(Some(written)))
    }

    fn circuit_log(
        &self,
        event_type: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<CircuitLogEntry>>> {
        let tables = self.lock();
        let of_type = |e: &&CircuitLogEntry| event_type.as_ref().is_none_or(|t| *t == e.event_type);
        done(Ok(tables.circuit_log.iter().rev().filter(of_type).take(limit).cloned().collect()))
    }

    fn singleton(&self) -> Option<&dyn SingletonStore> {
        None
    }
}

impl PrivacyStore for VecStore {
    fn erase(&self, request: EraseRequest) -> BoxFuture<'_, StoreResult<Erasure>> {
        let mut tables = self.lock();
        let mine = |r: &Row| r.subject.as_ref() == Some(&request.subject);
        let gone: Vec<DlqId> = tables.rows.iter().filter(|r| mine(r)).map(|r| r.letter.id).collect();
        let counts = tables.delete(&gone);
        let id = tables.erasures.last().map_or(1, |e| e.id + 1);
        let erasure = Erasure::new(id, request.subject.prefix(), counts, request.note, Utc::now());
        tables.erasures.push(erasure.clone());
        done(Ok(erasure))
    }

    fn erasures(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<Erasure>>> {
        done(Ok(self.lock().erasures.iter().rev().take(limit).cloned().collect()))
    }

    fn subject_key_check(
        &self,
        check: dlq_core::store::KeyCheck,
    ) -> BoxFuture<'_, StoreResult<dlq_core::store::KeyCheck>> {
        done(Ok(self.lock().key_check.get_or_insert(check).clone()))
    }

    fn count_subject(&self, subject: SubjectHash) -> BoxFuture<'_, StoreResult<u64>> {
        done(Ok(self.lock().rows.iter().filter(|r| r.subject.as_ref() == Some(&subject)).count() as u64))
    }

    fn mark_unreadable(&self, leases: Vec<dlq_core::store::Lease>) -> BoxFuture<'_, StoreResult<()>> {
        let mut tables = self.lock();
        for lease in leases {
            if let Some(row) = tables.row(lease.id)
                && row.letter.status == Status::Processing
                && row.token == Some(lease.token)
            {
                row.unreadable = Some(lease.token);
            }
        }
        done(Ok(()))
    }

    fn count_unreadable(&self) -> BoxFuture<'_, StoreResult<u64>> {
        let tables = self.lock();
        // Counted while the claim it was marked under is the row's latest.
        let held = |r: &&Row| r.letter.status == Status::Processing && r.unreadable.is_some() && r.unreadable == r.token;
        done(Ok(tables.rows.iter().filter(held).count() as u64))
    }

    fn reveal(&self, id: DlqId, note: AuditNote) -> BoxFuture<'_, StoreResult<i64>> {
        let mut tables = self.lock();
        if tables.row(id).is_none() {
            return done(Err(Error::NotFound(id)));
        }
        done(Ok(tables.audit(id, "reveal", &note, serde_json::json!({}), Utc::now())))
    }
}
