//! The console in a real browser: headless Chromium driven over WebDriver (Debian's
//! `chromium` and `chromium-driver`; `scripts/test.sh` installs them). Opens the overview,
//! follows a group, redrives it and sees its rows change state; edits a payload through the
//! diff and undoes it; checks hostile payloads and reasons render as text with no dialog and
//! no element injected; checks the pages fit 375 px and 1440 px wide; loads the console
//! through a foreign name resolved to 127.0.0.1 (DNS rebinding) and sees it refused; follows
//! a group link with a path in its fingerprint; loads the charts with a control character in
//! an event type. Screenshots of every page go to `target/screenshots/`.
//!
//! Then, on PostgreSQL, a hostile-data tour: rows whose every field is attacker-controlled
//! (markup, `javascript:` URLs, terminal escapes, C0/C1 controls, bidi overrides, 10,000
//! characters, invalid UTF-8, path-like fingerprints) and audit entries with hostile reasons,
//! shown on every page of the console with its Content-Security-Policy bypassed (so that
//! escaping alone is under test): no script runs, no element is injected, every link leads to
//! the route of the stored value it carries, the SVG charts parse, long values are cut in
//! tables and whole on the row's page, and no raw control character is shown.
//!
//! This test never skips: without `chromedriver` it fails with the command to run.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use dlq_core::admin::Admin;
use dlq_core::{
    DlqId, ErrorClass, Payload, Status, adapter::DeadReason, classify::FailureInfo, store::NewDeadLetter,
    store::prelude::*,
};
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
        if let Ok(body) = c.find(Locator::Css("body")).await
            && let Ok(text) = body.text().await
        {
            return text;
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

/// Both charts of the overview are loaded images (an XML error would leave them broken).
async fn charts_render(c: &Client) {
    let script = "return Array.from(document.querySelectorAll('.chart img')).map(i => i.complete && i.naturalWidth)";
    let widths = c.execute(script, vec![]).await.unwrap();
    assert_eq!(widths, json!([720, 720]), "the charts render");
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
    charts_render(c).await;
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

// ---------------------------------------------------------------------------------------------
// Hostile rows on every page.

/// Each of these runs `window.__pwned=1` if a page ever parses stored text as markup.
const PWN_SCRIPT: &str = "<script>window.__pwned=1</script>";
const PWN_IMG: &str = "\"><img src=x onerror=\"window.__pwned=1\">";
const PWN_QUOTE: &str = "' autofocus onfocus='window.__pwned=1' x='";
const PWN_URL: &str = "javascript:window.__pwned=1//";
const PWN_TEXTAREA: &str = "</textarea><img src=x onerror=\"window.__pwned=1\">";
const PWN_SVG: &str = "]]></text></svg><script>window.__pwned=1</script>";
/// A terminal's escapes: clear the screen, retitle the window, a hyperlink (OSC 8).
const ANSI: &str = "\u{1b}[2J\u{1b}]0;title\u{7}\u{1b}]8;;http://evil\u{1b}\\link\u{1b}]8;;\u{1b}\\";
/// C0 and C1 control characters and DEL.
const CONTROLS: &str = "c0\u{1}\u{8}\u{b}\u{c}\u{d}\u{7f}c1\u{80}\u{85}\u{9b}\u{9f}";
/// A right-to-left override (what is shown reads `exe.pdf`), an isolate, a mark.
const BIDI: &str = "\u{202e}fdp.exe\u{202c}\u{2066}iso\u{2069}\u{200f}";
/// The operator of the stored audit entries and operation.
const ACTOR: &str = "<img src=x onerror=\"window.__pwned=1\">\u{1b}]0;actor\u{7}\u{202e}";
/// A value of 10,000 characters, `prefix` naming what it is.
fn long(prefix: &str) -> String {
    format!("{prefix}-{}-end", "x".repeat(10_000 - prefix.len() - 5))
}

fn evil(tag: &str) -> String {
    format!("{tag} {PWN_SCRIPT} {PWN_IMG} {PWN_QUOTE} {PWN_URL} {PWN_TEXTAREA} {PWN_SVG}\n{ANSI} {CONTROLS} {BIDI}")
}

/// A character a page must never show raw: C0 but the newline and tab, DEL, C1, and the
/// bidi marks, embeddings, overrides and isolates that reorder what is shown.
fn hazard(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The elements the console writes: any other one on a page was injected.
const TAGS: &[&str] = &[
    "html", "head", "meta", "title", "link", "body", "header", "a", "nav", "main", "h1", "h2", "h3", "p", "section",
    "div", "span", "table", "thead", "tbody", "tr", "th", "td", "code", "pre", "dl", "dt", "dd", "ol", "ul", "li",
    "strong", "time", "form", "input", "label", "select", "option", "button", "textarea", "details", "summary", "br",
    "img",
];

/// The rows of the hostile tour, by what they hold.
struct Hostile {
    markup: DlqId,
    terminal: DlqId,
    long: DlqId,
    raw: DlqId,
    discarded: DlqId,
    operation: i64,
}

fn hostile_letter(event_type: &str, kind: &str, reason: String, fingerprint: &str, payload: Payload) -> NewDeadLetter {
    let chain = vec![PWN_URL.to_owned(), PWN_TEXTAREA.to_owned(), evil("cause")];
    let mut failure = FailureInfo::new(ErrorClass::Permanent, kind, reason, chain, Some(evil("at")));
    failure.fingerprint = fingerprint.to_owned();
    NewDeadLetter::new(event_type, payload, failure).with_handler(PWN_IMG).dead(DeadReason::Permanent)
}

/// Rows whose every field is hostile, and audit entries (a patch, a discard, an operation)
/// by a hostile operator with hostile reasons, all through the store's and the admin layer's
/// public calls.
async fn seed_hostile(store: &Arc<dyn DeadLetterStore>) -> Hostile {
    let park = |letter: NewDeadLetter| async move { store.park(letter).await.unwrap().id };
    let json_payload = json!({
        "note": PWN_SCRIPT, PWN_IMG: PWN_TEXTAREA, "url": PWN_URL, "svg": PWN_SVG, "quote": PWN_QUOTE,
        "ansi": ANSI, "controls": CONTROLS, "bidi": BIDI, (format!("key{ANSI}{BIDI}")): [CONTROLS, BIDI],
    });
    let mut source = dlq_core::adapter::SourceMeta::kafka(PWN_SVG, 1, 2);
    source.headers.insert(PWN_SCRIPT.into(), PWN_URL.into());
    source.headers.insert(format!("x-ansi{ANSI}"), BIDI.into());
    source.trace_context = Some(evil("trace"));
    let markup = hostile_letter(
        &format!("webhook {PWN_SCRIPT}"),
        PWN_IMG,
        evil("reason"),
        "../../events/1?x=",
        Payload::Json(json_payload),
    );
    let markup = park(markup.with_source(source).with_dedupe_key(PWN_TEXTAREA)).await;
    let terminal = hostile_letter(
        &format!("ctl\u{1}type{ANSI}{BIDI}"),
        ANSI,
        evil("terminal"),
        "%2e%2e/",
        Payload::Json(json!({ANSI: CONTROLS, BIDI: [ANSI, CONTROLS]})),
    );
    let terminal = park(terminal).await;
    let mut source = dlq_core::adapter::SourceMeta::kafka("long", 0, 1);
    source.headers.insert("x-long".into(), long("header"));
    let long_row = hostile_letter(
        &long("type"),
        &long("kind"),
        long("reason"),
        &long("fingerprint"),
        Payload::Json(json!({ "long": long("payload") })),
    );
    let long_row = park(long_row.with_source(source)).await;
    let bytes = b"\xff\xfe<script>window.__pwned=1</script>\x1b[2J\xe2\x80\xae\xc3".to_vec();
    let raw = hostile_letter("raw\u{85}type", "Undecodable", evil("raw"), "", Payload::Raw { bytes, truncated: None });
    let raw = park(raw).await;
    park(hostile_letter(PWN_SVG, PWN_QUOTE, evil("slash"), "/", Payload::Json(json!([PWN_SVG])))).await;
    park(hostile_letter("dots", "Dots", evil("dots"), "..", Payload::Json(json!({})))).await;
    let discarded = park(hostile_letter("dots", "Dot", evil("dot"), ".", Payload::Json(json!({})))).await;

    let admin = Admin::new(store.clone(), "seed").acting_as(ACTOR);
    let patch = json!([{"op": "add", "path": format!("/{}", format!("k<b>{ANSI}{BIDI}").replace('/', "~1")), "value": PWN_SCRIPT}]);
    admin.patch(markup, &patch, &evil("patch")).await.unwrap();
    admin.discard(dlq_core::ListFilter::default().ids([discarded]), &evil("discard")).await.unwrap();
    let plan = dlq_core::admin::BulkPlan::redrive(dlq_core::ListFilter::default().fingerprint("/"), &evil("operation"));
    let report = admin
        .start(plan)
        .await
        .unwrap()
        .run(dlq_core::admin::Pacing::default(), |_| std::ops::ControlFlow::Continue(()))
        .await
        .unwrap();
    assert_eq!(report.moved, 1, "the operation redrove the `/` group");
    let operation = report.operation.expect("a stored operation");
    Hostile { markup, terminal, long: long_row, raw, discarded, operation }
}

/// What a page holds, read in the browser.
#[derive(Debug, serde::Deserialize)]
struct Seen {
    /// `typeof window.__pwned`.
    pwned: String,
    tags: Vec<String>,
    /// `tag attribute` of every `on…` attribute.
    handlers: Vec<String>,
    links: Vec<Link>,
    /// `document.body.innerText`.
    text: String,
    title: String,
    /// The text of every table cell.
    cells: Vec<String>,
    /// Each textarea's name and value.
    editors: Vec<(String, String)>,
    #[serde(skip)]
    targets: Vec<Target>,
}

/// An attribute holding a URL, as written and as the browser resolves it.
#[derive(Debug, serde::Deserialize)]
struct Link {
    tag: String,
    attr: String,
    raw: String,
    url: String,
}

impl std::fmt::Display for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} {}={:?}> (resolved: {})", self.tag, self.attr, self.raw, self.url)
    }
}

