//! The store conformance suite on `SqliteStore`: each test on a fresh database file (WAL,
//! several connections), plus a few checks of the SQLite-specific entry points.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use dlq_core::store::prelude::*;
use dlq_core::testing::{Fixture, conformance};
use dlq_sqlx::SqliteStore;

/// A fresh database file, removed (with its WAL files) when dropped.
struct TempDb {
    path: PathBuf,
}

impl TempDb {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let file = format!("dlq-conformance-{}-{name}-{n}.db", std::process::id());
        let path = std::env::temp_dir().join(file);
        Self::remove(&path);
        Self { path }
    }

    fn remove(path: &std::path::Path) {
        for ext in ["", "-wal", "-shm", "-journal"] {
            let mut file = path.as_os_str().to_owned();
            file.push(ext);
            let _ = std::fs::remove_file(file);
        }
    }

    async fn store(&self) -> SqliteStore {
        SqliteStore::open(&self.path).await.expect("open the SQLite store")
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        Self::remove(&self.path);
    }
}

/// A store on a fresh file; a passed test closes the pool before the file goes.
struct SqliteFixture {
    store: SqliteStore,
    _db: TempDb,
}

impl Fixture for SqliteFixture {
    type Store = SqliteStore;

    fn store(&self) -> &SqliteStore {
        &self.store
    }

    async fn teardown(self) {
        self.store.pool().close().await;
    }
}

async fn sqlite_store() -> SqliteFixture {
    let db = TempDb::new("conformance");
    SqliteFixture { store: db.store().await, _db: db }
}

// SQLite has no session-scoped lock: no `singleton` part.
dlq_core::store_conformance_tests!([queue, reads, operator, fleet, privacy, capped_claims] sqlite_store);

#[tokio::test]
async fn in_memory_store_passes_a_round_trip() {
    let store = SqliteStore::in_memory().await.expect("in-memory store");
    conformance::queue::park_and_get(&store).await;
    conformance::queue::settle_retry_not_due_until_delay(&store).await;
}

#[tokio::test]
async fn connect_url_creates_the_file_in_wal_mode_and_reopens_it() {
    let db = TempDb::new("connect");
    let url = format!("sqlite://{}?mode=rwc", db.path.display());
    let store = SqliteStore::connect(&url).await.expect("connect");
    let (mode,): (String,) = sqlx::query_as("PRAGMA journal_mode").fetch_one(store.pool()).await.expect("pragma");
    assert_eq!(mode, "wal");
    conformance::queue::park_many_keeps_order(&store).await;
    store.pool().close().await;
    let reopened = SqliteStore::connect(&url).await.expect("reconnect; migrations already applied");
    assert_eq!(reopened.list(dlq_core::ListFilter::default()).await.expect("list").len(), 5, "rows survive");
    reopened.pool().close().await;
}

/// `std::env::set_var` is `unsafe` in edition 2024 (and the workspace forbids unsafe code):
/// run [`open_default_child`] in a child process with the variable set.
#[test]
fn open_default_uses_dlq_sqlite_path() {
    let db = TempDb::new("default");
    let status = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "open_default_child", "--ignored", "--quiet"])
        .env("DLQ_SQLITE_PATH", &db.path)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run the child test");
    assert!(status.success(), "open_default_child failed");
    assert!(db.path.exists(), "the database file is created at $DLQ_SQLITE_PATH");
}

#[tokio::test]
#[ignore = "run by `open_default_uses_dlq_sqlite_path` with DLQ_SQLITE_PATH set"]
async fn open_default_child() {
    if std::env::var_os("DLQ_SQLITE_PATH").is_none() {
        return;
    }
    let store = SqliteStore::open_default().await.expect("open_default");
    conformance::queue::park_and_get(&store).await;
    store.pool().close().await;
}

#[tokio::test]
async fn park_in_commits_with_the_callers_transaction() {
    use dlq_core::{ErrorClass, Payload, classify::FailureInfo, store::NewDeadLetter};
    let db = TempDb::new("park_in");
    let store = db.store().await;
    sqlx::query("CREATE TABLE accounts (id INTEGER PRIMARY KEY, flagged INTEGER NOT NULL)")
        .execute(store.pool())
        .await
        .expect("create table");
    let failure = FailureInfo::new(ErrorClass::Permanent, "validation", "bad iban".into(), vec![], None);
    let letter = NewDeadLetter::new("payment", Payload::Json(serde_json::json!({ "id": 7 })), failure);
    let mut tx = store.pool().begin_with("BEGIN IMMEDIATE").await.expect("begin");
    sqlx::query("INSERT INTO accounts VALUES (7, 1)").execute(&mut *tx).await.expect("insert");
    let parked = store.park_in(&mut tx, letter.clone().with_dedupe_key("k")).await.expect("park_in");
    let again = store.park_many_in(&mut tx, vec![letter.with_dedupe_key("k")]).await.expect("park_many_in");
    assert_eq!(again[0], dlq_core::store::Parked { id: parked.id, deduplicated: true, truncated: false });
    tx.commit().await.expect("commit");
    let (flagged,): (i64,) =
        sqlx::query_as("SELECT flagged FROM accounts").fetch_one(store.pool()).await.expect("read");
    assert_eq!(flagged, 1);
    assert_eq!(store.attempts(parked.id).await.expect("attempts").len(), 1);
    store.pool().close().await;
}

