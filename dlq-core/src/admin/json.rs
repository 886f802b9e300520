//! The JSON documents of the operator surface: a row as `dlq ls --json` prints it and the web
//! console's `GET /api/events` answers, a row in full as `dlq show --json` and
//! `GET /api/events/{id}`. One definition, so the CLI and the console cannot disagree.

use serde_json::{Value, json};

use super::{Detail, PatchOutcome};
use crate::record::{DeadLetter, Payload};

/// `value` as JSON text that is safe to print on a terminal and means the same document:
/// every [`is_hazard`](super::is_hazard) character (DEL, C1 controls such as U+009B, bidi
/// overrides such as U+202E, which serde_json leaves raw) written as its `\uXXXX` escape. A
/// hazard can only stand inside a JSON string, where the escape is the character itself, so
/// a parser reads back exactly the value. What `dlq … --json` prints and the console's JSON
/// API answers.
///
/// ```
/// let value = serde_json::json!({"reason": "a\u{9b}2Jb\u{202e}c"});
/// let text = dlq_core::admin::json::to_text(&value, false);
/// assert_eq!(text, r#"{"reason":"a\u009b2Jb\u202ec"}"#);
/// assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap(), value);
/// ```
pub fn to_text<T: serde::Serialize + ?Sized>(value: &T, pretty: bool) -> String {
    let text = if pretty { serde_json::to_string_pretty(value) } else { serde_json::to_string(value) };
    // Serializing a `Value` or a derived report cannot fail; an error still prints as JSON.
    let text = text.unwrap_or_else(|e| json!({ "error": e.to_string() }).to_string());
    if !text.chars().any(super::is_hazard) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if super::is_hazard(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// A payload as a JSON value: the document, or raw bytes as their lossy UTF-8 text; a
/// sealed payload as [`shown_payload`](crate::sealed::shown_payload) says, never its
/// ciphertext.
///
/// ```
/// use dlq_core::Payload;
/// assert_eq!(dlq_core::admin::json::payload(&Payload::from_bytes(b"not json")), "not json");
/// ```
pub fn payload(payload: &Payload) -> Value {
    if let Some(shown) = crate::sealed::shown_payload(payload) {
        return shown;
    }
    match payload {
        Payload::Json(value) => value.clone(),
        Payload::Raw { bytes, .. } => Value::String(String::from_utf8_lossy(bytes).into_owned()),
    }
}

/// A row's summary: `{id, event_type, version, handler, status, dead_reason, error_class,
/// error_kind, error_reason, fingerprint, retry_count, max_retries, redrive_count, retry_after,
/// created_at, updated_at}` (`version`: the version of the event's contract the payload is
/// written in).
///
/// ```
/// use dlq_core::{DeadLetter, ErrorClass, classify::FailureInfo, Payload};
/// let failure = FailureInfo::new(ErrorClass::Permanent, "BadCurrency", "currency".into(), vec![], None);
/// let row = DeadLetter::new(7, "payment", Payload::from_bytes(b"{}"), failure, chrono::Utc::now());
/// assert_eq!(dlq_core::admin::json::row(&row)["error_kind"], "BadCurrency");
/// assert_eq!(dlq_core::admin::json::row(&row)["version"], 1);
/// ```
pub fn row(l: &DeadLetter) -> Value {
    json!({
        "id": l.id, "event_type": l.event_type, "version": l.version, "handler": l.handler, "status": l.status,
        "dead_reason": l.dead_reason, "error_class": l.failure.class.as_str(), "error_kind": l.failure.kind,
        "error_reason": l.failure.reason, "fingerprint": l.failure.fingerprint, "retry_count": l.retry_count,
        "max_retries": l.max_retries, "redrive_count": l.redrive_count, "retry_after": l.retry_after,
        "created_at": l.created_at, "updated_at": l.updated_at,
    })
}

/// A row in full: [`row`] plus `{payload, payload_raw_hex, payload_note (why the payload is raw
/// bytes, [`Payload::raw_note`]), payload_truncated,
/// payload_original_len, payload_sha256, encrypted_with (the key id of a sealed row), error_chain, stacktrace, source, lease_owner,
/// dedupe_key, attempts: [{attempt, outcome, error_class, error_reason, owner, at}], audit:
/// [{id, action, actor, reason, diff, at}]}`.
pub fn detail(detail: &Detail) -> Value {
    let l = &detail.letter;
    let mut doc = row(l);
    let (raw_hex, truncation) = match &l.payload {
        Payload::Raw { bytes, truncated } => (Some(super::hex(bytes)), truncated.clone()),
        Payload::Json(_) => (None, None),
    };
    let encrypted_with = crate::sealed::sealed_key(&l.payload);
    let extra = json!({
        "payload": payload(&l.payload), "payload_raw_hex": raw_hex, "payload_note": l.payload.raw_note(),
        "encrypted_with": encrypted_with,
        "payload_truncated": truncation.is_some(),
        "payload_original_len": truncation.as_ref().map(|t| t.original_len),
        "payload_sha256": truncation.map(|t| t.original_sha256),
        "error_chain": l.failure.chain,
        "stacktrace": l.failure.stacktrace.as_deref().map(crate::sealed::shown_text), "source": l.source,
        "lease_owner": l.lease_owner, "dedupe_key": l.dedupe_key,
        "attempts": detail.attempts.iter().map(|a| json!({
            "attempt": a.attempt, "outcome": a.outcome, "error_class": a.error_class,
            "error_reason": a.error_reason, "owner": a.owner, "at": a.at,
        })).collect::<Vec<_>>(),
        "audit": detail.audit.iter().map(|a| json!({
            "id": a.id, "action": a.action, "actor": a.actor, "reason": a.reason, "diff": a.diff, "at": a.at,
        })).collect::<Vec<_>>(),
    });
    if let (Some(doc), Value::Object(extra)) = (doc.as_object_mut(), extra) {
        doc.extend(extra);
    }
    doc
}

/// What a patch or an undo did: `{id, audit_id, old, new}`.
pub fn patched(outcome: &PatchOutcome) -> Value {
    json!({ "id": outcome.id, "audit_id": outcome.audit_id, "old": payload(&outcome.old), "new": payload(&outcome.new) })
}
