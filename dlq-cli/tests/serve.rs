//! `dlq serve` end to end: the binary on a SQLite file, spoken to over plain HTTP/1.1: the
//! console, `/metrics`, `/healthz` and its `Host` rule, the token, the refusal of a foreign
//! `Host` without one, a public bind's strong token (given or made), and reveal by a header
//! the proxy in front sets.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

struct Server {
    child: Child,
    addr: String,
    /// What it prints after its address line.
    stderr: BufReader<std::process::ChildStderr>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dlq(url: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlq"));
    cmd.env("DATABASE_URL", url).env_remove("DLQ_WEB_TOKEN");
    cmd
}

/// Starts `dlq serve ARGS` on a free loopback port and waits for its address line.
fn serve(url: &str, args: &[&str]) -> Server {
    serve_on(url, "127.0.0.1:0", args)
}

/// Starts `dlq serve --bind BIND ARGS` and waits for its address line.
fn serve_on(url: &str, bind: &str, args: &[&str]) -> Server {
    let mut child = dlq(url)
        .args(["serve", "--bind", bind])
        .args(args)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    stderr.read_line(&mut line).unwrap();
    let addr = line.split("http://").nth(1).and_then(|rest| rest.split('/').next()).unwrap_or_default().to_owned();
    assert!(!addr.is_empty(), "no address in {line:?}");
    Server { child, addr, stderr }
}

/// One `POST` of a JSON body to `addr` with `extra` header lines; the code and the text.
fn post_json(addr: &str, path: &str, body: &str, extra: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n{extra}\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let code = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text)
}

/// One request; the status line's code and the whole response text.
fn request(addr: &str, path: &str, extra: &str) -> (u16, String) {
    request_to(addr, addr, path, extra)
}

/// One request to `addr` naming `host` in its `Host` header.
fn request_to(addr: &str, host: &str, path: &str, extra: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let code = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text)
}

fn migrated_sqlite() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("dlq.db").display());
    assert!(dlq(&url).arg("migrate").status().unwrap().success());
    (dir, url)
}

