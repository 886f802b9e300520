//! The key ring ([`KeyRing`]): versioned 32-byte keys, one of them active, and where they come
//! from ([`KeyProvider`]: [`EnvKeys`], [`FileKeys`], or a KMS of the application's own).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use base64::Engine as _;

use super::SealError;

/// One 32-byte key, with what every seal under it needs made once: the AES-256-GCM key
/// schedule and the key its fingerprints are keyed with. Its bytes never appear in `Debug`
/// output or in an error.
#[derive(Clone)]
pub(crate) struct Key {
    pub(crate) bytes: [u8; 32],
    /// The key expanded for AES-256-GCM (envelope v2).
    pub(crate) aead: aes_gcm::Aes256Gcm,
    /// SHA-256 of a label and the key: the key of the row's keyed fingerprint.
    pub(crate) fingerprint: [u8; 32],
}

impl Key {
    pub(crate) fn new(bytes: [u8; 32]) -> Self {
        use aes_gcm::KeyInit as _;
        use sha2::{Digest as _, Sha256};
        let fingerprint = Sha256::new().chain_update(b"dlq-sealed:v1\0fingerprint\0").chain_update(bytes).finalize();
        Self { bytes, aead: aes_gcm::Aes256Gcm::new(&bytes.into()), fingerprint: fingerprint.into() }
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

/// Versioned keys, one of them active: rows are sealed under the active key and keep its id;
/// every key of the ring opens the rows sealed under it. Rotation is a new ring with a new
/// active id that still holds the old keys, until `dlq rekey` has moved every row off them.
///
/// `Debug` shows the ids, never a key's bytes.
///
/// ```
/// use dlq_core::sealed::KeyRing;
///
/// let ring = KeyRing::parse(&format!("k2:{},k1:{}", "A".repeat(43) + "=", "B".repeat(42) + "A="), Some("k2"))?;
/// assert_eq!(ring.active(), "k2");
/// assert_eq!(ring.ids().collect::<Vec<_>>(), ["k1", "k2"]);
/// assert!(!format!("{ring:?}").contains("AAAA"), "no key material in Debug output");
/// # Ok::<(), dlq_core::sealed::SealError>(())
/// ```
#[derive(Clone)]
pub struct KeyRing {
    keys: BTreeMap<String, Key>,
    active: String,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing").field("active", &self.active).field("ids", &self.keys.keys()).finish()
    }
}

impl KeyRing {
    /// A ring of `keys` (id and 32 bytes each) sealing under `active`.
    ///
    /// # Errors
    /// [`SealError::BadKeys`] for no keys, an invalid or repeated id (ids are 1 to 64 of
    /// `A-Z a-z 0-9 _ . -`), or an active id the ring does not hold.
    ///
    /// ```
    /// let ring = dlq_core::sealed::KeyRing::new("k1", [("k1", [7; 32])])?;
    /// assert!(ring.contains("k1"));
    /// # Ok::<(), dlq_core::sealed::SealError>(())
    /// ```
    pub fn new<'a>(active: &str, keys: impl IntoIterator<Item = (&'a str, [u8; 32])>) -> Result<Self, SealError> {
        let mut ring = BTreeMap::new();
        for (id, bytes) in keys {
            check_id(id)?;
            if ring.insert(id.to_owned(), Key::new(bytes)).is_some() {
                return Err(SealError::BadKeys { reason: format!("key id `{id}` is given twice") });
            }
        }
        if ring.is_empty() {
            return Err(SealError::BadKeys { reason: "no keys given".into() });
        }
        if !ring.contains_key(active) {
            let ids = ring.keys().map(String::as_str).collect::<Vec<_>>().join(", ");
            return Err(SealError::BadKeys { reason: format!("the active key `{active}` is not in the ring ({ids})") });
        }
        Ok(Self { keys: ring, active: active.to_owned() })
    }

    /// Reads `id:<base64 of 32 bytes>` entries separated by commas or new lines (`#` starts
    /// a comment line), the form of `DLQ_KEYS`. The active key is `active`, or the first
    /// entry when `None`.
    ///
    /// ```
    /// use dlq_core::sealed::KeyRing;
    /// let (k1, k2) = ("A".repeat(43) + "=", "B".repeat(42) + "A=");
    /// let ring = KeyRing::parse(&format!("k2:{k2},k1:{k1}"), Some("k2"))?;
    /// assert_eq!((ring.active(), ring.ids().collect::<Vec<_>>()), ("k2", vec!["k1", "k2"]));
    /// assert!(KeyRing::parse("k1:too-short", None).is_err());
    /// # Ok::<(), dlq_core::sealed::SealError>(())
    /// ```
    ///
    /// # Errors
    /// [`SealError::BadKeys`] naming the entry (by its id or position, never its bytes).
    pub fn parse(spec: &str, active: Option<&str>) -> Result<Self, SealError> {
        let mut keys = Vec::new();
        let entries = spec.split([',', '\n']).map(str::trim).filter(|e| !e.is_empty() && !e.starts_with('#'));
        for (n, entry) in entries.enumerate() {
            let Some((id, encoded)) = entry.split_once(':') else {
                let reason = format!("entry {} is not `id:<base64 of 32 bytes>`", n + 1);
                return Err(SealError::BadKeys { reason });
            };
            let (id, encoded) = (id.trim(), encoded.trim());
            check_id(id)?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .ok_or_else(|| SealError::BadKeys {
                    reason: format!("key `{id}` is not the standard base64 of exactly 32 bytes"),
                })?;
            keys.push((id, bytes));
        }
        let first = keys.first().map(|(id, _)| *id).unwrap_or_default();
        Self::new(active.unwrap_or(first), keys)
    }

    /// The id rows are sealed under.
    pub fn active(&self) -> &str {
        &self.active
    }

    /// Every key id of the ring, sorted.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Whether the ring holds the key `id`.
    pub fn contains(&self, id: &str) -> bool {
        self.keys.contains_key(id)
    }

    pub(crate) fn key(&self, id: &str) -> Result<&Key, SealError> {
        self.keys.get(id).ok_or_else(|| SealError::UnknownKey { key: id.to_owned(), held: self.ids_text() })
    }

    pub(crate) fn active_key(&self) -> (&str, &Key) {
        // `new` checked that the active id is in the ring.
        let key = &self.keys[&self.active];
        (&self.active, key)
    }

    fn ids_text(&self) -> String {
        self.ids().collect::<Vec<_>>().join(", ")
    }
}

