//! sqlxmq 0.6 (on sqlx 0.8), set up by its README: its migrations copied unchanged from the
//! sqlxmq 0.6.0 crate (MIT OR Apache-2.0) into `bench/migrations/sqlxmq/` and applied in
//! order, jobs declared with `#[job]`, a runner from `JobRegistry::runner`. Concurrency is
//! `set_concurrency(16, 100)`: the runner polls when fewer than 16 jobs run and then takes up
//! to 100 − running in one `mq_poll`, following the crate's note that a larger gap between the
//! two gives larger, more efficient batches. sqlxmq has no bulk spawn: 1,000
//! `JobBuilder::spawn` calls share one transaction. A job that is not completed runs again
//! once its retry backoff (the claim's lease, 1 s by default and kept as it is) has passed
//! since it was claimed. sqlxmq does not tell a job its attempt number, so the flaky handler
//! remembers first attempts in memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sqlx08::postgres::PgPoolOptions;
use sqlxmq::{CurrentJob, JobRegistry, NamedJob, job};

use crate::Scenario;
use crate::common::{Bench, CHUNK, POOL_SIZE, Result, until_done};

pub(crate) const LABEL: &str = "sqlxmq 0.6 (spawn, 1,000 a transaction; concurrency 16–100)";

/// Its migrations, as its README says: copied from the crate, applied in order.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/sqlxmq/20210316025847_setup.up.sql"),
    include_str!("../migrations/sqlxmq/20210921115907_clear.up.sql"),
    include_str!("../migrations/sqlxmq/20211013151757_fix_mq_latest_message.up.sql"),
    include_str!("../migrations/sqlxmq/20220208120856_fix_concurrent_poll.up.sql"),
    include_str!("../migrations/sqlxmq/20220713122907_fix-clear_all-keep-nil-message.up.sql"),
];

/// Every message but the nil one sqlxmq keeps for ordering is gone once completed.
const DONE: &str = "SELECT NOT EXISTS (SELECT 1 FROM mq_msgs WHERE id <> '00000000-0000-0000-0000-000000000000')";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Serialize, Deserialize)]
struct Args {
    n: usize,
}

/// Which jobs have had their first attempt, shared with the flaky handler as registry context.
#[derive(Clone)]
struct FirstAttempts(Arc<Vec<AtomicBool>>);

#[job(name = "bench")]
async fn noop(mut current: CurrentJob) -> std::result::Result<(), BoxError> {
    let args: Option<Args> = current.json()?;
    std::hint::black_box(args.map(|a| a.n));
    current.complete().await?;
    Ok(())
}

#[job(name = "bench_flaky")]
async fn flaky(mut current: CurrentJob, seen: FirstAttempts) -> std::result::Result<(), BoxError> {
    let n = current.json::<Args>()?.ok_or("no payload")?.n;
    if !seen.0[n].swap(true, Ordering::Relaxed) {
        return Err("downstream 503 (first attempt)".into());
    }
    current.complete().await?;
    Ok(())
}

pub(crate) async fn run(scenario: Scenario, bench: &Bench) -> Result<Option<Duration>> {
    let (url, harness) = bench.fresh_pool("sqlxmq").await?;
    for migration in MIGRATIONS {
        sqlx::raw_sql(*migration).execute(&harness).await?;
    }
    let pool = PgPoolOptions::new().max_connections(POOL_SIZE).connect(&url).await?;
    let job: &'static NamedJob = if scenario == Scenario::FailOnce { flaky } else { noop };
    let start = Instant::now();
    for chunk in (0..bench.rows).collect::<Vec<_>>().chunks(CHUNK) {
        let mut tx = pool.begin().await?;
        for &n in chunk {
            job.builder().set_json(&Args { n })?.spawn(&mut *tx).await?;
        }
        tx.commit().await?;
    }
    let took = if scenario == Scenario::Enqueue { Ok(start.elapsed()) } else { drain(&pool, &harness, bench).await };
    pool.close().await;
    harness.close().await;
    Ok(Some(took?))
}

async fn drain(pool: &sqlx08::PgPool, harness: &sqlx::PgPool, bench: &Bench) -> Result<Duration> {
    let mut registry = JobRegistry::new(&[noop, flaky]);
    registry.set_context(FirstAttempts(Arc::new((0..bench.rows).map(|_| AtomicBool::new(false)).collect())));
    // Failed first attempts are the scenario, not news.
    registry.set_error_handler(|_, _| {});
    let start = Instant::now();
    let mut runner = registry.runner(pool).set_concurrency(16, 100).run().await?;
    let took = until_done(harness, DONE, start).await;
    runner.stop().await;
    runner.wait_jobs_finish(Duration::from_secs(10)).await;
    took
}
