//! Four OS processes run `dlq_core::Retrier` on a `PgStore` against one PostgreSQL database holding
//! 10,000 due rows. One is killed with SIGKILL mid-batch; another is stopped with SIGSTOP past
//! its lease and then continued. At the end every row is `SUCCEEDED` or dead as its handler
//! dictated, none is stuck or lost, every event ran at least once, no row got two final
//! outcomes, and the stopped process wrote no outcome for the claims it held when its lease
//! ran out.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use dlq_core::{ErrorClass, Payload, classify::FailureInfo, store::NewDeadLetter, store::prelude::*};
use dlq_sqlx::{PgConfig, PgStore};
use serde_json::json;
use sqlx::PgPool;
use sqlx::types::chrono::{DateTime, Utc};
use support::{ClaimLog, eventually};

const ROWS: i64 = 10_000;
const LEASE_MS: u64 = 1_500;

struct Worker {
    child: Child,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Worker {
    /// A failing assertion must not leave retrier processes behind.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Worker {
    fn start(url: &str) -> Self {
        Self::start_with(url, &[])
    }

    fn start_with(url: &str, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dlq-mp-worker"))
            .args([url, &LEASE_MS.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("worker starts");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("worker says ready");
        assert_eq!(line.trim(), "ready");
        Self { child, stdout }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn owner(&self) -> String {
        format!("mp-worker-{}", self.pid())
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill").args(["-s", sig, &self.pid().to_string()]).status().expect("kill runs");
        assert!(status.success(), "kill -s {sig}");
    }

    /// SIGTERM, then the stats line the worker prints on its way out.
    fn stop(mut self) -> serde_json::Value {
        self.signal("TERM");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("stats line");
        assert!(self.child.wait().expect("worker exits").success());
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("stats {line:?}: {e}"))
    }
}

async fn count(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// A claim a worker holds: the row, when it was claimed, until when.
type Held = (i64, DateTime<Utc>, DateTime<Utc>);

async fn held_by(pool: &PgPool, owner: &str) -> Vec<Held> {
    sqlx::query_as(
        "SELECT id, last_attempt_at, lease_until FROM dlq_events WHERE status = 'PROCESSING' AND lease_owner = $1",
    )
    .bind(owner)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Whether every thread of process `pid` is stopped (`T` in `/proc/<pid>/task/*/stat`).
fn is_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().all(|task| {
        // The state follows the command name, which is in parentheses.
        std::fs::read_to_string(task.path().join("stat"))
            .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with(['T', 't'])))
    })
}

/// How many of the rows `ids` are still held by `owner`.
async fn still_held(pool: &PgPool, ids: &[i64], owner: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM dlq_events WHERE id = ANY($1) AND status = 'PROCESSING' AND lease_owner = $2",
    )
    .bind(ids)
    .bind(owner)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// How many of the `held` claims of `owner` ended without an outcome of `owner`'s (no attempt
/// of its since the claim): another worker took them over, and `owner` has yet to try to
/// write their outcome.
async fn taken_over(store: &PgStore, held: &[Held], owner: &str) -> usize {
    let mut n = 0;
    for (id, claimed_at, _) in held {
        let attempts = store.attempts(*id).await.unwrap();
        if !attempts.iter().any(|a| a.owner.as_deref() == Some(owner) && a.at >= *claimed_at) {
            n += 1;
        }
    }
    n
}

async fn wait_until(pool: &PgPool, sql: &'static str, min: i64, limit: Duration) {
    let start = Instant::now();
    while count(pool, sql).await < min {
        assert!(start.elapsed() < limit, "timed out waiting for {sql} >= {min}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn seed(pool: &PgPool) -> PgStore {
    let store = PgStore::from_pool(pool.clone(), PgConfig::default()).await.expect("store and migrations");
    sqlx::query("CREATE TABLE mp_runs (dlq_id BIGINT NOT NULL, pid BIGINT NOT NULL, retry_count BIGINT NOT NULL)")
        .execute(pool)
        .await
        .unwrap();
    for chunk in (0..ROWS).collect::<Vec<_>>().chunks(1_000) {
        let letters = chunk
            .iter()
            .map(|n| {
                let payload = json!({ "n": n, "fail_first": n % 5 == 0, "poison": n % 97 == 0 });
                let failure = FailureInfo::new(ErrorClass::Transient, "Seed", "first failure".into(), vec![], None);
                NewDeadLetter::new("mp-job", Payload::Json(payload), failure).retry(Duration::ZERO, 5)
            })
            .collect();
        store.park_many(letters).await.expect("seed park");
    }
    store
}

fn url_of(db: &str) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL is set by scripts/test.sh");
    let (prefix, _) = base.rsplit_once('/').expect("DATABASE_URL has a database name");
    format!("{prefix}/{db}")
}

#[sqlx::test(migrations = false)]
async fn four_processes_lose_nothing_under_sigkill_and_sigstop(pool: PgPool) {
    let store = seed(&pool).await;
    let db: String = sqlx::query_scalar("SELECT current_database()").fetch_one(&pool).await.unwrap();
    let url = url_of(&db);
    let mut workers: Vec<Worker> = (0..4).map(|_| Worker::start(&url)).collect();

    // SIGKILL one worker while it holds a batch.
    wait_until(&pool, "SELECT count(*) FROM dlq_events WHERE status = 'SUCCEEDED'", 1_000, Duration::from_secs(60))
        .await;
    let mut killed = workers.remove(0);
    let killed_owner = killed.owner();
    killed.child.kill().expect("SIGKILL");
    killed.child.wait().expect("reaped");
    let orphaned = held_by(&pool, &killed_owner).await;

    // SIGSTOP another while it holds rows, until its lease has run out and other workers have
    // taken over rows whose outcome it has yet to write; then SIGCONT.
    let stopped = &workers[0];
    let stopped_owner = stopped.owner();
    let mut held = Vec::new();
    for _ in 0..100 {
        stopped.signal("STOP");
        eventually("the worker to stop", || async { is_stopped(stopped.pid()) }).await;
        let holding = held_by(&pool, &stopped_owner).await;
        if !holding.is_empty() {
            // Each row it holds is settled by a statement it sent just before it stopped (which
            // still commits), or claimed by another worker once the lease has run out.
            let ids: Vec<i64> = holding.iter().map(|(id, _, _)| *id).collect();
            eventually("the stopped worker's rows to be settled or taken over", || async {
                still_held(&pool, &ids, &stopped_owner).await == 0
            })
            .await;
            if taken_over(&store, &holding, &stopped_owner).await > 0 {
                held = holding;
                break;
            }
        }
        stopped.signal("CONT");
        eventually("the worker to go on", || async { !is_stopped(stopped.pid()) }).await;
    }
    assert!(!held.is_empty(), "the stopped worker never held a row past its lease");
    stopped.signal("CONT");

    wait_until(
        &pool,
        "SELECT CASE WHEN count(*) = 0 THEN 1::bigint ELSE 0::bigint END FROM dlq_events WHERE status IN ('PENDING', 'PROCESSING')",
        1,
        Duration::from_secs(180),
    )
    .await;
    let stats: Vec<serde_json::Value> = workers.into_iter().map(Worker::stop).collect();

    let poison = (0..ROWS).filter(|n| n % 97 == 0).count() as i64;
    assert_eq!(count(&pool, "SELECT count(*) FROM dlq_events").await, ROWS, "no row lost");
    assert_eq!(count(&pool, "SELECT count(*) FROM dlq_events WHERE status = 'SUCCEEDED'").await, ROWS - poison);
    let dead = "SELECT count(*) FROM dlq_events WHERE status = 'FAILED_PERMANENTLY' AND dead_reason = 'permanent'";
    assert_eq!(count(&pool, dead).await, poison, "poison rows dead as their handler said");
    let flaky = "SELECT count(*) FROM dlq_events WHERE (payload->>'fail_first')::bool AND NOT (payload->>'poison')::bool AND retry_count < 1";
    assert_eq!(count(&pool, flaky).await, 0, "fail-first rows failed once, then succeeded");
    assert_eq!(count(&pool, "SELECT count(DISTINCT dlq_id) FROM mp_runs").await, ROWS, "every event ran at least once");
    // One final outcome per row, and none written by the stopped worker for the claims it held
    // when its lease ran out (the attempt history names who ran each attempt).
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM dlq_events").fetch_all(&pool).await.unwrap();
    for id in ids {
        let attempts = store.attempts(id).await.unwrap();
        let finals = attempts.iter().filter(|a| a.outcome == "succeeded" || a.outcome == "dead").count();
        assert_eq!(finals, 1, "row {id} has {finals} final outcomes: {attempts:?}");
    }
    for (id, claimed_at, lease_until) in &held {
        // The final write came from a later claim, or from this one while its lease held.
        let (last_claim, written): (DateTime<Utc>, DateTime<Utc>) =
            sqlx::query_as("SELECT last_attempt_at, updated_at FROM dlq_events WHERE id = $1")
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap();
        let stale = last_claim == *claimed_at && written > *lease_until;
        assert!(!stale, "row {id}: outcome written at {written} under a lease that expired at {lease_until}");
    }
    assert!(stats[0]["fenced"].as_u64().unwrap() >= 1, "the stopped worker's late outcomes were fenced: {stats:?}");
    // The killed worker's rows were reclaimed by others after its lease expired.
    for (id, _, _) in &orphaned {
        let status: String =
            sqlx::query_scalar("SELECT status FROM dlq_events WHERE id = $1").bind(id).fetch_one(&pool).await.unwrap();
        assert!(status == "SUCCEEDED" || status == "FAILED_PERMANENTLY", "row {id} is {status}");
    }
}

/// Four retrier processes keep one type's `max-concurrent = 4` and `max-rate = 40` together
/// (the store's capped claims), on the database's clock: never more than 4 handlers at once
/// (counted from the handler side) and never more than 40 rows claimed in any one-second
/// window (counted from the claims: when a handler starts after its claim depends on how busy
/// the machine is).
#[sqlx::test(migrations = false)]
async fn four_processes_keep_a_types_limits_together(pool: PgPool) {
    const LIMITED: i64 = 200;
    let store = PgStore::from_pool(pool.clone(), PgConfig::default()).await.expect("store and migrations");
    sqlx::query(
        "CREATE TABLE mp_limited (dlq_id BIGINT PRIMARY KEY, started_at TIMESTAMPTZ NOT NULL, ended_at TIMESTAMPTZ)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let db: String = sqlx::query_scalar("SELECT current_database()").fetch_one(&pool).await.unwrap();
    let url = url_of(&db);
    let workers: Vec<Worker> = (0..4).map(|_| Worker::start_with(&url, &["limited"])).collect();
    let claims = ClaimLog::start(&pool).await;
    let failure = FailureInfo::new(ErrorClass::Transient, "Seed", "first failure".into(), vec![], None);
    let letters = (0..LIMITED)
        .map(|n| NewDeadLetter::new("mp-limited", Payload::Json(json!(n)), failure.clone()).retry(Duration::ZERO, 3))
        .collect();
    store.park_many(letters).await.unwrap();
    wait_until(&pool, "SELECT count(*) FROM mp_limited WHERE ended_at IS NOT NULL", LIMITED, Duration::from_secs(60))
        .await;
    for worker in workers {
        worker.stop();
    }
    let most_at_once = count(
        &pool,
        "SELECT max((SELECT count(*) FROM mp_limited b WHERE b.started_at <= a.started_at AND b.ended_at > a.started_at)) \
         FROM mp_limited a",
    )
    .await;
    let (claimed, busiest_second) = claims.read(&pool).await;
    let pids = count(&pool, "SELECT count(DISTINCT lease_owner) FROM dlq_events WHERE event_type = 'mp-limited'").await;
    println!(
        "4 processes: at most {most_at_once} at once, at most {busiest_second} claimed in any second, {pids} owners"
    );
    assert!(most_at_once <= 4, "max-concurrent 4: {most_at_once} ran at once");
    assert!(claimed >= LIMITED, "every row was claimed by a capped claim: {claimed} rows in the log");
    assert!(busiest_second <= 40, "max-rate 40: {busiest_second} claimed within one second");
    assert!(pids >= 2, "the rows were shared between processes: {pids}");
}
