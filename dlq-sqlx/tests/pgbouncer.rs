//! `PgStore` through PgBouncer in transaction mode, with `PgConfig::session_url` to PostgreSQL
//! itself: the conformance suite, a retrier woken by `LISTEN` on the session connection, and the
//! reads the store keeps unprepared (run in a transaction behind a pooler), many at once.
//!
//! Needs a PgBouncer 1.21 or later at `DLQ_PGBOUNCER_URL` (default
//! `postgres://postgres@127.0.0.1:6432/postgres`) in `pool_mode = transaction` with
//! `max_prepared_statements` above 0, in front of the PostgreSQL of `DATABASE_URL`, and
//! admitting any database name (`* = host=... port=...`): each test reaches the fresh
//! database of its `#[sqlx::test]` through it. `scripts/test.sh` starts one. A test fails (it
//! does not skip) when none answers or it is set up otherwise.

mod pg_support;

use std::time::{Duration, Instant};

use dlq_core::{
    CancellationToken, ErrorClass, ListFilter, Payload, Retrier, RetrierConfig, Status, dead_letter, handlers,
    store::NewDeadLetter, store::prelude::*,
};
use dlq_sqlx::{PgConfig, PgStore};
use pg_support::failure;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool, Row};

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:6432/postgres";

fn bouncer_url() -> String {
    std::env::var("DLQ_PGBOUNCER_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// Fails unless PgBouncer answers at `DLQ_PGBOUNCER_URL`, in transaction mode, keeping
/// prepared statements (its admin console, database `pgbouncer`, `SHOW CONFIG`).
async fn check_bouncer() {
    let url = bouncer_url();
    let options: PgConnectOptions = url.parse().expect("DLQ_PGBOUNCER_URL is a PostgreSQL URL");
    let mut console = PgConnection::connect_with(&options.database("pgbouncer")).await.unwrap_or_else(|error| {
        panic!(
            "no PgBouncer console answers at {} (database `pgbouncer`): {error}. Run scripts/test.sh, which \
             starts one, or point DLQ_PGBOUNCER_URL at a PgBouncer with this user in `admin_users`",
            dlq_sqlx::mask_passwords(&url)
        )
    });
    let rows = sqlx::raw_sql("SHOW CONFIG").fetch_all(&mut console).await.expect("SHOW CONFIG");
    let setting = |key: &str| {
        rows.iter()
            .find(|r| r.try_get::<String, _>("key").is_ok_and(|k| k == key))
            .and_then(|r| r.try_get::<String, _>("value").ok())
    };
    assert_eq!(setting("pool_mode").as_deref(), Some("transaction"), "PgBouncer at {url} is not in transaction mode");
    let kept = setting("max_prepared_statements").and_then(|v| v.parse::<u32>().ok()).unwrap_or(0);
    assert!(
        kept > 0,
        "PgBouncer at {url} keeps no prepared statements: it needs 1.21 or later with max_prepared_statements > 0"
    );
    drop(console.close().await);
}

/// `url` with its database replaced by `database` (its query, if any, kept).
fn with_database(url: &str, database: &str) -> String {
    let (path, query) = url.split_once('?').map_or((url, None), |(p, q)| (p, Some(q)));
    let (scheme, rest) = path.split_once("://").expect("a URL with a scheme");
    let authority = rest.split_once('/').map_or(rest, |(authority, _)| authority);
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    format!("{scheme}://{authority}/{database}{query}")
}

/// A store on the test's fresh database whose pool goes through PgBouncer, with the session
/// URL straight to PostgreSQL; migrated by `from_pool` (through the session URL).
async fn through_bouncer(pool: &PgPool, config: PgConfig) -> PgStore {
    check_bouncer().await;
    let database = pool.connect_options().get_database().expect("the test database's name").to_owned();
    let bouncer: PgConnectOptions = bouncer_url().parse().expect("DLQ_PGBOUNCER_URL is a PostgreSQL URL");
    let pooled = PgPoolOptions::new().max_connections(10).connect_lazy_with(bouncer.database(&database));
    let direct = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let config = config.session_url(with_database(&direct, &database));
    PgStore::from_pool(pooled, config).await.expect("PgStore through PgBouncer")
}

dlq_core::store_conformance_tests! {
    [queue, reads, operator, fleet, privacy, singleton, capped_claims]
    #[sqlx::test(migrations = false)]
    async fn pg_store_through_pgbouncer(pool: PgPool) -> PgStore {
        through_bouncer(&pool, PgConfig::default().max_payload_bytes(8 << 20)).await
    }
}

#[test]
fn with_database_replaces_the_path_only() {
    assert_eq!(with_database("postgres://a:b@h:6432/postgres", "t_1"), "postgres://a:b@h:6432/t_1");
    assert_eq!(with_database("postgres://h/x?sslmode=disable", "t"), "postgres://h/t?sslmode=disable");
    assert_eq!(with_database("postgres://h:5432", "t"), "postgres://h:5432/t");
}

/// How long a test waits for something that must happen before it calls it lost.
const PATIENCE: Duration = Duration::from_secs(60);

async fn wait_until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[dead_letter(event_type = "bouncer-job", max_retries = 3, backoff = "none")]
async fn job(n: u64) -> Result<(), std::io::Error> {
    let _ = n;
    Ok(())
}

fn letter(event_type: &str, n: u64) -> NewDeadLetter {
    NewDeadLetter::new(event_type, Payload::Json(serde_json::json!(n)), failure(ErrorClass::Transient, "503"))
        .retry(Duration::ZERO, 5)
}

/// A retrier that polls once an hour drains a row parked after it started: the wake-up came
/// through the `LISTEN` on the session connection, the claims and outcomes through PgBouncer.
#[sqlx::test(migrations = false)]
async fn a_waiting_retrier_is_woken_and_drains_through_pgbouncer(pool: PgPool) {
    let store = through_bouncer(&pool, PgConfig::default()).await;
    let mut config = RetrierConfig::default();
    config.poll_interval = Duration::from_secs(3600);
    config.shutdown_grace = Duration::from_secs(2);
    let retrier = Retrier::new(std::sync::Arc::new(store.clone()), handlers![job].unwrap()).config(config);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let (retrier, shutdown) = (retrier.clone(), shutdown.clone());
        async move { retrier.run_until(shutdown.cancelled_owned()).await }
    });
    wait_until("the retrier's heartbeat", || async { !store.retriers().await.unwrap().is_empty() }).await;
    let parked = store.park_many((0..20).map(|n| letter("bouncer-job", n)).collect()).await.unwrap();
    assert_eq!(parked.len(), 20);
    let succeeded = || async { store.count(ListFilter::default().status(Status::Succeeded)).await.unwrap() == 20 };
    wait_until("the 20 rows to succeed", succeeded).await;
    shutdown.cancel();
    let stats = running.await.unwrap().unwrap();
    assert_eq!((stats.succeeded, stats.store_errors, stats.fenced), (20, 0, 0));
    assert!(store.retriers().await.unwrap().is_empty(), "the heartbeat row is removed on shutdown");
}

