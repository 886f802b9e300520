//! `--validate` in a service binary that embeds the CLI with its handlers
//! (`tests/bin/embedded_cli.rs`, `dlq_cli::Embedded`), on PostgreSQL (`#[sqlx::test]`, a fresh
//! database): a redrive is refused whole, before any row moves, while a selected row's payload
//! does not deserialize into its handler's event type, and a patch that would produce such a payload is refused whole; `upgrade`
//! rewrites an event type's old rows in its handler's version.

use std::process::{Command, Output};

use dlq_core::{
    DlqId, ErrorClass, Payload, Status, adapter::DeadReason, classify::FailureInfo, store::NewDeadLetter,
    store::prelude::*,
};
use dlq_sqlx::{PgConfig, PgStore};
use serde_json::{Value, json};
use sqlx::PgPool;

fn url_of(db: &str) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL is set by scripts/test.sh");
    let (prefix, _) = base.rsplit_once('/').expect("DATABASE_URL has a database name");
    format!("{prefix}/{db}")
}

/// `dlq-embedded args…` on `url`.
fn embedded(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dlq-embedded"))
        .args(args)
        .env("DATABASE_URL", url)
        .env("USER", "oncall")
        .output()
        .expect("the embedded CLI runs")
}

fn json_of(out: &Output) -> Value {
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

async fn park(store: &PgStore, event_type: &str, payload: Value) -> DlqId {
    let failure = FailureInfo::new(ErrorClass::Permanent, "BadCurrency", "currency \"USD \"".into(), vec![], None);
    let letter = NewDeadLetter::new(event_type, Payload::Json(payload), failure).dead(DeadReason::Permanent);
    store.park(letter).await.expect("parked").id
}

#[sqlx::test(migrations = false)]
async fn validate_refuses_payloads_the_handler_type_rejects_on_redrive_and_patch(pool: PgPool) {
    let store = PgStore::from_pool(pool.clone(), PgConfig::default()).await.expect("store and migrations");
    let db: String = sqlx::query_scalar("SELECT current_database()").fetch_one(&pool).await.unwrap();
    let url = url_of(&db);
    let good = park(&store, "payment", json!({"id": 1, "amount_cents": 1004, "currency": "USD"})).await;
    let text_amount = park(&store, "payment", json!({"id": 2, "amount_cents": "10.04", "currency": "USD"})).await;
    let unknown = park(&store, "refund", json!({"id": 3})).await;
    let spare = park(&store, "payment", json!({"id": 4, "amount_cents": 1005, "currency": "USD"})).await;

    // Validation counts every selected row before any moves and refuses the whole redrive
    // when one would not decode, a dry run as the real run: exit 1, the counts with the first
    // error of each group, nothing moved.
    let dry = embedded(&url, &["redrive", "--all", "--validate", "--dry-run", "--json"]);
    let stderr = String::from_utf8_lossy(&dry.stderr);
    assert_eq!(dry.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("redrive refused by --validate: 2 of 4 rows would not decode"), "{stderr}");
    let counts: Value = serde_json::from_slice(&dry.stdout).expect("the counts, as JSON");
    let report = counts["validation"].to_string();
    assert!(report.contains("does not deserialize into `dlq_embedded::Payment`"), "{report}");
    assert!(report.contains("no handler is registered for event type `refund`"), "{report}");
    let refused = embedded(&url, &["redrive", "--all", "--validate", "--reason", "try", "--json"]);
    assert_eq!(refused.status.code(), Some(1), "{}", String::from_utf8_lossy(&refused.stderr));
    for id in [good, text_amount, unknown, spare] {
        assert_eq!(store.get(id).await.unwrap().unwrap().status, Status::FailedPermanently, "nothing moved");
    }

    // A patch whose result the handler's type rejects is refused whole: one line, exit 1.
    let dir = std::env::temp_dir().join(format!("dlq-validate-{db}"));
    std::fs::create_dir_all(&dir).unwrap();
    let breaks = dir.join("breaks.json");
    std::fs::write(&breaks, r#"[{"op": "replace", "path": "/currency", "value": 840}]"#).unwrap();
    let spare_id = spare.to_string();
    let refused =
        embedded(&url, &["patch", &spare_id, "--patch", breaks.to_str().unwrap(), "--reason", "x", "--validate"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("the patched payload of dead letter {spare} would fail again")), "{stderr}");
    assert!(stderr.contains("invalid type: integer `840`, expected a string"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let row = store.get(spare).await.unwrap().unwrap();
    assert_eq!(row.payload, Payload::Json(json!({"id": 4, "amount_cents": 1005, "currency": "USD"})), "unchanged");
    assert!(store.audit(spare).await.unwrap().is_empty(), "nothing audited");

    // A patch that repairs the type passes validation; then the redrive moves it too.
    let repairs = dir.join("repairs.json");
    std::fs::write(&repairs, r#"[{"op": "replace", "path": "/amount_cents", "value": 1004}]"#).unwrap();
    let id = text_amount.to_string();
    json_of(&embedded(
        &url,
        &["patch", &id, "--patch", repairs.to_str().unwrap(), "--reason", "cents", "--validate", "--json"],
    ));
    let still = embedded(&url, &["redrive", "--all", "--validate", "--reason", "fixed", "--json"]);
    assert_eq!(still.status.code(), Some(1), "the refund row has no handler: still refused whole");
    let done =
        json_of(&embedded(&url, &["redrive", "--event-type", "payment", "--validate", "--reason", "fixed", "--json"]));
    assert_eq!(done["moved_ids"], json!([good, text_amount, spare]));
    assert_eq!(store.get(unknown).await.unwrap().unwrap().status, Status::FailedPermanently);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[sqlx::test(migrations = false)]
async fn upgrade_rewrites_old_rows_in_the_handlers_version_and_audits_each(pool: PgPool) {
    let store = PgStore::from_pool(pool.clone(), PgConfig::default()).await.expect("store and migrations");
    let db: String = sqlx::query_scalar("SELECT current_database()").fetch_one(&pool).await.unwrap();
    let url = url_of(&db);
    let old = park(&store, "invoice", json!({"id": 1, "total": 300})).await;
    let credit = park(&store, "invoice", json!({"id": 2, "total": -300})).await;
    let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    let current = NewDeadLetter::new("invoice", Payload::Json(json!({"id": 3, "currency": "USD"})), failure);
    let current = store.park(current.with_version(2)).await.expect("parked").id;

    let dry =
        json_of(&embedded(&url, &["upgrade", "invoice", "--reason", "drop the v1 struct", "--dry-run", "--json"]));
    assert_eq!((dry["to"].as_u64(), dry["dry_run"].as_bool()), (Some(2), Some(true)));
    assert_eq!(dry["upgraded"], json!([{ "id": old, "from": 1 }]));
    assert_eq!(
        dry["refused"],
        json!([{ "id": credit, "reason": "upcasting from version 1 to 2 failed: a credit note has no version 2" }])
    );
    assert_eq!(store.get(old).await.unwrap().unwrap().version, 1, "a dry run writes nothing");

    let done = json_of(&embedded(&url, &["upgrade", "invoice", "--reason", "drop the v1 struct", "--json"]));
    assert_eq!(done["upgraded"], json!([{ "id": old, "from": 1 }]));
    let row = store.get(old).await.unwrap().unwrap();
    assert_eq!((row.version, row.payload), (2, Payload::Json(json!({"id": 1, "total": 300, "currency": "EUR"}))));
    let audit = store.audit(old).await.unwrap();
    assert_eq!((audit[0].action.as_str(), audit[0].actor.as_str()), ("upgrade", "oncall"));
    assert_eq!(audit[0].reason.as_deref(), Some("drop the v1 struct"));
    assert_eq!(audit[0].diff["payload"]["old"], json!({"id": 1, "total": 300}));
    for (id, version) in [(credit, 1), (current, 2)] {
        assert_eq!(store.get(id).await.unwrap().unwrap().version, version);
        assert!(store.audit(id).await.unwrap().is_empty(), "row {id} is left as it is");
    }
    // A type the binary has no handler for is an unknown event type: exit 4, nothing done.
    for dry in [&[][..], &["--dry-run"]] {
        let unknown = embedded(&url, &[&["upgrade", "no-such-type", "--reason", "x"], dry].concat());
        let stderr = String::from_utf8_lossy(&unknown.stderr);
        assert_eq!(unknown.status.code(), Some(4), "{stderr}");
        assert!(stderr.contains("nothing matched: no handler is registered for event type `no-such-type`"), "{stderr}");
    }
    let text = embedded(&url, &["upgrade", "invoice", "--reason", "again"]);
    assert_eq!(text.status.code(), Some(0));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("upgraded 0 rows of `invoice` to version 2\nrefused "), "{text}");
}
