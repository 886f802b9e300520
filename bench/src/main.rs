//! dlq against raw SQL and peer job queues on PostgreSQL, in one run (the targets of docs/DESIGN.md, "Performance targets").
//!
//! Run from the repository root:
//!
//! ```sh
//! cargo run --release -j1 --manifest-path bench/Cargo.toml
//! # quick: 2,000 jobs, one repetition, only raw SQL and dlq
//! cargo run --release -j1 --manifest-path bench/Cargo.toml -- --rows 2000 --reps 1 --peers raw,dlq
//! ```
//!
//! Scenarios, each on a fresh database (`dlq_bench_<peer>`, created and dropped through
//! `DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/postgres`) with the peer's own
//! migrations:
//! - **enqueue**: the peer's bulk enqueue (dlq: `park_many`), 1,000 jobs a call;
//! - **drain**: the jobs are enqueued (untimed), then a worker starts and the clock runs until
//!   the database shows every job done (polled every 20 ms); no VACUUM or ANALYZE in between,
//!   as after a real outage;
//! - **fail once**: the same, with a handler that fails each job's first attempt and succeeds
//!   on the second, with the peer's shortest backoff.
//!
//! Options (flags, or the environment variable in brackets): `--rows N` (`BENCH_ROWS`, 20000),
//! `--reps N` (`BENCH_REPS`, 3; medians are printed), `--peers a,b` (`BENCH_PEERS`; raw, limit (`limit.rs`), dlq,
//! dlq-db (dlq with `immediate-retries = 0`, fail_once only) and the peers compiled in; and, only
//! when named, dlq-pgbouncer: dlq with its pool through the PgBouncer at `DLQ_PGBOUNCER_URL`,
//! default `postgres://postgres@127.0.0.1:6432/postgres`, in front of the same server), `--scenarios a,b` (`BENCH_SCENARIOS`; enqueue, drain, fail_once).

mod common;
mod limit;
mod ours;
mod raw;

#[cfg(feature = "apalis")]
mod apalis_peer;
#[cfg(feature = "awa")]
mod awa_peer;
#[cfg(feature = "graphile")]
mod graphile;
#[cfg(feature = "sqlxmq")]
mod sqlxmq_peer;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Bench, Result};

/// A queue under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Peer {
    Raw,
    /// The rows into an unlogged, unindexed copy of the table (see `limit.rs`).
    Limit,
    Dlq,
    /// dlq with `immediate-retries = 0`: every attempt through the database (fail once only).
    DlqDb,
    /// dlq with its pool through PgBouncer in transaction mode (only when named).
    DlqPgBouncer,
    #[cfg(feature = "graphile")]
    Graphile,
    #[cfg(feature = "apalis")]
    Apalis,
    #[cfg(feature = "sqlxmq")]
    Sqlxmq,
    #[cfg(feature = "awa")]
    Awa,
}

impl Peer {
    const ALL: &[Peer] = &[
        Peer::Raw,
        Peer::Limit,
        Peer::Dlq,
        Peer::DlqDb,
        #[cfg(feature = "graphile")]
        Peer::Graphile,
        #[cfg(feature = "apalis")]
        Peer::Apalis,
        #[cfg(feature = "sqlxmq")]
        Peer::Sqlxmq,
        #[cfg(feature = "awa")]
        Peer::Awa,
    ];

    /// Peers run only when `--peers` names them.
    const ON_REQUEST: &[Peer] = &[Peer::DlqPgBouncer];

