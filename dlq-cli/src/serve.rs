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
use dlq_core::{observe::HealthStatus, observe::StoreGauges, store::prelude::*};
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
    /// once with `?token=TOKEN`). For a non-loopback address it must hold at least 128 bits
    /// (32 hex digits, or 22 characters of another alphabet such as base64url, and not a
    /// pattern); without one, `dlq serve` makes one for the run and prints it once.
    #[arg(long, env = "DLQ_WEB_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Enable the console's actions (redrive, discard, patch, edit, undo); read-only without.
    #[arg(long)]
    pub allow_actions: bool,
    /// Lets a request reveal rows whole (redacted fields, sealed payloads with `DLQ_KEYS`),
    /// audited first, when it carries the header `NAME` once with exactly `VALUE`: a header
    /// the reverse proxy in front sets (overwriting any a client sent) for the operators it
    /// lets reveal. Whoever reaches the console without the proxy can send it too, so give
    /// the token to the proxy alone (or bind loopback behind a proxy on this machine).
    #[arg(long, value_name = "NAME=VALUE")]
    pub reveal_header: Option<String>,
    /// Names the operator of each request in the audit log by the header `NAME` the reverse
    /// proxy in front sets (`X-Forwarded-User`); without it, or when a request has none,
    /// the actor is `--actor`'s (the OS user by default).
    #[arg(long, value_name = "NAME")]
    pub actor_header: Option<String>,
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

/// Resolves `--bind`, checks the token (printable; for a non-loopback address, strong) and
/// the trusted headers, before anything listens.
pub(crate) fn check(args: &ServeArgs) -> Result<Bind, Failure> {
    let bind = resolve(&args.bind)?;
    if let Some(token) = given_token(args) {
        token_is_text(token)?;
        if !bind.addr.ip().is_loopback() {
            strong(token).map_err(|why| {
                Failure::usage(format!(
                    "binding {} (not loopback) needs a token of at least {TOKEN_BITS} bits: {why}; use 32 random hex \
                     digits or 22 base64url characters (`openssl rand -hex 16`), or leave --token and DLQ_WEB_TOKEN \
                     unset and dlq serve makes one",
                    bind.addr
                ))
            })?;
        }
    }
    if let Some(given) = &args.reveal_header {
        trusted_header(given, true)?;
    }
    if let Some(given) = &args.actor_header {
        trusted_header(given, false)?;
    }
    Ok(bind)
}

/// `--token` (or `DLQ_WEB_TOKEN`) when given and not empty.
fn given_token(args: &ServeArgs) -> Option<&str> {
    args.token.as_deref().filter(|t| !t.is_empty())
}

/// The bits a token of a non-loopback bind holds at least.
const TOKEN_BITS: usize = 128;

/// A token travels in a header, a cookie and a query: visible ASCII, no space.
fn token_is_text(token: &str) -> Result<(), Failure> {
    if token.bytes().all(|b| b.is_ascii_graphic()) {
        return Ok(());
    }
    Err(Failure::usage("--token must be printable ASCII without spaces (it travels in an HTTP header)"))
}

/// Whether `token` holds [`TOKEN_BITS`], counted as its length times the bits of a character
/// of its alphabet (4 when every character is a hex digit, 6 otherwise: base64url's, a
/// lower bound for any wider one), and is not a pattern a person types (fewer than 8
/// distinct characters, a shorter string repeated, a run of neighbours like `abcd` or
/// `9876`). Else why not, without the token.
fn strong(token: &str) -> Result<(), String> {
    let chars: Vec<u8> = token.bytes().collect();
    let (alphabet, per_char) = if chars.iter().all(u8::is_ascii_hexdigit) { ("hex", 4) } else { ("not hex", 6) };
    let bits = chars.len() * per_char;
    if bits < TOKEN_BITS {
        return Err(format!(
            "the one given holds {bits} (length {}, {alphabet}: {per_char} bits a character)",
            chars.len()
        ));
    }
    let distinct = chars.iter().collect::<std::collections::BTreeSet<_>>().len();
    let repeats = (1..=chars.len() / 2).any(|p| chars[p..].iter().zip(&chars).all(|(a, b)| a == b));
    let neighbours = chars.windows(2).filter(|w| w[0].abs_diff(w[1]) == 1).count();
    if distinct < 8 || repeats || neighbours * 2 > chars.len() {
        return Err("the one given is a pattern (few distinct characters, a repeat or a sequence), not random".into());
    }
    Ok(())
}

