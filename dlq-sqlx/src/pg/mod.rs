//! `PgStore`: the production store on PostgreSQL.
//!
//! - `schema`: schema validation and the statements rendered once per store;
//! - `park`: payload normalization, the multi-row insert, group commit, `park_in`;
//! - `capacity`: `max_entries` with its overflow policies and the saturation gauge;
//! - `claim`: claiming with `SKIP LOCKED` and fenced batch settlement;
//! - `admin`: reads and operator actions;
//! - `notify`: `LISTEN/NOTIFY` wake-ups;
//! - `kept_connections`: connections kept out of the pool between the statements of a burst;
//! - `nodelay`: `TCP_NODELAY` on the connections, which sqlx 0.9.0 leaves off;
//! - `roles`: least-privilege roles, and the one-line error of a denied statement;
//! - `row`: decoding rows.

mod admin;
mod capacity;
mod catalog;
mod circuits;
mod claim;
mod durability;
mod erase;
mod heartbeat;
mod kept_connections;
mod migrate;
mod nodelay;
mod notify;
mod ops;
mod park;
mod park_copy;
mod park_rows;
mod roles;
mod row;
mod schema;
mod session;
mod upgrade;

use std::sync::Arc;
use std::time::Duration;

use dlq_core::store::{
    ActionKind, BatchAction, BatchReport, BoxFuture, ClaimCap, ClaimRequest, Claimed, Operation, OperationState,
    PatchBatch, PatchRequest, SettleReport, Settlement, StoreId, StoreResult, WorkTicket,
};
use dlq_core::{
    DeadLetter, DlqId, ListFilter, admin::AttemptRecord, admin::AuditEntry, admin::FailureGroup,
    admin::RetrierHeartbeat, admin::StatsRow, store::AuditNote, store::DEFAULT_MAX_PAYLOAD_BYTES, store::NewDeadLetter,
    store::Parked, store::prelude::*,
};
use sqlx::PgPool;
use sqlx::postgres::{PgConnection, PgPoolOptions};

pub use capacity::Overflow;
pub use durability::DurabilityCheck;
pub use migrate::{
    HEARTBEAT_COUNTS_FOR, OlderReleaseRunning, RELEASE_FIRST_MIGRATION, SchemaStatus, Step, migrate, migrate_contract,
    schema_status,
};
pub use nodelay::{NodelayWatch, set_tcp_nodelay, watch_tcp_nodelay, with_tcp_nodelay};
pub use roles::{Roles, apply_roles, roles_sql};
pub use schema::validate_schema;
pub use session::SessionUrl;

