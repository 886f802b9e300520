//! `dlq roles` end to end: the four roles set up on a fresh PostgreSQL database (`DATABASE_URL`,
//! trust auth, so that any login role may connect), `dlq migrate` run as a non-superuser
//! member of the migrator role, and every verb run by the `dlq` binary as each role: what a
//! role may not do is refused with one line that names the role and the grant it lacks, and
//! leaves the database as it was. Roles are cluster-wide: each test names its own after its
//! database and drops them at the end, even when it fails.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command as Std;
use std::sync::Arc;

use dlq_core::{DlqId, store::prelude::*};
use dlq_core::{ErrorClass, Payload, adapter::DeadReason, classify::FailureInfo, store::NewDeadLetter};
use dlq_sqlx::{PgConfig, PgStore};

mod common;
use common::Db;

const SCHEMA: &str = "dq";
const SUBJECT_KEY: &str = "the roles tests' subject key, thirty-two bytes or more";

/// The roles of one test and their login users, dropped with the database at the end.
struct Roles {
    base: String,
    database: String,
    prefix: String,
}

const GROUPS: [&str; 4] = ["migrator", "service", "operator_read", "operator"];

impl Roles {
    fn new(db: &Db) -> Self {
        let (base, database) = db.pg.clone().unwrap();
        Self { prefix: format!("r{database}"), base, database }
    }

    fn group(&self, role: &str) -> String {
        format!("{}_{role}", self.prefix)
    }

    fn login(&self, role: &str) -> String {
        format!("{}_login", self.group(role))
    }

    /// The test database's URL as `role`'s login user; the migrator's acts as the migrator
    /// role, so that what `dlq migrate` creates is the role's, as the docs say.
    fn url(&self, role: &str) -> String {
        let (scheme_host, _) = self.base.rsplit_once('/').unwrap();
        let host = scheme_host.rsplit_once('@').map_or(scheme_host.trim_start_matches("postgres://"), |(_, h)| h);
        let url = format!("postgres://{}@{host}/{}", self.login(role), self.database);
        if role == "migrator" { format!("{url}?options=-c%20role%3D{}", self.group(role)) } else { url }
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        let mut names = Vec::new();
        for role in GROUPS.iter().rev() {
            names.push(self.login(role));
            names.push(self.group(role));
        }
        let drop_db = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.database);
        let drop_roles = format!("DROP ROLE IF EXISTS {}", names.join(", "));
        let _ = Std::new("psql").args([&self.base, "-qc", &drop_db, "-c", &drop_roles]).output();
    }
}

async fn admin(db: &Db) -> sqlx::PgPool {
    sqlx::PgPool::connect(&db.url).await.unwrap()
}

/// Everything an action could have written, to compare before and after a refused one.
async fn snapshot(admin: &sqlx::PgPool) -> String {
    sqlx::query_scalar(
        "SELECT concat_ws(' | ', \
           (SELECT string_agg(concat_ws(',', id, status, payload::text, redrive_count), ';' ORDER BY id) FROM dq.dlq_events), \
           (SELECT count(*) FROM dq.dlq_audit), (SELECT count(*) FROM dq.dlq_operations), \
           (SELECT count(*) FROM dq.dlq_erasures), (SELECT count(*) FROM dq.dlq_circuits), \
           (SELECT count(*) FROM dq.dlq_subject_key))",
    )
    .fetch_one(admin)
    .await
    .unwrap()
}

/// Three dead rows of `event_type` for one role's verbs to act on, parked by the service role.
async fn seed(service: &PgStore, event_type: &str) -> Vec<DlqId> {
    let mut ids = Vec::new();
    for n in 0..3 {
        let failure = FailureInfo::new(ErrorClass::Permanent, "BadCurrency", "bad currency".into(), vec![], None);
        let letter = NewDeadLetter::new(event_type, Payload::Json(serde_json::json!({ "n": n })), failure)
            .dead(DeadReason::Permanent);
        ids.push(service.park(letter).await.unwrap().id);
    }
    ids
}

/// Whether a verb was allowed (exit 0, or 4 for "nothing matched"), or refused with the one
/// line that names the role: any other failure fails the test.
fn run(db: &Db, url: &str, role: &str, login: &str, args: &[String], patch: &std::path::Path) -> bool {
    let mut cmd = db.dlq();
    cmd.env("DATABASE_URL", url).env("DLQ_SCHEMA", SCHEMA).env("DLQ_SUBJECT_KEY", SUBJECT_KEY).env("EDITOR", "false");
    let args: Vec<String> = args.iter().map(|a| a.replace("{patch}", patch.to_str().unwrap())).collect();
    let out = cmd.args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0 | 4) => true,
        Some(1) => {
            // Progress notes may come before (`erase` says what it is about to do): the error
            // is the one line that starts with `dlq:`, and the last.
            let line = stderr.trim_end().lines().last().unwrap_or_default();
            assert_eq!(stderr.matches("dlq:").count(), 1, "{role} {args:?}: one error line: {stderr}");
            assert!(
                line.starts_with(&format!("dlq: permission denied: role `{login}` may not ")),
                "{role} {args:?}: {line}"
            );
            assert!(line.contains("dlq_") || line.contains("schema"), "names the table: {line}");
            false
        }
        other => panic!("{role} {args:?}: exit {other:?}: {stderr}"),
    }
}

