//! Random requests thrown at the console's router in-process: whatever the path, query,
//! method and body, no handler panics, nothing answers 5xx, and every JSON error is
//! `{"error": "..."}` on one line.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, header};
use dlq_core::admin::Admin;
use dlq_core::{
    ErrorClass, MemoryStore, Payload, adapter::DeadReason, classify::FailureInfo, store::NewDeadLetter,
    store::prelude::*,
};
use proptest::prelude::*;
use tower::ServiceExt;

/// The router, actions on, over a store holding dead rows with hostile text.
fn app(rt: &tokio::runtime::Runtime) -> Router {
    let store: Arc<dyn DeadLetterStore> = Arc::new(MemoryStore::new());
    rt.block_on(async {
        for n in 0..3 {
            let reason = format!("bad \x1b[2J<script>{n}</script>");
            let failure = FailureInfo::new(ErrorClass::Permanent, "Kind", reason, vec![], None);
            let payload =
                if n == 2 { Payload::from_bytes(b"\xff\x00") } else { Payload::Json(serde_json::json!({"n": n})) };
            store.park(NewDeadLetter::new("payment", payload, failure).dead(DeadReason::Permanent)).await.unwrap();
        }
    });
    let options = dlq_web::Options::default().allow_actions(true);
    dlq_web::router(Admin::new(store, "fuzz"), options)
}

/// The console's routes, `{}` standing for a fuzzed segment.
const ROUTES: &[&str] = &[
    "/",
    "/groups",
    "/groups/{}",
    "/groups/{}/patch",
    "/group",
    "/group/patch",
    "/events",
    "/events/{}",
    "/events/{}/edit",
    "/redrive",
    "/discard",
    "/audit/{}/undo",
    "/operations/{}",
    "/operations/{}/resume",
    "/assets/console.css",
    "/charts/parked.svg",
    "/api/stats",
    "/api/groups",
    "/api/events",
    "/api/events/{}",
    "/api/events/{}/patch",
    "/api/redrive",
    "/api/discard",
    "/api/audit/{}/undo",
    "/api/openapi.json",
    "/{}",
    "/api/{}",
    "/{}/{}/{}",
];

/// A segment: an id, a fingerprint, or what an attacker tries.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "1",
            "2",
            "3",
            "0",
            "-1",
            "999999999999999999999",
            "1.5",
            "..",
            ".",
            "%2e%2e",
            "%00",
            "%ff",
            "%zz",
            "%C3%A9",
            "a%2Fb",
            "",
            "%20",
            "events",
            "api",
            "0000000000000000",
            "%3Cscript%3E",
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z0-9%._~-]{0,12}",
    ]
}

/// A path: a route with its placeholders filled.
fn path() -> impl Strategy<Value = String> {
    (prop::sample::select(ROUTES), prop::collection::vec(segment(), 3)).prop_map(|(route, fill)| {
        let mut path = route.to_owned();
        for value in fill {
            path = path.replacen("{}", &value, 1);
        }
        path
    })
}

fn query() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "status",
        "event_type",
        "group",
        "kind",
        "reason",
        "since",
        "until",
        "after",
        "order",
        "limit",
        "window",
        "id",
        "confirm",
        "canary",
        "rate",
        "force",
        "token",
        "x",
    ]);
    let value = prop_oneof![
        prop::sample::select(vec![
            "",
            "0",
            "-1",
            "1",
            "10001",
            "99999999999999999999",
            "NaN",
            "1e309",
            "2h",
            "24h",
            "7d",
            "FAILED_PERMANENTLY",
            "pending",
            "asc",
            "desc",
            "%00",
            "%ff",
            "%",
            "a%26b",
            "<script>",
            "0.000001",
            "1000000000",
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z0-9%._~-]{0,10}",
    ];
    prop::collection::vec((key, value), 0..4)
        .prop_map(|pairs| pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&"))
}

fn body() -> impl Strategy<Value = (Option<&'static str>, Vec<u8>)> {
    let content_type =
        prop::sample::select(vec![None, Some("application/json"), Some("application/x-www-form-urlencoded")]);
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        prop::sample::select(vec![
            r#"{"ids": [1, 2], "reason": "x"}"#,
            r#"{"group": "", "reason": ""}"#,
            r#"{"patch": [{"op": "add", "path": "/x", "value": 1}], "reason": "r"}"#,
            r#"{"payload": {"n": 1}, "reason": "r", "confirm": true}"#,
            r#"{"ids": [-1], "rate": -5, "canary": 0}"#,
            "id=1&reason=x&confirm=1",
            "group=&reason=&confirm=1&rate=NaN",
            "[]",
            "null",
            "{",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
    ];
    (content_type, bytes)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_request_panics_or_answers_5xx_and_every_json_error_is_one_line(
        post in any::<bool>(),
        path in path(),
        query in query(),
        (content_type, bytes) in body(),
        wants_json in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let app = app(&rt);
        let mut uri = path;
        if !query.is_empty() {
            uri = format!("{uri}?{query}");
        }
        // Some generated paths are not URIs at all (a bare `%`, a space): the server never sees those.
        let Ok(uri) = uri.parse::<axum::http::Uri>() else { return Ok(()) };
        let method = if post { Method::POST } else { Method::GET };
        let mut request = Request::builder().method(method).uri(uri.clone()).header(header::HOST, "localhost:8080");
        if post {
            request = request.header(header::ORIGIN, "http://localhost:8080");
        }
        if let Some(content_type) = content_type {
            request = request.header(header::CONTENT_TYPE, content_type);
        }
        if wants_json {
            request = request.header(header::ACCEPT, "application/json");
        }
        let request = request.body(Body::from(bytes)).unwrap();
        let (status, json, text) = rt.block_on(async {
            let response = app.oneshot(request).await.unwrap();
            let status = response.status();
            let json = response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/json"));
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
            (status, json, String::from_utf8_lossy(&bytes).into_owned())
        });
        prop_assert!(!status.is_server_error(), "{uri}: {status}: {text}");
        if json && (status.is_client_error() || status.is_server_error()) {
            let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| TestCaseError::fail(format!("{uri}: {e}: {text}")))?;
            let error = value.get("error").and_then(serde_json::Value::as_str);
            prop_assert!(error.is_some(), "{uri}: {status}: {text}");
            prop_assert!(!error.unwrap().contains('\n'), "{uri}: one line: {text}");
        }
    }
}
