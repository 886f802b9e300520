//! apalis 1.0 with apalis-postgres 1.0, configured as its `examples/basic.rs`: batch size
//! 100, `lock_tasks(false)`, pubsub wake-ups, handlers parallelized on `tokio::spawn`; jobs
//! pushed with `push_bulk`. A failure is retried by the in-memory `RetryPolicy` layer
//! (`retries(1)`, no backoff), without a trip through the database.

use std::time::{Duration, Instant};

use apalis::layers::retry::RetryPolicy;
use apalis::prelude::*;
use apalis_postgres::{Config, PostgresStorage};
use sqlx::PgPool;

use crate::Scenario;
use crate::common::{Bench, CHUNK, Result, until_done};

pub(crate) const LABEL: &str = "apalis 1.0 (push_bulk; batch 100, pubsub, tokio::spawn, in-memory retry)";

const DONE: &str = "SELECT NOT EXISTS (SELECT 1 FROM apalis.jobs WHERE status <> 'Done')";

async fn noop(n: usize) -> std::result::Result<(), BoxDynError> {
    std::hint::black_box(n);
    Ok(())
}

async fn flaky(n: usize, attempt: Attempt) -> std::result::Result<(), BoxDynError> {
    std::hint::black_box(n);
    if attempt.current() == 0 {
        return Err("downstream 503 (first attempt)".into());
    }
    Ok(())
}

fn storage(pool: &PgPool) -> PostgresStorage<usize> {
    let config = Config::default().queue("bench").batch_size(100).lock_tasks(false);
    PostgresStorage::new(pool).with_config(config)
}

pub(crate) async fn run(scenario: Scenario, bench: &Bench) -> Result<Option<Duration>> {
    let (_, pool) = bench.fresh_pool("apalis").await?;
    PostgresStorage::<()>::setup(&pool).await?;
    let mut sink = storage(&pool);
    let start = Instant::now();
    for chunk in (0..bench.rows).collect::<Vec<_>>().chunks(CHUNK) {
        sink.push_bulk(chunk.to_vec()).await.map_err(|e| format!("push_bulk: {e}"))?;
    }
    if scenario == Scenario::Enqueue {
        let took = start.elapsed();
        pool.close().await;
        return Ok(Some(took));
    }
    let backend = storage(&pool).with_pubsub();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        let _ = stop_rx.await;
        Ok::<(), std::io::Error>(())
    };
    let start = Instant::now();
    let running = if scenario == Scenario::FailOnce {
        let worker = WorkerBuilder::new("bench-worker")
            .backend(backend)
            .retry(RetryPolicy::retries(1))
            .parallelize(tokio::spawn)
            .build(flaky);
        tokio::spawn(worker.run_until(signal))
    } else {
        let worker = WorkerBuilder::new("bench-worker").backend(backend).parallelize(tokio::spawn).build(noop);
        tokio::spawn(worker.run_until(signal))
    };
    let took = until_done(&pool, DONE, start).await;
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), running).await;
    pool.close().await;
    Ok(Some(took?))
}
