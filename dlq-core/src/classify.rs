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
/// ```
/// use dlq_core::ErrorClass;
/// use std::time::Duration;
///
/// let class = ErrorClass::Transient { retry_after: Some(Duration::from_secs(30)) };
/// assert!(class.is_transient());
/// assert_eq!(class.name(), "transient");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Retry later; `retry_after` overrides the policy's backoff for the next attempt.
    Transient {
        /// The error's own hint (an HTTP `Retry-After`, say), used instead of the backoff.
        retry_after: Option<Duration>,
    },
    /// Park as dead now: retrying the same event cannot help.
    Permanent,
    /// Do not park: the caller must stop.
    Fatal,
}

impl ErrorClass {
    /// A transient class with no retry-after hint.
    pub const TRANSIENT: Self = Self::Transient { retry_after: None };

    /// The lowercase name stored in the `error_class` column.
    ///
    /// ```
    /// assert_eq!(dlq_core::ErrorClass::Permanent.name(), "permanent");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            Self::Transient { .. } => "transient",
            Self::Permanent => "permanent",
            Self::Fatal => "fatal",
        }
    }

    /// Whether this is [`ErrorClass::Transient`].
    ///
    /// ```
    /// assert!(dlq_core::ErrorClass::TRANSIENT.is_transient());
    /// ```
    pub const fn is_transient(self) -> bool {
        matches!(self, Self::Transient { .. })
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
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
///             PaymentError::LedgerDown => ErrorClass::TRANSIENT,
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
}

type BoxDynError = Box<dyn StdError + Send + Sync + 'static>;

/// Marks an error as [`ErrorClass::Permanent`] wherever it sits in a `source()` chain.
///
/// The marker is transparent: its message and `source()` are the wrapped error's.
///
/// ```
/// use dlq_core::{classify_error, ErrorClass, Permanent};
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
/// use dlq_core::{classify_error, ErrorClass, Transient};
/// use std::time::Duration;
///
/// let err = Transient::after(std::io::Error::other("429"), Duration::from_secs(5));
/// assert_eq!(classify_error(&err), ErrorClass::Transient { retry_after: Some(Duration::from_secs(5)) });
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
/// use dlq_core::{classify_error, ErrorClass, Fatal};
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
    ($ty:ident, $field:tt, $class:expr) => {
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
                #[allow(clippy::redundant_closure_call, reason = "one macro for three markers")]
                ($class)(self)
            }
            fn kind(&self) -> &'static str {
                stringify!($ty)
            }
        }
    };
}
marker_error!(Permanent, 0, |_: &Permanent| ErrorClass::Permanent);
marker_error!(Transient, error, |t: &Transient| ErrorClass::Transient { retry_after: t.retry_after });
marker_error!(Fatal, 0, |_: &Fatal| ErrorClass::Fatal);

/// Wraps errors in the class markers; works on any error, and the marked error can go into
/// an `anyhow::Error` or a `Box<dyn Error>` and still be found by [`classify_error`].
///
/// ```
/// use dlq_core::{classify_error, ErrorClass, MarkError};
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

/// Classifies a plain `std::error::Error` by the defaults of DESIGN §4.
///
/// The `source()` chain is walked from the outermost error inwards and the first
/// explicit marker ([`Permanent`], [`Transient`], [`Fatal`]) wins. Without a marker,
/// `serde_json::Error` anywhere in the chain is permanent, and everything else is transient.
///
/// ```
/// use dlq_core::{classify_error, ErrorClass};
///
/// let bad_json = serde_json::from_str::<u32>("\"x\"").unwrap_err();
/// assert_eq!(classify_error(&bad_json), ErrorClass::Permanent);
/// assert_eq!(classify_error(&std::io::Error::other("timeout")), ErrorClass::TRANSIENT);
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
    if saw_json { ErrorClass::Permanent } else { ErrorClass::TRANSIENT }
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
/// use dlq_core::{ErrorClass, FailureInfo};
///
/// let io = std::io::Error::other("connection refused by 10.0.0.7:5432");
/// let info = FailureInfo::from_error(ErrorClass::TRANSIENT, "io::Error", &io);
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
}

