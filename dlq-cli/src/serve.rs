//! `dlq serve`: the web console standalone, with `/metrics` and `/healthz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::IntoResponse;
use axum::routing::get;
use clap::Args;
use dlq_core::admin::Admin;
use dlq_core::{DeadLetterStore, observe::HealthStatus, observe::StoreGauges};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::Failure;

/// How often the store-wide gauges of `/metrics` are refreshed (one cheap stats query, never
/// per scrape).
const GAUGE_EVERY: Duration = Duration::from_secs(15);

/// `dlq serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on; anything but loopback needs a token.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// A secret every request must carry (`Authorization: Bearer TOKEN`, or open the console
    /// once with `?token=TOKEN`); required to bind a non-loopback address.
    #[arg(long, env = "DLQ_WEB_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Enable the console's actions (redrive, discard, patch, edit, undo); read-only without.
    #[arg(long)]
    pub allow_actions: bool,
}

/// Refuses a non-loopback address without a token (before anything listens).
pub(crate) fn check(args: &ServeArgs) -> Result<(), Failure> {
    let token = args.token.as_deref().filter(|t| !t.is_empty());
    if !args.bind.ip().is_loopback() && token.is_none() {
        return Err(Failure::usage(format!(
            "binding {} (not loopback) needs a token: pass --token or set DLQ_WEB_TOKEN",
            args.bind
        )));
    }
    Ok(())
}

#[derive(Clone)]
struct Ops {
    store: Arc<dyn DeadLetterStore>,
    metrics: PrometheusHandle,
    options: dlq_web::Options,
}

/// Serves the console at `/`, `/metrics` (Prometheus text) and `/healthz` until Ctrl-C.
pub(crate) async fn run(admin: Admin, args: &ServeArgs) -> Result<(), Failure> {
    check(args)?;
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| Failure::error(format!("cannot install the Prometheus recorder: {e}")))?;
    dlq_core::observe::describe_metrics();
    let store = admin.store().clone();
    let gauges_store = store.clone();
    tokio::spawn(async move {
        let mut gauges = StoreGauges::default();
        loop {
            gauges.refresh(gauges_store.as_ref()).await;
            tokio::time::sleep(GAUGE_EVERY).await;
        }
    });
    let token = args.token.clone().filter(|t| !t.is_empty());
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .map_err(|e| Failure::error(format!("cannot listen on {}: {e}", args.bind)))?;
    let local = listener.local_addr().map_err(|e| Failure::error(e.to_string()))?;
    // The console (and /metrics) then answer only to this address and loopback names with its
    // port, unless a token guards them: a page of another site cannot rebind its name to it.
    // Confirmed redrives and discards run in the background: Ctrl-C stops them after their
    // batch, stored `stopped` (resumable), before the process ends.
    let background = dlq_web::Background::new();
    let mut options =
        dlq_web::Options::default().allow_actions(args.allow_actions).bound_to(local).background(background.clone());
    if let Some(token) = &token {
        options = options.token(token.clone());
    }
    let ops = Ops { store, metrics, options: options.clone() };
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(healthz))
        .with_state(ops)
        .merge(dlq_web::router(admin, options));
    let mode = if args.allow_actions { "actions enabled" } else { "read-only" };
    eprintln!("dlq console on http://{local}/ ({mode}); /metrics, /healthz; Ctrl-C stops");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| Failure::error(format!("the console stopped: {e}")))?;
    background.shutdown().await;
    Ok(())
}

/// `GET /metrics`: behind the token when one is set, in any form the console takes (bearer
/// header, its cookie, `?token=`); else only for the console's own `Host`.
async fn metrics_text(State(ops): State<Ops>, headers: HeaderMap, uri: Uri) -> impl IntoResponse {
    let host = headers.get(header::HOST).map(|v| v.to_str().unwrap_or_default());
    if !ops.options.accepts_host(host) {
        let why = "request refused: this console answers only to its own address (or loopback names with its port)\n";
        return (StatusCode::MISDIRECTED_REQUEST, why.to_owned()).into_response();
    }
    if !ops.options.authorizes(&headers, uri.query()) {
        let why = "send the console's token: Authorization: Bearer TOKEN, its cookie, or ?token=TOKEN\n";
        return (StatusCode::UNAUTHORIZED, why.to_owned()).into_response();
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], ops.metrics.render()).into_response()
}

/// `GET /healthz`: `dlq_core::observe::health` as JSON; 503 when the store does not answer. Open
/// (for probes), like every health endpoint: it names no secret.
async fn healthz(State(ops): State<Ops>) -> impl IntoResponse {
    let health = dlq_core::observe::health(ops.store.as_ref()).await;
    let status = if health.status == HealthStatus::Down { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
    (status, axum::Json(health))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(bind: &str, token: Option<&str>) -> ServeArgs {
        ServeArgs { bind: bind.parse().unwrap(), token: token.map(str::to_owned), allow_actions: false }
    }

    #[test]
    fn only_loopback_goes_without_a_token() {
        assert!(check(&args("127.0.0.1:8080", None)).is_ok());
        assert!(check(&args("[::1]:8080", None)).is_ok());
        let refused = check(&args("0.0.0.0:8080", None)).unwrap_err();
        assert!(refused.message.contains("DLQ_WEB_TOKEN"), "{}", refused.message);
        assert!(check(&args("0.0.0.0:8080", Some(""))).is_err());
        assert!(check(&args("0.0.0.0:8080", Some("s3cret"))).is_ok());
    }
}
