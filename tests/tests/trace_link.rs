//! The trace link from a retry to the original failure (feature `opentelemetry` of dlq-core):
//! a handler called inside a traced span parks its event with that span's W3C `traceparent`,
//! and the retry's `dlq.retry` span links to it, as exported by OpenTelemetry's SDK.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dlq_core::{MemoryStore, Retrier, Scope, adapter::SourceMeta, dead_letter, handlers, store::prelude::*};
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

static UP: AtomicBool = AtomicBool::new(false);

#[dead_letter(event_type = "trace-link", backoff = "none")]
async fn handle(n: u64) -> Result<(), std::io::Error> {
    if UP.load(Ordering::SeqCst) { Ok(()) } else { Err(std::io::Error::other(format!("{n}: ledger down"))) }
}

#[tokio::test]
async fn a_retry_links_to_the_span_of_the_original_failure() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _guard = tracing::subscriber::set_default(subscriber);
    let store = Arc::new(MemoryStore::new());

    // The consumer's span: the live call fails inside it.
    let consume = tracing::info_span!("consume");
    let original = consume.context().span().span_context().clone();
    let err = Scope::new().store(store.clone()).run(handle(7)).instrument(consume).await.unwrap_err();
    let row = store.get(err.dlq_id().unwrap()).await.unwrap().unwrap();
    let expected = format!("00-{}-{}-01", original.trace_id(), original.span_id());
    assert_eq!(row.source.trace_context.as_deref(), Some(expected.as_str()), "the failing call's traceparent");

    // The retry, later and in another trace, links back to it.
    UP.store(true, Ordering::SeqCst);
    Retrier::new(store.clone(), handlers![handle].unwrap()).run_once().await.unwrap();
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let retry = spans.iter().find(|s| s.name == "dlq.retry").expect("a dlq.retry span");
    let linked: Vec<_> = retry.links.iter().map(|l| (l.span_context.trace_id(), l.span_context.span_id())).collect();
    assert_eq!(linked, [(original.trace_id(), original.span_id())]);
    assert_ne!(retry.span_context.trace_id(), original.trace_id(), "a trace of its own");

    // A traceparent the caller gives in its SourceMeta wins over the current span's.
    let given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let source = SourceMeta { trace_context: Some(given.into()), ..SourceMeta::default() };
    UP.store(false, Ordering::SeqCst);
    let err = Scope::new().store(store.clone()).source(source).run(handle(8)).await.unwrap_err();
    let row = store.get(err.dlq_id().unwrap()).await.unwrap().unwrap();
    assert_eq!(row.source.trace_context.as_deref(), Some(given));
}
