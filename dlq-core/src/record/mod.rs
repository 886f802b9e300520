//! The dead-letter record, its states and the values the store exchanges.

use std::collections::BTreeMap;

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::classify::FailureInfo;

/// The id of a dead-letter row (`dlq_events.id`).
pub type DlqId = i64;

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $text)] $variant),* }

        text_forms!($name { $($variant => $text),* });
    };
}

string_enum! {
    /// Where a dead letter is in its life.
    ///
    /// `PENDING → PROCESSING → SUCCEEDED | PENDING (retry_count+1) | FAILED_PERMANENTLY`;
    /// operators move `FAILED_PERMANENTLY → PENDING` (redrive) and anything to `DISCARDED`.
    ///
    /// ```
    /// use dlq_core::Status;
    /// assert_eq!("FAILED_PERMANENTLY".parse::<Status>().unwrap(), Status::FailedPermanently);
    /// assert_eq!(Status::Pending.to_string(), "PENDING");
    /// ```
    Status {
        /// Waiting for its `retry_after`, then claimable by a retrier.
        Pending = "PENDING",
        /// Claimed by a retrier whose lease runs until `lease_until`.
        Processing = "PROCESSING",
        /// A retry succeeded.
        Succeeded = "SUCCEEDED",
        /// Dead: waits for an operator to repair and redrive or discard it.
        FailedPermanently = "FAILED_PERMANENTLY",
        /// Given up on by an operator.
        Discarded = "DISCARDED",
    }
}

string_enum! {
    /// Why a dead letter is `FAILED_PERMANENTLY`.
    ///
    /// ```
    /// assert_eq!(dlq_core::DeadReason::RetriesExhausted.as_str(), "retries_exhausted");
    /// ```
    DeadReason {
        /// The handler's error was classified permanent.
        Permanent = "permanent",
        /// `max_retries` retries failed.
        RetriesExhausted = "retries_exhausted",
        /// The event kept failing for longer than the policy's `max_age`.
        MaxAge = "max_age",
        /// The payload did not deserialize into the handler's event type.
        Undecodable = "undecodable",
        /// No handler is registered for the event type.
        NoHandler = "no_handler",
        /// The payload is over the store's size limit: only its first bytes, its length and
        /// its SHA-256 are kept, so it can be neither retried nor redriven (an operator can
        /// patch in the whole payload and then redrive it).
        TooLarge = "too_large",
    }
}

/// The largest payload a store keeps, in bytes (64 MiB): the hard limit.
///
/// Below it, a payload is stored whole, so a retry or a redrive sees exactly the event the
/// handler saw. Above it, a store keeps only the first bytes with the original's length and
/// SHA-256, and parks the row dead with [`DeadReason::TooLarge`] (never claimed for a retry
/// it cannot succeed at); the live path reports that as
/// [`HandlerError::TooLarge`](crate::HandlerError::TooLarge), so the caller knows the event is
/// not saved. The live path and a [`Dispatcher`](crate::Dispatcher) measure and cut the event
/// themselves, before they call the store, against the store's own
/// [`max_payload_bytes`](crate::DeadLetterStore::max_payload_bytes) (see [`Truncation`] for
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
/// - the bytes a [`Dispatcher`](crate::Dispatcher) was given, exactly as given
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
    /// [`max_payload_bytes`](crate::DeadLetterStore::max_payload_bytes).
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
    fn cut(self, max_bytes: usize) -> Self {
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

    /// Whether the stored payload is not the whole original.
    pub const fn is_truncated(&self) -> bool {
        matches!(self, Self::Raw { truncated: Some(_), .. })
    }
}

/// The length of `value`'s JSON text when it is at most `max`, counted without building it
/// and stopping past `max`.
fn json_len(value: &serde_json::Value, max: usize) -> Option<usize> {
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

/// Bytes as lowercase hex.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
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

/// Where an event came from: topic/partition/offset, headers, trace context.
///
/// ```
/// let src = dlq_core::SourceMeta::kafka("payments", 3, 1_204_331);
/// assert_eq!(src.partition, Some(3));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceMeta {
    /// Topic, subject, queue or table.
    pub topic: Option<String>,
    /// Partition number.
    pub partition: Option<i32>,
    /// Offset or sequence number.
    pub offset: Option<i64>,
    /// Message headers.
    pub headers: BTreeMap<String, String>,
    /// W3C `traceparent` or similar.
    pub trace_context: Option<String>,
}