/// The PostgreSQL schema, embedded from `migrations/postgres/`. The migrations are
/// schema-unqualified: [`migrate`] (and [`PgStore::from_pool`]) run them with `search_path`
/// set to the configured schema. Use it directly in tests:
/// `#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]` (the `public` schema). On a
/// schema that already exists, run [`migrate`] instead: besides the expand and contract steps of
/// a rolling upgrade, it knows the migrations whose comments were reworded after a release,
/// where sqlx's own `run` reports them as modified.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), sqlx::migrate::MigrateError> {
/// dlq_sqlx::postgres::MIGRATOR.run(&pool).await?; // into the connection's current schema
/// # Ok(()) }
/// ```
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// How a [`PgStore`] behaves: where its tables are, how parking batches and times out, and
/// how many rows it keeps.
///
/// ```
/// use dlq_sqlx::postgres::{Overflow, PgConfig};
/// use std::time::Duration;
///
/// let config = PgConfig::default()
///     .schema("dlq")
///     .park_timeout(Duration::from_secs(2))
///     .max_entries(1_000_000, Overflow::DropOldest);
/// assert_eq!(config.schema, "dlq");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PgConfig {
    /// The schema holding the tables (validated by [`validate_schema`]); `public` by default.
    pub schema: String,
    /// Whether [`PgStore::from_pool`] applies the embedded migrations ([`MIGRATOR`]).
    pub run_migrations: bool,
    /// The longest a park may take, queueing and admission included; past it the caller gets
    /// [`dlq_core::Error::Timeout`] (or `Full` while waiting for room), never a hang. It starts
    /// once the letters are prepared: measuring them, and cutting a payload over
    /// [`max_payload_bytes`](Self::max_payload_bytes), comes first and is not counted (the
    /// live path has already cut an event over the limit before it calls the store). A park
    /// that timed out while its batch was being committed may still be stored: the caller
    /// must treat it as not parked (not ack upstream), and a dedupe key (the event's source)
    /// makes the redelivery find the row that landed: its park returns that row's id, and the
    /// event has one row, not two.
    pub park_timeout: Duration,
    /// How long the group-commit writer waits for more concurrent parks before writing a
    /// batch. Parks that queued while the previous batch was written are always taken at once,
    /// which batches concurrent failures without delaying a lone one, so the default is zero.
    pub linger: Duration,
    /// The most rows written by one group-commit insert.
    pub max_batch: usize,
    /// About the most bytes one group-commit insert sends: a park that would take a batch
    /// past it goes in the next one, and one `park_many` larger than it goes alone, as several
    /// inserts of about this size in one transaction (all of its letters stored, or none).
    /// (`park_many_in` sends its letters as one insert, in the caller's transaction.) `None` (the
    /// default): 16 MiB for the pool of [`PgStore::connect_with`]; for a pool given to
    /// [`PgStore::from_pool`], chosen on the writer's first connection: 16,000 bytes when it is
    /// encrypted (TLS), 16 MiB otherwise. sqlx 0.9.0 sets no `TCP_NODELAY` on its sockets
    /// (`connect_with`'s pool sets it, [`with_tcp_nodelay`]), and then over TLS a statement
    /// longer than one TLS record (16 KiB) can wait about 40 ms for the server's delayed ACK
    /// (`docs/BENCHMARKS.md`, parking over TLS).
    pub max_batch_bytes: Option<usize>,
    /// Group-commit writers (each writes one batch at a time, on its own connection).
    pub writers: usize,
    /// Payloads larger than this are stored truncated, with the original's length and SHA-256
    /// ([`DEFAULT_MAX_PAYLOAD_BYTES`] by default). The store reports it as
    /// [`dlq_core::store::QueueStore::max_payload_bytes`], which the live path and a `Dispatcher` read to
    /// decide "too large" before they call the store.
    pub max_payload_bytes: usize,
    /// The most rows the table may hold; `None` for no limit.
    pub max_entries: Option<u64>,
    /// What a park does when `max_entries` is reached.
    pub overflow: Overflow,
    /// Dead tuples in `dlq_events` past which a running retrier vacuums the table itself
    /// (`VACUUM (ANALYZE)`, one retrier at a time, at most every 30 s, and not right after
    /// autovacuum did); `None` leaves it to autovacuum. Each finished row leaves a dead tuple
    /// and a dead entry in the claim's index: after a million completions with no vacuum a
    /// claim takes 3.5 times as long, and autovacuum may be off or lagging. Needs the role to
    /// own the table (else a warning, once, and no further tries). Default 50,000.
    pub vacuum_dead_tuples: Option<u64>,
    /// Whether the outcomes a retrier writes for its batches (succeeded, retry, dead, released;
    /// and the claim written with them) commit durably.
    /// `false` (the default): they commit with `synchronous_commit = off`, as a claim does.
    /// PostgreSQL then acknowledges the commit before its WAL reaches the disk, and a server
    /// crash can lose the last fraction of a second of outcomes (up to three times
    /// `wal_writer_delay`, 600 ms by default). Those rows are back to where they were before:
    /// claimed, and run again once their lease expires. That is what already happens when a
    /// retrier dies between running a batch and writing its outcomes (delivery is
    /// at-least-once), so no event is lost; a handler may run twice. Only outcomes are
    /// concerned: parks, operator actions and the store's other writes always commit durably,
    /// and any later durable commit flushes the outcomes before it. `true`: outcomes commit
    /// as the server's `synchronous_commit` says (durably by default), for handlers whose
    /// second run is costly; burst drains are then about a tenth slower (`docs/DESIGN.md`, the retrier against raw SQL).
    pub durable_outcomes: bool,
    /// Behind a connection pooler in transaction mode: a URL to the same database with a
    /// session of its own (see [`session_url`](Self::session_url)); `None` by default.
    pub session_url: Option<SessionUrl>,
    /// What the store does when the server would not keep a park answered `Parked` across a
    /// crash or a failover to its standby (see [`durability_check`](Self::durability_check)):
    /// [`DurabilityCheck::Warn`] by default.
    pub durability_check: DurabilityCheck,
}

impl Default for PgConfig {
    fn default() -> Self {
        Self {
            schema: "public".to_owned(),
            run_migrations: true,
            park_timeout: Duration::from_secs(5),
            linger: Duration::ZERO,
            max_batch: 256,
            max_batch_bytes: None,
            writers: 1,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            max_entries: None,
            overflow: Overflow::Reject,
            vacuum_dead_tuples: Some(50_000),
            durable_outcomes: false,
            session_url: None,
            durability_check: DurabilityCheck::Warn,
        }
    }
}

impl PgConfig {
    /// Sets the schema (validated when the store is built).
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Sets whether migrations run when the store is built.
    #[must_use]
    pub const fn run_migrations(mut self, run: bool) -> Self {
        self.run_migrations = run;
        self
    }

