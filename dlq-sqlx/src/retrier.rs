//! `PgRetrier` and `run_retrier`: dlq-core's retrier engine on a [`PgStore`], with the
//! schedule from [`RetryConfig`], singleton mode, heartbeats and retention.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dlq_core::{Context, Registry, Retrier, RetrierConfig, RetrierStats, Schedule, Shutdown};
use sqlx::postgres::{PgAdvisoryLock, PgConnection};
use sqlx::{Connection, Either, PgPool};

use crate::pg::RetrierHeartbeat;
use crate::{Error, PgConfig, PgStore, RetryConfig};

/// Runs the retrier on `pool` with `config` and every registered handler, until the process
/// ends (or a signal: use [`PgRetrier`] with [`shutdown`](PgRetrier::shutdown) for that).
///
/// # Errors
/// As [`PgRetrier::run`].
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), dlq_sqlx::Error> {
/// let config = dlq_sqlx::RetryConfig::from_env()?;
/// dlq_sqlx::run_retrier(pool, config).await?;
/// # Ok(()) }
/// ```
pub async fn run_retrier(pool: PgPool, config: RetryConfig) -> Result<RetrierStats, Error> {
    PgRetrier::new(pool, config).run().await
}

/// A retrier on PostgreSQL: claims due dead letters with `SKIP LOCKED`, runs their handlers,
/// writes the outcomes fenced by lease tokens (see [`dlq_core::Retrier`]), and wakes on
/// `LISTEN/NOTIFY` or every `poll_interval` — or, with `fixed_rate`, claims one batch per
/// period.
///
/// Around the engine it keeps a heartbeat row in `dlq_retriers` (refreshed every
/// `heartbeat`, removed on shutdown), purges finished rows past the store's retention every
/// `purge_interval`, and, in `singleton` mode, runs only while it holds a PostgreSQL advisory
/// lock on a dedicated connection: other instances wait as standbys and take over when the
/// holder stops or its connection dies.
///
/// Clones share the engine, so [`stats`](Self::stats) on one clone reports a run on another.
///
/// ```no_run
/// use dlq_core::Shutdown;
/// use dlq_sqlx::{PgRetrier, RetryConfig};
///
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), dlq_sqlx::Error> {
/// let shutdown = Shutdown::new();
/// let retrier = PgRetrier::new(pool, RetryConfig::from_json_file("dlq.json")?).shutdown(shutdown.clone());
/// let running = tokio::spawn({
///     let retrier = retrier.clone();
///     async move { retrier.run().await }
/// });
/// // ... later
/// shutdown.trigger();
/// running.await.expect("retrier task")?;
/// println!("{:?}", retrier.stats());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PgRetrier {
    source: Source,
    config: RetryConfig,
    registry: Option<Registry>,
    context: Context,
    shutdown: Shutdown,
    engine: Arc<OnceLock<Retrier<PgStore>>>,
}

#[derive(Clone)]
enum Source {
    Pool(PgPool, PgConfig),
    Store(PgStore),
}

impl std::fmt::Debug for PgRetrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgRetrier").field("config", &self.config).finish_non_exhaustive()
    }
}

impl PgRetrier {
    /// A retrier on `pool` (the store is built with [`PgConfig::default`] unless
    /// [`store_config`](Self::store_config) says otherwise).
    pub fn new(pool: PgPool, config: RetryConfig) -> Self {
        Self::from_source(Source::Pool(pool, PgConfig::default()), config)
    }

    /// A retrier on an existing store (sharing its pool, writer and listener).
    pub fn with_store(store: PgStore, config: RetryConfig) -> Self {
        Self::from_source(Source::Store(store), config)
    }

    fn from_source(source: Source, config: RetryConfig) -> Self {
        Self {
            source,
            config,
            registry: None,
            context: Context::new(),
            shutdown: Shutdown::new(),
            engine: Arc::new(OnceLock::new()),
        }
    }

    /// Sets the store configuration (schema, retention, ...) used with [`new`](Self::new).
    #[must_use]
    pub fn store_config(mut self, store_config: PgConfig) -> Self {
        if let Source::Pool(_, config) = &mut self.source {
            *config = store_config;
        }
        self
    }

