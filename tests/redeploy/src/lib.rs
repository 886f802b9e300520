//! What the three builds of the payments service share: the store they park in and drain.
//! Each build's own `Payment`, handler and upcasters are in its binary (`src/bin/`).

use std::sync::Arc;

use dlq_sqlx::sqlite::SqliteStore;

/// The event type every build handles.
pub const EVENT_TYPE: &str = "payment";

/// The store in the SQLite file named by the first argument.
///
/// # Panics
/// Without the argument, or when the file cannot be opened: these programs are run by the
/// crate's test, which passes a fresh file.
pub async fn store() -> Arc<SqliteStore> {
    let path = std::env::args().nth(1).expect("usage: <program> <sqlite file> [count]");
    Arc::new(SqliteStore::open(path.as_ref()).await.expect("open the SQLite store"))
}

/// The number of events to send, the second argument.
///
/// # Panics
/// When it is missing or not a number.
pub fn count() -> u64 {
    std::env::args().nth(2).and_then(|n| n.parse().ok()).expect("usage: <program> <sqlite file> <count>")
}

/// What a build's retrier does: checks its handlers' versions against the store's catalog
/// and publishes its event types into it as `owner` (what `Retrier::run_until` does first),
/// then retries every due row until none is left. A retrier that refuses to start (a changed
/// event under an old version) publishes all the same, prints why and exits with 1.
///
/// # Panics
/// When the store fails: these programs are run by the crate's test.
pub async fn publish_and_drain(registry: dlq_core::handlers::Registry, owner: &str) {
    let store = store().await;
    let retrier = dlq_core::Retrier::new(store.clone(), registry.clone());
    let first = retrier.run_once().await;
    registry.publish(&*store, owner).await.expect("publish the event types");
    if let Err(refused) = first {
        eprintln!("{refused}");
        std::process::exit(1);
    }
    while retrier.run_once().await.expect("a batch") > 0 {}
}

/// What a process that parks without a retrier does to keep the store's catalog current
/// (`Registry::publish`, as `Retrier::run_until` does first).
///
/// # Panics
/// When the store fails.
pub async fn publish(registry: &dlq_core::handlers::Registry, owner: &str) {
    registry.publish(&*store().await, owner).await.expect("publish the event types");
}
