//! The actors, their steps, the database's commits and crashes, and the properties.

use stateright::{Model, Property};

use crate::db::{BatchResult, Db, Inserted, Outcome, Status};
use crate::{Mutation, Protocol};

/// Where a parker (the live path's `park` call for one event) stands.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Parker {
    /// The event it parks.
    pub event: u8,
    /// Deliveries left to park.
    pub left: u8,
    /// Its call's step.
    pub phase: ParkPhase,
    /// The row it was last told `Parked` with.
    pub told: Option<u8>,
}

/// The steps of one `park` call on PostgreSQL (`dlq-sqlx/src/pg/park.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParkPhase {
    /// No call running.
    Ready,
    /// The insert was skipped for the key: the lookup comes next.
    Lookup,
    /// The lookup found the key's row finished: the letter is inserted again.
    Insert,
}

/// Where a retrier stands.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Retrier {
    /// Between batches.
    Idle,
    /// Running a claimed row's handler.
    Running {
        /// The row.
        row: u8,
        /// The claim's token.
        token: u8,
        /// The row's `retry_count` as claimed (what `decide` reads).
        retry_count: u8,
    },
}

/// Where a process running the stored operation stands (`Bulk::run`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// About to read the stored cursor (`Admin::resume`).
    Start,
    /// Holding the cursor its last batch moved to.
    Ready {
        /// The cursor.
        cursor: u8,
    },
    /// A batch of one row selected, not written yet.
    Selected {
        /// The cursor the batch starts from.
        from: u8,
        /// The row.
        row: u8,
        /// The payload the patch was computed from.
        payload: u8,
    },
    /// The selection is exhausted.
    Done,
}

/// How a handler's run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Run {
    /// Ok.
    Succeeded,
    /// A transient failure: a retry, or dead once `max_retries` is reached.
    Transient,
    /// A permanent failure: dead.
    Permanent,
}

/// One step of one actor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A park statement; `reply`: whether the caller hears the answer (not: its timeout).
    Park {
        /// The parker.
        parker: u8,
        /// Whether the answer reaches the caller.
        reply: bool,
    },
    /// The lookup of a skipped letter's live row.
    Lookup {
        /// The parker.
        parker: u8,
    },
    /// A claim of one due row.
    Claim {
        /// The retrier.
        retrier: u8,
        /// The row.
        row: u8,
    },
    /// The outcome of the handler's run, written under the claim's token.
    Settle {
        /// The retrier.
        retrier: u8,
        /// How the run ended.
        run: Run,
    },
    /// A retrier dies.
    RetrierCrash {
        /// The retrier.
        retrier: u8,
    },
    /// A running handler outlives its lease.
    Stall {
        /// The retrier.
        retrier: u8,
    },
    /// The lease of a row no running retrier holds passes.
    Expire {
        /// The row.
        row: u8,
    },
    /// An operator reads the stored cursor.
    Resume {
        /// The operator.
        operator: u8,
    },
    /// An operator selects its next batch.
    Select {
        /// The operator.
        operator: u8,
    },
    /// An operator writes its batch; `reply`: whether it hears the answer.
    Batch {
        /// The operator.
        operator: u8,
        /// Whether the answer reaches it.
        reply: bool,
    },
    /// An operator dies (and is run again: it resumes).
    OperatorCrash {
        /// The operator.
        operator: u8,
    },
    /// Retention purges the finished rows.
    Purge,
    /// Event 0's subject is erased.
    Erase,
    /// The WAL writer flushes the oldest asynchronous commit.
    Flush,
    /// The database crashes, keeping the first `keep` unflushed commits.
    DbCrash {
        /// How many of the unflushed commits survive.
        keep: u8,
    },
    /// From now on only retriers run, without faults (the liveness check).
    Quiesce,
}

/// Faults left to inject.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Budget {
    retrier_crashes: u8,
    stalls: u8,
    db_crashes: u8,
    operator_crashes: u8,
    lost_park_replies: u8,
    erasures: u8,
}

