//! The schema's migrations, expand then contract, so that a rolling deploy never breaks the
//! processes of the previous release.
//!
//! A migration either *expands* the schema (adds a table, a column, an index, a function, a
//! type; rewrites a function keeping its signature) or *contracts* it (drops or renames
//! something a statement may use). A contract migration says so in its file name:
//! `NNNN_contract_<what>.sql`. The previous release's statements keep working after every
//! expand migration of this release; a contract migration may break them, so it waits:
//!
//! - [`migrate`] (`dlq migrate`, and every store that starts with `run_migrations` on) applies
//!   the expand migrations, and the contract migrations of earlier releases;
//! - [`migrate_contract`] (`dlq migrate --contract`) applies this release's contract
//!   migrations too, once no retrier of an older release still heartbeats;
//! - a schema with no migration applied yet gets everything at once: nothing older runs
//!   against it.
//!
//! The release boundary is [`RELEASE_FIRST_MIGRATION`], the number of the first migration of
//! this release.

use std::collections::HashMap;
use std::fmt;

use dlq_core::store::StoreResult;
use sqlx::migrate::{Migrate, MigrateError, Migration, MigrationType};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, PgPool};

use super::schema::{self, validate_schema};
use super::{MIGRATOR, PgStore, roles, session};

/// The number of the first migration of this release: contract migrations from this number
/// on wait for [`migrate_contract`]; those below it belong to earlier releases and
/// [`migrate`] applies them. A retrier writes this number into its heartbeat, so that
/// [`migrate_contract`] can tell a process of an older release from one of this release.
///
/// Raised to the next free migration number when a release is cut (docs/DESIGN.md, "Rolling
/// upgrades").
pub const RELEASE_FIRST_MIGRATION: i64 = 37;

/// How long after its last heartbeat a retrier still counts as running for
/// [`migrate_contract`]: 5 minutes, thirty times the default heartbeat. A retrier that stops
/// cleanly removes its row at once; one that was killed stops counting after this.
pub const HEARTBEAT_COUNTS_FOR: std::time::Duration = std::time::Duration::from_secs(300);

/// sqlx's table of applied migrations, in the dead-letter schema.
const TABLE: &str = "_sqlx_migrations";

/// One migration of the schema, as [`schema_status`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Step {
    /// Its number (`0038` in `0038_contract_unused_claim_functions.sql`).
    pub version: i64,
    /// Its description: the file name after the number, with spaces for underscores.
    pub description: String,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04} {}", self.version, self.description)
    }
}

/// Where a schema stands against this release's migrations ([`schema_status`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchemaStatus {
    /// Expand migrations (or earlier releases' contract migrations) not applied: the schema is
    /// behind this release, and [`migrate`] applies them. Every migration when the schema has
    /// no dlq tables yet.
    pub missing: Vec<Step>,
    /// This release's contract migrations not applied yet: the schema still serves the
    /// previous release; [`migrate_contract`] applies them.
    pub contract_waiting: Vec<Step>,
    /// Applied migrations this release does not know: the schema was migrated by a newer dlq.
    pub newer: Vec<i64>,
}

impl SchemaStatus {
    /// Whether this release's statements all work on the schema: nothing missing, nothing
    /// newer (contract migrations may wait).
    pub fn is_current(&self) -> bool {
        self.missing.is_empty() && self.newer.is_empty()
    }
}

/// A refusal of [`migrate_contract`]: retriers of an older release still heartbeat, and this
/// release's contract migrations may break their statements.
#[derive(Debug, thiserror::Error)]
#[error(
    "{} of an older release still running against schema `{schema}` ({}): a contract migration \
     ({}) may break its statements. Upgrade or stop it, then run `dlq migrate --contract` again \
     (a retrier killed without stopping counts for {} minutes after its last heartbeat)",
    if running.len() == 1 { "a retrier".to_owned() } else { format!("{} retriers", running.len()) },
    running.iter().take(3).map(String::as_str).collect::<Vec<_>>().join("; "),
    waiting.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
    HEARTBEAT_COUNTS_FOR.as_secs() / 60
)]
pub struct OlderReleaseRunning {
    /// The schema.
    pub schema: String,
    /// Each retrier still heartbeating: `host pid N, last seen … ago`, at most 63 characters of
    /// its host, control characters removed.
    pub running: Vec<String>,
    /// The contract migrations that wait.
    pub waiting: Vec<Step>,
}

