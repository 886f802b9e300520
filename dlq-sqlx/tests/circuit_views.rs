//! What this process knows of circuits is kept per store (`QueueStore::store_id`): two
//! stores on the same circuits (one PostgreSQL schema, one SQLite file) share it, stores on
//! different ones (another schema, another file, in memory) never do, whatever the event type.

mod pg_support;

use std::sync::Arc;

use dlq_core::admin::Admin;
use dlq_core::{adapter::circuit_of, adapter::refresh_circuits, store::prelude::*};
use dlq_sqlx::{PgConfig, SqliteStore};
use pg_support::*;
use sqlx::PgPool;

/// A pause in one schema shows on every store of that schema, and on none of another.
#[sqlx::test(migrations = false)]
async fn pg_stores_share_views_per_schema(pool: PgPool) {
    let paused = Arc::new(store_with(&pool, PgConfig::default().schema("dlq_a")).await);
    let same_schema = store_with(&pool, PgConfig::default().schema("dlq_a")).await;
    let other_schema = Arc::new(store_with(&pool, PgConfig::default().schema("dlq_b")).await);
    assert_eq!(paused.store_id(), same_schema.store_id());
    assert_ne!(paused.store_id(), other_schema.store_id());

    Admin::new(paused.clone(), "alice").pause_type("payment", "ledger migration").await.unwrap();
    refresh_circuits(&*other_schema).await.unwrap();
    refresh_circuits(&*paused).await.unwrap();
    assert!(circuit_of(&same_schema, "payment").paused, "the same schema: the same circuits");
    assert!(!circuit_of(&*other_schema, "payment").paused, "another schema: its own circuits");
    let in_scope =
        |store: Arc<dyn DeadLetterStore>| dlq_core::with_store(store, async { dlq_core::adapter::circuit("payment") });
    assert!(in_scope(paused.clone()).await.paused);
    assert!(!in_scope(other_schema.clone()).await.paused);
}

/// Two stores on one file share their views; in-memory databases and other files do not.
#[tokio::test]
async fn sqlite_stores_share_views_per_file() {
    let dir = std::env::temp_dir().join(format!("dlq-circuit-views-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (file, other_file) = (dir.join("a.db"), dir.join("b.db"));
    let paused = Arc::new(SqliteStore::open(&file).await.unwrap());
    let same_file = SqliteStore::open(&dir.join(".").join("a.db")).await.unwrap();
    let other = Arc::new(SqliteStore::open(&other_file).await.unwrap());
    let (memory, other_memory) = (SqliteStore::in_memory().await.unwrap(), SqliteStore::in_memory().await.unwrap());
    assert_eq!(paused.store_id(), same_file.store_id(), "one file, however it is named");
    assert_eq!(paused.store_id(), paused.as_ref().clone().store_id());
    assert_ne!(paused.store_id(), other.store_id());
    assert_ne!(memory.store_id(), other_memory.store_id());
    assert_ne!(memory.store_id(), paused.store_id());

    Admin::new(paused.clone(), "alice").pause_type("payment", "ledger migration").await.unwrap();
    refresh_circuits(&*paused).await.unwrap();
    refresh_circuits(&*other).await.unwrap();
    assert!(circuit_of(&same_file, "payment").paused);
    assert!(!circuit_of(&*other, "payment").paused);
    assert!(!circuit_of(&memory, "payment").paused);
    for store in [paused.pool().clone(), same_file.pool().clone(), other.pool().clone()] {
        store.close().await;
    }
    std::fs::remove_dir_all(&dir).ok();
}