    /// Runs only these handlers (default: every registered handler, [`dlq_core::registry`]).
    #[must_use]
    pub fn handlers(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Sets the values for `State<T>` handler arguments.
    #[must_use]
    pub fn context(mut self, context: Context) -> Self {
        self.context = context;
        self
    }

    /// Sets the shutdown signal: on trigger the retrier stops claiming, finishes or releases
    /// in-flight rows within `shutdown_grace`, removes its heartbeat, and [`run`](Self::run) returns.
    #[must_use]
    pub fn shutdown(mut self, shutdown: Shutdown) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// What the retrier did so far (zero before [`run`](Self::run)).
    pub fn stats(&self) -> RetrierStats {
        self.engine.get().map(Retrier::stats).unwrap_or_default()
    }

    /// Runs until the shutdown signal. Returns at once when `enabled` is `false`.
    ///
    /// # Errors
    /// [`Error::Config`] for unusable settings, the store's construction errors (schema,
    /// connection, migrations), and [`Error::Core`] for a registry with duplicate event types.
    /// Failures while running (database outages, handler panics) are logged, counted in the
    /// stats and retried; they never end the run.
    pub async fn run(&self) -> Result<RetrierStats, Error> {
        check(&self.config)?;
        if !self.config.enabled {
            tracing::info!("dead-letter retrier disabled by configuration");
            return Ok(self.stats());
        }
        let store = match &self.source {
            Source::Store(store) => store.clone(),
            Source::Pool(pool, config) => PgStore::from_pool(pool.clone(), config.clone()).await?,
        };
        let registry = match &self.registry {
            Some(registry) => registry.clone(),
            None => dlq_core::registry()?.clone(),
        };
        let owner = owner(&self.config);
        let engine = self.engine(&store, registry.clone(), &owner).clone();
        let beat = heartbeat_row(&owner, &registry, self.config.singleton);
        if let Err(error) = store.beat(&beat).await {
            tracing::warn!(%error, "could not register the retrier's heartbeat");
        }
        let background = Shutdown::new();
        let tasks = [
            tokio::spawn(keep_beating(store.clone(), beat, self.config.heartbeat, background.clone())),
            tokio::spawn(maintain(store.clone(), self.config.purge_interval, background.clone())),
        ];
        if self.config.singleton {
            self.run_singleton(&engine, &store, &owner).await;
        } else {
            engine.clone().shutdown(self.shutdown.clone()).run().await;
        }
        background.trigger();
        for task in tasks {
            let _ = task.await;
        }
        if let Err(error) = store.forget(&owner).await {
            tracing::warn!(%error, "could not remove the retrier's heartbeat");
        }
        Ok(engine.stats())
    }

    fn engine(&self, store: &PgStore, registry: Registry, owner: &str) -> &Retrier<PgStore> {
        self.engine.get_or_init(|| {
            Retrier::with_registry(Arc::new(store.clone()), registry)
                .config(engine_config(&self.config, owner))
                .context(self.context.clone())
        })
    }

    /// Alternates between standby (polling for the lock) and leadership terms until shutdown.
    async fn run_singleton(&self, engine: &Retrier<PgStore>, store: &PgStore, owner: &str) {
        let lock = PgAdvisoryLock::new(format!("dlq-retrier:{}", store.config().schema));
        let every = self.config.heartbeat;
        let mut conn: Option<PgConnection> = None;
        while !self.shutdown.is_triggered() {
            let current = match conn.take() {
                Some(c) => c,
                None => match PgConnection::connect_with(&store.pool().connect_options()).await {
                    Ok(c) => c,
                    Err(error) => {
                        tracing::warn!(%error, "singleton retrier cannot connect; retrying");
                        self.pause(every).await;
                        continue;
                    }
                },
            };
            match lock.try_acquire(current).await {
                Ok(Either::Left(guard)) => {
                    tracing::info!(owner, "singleton retrier elected");
                    self.lead(engine, guard, every).await;
                }
                Ok(Either::Right(standby)) => {
                    conn = Some(standby);
                    self.pause(every).await;
                }
                Err(error) => {
                    tracing::warn!(%error, "singleton lock attempt failed; retrying");
                    self.pause(every).await;
                }
            }
        }
    }

    /// One leadership term: runs the engine while the lock connection answers.
    async fn lead(
        &self,
        engine: &Retrier<PgStore>,
        mut guard: sqlx::postgres::PgAdvisoryLockGuard<PgConnection>,
        every: Duration,
    ) {
        let term = Shutdown::new();
        let watchdog = async {
            loop {
                tokio::select! {
                    () = self.shutdown.wait() => break,
                    () = tokio::time::sleep(every) => {}
                }
                let ping = tokio::time::timeout(
                    every,
                    sqlx::query("SELECT 1").execute(AsMut::<PgConnection>::as_mut(&mut guard)),
                )
                .await;
                if !matches!(ping, Ok(Ok(_))) {
                    tracing::warn!("singleton lock connection lost; stepping down");
                    break;
                }
            }
            term.trigger();
        };
        let engine = engine.clone().shutdown(term.clone());
        tokio::join!(engine.run(), watchdog);
        match guard.release_now().await {
            Ok(conn) => drop(conn.close().await),
            Err(error) => tracing::debug!(%error, "lock connection closed; the server released the lock"),
        }
    }

    async fn pause(&self, every: Duration) {
        tokio::select! {
            () = self.shutdown.wait() => {}
            () = tokio::time::sleep(every) => {}
        }
    }
}

fn check(config: &RetryConfig) -> Result<(), Error> {
    let bad = |key: &str, value: String| Error::Config { key: key.into(), value, reason: "must be above zero".into() };
    let durations = [
        ("poll-interval", config.poll_interval),
        ("lease", config.lease),
        ("heartbeat", config.heartbeat),
        ("purge-interval", config.purge_interval),
        ("fixed-rate", config.fixed_rate.unwrap_or(Duration::MAX)),
    ];
    if let Some((key, d)) = durations.into_iter().find(|(_, d)| d.is_zero()) {
        return Err(bad(key, format!("{d:?}")));
    }
    let counts = [("batch-size", config.batch_size), ("concurrency", config.concurrency), ("workers", config.workers)];
    match counts.into_iter().find(|(_, n)| *n == 0) {
        Some((key, n)) => Err(bad(key, n.to_string())),
        None => Ok(()),
    }
}

#[allow(
    clippy::field_reassign_with_default,
    reason = "`RetrierConfig` is non_exhaustive: no struct literal outside dlq-core"
)]
fn engine_config(config: &RetryConfig, owner: &str) -> RetrierConfig {
    let mut engine = RetrierConfig::default();
    engine.batch_size = config.batch_size;
    engine.concurrency = config.concurrency;
    engine.workers = config.workers;
    engine.lease = config.lease;
    engine.max_retries = config.max_retries;
    engine.shutdown_grace = config.shutdown_grace;
    engine.owner = owner.to_owned();
    engine.schedule = match config.fixed_rate {
        Some(every) => Schedule::FixedRate { every },
        None => Schedule::Continuous { poll_interval: config.poll_interval },
    };
    engine
}