/// Every verb as each role. The expected matrix is the design's (docs/DESIGN.md, "Roles and
/// grants"); a refusal leaves every table as it was.
#[tokio::test(flavor = "multi_thread")]
async fn each_role_against_each_verb() {
    let db = Db::postgres().await;
    let roles = Roles::new(&db);
    // Printed without a database; applied as the superuser before any table exists.
    let mut printed = db.dlq();
    printed.env_remove("DATABASE_URL").args(["roles", "--schema", SCHEMA, "--prefix", &roles.prefix]);
    let sql = String::from_utf8(printed.assert().success().get_output().stdout.clone()).unwrap();
    assert!(sql.contains(&format!("'{}'", roles.group("service"))) && sql.contains("CREATE ROLE"), "{sql}");
    let apply = ["roles", "--apply", "--schema", SCHEMA, "--prefix", &roles.prefix];
    db.dlq().args(apply).assert().success();
    let admin = admin(&db).await;
    for role in GROUPS {
        let login =
            format!("CREATE ROLE \"{}\" LOGIN NOSUPERUSER IN ROLE \"{}\"", roles.login(role), roles.group(role));
        sqlx::query(sqlx::AssertSqlSafe(login)).execute(&admin).await.unwrap();
    }
    // `dlq migrate` as the migrator's login user, which owns nothing but the schema; then the
    // roles again, for the tables the migrations made, twice (re-runnable).
    let mut migrate = db.dlq();
    migrate.env("DATABASE_URL", roles.url("migrator")).args(["migrate", "--schema", SCHEMA]).assert().success();
    db.dlq().args(apply).assert().success();
    let again = db.dlq().args(apply).assert().success().get_output().stdout.clone();
    assert!(String::from_utf8_lossy(&again).contains("roles set up on schema `dq`"), "re-runnable");

    let service = PgStore::from_pool(
        sqlx::PgPool::connect_lazy(&roles.url("service")).unwrap(),
        PgConfig::default().schema(SCHEMA).run_migrations(false),
    )
    .await
    .unwrap();
    let service = Arc::new(service);
    let dir = tempfile::tempdir().unwrap();
    let patch = dir.path().join("fix.json");
    std::fs::write(&patch, r#"[{"op": "replace", "path": "/n", "value": 9}]"#).unwrap();

    let verbs: &[(&str, &[&str])] = &[
        ("stats", &["stats"]),
        ("ls", &["ls"]),
        ("show", &["show", "{a}"]),
        ("workers", &["workers"]),
        ("erasures", &["erasures"]),
        ("show --reveal", &["show", "{a}", "--reveal", "--reason", "incident"]),
        ("discard", &["discard", "{a}", "--reason", "dupe"]),
        ("redrive", &["redrive", "{b}", "--reason", "fixed"]),
        ("patch", &["patch", "{c}", "--patch", "{patch}", "--reason", "fix"]),
        ("purge", &["purge", "--older-than", "1h", "--yes"]),
        ("erase", &["erase", "--subject", "customer-1", "--reason", "GDPR"]),
        ("pause", &["pause", "{type}", "--reason", "incident"]),
        ("migrate", &["migrate"]),
    ];
    // allowed per role, in GROUPS order: migrator, service, operator_read, operator
    let expected: &[(&str, [bool; 4])] = &[
        ("stats", [true, true, true, true]),
        ("ls", [true, true, true, true]),
        ("show", [true, false, true, true]),
        ("workers", [true, true, true, true]),
        ("erasures", [true, false, true, true]),
        ("show --reveal", [true, false, false, true]),
        ("discard", [true, false, false, true]),
        ("redrive", [true, false, false, true]),
        ("patch", [true, false, false, true]),
        // The service purges finished rows past retention: a retrier's upkeep.
        ("purge", [true, true, false, true]),
        ("erase", [true, false, false, true]),
        // The service writes circuits: a retrier's breaker opens and closes them.
        ("pause", [true, true, false, true]),
        ("migrate", [true, false, false, false]),
    ];
    let mut matrix = String::new();
    let mut found = Vec::new();
    for role in GROUPS {
        // Rows of a type of the role's own, so that what one role did (a pause) is not found
        // done by the next.
        let event_type = format!("payment-{role}");
        let ids = seed(&service, &event_type).await;
        let mut allowed = Vec::new();
        for (verb, args) in verbs {
            let args: Vec<String> = args
                .iter()
                .map(|a| a.replace("{a}", &ids[0].to_string()).replace("{b}", &ids[1].to_string()))
                .map(|a| a.replace("{c}", &ids[2].to_string()).replace("{type}", &event_type))
                .collect();
            let before = snapshot(&admin).await;
            let ok = run(&db, &roles.url(role), role, &roles.login(role), &args, &patch);
            if !ok {
                assert_eq!(snapshot(&admin).await, before, "{role} {verb}: refused, nothing written");
            }
            allowed.push(ok);
            matrix.push_str(&format!("{role:>13} {verb:<14} {}\n", if ok { "allowed" } else { "denied" }));
        }
        found.push(allowed);
    }
    println!("{matrix}");
    console_pages_as_operator_read(&roles, &seed(&service, "payment-console").await);
    for (n, (verb, want)) in expected.iter().enumerate() {
        let got: Vec<bool> = found.iter().map(|row| row[n]).collect();
        assert_eq!(got, want.to_vec(), "{verb} for {GROUPS:?}\n{matrix}");
    }
    service.pool().close().await;
    admin.close().await;
    drop(roles);
}

/// Drops the database, then `roles` (cluster-wide), even when the test fails.
struct DropRoles {
    base: String,
    database: String,
    roles: Vec<String>,
}

impl Drop for DropRoles {
    fn drop(&mut self) {
        let drop_db = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.database);
        let drop_roles = format!("DROP ROLE IF EXISTS {}", self.roles.join(", "));
        let _ = Std::new("psql").args([&self.base, "-qc", &drop_db, "-c", &drop_roles]).output();
    }
}