    fn name(self) -> &'static str {
        match self {
            Peer::Raw => "raw",
            Peer::Limit => "limit",
            Peer::Dlq => "dlq",
            Peer::DlqDb => "dlq-db",
            Peer::DlqPgBouncer => "dlq-pgbouncer",
            #[cfg(feature = "graphile")]
            Peer::Graphile => "graphile",
            #[cfg(feature = "apalis")]
            Peer::Apalis => "apalis",
            #[cfg(feature = "sqlxmq")]
            Peer::Sqlxmq => "sqlxmq",
            #[cfg(feature = "awa")]
            Peer::Awa => "awa",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Peer::Raw => "raw SQL (claim 50 SKIP LOCKED walking the index, complete by id array, 4 tasks)",
            Peer::Limit => limit::LABEL,
            Peer::Dlq => "dlq (park_many; PgRetrier, default RetrierConfig)",
            Peer::DlqDb => "dlq, every attempt through the database (immediate-retries 0)",
            Peer::DlqPgBouncer => "dlq through PgBouncer (transaction mode; `session_url` direct)",
            #[cfg(feature = "graphile")]
            Peer::Graphile => graphile::LABEL,
            #[cfg(feature = "apalis")]
            Peer::Apalis => apalis_peer::LABEL,
            #[cfg(feature = "sqlxmq")]
            Peer::Sqlxmq => sqlxmq_peer::LABEL,
            #[cfg(feature = "awa")]
            Peer::Awa => awa_peer::LABEL,
        }
    }

    async fn run(self, scenario: Scenario, bench: &Bench) -> Result<Option<Duration>> {
        match self {
            Peer::Raw => raw::run(scenario, bench).await,
            Peer::Limit => limit::run(scenario, bench).await,
            Peer::Dlq => ours::run(scenario, bench, true).await,
            Peer::DlqPgBouncer => ours::run_through_pgbouncer(scenario, bench).await,
            // Only a retry can differ from dlq's defaults.
            Peer::DlqDb if scenario != Scenario::FailOnce => Ok(None),
            Peer::DlqDb => ours::run(scenario, bench, false).await,
            #[cfg(feature = "graphile")]
            Peer::Graphile => graphile::run(scenario, bench).await,
            #[cfg(feature = "apalis")]
            Peer::Apalis => apalis_peer::run(scenario, bench).await,
            #[cfg(feature = "sqlxmq")]
            Peer::Sqlxmq => sqlxmq_peer::run(scenario, bench).await,
            #[cfg(feature = "awa")]
            Peer::Awa => awa_peer::run(scenario, bench).await,
        }
    }
}

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Scenario {
    Enqueue,
    Drain,
    FailOnce,
}

impl Scenario {
    const ALL: &[Scenario] = &[Scenario::Enqueue, Scenario::Drain, Scenario::FailOnce];

    fn name(self) -> &'static str {
        match self {
            Scenario::Enqueue => "enqueue",
            Scenario::Drain => "drain",
            Scenario::FailOnce => "fail_once",
        }
    }

    fn header(self) -> &'static str {
        match self {
            Scenario::Enqueue => "enqueue/park (bulk) jobs/s",
            Scenario::Drain => "burst drain jobs/s",
            Scenario::FailOnce => "fail once, then succeed jobs/s",
        }
    }
}

struct Options {
    rows: usize,
    reps: usize,
    peers: Vec<Peer>,
    scenarios: Vec<Scenario>,
}

fn options() -> Result<Options> {
    let mut values: BTreeMap<&str, String> = BTreeMap::new();
    for (key, var) in [("rows", "BENCH_ROWS"), ("reps", "BENCH_REPS"), ("peers", "BENCH_PEERS")] {
        if let Ok(v) = std::env::var(var) {
            values.insert(key, v);
        }
    }
    if let Ok(v) = std::env::var("BENCH_SCENARIOS") {
        values.insert("scenarios", v);
    }
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let key = match flag.as_str() {
            "--rows" => "rows",
            "--reps" => "reps",
            "--peers" => "peers",
            "--scenarios" => "scenarios",
            other => return Err(format!("unknown argument {other:?}; see the top of bench/src/main.rs").into()),
        };
        values.insert(key, args.next().ok_or_else(|| format!("{flag} needs a value"))?);
    }
    let number = |key: &str, default: usize| -> Result<usize> {
        values.get(key).map_or(Ok(default), |v| v.parse().map_err(|_| format!("--{key} {v:?} is not a number").into()))
    };
    let pick = |key: &str| -> Option<Vec<String>> {
        values.get(key).map(|v| v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect())
    };
    let peers = match pick("peers") {
        None => Peer::ALL.to_vec(),
        Some(names) => names
            .iter()
            .map(|n| {
                let known = Peer::ALL.iter().chain(Peer::ON_REQUEST);
                known.clone().copied().find(|p| p.name() == n).ok_or_else(|| {
                    let known: Vec<_> = known.map(|p| p.name()).collect();
                    format!("unknown or not compiled-in peer {n:?} (have: {})", known.join(", "))
                })
            })
            .collect::<std::result::Result<_, _>>()?,
    };
    let scenarios = match pick("scenarios") {
        None => Scenario::ALL.to_vec(),
        Some(names) => names
            .iter()
            .map(|n| {
                Scenario::ALL
                    .iter()
                    .copied()
                    .find(|s| s.name() == n)
                    .ok_or_else(|| format!("unknown scenario {n:?} (enqueue, drain, fail_once)"))
            })
            .collect::<std::result::Result<_, _>>()?,
    };
    let reps = number("reps", 3)?.max(1);
    Ok(Options { rows: number("rows", 20_000)?, reps, peers, scenarios })
}

