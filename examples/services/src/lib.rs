//! Runnable examples of dlq inside a service: the console, metrics and traces, and the broker
//! adapters. They live apart from the quickstart so that `cargo run --example quickstart`
//! builds only what the quickstart uses (no librdkafka, OpenTelemetry or axum).
