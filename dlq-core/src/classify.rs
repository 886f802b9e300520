//! Error classification: is a failure the event's fault, the world's, or the pipeline's?

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// What a handler failure means for the event that caused it.
///
/// | class | meaning | what happens |
/// | --- | --- | --- |
/// | [`Transient`](ErrorClass::Transient) | not this event's fault (timeout, 5xx, connection refused) | parked `PENDING`, retried after a backoff |
/// | [`Permanent`](ErrorClass::Permanent) | this event can't succeed as it is (validation, decode) | parked `FAILED_PERMANENTLY` at once |
/// | [`Fatal`](ErrorClass::Fatal) | the whole pipeline is broken (bad credentials) | not parked; returned to the caller |
///
/// An error's own hint of when to retry (an HTTP `Retry-After`, say) is not part of the class:
/// [`Classify::retry_after`] and the [`Transient::after`] marker give it, and
/// [`FailureInfo::retry_after`] carries it.
///
/// ```
/// use dlq_core::ErrorClass;
///
/// let class = ErrorClass::Transient;
/// assert!(class.is_transient());
/// assert_eq!(class.as_str(), "transient");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Retry later, after the policy's backoff (or the error's retry-after hint).
    Transient,
    /// Park as dead now: retrying the same event cannot help.
    Permanent,
    /// Do not park: the caller must stop.
    Fatal,
}

text_forms!(ErrorClass { Transient => "transient", Permanent => "permanent", Fatal => "fatal" });

impl ErrorClass {
    /// Whether this is [`ErrorClass::Transient`].
    ///
    /// ```
    /// assert!(dlq_core::ErrorClass::Transient.is_transient());
    /// ```
    pub const fn is_transient(self) -> bool {
        matches!(self, Self::Transient)
    }
}

/// Types that know which [`ErrorClass`] they are.
///
/// Derive it with `#[derive(Classify)]` and mark variants with `#[dlq(transient)]`,
/// `#[dlq(permanent)]` or `#[dlq(fatal)]` (unmarked variants are transient), or implement it
/// by hand. Error types that do not implement it are classified by [`classify_error`].
///
/// ```
/// use dlq_core::{Classify, ErrorClass};
///
/// #[derive(Debug)]
/// enum PaymentError { BadCurrency(String), LedgerDown }
///
/// impl Classify for PaymentError {
///     fn classify(&self) -> ErrorClass {
///         match self {
///             PaymentError::BadCurrency(_) => ErrorClass::Permanent,
///             PaymentError::LedgerDown => ErrorClass::Transient,
///         }
///     }
///     fn kind(&self) -> &'static str {
///         match self {
///             PaymentError::BadCurrency(_) => "PaymentError::BadCurrency",
///             PaymentError::LedgerDown => "PaymentError::LedgerDown",
///         }
///     }
/// }
///
/// assert_eq!(PaymentError::BadCurrency("USD ".into()).classify(), ErrorClass::Permanent);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be classified by `#[dead_letter]`",
    label = "not a classifiable error",
    note = "derive `dlq_core::Classify`, implement `std::error::Error`, or return `Box<dyn Error + Send + Sync>`/`anyhow::Error`"
)]
pub trait Classify {
    /// The class of this error.
    fn classify(&self) -> ErrorClass;

    /// The error's kind (type or variant) stored in `error_kind` and used to group failures.
    fn kind(&self) -> &'static str {
        short_type_name::<Self>()
    }

    /// How long to wait before the next attempt, when the error knows better than the
    /// handler's backoff (an HTTP `Retry-After`, a rate limiter's reset time). Used only for
    /// [`ErrorClass::Transient`] errors.
    ///
    /// ```
    /// use dlq_core::{Classify, ErrorClass};
    /// use std::time::Duration;
    ///
    /// #[derive(Debug)]
    /// struct RateLimited { reset_in: Duration }
    ///
    /// impl Classify for RateLimited {
    ///     fn classify(&self) -> ErrorClass { ErrorClass::Transient }
    ///     fn retry_after(&self) -> Option<Duration> { Some(self.reset_in) }
    /// }
    ///
    /// assert_eq!(RateLimited { reset_in: Duration::from_secs(9) }.retry_after(), Some(Duration::from_secs(9)));
    /// ```
    fn retry_after(&self) -> Option<Duration> {
        None
    }
}

