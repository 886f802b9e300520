//! A store driven through the model's explored paths (every state the checker visits, by
//! the path it reached it): after each step its rows and the operation's cursor are compared
//! with the model's, and its answers with the model's.
//!
//! The model is PostgreSQL's protocol; a step the store takes differently is where a path
//! stops being followed, not a failure: a claim of a row the store would not take first
//! (a store takes the oldest due row, the model any), the expiry of a lease while an older
//! one runs on (a store has one clock; a store on the wall clock follows no expiry), and the
//! database's crashes (the configurations have none). The outcome written is the one the
//! model's `decide` chose (the retrier's own `decide` is held by its tests).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlq_core::store::{
    ActionKind, AuditNote, BatchAction, ClaimRequest, EraseRequest, Lease, NewDeadLetter, OperationStep, PatchBatch,
    RowEdit, Settlement, SubjectHash,
};
use dlq_core::{
    Error, ErrorClass, ListFilter, Payload, Status, adapter::DeadReason, classify::FailureInfo, store::prelude::*,
};
use dlq_model::db::{BatchResult, Db, Outcome, Status as ModelStatus};
use dlq_model::model::{Operator, ParkPhase, Retrier, Run};
use dlq_model::{Action, Operation, Protocol, State};
use serde_json::json;
use stateright::{Checker, Model, Path};

/// A lease lasts an hour; each step moves the clock a millisecond, so leases end in the order
/// they were taken.
const LEASE: Duration = Duration::from_secs(3600);

/// The maximal paths the checker visits (a path that is the start of another is left out).
fn paths(protocol: &Protocol) -> Vec<Vec<Action>> {
    let found: Arc<Mutex<Vec<Vec<Action>>>> = Arc::default();
    let sink = Arc::clone(&found);
    let visitor = move |path: Path<State, Action>| sink.lock().expect("not poisoned").push(path.into_actions());
    protocol.clone().checker().visitor(visitor).spawn_bfs().join();
    let all = std::mem::take(&mut *found.lock().expect("not poisoned"));
    let prefixes: HashSet<&[Action]> = all.iter().flat_map(|p| (0..p.len()).map(|n| &p[..n])).collect();
    all.iter().filter(|p| !prefixes.contains(p.as_slice())).cloned().collect()
}

fn payload(n: u8) -> Payload {
    Payload::Json(json!({ "n": n }))
}

fn subject(event: u8) -> SubjectHash {
    SubjectHash::from_hex(format!("{event:064x}")).expect("64 hex digits")
}

fn failure() -> FailureInfo {
    FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None)
}

fn note() -> AuditNote {
    AuditNote::new("model", "a path of the model")
}

const fn status(s: ModelStatus) -> Status {
    match s {
        ModelStatus::Pending => Status::Pending,
        ModelStatus::Processing => Status::Processing,
        ModelStatus::Succeeded => Status::Succeeded,
        ModelStatus::FailedPermanently => Status::FailedPermanently,
        ModelStatus::Discarded => Status::Discarded,
    }
}

/// One path followed: the store, the model's state, and what the driver holds.
struct Follow<'a, S> {
    protocol: &'a Protocol,
    store: S,
    /// Whether the store's clock is tokio's (paused): leases then expire when told to.
    paused: bool,
    state: State,
    /// Each retrier's lease (by the model's retrier index).
    leases: HashMap<u8, Lease>,
    /// The store's id of each model row (ids are opaque: PostgreSQL's sequence skips the ids
    /// of skipped inserts, the model's does not; only their order is compared).
    ids: HashMap<u8, i64>,
    /// When each claimed row's current lease ends, on tokio's clock.
    deadlines: HashMap<u8, tokio::time::Instant>,
    operation: i64,
}

/// Why a path stopped being followed before its end.
#[derive(Debug)]
enum Stop {
    /// The store takes this step differently from PostgreSQL; not a disagreement.
    Diverges,
}

