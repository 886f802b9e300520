//! The row protocol, model-checked: every promise holds in every interleaving of the small
//! configurations, and each mutation of the protocol is caught by the promise it breaks.

use std::time::Instant;

use dlq_model::{
    DUE_ROWS_CLAIMED, ERASED_STAYS_ERASED, MOVED_ONCE, Mutation, NO_STALE_OUTCOME, ONE_LIVE_ROW, Operation,
    PURGE_FINISHED_ONLY, Protocol, RETRY_COUNT_BOUNDED, RUNS_BOUNDED, SOME_CONFLICT, SOME_FENCED, SOME_LOST_COMMIT,
    SOME_MOVE, SOME_REPARK, TOLD_PARKED,
};
use stateright::{Checker, HasDiscoveries, Model};

/// Every safety and liveness promise.
const PROMISES: [&str; 9] = [
    TOLD_PARKED,
    ONE_LIVE_ROW,
    NO_STALE_OUTCOME,
    MOVED_ONCE,
    PURGE_FINISHED_ONLY,
    ERASED_STAYS_ERASED,
    RETRY_COUNT_BOUNDED,
    RUNS_BOUNDED,
    DUE_ROWS_CLAIMED,
];

fn check(name: &str, protocol: Protocol) -> impl Checker<Protocol> + use<> {
    let started = Instant::now();
    let checker = protocol.checker().threads(2).spawn_bfs().join();
    eprintln!(
        "{name}: {} states ({} unique), depth {}, {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker
}

fn holds(name: &str, protocol: Protocol, reached: &[&'static str]) {
    let checker = check(name, protocol);
    for promise in PROMISES {
        if let Some(path) = checker.discovery(promise) {
            panic!("{name}: {promise:?} broken:\n{path}");
        }
    }
    for example in reached {
        assert!(checker.discovery(example).is_some(), "{name}: the model never reaches {example:?}");
    }
}

fn caught(protocol: Protocol, promise: &'static str) {
    let mutation = protocol.mutation.expect("a mutation");
    let started = Instant::now();
    // Deepened one step at a time, so that the counterexample shown is a shortest one
    // (stateright keeps the last path it found for a property, not the first).
    for depth in 1..=40 {
        let checker = protocol
            .clone()
            .checker()
            .target_max_depth(depth)
            .finish_when(HasDiscoveries::AnyOf([promise].into()))
            .spawn_bfs()
            .join();
        if let Some(path) = checker.discovery(promise) {
            eprintln!("{mutation:?} breaks {promise:?} ({:.1?}):\n{path}", started.elapsed());
            return;
        }
        if checker.max_depth() < depth {
            break; // every state seen: no deeper path exists
        }
    }
    panic!("{mutation:?}: no counterexample to {promise:?}");
}

#[test]
fn retries_keep_every_promise() {
    holds("retries", Protocol::retries(), &[SOME_FENCED, SOME_LOST_COMMIT, SOME_REPARK]);
}

#[test]
fn due_rows_are_claimed_whatever_the_faults_before() {
    holds("liveness", Protocol::liveness(), &[SOME_FENCED, SOME_LOST_COMMIT]);
}

#[test]
fn a_crash_losing_two_commits_keeps_every_promise() {
    holds("lost commits", Protocol::lost_commits(), &[SOME_FENCED, SOME_LOST_COMMIT]);
}

#[test]
fn two_consumers_parking_one_event_keep_every_promise() {
    holds("two consumers", Protocol::two_consumers(), &[SOME_FENCED, SOME_LOST_COMMIT, SOME_REPARK]);
}

#[test]
fn a_redrive_keeps_every_promise() {
    holds("redrive", Protocol::operators(Operation::Redrive), &[SOME_CONFLICT, SOME_MOVE, SOME_LOST_COMMIT]);
}

#[test]
fn a_discard_keeps_every_promise() {
    holds("discard", Protocol::operators(Operation::Discard), &[SOME_CONFLICT, SOME_MOVE]);
}

#[test]
fn a_group_patch_keeps_every_promise() {
    holds("patch", Protocol::operators(Operation::Patch), &[SOME_CONFLICT, SOME_MOVE]);
}

#[test]
fn retention_and_erasure_keep_every_promise() {
    holds("retention", Protocol::retention(), &[SOME_FENCED, SOME_LOST_COMMIT]);
}

#[test]
fn an_outcome_without_the_token_check_is_caught() {
    caught(Protocol::retries().mutated(Mutation::SettleWithoutToken), NO_STALE_OUTCOME);
}

#[test]
fn an_outcome_without_the_token_check_overruns_max_retries() {
    caught(Protocol::retries().mutated(Mutation::SettleWithoutToken), RETRY_COUNT_BOUNDED);
}

#[test]
fn a_dedupe_index_over_pending_rows_only_is_caught() {
    caught(Protocol::retries().mutated(Mutation::DedupeIndexPendingOnly), ONE_LIVE_ROW);
}

#[test]
fn batches_without_the_cursor_cas_are_caught() {
    caught(Protocol::operators(Operation::Redrive).mutated(Mutation::NoCursorCas), MOVED_ONCE);
}

#[test]
fn a_patch_without_its_mark_or_the_cursor_cas_is_caught() {
    caught(Protocol::operators(Operation::Patch).mutated(Mutation::PatchWithoutMarkOrCas), MOVED_ONCE);
}

#[test]
fn a_patch_keeps_once_per_row_with_either_guard_alone() {
    holds("patch without its mark", Protocol::operators(Operation::Patch).mutated(Mutation::PatchWithoutMark), &[]);
    holds("patch without the cursor CAS", Protocol::operators(Operation::Patch).mutated(Mutation::NoCursorCas), &[]);
}

#[test]
fn asynchronous_parks_are_caught() {
    caught(Protocol::retries().mutated(Mutation::AsyncParks), TOLD_PARKED);
}

#[test]
fn a_purge_of_dead_rows_is_caught() {
    caught(Protocol::operators(Operation::Redrive).mutated(Mutation::PurgeDeadRows), PURGE_FINISHED_ONLY);
}

#[test]
fn an_asynchronous_erasure_is_caught() {
    caught(Protocol::retention().mutated(Mutation::AsyncErase), ERASED_STAYS_ERASED);
}

#[test]
fn a_decide_off_by_one_is_caught() {
    caught(Protocol::retries().mutated(Mutation::RetriesOffByOne), RETRY_COUNT_BOUNDED);
}

#[test]
fn a_decide_off_by_one_overruns_the_crash_allowance() {
    caught(Protocol::retries().mutated(Mutation::RetriesOffByOne), RUNS_BOUNDED);
}

#[test]
fn a_claim_that_skips_expired_leases_is_caught() {
    caught(Protocol::liveness().mutated(Mutation::ClaimSkipsExpiredLeases), DUE_ROWS_CLAIMED);
}
