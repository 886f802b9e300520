//! A service that exposes dlq's metrics on `/metrics` and sends its traces through
//! OpenTelemetry, with the trace link from a retry to the original failure.
//!
//! A payment handler is called inside a `consume` span while the ledger is down: the event is
//! parked with that span's W3C `traceparent` (feature `opentelemetry` of dlq-core). The ledger
//! comes back, the retrier runs the row in a `dlq.retry` span of its own trace that links to
//! the `consume` span, and the exporter prints both spans. Here the exporter is
//! `opentelemetry-stdout`; a real service puts its OTLP exporter in the same place.
//!
//! ```sh
//! cargo run --example observability
//! curl -s 127.0.0.1:9464/metrics | grep '^dlq_'
//! curl -s 127.0.0.1:9464/healthz
//! ```
//!
//! It uses an SQLite file `dlq-observability.db` (set `DATABASE_URL` for PostgreSQL).
//! Ctrl-C stops it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use dlq_core::{Classify, Context, Retrier, Scope, State, dead_letter, handlers, store::prelude::*};
use metrics_exporter_prometheus::PrometheusBuilder;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Instrument as _;
use tracing::Level;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;

/// The downstream ledger; `down` simulates an outage.
#[derive(Debug, Clone, Default)]
struct Ledger {
    down: Arc<AtomicBool>,
}

#[derive(Debug, thiserror::Error, Classify)]
enum PaymentError {
    #[error("ledger unavailable (HTTP 503)")]
    #[dlq(transient)]
    LedgerDown,
}

#[dead_letter(event_type = "payment", max_retries = 240, backoff = "fixed", base = "500ms")]
async fn handle_payment(amount_cents: i64, State(ledger): State<Ledger>) -> Result<(), PaymentError> {
    if ledger.down.load(Ordering::SeqCst) {
        return Err(PaymentError::LedgerDown);
    }
    tracing::info!(amount_cents, "posted");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Traces: tracing's spans go to OpenTelemetry, whose exporter prints them.
    let provider =
        SdkTracerProvider::builder().with_simple_exporter(opentelemetry_stdout::SpanExporter::default()).build();
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("payments"));
    // sqlx's per-query events would crowd the spans out.
    let quiet = Targets::new().with_default(Level::INFO).with_target("sqlx", LevelFilter::OFF);
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(otel.with_filter(quiet)))?;
    // Metrics: the `metrics` facade's recorder, rendered on /metrics.
    let metrics = PrometheusBuilder::new().install_recorder()?;
    dlq_core::observe::describe_metrics();

    let store: Arc<dyn DeadLetterStore> = match std::env::var("DATABASE_URL") {
        Ok(url) => Arc::new(dlq_sqlx::PgStore::connect(&url).await?),
        Err(_) => Arc::new(dlq_sqlx::SqliteStore::connect("sqlite://dlq-observability.db?mode=rwc").await?),
    };
    let ledger = Ledger::default();
    let context = Context::new().with(ledger.clone());

    // The live call fails inside the consumer's span: parked with its traceparent.
    ledger.down.store(true, Ordering::SeqCst);
    let call = Scope::new().store(store.clone()).run(handle_payment(1_250, State(ledger.clone())));
    let failed = call.instrument(tracing::info_span!("consume", topic = "payments")).await;
    let id = failed.expect_err("the ledger is down").dlq_id().expect("parked");
    let row = store.get(id).await?.expect("the parked row");
    println!("parked {id} with traceparent {}", row.source.trace_context.as_deref().unwrap_or("-"));

    // The ledger is back: the retry runs in a trace of its own, linked to the failure.
    ledger.down.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(600)).await; // the row's backoff
    Retrier::new(store.clone(), handlers![handle_payment]?).context(context).run_once().await?;
    provider.force_flush()?;
    println!("retried {id}: {:?}", store.get(id).await?.map(|row| row.status));

    let mut gauges = dlq_core::observe::StoreGauges::default();
    gauges.refresh(store.as_ref()).await;
    let health_store = store.clone();
    let app = Router::new().route("/metrics", get(move || std::future::ready(metrics.render()))).route(
        "/healthz",
        get(move || {
            let store = health_store.clone();
            async move { axum::Json(dlq_core::observe::health(store.as_ref()).await) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:9464").await?;
    println!("metrics: http://127.0.0.1:9464/metrics, health: http://127.0.0.1:9464/healthz (Ctrl-C stops)");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    provider.shutdown()?;
    Ok(())
}
