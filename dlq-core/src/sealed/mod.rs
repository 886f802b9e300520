//! Encryption at rest of the events of chosen types: `#[dead_letter(event_type = "payment",
//! encrypt = true)]`.
//!
//! The payload, the error's messages and its stack trace (which can echo the payload) are
//! sealed with AES-256-GCM under the active key of a [`KeyRing`] before the row reaches any
//! store, so a store (PostgreSQL, SQLite, the memory store, a third party's) only ever holds
//! ciphertext: a database dump, a backup, a read-only SQL user and an operator without the key
//! see `[encrypted, key k1]`. A park seals the payload and the failure's texts together, in
//! one seal kept in the payload's envelope; a failure a retry writes is sealed on its own, and
//! the payload's seal stays as it is. Each seal has a random 12-byte nonce and binds the event
//! type, what it seals (payload or failure) and the key id as associated data, so a sealed
//! value moved to another row type or relabelled with another key id does not open. Rows
//! sealed before (envelope v1, XChaCha20-Poly1305) still open, and `dlq rekey` moves them to
//! the current envelope.
//!
//! The handler and the retrier see plaintext: the retrier opens a row after claiming it and
//! seals the failure it writes back. A row whose key the retrier does not hold is not run
//! and not counted: it stays under the claim until the lease expires (a retrier that holds
//! the key takes it then), and the retrier logs the key id and counts it
//! ([`RetrierStats::sealed_unreadable`](crate::retry::RetrierStats::sealed_unreadable)).
//!
//! What stays readable: the event type, the error's kind and class, the timestamps and
//! counts, the dedupe key and the source (the broker's coordinates), and the fields named by
//! `clear = ["/id", "/currency"]` (JSON pointers), kept beside the ciphertext for debugging.
//! The fingerprint that groups failures is computed from the plaintext and then keyed with
//! the sealing key, so it groups alike failures without being a hash anyone can test guesses
//! against; failures sealed under different keys fall in different groups.
//!
//! A key seals at most 2³² values before it should be rotated (random 96-bit nonces): a park
//! is one seal, a retry that fails one more.
//!
//! ```
//! use dlq_core::sealed::{self, KeyRing};
//! use dlq_core::{ErrorClass, classify::FailureInfo, Payload};
//!
//! let ring = KeyRing::new("k1", [("k1", [7; 32])])?;
//! let card = Payload::Json(serde_json::json!({"id": 7, "pan": "4111111111111111"}));
//! let sealed = sealed::seal_payload(&ring, "payment", &card, &["/id"])?;
//! assert_eq!(sealed::sealed_key(&sealed), Some("k1"));
//! assert!(!String::from_utf8_lossy(&sealed.to_bytes()).contains("4111"));
//! assert_eq!(sealed::clear_fields(&sealed).unwrap()["/id"], 7);
//! assert_eq!(sealed::open_payload(&ring, "payment", sealed)?, card);
//!
//! let failure = FailureInfo::new(ErrorClass::Permanent, "Card", "bad pan 4111111111111111".into(), vec![], None);
//! let stored = sealed::seal_failure(&ring, "payment", failure.clone())?;
//! assert_eq!(stored.reason, "[encrypted, key k1]");
//! assert_eq!(sealed::open_failure(&ring, "payment", stored)?.reason, failure.reason);
//! # Ok::<(), dlq_core::sealed::SealError>(())
//! ```

mod format;
mod keys;

use serde_json::{Map, Value, json};

use crate::classify::FailureInfo;
use crate::record::{NewDeadLetter, Payload};

pub use crate::error::SealError;
use format::{Body, Plain};
pub use keys::{EnvKeys, FileKeys, KeyProvider, KeyRing, install_from, install_keys, installed_keys};

/// The object key that marks a sealed payload.
const TAG: &str = "dlq_sealed";
/// The start of a sealed failure text (kept in the stack trace's place), by envelope version.
const TEXT_V1: &str = "dlq-sealed:v1:";
const TEXT_V2: &str = "dlq-sealed:v2:";
/// What follows the key id in the failure text of a row whose failure was sealed with its
/// payload, in one seal: the text is in the payload's envelope.
const IN_PAYLOAD: &str = "payload";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The `encrypt = true` setting of one event type, with the payload's fields kept in clear
/// (`clear = ["/id"]`, JSON pointers).
///
/// ```
/// const SEALING: dlq_core::sealed::Sealing = dlq_core::sealed::Sealing::new(&["/id", "/currency"]);
/// assert_eq!(SEALING.clear(), ["/id", "/currency"]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealing {
    clear: &'static [&'static str],
}

