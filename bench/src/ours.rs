//! dlq as a user gets it: `PgStore` with its defaults, `park_many` to park, and a
//! `Retrier` with the default `RetrierConfig` over `#[dead_letter]` handlers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlq_core::{
    CancellationToken, Retrier, RetrierConfig, dead_letter, handlers, handlers::Attempt, store::prelude::*,
};
use dlq_sqlx::{PgConfig, PgStore};

use crate::Scenario;
use crate::common::{Bench, CHUNK, Result, payload, until_done};

#[dead_letter(event_type = "bench", backoff = "none")]
async fn noop(n: serde_json::Value) -> std::result::Result<(), std::io::Error> {
    std::hint::black_box(n);
    Ok(())
}

#[dead_letter(event_type = "bench-flaky", backoff = "none", max_retries = 5)]
async fn flaky(n: serde_json::Value, attempt: Attempt) -> std::result::Result<(), std::io::Error> {
    std::hint::black_box(n);
    if attempt.retry_count == 0 {
        return Err(std::io::Error::other("downstream 503 (first attempt)"));
    }
    Ok(())
}

/// With `immediate_retries` false, the retrier runs with `immediate-retries = 0`: a failed
/// attempt is written and claimed again, every attempt through the database.
pub(crate) async fn run(scenario: Scenario, bench: &Bench, immediate_retries: bool) -> Result<Option<Duration>> {
    let (_, pool) = bench.fresh_pool(if immediate_retries { "dlq" } else { "dlq_db" }).await?;
    let store = PgStore::from_pool(pool.clone(), PgConfig::default()).await?;
    measure(scenario, bench, immediate_retries, &pool, store).await
}

/// As `run`, with the store's pool through the PgBouncer at `DLQ_PGBOUNCER_URL` (transaction
/// mode) and its session URL straight to the server; the harness polls directly.
pub(crate) async fn run_through_pgbouncer(scenario: Scenario, bench: &Bench) -> Result<Option<Duration>> {
    let (direct_url, pool) = bench.fresh_pool("dlq_pgbouncer").await?;
    let bouncer =
        std::env::var("DLQ_PGBOUNCER_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:6432/postgres".to_owned());
    let options: sqlx::postgres::PgConnectOptions = bouncer.parse()?;
    let database = pool.connect_options().get_database().ok_or("no database name")?.to_owned();
    let pooled = sqlx::postgres::PgPoolOptions::new()
        .max_connections(crate::common::POOL_SIZE)
        .connect_with(options.database(&database))
        .await
        .map_err(|e| format!("no PgBouncer at DLQ_PGBOUNCER_URL ({}): {e}", dlq_sqlx::mask_passwords(&bouncer)))?;
    let store = PgStore::from_pool(pooled.clone(), PgConfig::default().session_url(direct_url)).await?;
    let took = measure(scenario, bench, true, &pool, store).await;
    pooled.close().await;
    took
}

async fn measure(
    scenario: Scenario,
    bench: &Bench,
    immediate_retries: bool,
    pool: &sqlx::PgPool,
    store: PgStore,
) -> Result<Option<Duration>> {
    let event_type = if scenario == Scenario::FailOnce { "bench-flaky" } else { "bench" };
    let start = Instant::now();
    park(&store, event_type, bench.rows).await?;
    if scenario == Scenario::Enqueue {
        let took = start.elapsed();
        pool.close().await;
        return Ok(Some(took));
    }
    let registry = if scenario == Scenario::FailOnce { handlers![flaky]? } else { handlers![noop]? };
    let mut config = RetrierConfig::default();
    if !immediate_retries {
        config.immediate_retries = 0;
    }
    let retrier = Retrier::new(Arc::new(store), registry).config(config);
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    let running = tokio::spawn({
        let (retrier, shutdown) = (retrier.clone(), shutdown.clone());
        async move { retrier.run_until(shutdown.cancelled_owned()).await }
    });
    let took = until_done(pool, crate::raw::DONE, start).await;
    shutdown.cancel();
    let stats = running.await??;
    if stats.fenced != 0 || stats.store_errors != 0 {
        return Err(format!("unexpected {stats:?}").into());
    }
    pool.close().await;
    Ok(Some(took?))
}

/// Parks `rows` transient failures due at once, `CHUNK` a call.
async fn park(store: &PgStore, event_type: &str, rows: usize) -> Result<()> {
    let error = std::io::Error::other("downstream 503");
    let class = dlq_core::classify::classify_error(&error);
    for chunk in (0..rows).collect::<Vec<_>>().chunks(CHUNK) {
        let letters = chunk
            .iter()
            .map(|&n| {
                let failure = dlq_core::classify::FailureInfo::from_error(class, "io::Error", &error);
                dlq_core::store::NewDeadLetter::new(event_type, dlq_core::Payload::Json(payload(n)), failure)
                    .retry(Duration::ZERO, 5)
            })
            .collect();
        store.park_many(letters).await?;
    }
    Ok(())
}
