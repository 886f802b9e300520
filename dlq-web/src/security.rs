//! The console's gate: its own `Host` (without a token), token, read-only mode, same-origin
//! `POST`s, and the security headers on every response.

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use crate::Console;
use crate::error::Failure;

/// No script at all, styles and images from the console only, forms post back to it, and no
/// framing.
pub(crate) const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; \
                              frame-ancestors 'none'; base-uri 'none'";

/// The cookie `?token=` sets, so a browser can use a console that requires a token.
const TOKEN_COOKIE: &str = "dlq_token";

/// The longest request target (path and query) the console reads: 32 KiB; a longer one is a
/// 414 that says so. Its own links carry stored text (a failure group's fingerprint, an event
/// type, of 10,000 characters in the hostile-row tests, percent-encoded), so the limit leaves
/// them room, below hyper's own 64 KiB.
pub const MAX_URI_BYTES: usize = 32 * 1024;

/// The most bytes of request header fields (names and values) the console reads: 32 KiB; more
/// is a 431 that says so.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// The most request header fields the console reads: 64; more is a 431 that says so.
pub const MAX_HEADERS: usize = 64;

/// Refuses a request whose target or header fields are past the console's limits
/// ([`MAX_URI_BYTES`], [`MAX_HEADER_BYTES`], [`MAX_HEADERS`]) with a short body saying which
/// (JSON under `/api/`), before anything else reads it.
pub(crate) async fn limits(request: Request, next: Next) -> Response {
    let original = request.extensions().get::<axum::extract::OriginalUri>().map(|o| &o.0);
    let uri = original.unwrap_or(request.uri());
    let target = uri.path_and_query().map_or(uri.path().len(), |pq| pq.as_str().len());
    let wants_json = crate::extract::is_api(request.uri().path());
    if target > MAX_URI_BYTES {
        let why =
            format!("the request's path and query are {target} bytes, past this console's limit of {MAX_URI_BYTES}");
        return Failure::new(StatusCode::URI_TOO_LONG, why).respond(wants_json);
    }
    let headers = request.headers();
    let bytes: usize = headers.iter().map(|(name, value)| name.as_str().len() + value.len()).sum();
    if headers.len() > MAX_HEADERS || bytes > MAX_HEADER_BYTES {
        let why = format!(
            "the request has {} header fields of {bytes} bytes, past this console's limit of {MAX_HEADERS} fields \
             and {MAX_HEADER_BYTES} bytes",
            headers.len()
        );
        return Failure::new(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, why).respond(wants_json);
    }
    next.run(request).await
}

/// Adds the security headers to every response, and a one-line body (its status) to an error
/// answered without one (a bare 405 of a route beside the console).
pub(crate) async fn headers(response: Response) -> Response {
    let mut response = with_body(response);
    let h = response.headers_mut();
    for (name, value) in HEADERS {
        h.insert(name, HeaderValue::from_static(value));
    }
    h.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

/// The security headers of every response (with `Cache-Control: no-store` unless a route
/// set its own).
pub(crate) const HEADERS: [(header::HeaderName, &str); 4] = [
    (header::CONTENT_SECURITY_POLICY, CSP),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "same-origin"),
];

