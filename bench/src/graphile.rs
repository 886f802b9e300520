//! graphile_worker 0.14, configured as its guide's "Throughput-oriented worker"
//! (`docs/src/configuration/worker-options.md`): concurrency 16, poll interval 500 ms,
//! completion and failure batching at 5 ms, a local queue of 100 jobs with a 60 s TTL.
//! Jobs are added with `add_raw_jobs` (one batch statement per call). Completed jobs are
//! deleted, so "done" is an empty jobs table. Its retry delay is `exp(min(attempts, 10))`
//! seconds: a job that failed once runs again no sooner than e¹ ≈ 2.7 s later.

use std::time::{Duration, Instant};

use graphile_worker::{
    IntoTaskHandlerResult, JobSpec, LocalQueueConfig, RawJobSpec, TaskHandler, WorkerContext, WorkerOptions,
    WorkerUtils,
};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::Scenario;
use crate::common::{Bench, CHUNK, Result, payload, until_done};

pub(crate) const LABEL: &str =
    "graphile_worker 0.14 (add_raw_jobs; concurrency 16, local queue 100, batched completion 5 ms)";

const SCHEMA: &str = "graphile_worker";

#[derive(Serialize, Deserialize)]
struct Noop {
    n: usize,
}

impl TaskHandler for Noop {
    const IDENTIFIER: &'static str = "bench";

    async fn run(self, _ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        std::hint::black_box(self.n);
        Ok::<(), String>(())
    }
}

#[derive(Serialize, Deserialize)]
struct Flaky {
    n: usize,
}

impl TaskHandler for Flaky {
    const IDENTIFIER: &'static str = "bench_flaky";

    async fn run(self, ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        std::hint::black_box(self.n);
        if *ctx.job().attempts() <= 1 {
            return Err("downstream 503 (first attempt)".to_owned());
        }
        Ok(())
    }
}

pub(crate) async fn run(scenario: Scenario, bench: &Bench) -> Result<Option<Duration>> {
    let (_, pool) = bench.fresh_pool("graphile").await?;
    let utils = WorkerUtils::new(pool.clone(), SCHEMA);
    utils.migrate().await?;
    let identifier = if scenario == Scenario::FailOnce { Flaky::IDENTIFIER } else { Noop::IDENTIFIER };
    let start = Instant::now();
    for chunk in (0..bench.rows).collect::<Vec<_>>().chunks(CHUNK) {
        let jobs: Vec<RawJobSpec> = chunk
            .iter()
            .map(|&n| RawJobSpec { identifier: identifier.to_owned(), payload: payload(n), spec: JobSpec::default() })
            .collect();
        utils.add_raw_jobs(&jobs).await?;
    }
    if scenario == Scenario::Enqueue {
        let took = start.elapsed();
        pool.close().await;
        return Ok(Some(took));
    }
    let took = drain(&pool).await;
    pool.close().await;
    Ok(Some(took?))
}

async fn drain(pool: &PgPool) -> Result<Duration> {
    let worker = WorkerOptions::default()
        .schema(SCHEMA)
        .concurrency(16)
        .poll_interval(Duration::from_millis(500))
        .complete_job_batch_delay(Duration::from_millis(5))
        .fail_job_batch_delay(Duration::from_millis(5))
        .local_queue(LocalQueueConfig::default().with_size(100).with_ttl(Duration::from_secs(60)))
        .define_job::<Noop>()
        .define_job::<Flaky>()
        .pg_pool(pool.clone())
        .init()
        .await?;
    let worker = std::sync::Arc::new(worker);
    let start = Instant::now();
    let running = tokio::spawn({
        let worker = std::sync::Arc::clone(&worker);
        async move { worker.run().await }
    });
    let done = format!("SELECT NOT EXISTS (SELECT 1 FROM {SCHEMA}._private_jobs)");
    let took = until_done(pool, &done, start).await;
    worker.request_shutdown();
    running.await??;
    took
}