impl Sealing {
    /// Seals everything but the fields at `clear`.
    pub const fn new(clear: &'static [&'static str]) -> Self {
        Self { clear }
    }

    /// The JSON pointers kept in clear.
    pub const fn clear(&self) -> &'static [&'static str] {
        self.clear
    }
}

/// What a person without the key is shown for sealed content.
///
/// ```
/// assert_eq!(dlq_core::sealed::placeholder("k1"), "[encrypted, key k1]");
/// ```
pub fn placeholder(key: &str) -> String {
    format!("[encrypted, key {key}]")
}

/// The key id of a sealed payload; `None` for a payload in clear.
pub fn sealed_key(payload: &Payload) -> Option<&str> {
    envelope(payload).map(|(key, _)| key)
}

/// The fields a sealed payload keeps in clear, by JSON pointer (`None` for a payload in clear).
pub fn clear_fields(payload: &Payload) -> Option<&Map<String, Value>> {
    let Payload::Json(Value::Object(outer)) = payload else { return None };
    envelope(payload)?;
    outer.get("clear").and_then(Value::as_object)
}

/// A sealed payload as the operator surface shows it without the key:
/// `{"encrypted": "[encrypted, key k1]", "key": "k1", "clear": {"/id": 7}}` (`clear` only
/// when fields were kept); `None` for a payload in clear. `dlq show --json`, `dlq ls`, and the
/// console print this, never the ciphertext.
///
/// ```
/// use dlq_core::{sealed, Payload};
/// let ring = sealed::KeyRing::new("k1", [("k1", [7; 32])])?;
/// let stored = sealed::seal_payload(&ring, "payment", &Payload::Json(serde_json::json!({"id": 7, "pan": "4111"})), &["/id"])?;
/// assert_eq!(sealed::shown_payload(&stored).unwrap(), serde_json::json!({"encrypted": "[encrypted, key k1]", "key": "k1", "clear": {"/id": 7}}));
/// # Ok::<(), dlq_core::sealed::SealError>(())
/// ```
pub fn shown_payload(payload: &Payload) -> Option<Value> {
    let key = sealed_key(payload)?;
    let mut shown = json!({"encrypted": placeholder(key), "key": key});
    if let (Some(clear), Some(obj)) = (clear_fields(payload), shown.as_object_mut()) {
        obj.insert("clear".into(), Value::Object(clear.clone()));
    }
    Some(shown)
}

/// The key id of a sealed failure text (the stack trace of a sealed row).
pub fn sealed_text_key(text: &str) -> Option<&str> {
    let rest = text.strip_prefix(TEXT_V2).or_else(|| text.strip_prefix(TEXT_V1))?;
    let key = rest.split(':').next()?;
    Some(key)
}

/// A stored text as a person without the key sees it: the [`placeholder`] for a sealed
/// text, the text itself otherwise.
///
/// ```
/// assert_eq!(dlq_core::sealed::shown_text("dlq-sealed:v2:k1:AAAA"), "[encrypted, key k1]");
/// assert_eq!(dlq_core::sealed::shown_text("dlq-sealed:v2:k1:payload"), "[encrypted, key k1]");
/// assert_eq!(dlq_core::sealed::shown_text("plain"), "plain");
/// ```
pub fn shown_text(text: &str) -> std::borrow::Cow<'_, str> {
    match sealed_text_key(text) {
        Some(key) => placeholder(key).into(),
        None => text.into(),
    }
}

/// Whether a failure was sealed ([`seal_failure`], or with its payload by `encrypt = true`).
pub fn is_sealed_failure(failure: &FailureInfo) -> bool {
    failure.stacktrace.as_deref().and_then(sealed_text_key).is_some()
}

/// `(key id, sealed body)` of a sealed payload: envelope v2 `{"dlq_sealed": "v2:<key>:<base64>"}`
/// or v1 `{"dlq_sealed": {"v": 1, "alg": .., "key": .., "nonce": .., "data": ..}}`.
fn envelope(payload: &Payload) -> Option<(&str, Body<'_>)> {
    let Payload::Json(Value::Object(outer)) = payload else { return None };
    if outer.len() > 2 || (outer.len() == 2 && !outer.contains_key("clear")) {
        return None;
    }
    match outer.get(TAG)? {
        Value::String(text) => {
            let (key, data) = text.strip_prefix("v2:")?.split_once(':')?;
            Some((key, Body::V2(data)))
        }
        Value::Object(inner) => {
            let key = inner.get("key")?.as_str()?;
            Some((key, Body::V1(inner)))
        }
        _ => None,
    }
}