    /// Sets the park timeout.
    #[must_use]
    pub const fn park_timeout(mut self, timeout: Duration) -> Self {
        self.park_timeout = timeout;
        self
    }

    /// Sets the group-commit linger, the largest batch and the number of writers.
    #[must_use]
    pub const fn group_commit(mut self, linger: Duration, max_batch: usize, writers: usize) -> Self {
        self.linger = linger;
        self.max_batch = max_batch;
        self.writers = writers;
        self
    }

    /// Sets about the most bytes one group-commit insert sends, instead of the choice made
    /// from the connection (see the field of that name).
    ///
    /// ```
    /// // Large batches even over TLS (for example once sqlx sets TCP_NODELAY again):
    /// let config = dlq_sqlx::postgres::PgConfig::default().max_batch_bytes(16 << 20);
    /// assert_eq!(config.max_batch_bytes, Some(16 << 20));
    /// ```
    #[must_use]
    pub const fn max_batch_bytes(mut self, bytes: usize) -> Self {
        self.max_batch_bytes = Some(bytes);
        self
    }

    /// Sets the largest payload stored whole.
    #[must_use]
    pub const fn max_payload_bytes(mut self, max: usize) -> Self {
        self.max_payload_bytes = max;
        self
    }

    /// Sets the dead tuples past which a retrier vacuums the table (`None`: never, leave it to
    /// autovacuum).
    ///
    /// ```
    /// let config = dlq_sqlx::PgConfig::default().vacuum_dead_tuples(None);
    /// assert_eq!(config.vacuum_dead_tuples, None);
    /// ```
    #[must_use]
    pub const fn vacuum_dead_tuples(mut self, threshold: Option<u64>) -> Self {
        self.vacuum_dead_tuples = threshold;
        self
    }

    /// Sets whether a retrier's outcomes commit durably (see
    /// [`durable_outcomes`](Self::durable_outcomes)).
    ///
    /// ```
    /// let config = dlq_sqlx::PgConfig::default().durable_outcomes(true);
    /// assert!(config.durable_outcomes);
    /// ```
    #[must_use]
    pub const fn durable_outcomes(mut self, durable: bool) -> Self {
        self.durable_outcomes = durable;
        self
    }

    /// Limits the table to `max` rows, with `overflow` deciding what a park does at the limit.
    #[must_use]
    pub const fn max_entries(mut self, max: u64, overflow: Overflow) -> Self {
        self.max_entries = Some(max);
        self.overflow = overflow;
        self
    }
}

/// The dead-letter store on PostgreSQL.
///
/// Cheap to clone (clones share the pool, the group-commit writer and the listener). Parks
/// from many tasks are group-committed into multi-row inserts; [`park_in`](Self::park_in)
/// joins the caller's transaction instead. Claims use `FOR UPDATE SKIP LOCKED` with leases
/// and fencing tokens, so any number of retriers on any number of hosts can share the table;
/// timestamps come from the database clock only. Parks commit durably. Claims and the
/// outcomes of retries commit asynchronously: one lost in a server crash only means the row
/// is claimed and run again, as when a retrier dies mid-batch (see
/// [`PgConfig::durable_outcomes`]). Between two batches a retrier writes the outcomes of one
/// and claims the next in a single statement
/// ([`settle_and_claim`](dlq_core::store::QueueStore::settle_and_claim)). Parks and retries wake waiting
/// retriers with `NOTIFY`, at most one per 20 ms burst.
///
/// ```no_run
/// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, store::NewDeadLetter, Payload};
/// use dlq_sqlx::PgStore;
///
/// # async fn demo() -> Result<(), dlq_core::Error> {
/// let store = PgStore::connect("postgres://postgres@127.0.0.1/app").await?;
/// let failure = FailureInfo::new(ErrorClass::Transient, "io", "ledger down".into(), vec![], None);
/// let letter = NewDeadLetter::new("payment", Payload::Json(serde_json::json!({"id": 7})), failure)
///     .with_dedupe_key("payments/3/1204331");
/// let parked = store.park(letter).await?;
/// println!("parked as {}", parked.id);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    config: PgConfig,
    sql: Arc<schema::Sql>,
    writer: park::GroupCommit,
    wakeups: notify::Wakeups,
    debounce: Arc<notify::Debounce>,
    capacity: Option<capacity::Capacity>,
    vacuum: std::sync::Mutex<ops::VacuumState>,
    /// Where the next claim of each set of event types starts its walk of the due index.
    floors: claim::ClaimFloors,
    /// Connections kept between the statements of a burst (claims, outcomes, parks).
    kept_connections: Arc<kept_connections::KeptConnections>,
    /// The database's address and the schema: whose circuits these are.
    id: StoreId,
    /// Where `LISTEN`, the singleton lock, migrations and vacuums connect.
    session: session::Session,
    /// Whether parks survive a crash and a failover (`PgConfig::durability_check`).
    durability: durability::Durability,
    /// Whether the pool sets `TCP_NODELAY` on its connections (the pool of `connect_with`).
    sets_nodelay: bool,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

