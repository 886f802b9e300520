//! The live path as an application drives it: an explicit store per call, and a dead letter
//! parked inside the caller's own database transaction, on PostgreSQL (`#[sqlx::test]`, a
//! fresh database each) and on the embedded SQLite store.

use std::sync::Arc;

use dlq_core::{
    ErrorClass, HandlerError, ListFilter, Scope, Status, adapter::SourceMeta, dead_letter, store::prelude::*,
};
use dlq_sqlx::{PgConfig, PgStore, SqliteStore};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    id: i64,
    sku: String,
}

#[dead_letter(event_type = "live-order", max_retries = 4)]
async fn handle_order(order: Order) -> Result<(), std::io::Error> {
    Err(std::io::Error::other(format!("warehouse has no sku {}", order.sku)))
}

/// Records the order and, when its handler fails, parks the dead letter in the same
/// transaction: both commit, or neither does.
async fn record_order(store: &PgStore, order: Order, commit: bool) -> HandlerError<std::io::Error> {
    let mut tx = store.pool().begin().await.unwrap();
    sqlx::query("INSERT INTO orders (id) VALUES ($1)").bind(order.id).execute(&mut *tx).await.unwrap();
    let from = SourceMeta::kafka("orders", 0, order.id);
    let err = Scope::new().defer_park().source(from).run(handle_order(order)).await.unwrap_err();
    let HandlerError::Deferred { letter, class, .. } = &err else { panic!("{err:?}") };
    assert_eq!(*class, ErrorClass::Transient);
    assert!(!err.is_parked(), "nothing is parked until the caller parks it");
    store.park_in(&mut tx, (**letter).clone()).await.unwrap();
    if commit {
        tx.commit().await.unwrap();
    } else {
        tx.rollback().await.unwrap();
    }
    err
}

#[sqlx::test(migrations = false)]
async fn a_deferred_dead_letter_commits_and_rolls_back_with_the_callers_transaction(pool: PgPool) {
    sqlx::query("CREATE TABLE orders (id bigint PRIMARY KEY)").execute(&pool).await.unwrap();
    let store = PgStore::from_pool(pool.clone(), PgConfig::default()).await.unwrap();

    record_order(&store, Order { id: 1, sku: "A-1".into() }, false).await;
    assert!(store.list(ListFilter::default()).await.unwrap().is_empty(), "rolled back with the order");
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders").fetch_one(&pool).await.unwrap();
    assert_eq!(orders, 0);

    record_order(&store, Order { id: 2, sku: "B-2".into() }, true).await;
    let rows = store.list(ListFilter::default()).await.unwrap();
    assert_eq!(rows.len(), 1, "committed with the order");
    let row = &rows[0];
    assert_eq!((row.event_type.as_str(), row.status, row.max_retries), ("live-order", Status::Pending, 4));
    assert_eq!(row.failure.reason, "warehouse has no sku B-2");
    assert_eq!(row.source.offset, Some(2));
    assert!(row.handler.ends_with("::handle_order"), "{}", row.handler);
}

#[tokio::test]
async fn an_explicit_store_per_call_wins_over_none_installed() {
    let first: Arc<dyn DeadLetterStore> = Arc::new(SqliteStore::in_memory().await.unwrap());
    let second: Arc<dyn DeadLetterStore> = Arc::new(SqliteStore::in_memory().await.unwrap());
    let order = || Order { id: 3, sku: "C-3".into() };

    let err = Scope::new().store(first.clone()).run(handle_order(order())).await.unwrap_err();
    let id = err.dlq_id().expect("parked");
    assert_eq!(first.get(id).await.unwrap().unwrap().event_type, "live-order");
    assert!(second.list(ListFilter::default()).await.unwrap().is_empty(), "each call parks where it is told");

    // A task spawned inside a scope does not inherit it: it wraps its own call.
    let in_task = tokio::spawn(Scope::new().store(second.clone()).run(handle_order(order())));
    assert!(in_task.await.unwrap().unwrap_err().is_parked());
    assert_eq!(second.list(ListFilter::default()).await.unwrap().len(), 1);
}