/// A token for this run, from the thread-local CSPRNG (ChaCha, seeded by the OS): 32 bytes
/// as 64 hex digits.
fn generate_token() -> String {
    use rand::Rng as _;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `--reveal-header NAME=VALUE` (`with_value`) or `--actor-header NAME`: a valid header name
/// (and a non-empty value of visible ASCII), else a usage error.
fn trusted_header(given: &str, with_value: bool) -> Result<(axum::http::HeaderName, String), Failure> {
    let flag = if with_value { "--reveal-header" } else { "--actor-header" };
    let shown = crate::render::short(given, crate::render::CELL_MAX);
    let (name, value) = if with_value { given.split_once('=').unwrap_or((given, "")) } else { (given, "") };
    let name = axum::http::HeaderName::from_bytes(name.trim().as_bytes()).ok();
    let value = value.trim();
    let value_ok = !with_value || (!value.is_empty() && value.bytes().all(|b| b.is_ascii_graphic() || b == b' '));
    match name {
        Some(name) if value_ok => Ok((name, value.to_owned())),
        _ if with_value => Err(Failure::usage(format!(
            "{flag} `{shown}` is not NAME=VALUE (e.g. --reveal-header X-Dlq-Role=reveal: the header the proxy sets)"
        ))),
        _ => Err(Failure::usage(format!("{flag} `{shown}` is not a header name (e.g. X-Forwarded-User)"))),
    }
}

/// The value of the header `name` when the request carries it exactly once (a proxy that
/// appended its own to a client's would leave two: trusted neither).
fn single<'a>(parts: &'a axum::http::request::Parts, name: &axum::http::HeaderName) -> Option<&'a str> {
    let mut values = parts.headers.get_all(name).iter();
    let value = values.next()?;
    values.next().is_none().then(|| value.to_str().ok()).flatten()
}

