//! The big outage on PostgreSQL: millions of parks in one incident, drained after recovery and
//! purged while parks go on. Prints one table per scenario, a row per step of the backlog.
//!
//! Run: `cargo bench -p dlq-sqlx --bench incident`. Uses `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) to create, use and drop the database
//! `dlq_bench_incident` (`DLQ_BENCH_DB` names another). Everything runs with the defaults an application gets
//! (`PgConfig::default()`, `RetrierConfig::default()`), on tables filled moments before, with no
//! VACUUM or ANALYZE (autovacuum is off on the machines this was measured on).
//!
//! - `DLQ_INCIDENT_ROWS`: the backlog (10,000,000); `DLQ_INCIDENT_STEP`: rows per table row
//!   (1,000,000).
//! - `DLQ_INCIDENT_ONLY`: some scenarios only, comma-separated (default all):
//!   - `park`: 64 tasks run a failing `#[dead_letter]` handler one event at a time (the live
//!     path; the store group-commits), each event ~170 bytes; a 65th task parks 100 due letters
//!     a second and a claim probe claims them, 50 at a time, every 500 ms.
//!   - `park_many`: 4 tasks, each `park_many` of 1,000 letters a call (a consumer's batch).
//!   - `drain`: for each count in `DLQ_INCIDENT_DRAINERS` (`1,2,4`), three bursts of 20,000 due
//!     rows (the median is the burst rate), then the whole backlog, drained by that many retrier
//!     processes (this binary again), timed from when each has started its retrier.
//!   - `purge`: the backlog as finished rows 30 days old, purged (`PgStore::purge`, as retention
//!     and `dlq purge` do) while 64 tasks keep parking and the claim probe keeps claiming.
//!   - `foreign` (not in the default set; `DLQ_INCIDENT_ONLY=foreign`): due rows of a type
//!     nobody claims (its circuit open, or no retrier handles it), filled a step at a time; at
//!     each step, the claim of one row of another type parked just before, and a claim of 50
//!     rows of the unclaimed type.
//!   - `park_cost` (not in the default set; `DLQ_INCIDENT_ONLY=park_cost`): where a bulk park's
//!     time goes. One connection inserts `DLQ_COST_ROWS` (100,000) rows 1,000 a statement into
//!     a bare copy of `dlq_events`, then again after adding its primary key and each of its
//!     indexes in turn; then into `dlq_events` itself with and without its tally triggers, by
//!     `COPY`, and through `park_many` (one task). Prints µs per row of the wall clock, of
//!     this process's CPU (encoding) and of PostgreSQL's CPU.
//!
//! Latencies are of each call as the caller sees it (`park`: the handler's whole run, failure
//! classification and park included). Sizes are `pg_total_relation_size` of `dlq_events` and of
//! its history tables, indexes and TOAST included, divided by the rows in `dlq_events`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlq_core::store::{ClaimRequest, NewDeadLetter, Settlement};
use dlq_core::{CancellationToken, Retrier, dead_letter, handlers, store::prelude::*};
use dlq_sqlx::{PgConfig, PgStore};
use sqlx::{Connection, PgConnection, PgPool};

mod common;
use common::cpu_ticks;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Set in a drain child: the database URL.
const CHILD: &str = "DLQ_INCIDENT_CHILD";
/// The tasks that park through the live path, as in the issue of a real outage: many consumers.
const PARKERS: usize = 64;

/// The downstream is down: every event fails transiently, and comes due again in an hour.
#[dead_letter(event_type = "incident", backoff = "fixed", base = "1h")]
async fn pay(payment: serde_json::Value) -> std::result::Result<(), std::io::Error> {
    Err(std::io::Error::other(format!("ledger unavailable (503) for payment {}", payment["id"])))
}

/// What the drain children run: the downstream is back.
#[dead_letter(event_type = "incident-drain", backoff = "none")]
async fn drained(payment: serde_json::Value) -> std::result::Result<(), std::io::Error> {
    std::hint::black_box(payment);
    Ok(())
}

fn payment(id: u64) -> serde_json::Value {
    serde_json::json!({
        "id": id, "amount_cents": 1_299, "currency": "EUR", "card": "tok_4f1c2a9e77d0",
        "merchant": "a merchant with a reasonably long name, as they come",
    })
}

/// A letter as a consumer's batch or the probe's trickle parks it, due after `delay`.
fn letter(event_type: &str, id: u64, delay: Duration) -> NewDeadLetter {
    let reason = format!("ledger unavailable (503) for payment {id}");
    let failure = dlq_core::classify::FailureInfo::new(
        dlq_core::ErrorClass::Transient,
        "io::Error",
        reason.clone(),
        vec![reason],
        None,
    );
    NewDeadLetter::new(event_type, dlq_core::Payload::Json(payment(id)), failure).retry(delay, 240)
}