/// An error response as it is when it has a body; else with its status as a line of text.
fn with_body(response: Response) -> Response {
    use axum::body::HttpBody as _;
    let status = response.status();
    let empty = response.body().size_hint().exact() == Some(0);
    if !(empty && (status.is_client_error() || status.is_server_error())) {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    let line = format!("{} {}\n", status.as_u16(), status.canonical_reason().unwrap_or("error"));
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    Response::from_parts(parts, axum::body::Body::from(line))
}

/// Checks the `Host` (without a token) or the token, then (for anything but `GET`/`HEAD`)
/// that actions are allowed and that the request comes from the console's own origin.
pub(crate) async fn guard(State(console): State<Console>, request: Request, next: Next) -> Response {
    let wants_json = crate::extract::is_api(request.uri().path());
    if let Err(why) = own_host(&console.options, &request) {
        return Failure::new(StatusCode::MISDIRECTED_REQUEST, why).respond(wants_json);
    }
    let mut set_cookie = None;
    if let Some(token) = &console.options.token {
        match presented_token(request.headers(), request.uri().query()) {
            Some(given) if token_matches(token, given.as_str()) => {
                set_cookie = token_in_query(request.uri().query()).filter(|q| token_matches(token, q));
            }
            _ => {
                let failure = Failure::new(
                    StatusCode::UNAUTHORIZED,
                    "this console needs its token: send `Authorization: Bearer TOKEN` or open it once with ?token=TOKEN",
                );
                return failure.respond(wants_json);
            }
        }
    }
    let mutating = !matches!(*request.method(), Method::GET | Method::HEAD);
    if mutating {
        // A reveal changes no row: the reveal hook decides, in a read-only console too.
        if !console.options.actions && !request.uri().path().ends_with("/reveal") {
            let failure = Failure::new(
                StatusCode::FORBIDDEN,
                "the console is read-only: actions are disabled (Options::allow_actions, `dlq serve --allow-actions`)",
            );
            return failure.respond(wants_json);
        }
        if let Err(why) = same_origin(request.headers()) {
            return Failure::new(StatusCode::FORBIDDEN, why).respond(wants_json);
        }
    }
    let (parts, body) = request.into_parts();
    let actor = console.actor_of(&parts).unwrap_or_else(|| console.admin.actor().to_owned());
    let original = parts.extensions.get::<axum::extract::OriginalUri>().map(|o| o.0.path().to_owned());
    let (method, path) = (parts.method.clone(), original.unwrap_or_else(|| parts.uri.path().to_owned()));
    let mut response = crate::extract::documented(next.run(Request::from_parts(parts, body)).await, wants_json).await;
    if response.status().is_server_error() {
        let why = response.extensions().get::<crate::error::Why>().map_or("", |w| w.0.as_str());
        crate::log::server_error(response.status().as_u16(), method.as_str(), &path, &actor, why);
    }
    if mutating && (response.status().is_success() || response.status().is_redirection()) {
        console.forget_snapshots();
    }
    if let Some(token) = set_cookie {
        remember_token(&mut response, &token);
    }
    response
}

/// Without a token, a request must name the console in its `Host` (and in its URI's
/// authority, when it has one: HTTP/2, or an absolute URI): else a web page whose name was
/// made to resolve to 127.0.0.1 could read and act through the operator's browser.
fn own_host(options: &crate::Options, request: &Request) -> Result<(), String> {
    if options.token.is_some() {
        return Ok(());
    }
    let header = request.headers().get(header::HOST).map(|v| v.to_str().unwrap_or("(not text)"));
    let authority = request.uri().authority().map(axum::http::uri::Authority::as_str);
    if header.is_none() && authority.is_none() {
        return Err("request refused: it names no Host, and this console answers only to its own address".into());
    }
    for host in [authority, header].into_iter().flatten() {
        if !options.accepts_host(Some(host)) {
            let expected = match options.bound {
                Some(addr) => format!("{addr}, or localhost, 127.0.0.1 or [::1] with port {}", addr.port()),
                None => "localhost, 127.0.0.1 or [::1]".to_owned(),
            };
            let host: String = host.chars().take(200).collect();
            return Err(format!(
                "request refused: it was sent to Host `{host}`, but this console answers only to {expected} \
                 (a page of another site can reach a local console by making its name resolve to this \
                 address). Open the console by its own address; to reach it by another name, set a token \
                 (Options::token, `dlq serve --token`) or allow that name (Options::allow_host)"
            ));
        }
    }
    Ok(())
}

/// The loopback names a browser always resolves to this machine (no DNS involved).
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// `Host` `host` names the console: a loopback name, the bound address (with its port when
/// `bound` is known; no port means 80) or one of `allowed` (`name` for any port,
/// `name:port`).
pub(crate) fn host_allowed(host: &str, bound: Option<SocketAddr>, allowed: &[String]) -> bool {
    let Some((name, port)) = split_host(host) else { return false };
    let port_ok = bound.is_none_or(|addr| port.unwrap_or(80) == addr.port());
    let loopback = LOOPBACK_NAMES.iter().any(|n| name.eq_ignore_ascii_case(n));
    let bound_ip = bound.is_some_and(|addr| match addr {
        SocketAddr::V4(v4) => name == v4.ip().to_string(),
        SocketAddr::V6(v6) => name.eq_ignore_ascii_case(&format!("[{}]", v6.ip())),
    });
    if (loopback || bound_ip) && port_ok {
        return true;
    }
    allowed.iter().filter_map(|a| split_host(a.trim())).any(|(allowed_name, allowed_port)| {
        name.eq_ignore_ascii_case(allowed_name) && allowed_port.is_none_or(|p| Some(p) == port)
    })
}

/// `Host` `host` may ask a health probe: an IP address, any port (load balancers and
/// kubelets probe by address; a page of another site can only send its own name, never an
/// address, so no DNS rebinding reads through it), or a name [`host_allowed`] allows.
pub(crate) fn probe_host_allowed(host: &str, bound: Option<SocketAddr>, allowed: &[String]) -> bool {
    let Some((name, _)) = split_host(host) else { return false };
    let bare = name.strip_prefix('[').and_then(|n| n.strip_suffix(']'));
    let ip = match bare {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => name.parse::<std::net::Ipv4Addr>().is_ok(),
    };
    ip || host_allowed(host, bound, allowed)
}

/// `name[:port]` or `[v6]:port` into the name (brackets kept) and the port; `None` when
/// malformed (an empty name, a port that is not a number, a bare IPv6 address).
fn split_host(host: &str) -> Option<(&str, Option<u16>)> {
    let (name, port) = if host.starts_with('[') {
        let end = host.find(']')? + 1;
        let rest = &host[end..];
        let port = if rest.is_empty() { None } else { Some(rest.strip_prefix(':')?) };
        (&host[..end], port)
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok()?),
        None => None,
    };
    (!name.is_empty()).then_some((name, port))
}