/// Whose circuits a store on `pool` and `schema` holds: the server's address, the database
/// and the schema (no user, no password). Two stores on the same ones share their circuits,
/// so this process's views of them too ([`dlq_core::store::QueueStore::store_id`]); another schema or
/// database has its own. The same database reached under two host names counts as two.
fn store_id(pool: &PgPool, schema: &str) -> StoreId {
    let options = pool.connect_options();
    let host = options.get_socket().map_or_else(|| options.get_host().to_owned(), |dir| dir.display().to_string());
    let database = options.get_database().unwrap_or_else(|| options.get_username());
    StoreId::named(format!("postgres://{host}:{}/{database}?schema={schema}", options.get_port()))
}

impl PgStore {
    /// Connects with the default configuration and applies the migrations.
    ///
    /// # Errors
    /// [`dlq_core::Error::Store`] when PostgreSQL cannot be reached or the migrations fail
    /// (the sqlx error is its source).
    pub async fn connect(url: &str) -> StoreResult<Self> {
        Self::connect_with(url, PgConfig::default()).await
    }

    /// Connects with `config`. The pool is lazy and its acquire timeout is the park timeout,
    /// so with `run_migrations` off no connection is made until the first call.
    ///
    /// # Errors
    /// [`dlq_core::Error::Config`] (key `schema`) for a schema name that is not a plain
    /// identifier; [`dlq_core::Error::Store`] for a bad URL, an unreachable database or a
    /// failed migration.
    pub async fn connect_with(url: &str, config: PgConfig) -> StoreResult<Self> {
        validate_schema(&config.schema)?;
        let options: sqlx::postgres::PgConnectOptions = url.parse().map_err(dlq_core::Error::store)?;
        let pool = PgPoolOptions::new().max_connections(10).acquire_timeout(config.park_timeout);
        let pool = nodelay::with_tcp_nodelay(pool, &options).connect_lazy_with(options);
        // With TCP_NODELAY a statement longer than a TLS record does not wait: no TLS limit.
        let max_batch_bytes = config.max_batch_bytes.unwrap_or(park::PLAIN_MAX_BATCH_BYTES);
        Self::build(pool, config.max_batch_bytes(max_batch_bytes), true).await
    }

    /// Builds a store on an existing pool; applies the migrations unless turned off.
    ///
    /// Must be called inside a tokio runtime: it starts the group-commit writer.
    ///
    /// # Connections between statements
    /// sqlx's pool tests a connection with a round trip each time it hands one out (unless
    /// `test_before_acquire` is off) and each time it takes one back. During a burst the store
    /// skips both: a retrier's claims and outcome writes, and the group-commit writer's
    /// inserts, keep their connection between one statement and the next instead of giving it
    /// back. That is about a fifth more drain throughput (`docs/DESIGN.md`, the retrier against raw SQL). A connection
    /// is kept only
    /// - while the pool has one to spare (a caller may be waiting otherwise);
    /// - for a second after its last statement succeeded;
    /// - for 30 seconds in all, so that the pool's `max_lifetime` still applies.
    ///
    /// After that it goes back to the pool. `Pool::close` gets kept connections back at once.
    /// So the pool's `before_acquire` and `after_release` hooks run once per burst rather than
    /// once per statement. A database restart within that second fails the next statement
    /// instead of being caught by the pool's test; the retrier counts it as a store error and
    /// the rows run again when their lease expires, as after any failed write.
    ///
    /// # `TCP_NODELAY`
    /// sqlx 0.9.0 opens connections without it. The pool of [`PgStore::connect_with`] sets it
    /// after each connection ([`with_tcp_nodelay`]); give a pool of your own the same hook, and
    /// then `PgConfig::max_batch_bytes(16 << 20)`: over TLS the default keeps a pool that may
    /// lack it to batches under one TLS record.
    ///
    /// # Errors
    /// [`dlq_core::Error::Config`] (key `schema`) for a schema name that is not a plain
    /// identifier; [`dlq_core::Error::Store`] when the migrations fail.
    pub async fn from_pool(pool: PgPool, config: PgConfig) -> StoreResult<Self> {
        Self::build(pool, config, false).await
    }