/// `payload` sealed under the ring's active key, with the values at the `clear` pointers
/// kept readable beside it. An already sealed payload comes back as it is.
///
/// ```
/// use dlq_core::Payload;
/// use dlq_core::sealed::{KeyRing, clear_fields, open_payload, seal_payload, sealed_key};
///
/// let ring = KeyRing::new("k1", [("k1", [7; 32])])?;
/// let event = Payload::Json(serde_json::json!({ "id": 7, "pan": "4111111111111111" }));
/// let stored = seal_payload(&ring, "payment", &event, &["/id"])?;
/// assert_eq!(sealed_key(&stored), Some("k1"));
/// assert_eq!(clear_fields(&stored).map(|c| c["/id"].clone()), Some(serde_json::json!(7)));
/// let Payload::Json(stored_json) = &stored else { unreachable!("a JSON envelope") };
/// assert!(!stored_json.to_string().contains("4111"), "no plaintext in what is stored");
/// assert_eq!(open_payload(&ring, "payment", stored.clone())?, event);
/// // Sealed for another event type: it does not open.
/// assert!(open_payload(&ring, "refund", stored).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`SealError::Malformed`] only for a value too long for the cipher (over 64 GiB).
pub fn seal_payload(ring: &KeyRing, event_type: &str, payload: &Payload, clear: &[&str]) -> Result<Payload, SealError> {
    if envelope(payload).is_some() {
        return Ok(payload.clone());
    }
    let mut plain = Plain::new();
    plain.push_failure(&[]);
    plain.push_payload(payload);
    Ok(wrap(plain.seal(ring, format::PAYLOAD, event_type)?, kept(payload, clear)))
}

/// The values at the `clear` pointers of a payload in clear.
fn kept(payload: &Payload, clear: &[&str]) -> Option<Map<String, Value>> {
    let Payload::Json(value) = payload else { return None };
    let mut kept = Map::new();
    for pointer in clear {
        if let Some(v) = value.pointer(pointer) {
            kept.insert((*pointer).to_owned(), v.clone());
        }
    }
    (!kept.is_empty()).then_some(kept)
}

/// Whether the envelope of `sealed` (a `v2:` text, which JSON writes as it is: base64, a key
/// id and colons) with `kept` beside it fits in `max_bytes`, without writing it.
fn envelope_fits(sealed: &str, kept: Option<&Map<String, Value>>, max_bytes: usize) -> bool {
    // `{"dlq_sealed":"…","clear":…}`
    let fixed = r#"{"dlq_sealed":"","clear":}"#.len() + sealed.len();
    let Some(budget) = max_bytes.checked_sub(fixed) else { return false };
    kept.is_none_or(|kept| crate::record::json_len(kept, budget).is_some())
}

/// The envelope of a sealed text (`v2:<key>:<base64>`) with the fields kept in clear.
fn wrap(sealed: String, kept: Option<Map<String, Value>>) -> Payload {
    let mut outer = Map::new();
    outer.insert(TAG.into(), Value::String(sealed));
    if let Some(kept) = kept {
        outer.insert("clear".into(), Value::Object(kept));
    }
    Payload::Json(Value::Object(outer))
}

/// The payload a sealed one holds; a payload in clear comes back as it is.
///
/// # Errors
/// [`SealError::UnknownKey`] when the ring lacks its key, [`SealError::Unauthentic`] when the
/// key does not open it (or it was sealed for another event type), [`SealError::Malformed`].
pub fn open_payload(ring: &KeyRing, event_type: &str, payload: Payload) -> Result<Payload, SealError> {
    match envelope(&payload) {
        None => Ok(payload),
        Some((id, body)) => body.open(ring, event_type, id)?.payload(),
    }
}

/// A sealed payload's plaintext parts, opened: the payload, and the failure text sealed with it
/// (empty for none). `None` for a payload in clear.
pub(crate) fn open_parts(
    ring: &KeyRing,
    event_type: &str,
    payload: &Payload,
) -> Result<Option<(Payload, Vec<u8>)>, SealError> {
    let Some((id, body)) = envelope(payload) else { return Ok(None) };
    let opened = body.open(ring, event_type, id)?;
    let failure = opened.failure_part()?.to_vec();
    Ok(Some((opened.payload()?, failure)))
}

/// `payload` sealed under the active key together with `failure`, a failure text that
/// [`open_parts`] gave (so a patched payload keeps the text of the failure it was parked with).
pub(crate) fn seal_parts(
    ring: &KeyRing,
    event_type: &str,
    payload: &Payload,
    failure: &[u8],
    clear: &[&str],
) -> Result<Payload, SealError> {
    let mut plain = Plain::new();
    plain.push_failure(failure);
    plain.push_payload(payload);
    Ok(wrap(plain.seal(ring, format::PAYLOAD, event_type)?, kept(payload, clear)))
}

