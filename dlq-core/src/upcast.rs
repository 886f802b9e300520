//! Payload versions: a stored payload is upcast from the version of the event's contract it was
//! written in to the version its handler decodes, one link of the handler's chain per version.
//!
//! A handler names its chain in its attribute, one plain function per version before its own:
//!
//! ```
//! use dlq_core::{dead_letter, handlers::UpcastError};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct PaymentV1 { id: u64, cents: i64 }
//!
//! #[derive(Serialize, Deserialize)]
//! struct Payment { id: u64, cents: i64, currency: String }
//!
//! /// Version 1 had no currency: every payment was in euros.
//! fn v1_to_v2(old: PaymentV1) -> Result<Payment, UpcastError> {
//!     Ok(Payment { id: old.id, cents: old.cents, currency: "EUR".to_owned() })
//! }
//!
//! #[dead_letter(event_type = "doc-upcast", version = 2, upcast = [v1_to_v2])]
//! async fn handle(p: Payment) -> Result<(), std::io::Error> { Ok(()) }
//!
//! let reg = <handle as dlq_core::handlers::Handler>::registration();
//! assert_eq!((reg.version(), reg.upcasters()), (2, 1));
//! ```
//!
//! A link takes the previous version's event and returns the next one's
//! (`fn(Old) -> Result<New, UpcastError>`), or works on the JSON itself
//! (`fn(serde_json::Value) -> Result<serde_json::Value, UpcastError>`) when the old struct is
//! gone; [`unchanged`] is the link of a version whose payloads decode as they are in the next.

use std::error::Error as StdError;
use std::fmt;

use serde_json::Value;

use crate::classify::{ErrorClass, FailureInfo};
use crate::handler::Registration;
use crate::record::Payload;

/// Why an upcaster could not bring a payload to the next version. A failed upcast is
/// permanent: the row is parked dead with this reason, not retried.
///
/// ```
/// let err = dlq_core::handlers::UpcastError::new("no currency for country `XX`");
/// assert_eq!(err.to_string(), "no currency for country `XX`");
/// ```
#[derive(Debug)]
pub struct UpcastError {
    reason: String,
    source: Option<Box<dyn StdError + Send + Sync>>,
}

impl UpcastError {
    /// An error that says why.
    pub fn new(reason: impl Into<String>) -> Self {
        Self { reason: reason.into(), source: None }
    }

    /// An error caused by `source`, with its message as the reason.
    ///
    /// ```
    /// let parse = "x".parse::<u32>().unwrap_err();
    /// let err = dlq_core::handlers::UpcastError::caused_by(parse);
    /// assert_eq!(err.to_string(), "invalid digit found in string");
    /// ```
    pub fn caused_by(source: impl StdError + Send + Sync + 'static) -> Self {
        Self { reason: source.to_string(), source: Some(Box::new(source)) }
    }
}

impl fmt::Display for UpcastError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl StdError for UpcastError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn StdError + 'static))
    }
}

/// One link of a chain as the registry runs it: the JSON of version `n` to the JSON of
/// version `n + 1`. `#[dead_letter(upcast = [...])]` wraps each named function in one.
pub type UpcastFn = fn(Value) -> Result<Value, UpcastError>;

/// The link of a version whose payloads decode as they are in the next (a field was added
/// with a default, say): `upcast = [dlq_core::handlers::unchanged]`.
///
/// ```
/// let v = serde_json::json!({"id": 7});
/// assert_eq!(dlq_core::handlers::unchanged(v.clone()).unwrap(), v);
/// ```
///
/// # Errors
/// Never.
pub fn unchanged(value: Value) -> Result<Value, UpcastError> {
    Ok(value)
}

/// A row's payload rewritten in a newer version of its event's contract: after a retry
/// succeeded on the upcast payload, or by `dlq upgrade`
/// (`OperatorStore::upgrade`).
///
/// ```
/// use dlq_core::{Payload, store::{AuditNote, VersionUpgrade}};
///
/// let upgrade = VersionUpgrade {
///     id: 7,
///     from: 1,
///     to: 3,
///     payload: Payload::Json(serde_json::json!({"amount_cents": 5})),
///     note: AuditNote::new("retrier host:1:payments", "upcast from version 1 to 3"),
/// };
/// assert_eq!(upgrade.diff(&Payload::Json(serde_json::json!({"cents": 5})))["version"], serde_json::json!([1, 3]));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct VersionUpgrade {
    /// The row.
    pub id: crate::DlqId,
    /// The version the row must hold: a row of any other version is refused
    /// ([`Error::VersionChanged`](crate::Error::VersionChanged)).
    pub from: u32,
    /// The version the payload is written in.
    pub to: u32,
    /// The payload in version `to`.
    pub payload: Payload,
    /// Who and why.
    pub note: crate::record::AuditNote,
}

