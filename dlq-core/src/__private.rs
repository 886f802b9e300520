//! Not public API: what `#[dead_letter]` and `#[derive(Classify)]` expand to.
//!
//! Generated code reaches every runtime item through `::dlq_core::__private`, so a user
//! who shadows `Result`, `Option`, `Box`, `Ok` or `Err` still compiles.

#![allow(missing_docs, unreachable_pub, reason = "hidden module for generated code")]

use std::error::Error as StdError;
use std::fmt;

pub use ::inventory;
pub use ::std::boxed::Box;
pub use ::std::option::Option;
pub use ::std::pin::Pin;
pub use ::std::result::Result;
pub use ::std::{concat, file, line, module_path, stringify};

pub use crate::backoff::{Backoff, BackoffKind, RetryPolicy};
pub use crate::classify::{Classify, ErrorClass, FailureInfo};
pub use crate::handler::{FromInvocation, Handler, HandlerOutcome, Invocation, Registration};
pub use crate::live::HandlerError;
pub use crate::record::{DEFAULT_MAX_PAYLOAD_BYTES, Payload};
pub use crate::store::BoxFuture;

use crate::Error;
use crate::classify::{classify_error, short_type_name};

/// The event argument's bounds, checked where the handler is declared.
#[diagnostic::on_unimplemented(
    message = "the event type `{Self}` of a `#[dead_letter]` handler must implement `serde::Serialize` and `serde::de::DeserializeOwned`",
    label = "not a serializable event",
    note = "derive `serde::Serialize` and `serde::Deserialize` for it"
)]
pub trait Event: serde::Serialize + serde::de::DeserializeOwned + Send + 'static {}
impl<T: serde::Serialize + serde::de::DeserializeOwned + Send + 'static> Event for T {}

pub const fn assert_event<T: Event>() {}

pub const fn assert_argument<T: FromInvocation>() {}

/// The handler's return type, which must be a `Result`.
#[diagnostic::on_unimplemented(
    message = "a `#[dead_letter]` handler must return `Result<T, E>`, not `{Self}`",
    label = "not a `Result`"
)]
pub trait HandlerResult {
    type Ok;
    type Err;
    fn into_result(self) -> Result<Self::Ok, Self::Err>;
}

impl<T, E> HandlerResult for Result<T, E> {
    type Ok = T;
    type Err = E;
    fn into_result(self) -> Self {
        self
    }
}

pub type OkOf<R> = <R as HandlerResult>::Ok;
pub type ErrOf<R> = <R as HandlerResult>::Err;

// ---- classification by autoref specialization -------------------------------------------
//
// `(&&&&Classifier(&err)).__dlq_failure()` picks the first tier the error type satisfies:
// 1. `Classify + Error`: its own class and kind, the whole `source()` chain;
// 2. `Error`: the defaults of `classify_error`;
// 3. `AsRef<dyn Error + Send + Sync>` (`anyhow::Error`, `Box<dyn Error + Send + Sync>`);
// 4. `Classify + Debug` without `Error`: its class, the `Debug` text as the reason.
// A type that is none of these fails on `Classify`'s `on_unimplemented` message.

pub struct Classifier<'a, E>(pub &'a E);

pub trait ViaClassify {
    fn __dlq_failure(&self) -> FailureInfo;
}
impl<E: Classify + StdError + 'static> ViaClassify for &&&Classifier<'_, E> {
    fn __dlq_failure(&self) -> FailureInfo {
        FailureInfo::from_error(self.0.classify(), self.0.kind(), self.0)
    }
}

pub trait ViaError {
    fn __dlq_failure(&self) -> FailureInfo;
}
impl<E: StdError + 'static> ViaError for &&Classifier<'_, E> {
    fn __dlq_failure(&self) -> FailureInfo {
        FailureInfo::from_error(classify_error(self.0), short_type_name::<E>(), self.0)
    }
}

pub trait ViaDynError {
    fn __dlq_failure(&self) -> FailureInfo;
}
impl<E: AsRef<dyn StdError + Send + Sync + 'static>> ViaDynError for &Classifier<'_, E> {
    fn __dlq_failure(&self) -> FailureInfo {
        let err: &(dyn StdError + 'static) = self.0.as_ref();
        FailureInfo::from_error(classify_error(err), short_type_name::<E>(), err)
    }
}

pub trait ViaFallback<'a, E> {
    fn __dlq_failure(&self) -> Fallback<'a, E>;
}
impl<'a, E> ViaFallback<'a, E> for Classifier<'a, E> {
    fn __dlq_failure(&self) -> Fallback<'a, E> {
        Fallback(self.0)
    }
}

pub struct Fallback<'a, E>(&'a E);