/// What the properties read besides the tables: never read by a step of the protocol.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Ghost {
    /// Handler runs per row id.
    pub runs: Vec<u8>,
    /// Runs that may go uncounted: retrier crashes, stalls, lost asynchronous commits.
    pub allowance: u8,
    /// An outcome applied under a claim that was not the row's latest, or was settled.
    pub stale_applied: bool,
    /// Purge deleted a live row.
    pub purged_live: bool,
    /// Ids deleted by erasure.
    pub erased: Vec<u8>,
    /// Ids deleted by purge or erasure.
    pub removed: Vec<u8>,
    /// An outcome was fenced.
    pub fenced: bool,
    /// A crash lost an asynchronous commit.
    pub lost_commit: bool,
    /// A lookup found its key's row finished, and the letter was inserted again.
    pub reparked: bool,
    /// A batch of the stored operation met a moved cursor.
    pub conflict: bool,
}

/// The whole system: the database's durable tables and its unflushed asynchronous commits,
/// every actor, the faults left, and the ghost.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The tables on disk.
    pub durable: Db,
    /// The tables after each asynchronous commit not flushed yet, oldest first.
    pub unflushed: Vec<Db>,
    /// The parkers, one per event (and a second one of event 0 with `second_consumer`).
    pub parkers: Vec<Parker>,
    /// The retriers.
    pub retriers: Vec<Retrier>,
    /// The processes running the stored operation.
    pub operators: Vec<Operator>,
    /// The next lease token (tokens are renumbered in order after each step: only their
    /// equality and order matter).
    pub next_token: u8,
    /// Faults left.
    pub budget: Budget,
    /// Whether only retriers run now.
    pub quiet: bool,
    /// The ghost.
    pub ghost: Ghost,
}

impl State {
    /// The tables as the latest commit left them (what every statement reads).
    pub fn db(&self) -> &Db {
        self.unflushed.last().unwrap_or(&self.durable)
    }

    /// Every version of the tables a crash could leave.
    pub fn snapshots(&self) -> impl Iterator<Item = &Db> {
        std::iter::once(&self.durable).chain(&self.unflushed)
    }

    /// An asynchronous commit: flushed at once when no crash is left to lose it, otherwise
    /// within `lost` commits.
    fn commit_async(&mut self, db: Db, lost: u8) {
        if self.budget.db_crashes == 0 {
            self.durable = db;
            return;
        }
        self.unflushed.push(db);
        if self.unflushed.len() > usize::from(lost) {
            self.durable = self.unflushed.remove(0);
        }
    }

    fn commit_durably(&mut self, db: Db) {
        self.durable = db;
        self.unflushed.clear();
    }

    fn expire_everywhere(&mut self, row: u8, token: u8) {
        self.durable.expire(row, token);
        for db in &mut self.unflushed {
            db.expire(row, token);
        }
    }

    fn holder(&self, token: u8) -> bool {
        self.retriers.iter().any(|r| matches!(r, Retrier::Running { token: t, .. } if *t == token))
    }

    fn run(&mut self, row: u8) {
        let i = usize::from(row);
        if self.ghost.runs.len() <= i {
            self.ghost.runs.resize(i + 1, 0);
        }
        self.ghost.runs[i] += 1;
    }

    /// Renumbers the lease tokens 1, 2, … in their order, so that states that differ only
    /// in spent tokens are one state; with `symmetry`, sorts the retriers.
    fn canonical(&mut self, symmetry: bool) {
        let mut tokens: Vec<u8> = Vec::new();
        for db in std::iter::once(&self.durable).chain(&self.unflushed) {
            for row in &db.rows {
                tokens.extend(row.token);
                tokens.extend(row.seen_claim);
            }
        }
        for r in &self.retriers {
            if let Retrier::Running { token, .. } = r {
                tokens.push(*token);
            }
        }
        tokens.sort_unstable();
        tokens.dedup();
        let map = |t: &mut u8| *t = tokens.iter().position(|x| x == t).map_or(0, |p| p as u8 + 1);
        for db in std::iter::once(&mut self.durable).chain(&mut self.unflushed) {
            for row in &mut db.rows {
                row.token.as_mut().map(map);
                row.seen_claim.as_mut().map(map);
            }
        }
        for r in &mut self.retriers {
            if let Retrier::Running { token, .. } = r {
                map(token);
            }
        }
        self.next_token = tokens.len() as u8 + 1;
        // Retriers are alike (nothing reads a lease's owner): their order is no state.
        if symmetry {
            self.retriers.sort_unstable();
        }
    }
}