fn rate(rows: usize, t: Duration) -> f64 {
    #[allow(clippy::cast_precision_loss, reason = "a rate for a table")]
    let rows = rows as f64;
    rows / t.as_secs_f64()
}

fn human(rate: f64) -> String {
    if rate >= 10_000.0 { format!("{:.1}k", rate / 1000.0) } else { format!("{rate:.0}") }
}

async fn main_async() -> Result<()> {
    let options = options()?;
    let bench = Bench::new(options.rows)?;
    let started = Instant::now();
    let mut medians: BTreeMap<(Peer, Scenario), Option<Duration>> = BTreeMap::new();
    for &scenario in &options.scenarios {
        // Repetitions interleave the peers, so that a noisy minute hurts them alike.
        let mut times: BTreeMap<Peer, Vec<Duration>> = BTreeMap::new();
        let mut unsupported = Vec::new();
        for rep in 0..options.reps {
            for &peer in &options.peers {
                if unsupported.contains(&peer) {
                    continue;
                }
                let took = peer
                    .run(scenario, &bench)
                    .await
                    .map_err(|e| format!("{} {}: {e}", peer.name(), scenario.name()))?;
                match took {
                    Some(t) => {
                        eprintln!(
                            "{:<9} {:<10} rep {}: {:>8.3} s  {:>8} jobs/s",
                            peer.name(),
                            scenario.name(),
                            rep + 1,
                            t.as_secs_f64(),
                            human(rate(options.rows, t))
                        );
                        times.entry(peer).or_default().push(t);
                    }
                    None => unsupported.push(peer),
                }
            }
        }
        for &peer in &options.peers {
            let median = times.get_mut(&peer).map(|ts| {
                ts.sort();
                ts[ts.len() / 2]
            });
            medians.insert((peer, scenario), median);
        }
    }
    print_table(&options, &medians);
    eprintln!("benchmark took {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn print_table(options: &Options, medians: &BTreeMap<(Peer, Scenario), Option<Duration>>) {
    println!(
        "\n{} jobs, median of {} repetitions; ratio = jobs/s ÷ raw SQL's in the same run\n",
        options.rows, options.reps
    );
    let headers: Vec<_> = options.scenarios.iter().map(|s| s.header()).collect();
    println!("| | {} |", headers.join(" | "));
    println!("| --- |{}", " ---: |".repeat(headers.len()));
    for &peer in &options.peers {
        let cells: Vec<String> = options
            .scenarios
            .iter()
            .map(|&scenario| {
                let Some(Some(t)) = medians.get(&(peer, scenario)) else { return "–".to_owned() };
                let r = rate(options.rows, *t);
                match medians.get(&(Peer::Raw, scenario)) {
                    Some(Some(raw)) if peer != Peer::Raw => {
                        format!("{} ({:.2}×)", human(r), r / rate(options.rows, *raw))
                    }
                    _ => human(r),
                }
            })
            .collect();
        println!("| {} | {} |", peer.label(), cells.join(" | "));
    }
}

fn main() -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(main_async())
}
