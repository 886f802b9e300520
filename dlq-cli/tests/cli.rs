//! End to end: the `dlq` binary against a SQLite file and a fresh PostgreSQL database
//! (`DATABASE_URL`, e.g. `postgres://postgres@127.0.0.1:5432/postgres`; each test creates and
//! drops its own database), for every verb and the bad-input cases.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::{Command as Std, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use assert_cmd::Command;
use dlq_core::{
    CancellationToken, Classify, DlqId, ErrorClass, ListFilter, Payload, Retrier, RetrierConfig, Status,
    adapter::DeadReason, classify::FailureInfo, dead_letter, handlers, store::NewDeadLetter, store::prelude::*,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod common;
use common::{Db, pg_base};

fn failure(kind: &str, reason: &str) -> FailureInfo {
    let chain = vec![reason.to_owned(), "caused by: the POS firmware".to_owned()];
    FailureInfo::new(ErrorClass::Permanent, kind, reason.to_owned(), chain, None)
}

/// Three dead payments with a bad currency and one pending refund.
async fn seed(store: &Arc<dyn DeadLetterStore>) -> Vec<DlqId> {
    let mut ids = Vec::new();
    for n in 0..3 {
        let payload = Payload::Json(serde_json::json!({ "id": n, "currency": "USD " }));
        let letter =
            NewDeadLetter::new("payment", payload, failure("BadCurrency", "currency \"USD \" is not ISO 4217"))
                .dead(DeadReason::Permanent)
                .with_source(dlq_core::adapter::SourceMeta::kafka("payments", 3, 1_000 + n));
        ids.push(store.park(letter).await.unwrap().id);
    }
    let pending =
        NewDeadLetter::new("refund", Payload::from_bytes(b"\xff\x00raw"), failure("Timeout", "ledger timed out"));
    ids.push(store.park(pending.retry(Duration::from_secs(3600), 5).with_version(2)).await.unwrap().id);
    ids
}

/// The verb's JSON, read without serde's nesting limit of 128: a payload nested as deep as
/// the store reads sits two levels deeper in a verb's document (any other JSON reader takes it).
fn json_of(out: &[u8]) -> Value {
    use serde::Deserialize as _;
    let mut reader = serde_json::Deserializer::from_slice(out);
    reader.disable_recursion_limit();
    Value::deserialize(&mut reader)
        .and_then(|value| reader.end().map(|()| value))
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(out)))
}

fn run_json(db: &Db, args: &[&str]) -> Value {
    let out = db.dlq().args(args).arg("--json").assert().success().get_output().stdout.clone();
    json_of(&out)
}

/// Fails with `code` and one line on stderr containing `want`.
fn fails(db: &Db, args: &[&str], code: i32, want: &str) {
    let out = db.dlq().args(args).assert().code(code).get_output().clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(want), "{args:?}: {err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
}

async fn reads(db: Db) {
    let store = db.store().await;
    let ids = seed(&store).await;
    let stats = run_json(&db, &["stats"]);
    assert_eq!(stats["counts"][0]["event_type"], "payment");
    assert_eq!(stats["counts"][0]["failed_permanently"], 3);
    assert_eq!(stats["groups"][0]["count"], 3);
    assert_eq!(stats["growth"]["last_5m"], 4);
    assert_eq!(stats["orphans"][0]["event_type"], "refund", "no retrier handles refunds");
    let group = stats["groups"][0]["fingerprint"].as_str().unwrap().to_owned();

    let page = run_json(&db, &["ls", "--group", &group, "--limit", "2"]);
    assert_eq!(page["rows"].as_array().unwrap().len(), 2);
    let next = page["next"].as_i64().unwrap();
    let rest = run_json(&db, &["ls", "--group", &group, "--limit", "2", "--after", &next.to_string()]);
    assert_eq!(rest["rows"][0]["id"], ids[0]);
    assert!(rest["next"].is_null());
    let by_kind = run_json(&db, &["ls", "--kind", "Timeout", "--since", "1h", "--status", "pending"]);
    assert_eq!(by_kind["rows"][0]["id"], ids[3]);
    let by_reason = run_json(&db, &["ls", "--reason", "ISO 4217", "--until", "2000-01-01T00:00:00Z"]);
    assert!(by_reason["rows"].as_array().unwrap().is_empty());

    let shown = run_json(&db, &["show", &ids[3].to_string()]);
    assert_eq!(shown["payload_raw_hex"], "ff00726177");
    assert_eq!((shown["version"].as_u64(), rest["rows"][0]["version"].as_u64()), (Some(2), Some(1)));
    assert_eq!(shown["error_chain"][1], "caused by: the POS firmware");
    assert_eq!(shown["attempts"][0]["attempt"], 0);
    let human = db.dlq().args(["show", &ids[0].to_string()]).assert().success().get_output().stdout.clone();
    let human = String::from_utf8(human).unwrap();
    assert!(human.contains("\"currency\": \"USD \"") && human.contains("payments/3/1000"), "{human}");
    let workers = run_json(&db, &["workers"]);
    assert_eq!(workers["retriers"], serde_json::json!([]));
}

