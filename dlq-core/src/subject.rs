//! Erasure by data subject: the keyed hash a row is stored under, so that every row of one
//! person (one customer, one card holder) can be found and deleted on request without the
//! table holding who that is.
//!
//! An event names its subject with [`SourceMeta::subject`](crate::adapter::SourceMeta::subject) or a
//! JSON pointer in its handler's attribute (`#[dead_letter(event_type = "payment", subject =
//! "/customer_id")]`). The subject is never stored: the row keeps its HMAC-SHA256 under the
//! service's [`SubjectKey`] ([`SubjectHash`]), and `dlq erase --subject customer-42` (through
//! `Admin::erase`) hashes the subject it is given with the same
//! key to find the rows. Without the key the stored hashes are not reversible by guessing a
//! customer id: a plain SHA-256 of `customer-42` would be.
//!
//! The key comes from the environment variable [`KEY_ENV`] (`DLQ_SUBJECT_KEY`, at least 32
//! bytes) or from [`install_key`]; it is never printed.
//!
//! # What is hashed
//! - The key: the variable's value as its UTF-8 bytes, used as they are (no hex or base64
//!   decoding, no trimming), at least [`MIN_KEY_BYTES`]; [`SubjectKey::new`] takes any bytes.
//! - The subject: its UTF-8 bytes as given ([`SourceMeta::subject`](crate::adapter::SourceMeta::subject),
//!   `dlq erase --subject`), with no trimming or case folding; at a `subject = "/pointer"`, a
//!   JSON string's value without its quotes, a JSON number as `serde_json` writes it
//!   ([`at_pointer`]: `42`, `4.5`; `42` and `42.0` are two subjects).
//! - The stored hash: HMAC-SHA256(key, subject) in 64 lowercase hex digits ([`SubjectHash`]).
//! - The key's check value: HMAC-SHA256(key, [`CHECK_LABEL`]) likewise ([`SubjectKey::check`]).
//!   The store keeps the first one (`PrivacyStore::subject_key_check`),
//!   and an erasure with a key whose check value differs is refused ([`check_key`]) before
//!   anything is deleted or recorded.
//!
//! The same values as `openssl` computes them
//! (`printf customer-42 | openssl dgst -sha256 -hmac "$DLQ_SUBJECT_KEY"`):
//!
//! ```
//! use dlq_core::subject::{CHECK_LABEL, SubjectKey, at_pointer};
//!
//! let key = SubjectKey::new("a key of at least thirty-two bytes, kept secret")?;
//! let customer = "3ee019c16dd8f61b727529e4f1ed3d22e9bcab39865b90dd9698a2d57d4c2549";
//! assert_eq!(key.hash("customer-42").as_str(), customer);
//! let number = at_pointer(&serde_json::json!({"customer_id": 42}), "/customer_id").unwrap();
//! assert_eq!(key.hash(&number).as_str(), "95286ef871bf7d5a39853211506d4da49bf1d3b3c724918554f72e03f3722d53");
//! assert_eq!(CHECK_LABEL, "dlq subject key check value, v1");
//! assert_eq!(key.check().as_str(), "1fa612d554cff8c771f5e625ad2b3f55b323976eba77c42e77fecd4cb28431f0");
//! # Ok::<(), dlq_core::Error>(())
//! ```
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
        SubjectHash(crate::record::hex(&mac.finalize().into_bytes()))
    }

    /// The key's check value: its HMAC-SHA256 of [`CHECK_LABEL`], in hex. A store keeps the
    /// first one it is given (`PrivacyStore::subject_key_check`), so that an erasure
    /// with another key is refused instead of finding no rows. It tells keys apart without
    /// revealing them (finding the key from it is as hard as from any HMAC output).
    ///
    ///
    /// ```
    /// use dlq_core::subject::SubjectKey;
    /// let key = SubjectKey::new([42u8; 32])?;
    /// assert_eq!(key.check(), SubjectKey::new([42u8; 32])?.check());
    /// assert_ne!(key.check(), SubjectKey::new([1u8; 32])?.check(), "another key, another check value");
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
    pub fn check(&self) -> KeyCheck {
        KeyCheck(self.hash(CHECK_LABEL).0)
    }
}

/// What [`SubjectKey::check`] hashes: a fixed label no subject is expected to be.
pub const CHECK_LABEL: &str = "dlq subject key check value, v1";

/// A subject key's check value ([`SubjectKey::check`]): 64 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyCheck(String);

impl KeyCheck {
    /// A stored check value read back (stores use it).
    ///
    /// # Errors
    /// [`Error::Invalid`] unless it is 64 lowercase hex digits.
    pub fn from_hex(hex: impl Into<String>) -> Result<Self, Error> {
        SubjectHash::from_hex(hex)
            .map(|h| Self(h.0))
            .map_err(|_| Error::Invalid("a subject key's check value is 64 lowercase hex digits".into()))
    }

