//! Redaction has one door: every verb of the `dlq` binary, taken from its clap definition (a
//! new verb fails this test until it is walked here), run in text and `--json` against
//! PostgreSQL rows whose redacted fields, error texts, audit reasons, patch values and
//! validation errors hold a canary ([`dlq_core::testing::canary`]). No output shows it, and
//! no reason filter answers a right guess differently from a wrong one.

#![allow(clippy::unwrap_used, reason = "tests")]

use clap::CommandFactory;
use dlq_core::testing::canary::{self, CARD, Canaries, EVENT_TYPE};

mod common;
use common::Db;

/// Runs `dlq ARGS` (and `dlq ARGS --json`): exit code, stdout and stderr of each.
fn run(db: &Db, args: &[String]) -> Vec<(Option<i32>, String)> {
    [false, true]
        .into_iter()
        .map(|json| {
            let mut cmd = db.dlq();
            cmd.args(args);
            if json {
                cmd.arg("--json");
            }
            let out = cmd.output().unwrap();
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(!text.contains("panicked"), "dlq {args:?} panicked: {text}");
            (out.status.code(), text)
        })
        .collect()
}

/// How this test runs `verb`: the invocations whose output must show no canary.
fn invocations(verb: &str, rows: &Canaries, patch: &str) -> Vec<Vec<String>> {
    let id = |n: i64| n.to_string();
    let list: Vec<Vec<&str>> = match verb {
        "stats" => vec![vec!["stats"]],
        "ls" => vec![
            vec!["ls"],
            vec!["ls", "--oldest-first"],
            vec!["ls", "--undecodable"],
            vec!["ls", "--event-type", EVENT_TYPE],
            vec!["ls", "--reason-contains", "declined"],
        ],
        "show" => {
            return [rows.dead, rows.pending, rows.undecodable, rows.patched]
                .into_iter()
                .map(|n| vec!["show".to_owned(), id(n)])
                .collect();
        }
        "redrive" => vec![
            vec!["redrive", "--all", "--dry-run"],
            vec!["redrive", "--all", "--validate", "--dry-run"],
            vec!["redrive", "--group", &rows.group, "--dry-run"],
        ],
        "discard" => vec![vec!["discard", "--all", "--dry-run", "--reason", "canary check"]],
        "patch" => {
            let (dead, patched) = (id(rows.dead), id(rows.patched));
            return vec![
                vec!["patch", &dead, "--patch", patch, "--dry-run", "--reason", "check"],
                vec!["patch", "--group", &rows.group, "--patch", patch, "--dry-run", "--reason", "check"],
                vec!["patch", &patched, "--patch", patch, "--reason", "a new card"],
            ]
            .into_iter()
            .map(|a| a.into_iter().map(str::to_owned).collect())
            .collect();
        }
        "undo" => {
            // The first is refused, listing the later patches; the second undoes the newest.
            return vec![vec!["undo".to_owned(), id(rows.first_patch)], vec!["undo".to_owned(), id(rows.second_patch)]];
        }
        "upgrade" => vec![vec!["upgrade", EVENT_TYPE, "--reason", "check", "--dry-run"]],
        "purge" => vec![vec!["purge", "--older-than", "1d", "--yes"]],
        "erase" => vec![vec!["erase", "--subject", "customer-1", "--reason", "check"]],
        "erasures" => vec![vec!["erasures"]],
        "migrate" => vec![vec!["migrate"]],
        // The roles' SQL reads no row; printed, not applied (the roles are cluster-wide).
        "roles" => vec![vec!["roles"]],
        "workers" => vec![vec!["workers"]],
        "pause" => vec![vec!["pause", EVENT_TYPE, "--reason", "check"]],
        "resume" => vec![vec!["resume", EVENT_TYPE]],
        "rekey" => vec![vec!["rekey", "--reason", "check"]],
        // The console: dlq-web's canary test walks every route of its router.
        "serve" => vec![],
        other => panic!("`dlq {other}` is a new verb: say here how to run it against the canary rows"),
    };
    list.into_iter().map(|a| a.into_iter().map(str::to_owned).collect()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn no_verb_shows_a_redacted_value_and_no_filter_tells_a_guess() {
    let db = Db::postgres().await;
    let rows = canary::seed(db.store().await).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let patch = dir.path().join("patch.json");
    std::fs::write(&patch, r#"[{"op": "replace", "path": "/card/number", "value": "4000000000000002"}]"#).unwrap();
    let patch = patch.to_str().unwrap();

    let cli = dlq_cli::Cli::command();
    let verbs: Vec<String> = cli.get_subcommands().map(|c| c.get_name().to_owned()).collect();
    assert!(verbs.len() >= 17, "{verbs:?}");
    // Twice: the second walk reads the rows as the first one's patch and undo left them (a
    // reason that quotes a card number a patch has since replaced must stay masked).
    for _ in 0..2 {
        for verb in &verbs {
            for args in invocations(verb, &rows, patch) {
                for (_, text) in run(&db, &args) {
                    canary::assert_clean(&format!("dlq {}", args.join(" ")), &text);
                }
            }
        }
    }

    // A filter over the error text answers a right guess at the card number exactly as it
    // answers a wrong one: same exit code, same output.
    for verb in [&["ls"][..], &["redrive", "--dry-run"], &["discard", "--dry-run", "--reason", "x"]] {
        let answer = |guess: &str| {
            let mut args: Vec<String> = verb.iter().map(|s| (*s).to_owned()).collect();
            args.extend(["--reason-contains".to_owned(), guess.to_owned()]);
            // The operator's own needle may be echoed back ("no row matches …"): not an answer.
            run(&db, &args).into_iter().map(|(code, text)| (code, text.replace(guess, "<guess>"))).collect::<Vec<_>>()
        };
        for (right, wrong) in [(CARD, "4111111111111112"), ("card 4111", "card 4112"), ("for canary", "for canarz")] {
            assert_eq!(answer(right), answer(wrong), "dlq {verb:?} --reason-contains {right:?}");
        }
    }
}

/// `--json` is printed straight to terminals (`dlq show 4 --json`): a C1 control (U+009B, the
/// one-byte CSI) or a bidi override (U+202E) in stored text leaves as its `\u` escape, and the
/// document still parses to the stored text exactly.
#[tokio::test(flavor = "multi_thread")]
async fn json_output_escapes_c1_controls_and_bidi_overrides() {
    use dlq_core::{ErrorClass, Payload, classify::FailureInfo, store::NewDeadLetter};
    let db = Db::sqlite().await;
    let hostile = "a\u{9b}2J b\u{202e}fdp.exe c\u{85}d\u{7f}";
    let failure = FailureInfo::new(ErrorClass::Permanent, "Hostile", hostile.to_owned(), vec![hostile.into()], None);
    let payload = Payload::Json(serde_json::json!({ "note": hostile }));
    let id = db.store().await.park(NewDeadLetter::new("hostile", payload, failure)).await.unwrap().id;
    for args in
        [vec!["show".to_owned(), id.to_string(), "--json".to_owned()], vec!["ls".to_owned(), "--json".to_owned()]]
    {
        let out = db.dlq().args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        for c in ['\u{9b}', '\u{202e}', '\u{85}', '\u{7f}'] {
            assert!(!text.contains(c), "dlq {args:?} printed {c:?} raw: {text}");
        }
        assert!(text.contains(r"\u009b") && text.contains(r"\u202e"), "{text}");
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let reason = if args[0] == "show" { &doc["error_reason"] } else { &doc["rows"][0]["error_reason"] };
        assert_eq!(reason, hostile, "the escape is the character itself");
    }
}
