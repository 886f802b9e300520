//! Encryption at rest of the events of chosen types: `#[dead_letter(event_type = "payment",
//! encrypt = true)]`.
//!
//! The payload, the error's messages and its stack trace (which can echo the payload) are
//! sealed with XChaCha20-Poly1305 under the active key of a [`KeyRing`] before the row reaches
//! any store, so a store (PostgreSQL, SQLite, the memory store, a third party's) only ever
//! holds ciphertext: a database dump, a backup, a read-only SQL user and an operator without
//! the key see `[encrypted, key k1]`. Each seal has a random 24-byte nonce and binds the
//! event type, what it seals (payload or failure) and the key id as associated data, so a
//! sealed value moved to another row type or relabelled with another key id does not open.
//!
//! The handler and the retrier see plaintext: the retrier opens a row after claiming it and
//! seals the failure it writes back. A row whose key the retrier does not hold is not run
//! and not counted: it stays under the claim until the lease expires (a retrier that holds
//! the key takes it then), and the retrier logs the key id and counts it
//! ([`RetrierStats::sealed_unreadable`](crate::RetrierStats::sealed_unreadable)).
//!
//! What stays readable: the event type, the error's kind and class, the timestamps and
//! counts, the dedupe key and the source (the broker's coordinates), and the fields named by
//! `clear = ["/id", "/currency"]` (JSON pointers), kept beside the ciphertext for debugging.
//! The fingerprint that groups failures is computed from the plaintext and then keyed with
//! the sealing key, so it groups alike failures without being a hash anyone can test guesses
//! against; failures sealed under different keys fall in different groups.
//!
//! ```
//! use dlq_core::sealed::{self, KeyRing};
//! use dlq_core::{ErrorClass, FailureInfo, Payload};
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

mod keys;

use base64::Engine as _;
use chacha20poly1305::aead::{Aead, Generate, KeyInit, Payload as Aad};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde_json::{Map, Value, json};

use crate::classify::FailureInfo;
use crate::record::{NewDeadLetter, Payload, Truncation};

pub use keys::{EnvKeys, FileKeys, KeyProvider, KeyRing, install_from, install_keys, installed_keys};

/// The object key that marks a sealed payload.
const TAG: &str = "dlq_sealed";
/// The algorithm, named in every envelope.
const ALG: &str = "XChaCha20-Poly1305";
/// The start of a sealed failure text (kept in the stack trace's place).
const TEXT_PREFIX: &str = "dlq-sealed:v1:";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// What goes wrong with keys and sealed rows. Messages name key ids, never key bytes nor
/// sealed content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// Nothing provides keys.
    #[error(
        "no key ring is configured ({hint}): set DLQ_KEYS (and DLQ_ACTIVE_KEY), or call dlq_core::sealed::install_keys at start-up"
    )]
    NoKeyProvider {
        /// What was looked for.
        hint: String,
    },
    /// An encrypted event type without a key ring: refused, never parked in clear.
    #[error(
        "event type `{event_type}` is encrypted (`encrypt = true`) but no key ring is configured: set DLQ_KEYS (and DLQ_ACTIVE_KEY), or call dlq_core::sealed::install_keys at start-up"
    )]
    NotConfigured {
        /// The event type.
        event_type: String,
    },
    /// The row was sealed under a key the ring does not hold.
    #[error("no key `{key}` in the key ring (it holds {held}): load a ring that has `{key}` to open this row")]
    UnknownKey {
        /// The key the row names.
        key: String,
        /// The ids the ring holds.
        held: String,
    },
    /// The key opened nothing: another key under the same id, or changed bytes.
    #[error(
        "data sealed under key `{key}` does not authenticate: the key with that id is not the one it was sealed with, or the stored bytes were changed"
    )]
    Unauthentic {
        /// The key id.
        key: String,
    },
    /// A sealed value that is not in dlq's format.
    #[error("malformed sealed value: {reason}")]
    Malformed {
        /// What is wrong.
        reason: String,
    },
    /// Keys that cannot be used.
    #[error("invalid keys: {reason}")]
    BadKeys {
        /// What is wrong (ids and positions, never bytes).
        reason: String,
    },
}

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
    let rest = text.strip_prefix(TEXT_PREFIX)?;
    let key = rest.split(':').next()?;
    Some(key)
}