/// Rows for the drain and purge scenarios, in one statement per step, shaped as the retrier
/// bench's fill (a burst of parks leaves them so): `$1` event type, ids `$2..=$3`, status `$4`,
/// last changed `$5` seconds ago. They came due 100 µs apart, as the parks of an incident at
/// 10k events/s do, the last a second ago: a claim's floor is a time, and a million rows due at
/// one instant would be a million rows behind every floor.
const FILL: &str = "
INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, error_chain, fingerprint,
    status, max_retries, retry_after, updated_at)
SELECT $1, jsonb_build_object('id', g, 'amount_cents', 1299, 'currency', 'EUR', 'card', 'tok_4f1c2a9e77d0',
        'merchant', 'a merchant with a reasonably long name, as they come'),
    'transient', 'io::Error', 'ledger unavailable (503) for payment ' || g,
    jsonb_build_array('ledger unavailable (503) for payment ' || g), '0123456789abcdef',
    $4, 240, now() - interval '1 second' - ($3 - g) * interval '100 microseconds', now() - $5 * interval '1 second'
FROM generate_series($2::int8, $3::int8) AS g";

/// The rows are counted by the highest id: ids are never reused, `reset` restarts them, and
/// nothing deletes while parking. A `count(*)` would scan the whole table at every step, and
/// at 10M rows that scan took seconds of the parks' CPU and held back the claim probe's
/// cleanup of dead index entries.
const SIZES: &str = "
SELECT (SELECT coalesce(max(id), 0) FROM dlq_events)::int8,
    pg_relation_size('dlq_events') + coalesce(pg_relation_size((SELECT reltoastrelid FROM pg_class
        WHERE oid = 'dlq_events'::regclass)), 0),
    pg_indexes_size('dlq_events'),
    pg_total_relation_size('dlq_attempts') + pg_total_relation_size('dlq_audit')
        + pg_total_relation_size('dlq_tallies')";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.replace('_', "").parse().ok()).unwrap_or(default)
}

fn selected(scenario: &str) -> bool {
    std::env::var("DLQ_INCIDENT_ONLY")
        .map_or(!matches!(scenario, "park_cost" | "foreign"), |only| only.split(',').any(|s| s.trim() == scenario))
}

#[allow(clippy::cast_precision_loss, reason = "rates and sizes for a table")]
fn per_sec(rows: u64, t: Duration) -> f64 {
    rows as f64 / t.as_secs_f64().max(1e-9)
}

fn millions(n: u64) -> String {
    #[allow(clippy::cast_precision_loss, reason = "a label")]
    let m = n as f64 / 1e6;
    if n.is_multiple_of(1_000_000) { format!("{m:.0}M") } else { format!("{m:.2}M") }
}

/// The `q`-quantile of sorted microseconds, in milliseconds.
#[allow(clippy::cast_precision_loss, reason = "a latency for a table")]
fn quantile_ms(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "an index into the slice")]
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    f64::from(sorted[i]) / 1e3
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// Rows of `dlq_events`; bytes of its heap with TOAST, of its indexes, of its history tables.
type Sizes = (i64, i64, i64, i64);

/// A background parker: each park's latency (µs) with when it finished.
type Parker = tokio::task::JoinHandle<Result<Vec<(Instant, u32)>>>;

/// Latencies (µs) sorted into steps of the backlog by the count of rows parked when each call
/// finished, plus when each step completed.
struct Steps {
    step: u64,
    done: AtomicU64,
    finished_at: Mutex<Vec<Option<Instant>>>,
    sizes: Mutex<Vec<Option<Sizes>>>,
    probe: Mutex<Vec<Vec<u32>>>,
}

impl Steps {
    fn new(total: u64, step: u64) -> Arc<Self> {
        let n = usize::try_from(total.div_ceil(step)).unwrap_or(usize::MAX);
        Arc::new(Self {
            step,
            done: AtomicU64::new(0),
            finished_at: Mutex::new(vec![None; n]),
            sizes: Mutex::new(vec![None; n]),
            probe: Mutex::new(vec![Vec::new(); n]),
        })
    }

    /// Counts `rows` more parked; returns the step they fall in.
    fn add(&self, rows: u64, total: u64) -> usize {
        let before = self.done.fetch_add(rows, Ordering::Relaxed);
        let after = before + rows;
        if after / self.step > before / self.step || after >= total {
            let mut at = self.finished_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let complete = if after >= total { at.len() } else { usize::try_from(after / self.step).unwrap_or(0) };
            for slot in at.iter_mut().take(complete) {
                slot.get_or_insert_with(Instant::now);
            }
        }
        usize::try_from(before / self.step).unwrap_or(0)
    }

    fn current(&self) -> usize {
        usize::try_from(self.done.load(Ordering::Relaxed) / self.step).unwrap_or(0)
    }
}

