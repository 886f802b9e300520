//! Every route and action of the console over HTTP (`tower::ServiceExt::oneshot`), nested
//! under `/dlq` as a service mounts it, on SQLite and on PostgreSQL (fresh database per test
//! from `#[sqlx::test]`; set `DATABASE_URL`): the pages, the JSON API, the actions and their
//! audit, each security rule, and bad input.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use dlq_core::admin::Admin;
use dlq_core::{
    DlqId, ErrorClass, Payload, Status, adapter::DeadReason, classify::FailureInfo, store::NewDeadLetter,
    store::prelude::*,
};
use dlq_web::Options;
use serde_json::{Value, json};
use tower::ServiceExt;

type Store = Arc<dyn DeadLetterStore>;

const XSS_SCRIPT: &str = "<script>alert(1)</script>";
const XSS_IMG: &str = "\"><img src=x onerror=alert(1)>";

fn app(store: &Store, options: Options) -> Router {
    Router::new().nest("/dlq", dlq_web::router(Admin::new(store.clone(), "console"), options))
}

fn actions() -> Options {
    Options::default()
        .allow_actions(true)
        .actor(|parts| parts.headers.get("x-user").and_then(|v| v.to_str().ok()).map(str::to_owned))
}

fn dead(kind: &str, reason: &str, payload: Value) -> NewDeadLetter {
    let failure = FailureInfo::new(
        ErrorClass::Permanent,
        kind,
        reason.to_owned(),
        vec!["cause one".into()],
        Some("at handler.rs:1".into()),
    );
    NewDeadLetter::new("payment", Payload::Json(payload), failure).dead(DeadReason::Permanent)
}

/// Three rows of one group (currency), one hostile row of another.
async fn seed(store: &Store) -> (Vec<DlqId>, DlqId, String) {
    let mut ids = Vec::new();
    for n in 0..3 {
        // The first row was written by version 2 of its handler, the others by version 1.
        let letter = dead("BadCurrency", "currency \"USD \" unknown", json!({"n": n, "currency": "USD "}));
        ids.push(store.park(letter.with_version(if n == 0 { 2 } else { 1 })).await.unwrap().id);
    }
    let hostile = dead("Xss", &format!("{XSS_SCRIPT} {XSS_IMG}"), json!({"note": XSS_SCRIPT, "img": XSS_IMG}));
    let hostile = store.park(hostile).await.unwrap().id;
    let group = store.get(ids[0]).await.unwrap().unwrap().failure.fingerprint;
    (ids, hostile, group)
}

async fn send(app: &Router, request: Request<Body>) -> (StatusCode, axum::http::HeaderMap, String) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, headers, String::from_utf8_lossy(&bytes).into_owned())
}

/// A `GET` as a browser on the console's machine sends it (`Host: localhost:8080`).
fn get_request(uri: &str) -> Request<Body> {
    Request::get(uri).header(header::HOST, "localhost:8080").body(Body::empty()).unwrap()
}

async fn get(app: &Router, uri: &str) -> (StatusCode, String) {
    let (status, _, body) = send(app, get_request(uri)).await;
    (status, body)
}

