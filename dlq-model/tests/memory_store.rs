//! The model and the code agree on `MemoryStore`: every path the checker visits is followed
//! through a fresh store on a paused clock (so that leases expire when the model says), and
//! the store's rows, cursor and answers are compared with the model's after each step
//! (`follow`).

mod follow;

use dlq_core::MemoryStore;
use dlq_model::{Mutation, Operation, Protocol};
use follow::{agree, no_crash};

async fn store() -> MemoryStore {
    MemoryStore::new()
}

#[tokio::test(start_paused = true)]
async fn the_memory_store_follows_retries() {
    agree("retries", no_crash(Protocol { events: 1, ..Protocol::retries() }), true, usize::MAX, store).await;
}

#[tokio::test(start_paused = true)]
async fn the_memory_store_follows_two_consumers() {
    agree("two consumers", no_crash(Protocol::two_consumers()), true, usize::MAX, store).await;
}

#[tokio::test(start_paused = true)]
async fn the_memory_store_follows_a_redrive() {
    agree("redrive", no_crash(Protocol::operators(Operation::Redrive)), true, usize::MAX, store).await;
}

#[tokio::test(start_paused = true)]
async fn the_memory_store_follows_a_discard() {
    agree("discard", no_crash(Protocol::operators(Operation::Discard)), true, usize::MAX, store).await;
}

#[tokio::test(start_paused = true)]
async fn the_memory_store_follows_a_group_patch() {
    agree("patch", no_crash(Protocol::operators(Operation::Patch)), true, usize::MAX, store).await;
}

#[tokio::test(start_paused = true)]
async fn the_memory_store_follows_retention_and_erasure() {
    agree("retention", no_crash(Protocol::retention()), true, usize::MAX, store).await;
}

/// The driver is no rubber stamp: a model that writes an outcome without comparing the
/// token disagrees with the store, which fences it: the row stays claimed there.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "row 1's status")]
async fn a_model_that_disagrees_with_the_store_is_caught() {
    let protocol = no_crash(Protocol { events: 1, ..Protocol::retries() });
    agree("no token", protocol.mutated(Mutation::SettleWithoutToken), true, usize::MAX, store).await;
}

/// A model whose dedupe index covers `PENDING` rows only parks a second row where the store
/// deduplicates.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "a new row")]
async fn a_model_with_another_dedupe_rule_is_caught() {
    let protocol = no_crash(Protocol { events: 1, ..Protocol::retries() });
    agree("dedupe", protocol.mutated(Mutation::DedupeIndexPendingOnly), true, usize::MAX, store).await;
}
