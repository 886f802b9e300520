//! PostgreSQL and SQLite stores for `dlq`, and their migrations.
//!
//! - [`PgStore`] ([`postgres`] module, feature `postgres`): the production store. Failures
//!   from many tasks are group-committed into multi-row inserts; [`PgStore::park_in`] joins
//!   the caller's transaction; retriers claim with `FOR UPDATE SKIP LOCKED`, hold rows under
//!   leases with fencing tokens, wake on `LISTEN/NOTIFY`, and elect a singleton with an
//!   advisory lock. Timestamps come from the database clock only.
//! - [`SqliteStore`] ([`sqlite`] module, feature `sqlite`): the embedded default, one local
//!   file, the same semantics on one host (no singleton mode: run one retrier process, or use
//!   PostgreSQL).
//! - [`postgres::MIGRATOR`] / [`sqlite::MIGRATOR`]: the schemas, applied by the stores on
//!   connect.
//!
//! # Features
//! Both backends are on by default. A PostgreSQL-only service turns SQLite off, and with it
//! the bundled `libsqlite3` build:
//!
//! ```toml
//! dlq-sqlx = { version = "0.1", default-features = false, features = ["postgres"] }
//! ```
//!
//! Each backend is a module laid out as sqlx's are (`sqlx::postgres::PgPool`, re-exported as
//! `sqlx::PgPool`): [`postgres`] and [`sqlite`], with the stores and [`PgConfig`]
//! re-exported here.
//!
//! Every fallible function of this crate returns [`dlq_core::Error`], as the stores' trait
//! methods do: an invalid schema name is [`Config`](dlq_core::Error::Config) with key
//! `schema`, a database or migration failure is [`Store`](dlq_core::Error::Store) with the
//! sqlx error as its source. One `?` serves a whole `main`.
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
//! # async fn demo() -> Result<(), dlq_core::Error> {
//! let url = "postgres://postgres@127.0.0.1:5432/app";
//! // Parking: the live path parks every failure of an annotated handler here.
//! let store = Arc::new(PgStore::connect_with(url, PgConfig::default().schema("dlq")).await?);
//! install_store(store.clone())?;
//!
//! // Retrying: any number of processes may run this; `"singleton": true` elects one.
//! let config = RetrierConfig::from_json_str(r#"{"batch-size": 50, "max-retries": 240}"#)?.with_env()?;
//! let retrier = Retrier::new(store, dlq_core::handlers![handle_payment]?).config(config);
//! let shutdown = CancellationToken::new();
//! let stats = retrier.run_until(shutdown.cancelled_owned()).await?; // until `shutdown.cancel()`
//! let (claimed, succeeded, rescheduled, dead) = (stats.claimed, stats.succeeded, stats.retried, stats.dead);
//! println!("{claimed} claimed: {succeeded} succeeded, {rescheduled} rescheduled, {dead} parked dead");
//! # Ok(()) }
//! ```
//!
//! # Tests
//! The PostgreSQL tests (`tests/pg_*.rs`) use `#[sqlx::test]`, which creates a fresh database
//! per test: run them with `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres`.

#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod catalog;
#[cfg(feature = "postgres")]
mod pg;
mod redact;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod stored_json;

#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(feature = "postgres")]
pub use postgres::{PgConfig, PgStore};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

pub use redact::mask_passwords;

/// A migration that could not be applied: the source of the [`dlq_core::Error::Store`] that
/// building a store or [`postgres::migrate`] returns, with sqlx's error as its own source.
#[derive(Debug, thiserror::Error)]
#[error("migrating the dead-letter schema{} failed", schema.as_ref().map(|s| format!(" `{s}`")).unwrap_or_default())]
struct MigrationFailed {
    /// The PostgreSQL schema migrated (none for SQLite).
    schema: Option<String>,
    #[source]
    source: sqlx::migrate::MigrateError,
}

/// A failed migration as the store error every constructor returns.
fn migration_failed(schema: Option<&str>, source: sqlx::migrate::MigrateError) -> dlq_core::Error {
    dlq_core::Error::store(MigrationFailed { schema: schema.map(str::to_owned), source })
}

/// The crate's README, its page on crates.io: its examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