fn form(uri: &str, body: &str) -> Request<Body> {
    Request::post(uri)
        .header(header::HOST, "localhost:8080")
        .header(header::ORIGIN, "http://localhost:8080")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header("x-user", "alice")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

fn api_post(uri: &str, body: &Value) -> Request<Body> {
    Request::post(uri)
        .header(header::HOST, "localhost:8080")
        .header(header::CONTENT_TYPE, "application/json")
        .header("x-user", "bob")
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn pages_render_with_security_headers(store: Store) {
    let (ids, _, group) = seed(&store).await;
    let app = app(&store, Options::default());
    for uri in
        ["/dlq", "/dlq/groups", &format!("/dlq/groups/{group}"), "/dlq/events", &format!("/dlq/events/{}", ids[0])]
    {
        let (status, headers, body) = send(&app, get_request(uri)).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {body}");
        let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(csp.contains("default-src 'none'") && !csp.contains("script-src"), "{csp}");
        assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert!(body.contains("/dlq/assets/console.css"), "{uri}: links stay under the prefix");
        assert!(!body.contains("<script"), "{uri}: no script at all");
        assert!(!body.contains("method=\"post\""), "{uri}: read-only pages offer no action");
    }
    let (_, overview) = get(&app, "/dlq").await;
    assert!(overview.contains("http-equiv=\"refresh\""), "the overview refreshes itself");
    assert!(overview.contains(&group), "the overview lists the largest groups");
    let (_, detail) = get(&app, &format!("/dlq/events/{}", ids[0])).await;
    for part in ["USD ", "cause one", "at handler.rs:1", "FAILED_PERMANENTLY", "j-key"] {
        assert!(detail.contains(part), "the detail page shows {part}");
    }
    assert!(detail.contains("<dt>version</dt><dd>2</dd>"), "the detail page shows the payload's version");
    for window in ["24h", "7d"] {
        let uri = format!("/dlq/charts/parked.svg?window={window}");
        let (status, headers, svg) = send(&app, get_request(&uri)).await;
        assert_eq!((status, headers[header::CONTENT_TYPE].to_str().unwrap()), (StatusCode::OK, "image/svg+xml"));
        assert!(svg.contains("<polyline") && svg.contains("payment"), "{svg}");
    }
    assert_eq!(get(&app, "/dlq/charts/parked.svg?window=1y").await.0, StatusCode::BAD_REQUEST);
    let (status, headers, css) = send(&app, get_request("/dlq/assets/console.css")).await;
    assert_eq!((status, headers[header::CONTENT_TYPE].to_str().unwrap()), (StatusCode::OK, "text/css; charset=utf-8"));
    assert!(css.contains("@media"));
}

async fn list_filters_and_keyset_pages(store: Store) {
    let (ids, hostile, group) = seed(&store).await;
    let app = app(&store, Options::default());
    let (status, body) = get(&app, &format!("/dlq/events?group={group}&limit=2")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(&format!("/dlq/events/{}\"", ids[2])) && !body.contains(&format!("/dlq/events/{hostile}\"")));
    let next = format!("after={}", ids[1]);
    assert!(body.contains(&next), "a next-page link: {body}");
    let (_, page2) = get(&app, &format!("/dlq/events?group={group}&limit=2&{next}")).await;
    assert!(
        page2.contains(&format!("/dlq/events/{}\"", ids[0])) && !page2.contains(&format!("/dlq/events/{}\"", ids[2]))
    );

    let (status, api) =
        get(&app, "/dlq/api/events?status=failed_permanently&kind=BadCurrency&order=oldest&limit=2").await;
    assert_eq!(status, StatusCode::OK);
    let api: Value = serde_json::from_str(&api).unwrap();
    let got: Vec<i64> = api["rows"].as_array().unwrap().iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(got, ids[..2]);
    assert_eq!(api["next"], json!(ids[1]));
}

async fn api_reads_and_openapi(store: Store) {
    let (ids, _, group) = seed(&store).await;
    let app = app(&store, Options::default());
    let (status, stats) = get(&app, "/dlq/api/stats").await;
    assert_eq!(status, StatusCode::OK);
    let stats: Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["counts"][0]["failed_permanently"], json!(4));
    let (_, groups) = get(&app, "/dlq/api/groups").await;
    assert!(groups.contains(&group));
    let (_, detail) = get(&app, &format!("/dlq/api/events/{}", ids[0])).await;
    let detail: Value = serde_json::from_str(&detail).unwrap();
    assert_eq!(detail["payload"]["currency"], json!("USD "));
    assert_eq!(detail["error_chain"], json!(["cause one"]));
    assert_eq!(detail["version"], json!(2));
    let (status, doc) = get(&app, "/dlq/api/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(serde_json::from_str::<Value>(&doc).unwrap()["openapi"], json!("3.1.0"));
}

async fn hostile_text_renders_escaped(store: Store) {
    let (_, hostile, _) = seed(&store).await;
    let app = app(&store, actions());
    for uri in [format!("/dlq/events/{hostile}"), "/dlq/events".into(), "/dlq".into(), "/dlq/groups".into()] {
        let (status, body) = get(&app, &uri).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!body.contains("<script>alert") && !body.contains("<img src=x"), "{uri} is not escaped: {body}");
        assert!(body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{uri} shows the text");
    }
}

/// Follows a confirmed bulk action's redirect to its operation page until the run is over;
/// returns the page. Fails only if the run is not over within a minute, far past what a
/// loaded machine needs.
async fn finished_operation(app: &Router, headers: &axum::http::HeaderMap) -> String {
    let location = headers[header::LOCATION].to_str().unwrap().to_owned();
    assert!(location.starts_with("/dlq/operations/"), "{location}");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        let (status, page) = get(app, &location).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        if !page.contains("running in this service") {
            return page;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{location} still runs after a minute");
}

/// An operation stopped mid-way (here: stored and never run, as when the service restarts)
/// is offered for resumption on its page, and resumes from its cursor.
async fn a_stopped_operation_resumes_from_its_page(store: Store) {
    let (ids, _, group) = seed(&store).await;
    let app = app(&store, actions());
    let admin = Admin::new(store.clone(), "ops");
    let plan = dlq_core::admin::BulkPlan::redrive(dlq_core::ListFilter::default().fingerprint(&group), "fixed");
    let id = admin.start(plan).await.unwrap().operation().unwrap().id;
    let (status, page) = get(&app, &format!("/dlq/operations/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("not done") && page.contains(&format!("dlq redrive --resume {id}")), "{page}");
    assert_eq!(store.get(ids[0]).await.unwrap().unwrap().status, Status::FailedPermanently);

    let (status, headers, body) = send(&app, form(&format!("/dlq/operations/{id}/resume"), "rate=")).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    let page = finished_operation(&app, &headers).await;
    assert!(page.contains("done") && !page.contains("not done"), "{page}");
    for id in &ids {
        assert_eq!(store.get(*id).await.unwrap().unwrap().status, Status::Pending);
    }
    let (status, _, body) = send(&app, form(&format!("/dlq/operations/{id}/resume"), "rate=")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("is done: nothing to resume"), "{body}");
    assert_eq!(get(&app, "/dlq/operations/999999").await.0, StatusCode::NOT_FOUND);
    let (status, _, body) = send(&app, form(&format!("/dlq/operations/{id}/resume"), "rate=-1")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

async fn redrive_a_group_with_dry_run_then_confirm(store: Store) {
    let (ids, hostile, group) = seed(&store).await;
    let app = app(&store, actions());
    let (status, _, body) = send(&app, form("/dlq/redrive", &format!("group={group}&reason=ledger+fixed"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("Would move") && body.contains(">3</strong>"), "{body}");
    assert_eq!(store.get(ids[0]).await.unwrap().unwrap().status, Status::FailedPermanently, "a dry run moves nothing");

    let confirm = form("/dlq/redrive", &format!("group={group}&reason=ledger+fixed&confirm=1&rate=50"));
    let (status, headers, body) = send(&app, confirm).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    let page = finished_operation(&app, &headers).await;
    assert!(page.contains("Moved <strong class=\"moved\">3</strong> rows"), "{page}");
    // The rate is stored with the operation: a resume, here or from `dlq`, keeps it.
    let location = headers[axum::http::header::LOCATION].to_str().unwrap();
    let op: i64 = location.rsplit('/').next().unwrap().parse().unwrap();
    assert_eq!(store.operation(op).await.unwrap().unwrap().spec["rate"], serde_json::json!(50.0));
    assert!(page.contains(&format!("/dlq/groups/{group}")), "the page links back to the group");
    for id in &ids {
        assert_eq!(store.get(*id).await.unwrap().unwrap().status, Status::Pending);
    }
    assert_eq!(store.get(hostile).await.unwrap().unwrap().status, Status::FailedPermanently);
    let audit = store.audit(ids[0]).await.unwrap();
    let entry = audit.last().unwrap();
    assert_eq!(
        (entry.action.as_str(), entry.actor.as_str(), entry.reason.as_deref()),
        ("redrive", "alice", Some("ledger fixed"))
    );
}

/// With the store's type catalog, a group's page counts how its rows would decode (all N of
/// its pending or dead rows checked) with the first error, escaped; without one it says nothing of it.
async fn a_group_page_says_how_its_rows_would_decode(store: Store) {
    use dlq_core::catalog::EventTypeInfo;
    let (_, hostile, group) = seed(&store).await;
    let hostile_group = store.get(hostile).await.unwrap().unwrap().failure.fingerprint;
    let (status, body) = get(&app(&store, Options::default()), &format!("/dlq/groups/{group}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!body.contains("Would its rows decode?"), "no catalog, no counts");

    let mut payment = EventTypeInfo::new("payment", 2, "host:1:payments");
    payment.upcast_from = 1;
    payment.older_schemas = [(1, json!({"type": "object", "properties": {"note": {"enum": ["fine"]}}}))].into();
    store.publish_types(vec![payment]).await.unwrap();
    let app = app(&store, Options::default());
    let (_, body) = get(&app, &format!("/dlq/groups/{group}")).await;
    assert!(
        body.contains("Would its rows decode?") && body.contains("Checked all 3 of its pending or dead rows"),
        "{body}"
    );
    assert!(
        body.contains("<dt>after upcasting</dt><dd>2</dd>") && body.contains("<dt>not at all</dt><dd>0</dd>"),
        "{body}"
    );
    let (_, body) = get(&app, &format!("/dlq/groups/{hostile_group}")).await;
    assert!(body.contains("<dt>not at all</dt><dd>1</dd>") && body.contains("is not one of"), "{body}");
    assert!(!body.contains(XSS_SCRIPT) && body.contains("&lt;script&gt;"), "the first error is escaped: {body}");
}

/// A group whose rows were partly discarded, and whose error another event type shares (a
/// fingerprint hashes the error, not the type): its page checked every row of the
/// fingerprint, whatever their status, and set that against one type's pending and dead rows
/// ("Checked 4 of 1 rows"). It checks what it counts now, the rows a redrive would hand to a
/// handler, and counts them over every type.
async fn a_group_page_counts_only_the_rows_it_checked(store: Store) {
    use dlq_core::catalog::EventTypeInfo;
    let (ids, _, group) = seed(&store).await;
    let mut refund = dead("BadCurrency", "currency \"USD \" unknown", json!({"n": 9}));
    refund.event_type = "refund".into();
    let refund = store.park(refund).await.unwrap().id;
    assert_eq!(store.get(refund).await.unwrap().unwrap().failure.fingerprint, group, "one fingerprint, two types");
    store.publish_types(vec![EventTypeInfo::new("payment", 1, "host:1:payments")]).await.unwrap();
    let admin = Admin::new(store.clone(), "alice");
    admin.discard(dlq_core::ListFilter::default().ids([ids[0], ids[1]]), "dropped").await.unwrap();
    let (status, body) = get(&app(&store, Options::default()), &format!("/dlq/groups/{group}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!body.contains("Checked 4"), "the discarded rows are not checked: {body}");
    assert!(body.contains("Checked all 2 of its pending or dead rows"), "{body}");
    assert!(body.contains("<dt>pending or dead rows</dt><dd>2</dd>"), "{body}");
    assert!(body.contains("<dt>event types</dt><dd>payment, refund</dd>"), "{body}");
}

async fn discard_needs_a_reason_and_is_audited(store: Store) {
    let (_, hostile, _) = seed(&store).await;
    let app = app(&store, actions());
    let (status, _, body) = send(&app, form("/dlq/discard", &format!("id={hostile}&reason="))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("reason"));
    let (status, headers, _) = send(&app, form("/dlq/discard", &format!("id={hostile}&reason=poison&confirm=1"))).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    finished_operation(&app, &headers).await;
    assert_eq!(store.get(hostile).await.unwrap().unwrap().status, Status::Discarded);
    assert_eq!(store.audit(hostile).await.unwrap().last().unwrap().actor, "alice");
}

async fn edit_shows_the_diff_then_saves_and_undo_restores(store: Store) {
    let (ids, _, _) = seed(&store).await;
    let app = app(&store, actions());
    let id = ids[0];
    let (status, _, body) =
        send(&app, form(&format!("/dlq/events/{id}/edit"), "payload=%7B%22n%22%3A&reason=fix")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "invalid JSON is refused before anything is saved");
    assert!(body.contains("not valid JSON"));

    let payload = r#"{"n":0,"currency":"USD"}"#;
    let encoded = serde_urlencoded::to_string([("payload", payload), ("reason", "trailing space")]).unwrap();
    let (status, _, body) = send(&app, form(&format!("/dlq/events/{id}/edit"), &encoded)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("/currency") && body.contains("Apply"), "the diff is shown first: {body}");
    assert_eq!(store.get(id).await.unwrap().unwrap().payload, Payload::Json(json!({"n": 0, "currency": "USD "})));

    let (status, headers, _) =
        send(&app, form(&format!("/dlq/events/{id}/edit"), &format!("{encoded}&confirm=1"))).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers[header::LOCATION], format!("/dlq/events/{id}").as_str());
    assert_eq!(store.get(id).await.unwrap().unwrap().payload, Payload::Json(json!({"n": 0, "currency": "USD"})));

    let patch = store.audit(id).await.unwrap().into_iter().find(|a| a.action == "patch").unwrap();
    assert_eq!(patch.actor, "alice");
    let (_, page) = get(&app, &format!("/dlq/events/{id}")).await;
    assert!(page.contains(&format!("/dlq/audit/{}/undo", patch.id)), "the audit entry offers undo");
    let (status, _, _) = send(&app, form(&format!("/dlq/audit/{}/undo", patch.id), "")).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(store.get(id).await.unwrap().unwrap().payload, Payload::Json(json!({"n": 0, "currency": "USD "})));
}

/// A `SUCCEEDED` row offers no edit and no undo, and a patch or an undo posted anyway (a page
/// opened before the row succeeded) is refused with the admin layer's one line.
async fn a_succeeded_row_is_not_patched_from_the_console(store: Store) {
    let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    let letter = NewDeadLetter::new("payment", Payload::Json(json!({"n": 1})), failure);
    let id = store.park(letter).await.unwrap().id;
    let app = app(&store, actions());
    let edit = format!("/dlq/events/{id}/edit");
    let first = serde_urlencoded::to_string([("payload", r#"{"n":2}"#), ("reason", "fix"), ("confirm", "1")]);
    assert_eq!(send(&app, form(&edit, &first.unwrap())).await.0, StatusCode::SEE_OTHER);
    let audit_id = store.audit(id).await.unwrap()[0].id;
    let (_, page) = get(&app, &format!("/dlq/events/{id}")).await;
    assert!(page.contains("name=\"payload\"") && page.contains("Undo this patch"), "a pending row is editable");

    let request = dlq_core::store::ClaimRequest {
        event_types: vec!["payment".into()],
        limit: 1,
        lease: std::time::Duration::from_secs(60),
        owner: "test".into(),
    };
    let lease = store.claim(request).await.unwrap()[0].lease;
    store.settle(vec![dlq_core::store::Settlement::Succeeded { lease }]).await.unwrap();
    let (_, page) = get(&app, &format!("/dlq/events/{id}")).await;
    assert!(!page.contains("name=\"payload\"") && !page.contains("Undo this patch"), "{page}");
    let again = serde_urlencoded::to_string([("payload", r#"{"n":3}"#), ("reason", "fix"), ("confirm", "1")]);
    for request in [form(&edit, &again.unwrap()), form(&format!("/dlq/audit/{audit_id}/undo"), "")] {
        let (status, _, body) = send(&app, request).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.contains(&format!("dead letter {id} is SUCCEEDED")), "{body}");
    }
    let patch = json!({"patch": [{"op": "add", "path": "/m", "value": 1}], "reason": "fix"});
    let (status, _, body) = send(&app, api_post(&format!("/dlq/api/events/{id}/patch"), &patch)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("SUCCEEDED"), "{body}");
    assert_eq!(store.get(id).await.unwrap().unwrap().payload, Payload::Json(json!({"n": 2})));
    assert_eq!(store.audit(id).await.unwrap().len(), 1);
}

/// The edit form's field (its name) and text (unescaped) as the browser would post them.
fn edit_field(page: &str) -> (String, String) {
    let at = page.find("<textarea name=\"").unwrap_or_else(|| panic!("no editor: {page}"));
    let rest = &page[at + "<textarea name=\"".len()..];
    let name = rest[..rest.find('"').unwrap()].to_owned();
    let text = &rest[rest.find('>').unwrap() + 1..rest.find("</textarea>").unwrap()];
    let text = text.replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
    (name, text)
}

/// A raw payload (not JSON, not even UTF-8) is edited as its exact bytes in hex: saving the
/// form unchanged writes nothing (it once saved the lossy text as a JSON string, rewriting
/// the bytes), and an edited byte is saved exactly, raw.
async fn a_raw_payload_is_edited_as_its_exact_bytes(store: Store) {
    let bytes = b"\xff\xfe not json \x00\x1b[31m <b>\xc3".to_vec();
    let failure = FailureInfo::new(ErrorClass::Permanent, "undecodable", "bad bytes".into(), vec![], None);
    let raw = NewDeadLetter::new("webhook", Payload::from_bytes(&bytes), failure).dead(DeadReason::Undecodable);
    let id = store.park(raw).await.unwrap().id;
    let stored = || async { store.get(id).await.unwrap().unwrap().payload };
    assert_eq!(stored().await, Payload::Raw { bytes: bytes.clone(), truncated: None });
    let app = app(&store, actions());
    let edit = format!("/dlq/events/{id}/edit");

    let (_, page) = get(&app, &format!("/dlq/events/{id}")).await;
    let (field, text) = edit_field(&page);
    let unchanged = serde_urlencoded::to_string([(field.as_str(), text.as_str()), ("reason", "look")]).unwrap();
    let (status, _, body) = send(&app, form(&edit, &unchanged)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("unchanged") && !body.contains(">Apply<"), "an unchanged form offers no save: {body}");
    let (status, _, body) = send(&app, form(&edit, &format!("{unchanged}&confirm=1"))).await;
    assert!(status.is_success() || status.is_redirection(), "{status}: {body}");
    assert_eq!(stored().await, Payload::Raw { bytes: bytes.clone(), truncated: None }, "the bytes are untouched");
    assert!(store.audit(id).await.unwrap().is_empty(), "nothing was written");

    // One byte changed (the first, 0xff → 0x7b), spaces and case as an operator types them.
    assert_eq!(field, "payload_hex", "raw bytes are edited as hex");
    let edited = format!("7B {}", text.trim_start()[2..].to_uppercase());
    let mut expected = bytes.clone();
    expected[0] = 0x7b;
    let save = serde_urlencoded::to_string([("payload_hex", edited.as_str()), ("reason", "fix the brace")]).unwrap();
    let (status, _, body) = send(&app, form(&edit, &save)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("byte 0") && body.contains(">Apply<"), "the change is shown first: {body}");
    assert_eq!(stored().await, Payload::Raw { bytes: bytes.clone(), truncated: None });
    let (status, _, body) = send(&app, form(&edit, &format!("{save}&confirm=1"))).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(stored().await, Payload::Raw { bytes: expected, truncated: None }, "exactly the bytes given");
    let bad = serde_urlencoded::to_string([("payload_hex", "7g"), ("reason", "x"), ("confirm", "1")]).unwrap();
    let (status, _, body) = send(&app, form(&edit, &bad)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("hex"), "{body}");

    // The API takes exact bytes too.
    let hex = json!({"payload_hex": "00ff 0a", "reason": "bytes from the broker"});
    let (status, _, body) = send(&app, api_post(&format!("/dlq/api/events/{id}/patch"), &hex)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(stored().await, Payload::Raw { bytes: vec![0, 0xff, 0x0a], truncated: None });

    // A JSON payload saved unchanged writes nothing either.
    let (ids, _, _) = seed(&store).await;
    let (_, page) = get(&app, &format!("/dlq/events/{}", ids[0])).await;
    let (field, text) = edit_field(&page);
    assert_eq!(field, "payload");
    let unchanged = serde_urlencoded::to_string([("payload", text.as_str()), ("reason", "look"), ("confirm", "1")]);
    send(&app, form(&format!("/dlq/events/{}/edit", ids[0]), &unchanged.unwrap())).await;
    assert!(store.audit(ids[0]).await.unwrap().is_empty(), "nothing was written");
}

async fn group_patch_previews_then_patches_every_dead_row(store: Store) {
    let (ids, _, group) = seed(&store).await;
    // A row of the group the patch does not fit (no currency to replace).
    let misfit = store.park(dead("BadCurrency", "currency \"USD \" unknown", json!({"n": 9}))).await.unwrap().id;
    assert_eq!(store.get(misfit).await.unwrap().unwrap().failure.fingerprint, group);
    let app = app(&store, actions());
    let patch = r#"[{"op":"replace","path":"/currency","value":"USD"}]"#;
    let encoded = serde_urlencoded::to_string([("patch", patch), ("reason", "POS firmware")]).unwrap();
    let (status, _, body) = send(&app, form(&format!("/dlq/groups/{group}/patch"), &encoded)).await;
    assert_eq!(status, StatusCode::OK);
    // The preview is `dlq patch --group --dry-run`: the rows it fits, their changes, and the
    // one it does not, with why.
    let dry = Admin::new(store.clone(), "preview")
        .patch_preview(
            dlq_core::ListFilter::default().fingerprint(&group).status(Status::FailedPermanently),
            &serde_json::from_str(patch).unwrap(),
            100,
        )
        .await
        .unwrap();
    assert_eq!((dry.patched.len(), dry.refused.len()), (3, 1));
    assert!(body.contains("would apply to <strong class=\"moved\">3</strong> of the group's 4"), "{body}");
    assert!(body.contains(&format!("/dlq/events/{misfit}\">{misfit}</a>")), "the refused row: {body}");
    assert!(body.contains(&escaped(&dry.refused[0].reason)), "and why: {body}");
    assert!(body.contains("/currency") && body.contains("&quot;USD &quot;"), "each change: {body}");
    assert!(body.contains("Apply to 3 rows"), "{body}");
    assert!(store.audit(ids[0]).await.unwrap().is_empty(), "a preview writes nothing");
    // Confirmed, it is a stored operation run in the background: the answer is its page.
    let (status, headers, body) =
        send(&app, form(&format!("/dlq/groups/{group}/patch"), &format!("{encoded}&confirm=1"))).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    let page = finished_operation(&app, &headers).await;
    assert!(page.contains("Patched <strong class=\"moved\">3</strong> rows; refused <strong>1</strong>"), "{page}");
    assert!(page.contains(&format!("{misfit}: ")) && page.contains("does not apply"), "the skipped row, why: {page}");
    for id in &ids {
        let Payload::Json(doc) = store.get(*id).await.unwrap().unwrap().payload else { panic!("json") };
        assert_eq!(doc["currency"], json!("USD"));
    }
    assert_eq!(store.get(misfit).await.unwrap().unwrap().payload, Payload::Json(json!({"n": 9})));
    let (status, _, _) = send(&app, form(&format!("/dlq/groups/{group}/patch"), "patch=%7B&reason=x")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

async fn api_actions_go_through_the_admin_layer(store: Store) {
    let (ids, hostile, group) = seed(&store).await;
    let app = app(&store, actions());
    let dry = json!({"filter": {"fingerprint": group}, "reason": "check", "dry_run": true});
    let (status, _, body) = send(&app, api_post("/dlq/api/redrive", &dry)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["moved"], json!(3));
    let (status, _, body) = send(&app, api_post("/dlq/api/redrive", &json!({"reason": "x"}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "an empty selection is refused: {body}");

    let patch = json!({"patch": [{"op": "replace", "path": "/currency", "value": "USD"}], "reason": "fix"});
    let (status, _, body) = send(&app, api_post(&format!("/dlq/api/events/{}/patch", ids[1]), &patch)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let outcome: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(outcome["new"]["currency"], json!("USD"));
    let undo = format!("/dlq/api/audit/{}/undo", outcome["audit_id"]);
    let (status, _, _) = send(&app, api_post(&undo, &json!({}))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(store.audit(ids[1]).await.unwrap().last().unwrap().actor, "bob");

    let discard = json!({"filter": {"ids": [hostile]}, "reason": "poison"});
    let (status, _, body) = send(&app, api_post("/dlq/api/discard", &discard)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(store.get(hostile).await.unwrap().unwrap().status, Status::Discarded);
    let (status, _, body) = send(&app, api_post("/dlq/api/events/999999/patch", &patch)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // In the background: 202 at once, with the operation and its page.
    let background = json!({"filter": {"ids": [ids[2]]}, "reason": "dupe", "background": true});
    let (status, _, body) = send(&app, api_post("/dlq/api/discard", &background)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let started: Value = serde_json::from_str(&body).unwrap();
    let op = started["operation"].as_i64().unwrap();
    assert_eq!(started["link"], json!(format!("/dlq/operations/{op}")));
    let mut headers = axum::http::HeaderMap::new();
    headers.insert(header::LOCATION, started["link"].as_str().unwrap().parse().unwrap());
    finished_operation(&app, &headers).await;
    assert_eq!(store.get(ids[2]).await.unwrap().unwrap().status, Status::Discarded);
}

async fn security_rules_hold(store: Store) {
    let (ids, _, group) = seed(&store).await;
    // Read-only: every POST is a 403, and nothing moves.
    let read_only = app(&store, Options::default());
    let (status, _, body) = send(&read_only, form("/dlq/redrive", &format!("group={group}&reason=x&confirm=1"))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("read-only"));
    let (status, _, _) = send(&read_only, api_post("/dlq/api/redrive", &json!({"all": true}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(store.get(ids[0]).await.unwrap().unwrap().status, Status::FailedPermanently);

    // Cross-origin and origin-less form posts are refused.
    let open = app(&store, actions());
    let mut evil = form("/dlq/redrive", &format!("group={group}&reason=x&confirm=1"));
    evil.headers_mut().insert(header::ORIGIN, "http://evil.example".parse().unwrap());
    assert_eq!(send(&open, evil).await.0, StatusCode::FORBIDDEN);
    let mut bare = form("/dlq/redrive", &format!("group={group}&reason=x&confirm=1"));
    bare.headers_mut().remove(header::ORIGIN);
    assert_eq!(send(&open, bare).await.0, StatusCode::FORBIDDEN);
    assert_eq!(store.get(ids[0]).await.unwrap().unwrap().status, Status::FailedPermanently);

    // Oversized bodies: 413.
    let small = app(&store, actions().body_limit(1024));
    let big = format!("payload={}&reason=x", "a".repeat(4096));
    assert_eq!(
        send(&small, form(&format!("/dlq/events/{}/edit", ids[0]), &big)).await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );

    // A token: none or a wrong one is a 401; the right one (header, or ?token= then cookie) passes.
    let locked = app(&store, Options::default().token("s3cret"));
    let (status, headers, _) = send(&locked, Request::get("/dlq").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY", "even a refusal carries the headers");
    let wrong =
        Request::get("/dlq/api/stats").header(header::AUTHORIZATION, "Bearer s3cre").body(Body::empty()).unwrap();
    assert_eq!(send(&locked, wrong).await.0, StatusCode::UNAUTHORIZED);
    let right =
        Request::get("/dlq/api/stats").header(header::AUTHORIZATION, "Bearer s3cret").body(Body::empty()).unwrap();
    assert_eq!(send(&locked, right).await.0, StatusCode::OK);
    let (status, headers, _) = send(&locked, Request::get("/dlq?token=s3cret").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    let cookie = headers[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    let with_cookie =
        Request::get("/dlq/events").header(header::COOKIE, "dlq_token=s3cret").body(Body::empty()).unwrap();
    assert_eq!(send(&locked, with_cookie).await.0, StatusCode::OK);
}

/// `request` sent to `host` (its `Host`, and its `Origin` when it has one).
fn to_host(mut request: Request<Body>, host: &str) -> Request<Body> {
    request.headers_mut().insert(header::HOST, host.parse().unwrap());
    if request.headers().contains_key(header::ORIGIN) {
        request.headers_mut().insert(header::ORIGIN, format!("http://{host}").parse().unwrap());
    }
    request
}

/// DNS rebinding: a page of another site makes its name resolve to 127.0.0.1, so the
/// operator's browser sends it to the console with that name in `Host` (and a matching
/// `Origin`). Without a token the console answers only to its own address and loopback names
/// with its port: the page, the API and the actions are all refused, with a reason, and
/// nothing moves.
async fn foreign_hosts_are_refused_without_a_token(store: Store) {
    let (ids, _, group) = seed(&store).await;
    let bound: std::net::SocketAddr = "127.0.0.1:8080".parse().unwrap();
    let console = app(&store, actions().bound_to(bound));
    let page = || get_request("/dlq/groups");
    let api = || get_request(&format!("/dlq/api/events/{}", ids[0]));
    let action = || form("/dlq/discard", &format!("group={group}&reason=rebound&confirm=1"));
    for foreign in ["attacker.example:8080", "attacker.example", "localhost:9090", "127.0.0.1.nip.io:8080"] {
        let (status, headers, body) = send(&console, to_host(page(), foreign)).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{foreign}: {body}");
        assert!(headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
        assert!(
            body.contains("answers only to") && !body.contains("USD"),
            "{foreign}: says why, shows nothing: {body}"
        );
        let (status, headers, body) = send(&console, to_host(api(), foreign)).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{foreign}: {body}");
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        let error: Value = serde_json::from_str(&body).unwrap();
        assert!(
            error["error"].as_str().unwrap().contains("DNS") || error["error"].as_str().unwrap().contains("resolve")
        );
        let (status, _, body) = send(&console, to_host(action(), foreign)).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{foreign}: {body}");
    }
    let mut nameless = page();
    nameless.headers_mut().remove(header::HOST);
    assert_eq!(send(&console, nameless).await.0, StatusCode::MISDIRECTED_REQUEST, "no Host at all");
    for id in &ids {
        assert_eq!(store.get(*id).await.unwrap().unwrap().status, Status::FailedPermanently, "nothing moved");
        assert!(store.audit(*id).await.unwrap().is_empty(), "nothing audited");
    }

    // Its own names, with its port, are answered.
    for own in ["localhost:8080", "127.0.0.1:8080", "[::1]:8080", "LocalHost:8080"] {
        assert_eq!(send(&console, to_host(page(), own)).await.0, StatusCode::OK, "{own}");
        assert_eq!(send(&console, to_host(api(), own)).await.0, StatusCode::OK, "{own}");
    }
    let (status, headers, body) = send(&console, to_host(action(), "[::1]:8080")).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    finished_operation(&console, &headers).await;
    assert_eq!(store.get(ids[0]).await.unwrap().unwrap().status, Status::Discarded);

    // Another name the service's own auth guards, allowed by name.
    let proxied = app(&store, Options::default().bound_to(bound).allow_host("dlq.internal.example"));
    assert_eq!(send(&proxied, to_host(page(), "dlq.internal.example")).await.0, StatusCode::OK);
    assert_eq!(send(&proxied, to_host(page(), "attacker.example")).await.0, StatusCode::MISDIRECTED_REQUEST);

    // With a token, the token guards: any Host with the token passes, none without it.
    let locked = app(&store, Options::default().bound_to(bound).token("s3cret"));
    let mut with_token = to_host(api(), "dlq.example.com");
    with_token.headers_mut().insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
    assert_eq!(send(&locked, with_token).await.0, StatusCode::OK);
    assert_eq!(send(&locked, to_host(api(), "attacker.example:8080")).await.0, StatusCode::UNAUTHORIZED);
}

/// A request past the console's head limits (a long query, too many or too large header
/// fields) or its body limit is refused with a body that says which limit, JSON under
/// `/api/`, and the same security headers as every page; over a real socket too (hyper
/// answers only past its own, larger limits).
#[tokio::test]
async fn refusals_have_a_body_and_the_security_headers() {
    let store: Store = Arc::new(dlq_sqlx::SqliteStore::in_memory().await.unwrap());
    let (ids, _, _) = seed(&store).await;
    let app = app(&store, actions().body_limit(1024));
    let long = "a".repeat(dlq_web::MAX_URI_BYTES);
    let many = |mut request: Request<Body>| {
        for n in 0..dlq_web::MAX_HEADERS {
            request
                .headers_mut()
                .insert(format!("x-pad-{n}").parse::<header::HeaderName>().unwrap(), "1".parse().unwrap());
        }
        request
    };
    let mut large = get_request("/dlq/events");
    large.headers_mut().insert("x-pad", "b".repeat(dlq_web::MAX_HEADER_BYTES).parse().unwrap());
    let edit = form(&format!("/dlq/events/{}/edit", ids[0]), &format!("payload={}&reason=x", "c".repeat(4096)));
    for (what, request, status, says) in [
        (
            "a long query",
            get_request(&format!("/dlq/events?reason={long}")),
            StatusCode::URI_TOO_LONG,
            "path and query",
        ),
        ("a long API query", get_request(&format!("/dlq/api/events?reason={long}")), StatusCode::URI_TOO_LONG, "limit"),
        ("many header fields", many(get_request("/dlq/events")), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "fields"),
        ("large header fields", large, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "bytes"),
        ("a large body", edit, StatusCode::PAYLOAD_TOO_LARGE, "limit"),
    ] {
        let (got, headers, body) = send(&app, request).await;
        assert_eq!(got, status, "{what}: {body}");
        assert!(body.contains(says) && body.len() < 2_000, "{what}: a short body that says why: {body}");
        assert!(headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap().contains("default-src 'none'"), "{what}");
        assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY", "{what}");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{what}");
    }
    let (_, headers, body) = send(&app, get_request(&format!("/dlq/api/events?reason={long}"))).await;
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].as_str().unwrap().contains("limit"), "{body}");

    // Over a socket: the console's limits, and past hyper's own (a 70 KB target, 101 header
    // fields, a request line that is not HTTP) the listener's answer, each with a body and the
    // headers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(axum::serve(dlq_web::HardenedListener::new(listener), app).into_future());
    let (code, head, body) = over_tcp(addr, "GET", &format!("/dlq/events?reason={}", "d".repeat(40_000)), "").await;
    assert_eq!(code, 414, "{head}");
    assert!(head.to_lowercase().contains("content-security-policy: default-src 'none'"), "{head}");
    assert!(body.contains("path and query"), "{body}");
    let fields: String = (0..101).map(|n| format!("x-pad-{n}: 1\r\n")).collect();
    for (what, request, status) in [
        (
            "a 70 KB target",
            format!("GET /dlq/events?reason={} HTTP/1.1\r\nHost: {addr}\r\n\r\n", "e".repeat(70_000)),
            414,
        ),
        ("101 header fields", format!("GET /dlq/events HTTP/1.1\r\nHost: {addr}\r\n{fields}\r\n"), 431),
        ("not HTTP", "GET /dlq HTTP/1.1\r\nHost\r\n\r\n".to_owned(), 400),
    ] {
        let text = tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            stream.write_all(request.as_bytes()).unwrap();
            let mut text = String::new();
            stream.read_to_string(&mut text).unwrap();
            text
        })
        .await
        .unwrap();
        assert!(text.starts_with(&format!("HTTP/1.1 {status} ")), "{what}: {text}");
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains("content-security-policy: default-src 'none'") && head.contains("x-frame-options: DENY"));
        assert!(body.starts_with(&status.to_string()) && body.len() > 20, "{what}: a body that says why: {text}");
    }
}

/// `Origin: null` (a sandboxed frame, a `data:` page, a redirect from another site) names no
/// origin: a JSON request carrying it is refused like any foreign origin, not taken for a
/// request without one, and a form post likewise; nothing moves.
#[tokio::test]
async fn origin_null_is_refused_like_a_foreign_origin() {
    let store: Store = Arc::new(dlq_sqlx::SqliteStore::in_memory().await.unwrap());
    let (ids, _, group) = seed(&store).await;
    let app = app(&store, actions());
    let mut api = api_post("/dlq/api/discard", &json!({"filter": {"ids": [ids[0]]}, "reason": "from null"}));
    api.headers_mut().insert(header::ORIGIN, "null".parse().unwrap());
    let (status, _, body) = send(&app, api).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("cross-origin request refused"), "{body}");
    let mut page = form("/dlq/discard", &format!("group={group}&reason=null&confirm=1"));
    page.headers_mut().insert(header::ORIGIN, "null".parse().unwrap());
    assert_eq!(send(&app, page).await.0, StatusCode::FORBIDDEN);
    for id in &ids {
        assert_eq!(store.get(*id).await.unwrap().unwrap().status, Status::FailedPermanently, "nothing moved");
    }
    let same = api_post("/dlq/api/discard", &json!({"filter": {"ids": [ids[0]]}, "reason": "no origin, JSON"}));
    assert_eq!(send(&app, same).await.0, StatusCode::OK, "JSON without an Origin still passes");
}

/// Text as maud escapes it in HTML.
fn escaped(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Stored text on one line of a page: control characters escaped (`\u0001`), tabs and newlines
/// as spaces, then escaped for HTML.
fn shown(text: &str) -> String {
    let line: String = text
        .chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => " ".to_owned(),
            c if c.is_control() => format!("\\u{:04x}", u32::from(c)),
            c => c.to_string(),
        })
        .collect();
    escaped(&line)
}

/// The `href` of the link whose markup ends with `text_html` (`<code>…</code></a>`), as a
/// browser resolves it from `page_url`: the path and query it then requests.
fn follow(page: &str, text_html: &str, page_url: &str) -> String {
    let at = page.find(&format!("\">{text_html}</a>")).unwrap_or_else(|| panic!("no link to {text_html}: {page}"));
    let start = page[..at].rfind("href=\"").unwrap() + "href=\"".len();
    resolve(&page[start..at], page_url)
}

/// `href` (HTML-escaped, as in the page) resolved as a browser does: dot segments removed,
/// the fragment dropped; the path and query it requests.
fn resolve(href: &str, page_url: &str) -> String {
    let href = href.replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
    let base = url::Url::parse(&format!("http://localhost:8080{page_url}")).unwrap();
    let url = base.join(&href).unwrap();
    match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    }
}

/// The row ids a list page links to.
fn listed(page: &str) -> Vec<DlqId> {
    let mut ids: Vec<DlqId> = page
        .split("<td class=\"num\"><a href=\"/dlq/events/")
        .skip(1)
        .filter_map(|rest| rest.split('"').next()?.parse().ok())
        .collect();
    ids.sort_unstable();
    ids
}

/// Fingerprints and event types come from outside (a poison event's failure): each link to a
/// group or a type, followed as a browser follows it, leads to that group's or type's page,
/// whatever characters it holds; the group's next-page link and its patch form too.
async fn hostile_fingerprints_and_types_link_to_themselves(store: Store) {
    let hostile = [
        "../../events/1?x=",
        "a/b#c",
        "%2e%2e",
        "..",
        ".",
        " two  spaces ",
        "\"quoted' value\"",
        "<script>alert(1)</script>",
        "ctl\u{1}\t\u{7f}end",
        "?q=1&r=2",
        "é/ü+%20",
    ];
    let mut by_type = Vec::new();
    for (n, text) in hostile.iter().enumerate() {
        let mut group = Vec::new();
        for copy in 0..2 {
            let mut letter = dead("Hostile", "hostile", json!({"n": n, "copy": copy}));
            letter.event_type = format!("type {text}");
            letter.failure.fingerprint = (*text).to_owned();
            group.push(store.park(letter).await.unwrap().id);
        }
        group.sort_unstable();
        by_type.push((format!("type {text}"), group));
    }
    let console = app(&store, actions());
    let (_, groups) = get(&console, "/dlq/groups").await;
    let (_, overview) = get(&console, "/dlq").await;
    for (text, (event_type, ids)) in hostile.iter().zip(&by_type) {
        // The groups list → the group's page.
        let target = follow(&groups, &format!("<code>{}</code>", shown(text)), "/dlq/groups");
        let (status, page) = get(&console, &target).await;
        assert_eq!(status, StatusCode::OK, "{text:?} → {target}: {page}");
        assert!(page.contains(&format!("<h1>Failure group {}</h1>", shown(text))), "{text:?} → {target}: {page}");
        assert_eq!(listed(&page), *ids, "{text:?} → {target}: the group's rows");

        // A row's page → its group.
        let (_, detail) = get(&console, &format!("/dlq/events/{}", ids[0])).await;
        let from_detail = follow(&detail, &format!("<code>{}</code>", shown(text)), &format!("/dlq/events/{}", ids[0]));
        assert_eq!(from_detail, target, "{text:?}: the row links to its group");

        // The group's next page (one row a page) stays in the group.
        let sep = if target.contains('?') { '&' } else { '?' };
        let first = format!("{target}{sep}limit=1");
        let (_, page1) = get(&console, &first).await;
        assert_eq!(listed(&page1), ids[1..], "{text:?}: newest first");
        let at = page1.find("class=\"next\" href=\"").unwrap_or_else(|| panic!("{text:?}: a next link: {page1}"));
        let href = &page1[at + "class=\"next\" href=\"".len()..];
        let next = resolve(&href[..href.find('"').unwrap()], &first);
        let (status, page2) = get(&console, &next).await;
        assert_eq!(status, StatusCode::OK, "{text:?} → {next}: {page2}");
        assert!(page2.contains(&format!("<h1>Failure group {}</h1>", shown(text))), "{text:?} → {next}");
        assert_eq!(listed(&page2), ids[..1], "{text:?} → {next}: the group's other row");

        // The group's patch form posts to this group.
        let at = page.find("<h3>Patch the group").unwrap();
        let action = &page[..at];
        let action = &action[action.rfind("action=\"").unwrap() + "action=\"".len()..];
        let action = resolve(&action[..action.find('"').unwrap()], &target);
        let add = r#"[{"op":"add","path":"/checked","value":true}]"#;
        let preview = serde_urlencoded::to_string([("patch", add), ("reason", "check")]).unwrap();
        let (status, _, body) = send(&console, form(&action, &preview)).await;
        assert_eq!(status, StatusCode::OK, "{text:?} → POST {action}: {body}");
        assert!(body.contains("would apply to <strong class=\"moved\">2</strong>"), "{text:?} → {action}: {body}");

        // The overview's count of the type → the type's rows.
        let target = follow(&overview, &shown(event_type), "/dlq");
        let (status, page) = get(&console, &target).await;
        assert_eq!(status, StatusCode::OK, "{event_type:?} → {target}: {page}");
        assert_eq!(listed(&page), *ids, "{event_type:?} → {target}: the type's rows");
    }
}

/// Every refusal of the API is `{"error": "..."}` in the API's own words: a malformed path, a
/// body that is not JSON, JSON of another shape, a wrong media type, an oversized body, an
/// unknown route, a wrong method. No Rust type name, no plain text.
async fn api_errors_are_json_whatever_refused_them(store: Store) {
    let (ids, _, _) = seed(&store).await;
    let console = app(&store, actions().body_limit(1024));
    let raw = |method: &str, uri: &str, content_type: Option<&str>, body: &str| {
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, "localhost:8080")
            .header(header::ORIGIN, "http://localhost:8080");
        if let Some(kind) = content_type {
            request = request.header(header::CONTENT_TYPE, kind);
        }
        request.body(Body::from(body.to_owned())).unwrap()
    };
    let json = Some("application/json");
    let patch = format!("/dlq/api/events/{}/patch", ids[0]);
    let cases: Vec<(Request<Body>, StatusCode, &str)> = vec![
        (raw("GET", "/dlq/api/events/abc", None, ""), StatusCode::BAD_REQUEST, "`abc` is not a number"),
        (raw("GET", "/dlq/api/events/99999999999999999999", None, ""), StatusCode::BAD_REQUEST, "is not a number"),
        (raw("POST", "/dlq/api/events/abc/patch", json, "{}"), StatusCode::BAD_REQUEST, "`abc` is not a number"),
        (raw("POST", "/dlq/api/audit/x/undo", json, "{}"), StatusCode::BAD_REQUEST, "`x` is not a number"),
        (raw("POST", "/dlq/api/redrive", json, "{"), StatusCode::BAD_REQUEST, "not valid JSON"),
        (raw("POST", "/dlq/api/redrive", json, "{} {}"), StatusCode::BAD_REQUEST, "not valid JSON"),
        (raw("POST", "/dlq/api/audit/1/undo", json, ""), StatusCode::BAD_REQUEST, "not valid JSON"),
        (
            raw("POST", "/dlq/api/redrive", json, "\"all\""),
            StatusCode::UNPROCESSABLE_ENTITY,
            "must be a JSON object, not a string",
        ),
        (
            raw("POST", "/dlq/api/redrive", json, "[1]"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "must be a JSON object, not an array",
        ),
        (
            raw("POST", "/dlq/api/discard", json, r#"{"filter": "x"}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "`filter`: invalid type: string \"x\", expected a JSON object",
        ),
        (
            raw("POST", "/dlq/api/redrive", json, r#"{"canary": "x"}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "`canary`: invalid type: string \"x\", expected a whole number of 0 or more",
        ),
        (
            raw("POST", "/dlq/api/redrive", json, r#"{"filter": {"ids": ["a"]}}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "`filter.ids[0]`",
        ),
        (
            raw("POST", "/dlq/api/redrive", json, r#"{"colour": 1}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown field `colour`",
        ),
        (
            raw("POST", &patch, json, r#"{"reason": 7}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "`reason`: invalid type: number `7`, expected a string",
        ),
        (
            raw("POST", "/dlq/api/redrive", Some("text/plain"), "{}"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type: application/json",
        ),
        (
            raw("POST", "/dlq/api/redrive", json, &format!("{{\"reason\": \"{}\"}}", "a".repeat(4096))),
            StatusCode::PAYLOAD_TOO_LARGE,
            "limit of 1024 bytes",
        ),
        (raw("GET", "/dlq/api/no/such/route", None, ""), StatusCode::NOT_FOUND, "no such route"),
        (raw("GET", "/dlq/api/redrive", None, ""), StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        (raw("DELETE", "/dlq/api/stats", json, ""), StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    ];
    for (request, expected, says) in cases {
        let what = format!("{} {}", request.method(), request.uri());
        let (status, headers, body) = send(&console, request).await;
        assert_eq!(status, expected, "{what}: {body}");
        assert_eq!(headers[header::CONTENT_TYPE], "application/json", "{what}: {body}");
        if status == StatusCode::METHOD_NOT_ALLOWED {
            assert!(headers.contains_key(header::ALLOW), "{what}: a 405 names the methods");
        }
        let error: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {body}"));
        let error = error["error"].as_str().unwrap_or_else(|| panic!("{what}: no error text: {body}"));
        assert!(error.contains(says), "{what}: {error:?} should say {says:?}");
        for rust in ["struct", "Request", "ListFilter", "usize", "u64", "i64", "Failed to"] {
            assert!(!error.contains(rust), "{what}: {error:?} names {rust:?}");
        }
    }
    // The pages answer the same refusals with an HTML page.
    let (status, headers, body) = send(&console, raw("GET", "/dlq/events/abc", None, "")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
    assert!(body.contains("`abc` is not a number"), "{body}");
    let mut bad_form = form(&format!("/dlq/events/{}/edit", ids[0]), "reason=no+payload");
    bad_form.headers_mut().insert(header::HOST, "localhost:8080".parse().unwrap());
    let (status, headers, body) = send(&console, bad_form).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html"), "{body}");
    assert!(body.contains("missing field `payload`"), "{body}");
}

/// An event type with control characters (which XML forbids) or markup leaves the charts'
/// SVG well-formed, the type in the legend (escaped, cut to 15 characters).
async fn charts_stay_well_formed_with_hostile_event_types(store: Store) {
    for event_type in ["ctl\u{1}\u{1b}[31m", "<svg onload=alert(1)>&amp;"] {
        let mut letter = dead("Hostile", "hostile", json!({}));
        letter.event_type = event_type.to_owned();
        store.park(letter).await.unwrap();
    }
    let console = app(&store, Options::default());
    for window in ["24h", "7d"] {
        let (status, svg) = get(&console, &format!("/dlq/charts/parked.svg?window={window}")).await;
        assert_eq!(status, StatusCode::OK, "{svg}");
        let doc =
            roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{window}: not well-formed: {e}: {svg:?}"));
        let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        assert!(texts.contains(&"ctl\\u0001\\u001…") && texts.contains(&"<svg onload=al…"), "{texts:?}");
        assert_eq!(doc.descendants().filter(|n| n.has_tag_name("polyline")).count(), 2);
    }
}

async fn bad_input_is_a_clear_error(store: Store) {
    seed(&store).await;
    let app = app(&store, Options::default());
    let (status, body) = get(&app, "/dlq/events/999999").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("<html") && body.contains("999999"), "a 404 page: {body}");
    let (status, body) = get(&app, "/dlq/events?status=LOST").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("FAILED_PERMANENTLY"), "says what was expected: {body}");
    let (status, body) = get(&app, "/dlq/api/events?since=yesterday").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].as_str().unwrap().contains("RFC 3339"));
    assert_eq!(get(&app, "/dlq/api/events/999999").await.0, StatusCode::NOT_FOUND);
    assert_eq!(get(&app, "/dlq/groups/nosuchgroup").await.0, StatusCode::NOT_FOUND);
    assert_eq!(get(&app, "/dlq/no/such/page").await.0, StatusCode::NOT_FOUND);
}

/// The overview's figures are a snapshot: rows parked behind the console's back show once
/// it is older than `snapshot_max_age`, an action of the console shows at once, and the
/// circuits that are not plainly closed are listed.
async fn overview_snapshots_and_circuits(store: Store) {
    seed(&store).await;
    let app = app(&store, actions().snapshot_max_age(std::time::Duration::from_secs(3600)));
    let count = |page: &str| {
        let row = page.split("<td><a href=\"/dlq/events?event_type=payment\">payment</a></td>").nth(1).unwrap();
        row.split("</tr>").next().unwrap().to_owned()
    };
    let (_, before) = get(&app, "/dlq").await;
    assert!(count(&before).contains(">4<"), "4 dead rows: {}", count(&before));

    // Parked behind the console's back: the snapshot (an hour's max age here) does not show it.
    store.park(dead("Late", "late", json!({"late": true}))).await.unwrap();
    let (_, cached) = get(&app, "/dlq").await;
    assert_eq!(count(&cached), count(&before), "the snapshot answers");

    // Any action of the console drops the snapshot: the next view has the fifth row, and the
    // paused type's circuit.
    Admin::new(store.clone(), "ops").pause_type("payment", "ledger migration").await.unwrap();
    let (status, _, _) = send(&app, form("/dlq/discard", "group=nosuchgroup&reason=nothing")).await;
    assert!(status.is_success() || status.is_redirection(), "{status}");
    let (_, after) = get(&app, "/dlq").await;
    assert!(count(&after).contains(">5<"), "5 dead rows now: {}", count(&after));
    assert!(after.contains("Circuits") && after.contains("ledger migration"), "the paused circuit is shown");
}

/// One HTTP/1.1 request to a real server: the status, the headers' text and the body.
async fn over_tcp(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> (u16, String, String) {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\nx-user: alice\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (code, head.to_owned(), body.to_owned())
    })
    .await
    .unwrap()
}

/// The rows an operation page says were moved (or patched).
fn moved_on(page: &str) -> u64 {
    let at = page.find("<strong class=\"moved\">").unwrap_or_else(|| panic!("no count: {page}"));
    let rest = &page[at + "<strong class=\"moved\">".len()..];
    rest[..rest.find('<').unwrap()].parse().unwrap()
}

/// Serves a console with a [`dlq_web::Background`] on a real port, POSTs the confirm `body`
/// to `path`, checks that the answer comes at once with the stored operation (its id and page),
/// follows the page until it shows progress, then shuts the server down and checks the run
/// stopped at a batch boundary, `stopped` and resumable. Returns the operation's id, its
/// page's path, the progress seen, and the (shut down) background.
async fn start_then_shut_down(store: &Store, path: &str, body: &str) -> (i64, String, u64, dlq_web::Background) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let background = dlq_web::Background::new();
    let options = actions().bound_to(addr).background(background.clone());
    let stop = dlq_core::CancellationToken::new();
    let server = tokio::spawn(
        axum::serve(listener, app(store, options)).with_graceful_shutdown(stop.clone().cancelled_owned()).into_future(),
    );
    let (status, head, answer) = over_tcp(addr, "POST", path, body).await;
    assert_eq!(status, 303, "{head}\n{answer}");
    let location = head.lines().find_map(|l| l.strip_prefix("location: ")).unwrap_or_else(|| panic!("{head}"));
    let id: i64 = location.strip_prefix("/dlq/operations/").unwrap().parse().unwrap();
    assert!(answer.contains(&format!("<code class=\"operation\">{id}</code>")) && answer.contains(location));
    let op = store.operation(id).await.unwrap().expect("stored at once");
    assert_ne!(op.state, dlq_core::store::OperationState::Done, "answered before the run ends");

    // The page shows the run's progress, batch by batch.
    let mut seen = 0;
    for _ in 0..600 {
        let (status, _, page) = over_tcp(addr, "GET", location, "").await;
        assert_eq!(status, 200, "{page}");
        assert!(page.contains("running in this service"), "{page}");
        seen = moved_on(&page);
        if seen > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(seen > 0, "no progress shown");

    // The server shuts down: the run stops after its batch, stored `stopped` and resumable.
    stop.cancel();
    server.await.unwrap().unwrap();
    background.shutdown().await;
    let op = store.operation(id).await.unwrap().unwrap();
    assert_eq!(op.state, dlq_core::store::OperationState::Stopped);
    (id, location.to_owned(), seen, background)
}

/// A group patch over 10,000 rows, confirmed on a real server: the confirm answers at once
/// with the stored operation, a shutdown mid-run leaves each row patched once or not at all,
/// another console resumes it to the end, and every row is patched exactly once (an array
/// `add`, which a second application would repeat).
#[sqlx::test(migrations = false)]
async fn a_large_group_patch_runs_in_the_background_and_survives_a_shutdown(pool: sqlx::PgPool) {
    const ROWS: usize = 10_000;
    let store: Store =
        Arc::new(dlq_sqlx::PgStore::from_pool(pool, dlq_sqlx::PgConfig::default()).await.expect("PgStore"));
    for chunk in 0..10 {
        let letters = (0..1_000)
            .map(|n| dead("BadCurrency", "currency \"USD \" unknown", json!({"n": chunk * 1_000 + n, "tags": ["a"]})));
        store.park_many(letters.collect()).await.unwrap();
    }
    let group = store.list(dlq_core::ListFilter::default().limit(1)).await.unwrap()[0].failure.fingerprint.clone();
    // How many rows hold the tags once patched, and whether any holds anything else.
    let tally = || {
        let store = store.clone();
        async move {
            let rows = store.list(dlq_core::ListFilter::default().limit(usize::MAX)).await.unwrap();
            let tags = |row: &dlq_core::DeadLetter| match &row.payload {
                Payload::Json(doc) => doc["tags"].clone(),
                Payload::Raw { .. } => Value::Null,
            };
            let patched = rows.iter().filter(|r| tags(r) == json!(["a", "fixed"])).count();
            let other = rows.iter().filter(|r| tags(r) != json!(["a", "fixed"]) && tags(r) != json!(["a"])).count();
            (patched, other)
        }
    };
    let patch = r#"[{"op":"add","path":"/tags/-","value":"fixed"}]"#;
    let confirm = serde_urlencoded::to_string([
        ("patch", patch),
        ("reason", "tag the <b>\u{1b}[31m\u{202e} replays"),
        ("confirm", "1"),
        ("rate", "200"),
    ])
    .unwrap();
    let (id, location, _, _) = start_then_shut_down(&store, &format!("/dlq/groups/{group}/patch"), &confirm).await;
    let op = store.operation(id).await.unwrap().unwrap();
    assert!(op.moved > 0 && (op.moved as usize) < ROWS, "{op:?}");
    assert_eq!(tally().await, (op.moved as usize, 0), "each row patched once or not at all");

    // Another console resumes it from its page, to the end.
    let console = app(&store, actions());
    let (_, page) = get(&console, &location).await;
    assert!(page.contains("stopped") && page.contains(&format!("dlq patch --resume {id}")), "{page}");
    assert!(page.contains("&lt;b&gt;\\u001b[31m\\u202e replays"), "the reason, neutralized: {page}");
    let (status, headers, body) = send(&console, form(&format!("{location}/resume"), "rate=")).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    for _ in 0..1_200 {
        if store.operation(id).await.unwrap().unwrap().state == dlq_core::store::OperationState::Done {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let page = finished_operation(&console, &headers).await;
    assert_eq!(moved_on(&page) as usize, ROWS, "{location}: {page}");
    assert_eq!(tally().await, (ROWS, 0), "every row patched exactly once");
}

/// A group redrive over 10,000 rows, confirmed on a real server: the POST answers at once with
/// the stored operation (its id and its page), the page follows its progress, shutting the
/// server down leaves it `stopped` at a batch boundary (every row moved once or not at all),
/// a new console resumes it from its page to the end, and a console shutting down starts none.
#[sqlx::test(migrations = false)]
async fn a_large_group_redrive_runs_in_the_background_and_survives_a_shutdown(pool: sqlx::PgPool) {
    const ROWS: u64 = 10_000;
    let store: Store =
        Arc::new(dlq_sqlx::PgStore::from_pool(pool, dlq_sqlx::PgConfig::default()).await.expect("PgStore"));
    for chunk in 0..10 {
        let letters =
            (0..1_000).map(|n| dead("BadCurrency", "currency \"USD \" unknown", json!({"n": chunk * 1_000 + n})));
        store.park_many(letters.collect()).await.unwrap();
    }
    let group = store.list(dlq_core::ListFilter::default().limit(1)).await.unwrap()[0].failure.fingerprint.clone();
    let count = |status: Status| {
        let store = store.clone();
        async move { store.count(dlq_core::ListFilter::default().status(status).limit(usize::MAX)).await.unwrap() }
    };

    let confirm = format!("group={group}&reason=ledger+fixed&confirm=1&rate=200");
    let (id, location, seen, background) = start_then_shut_down(&store, "/dlq/redrive", &confirm).await;
    let location = location.as_str();
    let op = store.operation(id).await.unwrap().unwrap();
    assert!(op.moved >= seen && op.moved < ROWS, "{op:?}");
    assert_eq!(count(Status::Pending).await, op.moved, "the rows moved are the ones counted");
    assert_eq!(count(Status::FailedPermanently).await, ROWS - op.moved);

    // A console shutting down starts no operation (and stores none).
    let stopping = app(&store, actions().background(background.clone()));
    let (status, _, body) = send(&stopping, form("/dlq/redrive", &confirm)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(store.operation(id + 1).await.unwrap().is_none(), "nothing stored");

    // Another console resumes it from its page, to the end.
    let console = app(&store, actions());
    let (_, page) = get(&console, location).await;
    assert!(page.contains("stopped") && page.contains("Resume"), "{page}");
    let (status, headers, body) = send(&console, form(&format!("{location}/resume"), "rate=")).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    let location = headers[header::LOCATION].to_str().unwrap().to_owned();
    for _ in 0..1_200 {
        if store.operation(id).await.unwrap().unwrap().state == dlq_core::store::OperationState::Done {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let page = finished_operation(&console, &headers).await;
    assert_eq!(moved_on(&page), ROWS, "{location}: {page}");
    assert_eq!(count(Status::Pending).await, ROWS);
    let redriven_twice = store
        .list(dlq_core::ListFilter::default().limit(usize::MAX))
        .await
        .unwrap()
        .into_iter()
        .filter(|row| row.redrive_count != 1)
        .count();
    assert_eq!(redriven_twice, 0, "every row moved exactly once");
}

/// Long strings (event type, fingerprint, error kind, reason) are cut with `…` in the tables
/// and lists, by characters (a multi-byte character is never split), and whole on the row's
/// page and in the API.
async fn long_fields_are_cut_in_tables_and_whole_on_the_row(store: Store) {
    let long = |c: &str| c.repeat(10_000);
    let mut letter = dead(&long("K"), &long("é"), json!({"n": 1}));
    letter.event_type = long("🦀");
    letter.failure.fingerprint = long("f");
    let id = store.park(letter).await.unwrap().id;
    let app = app(&store, Options::default());
    for uri in ["/dlq", "/dlq/groups", "/dlq/events"] {
        let (status, page) = get(&app, uri).await;
        assert_eq!(status, StatusCode::OK, "{uri}");
        assert!(!page.contains(&long("🦀")) && !page.contains(&long("é")), "{uri}: nothing whole (links encode it)");
        assert!(page.contains(&format!("{}…", "🦀".repeat(59))), "{uri}: the event type, cut");
        if uri != "/dlq/events" {
            assert!(page.contains(&format!("<code>{}…</code>", "f".repeat(39))), "{uri}: the fingerprint, cut");
        }
        if uri != "/dlq" {
            assert!(page.contains(&format!("{}…", "é".repeat(139))), "{uri}: the reason, cut");
            assert!(page.contains(&format!("<code>{}…</code>", "K".repeat(59))), "{uri}: the kind, cut");
        }
    }
    // (A reason is kept up to 8 KiB: the page shows what is stored, whole.)
    let stored = store.get(id).await.unwrap().unwrap();
    assert!(stored.failure.reason.chars().count() > 1_000);
    let (_, detail) = get(&app, &format!("/dlq/events/{id}")).await;
    for (what, whole) in [
        ("type", &stored.event_type),
        ("reason", &stored.failure.reason),
        ("kind", &stored.failure.kind),
        ("group", &stored.failure.fingerprint),
    ] {
        assert!(
            detail.contains(whole.as_str()),
            "the row's page shows its {what} whole ({} chars)",
            whole.chars().count()
        );
    }
    let (_, api) = get(&app, &format!("/dlq/api/events/{id}")).await;
    let api: Value = serde_json::from_str(&api).unwrap();
    assert_eq!(api["event_type"], json!(long("🦀")));
    let (_, list) = get(&app, "/dlq/api/events").await;
    assert!(list.contains(&stored.failure.reason) && list.contains(&long("f")), "the API lists them whole");
}

/// `/erase`: a form, a confirmation page, then the subject's rows deleted through the admin
/// layer with the operator's name in the record; cross-site and read-only posts are refused;
/// no page shows the subject after the erasure.
async fn erase_confirms_then_deletes_the_subjects_rows(store: Store) {
    use dlq_core::subject::{SubjectKey, install_key};
    let key = SubjectKey::new(SUBJECT_KEY).unwrap();
    let _ = install_key(key.clone()); // the console's admin hashes with the process's key
    let mut ids = Vec::new();
    for who in ["customer-42", "customer-42", "customer-7"] {
        let letter = dead("Declined", "card declined", json!({"holder": who})).with_subject(key.hash(who));
        ids.push(store.park(letter).await.unwrap().id);
    }
    let app = app(&store, actions());
    let (status, page) = get(&app, "/dlq/erase").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("method=\"post\"") && page.contains("name=\"subject\""), "{page}");
    let read_only = self::app(&store, Options::default());
    assert!(
        !get(&read_only, "/dlq/erase").await.1.contains("method=\"post\""),
        "a read-only console offers no erasure"
    );
    let refused = send(&read_only, form("/dlq/erase", "subject=customer-42&reason=r&confirm=1")).await;
    assert_eq!(refused.0, StatusCode::FORBIDDEN);
    let (status, _, _) = send(&app, form("/dlq/erase", "subject=customer-42&reason=+")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "a reason is required");

    let (status, _, confirm) = send(&app, form("/dlq/erase", "subject=customer-42&reason=GDPR+request+118")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(confirm.contains("Erase for good") && confirm.contains("name=\"confirm\" value=\"1\""), "{confirm}");
    assert!(confirm.contains("<strong>2</strong> rows are stored under this subject"), "the count: {confirm}");
    assert!(store.get(ids[0]).await.unwrap().is_some(), "nothing erased before the confirmation");
    let mut evil = form("/dlq/erase", "subject=customer-42&reason=x&confirm=1");
    evil.headers_mut().insert(header::ORIGIN, "http://evil.example".parse().unwrap());
    assert_eq!(send(&app, evil).await.0, StatusCode::FORBIDDEN);
    assert!(store.get(ids[0]).await.unwrap().is_some(), "nothing erased by a cross-site post");

    let done = form("/dlq/erase", "subject=customer-42&reason=GDPR+request+118&confirm=1");
    let (status, _, erased) = send(&app, done).await;
    assert_eq!(status, StatusCode::OK, "{erased}");
    assert!(erased.contains("Erased <strong>2</strong> rows") && !erased.contains("customer-42"), "{erased}");
    for id in &ids[..2] {
        assert!(store.get(*id).await.unwrap().is_none());
    }
    assert!(store.get(ids[2]).await.unwrap().is_some(), "another subject's row stays");
    let record = &store.erasures(1).await.unwrap()[0];
    assert_eq!((record.actor.as_str(), record.reason.as_str()), ("alice", "GDPR request 118"));
    assert_eq!(record.rows, dlq_core::subject::Count::Of(2));
}

/// An erasure with a key that is not the one the store's subjects were hashed with (the store
/// keeps another key's check value) is refused on the confirmation and on the erasure itself:
/// nothing deleted, nothing recorded.
async fn erase_with_another_key_is_refused(store: Store) {
    use dlq_core::subject::{SubjectKey, install_key};
    let _ = install_key(SubjectKey::new(SUBJECT_KEY).unwrap());
    let theirs = SubjectKey::new("the service's own subject key, 32 bytes or more").unwrap();
    store.subject_key_check(theirs.check()).await.unwrap();
    let id = store.park(dead("Declined", "card declined", json!({})).with_subject(theirs.hash("customer-42"))).await;
    let app = app(&store, actions());
    for body in ["subject=customer-42&reason=GDPR+request+118", "subject=customer-42&reason=GDPR+request+118&confirm=1"]
    {
        let (status, _, page) = send(&app, form("/dlq/erase", body)).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{page}");
        assert!(page.contains("not the key the store") && page.contains("DLQ_SUBJECT_KEY"), "{page}");
    }
    assert!(store.get(id.unwrap().id).await.unwrap().is_some(), "nothing erased");
    assert!(store.erasures(10).await.unwrap().is_empty(), "nothing recorded");
}

/// The key the console's erasures hash subjects with in these tests.
const SUBJECT_KEY: &str = "the console tests' subject key, 32 bytes or more";

/// A `tracing` layer that keeps each event as a line of its fields.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Captured {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Line(String);
        impl tracing::field::Visit for Line {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut line = Line(String::new());
        event.record(&mut line);
        self.0.lock().unwrap().push(line.0);
    }
}

/// Each action of the console is logged with its verb, what it acted on and the operator; each
/// 5xx with the operator and why; every string in the lines bounded, with no control
/// character (a reason or a store's error cannot forge a log line or drive a terminal).
#[tokio::test]
async fn actions_and_server_errors_are_logged_with_the_actor() {
    use tracing_subscriber::layer::SubscriberExt;
    let captured = Captured::default();
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(captured.clone()));
    let sqlite = dlq_sqlx::SqliteStore::in_memory().await.unwrap();
    let pool = sqlite.pool().clone();
    let store: Store = Arc::new(sqlite);
    let (ids, _, group) = seed(&store).await;
    let app = app(&store, actions());
    let hostile = format!("fix\u{1b}]0;pwned\u{7}\nFORGED line\u{202e} {}", "x".repeat(10_000));

    let edit = serde_urlencoded::to_string([
        ("payload", r#"{"n":0,"currency":"USD"}"#),
        ("reason", hostile.as_str()),
        ("confirm", "1"),
    ]);
    assert_eq!(
        send(&app, form(&format!("/dlq/events/{}/edit", ids[0]), &edit.unwrap())).await.0,
        StatusCode::SEE_OTHER
    );
    let patch = serde_urlencoded::to_string([
        ("patch", r#"[{"op":"replace","path":"/currency","value":"EUR"}]"#),
        ("reason", "to euros"),
        ("confirm", "1"),
    ]);
    let (status, headers, _) = send(&app, form(&format!("/dlq/groups/{group}/patch"), &patch.unwrap())).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    finished_operation(&app, &headers).await;
    let audit = store.audit(ids[0]).await.unwrap().last().unwrap().id;
    assert_eq!(send(&app, form(&format!("/dlq/audit/{audit}/undo"), "")).await.0, StatusCode::SEE_OTHER);
    let confirm = format!("group={group}&reason=ledger+fixed&confirm=1");
    let (status, headers, _) = send(&app, form("/dlq/redrive", &confirm)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let op = finished_operation(&app, &headers).await;

    // The store fails under a request: a 5xx, logged with its operator.
    sqlx::query("DROP TABLE dlq_audit").execute(&pool).await.unwrap();
    let mut failing = get_request(&format!("/dlq/events/{}", ids[1]));
    failing.headers_mut().insert("x-user", "mallory".parse().unwrap());
    let (status, _, _) = send(&app, failing).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);

    let lines = captured.0.lock().unwrap().clone();
    let find = |needles: &[&str]| {
        lines
            .iter()
            .find(|l| needles.iter().all(|n| l.contains(n)))
            .unwrap_or_else(|| panic!("no line with {needles:?} in {lines:#?}"))
            .clone()
    };
    let edited = find(&["verb=\"edit\"", &format!("subject=row {} ", ids[0]), "actor=alice"]);
    assert!(edited.contains("reason=fix.]0;pwned..FORGED line. xxx") && edited.contains("…"), "{edited}");
    find(&["verb=\"patch\"", &format!(": group {group} "), "actor=alice", "reason=to euros"]);
    find(&["verb=\"undo\"", &format!("subject=row {} (audit entry {audit})", ids[0]), "actor=alice"]);
    let id = op.split("operation ").nth(1).and_then(|r| r.split(['<', ' ', ')']).next()).unwrap().to_owned();
    find(&["verb=\"redrive\"", &format!("subject=operation {id}: group {group}"), "actor=alice"]);
    find(&["state=\"done\"", "moved=3"]);
    let failed = find(&["status=500", "actor=mallory", &format!("path=/dlq/events/{}", ids[1])]);
    assert!(failed.contains("error=") && failed.contains("dlq_audit"), "says why: {failed}");
    for line in &lines {
        assert!(!line.chars().any(|c| c.is_control() || c == '\u{202e}'), "a control character: {line:?}");
        assert!(line.chars().count() < 2_000, "an unbounded line: {line}");
    }
}

macro_rules! on_both_stores {
    ($($check:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test]
            async fn $check() {
                let store = dlq_sqlx::SqliteStore::in_memory().await.expect("SQLite store");
                super::$check(std::sync::Arc::new(store)).await;
            })*
        }
        mod pg {
            $(#[sqlx::test(migrations = false)]
            async fn $check(pool: sqlx::PgPool) {
                let store = dlq_sqlx::PgStore::from_pool(pool, dlq_sqlx::PgConfig::default()).await.expect("PgStore");
                super::$check(std::sync::Arc::new(store)).await;
            })*
        }
    };
}

on_both_stores!(
    a_group_page_says_how_its_rows_would_decode,
    a_group_page_counts_only_the_rows_it_checked,
    pages_render_with_security_headers,
    list_filters_and_keyset_pages,
    api_reads_and_openapi,
    hostile_text_renders_escaped,
    redrive_a_group_with_dry_run_then_confirm,
    discard_needs_a_reason_and_is_audited,
    edit_shows_the_diff_then_saves_and_undo_restores,
    group_patch_previews_then_patches_every_dead_row,
    api_actions_go_through_the_admin_layer,
    security_rules_hold,
    foreign_hosts_are_refused_without_a_token,
    hostile_fingerprints_and_types_link_to_themselves,
    api_errors_are_json_whatever_refused_them,
    charts_stay_well_formed_with_hostile_event_types,
    bad_input_is_a_clear_error,
    overview_snapshots_and_circuits,
    a_stopped_operation_resumes_from_its_page,
    a_raw_payload_is_edited_as_its_exact_bytes,
    a_succeeded_row_is_not_patched_from_the_console,
    long_fields_are_cut_in_tables_and_whole_on_the_row,
    erase_confirms_then_deletes_the_subjects_rows,
    erase_with_another_key_is_refused,
);

/// Every page and API answer that shows row `id` or its group `fp`.
fn every_read(id: DlqId, fp: &str) -> [String; 9] {
    [
        "/dlq".to_owned(),
        "/dlq/groups".into(),
        format!("/dlq/groups/{fp}"),
        "/dlq/events".into(),
        format!("/dlq/events/{id}"),
        "/dlq/api/stats".into(),
        "/dlq/api/groups".into(),
        "/dlq/api/events".into(),
        format!("/dlq/api/events/{id}"),
    ]
}

/// Rows of an `encrypt = true` type on a console without the key: no page, no API answer
/// holds the card number; the detail page says `[encrypted, key k1]` with the fields kept in
/// clear, and offers no payload editor.
#[tokio::test]
async fn sealed_rows_never_show_their_plaintext_without_the_key() {
    const MARKER: &str = "PAN-6011-0009-9013-9424";
    let store: Store = Arc::new(dlq_sqlx::SqliteStore::in_memory().await.unwrap());
    let ring = dlq_core::sealed::KeyRing::new("k1", [("k1", [5; 32])]).unwrap();
    let mut letter = dead("Declined", &format!("card {MARKER} declined"), json!({"id": 7, "pan": MARKER}));
    letter.payload = dlq_core::sealed::seal_payload(&ring, "payment", &letter.payload, &["/id"]).unwrap();
    letter.failure.stacktrace = Some(format!("at charge({MARKER})"));
    letter.failure = dlq_core::sealed::seal_failure(&ring, "payment", letter.failure).unwrap();
    let id = store.park(letter).await.unwrap().id;
    let fp = store.get(id).await.unwrap().unwrap().failure.fingerprint;
    let app = app(&store, actions());
    let mut detail = String::new();
    for uri in every_read(id, &fp) {
        let (status, body) = get(&app, &uri).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {body}");
        assert!(!body.contains(MARKER), "{uri}: {body}");
        if uri.ends_with(&format!("events/{id}")) {
            detail.push_str(&body);
        }
    }
    assert!(detail.contains("[encrypted, key k1]"), "{detail}");
    assert!(!detail.contains("textarea name=\"payload\""), "no editor for a sealed payload");
    let patch = json!({"patch": [{"op": "replace", "path": "/pan", "value": "x"}], "reason": "r"});
    let (status, _, body) = send(&app, api_post(&format!("/dlq/api/events/{id}/patch"), &patch)).await;
    assert!(
        status.is_client_error() && body.contains("encrypted (key k1)") && !body.contains(MARKER),
        "{status}: {body}"
    );
}

/// Rows of a type with `redact = ["/card/number", "/email"]`: no page and no API answer holds
/// a redacted value (payload, reason, chain, stack trace, attempts, the audit log's payloads,
/// the groups' sample reasons); saving the masked payload from the edit form keeps the values;
/// a reveal is refused without the reveal hook's approval (and the console stays masked), and
/// with it shows the row whole, after an audit entry naming the operator.
#[tokio::test]
async fn redacted_fields_stay_masked_until_an_audited_reveal() {
    const MARKER: &str = "PAN-4000-0566-5566-5556";
    const EMAIL: &str = "carol.redacted@example.com";
    let store: Store = Arc::new(dlq_sqlx::SqliteStore::in_memory().await.unwrap());
    let payload = json!({"id": 7, "currency": "USD ", "card": {"number": MARKER}, "email": EMAIL});
    let mut letter = dead("Declined", &format!("card {MARKER} declined for {EMAIL}"), payload);
    letter.failure.chain = vec![format!("gateway said: {MARKER:?} is stolen")];
    letter.failure.stacktrace = Some(format!("at charge({EMAIL})"));
    let id = store.park(letter).await.unwrap().id;
    let fp = store.get(id).await.unwrap().unwrap().failure.fingerprint;
    let policy = dlq_core::redact::Policy::default().redact("payment", ["/card/number", "/email"]);
    let admin = Admin::new(store.clone(), "console").with_redaction(policy);
    // An earlier patch: the audit log holds the payload before it, the card number in it.
    let fix =
        json!([{"op": "replace", "path": "/email", "value": EMAIL}, {"op": "add", "path": "/note", "value": "x"}]);
    admin.patch(id, &fix, "note").await.unwrap();
    let reveals = |parts: &axum::http::request::Parts| parts.headers.get("x-roles").is_some_and(|r| r == "reveal");
    let app = Router::new().nest("/dlq", dlq_web::router(admin.clone(), actions().reveal(reveals)));
    let mut detail = String::new();
    for uri in every_read(id, &fp) {
        let (status, body) = get(&app, &uri).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {body}");
        assert!(!body.contains(MARKER) && !body.contains(EMAIL), "{uri}: {body}");
        if uri.ends_with(&format!("events/{id}")) {
            detail.push_str(&body);
        }
    }
    assert!(detail.contains("[redacted]") && detail.contains("USD "), "{detail}");

    // The edit form holds the masked payload; saving it changed elsewhere keeps the values.
    let edited =
        json!({"id": 7, "currency": "USD", "card": {"number": "[redacted]"}, "email": "[redacted]", "note": "x"});
    let body = format!(
        "payload={}&reason=trim&confirm=1",
        url::form_urlencoded::byte_serialize(edited.to_string().as_bytes()).collect::<String>()
    );
    let (status, _, answer) = send(&app, form(&format!("/dlq/events/{id}/edit"), &body)).await;
    assert!(status.is_redirection(), "{status}: {answer}");
    let stored = store.get(id).await.unwrap().unwrap().payload;
    let whole = json!({"id": 7, "currency": "USD", "card": {"number": MARKER}, "email": EMAIL, "note": "x"});
    assert_eq!(stored, Payload::Json(whole.clone()));

    // No approval: 403, nothing audited, nothing shown.
    let audited = store.audit(id).await.unwrap().len();
    let (status, _, body) = send(&app, form(&format!("/dlq/events/{id}/reveal"), "reason=chargeback")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(!body.contains(MARKER));
    let api = api_post(&format!("/dlq/api/events/{id}/reveal"), &json!({"reason": "chargeback"}));
    assert_eq!(send(&app, api).await.0, StatusCode::FORBIDDEN);
    assert_eq!(store.audit(id).await.unwrap().len(), audited);

    // Approved: the row whole, after an audit entry naming the operator and the reason.
    let mut approved = form(&format!("/dlq/events/{id}/reveal"), "reason=chargeback+118");
    approved.headers_mut().insert("x-roles", "reveal".parse().unwrap());
    let (status, headers, body) = send(&app, approved).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains(MARKER) && body.contains(EMAIL), "{body}");
    assert_eq!(headers[header::CACHE_CONTROL], "no-store");
    let last = store.audit(id).await.unwrap().pop().unwrap();
    assert_eq!((last.action.as_str(), last.actor.as_str()), ("reveal", "alice"));
    assert_eq!(last.reason.as_deref(), Some("chargeback 118"));
    let mut api = api_post(&format!("/dlq/api/events/{id}/reveal"), &json!({"reason": "dispute"}));
    api.headers_mut().insert("x-roles", "reveal".parse().unwrap());
    let (status, _, body) = send(&app, api).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["payload"], whole);
    let mut blank = api_post(&format!("/dlq/api/events/{id}/reveal"), &json!({"reason": " "}));
    blank.headers_mut().insert("x-roles", "reveal".parse().unwrap());
    assert_eq!(send(&app, blank).await.0, StatusCode::BAD_REQUEST, "a reveal needs a reason");
    // The masked page offers the reveal form to an approved operator only.
    let mut page = get_request(&format!("/dlq/events/{id}"));
    page.headers_mut().insert("x-roles", "reveal".parse().unwrap());
    assert!(send(&app, page).await.2.contains("Reveal (audited)"));
    assert!(!get(&app, &format!("/dlq/events/{id}")).await.1.contains("Reveal (audited)"));
}

/// One dead `payment` row per stored payload, each with the `UPDATE` that gives it that
/// payload (as a client other than dlq could write it: JSON the database accepts and serde
/// cannot read).
async fn park_for(store: &Store, payloads: &[&str]) -> Vec<(DlqId, String)> {
    let mut rows = Vec::new();
    for payload in payloads {
        let id = store.park(dead("Odd", "odd event", json!({}))).await.unwrap().id;
        rows.push((id, format!("UPDATE dlq_events SET payload = {payload} WHERE id = {id}")));
    }
    rows
}

/// Rows whose stored payload serde cannot read (a number outside `f64`, nesting past 128,
/// invalid UTF-8 on SQLite): every page and API answer lists and shows them (the detail says
/// why it is raw), and the row's redrive and discard work. They once answered 500.
async fn unreadable_rows_break_no_page(store: Store, bad: Vec<DlqId>) {
    let (ids, _, _) = seed(&store).await;
    let fp = store.get(bad[0]).await.unwrap().unwrap().failure.fingerprint;
    let app = app(&store, actions());
    for id in &bad {
        for uri in every_read(*id, &fp).iter().chain([&"/dlq/events?status=FAILED_PERMANENTLY&limit=2".to_owned()]) {
            let (status, body) = get(&app, uri).await;
            assert_eq!(status, StatusCode::OK, "{uri}: {body}");
        }
        let (_, page) = get(&app, &format!("/dlq/events/{id}")).await;
        assert!(page.contains("Why: not "), "{page}");
        let (_, detail) = get(&app, &format!("/dlq/api/events/{id}")).await;
        let note = serde_json::from_str::<Value>(&detail).unwrap()["payload_note"].clone();
        assert!(note.as_str().is_some_and(|n| n.starts_with("not ")), "{detail}");
    }
    let (_, page) = get(&app, "/dlq/events?limit=100").await;
    assert!(bad.iter().all(|id| listed(&page).contains(id)), "{page}");
    let (_, api) = get(&app, "/dlq/api/events?limit=100").await;
    let api: Value = serde_json::from_str(&api).unwrap();
    let rows = api["rows"].as_array().or(api.as_array()).unwrap().clone();
    assert_eq!(rows.len(), ids.len() + 1 + bad.len(), "{api}");

    // A dry run of the group, then the row's own actions.
    let (status, _, body) = send(&app, form("/dlq/redrive", &format!("group={fp}&reason=check"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let one = json!({"filter": {"ids": [bad[0]]}, "reason": "retry it"});
    let (status, _, body) = send(&app, api_post("/dlq/api/redrive", &one)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(store.get(bad[0]).await.unwrap().unwrap().status, Status::Pending);
    let (status, headers, body) =
        send(&app, form("/dlq/discard", &format!("id={}&reason=junk&confirm=1", bad[1]))).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    finished_operation(&app, &headers).await;
    assert_eq!(store.get(bad[1]).await.unwrap().unwrap().status, Status::Discarded);
    let whole = json!({"payload": {"n": 1}, "reason": "repaired"});
    let (status, _, body) = send(&app, api_post(&format!("/dlq/api/events/{}/patch", bad[0]), &whole)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(store.get(bad[0]).await.unwrap().unwrap().payload, Payload::Json(json!({"n": 1})));
}

#[tokio::test]
async fn unreadable_rows_break_no_page_sqlite() {
    let store = dlq_sqlx::SqliteStore::in_memory().await.expect("SQLite store");
    let pool = store.pool().clone();
    let store: Store = Arc::new(store);
    let deep = format!("'{}{}'", "[".repeat(900), "]".repeat(900));
    let rows = park_for(&store, &[r#"'{"n": 1e400}'"#, &deep, "CAST(X'7B226E223A2022FF227D' AS TEXT)"]).await;
    for (_, update) in &rows {
        sqlx::query(sqlx::AssertSqlSafe(update.clone())).execute(&pool).await.unwrap();
    }
    unreadable_rows_break_no_page(store, rows.into_iter().map(|(id, _)| id).collect()).await;
}

#[sqlx::test(migrations = false)]
async fn unreadable_rows_break_no_page_pg(pool: sqlx::PgPool) {
    let store: Store =
        Arc::new(dlq_sqlx::PgStore::from_pool(pool.clone(), dlq_sqlx::PgConfig::default()).await.expect("PgStore"));
    let rows = park_for(&store, &[r#"'{"n": 1e400}'::jsonb"#, "(repeat('[', 10000) || repeat(']', 10000))::jsonb"]);
    let rows = rows.await;
    for (_, update) in &rows {
        sqlx::query(sqlx::AssertSqlSafe(update.clone())).execute(&pool).await.unwrap();
    }
    unreadable_rows_break_no_page(store, rows.into_iter().map(|(id, _)| id).collect()).await;
}
