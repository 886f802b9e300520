//! The operator console in a small service: the quickstart's incident (payments with the
//! currency `"USD "`, and payments that hit a ledger outage) parked in a store, and the
//! console mounted at `/dlq` beside `/metrics` and `/healthz`, as a service embeds it.
//!
//! ```sh
//! cargo run --example console
//! # then open http://127.0.0.1:8080/dlq
//! ```
//!
//! It uses an SQLite file `dlq-console.db` in the current directory (set `DATABASE_URL` for
//! PostgreSQL). Actions are enabled; the operator named in the audit log is the `x-user`
//! header a real service's auth layer would set, else `console-demo`. Ctrl-C stops it.

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use dlq_core::admin::Admin;
use dlq_core::{
    ErrorClass, Payload, adapter::DeadReason, adapter::SourceMeta, classify::FailureInfo, store::NewDeadLetter,
    store::prelude::*,
};
use metrics_exporter_prometheus::PrometheusBuilder;
use serde_json::json;

async fn open_store() -> Result<Arc<dyn DeadLetterStore>, dlq_core::Error> {
    Ok(match std::env::var("DATABASE_URL") {
        Ok(url) => Arc::new(dlq_sqlx::PgStore::connect(&url).await?),
        Err(_) => Arc::new(dlq_sqlx::SqliteStore::connect("sqlite://dlq-console.db?mode=rwc").await?),
    })
}

/// The quickstart's failures: three poison payments, four that met the ledger outage.
async fn park_the_incident(store: &dyn DeadLetterStore) -> Result<(), dlq_core::Error> {
    for id in 1..=3_u64 {
        let reason = "currency \"USD \" is not an ISO 4217 code".to_owned();
        let failure = FailureInfo::new(ErrorClass::Permanent, "PaymentError::BadCurrency", reason, vec![], None);
        let payload = Payload::Json(json!({ "id": id, "amount_cents": 1_000 + id, "currency": "USD " }));
        let letter = NewDeadLetter::new("payment", payload, failure)
            .dead(DeadReason::Permanent)
            .with_handler("quickstart::handle_payment")
            .with_source(SourceMeta::kafka("payments", 0, 41 + i64::try_from(id).unwrap_or(0)));
        store.park(letter).await?;
    }
    for id in 10..=13_u64 {
        let reason = "ledger unavailable (HTTP 503)".to_owned();
        let failure = FailureInfo::new(ErrorClass::Transient, "PaymentError::LedgerDown", reason, vec![], None);
        let payload = Payload::Json(json!({ "id": id, "amount_cents": 2_500, "currency": "EUR" }));
        let letter = NewDeadLetter::new("payment", payload, failure)
            .retry(std::time::Duration::from_secs(30), 240)
            .with_handler("quickstart::handle_payment");
        store.park(letter).await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = open_store().await?;
    park_the_incident(store.as_ref()).await?;

    let metrics = PrometheusBuilder::new().install_recorder()?;
    dlq_core::observe::describe_metrics();
    let health_store = store.clone();
    let gauge_store = store.clone();
    tokio::spawn(async move {
        // The store-wide gauges (rows by type and status …) from one cheap look every 15 s.
        let mut gauges = dlq_core::observe::StoreGauges::default();
        loop {
            gauges.refresh(gauge_store.as_ref()).await;
            tokio::time::sleep(std::time::Duration::from_secs(15)).await;
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    // Confirmed redrives and discards run in the background: stopped (resumable) at shutdown.
    let background = dlq_web::Background::new();
    let options = dlq_web::Options::default()
        .allow_actions(true)
        .background(background.clone())
        // Without a token, the console answers only to its own address and loopback names.
        .bound_to(listener.local_addr()?)
        .actor(|parts| parts.headers.get("x-user").and_then(|v| v.to_str().ok()).map(str::to_owned));
    let app = Router::new()
        .nest("/dlq", dlq_web::router(Admin::new(store, "console-demo"), options))
        .route("/metrics", get(move || std::future::ready(metrics.render())))
        .route(
            "/healthz",
            get(move || {
                let store = health_store.clone();
                async move { axum::Json(dlq_core::observe::health(store.as_ref()).await) }
            }),
        );

    println!("the console: http://127.0.0.1:8080/dlq  (metrics: /metrics, health: /healthz; Ctrl-C stops)");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    background.shutdown().await;
    Ok(())
}
