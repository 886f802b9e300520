//! A retrier process's peak memory as the rows it processes grow: 10,000, 100,000 and
//! 1,000,000 rows (the target: flat within 10 %). Prints a table.
//!
//! Run: `cargo bench -p dlq-sqlx --bench memory`. Uses `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) to create, use and drop a database
//! `dlq_bench_memory`. `DLQ_BENCH_SIZES` changes the sizes (comma-separated row counts).
//!
//! For each size the bench fills `dlq_events` with that many due rows (one `INSERT … SELECT`,
//! as a burst of parks would leave them), then starts a fresh process (this binary again) that
//! runs a `Retrier` with the default configuration on a `PgStore` until every row succeeded,
//! and reads its peak resident set (`VmHWM` in `/proc/self/status`, Linux) before it exits.
//! One process per size, so that no run inherits another's peak.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlq_core::{CancellationToken, Retrier, dead_letter, handlers};
use dlq_sqlx::{PgConfig, PgStore};
use sqlx::{Connection, PgConnection};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const DB: &str = "dlq_bench_memory";
/// Set in the child process: the database URL and the row count, `url|rows`.
const CHILD: &str = "DLQ_BENCH_MEMORY_CHILD";

const FILL: &str = "
INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, error_chain, fingerprint,
    status, max_retries, retry_after)
SELECT 'bench-memory', jsonb_build_object('id', g, 'amount_cents', g % 100000, 'currency', 'USD'), 'transient',
    'io::Error', 'downstream 503', '[\"downstream 503\"]', '0123456789abcdef', 'PENDING', 5,
    now() - interval '1 second'
FROM generate_series(1, $1::int8) AS g";

#[dead_letter(event_type = "bench-memory", backoff = "none")]
async fn handle(payment: serde_json::Value) -> std::result::Result<(), std::io::Error> {
    std::hint::black_box(payment);
    Ok(())
}

/// `VmHWM` (peak resident set) of this process, in KiB.
fn peak_rss_kib() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).ok_or("no VmHWM in /proc/self/status")?;
    Ok(line.split_whitespace().nth(1).ok_or("VmHWM without a value")?.parse()?)
}

/// The child: drains `rows` rows with the default configuration, prints `peak_kib seconds`.
async fn child(spec: &str) -> Result<()> {
    let (url, rows) = spec.split_once('|').ok_or("bad child spec")?;
    let rows: u64 = rows.parse()?;
    let store = PgStore::connect_with(url, PgConfig::default()).await?;
    let retrier = Retrier::new(Arc::new(store), handlers![handle]?);
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let running = tokio::spawn({
        let (retrier, shutdown) = (retrier.clone(), shutdown.clone());
        async move { retrier.run_until(shutdown.cancelled_owned()).await }
    });
    while retrier.stats().succeeded < rows {
        if running.is_finished() || started.elapsed() > Duration::from_secs(1800) {
            return Err("retrier stopped or stalled".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed();
    shutdown.cancel();
    running.await??;
    println!("{} {:.1}", peak_rss_kib()?, elapsed.as_secs_f64());
    Ok(())
}

async fn parent() -> Result<()> {
    let admin_url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let sizes: Vec<u64> = std::env::var("DLQ_BENCH_SIZES")
        .unwrap_or_else(|_| "10000,100000,1000000".to_owned())
        .split(',')
        .map(str::parse)
        .collect::<std::result::Result<_, _>>()?;
    let base = admin_url.rsplit_once('/').ok_or("DATABASE_URL has no database name")?.0;
    let url = format!("{base}/{DB}");
    let mut admin = PgConnection::connect(&admin_url).await?;
    sqlx::query("DROP DATABASE IF EXISTS dlq_bench_memory WITH (FORCE)").execute(&mut admin).await?;
    sqlx::query("CREATE DATABASE dlq_bench_memory").execute(&mut admin).await?;
    // Migrations, once.
    drop(PgStore::connect_with(&url, PgConfig::default()).await?);
    let mut conn = PgConnection::connect(&url).await?;
    let mut results = Vec::new();
    for rows in sizes {
        sqlx::query("TRUNCATE dlq_events, dlq_attempts, dlq_audit, dlq_retriers, dlq_tallies")
            .execute(&mut conn)
            .await?;
        sqlx::query(FILL).bind(i64::try_from(rows)?).execute(&mut conn).await?;
        let out = Command::new(std::env::current_exe()?).env(CHILD, format!("{url}|{rows}")).output()?;
        if !out.status.success() {
            return Err(format!("child for {rows} rows: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        let line = String::from_utf8(out.stdout)?;
        let mut fields = line.split_whitespace();
        let peak: u64 = fields.next().ok_or("no peak")?.parse()?;
        let seconds: f64 = fields.next().ok_or("no time")?.parse()?;
        println!("{rows} rows: peak {peak} KiB, drained in {seconds:.1} s");
        results.push((rows, peak, seconds));
    }
    conn.close().await?;
    sqlx::query("DROP DATABASE IF EXISTS dlq_bench_memory WITH (FORCE)").execute(&mut admin).await?;
    let first = results.first().map_or(1, |r| r.1).max(1);
    println!("\n| rows processed | peak RSS of the retrier process | vs the first | drained in |");
    println!("| ---: | ---: | ---: | ---: |");
    #[allow(clippy::cast_precision_loss, reason = "sizes for a table")]
    for (rows, peak, seconds) in results {
        let ratio = peak as f64 / first as f64;
        println!("| {rows} | {:.1} MiB | {ratio:.2}x | {seconds:.1} s |", peak as f64 / 1024.0);
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    match std::env::var(CHILD) {
        Ok(spec) => child(&spec).await,
        Err(_) => parent().await,
    }
}
