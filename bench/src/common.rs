//! What every peer's scenarios share: fresh databases, the completion poll, the clock.

use std::time::{Duration, Instant};

use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};

pub(crate) type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Jobs enqueued per bulk call.
pub(crate) const CHUNK: usize = 1000;

/// How often the harness looks whether every job is done.
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// The longest a scenario may take before the run fails.
const TIMEOUT: Duration = Duration::from_secs(600);

/// Connections in each scenario's pool (the peers share it with the harness's poll).
pub(crate) const POOL_SIZE: u32 = 20;

pub(crate) struct Bench {
    admin_url: String,
    pub(crate) rows: usize,
}

impl Bench {
    pub(crate) fn new(rows: usize) -> Result<Self> {
        let admin_url =
            std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
        if admin_url.rsplit_once('/').is_none() {
            return Err("DATABASE_URL has no database name".into());
        }
        Ok(Self { admin_url, rows })
    }

    /// Drops and creates `dlq_bench_<name>`; returns its URL. No statistics, nothing vacuumed.
    pub(crate) async fn fresh_database(&self, name: &str) -> Result<String> {
        let db = format!("dlq_bench_{name}");
        let mut admin = PgConnection::connect(&self.admin_url).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")))
            .execute(&mut admin)
            .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}"))).execute(&mut admin).await?;
        admin.close().await?;
        // The same server and options (`?sslmode=...`), another database.
        let (path, query) =
            self.admin_url.split_once('?').map_or((self.admin_url.as_str(), None), |(p, q)| (p, Some(q)));
        let base = path.rsplit_once('/').map_or("", |(base, _)| base);
        Ok(match query {
            Some(query) => format!("{base}/{db}?{query}"),
            None => format!("{base}/{db}"),
        })
    }

    /// A pool on a fresh `dlq_bench_<name>`.
    pub(crate) async fn fresh_pool(&self, name: &str) -> Result<(String, PgPool)> {
        let url = self.fresh_database(name).await?;
        let pool = PgPoolOptions::new().max_connections(POOL_SIZE).connect(&url).await?;
        Ok((url, pool))
    }
}

/// Waits until `done` (a query returning one boolean) says true, looking every 20 ms;
/// returns the time since `start`.
pub(crate) async fn until_done(pool: &PgPool, done: &str, start: Instant) -> Result<Duration> {
    until(start, done, || async { Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(done.to_owned())).fetch_one(pool).await?) })
        .await
}

/// Waits until `finished` says true, looking every 20 ms; returns the time since `start`.
/// `what` names the check in the timeout error.
pub(crate) async fn until<F, Fut>(start: Instant, what: &str, mut finished: F) -> Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    loop {
        if finished().await? {
            return Ok(start.elapsed());
        }
        if start.elapsed() > TIMEOUT {
            return Err(format!("not done after {TIMEOUT:?}: {what}").into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The payload of job `n`.
pub(crate) fn payload(n: usize) -> serde_json::Value {
    serde_json::json!({ "n": n })
}
