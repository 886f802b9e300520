//! `MemoryStore`: the whole store contract in process memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::Error;
use crate::record::RetrierHeartbeat;
use crate::record::{
    AttemptRecord, AuditEntry, ClaimRequest, Claimed, DEFAULT_MAX_PAYLOAD_BYTES, DeadLetter, DlqId, FailureGroup,
    Lease, ListFilter, NewDeadLetter, Parked, Payload, SettleReport, Settlement, StatsRow, Status,
};
use crate::store::{BoxFuture, DeadLetterStore, SingletonLock, StoreResult};

/// A [`DeadLetterStore`] in process memory, with the same semantics as the SQL stores:
/// leases with fencing tokens, dedupe keys, attempt history and audit log.
///
/// Use it in an application's own tests (with [`with_store`](crate::with_store)), in examples,
/// and wherever losing the dead letters with the process is acceptable. Its clock follows
/// tokio's, so tests with a paused clock (`tokio::time::pause`) control when rows fall due.
///
/// ```
/// use dlq_core::{ClaimRequest, DeadLetterStore, ErrorClass, FailureInfo, MemoryStore, NewDeadLetter, Payload, Settlement, Status};
/// use std::time::Duration;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let failure = FailureInfo::new(ErrorClass::TRANSIENT, "io", "ledger down".into(), vec![], None);
/// store.park(NewDeadLetter::new("payment", Payload::Json(serde_json::json!({"id": 1})), failure)).await?;
///
/// let claimed = store.claim(ClaimRequest {
///     event_types: vec!["payment".into()], limit: 10, lease: Duration::from_secs(30), owner: "me".into(),
/// }).await?;
/// store.settle(vec![Settlement::Succeeded { lease: claimed[0].lease }]).await?;
/// assert_eq!(store.get(claimed[0].lease.id).await?.unwrap().status, Status::Succeeded);
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<Inner>,
    work: Notify,
    singleton: Arc<AtomicBool>,
}

#[derive(Debug, Default)]
struct Inner {
    rows: BTreeMap<DlqId, Row>,
    next_id: DlqId,
    dedupe: HashMap<String, DlqId>,
    attempts: Vec<AttemptRecord>,
    audit: Vec<AuditEntry>,
    retriers: BTreeMap<String, RetrierHeartbeat>,
}

#[derive(Debug, Clone)]
struct Row {
    letter: DeadLetter,
    token: Option<Uuid>,
}

/// Wall-clock time that advances with tokio's clock, so a paused test clock moves it too.
pub(crate) fn now() -> DateTime<Utc> {
    static BASE: OnceLock<(DateTime<Utc>, std::time::Instant)> = OnceLock::new();
    let (wall, instant) = *BASE.get_or_init(|| (Utc::now(), std::time::Instant::now()));
    let elapsed = tokio::time::Instant::now().into_std().saturating_duration_since(instant);
    wall + chrono::Duration::from_std(elapsed).unwrap_or(chrono::TimeDelta::MAX)
}

fn later(at: DateTime<Utc>, delay: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(delay).ok().and_then(|d| at.checked_add_signed(d)).unwrap_or(DateTime::<Utc>::MAX_UTC)
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
        self.inner.work.notify_waiters();
        parked
    }
}

