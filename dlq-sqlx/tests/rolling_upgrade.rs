//! Rolling upgrades on PostgreSQL: the previous release's statements keep working after this
//! release's `migrate`, and this release's contract migrations wait for `migrate_contract`,
//! which waits for the previous release's retriers to stop.
//!
//! `previous_release/` holds what the previous release sends to the database to park, claim,
//! settle and heartbeat, captured with the parameters it sent them with by
//! `scripts/release-statements.sh` (which runs [`this_release_s_statements`] with the server
//! logging every statement). Each file prepares one statement for schema `dlq` and executes
//! it; a settle first gives the claimed rows the lease tokens they had at capture, since a
//! claim draws new ones.

use std::time::Duration;

use dlq_core::admin::RetrierHeartbeat;
use dlq_core::classify::FailureInfo;
use dlq_core::store::prelude::*;
use dlq_core::store::{ClaimRequest, DeadReason, NewDeadLetter, Settlement};
use dlq_core::{ErrorClass, Payload};
use dlq_sqlx::postgres::{self, MIGRATOR, PgConfig, PgStore, RELEASE_FIRST_MIGRATION};
use serde_json::json;
use sqlx::migrate::Migrator;
use sqlx::{AssertSqlSafe, PgPool};

/// The previous release's statements, in the order it sent them at capture.
const PREVIOUS_RELEASE: &[(&str, &str)] = &[
    ("heartbeat", include_str!("previous_release/heartbeat.sql")),
    ("park_many", include_str!("previous_release/park_many.sql")),
    ("park", include_str!("previous_release/park.sql")),
    ("claim", include_str!("previous_release/claim.sql")),
    ("succeed", include_str!("previous_release/succeed.sql")),
    ("settle", include_str!("previous_release/settle.sql")),
    ("settle_claim", include_str!("previous_release/settle_claim.sql")),
];

const SCHEMA: &str = "dlq";

/// The schema as the previous release left it: its migrations (those before this release's
/// first) in `dlq`.
async fn previous_release_schema(pool: &PgPool) {
    let previous = MIGRATOR.iter().filter(|m| m.version < RELEASE_FIRST_MIGRATION).cloned().collect();
    let migrator = Migrator::with_migrations(previous);
    let mut conn = pool.acquire().await.unwrap();
    sqlx::raw_sql("CREATE SCHEMA dlq; SET search_path TO dlq").execute(&mut *conn).await.unwrap();
    migrator.run_direct(None, &mut *conn, false).await.expect("the previous release's migrations");
    sqlx::raw_sql("RESET search_path").execute(&mut *conn).await.unwrap();
}

/// Runs each of the previous release's statements; panics naming the one that fails.
async fn run_previous_release(pool: &PgPool) {
    for (name, sql) in PREVIOUS_RELEASE {
        sqlx::raw_sql(AssertSqlSafe(format!("{sql}\nDEALLOCATE previous_{name};")))
            .execute(pool)
            .await
            .unwrap_or_else(|e| panic!("the previous release's {name} failed on this schema: {e}"));
    }
}

/// Rows per status.
async fn statuses(pool: &PgPool) -> Vec<(String, i64)> {
    sqlx::query_as("SELECT status, count(*) FROM dlq.dlq_events GROUP BY 1 ORDER BY 1").fetch_all(pool).await.unwrap()
}