/// A sealed payload sealed again under the ring's active key, its plaintext (the payload and
/// the failure text sealed with it) and its fields in clear as they were; `None` when it is in
/// clear or already under the active key. What `dlq rekey` writes.
///
/// # Errors
/// As [`open_payload`].
pub(crate) fn reseal(ring: &KeyRing, event_type: &str, payload: &Payload) -> Result<Option<Payload>, SealError> {
    if !needs_reseal(ring, payload) {
        return Ok(None);
    }
    let Some((id, body)) = envelope(payload) else { return Ok(None) };
    let opened = body.open(ring, event_type, id)?;
    let mut plain = Plain::new();
    plain.push_failure(opened.failure_part()?);
    plain.push_raw(opened.payload_part()?);
    Ok(Some(wrap(plain.seal(ring, format::PAYLOAD, event_type)?, clear_fields(payload).cloned())))
}

/// Whether `payload` is sealed under another key than the ring's active one, or in an older
/// envelope: what [`reseal`] (`dlq rekey`) rewrites.
pub(crate) fn needs_reseal(ring: &KeyRing, payload: &Payload) -> bool {
    envelope(payload).is_some_and(|(id, body)| id != ring.active() || matches!(body, Body::V1(_)))
}

/// `failure` with its messages and stack trace sealed under the ring's active key: the reason
/// becomes the [`placeholder`], the chain is emptied, the stack trace holds the sealed text,
/// and the fingerprint is keyed. Kind, class and retry hint stay. An already sealed failure
/// comes back as it is. The retrier seals each failure it writes back so; a park seals the
/// failure with the payload, in one seal ([`open_letter`] opens both).
///
/// # Errors
/// As [`seal_payload`].
pub fn seal_failure(ring: &KeyRing, event_type: &str, failure: FailureInfo) -> Result<FailureInfo, SealError> {
    if is_sealed_failure(&failure) {
        return Ok(failure);
    }
    let sealed = Plain::failure(&failure).seal(ring, format::FAILURE, event_type)?;
    Ok(sealed_failure(ring, failure, format!("dlq-sealed:{sealed}")))
}

/// `failure` as the store keeps it once its text is sealed in `stacktrace`.
fn sealed_failure(ring: &KeyRing, failure: FailureInfo, stacktrace: String) -> FailureInfo {
    let (id, key) = ring.active_key();
    FailureInfo {
        reason: placeholder(id),
        chain: Vec::new(),
        stacktrace: Some(stacktrace),
        fingerprint: keyed_fingerprint(&key.fingerprint, &failure.fingerprint),
        ..failure
    }
}

/// The failure a sealed one holds (its fingerprint stays keyed); one in clear comes back as
/// it is. A failure sealed with its row's payload (at the park) opens with [`open_letter`].
///
/// # Errors
/// As [`open_payload`]; [`SealError::Malformed`] for a failure sealed with its payload.
pub fn open_failure(ring: &KeyRing, event_type: &str, failure: FailureInfo) -> Result<FailureInfo, SealError> {
    open_letter_failure(ring, event_type, failure, None)
}

/// A sealed row opened: its payload and its failure (whose fingerprint stays keyed). At a park,
/// `encrypt = true` seals the failure's text with the payload, in one seal; a failure a retry
/// wrote is sealed on its own. What is in clear comes back as it is.
///
/// ```
/// use dlq_core::sealed::{self, KeyRing, Sealing};
/// use dlq_core::{ErrorClass, classify::FailureInfo, Payload};
///
/// let ring = KeyRing::new("k1", [("k1", [7; 32])])?;
/// let card = Payload::Json(serde_json::json!({"id": 7, "pan": "4111111111111111"}));
/// let failure = FailureInfo::new(ErrorClass::Transient, "Card", "bad pan 4111111111111111".into(), vec![], None);
/// let (payload, stored) = sealed::seal_row(&ring, "payment", &card, failure.clone(), Sealing::new(&["/id"]))?;
/// assert_eq!(stored.reason, "[encrypted, key k1]");
/// assert_eq!(stored.stacktrace.as_deref(), Some("dlq-sealed:v2:k1:payload"), "the text is in the payload's seal");
/// let (opened, opened_failure) = sealed::open_letter(&ring, "payment", payload, stored)?;
/// assert_eq!((opened, opened_failure.reason), (card, failure.reason));
/// # Ok::<(), dlq_core::sealed::SealError>(())
/// ```
///
/// # Errors
/// As [`open_payload`].
pub fn open_letter(
    ring: &KeyRing,
    event_type: &str,
    payload: Payload,
    failure: FailureInfo,
) -> Result<(Payload, FailureInfo), SealError> {
    let failure = open_letter_failure(ring, event_type, failure, Some(&payload))?;
    Ok((open_payload(ring, event_type, payload)?, failure))
}

