//! The model and the code agree on `SqliteStore`: every path the checker visits is followed
//! through a fresh in-memory database, and the store's rows, cursor and answers are compared
//! with the model's after each step (`follow`). Its clock is the wall clock: paths stop at a
//! lease's expiry. A database per path takes milliseconds: 200 paths of each configuration,
//! spread over all of them, are followed.

mod follow;

use dlq_model::{Operation, Protocol};
use dlq_sqlx::SqliteStore;
use follow::{agree, no_crash};

async fn store() -> SqliteStore {
    SqliteStore::in_memory().await.expect("an in-memory database")
}

#[tokio::test]
async fn the_sqlite_store_follows_retries() {
    agree("retries", no_crash(Protocol { events: 1, ..Protocol::retries() }), false, 200, store).await;
}

#[tokio::test]
async fn the_sqlite_store_follows_a_redrive() {
    agree("redrive", no_crash(Protocol::operators(Operation::Redrive)), false, 200, store).await;
}

#[tokio::test]
async fn the_sqlite_store_follows_a_discard() {
    agree("discard", no_crash(Protocol::operators(Operation::Discard)), false, 200, store).await;
}

#[tokio::test]
async fn the_sqlite_store_follows_a_group_patch() {
    agree("patch", no_crash(Protocol::operators(Operation::Patch)), false, 200, store).await;
}
