//! A model of dlq's row protocol, model-checked with [stateright].
//!
//! The model is the protocol as `dlq-sqlx`'s PostgreSQL statements implement it
//! ([`db`]), driven by every interleaving of the actors that share one table:
//!
//! - parkers (the live path): a park statement (`ON CONFLICT` on the live-rows dedupe
//!   index), then, for a skipped letter, the lookup of the live row and a new insert when that
//!   row finished in between; a reply may be lost after the commit (the caller's timeout), and
//!   the event is delivered and parked again;
//! - retriers: a claim under a lease with a fresh fencing token, the handler's run, an
//!   outcome written under the token (`retry_count` and `max_retries` as `decide` reads them);
//!   a retrier may crash at any step, and a lease may expire under a running handler (a stall);
//! - operators running one stored operation (redrive, discard or group patch) in batches of
//!   one row, each batch with the cursor's compare-and-set; an operator may crash or lose a
//!   batch's reply, and resumes from the stored cursor;
//! - retention purge and erasure by subject;
//! - the database: claims and outcomes commit asynchronously (`synchronous_commit = off`),
//!   everything else durably; a crash loses any suffix of the asynchronous commits made since
//!   the last durable one, up to [`Protocol::lost_commits`] of them.
//!
//! Its properties (`Model::properties`, named by the constants below) state the promises of
//! `docs/DESIGN.md`; [`Mutation`] breaks the protocol one rule at a time, and the tests
//! assert that the checker finds each break.
//!
//! ```
//! use dlq_model::Protocol;
//! use stateright::{Checker, Model};
//!
//! let checker = Protocol::smoke().checker().spawn_bfs().join();
//! checker.assert_no_discovery(dlq_model::TOLD_PARKED);
//! assert!(checker.unique_state_count() > 100);
//! ```

pub mod db;
pub mod model;

pub use model::{
    Action, DUE_ROWS_CLAIMED, ERASED_STAYS_ERASED, MOVED_ONCE, NO_STALE_OUTCOME, ONE_LIVE_ROW, PURGE_FINISHED_ONLY,
    RETRY_COUNT_BOUNDED, RUNS_BOUNDED, SOME_CONFLICT, SOME_FENCED, SOME_LOST_COMMIT, SOME_MOVE, SOME_REPARK, State,
    TOLD_PARKED,
};

/// The stored operation the operators run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// `FAILED_PERMANENTLY` rows back to `PENDING`, retry count reset.
    Redrive,
    /// Every row but `PROCESSING` and `DISCARDED` ones to `DISCARDED`.
    Discard,
    /// A non-idempotent patch of every `PENDING` and `FAILED_PERMANENTLY` row's payload.
    Patch,
}

/// One rule of the protocol broken on purpose: the checker must find a counterexample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// An outcome is written without comparing the lease token (status and lease still
    /// checked).
    SettleWithoutToken,
    /// The dedupe index covers `PENDING` rows only, not every live row.
    DedupeIndexPendingOnly,
    /// Batches of the stored operation move the cursor without its compare-and-set.
    NoCursorCas,
    /// A patch batch neither checks its operation's mark nor compares the cursor.
    PatchWithoutMarkOrCas,
    /// A patch batch does not check its operation's mark (the cursor's compare-and-set
    /// stays): the checker must find nothing, each guard alone suffices.
    PatchWithoutMark,
    /// Parks commit asynchronously, as claims do.
    AsyncParks,
    /// Purge takes `FAILED_PERMANENTLY` rows for finished ones.
    PurgeDeadRows,
    /// Erasure commits asynchronously.
    AsyncErase,
    /// The retrier's `decide` parks a row dead only past `max_retries`, not at it.
    RetriesOffByOne,
    /// The claim takes `PENDING` rows only, not `PROCESSING` rows whose lease expired.
    ClaimSkipsExpiredLeases,
}

