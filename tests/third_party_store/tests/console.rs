//! The console (`dlq_web::router`) on `VecStore`: the overview, a failure group and one row
//! answer 200 and show the row.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use dlq_core::admin::Admin;
use dlq_core::store::NewDeadLetter;
use dlq_core::{store::prelude::*, adapter::DeadReason, ErrorClass, classify::FailureInfo, Payload};
use third_party_store::VecStore;
use tower::ServiceExt;

async fn page(app: &axum::Router, uri: &str) -> String {
    // As a browser on the console's own machine sends it: a loopback `Host`.
    let request = Request::get(uri).header(header::HOST, "localhost:8080").body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{uri}");
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn the_console_serves_the_overview_a_group_and_a_row() {
    let store = Arc::new(VecStore::new());
    let failure = FailureInfo::new(ErrorClass::Permanent, "BadCurrency", "currency unknown".into(), vec![], None);
    let letter = NewDeadLetter::new("payment", Payload::Json(serde_json::json!({"currency": "XXX"})), failure)
        .dead(DeadReason::Permanent);
    let id = store.park(letter).await.unwrap().id;
    let group = store.get(id).await.unwrap().unwrap().failure.fingerprint;
    let app = dlq_web::router(Admin::new(store, "console"), dlq_web::Options::default());

    assert!(page(&app, "/").await.contains("payment"));
    assert!(page(&app, &format!("/groups/{group}")).await.contains("currency unknown"));
    assert!(page(&app, &format!("/events/{id}")).await.contains("XXX"));
}