impl Protocol {
    /// The outcome the retrier's `decide` writes for a run of a row claimed with
    /// `retry_count`.
    pub const fn decide(&self, run: Run, retry_count: u8) -> Outcome {
        match run {
            Run::Succeeded => Outcome::Succeeded,
            Run::Permanent => Outcome::Dead,
            Run::Transient => {
                let retries = retry_count + 1;
                let dead = match self.mutation {
                    Some(Mutation::RetriesOffByOne) => retries > self.max_retries,
                    _ => retries >= self.max_retries,
                };
                if dead { Outcome::Dead } else { Outcome::Retry }
            }
        }
    }

    fn park_actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, p) in state.parkers.iter().enumerate() {
            let parker = i as u8;
            match p.phase {
                ParkPhase::Ready if p.left == 0 => {}
                ParkPhase::Ready | ParkPhase::Insert => {
                    actions.push(Action::Park { parker, reply: true });
                    if state.budget.lost_park_replies > 0 {
                        actions.push(Action::Park { parker, reply: false });
                    }
                }
                ParkPhase::Lookup => actions.push(Action::Lookup { parker }),
            }
        }
    }

    fn retrier_actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, r) in state.retriers.iter().enumerate() {
            let retrier = i as u8;
            match r {
                Retrier::Idle => {
                    for row in state.db().rows.iter().filter(|row| Db::claimable(row, self.mutation)) {
                        actions.push(Action::Claim { retrier, row: row.id });
                    }
                }
                Retrier::Running { row, token, .. } => {
                    actions.push(Action::Settle { retrier, run: Run::Succeeded });
                    if state.quiet {
                        continue;
                    }
                    actions.push(Action::Settle { retrier, run: Run::Transient });
                    actions.push(Action::Settle { retrier, run: Run::Permanent });
                    if state.budget.retrier_crashes > 0 {
                        actions.push(Action::RetrierCrash { retrier });
                    }
                    let leased = state.db().row(*row).is_some_and(|x| x.token == Some(*token) && !x.expired);
                    if state.budget.stalls > 0 && leased {
                        actions.push(Action::Stall { retrier });
                    }
                }
            }
        }
        for row in &state.db().rows {
            let orphaned = row.token.is_some_and(|t| !state.holder(t));
            if row.status == Status::Processing && !row.expired && orphaned {
                actions.push(Action::Expire { row: row.id });
            }
        }
    }

    fn operator_actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, o) in state.operators.iter().enumerate() {
            let operator = i as u8;
            match o {
                Operator::Start => actions.push(Action::Resume { operator }),
                Operator::Ready { .. } => actions.push(Action::Select { operator }),
                Operator::Selected { .. } => {
                    actions.push(Action::Batch { operator, reply: true });
                    if state.budget.operator_crashes > 0 {
                        actions.push(Action::Batch { operator, reply: false });
                    }
                }
                Operator::Done => {}
            }
            if state.budget.operator_crashes > 0 && matches!(o, Operator::Ready { .. } | Operator::Selected { .. }) {
                actions.push(Action::OperatorCrash { operator });
            }
        }
    }

    fn park(&self, state: &mut State, parker: usize, reply: bool) {
        let p = &mut state.parkers[parker];
        if p.phase == ParkPhase::Ready {
            p.left -= 1;
        }
        let event = p.event;
        if !reply {
            state.budget.lost_park_replies -= 1;
        }
        let mut db = state.db().clone();
        let inserted = db.park(event, self.mutation);
        let p = &mut state.parkers[parker];
        match inserted {
            Inserted::Row(id) => {
                p.phase = ParkPhase::Ready;
                if reply {
                    p.told = Some(id);
                }
                if self.mutation == Some(Mutation::AsyncParks) {
                    state.commit_async(db, self.lost_commits);
                } else {
                    state.commit_durably(db);
                }
            }
            Inserted::Skipped if reply => p.phase = ParkPhase::Lookup,
            Inserted::Skipped => p.phase = ParkPhase::Ready,
        }
    }

    fn lookup(state: &mut State, parker: usize) {
        let found = state.db().dedupe_lookup(state.parkers[parker].event);
        let p = &mut state.parkers[parker];
        if let Some(id) = found {
            p.told = Some(id);
            p.phase = ParkPhase::Ready;
        } else {
            p.phase = ParkPhase::Insert;
            state.ghost.reparked = true;
        }
    }

    fn claim(&self, state: &mut State, retrier: usize, row: u8) {
        let token = state.next_token;
        state.next_token += 1;
        let mut db = state.db().clone();
        if let Some(retry_count) = db.claim(row, token) {
            state.commit_async(db, self.lost_commits);
            state.retriers[retrier] = Retrier::Running { row, token, retry_count };
            state.run(row);
        }
    }

    fn settle(&self, state: &mut State, retrier: usize, run: Run) {
        let Retrier::Running { row, token, retry_count } = state.retriers[retrier] else { return };
        state.retriers[retrier] = Retrier::Idle;
        let mut db = state.db().clone();
        match db.settle(row, token, self.decide(run, retry_count), self.mutation) {
            None => state.ghost.fenced = true,
            Some(stale) => {
                state.ghost.stale_applied |= stale;
                state.commit_async(db, self.lost_commits);
            }
        }
    }

    fn batch(&self, state: &mut State, operator: usize, reply: bool) {
        let (Some(operation), Operator::Selected { from, row, payload }) =
            (self.operation, state.operators[operator].clone())
        else {
            return;
        };
        let mut db = state.db().clone();
        let result = db.apply_batch(operation, from, row, payload, self.mutation);
        if result == BatchResult::Committed {
            state.commit_durably(db);
        } else {
            state.ghost.conflict = true;
        }
        state.operators[operator] = match (reply, result) {
            (true, BatchResult::Committed) => Operator::Ready { cursor: row },
            (true, BatchResult::Conflict) => Operator::Start,
            (false, _) => {
                state.budget.operator_crashes -= 1;
                Operator::Start
            }
        };
    }

    fn erase(&self, state: &mut State) {
        state.budget.erasures -= 1;
        let mut db = state.db().clone();
        let gone = db.erase(0);
        if self.mutation == Some(Mutation::AsyncErase) {
            state.commit_async(db, self.lost_commits);
        } else {
            state.commit_durably(db);
        }
        state.ghost.erased.extend(&gone);
        state.ghost.removed.extend(gone);
        state.ghost.erased.sort_unstable();
        state.ghost.removed.sort_unstable();
        state.ghost.removed.dedup();
    }

    fn purge(&self, state: &mut State) {
        let mut db = state.db().clone();
        let (gone, live) = db.purge(self.mutation);
        state.commit_durably(db);
        state.ghost.purged_live |= live;
        state.ghost.removed.extend(gone);
        state.ghost.removed.sort_unstable();
        state.ghost.removed.dedup();
    }

    fn crash(state: &mut State, keep: u8) {
        state.budget.db_crashes -= 1;
        let lost = state.unflushed.len() - usize::from(keep);
        state.unflushed.truncate(usize::from(keep));
        if let Some(last) = state.unflushed.pop() {
            state.durable = last;
        }
        state.unflushed.clear();
        state.ghost.allowance += lost as u8;
        state.ghost.lost_commit |= lost > 0;
    }
}

