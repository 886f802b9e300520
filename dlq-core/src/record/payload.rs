//! The stored event ([`Payload`]), the store's size limit, and what is kept of an event over
//! it ([`Truncation`]).

use serde::Serialize;

/// The largest payload a store keeps, in bytes (64 MiB): the hard limit.
///
/// Below it, a payload is stored whole, so a retry or a redrive sees exactly the event the
/// handler saw. Above it, a store keeps only the first bytes with the original's length and
/// SHA-256, and parks the row dead with [`DeadReason::TooLarge`](crate::adapter::DeadReason::TooLarge)
/// (never claimed for a retry it cannot succeed at); the live path reports that as
/// [`HandlerError::TooLarge`](crate::HandlerError::TooLarge), so the caller knows the event is
/// not saved. The live path and a [`Dispatcher`](crate::adapter::Dispatcher) measure and cut the event
/// themselves, before they call the store, against the store's own
/// `max_payload_bytes` (see [`Truncation`] for
/// which bytes are measured and hashed). Why 64 MiB: PostgreSQL's `jsonb` holds at most 255 MiB and `bytea` (and one
/// protocol message) 1 GiB; 64 MiB leaves room for a group-commit batch and for a retrier
/// that claims a batch of such rows into memory, and is above every broker's default
/// message limit (Kafka and NATS: 1 MiB). SQLite's limit is 1 GB per value.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 64 * 1024 * 1024;

/// How many of its first bytes a payload over the store's limit keeps (64 KiB, or the limit
/// when that is lower): enough for an operator to see what the event was, with its length and
/// SHA-256 beside them. Not more: the event is not saved either way (a cut payload can be
/// neither retried nor redriven), and writing tens of mebibytes of a preview would make the
/// `TooLarge` answer wait on the database (a 64 MiB row takes seconds to write), where the
/// caller needs it within the park timeout.
pub const TOO_LARGE_PREVIEW_BYTES: usize = 64 * 1024;

/// The bytes a payload over a limit of `max_bytes` keeps.
const fn preview_len(max_bytes: usize) -> usize {
    if max_bytes < TOO_LARGE_PREVIEW_BYTES { max_bytes } else { TOO_LARGE_PREVIEW_BYTES }
}

/// The stored event: JSON when it is valid JSON that PostgreSQL's JSONB accepts, raw bytes
/// otherwise (not JSON, JSON containing `\u0000`, nesting beyond serde's limit, truncated).
///
/// ```
/// use dlq_core::Payload;
///
/// assert!(matches!(Payload::from_bytes(br#"{"amount":10}"#), Payload::Json(_)));
/// assert!(matches!(Payload::from_bytes(b"\xff not json"), Payload::Raw { .. }));
/// assert!(matches!(Payload::from_bytes(br#"{"a":"\u0000"}"#), Payload::Raw { .. }));
///
/// // Over a store's limit only the first bytes are kept, with the original's length and hash.
/// let cut = Payload::from_bytes(&[b'x'; 100]).fit(10);
/// assert!(cut.is_truncated());
/// assert_eq!(cut.len(), 10);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// A JSON document, stored in the `payload` JSONB column.
    Json(serde_json::Value),
    /// Bytes stored in the `payload_raw` bytea column.
    Raw {
        /// The bytes kept (all of them, unless `truncated` says otherwise).
        bytes: Vec<u8>,
        /// Set when the original was over the size limit.
        truncated: Option<Truncation>,
    },
}

/// What is kept of a payload that was cut to the size limit.
///
/// The length and hash are those of the original's bytes, so that a copy kept elsewhere
/// (a broker's dead-letter topic, object storage) can be matched to the row:
/// - the bytes a [`Dispatcher`](crate::adapter::Dispatcher) was given, exactly as given
///   ([`Payload::from_bytes_within`]);
/// - for the event of a `#[dead_letter]` handler, its compact JSON serialization,
///   `serde_json::to_vec(&event)`: fields in the order its `Serialize` writes them, no
///   whitespace ([`Payload::from_event_within`]);
/// - for raw bytes a store cuts, those bytes; for a [`Payload::Json`] a store cuts,
///   `serde_json::to_vec(&value)` of the value (object keys in the value's order: sorted,
///   unless serde_json's `preserve_order` feature is on).
///
/// ```
/// use dlq_core::Payload;
///
/// let input = br#"{"z": 1, "blob": "a long event"}"#; // as a broker delivered it
/// let Payload::Raw { bytes, truncated: Some(t) } = Payload::from_bytes_within(input, 8) else { panic!() };
/// assert_eq!((bytes.as_slice(), t.original_len), (&input[..8], input.len() as u64));
/// assert_eq!(t.original_sha256.len(), 64); // the SHA-256 of `input`, lowercase hex
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    /// The original length in bytes.
    pub original_len: u64,
    /// The SHA-256 of the original's bytes (see above for which bytes), lowercase hex.
    pub original_sha256: String,
}

