//! How fast the console's pages answer with 1,000,000 rows in PostgreSQL.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p dlq-web --bench pages
//! ```
//!
//! It (re)creates the database `dlq_bench_pages` on that server, fills `dlq_events` with
//! `DLQ_BENCH_ROWS` rows (default 1,000,000: 4 event types, 40 failure groups, every status,
//! created over the last 7 days in id order, as parks number them; `invoice` redacts a field)
//! in one `INSERT … SELECT`, and, with no VACUUM or ANALYZE (as a table filled moments
//! before), serves each page through the router in-process (tower's `oneshot`, no network), as
//! `dlq serve` or an embedding service does. The first request of each page is reported on its
//! own (`first`); then the median and the slowest of 20 more.
//! `DLQ_BENCH_KEEP=1` keeps the database afterwards, to look at the plans.
//!
//! With a `dlq` binary built (`cargo build --release -p dlq-cli`; `DLQ_BENCH_CLI` names another
//! path), it then times the command line's read verbs on the same rows, each a new process as an
//! operator runs it (connect, query, render, exit): the first run on its own, then the median and
//! the slowest of 10 more, over plain TCP and then over the URL as given (TLS where the server
//! offers it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use dlq_core::admin::Admin;
use dlq_core::store::prelude::*;
use dlq_sqlx::{PgConfig, PgStore};
use sqlx::{Connection, PgConnection};
use tower::ServiceExt;

const DB: &str = "dlq_bench_pages";
const DROP: &str = "DROP DATABASE IF EXISTS dlq_bench_pages WITH (FORCE)";
const RUNS: usize = 20;

/// Fills `dlq_events` with `rows` rows.
const FILL: &str = "
INSERT INTO dlq_events (event_type, handler, payload, error_class, error_kind, error_reason, fingerprint,
                        status, dead_reason, retry_count, max_retries, retry_after, created_at, updated_at,
                        first_failed_at)
SELECT (ARRAY['payment', 'refund', 'invoice', 'shipment'])[1 + i % 4],
       'bench::handle',
       jsonb_build_object('id', i, 'amount_cents', i % 100000, 'currency', 'USD'),
       CASE WHEN i % 40 < 8 THEN 'permanent' ELSE 'transient' END,
       'BenchError::Kind' || (i % 40),
       'failure number ' || (i % 40) || ' of the bench',
       md5('group' || (i % 40)),
       s.status,
       CASE WHEN s.status = 'FAILED_PERMANENTLY' THEN 'permanent' END,
       i % 5, 240,
       now() + (i % 3600) * interval '1 second',
       now() - (($1 - i) * 604800 / $1) * interval '1 second',
       now() - (($1 - i) * 604800 / $1) * interval '1 second',
       now() - (($1 - i) * 604800 / $1) * interval '1 second'
FROM generate_series(1, $1) AS i,
     LATERAL (SELECT (ARRAY['SUCCEEDED', 'SUCCEEDED', 'SUCCEEDED', 'SUCCEEDED', 'SUCCEEDED', 'SUCCEEDED',
                            'PENDING', 'PENDING', 'FAILED_PERMANENTLY', 'DISCARDED'])[1 + (i * 7) % 10]
                     AS status) AS s";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let rows: i64 = std::env::var("DLQ_BENCH_ROWS").ok().and_then(|n| n.parse().ok()).unwrap_or(1_000_000);
    let base = url.rsplit_once('/').map_or(url.as_str(), |(base, _)| base);
    let mut admin_conn = PgConnection::connect(&url).await?;
    sqlx::query(DROP).execute(&mut admin_conn).await?;
    sqlx::query("CREATE DATABASE dlq_bench_pages").execute(&mut admin_conn).await?;
    let bench_url = format!("{base}/{DB}");
    let store = Arc::new(PgStore::connect_with(&bench_url, PgConfig::default()).await?);

    let started = Instant::now();
    let mut conn = PgConnection::connect(&bench_url).await?;
    sqlx::query(FILL).bind(rows).execute(&mut conn).await?;
    println!("filled {rows} rows in {:.1} s (no VACUUM, no ANALYZE)", started.elapsed().as_secs_f64());

    // One type redacts a field: its list rows are masked with their audit logs (one read a
    // row), and a reason filter over it is matched on the masked text.
    let mut invoice = dlq_core::catalog::EventTypeInfo::new("invoice", 1, "bench");
    invoice.redact = vec!["/amount_cents".to_owned()];
    store.publish_types(vec![invoice]).await?;

    let some = store.list(dlq_core::ListFilter::default().limit(1)).await?;
    let id = some.first().map(|row| row.id).ok_or("no row")?;
    let group = some[0].failure.fingerprint.clone();
    let app =
        dlq_web::router(Admin::new(store.clone() as Arc<dyn DeadLetterStore>, "bench"), dlq_web::Options::default());

    let pages = [
        ("overview", "/".to_owned()),
        ("failure groups", "/groups".to_owned()),
        ("one group", format!("/groups/{group}")),
        ("list, first page", "/events".to_owned()),
        ("list, filtered", "/events?event_type=refund&status=PENDING".to_owned()),
        ("list, one type", "/events?event_type=shipment".to_owned()),
        ("list, one type that redacts", "/events?event_type=invoice".to_owned()),
        ("list, one type, by reason", "/events?event_type=shipment&reason=failure%20number".to_owned()),
        ("list, one type that redacts, by reason", "/events?event_type=invoice&reason=failure%20number".to_owned()),
        ("list, page 100", format!("/events?after={}", id - 50 * 100)),
        ("list, created in the last hour", "/events?since=1h".to_owned()),
        ("detail", format!("/events/{id}")),
        ("chart, 24 h", "/charts/parked.svg?window=24h".to_owned()),
        ("chart, 7 days", "/charts/parked.svg?window=7d".to_owned()),
        ("api: stats", "/api/stats".to_owned()),
    ];
    println!();
    println!("| page | path | first (ms) | median (ms) | slowest of {RUNS} (ms) |");
    println!("| --- | --- | ---: | ---: | ---: |");
    for (name, path) in pages {
        let first = get(&app, &path).await?;
        let mut times = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            times.push(get(&app, &path).await?);
        }
        times.sort();
        println!("| {name} | `{path}` | {:.1} | {:.1} | {:.1} |", ms(first), ms(times[RUNS / 2]), ms(times[RUNS - 1]));
    }
    // A group of FAILED_PERMANENTLY rows, for the redrive's dry run (each group of the fill
    // holds one status).
    let dead = store.list(dlq_core::ListFilter::default().status(dlq_core::Status::FailedPermanently).limit(1)).await?;
    let dead_group = dead.first().map(|row| row.failure.fingerprint.clone()).ok_or("no dead row")?;
    verbs(&bench_url, id, &group, &dead_group)?;
    drop(conn);
    store.pool().close().await;
    if std::env::var_os("DLQ_BENCH_KEEP").is_none() {
        sqlx::query(DROP).execute(&mut admin_conn).await?;
    }
    Ok(())
}