/// Whether a row is due in the sense of the promise (whatever the claim's query says).
const fn due(status: Status, expired: bool) -> bool {
    matches!(status, Status::Pending) || (matches!(status, Status::Processing) && expired)
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let left = |event| if event == 0 { 1 + self.redeliveries } else { 1 };
        let parker = |event| Parker { event, left: left(event), phase: ParkPhase::Ready, told: None };
        vec![State {
            durable: Db::new(),
            unflushed: Vec::new(),
            parkers: (0..self.events)
                .map(parker)
                .chain(self.second_consumer.then(|| Parker { left: 1, ..parker(0) }))
                .collect(),
            retriers: vec![Retrier::Idle; usize::from(self.retriers)],
            operators: vec![Operator::Start; usize::from(self.operators)],
            next_token: 1,
            budget: Budget {
                retrier_crashes: self.retrier_crashes,
                stalls: self.stalls,
                db_crashes: self.db_crashes,
                operator_crashes: self.operator_crashes,
                lost_park_replies: self.lost_park_replies,
                erasures: u8::from(self.erase),
            },
            quiet: false,
            ghost: Ghost::default(),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        self.retrier_actions(state, actions);
        if !state.unflushed.is_empty() {
            actions.push(Action::Flush);
        }
        if state.quiet {
            return;
        }
        self.park_actions(state, actions);
        self.operator_actions(state, actions);
        if self.purge && state.db().rows.iter().any(|r| matches!(r.status, Status::Succeeded | Status::Discarded)) {
            actions.push(Action::Purge);
        }
        if self.mutation == Some(Mutation::PurgeDeadRows)
            && state.db().rows.iter().any(|r| r.status == Status::FailedPermanently)
        {
            actions.push(Action::Purge);
        }
        if state.budget.erasures > 0 {
            actions.push(Action::Erase);
        }
        if state.budget.db_crashes > 0 {
            for keep in 0..state.unflushed.len() {
                actions.push(Action::DbCrash { keep: keep as u8 });
            }
        }
        if self.liveness {
            actions.push(Action::Quiesce);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Park { parker, reply } => self.park(&mut state, usize::from(parker), reply),
            Action::Lookup { parker } => Self::lookup(&mut state, usize::from(parker)),
            Action::Claim { retrier, row } => self.claim(&mut state, usize::from(retrier), row),
            Action::Settle { retrier, run } => self.settle(&mut state, usize::from(retrier), run),
            Action::RetrierCrash { retrier } => {
                state.retriers[usize::from(retrier)] = Retrier::Idle;
                state.budget.retrier_crashes -= 1;
                state.ghost.allowance += 1;
            }
            Action::Stall { retrier } => {
                let Retrier::Running { row, token, .. } = state.retriers[usize::from(retrier)] else { return None };
                state.expire_everywhere(row, token);
                state.budget.stalls -= 1;
                state.ghost.allowance += 1;
            }
            Action::Expire { row } => {
                let token = state.db().row(row)?.token?;
                state.expire_everywhere(row, token);
            }
            Action::Resume { operator } => {
                let cursor = state.db().operation.cursor;
                state.operators[usize::from(operator)] = Operator::Ready { cursor };
            }
            Action::Select { operator } => {
                let Operator::Ready { cursor } = state.operators[usize::from(operator)] else { return None };
                let next = self.operation.and_then(|op| state.db().select(op, cursor));
                state.operators[usize::from(operator)] = match next {
                    Some((row, payload)) => Operator::Selected { from: cursor, row, payload },
                    None => Operator::Done,
                };
            }
            Action::Batch { operator, reply } => self.batch(&mut state, usize::from(operator), reply),
            Action::OperatorCrash { operator } => {
                state.operators[usize::from(operator)] = Operator::Start;
                state.budget.operator_crashes -= 1;
            }
            Action::Purge => self.purge(&mut state),
            Action::Erase => self.erase(&mut state),
            Action::Flush => state.durable = state.unflushed.remove(0),
            Action::DbCrash { keep } => Self::crash(&mut state, keep),
            Action::Quiesce => state.quiet = true,
        }
        state.canonical(self.symmetry);
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(TOLD_PARKED, |_, s: &State| {
                s.parkers.iter().all(|p| {
                    p.told.is_none_or(|id| {
                        s.durable.row(id).map_or_else(|| s.ghost.removed.contains(&id), |row| row.event == p.event)
                    })
                })
            }),
            Property::always(ONE_LIVE_ROW, |m: &Self, s: &State| {
                s.snapshots().all(|db| {
                    (0..m.events).all(|e| db.rows.iter().filter(|r| r.event == e && r.status.live()).count() <= 1)
                })
            }),
            Property::always(NO_STALE_OUTCOME, |_, s: &State| !s.ghost.stale_applied),
            Property::always(MOVED_ONCE, |_, s: &State| {
                s.snapshots().all(|db| db.rows.iter().all(|r| r.seen_moves <= 1))
            }),
            Property::always(PURGE_FINISHED_ONLY, |_, s: &State| !s.ghost.purged_live),
            Property::always(ERASED_STAYS_ERASED, |_, s: &State| {
                s.snapshots().all(|db| db.rows.iter().all(|r| !s.ghost.erased.contains(&r.id)))
            }),
            Property::always(RETRY_COUNT_BOUNDED, |m: &Self, s: &State| {
                s.snapshots().all(|db| db.rows.iter().all(|r| r.retry_count <= m.max_retries))
            }),
            Property::always(RUNS_BOUNDED, |m: &Self, s: &State| {
                s.db().rows.iter().all(|r| {
                    let runs = s.ghost.runs.get(usize::from(r.id)).copied().unwrap_or(0);
                    u32::from(runs)
                        <= u32::from(m.max_retries) * (u32::from(r.redrive_count) + 1) + u32::from(s.ghost.allowance)
                })
            }),
            Property::always(DUE_ROWS_CLAIMED, |m: &Self, s: &State| {
                let stuck = s.db().rows.iter().any(|r| due(r.status, r.expired));
                let mut next = Vec::new();
                m.actions(s, &mut next);
                !(s.quiet && next.is_empty() && stuck && m.retriers > 0)
            }),
            Property::sometimes(SOME_FENCED, |_, s: &State| s.ghost.fenced),
            Property::sometimes(SOME_LOST_COMMIT, |_, s: &State| s.ghost.lost_commit),
            Property::sometimes(SOME_REPARK, |_, s: &State| s.ghost.reparked),
            Property::sometimes(SOME_CONFLICT, |_, s: &State| s.ghost.conflict),
            Property::sometimes(SOME_MOVE, |_, s: &State| s.db().rows.iter().any(|r| r.seen_moves > 0)),
        ]
    }
}