const SEEN_JS: &str = r#"
    const names = ['href', 'src', 'action', 'formaction', 'poster', 'data', 'srcset', 'xlink:href', 'background', 'cite', 'ping'];
    const links = [], tags = new Set(), handlers = [];
    for (const e of document.querySelectorAll('*')) {
        tags.add(e.localName);
        for (const a of e.attributes) {
            if (a.name.toLowerCase().startsWith('on')) handlers.push(e.localName + ' ' + a.name);
            if (names.includes(a.name.toLowerCase())) {
                links.push({tag: e.localName, attr: a.name, raw: a.value, url: new URL(a.value, document.baseURI).href});
            }
        }
    }
    return {
        pwned: typeof window.__pwned,
        tags: [...tags],
        handlers,
        links,
        text: document.body ? document.body.innerText : '',
        title: document.title,
        cells: [...document.querySelectorAll('td')].map(td => td.innerText),
        editors: [...document.querySelectorAll('textarea')].map(t => [t.name, t.value]),
    };
"#;

/// Where a link of the console leads.
#[derive(Debug, Clone, PartialEq)]
enum Target {
    /// A page or action without stored data in its URL (`groups`, `redrive`, `` for the overview …).
    Fixed(String),
    /// A failure group's page or patch action, by its fingerprint.
    Group(String),
    /// A row's page or edit action.
    Event(DlqId),
    /// The rows list, with its query.
    List(Vec<(String, String)>),
    /// An operation, an audit entry's undo, the charts: a number or a window.
    Other(String),
}

