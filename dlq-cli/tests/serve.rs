//! `dlq serve` end to end: the binary on a SQLite file, spoken to over plain HTTP/1.1: the
//! console, `/metrics`, `/healthz`, the token, the refusal of a foreign `Host` without one,
//! and the refusal to bind a public address without one.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

struct Server {
    child: Child,
    addr: String,
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
    BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.split("http://").nth(1).and_then(|rest| rest.split('/').next()).unwrap_or_default().to_owned();
    assert!(!addr.is_empty(), "no address in {line:?}");
    Server { child, addr }
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
    assert_eq!(request_to(&server.addr, "attacker.example", "/healthz", "").0, 200, "probes name no secret");
    let locked = serve(&url, &["--token", "s3cret"]);
    let (code, _) = request_to(&locked.addr, "dlq.example.com", "/api/stats", "Authorization: Bearer s3cret\r\n");
    assert_eq!(code, 200, "with a token, the token guards");
}

#[test]
fn a_public_address_needs_a_token() {
    let (_dir, url) = migrated_sqlite();
    let out = dlq(&url).args(["serve", "--bind", "0.0.0.0:0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("needs a token") && stderr.contains("DLQ_WEB_TOKEN"), "{stderr}");
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
