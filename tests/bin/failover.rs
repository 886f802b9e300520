//! The load of `scripts/failover.sh`: parkers and retriers on `PgStore` through PgBouncer while
//! the script crashes the primary and promotes its standby, then every caller's answer checked
//! against the rows of the last primary.
//!
//! `dlq-failover --mode sync|async --url <pool URL> --session-url <session URL>
//! --failover <command> [--seconds 64] [--failovers 4]`
//!
//! - Two parker processes' stores (one `PgStore` each), three parkers on each: every event
//!   goes through the live path (a `#[dead_letter]` handler that fails while parking) with its
//!   own dedupe key; a `ParkFailed` answer is a redelivery: the same event again, 50 ms later,
//!   until it is `Parked`.
//! - Two retriers (one `PgStore` each) run the same handler, which succeeds there and records
//!   each run in a ledger kept in this process (no database: it survives the failovers).
//! - `--failovers` times, evenly over `--seconds`, `<command>` is run (the script's `promote`).
//! - First, `PgConfig::durability_check(Refuse)` as `dlq_app` (no superuser): a park must be
//!   accepted with the synchronous standby, refused with the asynchronous one (both modes fail
//!   otherwise).
//!
//! Then the parkers stop, the retriers drain, and the driver prints: `Parked` answers without
//! a row, rows parked twice, rows stuck `PROCESSING` past their lease, retries lost or run
//! twice, how long parks and handler runs stopped at each failover, and whether each parker
//! and retrier recovered on its own. In sync mode it exits with 1 on a `Parked` answer without
//! its row, a second row for an event never answered `ParkFailed`, a stuck row, a retry lost or
//! a process that did not recover; async mode reports them. A second row after a lost answer
//! is counted, not failed on: the first row finished before the redelivery came, and a key
//! whose rows all finished does not swallow a failure (`docs/DESIGN.md`, one event, one row).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlq_core::{
    CancellationToken, ErrorClass, HandlerError, Payload, Retrier, RetrierConfig, Scope, adapter::DeadReason,
    classify::FailureInfo, dead_letter, handlers, store::NewDeadLetter, store::prelude::*,
};
use dlq_sqlx::postgres::DurabilityCheck;
use dlq_sqlx::{PgConfig, PgStore};
use tokio::time::Instant;

tokio::task_local! {
    /// Set while a parker calls the handler: it fails there (the event is parked), and
    /// succeeds when a retrier runs it.
    static PARKING: ();
}

/// How many times the retriers ran each event (by dedupe key).
static LEDGER: Mutex<Option<HashMap<String, u32>>> = Mutex::new(None);

#[dead_letter(event_type = "failover-job", max_retries = 1000, backoff = "none")]
async fn failover_job(key: String) -> Result<(), std::io::Error> {
    if PARKING.try_with(|()| ()).is_ok() {
        return Err(std::io::Error::other("downstream unavailable"));
    }
    *LEDGER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get_or_insert_default()
        .entry(key)
        .or_default() += 1;
    Ok(())
}

const PARKERS_PER_STORE: usize = 3;
const PARKER_STORES: usize = 2;
const RETRIERS: usize = 2;
const LEASE: Duration = Duration::from_secs(5);

struct Args {
    sync: bool,
    url: String,
    session_url: String,
    failover: String,
    seconds: u64,
    failovers: u32,
}

fn args() -> Result<Args, String> {
    let mut parsed = Args {
        sync: false,
        url: String::new(),
        session_url: String::new(),
        failover: String::new(),
        seconds: 64,
        failovers: 4,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--mode" => parsed.sync = value == "sync",
            "--url" => parsed.url = value,
            "--session-url" => parsed.session_url = value,
            "--failover" => parsed.failover = value,
            "--seconds" => parsed.seconds = value.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--failovers" => parsed.failovers = value.parse().map_err(|e| format!("--failovers: {e}"))?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if parsed.url.is_empty() || parsed.session_url.is_empty() || parsed.failover.is_empty() {
        return Err("usage: dlq-failover --mode sync|async --url URL --session-url URL --failover COMMAND".into());
    }
    Ok(parsed)
}