    /// [`from_pool`](Self::from_pool); `sets_nodelay`: whether the pool's connections have
    /// `TCP_NODELAY` (else a `COPY` sets it first).
    async fn build(pool: PgPool, config: PgConfig, sets_nodelay: bool) -> StoreResult<Self> {
        validate_schema(&config.schema)?;
        let sql = Arc::new(schema::Sql::new(&config.schema, config.durable_outcomes));
        let session = session::Session::new(config.session_url.as_ref())?;
        let durability = durability::Durability::new(config.durability_check);
        if config.run_migrations {
            session::migrate(&session, &pool, &config.schema, migrate::Scope::Expand).await?;
            // A connection is made anyway: check now, so that `Refuse` fails at start-up.
            if durability.pending() {
                let mut conn = nodelay::acquire(&pool).await.map_err(dlq_core::Error::store)?;
                durability.check(&mut conn).await?;
            }
        }
        let debounce = notify::Debounce::new(pool.clone(), sql.channel.clone());
        let kept_connections = kept_connections::KeptConnections::start(pool.clone());
        let writer =
            park::GroupCommit::start(Arc::clone(&kept_connections), Arc::clone(&sql), &config, Arc::clone(&debounce));
        let capacity = config.max_entries.map(|max| capacity::Capacity::new(max, config.overflow));
        let wakeups = notify::Wakeups::new(session.options(&pool), sql.channel.clone());
        let vacuum = std::sync::Mutex::default();
        let id = store_id(&pool, &config.schema);
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                config,
                sql,
                writer,
                wakeups,
                debounce,
                capacity,
                vacuum,
                floors: claim::ClaimFloors::default(),
                kept_connections,
                id,
                session,
                durability,
                sets_nodelay,
            }),
        })
    }

    /// `action` boxed, a refused privilege in its error said as one line that names the role,
    /// what it may not do and the role whose grants it needs (`roles::Denied`).
    fn guarded<'a, T: Send + 'a>(
        &'a self,
        action: &'static str,
        need: roles::Need,
        future: impl std::future::Future<Output = StoreResult<T>> + Send + 'a,
    ) -> BoxFuture<'a, StoreResult<T>> {
        Box::pin(async move {
            match future.await {
                Err(err) => Err(roles::deny(&self.inner.pool, err, action, need).await),
                ok => ok,
            }
        })
    }

    /// The pool the store uses.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The configuration the store was built with.
    pub fn config(&self) -> &PgConfig {
        &self.inner.config
    }

    /// The `NOTIFY` channel parks and redrives signal on (derived from the schema).
    pub fn channel(&self) -> &str {
        &self.inner.sql.channel
    }

    /// Parks `letter` inside the caller's transaction (or on the caller's connection): it is
    /// stored, and retriers are woken, only if and when the caller commits.
    ///
    /// Runs on the caller's connection, so the caller's `statement_timeout` bounds it rather
    /// than the park timeout. `max_entries` applies as for [`park`](dlq_core::store::QueueStore::park).
    ///
    /// # Errors
    /// The database error ([`dlq_core::Error::Store`]) or [`dlq_core::Error::Full`].
    ///
    /// ```no_run
    /// # use dlq_core::{ErrorClass, classify::FailureInfo, store::NewDeadLetter, Payload};
    /// # async fn demo(store: dlq_sqlx::PgStore) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = store.pool().begin().await?;
    /// sqlx::query("UPDATE accounts SET flagged = true WHERE id = $1").bind(7_i64).execute(&mut *tx).await?;
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "validation", "bad iban".into(), vec![], None);
    /// let letter = NewDeadLetter::new("payment", Payload::Json(serde_json::json!({"id": 7})), failure);
    /// store.park_in(&mut tx, letter).await?;
    /// tx.commit().await?; // the account flag and the dead letter commit together
    /// # Ok(()) }
    /// ```
    pub async fn park_in(&self, conn: &mut PgConnection, letter: NewDeadLetter) -> StoreResult<Parked> {
        let mut parked = self.park_many_in(conn, vec![letter]).await?;
        parked.pop().ok_or_else(|| dlq_core::Error::store(park::MissingRow))
    }

    /// Parks many letters inside the caller's transaction; ids come back in input order.
    ///
    /// # Errors
    /// As [`park_in`](Self::park_in).
    pub async fn park_many_in(&self, conn: &mut PgConnection, letters: Vec<NewDeadLetter>) -> StoreResult<Vec<Parked>> {
        if letters.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(capacity) = &self.inner.capacity {
            let deadline = tokio::time::Instant::now() + self.inner.config.park_timeout;
            capacity.admit(self, letters.len() as u64, deadline).await?;
        }
        let (prepared, bytes) = park::prepare(letters, self.inner.config.max_payload_bytes);
        // Always wake from inside the caller's transaction: the NOTIFY goes out with its commit.
        park::insert(&mut *conn, &self.inner.sql, &prepared, bytes, true).await.map_err(dlq_core::Error::store)
    }

    /// The fraction of `max_entries` in use, from the last count (refreshed by parks and by
    /// [`refresh_saturation`](Self::refresh_saturation)); `0.0` without a limit.
    pub fn saturation(&self) -> f64 {
        self.inner.capacity.as_ref().map_or(0.0, capacity::Capacity::saturation)
    }

    /// Counts the rows and updates the [`saturation`](Self::saturation) gauge.
    ///
    /// # Errors
    /// The database error.
    pub async fn refresh_saturation(&self) -> StoreResult<f64> {
        let entries = self.entries().await?;
        if let Some(capacity) = &self.inner.capacity {
            capacity.observe(entries);
        }
        Ok(self.saturation())
    }

    /// How many rows the table holds (an exact count).
    ///
    /// # Errors
    /// The database error.
    pub async fn entries(&self) -> StoreResult<u64> {
        let count: i64 = sqlx::query_scalar(self.inner.sql.count.sql())
            .fetch_one(&self.inner.pool)
            .await
            .map_err(dlq_core::Error::store)?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}

