//! PostgreSQL and SQLite stores for `dlq`, and their migrations.
//!
//! - [`PgStore`]: the production store. Failures from many tasks are group-committed into
//!   multi-row inserts; [`PgStore::park_in`] joins the caller's transaction; retriers claim
//!   with `FOR UPDATE SKIP LOCKED`, hold rows under leases with fencing tokens, wake on
//!   `LISTEN/NOTIFY`, and elect a singleton with an advisory lock. Timestamps come from the
//!   database clock only.
//! - [`SqliteStore`]: the embedded default, one local file, the same semantics on one host
//!   (no singleton mode: run one retrier process, or use PostgreSQL).
//! - [`MIGRATOR`] / [`SQLITE_MIGRATOR`]: the schemas, applied by the stores on connect.
//!
//! The retrier is [`dlq_core::Retrier`] on either store: the same engine, configuration,
//! heartbeats and retention everywhere.
//!
//! ```no_run
//! use dlq_core::{dead_letter, install_store, CancellationToken, Retrier, RetrierConfig};
//! use dlq_sqlx::{PgConfig, PgStore};
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
//! let store = Arc::new(PgStore::connect_with(url, PgConfig::default().schema("dlq")).await?);
//! install_store(store.clone())?;
//!
//! // Retrying: any number of processes may run this; `"singleton": true` elects one.
//! let config = RetrierConfig::from_json_str(r#"{"batch-size": 50, "max-retries": 240}"#)?.with_env()?;
//! let retrier = Retrier::with_registry(store, dlq_core::handlers![handle_payment]?).config(config);
//! let shutdown = CancellationToken::new();
//! let stats = retrier.run_until(shutdown.cancelled_owned()).await?; // until `shutdown.cancel()`
//! println!("{} retried, {} succeeded", stats.claimed, stats.succeeded);
//! # Ok(()) }
//! ```
//!
//! # Tests
//! The PostgreSQL tests (`tests/pg_*.rs`) use `#[sqlx::test]`, which creates a fresh database
//! per test: run them with `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres`.

mod error;
mod pg;

pub mod sqlite;
pub use sqlite::{SQLITE_MIGRATOR, SqliteStore};

#[cfg(feature = "conformance")]
pub mod conformance;

pub use error::Error;
pub use pg::{Overflow, PgConfig, PgStore, migrate, validate_schema};

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
