//! SQLite (feature `sqlite`): [`SqliteStore`], the embedded default store, one file on the
//! local disk, and its schema's [`MIGRATOR`].
//!
//! [`SqliteStore`] is also re-exported at the crate root.

mod admin;
mod catalog;
mod circuits;
mod codec;
mod erase;
mod heartbeat;
mod ops;
mod statement;
mod upgrade;
mod write;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use dlq_core::store::{
    ActionKind, BatchAction, BatchReport, BoxFuture, ClaimCap, ClaimRequest, Claimed, Operation, OperationState,
    PatchBatch, PatchRequest, SettleReport, Settlement, StoreId, StoreResult,
};
use dlq_core::store::{WorkSignal, WorkTicket};
use dlq_core::{
    DeadLetter, DlqId, Error, ListFilter, admin::AttemptRecord, admin::AuditEntry, admin::FailureGroup,
    admin::RetrierHeartbeat, admin::StatsRow, store::AuditNote, store::NewDeadLetter, store::Parked, store::prelude::*,
};
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

/// The SQLite schema (`dlq_events`, `dlq_attempts`, `dlq_audit`), embedded from
/// `migrations/sqlite/`. [`SqliteStore::connect`] runs it; run it yourself when you build the
/// store [`from_pool`](SqliteStore::from_pool).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
/// dlq_sqlx::sqlite::MIGRATOR.run(&pool).await?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub static MIGRATOR: Migrator = sqlx::migrate!("migrations/sqlite");

/// The file [`SqliteStore::open_default`] opens when `DLQ_SQLITE_PATH` is not set.
///
/// ```
/// assert_eq!(dlq_sqlx::sqlite::DEFAULT_SQLITE_PATH, "dlq.db");
/// ```
pub const DEFAULT_SQLITE_PATH: &str = "dlq.db";

/// How long a connection waits for another writer before it reports the database busy.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections to a database file: writers take turns, readers run beside them (WAL).
const FILE_POOL_SIZE: u32 = 4;

/// A [`DeadLetterStore`] in one SQLite file: the embedded default, so an application runs on
/// a fresh machine with no database server. It keeps exactly the semantics of
/// [`MemoryStore`](dlq_core::MemoryStore) and of `PgStore` (checked by the same conformance
/// suite): dedupe keys, leases with fencing tokens, attempt history and audit log.
///
/// The database runs in WAL mode with `synchronous = FULL` (a park that returned is on disk)
/// and a busy timeout; every write transaction takes the write lock at once
/// (`BEGIN IMMEDIATE`), so several processes can share a file. Times are
/// taken from this host's clock and stored as unix microseconds. Use PostgreSQL (`PgStore`)
/// when retriers run on several hosts.
///
/// ```
/// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, store::NewDeadLetter, Payload, Status};
/// use dlq_core::store::{ClaimRequest, Settlement};
/// use dlq_sqlx::SqliteStore;
/// use std::time::Duration;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = SqliteStore::in_memory().await?;
/// let failure = FailureInfo::new(ErrorClass::Transient, "io", "ledger down".into(), vec![], None);
/// let id = store.park(NewDeadLetter::new("payment", Payload::Json(serde_json::json!({"id": 1})), failure)).await?.id;
///
/// let request = ClaimRequest { event_types: vec!["payment".into()], limit: 10, lease: Duration::from_secs(30), owner: "me".into() };
/// let claimed = store.claim(request).await?;
/// store.settle(vec![Settlement::Succeeded { lease: claimed[0].lease }]).await?;
/// assert_eq!(store.get(id).await?.unwrap().status, Status::Succeeded);
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    work: WorkSignal,
    /// The database file's canonical path, or a unique id in memory.
    id: StoreId,
}

