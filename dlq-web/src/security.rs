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

/// Adds the security headers to every response.
pub(crate) async fn headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
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
/// one, its `Referer`) names the `Host` it was sent to. A request with neither is accepted
/// only as JSON, which a browser sends cross-site only after a CORS preflight the console
/// never answers.
pub(crate) fn same_origin(headers: &HeaderMap) -> Result<(), String> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let origin = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .and_then(|v| v.to_str().ok())
        .filter(|v| *v != "null");
    match origin {
        Some(origin) => {
            let authority = origin.split_once("://").map_or("", |(_, rest)| rest);
            let authority = authority.split(['/', '?', '#']).next().unwrap_or_default();
            if !host.is_empty() && authority.eq_ignore_ascii_case(host) {
                Ok(())
            } else {
                Err(format!("cross-origin request refused: it comes from `{origin}`, not from this console"))
            }
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
    fn tokens_compare_whole() {
        assert!(token_matches("s3cret", "s3cret"));
        assert!(!token_matches("s3cret", "s3cre"));
        assert!(!token_matches("s3cret", "s3cret!"));
        assert!(!token_matches("s3cret", ""));
    }
}