/// The stored rows (read back) and the console's origin: what every link is checked against.
struct Known {
    origin: url::Url,
    rows: Vec<dlq_core::DeadLetter>,
    /// Values a list link may carry beside the stored ones: the filters the tour types.
    filters: Vec<String>,
}

impl Known {
    fn fingerprint(&self, fp: &str) -> Result<(), String> {
        if self.rows.iter().any(|r| r.failure.fingerprint == fp) {
            Ok(())
        } else {
            Err(format!("group {fp:?} is stored nowhere"))
        }
    }

    fn text_value(&self, key: &str, value: &str) -> Result<(), String> {
        let stored = self.rows.iter().any(|r| match key {
            "event_type" => r.event_type == value,
            "group" => r.failure.fingerprint == value,
            "kind" => r.failure.kind == value,
            _ => false,
        });
        if stored || self.filters.iter().any(|f| f == value) {
            Ok(())
        } else {
            Err(format!("{key}={value:?} is neither stored nor a filter given"))
        }
    }

    /// Where `link` leads: a route of the console (lib.rs's table) on the console's own
    /// origin, its path segment or query decoded to a stored value; an error otherwise.
    fn route(&self, link: &Link) -> Result<Target, String> {
        let url = url::Url::parse(&link.url).map_err(|e| format!("{link} is no URL: {e}"))?;
        if url.origin() != self.origin.origin() {
            return Err(format!("{link} leaves the console's origin"));
        }
        if url.fragment().is_some() || url.username() != "" {
            return Err(format!("{link} has a fragment or user info"));
        }
        let segments = url
            .path_segments()
            .into_iter()
            .flatten()
            .map(|s| percent_encoding::percent_decode_str(s).decode_utf8().map(|s| s.into_owned()))
            .collect::<Result<Vec<String>, _>>()
            .map_err(|e| format!("{link}: a segment is not UTF-8: {e}"))?;
        let query: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let Some((&"dlq", rest)) = segments.split_first() else {
            return Err(format!("{link} is not under the console's prefix"));
        };
        let bare =
            |target: Target| if query.is_empty() { Ok(target) } else { Err(format!("{link}: an unexpected query")) };
        let number = |n: &str| n.parse::<i64>().map_err(|_| format!("{link}: {n:?} is not a number"));
        match rest {
            [] | [""] => bare(Target::Fixed(String::new())),
            ["groups"] | ["redrive"] | ["discard"] | ["assets", "console.css"] | ["api", "openapi.json"] => {
                bare(Target::Fixed(rest.join("/")))
            }
            ["groups", fp] | ["groups", fp, "patch"] => {
                self.fingerprint(fp)?;
                bare(Target::Group((*fp).to_owned()))
            }
            ["group"] | ["group", "patch"] => match query.as_slice() {
                [(key, fp)] if key == "group" => {
                    if !matches!(fp.as_str(), "" | "." | "..") {
                        return Err(format!("{link}: a segment could carry group {fp:?}"));
                    }
                    self.fingerprint(fp)?;
                    Ok(Target::Group(fp.clone()))
                }
                _ => Err(format!("{link}: /group takes exactly ?group=")),
            },
            ["events", id] | ["events", id, "edit"] => {
                let id = number(id)?;
                if !self.rows.iter().any(|r| r.id == id) {
                    return Err(format!("{link}: no row {id}"));
                }
                bare(Target::Event(id))
            }
            ["events"] => {
                for (key, value) in &query {
                    match key.as_str() {
                        "event_type" | "group" | "kind" | "reason" => self.text_value(key, value)?,
                        "status" => {
                            value.parse::<Status>().map_err(|_| format!("{link}: status {value:?}"))?;
                        }
                        "after" | "limit" => {
                            number(value)?;
                        }
                        _ => return Err(format!("{link}: the list takes no {key:?}")),
                    }
                }
                Ok(Target::List(query))
            }
            ["audit", n, "undo"] | ["operations", n] | ["operations", n, "resume"] => {
                number(n)?;
                bare(Target::Other(rest.join("/")))
            }
            ["charts", "parked.svg"] => match query.as_slice() {
                [(key, window)] if key == "window" && (window == "24h" || window == "7d") => {
                    Ok(Target::Other(format!("chart {window}")))
                }
                _ => Err(format!("{link}: the chart takes ?window=24h or 7d")),
            },
            _ => Err(format!("{link} is no route of the console")),
        }
    }
}