impl SqliteStore {
    /// Opens (with `?mode=rwc`, creates) the database at `url`, e.g. `sqlite://dlq.db?mode=rwc`,
    /// in WAL mode with a busy timeout, and runs [`MIGRATOR`].
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let dir = std::env::temp_dir().join(format!("dlq-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let url = format!("sqlite://{}?mode=rwc", dir.join("connect.db").display());
    /// let store = dlq_sqlx::SqliteStore::connect(&url).await?;
    /// # drop(store); std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let options = SqliteConnectOptions::from_str(url).map_err(Error::store)?;
        Self::connect_with(options).await
    }

    /// Opens (creating it if missing) `$DLQ_SQLITE_PATH`, or [`DEFAULT_SQLITE_PATH`] (`dlq.db`)
    /// in the current directory, and runs [`MIGRATOR`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), dlq_core::Error> {
    /// let store = dlq_sqlx::SqliteStore::open_default().await?; // ./dlq.db
    /// # Ok(()) }
    /// ```
    pub async fn open_default() -> StoreResult<Self> {
        let path =
            std::env::var_os("DLQ_SQLITE_PATH").filter(|p| !p.is_empty()).unwrap_or_else(|| DEFAULT_SQLITE_PATH.into());
        Self::open(Path::new(&path)).await
    }

    /// Opens (creating it if missing) the database file at `path` and runs [`MIGRATOR`].
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let path = std::env::temp_dir().join(format!("dlq-doc-open-{}.db", std::process::id()));
    /// let store = dlq_sqlx::SqliteStore::open(&path).await?;
    /// # drop(store); for ext in ["", "-wal", "-shm"] { std::fs::remove_file(format!("{}{ext}", path.display())).ok(); }
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn open(path: &Path) -> StoreResult<Self> {
        Self::connect_with(SqliteConnectOptions::new().filename(path).create_if_missing(true)).await
    }

    /// Opens a database with these options (WAL mode and the busy timeout are added), and runs
    /// [`MIGRATOR`].
    ///
    /// ```
    /// use sqlx::sqlite::SqliteConnectOptions;
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let path = std::env::temp_dir().join(format!("dlq-doc-with-{}.db", std::process::id()));
    /// let options = SqliteConnectOptions::new().filename(&path).create_if_missing(true);
    /// let store = dlq_sqlx::SqliteStore::connect_with(options).await?;
    /// # drop(store); for ext in ["", "-wal", "-shm"] { std::fs::remove_file(format!("{}{ext}", path.display())).ok(); }
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn connect_with(options: SqliteConnectOptions) -> StoreResult<Self> {
        let options = options
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new().max_connections(FILE_POOL_SIZE).connect_with(options).await;
        Self::migrated(pool.map_err(Error::store)?).await
    }

    /// A private in-memory database, lost when the store (and its last clone) is dropped: for
    /// tests and examples. It lives in one connection that is never closed.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = dlq_sqlx::SqliteStore::in_memory().await?;
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn in_memory() -> StoreResult<Self> {
        // `:memory:` is private to its connection: keep exactly one, forever.
        let options = SqliteConnectOptions::new().in_memory(true).foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .min_connections(1)
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await;
        // Its own database, whatever file name the options carry.
        Ok(Self { id: StoreId::unique(), ..Self::migrated(pool.map_err(Error::store)?).await? })
    }

    /// Wraps a pool whose database already has the schema ([`MIGRATOR`]).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// dlq_sqlx::sqlite::MIGRATOR.run(&pool).await?;
    /// let store = dlq_sqlx::SqliteStore::from_pool(pool);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn from_pool(pool: SqlitePool) -> Self {
        // Stores on one file share its circuits, and so the process's views of them.
        let id = std::fs::canonicalize(pool.connect_options().get_filename())
            .map_or_else(|_| StoreId::unique(), |path| StoreId::named(format!("sqlite:{}", path.display())));
        Self { pool, work: WorkSignal::new(), id }
    }