impl<S: DeadLetterStore> Follow<'_, S> {
    async fn new(protocol: &Protocol, store: S, paused: bool) -> Follow<'_, S> {
        let kind = match protocol.operation {
            Some(Operation::Redrive) | None => ActionKind::Redrive,
            Some(Operation::Discard) => ActionKind::Discard,
            Some(Operation::Patch) => ActionKind::Patch,
        };
        let operation = store.create_operation(kind, json!({}), note()).await.expect("stored").id;
        let state = protocol.init_states().remove(0);
        Follow {
            protocol,
            store,
            paused,
            state,
            leases: HashMap::new(),
            ids: HashMap::new(),
            deadlines: HashMap::new(),
            operation,
        }
    }

    /// Takes one step in the store and in the model, then compares them.
    async fn step(&mut self, action: &Action) -> Result<(), Stop> {
        if self.paused {
            tokio::time::advance(Duration::from_millis(1)).await;
        } else {
            // Wall-clock stores: each step a moment after the one before (a purge takes rows
            // finished before now).
            std::thread::sleep(Duration::from_millis(1));
        }
        let next = self.protocol.next_state(&self.state, action.clone()).expect("a step of the path");
        self.drive(action, &next).await?;
        self.state = next;
        self.compare().await;
        Ok(())
    }

    async fn drive(&mut self, action: &Action, next: &State) -> Result<(), Stop> {
        match *action {
            Action::Park { parker, .. } => self.park(parker, next).await,
            Action::Claim { retrier, row } => self.claim(retrier, row, next).await?,
            Action::Settle { retrier, run } => self.settle(retrier, run).await,
            Action::RetrierCrash { retrier } => {
                self.leases.remove(&retrier);
            }
            Action::Stall { retrier } => {
                let Retrier::Running { row, .. } = self.state.retriers[usize::from(retrier)] else { return Ok(()) };
                self.expire(row, next).await?;
            }
            Action::Expire { row } => self.expire(row, next).await?,
            Action::Resume { operator } => {
                let stored = self.store.operation(self.operation).await.expect("read").expect("stored");
                let Operator::Ready { cursor } = next.operators[usize::from(operator)] else { unreachable!() };
                assert_eq!(stored.cursor, self.id(cursor), "the stored cursor");
            }
            Action::Batch { operator, .. } => self.batch(operator).await,
            Action::Purge => {
                let purged = self.store.purge(Duration::ZERO).await.expect("purged");
                let model = self.state.db().rows.len() - next.db().rows.len();
                assert_eq!(purged, model as u64, "rows purged");
            }
            Action::Erase => {
                let erased = self.store.erase(EraseRequest::new(subject(0), note())).await.expect("erased");
                let model = self.state.db().rows.len() - next.db().rows.len();
                assert_eq!(erased.rows, model as u64, "rows erased");
            }
            // PostgreSQL's lookup of a skipped letter: the store answered in the park.
            Action::Lookup { .. } | Action::Select { .. } | Action::OperatorCrash { .. } | Action::Quiesce => {}
            Action::Flush | Action::DbCrash { .. } => return Err(Stop::Diverges),
        }
        Ok(())
    }

    async fn park(&mut self, parker: u8, next: &State) {
        let event = self.state.parkers[usize::from(parker)].event;
        let letter = NewDeadLetter::new("payment", payload(0), failure())
            .with_dedupe_key(format!("e{event}"))
            .with_subject(subject(event));
        let parked = self.store.park(letter).await.expect("parked");
        if next.parkers[usize::from(parker)].phase == ParkPhase::Lookup {
            let live = self.state.db().dedupe_lookup(event).expect("a live row skipped the insert");
            assert!(parked.deduplicated, "the store deduplicates where PostgreSQL skips the insert");
            assert_eq!(parked.id, self.id(live), "the live row of the key");
        } else if next.db().rows.len() > self.state.db().rows.len() {
            assert!(!parked.deduplicated, "a new row");
            let newest = self.ids.values().max().copied().unwrap_or(0);
            assert!(parked.id > newest, "a new row's id comes after every other");
            self.ids.insert(next.db().next_id - 1, parked.id);
        }
    }

    async fn claim(&mut self, retrier: u8, row: u8, next: &State) -> Result<(), Stop> {
        // The store takes the oldest due row, (retry_after, id) first.
        let now = tokio::time::Instant::now();
        let first = self
            .rows()
            .await
            .into_iter()
            .filter(|r| match r.status {
                Status::Pending => true,
                Status::Processing => self.deadlines.get(&self.model_id(r.id)).is_some_and(|d| *d <= now),
                _ => false,
            })
            .min_by_key(|r| (r.retry_after, r.id))
            .map(|r| r.id);
        if first != Some(self.id(row)) {
            return Err(Stop::Diverges);
        }
        let request =
            ClaimRequest { event_types: vec!["payment".into()], limit: 1, lease: LEASE, owner: format!("r{retrier}") };
        let claimed = self.store.claim(request).await.expect("claimed");
        assert_eq!(claimed.iter().map(|c| c.lease.id).collect::<Vec<_>>(), [self.id(row)], "the row claimed");
        let Retrier::Running { retry_count, .. } = next.retriers[usize::from(retrier)] else { unreachable!() };
        assert_eq!(claimed[0].retry_count, u32::from(retry_count), "the retry count claimed");
        self.leases.insert(retrier, claimed[0].lease);
        self.deadlines.insert(row, now + LEASE);
        Ok(())
    }

    async fn settle(&mut self, retrier: u8, run: Run) {
        let Retrier::Running { row, token, retry_count } = self.state.retriers[usize::from(retrier)] else {
            unreachable!("a settle of a running retrier")
        };
        let lease = self.leases.remove(&retrier).expect("the retrier's lease");
        let settlement = match self.protocol.decide(run, retry_count) {
            Outcome::Succeeded => Settlement::Succeeded { lease },
            Outcome::Retry => Settlement::Retry { lease, delay: Duration::ZERO, failure: failure() },
            Outcome::Dead => {
                Settlement::Dead { lease, reason: DeadReason::RetriesExhausted, failure: failure(), counts: true }
            }
        };
        let report = self.store.settle(vec![settlement]).await.expect("settled");
        let fenced = self.state.db().clone().settle(row, token, self.protocol.decide(run, retry_count), None).is_none();
        assert_eq!(report.fenced.is_empty(), !fenced, "fenced in the store as in the model");
    }

    async fn expire(&mut self, row: u8, next: &State) -> Result<(), Stop> {
        if !self.paused {
            return Err(Stop::Diverges);
        }
        let deadline = *self.deadlines.get(&row).expect("a claimed row");
        // Every lease that ends by then must end in the model too.
        for (other, at) in &self.deadlines {
            let live = next.db().row(*other).is_some_and(|r| r.status == ModelStatus::Processing && !r.expired);
            if *at <= deadline && live {
                return Err(Stop::Diverges);
            }
        }
        let now = tokio::time::Instant::now();
        tokio::time::advance(deadline.saturating_duration_since(now)).await;
        Ok(())
    }

    async fn batch(&mut self, operator: u8) {
        let Operator::Selected { from, row, payload: seen } = self.state.operators[usize::from(operator)] else {
            unreachable!("a batch of a selected row")
        };
        let id = self.id(row);
        let step = OperationStep { operation: self.operation, from: self.id(from), to: id, refused_before: 0 };
        let result = match self.protocol.operation.expect("an operation") {
            Operation::Patch => {
                let edit = RowEdit { id, old: payload(seen), new: payload(seen + 1) };
                let patch = json!([{"op": "replace", "path": "/n", "value": seen + 1}]);
                let batch = PatchBatch { rows: vec![edit], note: note(), patch, step };
                self.store.patch_rows(batch).await
            }
            op => {
                let action = if op == Operation::Redrive { ActionKind::Redrive } else { ActionKind::Discard };
                let batch = BatchAction { action, ids: vec![id], note: note(), max_redrives: None, step: Some(step) };
                self.store.apply(batch).await
            }
        };
        let model =
            self.state.db().clone().apply_batch(self.protocol.operation.expect("an operation"), from, row, seen, None);
        let conflict = model == BatchResult::Conflict;
        match result {
            Err(Error::Conflict { .. }) => assert!(conflict, "a conflict the model does not have"),
            Err(other) => panic!("the batch failed: {other}"),
            Ok(_) => assert!(!conflict, "the model's batch conflicts, the store's does not"),
        }
    }

    /// The store's rows and cursor against the model's.
    async fn compare(&self) {
        let db: &Db = self.state.db();
        let rows = self.rows().await;
        let mut ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        let model: Vec<i64> = db.rows.iter().map(|r| self.id(r.id)).collect();
        assert_eq!(ids, model, "the rows");
        for row in &rows {
            let m = db.row(self.model_id(row.id)).expect("the same rows");
            let id = row.id;
            assert_eq!(row.status, status(m.status), "row {id}'s status");
            assert_eq!(row.retry_count, u32::from(m.retry_count), "row {id}'s retry count");
            assert_eq!(row.redrive_count, u32::from(m.redrive_count), "row {id}'s redrive count");
            assert_eq!(row.payload, payload(m.payload), "row {id}'s payload");
            if let Some(holder) = m.token.and_then(|t| self.holder(t)) {
                assert_eq!(row.lease_owner.as_deref(), Some(format!("r{holder}").as_str()), "row {id}'s lease owner");
            }
        }
        let stored = self.store.operation(self.operation).await.expect("read").expect("stored");
        assert_eq!(stored.cursor, self.id(db.operation.cursor), "the operation's cursor");
    }

    /// The store's id of a model row (0, the cursor's start, is 0).
    fn id(&self, model: u8) -> i64 {
        if model == 0 { 0 } else { self.ids[&model] }
    }

    /// The model's id of a store row.
    fn model_id(&self, store: i64) -> u8 {
        self.ids.iter().find(|(_, s)| **s == store).map(|(m, _)| *m).expect("a row the model parked")
    }

    async fn rows(&self) -> Vec<dlq_core::DeadLetter> {
        self.store.list(ListFilter::default().limit(usize::MAX)).await.expect("listed")
    }

    fn holder(&self, token: u8) -> Option<u8> {
        self.state
            .retriers
            .iter()
            .position(|r| matches!(r, Retrier::Running { token: t, .. } if *t == token))
            .map(|i| i as u8)
    }
}

