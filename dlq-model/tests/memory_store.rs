//! The model and the code agree: `MemoryStore` is driven through the model's explored paths
//! (every state the checker visits, by the path it reached it), and after each step its rows
//! and the operation's cursor are compared with the model's.
//!
//! The model is PostgreSQL's protocol; a step the store takes differently is where a path
//! stops being followed, not a failure: a claim of a row the store would not take first
//! (the store takes the oldest due row, the model any), the expiry of a lease while an older
//! one runs on (the store has one clock), and the database's crashes (the configurations here
//! have none: `MemoryStore` commits everything at once). The outcome written is the one the
//! model's `decide` chose (the retrier's own `decide` is held by its tests).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlq_core::store::{
    ActionKind, AuditNote, BatchAction, ClaimRequest, EraseRequest, Lease, NewDeadLetter, OperationStep, PatchBatch,
    RowEdit, Settlement, SubjectHash,
};
use dlq_core::{DeadLetterStore, DeadReason, Error, ErrorClass, FailureInfo, MemoryStore, Payload, Status};
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
struct Follow<'a> {
    protocol: &'a Protocol,
    store: MemoryStore,
    state: State,
    /// Each retrier's lease (by the model's retrier index).
    leases: HashMap<u8, Lease>,
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

impl Follow<'_> {
    async fn new(protocol: &Protocol) -> Follow<'_> {
        let store = MemoryStore::new();
        let kind = match protocol.operation {
            Some(Operation::Redrive) | None => ActionKind::Redrive,
            Some(Operation::Discard) => ActionKind::Discard,
            Some(Operation::Patch) => ActionKind::Patch,
        };
        let operation = store.create_operation(kind, json!({}), note()).await.expect("stored").id;
        let state = protocol.init_states().remove(0);
        Follow { protocol, store, state, leases: HashMap::new(), deadlines: HashMap::new(), operation }
    }

    /// Takes one step in the store and in the model, then compares them.
    async fn step(&mut self, action: &Action) -> Result<(), Stop> {
        tokio::time::advance(Duration::from_millis(1)).await;
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
                assert_eq!(stored.cursor, i64::from(cursor), "the stored cursor");
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
            assert_eq!(parked.id, i64::from(live), "the live row of the key");
        } else if next.db().rows.len() > self.state.db().rows.len() {
            assert!(!parked.deduplicated, "a new row");
            assert_eq!(parked.id, i64::from(next.db().next_id - 1), "the new row's id");
        }
    }

    async fn claim(&mut self, retrier: u8, row: u8, next: &State) -> Result<(), Stop> {
        // The store takes the oldest due row, (retry_after, id) first.
        let now = tokio::time::Instant::now();
        let first = self
            .store
            .snapshot()
            .into_iter()
            .filter(|r| match r.status {
                Status::Pending => true,
                Status::Processing => self.deadlines.get(&(r.id as u8)).is_some_and(|d| *d <= now),
                _ => false,
            })
            .min_by_key(|r| (r.retry_after, r.id))
            .map(|r| r.id);
        if first != Some(i64::from(row)) {
            return Err(Stop::Diverges);
        }
        let request =
            ClaimRequest { event_types: vec!["payment".into()], limit: 1, lease: LEASE, owner: format!("r{retrier}") };
        let claimed = self.store.claim(request).await.expect("claimed");
        assert_eq!(claimed.iter().map(|c| c.lease.id).collect::<Vec<_>>(), [i64::from(row)], "the row claimed");
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
        let step = OperationStep { operation: self.operation, from: from.into(), to: row.into(), refused_before: 0 };
        let result = match self.protocol.operation.expect("an operation") {
            Operation::Patch => {
                let edit = RowEdit { id: row.into(), old: payload(seen), new: payload(seen + 1) };
                let patch = json!([{"op": "replace", "path": "/n", "value": seen + 1}]);
                let batch = PatchBatch { rows: vec![edit], note: note(), patch, step };
                self.store.patch_rows(batch).await
            }
            op => {
                let action = if op == Operation::Redrive { ActionKind::Redrive } else { ActionKind::Discard };
                let batch =
                    BatchAction { action, ids: vec![row.into()], note: note(), max_redrives: None, step: Some(step) };
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
        let rows = self.store.snapshot();
        let mut ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        let model: Vec<i64> = db.rows.iter().map(|r| i64::from(r.id)).collect();
        assert_eq!(ids, model, "the rows");
        for row in &rows {
            let m = db.row(row.id as u8).expect("the same rows");
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
        assert_eq!(stored.cursor, i64::from(db.operation.cursor), "the operation's cursor");
    }

    fn holder(&self, token: u8) -> Option<u8> {
        self.state
            .retriers
            .iter()
            .position(|r| matches!(r, Retrier::Running { token: t, .. } if *t == token))
            .map(|i| i as u8)
    }
}

/// Follows every maximal path of `protocol` as far as the store takes it, and asserts that
/// every kind of step the paths hold was followed somewhere.
async fn agree(name: &str, protocol: Protocol) {
    let paths = paths(&protocol);
    let (mut followed, mut total, mut whole) = (0, 0, 0);
    let (mut kinds, mut kinds_followed) = (HashSet::new(), HashSet::new());
    for path in &paths {
        let mut run = Follow::new(&protocol).await;
        total += path.len();
        kinds.extend(path.iter().map(std::mem::discriminant));
        let mut done = 0;
        for action in path {
            if run.step(action).await.is_err() {
                break;
            }
            kinds_followed.insert(std::mem::discriminant(action));
            done += 1;
        }
        followed += done;
        whole += usize::from(done == path.len());
    }
    eprintln!("{name}: {} paths, {whole} followed to their end, {followed} of {total} steps", paths.len());
    assert_eq!(kinds_followed, kinds, "{name}: every kind of step is followed somewhere");
}

/// A configuration the store can follow: no database crash, retriers kept apart.
const fn memory(protocol: Protocol) -> Protocol {
    Protocol { db_crashes: 0, symmetry: false, ..protocol }
}

#[tokio::test(start_paused = true)]
async fn the_memory_store_follows_retries() {
    agree("retries", memory(Protocol { events: 1, ..Protocol::retries() })).await;
}

#[tokio::test(start_paused = true)]
async fn the_memory_store_follows_a_redrive() {
    agree("redrive", memory(Protocol::operators(Operation::Redrive))).await;
}

#[tokio::test(start_paused = true)]
async fn the_memory_store_follows_a_discard() {
    agree("discard", memory(Protocol::operators(Operation::Discard))).await;
}

#[tokio::test(start_paused = true)]
async fn the_memory_store_follows_a_group_patch() {
    agree("patch", memory(Protocol::operators(Operation::Patch))).await;
}

#[tokio::test(start_paused = true)]
async fn the_memory_store_follows_retention_and_erasure() {
    agree("retention", memory(Protocol::retention())).await;
}

/// The driver is no rubber stamp: a model that writes an outcome without comparing the
/// token disagrees with the store, which fences it: the row stays claimed there.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "row 1's status")]
async fn a_model_that_disagrees_with_the_store_is_caught() {
    let protocol = memory(Protocol { events: 1, ..Protocol::retries() });
    agree("no token", protocol.mutated(dlq_model::Mutation::SettleWithoutToken)).await;
}

/// A model whose dedupe index covers `PENDING` rows only parks a second row where the store
/// deduplicates.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "a new row")]
async fn a_model_with_another_dedupe_rule_is_caught() {
    let protocol = memory(Protocol { events: 1, ..Protocol::retries() });
    agree("dedupe", protocol.mutated(dlq_model::Mutation::DedupeIndexPendingOnly)).await;
}