/// Whether `id` can name a key: 1 to 64 of `A-Z a-z 0-9 _ . -` (so it prints safely and never
/// holds the separators of `DLQ_KEYS`).
fn check_id(id: &str) -> Result<(), SealError> {
    let ok = (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if ok {
        return Ok(());
    }
    let shown: String = id.chars().take(64).map(|c| if c.is_ascii_graphic() { c } else { '?' }).collect();
    Err(SealError::BadKeys { reason: format!("invalid key id {shown:?}: use 1 to 64 of A-Z a-z 0-9 _ . -") })
}

/// Where a key ring comes from: the place for a KMS. [`EnvKeys`] and [`FileKeys`] are the
/// stock providers; an application's own (a KMS that unwraps data keys at start-up) builds the
/// ring with [`KeyRing::new`].
///
/// ```
/// use dlq_core::sealed::{KeyProvider, KeyRing, SealError};
///
/// struct Fixed;
/// impl KeyProvider for Fixed {
///     fn load(&self) -> Result<KeyRing, SealError> {
///         KeyRing::new("k1", [("k1", [9; 32])])
///     }
/// }
/// assert_eq!(Fixed.load()?.active(), "k1");
/// # Ok::<(), SealError>(())
/// ```
pub trait KeyProvider: Send + Sync {
    /// Loads the ring.
    ///
    /// # Errors
    /// [`SealError::BadKeys`] (or [`SealError::NoKeyProvider`] when nothing is configured).
    fn load(&self) -> Result<KeyRing, SealError>;
}

/// Keys from the environment: `DLQ_KEYS="k2:<base64 of 32 bytes>,k1:<...>"` and
/// `DLQ_ACTIVE_KEY=k2` (the first entry when unset). Other variable names with
/// [`EnvKeys::named`].
///
/// ```
/// use dlq_core::sealed::{EnvKeys, KeyProvider};
/// // Unset variables are "no key provider configured", not an empty ring.
/// assert!(EnvKeys::named("DLQ_DOC_NO_SUCH_KEYS", "DLQ_DOC_NO_SUCH_ACTIVE").load().is_err());
/// ```
#[derive(Debug, Clone)]
pub struct EnvKeys {
    keys: String,
    active: String,
}

impl EnvKeys {
    /// `DLQ_KEYS` and `DLQ_ACTIVE_KEY`.
    pub fn new() -> Self {
        Self::named("DLQ_KEYS", "DLQ_ACTIVE_KEY")
    }

    /// Other variables.
    pub fn named(keys: &str, active: &str) -> Self {
        Self { keys: keys.to_owned(), active: active.to_owned() }
    }
}

impl Default for EnvKeys {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyProvider for EnvKeys {
    fn load(&self) -> Result<KeyRing, SealError> {
        let Ok(spec) = std::env::var(&self.keys) else {
            return Err(SealError::NoKeyProvider { hint: format!("`{}` is not set", self.keys) });
        };
        let active = std::env::var(&self.active).ok().filter(|a| !a.trim().is_empty());
        KeyRing::parse(&spec, active.as_deref().map(str::trim))
            .map_err(|e| SealError::BadKeys { reason: format!("{}: {e}", self.keys) })
    }
}

/// Keys from a file (a secret mounted into the container): one `id:<base64 of 32 bytes>` a
/// line, `#` comments, and an optional `active = id` line (else the first key is active).
///
/// ```
/// use dlq_core::sealed::{FileKeys, KeyProvider};
/// let dir = std::env::temp_dir().join(format!("dlq-doc-keys-{}", std::process::id()));
/// std::fs::write(&dir, format!("# rotated monthly\nactive = k2\nk1:{}\nk2:{}\n", "A".repeat(43) + "=", "B".repeat(42) + "A="))?;
/// assert_eq!(FileKeys::new(&dir).load()?.active(), "k2");
/// # std::fs::remove_file(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct FileKeys {
    path: PathBuf,
}

impl FileKeys {
    /// Keys read from `path` on each [`load`](KeyProvider::load).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }
}

impl KeyProvider for FileKeys {
    fn load(&self) -> Result<KeyRing, SealError> {
        let shown = self.path.display();
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| SealError::BadKeys { reason: format!("key file {shown}: {e}") })?;
        let mut active = None;
        let mut entries = String::new();
        for line in text.lines().map(str::trim) {
            match line.split_once('=') {
                Some((name, id)) if name.trim() == "active" && !line.contains(':') => active = Some(id.trim()),
                _ => {
                    entries.push_str(line);
                    entries.push('\n');
                }
            }
        }
        KeyRing::parse(&entries, active).map_err(|e| SealError::BadKeys { reason: format!("key file {shown}: {e}") })
    }
}