impl Payload {
    /// Classifies raw input bytes, all of them: valid JSON that JSONB accepts becomes
    /// [`Payload::Json`]; anything else is kept as [`Payload::Raw`].
    pub fn from_bytes(bytes: &[u8]) -> Self {
        match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(value) if nul_free(&value) => Self::Json(value),
            _ => Self::Raw { bytes: bytes.to_vec(), truncated: None },
        }
    }

    /// Classifies raw input bytes as a store with a limit of `max_bytes` keeps them: as
    /// [`from_bytes`](Self::from_bytes) when there are at most `max_bytes` of them; otherwise
    /// their first bytes ([`TOO_LARGE_PREVIEW_BYTES`], at most `max_bytes`), raw, with the length and SHA-256 of `bytes` themselves
    /// in [`Truncation`]. Whether they are too large is their length alone: nothing is parsed.
    ///
    /// ```
    /// use dlq_core::Payload;
    ///
    /// assert!(matches!(Payload::from_bytes_within(b"[1, 2]", 6), Payload::Json(_)));
    /// let cut = Payload::from_bytes_within(b"[1, 2, 3]", 6);
    /// assert_eq!((cut.is_truncated(), cut.len()), (true, 6));
    /// ```
    pub fn from_bytes_within(bytes: &[u8], max_bytes: usize) -> Self {
        match bytes.get(..max_bytes) {
            Some(kept) if kept.len() < bytes.len() => {
                let kept = &kept[..preview_len(max_bytes)];
                Self::Raw { bytes: kept.to_vec(), truncated: Some(truncation_of(bytes)) }
            }
            _ => Self::from_bytes(bytes),
        }
    }

    /// Serializes a typed event, whole; falls back to raw bytes where JSONB would reject it.
    ///
    /// # Errors
    /// The event's `Serialize` implementation failed.
    pub fn from_event<T: Serialize + ?Sized>(event: &T) -> Result<Self, serde_json::Error> {
        let value = serde_json::to_value(event)?;
        if nul_free(&value) {
            return Ok(Self::Json(value));
        }
        Ok(Self::Raw { bytes: serde_json::to_vec(&value)?, truncated: None })
    }

    /// Serializes a typed event as a store with a limit of `max_bytes` keeps it: as
    /// [`from_event`](Self::from_event) when its compact JSON serialization
    /// (`serde_json::to_vec(event)`) takes at most `max_bytes`; otherwise the first
    /// bytes of that serialization (at most `max_bytes`: [`TOO_LARGE_PREVIEW_BYTES`]), raw, with its length and SHA-256 in
    /// [`Truncation`]. The event is serialized once to measure it (and to hash it when it is
    /// too large), without holding more than `max_bytes` of it; this is what the live path
    /// of a `#[dead_letter]` handler parks, with the store's
    /// `max_payload_bytes`.
    ///
    /// # Errors
    /// The event's `Serialize` implementation failed.
    ///
    /// ```
    /// use dlq_core::Payload;
    ///
    /// #[derive(serde::Serialize)]
    /// struct Upload { name: &'static str, data: String }
    ///
    /// let upload = Upload { name: "scan", data: "x".repeat(100) };
    /// assert!(matches!(Payload::from_event_within(&upload, 1024)?, Payload::Json(_)));
    /// let Payload::Raw { bytes, truncated: Some(t) } = Payload::from_event_within(&upload, 16)? else { panic!() };
    /// assert_eq!(bytes, br#"{"name":"scan",""#); // the first 16 bytes of serde_json::to_vec(&upload)
    /// assert_eq!(t.original_len, serde_json::to_vec(&upload)?.len() as u64);
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn from_event_within<T: Serialize + ?Sized>(event: &T, max_bytes: usize) -> Result<Self, serde_json::Error> {
        let mut fitting = Fitting::new(max_bytes);
        serde_json::to_writer(&mut fitting, event)?;
        if fitting.hasher.is_some() {
            return Ok(fitting.into_cut());
        }
        let value = serde_json::to_value(event)?;
        if nul_free(&value) {
            return Ok(Self::Json(value));
        }
        Ok(Self::Raw { bytes: fitting.kept, truncated: None })
    }

    /// Classifies the compact JSON serialization of an event (`serde_json::to_vec`) as
    /// [`from_event_within`](Self::from_event_within) would the event.
    pub(crate) fn from_serialized_within(bytes: Vec<u8>, max_bytes: usize) -> Self {
        if bytes.len() <= max_bytes { Self::from_bytes(&bytes) } else { Self::cut_bytes(bytes, max_bytes) }
    }

    /// The first `max_bytes` of `bytes`, raw, with the length and SHA-256 of all of them.
    fn cut_bytes(mut bytes: Vec<u8>, max_bytes: usize) -> Self {
        let truncation = truncation_of(&bytes);
        bytes.truncate(preview_len(max_bytes));
        Self::Raw { bytes, truncated: Some(truncation) }
    }

    /// Whether this is JSON with a NUL character (`\u0000`) in a string or key: valid JSON,
    /// but PostgreSQL's `jsonb` cannot hold it, so a store keeps it as raw bytes.
    /// [`from_bytes`](Self::from_bytes) and [`from_event`](Self::from_event) already return
    /// such input as [`Payload::Raw`]; only a hand-built [`Payload::Json`] can hold one.
    ///
    /// ```
    /// use dlq_core::Payload;
    ///
    /// assert!(Payload::Json(serde_json::json!({"name": "a\u{0}b"})).has_nul_char());
    /// assert!(!Payload::from_bytes(br#"{"a":"\u0000"}"#).has_nul_char()); // already raw
    /// ```
    pub fn has_nul_char(&self) -> bool {
        matches!(self, Self::Json(value) if !nul_free(value))
    }

    /// The payload as a store keeps it under a limit of `max_bytes`: itself when it fits,
    /// otherwise its first bytes ([`TOO_LARGE_PREVIEW_BYTES`], at most `max_bytes`) as [`Payload::Raw`] with the original's length
    /// and SHA-256 in [`Truncation`].
    #[must_use]
    pub fn fit(self, max_bytes: usize) -> Self {
        if self.len_within(max_bytes).is_some() { self } else { self.cut(max_bytes) }
    }

    /// The first bytes ([`TOO_LARGE_PREVIEW_BYTES`], at most `max_bytes`); an already cut payload keeps its original's length and
    /// hash. JSON is serialized once, into the bytes kept and the hash, never whole in memory.
    pub(super) fn cut(self, max_bytes: usize) -> Self {
        match self {
            Self::Raw { mut bytes, truncated: Some(original) } => {
                bytes.truncate(preview_len(max_bytes));
                Self::Raw { bytes, truncated: Some(original) }
            }
            Self::Raw { bytes, truncated: None } => Self::cut_bytes(bytes, max_bytes),
            Self::Json(value) => {
                let mut fitting = Fitting::new(max_bytes);
                // Serializing a `Value` into memory cannot fail: its map keys are strings.
                let _ = serde_json::to_writer(&mut fitting, &value);
                fitting.into_cut()
            }
        }
    }

    /// `Ok` when a store with a limit of `max_bytes` keeps this payload whole; operator
    /// writes (a patch) check it rather than cut.
    ///
    /// # Errors
    /// [`Error::PayloadTooLarge`](crate::Error::PayloadTooLarge) when it is over the limit or
    /// already cut.
    ///
    /// ```
    /// let payload = dlq_core::Payload::from_bytes(b"[1,2,3]");
    /// assert!(payload.check_fits(7).is_ok());
    /// assert!(payload.check_fits(6).is_err());
    /// ```
    pub fn check_fits(&self, max_bytes: usize) -> Result<(), crate::Error> {
        let len = self.len();
        if len > max_bytes || self.is_truncated() {
            return Err(crate::Error::PayloadTooLarge { len, max: max_bytes });
        }
        Ok(())
    }

    /// The payload's size in bytes: the JSON text's length, or the raw bytes kept.
    ///
    /// ```
    /// assert_eq!(dlq_core::Payload::Json(serde_json::json!({"a": 1})).len(), 7); // {"a":1}
    /// ```
    pub fn len(&self) -> usize {
        match self {
            Self::Json(v) => json_len(v, usize::MAX).unwrap_or(usize::MAX),
            Self::Raw { bytes, .. } => bytes.len(),
        }
    }

    /// The payload's size in bytes ([`len`](Self::len)) when it is at most `max_bytes`,
    /// else `None`: JSON is measured only up to the limit, so deciding that a payload is too
    /// large takes time in proportion to the limit, not to the payload.
    ///
    /// ```
    /// let payload = dlq_core::Payload::Json(serde_json::json!({"a": 1})); // {"a":1}
    /// assert_eq!((payload.len_within(7), payload.len_within(6)), (Some(7), None));
    /// ```
    pub fn len_within(&self, max_bytes: usize) -> Option<usize> {
        match self {
            Self::Json(v) => json_len(v, max_bytes),
            Self::Raw { bytes, .. } => Some(bytes.len()).filter(|&len| len <= max_bytes),
        }
    }

    /// Whether the payload has no bytes (an empty raw payload; JSON never is).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload as bytes to deserialize from: the JSON text or the raw bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Self::Json(v) => serde_json::to_vec(v).unwrap_or_default(),
            Self::Raw { bytes, .. } => bytes.clone(),
        }
    }

    /// Why a payload is raw bytes rather than [`Payload::Json`], for an operator: cut to the
    /// size limit, not UTF-8, not JSON that serde reads (its message says why: a number out of
    /// `f64`'s range, nesting past its recursion limit of 128, …) or JSON holding `\u0000`.
    /// A store reads a stored JSON document it cannot parse as such raw bytes (its text), so
    /// that one row never breaks a list. `None` for JSON, and for raw bytes that are plain
    /// JSON. The note quotes no byte of the payload.
    ///
    /// ```
    /// use dlq_core::Payload;
    ///
    /// let far = Payload::Raw { bytes: format!("{{\"n\": 1{}}}", "0".repeat(400)).into_bytes(), truncated: None };
    /// assert!(far.raw_note().unwrap().contains("number out of range"));
    /// assert!(Payload::from_bytes(b"\xff").raw_note().unwrap().starts_with("not UTF-8"));
    /// assert_eq!(Payload::from_bytes(b"[1]").raw_note(), None);
    /// ```
    pub fn raw_note(&self) -> Option<String> {
        let Self::Raw { bytes, truncated } = self else { return None };
        if let Some(t) = truncated {
            return Some(format!("cut to the size limit: {} of {} bytes kept", bytes.len(), t.original_len));
        }
        if let Err(e) = std::str::from_utf8(bytes) {
            return Some(format!("not UTF-8 (invalid byte at offset {})", e.valid_up_to()));
        }
        match serde_json::from_slice::<serde_json::Value>(bytes) {
            Err(e) => Some(format!("not JSON that serde can read: {e}")),
            Ok(value) if !nul_free(&value) => {
                Some("JSON holding \\u0000, which PostgreSQL's jsonb cannot store".to_owned())
            }
            Ok(_) => None,
        }
    }

    /// Whether the stored payload is not the whole original.
    pub const fn is_truncated(&self) -> bool {
        matches!(self, Self::Raw { truncated: Some(_), .. })
    }
}