/// Follows the maximal paths of `protocol` (at most `at_most` of them, spread evenly) as far
/// as the store takes them, and asserts that every kind of step the paths hold was followed
/// somewhere (but a lease's expiry on a store that is not `paused`).
pub(crate) async fn agree<S, F>(name: &str, protocol: Protocol, paused: bool, at_most: usize, store: impl Fn() -> F)
where
    S: DeadLetterStore,
    F: Future<Output = S>,
{
    let all = paths(&protocol);
    let paths: Vec<&Vec<Action>> = all.iter().step_by(all.len() / at_most.max(1) + 1).collect();
    let (mut followed, mut total, mut whole) = (0, 0, 0);
    let (mut kinds, mut kinds_followed) = (HashSet::new(), HashSet::new());
    let expiries = [Action::Stall { retrier: 0 }, Action::Expire { row: 0 }].map(|a| std::mem::discriminant(&a));
    for path in &paths {
        let mut run = Follow::new(&protocol, store().await, paused).await;
        total += path.len();
        kinds.extend(path.iter().map(std::mem::discriminant).filter(|k| paused || !expiries.contains(k)));
        let mut done = 0;
        for action in path.iter() {
            if run.step(action).await.is_err() {
                break;
            }
            kinds_followed.insert(std::mem::discriminant(action));
            done += 1;
        }
        followed += done;
        whole += usize::from(done == path.len());
    }
    eprintln!(
        "{name}: {} of {} paths, {whole} followed to their end, {followed} of {total} steps",
        paths.len(),
        all.len()
    );
    assert_eq!(kinds_followed, kinds, "{name}: every kind of step is followed somewhere");
}

/// A configuration a store can follow: no database crash, retriers kept apart.
pub(crate) const fn no_crash(protocol: Protocol) -> Protocol {
    Protocol { db_crashes: 0, symmetry: false, ..protocol }
}

/// A configuration a store on the wall clock can follow: no lease expires (no stall, and no
/// retrier crash to leave a lease behind).
#[allow(dead_code, reason = "`MemoryStore` follows the expiries too")]
pub(crate) const fn wall_clock(protocol: Protocol) -> Protocol {
    Protocol { stalls: 0, retrier_crashes: 0, ..no_crash(protocol) }
}