fn open_letter_failure(
    ring: &KeyRing,
    event_type: &str,
    failure: FailureInfo,
    payload: Option<&Payload>,
) -> Result<FailureInfo, SealError> {
    let Some(text) = failure.stacktrace.as_deref() else { return Ok(failure) };
    let opened = if let Some(sealed) = text.strip_prefix(TEXT_V2) {
        let Some((id, data)) = sealed.split_once(':') else {
            return Err(SealError::Malformed { reason: "a sealed failure is `key:data`".into() });
        };
        if data == IN_PAYLOAD {
            let Some((key, body)) = payload.and_then(envelope) else {
                return Err(SealError::Malformed {
                    reason: "this failure was sealed with its row's payload: open both (sealed::open_letter)".into(),
                });
            };
            let opened = body.open(ring, event_type, key)?;
            format::decode_failure(opened.failure_part()?)?
        } else {
            let opened = Body::V2(data).open_as(ring, format::FAILURE, event_type, id)?;
            format::decode_failure(opened.bytes())?
        }
    } else if let Some(sealed) = text.strip_prefix(TEXT_V1) {
        let mut parts = sealed.splitn(3, ':');
        let (Some(id), Some(nonce), Some(data)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(SealError::Malformed { reason: "a sealed failure is `key:nonce:data`".into() });
        };
        format::decode_failure_v1(&format::open_v1(ring, "failure", event_type, id, nonce, data)?)?
    } else {
        return Ok(failure);
    };
    Ok(FailureInfo { reason: opened.reason, chain: opened.chain, stacktrace: opened.stacktrace, ..failure })
}

/// The longest plaintext payload a store with a limit of `max_bytes` keeps once sealed: the
/// envelope is base64 (4 bytes for 3) with a few hundred bytes of fields around it.
pub(crate) const fn sealed_limit(max_bytes: usize) -> usize {
    max_bytes.saturating_sub(4096) / 4 * 3
}

/// `payload` and `failure` as a type with `sealing` parks them, in one seal: the payload's
/// envelope holds both, and the failure keeps its kind, class and keyed fingerprint, its
/// reason the [`placeholder`] and its stack trace `dlq-sealed:v2:<key>:payload`. Neither is
/// cut; an already sealed payload is kept and the failure sealed on its own.
///
/// ```
/// use dlq_core::sealed::{self, KeyRing, Sealing};
/// use dlq_core::{ErrorClass, classify::FailureInfo, Payload};
///
/// let ring = KeyRing::new("k1", [("k1", [7; 32])])?;
/// let event = Payload::Json(serde_json::json!({"id": 7, "pan": "4111111111111111"}));
/// let failure = FailureInfo::new(ErrorClass::Transient, "Card", "bad pan 4111111111111111".into(), vec![], None);
/// let (payload, stored) = sealed::seal_row(&ring, "payment", &event, failure, Sealing::new(&["/id"]))?;
/// assert_eq!(sealed::clear_fields(&payload).unwrap()["/id"], 7);
/// assert!(!format!("{payload:?}{stored:?}").contains("4111"));
/// # Ok::<(), dlq_core::sealed::SealError>(())
/// ```
///
/// # Errors
/// [`SealError::Malformed`] only for a value too long for the cipher (over 64 GiB).
pub fn seal_row(
    ring: &KeyRing,
    event_type: &str,
    payload: &Payload,
    failure: FailureInfo,
    sealing: Sealing,
) -> Result<(Payload, FailureInfo), SealError> {
    let letter = NewDeadLetter::new(event_type, payload.clone(), failure);
    let letter = seal_letter(letter, Some(sealing), Some(ring), usize::MAX)?.0;
    Ok((letter.payload, letter.failure))
}

