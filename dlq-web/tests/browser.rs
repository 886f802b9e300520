//! The console in a real browser: headless Chromium driven over WebDriver (Debian's
//! `chromium` and `chromium-driver`; `scripts/test.sh` installs them). Opens the overview,
//! follows a group, redrives it and sees its rows change state; edits a payload through the
//! diff and undoes it; checks hostile payloads and reasons render as text with no dialog and
//! no element injected; checks the pages fit 375 px and 1440 px wide; loads the console
//! through a foreign name resolved to 127.0.0.1 (DNS rebinding) and sees it refused; follows
//! a group link with a path in its fingerprint; loads the charts with a control character in
//! an event type. Screenshots of every page go to `target/screenshots/`.
//!
//! This test never skips: without `chromedriver` it fails with the command to run.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use dlq_core::admin::Admin;
use dlq_core::{DeadLetterStore, DeadReason, DlqId, ErrorClass, FailureInfo, Payload, Status, store::NewDeadLetter};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

const XSS_SCRIPT: &str = "<script>alert(1)</script>";
const XSS_IMG: &str = "\"><img src=x onerror=alert(1)>";

/// `chromedriver` on a free port, killed on drop.
struct Driver(Child, u16);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn chromedriver() -> Driver {
    let port = free_port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "chromedriver is needed for the browser tests ({e}): run `apt-get install chromium chromium-driver` \
                 (scripts/test.sh does)"
            )
        });
    let driver = Driver(child, port);
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return driver;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("chromedriver did not listen on port {port}");
}

async fn browser(driver: &Driver) -> Client {
    browser_with(driver, &[]).await
}

/// A Chromium session with `extra` command-line switches.
async fn browser_with(driver: &Driver, extra: &[&str]) -> Client {
    let mut caps = serde_json::Map::new();
    let chromium =
        ["/usr/bin/chromium", "/usr/bin/chromium-browser"].into_iter().find(|p| std::path::Path::new(p).exists());
    let mut args =
        vec!["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"];
    args.extend_from_slice(extra);
    let mut options = json!({ "args": args });
    if let Some(binary) = chromium {
        options["binary"] = json!(binary);
    }
    caps.insert("goog:chromeOptions".into(), options);
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.1))
        .await
        .expect("a Chromium session through chromedriver")
}

/// The console nested under `/dlq` on a free port, actions enabled, acting as "browser".
async fn console(store: Arc<dyn DeadLetterStore>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let options = dlq_web::Options::default().allow_actions(true).refresh_seconds(0).bound_to(addr);
    let app = axum::Router::new().nest("/dlq", dlq_web::router(Admin::new(store, "browser"), options));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn dead(event_type: &str, kind: &str, reason: &str, payload: serde_json::Value) -> NewDeadLetter {
    let failure = FailureInfo::new(
        ErrorClass::Permanent,
        kind,
        reason.to_owned(),
        vec!["ledger said 422".into()],
        Some("at payments::handle (src/payments.rs:42)".into()),
    );
    NewDeadLetter::new(event_type, Payload::Json(payload), failure).dead(DeadReason::Permanent)
}

struct Seeded {
    group: Vec<DlqId>,
    edit: DlqId,
    hostile: DlqId,
}

async fn seed(store: &Arc<dyn DeadLetterStore>) -> Seeded {
    let mut group = Vec::new();
    for n in 1..=3 {
        let payload = json!({"id": n, "amount_cents": 1250 * n, "currency": "USD "});
        group.push(store.park(dead("payment", "BadCurrency", "unknown currency \"USD \"", payload)).await.unwrap().id);
    }
    let edit = dead("refund", "MissingField", "missing field `order_id`", json!({"refund": 9, "amount_cents": 500}));
    let edit = store.park(edit).await.unwrap().id;
    let hostile = dead(
        "webhook",
        "Xss",
        &format!("bad input {XSS_SCRIPT} {XSS_IMG}"),
        json!({"note": XSS_SCRIPT, "html": XSS_IMG}),
    );
    let hostile = store.park(hostile).await.unwrap().id;
    Seeded { group, edit, hostile }
}

fn shots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(shots().join(format!("{name}.png")), png).unwrap();
}