/// "Told `Parked` means stored": a caller told `Parked` has a durable row holding its event
/// (until purge or erasure removes it).
pub const TOLD_PARKED: &str = "a caller told Parked has a row holding its event";
/// "One live row per event and event type", after any crash too.
pub const ONE_LIVE_ROW: &str = "never two live rows for one event type and dedupe key";
/// "A fenced outcome never applies".
pub const NO_STALE_OUTCOME: &str = "an outcome applies only under the row's latest claim, once";
/// "A group patch touches each row once" (and a redrive or discard moves it once).
pub const MOVED_ONCE: &str = "a stored operation moves or patches a row at most once";
/// "A purge never deletes a live row".
pub const PURGE_FINISHED_ONLY: &str = "purge deletes only finished rows";
/// An erased row never comes back.
pub const ERASED_STAYS_ERASED: &str = "an erased row never comes back";
/// `retry_count` never exceeds `max_retries`.
pub const RETRY_COUNT_BOUNDED: &str = "retry_count never exceeds max_retries";
/// A row's handler runs at most `max_retries` times per redrive, plus one per fault.
pub const RUNS_BOUNDED: &str = "runs stay within max_retries per redrive plus one per crash, stall or lost commit";
/// "A due row with a running retrier is eventually retried".
pub const DUE_ROWS_CLAIMED: &str = "a due row is eventually claimed while a retrier runs";
/// An outcome was fenced somewhere (the model reaches it).
pub const SOME_FENCED: &str = "an outcome is fenced";
/// A crash lost an asynchronous commit somewhere.
pub const SOME_LOST_COMMIT: &str = "a crash loses an asynchronous commit";
/// A park's lookup found its row finished somewhere.
pub const SOME_REPARK: &str = "a park's lookup finds its row finished";
/// A batch met a moved cursor somewhere.
pub const SOME_CONFLICT: &str = "a batch meets a moved cursor";
/// The stored operation moved a row somewhere.
pub const SOME_MOVE: &str = "the stored operation moves a row";