/// The length of `value`'s JSON text when it is at most `max`, counted without building it
/// and stopping past `max`.
pub(crate) fn json_len<T: serde::Serialize + ?Sized>(value: &T, max: usize) -> Option<usize> {
    struct Counter {
        len: usize,
        max: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.len = self.len.saturating_add(buf.len());
            if self.len > self.max {
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { len: 0, max };
    serde_json::to_writer(&mut counter, value).ok().map(|()| counter.len)
}

/// Serialized bytes as a store with a limit of `max` bytes keeps them: all of them while
/// there are at most `max`; past that, the first `max`, with the count and the SHA-256 of
/// all of them (hashed as they come, from the moment the limit is passed).
struct Fitting {
    max: usize,
    kept: Vec<u8>,
    len: u64,
    /// Set once the limit is passed.
    hasher: Option<sha2::Sha256>,
}

impl Fitting {
    fn new(max: usize) -> Self {
        Self { max, kept: Vec::new(), len: 0, hasher: None }
    }

    /// The first `max` bytes with the length and hash of all of them (whether or not they
    /// were over the limit).
    fn into_cut(self) -> Payload {
        use sha2::Digest;
        let Some(hasher) = self.hasher else { return Payload::cut_bytes(self.kept, self.max) };
        let truncation = Truncation { original_len: self.len, original_sha256: hex(&hasher.finalize()) };
        let mut bytes = self.kept;
        bytes.truncate(preview_len(self.max));
        Payload::Raw { bytes, truncated: Some(truncation) }
    }
}

impl std::io::Write for Fitting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use sha2::Digest;
        self.len += buf.len() as u64;
        let room = self.max - self.kept.len();
        match &mut self.hasher {
            Some(hasher) => hasher.update(buf),
            None if buf.len() <= room => self.kept.extend_from_slice(buf),
            None => {
                let mut hasher = sha2::Sha256::new();
                hasher.update(&self.kept);
                hasher.update(buf);
                self.hasher = Some(hasher);
                self.kept.extend_from_slice(&buf[..room]);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The length and SHA-256 of `original`.
fn truncation_of(original: &[u8]) -> Truncation {
    use sha2::Digest;
    Truncation { original_len: original.len() as u64, original_sha256: hex(&sha2::Sha256::digest(original)) }
}

/// Whether `value` holds no NUL character (`\u0000`) in any string or key.
fn nul_free(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::String(s) => !s.contains('\0'),
        Value::Array(items) => items.iter().all(nul_free),
        Value::Object(map) => map.iter().all(|(k, v)| !k.contains('\0') && nul_free(v)),
        _ => true,
    }
}

/// Lowercase hex of `bytes`, as the operator tools show raw payloads (`dlq show --json`, the
/// console's API, a patch's audit diff).
///
/// ```
/// assert_eq!(dlq_core::admin::hex(&[0xff, 0x00, 0x10]), "ff0010");
/// assert_eq!(dlq_core::admin::unhex("ff0010"), Some(vec![0xff, 0x00, 0x10]));
/// assert_eq!(dlq_core::admin::unhex("f"), None);
/// ```
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// The bytes of lowercase or uppercase hex ([`hex`]); `None` for anything else.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest;

    fn sha256(bytes: &[u8]) -> String {
        hex(&sha2::Sha256::digest(bytes))
    }

    #[derive(Serialize)]
    struct Upload {
        name: &'static str,
        blob: String,
    }

    /// The cut keeps the first bytes of the serialization and hashes all of it, wherever
    /// the limit falls: inside a write of the serializer or between two.
    #[test]
    fn a_cut_keeps_the_first_bytes_and_hashes_the_whole_serialization() {
        let upload = Upload { name: "scan", blob: "x".repeat(40) };
        let whole = serde_json::to_vec(&upload).unwrap(); // {"name":"scan","blob":"xxx…"}
        let value = serde_json::to_value(&upload).unwrap(); // keys sorted: {"blob":…,"name":…}
        let sorted = serde_json::to_vec(&value).unwrap();
        for max in [0, 1, 7, 8, 16, whole.len() - 1] {
            let expected = |bytes: &[u8]| Payload::Raw {
                bytes: bytes[..max].to_vec(),
                truncated: Some(Truncation { original_len: bytes.len() as u64, original_sha256: sha256(bytes) }),
            };
            assert_eq!(Payload::from_event_within(&upload, max).unwrap(), expected(&whole), "{max}");
            assert_eq!(Payload::from_serialized_within(whole.clone(), max), expected(&whole), "{max}");
            assert_eq!(Payload::from_bytes_within(&whole, max), expected(&whole), "{max}");
            assert_eq!(Payload::Json(value.clone()).fit(max), expected(&sorted), "{max}");
            assert_eq!(Payload::Json(value.clone()).len_within(max), None);
        }
        assert_eq!(Payload::from_event_within(&upload, whole.len()).unwrap(), Payload::Json(value.clone()));
        assert_eq!(Payload::from_serialized_within(whole.clone(), whole.len()), Payload::Json(value.clone()));
        assert_eq!(Payload::Json(value.clone()).len_within(whole.len()), Some(whole.len()));
    }

    /// Within the limit, an event JSONB cannot hold is kept as its serialization, whole.
    #[test]
    fn an_event_with_a_nul_within_the_limit_is_kept_raw() {
        let upload = Upload { name: "a\u{0}b", blob: String::new() };
        let whole = serde_json::to_vec(&upload).unwrap();
        let payload = Payload::from_event_within(&upload, usize::MAX).unwrap();
        assert_eq!(payload, Payload::Raw { bytes: whole.clone(), truncated: None });
        assert_eq!(Payload::from_serialized_within(whole.clone(), whole.len()), payload);
    }
}
