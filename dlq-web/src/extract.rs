//! Extractors whose refusals say what was wrong in the console's own words: a path parameter
//! and a JSON body. Under `/api/` every refusal is `{"error": "..."}` (never axum's plain text,
//! never a Rust type name); elsewhere it is an HTML page. [`documented`] turns any other
//! error response (a 405, a form the page handlers could not read) into the same.

use axum::body::Bytes;
use axum::extract::path::ErrorKind;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::Response;
use serde::de::DeserializeOwned;

use crate::Console;
use crate::error::{ApiFailure, Failure};

/// Whether a request (its path inside the router) is one of the JSON API's.
pub(crate) fn is_api(path: &str) -> bool {
    path.starts_with("/api/")
}

/// A path parameter (`{id}`, `{fingerprint}`), or a 400 that names the bad value.
pub(crate) struct Param<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Param<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let api = is_api(parts.uri.path());
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(Self(value)),
            Err(rejection) => Err(path_failure(&rejection).respond(api)),
        }
    }
}

fn path_failure(rejection: &PathRejection) -> Failure {
    let status = rejection.status();
    let why = match rejection {
        PathRejection::FailedToDeserializePathParams(e) => match e.kind() {
            ErrorKind::ParseErrorAtKey { key, value, .. } => {
                format!("malformed path: {key} `{value}` is not a number (this path takes a numeric id)")
            }
            ErrorKind::ParseError { value, .. } | ErrorKind::ParseErrorAtIndex { value, .. } => {
                format!("malformed path: `{value}` is not a number (this path takes a numeric id)")
            }
            ErrorKind::InvalidUtf8InPathParam { key } => {
                format!("malformed path: {key} is not UTF-8 text once percent-decoded")
            }
            _ => "malformed path".to_owned(),
        },
        _ => "the path could not be read".to_owned(),
    };
    Failure::new(status, why)
}

/// A JSON request body of the API: `Content-Type: application/json` (else 415), within the
/// body limit (else 413), valid JSON (else 400), of the right shape (else 422, naming the
/// field and what it takes in JSON terms).
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequest<Console> for JsonBody<T> {
    type Rejection = ApiFailure;

    async fn from_request(request: Request, console: &Console) -> Result<Self, Self::Rejection> {
        if !crate::security::is_json(request.headers()) {
            return Err(Failure::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "send the body as JSON, with `Content-Type: application/json`",
            )
            .into());
        }
        let bytes = Bytes::from_request(request, console).await.map_err(|rejection| {
            let status = rejection.status();
            let why = if status == StatusCode::PAYLOAD_TOO_LARGE {
                format!("the body is larger than this console's limit of {} bytes", console.options.body_limit)
            } else {
                "the body could not be read".to_owned()
            };
            ApiFailure(Failure::new(status, why))
        })?;
        parse(&bytes).map(Self).map_err(ApiFailure)
    }
}

/// `bytes` as a `T` (an object's fields): 400 when not JSON, 422 when JSON of another shape.
fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Failure> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| Failure::bad_request(format!("the body is not valid JSON: {e}")))?;
    if !value.is_object() {
        let what = match value {
            serde_json::Value::Array(_) => "an array",
            serde_json::Value::String(_) => "a string",
            serde_json::Value::Number(_) => "a number",
            serde_json::Value::Bool(_) => "a boolean",
            _ => "null",
        };
        let why = format!("the body must be a JSON object, not {what}");
        return Err(Failure::new(StatusCode::UNPROCESSABLE_ENTITY, why));
    }
    serde_path_to_error::deserialize(value).map_err(|error| {
        let why = plain(&error.inner().to_string());
        let field = error.path().to_string();
        let why = if field == "." { why } else { format!("`{field}`: {why}") };
        Failure::new(StatusCode::UNPROCESSABLE_ENTITY, why)
    })
}