    /// The connection pool, for the application's own queries on the same database.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = dlq_sqlx::SqliteStore::in_memory().await?;
    /// let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM dlq_events").fetch_one(store.pool()).await.unwrap();
    /// assert_eq!(n, 0);
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub const fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Parks `letter` on the caller's connection, inside the caller's transaction if one is
    /// open: the dead letter is stored only if and when the caller commits, together with the
    /// application's own writes to the same database file.
    ///
    /// Open the transaction with `BEGIN IMMEDIATE` (`pool.begin_with("BEGIN IMMEDIATE")`) so it
    /// takes the write lock up front. Retriers waiting in
    /// [`wait_for_work`](dlq_core::store::QueueStore::wait_for_work) are woken at once, before the commit;
    /// one that looks too early finds the row at its next poll.
    ///
    /// ```
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, store::NewDeadLetter, Payload};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = dlq_sqlx::SqliteStore::in_memory().await?;
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "validation", "bad iban".into(), vec![], None);
    /// let letter = NewDeadLetter::new("payment", Payload::Json(serde_json::json!({"id": 7})), failure);
    ///
    /// let mut tx = store.pool().begin_with("BEGIN IMMEDIATE").await.map_err(dlq_core::Error::store)?;
    /// let parked = store.park_in(&mut tx, letter).await?;
    /// tx.rollback().await.map_err(dlq_core::Error::store)?; // nothing was parked
    /// assert!(store.get(parked.id).await?.is_none());
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn park_in(&self, conn: &mut SqliteConnection, letter: NewDeadLetter) -> StoreResult<Parked> {
        let parked = write::park_in(conn, vec![letter]).await?;
        self.wake();
        parked.into_iter().next().ok_or_else(|| codec::decode_error("park returned no row"))
    }

    /// Parks many letters on the caller's connection, as [`park_in`](Self::park_in); ids come
    /// back in input order.
    ///
    /// ```
    /// use dlq_core::{ErrorClass, classify::FailureInfo, store::NewDeadLetter, Payload};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = dlq_sqlx::SqliteStore::in_memory().await?;
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// let letters = vec![NewDeadLetter::new("payment", Payload::Json(serde_json::json!(1)), failure); 2];
    /// let mut conn = store.pool().acquire().await.map_err(dlq_core::Error::store)?;
    /// assert_eq!(store.park_many_in(&mut conn, letters).await?.len(), 2);
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn park_many_in(
        &self,
        conn: &mut SqliteConnection,
        letters: Vec<NewDeadLetter>,
    ) -> StoreResult<Vec<Parked>> {
        let parked = write::park_in(conn, letters).await?;
        self.wake();
        Ok(parked)
    }

    async fn migrated(pool: SqlitePool) -> StoreResult<Self> {
        MIGRATOR.run(&pool).await.map_err(|err| crate::migration_failed(None, err))?;
        Ok(Self::from_pool(pool))
    }

    fn wake(&self) {
        self.work.announce();
    }
}

impl QueueStore for SqliteStore {
    fn park(&self, letter: NewDeadLetter) -> BoxFuture<'_, StoreResult<Parked>> {
        Box::pin(async move {
            let parked = write::park(&self.pool, vec![letter]).await?;
            self.wake();
            parked.into_iter().next().ok_or_else(|| codec::decode_error("park returned no row"))
        })
    }

    fn park_many(&self, letters: Vec<NewDeadLetter>) -> BoxFuture<'_, StoreResult<Vec<Parked>>> {
        Box::pin(async move {
            let parked = write::park(&self.pool, letters).await?;
            self.wake();
            Ok(parked)
        })
    }

    fn claim(&self, request: ClaimRequest) -> BoxFuture<'_, StoreResult<Vec<Claimed>>> {
        Box::pin(write::claim(&self.pool, request, None))
    }

    fn settle(&self, outcomes: Vec<Settlement>) -> BoxFuture<'_, StoreResult<SettleReport>> {
        Box::pin(async move {
            let wake = outcomes.iter().any(Settlement::pending_again);
            let report = write::settle(&self.pool, outcomes).await?;
            if wake {
                self.wake();
            }
            Ok(report)
        })
    }

    fn work_ticket(&self) -> WorkTicket {
        self.work.ticket()
    }

    fn wait_for_work(&self, after: WorkTicket, max: Duration) -> BoxFuture<'_, ()> {
        Box::pin(self.work.wait(after, max))
    }

    fn get(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Option<DeadLetter>>> {
        Box::pin(admin::get(&self.pool, id))
    }

    fn store_id(&self) -> StoreId {
        self.id.clone()
    }

    fn capped_claims(&self) -> Option<&dyn CappedClaimStore> {
        Some(self)
    }
}