/// Stats, and the reads planned with their values (unnamed statements: each in a transaction
/// behind a pooler), from 16 tasks at once over 10 pooled connections: every answer right.
#[sqlx::test(migrations = false)]
async fn stats_and_unprepared_reads_through_pgbouncer(pool: PgPool) {
    let store = through_bouncer(&pool, PgConfig::default()).await;
    store.park_many((0..30).map(|n| letter("bouncer-a", n)).collect()).await.unwrap();
    store.park_many((0..12).map(|n| letter("bouncer-b", n)).collect()).await.unwrap();
    let stats = store.stats().await.unwrap();
    let pending = |t: &str| stats.iter().find(|s| s.event_type == t && s.status == Status::Pending).map(|s| s.count);
    assert_eq!((pending("bouncer-a"), pending("bouncer-b")), (Some(30), Some(12)), "{stats:?}");
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..20 {
                    let (t, n) = if i % 2 == 0 { ("bouncer-a", 30) } else { ("bouncer-b", 12) };
                    let filter = ListFilter::default().event_type(t);
                    assert_eq!(store.count(filter.clone()).await.unwrap(), n);
                    assert_eq!(store.list(filter.clone().limit(100)).await.unwrap().len(), n as usize);
                    let groups = store.groups(filter).await.unwrap();
                    assert_eq!(groups.iter().map(|g| g.count).sum::<u64>(), n);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}
