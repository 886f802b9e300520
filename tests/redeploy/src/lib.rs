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

/// What a build's retrier does: publishes its event types into the store's catalog as `owner`
/// (what `Retrier::run_until` does first), then retries every due row until none is left.
///
/// # Panics
/// When the store fails: these programs are run by the crate's test.
pub async fn publish_and_drain(registry: dlq_core::Registry, owner: &str) {
    let store = store().await;
    registry.publish(&*store, owner).await.expect("publish the event types");
    let retrier = dlq_core::Retrier::new(store, registry);
    while retrier.run_once().await.expect("a batch") > 0 {}
}