/// The protocol's configuration: how many of each actor, the faults allowed, the mutation.
#[derive(Clone, Debug)]
pub struct Protocol {
    /// Events, one parker each (each its own dedupe key and subject).
    pub events: u8,
    /// How many times event 0 is delivered again after its first park (the others are
    /// delivered once).
    pub redeliveries: u8,
    /// Whether event 0 is also delivered to a second consumer, which parks it beside the
    /// first (two parkers of one key at once).
    pub second_consumer: bool,
    /// Retriers.
    pub retriers: u8,
    /// Processes running (resuming) the stored operation.
    pub operators: u8,
    /// The stored operation, if any.
    pub operation: Option<Operation>,
    /// Each row's `max_retries`.
    pub max_retries: u8,
    /// Retrier crashes allowed (in all).
    pub retrier_crashes: u8,
    /// Leases allowed to expire under a running handler (in all).
    pub stalls: u8,
    /// Database crashes allowed.
    pub db_crashes: u8,
    /// How many of the latest asynchronous commits a crash may lose: the last fraction of a
    /// second (the WAL writer flushes every `wal_writer_delay`, so older ones are on disk).
    pub lost_commits: u8,
    /// Operator crashes and lost batch replies allowed (in all).
    pub operator_crashes: u8,
    /// Lost park replies allowed (in all).
    pub lost_park_replies: u8,
    /// Whether retention purges run.
    pub purge: bool,
    /// Whether event 0's subject is erased (once).
    pub erase: bool,
    /// Whether the liveness check runs: from any state, retriers alone may be left to run
    /// (it doubles the states).
    pub liveness: bool,
    /// Whether retriers are kept in order (they are alike: half the states or fewer). A
    /// driver that follows a path with real retriers turns it off, so that an action's
    /// retrier is the same one at every step.
    pub symmetry: bool,
    /// The rule broken, if any.
    pub mutation: Option<Mutation>,
}

impl Protocol {
    /// Parkers, retriers, crashes and the database's lost commits, without an operator,
    /// purge or erasure: two events, two retriers.
    pub const fn retries() -> Self {
        Self {
            events: 2,
            redeliveries: 1,
            second_consumer: false,
            retriers: 2,
            operators: 0,
            operation: None,
            max_retries: 2,
            retrier_crashes: 1,
            stalls: 1,
            db_crashes: 1,
            lost_commits: 1,
            operator_crashes: 0,
            lost_park_replies: 1,
            purge: false,
            erase: false,
            liveness: false,
            symmetry: true,
            mutation: None,
        }
    }

    /// The liveness check: one event delivered twice, two retriers with a crash and a
    /// stall, a database crash; from any state the retriers may be left to run alone.
    pub const fn liveness() -> Self {
        Self { events: 1, liveness: true, ..Self::retries() }
    }

    /// One event delivered twice, two retriers with a crash and a stall, a database crash
    /// that may lose the last two asynchronous commits (a claim and its outcome, or two
    /// outcomes).
    pub const fn lost_commits() -> Self {
        Self { events: 1, lost_commits: 2, ..Self::retries() }
    }

    /// One event parked by two consumers at once (one of them delivered it twice), two
    /// retriers with a crash and a stall, a database crash.
    pub const fn two_consumers() -> Self {
        Self { events: 1, second_consumer: true, ..Self::retries() }
    }

    /// One event, two retriers (a crash, a stall), two processes running `operation` (a
    /// crash or a lost batch reply, in all), a database crash, with purge.
    pub const fn operators(operation: Operation) -> Self {
        Self {
            events: 1,
            redeliveries: 0,
            operators: 2,
            operation: Some(operation),
            max_retries: 1,
            operator_crashes: 1,
            lost_park_replies: 0,
            purge: true,
            ..Self::retries()
        }
    }

    /// Two events, one retrier with a crash and a stall, purge and the erasure of event 0.
    pub const fn retention() -> Self {
        Self { retriers: 1, max_retries: 1, purge: true, erase: true, ..Self::retries() }
    }

    /// A small configuration for examples: one event, one retrier.
    pub const fn smoke() -> Self {
        Self { events: 1, retriers: 1, max_retries: 1, stalls: 0, ..Self::retries() }
    }

    /// The same configuration with `mutation`.
    #[must_use]
    pub const fn mutated(mut self, mutation: Mutation) -> Self {
        self.mutation = Some(mutation);
        self
    }
}