impl QueueStore for PgStore {
    fn park(&self, letter: NewDeadLetter) -> BoxFuture<'_, StoreResult<Parked>> {
        self.guarded("park", roles::Need::Service, async move {
            let mut parked = park::park(self, vec![letter]).await?;
            parked.pop().ok_or_else(|| dlq_core::Error::store(park::MissingRow))
        })
    }

    fn park_many(&self, letters: Vec<NewDeadLetter>) -> BoxFuture<'_, StoreResult<Vec<Parked>>> {
        self.guarded("park", roles::Need::Service, park::park(self, letters))
    }

    fn claim(&self, request: ClaimRequest) -> BoxFuture<'_, StoreResult<Vec<Claimed>>> {
        self.guarded("claim rows", roles::Need::Service, claim::claim(self, request))
    }

    fn settle(&self, outcomes: Vec<Settlement>) -> BoxFuture<'_, StoreResult<SettleReport>> {
        self.guarded("write a batch's outcomes", roles::Need::Service, claim::settle(self, outcomes))
    }

    /// Both in one statement: one round trip and one commit between two batches.
    fn settle_and_claim(
        &self,
        outcomes: Vec<Settlement>,
        next: ClaimRequest,
    ) -> BoxFuture<'_, StoreResult<(SettleReport, StoreResult<Vec<Claimed>>)>> {
        self.guarded("write a batch's outcomes", roles::Need::Service, claim::settle_and_claim(self, outcomes, next))
    }

    fn work_ticket(&self) -> WorkTicket {
        self.inner.wakeups.ticket()
    }

    fn wait_for_work(&self, after: WorkTicket, max: Duration) -> BoxFuture<'_, ()> {
        Box::pin(self.inner.wakeups.wait(after, max))
    }

    fn get(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Option<DeadLetter>>> {
        self.guarded("read a row", roles::Need::Read, admin::get(self, id))
    }

    fn max_payload_bytes(&self) -> usize {
        self.inner.config.max_payload_bytes
    }

    /// `dlq_circuits`, compared against the database clock.
    fn store_id(&self) -> StoreId {
        self.inner.id.clone()
    }

    fn capped_claims(&self) -> Option<&dyn CappedClaimStore> {
        Some(self)
    }
}

impl ReadStore for PgStore {
    fn list(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>> {
        self.guarded("list rows", roles::Need::Read, admin::list(self, filter))
    }

    /// From `dlq_tallies`, the counts the table's triggers keep (migration 0010): a few
    /// milliseconds at a million rows, where counting the rows took half a second.
    fn stats(&self) -> BoxFuture<'_, StoreResult<Vec<StatsRow>>> {
        self.guarded("read the stats", roles::Need::Read, admin::stats(self))
    }

    /// From `dlq_tallies` when the filter names only a status, an event type or a
    /// fingerprint; otherwise an aggregate over the matching rows.
    fn groups(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<FailureGroup>>> {
        self.guarded("read the failure groups", roles::Need::Read, admin::groups(self, filter))
    }

    fn created_histogram(
        &self,
        since: chrono::DateTime<chrono::Utc>,
        step: Duration,
        buckets: u32,
    ) -> BoxFuture<'_, StoreResult<Vec<dlq_core::store::HistogramBucket>>> {
        self.guarded("read the histogram", roles::Need::Read, admin::created_histogram(self, since, step, buckets))
    }

