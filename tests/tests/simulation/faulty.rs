//! `Faulty<S>`: a store that forwards every call of every part of the contract to an inner
//! store, and on a seeded draw per call fails it without touching the store, delays it,
//! stalls it past a lease, or applies it and loses the reply. It counts what it injected,
//! logs it in order (the simulation's trace), and watches the claims and settlements that
//! pass through it for the checker.
//!
//! Two mutations break what the checker must catch: `StaleSettle` presents every outcome
//! under the row's latest claim (the store's token comparison, undone), `ParkNotStored`
//! answers some parks `Parked` with a row it never stored.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlq_core::admin::{AttemptRecord, AuditEntry, FailureGroup, RetrierHeartbeat, StatsRow};
use dlq_core::catalog::{EventTypeInfo, VersionSchema};
use dlq_core::store::{
    ActionKind, AuditNote, BatchAction, BatchReport, BoxFuture, Circuit, CircuitLogEntry, CircuitWrite, Circuits,
    ClaimCap, ClaimRequest, Claimed, EraseRequest, Erasure, HistogramBucket, KeyCheck, Lease, Maintenance,
    NewDeadLetter, Operation, OperationState, Parked, PatchBatch, PatchRequest, SettleReport, Settlement,
    SingletonLock, StoreId, StoreResult, SubjectHash, TableHealth, VersionUpgrade, WorkSignal, WorkTicket, prelude::*,
};
use dlq_core::{DeadLetter, DlqId, Error, ListFilter};
use tokio::time::Instant;

/// One seeded source of every choice of a run: the store's faults, the handlers' outcomes
/// and delays, the scenario's timings. Shared, so one seed decides them all.
#[derive(Clone)]
pub(crate) struct Dice(Arc<Mutex<fastrand::Rng>>);

impl Dice {
    pub(crate) fn new(seed: u64) -> Self {
        Self(Arc::new(Mutex::new(fastrand::Rng::with_seed(seed))))
    }

    /// A number in `0..n`.
    pub(crate) fn below(&self, n: u64) -> u64 {
        self.0.lock().unwrap().u64(0..n)
    }

    /// `true` with `percent` in 100.
    pub(crate) fn chance(&self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A duration in `from..to`, in whole milliseconds.
    pub(crate) fn between(&self, from: Duration, to: Duration) -> Duration {
        let (a, b) = (from.as_millis() as u64, to.as_millis() as u64);
        Duration::from_millis(a + self.below((b - a).max(1)))
    }
}

/// What the wrapper does to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Fails without touching the store.
    Fail,
    /// Reaches the store after a short delay.
    Slow(Duration),
    /// Reaches the store after a delay past a lease: the caller's claim has expired by then.
    Stall(Duration),
    /// Applied to the store, then answered with an error: a reply lost after the commit.
    Lost,
}

/// A rule of the store broken on purpose, to show the checker catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Mutation {
    /// None: the store as it is.
    #[default]
    None,
    /// Every outcome presented under the row's latest claim, whatever token the caller held.
    StaleSettle,
    /// A park that should fail answers `Parked` with a row it never stored.
    ParkNotStored,
}

/// The wrapper's dice, switch and records, shared by its clones and read by the checker.
pub(crate) struct Chaos {
    dice: Dice,
    on: AtomicBool,
    mutation: Mutation,
    /// How long a stall sleeps before it reaches the store: past the retriers' lease.
    stall: Duration,
    /// Every injected fault, in order (`call:fault`), with the scenario's notes.
    pub(crate) trace: Mutex<Vec<String>>,
    /// Injected faults by kind.
    pub(crate) counts: Mutex<BTreeMap<&'static str, u64>>,
    /// The latest claim of each row the store granted, and when its lease ends.
    pub(crate) claims: Mutex<HashMap<DlqId, (Lease, Instant)>>,
    /// Handler runs of each row whose outcome was not written: attempts in settlements that
    /// failed before reaching the store, or that the store fenced; and releases written.
    pub(crate) lost_runs: Mutex<HashMap<DlqId, u64>>,
    /// Releases presented, per row (a run cut by shutdown leaves one).
    pub(crate) releases: Mutex<HashMap<DlqId, u64>>,
    fake_ids: Mutex<DlqId>,
    start: Instant,
    /// Whether the trace holds every call, not only the faulty ones (`DLQ_SIM_DEBUG`).
    every_call: bool,
    /// Calls that always stall this long, whether faults are on or not: a regression test's
    /// script.
    scripted: Mutex<HashMap<&'static str, Duration>>,
}

