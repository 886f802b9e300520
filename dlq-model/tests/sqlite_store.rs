//! The model and the code agree on `SqliteStore`: every path the checker visits is followed
//! through a fresh in-memory database, and the store's rows, cursor and answers are compared
//! with the model's after each step (`follow`). Its clock is the wall clock: paths stop at a
//! lease's expiry, and its configurations have none. A database per path takes milliseconds:
//! 200 paths of each configuration,
//! spread over all of them, are followed.

mod follow;

use dlq_model::{Operation, Protocol};
use dlq_sqlx::SqliteStore;
use follow::{agree, wall_clock};

async fn store() -> SqliteStore {
    SqliteStore::in_memory().await.expect("an in-memory database")
}

#[tokio::test]
async fn the_sqlite_store_follows_retries() {
    agree("retries", wall_clock(Protocol { events: 1, ..Protocol::retries() }), false, 200, store).await;
}

#[tokio::test]
async fn the_sqlite_store_follows_two_consumers() {
    agree("two consumers", wall_clock(Protocol::two_consumers()), false, 200, store).await;
}

#[tokio::test]
async fn the_sqlite_store_follows_a_redrive() {
    agree("redrive", wall_clock(Protocol::operators(Operation::Redrive)), false, 200, store).await;
}

#[tokio::test]
async fn the_sqlite_store_follows_a_discard() {
    agree("discard", wall_clock(Protocol::operators(Operation::Discard)), false, 200, store).await;
}

#[tokio::test]
async fn the_sqlite_store_follows_a_group_patch() {
    agree("patch", wall_clock(Protocol::operators(Operation::Patch)), false, 200, store).await;
}