/// Reads the page in the browser and checks it is inert: no dialog, `window.__pwned` unset,
/// no element or event handler the console does not write, every URL a route of the console
/// carrying stored values, no raw control or bidi character in its text or title.
async fn inert(c: &Client, known: &Known, what: &str) -> Seen {
    no_dialog(c).await;
    let value = c.execute(SEEN_JS, vec![]).await.unwrap();
    let mut seen: Seen = serde_json::from_value(value).unwrap();
    assert_eq!(seen.pwned, "undefined", "{what}: stored text ran as script");
    assert!(seen.handlers.is_empty(), "{what}: event handlers were injected: {:?}", seen.handlers);
    for tag in &seen.tags {
        assert!(TAGS.contains(&tag.as_str()), "{what}: a <{tag}> the console never writes was injected");
    }
    for link in &seen.links {
        let target = known.route(link).unwrap_or_else(|e| panic!("{what}: {e}"));
        seen.targets.push(target);
    }
    for (name, text) in [("text", &seen.text), ("title", &seen.title)] {
        if let Some((at, ch)) = text.char_indices().find(|(_, ch)| hazard(*ch)) {
            let context: String = text[at.saturating_sub(40)..].chars().take(80).collect();
            panic!("{what}: a raw {ch:?} in the page's {name}: {context:?}");
        }
    }
    seen
}