/// A serde message in JSON's terms: no Rust type (`struct BulkRequest`, `usize`), no
/// position (the body is one line for most clients).
pub(crate) fn plain(message: &str) -> String {
    let message = message.split(" at line ").next().unwrap_or(message);
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("expected ") {
        let (before, after) = rest.split_at(at + "expected ".len());
        out.push_str(before);
        let (replacement, used) = rust_type(after);
        out.push_str(replacement.unwrap_or_default());
        rest = &after[used..];
    }
    out.push_str(rest);
    out.replace("invalid type: map", "invalid type: object")
        .replace("invalid type: sequence", "invalid type: array")
        .replace("invalid type: unit value", "invalid type: null")
        .replace("invalid type: floating point", "invalid type: number")
        .replace("invalid type: integer", "invalid type: number")
}

/// The JSON name of a Rust type named at the start of `text` (after "expected "), and how
/// many bytes it took; `(None, 0)` when `text` names none.
fn rust_type(text: &str) -> (Option<&'static str>, usize) {
    let word_end = |from: usize| {
        text[from..].find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).map_or(text.len(), |n| from + n)
    };
    for (prefix, json) in [
        ("struct variant ", "a JSON object"),
        ("tuple variant ", "a JSON array"),
        ("tuple struct ", "a JSON array"),
        ("unit struct ", "null"),
        ("struct ", "a JSON object"),
        ("enum ", "one of the names this field takes"),
        ("a map", "a JSON object"),
        ("a sequence", "a JSON array"),
        ("unit", "null"),
    ] {
        if text.starts_with(prefix) {
            let mut end = if prefix.ends_with(' ') { word_end(prefix.len()) } else { prefix.len() };
            if prefix.ends_with(' ') && end == prefix.len() {
                continue;
            }
            if text[end..].starts_with(" with ") {
                // `struct X with 2 elements`: the count goes too.
                end = text[end..].find("element").map_or(end, |n| word_end(end + n));
            }
            return (Some(json), end);
        }
    }
    let end = word_end(0);
    let json = match &text[..end] {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number of 0 or more",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "char" => "a one-character string",
        _ => return (None, 0),
    };
    (Some(json), end)
}

/// Any other error response, as the console answers errors: `{"error": "..."}` under `/api/`,
/// an HTML page elsewhere (a plain-text refusal keeps its text, in JSON's terms).
pub(crate) async fn documented(response: Response, api: bool) -> Response {
    let status = response.status();
    let kind = response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let done = if api { kind.starts_with("application/json") } else { kind.starts_with("text/html") };
    if !(status.is_client_error() || status.is_server_error()) || done {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let mut why = plain(text.trim());
    if why.is_empty() {
        why = status.canonical_reason().unwrap_or("error").to_lowercase();
    }
    if status == StatusCode::METHOD_NOT_ALLOWED {
        // The router adds the `Allow` header to the answer after this.
        why = format!("{why}: this route takes the methods its Allow header names");
    }
    let mut answer = Failure::new(status, why).respond(api);
    if let Some(value) = parts.headers.get(header::ALLOW) {
        answer.headers_mut().insert(header::ALLOW, value.clone());
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_messages_name_no_rust_type() {
        for (message, expected) in [
            (
                "invalid type: string \"x\", expected struct BulkRequest at line 1 column 3",
                "invalid type: string \"x\", expected a JSON object",
            ),
            ("invalid type: sequence, expected struct ListFilter", "invalid type: array, expected a JSON object"),
            (
                "invalid type: string \"a\", expected usize",
                "invalid type: string \"a\", expected a whole number of 0 or more",
            ),
            ("invalid type: integer `5`, expected a string", "invalid type: number `5`, expected a string"),
            ("invalid type: map, expected i64", "invalid type: object, expected a whole number"),
            ("invalid length 1, expected tuple struct Pair with 2 elements", "invalid length 1, expected a JSON array"),
            ("unknown field `x`, expected one of `a`, `b`", "unknown field `x`, expected one of `a`, `b`"),
            (
                "invalid value: integer `-1`, expected u64",
                "invalid value: integer `-1`, expected a whole number of 0 or more",
            ),
        ] {
            assert_eq!(plain(message), expected, "{message}");
        }
    }
}
