//! One retrier process of the multi-process test (`tests/tests/multiprocess_pg.rs`).
//!
//! `dlq-mp-worker <database-url> <lease-ms>` runs `dlq_core::Retrier` on a `PgStore` with one handler,
//! `mp-job`, which records every execution in the side table `mp_runs` before doing its work,
//! until SIGTERM; then it prints its stats as one JSON line and exits.
//!
//! `dlq-mp-worker <database-url> <lease-ms> limited` runs `mp-limited` instead, a type with
//! `max-concurrent = 4` and `max-rate = 40`, whose handler records when it started and ended
//! (the database's clock, shared by every process) in `mp_limited`.

use std::time::Duration;

use std::sync::Arc;

use dlq_core::{Classify, Context, Retrier, RetrierConfig, State, dead_letter, handlers, handlers::Attempt};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Job {
    n: u64,
    fail_first: bool,
    poison: bool,
}

#[derive(Debug, thiserror::Error, Classify)]
enum JobError {
    #[error("downstream flaked on job {0}")]
    #[dlq(transient)]
    Flaky(u64),
    #[error("job {0} is poison")]
    #[dlq(permanent)]
    Poison(u64),
    #[error("side table write failed: {0}")]
    #[dlq(transient)]
    Record(#[from] sqlx::Error),
}

#[dead_letter(event_type = "mp-job", max_retries = 5, backoff = "none")]
async fn run_job(job: Job, State(pool): State<PgPool>, attempt: Attempt) -> Result<(), JobError> {
    sqlx::query("INSERT INTO mp_runs (dlq_id, pid, retry_count) VALUES ($1, $2, $3)")
        .bind(attempt.id)
        .bind(i64::from(std::process::id()))
        .bind(i64::from(attempt.retry_count))
        .execute(&pool)
        .await?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    if job.poison {
        return Err(JobError::Poison(job.n));
    }
    if job.fail_first && attempt.retry_count == 0 {
        return Err(JobError::Flaky(job.n));
    }
    Ok(())
}

#[dead_letter(event_type = "mp-limited", max_retries = 3, backoff = "none")]
async fn run_limited(_n: u64, State(pool): State<PgPool>, attempt: Attempt) -> Result<(), JobError> {
    sqlx::query("INSERT INTO mp_limited (dlq_id, started_at) VALUES ($1, clock_timestamp())")
        .bind(attempt.id)
        .execute(&pool)
        .await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    sqlx::query("UPDATE mp_limited SET ended_at = clock_timestamp() WHERE dlq_id = $1")
        .bind(attempt.id)
        .execute(&pool)
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args.next().ok_or("usage: dlq-mp-worker <database-url> <lease-ms>")?;
    let lease_ms: u64 = args.next().ok_or("missing <lease-ms>")?.parse()?;
    let limited = args.next().as_deref() == Some("limited");
    let pool = PgPool::connect(&url).await?;

    let mut config = RetrierConfig::default();
    config.lease = Duration::from_millis(lease_ms);
    config.batch_size = 50;
    config.concurrency = 8;
    config.workers = 2;
    config.poll_interval = Duration::from_millis(200);
    config.shutdown_grace = Duration::from_secs(5);
    config.owner = format!("mp-worker-{}", std::process::id());

    if limited {
        let limits = RetrierConfig::from_json_str(
            r#"{"breakers": {"mp-limited": {"enabled": false, "max-concurrent": 4, "max-rate": 40}}}"#,
        )?;
        config.breakers = limits.breakers;
    }
    let registry = if limited { handlers![run_limited]? } else { handlers![run_job]? };

    let store = dlq_sqlx::PgStore::from_pool(pool.clone(), dlq_sqlx::PgConfig::default()).await?;
    let retrier = Retrier::new(Arc::new(store), registry).config(config).context(Context::new().with(pool));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    println!("ready");
    let stats = retrier
        .run_until(async move {
            term.recv().await;
        })
        .await?;
    println!(
        "{{\"claimed\":{},\"succeeded\":{},\"retried\":{},\"dead\":{},\"fenced\":{},\"released\":{}}}",
        stats.claimed, stats.succeeded, stats.retried, stats.dead, stats.fenced, stats.released
    );
    Ok(())
}