/// Whether `migration` drops or renames what a statement of the previous release may use.
fn is_contract(migration: &Migration) -> bool {
    migration.description.starts_with("contract ") || migration.description.starts_with("contract_")
}

fn step(migration: &Migration) -> Step {
    Step { version: migration.version, description: migration.description.to_string() }
}

/// The migrations [`migrate`] leaves for [`migrate_contract`].
fn waits_for_contract(migration: &Migration) -> bool {
    is_contract(migration) && migration.version >= RELEASE_FIRST_MIGRATION
}

/// The checksums an earlier release recorded for migrations whose comments were reworded since
/// (their statements are the same): `(version, SHA-384 of the shipped file)`. A schema that ran
/// the earlier text is up to date, not changed behind the migrator's back.
const REWORDED: [(i64, &str); 5] = [
    (12, "651550f6ffcd471b584f2962f12cce90f22e6bb80cb1612ed4199f1cd9d7b00438062246508977297893b6e6b3424bc4"),
    (13, "8b86c47d64673d4422acee175b2674453c986192d9974e838113f252175c3f2a27daa85a52c71c988529533ffe5a03a5"),
    (14, "4f825acd00bf8f06f5f6c1420530190e9bac0465dfdfad794c82b542f657e3c0913afd97e1e2d84d0236e21203e2fa4f"),
    (15, "ddc6e3858178a2360a48a3622643aca2d7fc33f842c6ff6d53c6b7a326621d931e34cd6ae42a50e08e805dfc08794b68"),
    (16, "20fd726bf73bc7098d96e47e4bcc23b8c7e32a2db901caa74abd72d0cf893c0e4190f42c3451ae1b9e501691d5a494ed"),
];

/// Whether `checksum`, recorded for `version`, is the text of that migration before a rewording
/// ([`REWORDED`]).
fn reworded(version: i64, checksum: &[u8]) -> bool {
    let written: String = checksum.iter().map(|byte| format!("{byte:02x}")).collect();
    REWORDED.iter().any(|(v, hex)| *v == version && written == *hex)
}

fn up_migrations() -> impl Iterator<Item = &'static Migration> {
    MIGRATOR.iter().filter(|m| !matches!(m.migration_type, MigrationType::ReversibleDown))
}