type BoxDynError = Box<dyn StdError + Send + Sync + 'static>;

/// Marks an error as [`ErrorClass::Permanent`] wherever it sits in a `source()` chain.
///
/// The marker is transparent: its message and `source()` are the wrapped error's.
///
/// ```
/// use dlq_core::{classify::classify_error, ErrorClass, Permanent};
///
/// let err = Permanent::new(std::io::Error::other("currency \"USD \" is not ISO 4217"));
/// assert_eq!(classify_error(&err), ErrorClass::Permanent);
/// assert_eq!(err.to_string(), "currency \"USD \" is not ISO 4217");
/// ```
#[derive(Debug)]
pub struct Permanent(pub BoxDynError);

/// Marks an error as [`ErrorClass::Transient`], with an optional retry-after hint.
///
/// ```
/// use dlq_core::{classify::classify_error, classify::retry_after_hint, ErrorClass, Transient};
/// use std::time::Duration;
///
/// let err = Transient::after(std::io::Error::other("429"), Duration::from_secs(5));
/// assert_eq!(classify_error(&err), ErrorClass::Transient);
/// assert_eq!(retry_after_hint(&err), Some(Duration::from_secs(5)));
/// ```
#[derive(Debug)]
pub struct Transient {
    /// The wrapped error.
    pub error: BoxDynError,
    /// The retry-after hint, if any.
    pub retry_after: Option<Duration>,
}

/// Marks an error as [`ErrorClass::Fatal`]: the handler's caller must stop.
///
/// ```
/// use dlq_core::{classify::classify_error, ErrorClass, Fatal};
///
/// let err = Fatal::new(std::io::Error::other("bad credentials"));
/// assert_eq!(classify_error(&err), ErrorClass::Fatal);
/// ```
#[derive(Debug)]
pub struct Fatal(pub BoxDynError);

impl Permanent {
    /// Marks `error` permanent.
    pub fn new(error: impl Into<BoxDynError>) -> Self {
        Self(error.into())
    }
}

impl Fatal {
    /// Marks `error` fatal.
    pub fn new(error: impl Into<BoxDynError>) -> Self {
        Self(error.into())
    }
}

impl Transient {
    /// Marks `error` transient with no hint.
    pub fn new(error: impl Into<BoxDynError>) -> Self {
        Self { error: error.into(), retry_after: None }
    }

    /// Marks `error` transient, to be retried no sooner than `retry_after`.
    pub fn after(error: impl Into<BoxDynError>, retry_after: Duration) -> Self {
        Self { error: error.into(), retry_after: Some(retry_after) }
    }
}

macro_rules! marker_error {
    ($ty:ident, $field:tt, $class:expr $(, $hint:ident)?) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.$field.fmt(f)
            }
        }
        impl StdError for $ty {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                self.$field.source()
            }
        }
        impl Classify for $ty {
            fn classify(&self) -> ErrorClass {
                $class
            }
            $(fn retry_after(&self) -> Option<Duration> {
                self.$hint
            })?
            fn kind(&self) -> &'static str {
                stringify!($ty)
            }
        }
    };
}
marker_error!(Permanent, 0, ErrorClass::Permanent);
marker_error!(Transient, error, ErrorClass::Transient, retry_after);
marker_error!(Fatal, 0, ErrorClass::Fatal);

/// Wraps errors in the class markers; works on any error, and the marked error can go into
/// an `anyhow::Error` or a `Box<dyn Error>` and still be found by [`classify_error`].
///
/// ```
/// use dlq_core::{classify::classify_error, ErrorClass, classify::MarkError};
///
/// let err = std::io::Error::other("malformed").permanent();
/// assert_eq!(classify_error(&err), ErrorClass::Permanent);
/// ```
pub trait MarkError: Sized {
    /// Marks this error permanent.
    fn permanent(self) -> Permanent;
    /// Marks this error transient.
    fn transient(self) -> Transient;
    /// Marks this error fatal.
    fn fatal(self) -> Fatal;
}

