//! The W3C `traceparent` of a failing call, and the link from its retries back to it.
//!
//! With the `opentelemetry` feature, a park records the current span's OpenTelemetry context
//! (through `tracing-opentelemetry`) when the caller's `SourceMeta` carries none, and each
//! `dlq.retry` span links to the stored one, so a trace viewer jumps from a retry to the
//! original failure. Without it, both are no-ops and only a `traceparent` given in
//! `SourceMeta::trace_context` is stored (and shown on the `dlq.retry` span as a field).

/// The W3C `traceparent` of the current span, if it has a valid OpenTelemetry context.
#[cfg(feature = "opentelemetry")]
pub(crate) fn current_traceparent() -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    let context = tracing::Span::current().context();
    let span = context.span();
    let sc = span.span_context();
    sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

/// Links `span` to the span of a stored `traceparent` (ignored when malformed).
#[cfg(feature = "opentelemetry")]
pub(crate) fn link(span: &tracing::Span, traceparent: &str) {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    if let Some(context) = parse(traceparent) {
        span.add_link(context);
    }
}

/// `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>` as a remote span context.
#[cfg(feature = "opentelemetry")]
fn parse(traceparent: &str) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

    let mut parts = traceparent.trim().split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    let context = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        flags,
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

#[cfg(not(feature = "opentelemetry"))]
pub(crate) const fn current_traceparent() -> Option<String> {
    None
}

#[cfg(not(feature = "opentelemetry"))]
pub(crate) const fn link(_: &tracing::Span, _: &str) {}

#[cfg(all(test, feature = "opentelemetry"))]
mod tests {
    #[test]
    fn traceparents_parse_or_are_ignored() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = super::parse(tp).unwrap();
        assert_eq!(context.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(context.is_sampled());
        for bad in ["", "00-xyz", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "garbage-a-b-c"] {
            assert!(super::parse(bad).is_none(), "{bad}");
        }
    }
}
