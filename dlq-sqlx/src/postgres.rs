//! PostgreSQL (feature `postgres`): [`PgStore`], its configuration, and the schema's
//! migrations.
//!
//! [`PgStore`] and [`PgConfig`] are also re-exported at the crate root.
//!
//! ```no_run
//! use dlq_sqlx::postgres::{Overflow, PgConfig, PgStore};
//!
//! # async fn demo() -> Result<(), dlq_core::Error> {
//! let config = PgConfig::default().schema("dlq").max_entries(1_000_000, Overflow::DropOldest);
//! let store = PgStore::connect_with("postgres://postgres@127.0.0.1:5432/app", config).await?;
//! # Ok(()) }
//! ```

pub use crate::pg::{
    DurabilityCheck, HEARTBEAT_COUNTS_FOR, MIGRATOR, NodelayWatch, OlderReleaseRunning, Overflow, PgConfig, PgStore,
    RELEASE_FIRST_MIGRATION, Roles, SchemaStatus, SessionUrl, Step, apply_roles, migrate, migrate_contract, roles_sql,
    schema_status, set_tcp_nodelay, validate_schema, watch_tcp_nodelay, with_tcp_nodelay,
};