impl Chaos {
    pub(crate) fn new(dice: Dice, mutation: Mutation, stall: Duration) -> Arc<Self> {
        Arc::new(Self {
            dice,
            on: AtomicBool::new(true),
            mutation,
            stall,
            trace: Mutex::default(),
            counts: Mutex::default(),
            claims: Mutex::default(),
            lost_runs: Mutex::default(),
            releases: Mutex::default(),
            fake_ids: Mutex::new(1_000_000),
            start: Instant::now(),
            every_call: std::env::var_os("DLQ_SIM_DEBUG").is_some(),
            scripted: Mutex::default(),
        })
    }

    /// Stops injecting (the mutation stays).
    pub(crate) fn calm(&self) {
        self.on.store(false, Ordering::SeqCst);
    }

    /// Makes every call of `name` reach the store `after` this long.
    pub(crate) fn stall_every(&self, name: &'static str, after: Duration) {
        self.scripted.lock().unwrap().insert(name, after);
    }

    /// Adds a line of the scenario's own to the trace.
    pub(crate) fn note(&self, line: String) {
        self.trace.lock().unwrap().push(format!("{:?} {line}", self.start.elapsed()));
    }

    /// The fault for one call of `name`, drawn when the call is made: 4 % fail, 4 % lost
    /// replies, 8 % slow (up to 2 s), 1 % stalled past the lease.
    fn draw(&self, name: &'static str) -> Option<Fault> {
        if let Some(stall) = self.scripted.lock().unwrap().get(name) {
            return Some(Fault::Stall(*stall));
        }
        if self.every_call {
            self.trace.lock().unwrap().push(format!("{:?} {name}", self.start.elapsed()));
        }
        if !self.on.load(Ordering::SeqCst) {
            return None;
        }
        let roll = self.dice.below(100);
        let fault = match roll {
            0..4 => Fault::Fail,
            4..8 => Fault::Lost,
            8..16 => Fault::Slow(self.dice.between(Duration::from_millis(10), Duration::from_secs(2))),
            16 => Fault::Stall(self.stall + self.dice.between(Duration::ZERO, self.stall)),
            _ => return None,
        };
        let kind = match fault {
            Fault::Fail => "fail",
            Fault::Lost => "lost",
            Fault::Slow(_) => "slow",
            Fault::Stall(_) => "stall",
        };
        *self.counts.lock().unwrap().entry(kind).or_default() += 1;
        self.trace.lock().unwrap().push(format!("{name}:{fault:?}"));
        Some(fault)
    }

    fn note_claims(&self, claimed: &[Claimed], lease: Duration) {
        let until = Instant::now() + lease;
        let mut claims = self.claims.lock().unwrap();
        for c in claimed {
            claims.insert(c.id(), (c.lease, until));
        }
    }

    fn note_lost(&self, outcomes: &[Settlement], ids: impl Fn(DlqId) -> bool) {
        let mut lost = self.lost_runs.lock().unwrap();
        for o in outcomes.iter().filter(|o| ids(o.lease().id)) {
            let attempts = match o {
                Settlement::Repeated { failed, .. } => failed.len() as u64 + 1,
                Settlement::Release { .. } => 0,
                _ => 1,
            };
            *lost.entry(o.lease().id).or_default() += attempts;
        }
    }

    fn note_releases(&self, outcomes: &[Settlement]) {
        let mut releases = self.releases.lock().unwrap();
        for o in outcomes.iter().filter(|o| matches!(o, Settlement::Release { .. })) {
            *releases.entry(o.lease().id).or_default() += 1;
        }
    }

