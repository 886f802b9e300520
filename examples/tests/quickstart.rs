//! The quickstart, run as a user runs it, on PostgreSQL with a password in `DATABASE_URL`:
//! nothing it prints holds the password (the start-up line, a connection error).

#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::{Command, Output};

const PASSWORD: &str = "s3cret-quickstart";

/// The quickstart binary, built now (a no-op when it is up to date) by the cargo running
/// this test.
fn quickstart(url: &str) -> Output {
    let built = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "-p", "dlq-examples", "--example", "quickstart"])
        .status()
        .unwrap();
    assert!(built.success(), "cargo build --example quickstart failed");
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_owned();
    let bin = deps.parent().unwrap().join("examples").join("quickstart");
    Command::new(bin).env("DATABASE_URL", url).env_remove("DLQ_QUICKSTART_ON_CALL").output().unwrap()
}

fn pg_base() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn psql(statement: &str) {
    let out = Command::new("psql").args([&pg_base(), "-qc", statement]).output().unwrap();
    assert!(out.status.success(), "{statement}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_quickstart_never_prints_the_database_password() {
    let name = format!("dlq_quickstart_{}", std::process::id());
    psql(&format!("CREATE DATABASE {name}"));
    // The server trusts local connections: the password is sent and ignored.
    let base = pg_base();
    let (head, _) = base.rsplit_once('/').unwrap();
    let (scheme, rest) = head.split_once("://").unwrap();
    let user_host = rest.split_once('@').map_or(rest.to_owned(), |(user, host)| {
        let user = user.split(':').next().unwrap();
        format!("{user}:{PASSWORD}@{host}")
    });
    let url = format!("{scheme}://{user_host}/{name}");
    assert!(url.contains(PASSWORD), "{url}");
    let out = quickstart(&url);
    psql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains(":***@"), "the URL is shown, masked: {stdout}");
    assert!(!stdout.contains(PASSWORD) && !stderr.contains(PASSWORD), "{stdout}\n{stderr}");

    let unreachable = format!("postgres://app:{PASSWORD}@127.0.0.1:1/app");
    let out = quickstart(&unreachable);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("cannot open the store at postgres://app:***@127.0.0.1:1/app"), "{stderr}");
    assert!(!stdout.contains(PASSWORD) && !stderr.contains(PASSWORD), "{stdout}\n{stderr}");
}