impl SourceMeta {
    /// Metadata for a Kafka record.
    pub fn kafka(topic: &str, partition: i32, offset: i64) -> Self {
        Self { topic: Some(topic.to_owned()), partition: Some(partition), offset: Some(offset), ..Self::default() }
    }

    /// A NATS JetStream message: `subject` as the topic and the stream sequence as the offset
    /// (no partition). Its dedupe key is `stream/sequence`, the message's identity in the
    /// stream, kept in the `Nats-Stream` header so the row says which stream it came from.
    ///
    /// ```
    /// let src = dlq_core::SourceMeta::jetstream("PAYMENTS", "payments.eu", 42);
    /// assert_eq!((src.topic.as_deref(), src.partition, src.offset), (Some("payments.eu"), None, Some(42)));
    /// assert_eq!(src.dedupe_key().as_deref(), Some("PAYMENTS/42"));
    /// ```
    pub fn jetstream(stream: &str, subject: &str, stream_sequence: u64) -> Self {
        let mut headers = BTreeMap::new();
        headers.insert(JETSTREAM_STREAM_HEADER.to_owned(), stream.to_owned());
        Self {
            topic: Some(subject.to_owned()),
            offset: Some(i64::try_from(stream_sequence).unwrap_or(i64::MAX)),
            headers,
            ..Self::default()
        }
    }

    /// The event's identity: `topic/partition/offset` when all three are known, or
    /// `stream/sequence` for a JetStream source ([`jetstream`](Self::jetstream)).
    ///
    /// ```
    /// let src = dlq_core::SourceMeta::kafka("payments", 3, 42);
    /// assert_eq!(src.dedupe_key().as_deref(), Some("payments/3/42"));
    /// ```
    pub fn dedupe_key(&self) -> Option<String> {
        if let (None, Some(stream)) = (self.partition, self.headers.get(JETSTREAM_STREAM_HEADER)) {
            return Some(format!("{stream}/{}", self.offset?));
        }
        Some(format!("{}/{}/{}", self.topic.as_ref()?, self.partition?, self.offset?))
    }
}

/// The header of a [`SourceMeta::jetstream`] source that names its stream.
const JETSTREAM_STREAM_HEADER: &str = "Nats-Stream";

/// A failed event about to be parked.
///
/// ```
/// use dlq_core::{ErrorClass, FailureInfo, store::NewDeadLetter, Payload, RetryPolicy};
///
/// let failure = FailureInfo::new(ErrorClass::Transient, "io", "ledger down".into(), vec![], None);
/// let letter = NewDeadLetter::new("payment", Payload::Json(serde_json::json!({"amount": 5})), failure)
///     .with_dedupe_key("payments/0/17");
/// assert_eq!(letter.status(), dlq_core::Status::Pending);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NewDeadLetter {
    /// The registered event type.
    pub event_type: String,
    /// The handler's path, `module::fn`.
    pub handler: String,
    /// The event.
    pub payload: Payload,
    /// What went wrong.
    pub failure: FailureInfo,
    /// Set when the event is dead on arrival (permanent, undecodable, no retries allowed).
    pub dead_reason: Option<DeadReason>,
    /// How long from now until the first retry.
    pub retry_delay: Duration,
    /// The policy's retry limit, stored with the row.
    pub max_retries: u32,
    /// The event's identity for its event type: while a row of the same event type and key
    /// is alive (not `SUCCEEDED` or `DISCARDED`), parking it again returns that row's id
    /// ([`Parked::deduplicated`]); the same key under another event type is another event's.
    pub dedupe_key: Option<String>,
    /// Where the event came from.
    pub source: SourceMeta,
}

impl NewDeadLetter {
    /// A pending letter due at once, for an unnamed handler, with the default retry limit.
    pub fn new(event_type: &str, payload: Payload, failure: FailureInfo) -> Self {
        Self {
            event_type: event_type.to_owned(),
            handler: String::new(),
            payload,
            failure,
            dead_reason: None,
            retry_delay: Duration::ZERO,
            max_retries: crate::RetryPolicy::DEFAULT.max_retries,
            dedupe_key: None,
            source: SourceMeta::default(),
        }
    }

    /// Sets the dedupe key.
    #[must_use]
    pub fn with_dedupe_key(mut self, key: impl Into<String>) -> Self {
        self.dedupe_key = Some(key.into());
        self
    }