/// A managed database's settings on the role, production-like (`statement_timeout` 200 ms,
/// `lock_timeout` 100 ms, `idle_in_transaction_session_timeout` 100 ms), and TLS required
/// (`sslmode=require`: the server has `ssl = on`): `dlq migrate` as the schema's owner, no
/// superuser, then the reads and the actions work.
#[tokio::test(flavor = "multi_thread")]
async fn production_settings_over_tls() {
    let db = Db::postgres().await;
    let (base, database) = db.pg.clone().unwrap();
    let owner = format!("p{database}");
    let _cleanup = DropRoles { base: base.clone(), database: database.clone(), roles: vec![owner.clone()] };
    let admin = admin(&db).await;
    let setup = format!(
        "CREATE ROLE {owner} LOGIN NOSUPERUSER; CREATE SCHEMA {SCHEMA} AUTHORIZATION {owner}; \
         ALTER ROLE {owner} SET statement_timeout = '200ms'; ALTER ROLE {owner} SET lock_timeout = '100ms'; \
         ALTER ROLE {owner} SET idle_in_transaction_session_timeout = '100ms'"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(setup)).execute(&admin).await.unwrap();
    let (scheme_host, _) = base.rsplit_once('/').unwrap();
    let host = scheme_host.rsplit_once('@').map_or(scheme_host.trim_start_matches("postgres://"), |(_, h)| h);
    let url = format!("postgres://{owner}@{host}/{database}?sslmode=require");
    let dlq = |args: &[&str]| {
        let mut cmd = db.dlq();
        cmd.env("DATABASE_URL", &url).env("DLQ_SCHEMA", SCHEMA).args(args);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    dlq(&["migrate"]);
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let tls: bool =
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetch_one(&pool).await.unwrap();
    assert!(tls, "sslmode=require connects over TLS");
    let store = PgStore::from_pool(pool, PgConfig::default().schema(SCHEMA).run_migrations(false)).await.unwrap();
    let ids = seed(&store, "payment").await;
    let (a, b) = (ids[0].to_string(), ids[1].to_string());
    dlq(&["stats"]);
    dlq(&["ls"]);
    dlq(&["show", &a]);
    dlq(&["discard", &a, "--reason", "dupe"]);
    dlq(&["redrive", &b, "--reason", "fixed"]);
    dlq(&["purge", "--older-than", "0s", "--yes"]);
    store.pool().close().await;
    admin.close().await;
}

/// The console's pages, served as operator-read (read-only, as `dlq serve` is without
/// `--allow-actions`): each answers 200.
fn console_pages_as_operator_read(roles: &Roles, ids: &[DlqId]) {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut serve = Std::new(env!("CARGO_BIN_EXE_dlq"));
    serve.env("DATABASE_URL", roles.url("operator_read")).env("DLQ_SCHEMA", SCHEMA).env_remove("DLQ_WEB_TOKEN");
    let mut child = serve
        .args(["serve", "--bind", "127.0.0.1:0"])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.split("http://").nth(1).and_then(|rest| rest.split('/').next()).unwrap_or_default().to_owned();
    let id = ids[0];
    let group = "/groups?event_type=payment-console".to_owned();
    let pages = [
        "/",
        "/events",
        &format!("/events/{id}"),
        "/groups",
        &group,
        "/api/stats",
        "/api/events",
        "/charts/parked.svg",
        "/metrics",
    ];
    let mut failed = Vec::new();
    for page in pages {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        write!(stream, "GET {page} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        let code = text.split(' ').nth(1).unwrap_or_default().to_owned();
        if code != "200" {
            failed.push(format!("{page}: {}", text.lines().next().unwrap_or_default()));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(failed.is_empty(), "console pages as operator-read (on {line}): {failed:?}");
}
