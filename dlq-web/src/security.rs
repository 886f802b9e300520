//! The console's gate: token, read-only mode, same-origin `POST`s, and the security headers
//! on every response.

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

/// Checks the token, then (for anything but `GET`/`HEAD`) that actions are allowed and that
/// the request comes from the console's own origin.
pub(crate) async fn guard(State(console): State<Console>, request: Request, next: Next) -> Response {
    let wants_json = request.uri().path().starts_with("/api/");
    let mut set_cookie = None;
    if let Some(token) = &console.options.token {
        match presented_token(&request) {
            Some(given) if token_matches(token, given.as_str()) => {
                set_cookie = token_in_query(&request).filter(|q| token_matches(token, q));
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
        if !console.options.actions {
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
    let mut response = next.run(request).await;
    if mutating && (response.status().is_success() || response.status().is_redirection()) {
        console.forget_snapshots();
    }
    if let Some(token) = set_cookie {
        remember_token(&mut response, &token);
    }
    response
}

/// Constant-time comparison (the lengths may leak; the bytes do not).
pub(crate) fn token_matches(expected: &str, given: &str) -> bool {
    expected.as_bytes().ct_eq(given.as_bytes()).into()
}

fn presented_token(request: &Request) -> Option<String> {
    let headers = request.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_owned());
    bearer.or_else(|| cookie(headers, TOKEN_COOKIE)).or_else(|| token_in_query(request))
}

fn token_in_query(request: &Request) -> Option<String> {
    let query = request.uri().query()?;
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

fn is_json(headers: &HeaderMap) -> bool {
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
    fn tokens_compare_whole() {
        assert!(token_matches("s3cret", "s3cret"));
        assert!(!token_matches("s3cret", "s3cre"));
        assert!(!token_matches("s3cret", "s3cret!"));
        assert!(!token_matches("s3cret", ""));
    }
}