    /// Sets the source metadata (and the dedupe key from it, when none is set).
    #[must_use]
    pub fn with_source(mut self, source: SourceMeta) -> Self {
        if self.dedupe_key.is_none() {
            self.dedupe_key = source.dedupe_key();
        }
        self.source = source;
        self
    }

    /// Sets the handler path.
    #[must_use]
    pub fn with_handler(mut self, handler: impl Into<String>) -> Self {
        self.handler = handler.into();
        self
    }

    /// Parks the letter dead with `reason`.
    #[must_use]
    pub const fn dead(mut self, reason: DeadReason) -> Self {
        self.dead_reason = Some(reason);
        self
    }

    /// Sets the delay until the first retry and the retry limit.
    #[must_use]
    pub const fn retry(mut self, delay: Duration, max_retries: u32) -> Self {
        self.retry_delay = delay;
        self.max_retries = max_retries;
        self
    }

    /// The letter as a store with a payload limit of `max_bytes` keeps it: unchanged when the
    /// payload fits; otherwise the payload is cut ([`Payload::fit`]) and the letter parked
    /// dead with [`DeadReason::TooLarge`], so no retrier ever claims what it cannot decode.
    ///
    /// ```
    /// use dlq_core::{DeadReason, ErrorClass, FailureInfo, store::NewDeadLetter, Payload, Status};
    ///
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// let letter = NewDeadLetter::new("upload", Payload::from_bytes(&[7; 64]), failure).fit(16);
    /// assert_eq!((letter.status(), letter.dead_reason), (Status::FailedPermanently, Some(DeadReason::TooLarge)));
    /// assert!(letter.payload.is_truncated());
    /// ```
    #[must_use]
    pub fn fit(mut self, max_bytes: usize) -> Self {
        if self.payload.is_truncated() || self.payload.len_within(max_bytes).is_none() {
            self.payload = self.payload.cut(max_bytes);
            self.dead_reason = Some(DeadReason::TooLarge);
        }
        self
    }

    /// The status the row is created in.
    pub const fn status(&self) -> Status {
        if self.dead_reason.is_some() { Status::FailedPermanently } else { Status::Pending }
    }
}

/// The result of parking one letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parked {
    /// The row's id.
    pub id: DlqId,
    /// `true` when a live row (`PENDING`, `PROCESSING` or `FAILED_PERMANENTLY`) of the same
    /// event type already held the letter's dedupe key, and its id was returned: the letter
    /// itself was not stored. `false` when the letter was stored as the new row `id` (also when
    /// the key's earlier rows had all finished: `SUCCEEDED` or `DISCARDED`).
    pub deduplicated: bool,
    /// `true` when the payload was over the store's limit: the row keeps only its first
    /// bytes and is dead ([`DeadReason::TooLarge`]); the event itself is not saved.
    pub truncated: bool,
}

/// A stored dead letter, as the admin reads and the retrier see it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// The row's id.
    pub id: DlqId,
    /// The registered event type.
    pub event_type: String,
    /// The handler's path.
    pub handler: String,
    /// The event (possibly repaired by an operator).
    pub payload: Payload,
    /// The lifecycle state.
    pub status: Status,
    /// The latest failure.
    pub failure: FailureInfo,
    /// Failed retries so far.
    pub retry_count: u32,
    /// The retry limit.
    pub max_retries: u32,
    /// When it becomes due.
    pub retry_after: DateTime<Utc>,
    /// Why it is dead, when it is.
    pub dead_reason: Option<DeadReason>,
    /// The retrier holding it, while `PROCESSING`.
    pub lease_owner: Option<String>,
    /// Until when that retrier holds it.
    pub lease_until: Option<DateTime<Utc>>,
    /// The dedupe key.
    pub dedupe_key: Option<String>,
    /// Where it came from.
    pub source: SourceMeta,
    /// How many times an operator redrove it.
    pub redrive_count: u32,
    /// When it was parked.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it first failed.
    pub first_failed_at: DateTime<Utc>,
    /// When a retrier last ran it.
    pub last_attempt_at: Option<DateTime<Utc>>,
}