impl Inner {
    fn park(&mut self, new: NewDeadLetter, at: DateTime<Utc>) -> Parked {
        let new = new.fit(DEFAULT_MAX_PAYLOAD_BYTES);
        let truncated = new.payload.is_truncated();
        if let Some(id) = new.dedupe_key.as_ref().and_then(|k| self.dedupe.get(k)) {
            return Parked { id: *id, deduplicated: true, truncated };
        }
        self.next_id += 1;
        let id = self.next_id;
        if let Some(key) = &new.dedupe_key {
            self.dedupe.insert(key.clone(), id);
        }
        let status = new.status();
        self.attempts.push(AttemptRecord {
            dlq_id: id,
            attempt: 0,
            outcome: "failed".into(),
            error_class: Some(new.failure.class.name().into()),
            error_reason: Some(new.failure.reason.clone()),
            owner: None,
            at,
        });
        let letter = DeadLetter {
            id,
            event_type: new.event_type,
            handler: new.handler,
            payload: new.payload,
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
        self.rows.insert(id, Row { letter, token: None });
        Parked { id, deduplicated: false, truncated }
    }

    fn claim(&mut self, req: &ClaimRequest, at: DateTime<Utc>) -> Vec<Claimed> {
        let mut due: Vec<&Row> = self
            .rows
            .values()
            .filter(|r| req.event_types.contains(&r.letter.event_type))
            .filter(|r| match r.letter.status {
                Status::Pending => r.letter.retry_after <= at,
                Status::Processing => r.letter.lease_until.is_some_and(|u| u <= at),
                _ => false,
            })
            .collect();
        due.sort_by_key(|r| (r.letter.retry_after, r.letter.id));
        let ids: Vec<DlqId> = due.iter().take(req.limit).map(|r| r.letter.id).collect();
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
                Some(Claimed { letter: l.clone(), lease: Lease { id, token } })
            })
            .collect()
    }

    fn settle(&mut self, outcome: Settlement, at: DateTime<Utc>) -> bool {
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
        let attempt = l.retry_count + 1;
        match &outcome {
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
        }
        self.attempts.push(AttemptRecord {
            dlq_id: lease.id,
            attempt,
            outcome: outcome.outcome_name().into(),
            error_class: outcome.failure().map(|f| f.class.name().into()),
            error_reason: outcome.failure().map(|f| f.reason.clone()),
            owner,
            at,
        });
        true
    }

    fn matching(&self, filter: &ListFilter) -> Vec<DlqId> {
        self.rows.values().rev().filter(|r| filter.matches(&r.letter)).map(|r| r.letter.id).collect()
    }

    fn record(&mut self, dlq_id: DlqId, action: &str, actor: &str, diff: serde_json::Value, at: DateTime<Utc>) {
        self.audit.push(AuditEntry { dlq_id, action: action.into(), actor: actor.into(), diff, at });
    }

    fn transition(&mut self, filter: &ListFilter, actor: &str, action: &str, to: Status) -> Vec<DlqId> {
        let at = now();
        let ids: Vec<DlqId> = self
            .matching(filter)
            .into_iter()
            .filter(|id| {
                let status = self.rows[id].letter.status;
                match to {
                    // A cut payload cannot succeed: it needs a patch with the whole event first.
                    Status::Pending => {
                        status == Status::FailedPermanently && !self.rows[id].letter.payload.is_truncated()
                    }
                    _ => !matches!(status, Status::Processing | Status::Discarded),
                }
            })
            .take(filter.limit)
            .collect();
        for id in &ids {
            let Some(row) = self.rows.get_mut(id) else { continue };
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
            self.record(*id, action, actor, diff, at);
        }
        ids
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

impl DeadLetterStore for MemoryStore {
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

    /// One retrier at a time among those sharing this `MemoryStore` (and its clones).
    fn try_lock_singleton(&self) -> BoxFuture<'_, StoreResult<Option<Box<dyn SingletonLock>>>> {
        let flag = &self.inner.singleton;
        let won = flag.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).is_ok();
        let lock: Option<Box<dyn SingletonLock>> = won.then(|| Box::new(MemoryLock(Arc::clone(flag))) as _);
        ready(Ok(lock))
    }

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
            wake |= matches!(outcome, Settlement::Release { .. } | Settlement::Retry { .. });
            if inner.settle(outcome, at) {
                report.applied += 1;
            } else {
                report.fenced.push(id);
            }
        }
        drop(inner);
        if wake {
            self.inner.work.notify_waiters();
        }
        ready(Ok(report))
    }

    fn wait_for_work(&self, max: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let _ = tokio::time::timeout(max, self.inner.work.notified()).await;
        })
    }

    fn get(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Option<DeadLetter>>> {
        ready(Ok(self.get_now(id)))
    }

    fn list(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>> {
        let inner = self.lock();
        let rows = inner.matching(&filter).into_iter().take(filter.limit).map(|id| inner.rows[&id].letter.clone());
        ready(Ok(rows.collect()))
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<Vec<StatsRow>>> {
        let mut counts: BTreeMap<(String, Status), u64> = BTreeMap::new();
        for row in self.lock().rows.values() {
            *counts.entry((row.letter.event_type.clone(), row.letter.status)).or_default() += 1;
        }
        let rows = counts.into_iter().map(|((event_type, status), count)| StatsRow { event_type, status, count });
        ready(Ok(rows.collect()))
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
                .or_insert_with(|| FailureGroup {
                    fingerprint: l.failure.fingerprint.clone(),
                    event_type: l.event_type.clone(),
                    kind: l.failure.kind.clone(),
                    sample_reason: l.failure.reason.clone(),
                    count: 0,
                })
                .count += 1;
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

    fn redrive(&self, filter: ListFilter, actor: &str) -> BoxFuture<'_, StoreResult<Vec<DlqId>>> {
        let ids = self.lock().transition(&filter, actor, "redrive", Status::Pending);
        self.inner.work.notify_waiters();
        ready(Ok(ids))
    }

    fn discard(&self, filter: ListFilter, actor: &str) -> BoxFuture<'_, StoreResult<Vec<DlqId>>> {
        ready(Ok(self.lock().transition(&filter, actor, "discard", Status::Discarded)))
    }

    fn patch_payload(&self, id: DlqId, payload: Payload, actor: &str) -> BoxFuture<'_, StoreResult<()>> {
        if let Err(e) = payload.check_fits(DEFAULT_MAX_PAYLOAD_BYTES) {
            return ready(Err(e));
        }
        let at = now();
        let mut inner = self.lock();
        let result = match inner.rows.get_mut(&id) {
            None => Err(Error::NotFound(id)),
            Some(row) if row.letter.status == Status::Processing => Err(Error::InvalidState {
                id,
                status: Status::Processing,
                action: "patch",
                needs: "any status but PROCESSING",
            }),
            Some(row) => {
                let diff = serde_json::json!({ "payload": { "old": payload_json(&row.letter.payload), "new": payload_json(&payload) } });
                row.letter.payload = payload;
                row.letter.updated_at = at;
                inner.record(id, "patch", actor, diff, at);
                Ok(())
            }
        };
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
        let live: std::collections::HashSet<DlqId> = inner.rows.keys().copied().collect();
        inner.attempts.retain(|a| live.contains(&a.dlq_id));
        inner.audit.retain(|a| live.contains(&a.dlq_id));
        inner.dedupe.retain(|_, id| live.contains(id));
        ready(Ok(purged))
    }
}

/// A failure as the SQL stores keep it: the class by name, without the retry-after hint
/// (which was already applied to `retry_after`).
fn stored(mut failure: crate::FailureInfo) -> crate::FailureInfo {
    if failure.class.is_transient() {
        failure.class = crate::ErrorClass::TRANSIENT;
    }
    failure
}

/// A payload as JSON for audit diffs: raw bytes as lossy text.
pub(crate) fn payload_json(payload: &Payload) -> serde_json::Value {
    match payload {
        Payload::Json(v) => v.clone(),
        Payload::Raw { bytes, .. } => serde_json::Value::String(String::from_utf8_lossy(bytes).into_owned()),
    }
}