/// The console's options: without a token it answers only to the address it listens on,
/// loopback names with its port, and the name `--bind` gave, if any; the trusted headers
/// `--reveal-header` and `--actor-header` name.
fn console_options(args: &ServeArgs, bind: &Bind, local: SocketAddr, token: Option<&str>) -> dlq_web::Options {
    let mut options = dlq_web::Options::default().allow_actions(args.allow_actions).bound_to(local);
    if let Some(name) = &bind.name {
        let host = name.rsplit_once(':').map_or(name.as_str(), |(host, _)| host);
        options = options.allow_host(format!("{host}:{}", local.port()));
    }
    if let Some(token) = token {
        options = options.token(token);
    }
    if let Some(Ok((name, value))) = args.reveal_header.as_deref().map(|h| trusted_header(h, true)) {
        options = options.reveal(move |parts| single(parts, &name) == Some(value.as_str()));
    }
    if let Some(Ok((name, _))) = args.actor_header.as_deref().map(|h| trusted_header(h, false)) {
        options = options.actor(move |parts| single(parts, &name).map(str::to_owned));
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
    let generated = (given_token(args).is_none() && !local.ip().is_loopback()).then(generate_token);
    let token = given_token(args).or(generated.as_deref());
    let options = console_options(args, &bind, local, token).background(background.clone());
    let ops = Ops { store, metrics, options: options.clone() };
    let beside = Router::new().route("/metrics", get(metrics_text)).route("/healthz", get(healthz)).with_state(ops);
    let app = dlq_web::harden(beside).merge(dlq_web::router(admin, options));
    let mode = if args.allow_actions { "actions enabled" } else { "read-only" };
    let reveal = if args.reveal_header.is_some() { ", reveal by --reveal-header" } else { "" };
    eprintln!("dlq console on http://{local}/ ({mode}{reveal}); /metrics, /healthz; Ctrl-C stops");
    if let Some(token) = &generated {
        eprintln!(
            "no --token given for a non-loopback address: this run's token is {token} (send `Authorization: \
             Bearer TOKEN` or open the console once with ?token=TOKEN); a new one each start, set --token or \
             DLQ_WEB_TOKEN to keep one"
        );
    }
    axum::serve(dlq_web::HardenedListener::new(listener), app)
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

/// `GET /healthz`: `dlq_core::observe::health` as JSON; 503 when the store does not answer.
/// No token (probes carry none), for a `Host` that is an IP address (load balancers and
/// kubelets probe by address) or one of the console's own names; another name is a 421, as
/// a page of another site rebinding its name to this address would send
/// ([`dlq_web::Options::accepts_probe`]).
async fn healthz(State(ops): State<Ops>, headers: HeaderMap) -> impl IntoResponse {
    let host = headers.get(header::HOST).map(|v| v.to_str().unwrap_or_default());
    if !ops.options.accepts_probe(host) {
        let why = "request refused: a health probe is answered for an IP address in Host, or the console's own name\n";
        return (StatusCode::MISDIRECTED_REQUEST, why.to_owned()).into_response();
    }
    let health = dlq_core::observe::health(ops.store.as_ref()).await;
    let status = if health.status == HealthStatus::Down { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
    (status, axum::Json(health)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(bind: &str, token: Option<&str>) -> ServeArgs {
        ServeArgs {
            bind: bind.to_owned(),
            token: token.map(str::to_owned),
            allow_actions: false,
            reveal_header: None,
            actor_header: None,
        }
    }

    #[test]
    fn a_name_is_resolved_and_the_console_answers_to_it() {
        let bind = check(&args("localhost:8080", None)).unwrap();
        assert!(bind.addr.ip().is_loopback() && bind.addr.port() == 8080, "{bind:?}");
        // A name of the operator's own (an /etc/hosts entry) is accepted as the Host it names.
        let named = Bind { addr: "127.0.0.1:0".parse().unwrap(), name: Some("dlq-box:0".into()) };
        let local = "127.0.0.1:41000".parse().unwrap();
        let options = console_options(&args("dlq-box:0", None), &named, local, None);
        assert!(options.accepts_host(Some("dlq-box:41000")) && options.accepts_host(Some("localhost:41000")));
        assert!(!options.accepts_host(Some("dlq-box:8080")) && !options.accepts_host(Some("evil.example:41000")));
        for malformed in ["localhost", "localhost:http", ":8080", "::1:8080", "localhost:70000"] {
            let err = check(&args(malformed, None)).unwrap_err();
            assert_eq!(err.code, crate::exit::USAGE, "{malformed}: {}", err.message);
        }
        let unknown = check(&args("no-such-host.invalid:8080", None)).unwrap_err();
        assert_eq!(unknown.code, crate::exit::ERROR, "{}", unknown.message);
    }

    /// `--token a` was accepted for `0.0.0.0`: a public bind takes 128 bits or more, or none
    /// (one is made); loopback takes any printable token.
    #[test]
    fn a_public_bind_takes_only_a_strong_token() {
        assert!(check(&args("127.0.0.1:8080", None)).is_ok());
        assert!(check(&args("[::1]:8080", None)).is_ok());
        assert!(check(&args("127.0.0.1:8080", Some("s3cret"))).is_ok(), "loopback: any token");
        assert!(check(&args("0.0.0.0:8080", None)).is_ok(), "none: one is made");
        assert!(check(&args("0.0.0.0:8080", Some(""))).is_ok(), "empty is none");
        for weak in [
            "a",
            "s3cret",
            "3f9c2a7e81d04b6f95e2c7a18d3b60f",      // 31 hex digits: 124 bits
            "Zq7-Lp2_Xw9rT4mK1vB8nC",               // 22 base64url characters: 132 bits, passes below
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", // one character
            "0123456789abcdef0123456789abcdef",     // a repeat
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ", // a sequence
        ] {
            let result = check(&args("0.0.0.0:8080", Some(weak)));
            if weak.starts_with("Zq7") {
                assert!(result.is_ok(), "{weak}");
                continue;
            }
            let err = result.unwrap_err();
            assert_eq!(err.code, crate::exit::USAGE, "{weak}");
            assert!(err.message.contains("128 bits"), "{weak}: {}", err.message);
            assert!(weak.len() < 8 || !err.message.contains(weak), "the token is never shown: {}", err.message);
        }
        assert!(check(&args("0.0.0.0:8080", Some("3f9c2a7e81d04b6f95e2c7a18d3b60f4"))).is_ok(), "32 hex digits");
        let spaced = check(&args("127.0.0.1:8080", Some("two words"))).unwrap_err();
        assert!(spaced.message.contains("printable ASCII"), "{}", spaced.message);
        let made = generate_token();
        assert!(made.len() == 64 && strong(&made).is_ok() && made != generate_token(), "{made}");
    }

    /// `--reveal-header NAME=VALUE` grants reveal to a request carrying that header once with
    /// exactly that value; `--actor-header` names its operator; both must be well formed.
    #[test]
    fn trusted_headers_are_parsed_and_matched_exactly() {
        let mut given = args("127.0.0.1:8080", None);
        given.reveal_header = Some("X-Dlq-Role=reveal".into());
        given.actor_header = Some("X-Forwarded-User".into());
        assert!(check(&given).is_ok());
        for bad in ["X-Dlq-Role", "X-Dlq-Role=", "bad name=reveal", "=reveal"] {
            given.reveal_header = Some(bad.into());
            assert_eq!(check(&given).unwrap_err().code, crate::exit::USAGE, "{bad}");
        }
        given.reveal_header = None;
        given.actor_header = Some("bad name".into());
        assert_eq!(check(&given).unwrap_err().code, crate::exit::USAGE);
        let request = |values: &[&str]| {
            let mut builder = axum::http::Request::get("/");
            for v in values {
                builder = builder.header("x-dlq-role", *v);
            }
            builder.body(()).unwrap().into_parts().0
        };
        let name = axum::http::HeaderName::from_static("x-dlq-role");
        assert_eq!(single(&request(&["reveal"]), &name), Some("reveal"));
        assert_eq!(single(&request(&["reveal", "viewer"]), &name), None, "two: trusted neither");
        assert_eq!(single(&request(&[]), &name), None);
    }
}