impl DeadLetter {
    /// A row as freshly parked at `at`: `PENDING`, due at `at`, no lease, no retries. Stores
    /// outside this crate build the rows they read back with it, then set the public fields.
    ///
    /// ```
    /// use dlq_core::{DeadLetter, ErrorClass, FailureInfo, Payload, Status};
    ///
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// let mut row = DeadLetter::new(7, "payment", Payload::Json(serde_json::json!({})), failure, chrono::Utc::now());
    /// row.status = Status::Succeeded;
    /// assert_eq!(row.id, 7);
    /// ```
    pub fn new(id: DlqId, event_type: &str, payload: Payload, failure: FailureInfo, at: DateTime<Utc>) -> Self {
        Self {
            id,
            event_type: event_type.to_owned(),
            handler: String::new(),
            payload,
            status: Status::Pending,
            failure,
            retry_count: 0,
            max_retries: 0,
            retry_after: at,
            dead_reason: None,
            lease_owner: None,
            lease_until: None,
            dedupe_key: None,
            source: SourceMeta::default(),
            redrive_count: 0,
            created_at: at,
            updated_at: at,
            first_failed_at: at,
            last_attempt_at: None,
        }
    }
}

/// The proof that a retrier holds a row: every outcome write must present the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The row.
    pub id: DlqId,
    /// The claim's fencing token.
    pub token: Uuid,
}

/// What a claim asks for.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// Only these event types.
    pub event_types: Vec<String>,
    /// At most this many rows.
    pub limit: usize,
    /// How long the lease lasts.
    pub lease: Duration,
    /// Who claims (host:pid:name), recorded as `lease_owner`.
    pub owner: String,
}

/// Limits a claim of one event type keeps across every retrier that shares the store: the
/// type's `max-concurrent` and `max-rate` (and the ramp after its circuit closes), checked
/// and recorded by the store in one atomic step, so that however many processes claim, the
/// limits hold as a whole ([`DeadLetterStore::claim_capped`](crate::DeadLetterStore::claim_capped)).
///
/// ```
/// use dlq_core::store::ClaimCap;
/// use std::time::Duration;
///
/// let cap = ClaimCap { in_flight: Some(4), starts: Some((40, Duration::from_secs(1))) };
/// // 20 wanted, 3 running, 38 started within the window: 1 more may start.
/// assert_eq!(cap.allows(20, 3, 38), 1);
/// assert_eq!(ClaimCap::default().allows(20, 3, 38), 20, "no limit");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClaimCap {
    /// At most this many rows of the type `PROCESSING` under a live lease, the new ones included.
    pub in_flight: Option<usize>,
    /// At most `.0` rows of the type claimed within any window of `.1`, the new ones included.
    pub starts: Option<(u32, Duration)>,
}

impl ClaimCap {
    /// How many of `want` rows a claim may take with `in_flight` rows of the type held under
    /// a live lease and `started` rows claimed within the window.
    #[must_use]
    pub fn allows(&self, want: usize, in_flight: usize, started: u64) -> usize {
        let mut n = want;
        if let Some(max) = self.in_flight {
            n = n.min(max.saturating_sub(in_flight));
        }
        if let Some((max, _)) = self.starts {
            let left = u64::from(max).saturating_sub(started);
            n = n.min(usize::try_from(left).unwrap_or(usize::MAX));
        }
        n
    }

    /// The window of the rate limit, when there is one.
    #[must_use]
    pub fn window(&self) -> Option<Duration> {
        self.starts.map(|(_, window)| window)
    }
}

/// A row claimed for a retry: what a retry reads of it, and the lease to present with the
/// outcome.
///
/// A claim returns only these columns, not the whole [`DeadLetter`]: a retrier claims a
/// batch between two runs of its handlers, and the error, its chain and the source metadata
/// it never reads were most of what each claim sent. The whole row is
/// [`DeadLetterStore::get`](crate::store::DeadLetterStore::get)`(claimed.id())`.
///
/// ```
/// use dlq_core::store::Claimed;
/// use dlq_core::{DeadLetter, ErrorClass, FailureInfo, Payload};
///
/// let failure = FailureInfo::new(ErrorClass::Transient, "timeout", "gateway timed out".into(), vec![], None);
/// let letter = DeadLetter::new(7, "payment", Payload::Json(serde_json::json!({"id": 1})), failure, chrono::Utc::now());
/// let token = uuid::Uuid::new_v4();
/// let claimed = Claimed::of(&letter, token);
/// assert_eq!((claimed.id(), claimed.lease.token), (7, token));
/// assert_eq!((claimed.event_type.as_str(), claimed.retry_count), ("payment", 0));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    /// The lease to present with the outcome; `lease.id` is the row's id.
    pub lease: Lease,
    /// The event type, which names the handler that retries it.
    pub event_type: String,
    /// The payload as stored.
    pub payload: Payload,
    /// Retries run so far.
    pub retry_count: u32,
    /// The retry budget stored with the row.
    pub max_retries: u32,
    /// When the row came due; a claim returns its rows in `(retry_after, id)` order.
    pub retry_after: DateTime<Utc>,
    /// When the event first failed (a handler's `max_age` counts from here).
    pub first_failed_at: DateTime<Utc>,
    /// The W3C `traceparent` of the event that failed, if it carried one.
    pub trace_context: Option<String>,
}

