//! The `dlq` binary through PgBouncer in transaction mode, with `--session-url` (or
//! `DLQ_SESSION_URL`) straight to PostgreSQL for what needs a session: `migrate` and
//! `roles --apply` run on it, every other verb through the pooler.
//!
//! Needs a PgBouncer 1.21 or later at `DLQ_PGBOUNCER_URL` (default
//! `postgres://postgres@127.0.0.1:6432/postgres`) in transaction mode with
//! `max_prepared_statements` above 0, admitting any database name, in front of the PostgreSQL
//! of `DATABASE_URL`: `scripts/test.sh` starts one. A test fails (it does not skip) when none
//! answers.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;
use common::{Db, with_database};

fn bouncer_url() -> String {
    std::env::var("DLQ_PGBOUNCER_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:6432/postgres".to_owned())
}

/// `dlq migrate` through the pooler with the session URL, then the verbs through the pooler.
#[tokio::test(flavor = "multi_thread")]
async fn verbs_through_pgbouncer_with_a_session_url() {
    let db = Db::postgres().await;
    let (_, name) = db.pg.clone().unwrap();
    let pooled = with_database(&bouncer_url(), &name);
    let dlq = || {
        let mut cmd = db.dlq();
        cmd.env("DATABASE_URL", &pooled).env("DLQ_SESSION_URL", &db.url);
        cmd
    };
    // The migrations go where the session URL says: nowhere, here, so they fail (through the
    // pooler alone they would have run).
    let mut nowhere = dlq();
    nowhere.env("DLQ_SESSION_URL", with_database("postgres://postgres@127.0.0.1:1/x", &name));
    let out = nowhere.args(["migrate", "--schema", "dq"]).assert().code(1).get_output().stderr.clone();
    let out = String::from_utf8_lossy(&out);
    assert_eq!(out.lines().count(), 1, "one line: {out}");
    assert!(out.to_lowercase().contains("refused"), "{out}");
    dlq().args(["migrate", "--schema", "dq"]).assert().success();
    let store = dlq_sqlx::PgStore::connect_with(&db.url, dlq_sqlx::PgConfig::default().schema("dq")).await.unwrap();
    let failure = dlq_core::classify::FailureInfo::new(dlq_core::ErrorClass::Permanent, "E", "e".into(), vec![], None);
    let letter = dlq_core::store::NewDeadLetter::new("payment", dlq_core::Payload::Json(serde_json::json!(1)), failure)
        .dead(dlq_core::adapter::DeadReason::Permanent);
    let id = dlq_core::store::prelude::QueueStore::park(&store, letter).await.unwrap().id.to_string();
    for args in [
        vec!["stats", "--schema", "dq"],
        vec!["ls", "--schema", "dq"],
        vec!["show", &id, "--schema", "dq"],
        vec!["discard", &id, "--reason", "dupe", "--schema", "dq"],
    ] {
        dlq().args(&args).assert().success();
    }
    let shown = dlq().args(["show", &id, "--schema", "dq", "--json"]).assert().success().get_output().stdout.clone();
    let shown: serde_json::Value = serde_json::from_slice(&shown).unwrap();
    assert_eq!(shown["status"], "DISCARDED");
    // A session URL for SQLite is a usage error, said in one line.
    let mut sqlite = db.dlq();
    sqlite.env("DATABASE_URL", "sqlite:///tmp/x.db").env("DLQ_SESSION_URL", &db.url).arg("stats");
    let out = sqlite.assert().code(2).get_output().stderr.clone();
    assert!(String::from_utf8_lossy(&out).contains("--session-url (DLQ_SESSION_URL) is for PostgreSQL"));
    store.pool().close().await;
}