    fn attempts(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AttemptRecord>>> {
        self.guarded("read the attempts", roles::Need::Read, admin::attempts(self, id))
    }

    fn audit(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AuditEntry>>> {
        self.guarded("read the audit log", roles::Need::Read, admin::audit(self, id))
    }

    fn count(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<u64>> {
        self.guarded("count rows", roles::Need::Read, admin::count(self, filter))
    }

    fn audit_entry(&self, id: i64) -> BoxFuture<'_, StoreResult<Option<AuditEntry>>> {
        self.guarded("read the audit log", roles::Need::Read, ops::audit_one(self, id))
    }

    /// `max_entries` with an exact count when set, and the table's dead tuples and vacuum state.
    fn table_health(&self) -> BoxFuture<'_, StoreResult<Option<dlq_core::store::TableHealth>>> {
        self.guarded("read the table's health", roles::Need::Read, ops::table_health(self))
    }

    fn count_purgeable(&self, older_than: Duration) -> BoxFuture<'_, StoreResult<u64>> {
        self.guarded("count purgeable rows", roles::Need::Read, admin::count_purgeable(self, older_than))
    }

    fn capacity(&self) -> BoxFuture<'_, StoreResult<Option<dlq_core::observe::Capacity>>> {
        Box::pin(async move {
            let Some(capacity) = &self.inner.capacity else { return Ok(None) };
            let entries = self.entries().await?;
            capacity.observe(entries);
            Ok(Some(capacity.report(entries)))
        })
    }
}

impl OperatorStore for PgStore {
    fn patch(&self, request: PatchRequest) -> BoxFuture<'_, StoreResult<i64>> {
        self.guarded("patch a payload", roles::Need::Operator, admin::patch(self, request))
    }

    fn upgrade(&self, upgrade: dlq_core::store::VersionUpgrade) -> BoxFuture<'_, StoreResult<i64>> {
        self.guarded("upgrade a payload", roles::Need::Operator, upgrade::upgrade(self, upgrade))
    }

    /// One transaction per batch, the operation's marks read under the rows' locks.
    fn patch_rows(&self, batch: PatchBatch) -> BoxFuture<'_, StoreResult<BatchReport>> {
        self.guarded("patch rows", roles::Need::Operator, ops::patch_rows(self, batch))
    }

    /// One transaction per batch; a redrive wakes retriers with `NOTIFY` on commit.
    fn apply(&self, batch: BatchAction) -> BoxFuture<'_, StoreResult<BatchReport>> {
        self.guarded("discard or redrive rows", roles::Need::Operator, ops::apply(self, batch))
    }

    fn create_operation(
        &self,
        action: ActionKind,
        spec: serde_json::Value,
        note: AuditNote,
    ) -> BoxFuture<'_, StoreResult<Operation>> {
        self.guarded("start a bulk operation", roles::Need::Operator, ops::create(self, action, spec, note))
    }

    fn operation(&self, id: i64) -> BoxFuture<'_, StoreResult<Option<Operation>>> {
        self.guarded("read a bulk operation", roles::Need::Read, ops::get(self, id))
    }

    fn set_operation_state(&self, id: i64, state: OperationState) -> BoxFuture<'_, StoreResult<()>> {
        self.guarded("change a bulk operation", roles::Need::Operator, ops::set_state(self, id, state))
    }

    /// Folds the tallies behind [`stats`](Self::stats) and [`groups`](Self::groups), and
    /// vacuums `dlq_events` when its dead tuples pass [`PgConfig::vacuum_dead_tuples`]
    /// ([`Maintenance::Vacuumed`](dlq_core::store::Maintenance::Vacuumed)).
    fn maintain(&self) -> BoxFuture<'_, StoreResult<dlq_core::store::Maintenance>> {
        self.guarded("fold the tallies", roles::Need::Service, ops::maintain(self))
    }

    /// Also refreshes the saturation gauge when `max_entries` is set (retriers call this
    /// every `purge-interval`).
    fn purge(&self, older_than: Duration) -> BoxFuture<'_, StoreResult<u64>> {
        self.guarded("purge rows", roles::Need::Operator, async move {
            let purged = admin::purge(self, older_than).await?;
            if self.inner.capacity.is_some() {
                self.refresh_saturation().await?;
            }
            Ok(purged)
        })
    }
}

