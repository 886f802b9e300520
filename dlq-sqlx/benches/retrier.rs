//! Retrier and parking throughput on PostgreSQL against raw SQL doing the same transitions
//! (the targets of docs/DESIGN.md, "Performance targets"). Prints a table.
//!
//! Run: `cargo bench -p dlq-sqlx --bench retrier`. Uses `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) to create, use and drop a database
//! `dlq_bench` (`DLQ_BENCH_DB` names another, `[a-z0-9_]` only). Set `DLQ_BENCH_ROWS` to change the row count (default 20000),
//! `DLQ_BENCH_RUNS` the number of alternating runs whose medians are reported (default 5), and
//! `DLQ_BENCH_LARGE` the large-table size for claim latency (default 1000000; 0 skips the
//! claim-latency rows, for a quick run of the drains). `DLQ_BENCH_ONLY` runs some scenarios
//! only, a comma-separated list of `burst`, `drain`, `flaky`, `park`, `sealed` (default: all).
//! `sealed` compares `encrypt = true` with the same handler in clear: failures parked through
//! the live path from 64 tasks, then drained by a retrier with the default configuration.
//! `DLQ_BENCH_CPU=1` also prints, for each drain and park run, the CPU time of this process and of every
//! PostgreSQL process on the host while it ran (Linux `/proc`, ticks of 10 ms), and how many
//! statements dlq's parks took (rows per group-commit batch).
//! `DLQ_BENCH_DURABLE_OUTCOMES=1` runs dlq with `PgConfig::durable_outcomes(true)` instead of
//! the default. Ratios are only meaningful on an otherwise idle machine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlq_core::store::Settlement;
use dlq_core::{
    CancellationToken, Retrier, RetrierConfig, dead_letter, handlers, handlers::Attempt, handlers::Registry,
    store::prelude::*,
};
use dlq_sqlx::{PgConfig, PgStore};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};

mod common;
use common::cpu_ticks;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[dead_letter(event_type = "bench-noop", backoff = "none")]
async fn noop(n: u64) -> std::result::Result<(), std::io::Error> {
    std::hint::black_box(n);
    Ok(())
}

#[dead_letter(event_type = "bench-flaky", backoff = "none", max_retries = 5)]
async fn flaky(n: u64, attempt: Attempt) -> std::result::Result<(), std::io::Error> {
    std::hint::black_box(n);
    if attempt.retry_count == 0 {
        return Err(std::io::Error::other("downstream 503 (first attempt)"));
    }
    Ok(())
}

/// A ~170-byte payment that fails live and succeeds on its first retry, in clear.
#[dead_letter(event_type = "bench-pay-clear", backoff = "none")]
async fn pay_clear(p: serde_json::Value, attempt: Attempt) -> std::result::Result<(), std::io::Error> {
    fail_live(&p, &attempt)
}

/// The same, encrypted at rest (`clear = ["/id"]` as a team keeps an id readable).
#[dead_letter(event_type = "bench-pay-sealed", encrypt = true, clear = ["/id"], backoff = "none")]
async fn pay_sealed(p: serde_json::Value, attempt: Attempt) -> std::result::Result<(), std::io::Error> {
    fail_live(&p, &attempt)
}

fn fail_live(p: &serde_json::Value, attempt: &Attempt) -> std::result::Result<(), std::io::Error> {
    if attempt.id.is_none() { Err(std::io::Error::other(format!("ledger refused card {}", p["pan"]))) } else { Ok(()) }
}

fn payment(id: usize) -> serde_json::Value {
    serde_json::json!({
        "id": id, "amount_cents": 1_299, "currency": "EUR", "pan": "4111111111111111",
        "merchant": "a merchant with a reasonably long name, as they come",
    })
}

/// One type's due rows, in the order of the due index `(event_type, retry_after, id)`.
const RAW_CLAIM: &str = "
WITH due AS (
    SELECT id FROM dlq_events WHERE event_type = 'bench-noop' AND status = 'PENDING' AND retry_after <= now()
    ORDER BY retry_after, id LIMIT 50 FOR UPDATE SKIP LOCKED
)
UPDATE dlq_events e SET status = 'PROCESSING', lease_until = now() + interval '5 minutes',
    lease_token = gen_random_uuid(), updated_at = now()
