//! The redeploy, end to end: version 1 parks 600 payments, version 2 parks 400 more, and
//! version 3's retrier drains all 1,000 to `SUCCEEDED`, each row rewritten in version 3 with
//! an audit entry saying which version it was upcast from.

use std::path::{Path, PathBuf};
use std::process::Command;

use dlq_core::{store::prelude::*, ListFilter, Payload, Status};
use dlq_sqlx::sqlite::SqliteStore;

fn run(program: &str, db: &Path, count: Option<u64>) {
    let mut command = Command::new(program);
    command.arg(db);
    if let Some(count) = count {
        command.arg(count.to_string());
    }
    let status = command.status().expect("run a build of the service");
    assert!(status.success(), "{program} failed");
}

/// A fresh database file, removed with its WAL files when dropped.
struct TempDb(PathBuf);

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

#[tokio::test]
async fn a_thousand_events_parked_by_two_old_versions_drain_after_the_deploy() {
    let db = TempDb(std::env::temp_dir().join(format!("dlq-redeploy-{}.db", std::process::id())));
    drop(std::fs::remove_file(&db.0));
    run(env!("CARGO_BIN_EXE_payments-v1"), &db.0, Some(600));
    run(env!("CARGO_BIN_EXE_payments-v2"), &db.0, Some(400));

    let store = SqliteStore::open(&db.0).await.expect("open");
    let parked = store.list(ListFilter { limit: 2_000, ..ListFilter::default() }).await.expect("list");
    let mut versions: Vec<u32> = parked.iter().map(|row| row.version).collect();
    versions.dedup();
    assert_eq!((parked.len(), versions), (1_000, vec![2, 1]), "newest first: 400 of version 2, 600 of version 1");
    assert!(parked.iter().all(|row| row.status == Status::Pending));
    store.pool().close().await;

    run(env!("CARGO_BIN_EXE_payments-v3"), &db.0, None);

    let store = SqliteStore::open(&db.0).await.expect("reopen");
    let rows = store.list(ListFilter { limit: 2_000, ..ListFilter::default() }).await.expect("list");
    assert_eq!(rows.len(), 1_000);
    for row in rows {
        assert_eq!((row.status, row.version, row.retry_count), (Status::Succeeded, 3, 0), "row {}", row.id);
        let Payload::Json(payment) = &row.payload else { panic!("row {}: {:?}", row.id, row.payload) };
        assert!(payment.get("cents").is_none() && payment["amount_cents"].is_i64(), "row {}: {payment}", row.id);
        let from = if payment["id"].as_u64() >= Some(1_000_000) { 2 } else { 1 };
        let want_currency = if from == 2 { "USD" } else { "EUR" };
        assert_eq!(payment["currency"], want_currency, "row {}", row.id);
        let audit = store.audit(row.id).await.expect("audit");
        assert_eq!(audit.len(), 1, "row {}", row.id);
        assert_eq!(audit[0].action, "upgrade");
        let reason = format!("upcast from version {from} to 3 by a retry that succeeded");
        assert_eq!(audit[0].reason.as_deref(), Some(reason.as_str()), "row {}", row.id);
        assert_eq!(audit[0].diff["version"], serde_json::json!([from, 3]));
        assert!(audit[0].diff["payload"]["old"]["cents"].is_i64(), "the event as parked stays in the audit log");
    }
    store.pool().close().await;
}

/// The stock `dlq` binary's entry, as `main` runs it, on the SQLite file: its exit code.
async fn dlq(db: &Path, args: &[&str]) -> std::process::ExitCode {
    let url = format!("sqlite://{}", db.display());
    dlq_cli::run([&["dlq", "--database-url", url.as_str()][..], args].concat()).await
}

async fn count(db: &Path, status: Status) -> usize {
    let store = SqliteStore::open(db).await.expect("open");
    let rows = store.list(ListFilter { status: Some(status), limit: 2_000, ..ListFilter::default() }).await;
    store.pool().close().await;
    rows.expect("list").len()
}

/// Runs a build of the service that must fail: its stderr.
fn run_refused(program: &str, db: &Path) -> String {
    let out = Command::new(program).arg(db).output().expect("run a build of the service");
    assert_eq!(out.status.code(), Some(1), "{program}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A deploy that changed the event but forgot `version = 3` (so it says version 1): version
/// 2 published version 1's schema (its upcaster's input) into the catalog, so the mistaken
/// build's retrier refuses to start, naming the type, both versions and the fix, before any
/// row is claimed; `redrive --validate` reports the same mismatch; the right build drains all.
#[tokio::test]
async fn a_forgotten_version_bump_is_refused_before_any_row_moves() {
    let db = TempDb(std::env::temp_dir().join(format!("dlq-redeploy-forgot-{}.db", std::process::id())));
    drop(std::fs::remove_file(&db.0));
    run(env!("CARGO_BIN_EXE_payments-v1"), &db.0, Some(60));
    run(env!("CARGO_BIN_EXE_payments-v2"), &db.0, Some(40));
    let refused = run_refused(env!("CARGO_BIN_EXE_payments-v3-forgot"), &db.0);
    for want in ["event type `payment`", "declares version 1", "newest version is 2", "`version = 3`"] {
        assert!(refused.contains(want), "{want}: {refused}");
    }
    assert!(refused.contains("upcaster from version 2") && refused.contains("accept_schema_change"), "{refused}");
    assert_eq!(count(&db.0, Status::Pending).await, 100, "no row claimed, none failed");

    let redrive = ["redrive", "--all", "--validate", "--reason", "after the deploy", "--json"];
    assert_eq!(dlq(&db.0, &redrive).await, std::process::ExitCode::from(1), "refused by the mismatch");
    let store = SqliteStore::open(&db.0).await.expect("open");
    let catalog = dlq_core::catalog::Catalog::read(&store).await.expect("the catalog");
    assert_eq!(catalog.get("payment").map(|info| info.version), Some(2), "version 2's record stays");
    let check = dlq_core::admin::Admin::new(std::sync::Arc::new(store), "test").with_catalog(catalog);
    let report = check.validation(ListFilter::default(), 1_000).await.expect("the counts");
    let mismatch = &report.mismatches[0];
    assert_eq!((mismatch.version, mismatch.newest), (1, 2), "{mismatch}");
    assert_eq!((mismatch.published_by.as_str(), mismatch.differing_by.as_str()), ("payments-v2", "payments-v3-forgot"));
    assert!(!report.passes());

    // The right version 3 publishes version 3 and drains every row; the mismatch is past.
    run(env!("CARGO_BIN_EXE_payments-v3"), &db.0, None);
    assert_eq!(count(&db.0, Status::Succeeded).await, 100);
    let store = SqliteStore::open(&db.0).await.expect("open");
    let catalog = dlq_core::catalog::Catalog::read(&store).await.expect("the catalog");
    assert!(catalog.mismatches().is_empty(), "{:?}", catalog.mismatches());
    store.pool().close().await;
}