impl ReadStore for SqliteStore {
    fn list(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>> {
        Box::pin(admin::list(&self.pool, filter))
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<Vec<StatsRow>>> {
        Box::pin(admin::stats(&self.pool))
    }

    fn groups(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<FailureGroup>>> {
        Box::pin(admin::groups(&self.pool, filter))
    }

    fn created_histogram(
        &self,
        since: chrono::DateTime<chrono::Utc>,
        step: std::time::Duration,
        buckets: u32,
    ) -> BoxFuture<'_, StoreResult<Vec<dlq_core::store::HistogramBucket>>> {
        Box::pin(admin::created_histogram(&self.pool, since, step, buckets))
    }

    fn attempts(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AttemptRecord>>> {
        Box::pin(admin::attempts(&self.pool, id))
    }

    fn audit(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AuditEntry>>> {
        Box::pin(admin::audit(&self.pool, id))
    }

    fn count(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(admin::count(&self.pool, filter))
    }

    fn audit_entry(&self, id: i64) -> BoxFuture<'_, StoreResult<Option<AuditEntry>>> {
        Box::pin(ops::audit_one(&self.pool, id))
    }

    fn count_purgeable(&self, older_than: Duration) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(admin::count_purgeable(&self.pool, older_than))
    }
}

impl OperatorStore for SqliteStore {
    fn patch(&self, request: PatchRequest) -> BoxFuture<'_, StoreResult<i64>> {
        Box::pin(admin::patch(&self.pool, request))
    }

    fn upgrade(&self, upgrade: dlq_core::store::VersionUpgrade) -> BoxFuture<'_, StoreResult<i64>> {
        Box::pin(upgrade::upgrade(&self.pool, upgrade))
    }

    fn patch_rows(&self, batch: PatchBatch) -> BoxFuture<'_, StoreResult<BatchReport>> {
        Box::pin(ops::patch_rows(&self.pool, batch))
    }

    fn apply(&self, batch: BatchAction) -> BoxFuture<'_, StoreResult<BatchReport>> {
        Box::pin(async move {
            let redrive = batch.action == ActionKind::Redrive;
            let report = ops::apply(&self.pool, batch).await?;
            if redrive {
                self.wake();
            }
            Ok(report)
        })
    }

    fn create_operation(
        &self,
        action: ActionKind,
        spec: serde_json::Value,
        note: AuditNote,
    ) -> BoxFuture<'_, StoreResult<Operation>> {
        Box::pin(ops::create(&self.pool, action, spec, note))
    }

    fn operation(&self, id: i64) -> BoxFuture<'_, StoreResult<Option<Operation>>> {
        Box::pin(ops::get(&self.pool, id))
    }

    fn set_operation_state(&self, id: i64, state: OperationState) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(ops::set_state(&self.pool, id, state))
    }

    fn purge(&self, older_than: Duration) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(admin::purge(&self.pool, older_than))
    }
}