#[test]
fn serves_the_console_metrics_and_health_read_only() {
    let (_dir, url) = migrated_sqlite();
    let server = serve(&url, &[]);
    let (code, page) = request(&server.addr, "/", "");
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("content-security-policy") && page.contains("Overview"));
    let (code, health) = request(&server.addr, "/healthz", "");
    assert_eq!(code, 200, "{health}");
    assert!(health.contains("\"status\""));
    let (code, metrics) = request(&server.addr, "/metrics", "");
    assert_eq!(code, 200);
    assert!(metrics.contains("dlq_"), "the dlq metrics are described: {metrics}");
    let post = {
        let mut stream = TcpStream::connect(&server.addr).unwrap();
        let addr = &server.addr;
        write!(stream, "POST /discard HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    };
    assert!(post.starts_with("HTTP/1.1 403"), "read-only without --allow-actions: {post}");
}

#[test]
fn a_token_guards_the_console_and_metrics() {
    let (_dir, url) = migrated_sqlite();
    let server = serve(&url, &["--token", "s3cret"]);
    assert_eq!(request(&server.addr, "/", "").0, 401);
    assert_eq!(request(&server.addr, "/metrics", "").0, 401);
    assert_eq!(request(&server.addr, "/", "Authorization: Bearer s3cret\r\n").0, 200);
    assert_eq!(request(&server.addr, "/metrics", "Authorization: Bearer s3cret\r\n").0, 200);
    // `/metrics` takes the token in every form the console takes: the cookie `?token=` sets,
    // and `?token=` itself.
    assert_eq!(request(&server.addr, "/metrics", "Cookie: dlq_token=s3cret\r\n").0, 200);
    assert_eq!(request(&server.addr, "/metrics?token=s3cret", "").0, 200);
    assert_eq!(request(&server.addr, "/metrics", "Cookie: dlq_token=s3cre\r\n").0, 401);
    assert_eq!(request(&server.addr, "/metrics?token=wrong", "").0, 401);
    assert_eq!(request(&server.addr, "/metrics", "Authorization: Bearer wrong\r\n").0, 401);
    assert_eq!(request(&server.addr, "/healthz", "").0, 200, "probes need no token");
}

/// DNS rebinding: a page whose name resolves to 127.0.0.1 makes the browser send its requests
/// with that name in `Host`. Without a token the console and `/metrics` answer only to the
/// bound address and loopback names with its port.
#[test]
fn a_foreign_host_is_refused_without_a_token() {
    let (_dir, url) = migrated_sqlite();
    let server = serve(&url, &[]);
    let port = server.addr.rsplit(':').next().unwrap();
    for path in ["/", "/api/stats", "/metrics"] {
        for foreign in [format!("attacker.example:{port}"), "localhost:1".to_owned()] {
            let (code, text) = request_to(&server.addr, &foreign, path, "");
            assert_eq!(code, 421, "{path} as {foreign}: {text}");
            assert!(text.contains("answers only to"), "{text}");
        }
        for own in [format!("localhost:{port}"), format!("[::1]:{port}"), server.addr.clone()] {
            assert_eq!(request_to(&server.addr, &own, path, "").0, 200, "{path} as {own}");
        }
    }
    let locked = serve(&url, &["--token", "s3cret"]);
    let (code, _) = request_to(&locked.addr, "dlq.example.com", "/api/stats", "Authorization: Bearer s3cret\r\n");
    assert_eq!(code, 200, "with a token, the token guards");
}

/// `/healthz` answered any `Host`, so a page rebinding its name to the console read it. It
/// needs no token (probes carry none) and answers a `Host` that is an IP address (load
/// balancers and kubelets probe by address) or the console's own name, with a token too;
/// another name is a 421. It and `/metrics` carry the console's security headers, and their
/// refusals a body, hyper's own refusals included.
#[test]
fn health_answers_addresses_and_own_names_with_the_console_headers() {
    let (_dir, url) = migrated_sqlite();
    let port = |server: &Server| server.addr.rsplit(':').next().unwrap().to_owned();
    let open = serve(&url, &[]);
    let locked = serve(&url, &["--token", "s3cret"]);
    for server in [&open, &locked] {
        let p = port(server);
        for foreign in ["attacker.example".to_owned(), format!("attacker.example:{p}"), format!("10.0.0.7.nip.io:{p}")]
        {
            let (code, text) = request_to(&server.addr, &foreign, "/healthz", "");
            assert_eq!(code, 421, "{foreign}: {text}");
            assert!(text.contains("health probe") && text.contains("content-security-policy"), "{text}");
        }
        for probe in ["10.0.0.7:8080".to_owned(), "10.0.0.7".into(), "[fd00::7]:80".into(), format!("localhost:{p}")] {
            let (code, text) = request_to(&server.addr, &probe, "/healthz", "");
            assert_eq!(code, 200, "{probe}: {text}");
            assert!(
                text.contains("content-security-policy: default-src 'none'") && text.contains("x-frame-options: DENY")
            );
        }
    }
    let (code, text) = request(&open.addr, "/metrics", "");
    assert!(code == 200 && text.contains("x-content-type-options: nosniff"), "{text}");
    let mut stream = TcpStream::connect(&open.addr).unwrap();
    write!(stream, "DELETE /healthz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", open.addr).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 405") && text.contains("content-security-policy"), "{text}");
    assert!(text.ends_with("405 Method Not Allowed\n"), "a refusal has a body: {text}");
    // Past hyper's own limit (a 64 KiB target), refused before any route: a body and the headers too.
    let (code, text) = request(&open.addr, &format!("/healthz?{}", "a".repeat(70_000)), "");
    assert_eq!(code, 414, "{text}");
    assert!(text.contains("content-security-policy") && text.contains("path and query"), "{text}");
}

/// `--token a` was accepted for `0.0.0.0`. A public bind takes a token of 128 bits or more;
/// without one, `dlq serve` makes one and prints it once, after its address line.
#[test]
fn a_public_address_needs_a_strong_token_or_gets_one() {
    let (_dir, url) = migrated_sqlite();
    for weak in ["a", "s3cret", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"] {
        // Its first line: the refusal, or (were the token taken) the address it serves on.
        let mut child = dlq(&url)
            .args(["serve", "--bind", "0.0.0.0:0", "--token", weak])
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
        if line.contains("dlq console on") {
            let _ = child.kill();
        }
        let status = child.wait().unwrap();
        assert!(line.contains("128 bits") && status.code() == Some(2), "{weak}: {status}: {line}");
    }
    let mut server = serve_on(&url, "0.0.0.0:0", &[]);
    let mut line = String::new();
    server.stderr.read_line(&mut line).unwrap();
    let token = line.split("token is ").nth(1).and_then(|rest| rest.split(' ').next()).unwrap_or_default().to_owned();
    assert!(token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()), "{line}");
    assert_eq!(request(&server.addr, "/api/stats", "").0, 401, "the made token guards the console");
    let bearer = format!("Authorization: Bearer {token}\r\n");
    assert_eq!(request(&server.addr, "/api/stats", &bearer).0, 200);
    let strong = serve_on(&url, "0.0.0.0:0", &["--token", "3f9c2a7e81d04b6f95e2c7a18d3b60f4"]);
    let authorized = "Authorization: Bearer 3f9c2a7e81d04b6f95e2c7a18d3b60f4\r\n";
    assert_eq!(request(&strong.addr, "/api/stats", authorized).0, 200);
}