    /// The outcomes as the caller presented them, or, under `StaleSettle`, each under the
    /// row's latest claim.
    fn present(&self, mut outcomes: Vec<Settlement>) -> Vec<Settlement> {
        if self.mutation != Mutation::StaleSettle {
            return outcomes;
        }
        let claims = self.claims.lock().unwrap();
        for o in &mut outcomes {
            let latest = |lease: &mut Lease| {
                if let Some((current, _)) = claims.get(&lease.id) {
                    *lease = *current;
                }
            };
            match o {
                Settlement::Succeeded { lease }
                | Settlement::Retry { lease, .. }
                | Settlement::Dead { lease, .. }
                | Settlement::Release { lease } => latest(lease),
                Settlement::Repeated { last, .. } => match &mut **last {
                    Settlement::Succeeded { lease }
                    | Settlement::Retry { lease, .. }
                    | Settlement::Dead { lease, .. }
                    | Settlement::Release { lease } => latest(lease),
                    Settlement::Repeated { .. } => {}
                },
            }
        }
        outcomes
    }
}

fn injected(name: &str) -> Error {
    Error::Store(format!("injected fault in {name}").into())
}

/// A store over `S` whose every call may fail, wait, stall or lose its reply, as `chaos`
/// draws it.
pub(crate) struct Faulty<S> {
    inner: Arc<S>,
    pub(crate) chaos: Arc<Chaos>,
    /// The wake-ups the retriers wait on: the inner store's `WorkSignal` is a tokio `watch`
    /// channel, which wakes its waiters in a random order (it spreads them over eight
    /// `Notify`s chosen at random), and one seed must give one trace. Its tickets are this
    /// signal's, its waiters one `Notify`'s, woken in the order they came.
    work: WorkSignal,
    woken: tokio::sync::Notify,
}

impl<S: DeadLetterStore> Faulty<S> {
    pub(crate) fn new(inner: Arc<S>, chaos: Arc<Chaos>) -> Self {
        Self { inner, chaos, work: WorkSignal::new(), woken: tokio::sync::Notify::new() }
    }

    async fn parked(&self, letter: NewDeadLetter) -> StoreResult<Parked> {
        let parked = self.inner.park(letter).await;
        self.announce();
        parked
    }

    /// Work may be due: after every call that reached the store and may have parked, made a
    /// row due again or redriven one (more wake-ups than needed, never fewer).
    fn announce(&self) {
        self.work.announce();
        self.woken.notify_waiters();
    }

    /// One call: `f` makes the inner call (stores may do their work when called, not when
    /// polled, so a failed call never makes it).
    fn call<'a, T: Send + 'a>(
        &'a self,
        name: &'static str,
        f: impl FnOnce() -> BoxFuture<'a, StoreResult<T>> + Send + 'a,
    ) -> BoxFuture<'a, StoreResult<T>> {
        let fault = self.chaos.draw(name);
        Box::pin(async move {
            match fault {
                None => f().await,
                Some(Fault::Fail) => Err(injected(name)),
                Some(Fault::Slow(d) | Fault::Stall(d)) => {
                    tokio::time::sleep(d).await;
                    f().await
                }
                Some(Fault::Lost) => {
                    let _ = f().await;
                    Err(injected(name))
                }
            }
        })
    }
}