impl<E: StdError + Send + Sync + 'static> MarkError for E {
    fn permanent(self) -> Permanent {
        Permanent::new(self)
    }
    fn transient(self) -> Transient {
        Transient::new(self)
    }
    fn fatal(self) -> Fatal {
        Fatal::new(self)
    }
}

/// Classifies a plain `std::error::Error` by the defaults (docs/DESIGN.md, "Classification").
///
/// The `source()` chain is walked from the outermost error inwards and the first
/// explicit marker ([`Permanent`], [`Transient`], [`Fatal`]) wins. Without a marker,
/// `serde_json::Error` anywhere in the chain is permanent, and everything else is transient.
///
/// ```
/// use dlq_core::{classify::classify_error, ErrorClass};
///
/// let bad_json = serde_json::from_str::<u32>("\"x\"").unwrap_err();
/// assert_eq!(classify_error(&bad_json), ErrorClass::Permanent);
/// assert_eq!(classify_error(&std::io::Error::other("timeout")), ErrorClass::Transient);
/// ```
pub fn classify_error(error: &(dyn StdError + 'static)) -> ErrorClass {
    let mut saw_json = false;
    let mut current = Some(error);
    while let Some(err) = current {
        if let Some(class) = marker_class(err) {
            return class;
        }
        saw_json |= err.is::<serde_json::Error>();
        current = err.source();
    }
    if saw_json { ErrorClass::Permanent } else { ErrorClass::Transient }
}

/// The retry-after hint of the first [`Transient`] marker in `error`'s `source()` chain, if
/// it has one (see [`Transient::after`]).
///
/// ```
/// use dlq_core::{classify::retry_after_hint, Transient};
/// use std::time::Duration;
///
/// let err = Transient::after(std::io::Error::other("429 Too Many Requests"), Duration::from_secs(30));
/// assert_eq!(retry_after_hint(&err), Some(Duration::from_secs(30)));
/// assert_eq!(retry_after_hint(&std::io::Error::other("timeout")), None);
/// ```
pub fn retry_after_hint(error: &(dyn StdError + 'static)) -> Option<Duration> {
    let mut current = Some(error);
    while let Some(err) = current {
        if let Some(marker) = err.downcast_ref::<Transient>() {
            return marker.retry_after;
        }
        current = err.source();
    }
    None
}

fn marker_class(err: &(dyn StdError + 'static)) -> Option<ErrorClass> {
    if let Some(m) = err.downcast_ref::<Permanent>() {
        return Some(m.classify());
    }
    if let Some(m) = err.downcast_ref::<Transient>() {
        return Some(m.classify());
    }
    err.downcast_ref::<Fatal>().map(Classify::classify)
}

/// `core::any::type_name` without the module path of the outermost type.
pub(crate) fn short_type_name<T: ?Sized>() -> &'static str {
    let full = std::any::type_name::<T>();
    let head = full.split('<').next().unwrap_or(full);
    match head.rfind("::") {
        Some(i) => &full[i + 2..],
        None => full,
    }
}

/// Everything recorded about one failure: class, kind, message, chain and fingerprint.
///
/// Built from an error by the generated code; text fields are bounded and made safe for
/// PostgreSQL `TEXT` (no NUL bytes) on construction.
///
/// ```
/// use dlq_core::{ErrorClass, classify::FailureInfo};
///
/// let io = std::io::Error::other("connection refused by 10.0.0.7:5432");
/// let info = FailureInfo::from_error(ErrorClass::Transient, "io::Error", &io);
/// assert_eq!(info.reason, "connection refused by 10.0.0.7:5432");
/// assert_eq!(info.chain, vec!["connection refused by 10.0.0.7:5432".to_string()]);
/// assert_eq!(info.fingerprint.len(), 16);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailureInfo {
    /// The class of the failure.
    pub class: ErrorClass,
    /// The error's type or variant, e.g. `PaymentError::BadCurrency`.
    pub kind: String,
    /// The outermost error's message.
    pub reason: String,
    /// Every message of the `source()` chain, outermost first.
    pub chain: Vec<String>,
    /// A backtrace or other diagnostic text, if captured.
    pub stacktrace: Option<String>,
    /// A hash of the kind and the message with numbers and ids masked, to group alike failures.
    pub fingerprint: String,
    /// The error's own hint of when to retry (see [`Classify::retry_after`]), used instead of
    /// the handler's backoff for a transient failure.
    pub retry_after: Option<Duration>,
}

impl FailureInfo {
    /// The longest `reason` (and chain entry) kept, in bytes; longer messages are cut at a
    /// character boundary.
    pub const MAX_REASON_BYTES: usize = 8 * 1024;
    /// The longest stack trace kept, in bytes.
    pub const MAX_STACKTRACE_BYTES: usize = 64 * 1024;
    /// The most chain entries kept.
    pub const MAX_CHAIN_LEN: usize = 32;

    /// Builds the record of a failure from the error and its `source()` chain, with the
    /// retry-after hint of a [`Transient`] marker in the chain, if any.
    pub fn from_error(class: ErrorClass, kind: &str, error: &(dyn StdError + 'static)) -> Self {
        let mut chain = Vec::new();
        let mut current = Some(error);
        while let Some(err) = current {
            if chain.len() == Self::MAX_CHAIN_LEN {
                chain.push("… (chain cut)".to_owned());
                break;
            }
            chain.push(bounded(&err.to_string(), Self::MAX_REASON_BYTES));
            current = err.source();
        }
        let reason = chain.first().cloned().unwrap_or_default();
        Self::new(class, kind, reason, chain, None).with_retry_after(retry_after_hint(error))
    }

    /// Sets the retry-after hint (see [`Classify::retry_after`]); `None` keeps the current one.
    ///
    /// ```
    /// use dlq_core::{ErrorClass, classify::FailureInfo};
    /// use std::time::Duration;
    ///
    /// let info = FailureInfo::new(ErrorClass::Transient, "http", "429".into(), vec![], None)
    ///     .with_retry_after(Some(Duration::from_secs(30)));
    /// assert_eq!(info.retry_after, Some(Duration::from_secs(30)));
    /// ```
    #[must_use]
    pub fn with_retry_after(mut self, retry_after: Option<Duration>) -> Self {
        if retry_after.is_some() {
            self.retry_after = retry_after;
        }
        self
    }

    /// Builds the record of a failure from its parts; text is bounded and NUL-free.
    ///
    /// ```
    /// use dlq_core::{ErrorClass, classify::FailureInfo};
    ///
    /// let info = FailureInfo::new(ErrorClass::Permanent, "undecodable", "bad\0byte".into(), vec![], None);
    /// assert_eq!(info.reason, "bad\u{FFFD}byte");
    /// ```
    pub fn new(class: ErrorClass, kind: &str, reason: String, chain: Vec<String>, stacktrace: Option<String>) -> Self {
        let kind = bounded(kind, 256);
        let reason = bounded(&reason, Self::MAX_REASON_BYTES);
        let chain = chain.iter().map(|c| bounded(c, Self::MAX_REASON_BYTES)).collect();
        let stacktrace = stacktrace.map(|s| bounded(&s, Self::MAX_STACKTRACE_BYTES));
        let fingerprint = fingerprint(&kind, &reason);
        Self { class, kind, reason, chain, stacktrace, fingerprint, retry_after: None }
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary and replaces NUL bytes,
/// which PostgreSQL `TEXT` rejects.
pub(crate) fn bounded(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = &text[..end];
    let mut out = if cut.contains('\0') { cut.replace('\0', "\u{FFFD}") } else { cut.to_owned() };
    if end < text.len() {
        out.push_str(" … (truncated)");
    }
    out
}

/// A 16-hex-digit hash of the kind and the message with its volatile parts masked, so that
/// failures of one cause share a fingerprint whatever ids and values they name.
///
/// Masked, each as one placeholder:
/// - UUIDs (`123e4567-e89b-12d3-a456-426614174000`), hex ids of 8 or more hex digits with at
///   least one digit (`9f86d081884c7d65`), and `0x`-prefixed hex (`0x7ffd5e8c`);
/// - runs of digits anywhere (`3000`, `os error 111`, `10.0.0.7`, `v1`);
/// - quoted values: `'...'` and `"..."`, and `` `...` `` unless it holds a plain identifier,
///   which serde and many libraries use for field, variant and column names (`` missing field
///   `currency` `` stays apart from `` missing field `amount` ``).
///
/// A quote opens only at the start or after a character that is not a letter or digit, and
/// closes before the end or such a character, so the apostrophe of `can't` is text. Quoted
/// names are values too: `unique constraint "orders_pkey"` and `unique constraint "users_email"`
/// share a fingerprint; the error's kind tells causes of different types apart.
///
/// ```
/// let a = dlq_core::classify::fingerprint("io", "timeout after 3000 ms on 10.0.0.7");
/// let b = dlq_core::classify::fingerprint("io", "timeout after 5000 ms on 10.0.0.9");
/// assert_eq!(a, b);
/// let a = dlq_core::classify::fingerprint("json", "invalid type: string \"abc\", expected u64 at line 1 column 12");
/// let b = dlq_core::classify::fingerprint("json", "invalid type: string \"a b\", expected u64 at line 1 column 9");
/// assert_eq!(a, b);
/// ```
pub fn fingerprint(kind: &str, message: &str) -> String {
    use sha2::{Digest, Sha256};
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hasher = Sha256::new();
    hasher.update(kind.as_bytes());
    hasher.update([0]);
    mask_volatile(message, |piece| hasher.update(piece));
    let digest = hasher.finalize();
    let mut out = String::with_capacity(16);
    for b in &digest[..8] {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

/// The placeholder of a masked id or number.
const MASK: &[u8] = b"#";

/// Hands `message` to `out` in pieces, in order, each volatile part replaced by a placeholder
/// (see [`fingerprint`]). Works on bytes without allocating; every quote and word character is
/// ASCII, so other characters pass through whole.
fn mask_volatile(message: &str, mut out: impl FnMut(&[u8])) {
    let bytes = message.as_bytes();
    // `bytes[kept..i]` is text not yet handed to `out`.
    let mut kept = 0;
    let mut i = 0;
    // Quote kinds known to have no closing quote ahead, so that a message of many unpaired
    // quotes is still read in linear time.
    let mut unclosed = [false; 3];
    let mut mask = |kept: &mut usize, start: usize, end: usize, placeholder: &[u8]| {
        out(&bytes[*kept..start]);
        out(placeholder);
        *kept = end;
    };
    while i < bytes.len() {
        let b = bytes[i];
        let after_word = i > 0 && is_word(bytes[i - 1]);
        if let Some(kind) = quote_kind(b).filter(|&k| !after_word && !unclosed[k]) {
            match closing_quote(bytes, i) {
                Some(end) if b == b'`' && is_identifier(&bytes[i + 1..end]) => i += 1,
                Some(end) => {
                    mask(&mut kept, i, end + 1, &[b, b'#', b]);
                    i = end + 1;
                }
                None => {
                    unclosed[kind] = true;
                    i += 1;
                }
            }
        } else if is_word(b) && !after_word {
            let word_end = bytes[i..].iter().position(|&c| !is_word(c)).map_or(bytes.len(), |n| i + n);
            if let Some(end) = uuid_end(bytes, i) {
                mask(&mut kept, i, end, MASK);
                i = end;
            } else if is_hex_id(&bytes[i..word_end]) {
                mask(&mut kept, i, word_end, MASK);
                i = word_end;
            } else {
                // Digit runs inside the word.
                while i < word_end {
                    if bytes[i].is_ascii_digit() {
                        let run_end =
                            bytes[i..word_end].iter().position(|c| !c.is_ascii_digit()).map_or(word_end, |n| i + n);
                        mask(&mut kept, i, run_end, MASK);
                        i = run_end;
                    } else {
                        i += 1;
                    }
                }
            }
        } else {
            i += 1;
        }
    }
    out(&bytes[kept..]);
}

/// ASCII letters and digits: what ids, numbers and words are made of.
const fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// The index of `'`, `"` and `` ` `` in `mask_volatile`'s `unclosed`.
const fn quote_kind(b: u8) -> Option<usize> {
    match b {
        b'\'' => Some(0),
        b'"' => Some(1),
        b'`' => Some(2),
        _ => None,
    }
}

/// The index of the quote that closes the one at `open`: the same character, not escaped by
/// a backslash, at the end or before a character that is not a letter or digit.
fn closing_quote(bytes: &[u8], open: usize) -> Option<usize> {
    let quote = bytes[open];
    let mut j = open + 1;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 2,
            c if c == quote && bytes.get(j + 1).is_none_or(|&next| !is_word(next)) => return Some(j),
            _ => j += 1,
        }
    }
    None
}

/// A name as code writes it: `currency`, `orders_pkey`, `Payment::amount`.
fn is_identifier(text: &[u8]) -> bool {
    text.first().is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
        && text.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

/// The end of the UUID (8-4-4-4-12 hex digits) that starts at `start`, if one does.
fn uuid_end(bytes: &[u8], start: usize) -> Option<usize> {
    let end = start + 36;
    let candidate = bytes.get(start..end)?;
    let shaped = candidate.iter().enumerate().all(|(k, &b)| match k {
        8 | 13 | 18 | 23 => b == b'-',
        _ => b.is_ascii_hexdigit(),
    });
    (shaped && bytes.get(end).is_none_or(|&next| !is_word(next))).then_some(end)
}

/// A whole word that is a hex id: `0x` and hex digits, or 8 or more hex digits of which at
/// least one is a digit (so that words like `deadbeef` or `accepted` stay text).
fn is_hex_id(word: &[u8]) -> bool {
    if let [b'0', b'x' | b'X', hex @ ..] = word {
        return !hex.is_empty() && hex.iter().all(u8::is_ascii_hexdigit);
    }
    word.len() >= 8 && word.iter().all(u8::is_ascii_hexdigit) && word.iter().any(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(BoxDynError);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("hydration failed")
        }
    }
    impl StdError for Outer {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn chain_walk_finds_marker_deep_inside() {
        let inner: BoxDynError = Box::new(Permanent::new(std::io::Error::other("bad field")));
        let err = Outer(inner);
        assert_eq!(classify_error(&err), ErrorClass::Permanent);
        let info = FailureInfo::from_error(classify_error(&err), "Outer", &err);
        assert_eq!(info.chain, vec!["hydration failed", "bad field"]);
    }

    #[test]
    fn serde_json_in_chain_is_permanent() {
        let json = serde_json::from_str::<u8>("x").unwrap_err();
        let err = Outer(Box::new(json));
        assert_eq!(classify_error(&err), ErrorClass::Permanent);
    }

    #[test]
    fn unknown_errors_are_transient() {
        let err = Outer(Box::new(std::io::Error::other("503")));
        assert_eq!(classify_error(&err), ErrorClass::Transient);
    }

    #[test]
    fn transient_hint_survives_the_walk() {
        let inner: BoxDynError = Box::new(Transient::after(std::io::Error::other("429"), Duration::from_secs(9)));
        let err = Outer(inner);
        assert_eq!(classify_error(&err), ErrorClass::Transient);
        assert_eq!(retry_after_hint(&err), Some(Duration::from_secs(9)));
        assert_eq!(
            FailureInfo::from_error(ErrorClass::Transient, "Outer", &err).retry_after,
            Some(Duration::from_secs(9))
        );
    }

    #[test]
    fn bounded_cuts_on_char_boundary_and_strips_nul() {
        let text = "é".repeat(10);
        let cut = bounded(&text, 5);
        assert!(cut.starts_with("éé"));
        assert!(cut.ends_with("(truncated)"));
        assert_eq!(bounded("a\0b", 10), "a\u{FFFD}b");
    }

    #[test]
    fn huge_message_is_bounded() {
        let msg = "x".repeat(5 * 1024 * 1024);
        let info = FailureInfo::new(ErrorClass::Transient, "k", msg, vec![], None);
        assert!(info.reason.len() <= FailureInfo::MAX_REASON_BYTES + 32);
    }

    #[test]
    fn fingerprint_differs_by_kind() {
        assert_ne!(fingerprint("a", "x"), fingerprint("b", "x"));
    }

    /// The message as `fingerprint` hashes it, for readable assertions.
    fn masked(message: &str) -> String {
        let mut out = Vec::new();
        mask_volatile(message, |piece| out.extend_from_slice(piece));
        String::from_utf8(out).unwrap()
    }

    #[track_caller]
    fn same_group(kind: &str, messages: &[&str]) {
        for pair in messages.windows(2) {
            assert_eq!(
                fingerprint(kind, pair[0]),
                fingerprint(kind, pair[1]),
                "{:?} and {:?} should share a fingerprint: {:?} vs {:?}",
                pair[0],
                pair[1],
                masked(pair[0]),
                masked(pair[1])
            );
        }
    }

    #[track_caller]
    fn distinct_groups(kind: &str, messages: &[&str]) {
        for (i, a) in messages.iter().enumerate() {
            for b in &messages[i + 1..] {
                assert_ne!(fingerprint(kind, a), fingerprint(kind, b), "{a:?} and {b:?}: {:?}", masked(a));
            }
        }
    }

    #[test]
    fn fingerprint_groups_sqlx_errors_by_cause() {
        let kind = "sqlx::Error";
        same_group(
            kind,
            &[
                r#"error returned from database: duplicate key value violates unique constraint "orders_pkey""#,
                r#"error returned from database: duplicate key value violates unique constraint "orders_external_id_key""#,
            ],
        );
        // With PostgreSQL's detail appended, as applications often log it.
        same_group(
            kind,
            &[
                r#"duplicate key value violates unique constraint "orders_pkey": Key (id)=(42) already exists."#,
                r#"duplicate key value violates unique constraint "orders_pkey": Key (id)=(1870333) already exists."#,
            ],
        );
        same_group(
            kind,
            &[
                r#"duplicate key value violates unique constraint "orders_pkey": Key (id)=(123e4567-e89b-12d3-a456-426614174000) already exists."#,
                r#"duplicate key value violates unique constraint "orders_pkey": Key (id)=(9B2F0C1D-5E6A-4B7C-8D9E-0F1A2B3C4D5E) already exists."#,
            ],
        );
        distinct_groups(
            kind,
            &[
                r#"error returned from database: duplicate key value violates unique constraint "orders_pkey""#,
                "pool timed out while waiting for an open connection",
                "error returned from database: deadlock detected",
                r#"error returned from database: relation "orders" does not exist"#,
            ],
        );
        // The same message from another error kind is another failure: the kind is part of it.
        let timeout = "pool timed out while waiting for an open connection";
        assert_ne!(fingerprint(kind, timeout), fingerprint("std::io::Error", timeout));
    }

    #[test]
    fn fingerprint_groups_reqwest_errors_by_cause() {
        let kind = "reqwest::Error";
        same_group(
            kind,
            &[
                "error sending request for url (http://ledger:8080/v1/post/123e4567-e89b-12d3-a456-426614174000): operation timed out",
                "error sending request for url (http://ledger:8080/v1/post/f47ac10b-58cc-4372-a567-0e02b2c3d479): operation timed out",
                "error sending request for url (http://ledger:8080/v1/post/8f14e45fceea167a5a36dedd4bea2543): operation timed out",
                "error sending request for url (http://ledger:8080/v1/post/0x1f3a9c): operation timed out",
                "error sending request for url (http://ledger:9090/v2/post/77): operation timed out",
            ],
        );
        distinct_groups(
            kind,
            &[
                "error sending request for url (http://ledger:8080/v1/post/123e4567-e89b-12d3-a456-426614174000): operation timed out",
                "error sending request for url (http://ledger:8080/v1/post/123e4567-e89b-12d3-a456-426614174000): connection closed before message completed",
                "error sending request for url (http://billing:8080/v1/post/123e4567-e89b-12d3-a456-426614174000): operation timed out",
                "HTTP status server error (503 Service Unavailable) for url (http://ledger:8080/v1/post/1)",
                "HTTP status client error (404 Not Found) for url (http://ledger:8080/v1/post/1)",
            ],
        );
    }

    #[test]
    fn fingerprint_groups_serde_json_errors_by_cause() {
        let kind = "serde_json::Error";
        same_group(
            kind,
            &[
                r#"invalid type: string "abc", expected u64 at line 1 column 12"#,
                r#"invalid type: string "hello \"world\"", expected u64 at line 3 column 120"#,
                r#"invalid type: string "", expected u64 at line 1 column 2"#,
            ],
        );
        same_group(
            kind,
            &[
                "invalid value: integer `-1`, expected u32 at line 1 column 9",
                "invalid value: integer `70000`, expected u32 at line 2 column 1",
            ],
        );
        distinct_groups(
            kind,
            &[
                r#"invalid type: string "abc", expected u64 at line 1 column 12"#,
                r#"invalid type: string "abc", expected a sequence at line 1 column 12"#,
                "missing field `currency` at line 1 column 30",
                "missing field `amount` at line 1 column 30",
                "unknown variant `Refnd`, expected `Payment` or `Refund` at line 1 column 8",
                "EOF while parsing an object at line 1 column 40",
            ],
        );
    }

    #[test]
    fn fingerprint_groups_io_errors_by_cause() {
        let kind = "io::Error";
        same_group(kind, &["Connection refused (os error 111)", "Connection refused (os error 61)"]);
        same_group(
            kind,
            &[
                "No such file or directory (os error 2): '/var/spool/dlq/4f3c2a1b9e8d7c6b'",
                "No such file or directory (os error 2): '/tmp/x'",
            ],
        );
        distinct_groups(
            kind,
            &[
                "Connection refused (os error 111)",
                "Connection reset by peer (os error 104)",
                "Broken pipe (os error 32)",
            ],
        );
    }

    #[test]
    fn fingerprint_masks_only_whole_ids_and_real_quotes() {
        assert_eq!(masked("can't reach the ledger's API"), "can't reach the ledger's API");
        assert_eq!(masked("it's 'closed' now"), "it's '#' now");
        assert_eq!(masked("the accepted deadbeef decade"), "the accepted deadbeef decade");
        assert_eq!(masked("sha256 9f86d081884c7d65 at 0x7ffd5e8c"), "sha# # at #");
        assert_eq!(masked("id 123e4567-e89b-12d3-a456-426614174000."), "id #.");
        assert_eq!(masked("id 123e4567-e89b-12d3-a456-426614174000x"), "id #-e#b-#d#-a#-#x");
        assert_eq!(masked("unpaired \" quote 'and ` more 42"), "unpaired \" quote 'and ` more #");
        assert_eq!(masked("field `Payment::amount` and `a b`"), "field `Payment::amount` and `#`");
        assert_eq!(masked("naïve «42» ✓ 'é'"), "naïve «#» ✓ '#'");
        assert_eq!(masked(""), "");
    }

    #[test]
    fn fingerprint_reads_many_unpaired_quotes_in_linear_time() {
        let message = " \"a".repeat(FailureInfo::MAX_REASON_BYTES / 3);
        assert_eq!(masked(&message), message);
        assert_eq!(fingerprint("k", &message).len(), 16);
    }

    #[test]
    fn short_type_name_strips_path() {
        assert_eq!(short_type_name::<std::io::Error>(), "Error");
        assert_eq!(short_type_name::<Vec<std::io::Error>>(), "Vec<std::io::error::Error>");
    }
}