/// The longest `reason` kept, in bytes; longer messages are cut at a character boundary.
pub const MAX_REASON_BYTES: usize = 8 * 1024;
/// The longest stack trace kept, in bytes.
pub const MAX_STACKTRACE_BYTES: usize = 64 * 1024;
/// The most chain entries kept.
pub const MAX_CHAIN_LEN: usize = 32;

impl FailureInfo {
    /// Builds the record of a failure from the error and its `source()` chain.
    pub fn from_error(class: ErrorClass, kind: &str, error: &(dyn StdError + 'static)) -> Self {
        let mut chain = Vec::new();
        let mut current = Some(error);
        while let Some(err) = current {
            if chain.len() == MAX_CHAIN_LEN {
                chain.push("… (chain cut)".to_owned());
                break;
            }
            chain.push(bounded(&err.to_string(), MAX_REASON_BYTES));
            current = err.source();
        }
        let reason = chain.first().cloned().unwrap_or_default();
        Self::new(class, kind, reason, chain, None)
    }

    /// Builds the record of a failure from its parts; text is bounded and NUL-free.
    ///
    /// ```
    /// use dlq_core::{ErrorClass, FailureInfo};
    ///
    /// let info = FailureInfo::new(ErrorClass::Permanent, "undecodable", "bad\0byte".into(), vec![], None);
    /// assert_eq!(info.reason, "bad\u{FFFD}byte");
    /// ```
    pub fn new(class: ErrorClass, kind: &str, reason: String, chain: Vec<String>, stacktrace: Option<String>) -> Self {
        let kind = bounded(kind, 256);
        let reason = bounded(&reason, MAX_REASON_BYTES);
        let chain = chain.iter().map(|c| bounded(c, MAX_REASON_BYTES)).collect();
        let stacktrace = stacktrace.map(|s| bounded(&s, MAX_STACKTRACE_BYTES));
        let fingerprint = fingerprint(&kind, &reason);
        Self { class, kind, reason, chain, stacktrace, fingerprint }
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary and replaces NUL bytes,
/// which PostgreSQL `TEXT` rejects.
pub fn bounded(text: &str, max: usize) -> String {
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

/// A 16-hex-digit hash of the kind and the message with digits and hex ids masked.
///
/// ```
/// let a = dlq_core::fingerprint("io", "timeout after 3000 ms on 10.0.0.7");
/// let b = dlq_core::fingerprint("io", "timeout after 5000 ms on 10.0.0.9");
/// assert_eq!(a, b);
/// ```
pub fn fingerprint(kind: &str, message: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut normalized = String::with_capacity(message.len());
    let mut in_number = false;
    for c in message.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                normalized.push('#');
            }
            in_number = true;
        } else {
            in_number = false;
            normalized.push(c);
        }
    }
    let mut hasher = Sha256::new();
    hasher.update(kind.as_bytes());
    hasher.update([0]);
    hasher.update(normalized.as_bytes());
    let digest = hasher.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
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
        assert_eq!(classify_error(&err), ErrorClass::TRANSIENT);
    }

    #[test]
    fn transient_hint_survives_the_walk() {
        let inner: BoxDynError = Box::new(Transient::after(std::io::Error::other("429"), Duration::from_secs(9)));
        let err = Outer(inner);
        assert_eq!(classify_error(&err), ErrorClass::Transient { retry_after: Some(Duration::from_secs(9)) });
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
        let info = FailureInfo::new(ErrorClass::TRANSIENT, "k", msg, vec![], None);
        assert!(info.reason.len() <= MAX_REASON_BYTES + 32);
    }

    #[test]
    fn fingerprint_differs_by_kind() {
        assert_ne!(fingerprint("a", "x"), fingerprint("b", "x"));
    }

    #[test]
    fn short_type_name_strips_path() {
        assert_eq!(short_type_name::<std::io::Error>(), "Error");
        assert_eq!(short_type_name::<Vec<std::io::Error>>(), "Vec<std::io::error::Error>");
    }
}