/// A stored text as a person without the key sees it: the [`placeholder`] for a sealed
/// text, the text itself otherwise.
///
/// ```
/// assert_eq!(dlq_core::sealed::shown_text("dlq-sealed:v1:k1:AAAA:BBBB"), "[encrypted, key k1]");
/// assert_eq!(dlq_core::sealed::shown_text("plain"), "plain");
/// ```
pub fn shown_text(text: &str) -> std::borrow::Cow<'_, str> {
    match sealed_text_key(text) {
        Some(key) => placeholder(key).into(),
        None => text.into(),
    }
}

/// Whether a failure was sealed ([`seal_failure`]).
pub fn is_sealed_failure(failure: &FailureInfo) -> bool {
    failure.stacktrace.as_deref().and_then(sealed_text_key).is_some()
}

/// `(key id, envelope fields)` of a sealed payload.
fn envelope(payload: &Payload) -> Option<(&str, &Map<String, Value>)> {
    let Payload::Json(Value::Object(outer)) = payload else { return None };
    if outer.len() > 2 || (outer.len() == 2 && !outer.contains_key("clear")) {
        return None;
    }
    let inner = outer.get(TAG)?.as_object()?;
    let key = inner.get("key")?.as_str()?;
    Some((key, inner))
}

/// The associated data of one seal: what it is, of which event type, under which key.
fn aad(purpose: &str, event_type: &str, key: &str) -> Vec<u8> {
    format!("dlq-sealed:v1\0{purpose}\0{event_type}\0{key}").into_bytes()
}

/// Seals `plaintext` under the active key: `(key id, nonce, ciphertext)`.
fn seal_bytes<'r>(
    ring: &'r KeyRing,
    purpose: &str,
    event_type: &str,
    plaintext: &[u8],
) -> Result<(&'r str, XNonce, Vec<u8>), SealError> {
    let (id, key) = ring.active_key();
    let cipher = XChaCha20Poly1305::new(&key.0.into());
    let nonce = XNonce::generate();
    let aad = aad(purpose, event_type, id);
    let ciphertext = cipher
        .encrypt(&nonce, Aad { msg: plaintext, aad: &aad })
        .map_err(|_| SealError::Malformed { reason: "the value is too long to seal".into() })?;
    Ok((id, nonce, ciphertext))
}