async fn drop_dlq(pool: &PgPool) {
    sqlx::raw_sql("DROP SCHEMA dlq CASCADE").execute(pool).await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn the_previous_release_parks_claims_and_settles_after_migrate_and_after_contract(pool: PgPool) {
    previous_release_schema(&pool).await;
    // Statements captured against the previous release's own schema work there.
    run_previous_release(&pool).await;
    let before = statuses(&pool).await;
    assert!(before.iter().any(|(s, _)| s == "SUCCEEDED"), "{before:?}");
    drop_dlq(&pool).await;

    // The rolling deploy: this release migrates while the previous one still runs.
    previous_release_schema(&pool).await;
    postgres::migrate(&pool, SCHEMA).await.expect("migrate");
    let status = postgres::schema_status(&pool, SCHEMA).await.unwrap();
    assert!(status.is_current(), "{status:?}");
    assert!(!status.contract_waiting.is_empty(), "this release has a contract migration: {status:?}");
    assert!(status.contract_waiting.iter().all(|s| s.version >= RELEASE_FIRST_MIGRATION));
    run_previous_release(&pool).await;
    assert_eq!(statuses(&pool).await, before, "the same statements, the same outcome");

    // The previous release's retrier (its heartbeat, from the statements above) still beats:
    // the contract waits, and applies nothing.
    let refused = postgres::migrate_contract(&pool, SCHEMA).await.expect_err("an older retrier runs");
    let text = dlq_core::admin::one_line(&refused);
    assert!(text.contains("a retrier of an older release still running against schema `dlq`"), "{text}");
    assert!(text.contains("dlq migrate --contract"), "{text}");
    let status = postgres::schema_status(&pool, SCHEMA).await.unwrap();
    assert!(!status.contract_waiting.is_empty(), "{status:?}");

    // It stops (its row goes), and the contract runs; this release parks, claims and settles
    // on the contracted schema (the previous release's statements may no longer work there).
    sqlx::query("DELETE FROM dlq.dlq_retriers").execute(&pool).await.unwrap();
    let applied = postgres::migrate_contract(&pool, SCHEMA).await.expect("contract");
    assert_eq!(applied, status.contract_waiting);
    let status = postgres::schema_status(&pool, SCHEMA).await.unwrap();
    assert!(status.is_current() && status.contract_waiting.is_empty(), "{status:?}");
    let dropped: bool =
        sqlx::query_scalar("SELECT to_regproc('dlq.dlq_claim_pending') IS NULL").fetch_one(&pool).await.unwrap();
    assert!(dropped, "the contract migration ran");
    sqlx::query("TRUNCATE dlq.dlq_events CASCADE").execute(&pool).await.unwrap();
    this_release(&pool).await;
}

/// Migration 0051 gives the tally buckets of the rows already parked their first id (the
/// smallest id of their hour's rows), so that a filter on creation time starts from it.
#[sqlx::test(migrations = false)]
async fn the_buckets_of_rows_parked_before_the_upgrade_get_a_first_id(pool: PgPool) {
    previous_release_schema(&pool).await;
    run_previous_release(&pool).await;
    postgres::migrate(&pool, SCHEMA).await.unwrap();
    let (buckets, unbounded): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE h.first_id IS NULL OR h.first_id > r.first_id)
         FROM dlq.dlq_parked_hours AS h
         JOIN (SELECT dlq.dlq_hour(created_at) AS hour, min(id) AS first_id FROM dlq.dlq_events GROUP BY 1) AS r
           ON dlq.dlq_hour(h.hour) = r.hour",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(buckets > 0, "the previous release's statements parked rows");
    assert_eq!(unbounded, 0, "every bucket with rows knows an id at or below its rows'");
}

#[sqlx::test(migrations = false)]
async fn a_new_schema_gets_every_migration_at_once(pool: PgPool) {
    postgres::migrate(&pool, SCHEMA).await.unwrap();
    let status = postgres::schema_status(&pool, SCHEMA).await.unwrap();
    assert!(status.is_current() && status.contract_waiting.is_empty(), "{status:?}");
    // Nothing left to contract: no refusal, nothing applied.
    assert!(postgres::migrate_contract(&pool, SCHEMA).await.unwrap().is_empty());
}

#[sqlx::test(migrations = false)]
async fn a_retrier_of_this_release_does_not_hold_the_contract_back(pool: PgPool) {
    previous_release_schema(&pool).await;
    let store = PgStore::from_pool(pool.clone(), PgConfig::default().schema(SCHEMA)).await.unwrap();
    store.heartbeat(&RetrierHeartbeat::new("host:1:new", ["payment"], false), Duration::from_secs(60)).await.unwrap();
    let release: Option<i32> =
        sqlx::query_scalar("SELECT release_migration FROM dlq.dlq_retriers").fetch_one(&pool).await.unwrap();
    assert_eq!(release.map(i64::from), Some(RELEASE_FIRST_MIGRATION));
    let applied = postgres::migrate_contract(&pool, SCHEMA).await.expect("only this release runs");
    assert!(!applied.is_empty());
    // One that stopped beating longer ago than the window does not hold it back either.
    let status = postgres::schema_status(&pool, SCHEMA).await.unwrap();
    assert!(status.contract_waiting.is_empty(), "{status:?}");
}