/// `letter` as a type with `sealing` parks it: its payload (cut first when it would not fit
/// the store's `max_bytes` once sealed, and then parked dead `too_large`) and its failure's
/// text sealed together, in one seal ([`seal_row`]); when both would not fit `max_bytes`, or
/// its payload is already sealed, the failure is sealed on its own. The flag says whether the
/// payload was cut (the store cannot tell from the envelope). A type without sealing passes
/// unchanged.
///
/// # Errors
/// [`SealError::NotConfigured`] for a sealed type without a key ring: never parked in clear.
pub(crate) fn seal_letter(
    letter: NewDeadLetter,
    sealing: Option<Sealing>,
    ring: Option<&KeyRing>,
    max_bytes: usize,
) -> Result<(NewDeadLetter, bool), SealError> {
    let Some(sealing) = sealing else { return Ok((letter, false)) };
    let Some(ring) = ring else { return Err(SealError::NotConfigured { event_type: letter.event_type }) };
    let mut letter = letter;
    if envelope(&letter.payload).is_some() {
        letter.failure = seal_failure(ring, &letter.event_type, letter.failure)?;
        return Ok((letter, false));
    }
    // The payload is serialized once, into what is sealed; it is cut (and serialized again)
    // only when it is too long to fit once sealed.
    let mut plain = Plain::new();
    let failure_at = plain.push_failure_of(&letter.failure);
    let payload_at = plain.push_payload(&letter.payload);
    let limit = sealed_limit(max_bytes);
    if plain.len() - payload_at - 1 > limit || letter.payload.is_truncated() {
        letter = letter.fit(limit);
        plain.truncate(payload_at);
        plain.push_payload(&letter.payload);
    }
    let cut = letter.payload.is_truncated();
    let mut together = true;
    if plain.len() / 3 * 4 > max_bytes.saturating_sub(4096) {
        // A failure text too long to go with the payload: each is sealed on its own.
        plain.clear_failure(failure_at);
        together = false;
    }
    let event_type = &letter.event_type;
    let sealed = plain.seal(ring, format::PAYLOAD, event_type)?;
    let mut kept = kept(&letter.payload, sealing.clear());
    if !envelope_fits(&sealed, kept.as_ref(), max_bytes) {
        // The fields kept in clear are what made it too long: it goes without them.
        kept = None;
    }
    let payload = wrap(sealed, kept);
    letter.failure = if together {
        let stacktrace = [TEXT_V2, ring.active(), ":", IN_PAYLOAD].concat();
        sealed_failure(ring, letter.failure, stacktrace)
    } else {
        seal_failure(ring, event_type, letter.failure)?
    };
    letter.payload = payload;
    Ok((letter, cut))
}