/// The page's text; retried while a navigation a click started replaces the page.
async fn body_text(c: &Client) -> String {
    for _ in 0..50 {
        if let Ok(body) = c.find(Locator::Css("body")).await {
            if let Ok(text) = body.text().await {
                return text;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the page's body could not be read");
}

/// Waits (up to 5 s) for the page a click led to to show `text`.
async fn wait_for_text(c: &Client, text: &str) {
    for _ in 0..50 {
        if body_text(c).await.contains(text) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the page never showed {text:?}: {}", body_text(c).await);
}

async fn no_dialog(c: &Client) {
    assert!(c.get_alert_text().await.is_err(), "a dialog opened: script ran");
}

/// The page is no wider than the window (tables scroll inside their box).
async fn fits(c: &Client, width: u64) {
    let scroll = c.execute("return document.documentElement.scrollWidth", vec![]).await.unwrap();
    let scroll = scroll.as_u64().unwrap();
    assert!(scroll <= width, "the page is {scroll} px wide in a {width} px window");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_redrives_a_group_edits_a_payload_and_undoes_it() {
    let store: Arc<dyn DeadLetterStore> = Arc::new(dlq_sqlx::SqliteStore::in_memory().await.unwrap());
    let seeded = seed(&store).await;
    let addr = console(store.clone()).await;
    let driver = chromedriver();
    let c = browser(&driver).await;
    let base = format!("http://{addr}/dlq");
    let result = run(&c, &base, &store, &seeded).await;
    let _ = c.close().await;
    result
}

/// DNS rebinding, for real: Chromium resolves `attacker.example` to 127.0.0.1 (as a rebinding
/// attacker's DNS would make it), so a page of that site reaches the console through the
/// operator's browser. The console refuses it (page and API), and answers by its own names.
/// Then links to a group with a path in its fingerprint, clicked, open that group, and the
/// overview's charts still load with a control character in an event type.
#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_name_rebound_to_the_console_is_refused() {
    let store: Arc<dyn DeadLetterStore> = Arc::new(dlq_sqlx::SqliteStore::in_memory().await.unwrap());
    let mut letter = dead("ctl\u{1}type", "Rebind", "secret reason", json!({"card": "4111-secret"}));
    letter.failure.fingerprint = "../../events/1?x=".into();
    let id = store.park(letter).await.unwrap().id;
    let addr = console(store.clone()).await;
    let driver = chromedriver();
    let c = browser_with(&driver, &["--host-resolver-rules=MAP attacker.example 127.0.0.1"]).await;
    let result = rebound(&c, addr.port(), id).await;
    let _ = c.close().await;
    result
}

async fn rebound(c: &Client, port: u16, id: DlqId) {
    for path in [format!("/dlq/events/{id}"), format!("/dlq/api/events/{id}"), "/dlq".into()] {
        c.goto(&format!("http://attacker.example:{port}{path}")).await.unwrap();
        let text = body_text(c).await;
        assert!(text.contains("answers only to"), "{path} through a foreign name is refused: {text}");
        assert!(!text.contains("4111-secret") && !text.contains("secret reason"), "{path}: nothing shown: {text}");
    }
    shot(c, "rebound-refused").await;
    // (The listener is IPv4: `[::1]` is checked over HTTP in tests/http.rs.)
    for host in ["localhost", "127.0.0.1"] {
        c.goto(&format!("http://{host}:{port}/dlq/events/{id}")).await.unwrap();
        let text = body_text(c).await;
        assert!(text.contains("4111-secret"), "{host}: the console answers its own names: {text}");
    }

    // The group link resolves to the group, not to `/dlq/events/1?x=`.
    c.goto(&format!("http://localhost:{port}/dlq/groups")).await.unwrap();
    c.find(Locator::Css("a[href*='/groups/']")).await.unwrap().click().await.unwrap();
    wait_for_text(c, "Failure group ../../events/1?x=").await;
    assert!(body_text(c).await.contains("secret reason"));
    c.find(Locator::Css("table.rows a")).await.unwrap().click().await.unwrap();
    wait_for_text(c, &format!("Event {id}")).await;

    // Both charts are well-formed images (an XML error would leave them broken).
    c.goto(&format!("http://localhost:{port}/dlq")).await.unwrap();
    let widths = c
        .execute(
            "return Array.from(document.querySelectorAll('.chart img')).map(i => i.complete && i.naturalWidth)",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(widths, json!([720, 720]), "the charts render");
    c.goto(&format!("http://localhost:{port}/dlq/charts/parked.svg?window=24h")).await.unwrap();
    assert!(c.find_all(Locator::Css("parsererror")).await.unwrap().is_empty(), "the SVG parses as XML");
}

async fn run(c: &Client, base: &str, store: &Arc<dyn DeadLetterStore>, s: &Seeded) {
    for (width, height) in [(1440_u32, 1000_u32), (375, 800)] {
        c.set_window_size(width, height).await.unwrap();
        c.goto(base).await.unwrap();
        assert!(body_text(c).await.contains("Rows by status and event type"));
        fits(c, u64::from(width)).await;
        shot(c, &format!("overview-{width}")).await;
        c.goto(&format!("{base}/events/{}", s.group[0])).await.unwrap();
        fits(c, u64::from(width)).await;
        shot(c, &format!("detail-{width}")).await;
    }
    c.set_window_size(1440, 1000).await.unwrap();

    // The overview → a group → redrive: dry run, confirm, the rows are PENDING.
    c.goto(base).await.unwrap();
    c.find(Locator::Css("a[href*='/groups/']")).await.unwrap().click().await.unwrap();
    wait_for_text(c, "Failure group ").await;
    assert!(c.current_url().await.unwrap().path().contains("/dlq/groups/"));
    assert_eq!(c.find_all(Locator::Css("table.rows .st-dead")).await.unwrap().len(), 3);
    shot(c, "group-1440").await;
    let redrive = c.find(Locator::Css("form[action$='/redrive']")).await.unwrap();
    redrive.find(Locator::Css("input[name=reason]")).await.unwrap().send_keys("ledger fixed").await.unwrap();
    redrive.find(Locator::Css("button")).await.unwrap().click().await.unwrap();
    wait_for_text(c, "Would move 3 rows").await;
    shot(c, "redrive-dry-run").await;
    c.find(Locator::Css("button.danger")).await.unwrap().click().await.unwrap();
    wait_for_text(c, "Moved 3 rows").await;
    assert!(c.current_url().await.unwrap().path().contains("/dlq/operations/"), "the operation's page");
    shot(c, "operation").await;
    c.find(Locator::LinkText("← back")).await.unwrap().click().await.unwrap();
    wait_for_text(c, "sample reason").await;
    assert_eq!(c.find_all(Locator::Css("table.rows .st-wait")).await.unwrap().len(), 3, "the rows are PENDING now");
    assert!(c.find_all(Locator::Css("table.rows .st-dead")).await.unwrap().is_empty());
    for id in &s.group {
        assert_eq!(store.get(*id).await.unwrap().unwrap().status, Status::Pending);
    }

    edit_and_undo(c, base, store, s.edit).await;
    hostile(c, base, s.hostile).await;
}

async fn edit_and_undo(c: &Client, base: &str, store: &Arc<dyn DeadLetterStore>, id: DlqId) {
    c.goto(&format!("{base}/events/{id}")).await.unwrap();
    let form = c.find(Locator::Css("form[action$='/edit']")).await.unwrap();
    let editor = form.find(Locator::Css("textarea[name=payload]")).await.unwrap();
    editor.clear().await.unwrap();
    editor.send_keys(r#"{"refund": 9, "amount_cents": 500, "order_id": "A-17"}"#).await.unwrap();
    form.find(Locator::Css("input[name=reason]")).await.unwrap().send_keys("order id from the ledger").await.unwrap();
    form.find(Locator::Css("button")).await.unwrap().click().await.unwrap();
    wait_for_text(c, "changes as follows").await;
    let diff = body_text(c).await;
    assert!(diff.contains("/order_id") && diff.contains("A-17"), "the diff before saving: {diff}");
    shot(c, "edit-diff").await;
    c.find(Locator::XPath("//button[text()='Apply']")).await.unwrap().click().await.unwrap();
    // The diff page shows "A-17" too: wait for what only the event's page shows after a patch.
    wait_for_text(c, "Undo this patch").await;
    assert!(body_text(c).await.contains("\"A-17\""), "the saved payload is shown");
    assert!(c.current_url().await.unwrap().path().ends_with(&format!("/events/{id}")));
    let Payload::Json(saved) = store.get(id).await.unwrap().unwrap().payload else { panic!("json payload") };
    assert_eq!(saved["order_id"], json!("A-17"));

    c.find(Locator::XPath("//button[text()='Undo this patch']")).await.unwrap().click().await.unwrap();
    wait_for_text(c, "undo of audit entry").await;
    let Payload::Json(restored) = store.get(id).await.unwrap().unwrap().payload else { panic!("json payload") };
    assert_eq!(restored, json!({"refund": 9, "amount_cents": 500}));
    shot(c, "detail-after-undo").await;
}

async fn hostile(c: &Client, base: &str, id: DlqId) {
    for url in [format!("{base}/events/{id}"), format!("{base}/events"), base.to_owned(), format!("{base}/groups")] {
        c.goto(&url).await.unwrap();
        no_dialog(c).await;
        assert!(
            c.find_all(Locator::Css("img[onerror], img[src='x']")).await.unwrap().is_empty(),
            "{url}: an <img> was injected"
        );
        assert!(
            c.find_all(Locator::Css("main script, body script")).await.unwrap().is_empty(),
            "{url}: a <script> was injected"
        );
        assert!(body_text(c).await.contains("<script>alert(1)</script>"), "{url} shows the hostile text as text");
    }
    c.goto(&format!("{base}/events/{id}")).await.unwrap();
    assert!(body_text(c).await.contains(XSS_IMG));
    shot(c, "hostile-detail").await;
}