async fn repairs(db: Db) {
    let store = db.store().await;
    let ids = seed(&store).await;
    let dir = tempfile::tempdir().unwrap();
    let patch = dir.path().join("fix.json");
    std::fs::write(&patch, r#"[{"op": "replace", "path": "/currency", "value": "USD"}]"#).unwrap();
    let id = ids[0].to_string();
    let patched = run_json(&db, &["patch", &id, "--patch", patch.to_str().unwrap(), "--reason", "trailing space"]);
    assert_eq!(patched["new"]["currency"], "USD");
    let audit_id = patched["audit_id"].as_i64().unwrap().to_string();
    let entry = &run_json(&db, &["show", &id])["audit"][0];
    assert_eq!((entry["actor"].as_str(), entry["reason"].as_str()), (Some("oncall"), Some("trailing space")));
    assert_eq!(entry["diff"]["payload"]["old"]["currency"], "USD ");
    run_json(&db, &["undo", &audit_id]);
    assert_eq!(run_json(&db, &["show", &id])["payload"]["currency"], "USD ");
    // The patch was followed by its undo: undoing it again would revert that undo too.
    fails(&db, &["undo", &audit_id], 1, "would also revert 1 later patch");
    assert_eq!(run_json(&db, &["undo", &audit_id, "--force"])["new"]["currency"], "USD ");

    // The editor path: any command that edits the file in place.
    db.dlq().args(["patch", &id, "--reason", "edited"]).env("EDITOR", "sed -i -e 's/USD /EUR/'").assert().success();
    assert_eq!(run_json(&db, &["show", &id])["payload"]["currency"], "EUR");

    let dry = run_json(&db, &["redrive", "--all", "--dry-run"]);
    assert_eq!((dry["dry_run"].as_bool(), dry["moved"].as_u64()), (Some(true), Some(3)));
    let done = run_json(&db, &["redrive", &id, &ids[3].to_string(), "--reason", "fixed"]);
    assert_eq!(done["moved_ids"], serde_json::json!([ids[0]]));
    assert_eq!(done["refusals"][0]["reason"], "status", "the pending row is reported, not skipped silently");
    let discarded = run_json(&db, &["discard", "--status", "FAILED_PERMANENTLY", "--reason", "dupes", "--max", "1"]);
    assert_eq!(discarded["moved"], 1);
    let guard = store.list(ListFilter::default().status(Status::Pending)).await.unwrap();
    assert!(guard.iter().any(|l| l.id == ids[0] && l.redrive_count == 1));
    assert_eq!(run_json(&db, &["purge", "--older-than", "1h"])["purged"], 0);
    db.dlq().args(["purge", "--older-than", "1h"]).assert().success().stdout("purged 0 rows\n");
    run_json(&db, &["migrate"]);
}

async fn group_patch(db: Db) {
    let store = db.store().await;
    let ids = seed(&store).await;
    let bad_currency = failure("BadCurrency", "currency \"USD \" is not ISO 4217");
    let no_currency = Payload::Json(serde_json::json!({ "id": 9 }));
    let misfit = NewDeadLetter::new("payment", no_currency, bad_currency.clone()).dead(DeadReason::Permanent);
    let misfit = store.park(misfit).await.unwrap().id;
    let raw = NewDeadLetter::new("payment", Payload::from_bytes(b"\xff"), bad_currency).dead(DeadReason::Permanent);
    let raw = store.park(raw).await.unwrap().id;
    let group = store.get(ids[0]).await.unwrap().unwrap().failure.fingerprint;
    let dir = tempfile::tempdir().unwrap();
    let fix = dir.path().join("fix.json");
    std::fs::write(&fix, r#"[{"op": "replace", "path": "/currency", "value": "USD"}]"#).unwrap();
    let args = ["patch", "--group", &group, "--patch", fix.to_str().unwrap(), "--reason", "trailing space"];

    // The dry run says what would change, row by row, and writes nothing.
    let dry = run_json(&db, &[&args[..], &["--dry-run"]].concat());
    let patched: Vec<_> = dry["patched"].as_array().unwrap().iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(patched, ids[..3]);
    let change = &dry["patched"][0]["changes"][0];
    assert_eq!(
        (change["path"].as_str(), change["old"].as_str(), change["new"].as_str()),
        (Some("/currency"), Some("USD "), Some("USD"))
    );
    assert_eq!(dry["refused"][0]["id"].as_i64(), Some(misfit));
    assert!(dry["refused"][0]["reason"].as_str().unwrap().starts_with("patch does not apply"), "{dry}");
    assert_eq!(dry["refused"][1]["id"].as_i64(), Some(raw));
    assert!(dry["refused"][1]["reason"].as_str().unwrap().contains("raw (non-JSON) payload"), "{dry}");
    let text = snapshot_text(&db, &[&args[..], &["--dry-run"]].concat());
    assert!(
        text.starts_with("would patch: 3 rows\n") && text.contains("    /currency: \"USD \" -> \"USD\"\n"),
        "{text}"
    );
    assert_eq!(run_json(&db, &["show", &ids[0].to_string()])["payload"]["currency"], "USD ", "dry: unchanged");
    assert!(store.audit(ids[0]).await.unwrap().is_empty());

    // Applied: a stored operation, each row written and audited; the misfits refused with the
    // reason, the run going on.
    let done = run_json(&db, &args);
    assert_eq!((done["action"].as_str(), done["state"].as_str()), (Some("patch"), Some("done")));
    assert_eq!(done["moved_ids"], serde_json::json!(ids[..3]));
    assert_eq!(done["refusals"][0]["id"].as_i64(), Some(misfit));
    assert_eq!(done["refusals"][0]["reason"], "unfit");
    assert!(done["refusals"][0]["message"].as_str().unwrap().starts_with("patch does not apply"), "{done}");
    assert_eq!(done["refusals"][1]["id"].as_i64(), Some(raw));
    for (n, id) in ids[..3].iter().enumerate() {
        let entry = &run_json(&db, &["show", &id.to_string()])["audit"][0];
        assert_eq!((entry["actor"].as_str(), entry["reason"].as_str()), (Some("oncall"), Some("trailing space")));
        assert_eq!(entry["diff"]["payload"]["old"]["currency"], "USD ");
        assert_eq!(entry["diff"]["operation"], done["operation"]);
        assert_eq!(
            store.get(*id).await.unwrap().unwrap().payload,
            Payload::Json(serde_json::json!({"id": n, "currency": "USD"}))
        );
    }
    // Again: nothing left to change, nothing written twice.
    let again = run_json(&db, &args);
    assert_eq!(again["moved"], 0);
    assert_eq!(again["refusals"][0]["message"], "the patch changes nothing");
    assert_eq!(store.audit(ids[0]).await.unwrap().len(), 1);
    fails(&db, &["patch", "--group", &group, "--reason", "x"], 2, "--patch");
    fails(
        &db,
        &["patch", &ids[0].to_string(), "--group", &group, "--patch", "-", "--reason", "x"],
        2,
        "cannot be used with",
    );
}

async fn bad_input(db: Db) {
    let store = db.store().await;
    let ids = seed(&store).await;
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    fails(&db, &["show", "999999"], 1, "dead letter 999999 not found");
    fails(&db, &["ls", "--since", "yesterday"], 2, "neither a duration");
    fails(&db, &["ls", "--status", "BROKEN"], 2, "expected one of");
    fails(&db, &["purge", "--older-than", "2 parsecs"], 2, "not a duration");
    fails(&db, &["redrive", "--rate", "fast", "--all"], 2, "not a rate");
    fails(&db, &["redrive"], 2, "say which rows");
    fails(&db, &["discard", &ids[0].to_string()], 2, "--reason");
    fails(&db, &["undo", "424242"], 1, "audit entry 424242 not found");
    fails(&db, &["redrive", "--resume", "77"], 1, "operation 77 not found");
    fails(&db, &["redrive", "--all", "--validate"], 2, "the store's type catalog, which is empty");
    fails(&db, &["upgrade", "payment", "--reason", "x"], 2, "upgrade needs the service's handlers and their upcasters");
    fails(&db, &["upgrade", "payment", "--reason", " "], 2, "upgrade needs a non-empty --reason");
    std::fs::write(&bad, "not json").unwrap();
    let id = ids[0].to_string();
    fails(&db, &["patch", &id, "--patch", bad.to_str().unwrap(), "--reason", "x"], 1, "is not JSON");
    std::fs::write(&bad, r#"{"op": "add"}"#).unwrap();
    fails(&db, &["patch", &id, "--patch", bad.to_str().unwrap(), "--reason", "x"], 1, "not an RFC 6902");
    std::fs::write(&bad, r#"[{"op": "remove", "path": "/nope"}]"#).unwrap();
    fails(&db, &["patch", &id, "--patch", bad.to_str().unwrap(), "--reason", "x"], 1, "patch does not apply");
    fails(&db, &["patch", &id, "--patch", "/no/such/file", "--reason", "x"], 1, "cannot read patch");
    fails(&db, &["patch", &id, "--reason", " ", "--patch", "-"], 2, "non-empty --reason");
    let mut nothing = db.dlq();
    nothing.env_remove("DATABASE_URL").args(["stats"]).assert().code(2);
    fails(&db, &["stats", "--database-url", "mysql://x/y"], 2, "unsupported database URL scheme `mysql`");
    // Connection errors read like a person wrote them: what went wrong, where, in one line;
    // a malformed URL is a usage error.
    let base = pg_base();
    let (head, _) = base.rsplit_once('/').unwrap();
    for (url, code, want) in [
        (
            "postgres://nobody@127.0.0.1:1/db".to_owned(),
            1,
            "cannot reach PostgreSQL at 127.0.0.1:1: connection refused",
        ),
        ("postgres://nobody@[::1]:1/db".to_owned(), 1, "cannot reach PostgreSQL at [::1]:1: connection refused"),
        (format!("{head}/dlq_no_such_db"), 1, "database \"dlq_no_such_db\" does not exist"),
        ("postgres://x@[::1/db".to_owned(), 2, "invalid database URL: invalid IPv6 address"),
        (format!("{base}?sslmode=bogus"), 2, "invalid database URL: unknown value \"bogus\""),
    ] {
        let out = db.dlq().args(["stats", "--database-url", &url]).assert().code(code).get_output().clone();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{url}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{url}: {err}");
        for noise in ["pool timed out", " at line ", "error with configuration", "os error", "::"] {
            assert!(!err.replace("[::1]", "").contains(noise), "{url}: {noise:?} in {err}");
        }
    }
}

async fn interrupted_redrive_resumes_without_a_row_lost_or_moved_twice(db: Db) {
    // At 4 rows a second, the 40 rows leave the kill ten seconds to land mid-run.
    const ROWS: usize = 40;
    let store = db.store().await;
    let letters = (0..ROWS)
        .map(|n| {
            NewDeadLetter::new("payment", Payload::Json(n.into()), failure("E", "down")).dead(DeadReason::Permanent)
        })
        .collect();
    store.park_many(letters).await.unwrap();
    let bin = assert_cmd::cargo::cargo_bin("dlq");
    let mut child = Std::new(bin)
        .args(["redrive", "--all", "--batch", "1", "--rate", "4/s", "--reason", "replay", "--json"])
        .env("DATABASE_URL", &db.url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pending = || store.count(ListFilter::default().status(Status::Pending).limit(usize::MAX));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while pending().await.unwrap() < 3 {
        assert!(tokio::time::Instant::now() < deadline, "the redrive moved no rows");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let moved_before = pending().await.unwrap();
    assert!(moved_before < ROWS as u64, "killed mid-run");
    // The rest at a faster rate than the stored 4/s: `--rate` overrides it for this run.
    let done = run_json(&db, &["redrive", "--resume", "1", "--rate", "1000/s"]);
    assert_eq!((done["state"].as_str(), done["moved"].as_u64()), (Some("done"), Some(ROWS as u64)));
    let rows = store.list(ListFilter::default().limit(ROWS)).await.unwrap();
    assert_eq!(rows.len(), ROWS);
    for row in rows {
        assert_eq!((row.status, row.redrive_count), (Status::Pending, 1), "row {}", row.id);
        assert_eq!(store.audit(row.id).await.unwrap().len(), 1, "row {} audited once", row.id);
    }
}

/// `dlq patch --group` killed mid-run and resumed with `dlq patch --resume`: every row is
/// patched exactly once (an array `add`, which a second application would repeat).
async fn interrupted_group_patch_resumes_patching_each_row_once(db: Db) {
    let store = db.store().await;
    let letters = (0..12)
        .map(|n| {
            let payload = Payload::Json(serde_json::json!({ "n": n, "tags": [] }));
            NewDeadLetter::new("payment", payload, failure("E", "down")).dead(DeadReason::Permanent)
        })
        .collect();
    let first = store.park_many(letters).await.unwrap()[0].id;
    let group = store.get(first).await.unwrap().unwrap().failure.fingerprint;
    let dir = tempfile::tempdir().unwrap();
    let add = dir.path().join("add.json");
    std::fs::write(&add, r#"[{"op": "add", "path": "/tags/-", "value": "x"}]"#).unwrap();
    let bin = assert_cmd::cargo::cargo_bin("dlq");
    let mut child = Std::new(bin)
        .args(["patch", "--group", &group, "--patch", add.to_str().unwrap(), "--reason", "tag", "--json"])
        .args(["--batch", "1", "--rate", "4/s"])
        .env("DATABASE_URL", &db.url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let payloads = || async {
        let rows = store.list(ListFilter::default().limit(100)).await.unwrap();
        rows.into_iter().map(|r| r.payload).collect::<Vec<_>>()
    };
    let once = |p: &Payload| matches!(p, Payload::Json(d) if d["tags"] == serde_json::json!(["x"]));
    let untouched = |p: &Payload| matches!(p, Payload::Json(d) if d["tags"] == serde_json::json!([]));
    while payloads().await.iter().filter(|p| once(p)).count() < 3 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = payloads().await;
    assert!(before.iter().all(|p| once(p) || untouched(p)), "each row once or not at all: {before:?}");
    assert!(before.iter().any(untouched), "killed mid-run");
    fails(&db, &["redrive", "--resume", "1"], 1, "operation 1 is a patch, not a redrive: nothing resumed");
    let done = run_json(&db, &["patch", "--resume", "1", "--rate", "1000/s"]);
    assert_eq!((done["state"].as_str(), done["moved"].as_u64()), (Some("done"), Some(12)));
    for row in store.list(ListFilter::default().limit(100)).await.unwrap() {
        assert!(once(&row.payload), "row {} patched once: {:?}", row.id, row.payload);
        assert_eq!(store.audit(row.id).await.unwrap().len(), 1, "row {} audited once", row.id);
    }
    fails(&db, &["patch", "--resume", "1"], 1, "operation 1 is done: nothing to resume");
    fails(&db, &["patch", "--resume", "1", "--reason", "x"], 2, "cannot be used with");
}

async fn pause_and_resume(db: Db) {
    let store = db.store().await;
    seed(&store).await;
    fails(&db, &["pause", "payment"], 2, "--reason");
    let paused = run_json(&db, &["pause", "payment", "--reason", "ledger migration until 14:00", "--actor", "alice"]);
    assert_eq!((paused["paused"].as_bool(), paused["paused_by"].as_str()), (Some(true), Some("alice")));
    let stats = run_json(&db, &["stats"]);
    assert_eq!(stats["circuits"][0]["event_type"], "payment");
    assert_eq!(stats["circuits"][0]["pause_reason"], "ledger migration until 14:00");
    let warnings = stats["warnings"].to_string();
    assert!(warnings.contains("paused by alice"), "{warnings}");
    let human = snapshot_text(&db, &["stats"]);
    assert!(human.contains("CIRCUITS") && human.contains("by alice: ledger migration"), "{human}");
    assert!(!store.circuits().await.unwrap().get("payment").is_claimable());

    let resumed = run_json(&db, &["resume", "payment", "--reason", "migration done"]);
    assert_eq!(resumed["paused"], false);
    assert!(run_json(&db, &["stats"])["circuits"].as_array().unwrap().is_empty());
    let log = store.circuit_log(Some("payment".into()), 10).await.unwrap();
    let steps: Vec<_> = log.iter().map(|e| (e.to.as_str(), e.reason.as_str())).collect();
    assert_eq!(steps, [("resumed", "migration done"), ("paused", "ledger migration until 14:00")]);
}

/// Human output, with ids and times masked.
fn snapshot_text(db: &Db, args: &[&str]) -> String {
    let out = db.dlq().args(args).assert().success().get_output().stdout.clone();
    String::from_utf8(out).unwrap()
}

async fn human_output(db: Db) {
    let store = db.store().await;
    let ids = seed(&store).await;
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "[time]");
    settings.add_filter(r"since \d\d:\d\d UTC", "since [minute]");
    settings.add_filter(r"\b[0-9a-f]{16}\b", "[group]");
    settings.add_filter(r"(?m)^(\s*)\d+(\s{2,})", "$1[id]$2");
    settings.bind(|| {
        insta::assert_snapshot!("ls", snapshot_text(&db, &["ls"]));
        insta::assert_snapshot!("show", snapshot_text(&db, &["show", &ids[3].to_string()]));
        insta::assert_snapshot!("stats", snapshot_text(&db, &["stats"]));
        insta::assert_snapshot!(
            "redrive_dry_run",
            snapshot_text(&db, &["redrive", "--all", "--dry-run"])
                .replace(&ids[0].to_string(), "[id]")
                .replace(&ids[1].to_string(), "[id]")
                .replace(&ids[2].to_string(), "[id]")
        );
    });
}

/// The widest line a table may print: eight columns of at most 60 characters and their gaps.
const TABLE_LINE_MAX: usize = 600;

/// Tables stay tables whatever a row holds: long stored text (event type, kind, reason,
/// fingerprint, actor, pause reason) is cut with `…`, by characters; `dlq show` has the row's
/// own fields whole, and `--json` has every one exactly as stored.
async fn long_text_is_cut_in_tables_and_whole_in_show_and_json(db: Db) {
    let store = db.store().await;
    // Repeated text: PostgreSQL compresses it below its index entry limit.
    let long = |what: &str| format!("{what}-{}", "é".repeat(10_000));
    let mut failure = failure(&long("kind"), &long("reason"));
    failure.fingerprint = long("fp");
    let event_type = long("type");
    let letter = NewDeadLetter::new(&event_type, Payload::Json(serde_json::json!({ "id": 1 })), failure)
        .dead(DeadReason::Permanent);
    let id = store.park(letter).await.unwrap().id;
    let stored = store.get(id).await.unwrap().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fix = dir.path().join("fix.json");
    std::fs::write(&fix, r#"[{"op": "add", "path": "/x", "value": 1}]"#).unwrap();
    let actor = long("actor");
    let reason = long("why");
    let fix = fix.to_str().unwrap();
    db.dlq()
        .args(["patch", &id.to_string(), "--patch", fix, "--reason", &reason, "--actor", &actor])
        .assert()
        .success();
    db.dlq().args(["pause", &event_type, "--reason", &reason, "--actor", &actor]).assert().success();

    let beat = dlq_core::admin::RetrierHeartbeat::new(&long("owner"), [event_type.as_str()], false);
    store.heartbeat(&beat, Duration::from_secs(600)).await.unwrap();

    for (args, shown) in [(&["ls"][..], "type-éééé"), (&["stats"], "type-éééé"), (&["workers"], "owner-éééé")]
    {
        let text = snapshot_text(&db, args);
        assert!(text.contains(shown) && text.contains('…'), "{args:?}: cut, not dropped: {text}");
        let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(widest <= TABLE_LINE_MAX, "{args:?}: a line of {widest} characters");
    }
    let shown = snapshot_text(&db, &["show", &id.to_string()]);
    for whole in [&stored.event_type, &stored.failure.reason, &stored.failure.fingerprint] {
        assert!(shown.contains(whole.as_str()), "show has the row's own fields whole");
    }
    let audit = shown.split("\nAUDIT\n").nth(1).unwrap();
    let widest = audit.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(widest <= TABLE_LINE_MAX && audit.contains("actor-éé"), "the audit table is cut: {widest}");

    let json = run_json(&db, &["show", &id.to_string()]);
    assert_eq!(json["event_type"], stored.event_type.as_str());
    assert_eq!(json["error_kind"], stored.failure.kind.as_str());
    assert_eq!(json["error_reason"], stored.failure.reason.as_str());
    assert_eq!(json["fingerprint"], stored.failure.fingerprint.as_str());
    assert_eq!(
        (json["audit"][0]["actor"].as_str(), json["audit"][0]["reason"].as_str()),
        (Some(&*actor), Some(&*reason))
    );
    let listed = run_json(&db, &["ls"]);
    assert_eq!(listed["rows"][0]["event_type"], stored.event_type.as_str());
    let stats = run_json(&db, &["stats"]);
    assert_eq!(stats["groups"][0]["fingerprint"], stored.failure.fingerprint.as_str());
    assert_eq!(stats["circuits"][0]["pause_reason"], reason.as_str());
}

/// What a stored row can carry to a terminal: clear the screen, retitle the window, write
/// the clipboard (OSC 52), plant a link (OSC 8), a C1 CSI, a right-to-left override, a
/// carriage return that overwrites the line.
const HOSTILE: [&str; 7] = [
    "\x1b[2J",
    "\x1b]0;title\x07",
    "\x1b]52;c;ZXZpbA==\x07",
    "\x1b]8;;http://evil\x1b\\x\x1b]8;;\x1b\\",
    "\u{9b}31m",
    "\u{202e}",
    "\r",
];

/// `bytes` hold nothing a terminal acts on: valid UTF-8 (no raw C1 byte), no control
/// character but newline and tab, no bidi override or isolate.
fn assert_inert(what: &str, bytes: &[u8]) {
    let text = std::str::from_utf8(bytes).unwrap_or_else(|e| panic!("{what}: not UTF-8 ({e}): {bytes:?}"));
    let bad = text.chars().find(|c| {
        (c.is_control() && !matches!(c, '\n' | '\t'))
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}')
    });
    assert!(bad.is_none(), "{what} printed {bad:?}: {text:?}");
}

/// Runs `args` (human output) and checks stdout and stderr are inert; returns stdout.
fn inert(db: &Db, args: &[&str], code: i32) -> String {
    let out = db.dlq().args(args).assert().code(code).get_output().clone();
    assert_inert(&format!("{args:?} stdout"), &out.stdout);
    assert_inert(&format!("{args:?} stderr"), &out.stderr);
    String::from_utf8(out.stdout).unwrap()
}

async fn hostile_text_never_reaches_the_terminal(db: Db) {
    let store = db.store().await;
    let evil = HOSTILE.concat();
    let event_type = format!("pay{evil}x");
    let mut source = dlq_core::adapter::SourceMeta::kafka(&format!("topic{evil}"), 1, 2);
    source.headers.insert(format!("h{evil}"), format!("v{evil}"));
    source.trace_context = Some(format!("trace{evil}"));
    let failure = FailureInfo::new(
        ErrorClass::Permanent,
        &format!("Kind{evil}"),
        format!("reason{evil}"),
        vec![format!("reason{evil}"), format!("cause{evil}")],
        Some(format!("stack{evil}\n\tat frame")),
    );
    let letter = NewDeadLetter::new(&event_type, Payload::Json(serde_json::json!({ "note": evil })), failure.clone())
        .dead(DeadReason::Permanent)
        .with_source(source)
        .with_dedupe_key(format!("key{evil}"))
        .with_handler(format!("handler{evil}"));
    let json_id = store.park(letter).await.unwrap().id.to_string();
    let raw_bytes = [format!("raw{evil}").as_bytes(), b"\x9b\x1b"].concat();
    let raw = NewDeadLetter::new(&event_type, Payload::from_bytes(&raw_bytes), failure).dead(DeadReason::Permanent);
    let raw_id = store.park(raw).await.unwrap().id.to_string();
    let beat = dlq_core::admin::RetrierHeartbeat::new(&format!("owner{evil}"), [event_type.as_str()], false);
    store.heartbeat(&beat, Duration::from_secs(600)).await.unwrap();
    let group = store.get(json_id.parse().unwrap()).await.unwrap().unwrap().failure.fingerprint;
    let dir = tempfile::tempdir().unwrap();
    let fix = dir.path().join("fix.json");
    std::fs::write(&fix, serde_json::json!([{ "op": "add", "path": "/more", "value": evil }]).to_string()).unwrap();

    let listed = inert(&db, &["ls"], 0);
    assert!(listed.contains("pay.[2J.]0;title."), "shown, neutralized: {listed}");
    let shown = inert(&db, &["show", &json_id], 0);
    assert!(shown.contains("topic.[2J") && shown.contains("key.[2J") && shown.contains("cause.[2J"), "{shown}");
    inert(&db, &["show", &raw_id], 0);
    inert(&db, &["stats"], 0);
    inert(&db, &["workers"], 0);
    inert(&db, &["redrive", "--all", "--dry-run"], 0);
    inert(&db, &["patch", "--group", &group, "--patch", fix.to_str().unwrap(), "--reason", &evil, "--dry-run"], 0);
    let reason = format!("group-patch{evil}");
    let stored = inert(&db, &["patch", "--group", &group, "--patch", fix.to_str().unwrap(), "--reason", &reason], 0);
    assert!(stored.contains("patched: 1 rows") && stored.contains(&format!("refused {raw_id}: ")), "{stored}");
    let shown = inert(&db, &["show", &json_id], 0);
    assert!(shown.contains("group-patch.[2J"), "the group patch's reason, neutralized: {shown}");
    inert(&db, &["patch", &json_id, "--patch", fix.to_str().unwrap(), "--reason", &evil], 0);
    inert(&db, &["pause", &event_type, "--reason", &format!("pause{evil}")], 0);
    let stats = inert(&db, &["stats"], 0);
    assert!(stats.contains("pause.[2J"), "the pause reason, neutralized: {stats}");
    inert(&db, &["resume", &event_type, "--reason", &evil], 0);
    inert(&db, &["discard", &raw_id, "--reason", &format!("audit{evil}")], 0);
    let audited = inert(&db, &["show", &raw_id], 0);
    assert!(audited.contains("audit.[2J"), "the audit reason, neutralized: {audited}");
    inert(&db, &["show", &json_id], 0);
    inert(&db, &["redrive", "--group", &evil, "--reason", "x"], 4);
    inert(&db, &["pause", &format!("no{evil}"), "--reason", "x"], 4);
    // What clap quotes back in its usage text (an unknown verb or flag, a bad value).
    inert(&db, &[&evil], 2);
    inert(&db, &["ls", &format!("--{evil}")], 2);
    inert(&db, &["ls", "--limit", &evil], 2);
    // --json stays exact: the text round-trips.
    assert_eq!(run_json(&db, &["show", &json_id])["event_type"], event_type.as_str());
}

/// Everything a hostile producer can put in a string at once: the terminal attacks of
/// [`HOSTILE`], every C0 control (NUL included: PostgreSQL stores it replaced) and every C1
/// control, HTML and quotes.
fn hostile_text() -> String {
    let c0: String = (0u8..0x20).map(char::from).collect();
    let c1: String = ('\u{80}'..='\u{9f}').collect();
    format!("{}{c0}{c1}<script>alert(1)</script>&amp;\"'", HOSTILE.concat())
}

/// The same as an argument: argv cannot hold a NUL.
fn hostile_arg() -> String {
    hostile_text().replace('\0', "")
}

/// Every verb `dlq --help` lists (but `serve`, whose pages escape the same rows as HTML in
/// dlq-web's tests) on rows whose every field is hostile, 10,000 characters long, or raw
/// invalid UTF-8, with a fingerprint shaped like a path: the human output never holds a
/// control character, an escape or a bidi override, and `--json` gives back exactly what
/// the store holds.
async fn hostile_data_through_every_verb(db: Db) {
    let store = db.store().await;
    let evil = hostile_text();
    let arg = hostile_arg();
    let long = format!("{evil}{}", "ab".repeat(5_000));
    let mut failure = FailureInfo::new(
        ErrorClass::Permanent,
        &format!("Kind{evil}"),
        long.clone(),
        vec![long.clone(), format!("cause{evil}")],
        Some(format!("stack{evil}\n\tat frame")),
    );
    // What a verb selects by (on the command line: no NUL) is hostile too.
    failure.fingerprint = format!("../../etc/passwd{arg}");
    let mut source = dlq_core::adapter::SourceMeta::kafka(&format!("topic{evil}"), 1, 2);
    source.headers.insert(format!("h{evil}"), format!("v{evil}"));
    source.trace_context = Some(format!("trace{evil}"));
    let event_type = format!("pay{arg}");
    // A JSON string with a NUL is kept as raw bytes on PostgreSQL (JSONB cannot hold it), and
    // this row is to be patched: the raw row below holds the NUL.
    let payload = Payload::Json(serde_json::json!({ "note": arg, "long": long.replace('\0', "") }));
    let letter = NewDeadLetter::new(&event_type, payload, failure.clone())
        .dead(DeadReason::Permanent)
        .with_source(source)
        .with_dedupe_key(format!("key{evil}"))
        .with_handler(format!("handler{evil}"));
    let json_id = store.park(letter).await.unwrap().id;
    let raw_bytes = [b"\xff\xfe\x1b[2J\x9b31m\xc0\x80".as_slice(), long.as_bytes(), b"\xed\xa0\x80"].concat();
    let mut raw_failure = failure.clone();
    raw_failure.fingerprint = "/tmp/../x?y#z".into();
    let raw = NewDeadLetter::new(&event_type, Payload::from_bytes(&raw_bytes), raw_failure).dead(DeadReason::Permanent);
    let raw_id = store.park(raw).await.unwrap().id;
    // A retrier names itself (host, pid): no NUL there.
    let beat = dlq_core::admin::RetrierHeartbeat::new(&format!("owner{arg}"), [event_type.as_str()], false);
    store.heartbeat(&beat, Duration::from_secs(600)).await.unwrap();
    let stored = store.get(json_id).await.unwrap().unwrap();
    let stored_raw = store.get(raw_id).await.unwrap().unwrap();
    let (json_id, raw_id) = (json_id.to_string(), raw_id.to_string());
    let fp = stored.failure.fingerprint.clone();
    let dir = tempfile::tempdir().unwrap();
    let fix = dir.path().join("fix.json");
    std::fs::write(&fix, serde_json::json!([{ "op": "add", "path": "/more", "value": arg }]).to_string()).unwrap();
    let fix = fix.to_str().unwrap();
    let mut verbs = std::collections::BTreeSet::new();
    // Runs `args` twice when `both`: for people (inert) and as JSON; returns the JSON.
    let mut run = |args: &[&str], code: i32, json: bool| -> Value {
        verbs.insert(args[0].to_owned());
        if !json {
            inert(&db, args, code);
            return Value::Null;
        }
        let out = db.dlq().args(args).arg("--json").assert().code(code).get_output().clone();
        assert_inert(&format!("{args:?} --json stderr"), &out.stderr);
        json_of(&out.stdout)
    };

    // Reads, for people and as JSON.
    for args in
        [&["ls"][..], &["ls", "--group", &fp], &["show", &json_id], &["show", &raw_id], &["stats"], &["workers"]]
    {
        run(args, 0, false);
    }
    let rows = run(&["ls", "--group", &fp], 0, true);
    assert_eq!(rows["rows"][0]["id"].to_string(), json_id);
    let row = &rows["rows"][0];
    assert_eq!(row["event_type"], stored.event_type.as_str());
    assert_eq!(row["error_kind"], stored.failure.kind.as_str());
    assert_eq!(row["error_reason"], stored.failure.reason.as_str());
    assert_eq!(row["fingerprint"], fp.as_str());
    assert_eq!(row["handler"], stored.handler.as_str());
    let shown = run(&["show", &json_id], 0, true);
    let Payload::Json(payload) = &stored.payload else { panic!("a JSON payload") };
    assert_eq!(&shown["payload"], payload);
    assert_eq!(shown["error_chain"], serde_json::json!(stored.failure.chain));
    assert_eq!(shown["stacktrace"], stored.failure.stacktrace.as_deref().unwrap());
    assert_eq!(shown["dedupe_key"], stored.dedupe_key.as_deref().unwrap());
    assert_eq!(shown["source"]["topic"], stored.source.topic.as_deref().unwrap());
    let raw_shown = run(&["show", &raw_id], 0, true);
    let Payload::Raw { bytes, .. } = &stored_raw.payload else { panic!("raw") };
    assert_eq!(raw_shown["payload_raw_hex"], dlq_core::admin::hex(bytes).as_str());
    assert_eq!(raw_shown["fingerprint"], stored_raw.failure.fingerprint.as_str());
    let stats = run(&["stats"], 0, true);
    assert_eq!(stats["counts"][0]["event_type"], stored.event_type.as_str());
    let groups: Vec<&str> =
        stats["groups"].as_array().unwrap().iter().map(|g| g["fingerprint"].as_str().unwrap()).collect();
    assert!(groups.contains(&fp.as_str()), "{groups:?}");
    let owner = store.retriers().await.unwrap()[0].owner.clone();
    assert_eq!(run(&["workers"], 0, true)["retriers"][0]["owner"], owner.as_str());

    // Dry runs, then the real thing, with hostile reasons and actors.
    run(&["redrive", "--group", &fp, "--dry-run"], 0, false);
    assert_eq!(run(&["redrive", "--group", &fp, "--dry-run"], 0, true)["moved_ids"], serde_json::json!([stored.id]));
    run(&["discard", &raw_id, "--dry-run", "--reason", &arg], 0, false);
    run(&["patch", "--group", &fp, "--patch", fix, "--reason", &arg, "--dry-run"], 0, false);
    let dry = run(&["patch", "--group", &fp, "--patch", fix, "--reason", &arg, "--dry-run"], 0, true);
    assert_eq!(dry["patched"][0]["changes"][0]["new"], arg.as_str());
    let patched = run(&["patch", &json_id, "--patch", fix, "--reason", &arg, "--actor", &arg], 0, true);
    assert_eq!(patched["new"]["more"], arg.as_str());
    let audit = &run(&["show", &json_id], 0, true)["audit"][0];
    assert_eq!((audit["reason"].as_str(), audit["actor"].as_str()), (Some(arg.as_str()), Some(arg.as_str())));
    run(&["show", &json_id], 0, false);
    let audit_id = audit["id"].to_string();
    run(&["undo", &audit_id, "--reason", &arg], 0, false);
    let undone = &run(&["show", &json_id], 0, true)["audit"][0];
    assert_eq!(undone["reason"], arg.as_str());
    run(&["pause", &event_type, "--reason", &arg, "--actor", &arg], 0, false);
    let stats = run(&["stats"], 0, true);
    assert_eq!(
        (stats["circuits"][0]["pause_reason"].as_str(), stats["circuits"][0]["paused_by"].as_str()),
        (Some(arg.as_str()), Some(arg.as_str()))
    );
    run(&["stats"], 0, false);
    run(&["resume", &event_type, "--reason", &arg], 0, true);
    run(&["redrive", &json_id, "--reason", &arg], 0, false);
    let discarded = run(&["discard", &raw_id, "--reason", &arg], 0, true);
    assert_eq!(discarded["moved_ids"], serde_json::json!([stored_raw.id]));
    run(&["show", &raw_id], 0, false);
    run(&["purge", "--older-than", "0s", "--yes"], 0, false);
    // Erasure: without the key, one inert line; a record with a hostile actor and reason.
    run(&["erase", "--subject", &arg, "--reason", &arg, "--actor", &arg], 1, false);
    let subject = dlq_core::subject::SubjectKey::new(SUBJECT_KEY).unwrap().hash("customer-42");
    let note = dlq_core::store::AuditNote::new(arg.as_str(), arg.as_str());
    store.erase(dlq_core::store::EraseRequest::new(subject, note)).await.unwrap();
    run(&["erasures"], 0, false);
    let erasures = run(&["erasures"], 0, true);
    assert_eq!(
        (erasures["erasures"][0]["actor"].as_str(), erasures["erasures"][0]["reason"].as_str()),
        (Some(arg.as_str()), Some(arg.as_str()))
    );
    run(&["migrate"], 0, true);
    // The roles' SQL is printed whatever the store: it holds no stored text.
    run(&["roles"], 0, false);
    run(&["ls"], 0, false);
    // Without a key ring: one line, nothing written.
    run(&["rekey", "--reason", &arg], 1, false);
    // The stock binary links no upcasters: refused with one line, whatever the type is called.
    run(&["upgrade", &event_type, "--reason", &arg], 2, false);

    // Every verb of `dlq --help` was run, but `serve`.
    let help = db.dlq().arg("--help").assert().success().get_output().stdout.clone();
    let help = String::from_utf8(help).unwrap();
    let listed: std::collections::BTreeSet<String> = help
        .split("Commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .map_while(|l| l.strip_prefix("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|v| !matches!(*v, "serve" | "help"))
        .map(str::to_owned)
        .collect();
    assert_eq!(verbs, listed, "a verb `dlq --help` lists is not run on hostile rows");
}

/// `redrive --resume` of a stored discard once discarded (and `discard --resume` of a
/// redrive redrove): refused with one line naming both, nothing moved, still resumable.
async fn a_resume_must_name_the_operations_verb(db: Db) {
    let store = db.store().await;
    seed(&store).await;
    let admin = dlq_core::admin::Admin::new(Arc::clone(&store), "oncall");
    let filter = ListFilter::default().status(Status::FailedPermanently);
    let discard = admin.start(dlq_core::admin::BulkPlan::discard(filter.clone(), "dupes")).await.unwrap();
    let discard_id = discard.operation().unwrap().id.to_string();
    drop(discard);
    let redrive = admin.start(dlq_core::admin::BulkPlan::redrive(filter.clone(), "fixed")).await.unwrap();
    let redrive_id = redrive.operation().unwrap().id.to_string();
    drop(redrive);

    let want = format!("operation {discard_id} is a discard, not a redrive: nothing resumed");
    fails(&db, &["redrive", "--resume", &discard_id], 1, &want);
    let want = format!("operation {redrive_id} is a redrive, not a discard: nothing resumed");
    fails(&db, &["discard", "--resume", &redrive_id], 1, &want);
    assert_eq!(store.count(filter.clone()).await.unwrap(), 3, "nothing moved");
    let done = run_json(&db, &["discard", "--resume", &discard_id]);
    assert_eq!((done["action"].as_str(), done["moved"].as_u64()), (Some("discard"), Some(3)));
}

/// Every number is bounded when parsed, with one line saying the range; nothing moves.
async fn numbers_out_of_range_are_refused_before_anything_moves(db: Db) {
    let store = db.store().await;
    seed(&store).await;
    fails(&db, &["redrive", "--all", "--reason", "x", "--rate", "1e-300"], 2, "between 0.01/s and 1000000/s");
    fails(&db, &["redrive", "--all", "--dry-run", "--rate", "1e-10"], 2, "between 0.01/s and 1000000/s");
    fails(&db, &["redrive", "--all", "--canary", "0"], 2, "0 is out of range: from 1 to 10000");
    fails(&db, &["redrive", "--all", "--batch", "0"], 2, "0 is out of range: from 1 to 10000");
    fails(&db, &["discard", "--all", "--reason", "x", "--batch", "100000"], 2, "out of range");
    fails(&db, &["redrive", "--all", "--max", "0"], 2, "--max");
    fails(&db, &["redrive", "--all", "--canary", "1", "--canary-wait", "500000000y"], 2, "a canary's wait must be");
    fails(&db, &["redrive", "--all", "--canary", "1", "--canary-wait", "2d"], 2, "a canary's wait must be");
    fails(&db, &["ls", "--limit", "0"], 2, "0 is out of range");
    fails(&db, &["stats", "--top", "0"], 2, "0 is out of range");
    fails(&db, &["purge", "--older-than", "200y", "--yes"], 2, "the age must be");
    assert_eq!(store.count(ListFilter::default().status(Status::FailedPermanently)).await.unwrap(), 3);
    // A dry run is never paced: the slowest rate does not slow it down.
    let dry = run_json(&db, &["redrive", "--all", "--dry-run", "--batch", "1", "--rate", "0.01/s"]);
    assert_eq!(dry["moved"], 3);
}

/// A usage error exits 2 with one line, before anything is read or written: a malformed
/// database URL, an empty `--reason`, a number out of range or a malformed value.
async fn usage_errors_exit_2_with_one_line(db: Db) {
    let store = db.store().await;
    let ids = seed(&store).await;
    let id = ids[0].to_string();
    let dir = tempfile::tempdir().unwrap();
    let fix = dir.path().join("fix.json");
    std::fs::write(&fix, r#"[{"op": "add", "path": "/x", "value": 1}]"#).unwrap();
    let fix = fix.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["stats", "--database-url", "postgres://x@[::1/db"], "invalid database URL"),
        (&["stats", "--database-url", "postgres://x@127.0.0.1:port/db"], "invalid database URL"),
        (&["stats", "--database-url", "localhost:5432/db"], "unsupported database URL scheme"),
        (&["stats", "--database-url", ""], "unsupported database URL scheme"),
        (&["patch", &id, "--patch", fix, "--reason", ""], "patch needs a non-empty --reason"),
        (&["patch", &id, "--patch", fix, "--reason", " \t"], "patch needs a non-empty --reason"),
        (&["discard", &id, "--reason", ""], "discard needs a non-empty --reason"),
        (&["discard", "999999", "--reason", " "], "discard needs a non-empty --reason"),
        (&["redrive", &id, "--reason", ""], "redrive needs a non-empty --reason"),
        (&["pause", "payment", "--reason", ""], "pause needs a non-empty --reason"),
        (&["pause", " ", "--reason", "x"], "name the event type"),
        (&["resume", ""], "name the event type"),
        (&["undo", "1", "--reason", ""], "undo needs a non-empty --reason"),
        (&["redrive", "--all", "--max", "0"], "invalid value '0' for '--max <MAX>'"),
        (&["redrive", "--all", "--max-redrives", "1001"], "1001 is not in 0..=1000"),
        (&["ls", "--limit", "10001"], "10001 is out of range: from 1 to 10000"),
        (&["ls", "--limit", "-1"], "unexpected argument '-1'"),
        (&["stats", "--top", "99999999999999999999999"], "is not a whole number"),
        (&["show", "99999999999999999999"], "number too large"),
        (&["ls", "--after", "abc"], "invalid digit"),
        (&["ls", "--since", "1000000000y"], "too long"),
        (&["purge", "--older-than", "200y", "--yes"], "the age must be"),
        (&["redrive", "--all", "--canary", "10001"], "out of range"),
    ];
    for (args, want) in cases {
        let out = db.dlq().args(*args).assert().code(2).get_output().clone();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
        let unexpected = err.contains("unexpected argument");
        assert!(unexpected || err.trim_end().lines().count() == 1, "{args:?}: one line: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    assert_eq!(store.audit(ids[0]).await.unwrap().len(), 0, "nothing was written");
    assert_eq!(store.count(ListFilter::default().status(Status::FailedPermanently)).await.unwrap(), 3);
    assert!(store.circuits().await.unwrap().circuits.is_empty(), "nothing paused");
}

/// `dlq --help` ends with the exit-code table, and the operating guide's table (docs/OPERATING.md)
/// says the same codes.
#[test]
fn the_exit_code_table_is_in_the_help_and_the_operating_guide() {
    let help = Command::cargo_bin("dlq").unwrap().arg("--help").assert().success().get_output().stdout.clone();
    let help = String::from_utf8(help).unwrap();
    let table = help.split("Exit codes:\n").nth(1).unwrap();
    let number = |word: &&str| word.chars().all(|c| c.is_ascii_digit());
    let codes: Vec<&str> = table
        .lines()
        .map_while(|l| l.strip_prefix("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(number)
        .collect();
    assert_eq!(codes, ["0", "1", "2", "3", "4", "130", "141"], "{help}");
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/OPERATING.md")).unwrap();
    let section = guide.split("| exit code | meaning |").nth(1).expect("docs/OPERATING.md has the exit-code table");
    let documented: Vec<&str> = section
        .lines()
        .skip(2)
        .map_while(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(documented, codes, "docs/OPERATING.md's exit codes");
}

/// A verb that selects nothing says so and exits 4, storing no operation; `purge` shows its
/// count and needs `--yes` off a terminal.
async fn nothing_matched_is_not_success(db: Db) {
    let store = db.store().await;
    let ids = seed(&store).await;
    fails(&db, &["redrive", "999999", "--reason", "x"], 4, "nothing matched: no row with id 999999");
    fails(
        &db,
        &["redrive", "--group", "nosuchgroup"],
        4,
        "nothing matched: no FAILED_PERMANENTLY row matches --group nosuchgroup",
    );
    fails(&db, &["redrive", "--group", "nosuchgroup", "--dry-run"], 4, "nothing matched");
    fails(&db, &["discard", "--group", "nosuchgroup", "--reason", "x"], 4, "nothing matched: no row matches --group");
    fails(&db, &["redrive", "--event-type", "refund"], 4, "nothing matched");
    fails(
        &db,
        &["pause", "nosuchtype", "--reason", "x"],
        4,
        "nothing matched: unknown event type `nosuchtype`: no row, circuit, live retrier, catalog record or handler has it",
    );
    fails(&db, &["resume", "nosuchtype"], 4, "nothing matched");
    let dir = tempfile::tempdir().unwrap();
    let fix = dir.path().join("fix.json");
    std::fs::write(&fix, r#"[{"op": "add", "path": "/x", "value": 1}]"#).unwrap();
    let patch = ["patch", "--group", "nosuchgroup", "--patch", fix.to_str().unwrap(), "--reason", "x"];
    fails(&db, &patch, 4, "nothing matched: no FAILED_PERMANENTLY row in group `nosuchgroup`");
    let admin = dlq_core::admin::Admin::new(Arc::clone(&store), "oncall");
    assert!(matches!(admin.resume(1).await, Err(dlq_core::Error::OperationNotFound(1))), "no operation stored");
    assert!(store.circuits().await.unwrap().circuits.is_empty(), "nothing paused");
    let help = db.dlq().arg("--help").assert().success().get_output().stdout.clone();
    let help = String::from_utf8(help).unwrap();
    assert!(help.contains("Exit codes:") && help.contains("  4    nothing matched"), "{help}");

    // purge: the count, and --yes off a terminal.
    run_json(&db, &["discard", &ids[0].to_string(), &ids[1].to_string(), "--reason", "dupes"]);
    let want = "purge deletes 2 SUCCEEDED/DISCARDED rows last changed over 0s ago";
    fails(&db, &["purge", "--older-than", "0s"], 2, want);
    fails(&db, &["purge", "--older-than", "0s"], 2, "pass --yes to confirm (no terminal to ask on)");
    assert_eq!(store.count(ListFilter::default().status(Status::Discarded)).await.unwrap(), 2, "nothing purged");
    db.dlq().args(["purge", "--older-than", "0s", "--yes"]).assert().success().stdout("purged 2 rows\n");
}

/// A row of type `done` that succeeded: claimed and settled as a retrier would.
async fn succeeded(store: &Arc<dyn DeadLetterStore>) -> DlqId {
    use dlq_core::store::{ClaimRequest, Settlement};
    let id = store.park(NewDeadLetter::new("done", Payload::Json(1.into()), failure("E", "down"))).await.unwrap().id;
    let request =
        ClaimRequest { event_types: vec!["done".into()], limit: 1, lease: Duration::from_secs(60), owner: "t".into() };
    let claimed = store.claim(request).await.unwrap();
    store.settle(vec![Settlement::Succeeded { lease: claimed[0].lease }]).await.unwrap();
    id
}

/// An `--event-type` nothing knows exits 4 on every verb that takes one, saying so; a type
/// only the catalog knows is known (no rows: an empty list, exit 0).
async fn an_unknown_event_type_exits_4_on_every_verb(db: Db) {
    let store = db.store().await;
    seed(&store).await;
    let unknown = "nothing matched: unknown event type `no-such-type`: no row, circuit, live retrier, catalog record or handler has it";
    for verb in [
        &["ls"][..],
        &["ls", "--oldest-first"],
        &["redrive", "--reason", "x"],
        &["redrive", "--dry-run"],
        &["discard", "--reason", "x"],
        &["discard", "--reason", "x", "--dry-run"],
        &["rekey", "--reason", "x"],
    ] {
        fails(&db, &[verb, &["--event-type", "no-such-type"]].concat(), 4, unknown);
    }
    let catalog = dlq_core::catalog::EventTypeInfo::new("invoice", 1, "host:1:invoices");
    store.publish_types(vec![catalog]).await.unwrap();
    assert_eq!(run_json(&db, &["ls", "--event-type", "invoice"])["rows"], serde_json::json!([]));
    fails(&db, &["redrive", "--event-type", "invoice"], 4, "nothing matched: no FAILED_PERMANENTLY row matches");
}

/// A list of ids with one no row has is refused whole, dry or not, naming the unknown ids
/// (exit 4): nothing moves; ids below 1 are usage errors (exit 2) on every verb taking ids.
async fn unknown_ids_and_ids_below_one_are_named(db: Db) {
    let store = db.store().await;
    let ids = seed(&store).await;
    let (a, b) = (ids[0].to_string(), ids[1].to_string());
    let want = format!("nothing matched: no row with ids 999998, 999999 (of {a}, {b}, 999998, 999999): nothing done");
    for verb in [&["redrive", "--reason", "x"][..], &["redrive", "--dry-run"], &["discard", "--reason", "x"]] {
        fails(&db, &[verb, &[&a, &b, "999998", "999999"]].concat(), 4, &want);
    }
    fails(&db, &["discard", &a, "999999", "--reason", "x", "--dry-run"], 4, "no row with id 999999 (of");
    assert_eq!(store.count(ListFilter::default().status(Status::FailedPermanently)).await.unwrap(), 3);
    assert!(store.operation(1).await.unwrap().is_none(), "no operation stored");
    let fix = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(fix.path(), r#"[{"op": "add", "path": "/x", "value": 1}]"#).unwrap();
    let fix = fix.path().to_str().unwrap();
    for args in [
        &["redrive", "0", "--reason", "x"][..],
        &["redrive", &a, "-1"],
        &["discard", "-5", "--reason", "x"],
        &["show", "0"],
        &["patch", "0", "--patch", fix, "--reason", "x"],
        &["undo", "-1"],
    ] {
        fails(&db, args, 2, "is not an id: ids are whole numbers from 1");
    }
}

/// A dry run exits as its real run would and says nothing moved: a patch that does not fit
/// its one row exits 1 both ways, an unknown row too; a redrive's dry run prints no "moved".
async fn a_dry_run_answers_as_its_run_would(db: Db) {
    let store = db.store().await;
    let ids = seed(&store).await;
    let id = ids[0].to_string();
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bad.path(), r#"[{"op": "remove", "path": "/nope"}]"#).unwrap();
    let bad = bad.path().to_str().unwrap();
    for dry in [&[][..], &["--dry-run"]] {
        fails(&db, &[&["patch", &id, "--patch", bad, "--reason", "x"], dry].concat(), 1, "patch does not apply");
        fails(&db, &[&["patch", "999999", "--patch", bad, "--reason", "x"], dry].concat(), 1, "999999 not found");
    }
    let out = db.dlq().args(["redrive", "--all", "--dry-run", "--batch", "1"]).assert().success().get_output().clone();
    let (said, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(said.starts_with("would redrive: 3 rows"), "{said}");
    assert!(err.contains("read 1: 1 would redrive, 0 would be refused"), "{err}");
    assert!(!err.contains("moved") && !said.contains("moved"), "a dry run moves nothing: {err}{said}");
    assert_eq!(store.count(ListFilter::default().status(Status::FailedPermanently)).await.unwrap(), 3);
}

/// `discard` takes dead and pending rows only: a SUCCEEDED one is refused with its status,
/// dry run and real run alike, and stays SUCCEEDED.
async fn discard_refuses_rows_that_are_not_dead_or_pending(db: Db) {
    let store = db.store().await;
    let ids = seed(&store).await;
    let done = succeeded(&store).await;
    let (dead, pending, done_id) = (ids[0].to_string(), ids[3].to_string(), done.to_string());
    let refused = serde_json::json!([{ "id": done, "reason": "status", "status": "SUCCEEDED" }]);
    let dry = run_json(&db, &["discard", &dead, &pending, &done_id, "--reason", "x", "--dry-run"]);
    assert_eq!((&dry["moved_ids"], &dry["refusals"]), (&serde_json::json!([ids[0], ids[3]]), &refused));
    let all = run_json(&db, &["discard", "--all", "--reason", "x", "--dry-run"]);
    assert_eq!((&all["moved_ids"], &all["refusals"]), (&serde_json::json!(ids), &refused));
    let text = db.dlq().args(["discard", &done_id, "--reason", "x", "--dry-run"]).assert().success();
    let text = String::from_utf8_lossy(&text.get_output().stdout).into_owned();
    assert!(text.contains(&format!("refused {done}: status is SUCCEEDED")), "{text}");
    let real = run_json(&db, &["discard", &dead, &pending, &done_id, "--reason", "x"]);
    assert_eq!((&real["moved_ids"], &real["refusals"]), (&serde_json::json!([ids[0], ids[3]]), &refused));
    assert_eq!(store.get(done).await.unwrap().unwrap().status, Status::Succeeded);
    assert!(store.audit(done).await.unwrap().is_empty(), "nothing written to the refused row");
}

macro_rules! on_both_stores {
    ($($check:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread")]
            async fn $check() {
                super::$check(super::Db::sqlite().await).await;
            })*
        }
        mod pg {
            $(#[tokio::test(flavor = "multi_thread")]
            async fn $check() {
                super::$check(super::Db::postgres().await).await;
            })*
        }
    };
}

on_both_stores!(
    reads,
    repairs,
    group_patch,
    bad_input,
    interrupted_redrive_resumes_without_a_row_lost_or_moved_twice,
    interrupted_group_patch_resumes_patching_each_row_once,
    pause_and_resume,
    hostile_text_never_reaches_the_terminal,
    long_text_is_cut_in_tables_and_whole_in_show_and_json,
    usage_errors_exit_2_with_one_line,
    hostile_data_through_every_verb,
    a_resume_must_name_the_operations_verb,
    numbers_out_of_range_are_refused_before_anything_moves,
    nothing_matched_is_not_success,
    erase_by_subject,
    validate_by_the_type_catalog,
    undecodable_rows_and_a_patch_by_version,
    an_unreadable_payload_breaks_no_verb,
    an_unknown_event_type_exits_4_on_every_verb,
    unknown_ids_and_ids_below_one_are_named,
    a_dry_run_answers_as_its_run_would,
    discard_refuses_rows_that_are_not_dead_or_pending
);

/// The stock binary validates by the type catalog the service's retriers publish: with rows
/// that would not decode, `redrive --validate` prints the counts per group with the first
/// error and refuses before any row moves; once the catalog's schema takes them, it redrives.
async fn validate_by_the_type_catalog(db: Db) {
    use dlq_core::catalog::EventTypeInfo;
    let store = db.store().await;
    seed(&store).await;
    let ahead = NewDeadLetter::new(
        "payment",
        Payload::Json(serde_json::json!({"id": 9, "currency": "EUR"})),
        failure("Other", "x"),
    );
    store.park(ahead.dead(DeadReason::Permanent).with_version(3)).await.unwrap();
    // Version 2 decodes; version 1 upcasts; its schema wants an ISO 4217 currency.
    let mut payment = EventTypeInfo::new("payment", 2, "host:1:payments");
    payment.upcast_from = 1;
    let strict = serde_json::json!({"type": "object", "required": ["id", "currency"],
        "properties": {"id": {"type": "integer"}, "currency": {"enum": ["USD", "EUR"]}}});
    payment.older_schemas = [(1, strict)].into();
    store.publish_types(vec![payment.clone()]).await.unwrap();

    let out = db
        .dlq()
        .args(["redrive", "--all", "--validate", "--reason", "fixed", "--json"])
        .assert()
        .code(1)
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("redrive refused by --validate: 4 of 4 rows would not decode") && err.contains("nothing moved"),
        "{err}"
    );
    let report = json_of(&out.stdout)["validation"].clone();
    let groups = report["groups"].as_array().unwrap();
    let bad = groups.iter().find(|g| g["not"] == 3).expect("the bad-currency group");
    assert_eq!((bad["as_is"].as_u64(), bad["after_upcast"].as_u64()), (Some(0), Some(0)));
    let first = bad["first_error"][1].as_str().unwrap();
    assert!(first.contains("does not match version 1's schema: /currency: \"USD \" is not one of"), "{first}");
    let ahead = groups.iter().find(|g| g["not"] == 1).expect("the row ahead");
    assert!(ahead["first_error"][1].as_str().unwrap().contains("version 3 is newer than version 2"), "{ahead}");
    assert_eq!(run_json(&db, &["stats"])["counts"][0]["failed_permanently"], 4, "nothing moved");

    // In text: the counts table, one row per group.
    let text =
        db.dlq().args(["redrive", "--all", "--validate", "--reason", "fixed"]).assert().code(1).get_output().clone();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("AFTER UPCAST")
            && text.contains("4 rows checked: 0 decode as they are, 0 after upcasting, 0 unchecked, 4 not at all"),
        "{text}"
    );

    // A catalog whose version 1 takes any currency: the version-1 rows pass after upcasting,
    // the row ahead still stops the redrive; without it, the rest move.
    // (Version 1 published with another shape is a mismatch: accepted, as a retrier's
    // `accept_schema_change` does.)
    let any_currency = serde_json::json!({"type": "object", "required": ["currency"]});
    let accepted = dlq_core::catalog::VersionSchema::new("payment", 1, any_currency.clone(), "host:1:payments");
    store.accept_schema(accepted).await.unwrap();
    payment.older_schemas = [(1, any_currency)].into();
    store.publish_types(vec![payment]).await.unwrap();
    fails(&db, &["redrive", "--all", "--validate", "--reason", "fixed"], 1, "1 of 4 rows would not decode");
    let report = run_json(
        &db,
        &["redrive", "--event-type", "payment", "--kind", "BadCurrency", "--validate", "--reason", "fixed"],
    );
    assert_eq!(report["moved"], 3, "{report}");
}

/// `ls --undecodable` lists, by the type catalog, the rows that would not decode with why;
/// `patch --where-version` takes only a group's rows of that version, and its dry run says how
/// many would decode after the patch.
async fn undecodable_rows_and_a_patch_by_version(db: Db) {
    use dlq_core::catalog::EventTypeInfo;
    let store = db.store().await;
    let ids = seed(&store).await;
    let group = store.get(ids[0]).await.unwrap().unwrap().failure.fingerprint;
    let bad_currency = failure("BadCurrency", "currency \"USD \" is not ISO 4217");
    let v2 = Payload::Json(serde_json::json!({"id": 7, "currency": "USD "}));
    let v2 = store.park(NewDeadLetter::new("payment", v2, bad_currency).dead(DeadReason::Permanent).with_version(2));
    let v2 = v2.await.unwrap().id;
    let mut payment = EventTypeInfo::new("payment", 2, "host:1:payments");
    payment.upcast_from = 1;
    let currency = serde_json::json!({"type": "object", "required": ["id", "currency"],
        "properties": {"id": {"type": "integer"}, "currency": {"enum": ["USD", "EUR"]}}});
    payment.older_schemas = [(1, currency.clone())].into();
    payment.schema = Some(currency);
    store.publish_types(vec![payment]).await.unwrap();

    // The three version-1 rows and the version-2 one fail their schema; the raw `refund` row's
    // type is not in the catalog. Two per page: `next` goes on.
    let page = run_json(&db, &["ls", "--undecodable", "--oldest-first", "--limit", "2"]);
    let listed: Vec<_> = page["rows"].as_array().unwrap().iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!((listed, page["checked"].as_u64()), (ids[..2].to_vec(), Some(2)), "{page}");
    let why = page["rows"][0]["undecodable"].as_str().unwrap();
    assert!(why.contains("does not match version 1's schema: /currency"), "{why}");
    let next = page["next"].as_i64().unwrap().to_string();
    let rest = run_json(&db, &["ls", "--undecodable", "--oldest-first", "--after", &next]);
    let rest: Vec<_> = rest["rows"].as_array().unwrap().iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(rest, [ids[2], ids[3], v2]);
    let text = db.dlq().args(["ls", "--undecodable", "--event-type", "refund"]).assert().success().get_output().clone();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("is not in the store's type catalog") && text.contains("1 rows checked, 1 would not decode"),
        "{text}"
    );

    // Only version 2 of the group: its dry run says the patched row decodes, and writes nothing.
    let dir = tempfile::tempdir().unwrap();
    let fix = dir.path().join("fix.json");
    std::fs::write(&fix, r#"[{"op": "replace", "path": "/currency", "value": "USD"}]"#).unwrap();
    let args = ["patch", "--group", &group, "--patch", fix.to_str().unwrap(), "--reason", "trailing space"];
    let dry = run_json(&db, &[&args[..], &["--where-version", "2", "--dry-run"]].concat());
    assert_eq!(dry["patched"].as_array().unwrap().len(), 1, "{dry}");
    assert_eq!(
        (dry["patched"][0]["id"].as_i64(), &dry["patched"][0]["decodes"]["verdict"]),
        (Some(v2), &serde_json::json!("as_is"))
    );
    let text = db
        .dlq()
        .args([&args[..], &["--where-version", "1", "--dry-run"]].concat())
        .assert()
        .success()
        .get_output()
        .clone();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("would patch: 3 rows") && text.contains("after the patch: 3 of 3 would decode, 0 would not"),
        "{text}"
    );
    fails(
        &db,
        &[&args[..], &["--where-version", "5", "--dry-run"]].concat(),
        4,
        "no FAILED_PERMANENTLY row of version 5",
    );
    fails(&db, &["patch", &ids[0].to_string(), "--where-version", "1", "--reason", "x"], 2, "--group");

    // The run patches only version 2.
    run_json(&db, &[&args[..], &["--where-version", "2"]].concat());
    assert_eq!(
        store.get(v2).await.unwrap().unwrap().payload,
        Payload::Json(serde_json::json!({"id": 7, "currency": "USD"}))
    );
    let untouched = store.get(ids[0]).await.unwrap().unwrap().payload;
    assert_eq!(untouched, Payload::Json(serde_json::json!({"id": 0, "currency": "USD "})));
}

/// Payloads (and an error chain and headers) that the database accepts and serde cannot read:
/// every list, page, dry run, `--validate` and `rekey` goes on past them and reports them, and
/// `show`, `redrive`, `discard` and `patch` work on such a row. Each verb once exited 1 with
/// "error occurred while decoding column 3: number out of range".
async fn an_unreadable_payload_breaks_no_verb(db: Db) {
    use dlq_core::catalog::EventTypeInfo;
    let store = db.store().await;
    let ids = seed(&store).await;
    let mut bad = Vec::new();
    for json in db.unreadable_json() {
        let letter = NewDeadLetter::new("payment", Payload::Json(serde_json::json!({})), failure("Odd", "odd event"));
        let id = store.park(letter.dead(DeadReason::Permanent)).await.unwrap().id;
        db.sql(format!("UPDATE dlq_events SET payload = {json} WHERE id = {id}")).await;
        bad.push(id);
    }
    let far = &db.unreadable_json()[0];
    db.sql(format!("UPDATE dlq_events SET error_chain = {far}, source_headers = {far} WHERE id = {}", ids[0])).await;
    let mut payment = EventTypeInfo::new("payment", 1, "host:1:payments");
    payment.schema = Some(serde_json::json!({"type": "object"}));
    store.publish_types(vec![payment]).await.unwrap();

    for args in [&["ls"][..], &["ls", "--oldest-first"], &["stats"], &["ls", "--undecodable"]] {
        db.dlq().args(args).assert().success();
    }
    let listed = run_json(&db, &["ls", "--oldest-first"]);
    let listed: Vec<i64> = listed["rows"].as_array().unwrap().iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert!(bad.iter().all(|id| listed.contains(id)), "{listed:?}");
    let found = run_json(&db, &["ls", "--undecodable", "--event-type", "payment"]);
    let found = found["rows"].as_array().unwrap();
    assert_eq!(
        found.iter().map(|r| r["id"].as_i64().unwrap()).collect::<Vec<_>>(),
        bad.iter().rev().copied().collect::<Vec<_>>()
    );
    assert!(found.iter().all(|r| r["undecodable"].as_str().unwrap().contains("not JSON")), "{found:?}");
    for id in &bad {
        let shown = run_json(&db, &["show", &id.to_string()]);
        let note = shown["payload_note"].as_str().unwrap_or_default();
        assert!(note.starts_with("not JSON that serde can read") || note.starts_with("not UTF-8"), "{shown}");
        assert!(shown["payload_raw_hex"].is_string(), "{shown}");
        let text = db.dlq().args(["show", &id.to_string()]).assert().success().get_output().stdout.clone();
        assert!(String::from_utf8_lossy(&text).contains("note: not "), "{}", String::from_utf8_lossy(&text));
    }
    let shown = run_json(&db, &["show", &ids[0].to_string()]);
    assert!(shown["error_chain"][0].as_str().unwrap().contains("not JSON serde reads"), "{shown}");

    // Dry runs and checks over all rows.
    let dry = run_json(&db, &["redrive", "--all", "--dry-run", "--reason", "r"]);
    assert!(dry.to_string().contains(&bad[0].to_string()), "{dry}");
    run_json(&db, &["discard", "--all", "--dry-run", "--reason", "r"]);
    let out = db.dlq().args(["redrive", "--all", "--validate", "--reason", "r", "--json"]).assert().code(1);
    let out = out.get_output().clone();
    assert!(String::from_utf8_lossy(&out.stderr).contains("would not decode"), "{out:?}");
    let report = json_of(&out.stdout)["validation"].to_string();
    assert!(report.contains("the payload is not JSON"), "{report}");
    let keys = format!("k1:{}", base64_of_nines());
    let mut rekey = db.dlq();
    rekey.args(["rekey", "--reason", "rotate", "--json"]).env("DLQ_KEYS", keys).env("DLQ_ACTIVE_KEY", "k1");
    assert_eq!(json_of(&rekey.assert().success().get_output().stdout)["rekeyed"], serde_json::json!([]));

    // The row's own verbs.
    let (first, second, third) = (bad[0].to_string(), bad[1].to_string(), bad[bad.len() - 1].to_string());
    run_json(&db, &["redrive", &first, "--reason", "retry it"]);
    assert_eq!(store.get(bad[0]).await.unwrap().unwrap().status, Status::Pending);
    run_json(&db, &["discard", &second, "--reason", "junk"]);
    assert_eq!(store.get(bad[1]).await.unwrap().unwrap().status, Status::Discarded);
    let editor = "sh -c 'printf %s \"{\\\"n\\\": 1}\" > \"$1\"' editor";
    db.dlq().args(["patch", &third, "--reason", "repaired"]).env("EDITOR", editor).assert().success();
    assert_eq!(
        store.get(bad[bad.len() - 1]).await.unwrap().unwrap().payload,
        Payload::Json(serde_json::json!({"n": 1}))
    );
}

/// JSON text PostgreSQL's `jsonb` accepts, of every kind serde may not read: numbers outside
/// `f64` (`1e400`, `-1e400`, `1e-400`, integers of hundreds of digits), nesting past 128 (up
/// to 3,000), control, C1 and bidi characters, long strings (no U+0000: `jsonb` refuses it).
fn jsonb_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let number = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| serde_json::to_string(&f).unwrap()),
        prop::sample::select(vec!["1e400", "-1e400", "1e-400", "1.5E+308", "-0.0e-5000"]).prop_map(str::to_owned),
        (1..500usize, any::<bool>()).prop_map(|(n, neg)| format!("{}9{}", if neg { "-" } else { "" }, "8".repeat(n))),
        (300..3000u32, any::<bool>()).prop_map(|(e, neg)| format!("1.25e{}{e}", if neg { "-" } else { "" })),
    ];
    let odd =
        ['\u{1}', '\u{1b}', '\n', '\u{7f}', '\u{9b}', '\u{202e}', '\u{2066}', '\u{feff}', 'a', 'é', '💳', '"', '\\'];
    let text = prop_oneof![
        any::<String>().prop_map(|s| s.replace('\0', "")),
        prop::collection::vec(prop::sample::select(odd.to_vec()), 0..40).prop_map(String::from_iter),
        (10_000..100_000usize).prop_map(|n| "é\u{202e}x".repeat(n / 3)),
    ];
    let string = text.prop_map(|s| serde_json::to_string(&s).unwrap());
    let leaf =
        prop_oneof![4 => number, 4 => string.clone(), 1 => Just("true".to_owned()), 1 => Just("null".to_owned())];
    let tree = leaf.prop_recursive(3, 24, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(|items| format!("[{}]", items.join(", "))),
            prop::collection::vec((string.clone(), inner), 0..5).prop_map(|fields| {
                let fields: Vec<String> = fields.into_iter().map(|(k, v)| format!("{k}: {v}")).collect();
                format!("{{{}}}", fields.join(", "))
            }),
        ]
    });
    let depth = prop_oneof![Just(0usize), 100..140usize, 140..3000usize];
    (tree, depth, any::<bool>()).prop_map(|(tree, depth, objects)| {
        let (open, close) = if objects { ("{\"a\": ", "}") } else { ("[", "]") };
        format!("{}{tree}{}", open.repeat(depth), close.repeat(depth))
    })
}

/// Every read of the console that shows row `id` (or its group `fp`), as pages and the API.
fn console_reads(id: DlqId, fp: &str) -> Vec<String> {
    let reads = ["/dlq", "/dlq/groups", "/dlq/events", "/dlq/api/stats", "/dlq/api/groups", "/dlq/api/events"];
    let mut reads: Vec<String> = reads.into_iter().map(str::to_owned).collect();
    reads.extend([format!("/dlq/groups/{fp}"), format!("/dlq/events/{id}"), format!("/dlq/api/events/{id}")]);
    reads
}

/// Stores arbitrary `jsonb` that PostgreSQL accepts ([`jsonb_text`]) and runs every read verb,
/// bulk dry run, `--validate`, `rekey`, and the console's pages and API over it: none fails,
/// and each row is listed and shown (raw, with a note, when serde cannot read its text).
#[tokio::test(flavor = "multi_thread")]
async fn arbitrary_jsonb_breaks_no_read() {
    use proptest::test_runner::{Config, TestRunner};
    use tower::ServiceExt as _;
    let db = Db::postgres().await;
    let store = db.store().await;
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    let mut catalog = dlq_core::catalog::EventTypeInfo::new("payment", 1, "host:1:payments");
    catalog.schema = Some(serde_json::json!({}));
    store.publish_types(vec![catalog]).await.unwrap();
    let console = axum::Router::new().nest(
        "/dlq",
        dlq_web::router(dlq_core::admin::Admin::new(store.clone(), "console"), dlq_web::Options::default()),
    );
    let keys = format!("k1:{}", base64_of_nines());
    let runtime = tokio::runtime::Handle::current();
    let config = Config { cases: 4, max_shrink_iters: 16, failure_persistence: None, ..Config::default() };
    let docs = proptest::collection::vec(jsonb_text(), 4);
    let check = |docs: Vec<String>| {
        runtime.block_on(async {
            let mut rows = Vec::new();
            for doc in docs {
                let letter = NewDeadLetter::new("payment", Payload::Json(Value::Null), failure("Odd", "odd event"));
                let id = store.park(letter.dead(DeadReason::Permanent)).await.unwrap().id;
                let update = "UPDATE dlq_events SET payload = $1::jsonb WHERE id = $2 RETURNING payload::text";
                let text: String = sqlx::query_scalar(update).bind(doc).bind(id).fetch_one(&pool).await.unwrap();
                rows.push((id, serde_json::from_str::<Value>(&text).is_ok()));
            }
            for args in [&["ls"][..], &["ls", "--oldest-first"], &["ls", "--undecodable"], &["stats"]] {
                db.dlq().args(args).assert().success();
            }
            let listed = run_json(&db, &["ls", "--limit", "10000"]).to_string();
            let undecodable = run_json(&db, &["ls", "--undecodable", "--limit", "10000"]).to_string();
            for &(id, readable) in &rows {
                assert!(listed.contains(&format!("\"id\":{id},")), "{id} listed");
                assert_eq!(undecodable.contains(&format!("\"id\":{id},")), !readable, "{id} in ls --undecodable");
                let shown = run_json(&db, &["show", &id.to_string()]);
                assert_eq!(shown["payload_note"].is_string(), !readable, "{id}: {}", shown["payload_note"]);
                db.dlq().args(["show", &id.to_string()]).assert().success();
                let fp = shown["fingerprint"].as_str().unwrap();
                for uri in console_reads(id, fp) {
                    let request = axum::http::Request::get(&uri).header("host", "localhost:8080");
                    let response = console.clone().oneshot(request.body(axum::body::Body::empty()).unwrap()).await;
                    assert_eq!(response.unwrap().status(), axum::http::StatusCode::OK, "{uri}");
                }
            }
            run_json(&db, &["redrive", "--all", "--dry-run", "--reason", "r"]);
            run_json(&db, &["discard", "--all", "--dry-run", "--reason", "r"]);
            let mut validate = db.dlq();
            validate.args(["redrive", "--all", "--validate", "--dry-run", "--reason", "r", "--json"]);
            let out = validate.output().unwrap();
            // With --json the counts are printed only with a refusal; a redrive that passes
            // prints its (dry) report instead.
            let doc = json_of(&out.stdout);
            let failing: u64 = doc.get("validation").map_or(0, |report| {
                report["groups"].as_array().unwrap().iter().map(|g| g["not"].as_u64().unwrap()).sum()
            });
            assert_eq!(out.status.code(), Some(if failing == 0 { 0 } else { 1 }), "{out:?}");
            let mut rekey = db.dlq();
            rekey.args(["rekey", "--reason", "rotate", "--json"]).env("DLQ_KEYS", &keys).env("DLQ_ACTIVE_KEY", "k1");
            rekey.assert().success();
        });
        Ok(())
    };
    tokio::task::block_in_place(|| TestRunner::new(config).run(&docs, check)).unwrap();
}

/// The subject key of these tests: the service's (installed in this process) and the `dlq`
/// binary's (`DLQ_SUBJECT_KEY`) must be the same.
const SUBJECT_KEY: &str = "the cli tests' subject key, thirty-two bytes or more";

#[dead_letter(event_type = "cli-erase", max_retries = 0, backoff = "none")]
async fn card_declined(p: Payment) -> Result<(), PaymentError> {
    Err(PaymentError::BadCurrency(p.currency))
}

/// `dlq erase` deletes every row of one subject (parked by the live path, named by the
/// source), with its history, through the binary, and leaves a record without the subject.
async fn erase_by_subject(db: Db) {
    let key = dlq_core::subject::SubjectKey::new(SUBJECT_KEY).unwrap();
    let _ = dlq_core::subject::install_key(key); // first test to run installs it
    let store = db.store().await;
    let mut ids = Vec::new();
    for (n, who) in [(1, "customer-42"), (2, "customer-42"), (3, "customer-7")] {
        let source = dlq_core::adapter::SourceMeta::kafka("payments", 0, n).subject(who);
        let payment = Payment { id: n.unsigned_abs(), currency: "USD ".into() };
        let parked = dlq_core::Scope::new().store(Arc::clone(&store)).source(source).run(card_declined(payment));
        ids.push(parked.await.unwrap_err().dlq_id().unwrap());
    }
    run_json(&db, &["discard", &ids[0].to_string(), "--reason", "duplicate"]);
    let erase = ["erase", "--subject", "customer-42", "--reason", "GDPR request 118"];
    fails(&db, &["erase", "--subject", "customer-42", "--reason", " "], 2, "erase needs a non-empty --reason");
    fails(&db, &["erase", "--subject", "", "--reason", "r"], 2, "erase needs a non-empty --subject");
    fails(&db, &erase, 1, "erase needs a subject key: set DLQ_SUBJECT_KEY");
    let short = db.dlq().env("DLQ_SUBJECT_KEY", "short").args(erase).assert().code(1).get_output().stderr.clone();
    let short = String::from_utf8_lossy(&short);
    assert_eq!(short.matches("invalid configuration").count(), 1, "the prefix once: {short}");
    assert!(short.contains("`DLQ_SUBJECT_KEY`: the subject key has 5 bytes"), "{short}");
    // The live path left the service key's check value: another key is refused, not "0 rows".
    let other_key = db.dlq().env("DLQ_SUBJECT_KEY", "another key, thirty-two bytes or more").args(erase).assert();
    let other_key = other_key.code(1).get_output().clone();
    let stderr = String::from_utf8_lossy(&other_key.stderr);
    assert!(stderr.contains("not the key the store's subjects were hashed with"), "{stderr}");
    assert!(other_key.stdout.is_empty(), "nothing erased");
    assert_eq!(run_json(&db, &["erasures"])["erasures"], serde_json::json!([]), "nothing recorded");

    let out = db.dlq().env("DLQ_SUBJECT_KEY", SUBJECT_KEY).args(erase).arg("--json").assert().success();
    let erased = &json_of(&out.get_output().stdout)["erased"];
    assert_eq!((erased["rows"].as_u64(), erased["audit"].as_u64()), (Some(2), Some(1)), "{erased}");
    assert_eq!((erased["actor"].as_str(), erased["reason"].as_str()), (Some("oncall"), Some("GDPR request 118")));
    for id in &ids[..2] {
        fails(&db, &["show", &id.to_string()], 1, "not found");
    }
    assert_eq!(run_json(&db, &["show", &ids[2].to_string()])["id"], ids[2], "customer-7's row stays");
    let records = db.dlq().args(["erasures"]).assert().success().get_output().stdout.clone();
    let records = String::from_utf8(records).unwrap();
    assert!(records.contains("GDPR request 118") && !records.contains("customer-42"), "{records}");
    assert_eq!(run_json(&db, &["erasures", "--limit", "1"])["erasures"][0]["reason"], "GDPR request 118");

    let seven = ["erase", "--subject", "customer-7", "--reason", "GDPR request 119"];
    let out = db.dlq().env("DLQ_SUBJECT_KEY", SUBJECT_KEY).args(seven).assert().success().get_output().clone();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stderr.contains("1 rows are stored under this subject: erasing them"), "the count first: {stderr}");
    assert!(stdout.starts_with("erased 1 rows of subject ") && !stdout.contains("customer-7"), "{stdout}");

    // A stored count out of range is shown as such, never as another number.
    db.sql("UPDATE dlq_erasures SET erased_rows = -1".to_owned()).await;
    let records = db.dlq().args(["erasures"]).assert().success().get_output().stdout.clone();
    let records = String::from_utf8(records).unwrap();
    assert_eq!(records.matches("invalid (-1)").count(), 2, "{records}");
    assert_eq!(run_json(&db, &["erasures"])["erasures"][0]["rows"], -1, "the stored value in JSON");
}

/// A database URL's password is never printed: not in a connection error, not in a usage
/// error that quotes the URL (clap's), not in the path an SQLite URL names.
#[tokio::test(flavor = "multi_thread")]
async fn a_database_password_is_never_printed() {
    const PASSWORD: &str = "s3cret-pw";
    let db = Db::sqlite().await;
    let cases = [
        (&["stats", "--database-url", "postgres://u:s3cret-pw@127.0.0.1:1/db"][..], 1),
        (&["stats", "--database-url", "postgres://u:s3cret-pw@[::1/db"], 2),
        (&["stats", "--database-url", "postgres://u:s3cret-pw@127.0.0.1/db?sslmode=bogus"], 2),
        (&["stats", "--database-url", "postgres://u@127.0.0.1:1/db?password=s3cret-pw&sslmode=disable"], 1),
        (&["stats", "--database-url", "mysql://u:s3cret-pw@127.0.0.1/db"], 2),
        (&["stats", "--database-url", "sqlite://u:s3cret-pw@/no/such/dir/dlq.db"], 1),
        // A URL where a verb was expected: clap quotes it back.
        (&["postgres://u:s3cret-pw@127.0.0.1/db", "stats"], 2),
        (&["stats", "--top", "postgres://u:s3cret-pw@127.0.0.1/db"], 2),
    ];
    for (args, code) in cases {
        let out = db.dlq().args(args).assert().code(code).get_output().clone();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!stdout.contains(PASSWORD) && !stderr.contains(PASSWORD), "{args:?}: {stdout}{stderr}");
        assert!(!stderr.trim().is_empty(), "{args:?}: an error is said");
    }
    let out = db.dlq().args(cases[6].0).assert().code(2).get_output().clone();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("'postgres://u:***@127.0.0.1/db'"), "masked, not dropped: {stderr}");
    // The same from the environment.
    let out = db.dlq().env("DATABASE_URL", "postgres://u:s3cret-pw@127.0.0.1:1/db").arg("ls").assert().code(1);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(!stderr.contains(PASSWORD) && stderr.contains("cannot reach PostgreSQL"), "{stderr}");
}

/// On-call engineers point `dlq` at production databases, which often require TLS: with
/// `sslmode=require` it connects (the binary is built with `dlq-sqlx`'s `tls-rustls`), where
/// it once answered "SQLx was built without TLS support". The server here has `ssl = on`
/// (Debian's default).
#[tokio::test(flavor = "multi_thread")]
async fn postgres_that_requires_tls() {
    let db = Db::postgres().await;
    seed(&db.store().await).await;
    let admin = sqlx::PgPool::connect(&pg_base()).await.unwrap();
    let ssl: String = sqlx::query_scalar("SHOW ssl").fetch_one(&admin).await.unwrap();
    assert_eq!(ssl, "on", "this test needs a PostgreSQL that offers TLS (ssl = on)");
    let out = db
        .dlq()
        .env("DATABASE_URL", format!("{}?sslmode=require", db.url))
        .args(["stats", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert_eq!(json_of(&out)["counts"][0]["failed_permanently"], 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn human_output_sqlite() {
    human_output(Db::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_migrations_and_read_only_roles_get_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Db { url: format!("sqlite://{}", dir.path().join("none.db").display()), pg: None, _dir: None };
    fails(&sqlite, &["stats"], 1, "run `dlq migrate` to create it");
    sqlite.dlq().arg("migrate").assert().success();
    sqlite.dlq().arg("stats").assert().success();

    // Another application's SQLite file: read-only verbs say so and leave it as it was.
    let other = dir.path().join("orders.db");
    let url = format!("sqlite://{}", other.display());
    let pool = sqlx::SqlitePool::connect(&format!("{url}?mode=rwc")).await.unwrap();
    sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY)").execute(&pool).await.unwrap();
    let tables = || async {
        let names: Vec<String> =
            sqlx::query_scalar("SELECT name FROM sqlite_master ORDER BY name").fetch_all(&pool).await.unwrap();
        names
    };
    let before = tables().await;
    let theirs = Db { url, pg: None, _dir: None };
    for verb in [&["stats"][..], &["ls"], &["show", "1"]] {
        fails(&theirs, verb, 1, "has no dlq tables: run `dlq migrate`");
    }
    assert_eq!(tables().await, before, "no table was created in the other application's file");
    pool.close().await;

    let pg = Db::postgres().await;
    fails(&pg, &["ls"], 1, "has no dlq tables: run `dlq migrate`");
    pg.dlq().arg("migrate").assert().success();
    let store = pg.store().await;
    let ids = seed(&store).await;
    let (ro, role) = read_only_role(&pg, "dlq_ro", "").await;
    ro.dlq().arg("stats").assert().success();
    fails(&ro, &["discard", &ids[0].to_string(), "--reason", "x"], 1, "permission denied");
    drop(pg);
    drop_role(&role);
}

/// A rolling deploy from the operator's seat: `dlq migrate` on the previous release's schema
/// leaves this release's contract migrations waiting and says so; verbs work meanwhile;
/// `--contract` is refused while a retrier of the previous release heartbeats, and then runs.
#[tokio::test(flavor = "multi_thread")]
async fn migrate_leaves_the_contract_for_when_the_previous_release_is_gone() {
    let pg = Db::postgres().await;
    let pool = sqlx::PgPool::connect(&pg.url).await.unwrap();
    let release = dlq_sqlx::postgres::RELEASE_FIRST_MIGRATION;
    let previous = dlq_sqlx::postgres::MIGRATOR.iter().filter(|m| m.version < release).cloned().collect();
    sqlx::migrate::Migrator::with_migrations(previous).run(&pool).await.unwrap();
    let contracts = dlq_sqlx::postgres::MIGRATOR
        .iter()
        .filter(|m| m.version >= release && m.description.starts_with("contract"))
        .count();
    assert!(contracts > 0, "this release has a contract migration");
    // A retrier of the previous release: its heartbeat names no release.
    sqlx::query("INSERT INTO dlq_retriers (owner, host, pid, event_types) VALUES ('old', 'old-host', 7, '{payment}')")
        .execute(&pool)
        .await
        .unwrap();

    let out = pg.dlq().arg("migrate").assert().success().get_output().stdout.clone();
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("waiting: 0038 contract"), "{text}");
    assert!(text.contains("run `dlq migrate --contract` once every process runs this release"), "{text}");
    let json = run_json(&pg, &["migrate"]);
    assert_eq!(json["contract_waiting"].as_array().map(Vec::len), Some(contracts), "{json}");
    pg.dlq().arg("stats").assert().success();

    fails(
        &pg,
        &["migrate", "--contract"],
        1,
        "a retrier of an older release still running against schema `public` (old-host pid 7",
    );
    assert_eq!(
        run_json(&pg, &["migrate"])["contract_waiting"].as_array().map(Vec::len),
        Some(contracts),
        "nothing applied"
    );

    sqlx::query("DELETE FROM dlq_retriers").execute(&pool).await.unwrap();
    let json = run_json(&pg, &["migrate", "--contract"]);
    assert_eq!(json["contracted"].as_array().map(Vec::len), Some(contracts), "{json}");
    assert_eq!(json["contract_waiting"], serde_json::json!([]), "{json}");
    pool.close().await;
}

/// A role of `pg`'s server that may only read the dlq tables (`options`: more of `CREATE
/// ROLE`'s), named after the database; the database as that role, and the role's name.
async fn read_only_role(pg: &Db, prefix: &str, options: &str) -> (Db, String) {
    let role = format!("{prefix}_{}", pg.pg.as_ref().unwrap().1);
    let pool = sqlx::PgPool::connect(&pg.url).await.unwrap();
    for statement in [
        format!("CREATE ROLE {role} LOGIN {options}"),
        format!("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement)).execute(&pool).await.unwrap();
    }
    pool.close().await;
    let url = pg.url.replacen("postgres@", &format!("{role}@"), 1);
    (Db { url, pg: None, _dir: None }, role)
}

/// Drops a role of [`read_only_role`] (after its database).
fn drop_role(role: &str) {
    let _ = Std::new("psql").args([&pg_base(), "-qc", &format!("DROP ROLE IF EXISTS {role}")]).output();
}

/// A verb runs on one connection: `dlq stats`, which asks for its nine figures together, works
/// for a role that the server allows a single connection.
#[tokio::test(flavor = "multi_thread")]
async fn a_verb_needs_one_connection() {
    let pg = Db::postgres().await;
    pg.dlq().arg("migrate").assert().success();
    seed(&pg.store().await).await;
    let (one, role) = read_only_role(&pg, "dlq_one", "CONNECTION LIMIT 1").await;
    let out = one.dlq().args(["stats", "--json"]).assert().success().get_output().clone();
    assert!(json_of(&out.stdout)["counts"].as_array().is_some_and(|c| !c.is_empty()), "the figures are there");
    drop(pg);
    drop_role(&role);
}

// ---- canary: a real retrier in this process, over the same database as the `dlq` binary ----

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payment {
    id: u64,
    currency: String,
}

#[derive(Debug, Classify)]
enum PaymentError {
    #[dlq(permanent)]
    BadCurrency(String),
}

impl std::fmt::Display for PaymentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self::BadCurrency(currency) = self;
        write!(f, "currency {currency:?} is not ISO 4217")
    }
}

impl std::error::Error for PaymentError {}

/// The cause is not fixed: every run fails the same way.
#[dead_letter(event_type = "cli-canary-broken", max_retries = 0, backoff = "none")]
async fn still_broken(p: Payment) -> Result<(), PaymentError> {
    Err(PaymentError::BadCurrency(p.currency))
}

/// Fails on the live path; fixed (succeeds) once the ledger accepts trailing spaces.
static LEDGER_FIXED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[dead_letter(event_type = "cli-canary-fixed", max_retries = 0, backoff = "none")]
async fn fixed_later(p: Payment) -> Result<(), PaymentError> {
    if LEDGER_FIXED.load(Ordering::SeqCst) { Ok(()) } else { Err(PaymentError::BadCurrency(p.currency)) }
}

/// Parks `n` payments through the live path of `handler` (so the rows carry the fingerprint
/// the handler's failure really has); returns their ids, oldest first, and their group.
async fn park_live<F, Fut>(store: &Arc<dyn DeadLetterStore>, n: u64, handler: F) -> (Vec<DlqId>, String)
where
    F: Fn(Payment) -> Fut,
    Fut: Future<Output = Result<(), dlq_core::HandlerError<PaymentError>>>,
{
    let mut ids = Vec::new();
    for id in 0..n {
        let err = dlq_core::with_store(Arc::clone(store), handler(Payment { id, currency: "USD ".into() }))
            .await
            .unwrap_err();
        ids.push(err.dlq_id().unwrap());
    }
    let group = store.get(ids[0]).await.unwrap().unwrap().failure.fingerprint;
    (ids, group)
}

/// A retrier over `registry` on `store` until the token is cancelled.
fn spawn_retrier(
    store: &Arc<dyn DeadLetterStore>,
    registry: dlq_core::handlers::Registry,
) -> (CancellationToken, tokio::task::JoinHandle<Result<dlq_core::retry::RetrierStats, dlq_core::Error>>) {
    let config = RetrierConfig::from_json_str(r#"{"poll-interval": "100ms"}"#).unwrap();
    let retrier = Retrier::new(Arc::clone(store), registry).config(config);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { retrier.run_until(shutdown.cancelled_owned()).await }
    });
    (shutdown, running)
}

#[tokio::test(flavor = "multi_thread")]
async fn canary_that_fails_the_same_way_stops_with_exit_code_3_and_leaves_the_rest_parked() {
    let db = Db::postgres().await;
    let store = db.store().await;
    let (ids, group) = park_live(&store, 6, still_broken).await;
    let (shutdown, retrier) = spawn_retrier(&store, handlers![still_broken].unwrap());

    let out = db
        .dlq()
        .args(["redrive", "--group", &group, "--canary", "2", "--batch", "2", "--reason", "ledger fixed?"])
        .assert()
        .code(3)
        .get_output()
        .clone();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("canary stopped: redriven rows failed again; the rest stay parked"), "{text}");
    for canary in &ids[..2] {
        assert!(text.contains(&format!("  {canary} FAILED_PERMANENTLY (same failure, group {group})")), "{text}");
    }

    for row in store.list(ListFilter::default().limit(100)).await.unwrap() {
        assert_eq!(row.status, Status::FailedPermanently, "row {}", row.id);
        assert_eq!(row.failure.fingerprint, group, "row {}", row.id);
        let canary = ids[..2].contains(&row.id);
        assert_eq!(row.redrive_count, u32::from(canary), "row {}: only the canary moved", row.id);
    }
    // The stopped operation continues with a canary again: it stops again, moving two more.
    let again = db.dlq().args(["redrive", "--resume", "1", "--json"]).assert().code(3).get_output().clone();
    let again = json_of(&again.stdout);
    assert_eq!(again["canary_stop"]["kind"], "failed");
    assert_eq!(again["canary_stop"]["failures"][0]["fingerprint"], group.as_str());
    assert_eq!(again["canary_stop"]["failures"][0]["same_fingerprint"], true);
    assert_eq!(again["moved_ids"], serde_json::json!(&ids[2..4]));
    shutdown.cancel();
    retrier.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn canary_that_succeeds_lets_the_redrive_proceed_batch_by_batch() {
    let db = Db::postgres().await;
    let store = db.store().await;
    let (ids, group) = park_live(&store, 7, fixed_later).await;
    LEDGER_FIXED.store(true, Ordering::SeqCst);
    let (shutdown, retrier) = spawn_retrier(&store, handlers![fixed_later].unwrap());

    let args = ["redrive", "--group", &group, "--canary", "2", "--batch", "3", "--reason", "ledger fixed"];
    let done = run_json(&db, &args);
    assert_eq!((done["state"].as_str(), done["moved"].as_u64()), (Some("done"), Some(7)));
    assert!(done["canary_stop"].is_null(), "{done}");
    assert_eq!(done["moved_ids"], serde_json::json!(ids));
    // Each batch was watched to its outcome before the next one moved.
    for row in store.list(ListFilter::default().limit(100)).await.unwrap() {
        assert_eq!((row.status, row.redrive_count), (Status::Succeeded, 1), "row {}", row.id);
    }
    shutdown.cancel();
    retrier.await.unwrap().unwrap();
}

// ---- closed pipes and Ctrl-C: the binary as a child process ----

/// Which of a child's outputs a test closes.
#[derive(Clone, Copy)]
enum Output {
    Stdout,
    Stderr,
}

/// Runs `dlq args` with `closed` a pipe whose reading end is closed before the child writes
/// to it: `table` stays locked (ACCESS EXCLUSIVE) until the pipe is closed, and the child
/// writes only after it read or wrote that table. Returns the exit code and the other output.
async fn with_closed_pipe(db: &Db, table: &str, args: &[&str], closed: Output) -> (Option<i32>, Vec<u8>) {
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    let mut lock = pool.begin().await.unwrap();
    let statement = format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE");
    sqlx::query(sqlx::AssertSqlSafe(statement)).execute(&mut *lock).await.unwrap();
    let mut child = Std::new(assert_cmd::cargo::cargo_bin("dlq"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    match closed {
        Output::Stdout => drop(child.stdout.take()),
        Output::Stderr => drop(child.stderr.take()),
    }
    lock.rollback().await.unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    let other = match closed {
        Output::Stdout => out.stderr,
        Output::Stderr => out.stdout,
    };
    (out.status.code(), other)
}

/// `dlq ls | head` once panicked ("failed printing to stdout", exit 101): it now stops
/// quietly with 141, as a tool killed by SIGPIPE.
#[tokio::test(flavor = "multi_thread")]
async fn a_closed_stdout_ends_quietly_with_141() {
    let db = Db::postgres().await;
    seed(&db.store().await).await;
    for args in [&["ls"][..], &["ls", "--json"], &["show", "1"]] {
        let (code, stderr) = with_closed_pipe(&db, "dlq_events", args, Output::Stdout).await;
        let stderr = String::from_utf8_lossy(&stderr);
        assert_eq!(code, Some(141), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: quiet, no panic: {stderr}");
    }
}

/// A redrive whose progress output is closed (`dlq redrive … 2>&1 | head`) once panicked
/// mid-run; it now stops at a batch boundary, exit 141, and the operation resumes.
#[tokio::test(flavor = "multi_thread")]
async fn a_closed_output_stops_a_redrive_at_a_batch_boundary_resumably() {
    let db = Db::postgres().await;
    let store = db.store().await;
    let letters = (0..12)
        .map(|n| {
            NewDeadLetter::new("payment", Payload::Json(n.into()), failure("E", "down")).dead(DeadReason::Permanent)
        })
        .collect();
    store.park_many(letters).await.unwrap();
    let args = ["redrive", "--all", "--batch", "2", "--reason", "replay"];
    let (code, stdout) = with_closed_pipe(&db, "dlq_operations", &args, Output::Stderr).await;
    assert_eq!(code, Some(141), "{}", String::from_utf8_lossy(&stdout));
    let op = store.operation(1).await.unwrap().unwrap();
    assert_eq!((op.state, op.moved), (dlq_core::store::OperationState::Stopped, 2), "one batch, then stopped");
    let pending = store.count(ListFilter::default().status(Status::Pending).limit(100)).await.unwrap();
    assert_eq!(pending, 2);
    let done = run_json(&db, &["redrive", "--resume", "1"]);
    assert_eq!((done["state"].as_str(), done["moved"].as_u64()), (Some("done"), Some(12)));
    for row in store.list(ListFilter::default().limit(100)).await.unwrap() {
        assert_eq!((row.status, row.redrive_count), (Status::Pending, 1), "row {}", row.id);
    }
}

/// Ctrl-C stops a paced redrive after its batch (at once while it waits for the next),
/// exits 130, and the operation resumes without a row lost or moved twice.
#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_stops_a_redrive_with_130_and_it_resumes() {
    use std::io::BufRead;
    let db = Db::postgres().await;
    let store = db.store().await;
    let letters = (0..12)
        .map(|n| {
            NewDeadLetter::new("payment", Payload::Json(n.into()), failure("E", "down")).dead(DeadReason::Permanent)
        })
        .collect();
    store.park_many(letters).await.unwrap();
    let mut child = Std::new(assert_cmd::cargo::cargo_bin("dlq"))
        .args(["redrive", "--all", "--rate", "0.5/s", "--reason", "replay"])
        .env("DATABASE_URL", &db.url)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    // The first progress line: batch 1 committed, and the run waits 2 s for the next. The
    // default batch of 100 shrank to the rate's one row (it once moved 100 rows at once).
    let mut line = String::new();
    while !line.starts_with("batch 1:") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "the child ended early");
    }
    assert!(line.starts_with("batch 1: 1 moved"), "{line}");
    let pid = child.id().to_string();
    assert!(Std::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert_eq!(status.code(), Some(130));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(rest.contains("stopped: resume with `dlq redrive --resume 1`"), "{rest}");
    let op = store.operation(1).await.unwrap().unwrap();
    assert_eq!(op.state, dlq_core::store::OperationState::Stopped);
    assert!(op.moved < 12, "stopped mid-run");
    // A resume goes at the stored rate unless told otherwise (it once forgot the rate).
    assert_eq!(op.spec["rate"], serde_json::json!(0.5));
    let resumed = db.dlq().args(["redrive", "--resume", "1", "--max-redrives", "1"]).assert().code(2);
    let said = String::from_utf8_lossy(&resumed.get_output().stderr).into_owned();
    assert!(said.contains("cannot be used with"), "the resumed plan is the stored one: {said}");
    let done = db.dlq().args(["redrive", "--resume", "1", "--rate", "1000/s"]).assert().success();
    let said = String::from_utf8_lossy(&done.get_output().stderr).into_owned();
    assert!(said.contains("operation 1 (redrive, at most 1000 rows/s)"), "{said}");
    let op = store.operation(1).await.unwrap().unwrap();
    assert_eq!((op.state, op.moved), (dlq_core::store::OperationState::Done, 12));
    assert_eq!(op.spec["rate"], serde_json::json!(0.5), "the stored rate stays for later resumes");
    for row in store.list(ListFilter::default().limit(100)).await.unwrap() {
        assert_eq!((row.status, row.redrive_count), (Status::Pending, 1), "row {}", row.id);
        assert_eq!(store.audit(row.id).await.unwrap().len(), 1, "row {} audited once", row.id);
    }
}

/// Rows of an `encrypt = true` type, read by an operator without the key: no verb, for people
/// or as JSON, prints the card number (payload, error chain, stack trace, attempts, groups),
/// `show` says `[encrypted, key k1]` and the fields kept in clear, and a patch is refused with
/// one line naming the key.
#[tokio::test(flavor = "multi_thread")]
async fn sealed_rows_never_show_their_plaintext_without_the_key() {
    const MARKER: &str = "PAN-5105-1051-0510-5100";
    let db = Db::sqlite().await;
    let store = db.store().await;
    let ring = dlq_core::sealed::KeyRing::new("k1", [("k1", [9; 32])]).unwrap();
    let text = format!("card {MARKER} declined");
    let failure = FailureInfo::new(ErrorClass::Permanent, "Declined", text.clone(), vec![text], Some(MARKER.into()));
    let payload = Payload::Json(serde_json::json!({ "id": 7, "pan": MARKER }));
    let letter = NewDeadLetter::new(
        "payment",
        dlq_core::sealed::seal_payload(&ring, "payment", &payload, &["/id"]).unwrap(),
        dlq_core::sealed::seal_failure(&ring, "payment", failure).unwrap(),
    );
    let id = store.park(letter.dead(DeadReason::Permanent)).await.unwrap().id.to_string();
    let fp = store.get(id.parse().unwrap()).await.unwrap().unwrap().failure.fingerprint;
    let mut shown = String::new();
    for args in [&["ls"][..], &["ls", "--group", &fp], &["show", &id], &["stats"]] {
        for json in [false, true] {
            let mut cmd = db.dlq();
            cmd.args(args);
            if json {
                cmd.arg("--json");
            }
            let out = cmd.env_remove("DLQ_KEYS").assert().success().get_output().clone();
            let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(!all.contains(MARKER), "{args:?} json={json}: {all}");
            if args[0] == "show" {
                shown.push_str(&all);
            }
        }
    }
    assert!(shown.contains("[encrypted, key k1]") && shown.contains("\"/id\": 7"), "{shown}");
    let dir = tempfile::tempdir().unwrap();
    let fix = dir.path().join("fix.json");
    std::fs::write(&fix, r#"[{"op": "replace", "path": "/pan", "value": "x"}]"#).unwrap();
    let out = db
        .dlq()
        .args(["patch", &id, "--patch", fix.to_str().unwrap(), "--reason", "r"])
        .env_remove("DLQ_KEYS")
        .assert()
        .code(1)
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("encrypted (key k1)") && !err.contains(MARKER), "{err}");

    // With the old key and a new active one, `rekey` moves the row to it, without printing it.
    let keys = format!("k2:{},k1:{}", "Ag".repeat(21) + "A=", base64_of_nines());
    let mut rekey = db.dlq();
    rekey.args(["rekey", "--reason", "retire k1", "--json"]).env("DLQ_KEYS", keys).env("DLQ_ACTIVE_KEY", "k2");
    let out = rekey.assert().success().get_output().clone();
    let report = json_of(&out.stdout);
    assert_eq!(report["rekeyed"], serde_json::json!([id.parse::<i64>().unwrap()]), "{report}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(MARKER));
    let shown = run_json(&db, &["show", &id]);
    assert_eq!(shown["encrypted_with"], "k2");
    assert_eq!(shown["audit"][0]["reason"], "retire k1");
}

/// The standard base64 of 32 bytes of 9, the key the test above sealed with.
fn base64_of_nines() -> String {
    "CQkJ".repeat(10) + "CQk="
}

// ---- redaction: the stock binary learns it from the store's type catalog ----

const CARD: &str = "5555-5555-5555-4444";
const CARD_EMAIL: &str = "frank.redacted@example.com";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CardPayment {
    id: u64,
    card: String,
    email: String,
}

#[derive(Debug, Classify)]
enum Declined {
    #[dlq(permanent)]
    Card(String, String),
}

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self::Card(card, email) = self;
        write!(f, "card {card} of {email} declined")
    }
}

impl std::error::Error for Declined {}

#[dead_letter(event_type = "cli-redacted", redact = ["/card", "/email"])]
async fn redacted_charge(p: CardPayment) -> Result<(), Declined> {
    Err(Declined::Card(p.card, p.email))
}

/// Rows of a type with `redact`, parked by its handler, whose retrier published the type: no
/// verb of the plain `dlq` binary, for people or as JSON, prints the card number or the email
/// (rows, the row, groups, stats, a patch preview and a patch's outcome, the audit log after
/// it); `show --reveal --reason` prints them after an audit entry, and needs the reason.
#[tokio::test(flavor = "multi_thread")]
async fn redacted_fields_never_show_without_an_audited_reveal() {
    let db = Db::sqlite().await;
    let store = db.store().await;
    let registry = handlers![redacted_charge].unwrap();
    registry.publish(&*store, "cli-test").await.unwrap();
    let mut ids = Vec::new();
    for id in 0..2 {
        let event = CardPayment { id, card: CARD.into(), email: CARD_EMAIL.into() };
        let err = dlq_core::with_store(Arc::clone(&store), redacted_charge(event)).await.unwrap_err();
        ids.push(err.dlq_id().unwrap().to_string());
    }
    let group = store.get(ids[0].parse().unwrap()).await.unwrap().unwrap().failure.fingerprint;
    let dir = tempfile::tempdir().unwrap();
    let fix = dir.path().join("fix.json");
    std::fs::write(&fix, r#"[{"op": "replace", "path": "/card", "value": "4000-0000-0000-0002"}]"#).unwrap();
    let fix = fix.to_str().unwrap();
    let hidden = |what: &str, out: &std::process::Output| {
        let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!all.contains(CARD) && !all.contains(CARD_EMAIL) && !all.contains("4000-0000"), "{what}: {all}");
        all
    };
    let mut shown = String::new();
    let patch = ["patch", &ids[1], "--patch", fix, "--reason", "new card"];
    let reads: [&[&str]; 6] = [
        &["ls"],
        &["ls", "--group", &group],
        &["show", &ids[0]],
        &["stats"],
        &["patch", "--group", &group, "--patch", fix, "--reason", "r", "--dry-run"],
        &patch,
    ];
    for args in reads {
        for json in [false, true] {
            let mut cmd = db.dlq();
            cmd.args(args);
            if json {
                cmd.arg("--json");
            }
            let all = hidden(&format!("{args:?} json={json}"), &cmd.assert().success().get_output().clone());
            if args[0] == "show" {
                shown.push_str(&all);
            }
        }
    }
    assert!(shown.contains("[redacted]") && shown.contains("card [redacted] of [redacted] declined"), "{shown}");
    hidden(
        "the audit log of the patch",
        &db.dlq().args(["show", &ids[1], "--json"]).assert().success().get_output().clone(),
    );

    fails(&db, &["show", &ids[0], "--reveal"], 2, "--reason");
    fails(&db, &["show", &ids[0], "--reveal", "--reason", " "], 2, "reveal needs a non-empty --reason");
    let out = db.dlq().args(["show", &ids[0], "--reveal", "--reason", "chargeback 118", "--json"]).assert().success();
    let revealed = json_of(&out.get_output().stdout);
    assert_eq!(revealed["payload"]["card"], CARD);
    assert_eq!(revealed["error_reason"], format!("card {CARD} of {CARD_EMAIL} declined"));
    let audit = store.audit(ids[0].parse().unwrap()).await.unwrap();
    let last = audit.last().unwrap();
    assert_eq!(
        (last.action.as_str(), last.actor.as_str(), last.reason.as_deref()),
        ("reveal", "oncall", Some("chargeback 118"))
    );
}

/// `dlq patch ID` in `$EDITOR`: the file is private (0600) in `TMPDIR`, and gone whatever
/// ends the edit: the editor's end, SIGTERM to dlq (exit 143), Ctrl-C to the terminal's whole
/// process group (the editor dies of it: exit 130); nothing is written. With no editor and no
/// terminal, dlq says to pass `--patch` or set `EDITOR` (exit 2) instead of starting vi.
#[tokio::test(flavor = "multi_thread")]
async fn the_edit_file_is_private_and_never_left_behind() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let db = Db::sqlite().await;
    let store = db.store().await;
    let id = seed(&store).await[0];
    let unchanged = store.get(id).await.unwrap().unwrap().payload;
    let (tmp, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (told, never) = (work.path().join("told"), work.path().join("never"));
    for fifo in [&told, &never] {
        assert!(Std::new("mkfifo").arg(fifo).status().unwrap().success());
    }
    // An editor that says which file it edits, then waits for a line nobody writes.
    let editor = work.path().join("editor");
    let script = "#!/bin/sh\nexec 2>/dev/null\nprintf '%s' \"$1\" > \"$TOLD\"\nread line < \"$NEVER\"\n";
    std::fs::write(&editor, script).unwrap();
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
    let left = || std::fs::read_dir(tmp.path()).unwrap().count();
    for (signal, group, code) in [("-TERM", false, 143), ("-INT", true, 130)] {
        let child = Std::new(assert_cmd::cargo::cargo_bin("dlq"))
            .args(["patch", &id.to_string(), "--reason", "edited"])
            .env("DATABASE_URL", &db.url)
            .env("TMPDIR", tmp.path())
            .env("EDITOR", &editor)
            .env_remove("VISUAL")
            .env("TOLD", &told)
            .env("NEVER", &never)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let told = told.clone();
        let file = tokio::task::spawn_blocking(move || std::fs::read_to_string(told).unwrap()).await.unwrap();
        let mode = |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        let path = std::path::Path::new(&file);
        assert_eq!((mode(path), mode(path.parent().unwrap())), (0o600, 0o700), "{file}: private");
        let pid = child.id().to_string();
        let target = if group { format!("-{pid}") } else { pid.clone() };
        assert!(Std::new("kill").args([signal, "--", &target]).status().unwrap().success());
        let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
        let _ = Std::new("kill").args(["-KILL", "--", &format!("-{pid}")]).stderr(Stdio::null()).status();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{signal}: {err} {:?}", out.status);
        assert!(err.contains("nothing written"), "{signal}: {err}");
        assert!(!path.exists() && left() == 0, "{signal}: {file} left behind");
        assert_eq!(store.get(id).await.unwrap().unwrap().payload, unchanged);
    }
    let mut edit = db.dlq();
    edit.args(["patch", &id.to_string(), "--reason", "edited"]).env("TMPDIR", tmp.path());
    edit.env("EDITOR", "sed -i -e 's/USD /EUR/'").env_remove("VISUAL").assert().success();
    assert_eq!(left(), 0, "removed after the edit");
    let edited = Payload::Json(serde_json::json!({"id": 0, "currency": "EUR"}));
    assert_eq!(store.get(id).await.unwrap().unwrap().payload, edited);
    let mut none = db.dlq();
    none.args(["patch", &id.to_string(), "--reason", "x"]).env_remove("EDITOR").env_remove("VISUAL");
    let out = none.timeout(Duration::from_secs(60)).assert().code(2).get_output().clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pass --patch FILE") && err.contains("set EDITOR"), "{err}");
    assert!(out.stdout.is_empty(), "no editor wrote to the output");
}