FROM due WHERE e.id = due.id RETURNING e.id, e.payload";

const RAW_COMPLETE: &str = "UPDATE dlq_events SET status = 'SUCCEEDED', lease_token = NULL, lease_until = NULL,
    updated_at = now() WHERE id = ANY($1)";

const FILL: &str = "
INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, error_chain, fingerprint,
    status, max_retries, retry_after, updated_at)
SELECT $1, to_jsonb(g), 'transient', 'io::Error', 'downstream 503', '[\"downstream 503\"]', '0123456789abcdef',
    $3, 5, now() - interval '1 second', now() - interval '30 days'
FROM generate_series(1, $2::int8) AS g";

const RAW_INSERT: &str = "
INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, error_chain, fingerprint,
    status, max_retries, retry_after)
SELECT t.event_type, t.payload, 'transient', t.kind, t.reason, t.chain, t.fingerprint, 'PENDING', 5, now()
FROM unnest($1::text[], $2::jsonb[], $3::text[], $4::text[], $5::jsonb[], $6::text[])
    AS t(event_type, payload, kind, reason, chain, fingerprint)";

/// With `DLQ_BENCH_CPU` set, prints the CPU ticks spent since `from` (see `cpu_ticks`).
fn report_cpu(who: &str, from: (u64, u64), took: Duration) {
    if std::env::var_os("DLQ_BENCH_CPU").is_some() {
        let (own, postgres) = cpu_ticks();
        println!(
            "cpu {who}: {:.0} ms, bench process {} ticks, PostgreSQL {} ticks",
            took.as_secs_f64() * 1e3,
            own - from.0,
            postgres - from.1
        );
    }
}

/// Whether `DLQ_BENCH_ONLY` (unset: every scenario) names `scenario`.
fn selected(scenario: &str) -> bool {
    std::env::var("DLQ_BENCH_ONLY").map_or(true, |only| only.split(',').any(|s| s.trim() == scenario))
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

async fn setup() -> Result<(PgPool, PgStore)> {
    let admin_url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let mut admin = PgConnection::connect(&admin_url).await?;
    let db = common::bench_database("dlq_bench")?;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))).execute(&mut admin).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}"))).execute(&mut admin).await?;
    admin.close().await?;
    let url = match admin_url.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{db}"),
        None => return Err("DATABASE_URL has no database name".into()),
    };
    let pool = PgPoolOptions::new().max_connections(16).connect(&url).await?;
    let durable = std::env::var_os("DLQ_BENCH_DURABLE_OUTCOMES").is_some_and(|v| v == "1");
    let store = PgStore::from_pool(pool.clone(), PgConfig::default().durable_outcomes(durable)).await?;
    Ok((pool, store))
}

/// Who writes the table next: dlq, with its tally triggers (migration 0010), or the raw SQL
/// baseline, which is a bare queue table: no triggers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Writer {
    Dlq,
    Raw,
}

async fn reset(pool: &PgPool, writer: Writer) -> Result<()> {
    let triggers = match writer {
        Writer::Dlq => "ALTER TABLE dlq_events ENABLE TRIGGER USER",
        Writer::Raw => "ALTER TABLE dlq_events DISABLE TRIGGER USER",
    };
    sqlx::query(triggers).execute(pool).await?;
    sqlx::query("TRUNCATE dlq_events, dlq_attempts, dlq_audit, dlq_retriers, dlq_tallies").execute(pool).await?;
    Ok(())
}

async fn fill(pool: &PgPool, event_type: &str, n: usize, status: &str) -> Result<()> {
    sqlx::query(FILL).bind(event_type).bind(i64::try_from(n)?).bind(status).execute(pool).await?;
    Ok(())
}

async fn vacuum(pool: &PgPool) -> Result<()> {
    sqlx::query("VACUUM ANALYZE dlq_events").execute(pool).await?;
    sqlx::query("VACUUM ANALYZE dlq_attempts").execute(pool).await?;
    Ok(())
}