/// Applies the embedded migrations ([`MIGRATOR`]) in `schema`, creating the schema first if
/// needed, except this release's contract migrations (module docs): after it, both this
/// release's and the previous release's statements work. Runs on a connection of its own whose
/// `search_path` is the schema, so the migrations (and sqlx's `_sqlx_migrations` table) land
/// there.
///
/// # Errors
/// [`dlq_core::Error::Config`] (key `schema`) for a schema name that is not a plain
/// identifier; [`dlq_core::Error::Store`] when no connection can be had or a migration fails
/// ("migrating the dead-letter schema `dlq` failed", with sqlx's error as the source), or when
/// the schema was migrated by a newer dlq ("migration 41 was previously applied but is missing
/// in the resolved migrations").
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), dlq_core::Error> {
/// dlq_sqlx::postgres::migrate(&pool, "dlq").await?;
/// # Ok(()) }
/// ```
pub async fn migrate(pool: &PgPool, schema: &str) -> StoreResult<()> {
    run_on_own_connection(pool, None, schema, Scope::Expand).await
}

/// [`migrate`], then this release's contract migrations: what `dlq migrate --contract` runs
/// once every process runs this release. Returns the contract migrations it applied.
///
/// It refuses while a retrier of an older release heartbeats in the schema (a heartbeat
/// without this release's [`RELEASE_FIRST_MIGRATION`], seen in the last
/// [`HEARTBEAT_COUNTS_FOR`]). A process that only parks, without a retrier, sends no
/// heartbeat: run it once those are replaced too.
///
/// # Errors
/// As [`migrate`]; and [`dlq_core::Error::Store`] with [`OlderReleaseRunning`] as its source
/// when a retrier of an older release still runs (nothing is applied then).
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), dlq_core::Error> {
/// let applied = dlq_sqlx::postgres::migrate_contract(&pool, "dlq").await?;
/// for step in applied {
///     println!("applied {step}");
/// }
/// # Ok(()) }
/// ```
pub async fn migrate_contract(pool: &PgPool, schema: &str) -> StoreResult<Vec<Step>> {
    let waiting = schema_status(pool, schema).await?.contract_waiting;
    run_on_own_connection(pool, None, schema, Scope::Contract).await?;
    Ok(waiting)
}

impl PgStore {
    /// [`migrate_contract`] on this store's schema, through its session URL when it has one
    /// (`PgConfig::session_url`: the migrator's lock needs a session).
    ///
    /// # Errors
    /// As [`migrate_contract`].
    ///
    /// ```no_run
    /// # async fn demo(store: dlq_sqlx::PgStore) -> Result<(), dlq_core::Error> {
    /// let applied = store.migrate_contract().await?;
    /// # Ok(()) }
    /// ```
    pub async fn migrate_contract(&self) -> StoreResult<Vec<Step>> {
        let schema = &self.config().schema;
        let waiting = schema_status(self.pool(), schema).await?.contract_waiting;
        session::migrate(&self.inner.session, self.pool(), schema, Scope::Contract).await?;
        Ok(waiting)
    }
}

/// Where `schema` stands against this release's migrations: what [`migrate`] would apply,
/// what waits for [`migrate_contract`], and what a newer dlq applied. Reads only; a schema
/// that does not exist has every migration missing.
///
/// # Errors
/// [`dlq_core::Error::Config`] (key `schema`) for an invalid schema name;
/// [`dlq_core::Error::Store`] when the database cannot be read.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), dlq_core::Error> {
/// let status = dlq_sqlx::postgres::schema_status(&pool, "dlq").await?;
/// if !status.is_current() {
///     println!("run `dlq migrate`: {} migrations missing", status.missing.len());
/// }
/// # Ok(()) }
/// ```
pub async fn schema_status(pool: &PgPool, schema: &str) -> StoreResult<SchemaStatus> {
    validate_schema(schema)?;
    let quoted = schema::quoted(schema);
    let exists: bool = sqlx::query_scalar("SELECT to_regclass(format('%I._sqlx_migrations', $1::text)) IS NOT NULL")
        .bind(schema)
        .fetch_one(pool)
        .await
        .map_err(dlq_core::Error::store)?;
    let applied: Vec<i64> = if exists {
        let query = format!("SELECT version FROM {quoted}.{TABLE} WHERE success ORDER BY version");
        sqlx::query_scalar(sqlx::AssertSqlSafe(query)).fetch_all(pool).await.map_err(dlq_core::Error::store)?
    } else {
        Vec::new()
    };
    Ok(status_of(&applied))
}

fn status_of(applied: &[i64]) -> SchemaStatus {
    let mut status = SchemaStatus::default();
    for migration in up_migrations().filter(|m| !applied.contains(&m.version)) {
        if waits_for_contract(migration) && !applied.is_empty() {
            status.contract_waiting.push(step(migration));
        } else {
            status.missing.push(step(migration));
        }
    }
    status.newer = applied.iter().copied().filter(|v| !up_migrations().any(|m| m.version == *v)).collect();
    status
}

/// Which migrations a run applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Everything but this release's contract migrations (unless the schema is new).
    Expand,
    /// Everything, after checking that no retrier of an older release runs.
    Contract,
}

/// Applies the migrations of `scope` on a connection of their own, closed after: one made to
/// `direct` (a store's session URL), else one taken out of `pool` for good.
pub(crate) async fn run_on_own_connection(
    pool: &PgPool,
    direct: Option<&PgConnectOptions>,
    schema: &str,
    scope: Scope,
) -> StoreResult<()> {
    validate_schema(schema)?;
    let mut conn = match direct {
        Some(options) => super::nodelay::connect(options).await,
        None => pool.acquire().await.map(sqlx::pool::PoolConnection::detach),
    }
    .map_err(dlq_core::Error::store)?;
    let result = run_on(&mut conn, schema, scope).await;
    let _ = conn.close().await;
    result
}

