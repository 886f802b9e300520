//! A stored JSON column as both stores read it ([`StoredJson`]): the document when serde reads
//! it, its text otherwise. PostgreSQL's `jsonb` and SQLite's `json_valid` accept documents serde
//! does not: numbers outside `f64` (`1e400`), nesting past serde's recursion limit of 128,
//! invalid UTF-8 in a SQLite string. One such row must not fail a list, a page or a bulk
//! action over many, so each column says what it shows instead (a payload: its text, raw).

use std::collections::BTreeMap;

use dlq_core::{Payload, store::Truncation};
use serde_json::Value;

/// A stored JSON value: parsed once from the bytes the database sends; only a value serde
/// refuses is copied, as text.
pub(crate) enum StoredJson {
    /// The document.
    Read(Value),
    /// A document serde cannot read.
    Unread {
        /// Its text, as the database holds it (PostgreSQL writes `1e400` as 1 and 400 zeros).
        text: Vec<u8>,
        /// serde's error (it quotes no byte of the text).
        why: String,
    },
}

impl StoredJson {
    /// The document in `text`, or `text` itself with serde's reason.
    pub(crate) fn parse(text: &[u8]) -> Self {
        match serde_json::from_slice(text) {
            Ok(document) => Self::Read(document),
            Err(e) => Self::Unread { text: text.to_vec(), why: e.to_string() },
        }
    }

    /// The document, or `None` when serde cannot read it.
    pub(crate) fn read(self) -> Option<Value> {
        self.read_or_why().ok()
    }

    /// The document, or why serde cannot read it.
    pub(crate) fn read_or_why(self) -> Result<Value, String> {
        match self {
            Self::Read(value) => Ok(value),
            Self::Unread { why, .. } => Err(why),
        }
    }

    /// The document, or a JSON string of the text when serde cannot read it (lossy UTF-8,
    /// NUL-free, so that it can be written back to a `jsonb` column): an audit diff.
    pub(crate) fn into_value(self) -> Value {
        match self {
            Self::Read(value) => value,
            Self::Unread { text, .. } => Value::String(String::from_utf8_lossy(&text).replace('\0', "\u{fffd}")),
        }
    }

    /// An error chain: its strings (other items as their JSON text), or one line that says
    /// why the stored chain could not be read.
    pub(crate) fn into_chain(self) -> Vec<String> {
        match self {
            Self::Read(Value::Array(items)) => {
                items.into_iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)).collect()
            }
            Self::Read(_) => Vec::new(),
            Self::Unread { why, .. } => vec![format!("(the stored error chain is not JSON serde reads: {why})")],
        }
    }

    /// Source headers: none when they are of another shape or cannot be read.
    pub(crate) fn into_headers(self) -> BTreeMap<String, String> {
        self.read().and_then(|value| serde_json::from_value(value).ok()).unwrap_or_default()
    }
}

/// The payload columns as read: the raw bytes when there are any (with the truncation facts),
/// else the JSON document; a document serde cannot read is its text, raw
/// ([`Payload::raw_note`] says why).
pub(crate) fn payload(json: Option<StoredJson>, raw: Option<Vec<u8>>, truncation: Option<Truncation>) -> Payload {
    match (raw, json) {
        (Some(bytes), _) => Payload::Raw { bytes, truncated: truncation },
        (None, Some(StoredJson::Read(value))) => Payload::Json(value),
        (None, Some(StoredJson::Unread { text, .. })) => Payload::Raw { bytes: text, truncated: None },
        (None, None) => Payload::Json(Value::Null),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_serde_cannot_read_is_kept_as_text() {
        let far = format!("{{\"n\": 1{}}}", "0".repeat(400));
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        for text in [far.as_bytes(), deep.as_bytes(), b"[\"\xff\"]"] {
            let payload = payload(Some(StoredJson::parse(text)), None, None);
            assert_eq!(payload, Payload::Raw { bytes: text.to_vec(), truncated: None });
            assert!(payload.raw_note().is_some());
        }
        assert_eq!(payload(Some(StoredJson::parse(b"[1e3]")), None, None), Payload::Json(serde_json::json!([1000.0])));
        assert_eq!(StoredJson::parse(b"[1e400]").into_chain().len(), 1);
        assert!(StoredJson::parse(b"{\"a\": 1e400}").into_headers().is_empty());
    }
}