/// Every table cell is short: a long value is cut, with `…`.
fn cut_in_tables(seen: &Seen, what: &str) {
    let long_values = [long("type"), long("kind"), long("fingerprint"), long("reason")];
    for cell in &seen.cells {
        assert!(cell.chars().count() <= 150, "{what}: a table cell of {} characters", cell.chars().count());
        for value in &long_values {
            if cell.contains(&value[..30]) {
                assert!(cell.ends_with('…'), "{what}: {}… is not cut: {cell:?}", &value[..30]);
            }
        }
    }
}

/// Fills the named fields of the form `css` selects, submits it, and waits for the page it
/// leads to (the old document is marked: the next one has no mark).
async fn submit(c: &Client, css: &str, fields: &[(&str, &str)]) {
    let script = "const [css, fields] = arguments; const form = document.querySelector(css);
        if (!form) return 'no form ' + css;
        for (const [name, value] of fields) form.elements[name].value = value;
        document.documentElement.dataset.left = 'yes';
        form.requestSubmit();
        return 'ok';";
    let answer = c.execute(script, vec![json!(css), json!(fields)]).await.unwrap();
    assert_eq!(answer, json!("ok"));
    for _ in 0..500 {
        let ready = "return document.readyState === 'complete' && document.documentElement.dataset.left === undefined";
        if matches!(c.execute(ready, vec![]).await, Ok(serde_json::Value::Bool(true))) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the page {css} submits to never loaded");
}

/// Chromium's DevTools command `cmd` through chromedriver.
#[derive(Debug)]
struct Cdp(&'static str, serde_json::Value);

impl fantoccini::wd::WebDriverCompatibleCommand for Cdp {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/goog/cdp/execute", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (axum::http::Method, Option<String>) {
        (axum::http::Method::POST, Some(json!({"cmd": self.0, "params": self.1}).to_string()))
    }
}

/// Turns the console's `Content-Security-Policy` off in this browser, so that escaping alone
/// keeps stored text inert (the policy would stop injected script from running, and hide an
/// escaping bug), then proves it is off: an event handler set on a console page runs.
async fn without_csp(c: &Client, base: &str) {
    c.issue_cmd(Cdp("Page.setBypassCSP", json!({"enabled": true}))).await.unwrap();
    c.goto(&format!("{base}/groups")).await.unwrap();
    let fired = "const done = arguments[0];
        const probe = new Image();
        probe.setAttribute('onerror', 'window.__probe = 1');
        probe.addEventListener('error', () => setTimeout(() => done(window.__probe === 1)));
        probe.src = 'data:,not an image';";
    let ran = c.execute_async(fired, vec![]).await.unwrap();
    assert_eq!(ran, json!(true), "an inline handler runs: the policy is bypassed, the tour tests escaping");
}

/// Every page of the console over rows whose every field is hostile, in one Chromium session
/// with the console's CSP bypassed: each page stays inert (see [`inert`]), each link goes to
/// the route meant for the stored value it carries, the SVG charts parse, long fields are cut
/// in tables and whole on the row's page, and the forms (edit as JSON and hex, group patch
/// preview, redrive and discard dry runs, apply, undo) work with hostile values in them.
#[sqlx::test(migrations = false)]
async fn hostile_rows_are_inert_on_every_page(pool: sqlx::PgPool) {
    let store: Arc<dyn DeadLetterStore> =
        Arc::new(dlq_sqlx::PgStore::from_pool(pool, dlq_sqlx::PgConfig::default()).await.expect("PgStore"));
    let ids = seed_hostile(&store).await;
    let addr = console(store.clone()).await;
    let driver = chromedriver();
    let c = browser(&driver).await;
    let result = hostile_tour(&c, addr, &store, &ids).await;
    let _ = c.close().await;
    result
}

async fn hostile_tour(c: &Client, addr: SocketAddr, store: &Arc<dyn DeadLetterStore>, ids: &Hostile) {
    let base = format!("http://{addr}/dlq");
    let all = store.list(dlq_core::ListFilter::default()).await.unwrap();
    assert_eq!(all.len(), 7, "the hostile rows");
    let not_stored = format!("{PWN_IMG}{ANSI}{BIDI}");
    let filters = vec![not_stored.clone(), PWN_SCRIPT.to_owned(), "\u{1b}[2J".to_owned(), BIDI.to_owned()];
    let known = Known { origin: url::Url::parse(&base).unwrap(), rows: all, filters };
    without_csp(c, &base).await;

    // The overview: a link per event type, each to the list of exactly that type.
    c.goto(&base).await.unwrap();
    let seen = inert(c, &known, "overview").await;
    cut_in_tables(&seen, "overview");
    charts_render(c).await;
    let mut listed: Vec<String> = seen
        .targets
        .iter()
        .filter_map(|t| match t {
            Target::List(q) => q.iter().find(|(k, _)| k == "event_type").map(|(_, v)| v.clone()),
            _ => None,
        })
        .collect();
    listed.sort();
    listed.dedup();
    let mut types: Vec<String> =
        known.rows.iter().filter(|r| r.status != Status::Discarded).map(|r| r.event_type.clone()).collect();
    types.sort();
    types.dedup();
    assert_eq!(listed, types, "the overview links each stored event type");

    // The charts: well-formed SVG, nothing but drawing in them, labels cut and neutral.
    for window in ["24h", "7d"] {
        let url = format!("{base}/charts/parked.svg?window={window}");
        c.goto(&base).await.unwrap();
        let fetch =
            "const [url, done] = arguments; fetch(url).then(r => r.text()).then(done, e => done('fetch: ' + e))";
        let svg = c.execute_async(fetch, vec![json!(url)]).await.unwrap();
        let svg = svg.as_str().unwrap();
        let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("chart {window}: not XML: {e}"));
        assert!(doc.root_element().has_tag_name("svg"));
        for node in doc.descendants().filter(roxmltree::Node::is_element) {
            let name = node.tag_name().name();
            assert!(["svg", "rect", "text", "line", "polyline"].contains(&name), "chart {window}: a <{name}>");
            assert!(node.attributes().all(|a| !a.name().starts_with("on")), "chart {window}: a handler");
        }
        for text in doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()) {
            assert!(!text.chars().any(hazard), "chart {window}: a raw control character in {text:?}");
            assert!(text.chars().count() <= 40, "chart {window}: a label of {} characters", text.chars().count());
        }
        c.goto(&url).await.unwrap();
        no_dialog(c).await;
        let state = c
            .execute("return [typeof window.__pwned, document.documentElement.localName, document.getElementsByTagName('parsererror').length]", vec![])
            .await
            .unwrap();
        assert_eq!(state, json!(["undefined", "svg", 0]), "chart {window} opened as a document");
    }

    // The failure groups: one link per stored group, each to its own page listing its rows.
    c.goto(&format!("{base}/groups")).await.unwrap();
    let seen = inert(c, &known, "groups").await;
    cut_in_tables(&seen, "groups");
    let group_links: Vec<(String, String)> = seen
        .links
        .iter()
        .zip(&seen.targets)
        .filter_map(|(l, t)| match t {
            Target::Group(fp) => Some((fp.clone(), l.url.clone())),
            _ => None,
        })
        .collect();
    let mut linked: Vec<&str> = group_links.iter().map(|(fp, _)| fp.as_str()).collect();
    linked.sort_unstable();
    let groups = store.groups(dlq_core::ListFilter::default()).await.unwrap();
    let mut stored: Vec<&str> = groups.iter().map(|g| g.fingerprint.as_str()).collect();
    stored.sort_unstable();
    assert_eq!(linked, stored, "a link per group");
    for fp in ["../../events/1?x=", "%2e%2e/", "/", "", ".."] {
        assert!(linked.contains(&fp), "group {fp:?} is linked");
    }
    for (fp, url) in &group_links {
        c.goto(url).await.unwrap();
        let what = format!("group {fp:?}");
        let seen = inert(c, &known, &what).await;
        cut_in_tables(&seen, &what);
        let mut shown: Vec<DlqId> = seen
            .targets
            .iter()
            .filter_map(|t| match t {
                Target::Event(id) => Some(*id),
                _ => None,
            })
            .collect();
        shown.sort_unstable();
        shown.dedup();
        let mut members: Vec<DlqId> =
            known.rows.iter().filter(|r| &r.failure.fingerprint == fp).map(|r| r.id).collect();
        members.sort_unstable();
        assert_eq!(shown, members, "{what}: its page lists its rows");
        for target in &seen.targets {
            if let Target::Group(other) = target {
                assert_eq!(other, fp, "{what}: its actions name it");
            }
        }
    }
    c.goto(&format!("{base}/group?group=")).await.unwrap();
    let seen = inert(c, &known, "/group?group=").await;
    assert!(seen.targets.contains(&Target::Event(ids.raw)), "the empty group lists its row");

    // The rows list, each filter carrying hostile values (stored ones and one stored nowhere).
    let mut lists: Vec<(&str, String)> = Vec::new();
    for row in &known.rows {
        lists.push(("event_type", row.event_type.clone()));
        lists.push(("group", row.failure.fingerprint.clone()));
        lists.push(("kind", row.failure.kind.clone()));
    }
    for key in ["event_type", "group", "kind", "reason"] {
        lists.push((key, not_stored.clone()));
    }
    for value in &known.filters[1..] {
        lists.push(("reason", value.clone()));
    }
    // An empty filter is no filter (a GET form sends every field): the empty group is `/group?group=`.
    lists.retain(|(_, value)| !value.is_empty());
    lists.sort();
    lists.dedup();
    for (key, value) in &lists {
        let url =
            url::Url::parse_with_params(&format!("{base}/events"), [(*key, value.as_str()), ("limit", "1")]).unwrap();
        c.goto(url.as_str()).await.unwrap();
        let what = format!("events?{key}={value:?}");
        let seen = inert(c, &known, &what).await;
        cut_in_tables(&seen, &what);
        let field = c
            .execute(
                "return document.querySelector('form.filters [name=' + arguments[0] + ']').value",
                vec![json!(key)],
            )
            .await
            .unwrap();
        let expected: String = value.chars().filter(|c| !matches!(c, '\n' | '\r')).collect();
        assert_eq!(field, json!(expected), "{what}: the filter form keeps the value");
        for target in &seen.targets {
            if let Target::List(query) = target
                && query.iter().any(|(k, _)| k == "after")
            {
                assert!(
                    query.contains(&((*key).to_owned(), value.clone())),
                    "{what}: the next page keeps the filter: {query:?}"
                );
            }
        }
    }

    // Each row's page: the fields whole, the group link to its own group, the editor exact.
    for row in &known.rows {
        c.goto(&format!("{base}/events/{}", row.id)).await.unwrap();
        let what = format!("event {}", row.id);
        let seen = inert(c, &known, &what).await;
        let groups: Vec<&Target> = seen.targets.iter().filter(|t| matches!(t, Target::Group(_))).collect();
        assert_eq!(groups, [&Target::Group(row.failure.fingerprint.clone())], "{what}: the link to its group");
        match &row.payload {
            Payload::Json(value) => {
                let (_, text) = seen.editors.iter().find(|(n, _)| n == "payload").expect("a JSON editor");
                let edited: serde_json::Value = serde_json::from_str(text).unwrap();
                assert_eq!(&edited, value, "{what}: the editor starts from the stored payload");
            }
            Payload::Raw { bytes, .. } => {
                let (_, text) = seen.editors.iter().find(|(n, _)| n == "payload_hex").expect("a hex editor");
                let digits: String = text.split_whitespace().collect();
                assert_eq!(digits, dlq_core::admin::hex(bytes), "{what}: the hex editor holds the exact bytes");
            }
        }
        if row.id == ids.long {
            for whole in [long("type"), long("fingerprint"), long("header"), row.failure.reason.clone()] {
                assert!(seen.text.contains(&whole), "{what}: shown whole: {}…", &whole[..20]);
            }
        }
        if row.id == ids.terminal {
            assert!(
                seen.text.contains("\\u001b[2J") && seen.text.contains("\\u202e"),
                "{what}: controls shown escaped"
            );
        }
    }

    // A group that does not exist: the 404 page names it, inert.
    let missing = percent_encoding::utf8_percent_encode(&not_stored, percent_encoding::NON_ALPHANUMERIC).to_string();
    c.goto(&format!("{base}/groups/{missing}")).await.unwrap();
    let seen = inert(c, &known, "a missing group").await;
    assert!(seen.text.contains("no failure group"), "{}", seen.text);
    assert!(seen.text.contains("\\u001b[2J"), "the 404 names it, escaped: {}", seen.text);
    // The discarded row's group (`.`) is on no list; its row's link leads to it all the same.
    c.goto(&format!("{base}/events/{}", ids.discarded)).await.unwrap();
    let seen = inert(c, &known, "the discarded row").await;
    assert!(seen.text.contains("discard by"), "its audit entry: {}", seen.text);
    let link = seen.links.iter().zip(&seen.targets).find(|(_, t)| **t == Target::Group(".".into())).unwrap().0;
    c.goto(&link.url).await.unwrap();
    let seen = inert(c, &known, "group `.`").await;
    assert!(seen.targets.contains(&Target::Event(ids.discarded)), "group `.` lists its row");

    // Redrive and discard dry runs from group pages, with hostile reasons.
    // (Each group's page through the link the groups page gives it.)
    let group_url = |fp: &str| group_links.iter().find(|(g, _)| g == fp).map(|(_, url)| url.clone()).unwrap();
    c.goto(&group_url("../../events/1?x=")).await.unwrap();
    submit(c, "form[action$='/redrive']", &[("reason", &evil("redrive"))]).await;
    let seen = inert(c, &known, "redrive dry run").await;
    assert!(seen.text.contains("Would move 1 rows"), "{}", seen.text);
    assert!(seen.targets.contains(&Target::Group("../../events/1?x=".into())), "back to the group");
    c.goto(&group_url("")).await.unwrap();
    submit(c, "form[action$='/discard']", &[("reason", &evil("discard"))]).await;
    let seen = inert(c, &known, "discard dry run of the empty group").await;
    assert!(seen.text.contains("Would move 1 rows"), "{}", seen.text);
    assert!(seen.targets.contains(&Target::Group(String::new())), "back to the group");

    // Group patch previews: one that fits (the `%2e%2e/` group), one refused (raw bytes).
    let patch =
        json!([{"op": "add", "path": format!("/{}", format!("{PWN_SCRIPT}{ANSI}{BIDI}").replace('/', "~1")), "value": evil("value")}]).to_string();
    for (group, fits) in [("%2e%2e/", true), ("", false)] {
        c.goto(&group_url(group)).await.unwrap();
        submit(c, "form[action*='patch']", &[("patch", &patch), ("reason", &evil("group patch"))]).await;
        let seen = inert(c, &known, &format!("patch preview of group {group:?}")).await;
        let summary = if fits { "would apply to 1 of" } else { "would apply to 0 of" };
        assert!(seen.text.contains(summary), "{group:?}: {}", seen.text);
        assert!(seen.targets.contains(&Target::Group(group.to_owned())), "{group:?}: back to the group");
    }

    // The operation the hostile operator ran.
    c.goto(&format!("{base}/operations/{}", ids.operation)).await.unwrap();
    let seen = inert(c, &known, "operation").await;
    assert!(seen.targets.contains(&Target::Group("/".into())), "the operation links its group");

    // Edit as hex: the bytes diff.
    c.goto(&format!("{base}/events/{}", ids.raw)).await.unwrap();
    let Payload::Raw { bytes, .. } = store.get(ids.raw).await.unwrap().unwrap().payload else { panic!("raw") };
    let mut edited = bytes.clone();
    edited.extend_from_slice(b"</textarea>\x1b[2J\xe2\x80\xae");
    submit(c, "form[action$='/edit']", &[("payload_hex", &dlq_core::admin::hex(&edited)), ("reason", &evil("hex"))])
        .await;
    let seen = inert(c, &known, "hex edit diff").await;
    assert!(seen.text.contains("the first difference is at byte"), "{}", seen.text);

    // Edit as JSON: the diff, apply, then undo.
    c.goto(&format!("{base}/events/{}", ids.markup)).await.unwrap();
    let Payload::Json(before) = store.get(ids.markup).await.unwrap().unwrap().payload else { panic!("json") };
    let mut after = before.clone();
    after[format!("added{BIDI}")] = json!(format!("{PWN_TEXTAREA}{ANSI}"));
    let text = after.to_string();
    submit(c, "form[action$='/edit']", &[("payload", &text), ("reason", &evil("edit"))]).await;
    let seen = inert(c, &known, "edit diff").await;
    assert!(seen.text.contains("changes as follows"), "{}", seen.text);
    submit(c, "form[action$='/edit']", &[]).await;
    let seen = inert(c, &known, "the row after an edit").await;
    let undos = seen.targets.iter().filter(|t| matches!(t, Target::Other(o) if o.starts_with("audit/"))).count();
    assert_eq!(undos, 2, "an undo button for the stored patch and for the edit");
    let Payload::Json(saved) = store.get(ids.markup).await.unwrap().unwrap().payload else { panic!("json") };
    assert_eq!(saved, after, "the edit saved exactly the payload given");
    let last = store.audit(ids.markup).await.unwrap().last().unwrap().id;
    submit(c, &format!("form[action$='/audit/{last}/undo']"), &[]).await;
    let seen = inert(c, &known, "the row after an undo").await;
    assert!(seen.text.contains("undo of audit entry"), "{}", seen.text);
    let Payload::Json(restored) = store.get(ids.markup).await.unwrap().unwrap().payload else { panic!("json") };
    assert_eq!(restored, before, "the undo restored the payload");
}