impl Claimed {
    /// The claimed row's id.
    #[must_use]
    pub const fn id(&self) -> DlqId {
        self.lease.id
    }

    /// The claim of `letter` under the fencing `token`: for a store that reads whole rows.
    #[must_use]
    pub fn of(letter: &DeadLetter, token: Uuid) -> Self {
        Self {
            lease: Lease { id: letter.id, token },
            event_type: letter.event_type.clone(),
            payload: letter.payload.clone(),
            retry_count: letter.retry_count,
            max_retries: letter.max_retries,
            retry_after: letter.retry_after,
            first_failed_at: letter.first_failed_at,
            trace_context: letter.source.trace_context.clone(),
        }
    }
}

/// The outcome of a retry, written fenced by the lease token.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// The handler succeeded: `SUCCEEDED`.
    Succeeded {
        /// The claim.
        lease: Lease,
    },
    /// The handler failed transiently: back to `PENDING`, `retry_count + 1`, due after `delay`.
    Retry {
        /// The claim.
        lease: Lease,
        /// The wait, measured from the store's clock.
        delay: Duration,
        /// What went wrong.
        failure: FailureInfo,
    },
    /// Give up: `FAILED_PERMANENTLY` with `reason`.
    Dead {
        /// The claim.
        lease: Lease,
        /// Why.
        reason: DeadReason,
        /// What went wrong.
        failure: FailureInfo,
        /// Whether this attempt counts as a retry (`retry_count + 1`).
        counts: bool,
    },
    /// Not run (shutdown): back to `PENDING`, due at once, attempt not counted.
    Release {
        /// The claim.
        lease: Lease,
    },
    /// Attempts run back to back under one claim: each of `failed` failed transiently with no
    /// wait before the next (the retrier runs such a retry at once instead of writing it and
    /// claiming the row again), then `last` is the outcome of the final attempt. A store
    /// writes it as `failed.len()` `Retry` outcomes followed by `last`: each failure counts as
    /// a retry and is appended to the attempt history in order, the row keeps the latest
    /// failure, and the lease is `last`'s. Build it with [`Settlement::repeated`], which keeps
    /// it flat.
    Repeated {
        /// The failures of the earlier attempts, oldest first.
        failed: Vec<FailureInfo>,
        /// The outcome of the final attempt (never itself `Repeated`).
        last: Box<Settlement>,
    },
}

impl Settlement {
    /// `failed` attempts, then `last`: a [`Settlement::Repeated`], or `last` alone when nothing
    /// failed before it. A `last` that is itself repeated is merged, so the result is flat.
    ///
    /// ```
    /// use dlq_core::store::{Lease, Settlement};
    /// use dlq_core::{ErrorClass, FailureInfo};
    ///
    /// let lease = Lease { id: 7, token: uuid::Uuid::new_v4() };
    /// let timeout = FailureInfo::new(ErrorClass::Transient, "io", "timed out".into(), vec![], None);
    /// let outcome = Settlement::repeated(vec![timeout.clone()], Settlement::Succeeded { lease });
    /// assert_eq!((outcome.lease(), outcome.outcome_name(), outcome.counted()), (lease, "succeeded", 1));
    /// assert_eq!(outcome.earlier_failures(), [timeout.clone()]);
    /// assert_eq!(outcome.last(), &Settlement::Succeeded { lease });
    /// assert_eq!(outcome.failure(), Some(&timeout), "the row keeps the latest failure");
    /// assert_eq!(Settlement::repeated(vec![], Settlement::Succeeded { lease }), Settlement::Succeeded { lease });
    /// ```
    #[must_use]
    pub fn repeated(mut failed: Vec<FailureInfo>, last: Self) -> Self {
        let last = match last {
            Self::Repeated { failed: more, last } => {
                failed.extend(more);
                *last
            }
            last => last,
        };
        if failed.is_empty() { last } else { Self::Repeated { failed, last: Box::new(last) } }
    }

