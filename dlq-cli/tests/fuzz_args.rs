//! Random argument vectors thrown at the `dlq` binary, each on its own copy of a seeded SQLite
//! file: it never panics (exit 101), exits only with a documented code, and says an error on
//! one line (clap's usage text for an unknown flag or verb excepted).

#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

use dlq_core::{
    ErrorClass, Payload, adapter::DeadReason, classify::FailureInfo, store::NewDeadLetter, store::prelude::*,
};
use proptest::prelude::*;

/// The exit codes `dlq --help` documents.
const DOCUMENTED: [i32; 7] = [0, 1, 2, 3, 4, 130, 141];

/// A migrated SQLite file with a dead row, a pending one, a raw one and a hostile one.
fn template() -> &'static std::path::Path {
    static TEMPLATE: OnceLock<(tempfile::TempDir, std::path::PathBuf)> = OnceLock::new();
    let (_, path) = TEMPLATE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("template.db");
        let url = format!("sqlite://{}?mode=rwc", path.display());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let store: Arc<dyn DeadLetterStore> = Arc::new(dlq_sqlx::SqliteStore::connect(&url).await.unwrap());
            for (event_type, payload, reason) in [
                ("payment", Payload::Json(serde_json::json!({"currency": "USD "})), "bad currency"),
                ("refund", Payload::from_bytes(b"\xff\x00"), "raw"),
                ("pay\x1b]0;x\x07", Payload::Json(serde_json::json!(null)), "\x1b[2J\u{9b}31m"),
            ] {
                let failure = FailureInfo::new(ErrorClass::Permanent, "Kind", reason.into(), vec![], None);
                let letter = NewDeadLetter::new(event_type, payload, failure).dead(DeadReason::Permanent);
                store.park(letter).await.unwrap();
            }
            let failure = FailureInfo::new(ErrorClass::Transient, "Down", "down".into(), vec![], None);
            let pending = NewDeadLetter::new("payment", Payload::Json(serde_json::json!(1)), failure);
            store.park(pending.retry(std::time::Duration::from_secs(3600), 5)).await.unwrap();
        });
        (dir, path)
    });
    path
}

/// The verbs `dlq --help` lists, but `serve` (it runs until stopped, tested on its own).
const VERBS: &[&str] = &[
    "stats", "ls", "show", "redrive", "discard", "patch", "undo", "purge", "migrate", "roles", "workers", "pause",
    "resume",
];

/// Verbs and flags `dlq --help` lists, and words it does not know. Left out: `serve` (it
/// runs until stopped) and `--canary` (it waits for a retrier's outcome), which their own
/// tests cover.
fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => prop::sample::select(vec![
            "stats", "ls", "show", "redrive", "discard", "patch", "undo", "purge", "migrate", "roles", "workers",
            "pause", "resume", "--prefix", "--apply", "--session-url", "help", "--json", "--all", "--dry-run", "--yes", "--force", "--validate", "--oldest-first",
            "--limit", "--after", "--status", "--event-type", "--group", "--fingerprint", "--kind", "--reason",
            "--reason-contains", "--since", "--until", "--batch", "--max", "--max-redrives", "--resume", "--top",
            "--older-than", "--patch", "--actor", "--schema", "--help", "--version", "-y", "--", "-",
        ]).prop_map(str::to_owned),
        3 => prop::sample::select(vec![
            "1", "2", "3", "4", "0", "-1", "10001", "99999999999999999999", "1.5", "NaN", "2h", "0s", "200y",
            "2026-05-01T10:00:00Z", "FAILED_PERMANENTLY", "pending", "payment", "", " ", "x", "/dev/null",
            "/no/such/file", "sqlite://x", "postgres://u:pw@127.0.0.1:1/x", "\u{1b}[2J", "é💳", "--bogus", "-Z",
        ]).prop_map(str::to_owned),
        1 => "\\PC{0,16}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_arguments_end_with_a_documented_code_and_one_line(
        verb in prop::option::weighted(0.9, prop::sample::select(VERBS)),
        rest in prop::collection::vec(word(), 0..5),
    ) {
        let args: Vec<String> = verb.map(str::to_owned).into_iter().chain(rest).collect();
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("dlq.db");
        std::fs::copy(template(), &db).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_dlq"))
            .args(&args)
            .env("DATABASE_URL", format!("sqlite://{}", db.display()))
            .env("EDITOR", "false")
            .env_remove("VISUAL")
            .env_remove("DLQ_WEB_TOKEN")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let code = out.status.code();
        let stderr = String::from_utf8_lossy(&out.stderr);
        prop_assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        for (what, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            let text = String::from_utf8_lossy(text);
            let control = text.chars().find(|c| c.is_control() && !matches!(c, '\n' | '\t'));
            prop_assert!(control.is_none(), "{args:?}: {what} printed {control:?}: {text:?}");
        }
        prop_assert!(code.is_some_and(|c| DOCUMENTED.contains(&c)), "{args:?}: exit {code:?}: {stderr}");
        // clap's usage text ("error: unexpected argument …", "Usage: …") may take lines; the
        // CLI's own errors ("dlq: …") are one line each, and one is said per failure.
        if !stderr.starts_with("error:") {
            let ours = stderr.lines().filter(|l| l.starts_with("dlq: ")).count();
            prop_assert!(ours <= 1, "{args:?}: {stderr}");
            if code != Some(0) && code != Some(141) {
                prop_assert!(ours == 1 || code == Some(3) || code == Some(130), "{args:?}: exit {code:?}: {stderr}");
            }
        }
    }
}
