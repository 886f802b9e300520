//! Erasure by data subject: the keyed hash a row is stored under, so that every row of one
//! person (one customer, one card holder) can be found and deleted on request without the
//! table holding who that is.
//!
//! An event names its subject with [`SourceMeta::subject`](crate::SourceMeta::subject) or a
//! JSON pointer in its handler's attribute (`#[dead_letter(event_type = "payment", subject =
//! "/customer_id")]`). The subject is never stored: the row keeps its HMAC-SHA256 under the
//! service's [`SubjectKey`] ([`SubjectHash`]), and `dlq erase --subject customer-42` (through
//! [`Admin::erase`](crate::admin::Admin::erase)) hashes the subject it is given with the same
//! key to find the rows. Without the key the stored hashes are not reversible by guessing a
//! customer id: a plain SHA-256 of `customer-42` would be.
//!
//! The key comes from the environment variable [`KEY_ENV`] (`DLQ_SUBJECT_KEY`, at least 32
//! bytes) or from [`install_key`]; it is never printed.
//!
//! ```
//! use dlq_core::subject::SubjectKey;
//!
//! let key = SubjectKey::new("a key of at least thirty-two bytes, kept secret")?;
//! let hash = key.hash("customer-42");
//! assert_eq!(hash, key.hash("customer-42"), "the same subject, the same hash");
//! assert_ne!(hash, key.hash("customer-43"));
//! assert!(!hash.as_str().contains("customer"), "{hash}");
//! assert_eq!(format!("{key:?}"), "SubjectKey(..)", "the key is never printed");
//! # Ok::<(), dlq_core::Error>(())
//! ```

use std::sync::OnceLock;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::Error;

/// The environment variable holding the subject key: at least [`MIN_KEY_BYTES`] bytes.
pub const KEY_ENV: &str = "DLQ_SUBJECT_KEY";

/// The shortest subject key accepted: 32 bytes, HMAC-SHA256's output size.
pub const MIN_KEY_BYTES: usize = 32;

/// How many hex digits of a subject's hash an erasure keeps in its record: enough to tell
/// two erasures apart, too few to find the subject's rows again.
pub const RECORDED_PREFIX: usize = 12;

/// The secret key subjects are hashed with (HMAC-SHA256). Its `Debug` never shows it.
#[derive(Clone)]
pub struct SubjectKey {
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for SubjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubjectKey(..)")
    }
}

impl SubjectKey {
    /// A key from its bytes.
    ///
    /// ```
    /// assert!(dlq_core::subject::SubjectKey::new("short").is_err());
    /// ```
    ///
    /// # Errors
    /// [`Error::Config`] for a key shorter than [`MIN_KEY_BYTES`] (the message does not show it).
    pub fn new(key: impl AsRef<[u8]>) -> Result<Self, Error> {
        let key = key.as_ref();
        if key.len() < MIN_KEY_BYTES {
            return Err(Error::Config {
                key: KEY_ENV.into(),
                file: None,
                reason: format!("the subject key has {} bytes, it needs at least {MIN_KEY_BYTES}", key.len()),
            });
        }
        let mac = Hmac::<Sha256>::new_from_slice(key).map_err(|e| Error::Config {
            key: KEY_ENV.into(),
            file: None,
            reason: e.to_string(),
        })?;
        Ok(Self { mac })
    }

