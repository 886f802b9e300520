//! The page layout and the pieces pages share: links under the router's prefix, statuses,
//! times, highlighted JSON, payloads and diffs. Everything goes through maud, which escapes
//! markup; stored text goes through [`text`] or [`line`] too, which escape what markup
//! escaping leaves (control characters, bidi overrides).

use std::borrow::Cow;

use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use dlq_core::{Payload, Status};
use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

/// Where the router is nested (`/dlq`, or empty), from the original and the nested URI.
#[derive(Debug, Clone)]
pub(crate) struct Base(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for Base {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let inner = parts.uri.path().to_owned();
        let original = parts.extensions.get::<OriginalUri>().map_or_else(|| inner.clone(), |o| o.0.path().to_owned());
        let base = original
            .strip_suffix(inner.as_str())
            .map(str::to_owned)
            .or_else(|| (inner == "/").then(|| original.trim_end_matches('/').to_owned()))
            .unwrap_or_default();
        Ok(Self(base))
    }
}

impl Base {
    /// The URL of a console path (`/events`), under the prefix. A value from the store goes
    /// in through [`segment`] (a path) or [`crate::filter::encode`] (a query), never as it is.
    pub(crate) fn url(&self, path: &str) -> String {
        if path == "/" && !self.0.is_empty() { self.0.clone() } else { format!("{}{path}", self.0) }
    }

    /// The URL of failure group `fingerprint`'s page (`suffix` empty) or of an action on it
    /// (`/patch`), with `query` (escaped): the fingerprint as one escaped path segment
    /// (`/groups/{fingerprint}`), or, when no path segment can carry it (empty, `.` and `..`,
    /// which a browser resolves away), as the `group` of `/group?group=`.
    pub(crate) fn group(&self, fingerprint: &str, suffix: &str, query: &[(&str, String)]) -> String {
        let mut pairs = query.to_vec();
        let path = if matches!(fingerprint, "" | "." | "..") {
            pairs.retain(|(k, _)| *k != "group");
            pairs.insert(0, ("group", fingerprint.to_owned()));
            format!("/group{suffix}")
        } else {
            format!("/groups/{}{suffix}", segment(fingerprint))
        };
        let url = self.url(&path);
        if pairs.is_empty() { url } else { format!("{url}?{}", crate::filter::encode(&pairs)) }
    }
}

/// What a path segment keeps as it is: RFC 3986's unreserved characters. Everything else
/// (`/`, `?`, `#`, `%`, spaces, quotes, controls, non-ASCII) is percent-encoded, so a value
/// stays one segment and decodes back to itself.
const SEGMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// `value` as one path segment, percent-encoded (its UTF-8 bytes).
pub(crate) fn segment(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, SEGMENT).to_string()
}

/// A character a page never shows as it is ([`dlq_core::admin::is_hazard`]): a browser draws
/// most controls as nothing, so a reason would look like another and a copied value would
/// carry them along.
pub(crate) use dlq_core::admin::is_hazard as hazard;

/// Stored text as a page shows it: each [`hazard`] as its escape, `\u001b` (as JSON writes
/// it), so that it is seen and nothing it would do is done; newlines and tabs kept. JSON text
/// stays JSON (and the same value): a hazard in it can only be inside a string, where the
/// escape means the character itself (serde_json leaves DEL, C1 and bidi characters raw).
pub(crate) fn text(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// Stored text on one line: as [`text`], and newlines and tabs as spaces.
pub(crate) fn line(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

fn escape(text: &str, one_line: bool) -> Cow<'_, str> {
    let blank = |c: char| one_line && matches!(c, '\n' | '\t');
    if !text.chars().any(|c| hazard(c) || blank(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if blank(c) || (one_line && c == '\r') {
            out.push(' ');
        } else if hazard(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The page around `body`: navigation, the stylesheet, an optional meta refresh (no script).
pub(crate) fn page(base: &Base, title: &str, refresh: Option<u32>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(seconds) = refresh.filter(|s| *s > 0) {
                    meta http-equiv="refresh" content=(seconds);
                }
                title { "dlq · " (line(title)) }
                link rel="stylesheet" href=(base.url("/assets/console.css"));
            }
            body {
                header.top {
                    a.brand href=(base.url("/")) { "dlq" }
                    nav {
                        a href=(base.url("/")) { "Overview" }
                        a href=(base.url("/groups")) { "Failure groups" }
                        a href=(base.url("/events")) { "Events" }
                        a href=(base.url("/api/openapi.json")) { "API" }
                    }
                }
                main { h1 { (line(title)) } (body) }
            }
        }
    }
}

/// `GET /assets/console.css`.
pub(crate) async fn stylesheet() -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/css; charset=utf-8"), (header::CACHE_CONTROL, "public, max-age=3600")],
        include_str!("../assets/console.css"),
    )
}

pub(crate) fn time(at: DateTime<Utc>) -> Markup {
    html! { time datetime=(at.to_rfc3339()) { (at.format("%Y-%m-%d %H:%M:%S")) } }
}