impl<S: DeadLetterStore> QueueStore for Faulty<S> {
    fn park(&self, letter: NewDeadLetter) -> BoxFuture<'_, StoreResult<Parked>> {
        let fault = self.chaos.draw("park");
        Box::pin(async move {
            match fault {
                None => self.parked(letter).await,
                Some(Fault::Fail) if self.chaos.mutation == Mutation::ParkNotStored => {
                    let mut next = self.chaos.fake_ids.lock().unwrap();
                    *next += 1;
                    Ok(Parked { id: *next, deduplicated: false, truncated: false })
                }
                Some(Fault::Fail) => Err(injected("park")),
                Some(Fault::Slow(d) | Fault::Stall(d)) => {
                    tokio::time::sleep(d).await;
                    self.parked(letter).await
                }
                Some(Fault::Lost) => {
                    let _ = self.parked(letter).await;
                    Err(injected("park"))
                }
            }
        })
    }

    fn park_many(&self, letters: Vec<NewDeadLetter>) -> BoxFuture<'_, StoreResult<Vec<Parked>>> {
        self.call("park_many", move || {
            Box::pin(async move {
                let parked = self.inner.park_many(letters).await;
                self.announce();
                parked
            })
        })
    }

    fn claim(&self, request: ClaimRequest) -> BoxFuture<'_, StoreResult<Vec<Claimed>>> {
        self.call("claim", move || {
            Box::pin(async move {
                let lease = request.lease;
                let claimed = self.inner.claim(request).await;
                if let Ok(claimed) = &claimed {
                    self.chaos.note_claims(claimed, lease);
                }
                claimed
            })
        })
    }

    fn settle(&self, outcomes: Vec<Settlement>) -> BoxFuture<'_, StoreResult<SettleReport>> {
        let fault = self.chaos.draw("settle");
        self.chaos.note_releases(&outcomes);
        Box::pin(async move {
            if let Some(Fault::Slow(d) | Fault::Stall(d)) = fault {
                tokio::time::sleep(d).await;
            }
            if fault == Some(Fault::Fail) {
                self.chaos.note_lost(&outcomes, |_| true);
                return Err(injected("settle"));
            }
            let presented = self.chaos.present(outcomes.clone());
            let report = self.inner.settle(presented).await;
            self.announce();
            if let Ok(report) = &report {
                self.chaos.note_lost(&outcomes, |id| report.fenced.contains(&id));
            }
            if fault == Some(Fault::Lost) {
                return Err(injected("settle"));
            }
            report
        })
    }

    fn settle_and_claim(
        &self,
        outcomes: Vec<Settlement>,
        next: ClaimRequest,
    ) -> BoxFuture<'_, StoreResult<(SettleReport, StoreResult<Vec<Claimed>>)>> {
        let fault = self.chaos.draw("settle_and_claim");
        self.chaos.note_releases(&outcomes);
        Box::pin(async move {
            if let Some(Fault::Slow(d) | Fault::Stall(d)) = fault {
                tokio::time::sleep(d).await;
            }
            if fault == Some(Fault::Fail) {
                self.chaos.note_lost(&outcomes, |_| true);
                return Err(injected("settle_and_claim"));
            }
            let lease = next.lease;
            let presented = self.chaos.present(outcomes.clone());
            let written = self.inner.settle_and_claim(presented, next).await;
            self.announce();
            if let Ok((report, claimed)) = &written {
                self.chaos.note_lost(&outcomes, |id| report.fenced.contains(&id));
                if let Ok(claimed) = claimed {
                    self.chaos.note_claims(claimed, lease);
                }
            }
            if fault == Some(Fault::Lost) {
                return Err(injected("settle_and_claim"));
            }
            written
        })
    }

    fn work_ticket(&self) -> WorkTicket {
        self.work.ticket()
    }

    fn wait_for_work(&self, after: WorkTicket, max: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let woken = self.woken.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if self.work.ticket() == after {
                let _ = tokio::time::timeout(max, woken).await;
            }
        })
    }

    fn get(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Option<DeadLetter>>> {
        self.call("get", move || self.inner.get(id))
    }

    fn max_payload_bytes(&self) -> usize {
        self.inner.max_payload_bytes()
    }

    fn store_id(&self) -> StoreId {
        self.inner.store_id()
    }

    fn capped_claims(&self) -> Option<&dyn CappedClaimStore> {
        self.inner.capped_claims().map(|_| self as &dyn CappedClaimStore)
    }
}