/// What the callers were answered, in seconds since the start.
#[derive(Default)]
struct Answers {
    /// Key, row id, answered at.
    parked: Vec<(String, i64, f64)>,
    /// Parker, answered at.
    failed: Vec<(usize, f64)>,
    /// The events answered `ParkFailed` at least once.
    failed_keys: Vec<String>,
    /// Parker of each `Parked` answer, answered at.
    parked_by: Vec<(usize, f64)>,
    /// Events given up on (never `Parked`): the load ended while their store was down.
    abandoned: Vec<String>,
    /// Answers other than `Parked` and `ParkFailed`.
    unexpected: Vec<String>,
}

async fn parker(n: usize, store: Arc<PgStore>, answers: Arc<Mutex<Answers>>, stop: CancellationToken, epoch: Instant) {
    let record = |f: &mut dyn FnMut(&mut Answers)| f(&mut answers.lock().unwrap_or_else(|e| e.into_inner()));
    for i in 0.. {
        if stop.is_cancelled() {
            return;
        }
        let key = format!("p{n}-{i}");
        loop {
            let scope = Scope::new().store(store.clone()).dedupe_key(key.clone());
            let answer = PARKING.scope((), scope.run(failover_job(key.clone()))).await;
            let at = epoch.elapsed().as_secs_f64();
            match answer {
                Err(HandlerError::Parked { id, .. }) => {
                    record(&mut |a| {
                        a.parked.push((key.clone(), id, at));
                        a.parked_by.push((n, at));
                    });
                    break;
                }
                Err(HandlerError::ParkFailed { .. }) => {
                    record(&mut |a| {
                        a.failed.push((n, at));
                        a.failed_keys.push(key.clone());
                    });
                    if stop.is_cancelled() {
                        // Not `Parked`: not acknowledged upstream, the broker keeps it.
                        record(&mut |a| a.abandoned.push(key.clone()));
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => {
                    record(&mut |a| a.unexpected.push(format!("{other:?}")));
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A failover the script ran: started, switched (PgBouncer on the new primary), standby back.
struct Failover {
    start: f64,
    end: f64,
}

async fn run_failover(command: &str, epoch: Instant) -> Result<Failover, String> {
    let start = epoch.elapsed().as_secs_f64();
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .status()
        .await
        .map_err(|e| format!("could not run the failover command: {e}"))?;
    if !status.success() {
        return Err(format!("the failover command failed: {status}"));
    }
    Ok(Failover { start, end: epoch.elapsed().as_secs_f64() })
}

type PgRetrier = Arc<Retrier<PgStore>>;

/// The longest time between two of `times` (ascending), counted from the last one at or before
/// `from`, and to the end of the window (the last time) only: a gap must close to count.
fn longest_gap(times: &[f64], from: f64) -> f64 {
    let start = times.iter().rposition(|t| *t <= from).unwrap_or(0);
    times[start..].windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn store(args: &Args) -> Result<Arc<PgStore>, String> {
    let config = PgConfig::default().park_timeout(Duration::from_secs(3)).session_url(args.session_url.as_str());
    PgStore::connect_with(&args.url, config).await.map(Arc::new).map_err(|e| format!("store: {e}"))
}

/// `PgConfig::durability_check(Refuse)` as `dlq_app`, a role without privileges beyond the
/// tables: a park must be accepted with a synchronous standby, refused without. Whether it was.
async fn check_durability(args: &Args) -> Result<bool, String> {
    // The schema, and the tables for dlq_app.
    let store = store(args).await?;
    sqlx::raw_sql(
        "GRANT ALL ON ALL TABLES IN SCHEMA public TO dlq_app; GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO dlq_app",
    )
    .execute(store.pool())
    .await
    .map_err(|e| format!("granting dlq_app the tables: {e}"))?;
    let as_app = |url: &str| url.replacen("postgres@", "dlq_app@", 1);
    let config = PgConfig::default()
        .durability_check(DurabilityCheck::Refuse)
        .run_migrations(false)
        .session_url(as_app(&args.session_url));
    let probe = PgStore::connect_with(&as_app(&args.url), config).await.map_err(|e| format!("store: {e}"))?;
    let failure = FailureInfo::new(ErrorClass::Permanent, "probe", "durability".into(), vec![], None);
    let letter = NewDeadLetter::new("failover-probe", Payload::Json(serde_json::json!(1)), failure)
        .retry(Duration::ZERO, 0)
        .dead(DeadReason::Permanent);
    let answer = probe.park(letter).await;
    let refused = matches!(&answer, Err(dlq_core::Error::Config { key, .. }) if key == "durability_check");
    let expected = if args.sync { answer.is_ok() } else { refused };
    let said = match &answer {
        Ok(_) => "accepted".to_owned(),
        Err(error) => format!("refused: {error}"),
    };
    println!("durability check (Refuse, as dlq_app): {}", said.chars().take(300).collect::<String>());
    Ok(expected)
}

#[allow(clippy::too_many_lines, reason = "one run, read top to bottom")]
async fn run() -> Result<bool, String> {
    let args = args()?;
    let durability_ok = check_durability(&args).await?;
    let epoch = Instant::now();
    let answers = Arc::new(Mutex::new(Answers::default()));
    let stop_parking = CancellationToken::new();
    let stop_retrying = CancellationToken::new();

    let mut retriers: Vec<PgRetrier> = Vec::new();
    let mut retrier_tasks = Vec::new();
    for n in 0..RETRIERS {
        let mut config = RetrierConfig::default();
        config.lease = LEASE;
        config.batch_size = 50;
        config.poll_interval = Duration::from_millis(200);
        config.heartbeat = Duration::from_secs(1);
        config.shutdown_grace = Duration::from_secs(5);
        config.owner = format!("failover-retrier-{n}");
        let handlers = handlers![failover_job].map_err(|e| e.to_string())?;
        let retrier = Arc::new(Retrier::new(store(&args).await?, handlers).config(config));
        retriers.push(Arc::clone(&retrier));
        let stop = stop_retrying.clone();
        retrier_tasks.push(tokio::spawn(async move {
            let result = retrier.run_until(stop.cancelled_owned()).await;
            (result.map(|_| ()).map_err(|e| e.to_string()), epoch.elapsed().as_secs_f64())
        }));
    }
    // When each retrier's handler runs succeeded, sampled every 50 ms: (seconds, counts).
    let samples = Arc::new(Mutex::new(Vec::<(f64, Vec<u64>)>::new()));
    let sampler = {
        let (samples, retriers, stop) = (Arc::clone(&samples), retriers.clone(), stop_retrying.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let counts = retriers.iter().map(|r| r.stats().succeeded).collect();
                samples.lock().unwrap_or_else(|e| e.into_inner()).push((epoch.elapsed().as_secs_f64(), counts));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let mut parkers = Vec::new();
    for s in 0..PARKER_STORES {
        let store = store(&args).await?;
        for p in 0..PARKERS_PER_STORE {
            let (store, answers, stop) = (Arc::clone(&store), Arc::clone(&answers), stop_parking.clone());
            parkers.push(tokio::spawn(parker(s * PARKERS_PER_STORE + p, store, answers, stop, epoch)));
        }
    }

    let mut failovers = Vec::new();
    let every = args.seconds as f64 / f64::from(args.failovers + 1);
    for k in 1..=args.failovers {
        tokio::time::sleep_until(epoch + Duration::from_secs_f64(every * f64::from(k))).await;
        failovers.push(run_failover(&args.failover, epoch).await?);
    }
    tokio::time::sleep_until(epoch + Duration::from_secs(args.seconds)).await;
    stop_parking.cancel();
    for parker in parkers {
        parker.await.map_err(|e| format!("a parker panicked: {e}"))?;
    }
    let load_end = epoch.elapsed().as_secs_f64();

    // The retriers drain what is left (a row whose outcome a failover lost runs again once
    // its lease ends).
    let options: sqlx::postgres::PgConnectOptions = args.url.parse().map_err(|e| format!("--url: {e}"))?;
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect_lazy_with(options);
    let drain_deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let open: Result<i64, _> = sqlx::query_scalar(
            "SELECT count(*) FROM dlq_events WHERE event_type = 'failover-job' AND status <> 'SUCCEEDED'",
        )
        .fetch_one(&pool)
        .await;
        if matches!(open, Ok(0)) || Instant::now() > drain_deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drained = epoch.elapsed().as_secs_f64() - load_end;
    stop_retrying.cancel();
    let mut retrier_ends = Vec::new();
    for task in retrier_tasks {
        retrier_ends.push(task.await.map_err(|e| format!("a retrier panicked: {e}"))?);
    }
    let _ = sampler.await;

    // The rows of the last primary.
    type Row = (i64, Option<String>, String, bool);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, dedupe_key, status, status = 'PROCESSING' AND lease_until < now() \
         FROM dlq_events WHERE event_type = 'failover-job'",
    )
    .fetch_all(&pool)
    .await
    .map_err(|e| format!("reading the rows of the new primary: {e}"))?;
    pool.close().await;

    let answers = std::mem::take(&mut *answers.lock().unwrap_or_else(|e| e.into_inner()));
    let ledger = LEDGER.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_default();
    let mut rows_by_key: HashMap<&str, Vec<i64>> = HashMap::new();
    for (id, key, ..) in &rows {
        rows_by_key.entry(key.as_deref().unwrap_or("")).or_default().push(*id);
    }
    let ids: HashSet<i64> = rows.iter().map(|r| r.0).collect();
    let lost: Vec<&(String, i64, f64)> = answers.parked.iter().filter(|(_, id, _)| !ids.contains(id)).collect();
    let twice = rows_by_key.values().filter(|ids| ids.len() > 1).count();
    // A second row is what a redelivery parks when the first park's answer was lost
    // (`ParkFailed`) and its row finished before the redelivery came: a key whose rows all
    // finished does not swallow a failure. Without a `ParkFailed` it would be a duplicate.
    let failed_keys: HashSet<&str> = answers.failed_keys.iter().map(String::as_str).collect();
    let twice_unexplained =
        rows_by_key.iter().filter(|(key, ids)| ids.len() > 1 && !failed_keys.contains(**key)).count();
    let stuck = rows.iter().filter(|r| r.3).count();
    let unfinished = rows.iter().filter(|r| r.2 != "SUCCEEDED").count();
    let parked_keys: HashSet<&str> = answers.parked.iter().map(|(k, ..)| k.as_str()).collect();
    let retries_lost = parked_keys.iter().filter(|k| ledger.get(**k).copied().unwrap_or(0) == 0).count();
    let ran_twice =
        ledger.iter().filter(|(k, runs)| **runs as usize > rows_by_key.get(k.as_str()).map_or(1, Vec::len)).count();

    println!();
    println!(
        "{} replication, {:.0} s of load, {} failovers",
        if args.sync { "synchronous" } else { "asynchronous" },
        load_end,
        failovers.len()
    );
    println!("  {:<58} {}", "Parked answers", answers.parked.len());
    println!("  {:<58} {}", "ParkFailed answers (each redelivered)", answers.failed.len());
    println!("  {:<58} {}", "rows on the last primary", rows.len());
    println!("  {:<58} {}", "Parked answers without their row", lost.len());
    println!("  {:<58} {}", "events with two rows (answer lost, row done, redelivered)", twice);
    println!("  {:<58} {}", "  of them, never answered ParkFailed (duplicates)", twice_unexplained);
    println!("  {:<58} {}", "rows stuck PROCESSING past their lease", stuck);
    println!("  {:<58} {}", "rows not SUCCEEDED after the drain", unfinished);
    println!("  {:<58} {}", "retries lost (Parked, handler never ran)", retries_lost);
    println!("  {:<58} {}", "retries run twice (more runs than rows)", ran_twice);
    println!("  {:<58} {}", "events given up at the end (never Parked, not acked)", answers.abandoned.len());
    println!("  {:<58} {}", "unexpected answers", answers.unexpected.len());
    println!("  {:<58} {:.1} s", "drain after the load", drained);
    let mut recovered = answers.unexpected.is_empty();
    for (k, f) in failovers.iter().enumerate() {
        let next = failovers.get(k + 1).map_or(load_end, |n| n.start);
        // The longest stretch without a `Parked` answer, and each retrier's without a handler
        // run, from the last one before the crash until the next failover.
        let mut parked: Vec<f64> = answers.parked_by.iter().map(|(_, at)| *at).filter(|at| *at < next).collect();
        parked.sort_by(f64::total_cmp);
        let parks_down = longest_gap(&parked, f.start);
        let failed = answers.failed.iter().filter(|(_, at)| *at >= f.start && *at < next).count();
        let samples = samples.lock().unwrap_or_else(|e| e.into_inner());
        let runs_down: Vec<String> = (0..RETRIERS)
            .map(|r| {
                let ran: Vec<f64> =
                    samples.windows(2).filter(|w| w[1].1[r] > w[0].1[r] && w[1].0 < next).map(|w| w[1].0).collect();
                format!("{:.1} s", longest_gap(&ran, f.start))
            })
            .collect();
        let lost_here: Vec<f64> = lost
            .iter()
            .filter(|(_, _, at)| *at <= f.start && k.checked_sub(1).is_none_or(|p| *at > failovers[p].start))
            .map(|(_, _, at)| f.start - at)
            .collect();
        println!(
            "  failover {} at {:.1} s (standby back after {:.1} s): no Parked answer for {:.1} s ({} ParkFailed), \
             no handler run for {}{}",
            k + 1,
            f.start,
            f.end - f.start,
            parks_down,
            failed,
            runs_down.join(" / "),
            if lost_here.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} Parked answers lost, given {:.3}-{:.3} s before the crash",
                    lost_here.len(),
                    lost_here.iter().copied().fold(f64::MAX, f64::min),
                    lost_here.iter().copied().fold(0.0, f64::max)
                )
            }
        );
    }
    let last = failovers.last().map_or(0.0, |f| f.end);
    for n in 0..PARKER_STORES * PARKERS_PER_STORE {
        if !answers.parked_by.iter().any(|(p, at)| *p == n && *at > last) {
            println!("  parker {n} did not recover: no Parked answer after the last failover");
            recovered = false;
        }
    }
    let samples = samples.lock().unwrap_or_else(|e| e.into_inner());
    for (r, (end, at)) in retrier_ends.iter().enumerate() {
        let before = samples.iter().rev().find(|(t, _)| *t <= last).map_or(0, |(_, c)| c[r]);
        let ran = samples.iter().any(|(t, c)| *t > last && c[r] > before);
        if let Err(error) = end {
            println!("  retrier {r} stopped at {at:.1} s: {error}");
            recovered = false;
        } else if !ran {
            println!("  retrier {r} did not recover: no handler run after the last failover");
            recovered = false;
        }
    }
    println!(
        "  {:<58} {}",
        "every parker and retrier recovered without a restart",
        if recovered { "yes" } else { "no" }
    );
    if !durability_ok {
        println!("  the durability check answered otherwise than this mode needs");
    }
    for unexpected in answers.unexpected.iter().take(3) {
        println!("  unexpected: {}", unexpected.chars().take(300).collect::<String>());
    }
    if !durability_ok {
        return Ok(false);
    }
    let clean =
        lost.is_empty() && twice_unexplained == 0 && stuck == 0 && retries_lost == 0 && unfinished == 0 && recovered;
    if args.sync && !clean {
        println!("FAILED: synchronous replication must keep every Parked answer, once, and recover");
        return Ok(false);
    }
    Ok(true)
}
