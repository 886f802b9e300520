//! Redaction has one door: every route of the console, taken from [`dlq_web::routes`] (the
//! table the router is built from: a new route fails this test until it is walked here), over
//! PostgreSQL rows whose redacted fields, error texts, audit reasons, patch values and
//! validation errors hold a canary ([`dlq_core::testing::canary`]). No answer shows it, bar
//! the audited reveal, and no reason filter answers a right guess differently from a wrong one.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, header};
use dlq_core::admin::Admin;
use dlq_core::store::prelude::*;
use dlq_core::testing::canary::{self, CARD, Canaries};
use dlq_web::Options;
use tower::ServiceExt;

fn app(store: &Arc<dyn DeadLetterStore>) -> Router {
    let options = Options::default()
        .allow_actions(true)
        .actor(|parts| parts.headers.get("x-user").and_then(|v| v.to_str().ok()).map(str::to_owned));
    // The service's subject key, so that the erase form goes as far as its confirmation.
    let key = dlq_core::subject::SubjectKey::new("canary subject key of at least 32 bytes").unwrap();
    let admin = Admin::new(store.clone(), "console").with_subject_key(key);
    Router::new().nest("/dlq", dlq_web::router(admin, options))
}

/// The status and body of one request, as a browser on the console's machine sends it.
async fn send(app: &Router, method: &str, uri: &str, body: Option<(&str, String)>) -> (u16, String) {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, "localhost:8080")
        .header(header::ORIGIN, "http://localhost:8080")
        .header("x-user", "alice");
    if let Some((content_type, _)) = &body {
        request = request.header(header::CONTENT_TYPE, *content_type);
    }
    let request = request.body(body.map_or_else(Body::empty, |(_, b)| Body::from(b))).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

const FORM: &str = "application/x-www-form-urlencoded";
const JSON: &str = "application/json";