/// How the rows of a drain were written before the retrier starts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Table {
    /// Vacuumed and analyzed after the fill.
    Vacuumed,
    /// A burst: parked moments before, no VACUUM or ANALYZE since (the table has no statistics).
    Burst,
}

/// Which plan the raw claim runs with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// Whatever the planner picks (on a burst: a bitmap heap scan of every due row, a sort).
    Planner,
    /// The ordered walk of the partial index, as with statistics: bitmap scans and sorts off
    /// for the raw connections (the baseline dlq's ratio is taken against).
    IndexWalk,
}

/// Raw SQL: 4 connections claiming 50 with SKIP LOCKED and completing by id array.
async fn raw_drain(pool: &PgPool, n: usize, table: Table, plan: Plan) -> Result<Duration> {
    reset(pool, Writer::Raw).await?;
    fill(pool, "bench-noop", n, "PENDING").await?;
    if table == Table::Vacuumed {
        vacuum(pool).await?;
    }
    let cpu = cpu_ticks();
    let start = Instant::now();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut conn = pool.acquire().await?;
                if plan == Plan::IndexWalk {
                    sqlx::raw_sql("SET enable_bitmapscan = off; SET enable_sort = off").execute(&mut *conn).await?;
                }
                loop {
                    let rows: Vec<(i64, Option<serde_json::Value>)> =
                        sqlx::query_as(RAW_CLAIM).fetch_all(&mut *conn).await?;
                    if rows.is_empty() {
                        break;
                    }
                    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
                    sqlx::query(RAW_COMPLETE).bind(&ids).execute(&mut *conn).await?;
                }
                sqlx::raw_sql("RESET ALL").execute(&mut *conn).await?;
                Ok::<_, sqlx::Error>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    report_cpu("raw SQL", cpu, start.elapsed());
    Ok(start.elapsed())
}

fn retry_config(batch_size: usize) -> RetrierConfig {
    let mut config = RetrierConfig::default();
    config.batch_size = batch_size;
    config.workers = 4;
    config.concurrency = 50;
    config.poll_interval = Duration::from_millis(500);
    config
}