/// Constant-time comparison (the lengths may leak; the bytes do not).
pub(crate) fn token_matches(expected: &str, given: &str) -> bool {
    expected.as_bytes().ct_eq(given.as_bytes()).into()
}

/// The token a request presents: `Authorization: Bearer`, else the cookie, else `?token=`.
pub(crate) fn presented_token(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_owned());
    bearer.or_else(|| cookie(headers, TOKEN_COOKIE)).or_else(|| token_in_query(query))
}

fn token_in_query(query: Option<&str>) -> Option<String> {
    let query = query?;
    serde_urlencoded::from_str::<Vec<(String, String)>>(query)
        .ok()?
        .into_iter()
        .find_map(|(k, v)| (k == "token").then_some(v))
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('=').map(str::to_owned))
}

/// Sets the token cookie, so that links and forms work without `?token=` from then on.
fn remember_token(response: &mut Response, token: &str) {
    let cookie = format!("{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
}

/// A mutating request must come from the console's own origin: its `Origin` (or, without
/// one, its `Referer`) names the `Host` it was sent to; `Origin: null` (an opaque origin)
/// names none and is refused like any foreign one. A request with neither is accepted
/// only as JSON, which a browser sends cross-site only after a CORS preflight the console
/// never answers.
pub(crate) fn same_origin(headers: &HeaderMap) -> Result<(), String> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let origin = headers.get(header::ORIGIN).or_else(|| headers.get(header::REFERER));
    match origin {
        Some(origin) => {
            let origin = origin.to_str().unwrap_or("(not text)");
            let authority = origin.split_once("://").map_or("", |(_, rest)| rest);
            let authority = authority.split(['/', '?', '#']).next().unwrap_or_default();
            if !host.is_empty() && !authority.is_empty() && authority.eq_ignore_ascii_case(host) {
                return Ok(());
            }
            let origin: String = origin.chars().take(200).collect();
            let opaque = if origin == "null" {
                " (an opaque origin: a sandboxed frame, a file, a data: URL or a redirect from another site)"
            } else {
                ""
            };
            Err(format!("cross-origin request refused: it comes from `{origin}`{opaque}, not from this console"))
        }
        None if is_json(headers) => Ok(()),
        None => Err("request refused: a form post must carry an Origin or Referer header naming this console".into()),
    }
}

pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn same_origin_posts_pass_and_others_are_refused() {
        assert!(same_origin(&headers(&[("host", "h:1"), ("origin", "http://h:1")])).is_ok());
        assert!(same_origin(&headers(&[("host", "h:1"), ("referer", "http://h:1/dlq/events/3")])).is_ok());
        assert!(same_origin(&headers(&[("host", "h:1"), ("origin", "http://evil.example")])).is_err());
        assert!(same_origin(&headers(&[("host", "h:1"), ("origin", "http://h:1.evil.example")])).is_err());
        assert!(same_origin(&headers(&[("host", "h:1"), ("origin", "null")])).is_err());
        let null_json = headers(&[("host", "h:1"), ("origin", "null"), ("content-type", "application/json")]);
        assert!(same_origin(&null_json).unwrap_err().contains("opaque origin"), "null is a foreign origin");
        assert!(same_origin(&headers(&[("host", ""), ("origin", "http://")])).is_err());
        assert!(same_origin(&headers(&[("host", "h:1")])).is_err());
        assert!(same_origin(&headers(&[("host", "h:1"), ("content-type", "application/json")])).is_ok());
    }

    #[test]
    fn hosts_name_the_console_or_are_refused() {
        let bound: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        for ok in ["localhost:8080", "LOCALHOST:8080", "127.0.0.1:8080", "[::1]:8080"] {
            assert!(host_allowed(ok, Some(bound), &[]), "{ok}");
        }
        for refused in [
            "attacker.example:8080",
            "localhost:9090",
            "localhost",
            "localhost.:8080",
            "127.0.0.1.nip.io:8080",
            "127.0.0.2:8080",
            "[::1]",
            "::1:8080",
            "localhost:8080:1",
            "localhost:80a",
            ":8080",
            "",
        ] {
            assert!(!host_allowed(refused, Some(bound), &[]), "{refused}");
        }
        assert!(host_allowed("localhost", Some("127.0.0.1:80".parse().unwrap()), &[]), "no port means 80");
        assert!(host_allowed("[::2]:81", Some("[::2]:81".parse().unwrap()), &[]), "the bound address");
        assert!(host_allowed("10.0.0.7:81", Some("10.0.0.7:81".parse().unwrap()), &[]), "the bound address");
        assert!(host_allowed("localhost:1234", None, &[]) && !host_allowed("evil.example:1234", None, &[]));
        let allowed = ["dlq.example".to_owned(), "ops.example:8443".to_owned()];
        assert!(host_allowed("dlq.example:1", Some(bound), &allowed));
        assert!(host_allowed("ops.example:8443", Some(bound), &allowed));
        assert!(!host_allowed("ops.example:8444", Some(bound), &allowed));
        assert!(!host_allowed("x.dlq.example", Some(bound), &allowed));
    }

    #[test]
    fn probes_come_by_address_or_by_the_consoles_names() {
        let bound: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        for ok in ["10.0.0.7:8080", "10.0.0.7", "192.168.1.2:31000", "[fd00::7]:8080", "localhost:8080"] {
            assert!(probe_host_allowed(ok, Some(bound), &[]), "{ok}");
        }
        for refused in ["attacker.example", "attacker.example:8080", "10.0.0.7.nip.io:8080", "[fd00::7", "fd00::7", ""]
        {
            assert!(!probe_host_allowed(refused, Some(bound), &[]), "{refused}");
        }
        assert!(probe_host_allowed("dlq.internal:1", Some(bound), &["dlq.internal".to_owned()]));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(token_matches("s3cret", "s3cret"));
        assert!(!token_matches("s3cret", "s3cre"));
        assert!(!token_matches("s3cret", "s3cret!"));
        assert!(!token_matches("s3cret", ""));
    }
}