/// A fingerprint keyed with a key derived from the sealing key (`derived`, made once per
/// key): alike failures still share one, and nobody without the key can test a guessed
/// message against it.
fn keyed_fingerprint(derived: &[u8; 32], fingerprint: &str) -> String {
    use sha2::{Digest, Sha256};
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::new().chain_update(derived).chain_update(fingerprint.as_bytes()).finalize();
    let mut out = String::with_capacity(16);
    for b in &digest[..8] {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorClass;

    fn ring(active: &str) -> KeyRing {
        KeyRing::new(active, [("k1", [1; 32]), ("k2", [2; 32])]).unwrap()
    }

    #[test]
    fn every_payload_kind_round_trips() {
        let cut = Payload::from_bytes(&[b'x'; 100]).fit(10);
        for payload in [Payload::Json(json!({"a": [1, "b"]})), Payload::from_bytes(b"\xff raw"), cut] {
            let sealed = seal_payload(&ring("k1"), "t", &payload, &[]).unwrap();
            assert_eq!(open_payload(&ring("k2"), "t", sealed).unwrap(), payload);
        }
    }

    #[test]
    fn two_seals_of_one_payload_differ() {
        let payload = Payload::Json(json!("same"));
        let a = seal_payload(&ring("k1"), "t", &payload, &[]).unwrap();
        assert_ne!(a, seal_payload(&ring("k1"), "t", &payload, &[]).unwrap(), "a fresh nonce each time");
    }

    #[test]
    fn the_event_type_and_key_id_are_bound() {
        let sealed = seal_payload(&ring("k1"), "payment", &Payload::Json(json!(1)), &[]).unwrap();
        assert!(matches!(open_payload(&ring("k1"), "refund", sealed.clone()), Err(SealError::Unauthentic { .. })));
        // Relabelled with the other key's id: the key id is part of the associated data.
        let relabelled = Payload::Json(
            serde_json::from_str(&String::from_utf8(sealed.to_bytes()).unwrap().replace("\"v2:k1:", "\"v2:k2:"))
                .unwrap(),
        );
        assert_eq!(open_payload(&ring("k1"), "payment", relabelled), Err(SealError::Unauthentic { key: "k2".into() }));
        let only_k2 = KeyRing::new("k2", [("k2", [2; 32])]).unwrap();
        let err = open_payload(&only_k2, "payment", sealed).unwrap_err();
        assert_eq!(err, SealError::UnknownKey { key: "k1".into(), held: "k2".into() });
        assert!(err.to_string().contains("`k1`"), "{err}");
    }

    #[test]
    fn a_payload_in_clear_passes_through_open() {
        let payload = Payload::Json(json!({"dlq_sealed": 1, "other": 2}));
        assert_eq!(sealed_key(&payload), None);
        assert_eq!(open_payload(&ring("k1"), "t", payload.clone()).unwrap(), payload);
    }

    #[test]
    fn a_failure_keeps_its_kind_and_loses_its_text() {
        let failure = FailureInfo::new(
            ErrorClass::Transient,
            "Ledger",
            "card 4111111111111111 refused".into(),
            vec!["card 4111111111111111 refused".into(), "io".into()],
            Some("at handle(4111111111111111)".into()),
        );
        let sealed = seal_failure(&ring("k2"), "payment", failure.clone()).unwrap();
        assert!(!format!("{sealed:?}").contains("4111"), "{sealed:?}");
        assert_eq!((sealed.kind.as_str(), sealed.class), ("Ledger", ErrorClass::Transient));
        assert_ne!(sealed.fingerprint, failure.fingerprint);
        assert_eq!(shown_text(sealed.stacktrace.as_deref().unwrap()), "[encrypted, key k2]");
        let opened = open_failure(&ring("k2"), "payment", sealed.clone()).unwrap();
        assert_eq!(
            (opened.reason, opened.chain, opened.stacktrace),
            (failure.reason, failure.chain, failure.stacktrace)
        );
        assert_eq!(seal_failure(&ring("k1"), "payment", sealed.clone()).unwrap(), sealed, "sealed once");
    }

    fn card_failure() -> FailureInfo {
        FailureInfo::new(
            ErrorClass::Transient,
            "Ledger",
            "card 4111111111111111 refused".into(),
            vec!["card 4111111111111111 refused".into(), "io".into()],
            Some("at handle(4111111111111111)".into()),
        )
    }

    fn texts(f: &FailureInfo) -> (&str, &[String], Option<&str>) {
        (&f.reason, &f.chain, f.stacktrace.as_deref())
    }

    #[test]
    fn a_park_seals_payload_and_failure_in_one_seal() {
        let payload = Payload::Json(json!({"id": 7, "pan": "4111111111111111"}));
        let letter = NewDeadLetter::new("payment", payload.clone(), card_failure());
        let (sealed, cut) = seal_letter(letter, Some(Sealing::new(&["/id"])), Some(&ring("k1")), usize::MAX).unwrap();
        assert!(!cut);
        assert_eq!(sealed.failure.stacktrace.as_deref(), Some("dlq-sealed:v2:k1:payload"));
        assert_eq!((sealed.failure.reason.as_str(), sealed.failure.chain.len()), ("[encrypted, key k1]", 0));
        let stored = format!("{:?}{}", sealed.failure, String::from_utf8(sealed.payload.to_bytes()).unwrap());
        assert!(!stored.contains("4111"), "{stored}");
        assert_eq!(stored.matches("v2:k1:").count(), 2, "one seal, and the failure's pointer to it: {stored}");
        let (opened, failure) =
            open_letter(&ring("k2"), "payment", sealed.payload.clone(), sealed.failure.clone()).unwrap();
        assert_eq!(opened, payload);
        assert_eq!(texts(&failure), texts(&card_failure()));
        assert_eq!(failure.fingerprint, sealed.failure.fingerprint, "stays keyed");
        // The failure alone does not say what it holds: it needs its payload.
        let err = open_failure(&ring("k1"), "payment", sealed.failure.clone()).unwrap_err();
        assert!(err.to_string().contains("open_letter"), "{err}");
        // The payload's seal opens alone (the retrier's path), and for its own type only.
        assert_eq!(open_payload(&ring("k1"), "payment", sealed.payload.clone()).unwrap(), payload);
        assert!(open_letter(&ring("k1"), "refund", sealed.payload, sealed.failure).is_err());
    }

    #[test]
    fn a_failure_too_long_to_go_with_the_payload_is_sealed_on_its_own() {
        let mut failure = card_failure();
        failure.stacktrace = Some("x".repeat(9000));
        let letter = NewDeadLetter::new("payment", Payload::Json(json!({"id": 1})), failure.clone());
        let (sealed, _) = seal_letter(letter, Some(Sealing::new(&[])), Some(&ring("k1")), 10_000).unwrap();
        let trace = sealed.failure.stacktrace.clone().unwrap();
        assert!(trace.starts_with("dlq-sealed:v2:k1:") && !trace.ends_with(":payload"));
        assert!(sealed.payload.len_within(10_000).is_some());
        let (_, opened) = open_letter(&ring("k1"), "payment", sealed.payload, sealed.failure).unwrap();
        assert_eq!(texts(&opened), texts(&failure));
    }

    #[test]
    fn fields_in_clear_that_would_not_fit_are_left_out() {
        let payload = Payload::Json(json!({"id": "i".repeat(6000), "pan": "4111"}));
        let letter = NewDeadLetter::new("payment", payload.clone(), card_failure());
        let (sealed, cut) =
            seal_letter(letter.clone(), Some(Sealing::new(&["/id"])), Some(&ring("k1")), 13_000).unwrap();
        assert!(!cut && clear_fields(&sealed.payload).is_none());
        assert!(sealed.payload.len_within(13_000).is_some());
        assert_eq!(open_payload(&ring("k1"), "payment", sealed.payload).unwrap(), payload);
        let (roomy, _) = seal_letter(letter, Some(Sealing::new(&["/id"])), Some(&ring("k1")), 40_000).unwrap();
        assert!(clear_fields(&roomy.payload).is_some(), "kept when they fit");
    }

    #[test]
    fn a_payload_too_long_once_sealed_is_cut() {
        let letter = NewDeadLetter::new("payment", Payload::from_bytes(&[b'y'; 20_000]), card_failure());
        let (sealed, cut) = seal_letter(letter, Some(Sealing::new(&[])), Some(&ring("k1")), 12_000).unwrap();
        assert!(cut && sealed.payload.len_within(12_000).is_some());
        let (opened, failure) = open_letter(&ring("k1"), "payment", sealed.payload, sealed.failure).unwrap();
        assert!(opened.is_truncated());
        assert_eq!(texts(&failure), texts(&card_failure()));
    }

    #[test]
    fn envelope_v1_still_opens_and_reseals_to_v2() {
        use crate::testing::conformance::{SEALED_MARKER, V1_SEALED_FAILURE, V1_SEALED_PAYLOAD};
        let v1 = Payload::Json(serde_json::from_str(V1_SEALED_PAYLOAD).unwrap());
        let failure = FailureInfo { stacktrace: Some(V1_SEALED_FAILURE.into()), ..card_failure() };
        assert_eq!((sealed_key(&v1), shown_text(V1_SEALED_FAILURE).as_ref()), (Some("k1"), "[encrypted, key k1]"));
        let (opened, texts_v1) = open_letter(&ring("k2"), "payment", v1.clone(), failure.clone()).unwrap();
        let marker = SEALED_MARKER;
        assert_eq!(opened, Payload::Json(json!({"id": 7, "pan": marker})));
        assert_eq!(texts_v1.reason, format!("card {marker} declined"));
        assert_eq!(open_failure(&ring("k1"), "payment", failure).unwrap().stacktrace.as_deref(), Some(marker));
        // Under the active key but in envelope v1: rekey moves it to v2, its clear fields kept.
        assert!(needs_reseal(&ring("k1"), &v1));
        let resealed = reseal(&ring("k1"), "payment", &v1).unwrap().unwrap();
        assert!(!needs_reseal(&ring("k1"), &resealed));
        assert_eq!(reseal(&ring("k1"), "payment", &resealed).unwrap(), None);
        assert_eq!(clear_fields(&resealed), clear_fields(&v1));
        assert_eq!(open_payload(&ring("k1"), "payment", resealed).unwrap(), opened);
        assert!(matches!(open_payload(&ring("k1"), "refund", v1), Err(SealError::Unauthentic { .. })));
    }

    #[test]
    fn rekey_moves_the_failure_sealed_with_the_payload() {
        let letter = NewDeadLetter::new("payment", Payload::Json(json!({"id": 3})), card_failure());
        let (sealed, _) = seal_letter(letter, Some(Sealing::new(&[])), Some(&ring("k1")), usize::MAX).unwrap();
        let resealed = reseal(&ring("k2"), "payment", &sealed.payload).unwrap().unwrap();
        assert_eq!(sealed_key(&resealed), Some("k2"));
        let only_k2 = KeyRing::new("k2", [("k2", [2; 32])]).unwrap();
        let (_, failure) = open_letter(&only_k2, "payment", resealed, sealed.failure).unwrap();
        assert_eq!(texts(&failure), texts(&card_failure()));
    }

    #[test]
    fn malformed_seals_are_errors_not_panics() {
        let sealed = seal_payload(&ring("k1"), "t", &Payload::Json(json!([1, 2])), &[]).unwrap();
        let text = String::from_utf8(sealed.to_bytes()).unwrap();
        let data = text.split("v2:k1:").nth(1).unwrap().trim_end_matches("\"}").to_owned();
        // The first character changed (the nonce is random: the data may start with `A`).
        let flipped = format!("{}{}", if data.starts_with('A') { 'B' } else { 'A' }, &data[1..]);
        for bad in ["", "AAAA", "!!!!", &data[..data.len() - 4], &flipped] {
            let payload = Payload::Json(json!({"dlq_sealed": format!("v2:k1:{bad}")}));
            assert!(open_payload(&ring("k1"), "t", payload).is_err(), "{bad}");
            let failure = FailureInfo { stacktrace: Some(format!("dlq-sealed:v2:k1:{bad}")), ..card_failure() };
            assert!(open_failure(&ring("k1"), "t", failure).is_err(), "{bad}");
        }
        for bytes in [&b""[..], b"\0\0\0\x09abc", b"\0\0\0\0\x01\0\0\0\x01", b"\0\0\0\0\0\xff\xff\xff\xff"] {
            assert!(format::decode_failure(bytes).is_err(), "{bytes:?}");
        }
    }
}