async fn database() -> Result<(String, PgConnection)> {
    let admin_url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let base = admin_url.rsplit_once('/').ok_or("DATABASE_URL has no database name")?.0;
    let mut admin = PgConnection::connect(&admin_url).await?;
    let db = common::bench_database("dlq_bench_incident")?;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))).execute(&mut admin).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}"))).execute(&mut admin).await?;
    Ok((format!("{base}/{db}"), admin))
}

async fn reset(pool: &PgPool) -> Result<()> {
    sqlx::query("TRUNCATE dlq_events, dlq_attempts, dlq_audit, dlq_retriers, dlq_tallies RESTART IDENTITY")
        .execute(pool)
        .await?;
    Ok(())
}

/// Samples the table sizes each time a step completes, until `stop`.
fn watch_sizes(pool: PgPool, steps: Arc<Steps>, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Result<()>> {
    tokio::spawn(async move {
        let mut seen = 0;
        while !stop.load(Ordering::Relaxed) {
            let now = steps.current();
            if now > seen {
                let sizes: Sizes = sqlx::query_as(SIZES).fetch_one(&pool).await?;
                let mut all = steps.sizes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(slot) = all.get_mut(now - 1) {
                    *slot = Some(sizes);
                }
                seen = now;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    })
}

/// The claim probe: 100 due letters a second of their own type, claimed 50 at a time every
/// 500 ms and settled as succeeded; the claim's latency goes to the current step.
fn claim_probe(store: PgStore, steps: Arc<Steps>, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Result<()>> {
    tokio::spawn(async move {
        let trickle = tokio::spawn({
            let (store, stop) = (store.clone(), stop.clone());
            async move {
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                let mut id = 0;
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    id += 1;
                    store.park(letter("incident-probe", id, Duration::ZERO)).await?;
                }
                Ok::<_, dlq_core::Error>(())
            }
        });
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let request = ClaimRequest {
                event_types: vec!["incident-probe".into()],
                limit: 50,
                lease: Duration::from_secs(60),
                owner: "incident-probe".into(),
            };
            let start = Instant::now();
            let claimed = store.claim(request).await?;
            let took = micros(start.elapsed());
            {
                let mut probe = steps.probe.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let at = steps.current().min(probe.len() - 1);
                probe[at].push(took);
            }
            store.settle(claimed.iter().map(|c| Settlement::Succeeded { lease: c.lease }).collect()).await?;
        }
        trickle.await??;
        Ok(())
    })
}

/// Parks `total` failures, through the live path (`many == false`) or `park_many`; prints the
/// table of the steps.
async fn parks(url: &str, total: u64, step: u64, many: bool) -> Result<()> {
    let store = PgStore::connect_with(url, PgConfig::default()).await?;
    let pool = store.pool().clone();
    reset(&pool).await?;
    let steps = Steps::new(total, step);
    let stop = Arc::new(AtomicBool::new(false));
    let sizes = watch_sizes(pool.clone(), steps.clone(), stop.clone());
    let probe = claim_probe(store.clone(), steps.clone(), stop.clone());
    let dyn_store: Arc<dyn DeadLetterStore> = Arc::new(store.clone());
    let tasks: u64 = if many { 4 } else { PARKERS as u64 };
    let batch: u64 = if many { 1_000 } else { 1 };
    let next = Arc::new(AtomicU64::new(0));
    let wal_from: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text").fetch_one(&pool).await?;
    let start = Instant::now();
    let workers: Vec<_> = (0..tasks)
        .map(|_| {
            let (steps, next, store, dyn_store) = (steps.clone(), next.clone(), store.clone(), dyn_store.clone());
            tokio::spawn(async move {
                let mut latencies: Vec<Vec<u32>> = vec![Vec::new(); steps.probe.lock().map_or(0, |p| p.len())];
                loop {
                    let first = next.fetch_add(batch, Ordering::Relaxed);
                    if first >= total {
                        break;
                    }
                    let n = batch.min(total - first);
                    let took = if many {
                        let letters =
                            (first..first + n).map(|id| letter("incident", id, Duration::from_secs(3600))).collect();
                        let start = Instant::now();
                        store.park_many(letters).await?;
                        start.elapsed()
                    } else {
                        let event = payment(first);
                        let scope = dlq_core::Scope::new().store(dyn_store.clone());
                        let start = Instant::now();
                        let run = scope.run(pay(event)).await;
                        let took = start.elapsed();
                        if !matches!(run, Err(dlq_core::HandlerError::Parked { .. })) {
                            return Err(format!("not parked: {run:?}").into());
                        }
                        took
                    };
                    let at = steps.add(n, total);
                    let last = latencies.len() - 1;
                    latencies[at.min(last)].push(micros(took));
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(latencies)
            })
        })
        .collect();
    let mut latencies: Vec<Vec<u32>> = vec![Vec::new(); steps.probe.lock().map_or(0, |p| p.len())];
    for worker in workers {
        for (all, mine) in latencies.iter_mut().zip(worker.await??) {
            all.extend(mine);
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // the size watcher's last sample
    stop.store(true, Ordering::Relaxed);
    sizes.await??;
    probe.await??;
    let took = start.elapsed();
    let wal: f64 = sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8")
        .bind(&wal_from)
        .fetch_one(&pool)
        .await?;
    let what = if many { "park_many, 4 tasks × 1,000 letters a call" } else { "live handlers, 64 tasks" };
    #[allow(clippy::cast_precision_loss, reason = "a size for a table")]
    let wal_per_row = wal / total as f64;
    println!(
        "\n### Parking {} rows: {what} (total {:.0} s, {:.1}k rows/s, {wal_per_row:.0} bytes of WAL a row)\n",
        millions(total),
        took.as_secs_f64(),
        per_sec(total, took) / 1e3
    );
    println!(
        "| rows | rate | vs first step | park p50 | p99 | max | claim p50 / p99 | table B/row | indexes B/row | history B/row |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let finished = steps.finished_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let sizes = steps.sizes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let mut probes = steps.probe.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let mut previous = start;
    let mut first_rate = None;
    for (i, lat) in latencies.iter_mut().enumerate() {
        lat.sort_unstable();
        probes[i].sort_unstable();
        let end = finished[i].unwrap_or(previous);
        let rows = step.min(total - step * i as u64);
        let rate = per_sec(rows, end.duration_since(previous));
        previous = end;
        let first = *first_rate.get_or_insert(rate);
        let per_row = |bytes: i64, rows: i64| {
            #[allow(clippy::cast_precision_loss, reason = "a size for a table")]
            let r = bytes as f64 / rows.max(1) as f64;
            r
        };
        let (table, indexes, history) = sizes[i].map_or((f64::NAN, f64::NAN, f64::NAN), |(rows, t, ix, h)| {
            (per_row(t, rows), per_row(ix, rows), per_row(h, rows))
        });
        println!(
            "| {} | {:.1}k/s | {:.2}x | {:.1} ms | {:.1} ms | {:.0} ms | {:.1} / {:.1} ms | {table:.0} | {indexes:.0} | {history:.0} |",
            millions(step * i as u64 + rows),
            rate / 1e3,
            rate / first,
            quantile_ms(lat, 0.5),
            quantile_ms(lat, 0.99),
            quantile_ms(lat, 1.0),
            quantile_ms(&probes[i], 0.5),
            quantile_ms(&probes[i], 0.99),
        );
    }
    Ok(())
}

/// Fills `rows` rows of `event_type` in `status`, last changed `age` ago, one statement a step.
async fn fill(pool: &PgPool, event_type: &str, rows: u64, step: u64, status: &str, age: Duration) -> Result<Duration> {
    let start = Instant::now();
    let mut from = 1;
    while from <= rows {
        let to = (from + step - 1).min(rows);
        sqlx::query(FILL)
            .bind(event_type)
            .bind(i64::try_from(from)?)
            .bind(i64::try_from(to)?)
            .bind(status)
            .bind(age.as_secs_f64())
            .execute(pool)
            .await?;
        from = to + 1;
    }
    Ok(start.elapsed())
}

/// A drain child: a default retrier on the drain handler; prints its succeeded count every
/// 100 ms until its standard input closes.
async fn child(url: &str) -> Result<()> {
    let store = PgStore::connect_with(url, PgConfig::default()).await?;
    let retrier = Retrier::new(Arc::new(store), handlers![drained]?);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let (retrier, shutdown) = (retrier.clone(), shutdown.clone());
        async move { retrier.run_until(shutdown.cancelled_owned()).await }
    });
    let closed = Arc::new(AtomicBool::new(false));
    std::thread::spawn({
        let closed = closed.clone();
        move || {
            let mut sink = String::new();
            while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
            closed.store(true, Ordering::Relaxed);
        }
    });
    let mut out = std::io::stdout();
    while !closed.load(Ordering::Relaxed) && !running.is_finished() {
        use std::io::Write as _;
        let stats = retrier.stats();
        writeln!(out, "{} {}", stats.succeeded, stats.store_errors)?;
        out.flush()?;
        // Often enough that a 20,000-row burst (under a second) is timed to about 1 %.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.cancel();
    running.await??;
    Ok(())
}

/// Drain children reporting their counts; `Drainers::succeeded` sums their latest lines.
struct Drainers {
    children: Vec<Child>,
    counts: Vec<Arc<AtomicU64>>,
    /// Children that have reported at least once: connected, their retrier started.
    running: Arc<AtomicU64>,
}

impl Drainers {
    fn start(url: &str, n: usize) -> Result<Self> {
        let mut children = Vec::new();
        let mut counts = Vec::new();
        let running = Arc::new(AtomicU64::new(0));
        for _ in 0..n {
            let mut child = Command::new(std::env::current_exe()?)
                .env(CHILD, url)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()?;
            let count = Arc::new(AtomicU64::new(0));
            let stdout = child.stdout.take().ok_or("child without stdout")?;
            std::thread::spawn({
                let (count, running) = (count.clone(), running.clone());
                move || {
                    let mut lines = BufReader::new(stdout).lines().map_while(std::io::Result::ok).peekable();
                    if lines.peek().is_some() {
                        running.fetch_add(1, Ordering::Relaxed);
                    }
                    for line in lines {
                        if let Some(n) = line.split_whitespace().next().and_then(|n| n.parse().ok()) {
                            count.store(n, Ordering::Relaxed);
                        }
                    }
                }
            });
            children.push(child);
            counts.push(count);
        }
        Ok(Self { children, counts, running })
    }

    fn succeeded(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    fn stop(mut self) -> Result<()> {
        for child in &mut self.children {
            drop(child.stdin.take());
        }
        for mut child in self.children {
            if !child.wait()?.success() {
                return Err("a drain child failed".into());
            }
        }
        Ok(())
    }
}

/// Runs `drainers` children until `rows` succeeded; returns when each step completed.
async fn drain_once(url: &str, rows: u64, step: u64, drainers: usize) -> Result<Vec<Duration>> {
    let children = Drainers::start(url, drainers)?;
    // The clock starts once every process has connected and started its retrier.
    let spawned = Instant::now();
    while children.running.load(Ordering::Relaxed) < drainers as u64 {
        if spawned.elapsed() > Duration::from_secs(60) {
            return Err("a drain child did not start".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let start = Instant::now();
    let mut marks = Vec::new();
    loop {
        let done = children.succeeded();
        while marks.len() < usize::try_from(done.min(rows) / step)? {
            marks.push(start.elapsed());
        }
        if done >= rows {
            if !rows.is_multiple_of(step) {
                marks.push(start.elapsed());
            }
            break;
        }
        if start.elapsed() > Duration::from_secs(3600) {
            return Err("the drain stalled".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    children.stop()?;
    Ok(marks)
}

async fn drains(url: &str, total: u64, step: u64) -> Result<()> {
    let store = PgStore::connect_with(url, PgConfig::default()).await?;
    let pool = store.pool().clone();
    let counts: Vec<usize> = std::env::var("DLQ_INCIDENT_DRAINERS")
        .unwrap_or_else(|_| "1,2,4".to_owned())
        .split(',')
        .map(|n| n.trim().parse())
        .collect::<std::result::Result<_, _>>()?;
    for n in counts {
        // The burst takes under a second: the median of three.
        let mut bursts = Vec::new();
        for _ in 0..3 {
            reset(&pool).await?;
            fill(&pool, "incident-drain", 20_000, 20_000, "PENDING", Duration::ZERO).await?;
            bursts.push(per_sec(20_000, drain_once(url, 20_000, 20_000, n).await?[0]));
        }
        bursts.sort_by(f64::total_cmp);
        let burst_rate = bursts[1];
        reset(&pool).await?;
        let filled = fill(&pool, "incident-drain", total, step, "PENDING", Duration::ZERO).await?;
        let marks = drain_once(url, total, step, n).await?;
        let all = marks.last().copied().unwrap_or_default();
        println!(
            "\n### Drain of {} due rows by {n} retrier process{} (filled in {:.0} s; drained in {:.0} s, {:.1}k rows/s; burst of 20,000, median of 3: {:.1}k rows/s)\n",
            millions(total),
            if n == 1 { "" } else { "es" },
            filled.as_secs_f64(),
            all.as_secs_f64(),
            per_sec(total, all) / 1e3,
            burst_rate / 1e3,
        );
        println!("| rows drained | rate over the step | vs the 20,000-row burst |");
        println!("| ---: | ---: | ---: |");
        let mut previous = Duration::ZERO;
        for (i, mark) in marks.iter().enumerate() {
            let rows = step.min(total - step * i as u64);
            let rate = per_sec(rows, *mark - previous);
            previous = *mark;
            println!("| {} | {:.1}k/s | {:.2}x |", millions(step * i as u64 + rows), rate / 1e3, rate / burst_rate);
        }
    }
    Ok(())
}

/// Parks from 64 tasks until `stop`; returns each park's latency (µs) with when it finished.
fn background_parks(store: PgStore, stop: Arc<AtomicBool>) -> Vec<Parker> {
    (0..PARKERS as u64)
        .map(|t| {
            let (store, stop) = (store.clone(), stop.clone());
            tokio::spawn(async move {
                let mut out = Vec::new();
                let mut id = t << 40;
                while !stop.load(Ordering::Relaxed) {
                    id += 1;
                    let start = Instant::now();
                    store.park(letter("incident", id, Duration::from_secs(3600))).await?;
                    out.push((Instant::now(), micros(start.elapsed())));
                }
                Ok(out)
            })
        })
        .collect()
}

async fn purge(url: &str, total: u64, step: u64) -> Result<()> {
    let store = PgStore::connect_with(url, PgConfig::default()).await?;
    let pool = store.pool().clone();
    reset(&pool).await?;
    let month = Duration::from_secs(30 * 86_400);
    let filled = fill(&pool, "incident-drain", total, step, "SUCCEEDED", month).await?;
    let steps = Steps::new(1, 1);
    let stop = Arc::new(AtomicBool::new(false));
    let probe = claim_probe(store.clone(), steps.clone(), stop.clone());
    let parkers = background_parks(store.clone(), stop.clone());
    tokio::time::sleep(Duration::from_secs(10)).await; // parks before the purge: the baseline
    let purge_start = Instant::now();
    let purged = store.purge(Duration::from_secs(7 * 86_400)).await?;
    let purge_end = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut before, mut during) = (Vec::new(), Vec::new());
    for parker in parkers {
        for (at, took) in parker.await?? {
            if at < purge_start {
                before.push(took);
            } else if at <= purge_end {
                during.push(took);
            }
        }
    }
    probe.await??;
    before.sort_unstable();
    during.sort_unstable();
    let took = purge_end - purge_start;
    println!(
        "\n### Purge of {} finished rows while 64 tasks park (filled in {:.0} s; purged {purged} in {:.0} s, {:.1}k rows/s)\n",
        millions(total),
        filled.as_secs_f64(),
        took.as_secs_f64(),
        per_sec(purged, took) / 1e3
    );
    println!("| parks | count | rate | p50 | p99 | max |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (label, lat, span) in
        [("in the 10 s before", &before, Duration::from_secs(10)), ("during the purge", &during, took)]
    {
        println!(
            "| {label} | {} | {:.1}k/s | {:.1} ms | {:.1} ms | {:.0} ms |",
            lat.len(),
            per_sec(lat.len() as u64, span) / 1e3,
            quantile_ms(lat, 0.5),
            quantile_ms(lat, 0.99),
            quantile_ms(lat, 1.0)
        );
    }
    let mut claims = steps.probe.lock().unwrap_or_else(std::sync::PoisonError::into_inner)[0].clone();
    claims.sort_unstable();
    println!(
        "\nClaims of the probe over the whole run: {}, p50 {:.1} ms, p99 {:.1} ms, max {:.0} ms.",
        claims.len(),
        quantile_ms(&claims, 0.5),
        quantile_ms(&claims, 0.99),
        quantile_ms(&claims, 1.0)
    );
    Ok(())
}

/// The columns a bulk insert of the cost profile writes (a park's, without the optional ones).
const COST_INSERT: &str = "
INSERT INTO {table} (event_type, payload, error_class, error_kind, error_reason, error_chain, fingerprint,
    status, max_retries, retry_after)
SELECT t.event_type, t.payload, 'transient', t.kind, t.reason, t.chain, t.fingerprint, 'PENDING', 240,
    now() + interval '1 hour'
FROM unnest($1::text[], $2::jsonb[], $3::text[], $4::text[], $5::jsonb[], $6::text[])
    AS t(event_type, payload, kind, reason, chain, fingerprint)";

/// One variant of the cost profile: `insert` runs on `rows` rows; prints its line.
async fn cost_line<F, Fut>(label: &str, rows: u64, base: Option<f64>, insert: F) -> Result<f64>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let cpu = cpu_ticks();
    let start = Instant::now();
    insert().await?;
    let took = start.elapsed();
    let (own, postgres) = cpu_ticks();
    #[allow(clippy::cast_precision_loss, reason = "per-row figures for a table")]
    let per_row = |ticks: u64| ticks as f64 * 10_000.0 / rows as f64;
    #[allow(clippy::cast_precision_loss, reason = "per-row figures for a table")]
    let wall = took.as_secs_f64() * 1e6 / rows as f64;
    let delta = base.map_or(String::new(), |b| format!("{:+.1}", wall - b));
    println!(
        "| {label} | {:.1}k/s | {wall:.1} | {delta} | {:.1} | {:.1} |",
        per_sec(rows, took) / 1e3,
        per_row(own - cpu.0),
        per_row(postgres - cpu.1)
    );
    Ok(wall)
}

/// Inserts `rows` letters into `table`, 1,000 a statement, on one connection; `tail` ends the
/// statement (a conflict clause, a `RETURNING`).
async fn cost_insert(conn: &mut PgConnection, table: &str, rows: u64, wide: bool, tail: &str) -> Result<()> {
    let sql = format!("{}{tail}", COST_INSERT.replace("{table}", table));
    let mut from = 0;
    while from < rows {
        let ids: Vec<u64> = (from..(from + 1_000).min(rows)).collect();
        from += 1_000;
        let reasons: Vec<String> = ids.iter().map(|id| format!("ledger unavailable (503) for payment {id}")).collect();
        let payloads: Vec<serde_json::Value> =
            ids.iter().map(|id| if wide { payment(*id) } else { serde_json::json!({ "id": id }) }).collect();
        sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(vec!["incident"; ids.len()])
            .bind(payloads)
            .bind(vec!["io::Error"; ids.len()])
            .bind(&reasons)
            .bind(reasons.iter().map(|r| serde_json::json!([r])).collect::<Vec<_>>())
            .bind(vec!["0123456789abcdef"; ids.len()])
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// `COPY … FROM STDIN` (text format) of `rows` letters into `dlq_events`, 1,000 a COPY.
async fn cost_copy(conn: &mut PgConnection, rows: u64) -> Result<()> {
    let mut from = 0;
    while from < rows {
        let mut data = String::new();
        for id in from..(from + 1_000).min(rows) {
            use std::fmt::Write as _;
            let reason = format!("ledger unavailable (503) for payment {id}");
            writeln!(
                data,
                "incident\t{}\ttransient\tio::Error\t{reason}\t[\"{reason}\"]\t0123456789abcdef\tPENDING\t240",
                payment(id)
            )?;
        }
        from += 1_000;
        let mut copy = conn
            .copy_in_raw(
                "COPY dlq_events (event_type, payload, error_class, error_kind, error_reason, error_chain, \
                 fingerprint, status, max_retries) FROM STDIN",
            )
            .await?;
        copy.send(data.into_bytes()).await?;
        copy.finish().await?;
    }
    Ok(())
}

/// Where a bulk park's time goes: see the module's docs (`park_cost`).
async fn park_cost(url: &str) -> Result<()> {
    let rows = env_u64("DLQ_COST_ROWS", 100_000);
    let store = PgStore::connect_with(url, PgConfig::default()).await?;
    let pool = store.pool().clone();
    let mut conn = PgConnection::connect(url).await?;
    let indexes: Vec<(String, String)> = sqlx::query_as(
        "SELECT indexname::text, indexdef FROM pg_indexes WHERE tablename = 'dlq_events' AND indexname <> 'dlq_events_pkey'
         ORDER BY indexname",
    )
    .fetch_all(&mut conn)
    .await?;
    println!("\n### Where a bulk park's time goes ({rows} rows, 1,000 a statement, one connection)\n");
    println!("| insert into | rows/s | µs/row | vs the line above | client CPU µs/row | PostgreSQL CPU µs/row |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    sqlx::query("DROP TABLE IF EXISTS cost_t").execute(&mut conn).await?;
    sqlx::query("CREATE TABLE cost_t (LIKE dlq_events INCLUDING DEFAULTS)").execute(&mut conn).await?;
    let mut previous = cost_line("a bare copy of the table, narrow rows (`{\"id\": n}`)", rows, None, || {
        cost_insert(&mut conn, "cost_t", rows, false, "")
    })
    .await?;
    sqlx::query("TRUNCATE cost_t").execute(&mut conn).await?;
    previous = cost_line("a bare copy of the table (~170-byte payloads from here on)", rows, Some(previous), || {
        cost_insert(&mut conn, "cost_t", rows, true, "")
    })
    .await?;
    sqlx::query("TRUNCATE cost_t").execute(&mut conn).await?;
    sqlx::query("ALTER TABLE cost_t ADD PRIMARY KEY (id)").execute(&mut conn).await?;
    previous =
        cost_line("+ primary key", rows, Some(previous), || cost_insert(&mut conn, "cost_t", rows, true, "")).await?;
    for (name, def) in &indexes {
        sqlx::query("TRUNCATE cost_t").execute(&mut conn).await?;
        let def = def.replacen(&format!("INDEX {name} ON"), &format!("INDEX cost_{name} ON"), 1).replacen(
            "ON public.dlq_events ",
            "ON public.cost_t ",
            1,
        );
        sqlx::query(sqlx::AssertSqlSafe(def)).execute(&mut conn).await?;
        previous = cost_line(&format!("+ `{name}`"), rows, Some(previous), || {
            cost_insert(&mut conn, "cost_t", rows, true, "")
        })
        .await?;
    }
    sqlx::query("DROP TABLE cost_t").execute(&mut conn).await?;
    reset(&pool).await?;
    sqlx::query("ALTER TABLE dlq_events DISABLE TRIGGER USER").execute(&mut conn).await?;
    previous = cost_line("`dlq_events`, its tally triggers off", rows, Some(previous), || {
        cost_insert(&mut conn, "dlq_events", rows, true, "")
    })
    .await?;
    reset(&pool).await?;
    sqlx::query("ALTER TABLE dlq_events ENABLE TRIGGER USER").execute(&mut conn).await?;
    previous =
        cost_line("`dlq_events` with its tally triggers (a raw `INSERT … unnest`)", rows, Some(previous), || {
            cost_insert(&mut conn, "dlq_events", rows, true, "")
        })
        .await?;
    for (label, tail) in [
        (
            "+ `ON CONFLICT … DO NOTHING` on the live dedupe index (a park's)",
            " ON CONFLICT (event_type, dedupe_key) WHERE dedupe_key IS NOT NULL \
             AND status NOT IN ('SUCCEEDED', 'DISCARDED') DO NOTHING",
        ),
        ("+ `RETURNING` the row's id (and no conflict clause)", " RETURNING id"),
    ] {
        reset(&pool).await?;
        cost_line(label, rows, Some(previous), || cost_insert(&mut conn, "dlq_events", rows, true, tail)).await?;
    }
    reset(&pool).await?;
    previous =
        cost_line("`dlq_events` by `COPY` (text), triggers on", rows, Some(previous), || cost_copy(&mut conn, rows))
            .await?;
    reset(&pool).await?;
    cost_line("dlq's `park_many` (1,000 letters a call, one task)", rows, Some(previous), || async {
        let mut from = 0;
        while from < rows {
            let letters =
                (from..(from + 1_000).min(rows)).map(|id| letter("incident", id, Duration::from_secs(3600))).collect();
            from += 1_000;
            store.park_many(letters).await?;
        }
        Ok(())
    })
    .await?;
    reset(&pool).await?;
    Ok(())
}

/// A claim of `event_types` for up to 50 rows, as the retrier makes it; how long it took and
/// how many rows it claimed.
async fn timed_claim(store: &PgStore, event_type: &str) -> Result<(Duration, usize)> {
    let request = ClaimRequest {
        event_types: vec![event_type.into()],
        limit: 50,
        // Longer than the bench: a lease expiring mid-bench would be claimed again.
        lease: Duration::from_secs(3600),
        owner: "incident-foreign".into(),
    };
    let start = Instant::now();
    let claimed = store.claim(request).await?;
    Ok((start.elapsed(), claimed.len()))
}

/// Due rows of a type nobody claims (its circuit open, or no retrier handles it) in front of
/// another type's: per step of that backlog, the claim of one row of the other type, parked
/// just before (median and slowest of 5), and a claim of 50 of the backlog's own type.
async fn foreign(url: &str, total: u64, step: u64) -> Result<()> {
    let store = PgStore::connect_with(url, PgConfig::default()).await?;
    let pool = store.pool().clone();
    reset(&pool).await?;
    println!("\n### A claim behind due rows of a type nobody claims\n");
    println!(
        "| due rows of the unclaimed type | claim of 1 row of another type, median | slowest of 5 | claim of 50 of the unclaimed type |"
    );
    println!("| ---: | ---: | ---: | ---: |");
    let mut filled = 0;
    while filled < total {
        let rows = step.min(total - filled);
        fill(&pool, "incident", rows, rows, "PENDING", Duration::ZERO).await?;
        filled += rows;
        let mut quiet = Vec::new();
        for n in 0..5 {
            store.park(letter("incident-quiet", n, Duration::ZERO)).await?;
            let (took, claimed) = timed_claim(&store, "incident-quiet").await?;
            if claimed != 1 {
                return Err(format!("claimed {claimed} quiet rows, expected 1").into());
            }
            quiet.push(took);
        }
        quiet.sort();
        let (own, _) = timed_claim(&store, "incident").await?;
        println!(
            "| {} | {:.1} ms | {:.1} ms | {:.1} ms |",
            millions(filled),
            quiet[2].as_secs_f64() * 1e3,
            quiet[4].as_secs_f64() * 1e3,
            own.as_secs_f64() * 1e3
        );
    }
    reset(&pool).await?;
    Ok(())
}

async fn parent() -> Result<()> {
    let total = env_u64("DLQ_INCIDENT_ROWS", 10_000_000);
    let step = env_u64("DLQ_INCIDENT_STEP", 1_000_000).clamp(1, total.max(1));
    let (url, mut admin) = database().await?;
    drop(PgStore::connect_with(&url, PgConfig::default()).await?); // migrations, once
    let started = Instant::now();
    if selected("park") {
        parks(&url, total, step, false).await?;
    }
    if selected("park_many") {
        parks(&url, total, step, true).await?;
    }
    if selected("drain") {
        drains(&url, total, step).await?;
    }
    if selected("purge") {
        purge(&url, total, step).await?;
    }
    if selected("park_cost") {
        park_cost(&url).await?;
    }
    if selected("foreign") {
        foreign(&url, total, step).await?;
    }
    if std::env::var_os("DLQ_BENCH_KEEP").is_none() {
        let db = common::bench_database("dlq_bench_incident")?;
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")))
            .execute(&mut admin)
            .await?;
    }
    eprintln!("benchmark took {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn main() -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match std::env::var(CHILD) {
        Ok(url) => runtime.block_on(child(&url)),
        Err(_) => runtime.block_on(parent()),
    }
}