pub(crate) fn status(status: Status) -> Markup {
    let class = match status {
        Status::FailedPermanently => "st st-dead",
        Status::Pending | Status::Processing => "st st-wait",
        Status::Succeeded => "st st-ok",
        Status::Discarded => "st st-gone",
    };
    html! { span class=(class) { (status.as_str()) } }
}

/// A JSON document, pretty-printed with a class per token kind (strings, numbers, keys …).
pub(crate) fn json(value: &Value) -> Markup {
    html! { pre.json { code { (json_node(value, 0)) } } }
}

fn json_node(value: &Value, depth: usize) -> Markup {
    let pad = "  ".repeat(depth + 1);
    let close = "  ".repeat(depth);
    match value {
        Value::Null => html! { span.j-null { "null" } },
        Value::Bool(b) => html! { span.j-bool { (b) } },
        Value::Number(n) => html! { span.j-num { (n) } },
        Value::String(s) => html! { span.j-str { (text(&Value::String(s.clone()).to_string())) } },
        Value::Array(items) if items.is_empty() => html! { "[]" },
        Value::Object(map) if map.is_empty() => html! { "{}" },
        Value::Array(items) => html! {
            "[\n"
            @for (i, item) in items.iter().enumerate() {
                (pad) (json_node(item, depth + 1)) @if i + 1 < items.len() { "," } "\n"
            }
            (close) "]"
        },
        Value::Object(map) => html! {
            "{\n"
            @for (i, (key, item)) in map.iter().enumerate() {
                (pad) span.j-key { (text(&Value::String(key.clone()).to_string())) } ": " (json_node(item, depth + 1))
                @if i + 1 < map.len() { "," } "\n"
            }
            (close) "}"
        },
    }
}

/// A payload: highlighted JSON, or raw bytes as hex and lossy text, with truncation facts.
pub(crate) fn payload(payload: &Payload) -> Markup {
    if let Some(key) = dlq_core::sealed::sealed_key(payload) {
        return html! {
            p.muted { (dlq_core::sealed::placeholder(key)) }
            @if let Some(clear) = dlq_core::sealed::clear_fields(payload) {
                h3 { "In clear" }
                (json(&Value::Object(clear.clone())))
            }
        };
    }
    match payload {
        Payload::Json(value) => json(value),
        Payload::Raw { bytes, truncated } => html! {
            @if let Some(t) = truncated {
                p.warn {
                    "Truncated: " (bytes.len()) " of " (t.original_len) " bytes kept; original SHA-256 "
                    code { (t.original_sha256) }
                }
            }
            p { "Raw bytes (" (bytes.len()) "), not JSON:" }
            @if let (None, Some(note)) = (truncated, payload.raw_note()) {
                p.warn { "Why: " (note) }
            }
            h3 { "Hex" }
            pre.hex { (hex(bytes)) }
            h3 { "Text (lossy UTF-8)" }
            pre { (lossy(bytes)) }
        },
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            out.push(if i % 16 == 0 { '\n' } else { ' ' });
        }
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn lossy(bytes: &[u8]) -> String {
    text(&String::from_utf8_lossy(bytes)).into_owned()
}

/// One change between two JSON documents, at a JSON Pointer.
#[derive(Debug, PartialEq)]
pub(crate) enum Change {
    Added(String, Value),
    Removed(String, Value),
    Replaced(String, Value, Value),
}

/// The changes from `old` to `new`, path by path (objects by key, arrays by index).
pub(crate) fn diff(old: &Value, new: &Value) -> Vec<Change> {
    let mut out = Vec::new();
    walk(String::new(), old, new, &mut out);
    out
}

fn walk(path: String, old: &Value, new: &Value, out: &mut Vec<Change>) {
    let child = |key: &str| format!("{path}/{}", key.replace('~', "~0").replace('/', "~1"));
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                match b.get(k) {
                    Some(vb) => walk(child(k), va, vb, out),
                    None => out.push(Change::Removed(child(k), va.clone())),
                }
            }
            for (k, vb) in b.iter().filter(|(k, _)| !a.contains_key(*k)) {
                out.push(Change::Added(child(k), vb.clone()));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                let path = child(&i.to_string());
                match (a.get(i), b.get(i)) {
                    (Some(va), Some(vb)) => walk(path, va, vb, out),
                    (Some(va), None) => out.push(Change::Removed(path, va.clone())),
                    (None, Some(vb)) => out.push(Change::Added(path, vb.clone())),
                    (None, None) => {}
                }
            }
        }
        _ if old != new => {
            out.push(Change::Replaced(if path.is_empty() { "/".into() } else { path }, old.clone(), new.clone()))
        }
        _ => {}
    }
}