/// Two stores on one file (as two processes would open it) claim and settle at once: no row
/// is claimed twice and no call fails with "database is locked".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_share_one_file() {
    use dlq_core::store::{ClaimRequest, Settlement};
    use dlq_core::{ErrorClass, Payload, Status, classify::FailureInfo, store::NewDeadLetter};
    let db = TempDb::new("shared");
    let (a, b) = (db.store().await, db.store().await);
    let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    let letters: Vec<_> =
        (0..200).map(|n| NewDeadLetter::new("t", Payload::Json(serde_json::json!(n)), failure.clone())).collect();
    a.park_many(letters).await.expect("park_many");
    let workers = [a.clone(), b.clone(), a.clone(), b.clone()].into_iter().enumerate().map(|(n, store)| {
        tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let request = ClaimRequest {
                    event_types: vec!["t".into()],
                    limit: 7,
                    lease: std::time::Duration::from_secs(60),
                    owner: format!("worker-{n}"),
                };
                let claimed = store.claim(request).await.expect("claim");
                if claimed.is_empty() {
                    return mine;
                }
                let outcomes: Vec<_> = claimed.iter().map(|c| Settlement::Succeeded { lease: c.lease }).collect();
                assert!(store.settle(outcomes).await.expect("settle").fenced.is_empty());
                mine.extend(claimed.iter().map(|c| c.lease.id));
            }
        })
    });
    let mut all: Vec<i64> = Vec::new();
    for worker in workers.collect::<Vec<_>>() {
        all.extend(worker.await.expect("worker"));
    }
    all.sort_unstable();
    assert_eq!(all, (1..=200).collect::<Vec<_>>(), "every row claimed exactly once");
    let stats = b.stats().await.expect("stats");
    assert_eq!((stats.len(), stats[0].status, stats[0].count), (1, Status::Succeeded, 200));
    a.pool().close().await;
    b.pool().close().await;
}

/// Fields in another order than sorted keys: a hash over a `serde_json::Value` of it (keys
/// sorted) is not the hash of its serialization.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Upload {
    name: String,
    blob: String,
}

#[dlq_core::dead_letter(event_type = "upload")]
async fn handle_upload(u: Upload) -> Result<(), std::io::Error> {
    Err(std::io::Error::other(format!("scanner down for {}", u.name)))
}