pub trait IntoFailure {
    fn into_failure(self) -> FailureInfo;
}
impl IntoFailure for FailureInfo {
    fn into_failure(self) -> FailureInfo {
        self
    }
}
impl<E: Classify + fmt::Debug> IntoFailure for Fallback<'_, E> {
    fn into_failure(self) -> FailureInfo {
        FailureInfo::new(self.0.classify(), self.0.kind(), format!("{:?}", self.0), Vec::new(), None)
    }
}

// ---- keeping the event for parking ---------------------------------------------------------
//
// `(&&Retainer(&event)).__dlq_retain()` clones a `Clone` event (cheap, and serialized only if
// the handler fails) and serializes any other event up front.

pub struct Retainer<'a, T>(pub &'a T);

pub enum Retained<T> {
    Value(T),
    Payload(Result<Payload, Error>),
}

impl<T: serde::Serialize> Retained<T> {
    pub fn into_payload(self) -> Result<Payload, Error> {
        match self {
            Self::Value(v) => Payload::from_event(&v, DEFAULT_MAX_PAYLOAD_BYTES).map_err(Error::Serialize),
            Self::Payload(p) => p,
        }
    }
}

pub trait ViaClone<T> {
    fn __dlq_retain(&self) -> Retained<T>;
}
impl<T: Clone> ViaClone<T> for &Retainer<'_, T> {
    fn __dlq_retain(&self) -> Retained<T> {
        Retained::Value(self.0.clone())
    }
}

pub trait ViaSerialize<T> {
    fn __dlq_retain(&self) -> Retained<T>;
}
impl<T: serde::Serialize> ViaSerialize<T> for Retainer<'_, T> {
    fn __dlq_retain(&self) -> Retained<T> {
        Retained::Payload(Payload::from_event(self.0, DEFAULT_MAX_PAYLOAD_BYTES).map_err(Error::Serialize))
    }
}

// ---- runtime entry points -------------------------------------------------------------------

/// Parks a failure of the live path; the generated wrapper returns this as its `Err`.
pub async fn park_live<E>(
    registration: &'static Registration,
    payload: Result<Payload, Error>,
    failure: FailureInfo,
    error: E,
) -> HandlerError<E> {
    crate::live::park_failure(registration, payload, failure, error).await
}

/// Deserializes the stored payload into the handler's event type.
pub fn decode<T: serde::de::DeserializeOwned>(payload: &Payload) -> Result<T, HandlerOutcome> {
    let decoded = match payload {
        Payload::Json(value) => T::deserialize(value),
        Payload::Raw { bytes, .. } => serde_json::from_slice(bytes),
    };
    decoded.map_err(|e| {
        HandlerOutcome::Undecodable(FailureInfo::new(
            ErrorClass::Permanent,
            "undecodable",
            format!("payload does not deserialize into `{}`: {e}", std::any::type_name::<T>()),
            Vec::new(),
            None,
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    enum Custom {
        Bad,
    }
    impl Classify for Custom {
        fn classify(&self) -> ErrorClass {
            ErrorClass::Permanent
        }
        fn kind(&self) -> &'static str {
            "Custom::Bad"
        }
    }

    #[test]
    fn tiers_pick_the_most_specific_classification() {
        let io = std::io::Error::other("503");
        let info = IntoFailure::into_failure((&&&&Classifier(&io)).__dlq_failure());
        assert_eq!(info.class, ErrorClass::TRANSIENT);

        let boxed: Box<dyn StdError + Send + Sync> = Box::new(crate::Permanent::new(std::io::Error::other("x")));
        let info = IntoFailure::into_failure((&&&&Classifier(&boxed)).__dlq_failure());
        assert_eq!(info.class, ErrorClass::Permanent);

        let info = IntoFailure::into_failure((&&&&Classifier(&Custom::Bad)).__dlq_failure());
        assert_eq!(
            (info.class, info.kind.as_str(), info.reason.as_str()),
            (ErrorClass::Permanent, "Custom::Bad", "Bad")
        );
    }

    #[test]
    fn retainer_clones_or_serializes() {
        #[derive(serde::Serialize)]
        struct NotClone(u8);
        let r = (&&Retainer(&5u32)).__dlq_retain();
        assert!(matches!(r, Retained::Value(5)));
        let r = (&&Retainer(&NotClone(1))).__dlq_retain();
        assert!(matches!(r, Retained::Payload(Ok(Payload::Json(_)))));
    }

    #[test]
    fn decode_reports_undecodable() {
        let p = Payload::Json(serde_json::json!("x"));
        assert!(matches!(decode::<u32>(&p), Err(HandlerOutcome::Undecodable(_))));
        assert_eq!(decode::<u32>(&Payload::Raw { bytes: b"7".to_vec(), truncated: None }).ok(), Some(7));
    }
}