/// How this test calls `method path`: each request's uri and body. An empty list is a route
/// this test must not check: said why.
fn requests(method: &str, path: &str, rows: &Canaries) -> Vec<(String, Option<(&'static str, String)>)> {
    let uri = |p: &str| {
        format!("/dlq{}", p.trim_end_matches('/'))
            .replace("{id}", &rows.patched.to_string())
            .replace("{fingerprint}", &rows.group)
            .replace("{audit_id}", &rows.first_patch.to_string())
    };
    let patch = r#"[{"op":"replace","path":"/card/number","value":"4000000000000002"}]"#;
    let form = |body: String| Some((FORM, body));
    let json = |body: serde_json::Value| Some((JSON, body.to_string()));
    let get = |query: &str| (format!("{}{query}", uri(path)), None);
    match (method, path) {
        ("GET", "/events") | ("GET", "/api/events") => {
            vec![get(""), get("?order=oldest"), get("?reason=declined"), get("?event_type=canary-payment")]
        }
        ("GET", "/events/{id}") | ("GET", "/api/events/{id}") => {
            [rows.dead, rows.pending, rows.undecodable, rows.patched]
                .iter()
                .map(|id| (uri(path).replace(&rows.patched.to_string(), &id.to_string()), None))
                .collect()
        }
        ("GET", "/group") => vec![get(&format!("?group={}", rows.group))],
        ("GET", "/operations/{id}") => vec![(format!("/dlq/operations/{}", rows.operation), None)],
        ("GET", _) => vec![get("")],
        // The one door that opens: audited first, for an operator allowed to (`Options::reveal`).
        ("POST", "/events/{id}/reveal" | "/api/events/{id}/reveal") => vec![],
        ("POST", "/events/{id}/edit") => vec![
            (uri(path), form(format!("payload={}&reason=check", urlencode(r#"{"amount": 7}"#)))),
            (uri(path), form(format!("payload={}&reason=check&confirm=1", urlencode(r#"{"amount": 8}"#)))),
        ],
        ("POST", "/groups/{fingerprint}/patch") => {
            vec![(uri(path), form(format!("patch={}&reason=check", urlencode(patch))))]
        }
        ("POST", "/group/patch") => vec![(
            format!("/dlq/group/patch?group={}", rows.group),
            form(format!("patch={}&reason=check", urlencode(patch))),
        )],
        ("POST", "/redrive" | "/discard") => vec![
            (uri(path), form(format!("group={}&reason=check", rows.group))),
            (uri(path), form(format!("id={}&reason=check", rows.dead))),
        ],
        ("POST", "/audit/{audit_id}/undo") | ("POST", "/api/audit/{audit_id}/undo") => {
            vec![(uri(path), form(String::new()))]
                .into_iter()
                .map(|(u, b)| if path.starts_with("/api") { (u, json(serde_json::json!({}))) } else { (u, b) })
                .collect()
        }
        ("POST", "/erase") => vec![(uri(path), form("subject=customer-1&reason=check".into()))],
        ("POST", "/operations/{id}/resume") => {
            vec![(format!("/dlq/operations/{}/resume", rows.operation), form(String::new()))]
        }
        ("POST", "/api/events/{id}/patch") => vec![
            (
                uri(path),
                json(
                    serde_json::json!({"patch": serde_json::from_str::<serde_json::Value>(patch).unwrap(), "reason": "check"}),
                ),
            ),
            (uri(path), json(serde_json::json!({"patch": [{"op": "remove", "path": "/absent"}], "reason": "check"}))),
        ],
        ("POST", "/api/redrive" | "/api/discard") => vec![(
            uri(path),
            json(serde_json::json!({"filter": {"event_type": canary::EVENT_TYPE}, "reason": "check", "dry_run": true})),
        )],
        (method, path) => panic!("{method} {path} is a new route: say here how to call it with the canary rows"),
    }
}

fn urlencode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[sqlx::test(migrations = false)]
async fn no_route_shows_a_redacted_value_and_no_filter_tells_a_guess(pool: sqlx::PgPool) {
    let store: Arc<dyn DeadLetterStore> =
        Arc::new(dlq_sqlx::PgStore::from_pool(pool, dlq_sqlx::PgConfig::default()).await.expect("PgStore"));
    let rows = canary::seed(store.clone()).await.unwrap();
    let app = app(&store);
    let routes = dlq_web::routes();
    assert!(routes.len() >= 25, "{routes:?}");
    // Twice: the second walk reads the rows as the first one's edits and patches left them.
    for _ in 0..2 {
        for route in &routes {
            for (uri, body) in requests(route.method, route.path, &rows) {
                let (status, answer) = send(&app, route.method, &uri, body).await;
                assert_ne!(status, 500, "{} {uri}: {answer}", route.method);
                canary::assert_clean(&format!("{} {uri} ({status})", route.method), &answer);
            }
        }
    }
    for path in ["/dlq/events", "/dlq/api/events"] {
        for (right, wrong) in [(CARD, "4111111111111112"), ("card 4111", "card 4112"), ("for canary", "for canarz")] {
            let mut answers = Vec::new();
            for guess in [right, wrong] {
                let (status, body) = send(&app, "GET", &format!("{path}?reason={}", urlencode(guess)), None).await;
                // The operator's own needle is echoed in the filter form: not an answer.
                answers.push((status, body.replace(&urlencode(guess), "<guess>").replace(guess, "<guess>")));
            }
            assert_eq!(answers[0], answers[1], "{path}?reason={right}");
        }
    }
}

/// The JSON API's answers reach terminals too (`curl …/api/events/4`): C1 controls and bidi
/// overrides in stored text leave as `\u` escapes, and the document parses to the stored text.
#[tokio::test]
async fn the_json_api_escapes_c1_controls_and_bidi_overrides() {
    use dlq_core::{ErrorClass, Payload, classify::FailureInfo, store::NewDeadLetter};
    let store: Arc<dyn DeadLetterStore> = Arc::new(dlq_sqlx::SqliteStore::in_memory().await.unwrap());
    let hostile = "a\u{9b}2J b\u{202e}fdp.exe";
    let failure = FailureInfo::new(ErrorClass::Permanent, "Hostile", hostile.to_owned(), vec![], None);
    let payload = Payload::Json(serde_json::json!({ "note": hostile }));
    let id = store.park(NewDeadLetter::new("hostile", payload, failure)).await.unwrap().id;
    let app = app(&store);
    for uri in [format!("/dlq/api/events/{id}"), "/dlq/api/events".to_owned(), "/dlq/api/groups".to_owned()] {
        let (status, body) = send(&app, "GET", &uri, None).await;
        assert_eq!(status, 200, "{uri}: {body}");
        assert!(!body.contains('\u{9b}') && !body.contains('\u{202e}'), "{uri}: {body}");
        assert!(body.contains(r"\u009b") && body.contains(r"\u202e"), "{uri}: {body}");
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(doc.to_string().contains(hostile), "{uri}: the escape is the character itself");
    }
}
