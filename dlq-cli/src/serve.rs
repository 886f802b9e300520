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
    /// The address to listen on: `127.0.0.1:8080`, `[::1]:8080`, or a name and port
    /// (`localhost:8080`), resolved, its first address bound. Anything but loopback needs a
    /// token.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub bind: String,
    /// A secret every request must carry (`Authorization: Bearer TOKEN`, or open the console
    /// once with `?token=TOKEN`); required to bind a non-loopback address.
    #[arg(long, env = "DLQ_WEB_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Enable the console's actions (redrive, discard, patch, edit, undo); read-only without.
    #[arg(long)]
    pub allow_actions: bool,
}

/// Where `--bind` says to listen: an address, or what a name resolves to.
#[derive(Debug)]
pub(crate) struct Bind {
    /// The address to bind (a name's first).
    addr: SocketAddr,
    /// The name given (`localhost:8080`), which the console then answers to; `None` for an
    /// address.
    name: Option<String>,
}

/// Resolves `--bind`: an address as it is, `NAME:PORT` through the system resolver. A
/// malformed value is a usage error; a name that does not resolve, an error.
pub(crate) fn resolve(bind: &str) -> Result<Bind, Failure> {
    if let Ok(addr) = bind.parse::<SocketAddr>() {
        return Ok(Bind { addr, name: None });
    }
    let shown = crate::render::short(bind, crate::render::CELL_MAX);
    let malformed = || {
        Failure::usage(format!(
            "--bind `{shown}` is not an address or NAME:PORT (e.g. 127.0.0.1:8080, [::1]:8080, localhost:8080)"
        ))
    };
    let (name, port) = bind.rsplit_once(':').ok_or_else(malformed)?;
    if name.is_empty() || name.contains(':') || port.parse::<u16>().is_err() {
        return Err(malformed());
    }
    let mut addrs = std::net::ToSocketAddrs::to_socket_addrs(bind)
        .map_err(|e| Failure::error(format!("cannot resolve --bind `{shown}`: {e}")))?;
    let addr = addrs.next().ok_or_else(|| Failure::error(format!("--bind `{shown}` resolves to no address")))?;
    Ok(Bind { addr, name: Some(bind.to_owned()) })
}

/// Resolves `--bind` and refuses a non-loopback address without a token (before anything
/// listens).
pub(crate) fn check(args: &ServeArgs) -> Result<Bind, Failure> {
    let bind = resolve(&args.bind)?;
    let token = args.token.as_deref().filter(|t| !t.is_empty());
    if !bind.addr.ip().is_loopback() && token.is_none() {
        return Err(Failure::usage(format!(
            "binding {} (not loopback) needs a token: pass --token or set DLQ_WEB_TOKEN",
            bind.addr
        )));
    }
    Ok(bind)
}

/// The console's options: without a token it answers only to the address it listens on,
/// loopback names with its port, and the name `--bind` gave, if any.
fn console_options(args: &ServeArgs, bind: &Bind, local: SocketAddr) -> dlq_web::Options {
    let mut options = dlq_web::Options::default().allow_actions(args.allow_actions).bound_to(local);
    if let Some(name) = &bind.name {
        let host = name.rsplit_once(':').map_or(name.as_str(), |(host, _)| host);
        options = options.allow_host(format!("{host}:{}", local.port()));
    }
    if let Some(token) = args.token.as_ref().filter(|t| !t.is_empty()) {
        options = options.token(token.clone());
    }
    options
}

#[derive(Clone)]
struct Ops {
    store: Arc<dyn DeadLetterStore>,
    metrics: PrometheusHandle,
    options: dlq_web::Options,
}

/// Serves the console at `/`, `/metrics` (Prometheus text) and `/healthz` until Ctrl-C.
pub(crate) async fn run(admin: Admin, args: &ServeArgs) -> Result<(), Failure> {
    let bind = check(args)?;
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
    let listener = tokio::net::TcpListener::bind(bind.addr)
        .await
        .map_err(|e| Failure::error(format!("cannot listen on {}: {e}", bind.addr)))?;
    let local = listener.local_addr().map_err(|e| Failure::error(e.to_string()))?;
    // The console (and /metrics) then answer only to this address, loopback names and the
    // name bound, with its port, unless a token guards them: a page of another site cannot
    // rebind its name to it. Confirmed redrives and discards run in the background: Ctrl-C
    // stops them after their batch, stored `stopped` (resumable), before the process ends.
    let background = dlq_web::Background::new();
    let options = console_options(args, &bind, local).background(background.clone());
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
        ServeArgs { bind: bind.to_owned(), token: token.map(str::to_owned), allow_actions: false }
    }

    #[test]
    fn a_name_is_resolved_and_the_console_answers_to_it() {
        let bind = check(&args("localhost:8080", None)).unwrap();
        assert!(bind.addr.ip().is_loopback() && bind.addr.port() == 8080, "{bind:?}");
        // A name of the operator's own (an /etc/hosts entry) is accepted as the Host it names.
        let named = Bind { addr: "127.0.0.1:0".parse().unwrap(), name: Some("dlq-box:0".into()) };
        let local = "127.0.0.1:41000".parse().unwrap();
        let options = console_options(&args("dlq-box:0", None), &named, local);
        assert!(options.accepts_host(Some("dlq-box:41000")) && options.accepts_host(Some("localhost:41000")));
        assert!(!options.accepts_host(Some("dlq-box:8080")) && !options.accepts_host(Some("evil.example:41000")));
        for malformed in ["localhost", "localhost:http", ":8080", "::1:8080", "localhost:70000"] {
            let err = check(&args(malformed, None)).unwrap_err();
            assert_eq!(err.code, crate::exit::USAGE, "{malformed}: {}", err.message);
        }
        let unknown = check(&args("no-such-host.invalid:8080", None)).unwrap_err();
        assert_eq!(unknown.code, crate::exit::ERROR, "{}", unknown.message);
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