fn host() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The configured owner, or `host:pid:<random>` (unique even for two retriers in one process).
fn owner(config: &RetryConfig) -> String {
    if !config.owner.is_empty() {
        return config.owner.clone();
    }
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{}:{}:{}", host(), std::process::id(), &suffix[..8])
}

fn heartbeat_row(owner: &str, registry: &Registry, singleton: bool) -> RetrierHeartbeat {
    RetrierHeartbeat {
        owner: owner.to_owned(),
        host: host(),
        pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
        event_types: registry.event_types().map(str::to_owned).collect(),
        singleton,
        started_at: chrono::Utc::now(),
        last_seen: chrono::Utc::now(),
    }
}

async fn keep_beating(store: PgStore, beat: RetrierHeartbeat, every: Duration, stop: Shutdown) {
    loop {
        tokio::select! {
            () = stop.wait() => return,
            () = tokio::time::sleep(every) => {}
        }
        if let Err(error) = store.beat(&beat).await {
            tracing::warn!(%error, "could not refresh the retrier's heartbeat");
        }
    }
}

/// Retention and the saturation gauge, every `every`.
async fn maintain(store: PgStore, every: Duration, stop: Shutdown) {
    loop {
        match store.apply_retention().await {
            Ok(0) => {}
            Ok(purged) => tracing::info!(purged, "purged finished dead letters past retention"),
            Err(error) => tracing::warn!(%error, "retention purge failed"),
        }
        if store.config().max_entries.is_some() {
            let _ = store.refresh_saturation().await;
        }
        tokio::select! {
            () = stop.wait() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_settings_are_named() {
        let config = RetryConfig { batch_size: 0, ..RetryConfig::default() };
        let err = check(&config).unwrap_err();
        assert!(err.to_string().contains("batch-size"), "{err}");
        let config = RetryConfig { fixed_rate: Some(Duration::ZERO), ..RetryConfig::default() };
        assert!(check(&config).unwrap_err().to_string().contains("fixed-rate"));
        assert!(check(&RetryConfig::default()).is_ok());
    }

    #[test]
    fn engine_config_follows_the_schedule() {
        let config = RetryConfig {
            fixed_rate: Some(Duration::from_secs(21_600)),
            max_retries: Some(240),
            ..RetryConfig::default()
        };
        let engine = engine_config(&config, "me");
        assert_eq!(engine.schedule, Schedule::FixedRate { every: Duration::from_secs(21_600) });
        assert_eq!((engine.max_retries, engine.owner.as_str()), (Some(240), "me"));
        assert!(owner(&RetryConfig::default()).contains(&std::process::id().to_string()));
    }
}