impl FleetStore for SqliteStore {
    fn publish_types(&self, types: Vec<dlq_core::catalog::EventTypeInfo>) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(catalog::publish(&self.pool, types))
    }

    fn event_types(&self) -> BoxFuture<'_, StoreResult<Vec<dlq_core::catalog::EventTypeInfo>>> {
        Box::pin(catalog::all(&self.pool))
    }

    fn version_schemas(&self) -> BoxFuture<'_, StoreResult<Vec<dlq_core::catalog::VersionSchema>>> {
        Box::pin(catalog::schemas(&self.pool))
    }

    fn accept_schema(&self, schema: dlq_core::catalog::VersionSchema) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(catalog::accept(&self.pool, schema))
    }

    fn heartbeat(&self, beat: &RetrierHeartbeat, expire_after: Duration) -> BoxFuture<'_, StoreResult<()>> {
        let beat = beat.clone();
        Box::pin(async move { heartbeat::beat(&self.pool, &beat, expire_after).await })
    }

    fn remove_heartbeat(&self, owner: &str) -> BoxFuture<'_, StoreResult<()>> {
        let owner = owner.to_owned();
        Box::pin(async move { heartbeat::remove(&self.pool, &owner).await })
    }

    fn retriers(&self) -> BoxFuture<'_, StoreResult<Vec<RetrierHeartbeat>>> {
        Box::pin(heartbeat::all(&self.pool))
    }

    fn circuits(&self) -> BoxFuture<'_, StoreResult<dlq_core::store::Circuits>> {
        Box::pin(circuits::all(&self.pool))
    }

    fn write_circuit(
        &self,
        write: dlq_core::store::CircuitWrite,
    ) -> BoxFuture<'_, StoreResult<Option<dlq_core::store::Circuit>>> {
        Box::pin(circuits::write(&self.pool, write))
    }

    fn circuit_log(
        &self,
        event_type: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<dlq_core::store::CircuitLogEntry>>> {
        Box::pin(circuits::log(&self.pool, event_type, limit))
    }

    fn singleton(&self) -> Option<&dyn SingletonStore> {
        None
    }
}

impl PrivacyStore for SqliteStore {
    fn reveal(&self, id: DlqId, note: AuditNote) -> BoxFuture<'_, StoreResult<i64>> {
        Box::pin(admin::reveal(&self.pool, id, note))
    }

    fn mark_unreadable(&self, leases: Vec<dlq_core::store::Lease>) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(admin::mark_unreadable(&self.pool, leases))
    }

    fn count_unreadable(&self) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(admin::count_unreadable(&self.pool))
    }

    fn erase(&self, request: dlq_core::store::EraseRequest) -> BoxFuture<'_, StoreResult<dlq_core::store::Erasure>> {
        Box::pin(erase::erase(&self.pool, request))
    }

    fn erasures(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<dlq_core::store::Erasure>>> {
        Box::pin(erase::erasures(&self.pool, limit))
    }

    fn subject_key_check(
        &self,
        check: dlq_core::store::KeyCheck,
    ) -> BoxFuture<'_, StoreResult<dlq_core::store::KeyCheck>> {
        Box::pin(erase::key_check(&self.pool, check))
    }

    fn count_subject(&self, subject: dlq_core::store::SubjectHash) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(erase::count_subject(&self.pool, subject))
    }
}