    /// The hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `Ok` when `stored`, the check value a store keeps (what `PrivacyStore::subject_key_check`
/// answers when given `key`'s, storing it when the store has none yet, as the first key to hash
/// a subject), is `key`'s.
///
/// ```
/// use dlq_core::subject::{check_key, SubjectKey};
/// let key = SubjectKey::new([7; 32])?;
/// assert!(check_key(&key, &key.check()).is_ok());
/// assert!(check_key(&key, &SubjectKey::new([8; 32])?.check()).is_err());
/// # Ok::<(), dlq_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::Config`] naming [`KEY_ENV`] when the store keeps another key's check value.
pub fn check_key(key: &SubjectKey, stored: &KeyCheck) -> Result<(), Error> {
    if *stored == key.check() {
        return Ok(());
    }
    Err(Error::Config {
        key: KEY_ENV.into(),
        file: None,
        reason: "this is not the key the store's subjects were hashed with (the store keeps the check value of \
                 the first key that hashed a subject, and this key's differs): with it, no subject's rows can be \
                 found; set the service's key"
            .into(),
    })
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
    match FROM_ENV.get_or_init(|| SubjectKey::from_env().map_err(config_reason)) {
        Ok(key) => Ok(key.as_ref()),
        Err(reason) => Err(Error::Config { key: KEY_ENV.into(), file: None, reason: reason.clone() }),
    }
}

/// What a configuration error says is wrong, without its prefix: the error it is kept for
/// adds the prefix again.
fn config_reason(error: Error) -> String {
    match error {
        Error::Config { reason, .. } => reason,
        other => other.to_string(),
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

/// For store implementers: what `Admin::erase` asks of
/// `PrivacyStore::erase`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EraseRequest {
    /// The subject's keyed hash.
    pub subject: SubjectHash,
    /// Who erases, and why (the request's reference).
    pub note: crate::record::AuditNote,
}

impl EraseRequest {
    /// A request, for stores and tests outside this crate.
    pub fn new(subject: SubjectHash, note: crate::record::AuditNote) -> Self {
        Self { subject, note }
    }
}

/// A count of an erasure record as the store holds it: a number of rows, or the stored value
/// when it is no count (negative: a record damaged or written by hand), shown as such and
/// never as another number. In JSON, the stored number as it is.
///
/// ```
/// use dlq_core::subject::Count;
/// assert_eq!(Count::stored(3), Count::Of(3));
/// assert_eq!(Count::stored(-1).to_string(), "invalid (-1)");
/// assert_eq!(serde_json::to_value(Count::stored(-1))?, -1);
/// assert_eq!(serde_json::from_value::<Count>(serde_json::json!(-1))?, Count::Invalid(-1));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum Count {
    /// A count.
    Of(u64),
    /// What the store held instead of a count.
    Invalid(i64),
}

impl Count {
    /// The count a store read back.
    pub fn stored(n: i64) -> Self {
        u64::try_from(n).map_or(Self::Invalid(n), Self::Of)
    }

    /// The count, `None` when the store held no count.
    pub const fn get(self) -> Option<u64> {
        match self {
            Self::Of(n) => Some(n),
            Self::Invalid(_) => None,
        }
    }
}

impl From<u64> for Count {
    fn from(n: u64) -> Self {
        Self::Of(n)
    }
}

impl PartialEq<u64> for Count {
    fn eq(&self, other: &u64) -> bool {
        self.get() == Some(*other)
    }
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Of(n) => write!(f, "{n}"),
            Self::Invalid(n) => write!(f, "invalid ({n})"),
        }
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
    pub rows: Count,
    /// Attempt records deleted with them (PostgreSQL keeps each row's attempt 0 in the row
    /// itself: it counts only the retries).
    pub attempts: Count,
    /// Audit entries deleted with them.
    pub audit: Count,
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
        note: crate::record::AuditNote,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Self {
        let reason = note.reason.unwrap_or_default();
        let (rows, attempts, audit) = (rows.into(), attempts.into(), audit.into());
        Self { id, subject_prefix: subject_prefix.into(), rows, attempts, audit, actor: note.actor, reason, at }
    }

    /// A record read back from a store, its counts as stored ([`Count::stored`]): a count
    /// that is out of range is kept as such.
    pub fn stored(
        id: i64,
        subject_prefix: impl Into<String>,
        (rows, attempts, audit): (i64, i64, i64),
        note: crate::record::AuditNote,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Self {
        Self {
            rows: Count::stored(rows),
            attempts: Count::stored(attempts),
            audit: Count::stored(audit),
            ..Self::new(id, subject_prefix, (0, 0, 0), note, at)
        }
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