    /// The key in [`KEY_ENV`], `None` when the variable is unset.
    ///
    /// # Errors
    /// [`Error::Config`] when it is set but too short or not UTF-8.
    pub fn from_env() -> Result<Option<Self>, Error> {
        match std::env::var(KEY_ENV) {
            Ok(key) => Self::new(key).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(Error::Config { key: KEY_ENV.into(), file: None, reason: "not UTF-8".into() })
            }
        }
    }

    /// The keyed hash of `subject`.
    ///
    /// ```
    /// use dlq_core::subject::SubjectKey;
    /// let key = SubjectKey::new([42u8; 32])?;
    /// let hash = key.hash("customer-42");
    /// assert_eq!(hash, key.hash("customer-42"), "the same subject, the same hash: searchable");
    /// assert!(!hash.as_str().contains("customer"), "the subject is not in it");
    /// assert_ne!(hash, SubjectKey::new([1u8; 32])?.hash("customer-42"), "another key, another hash");
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
    pub fn hash(&self, subject: &str) -> SubjectHash {
        let mut mac = self.mac.clone();
        mac.update(subject.as_bytes());
        SubjectHash(crate::admin::hex(&mac.finalize().into_bytes()))
    }
}

/// A subject's keyed hash as stored with its rows: 64 lowercase hex digits.
///
/// ```
/// use dlq_core::subject::SubjectHash;
/// let hash = SubjectHash::from_hex("ab".repeat(32))?;
/// assert_eq!(hash.prefix(), "abababababab");
/// assert!(SubjectHash::from_hex("customer-42").is_err(), "a subject is not a hash");
/// # Ok::<(), dlq_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SubjectHash(String);

impl SubjectHash {
    /// A stored hash read back (stores use it).
    ///
    /// # Errors
    /// [`Error::Invalid`] unless it is 64 lowercase hex digits.
    pub fn from_hex(hex: impl Into<String>) -> Result<Self, Error> {
        let hex = hex.into();
        if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            Ok(Self(hex))
        } else {
            Err(Error::Invalid("a subject hash is 64 lowercase hex digits".into()))
        }
    }

    /// The hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first [`RECORDED_PREFIX`] digits, what an erasure's record keeps.
    pub fn prefix(&self) -> &str {
        &self.0[..RECORDED_PREFIX]
    }
}

impl std::fmt::Display for SubjectHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

static INSTALLED: OnceLock<SubjectKey> = OnceLock::new();

/// Sets the process's subject key (instead of [`KEY_ENV`]); the first call wins.
///
/// # Errors
/// [`Error::Config`] when a key was installed already.
pub fn install_key(key: SubjectKey) -> Result<(), Error> {
    INSTALLED.set(key).map_err(|_| Error::Config {
        key: KEY_ENV.into(),
        file: None,
        reason: "a subject key was installed already".into(),
    })
}

/// The process's subject key: the installed one, else the one in [`KEY_ENV`] (read once).
///
/// # Errors
/// [`Error::Config`] when [`KEY_ENV`] holds a bad key.
pub fn key() -> Result<Option<&'static SubjectKey>, Error> {
    static FROM_ENV: OnceLock<Result<Option<SubjectKey>, String>> = OnceLock::new();
    if let Some(key) = INSTALLED.get() {
        return Ok(Some(key));
    }
    match FROM_ENV.get_or_init(|| SubjectKey::from_env().map_err(|e| e.to_string())) {
        Ok(key) => Ok(key.as_ref()),
        Err(reason) => Err(Error::Config { key: KEY_ENV.into(), file: None, reason: reason.clone() }),
    }
}

/// The process's subject key, or the error saying that `what` needs one.
///
/// # Errors
/// [`Error::Config`] naming [`KEY_ENV`].
pub fn required_key(what: &str) -> Result<&'static SubjectKey, Error> {
    key()?.ok_or_else(|| Error::Config {
        key: KEY_ENV.into(),
        file: None,
        reason: format!(
            "{what} needs a subject key: set {KEY_ENV} (at least {MIN_KEY_BYTES} bytes, the same in every process \
             of the service and in the `dlq` command line)"
        ),
    })
}