/// The stock `dlq serve` could never reveal. With `--reveal-header NAME=VALUE` a request that
/// carries that header once, as the proxy in front sets it, reveals a row whole after an
/// audit entry naming the operator `--actor-header` gives; any other request stays masked.
#[tokio::test(flavor = "multi_thread")]
async fn a_proxy_header_grants_an_audited_reveal() {
    use dlq_core::store::prelude::*;
    const CARD: &str = "4111-1111-1111-1111";
    let (_dir, url) = migrated_sqlite();
    let store = dlq_sqlx::SqliteStore::connect(&url).await.unwrap();
    let mut info = dlq_core::catalog::EventTypeInfo::new("serve-redacted", 1, "test");
    info.redact = vec!["/card".into()];
    store.publish_types(vec![info]).await.unwrap();
    let failure =
        dlq_core::classify::FailureInfo::new(dlq_core::ErrorClass::Permanent, "declined", "no".into(), vec![], None);
    let payload = dlq_core::Payload::Json(serde_json::json!({"id": 1, "card": CARD}));
    let letter = dlq_core::store::NewDeadLetter::new("serve-redacted", payload, failure);
    let id = store.park(letter.dead(dlq_core::adapter::DeadReason::Permanent)).await.unwrap().id;

    let args = ["--reveal-header", "X-Dlq-Role=reveal", "--actor-header", "X-Forwarded-User"];
    let server = serve(&url, &args);
    let path = format!("/api/events/{id}/reveal");
    let body = r#"{"reason": "chargeback 118"}"#;
    let (code, shown) = request(&server.addr, &format!("/api/events/{id}"), "X-Forwarded-User: carol\r\n");
    assert!(code == 200 && !shown.contains(CARD) && shown.contains("[redacted]"), "{shown}");
    for refused in ["", "X-Dlq-Role: viewer\r\n", "X-Dlq-Role: reveal\r\nX-Dlq-Role: viewer\r\n"] {
        let (code, text) = post_json(&server.addr, &path, body, refused);
        assert!(code == 403 && !text.contains(CARD), "{refused:?}: {text}");
    }
    assert!(store.audit(id).await.unwrap().is_empty(), "nothing revealed, nothing audited");
    let (code, text) = post_json(&server.addr, &path, body, "X-Dlq-Role: reveal\r\nX-Forwarded-User: carol\r\n");
    assert!(code == 200 && text.contains(CARD), "{text}");
    let last = store.audit(id).await.unwrap().pop().unwrap();
    assert_eq!((last.action.as_str(), last.actor.as_str()), ("reveal", "carol"));

    let out = dlq(&url).args(["serve", "--reveal-header", "X-Dlq-Role"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "no value: a usage error");
}

/// `--bind localhost:PORT` once failed as "invalid socket address syntax": a name is
/// resolved now, and the console answers to it; `[::1]:PORT` listens on IPv6 loopback.
#[test]
fn a_name_or_an_ipv6_loopback_can_be_bound() {
    let (_dir, url) = migrated_sqlite();
    for (bind, family) in [("localhost:0", None), ("[::1]:0", Some("[::1]:"))] {
        let server = serve_on(&url, bind, &[]);
        if let Some(family) = family {
            assert!(server.addr.starts_with(family), "{bind}: listens on {}", server.addr);
        }
        let port = server.addr.rsplit(':').next().unwrap();
        for host in [format!("localhost:{port}"), server.addr.clone()] {
            let (code, text) = request_to(&server.addr, &host, "/api/stats", "");
            assert_eq!(code, 200, "{bind} as {host}: {text}");
        }
        let (code, _) = request_to(&server.addr, &format!("attacker.example:{port}"), "/", "");
        assert_eq!(code, 421, "{bind}: a foreign name is still refused");
    }
    let out = dlq(&url).args(["serve", "--bind", "localhost"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "no port: a usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not an address or NAME:PORT") && stderr.lines().count() == 1, "{stderr}");
}