async fn get(app: &axum::Router, path: &str) -> Result<Duration, Box<dyn std::error::Error>> {
    let started = Instant::now();
    // A browser on the console's machine names it in `Host`; the console refuses other names.
    let request = Request::get(path).header(axum::http::header::HOST, "localhost").body(Body::empty())?;
    let response = app.clone().oneshot(request).await?;
    let status = response.status();
    axum::body::to_bytes(response.into_body(), usize::MAX).await?;
    let took = started.elapsed();
    if status != StatusCode::OK {
        return Err(format!("GET {path}: {status}").into());
    }
    Ok(took)
}

/// Times the CLI's read verbs, if a `dlq` binary is there.
fn verbs(url: &str, id: i64, group: &str, dead_group: &str) -> Result<(), Box<dyn std::error::Error>> {
    const VERB_RUNS: usize = 10;
    let cli = match std::env::var_os("DLQ_BENCH_CLI") {
        Some(path) => std::path::PathBuf::from(path),
        // This bench runs from target/release/deps; the binary is target/release/dlq.
        None => std::env::current_exe()?.parent().and_then(std::path::Path::parent).ok_or("no target dir")?.join("dlq"),
    };
    if !cli.is_file() {
        eprintln!("\nno `dlq` binary at {}: CLI verbs not timed (cargo build --release -p dlq-cli)", cli.display());
        return Ok(());
    }
    let id = id.to_string();
    let verbs: [(&str, Vec<&str>); 8] = [
        ("stats", vec!["stats"]),
        ("ls, first page", vec!["ls"]),
        ("ls, filtered", vec!["ls", "--event-type", "refund", "--status", "PENDING"]),
        ("ls, one group", vec!["ls", "--group", group]),
        ("ls, created in the last hour", vec!["ls", "--since", "1h"]),
        ("show", vec!["show", &id]),
        ("workers", vec!["workers"]),
        ("redrive a group, dry run", vec!["redrive", "--group", dead_group, "--dry-run"]),
    ];
    // The URL as given (sslmode `prefer`: TLS where the server offers it, as this server
    // does), and plain TCP: sqlx 0.9.0 sets no TCP_NODELAY, so each TLS handshake waits on
    // delayed ACKs (about 95 ms a connection here), which no change in dlq removes.
    let plain = format!("{url}{}sslmode=disable", if url.contains('?') { '&' } else { '?' });
    println!();
    println!(
        "| verb | command | first, plain TCP (ms) | median (ms) | slowest of {VERB_RUNS} (ms) | first, TLS (ms) | median, TLS (ms) |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for (name, args) in verbs {
        let run = |url: &str| -> Result<Duration, Box<dyn std::error::Error>> {
            let started = Instant::now();
            let out = std::process::Command::new(&cli).arg("--database-url").arg(url).args(&args).output()?;
            let took = started.elapsed();
            if !out.status.success() {
                return Err(format!("dlq {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr)).into());
            }
            Ok(took)
        };
        let timed = |url: &str| -> Result<(Duration, Vec<Duration>), Box<dyn std::error::Error>> {
            let first = run(url)?;
            let mut times = (0..VERB_RUNS).map(|_| run(url)).collect::<Result<Vec<_>, _>>()?;
            times.sort();
            Ok((first, times))
        };
        let (first, times) = timed(&plain)?;
        let (first_tls, times_tls) = timed(url)?;
        let shown: Vec<&str> = args.iter().map(|a| if *a == group || *a == dead_group { "FP" } else { a }).collect();
        println!(
            "| {name} | `dlq {}` | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            shown.join(" "),
            ms(first),
            ms(times[VERB_RUNS / 2]),
            ms(times[VERB_RUNS - 1]),
            ms(first_tls),
            ms(times_tls[VERB_RUNS / 2]),
        );
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