/// A live handler's event one byte over the store's limit (64 MiB: SQLite has no other) is
/// `TooLarge` with the row's id; the row keeps the first bytes of `serde_json::to_vec(&event)`
/// and that serialization's length and SHA-256.
#[tokio::test]
async fn a_live_event_over_the_limit_is_too_large_with_the_hash_of_its_serialization() {
    use dlq_core::{HandlerError, Payload, Status, adapter::DeadReason};
    use sha2::Digest;
    let db = TempDb::new("too_large");
    let store = std::sync::Arc::new(db.store().await);
    let max = store.max_payload_bytes();
    let blob = "x".repeat(max + 1 - r#"{"name":"scan","blob":""}"#.len());
    // serde_json::to_vec of the upload, written out: its fields in declaration order.
    let original = format!(r#"{{"name":"scan","blob":"{blob}"}}"#).into_bytes();
    assert_eq!(original.len(), max + 1);
    let upload = Upload { name: "scan".into(), blob };
    let err = dlq_core::with_store(store.clone(), handle_upload(upload)).await.unwrap_err();
    let HandlerError::TooLarge { id, .. } = &err else { panic!("expected TooLarge, got {err:?}") };
    let row = store.get(*id).await.expect("get").expect("the row");
    assert_eq!((row.status, row.dead_reason), (Status::FailedPermanently, Some(DeadReason::TooLarge)));
    let Payload::Raw { bytes, truncated: Some(t) } = row.payload else { panic!("expected a cut payload") };
    let preview = max.min(dlq_core::store::TOO_LARGE_PREVIEW_BYTES);
    assert!(bytes == original[..preview], "the first bytes of the serialization, a preview of them");
    assert_eq!(t.original_len, original.len() as u64);
    let sha256: String = sha2::Sha256::digest(&original).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(t.original_sha256, sha256);
    assert_eq!((err.dlq_id(), err.is_parked()), (Some(*id), false));
    store.pool().close().await;
}

/// Operations stored by the previous release (redrives and discards only) are kept, with their
/// ids, when `patch` joins the actions (the table is rebuilt: SQLite cannot alter a check);
/// later operations get new ids, and an unknown action is still refused.
#[tokio::test]
async fn operations_of_the_previous_release_are_kept_when_patch_joins_the_actions() {
    use dlq_core::store::{ActionKind, AuditNote, OperationState};
    let db = TempDb::new("operations-migration");
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&db.path).create_if_missing(true);
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    dlq_sqlx::sqlite::MIGRATOR.run_to(6, &pool).await.unwrap();
    let insert = "INSERT INTO dlq_operations (action, spec, actor, cursor_id, moved, state, created_at, updated_at) \
                  VALUES (?1, '{\"x\": 1}', 'alice', 7, 3, 'stopped', 0, 0) RETURNING id";
    let old: i64 = sqlx::query_scalar(insert).bind("discard").fetch_one(&pool).await.unwrap();
    assert!(sqlx::query(insert).bind("patch").execute(&pool).await.is_err(), "not before the migration");
    pool.close().await;

    let store = db.store().await; // runs migration 0007
    let kept = store.operation(old).await.unwrap().expect("kept");
    assert_eq!(
        (kept.action, kept.cursor, kept.moved, kept.state),
        (ActionKind::Discard, 7, 3, OperationState::Stopped)
    );
    assert_eq!(kept.spec, serde_json::json!({"x": 1}));
    let patch = store.create_operation(ActionKind::Patch, serde_json::json!({}), AuditNote::new("bob", "tag")).await;
    assert!(patch.unwrap().id > old, "ids are not reused");
    let refused = sqlx::query(insert).bind("bogus").execute(store.pool()).await;
    assert!(refused.is_err(), "{refused:?}");
    store.pool().close().await;
}

/// JSON that SQLite's `json_valid` accepts and serde cannot read (`1e400`, invalid UTF-8 in a
/// string; here written by another client) is read as its text: the payload raw, for a list
/// and a claim; the error chain one line that says why, no headers, an audit diff its text, a
/// catalog schema none. Each once failed with "error occurred while decoding column".
#[tokio::test]
async fn json_that_serde_cannot_read_is_read_as_its_text() {
    use dlq_core::store::{ClaimRequest, NewDeadLetter};
    use dlq_core::{ErrorClass, ListFilter, Payload, classify::FailureInfo};
    let store = SqliteStore::in_memory().await.expect("SQLite store");
    let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    let letter = NewDeadLetter::new("odd", Payload::Json(serde_json::json!(1)), failure).retry(Default::default(), 5);
    let id = store.park(letter).await.unwrap().id;
    let odd = r#"UPDATE dlq_events SET payload = CAST(X'7B226E223A2022FF227D' AS TEXT), error_chain = '[1e400]',
        source_headers = '{"h": 1e400}' WHERE id = ?"#;
    sqlx::query(odd).bind(id).execute(store.pool()).await.unwrap();
    let audit = "INSERT INTO dlq_audit (dlq_id, action, actor, diff, at) VALUES (?, 'patch', 'sql', '[1e400]', 0)";
    sqlx::query(audit).bind(id).execute(store.pool()).await.unwrap();
    store.publish_types(vec![dlq_core::catalog::EventTypeInfo::new("odd", 2, "host:1")]).await.unwrap();
    let schemas = r#"UPDATE dlq_event_types SET json_schema = '{"maximum": 1e400}', older_schemas = '{"1": [1e400]}'"#;
    sqlx::query(schemas).execute(store.pool()).await.unwrap();

    let text = b"{\"n\": \"\xff\"}".to_vec();
    let row = store.list(ListFilter::default()).await.unwrap().remove(0);
    assert_eq!(row.payload, Payload::Raw { bytes: text.clone(), truncated: None });
    assert!(row.payload.raw_note().unwrap().starts_with("not UTF-8"));
    assert!(row.failure.chain[0].contains("not JSON serde reads: number out of range"), "{:?}", row.failure.chain);
    assert!(row.source.headers.is_empty());
    assert_eq!(store.audit(id).await.unwrap().remove(0).diff, serde_json::json!("[1e400]"));
    let catalog = store.event_types().await.unwrap();
    assert_eq!((catalog[0].schema.as_ref(), catalog[0].older_schemas.len()), (None, 0), "no schema to check by");
    let request = ClaimRequest {
        event_types: vec!["odd".into()],
        limit: 1,
        lease: std::time::Duration::from_secs(60),
        owner: "w".into(),
    };
    assert_eq!(store.claim(request).await.unwrap()[0].payload, Payload::Raw { bytes: text, truncated: None });
}
