//! Parking from 64 concurrent tasks (each letter through the group-commit writer, as failing
//! handlers park), over TLS and without, on the same server: rows/s, and each park's latency
//! (p50 / p99). Over TLS twice: through
//! `PgStore::connect_with`, whose pool sets `TCP_NODELAY`, and through `PgStore::from_pool` on a
//! plain sqlx pool, which sqlx 0.9.0 opens without it: there a statement longer than one TLS
//! record (16 KiB) waits for the server's delayed ACK (about 40 ms on Linux), so the store keeps
//! batches under 16,000 bytes. See docs/BENCHMARKS.md.
//!
//! ```sh
//! cargo run --release --no-default-features --manifest-path bench/Cargo.toml --bin park_tls
//! ```
//!
//! `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`) names the server; the
//! run drops and creates `dlq_bench_park_tls` on it. `BENCH_REPS` (3) alternations of the three,
//! `BENCH_PAYLOAD` (0) bytes of padding in each payload, `BENCH_MAX_BATCH_BYTES` the store's
//! `PgConfig::max_batch_bytes` (unset: the store chooses).

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlq_core::{Payload, classify::FailureInfo, classify::classify_error, store::NewDeadLetter, store::prelude::*};
use dlq_sqlx::{PgConfig, PgStore};
use sqlx::Connection;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const TASKS: usize = 64;
const PER_TASK: usize = 300;

#[tokio::main]
async fn main() -> Result<()> {
    let admin = std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let base = admin.split_once('?').map_or(admin.as_str(), |(path, _)| path);
    let base = base.rsplit_once('/').ok_or("DATABASE_URL has no database name")?.0;
    let env = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let (reps, padding) = (env("BENCH_REPS", 3), env("BENCH_PAYLOAD", 0));
    let mut config = PgConfig::default();
    if let Some(max) = std::env::var("BENCH_MAX_BATCH_BYTES").ok().and_then(|v| v.parse().ok()) {
        config = config.max_batch_bytes(max);
    }
    println!(
        "| | TLS, `connect_with` (TCP_NODELAY) rows/s (p50 / p99) | TLS, `from_pool` on a sqlx pool rows/s (p50 / p99) | no TLS rows/s (p50 / p99) |\n| --- | ---: | ---: | ---: |"
    );
    for rep in 1..=reps {
        let mut cells = Vec::new();
        for (mode, nodelay) in [("require", true), ("require", false), ("disable", true)] {
            let mut conn = sqlx::PgConnection::connect(&admin).await?;
            sqlx::query("DROP DATABASE IF EXISTS dlq_bench_park_tls WITH (FORCE)").execute(&mut conn).await?;
            sqlx::query("CREATE DATABASE dlq_bench_park_tls").execute(&mut conn).await?;
            conn.close().await?;
            let url = format!("{base}/dlq_bench_park_tls?sslmode={mode}");
            let store = if nodelay {
                PgStore::connect_with(&url, config.clone()).await?
            } else {
                let pool = sqlx::postgres::PgPoolOptions::new().max_connections(10).connect_lazy(&url)?;
                PgStore::from_pool(pool, config.clone()).await?
            };
            let (took, latencies) = park(store, padding).await?;
            let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
            cells.push(format!(
                "{:.0} ({:.1} / {:.1} ms)",
                (TASKS * PER_TASK) as f64 / took.as_secs_f64(),
                at(0.50).as_secs_f64() * 1e3,
                at(0.99).as_secs_f64() * 1e3
            ));
        }
        let max = config.max_batch_bytes;
        println!(
            "| run {rep} ({TASKS} tasks x {PER_TASK} parks, payload +{padding} B, max_batch_bytes {max:?}) | {} | {} | {} |",
            cells[0], cells[1], cells[2]
        );
    }
    Ok(())
}

/// Parks `TASKS * PER_TASK` transient failures, one `park` call each, from `TASKS` tasks;
/// returns the time it took and each park's latency, sorted.
async fn park(store: PgStore, padding: usize) -> Result<(Duration, Vec<Duration>)> {
    let store = Arc::new(store);
    let pad = "x".repeat(padding);
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (store, pad) = (Arc::clone(&store), pad.clone());
            tokio::spawn(async move {
                let error = std::io::Error::other("downstream 503");
                let mut latencies = Vec::with_capacity(PER_TASK);
                for n in 0..PER_TASK {
                    let failure = FailureInfo::from_error(classify_error(&error), "io::Error", &error);
                    let payload = serde_json::json!({ "n": task * PER_TASK + n, "pad": pad });
                    let letter = NewDeadLetter::new("bench", Payload::Json(payload), failure).retry(Duration::ZERO, 5);
                    let parked = Instant::now();
                    store.park(letter).await?;
                    latencies.push(parked.elapsed());
                }
                Ok::<_, dlq_core::Error>(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(TASKS * PER_TASK);
    for task in tasks {
        latencies.extend(task.await??);
    }
    let took = start.elapsed();
    latencies.sort_unstable();
    Ok((took, latencies))
}