    /// The outcome of the final attempt: `last` of a [`Settlement::Repeated`], else itself.
    #[must_use]
    pub fn last(&self) -> &Self {
        match self {
            Self::Repeated { last, .. } => last.last(),
            other => other,
        }
    }

    /// The failures of the attempts before the final one (empty but for
    /// [`Settlement::Repeated`]), oldest first.
    #[must_use]
    pub fn earlier_failures(&self) -> &[FailureInfo] {
        match self {
            Self::Repeated { failed, .. } => failed,
            _ => &[],
        }
    }

    /// How many retries this outcome adds to the row's `retry_count`: one per earlier failure,
    /// plus one when the final attempt counts (`Retry`, or `Dead` with `counts`).
    #[must_use]
    pub fn counted(&self) -> u32 {
        let last = match self.last() {
            Self::Retry { .. } | Self::Dead { counts: true, .. } => 1,
            _ => 0,
        };
        u32::try_from(self.earlier_failures().len()).unwrap_or(u32::MAX).saturating_add(last)
    }

    /// Whether the row is `PENDING` again after this outcome (its final attempt is a `Retry`
    /// or a `Release`): stores wake waiting retriers when they write one.
    ///
    /// ```
    /// use dlq_core::store::{Lease, Settlement};
    ///
    /// let lease = Lease { id: 7, token: uuid::Uuid::new_v4() };
    /// assert!(Settlement::Release { lease }.pending_again());
    /// assert!(!Settlement::Succeeded { lease }.pending_again());
    /// ```
    #[must_use]
    pub fn pending_again(&self) -> bool {
        matches!(self.last(), Self::Retry { .. } | Self::Release { .. })
    }

    /// The lease this outcome is fenced by.
    #[must_use]
    pub fn lease(&self) -> Lease {
        match self {
            Self::Succeeded { lease } | Self::Release { lease } => *lease,
            Self::Retry { lease, .. } | Self::Dead { lease, .. } => *lease,
            Self::Repeated { last, .. } => last.lease(),
        }
    }

    /// The failure the row keeps after this outcome, if it records one: the final attempt's,
    /// else the latest earlier failure.
    #[must_use]
    pub fn failure(&self) -> Option<&FailureInfo> {
        match self {
            Self::Retry { failure, .. } | Self::Dead { failure, .. } => Some(failure),
            Self::Repeated { failed, last } => last.failure().or(failed.last()),
            _ => None,
        }
    }

    /// The name of the final attempt's outcome in the attempt history.
    #[must_use]
    pub fn outcome_name(&self) -> &'static str {
        match self {
            Self::Succeeded { .. } => "succeeded",
            Self::Retry { .. } => "retry",
            Self::Dead { .. } => "dead",
            Self::Release { .. } => "released",
            Self::Repeated { last, .. } => last.outcome_name(),
        }
    }
}

/// What a batch of settlements did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SettleReport {
    /// Rows written.
    pub applied: u64,
    /// Rows whose lease was no longer held by the token presented: nothing written.
    pub fenced: Vec<DlqId>,
}

/// One attempt in a row's history (`dlq_attempts`).
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// The row.
    pub dlq_id: DlqId,
    /// 0 for the original failure, then 1, 2, … for retries.
    pub attempt: u32,
    /// `failed`, `succeeded`, `retry`, `dead`.
    pub outcome: String,
    /// The class of the failure, if it failed.
    pub error_class: Option<String>,
    /// The message, if it failed.
    pub error_reason: Option<String>,
    /// Who ran it.
    pub owner: Option<String>,
    /// When.
    pub at: DateTime<Utc>,
}

/// One operator action in the audit log (`dlq_audit`).
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// The entry's own id: `dlq undo ID` names it.
    pub id: i64,
    /// The row.
    pub dlq_id: DlqId,
    /// `redrive`, `patch`, `discard` (an undo is a `patch` whose diff names `undo_of`).
    pub action: String,
    /// Who did it.
    pub actor: String,
    /// Why, as the operator said it.
    pub reason: Option<String>,
    /// What changed, as JSON (`{"status": ["FAILED_PERMANENTLY", "PENDING"]}`, a payload diff).
    pub diff: serde_json::Value,
    /// When.
    pub at: DateTime<Utc>,
}