/// Applies the migrations of `scope` on a session connection (see [`migrate`]); a refused
/// privilege is said as [`roles::deny_on`] says it.
pub(crate) async fn run_on(conn: &mut PgConnection, schema: &str, scope: Scope) -> StoreResult<()> {
    match run_locked(conn, schema, scope).await {
        Ok(()) => Ok(()),
        Err(err) => Err(roles::deny_on(conn, err, "migrate the schema", roles::Need::Migrator).await),
    }
}

async fn run_locked(conn: &mut PgConnection, schema: &str, scope: Scope) -> StoreResult<()> {
    let quoted = schema::quoted(schema);
    let failed = |err| crate::migration_failed(Some(schema), err);
    // A migration (an index built on a large table) may take longer than the role's
    // `statement_timeout`, which a managed database may set low: it is lifted on this
    // connection, which is closed after. `lock_timeout` is kept: a migration that cannot have
    // its lock in time fails and is run again, rather than stopping the traffic queued behind it.
    sqlx::raw_sql("SET statement_timeout = 0").execute(&mut *conn).await.map_err(|e| failed(e.into()))?;
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
        .bind(schema)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| failed(e.into()))?;
    if !exists {
        let create = format!("CREATE SCHEMA IF NOT EXISTS {quoted}");
        sqlx::query(sqlx::AssertSqlSafe(create)).execute(&mut *conn).await.map_err(|e| failed(e.into()))?;
    }
    let search_path = format!("SET search_path TO {quoted}");
    sqlx::query(sqlx::AssertSqlSafe(search_path)).execute(&mut *conn).await.map_err(|e| failed(e.into()))?;
    drop_interrupted_index_builds(conn, schema, &quoted).await.map_err(failed)?;
    conn.lock().await.map_err(failed)?;
    let result = apply(conn, schema, scope).await;
    let unlocked = conn.unlock().await;
    result?;
    unlocked.map_err(failed)
}

/// `Migrator::run` with the contract migrations of this release left out (unless `scope`
/// asks for them): sqlx's own checks (a dirty schema, a changed or unknown migration), then
/// each pending migration in order. Runs under the migrator's lock.
async fn apply(conn: &mut PgConnection, schema: &str, scope: Scope) -> StoreResult<()> {
    let failed = |err| crate::migration_failed(Some(schema), err);
    conn.ensure_migrations_table(TABLE).await.map_err(failed)?;
    if let Some(version) = conn.dirty_version(TABLE).await.map_err(failed)? {
        return Err(failed(MigrateError::Dirty(version)));
    }
    let applied: HashMap<i64, _> = conn
        .list_applied_migrations(TABLE)
        .await
        .map_err(failed)?
        .into_iter()
        .map(|m| (m.version, m.checksum))
        .collect();
    if let Some(&unknown) = applied.keys().filter(|v| !MIGRATOR.version_exists(**v)).min() {
        return Err(failed(MigrateError::VersionMissing(unknown)));
    }
    let fresh = applied.is_empty();
    if scope == Scope::Contract {
        let versions: Vec<i64> = applied.keys().copied().collect();
        let waiting = status_of(&versions).contract_waiting;
        if !waiting.is_empty() {
            refuse_if_older_release_runs(conn, schema, waiting).await?;
        }
    }
    for migration in up_migrations() {
        match applied.get(&migration.version) {
            Some(checksum) if *checksum != migration.checksum && !reworded(migration.version, checksum) => {
                return Err(failed(MigrateError::VersionMismatch(migration.version)));
            }
            Some(_) => {}
            None if scope == Scope::Expand && !fresh && waits_for_contract(migration) => {}
            None => {
                conn.apply(TABLE, migration).await.map_err(failed)?;
            }
        }
    }
    Ok(())
}