/// The changes as a table.
pub(crate) fn diff_table(changes: &[Change]) -> Markup {
    html! {
        @if changes.is_empty() {
            p { "No change." }
        } @else {
            table.diff {
                thead { tr { th { "path" } th { "before" } th { "after" } } }
                tbody {
                    @for change in changes {
                        @match change {
                            Change::Added(p, v) => tr.add { td { code { (line(p)) } } td { "—" } td { (value(v)) } },
                            Change::Removed(p, v) => tr.del { td { code { (line(p)) } } td { (value(v)) } td { "—" } },
                            Change::Replaced(p, a, b) => tr.chg { td { code { (line(p)) } } td { (value(a)) } td { (value(b)) } },
                        }
                    }
                }
            }
        }
    }
}

/// One JSON value of a diff, compact, escaped as [`text`].
fn value(value: &Value) -> Markup {
    html! { code { (text(&value.to_string())) } }
}

/// A change of payload that is not JSON to JSON: the lengths, the first byte that differs,
/// and both sides (JSON, or hex).
pub(crate) fn bytes_change(old: &Payload, new: &Payload) -> Markup {
    let (a, b) = (old.to_bytes(), new.to_bytes());
    let first = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or_else(|| a.len().min(b.len()));
    let side = |p: &Payload| match p {
        Payload::Json(value) => json(value),
        Payload::Raw { bytes, .. } => html! { pre.hex { (hex(bytes)) } },
    };
    html! {
        p { (a.len()) " bytes before, " (b.len()) " after; the first difference is at byte " (first) "." }
        table.diff {
            thead { tr { th { "before" } th { "after" } } }
            tbody { tr.chg { td { (side(old)) } td { (side(new)) } } }
        }
    }
}

/// The payload as the JSON value the editor starts from (raw bytes as their lossy text).
pub(crate) fn payload_value(payload: &Payload) -> Value {
    dlq_core::admin::json::payload(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_names_each_changed_path() {
        let old = json!({"currency": "USD ", "items": [1, 2], "gone": true});
        let new = json!({"currency": "USD", "items": [1], "new/key": 1});
        assert_eq!(
            diff(&old, &new),
            vec![
                Change::Replaced("/currency".into(), json!("USD "), json!("USD")),
                Change::Removed("/gone".into(), json!(true)),
                Change::Removed("/items/1".into(), json!(2)),
                Change::Added("/new~1key".into(), json!(1)),
            ]
        );
    }

    #[test]
    fn segments_and_group_urls_escape_everything_but_unreserved() {
        assert_eq!(segment("../../events/1?x="), "..%2F..%2Fevents%2F1%3Fx%3D");
        assert_eq!(segment("a/b#c"), "a%2Fb%23c");
        assert_eq!(segment("%2e%2e"), "%252e%252e");
        assert_eq!(segment("a b\"\u{1}<é"), "a%20b%22%01%3C%C3%A9");
        let base = Base("/dlq".into());
        assert_eq!(base.group("ab12", "", &[]), "/dlq/groups/ab12");
        assert_eq!(base.group("a/b", "/patch", &[]), "/dlq/groups/a%2Fb/patch");
        assert_eq!(base.group("..", "", &[("after", "7".into())]), "/dlq/group?group=..&after=7");
        assert_eq!(base.group("", "/patch", &[]), "/dlq/group/patch?group=");
    }

    #[test]
    fn controls_and_bidi_characters_show_as_escapes() {
        let hostile = "a\u{1b}[2J\u{7}b\r\n\tc\u{7f}\u{85}\u{9b}d\u{202e}e\u{2066}f\u{200f}\u{61c}";
        assert_eq!(
            text(hostile),
            "a\\u001b[2J\\u0007b\\u000d\n\tc\\u007f\\u0085\\u009bd\\u202ee\\u2066f\\u200f\\u061c"
        );
        assert_eq!(line("one\ntwo\r\tthree\u{1}"), "one two  three\\u0001");
        assert!(matches!(text("plain ünïcode → fine\n"), Cow::Borrowed(_)));
        // JSON stays the same JSON: serde_json leaves DEL, C1 and bidi characters raw.
        let value = json!({"k\u{202e}\\": ["\u{7f}\u{85}\\\u{202e}", "\u{1b}"]});
        let shown = text(&serde_json::to_string_pretty(&value).unwrap()).into_owned();
        assert!(!shown.chars().any(hazard), "{shown}");
        assert_eq!(serde_json::from_str::<Value>(&shown).unwrap(), value);
        let html = json(&value).into_string();
        assert!(html.contains("\\u202e") && !html.contains('\u{202e}'), "{html}");
    }

    #[test]
    fn hostile_strings_are_escaped() {
        let html = json(&json!({"<b>": "<script>alert(1)</script>"})).into_string();
        assert!(!html.contains("<script>") && html.contains("&lt;script&gt;"), "{html}");
        let raw = payload(&Payload::from_bytes(b"\"><img src=x onerror=alert(1)>")).into_string();
        assert!(!raw.contains("<img") && raw.contains("&lt;img"), "{raw}");
    }
}