static INSTALLED: RwLock<Option<Arc<KeyRing>>> = RwLock::new(None);

/// Installs the key ring the live path, dispatchers and retriers seal and open with, unless
/// they were given one of their own ([`Scope::keys`](crate::Scope::keys),
/// [`Dispatcher::keys`](crate::adapter::Dispatcher::keys), [`Retrier::keys`](crate::Retrier::keys)).
/// A second call replaces the ring: a service reloads rotated keys without a restart.
///
/// ```
/// use dlq_core::sealed::{install_keys, installed_keys, KeyRing};
/// install_keys(KeyRing::new("k1", [("k1", [1; 32])])?);
/// assert_eq!(installed_keys().unwrap().active(), "k1");
/// # Ok::<(), dlq_core::sealed::SealError>(())
/// ```
pub fn install_keys(ring: KeyRing) {
    let mut slot = INSTALLED.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    *slot = Some(Arc::new(ring));
}

/// Loads the ring from `provider` and installs it ([`install_keys`]).
///
/// # Errors
/// The provider's: nothing is installed then.
pub fn install_from(provider: &dyn KeyProvider) -> Result<(), SealError> {
    install_keys(provider.load()?);
    Ok(())
}

/// The ring [`install_keys`] installed, if any.
pub fn installed_keys() -> Option<Arc<KeyRing>> {
    INSTALLED.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(byte: u8) -> String {
        base64::engine::general_purpose::STANDARD.encode([byte; 32])
    }

    #[test]
    fn parse_reads_ids_and_the_active_key() {
        let ring = KeyRing::parse(&format!(" k2:{} ,\nk1:{}", b64(2), b64(1)), None).unwrap();
        assert_eq!((ring.active(), ring.ids().collect::<Vec<_>>()), ("k2", vec!["k1", "k2"]));
        assert_eq!(ring.key("k1").unwrap().bytes, [1; 32]);
    }

    #[test]
    fn bad_keys_are_named_without_their_bytes() {
        let short = base64::engine::general_purpose::STANDARD.encode([5; 16]);
        let err = KeyRing::parse(&format!("k1:{short}"), None).unwrap_err().to_string();
        assert!(err.contains("`k1`") && !err.contains(&short), "{err}");
        let err = KeyRing::parse(&format!("k1:{}", b64(1)), Some("k9")).unwrap_err().to_string();
        assert!(err.contains("`k9`") && err.contains("k1"), "{err}");
        assert!(KeyRing::parse(&format!("k 1:{}", b64(1)), None).is_err());
        assert!(KeyRing::parse(&format!("k1:{0},k1:{0}", b64(1)), None).is_err());
        assert!(KeyRing::parse("", None).is_err());
        let ring = KeyRing::parse(&format!("k1:{}", b64(3)), None).unwrap();
        assert!(!format!("{ring:?}").contains(&b64(3)));
    }

    #[test]
    fn a_missing_env_variable_is_no_provider() {
        let err = EnvKeys::named("DLQ_TEST_UNSET_KEYS", "DLQ_TEST_UNSET_ACTIVE").load().unwrap_err();
        assert!(matches!(err, SealError::NoKeyProvider { .. }), "{err}");
    }
}