/// Our retrier with `config` until `expected` rows succeeded.
async fn ours(
    store: &PgStore,
    registry: Registry,
    expected: u64,
    config: RetrierConfig,
) -> Result<(Duration, dlq_core::retry::RetrierStats)> {
    let shutdown = CancellationToken::new();
    let retrier = Retrier::new(Arc::new(store.clone()), registry).config(config);
    let cpu = cpu_ticks();
    let start = Instant::now();
    let running = tokio::spawn({
        let (retrier, shutdown) = (retrier.clone(), shutdown.clone());
        async move { retrier.run_until(shutdown.cancelled_owned()).await }
    });
    while retrier.stats().succeeded < expected {
        if running.is_finished() || start.elapsed() > Duration::from_secs(300) {
            return Err("retrier stopped or stalled".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = start.elapsed();
    report_cpu("dlq", cpu, elapsed);
    shutdown.cancel();
    let stats = running.await??;
    Ok((elapsed, stats))
}

async fn ours_drain(
    pool: &PgPool,
    store: &PgStore,
    n: usize,
    event_type: &str,
    registry: Registry,
    config: RetrierConfig,
    table: Table,
) -> Result<Duration> {
    reset(pool, Writer::Dlq).await?;
    fill(pool, event_type, n, "PENDING").await?;
    if table == Table::Vacuumed {
        vacuum(pool).await?;
    }
    let (elapsed, stats) = ours(store, registry, n as u64, config).await?;
    if stats.fenced != 0 || stats.store_errors != 0 {
        return Err(format!("unexpected {stats:?}").into());
    }
    Ok(elapsed)
}

fn letter(n: usize) -> dlq_core::store::NewDeadLetter {
    let failure = dlq_core::classify::FailureInfo::new(
        dlq_core::ErrorClass::Transient,
        "io::Error",
        format!("downstream 503 for event {n}"),
        vec![format!("downstream 503 for event {n}")],
        None,
    );
    dlq_core::store::NewDeadLetter::new("bench-park", dlq_core::Payload::Json(serde_json::json!({ "n": n })), failure)
        .retry(Duration::from_secs(60), 5)
}

/// 64 tasks, each parking its failures one at a time (group-committed by the store). The
/// letters are built before the clock starts, as raw SQL's are.
async fn ours_park(pool: &PgPool, store: &PgStore, n: usize) -> Result<Duration> {
    reset(pool, Writer::Dlq).await?;
    let per_task = n / 64;
    let letters: Vec<Vec<_>> = (0..64).map(|t| (0..per_task).map(|i| letter(t * per_task + i)).collect()).collect();
    let cpu = cpu_ticks();
    let start = Instant::now();
    let tasks: Vec<_> = letters
        .into_iter()
        .map(|letters| {
            let store = store.clone();
            tokio::spawn(async move {
                for letter in letters {
                    store.park(letter).await?;
                }
                Ok::<_, dlq_core::Error>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let took = start.elapsed();
    report_cpu("dlq park", cpu, took);
    if std::env::var_os("DLQ_BENCH_CPU").is_some() {
        // Each park statement appends one tally row per key (one key here): its batches.
        let (batches,): (i64,) = sqlx::query_as("SELECT count(*) FROM dlq_tallies").fetch_one(pool).await?;
        println!("dlq park: {batches} statements, {:.1} rows each", n as f64 / batches.max(1) as f64);
    }
    Ok(took)
}

/// 64 tasks, each running the handler live on its events one at a time: each fails, and the
/// live path parks it (sealed first when `sealed`). Returns the time to park `n`.
async fn live_park(pool: &PgPool, store: &PgStore, n: usize, sealed: bool) -> Result<Duration> {
    reset(pool, Writer::Dlq).await?;
    let per_task = n / 64;
    let store: Arc<dyn DeadLetterStore> = Arc::new(store.clone());
    let start = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|t| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..per_task {
                    let event = payment(t * per_task + i);
                    let scope = dlq_core::Scope::new().store(store.clone());
                    let run = if sealed {
                        scope.run(pay_sealed(event, Attempt::first())).await
                    } else {
                        scope.run(pay_clear(event, Attempt::first())).await
                    };
                    if !matches!(run, Err(dlq_core::HandlerError::Parked { .. })) {
                        return Err(format!("not parked: {run:?}"));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok(start.elapsed())
}

/// Parks `n` failures live (untimed), then drains them with a default retrier: its time.
async fn live_drain(pool: &PgPool, store: &PgStore, n: usize, sealed: bool) -> Result<Duration> {
    live_park(pool, store, n, sealed).await?;
    let registry = if sealed { handlers![pay_sealed] } else { handlers![pay_clear] }?;
    let (elapsed, stats) = ours(store, registry, n as u64, RetrierConfig::default()).await?;
    if stats.fenced != 0 || stats.store_errors != 0 || stats.sealed_unreadable != 0 {
        return Err(format!("unexpected {stats:?}").into());
    }
    Ok(elapsed)
}

/// The same rows as one raw 64-row `INSERT … SELECT FROM unnest` after another.
async fn raw_park(pool: &PgPool, n: usize) -> Result<Duration> {
    reset(pool, Writer::Raw).await?;
    let letters: Vec<_> = (0..(n / 64) * 64).map(letter).collect();
    let cpu = cpu_ticks();
    let start = Instant::now();
    for chunk in letters.chunks(64) {
        let payloads: Vec<serde_json::Value> = chunk
            .iter()
            .map(|l| match &l.payload {
                dlq_core::Payload::Json(v) => v.clone(),
                dlq_core::Payload::Raw { .. } => serde_json::Value::Null,
            })
            .collect();
        sqlx::query(RAW_INSERT)
            .bind(chunk.iter().map(|l| l.event_type.clone()).collect::<Vec<_>>())
            .bind(payloads)
            .bind(chunk.iter().map(|l| l.failure.kind.clone()).collect::<Vec<_>>())
            .bind(chunk.iter().map(|l| l.failure.reason.clone()).collect::<Vec<_>>())
            .bind(chunk.iter().map(|l| serde_json::Value::from(l.failure.chain.clone())).collect::<Vec<_>>())
            .bind(chunk.iter().map(|l| l.failure.fingerprint.clone()).collect::<Vec<_>>())
            .execute(pool)
            .await?;
    }
    report_cpu("raw insert", cpu, start.elapsed());
    Ok(start.elapsed())
}

/// Median and mean claim latency (claim 50, then settle them unmeasured) on a table of `size`
/// rows of which 10 000 are due.
async fn claim_latency(pool: &PgPool, store: &PgStore, size: usize) -> Result<(Duration, Duration)> {
    reset(pool, Writer::Dlq).await?;
    fill(pool, "bench-noop", size.saturating_sub(10_000), "SUCCEEDED").await?;
    fill(pool, "bench-noop", 10_000, "PENDING").await?;
    vacuum(pool).await?;
    sample_claims(store).await
}

/// The same right after `size - 10 000` rows went from PENDING to SUCCEEDED in one burst,
/// before any vacuum (the hot index still holds every completed row as a dead entry), and
/// again once a retrier's upkeep (`OperatorStore::maintain`, every heartbeat, with the
/// default `PgConfig::vacuum_dead_tuples`) has vacuumed it: no manual VACUUM, and no
/// autovacuum (off on this machine's PostgreSQL).
async fn claim_latency_after_completions(
    pool: &PgPool,
    store: &PgStore,
    size: usize,
) -> Result<((Duration, Duration), Option<(Duration, Duration)>)> {
    reset(pool, Writer::Dlq).await?;
    fill(pool, "bench-noop", size.saturating_sub(10_000), "PENDING").await?;
    vacuum(pool).await?;
    sqlx::query("UPDATE dlq_events SET status = 'SUCCEEDED', updated_at = now() WHERE status = 'PENDING'")
        .execute(pool)
        .await?;
    fill(pool, "bench-noop", 10_000, "PENDING").await?;
    let before = sample_claims(store).await?;
    // What a running retrier's next heartbeats do (the statistics lag a second or so).
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if store.maintain().await? == dlq_core::store::Maintenance::Vacuumed {
            fill(pool, "bench-noop", 10_000, "PENDING").await?;
            return Ok((before, Some(sample_claims(store).await?)));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok((before, None))
}

async fn sample_claims(store: &PgStore) -> Result<(Duration, Duration)> {
    let mut samples = Vec::new();
    for _ in 0..150 {
        let request = dlq_core::store::ClaimRequest {
            event_types: vec!["bench-noop".into()],
            limit: 50,
            lease: Duration::from_secs(60),
            owner: "bench".into(),
        };
        let start = Instant::now();
        let claimed = store.claim(request).await?;
        samples.push(start.elapsed());
        let outcomes = claimed.iter().map(|c| Settlement::Succeeded { lease: c.lease }).collect();
        store.settle(outcomes).await?;
    }
    samples.sort();
    let mean = samples.iter().sum::<Duration>() / u32::try_from(samples.len())?;
    Ok((samples[samples.len() / 2], mean))
}

fn per_sec(rows: usize, t: Duration) -> f64 {
    #[allow(clippy::cast_precision_loss, reason = "a rate for a table")]
    let rows = rows as f64;
    rows / t.as_secs_f64()
}

/// Runs `a` and `b` alternately `runs` times; returns the median duration of each.
async fn paired<A, FA, B, FB>(runs: usize, mut a: A, mut b: B) -> Result<(Duration, Duration)>
where
    A: FnMut() -> FA,
    FA: std::future::Future<Output = Result<Duration>>,
    B: FnMut() -> FB,
    FB: std::future::Future<Output = Result<Duration>>,
{
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        xs.push(a().await?);
        ys.push(b().await?);
    }
    xs.sort();
    ys.sort();
    Ok((xs[runs / 2], ys[runs / 2]))
}

async fn run() -> Result<()> {
    let rows = env_usize("DLQ_BENCH_ROWS", 20_000);
    let large = env_usize("DLQ_BENCH_LARGE", 1_000_000);
    let (pool, store) = setup().await?;
    let noop_registry = handlers![noop]?;
    let flaky_registry = handlers![flaky]?;

    let runs = env_usize("DLQ_BENCH_RUNS", 5);
    let durable = if store.config().durable_outcomes { ", PgConfig::durable_outcomes(true)" } else { "" };
    println!("\nmedians of {runs} alternating runs on {rows} rows{durable}");
    println!("\n| benchmark | dlq | raw SQL | ratio | target |");
    println!("| --- | ---: | ---: | ---: | --- |");
    if selected("burst") {
        let (planner, _) =
            paired(runs, || raw_drain(&pool, rows, Table::Burst, Plan::Planner), || async { Ok(Duration::ZERO) })
                .await?;
        let (raw, ours_noop) = paired(
            runs,
            || raw_drain(&pool, rows, Table::Burst, Plan::IndexWalk),
            || {
                ours_drain(
                    &pool,
                    &store,
                    rows,
                    "bench-noop",
                    noop_registry.clone(),
                    RetrierConfig::default(),
                    Table::Burst,
                )
            },
        )
        .await?;
        let (r, o, p) = (per_sec(rows, raw), per_sec(rows, ours_noop), per_sec(rows, planner));
        println!(
            "| burst drain {rows} rows (no VACUUM/ANALYZE), no-op handler, default RetrierConfig | {o:.0} rows/s | {r:.0} rows/s | {:.2}x | >= 0.9x |",
            o / r
        );
        println!(
            "| the same raw SQL on the burst with the planner's own plan (bitmap heap scan + sort) | - | {p:.0} rows/s | - | - |"
        );
    }
    if selected("drain") {
        let (raw, ours_noop) = paired(
            runs,
            || raw_drain(&pool, rows, Table::Vacuumed, Plan::Planner),
            || ours_drain(&pool, &store, rows, "bench-noop", noop_registry.clone(), retry_config(50), Table::Vacuumed),
        )
        .await?;
        let (r, o) = (per_sec(rows, raw), per_sec(rows, ours_noop));
        println!(
            "| drain {rows} rows, vacuumed, no-op handler (4 workers, concurrency 50, batch 50) | {o:.0} rows/s | {r:.0} rows/s | {:.2}x | >= 0.9x |",
            o / r
        );
    }
    if selected("flaky") {
        // The default config runs the failed attempt again at once under its claim
        // (`immediate-retries`); with 0 every attempt goes through the database (the fail-once target).
        let through_db = |mut config: RetrierConfig| {
            config.immediate_retries = 0;
            config
        };
        let flaky_configs = [
            ("default config (immediate retries), burst", RetrierConfig::default(), Table::Burst),
            ("through the database (immediate-retries 0), burst", through_db(RetrierConfig::default()), Table::Burst),
            ("through the database, batch 50", through_db(retry_config(50)), Table::Vacuumed),
            ("through the database, batch 200", through_db(retry_config(200)), Table::Vacuumed),
        ];
        for (label, config, table) in flaky_configs {
            let mut times = Vec::new();
            for _ in 0..runs.min(3) {
                let registry = flaky_registry.clone();
                times.push(ours_drain(&pool, &store, rows, "bench-flaky", registry, config.clone(), table).await?);
            }
            times.sort();
            let f = per_sec(rows, times[times.len() / 2]);
            println!(
                "| fail once then succeed, zero backoff, {label} | {f:.0} rows/s ({:.0} attempts/s) | - | - | >= 15k rows/s |",
                2.0 * f
            );
        }
    }
    if selected("park") {
        let park_rows = (rows / 64) * 64;
        let (raw_insert, ours_parked) =
            paired(runs, || raw_park(&pool, park_rows), || ours_park(&pool, &store, park_rows)).await?;
        let (ri, op) = (per_sec(park_rows, raw_insert), per_sec(park_rows, ours_parked));
        println!(
            "| park {park_rows} rows from 64 tasks (group commit) vs 64-row INSERTs | {op:.0} rows/s | {ri:.0} rows/s | {:.2}x | >= 0.8x |",
            op / ri
        );
    }
    if selected("sealed") {
        dlq_core::sealed::install_keys(dlq_core::sealed::KeyRing::new("k1", [("k1", [7; 32])])?);
        let n = (rows / 64) * 64;
        let (clear, sealed) =
            paired(runs, || live_park(&pool, &store, n, false), || live_park(&pool, &store, n, true)).await?;
        let (c, e) = (per_sec(n, clear), per_sec(n, sealed));
        println!("\n| `encrypt = true` against the same handler in clear | in clear | encrypted | ratio | target |");
        println!("| --- | ---: | ---: | ---: | --- |");
        println!(
            "| park {n} failures through the live path from 64 tasks | {c:.0} rows/s | {e:.0} rows/s | {:.2}x | >= 0.9x |",
            e / c
        );
        let (clear, sealed) =
            paired(runs, || live_drain(&pool, &store, n, false), || live_drain(&pool, &store, n, true)).await?;
        let (c, e) = (per_sec(n, clear), per_sec(n, sealed));
        println!(
            "| retry {n} parked failures to SUCCEEDED, default RetrierConfig | {c:.0} rows/s | {e:.0} rows/s | {:.2}x | >= 0.9x |",
            e / c
        );
    }
    if large > 0 {
        print_claim_latency(&pool, &store, large).await?;
    }
    pool.close().await;
    drop(store);
    drop_bench_database().await
}

/// Claim latency on 10k rows, on `large` rows, and on `large` rows right after a burst of
/// completions (printed as table rows).
async fn print_claim_latency(pool: &PgPool, store: &PgStore, large: usize) -> Result<()> {
    let (small_p50, small_mean) = claim_latency(pool, store, 10_000).await?;
    let (large_p50, large_mean) = claim_latency(pool, store, large).await?;
    let ((churn_p50, churn_mean), upkept) = claim_latency_after_completions(pool, store, large).await?;
    println!(
        "| claim 50 latency, p50 / mean | 10k rows: {:.2} / {:.2} ms | {large} rows: {:.2} / {:.2} ms | {:.2}x | flat |",
        small_p50.as_secs_f64() * 1e3,
        small_mean.as_secs_f64() * 1e3,
        large_p50.as_secs_f64() * 1e3,
        large_mean.as_secs_f64() * 1e3,
        large_p50.as_secs_f64() / small_p50.as_secs_f64(),
    );
    println!(
        "| claim 50 latency right after {} completions, no vacuum, p50 / mean | 10k rows: {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.2}x | within 1.5x |",
        large.saturating_sub(10_000),
        small_p50.as_secs_f64() * 1e3,
        small_mean.as_secs_f64() * 1e3,
        churn_p50.as_secs_f64() * 1e3,
        churn_mean.as_secs_f64() * 1e3,
        churn_p50.as_secs_f64() / small_p50.as_secs_f64(),
    );
    match upkept {
        Some((p50, mean)) => println!(
            "| claim 50 latency after those completions, once a retrier's upkeep vacuumed, p50 / mean | 10k rows: {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.2}x | within 1.5x |",
            small_p50.as_secs_f64() * 1e3,
            small_mean.as_secs_f64() * 1e3,
            p50.as_secs_f64() * 1e3,
            mean.as_secs_f64() * 1e3,
            p50.as_secs_f64() / small_p50.as_secs_f64(),
        ),
        None => println!(
            "| claim 50 latency after those completions, once a retrier's upkeep vacuumed | it did not vacuum within 30 s | | | |"
        ),
    }
    Ok(())
}

async fn drop_bench_database() -> Result<()> {
    let admin_url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let mut admin = PgConnection::connect(&admin_url).await?;
    let db = common::bench_database("dlq_bench")?;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))).execute(&mut admin).await?;
    admin.close().await?;
    Ok(())
}

fn main() -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let started = Arc::new(Instant::now());
    let result = runtime.block_on(run());
    eprintln!("benchmark took {:.1} s", started.elapsed().as_secs_f64());
    result
}
