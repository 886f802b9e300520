//! Every route and action of the console over HTTP (`tower::ServiceExt::oneshot`), nested
//! under `/dlq` as a service mounts it, on SQLite and on PostgreSQL (fresh database per test
//! from `#[sqlx::test]`; set `DATABASE_URL`): the pages, the JSON API, the actions and their
//! audit, each security rule, and bad input.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use dlq_core::admin::Admin;
use dlq_core::{DeadLetterStore, DeadReason, DlqId, ErrorClass, FailureInfo, NewDeadLetter, Payload, Status};
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
        ids.push(
            store
                .park(dead("BadCurrency", "currency \"USD \" unknown", json!({"n": n, "currency": "USD "})))
                .await
                .unwrap()
                .id,
        );
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

async fn get(app: &Router, uri: &str) -> (StatusCode, String) {
    let (status, _, body) = send(app, Request::get(uri).body(Body::empty()).unwrap()).await;
    (status, body)
}

fn form(uri: &str, body: &str) -> Request<Body> {
    Request::post(uri)
        .header(header::HOST, "console.test")
        .header(header::ORIGIN, "http://console.test")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header("x-user", "alice")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

fn api_post(uri: &str, body: &Value) -> Request<Body> {
    Request::post(uri)
        .header(header::HOST, "console.test")
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
        let (status, headers, body) = send(&app, Request::get(uri).body(Body::empty()).unwrap()).await;
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
    for window in ["24h", "7d"] {
        let uri = format!("/dlq/charts/parked.svg?window={window}");
        let (status, headers, svg) = send(&app, Request::get(&uri).body(Body::empty()).unwrap()).await;
        assert_eq!((status, headers[header::CONTENT_TYPE].to_str().unwrap()), (StatusCode::OK, "image/svg+xml"));
        assert!(svg.contains("<polyline") && svg.contains("payment"), "{svg}");
    }
    assert_eq!(get(&app, "/dlq/charts/parked.svg?window=1y").await.0, StatusCode::BAD_REQUEST);
    let (status, headers, css) = send(&app, Request::get("/dlq/assets/console.css").body(Body::empty()).unwrap()).await;
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

/// Follows a confirmed bulk action's redirect to its operation page until the run is over
/// (at most 10 s); returns the page.
async fn finished_operation(app: &Router, headers: &axum::http::HeaderMap) -> String {
    let location = headers[header::LOCATION].to_str().unwrap().to_owned();
    assert!(location.starts_with("/dlq/operations/"), "{location}");
    for _ in 0..200 {
        let (status, page) = get(app, &location).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        if !page.contains("running in this service") {
            return page;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{location} still runs after 10 s");
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

async fn group_patch_previews_then_patches_every_dead_row(store: Store) {
    let (ids, _, group) = seed(&store).await;
    let app = app(&store, actions());
    let patch = r#"[{"op":"replace","path":"/currency","value":"USD"}]"#;
    let encoded = serde_urlencoded::to_string([("patch", patch), ("reason", "POS firmware")]).unwrap();
    let (status, _, body) = send(&app, form(&format!("/dlq/groups/{group}/patch"), &encoded)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("would apply to"), "{body}");
    let (status, _, body) =
        send(&app, form(&format!("/dlq/groups/{group}/patch"), &format!("{encoded}&confirm=1"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for id in &ids {
        let Payload::Json(doc) = store.get(*id).await.unwrap().unwrap().payload else { panic!("json") };
        assert_eq!(doc["currency"], json!("USD"));
    }
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
    bad_input_is_a_clear_error,
    overview_snapshots_and_circuits,
    a_stopped_operation_resumes_from_its_page,
);