#[sqlx::test(migrations = false)]
async fn a_killed_retrier_of_an_older_release_stops_counting_after_the_window(pool: PgPool) {
    previous_release_schema(&pool).await;
    postgres::migrate(&pool, SCHEMA).await.unwrap();
    sqlx::query(
        "INSERT INTO dlq.dlq_retriers (owner, host, pid, event_types, last_seen) \
         VALUES ('old', E'old-host\\x1b[31m', 7, '{payment}', now() - $1 * INTERVAL '1 second' + INTERVAL '10 seconds')",
    )
    .bind(i64::try_from(postgres::HEARTBEAT_COUNTS_FOR.as_secs()).unwrap())
    .execute(&pool)
    .await
    .unwrap();
    let refused = postgres::migrate_contract(&pool, SCHEMA).await.expect_err("seen within the window");
    let text = dlq_core::admin::one_line(&refused);
    assert!(text.contains("old-host[31m pid 7"), "the host's control characters are removed: {text}");
    sqlx::query("UPDATE dlq.dlq_retriers SET last_seen = last_seen - INTERVAL '20 seconds'")
        .execute(&pool)
        .await
        .unwrap();
    assert!(!postgres::migrate_contract(&pool, SCHEMA).await.expect("past the window").is_empty());
}

#[sqlx::test(migrations = false)]
async fn a_schema_migrated_by_a_newer_dlq_is_refused(pool: PgPool) {
    postgres::migrate(&pool, SCHEMA).await.unwrap();
    sqlx::query(
        "INSERT INTO dlq._sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', true, '\\x00', 0)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let status = postgres::schema_status(&pool, SCHEMA).await.unwrap();
    assert_eq!(status.newer, [9999]);
    let err = postgres::migrate(&pool, SCHEMA).await.expect_err("newer");
    let text = dlq_core::admin::one_line(&err);
    assert!(text.contains("migration 9999 was previously applied but is missing"), "{text}");
}

fn failure(class: ErrorClass, reason: &str) -> FailureInfo {
    FailureInfo::new(class, "io", reason.to_owned(), vec![reason.to_owned()], None)
}

/// What this release sends to park, claim, settle and heartbeat: `scripts/release-statements.sh`
/// runs it with the server logging every statement, to write the fixtures the next release
/// runs as `previous_release/`. The order and the letters are the fixtures' order.
#[sqlx::test(migrations = false)]
async fn this_release_s_statements(pool: PgPool) {
    this_release(&pool).await;
}

/// Parks, claims, settles and heartbeats in `dlq` through this release's store, each kind of
/// statement at least once; checks the answers.
async fn this_release(pool: &PgPool) {
    let store = PgStore::from_pool(pool.clone(), PgConfig::default().schema(SCHEMA)).await.unwrap();
    store.heartbeat(&RetrierHeartbeat::new("host:1:old", ["payment"], false), Duration::from_secs(60)).await.unwrap();
    let letter = |n: u64| {
        NewDeadLetter::new("payment", Payload::Json(json!({ "n": n })), failure(ErrorClass::Transient, "ledger down"))
    };
    let keyed = letter(3).with_dedupe_key("order-3");
    let parked = store.park_many(vec![letter(1), letter(2), keyed.clone(), keyed]).await.unwrap();
    assert_eq!(parked[2].id, parked[3].id, "deduped");
    store.park(letter(4)).await.unwrap();
    let request = |limit| ClaimRequest {
        event_types: vec!["payment".into()],
        limit,
        lease: Duration::from_secs(60),
        owner: "host:1:old".into(),
    };
    let claimed = store.claim(request(3)).await.unwrap();
    assert_eq!(claimed.len(), 3);
    // A batch of successes alone, a batch with a retry, and outcomes written with the next claim.
    let report = store.settle(vec![Settlement::Succeeded { lease: claimed[0].lease }]).await.unwrap();
    assert_eq!(report.applied, 1, "{report:?}");
    let retry = Settlement::Retry {
        lease: claimed[1].lease,
        delay: Duration::from_secs(3600),
        failure: failure(ErrorClass::Transient, "still down"),
    };
    assert_eq!(store.settle(vec![retry]).await.unwrap().applied, 1);
    let dead = Settlement::Dead {
        lease: claimed[2].lease,
        reason: DeadReason::Permanent,
        failure: failure(ErrorClass::Permanent, "bad"),
        counts: true,
    };
    let (report, next) = store.settle_and_claim(vec![dead], request(5)).await.unwrap();
    assert_eq!(report.applied, 1, "{report:?}");
    assert_eq!(next.unwrap().len(), 1, "the fourth letter");
}