/// Who does an operator action and why: written to every audit entry the action makes.
///
/// ```
/// let note = dlq_core::store::AuditNote::new("alice", "ledger fixed in INC-42");
/// assert_eq!(note.reason.as_deref(), Some("ledger fixed in INC-42"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditNote {
    /// The operator (the OS user, or the console's authenticated user).
    pub actor: String,
    /// Why; required by the admin layer for discard, patch and undo.
    pub reason: Option<String>,
}

impl AuditNote {
    /// A note with a reason.
    pub fn new(actor: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { actor: actor.into(), reason: Some(reason.into()) }
    }
}

/// The order rows are listed in; keyset pagination ([`ListFilter::after`]) follows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// Highest id first (the default: what an operator wants to see).
    #[default]
    NewestFirst,
    /// Lowest id first (what a bulk action walks, its cursor the last id done).
    OldestFirst,
}

/// Which rows an admin read or action applies to. Empty fields match everything.
///
/// Pagination is by keyset: pass the last id of a page as [`after`](Self::after) to get the
/// next one, in [`order`](Self::order). Stores answer with an index range on the id, never an
/// `OFFSET`.
///
/// ```
/// use dlq_core::{ListFilter, Status};
/// let f = ListFilter::default().status(Status::FailedPermanently).event_type("payment").reason_contains("USD");
/// assert_eq!(f.limit, 100);
/// let next_page = f.clone().after(1_204);
/// assert_eq!(next_page.after, Some(1_204));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ListFilter {
    /// Only this status.
    pub status: Option<Status>,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Only this fingerprint.
    pub fingerprint: Option<String>,
    /// Only these ids.
    pub ids: Vec<DlqId>,
    /// Only this error kind (exact).
    pub kind: Option<String>,
    /// Only rows whose error reason contains this text (case-sensitive).
    pub reason: Option<String>,
    /// Only rows parked at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only rows parked before this time.
    pub until: Option<DateTime<Utc>>,
    /// Only rows strictly past this id in [`order`](Self::order) (keyset pagination).
    pub after: Option<DlqId>,
    /// Newest first (the default) or oldest first.
    pub order: Order,
    /// At most this many rows (100 by default) in one page of `list`. A bulk action of the
    /// admin layer (`Admin::redrive`, `Admin::discard`, a `BulkPlan`) ignores it, with `order`
    /// and `after`: it walks every matching row.
    pub limit: usize,
}

impl Default for ListFilter {
    fn default() -> Self {
        Self {
            status: None,
            event_type: None,
            fingerprint: None,
            ids: Vec::new(),
            kind: None,
            reason: None,
            since: None,
            until: None,
            after: None,
            order: Order::NewestFirst,
            limit: 100,
        }
    }
}

impl ListFilter {
    /// Only rows with `status`.
    #[must_use]
    pub fn status(mut self, status: Status) -> Self {
        self.status = Some(status);
        self
    }
    /// Only rows of `event_type`.
    #[must_use]
    pub fn event_type(mut self, event_type: &str) -> Self {
        self.event_type = Some(event_type.to_owned());
        self
    }
    /// Only rows with `fingerprint`.
    #[must_use]
    pub fn fingerprint(mut self, fingerprint: &str) -> Self {
        self.fingerprint = Some(fingerprint.to_owned());
        self
    }
    /// Only these ids.
    #[must_use]
    pub fn ids(mut self, ids: impl IntoIterator<Item = DlqId>) -> Self {
        self.ids = ids.into_iter().collect();
        self
    }
    /// Only rows whose error kind is `kind`.
    #[must_use]
    pub fn kind(mut self, kind: &str) -> Self {
        self.kind = Some(kind.to_owned());
        self
    }
    /// Only rows whose error reason contains `text`.
    #[must_use]
    pub fn reason_contains(mut self, text: &str) -> Self {
        self.reason = Some(text.to_owned());
        self
    }
    /// Only rows parked at or after `at`.
    #[must_use]
    pub const fn since(mut self, at: DateTime<Utc>) -> Self {
        self.since = Some(at);
        self
    }
    /// Only rows parked before `at`.
    #[must_use]
    pub const fn until(mut self, at: DateTime<Utc>) -> Self {
        self.until = Some(at);
        self
    }
    /// Only rows past `id` in the filter's order (the next page after a page ending at `id`).
    #[must_use]
    pub const fn after(mut self, id: DlqId) -> Self {
        self.after = Some(id);
        self
    }
    /// Lists oldest first.
    #[must_use]
    pub const fn oldest_first(mut self) -> Self {
        self.order = Order::OldestFirst;
        self
    }
    /// At most `limit` rows.
    #[must_use]
    pub const fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// The open id range `(lower, upper)` the filter's keyset leaves, for SQL
    /// (`id > lower AND id < upper`).
    ///
    /// ```
    /// use dlq_core::ListFilter;
    /// assert_eq!(ListFilter::default().after(10).id_range(), (i64::MIN, 10));
    /// assert_eq!(ListFilter::default().oldest_first().after(10).id_range(), (10, i64::MAX));
    /// ```
    pub fn id_range(&self) -> (DlqId, DlqId) {
        match (self.order, self.after) {
            (_, None) => (DlqId::MIN, DlqId::MAX),
            (Order::NewestFirst, Some(id)) => (DlqId::MIN, id),
            (Order::OldestFirst, Some(id)) => (id, DlqId::MAX),
        }
    }