impl VersionUpgrade {
    /// The audit diff: the versions, and the old and new payloads as a patch's diff keeps
    /// them (`patch_diff`), so the event as it was written stays
    /// in the audit log.
    pub fn diff(&self, old: &Payload) -> Value {
        let mut diff = crate::action::patch_diff(old, &self.payload, None, None);
        diff["version"] = serde_json::json!([self.from, self.to]);
        diff
    }
}

/// What a retrier runs for a row of payload version `from`.
#[derive(Debug)]
pub(crate) enum Upcast {
    /// The row's version is the handler's: the payload as stored.
    Current(Payload),
    /// The payload upcast to the handler's version.
    Upcasted(Payload),
    /// The row's version is newer than the handler's (a rollback): nothing this handler can
    /// decode. The row is left for a handler of its version, not charged a retry.
    Ahead(FailureInfo),
    /// A link failed, or the payload is not JSON: permanent.
    Failed(FailureInfo),
}

/// Brings `payload`, written in version `from`, to `reg`'s version through its chain.
pub(crate) fn upcast(reg: &Registration, from: u32, payload: Payload) -> Upcast {
    let to = reg.version;
    if from == to || payload.is_truncated() {
        // A cut payload can be neither decoded nor upcast: the retrier parks it `too_large`.
        return Upcast::Current(payload);
    }
    if from > to {
        let reason = format!(
            "the payload is version {from} of `{}`, newer than version {to} that handler `{}` decodes (a rollback?): it is left for a handler of version {from}; redrive it once one runs",
            reg.event_type, reg.handler
        );
        return Upcast::Ahead(FailureInfo::new(ErrorClass::Permanent, "version_ahead", reason, Vec::new(), None));
    }
    let failed =
        |reason: String| Upcast::Failed(FailureInfo::new(ErrorClass::Permanent, "upcast", reason, Vec::new(), None));
    let mut value = match payload {
        Payload::Json(value) => value,
        Payload::Raw { bytes, .. } => match serde_json::from_slice(&bytes) {
            Ok(value) => value,
            Err(e) => return failed(format!("version {from} payload is not JSON, so it cannot be upcast: {e}")),
        },
    };
    for version in from..to {
        let link = usize::try_from(version - 1).ok().and_then(|i| reg.upcast.get(i));
        let Some(link) = link else {
            // The registry refuses such a chain at start-up; a registration made otherwise.
            return failed(format!("no upcaster from version {version} to {}", version + 1));
        };
        value = match link(value) {
            Ok(value) => value,
            Err(e) => return failed(format!("upcasting from version {version} to {} failed: {e}", version + 1)),
        };
    }
    Upcast::Upcasted(Payload::Json(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn add_currency(mut v: Value) -> Result<Value, UpcastError> {
        v["currency"] = json!("EUR");
        Ok(v)
    }

    fn rename_cents(mut v: Value) -> Result<Value, UpcastError> {
        let cents = v.as_object_mut().and_then(|o| o.remove("cents")).ok_or_else(|| UpcastError::new("no `cents`"))?;
        v["amount_cents"] = cents;
        Ok(v)
    }

    static V3: Registration =
        Registration { upcast: &[add_currency, rename_cents], ..crate::handler::for_tests("payment", 3) };

    fn run(from: u32, payload: Payload) -> Upcast {
        upcast(&V3, from, payload)
    }

    #[test]
    fn runs_the_links_from_the_rows_version_to_the_handlers() {
        let Upcast::Upcasted(payload) = run(1, Payload::Json(json!({"id": 1, "cents": 5}))) else {
            panic!("not upcast")
        };
        assert_eq!(payload, Payload::Json(json!({"id": 1, "amount_cents": 5, "currency": "EUR"})));
        let Upcast::Upcasted(payload) = run(2, Payload::from_bytes(br#"{"cents": 7}"#)) else { panic!("not upcast") };
        assert_eq!(payload, Payload::Json(json!({"amount_cents": 7})), "only the links after version 2");
        assert!(matches!(run(3, Payload::Json(json!(1))), Upcast::Current(Payload::Json(_))));
    }

    #[test]
    fn failures_say_which_link_and_why() {
        let Upcast::Failed(f) = run(2, Payload::Json(json!({"id": 1}))) else { panic!("not failed") };
        assert_eq!((f.class, f.kind.as_str()), (ErrorClass::Permanent, "upcast"));
        assert_eq!(f.reason, "upcasting from version 2 to 3 failed: no `cents`");
        let Upcast::Failed(f) = run(1, Payload::from_bytes(b"\xff")) else { panic!("not failed") };
        assert!(f.reason.starts_with("version 1 payload is not JSON"), "{}", f.reason);
        let Upcast::Ahead(f) = run(4, Payload::Json(json!({}))) else { panic!("not ahead") };
        assert!(f.reason.contains("version 4 of `payment`, newer than version 3"), "{}", f.reason);
    }
}