impl<S: DeadLetterStore> CappedClaimStore for Faulty<S> {
    fn claim_capped(&self, request: ClaimRequest, cap: ClaimCap) -> BoxFuture<'_, StoreResult<Vec<Claimed>>> {
        self.call("claim_capped", move || {
            Box::pin(async move {
                let lease = request.lease;
                let capped = self.inner.capped_claims().expect("offered only when the inner store has it");
                let claimed = capped.claim_capped(request, cap).await;
                if let Ok(claimed) = &claimed {
                    self.chaos.note_claims(claimed, lease);
                }
                claimed
            })
        })
    }
}

impl<S: DeadLetterStore> SingletonStore for Faulty<S> {
    fn try_lock_singleton(&self) -> BoxFuture<'_, StoreResult<Option<Box<dyn SingletonLock>>>> {
        self.call("try_lock_singleton", move || {
            self.inner.singleton().expect("offered only when the inner store has it").try_lock_singleton()
        })
    }
}

impl<S: DeadLetterStore> ReadStore for Faulty<S> {
    fn list(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>> {
        self.call("list", move || self.inner.list(filter))
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<Vec<StatsRow>>> {
        self.call("stats", move || self.inner.stats())
    }

    fn groups(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<FailureGroup>>> {
        self.call("groups", move || self.inner.groups(filter))
    }

    fn attempts(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AttemptRecord>>> {
        self.call("attempts", move || self.inner.attempts(id))
    }

    fn audit(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AuditEntry>>> {
        self.call("audit", move || self.inner.audit(id))
    }

    fn audit_entry(&self, id: i64) -> BoxFuture<'_, StoreResult<Option<AuditEntry>>> {
        self.call("audit_entry", move || self.inner.audit_entry(id))
    }

    fn count(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<u64>> {
        self.call("count", move || self.inner.count(filter))
    }

    fn count_purgeable(&self, older_than: Duration) -> BoxFuture<'_, StoreResult<u64>> {
        self.call("count_purgeable", move || self.inner.count_purgeable(older_than))
    }

    fn created_histogram(
        &self,
        since: chrono::DateTime<chrono::Utc>,
        step: Duration,
        buckets: u32,
    ) -> BoxFuture<'_, StoreResult<Vec<HistogramBucket>>> {
        self.call("created_histogram", move || self.inner.created_histogram(since, step, buckets))
    }

    fn table_health(&self) -> BoxFuture<'_, StoreResult<Option<TableHealth>>> {
        self.call("table_health", move || self.inner.table_health())
    }

    fn capacity(&self) -> BoxFuture<'_, StoreResult<Option<dlq_core::observe::Capacity>>> {
        self.call("capacity", move || self.inner.capacity())
    }
}

impl<S: DeadLetterStore> OperatorStore for Faulty<S> {
    fn apply(&self, batch: BatchAction) -> BoxFuture<'_, StoreResult<BatchReport>> {
        self.call("apply", move || {
            Box::pin(async move {
                let report = self.inner.apply(batch).await;
                self.announce();
                report
            })
        })
    }

    fn patch(&self, request: PatchRequest) -> BoxFuture<'_, StoreResult<i64>> {
        self.call("patch", move || self.inner.patch(request))
    }

    fn patch_rows(&self, batch: PatchBatch) -> BoxFuture<'_, StoreResult<BatchReport>> {
        self.call("patch_rows", move || {
            Box::pin(async move {
                let report = self.inner.patch_rows(batch).await;
                self.announce();
                report
            })
        })
    }

    fn upgrade(&self, upgrade: VersionUpgrade) -> BoxFuture<'_, StoreResult<i64>> {
        self.call("upgrade", move || self.inner.upgrade(upgrade))
    }

    fn create_operation(
        &self,
        action: ActionKind,
        spec: serde_json::Value,
        note: AuditNote,
    ) -> BoxFuture<'_, StoreResult<Operation>> {
        self.call("create_operation", move || self.inner.create_operation(action, spec, note))
    }

    fn operation(&self, id: i64) -> BoxFuture<'_, StoreResult<Option<Operation>>> {
        self.call("operation", move || self.inner.operation(id))
    }

    fn set_operation_state(&self, id: i64, state: OperationState) -> BoxFuture<'_, StoreResult<()>> {
        self.call("set_operation_state", move || self.inner.set_operation_state(id, state))
    }

    fn purge(&self, older_than: Duration) -> BoxFuture<'_, StoreResult<u64>> {
        self.call("purge", move || self.inner.purge(older_than))
    }

    fn maintain(&self) -> BoxFuture<'_, StoreResult<Maintenance>> {
        self.call("maintain", move || self.inner.maintain())
    }
}