impl FleetStore for PgStore {
    fn publish_types(&self, types: Vec<dlq_core::catalog::EventTypeInfo>) -> BoxFuture<'_, StoreResult<()>> {
        self.guarded("publish the type catalog", roles::Need::Service, catalog::publish(self, types))
    }

    fn event_types(&self) -> BoxFuture<'_, StoreResult<Vec<dlq_core::catalog::EventTypeInfo>>> {
        self.guarded("read the type catalog", roles::Need::Read, catalog::all(self))
    }

    fn version_schemas(&self) -> BoxFuture<'_, StoreResult<Vec<dlq_core::catalog::VersionSchema>>> {
        self.guarded("read the type catalog", roles::Need::Read, catalog::schemas(self))
    }

    fn accept_schema(&self, schema: dlq_core::catalog::VersionSchema) -> BoxFuture<'_, StoreResult<()>> {
        self.guarded("accept a schema", roles::Need::Operator, catalog::accept(self, schema))
    }

    fn heartbeat(&self, beat: &RetrierHeartbeat, expire_after: Duration) -> BoxFuture<'_, StoreResult<()>> {
        let beat = beat.clone();
        self.guarded("write a heartbeat", roles::Need::Service, async move { self.beat(&beat, expire_after).await })
    }

    fn remove_heartbeat(&self, owner: &str) -> BoxFuture<'_, StoreResult<()>> {
        let owner = owner.to_owned();
        self.guarded("remove a heartbeat", roles::Need::Service, async move { self.forget(&owner).await })
    }

    fn retriers(&self) -> BoxFuture<'_, StoreResult<Vec<RetrierHeartbeat>>> {
        self.guarded("read the retriers", roles::Need::Read, self.heartbeats())
    }

    fn circuits(&self) -> BoxFuture<'_, StoreResult<dlq_core::store::Circuits>> {
        self.guarded("read the circuits", roles::Need::Read, circuits::all(self))
    }

    /// One statement: the compare-and-set write and its log line.
    fn write_circuit(
        &self,
        write: dlq_core::store::CircuitWrite,
    ) -> BoxFuture<'_, StoreResult<Option<dlq_core::store::Circuit>>> {
        self.guarded("write a circuit", roles::Need::Operator, circuits::write(self, write))
    }

    fn circuit_log(
        &self,
        event_type: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<dlq_core::store::CircuitLogEntry>>> {
        self.guarded("read the circuit log", roles::Need::Read, circuits::log(self, event_type, limit))
    }

    fn singleton(&self) -> Option<&dyn SingletonStore> {
        Some(self)
    }
}

impl PrivacyStore for PgStore {
    fn reveal(&self, id: DlqId, note: AuditNote) -> BoxFuture<'_, StoreResult<i64>> {
        self.guarded("reveal a row", roles::Need::Operator, ops::reveal(self, id, note))
    }

    fn mark_unreadable(&self, leases: Vec<dlq_core::store::Lease>) -> BoxFuture<'_, StoreResult<()>> {
        self.guarded("mark rows unreadable", roles::Need::Service, ops::mark_unreadable(self, leases))
    }

    fn count_unreadable(&self) -> BoxFuture<'_, StoreResult<u64>> {
        self.guarded("count unreadable rows", roles::Need::Read, ops::count_unreadable(self))
    }

    fn erase(&self, request: dlq_core::store::EraseRequest) -> BoxFuture<'_, StoreResult<dlq_core::store::Erasure>> {
        self.guarded("erase a subject", roles::Need::Operator, erase::erase(self, request))
    }

    fn erasures(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<dlq_core::store::Erasure>>> {
        self.guarded("read the erasures", roles::Need::Read, erase::erasures(self, limit))
    }

    fn subject_key_check(
        &self,
        check: dlq_core::store::KeyCheck,
    ) -> BoxFuture<'_, StoreResult<dlq_core::store::KeyCheck>> {
        self.guarded("check the subject key", roles::Need::Operator, erase::key_check(self, check))
    }

    fn count_subject(&self, subject: dlq_core::store::SubjectHash) -> BoxFuture<'_, StoreResult<u64>> {
        self.guarded("count a subject's rows", roles::Need::Read, erase::count_subject(self, subject))
    }
}

impl SingletonStore for PgStore {
    /// A PostgreSQL advisory lock named after the schema, on a connection of its own.
    fn try_lock_singleton(&self) -> BoxFuture<'_, StoreResult<Option<Box<dyn dlq_core::store::SingletonLock>>>> {
        Box::pin(self.lock_singleton())
    }
}

impl CappedClaimStore for PgStore {
    /// Counts, claims and records in one transaction under the type's advisory lock, so
    /// capped claims of one type take turns across every process (migration 0011).
    fn claim_capped(&self, request: ClaimRequest, cap: ClaimCap) -> BoxFuture<'_, StoreResult<Vec<Claimed>>> {
        self.guarded("claim rows", roles::Need::Service, claim::claim_capped(self, request, cap))
    }
}

/// A duration in whole microseconds for SQL (`now() + $n * INTERVAL '1 microsecond'`),
/// capped at 100 years so that no timestamp overflows.
pub(crate) fn micros(duration: Duration) -> i64 {
    const CAP: u128 = 100 * 366 * 24 * 3600 * 1_000_000;
    i64::try_from(duration.as_micros().min(CAP)).unwrap_or(i64::MAX)
}
