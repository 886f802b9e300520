//! PostgreSQL and SQLite stores for `dlq`, their migrations, and the retrier runner.
//!
//! - [`PgStore`]: the production store. Failures from many tasks are group-committed into
//!   multi-row inserts; [`PgStore::park_in`] joins the caller's transaction; retriers claim
//!   with `FOR UPDATE SKIP LOCKED`, hold rows under leases with fencing tokens, and wake on
//!   `LISTEN/NOTIFY`. Timestamps come from the database clock only.
//! - [`SqliteStore`]: the embedded default, one local file.
//! - [`PgRetrier`] / [`run_retrier`]: dlq-core's [`Retrier`](dlq_core::Retrier) engine on a
//!   `PgStore`, with the fixed-rate schedule, singleton mode (an advisory lock, one instance
//!   at a time), a heartbeat row per retrier, and retention.
//! - [`MIGRATOR`]: the PostgreSQL schema (`dlq_events`, `dlq_attempts`, `dlq_audit`,
//!   `dlq_retriers`), applied by [`PgStore`] on connect unless turned off.
//!
//! ```no_run
//! use dlq_core::{dead_letter, install_store, Shutdown};
//! use dlq_sqlx::{PgConfig, PgRetrier, PgStore, RetryConfig};
//! use std::sync::Arc;
//!
//! #[derive(Debug, serde::Serialize, serde::Deserialize)]
//! struct Payment { id: u64, currency: String }
//!
//! #[dead_letter(event_type = "payment", max_retries = 240, backoff = "exp")]
//! async fn handle_payment(p: Payment) -> Result<(), std::io::Error> {
//!     Ok(())
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let url = "postgres://postgres@127.0.0.1:5432/app";
//! // Parking: the live path parks every failure of an annotated handler here.
//! let store = PgStore::connect_with(url, PgConfig::default().schema("dlq")).await?;
//! install_store(Arc::new(store.clone()))?;
//!
//! // Retrying: any number of processes may run this; `"singleton": true` elects one.
//! let config = RetryConfig::from_json_str(r#"{"batch-size": 50, "max-retries": 240}"#)?.with_env()?;
//! let shutdown = Shutdown::new();
//! let retrier = PgRetrier::new(store.pool().clone(), config)
//!     .store_config(PgConfig::default().schema("dlq"))
//!     .shutdown(shutdown.clone());
//! let stats = retrier.run().await?; // until `shutdown.trigger()`
//! println!("{} retried, {} succeeded", stats.claimed, stats.succeeded);
//! # Ok(()) }
//! ```
//!
//! # Tests
//! The PostgreSQL tests (`tests/pg_*.rs`) use `#[sqlx::test]`, which creates a fresh database
//! per test: run them with `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres`.

mod config;
mod pg;
mod retrier;

pub mod sqlite;
pub use sqlite::{SQLITE_MIGRATOR, SqliteStore};

#[cfg(feature = "conformance")]
pub mod conformance;

pub use config::{Error, RetryConfig, parse_duration};
pub use pg::{Overflow, PgConfig, PgStore, RetrierHeartbeat, migrate, validate_schema};
pub use retrier::{PgRetrier, run_retrier};

/// The PostgreSQL schema, embedded from `migrations/postgres/`. The migrations are
/// schema-unqualified: [`migrate`] (and [`PgStore::from_pool`]) run them with `search_path`
/// set to the configured schema. Use it directly in tests:
/// `#[sqlx::test(migrator = "dlq_sqlx::MIGRATOR")]` (the `public` schema).
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), sqlx::migrate::MigrateError> {
/// dlq_sqlx::MIGRATOR.run(&pool).await?; // into the connection's current schema
/// # Ok(()) }
/// ```
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");