/// The subject that the JSON `pointer` finds in `payload`, as text: a string as it is, a
/// number as written; `None` when the pointer finds nothing, or an object, array, bool or null.
///
/// ```
/// let payload = serde_json::json!({"customer": {"id": 42}, "email": "a@b.c"});
/// assert_eq!(dlq_core::subject::at_pointer(&payload, "/customer/id").as_deref(), Some("42"));
/// assert_eq!(dlq_core::subject::at_pointer(&payload, "/email").as_deref(), Some("a@b.c"));
/// assert_eq!(dlq_core::subject::at_pointer(&payload, "/missing"), None);
/// ```
pub fn at_pointer(payload: &serde_json::Value, pointer: &str) -> Option<String> {
    match payload.pointer(pointer)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The keyed hash of `subject` for a letter of `event_type`, or `None` (logged, without the
/// subject) when no key is configured: the event is parked all the same, unerasable by subject.
pub(crate) fn stamp(event_type: &str, subject: &str) -> Option<SubjectHash> {
    match key() {
        Ok(Some(key)) => Some(key.hash(subject)),
        Ok(None) => {
            tracing::error!(
                event_type,
                "a dead letter names a subject but no subject key is set ({KEY_ENV}): parked without it"
            );
            None
        }
        Err(err) => {
            tracing::error!(event_type, error = %err, "a dead letter names a subject but the subject key is unusable: parked without it");
            None
        }
    }
}

/// The subject's keyed hash of a JSON payload, found at `pointer` ([`at_pointer`]).
pub(crate) fn stamp_pointer(event_type: &str, payload: &crate::Payload, pointer: &str) -> Option<SubjectHash> {
    let crate::Payload::Json(value) = payload else { return None };
    stamp(event_type, &at_pointer(value, pointer)?)
}

/// For store implementers: what [`Admin::erase`](crate::admin::Admin::erase) asks of
/// [`DeadLetterStore::erase`](crate::DeadLetterStore::erase).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EraseRequest {
    /// The subject's keyed hash.
    pub subject: SubjectHash,
    /// Who erases, and why (the request's reference).
    pub note: crate::store::AuditNote,
}

impl EraseRequest {
    /// A request, for stores and tests outside this crate.
    pub fn new(subject: SubjectHash, note: crate::store::AuditNote) -> Self {
        Self { subject, note }
    }
}

/// The record an erasure leaves: who, when, why, how much, and the first
/// [`RECORDED_PREFIX`] digits of the subject's hash. Nothing of the rows it deleted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Erasure {
    /// The record's id.
    pub id: i64,
    /// The subject hash's first [`RECORDED_PREFIX`] hex digits.
    pub subject_prefix: String,
    /// Rows deleted.
    pub rows: u64,
    /// Attempt records deleted with them (PostgreSQL keeps each row's attempt 0 in the row
    /// itself: it counts only the retries).
    pub attempts: u64,
    /// Audit entries deleted with them.
    pub audit: u64,
    /// The operator.
    pub actor: String,
    /// Why (the request's reference).
    pub reason: String,
    /// When.
    pub at: chrono::DateTime<chrono::Utc>,
}

impl Erasure {
    /// A record, for stores outside this crate: counts are `(rows, attempts, audit)`.
    pub fn new(
        id: i64,
        subject_prefix: impl Into<String>,
        (rows, attempts, audit): (u64, u64, u64),
        note: crate::store::AuditNote,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Self {
        let reason = note.reason.unwrap_or_default();
        Self { id, subject_prefix: subject_prefix.into(), rows, attempts, audit, actor: note.actor, reason, at }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// RFC 4231, test case 6 (a key longer than SHA-256's block).
    #[test]
    fn hash_is_hmac_sha256_in_hex() {
        let key = SubjectKey::new([0xaa; 131]).unwrap();
        let hash = key.hash("Test Using Larger Than Block-Size Key - Hash Key First");
        assert_eq!(hash.as_str(), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    }

    #[test]
    fn a_short_key_is_refused_without_showing_it() {
        let err = SubjectKey::new("hunter2").unwrap_err().to_string();
        assert!(err.contains("at least 32") && !err.contains("hunter2"), "{err}");
    }
}