impl CappedClaimStore for SqliteStore {
    /// Counts, claims and records in one write transaction (`BEGIN IMMEDIATE`).
    fn claim_capped(&self, request: ClaimRequest, cap: ClaimCap) -> BoxFuture<'_, StoreResult<Vec<Claimed>>> {
        Box::pin(write::claim(&self.pool, request, Some(cap)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlq_core::Payload;

    async fn rejects(store: &SqliteStore, statement: &'static str) {
        let result = sqlx::query(statement).execute(store.pool()).await;
        assert!(result.is_err(), "the schema accepted: {statement}");
    }

    #[tokio::test]
    async fn schema_rejects_rows_the_store_cannot_read() {
        let store = SqliteStore::in_memory().await.unwrap();
        let valid = "INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, \
             fingerprint, status, dead_reason, max_retries, retry_after, created_at, updated_at, first_failed_at) \
             VALUES ('t', '{}', 'transient', 'k', 'r', 'f', 'FAILED_PERMANENTLY', 'permanent', 0, 0, 0, 0, 0)";
        sqlx::query(valid).execute(store.pool()).await.unwrap();
        rejects(&store, "UPDATE dlq_events SET status = 'DONE'").await;
        rejects(&store, "UPDATE dlq_events SET dead_reason = NULL").await;
        rejects(&store, "UPDATE dlq_events SET dead_reason = 'tired'").await;
        rejects(&store, "UPDATE dlq_events SET error_class = 'odd'").await;
        rejects(&store, "UPDATE dlq_events SET payload = 'not json'").await;
        rejects(&store, "UPDATE dlq_events SET payload_raw = x'00'").await;
        rejects(&store, "UPDATE dlq_events SET payload_truncated = 1").await;
        rejects(&store, "UPDATE dlq_events SET status = 'PROCESSING', dead_reason = NULL").await;
        rejects(&store, "UPDATE dlq_events SET retry_count = -1").await;
        rejects(&store, "UPDATE dlq_events SET version = 0").await;
        rejects(&store, "INSERT INTO dlq_attempts (dlq_id, attempt, outcome, at) VALUES (1, 0, 'won', 0)").await;
        rejects(&store, "INSERT INTO dlq_attempts (dlq_id, attempt, outcome, at) VALUES (99, 0, 'failed', 0)").await;
        rejects(&store, "INSERT INTO dlq_audit (dlq_id, action, actor, diff, at) VALUES (1, 'x', 'a', '{}', 0)").await;
    }

    /// A purge goes in slices of its own transactions (parks wait for one slice, not the whole
    /// purge): rows past several slices all go with their history, and no other row does.
    #[tokio::test]
    async fn a_purge_of_many_slices_deletes_each_old_finished_row_with_its_history() {
        let store = SqliteStore::in_memory().await.unwrap();
        let failure =
            dlq_core::classify::FailureInfo::new(dlq_core::ErrorClass::Transient, "io", "x".into(), vec![], None);
        let pending = store.park(NewDeadLetter::new("t", Payload::Json(serde_json::json!(0)), failure)).await.unwrap();
        sqlx::query(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 12001)
             INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, fingerprint, status,
                 max_retries, retry_after, created_at, updated_at, first_failed_at)
             SELECT 't', json_object('n', n), 'transient', 'k', 'r', 'f',
                 CASE WHEN n % 2 = 0 THEN 'SUCCEEDED' ELSE 'DISCARDED' END, 0, 0, 0, n % 7, 0 FROM g",
        )
        .execute(store.pool())
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO dlq_attempts (dlq_id, attempt, outcome, at) SELECT id, 1, 'failed', 0 FROM dlq_events",
        )
        .execute(store.pool())
        .await
        .unwrap();
        let recent = store
            .park(NewDeadLetter::new(
                "t",
                Payload::Json(serde_json::json!(1)),
                dlq_core::classify::FailureInfo::new(dlq_core::ErrorClass::Transient, "io", "x".into(), vec![], None),
            ))
            .await
            .unwrap();
        sqlx::query("UPDATE dlq_events SET status = 'SUCCEEDED' WHERE id = ?1")
            .bind(recent.id)
            .execute(store.pool())
            .await
            .unwrap();
        assert_eq!(store.purge(Duration::from_secs(3600)).await.unwrap(), 12_001);
        let left: Vec<i64> =
            sqlx::query_scalar("SELECT id FROM dlq_events ORDER BY id").fetch_all(store.pool()).await.unwrap();
        assert_eq!(left, vec![pending.id, recent.id]);
        let history: i64 =
            sqlx::query_scalar("SELECT count(*) FROM dlq_attempts WHERE dlq_id NOT IN (SELECT id FROM dlq_events)")
                .fetch_one(store.pool())
                .await
                .unwrap();
        assert_eq!(history, 0, "the purged rows' attempts went with them");
    }

    #[tokio::test]
    async fn clones_share_the_database_and_the_wake_ups() {
        let store = SqliteStore::in_memory().await.unwrap();
        let clone = store.clone();
        let waiter =
            tokio::spawn(async move { clone.wait_for_work(clone.work_ticket(), Duration::from_secs(30)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let failure =
            dlq_core::classify::FailureInfo::new(dlq_core::ErrorClass::Transient, "io", "x".into(), vec![], None);
        let letter = NewDeadLetter::new("t", Payload::Json(serde_json::json!(1)), failure);
        let id = store.park(letter).await.unwrap().id;
        tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken by the park").unwrap();
        assert!(store.get(id).await.unwrap().is_some());
    }
}
