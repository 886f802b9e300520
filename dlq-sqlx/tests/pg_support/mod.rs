//! Helpers shared by the PostgreSQL tests (`tests/pg_*.rs`). Every test gets a fresh
//! database from `#[sqlx::test]`; run with `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres`.

#![allow(dead_code, reason = "each test file uses a different subset")]
#![allow(unreachable_pub, reason = "test helpers")]

use std::sync::Arc;
use std::time::Duration;

use dlq_core::admin::Admin;
use dlq_core::store::{ClaimRequest, Claimed};
use dlq_core::{ErrorClass, Payload, classify::FailureInfo, store::NewDeadLetter, store::prelude::*};
use dlq_sqlx::{PgConfig, PgStore};
use sqlx::PgPool;

/// A store on the test database with the default configuration (migrations run again: a no-op).
pub async fn store(pool: &PgPool) -> PgStore {
    PgStore::from_pool(pool.clone(), PgConfig::default()).await.expect("store")
}

/// A store with `config`.
pub async fn store_with(pool: &PgPool, config: PgConfig) -> PgStore {
    PgStore::from_pool(pool.clone(), config).await.expect("store")
}

/// The admin layer over `store` (a clone shares its pool), acting as `actor`.
pub fn admin(store: &PgStore, actor: &str) -> Admin {
    Admin::new(Arc::new(store.clone()), actor)
}

pub fn failure(class: ErrorClass, reason: &str) -> FailureInfo {
    FailureInfo::new(class, "io::Error", reason.to_owned(), vec![reason.to_owned(), "inner cause".to_owned()], None)
}

/// A pending letter of `event_type`, due at once.
pub fn letter(event_type: &str, n: i64) -> NewDeadLetter {
    NewDeadLetter::new(
        event_type,
        Payload::Json(serde_json::json!({ "n": n })),
        failure(ErrorClass::Transient, "ledger down"),
    )
    .retry(Duration::ZERO, 5)
}

pub fn request(types: &[&str], limit: usize, lease: Duration) -> ClaimRequest {
    ClaimRequest {
        event_types: types.iter().map(|t| (*t).to_owned()).collect(),
        limit,
        lease,
        owner: "test-retrier".to_owned(),
    }
}

pub async fn claim(store: &PgStore, types: &[&str], limit: usize) -> Vec<Claimed> {
    store.claim(request(types, limit, Duration::from_secs(60))).await.expect("claim")
}

/// The database's clock.
pub async fn db_now(pool: &PgPool) -> chrono::DateTime<chrono::Utc> {
    sqlx::query_scalar("SELECT now()").fetch_one(pool).await.expect("now()")
}

/// Slows every statement that inserts into `dlq_events` down by `seconds` (a statement
/// trigger that sleeps), so that a park outlasts a timeout however fast the machine is.
pub async fn slow_parks(pool: &PgPool, seconds: f64) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE FUNCTION slow_park() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep({seconds}); RETURN NULL; END $$;
         CREATE TRIGGER slow_park BEFORE INSERT ON dlq_events FOR EACH STATEMENT EXECUTE FUNCTION slow_park();"
    )))
    .execute(pool)
    .await
    .expect("the slow-park trigger");
}
