//! The redeploy, end to end: version 1 parks 600 payments, version 2 parks 400 more, and
//! version 3's retrier drains all 1,000 to `SUCCEEDED`, each row rewritten in version 3 with
//! an audit entry saying which version it was upcast from.

use std::path::{Path, PathBuf};
use std::process::Command;

use dlq_core::{DeadLetterStore, ListFilter, Payload, Status};
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

#[tokio::test]
async fn without_the_upcasters_the_redrive_is_refused_by_validate_before_any_row_moves() {
    let db = TempDb(std::env::temp_dir().join(format!("dlq-redeploy-forgot-{}.db", std::process::id())));
    drop(std::fs::remove_file(&db.0));
    run(env!("CARGO_BIN_EXE_payments-v1"), &db.0, Some(60));
    run(env!("CARGO_BIN_EXE_payments-v2"), &db.0, Some(40));
    run(env!("CARGO_BIN_EXE_payments-v3-forgot"), &db.0, None);
    assert_eq!(count(&db.0, Status::FailedPermanently).await, 100, "the mistaken build failed every row");

    let redrive = ["redrive", "--all", "--validate", "--reason", "after the deploy", "--json"];
    assert_eq!(dlq(&db.0, &redrive).await, std::process::ExitCode::from(1), "refused");
    assert_eq!(count(&db.0, Status::FailedPermanently).await, 100, "before any row moved");
    let store = SqliteStore::open(&db.0).await.expect("open");
    let catalog = store.event_types().await.expect("the catalog");
    assert_eq!((catalog[0].version, catalog[0].published_by.as_str()), (1, "payments-v3-forgot"));
    let check = dlq_core::admin::Admin::new(std::sync::Arc::new(store), "test")
        .with_catalog(dlq_core::catalog::Catalog::new(catalog));
    let report = check.validation(ListFilter::default(), 1_000).await.expect("the counts");
    let (not, errors): (u64, Vec<&str>) = (
        report.groups.iter().map(|g| g.not).sum(),
        report.groups.iter().filter_map(|g| g.first_error.as_ref()).map(|(_, why)| why.as_str()).collect(),
    );
    assert_eq!((report.checked, not), (100, 100), "the counts --validate printed");
    assert!(errors.iter().any(|why| why.contains("version 2 is newer than version 1")), "{errors:?}");
    assert!(errors.iter().any(|why| why.contains("missing field `amount_cents`")), "{errors:?}");

    // The right version 3 publishes version 3 (the newest wins) and drains nothing failed; the
    // same redrive then passes, and version 3 drains every row.
    run(env!("CARGO_BIN_EXE_payments-v3"), &db.0, None);
    assert_eq!(count(&db.0, Status::FailedPermanently).await, 100);
    assert_eq!(dlq(&db.0, &redrive).await, std::process::ExitCode::SUCCESS);
    run(env!("CARGO_BIN_EXE_payments-v3"), &db.0, None);
    assert_eq!(count(&db.0, Status::Succeeded).await, 100);
}