async fn refuse_if_older_release_runs(conn: &mut PgConnection, schema: &str, waiting: Vec<Step>) -> StoreResult<()> {
    let quoted = schema::quoted(schema);
    let query = format!(
        "SELECT host, pid, floor(extract(epoch FROM now() - last_seen))::int8 FROM {quoted}.dlq_retriers \
         WHERE (release_migration IS NULL OR release_migration < $1) \
           AND last_seen > now() - $2 * INTERVAL '1 second' ORDER BY last_seen DESC"
    );
    let seconds = i64::try_from(HEARTBEAT_COUNTS_FOR.as_secs()).unwrap_or(i64::MAX);
    let rows: Vec<(String, i32, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(RELEASE_FIRST_MIGRATION)
        .bind(seconds)
        .fetch_all(&mut *conn)
        .await
        .map_err(dlq_core::Error::store)?;
    if rows.is_empty() {
        return Ok(());
    }
    let running = rows
        .into_iter()
        .map(|(host, pid, ago)| {
            let host: String = host.chars().filter(|c| !c.is_control()).take(63).collect();
            format!("{host} pid {pid}, last seen {ago} s ago")
        })
        .collect();
    Err(dlq_core::Error::store(OlderReleaseRunning { schema: schema.to_owned(), running, waiting }))
}

/// The indexes a migration builds `CONCURRENTLY` (a build that cannot run in a transaction).
const CONCURRENT_INDEXES: &[&str] =
    &["dlq_events_live_dedupe", "dlq_events_subject", "dlq_events_finished_at", "dlq_events_type_due"];

/// Drops what an interrupted `CREATE INDEX CONCURRENTLY` of a migration left: an INVALID index
/// that enforces nothing, under the name the migration, not recorded as applied, is about to
/// build again (it would fail with "already exists").
async fn drop_interrupted_index_builds(
    conn: &mut PgConnection,
    schema: &str,
    quoted: &str,
) -> Result<(), MigrateError> {
    let invalid: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_catalog.pg_index i \
         JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid \
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relname = ANY($2) AND NOT i.indisvalid",
    )
    .bind(schema)
    .bind(CONCURRENT_INDEXES)
    .fetch_all(&mut *conn)
    .await?;
    for name in invalid {
        // `name` is one of CONCURRENT_INDEXES, our own identifiers.
        tracing::warn!(schema, index = %name, "dropping an index whose concurrent build was interrupted, to build it again");
        let drop = format!("DROP INDEX CONCURRENTLY IF EXISTS {quoted}.{name}");
        sqlx::query(sqlx::AssertSqlSafe(drop)).execute(&mut *conn).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_migrations_are_named_so_and_only_this_release_s_wait() {
        let contract: Vec<i64> = up_migrations().filter(|m| is_contract(m)).map(|m| m.version).collect();
        assert!(contract.contains(&38), "{contract:?}");
        let waiting: Vec<i64> = up_migrations().filter(|m| waits_for_contract(m)).map(|m| m.version).collect();
        assert!(waiting.iter().all(|v| *v >= RELEASE_FIRST_MIGRATION), "{waiting:?}");
        assert!(!up_migrations().any(|m| m.version == 37 && is_contract(m)));
    }

    #[test]
    fn a_new_schema_misses_everything_and_waits_for_nothing() {
        let status = status_of(&[]);
        assert_eq!(status.missing.len(), up_migrations().count());
        assert!(status.contract_waiting.is_empty() && status.newer.is_empty());
        assert!(!status.is_current());
    }

    #[test]
    fn a_schema_of_the_previous_release_misses_the_expand_steps_and_waits_for_the_contract_ones() {
        let previous: Vec<i64> = up_migrations().map(|m| m.version).filter(|v| *v < RELEASE_FIRST_MIGRATION).collect();
        let status = status_of(&previous);
        assert!(status.missing.iter().all(|s| s.version >= RELEASE_FIRST_MIGRATION), "{status:?}");
        assert!(status.missing.iter().any(|s| s.version == 37), "{status:?}");
        assert_eq!(status.contract_waiting.iter().map(|s| s.version).collect::<Vec<_>>(), [38, 53]);
        let mut expanded = previous.clone();
        expanded.extend(status.missing.iter().map(|s| s.version));
        let status = status_of(&expanded);
        assert!(status.is_current(), "{status:?}");
        assert_eq!(status.contract_waiting.len(), 2);
        assert_eq!(status.contract_waiting[0].to_string(), format!("0038 {}", status.contract_waiting[0].description));
        assert_eq!(status.contract_waiting[1].to_string(), "0053 contract created at index");
    }

    #[test]
    fn a_migration_this_release_does_not_know_is_newer() {
        let mut all: Vec<i64> = up_migrations().map(|m| m.version).collect();
        all.push(9_999);
        let status = status_of(&all);
        assert_eq!(status.newer, [9_999]);
        assert!(!status.is_current());
    }
}
