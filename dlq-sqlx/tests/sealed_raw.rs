//! Encryption at rest on the SQL stores, end to end as an application runs it: an
//! `encrypt = true` handler parks its failure, the retrier retries it (failing once more,
//! echoing the card in its error) and then succeeds, an operator patches another row; then
//! the raw bytes are searched for the card number: every table of the PostgreSQL database (each
//! row as text), and the SQLite database file with its WAL. Neither holds it.

use std::sync::Arc;

use dlq_core::admin::Admin;
use dlq_core::sealed::KeyRing;
use dlq_core::{HandlerError, Retrier, Scope, Status, dead_letter, handlers, handlers::Attempt, store::prelude::*};
use dlq_sqlx::{PgConfig, PgStore, SqliteStore};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

const MARKER: &str = "PAN-4000-0566-5566-5556";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Charge {
    id: u64,
    pan: String,
}

/// Fails live and on its first retry, echoing the card; succeeds after.
#[dead_letter(event_type = "raw-charge", encrypt = true, clear = ["/id"], backoff = "none", max_retries = 1000)]
async fn charge(c: Charge, attempt: Attempt) -> Result<(), std::io::Error> {
    assert!(c.pan.starts_with(MARKER), "the handler sees plaintext");
    if attempt.retry_count > 0 {
        return Ok(());
    }
    Err(std::io::Error::other(format!("ledger refused {}", c.pan)))
}

fn keys() -> KeyRing {
    KeyRing::new("k1", [("k1", [42; 32])]).unwrap()
}

/// Parks two charges, patches the second, and retries both (one more failure each) to
/// `SUCCEEDED`. Returns the ids.
async fn run(store: Arc<dyn DeadLetterStore>) {
    let mut ids = Vec::new();
    for id in [1, 2] {
        let event = Charge { id, pan: MARKER.into() };
        let call = charge(event, Attempt::first());
        let err = Scope::new().store(store.clone()).keys(keys()).run(call).await.unwrap_err();
        let HandlerError::Parked { id, .. } = err else { panic!("{err:?}") };
        ids.push(id);
    }
    let admin = Admin::new(store.clone(), "alice").keys(keys());
    let patch = serde_json::json!([{"op": "replace", "path": "/pan", "value": format!("{MARKER}-fixed")}]);
    admin.patch(ids[1], &patch, "card reissued").await.unwrap();
    let retrier = Retrier::new(store.clone(), handlers![charge].unwrap()).keys(keys());
    while retrier.run_once().await.unwrap() > 0 {}
    for id in &ids {
        let row = store.get(*id).await.unwrap().unwrap();
        assert_eq!(row.status, Status::Succeeded, "{row:?}");
        assert!(store.attempts(*id).await.unwrap().len() >= 3, "the live failure, a failed retry, the success");
    }
}

#[sqlx::test(migrations = false)]
async fn no_postgres_table_holds_the_plaintext(pool: PgPool) {
    let store = PgStore::from_pool(pool.clone(), PgConfig::default()).await.unwrap();
    run(Arc::new(store.clone())).await;
    // Each table's rows as text, the table named by the catalog and quoted by PostgreSQL.
    let search = |needle: &'static str| {
        sqlx::query_as::<_, (String, i64)>(
            "SELECT t.table_schema || '.' || t.table_name,
                    (xpath('/row/c/text()', query_to_xml(format('SELECT count(*) AS c FROM %I.%I x WHERE x::text LIKE %L',
                        t.table_schema, t.table_name, '%' || $1 || '%'), false, true, '')))[1]::text::bigint
             FROM information_schema.tables t
             WHERE t.table_type = 'BASE TABLE' AND t.table_schema NOT IN ('pg_catalog', 'information_schema')",
        )
        .bind(needle)
        .fetch_all(&pool)
    };
    // The search finds what is there: the event type, in clear, in the events table.
    let clear = search("raw-charge").await.unwrap();
    assert!(clear.iter().any(|(t, n)| t.ends_with(".dlq_events") && *n == 2), "{clear:?}");
    let hits = search(MARKER).await.unwrap();
    assert!(hits.iter().any(|(t, _)| t.ends_with("dlq_events")), "the events table was searched: {hits:?}");
    assert!(hits.iter().all(|(_, n)| *n == 0), "plaintext at rest: {hits:?}");
}

#[tokio::test]
async fn the_sqlite_file_holds_no_plaintext() {
    let path = std::env::temp_dir().join(format!("dlq-sealed-raw-{}.db", std::process::id()));
    let store = SqliteStore::open(&path).await.unwrap();
    run(Arc::new(store.clone())).await;
    let mut searched = 0;
    for ext in ["", "-wal"] {
        let mut file = path.as_os_str().to_owned();
        file.push(ext);
        if let Ok(bytes) = std::fs::read(&file) {
            searched += bytes.windows(10).filter(|w| *w == b"raw-charge").count();
            assert!(!bytes.windows(MARKER.len()).any(|w| w == MARKER.as_bytes()), "plaintext in {file:?}");
        }
    }
    assert!(searched > 0, "the search finds what is there: the event type, in clear");
    store.pool().close().await;
    for ext in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(ext);
        let _ = std::fs::remove_file(file);
    }
}
