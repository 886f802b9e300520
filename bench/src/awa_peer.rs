//! awa 0.6.9 (on sqlx 0.8) on its default engine, queue storage: `migrations::run`, then
//! `QueueStorage::install` with the default `QueueStorageConfig`, the one the worker client
//! uses by default. Jobs are enqueued with `QueueStorage::enqueue_params_copy`, which its docs
//! name for high-volume producers. The worker is configured as awa's own throughput benchmark
//! (`tests/benchmark_test.rs`, `test_throughput_rust_workers_queue_storage`): one queue with
//! `max_workers` 100 and a 50 ms poll interval, other settings at their defaults. A first
//! attempt returns `JobResult::RetryAfter(Duration::ZERO)`, its caller-chosen, shortest retry
//! delay. "Done" is its exact `queue_counts` showing every job terminal; that admin query
//! takes 0.5–2.6 s on 2,000 jobs here, so it runs only once the handlers have completed every
//! job (an in-memory count), and the clock stops at the start of the first call that shows
//! them all terminal (its snapshot's instant).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use awa::model::insert::params_with;
use awa::{Client, InsertOpts, JobArgs, JobResult, QueueConfig, QueueStorage, QueueStorageConfig};
use serde::{Deserialize, Serialize};
use sqlx08::postgres::PgPoolOptions;

use crate::Scenario;
use crate::common::{Bench, CHUNK, POOL_SIZE, Result, until};

/// Counts a job as handled to completion.
fn completed(handled: &AtomicUsize) -> JobResult {
    handled.fetch_add(1, Ordering::Relaxed);
    JobResult::Completed
}

pub(crate) const LABEL: &str = "awa 0.6.9 (enqueue_params_copy; queue storage, max_workers 100, poll 50 ms)";

const QUEUE: &str = "bench";

#[derive(Serialize, Deserialize, JobArgs)]
#[awa(kind = "bench")]
struct Noop {
    n: usize,
}

#[derive(Serialize, Deserialize, JobArgs)]
#[awa(kind = "bench_flaky")]
struct Flaky {
    n: usize,
}

pub(crate) async fn run(scenario: Scenario, bench: &Bench) -> Result<Option<Duration>> {
    let url = bench.fresh_database("awa").await?;
    let pool = PgPoolOptions::new().max_connections(POOL_SIZE).connect(&url).await?;
    awa::migrations::run(&pool).await?;
    let store = QueueStorage::new(QueueStorageConfig::default())?;
    store.install(&pool).await?;
    let opts = || InsertOpts { queue: QUEUE.into(), ..InsertOpts::default() };
    let start = Instant::now();
    for chunk in (0..bench.rows).collect::<Vec<_>>().chunks(CHUNK) {
        let params = chunk
            .iter()
            .map(|&n| {
                if scenario == Scenario::FailOnce {
                    params_with(&Flaky { n }, opts())
                } else {
                    params_with(&Noop { n }, opts())
                }
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        store.enqueue_params_copy(&pool, &params).await?;
    }
    let took = if scenario == Scenario::Enqueue { Ok(start.elapsed()) } else { drain(&pool, &store, bench.rows).await };
    pool.close().await;
    Ok(Some(took?))
}

async fn drain(pool: &sqlx08::PgPool, store: &QueueStorage, rows: usize) -> Result<Duration> {
    let handled = Arc::new(AtomicUsize::new(0));
    let config = QueueConfig { max_workers: 100, poll_interval: Duration::from_millis(50), ..QueueConfig::default() };
    let client = Client::builder(pool.clone())
        .queue(QUEUE, config)
        .register::<Noop, _, _>({
            let handled = Arc::clone(&handled);
            move |args, _ctx| {
                std::hint::black_box(args.n);
                let result = completed(&handled);
                async { Ok(result) }
            }
        })
        .register::<Flaky, _, _>({
            let handled = Arc::clone(&handled);
            move |args, ctx| {
                std::hint::black_box(args.n);
                let result =
                    if ctx.job.attempt <= 1 { JobResult::RetryAfter(Duration::ZERO) } else { completed(&handled) };
                async { Ok(result) }
            }
        })
        .build()?;
    let start = Instant::now();
    client.start().await?;
    until(start, "awa handlers: every job completed", || async { Ok(handled.load(Ordering::Relaxed) >= rows) }).await?;
    let terminal = i64::try_from(rows)?;
    let mut done_at = start.elapsed();
    let took = until(start, "awa queue_counts: every job terminal", || {
        done_at = start.elapsed();
        async { Ok(store.queue_counts(pool, QUEUE).await?.terminal >= terminal) }
    })
    .await
    .map(|_| done_at);
    client.shutdown(Duration::from_secs(10)).await;
    took
}