fn open_bytes(
    ring: &KeyRing,
    purpose: &str,
    event_type: &str,
    id: &str,
    nonce: &str,
    data: &str,
) -> Result<Vec<u8>, SealError> {
    let key = ring.key(id)?;
    let malformed = |what: &str| SealError::Malformed { reason: format!("its {what} is not valid base64") };
    let nonce = B64.decode(nonce).map_err(|_| malformed("nonce"))?;
    let nonce = XNonce::try_from(nonce.as_slice())
        .map_err(|_| SealError::Malformed { reason: "its nonce is not 24 bytes".into() })?;
    let data = B64.decode(data).map_err(|_| malformed("data"))?;
    let cipher = XChaCha20Poly1305::new(&key.0.into());
    let aad = aad(purpose, event_type, id);
    cipher.decrypt(&nonce, Aad { msg: &data, aad: &aad }).map_err(|_| SealError::Unauthentic { key: id.to_owned() })
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
/// [`SealError::Malformed`] only for a value too long for the cipher (over 256 GiB).
pub fn seal_payload(ring: &KeyRing, event_type: &str, payload: &Payload, clear: &[&str]) -> Result<Payload, SealError> {
    if envelope(payload).is_some() {
        return Ok(payload.clone());
    }
    let plaintext = encode_payload(payload);
    let (id, nonce, data) = seal_bytes(ring, "payload", event_type, &plaintext)?;
    let mut outer = Map::new();
    outer.insert(
        TAG.into(),
        json!({"v": 1, "alg": ALG, "key": id, "nonce": B64.encode(nonce), "data": B64.encode(data)}),
    );
    if let Payload::Json(value) = payload {
        let kept: Map<String, Value> =
            clear.iter().filter_map(|p| value.pointer(p).map(|v| ((*p).to_owned(), v.clone()))).collect();
        if !kept.is_empty() {
            outer.insert("clear".into(), Value::Object(kept));
        }
    }
    Ok(Payload::Json(Value::Object(outer)))
}

/// The payload a sealed one holds; a payload in clear comes back as it is.
///
/// # Errors
/// [`SealError::UnknownKey`] when the ring lacks its key, [`SealError::Unauthentic`] when the
/// key does not open it (or it was sealed for another event type), [`SealError::Malformed`].
pub fn open_payload(ring: &KeyRing, event_type: &str, payload: Payload) -> Result<Payload, SealError> {
    let Some((id, inner)) = envelope(&payload) else { return Ok(payload) };
    let field = |name: &str| {
        inner.get(name).and_then(Value::as_str).ok_or_else(|| SealError::Malformed { reason: format!("no `{name}`") })
    };
    let plaintext = open_bytes(ring, "payload", event_type, id, field("nonce")?, field("data")?)?;
    decode_payload(plaintext)
}

/// A payload as bytes: a tag (`J`son, `R`aw, `T`runcated raw), then its content.
fn encode_payload(payload: &Payload) -> Vec<u8> {
    match payload {
        Payload::Json(value) => {
            let mut out = vec![b'J'];
            // Serializing a `Value` into memory cannot fail: its map keys are strings.
            let _ = serde_json::to_writer(&mut out, value);
            out
        }
        Payload::Raw { bytes, truncated: None } => [b"R".as_slice(), bytes].concat(),
        Payload::Raw { bytes, truncated: Some(t) } => {
            let mut out = vec![b'T'];
            out.extend_from_slice(&t.original_len.to_be_bytes());
            let sha = format!("{:<64}", t.original_sha256);
            out.extend_from_slice(&sha.as_bytes()[..64]);
            out.extend_from_slice(bytes);
            out
        }
    }
}

fn decode_payload(mut bytes: Vec<u8>) -> Result<Payload, SealError> {
    let malformed = || SealError::Malformed { reason: "the opened payload is not in dlq's form".into() };
    match bytes.first() {
        Some(b'J') => serde_json::from_slice(&bytes[1..]).map(Payload::Json).map_err(|_| malformed()),
        Some(b'R') => {
            bytes.remove(0);
            Ok(Payload::Raw { bytes, truncated: None })
        }
        Some(b'T') if bytes.len() >= 73 => {
            let len = u64::from_be_bytes(bytes[1..9].try_into().map_err(|_| malformed())?);
            let sha = String::from_utf8(bytes[9..73].to_vec()).map_err(|_| malformed())?.trim_end().to_owned();
            Ok(Payload::Raw {
                bytes: bytes.split_off(73),
                truncated: Some(Truncation { original_len: len, original_sha256: sha }),
            })
        }
        _ => Err(malformed()),
    }
}

/// `failure` with its messages and stack trace sealed under the ring's active key: the reason
/// becomes the [`placeholder`], the chain is emptied, the stack trace holds the sealed text,
/// and the fingerprint is keyed. Kind, class and retry hint stay. An already sealed failure
/// comes back as it is.
///
/// # Errors
/// As [`seal_payload`].
pub fn seal_failure(ring: &KeyRing, event_type: &str, failure: FailureInfo) -> Result<FailureInfo, SealError> {
    if is_sealed_failure(&failure) {
        return Ok(failure);
    }
    let plaintext = json!({"reason": failure.reason, "chain": failure.chain, "stacktrace": failure.stacktrace});
    let plaintext = serde_json::to_vec(&plaintext).unwrap_or_default();
    let (id, nonce, data) = seal_bytes(ring, "failure", event_type, &plaintext)?;
    let (_, key) = ring.active_key();
    Ok(FailureInfo {
        reason: placeholder(id),
        chain: Vec::new(),
        stacktrace: Some(format!("{TEXT_PREFIX}{id}:{}:{}", B64.encode(nonce), B64.encode(data))),
        fingerprint: keyed_fingerprint(&key.0, &failure.fingerprint),
        ..failure
    })
}

/// The failure a sealed one holds (its fingerprint stays keyed); one in clear comes back as
/// it is.
///
/// # Errors
/// As [`open_payload`].
pub fn open_failure(ring: &KeyRing, event_type: &str, failure: FailureInfo) -> Result<FailureInfo, SealError> {
    let Some(sealed) = failure.stacktrace.as_deref().and_then(|s| s.strip_prefix(TEXT_PREFIX)) else {
        return Ok(failure);
    };
    let mut parts = sealed.splitn(3, ':');
    let (Some(id), Some(nonce), Some(data)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(SealError::Malformed { reason: "a sealed failure is `key:nonce:data`".into() });
    };
    let plaintext = open_bytes(ring, "failure", event_type, id, nonce, data)?;
    let opened: Value = serde_json::from_slice(&plaintext)
        .map_err(|_| SealError::Malformed { reason: "the opened failure is not JSON".into() })?;
    let text = |v: &Value| v.as_str().map(str::to_owned);
    Ok(FailureInfo {
        reason: opened.get("reason").and_then(text).unwrap_or_default(),
        chain: opened
            .get("chain")
            .and_then(Value::as_array)
            .map(|c| c.iter().filter_map(text).collect())
            .unwrap_or_default(),
        stacktrace: opened.get("stacktrace").and_then(text),
        ..failure
    })
}

/// The longest plaintext payload a store with a limit of `max_bytes` keeps once sealed: the
/// envelope is base64 (4 bytes for 3) with a few hundred bytes of fields around it.
pub(crate) const fn sealed_limit(max_bytes: usize) -> usize {
    max_bytes.saturating_sub(4096) / 4 * 3
}

/// `letter` as a type with `sealing` parks it: its payload (cut first when it would not fit
/// the store's `max_bytes` once sealed, and then parked dead `too_large`) and failure sealed.
/// The flag says whether the payload was cut (the store cannot tell from the envelope). A
/// type without sealing passes unchanged.
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
    let mut letter = letter.fit(sealed_limit(max_bytes));
    let cut = letter.payload.is_truncated();
    let mut payload = seal_payload(ring, &letter.event_type, &letter.payload, sealing.clear())?;
    if payload.len_within(max_bytes).is_none() {
        // The fields kept in clear are what made it too long: seal it without them.
        payload = seal_payload(ring, &letter.event_type, &letter.payload, &[])?;
    }
    letter.payload = payload;
    letter.failure = seal_failure(ring, &letter.event_type, letter.failure)?;
    Ok((letter, cut))
}

/// A fingerprint keyed with a key derived from `key`: alike failures still share one, and
/// nobody without the key can test a guessed message against it.
fn keyed_fingerprint(key: &[u8; 32], fingerprint: &str) -> String {
    use sha2::{Digest, Sha256};
    let derived = Sha256::new().chain_update(b"dlq-sealed:v1\0fingerprint\0").chain_update(key).finalize();
    let digest = Sha256::new().chain_update(derived).chain_update(fingerprint.as_bytes()).finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
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
            serde_json::from_str(
                &sealed.to_bytes().iter().map(|&b| b as char).collect::<String>().replace("\"k1\"", "\"k2\""),
            )
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
}