    /// Whether `letter` passes the filter (the limit aside).
    pub fn matches(&self, letter: &DeadLetter) -> bool {
        let (lower, upper) = self.id_range();
        self.status.is_none_or(|s| s == letter.status)
            && self.event_type.as_ref().is_none_or(|t| *t == letter.event_type)
            && self.fingerprint.as_ref().is_none_or(|f| *f == letter.failure.fingerprint)
            && (self.ids.is_empty() || self.ids.contains(&letter.id))
            && self.kind.as_ref().is_none_or(|k| *k == letter.failure.kind)
            && self.reason.as_ref().is_none_or(|r| letter.failure.reason.contains(r.as_str()))
            && self.since.is_none_or(|t| letter.created_at >= t)
            && self.until.is_none_or(|t| letter.created_at < t)
            && letter.id > lower
            && letter.id < upper
    }
}

/// A count of rows by event type and status, for `dlq stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsRow {
    /// The event type.
    pub event_type: String,
    /// The status.
    pub status: Status,
    /// How many rows.
    pub count: u64,
    /// For `PENDING`: the oldest `retry_after` that has passed, so `now - oldest_due` is how
    /// long the oldest due row has waited for a retrier; `None` when no row is due.
    pub oldest_due: Option<DateTime<Utc>>,
}

/// A group of alike failures, for `dlq stats` and the console's group page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureGroup {
    /// The shared fingerprint.
    pub fingerprint: String,
    /// The event type.
    pub event_type: String,
    /// The error kind.
    pub kind: String,
    /// One message of the group (the newest row's).
    pub sample_reason: String,
    /// The newest row of the group.
    pub sample_id: DlqId,
    /// How many rows.
    pub count: u64,
    /// When the group's oldest row was parked.
    pub first_seen: DateTime<Utc>,
    /// When its newest row was parked.
    pub last_seen: DateTime<Utc>,
}

/// A running (or dead: see `last_seen`) retrier, from its heartbeat row in the store.
///
/// ```
/// let beat = dlq_core::admin::RetrierHeartbeat::new("host:42:ab12cd34", ["payment"], false);
/// assert_eq!(beat.pid, std::process::id() as i32);
/// assert_eq!(beat.event_types, ["payment"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetrierHeartbeat {
    /// The retrier's owner name, also its `lease_owner`.
    pub owner: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: i32,
    /// The event types it handles.
    pub event_types: Vec<String>,
    /// Whether it runs in singleton mode (then at most one of them claims at a time).
    pub singleton: bool,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it last refreshed the row; rows not refreshed for three heartbeats are removed.
    pub last_seen: DateTime<Utc>,
}

impl RetrierHeartbeat {
    /// The heartbeat of a retrier of this process starting now.
    pub fn new<'a>(owner: &str, event_types: impl IntoIterator<Item = &'a str>, singleton: bool) -> Self {
        let now = Utc::now();
        Self {
            owner: owner.to_owned(),
            host: host_name(),
            pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
            event_types: event_types.into_iter().map(str::to_owned).collect(),
            singleton,
            started_at: now,
            last_seen: now,
        }
    }
}

/// This machine's host name (`localhost` when it has none).
pub(crate) fn host_name() -> String {
    let name = gethostname::gethostname().to_string_lossy().trim().to_owned();
    if name.is_empty() { "localhost".to_owned() } else { name }
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