impl<S: DeadLetterStore> FleetStore for Faulty<S> {
    fn heartbeat(&self, beat: &RetrierHeartbeat, expire_after: Duration) -> BoxFuture<'_, StoreResult<()>> {
        let beat = beat.clone();
        self.call("heartbeat", move || Box::pin(async move { self.inner.heartbeat(&beat, expire_after).await }))
    }

    fn remove_heartbeat(&self, owner: &str) -> BoxFuture<'_, StoreResult<()>> {
        let owner = owner.to_owned();
        self.call("remove_heartbeat", move || Box::pin(async move { self.inner.remove_heartbeat(&owner).await }))
    }

    fn retriers(&self) -> BoxFuture<'_, StoreResult<Vec<RetrierHeartbeat>>> {
        self.call("retriers", move || self.inner.retriers())
    }

    fn circuits(&self) -> BoxFuture<'_, StoreResult<Circuits>> {
        self.call("circuits", move || self.inner.circuits())
    }

    fn write_circuit(&self, write: CircuitWrite) -> BoxFuture<'_, StoreResult<Option<Circuit>>> {
        self.call("write_circuit", move || self.inner.write_circuit(write))
    }

    fn circuit_log(
        &self,
        event_type: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<CircuitLogEntry>>> {
        self.call("circuit_log", move || self.inner.circuit_log(event_type, limit))
    }

    fn publish_types(&self, types: Vec<EventTypeInfo>) -> BoxFuture<'_, StoreResult<()>> {
        self.call("publish_types", move || self.inner.publish_types(types))
    }

    fn event_types(&self) -> BoxFuture<'_, StoreResult<Vec<EventTypeInfo>>> {
        self.call("event_types", move || self.inner.event_types())
    }

    fn version_schemas(&self) -> BoxFuture<'_, StoreResult<Vec<VersionSchema>>> {
        self.call("version_schemas", move || self.inner.version_schemas())
    }

    fn accept_schema(&self, schema: VersionSchema) -> BoxFuture<'_, StoreResult<()>> {
        self.call("accept_schema", move || self.inner.accept_schema(schema))
    }

    fn singleton(&self) -> Option<&dyn SingletonStore> {
        self.inner.singleton().map(|_| self as &dyn SingletonStore)
    }
}

impl<S: DeadLetterStore> PrivacyStore for Faulty<S> {
    fn erase(&self, request: EraseRequest) -> BoxFuture<'_, StoreResult<Erasure>> {
        self.call("erase", move || self.inner.erase(request))
    }

    fn erasures(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<Erasure>>> {
        self.call("erasures", move || self.inner.erasures(limit))
    }

    fn subject_key_check(&self, check: KeyCheck) -> BoxFuture<'_, StoreResult<KeyCheck>> {
        self.call("subject_key_check", move || self.inner.subject_key_check(check))
    }

    fn count_subject(&self, subject: SubjectHash) -> BoxFuture<'_, StoreResult<u64>> {
        self.call("count_subject", move || self.inner.count_subject(subject))
    }

    fn mark_unreadable(&self, leases: Vec<Lease>) -> BoxFuture<'_, StoreResult<()>> {
        self.call("mark_unreadable", move || self.inner.mark_unreadable(leases))
    }

    fn count_unreadable(&self) -> BoxFuture<'_, StoreResult<u64>> {
        self.call("count_unreadable", move || self.inner.count_unreadable())
    }

    fn reveal(&self, id: DlqId, note: AuditNote) -> BoxFuture<'_, StoreResult<i64>> {
        self.call("reveal", move || self.inner.reveal(id, note))
    }
}
