//! Not public API: what `#[dead_letter]` and `#[derive(Classify)]` expand to.
//!
//! Generated code reaches every runtime item through `::dlq_core::__private`, so a user
//! who shadows `Result`, `Option`, `Box`, `Ok` or `Err` still compiles.

#![allow(
    missing_docs,
    unreachable_pub,
    clippy::new_without_default,
    clippy::result_large_err,
    reason = "hidden module for generated code; outcomes are returned as they are, once per run"
)]

use std::error::Error as StdError;
use std::fmt;

pub use ::core::time::Duration;
pub use ::dlq_macros::__handlers;
pub use ::inventory;
pub use ::std::boxed::Box;
pub use ::std::option::Option;
pub use ::std::pin::Pin;
pub use ::std::result::Result;
pub use ::std::string::String;
pub use ::std::{concat, file, line, module_path};

pub use crate::backoff::{Backoff, BackoffKind, RetryPolicy};
pub use crate::classify::{Classify, ErrorClass, FailureInfo};
pub use crate::handler::{
    CheckFn, Context, DispatchFn, FromInvocation, Handler, HandlerOutcome, Invocation, Registration, Runner, decode,
};
pub use crate::live::HandlerError;
pub use crate::record::Payload;
pub use crate::upcast::{UpcastError, UpcastFn};
pub use ::std::marker::PhantomData;
pub use chain::{
    Ends, Fits, Joins, Link, Mismatch, Pair, Upcaster, ViaFromJson, ViaMismatch, ViaSame, ViaToJson, ends, joins,
};

mod chain;
mod schema;
pub use crate::catalog::Schemas;
pub use ::futures_util::future::BoxFuture;
pub use ::serde_json::Value;
pub use schema::{SchemaProbe, ViaJsonSchema, ViaNoSchema, schemas, with_schemas};

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

/// The registration `#[dead_letter]` generates: `contract` is the event type, its version and
/// the upcasters from version 1, `breaker` the attribute's rule, if any, and `missing_state` is `None` for handlers without
/// `State<T>` arguments.
pub const fn registration(
    contract: (&'static str, u32, &'static [UpcastFn]),
    handler: &'static str,
    site: (&'static str, u32),
    policy: (RetryPolicy, Option<&'static str>),
    entry: (DispatchFn, CheckFn),
    missing_state: Option<fn(&Context) -> Option<&'static str>>,
) -> Registration {
    Registration::new(contract, handler, site, policy, entry, missing_state)
}

/// `registration` of a handler with `encrypt = true`, keeping the payload fields at `clear`.
pub const fn sealed(registration: Registration, clear: &'static [&'static str]) -> Registration {
    registration.sealed(crate::sealed::Sealing::new(clear))
}

/// `reg` with its attribute's `subject = "..."` JSON pointer.
pub const fn with_subject(reg: Registration, pointer: &'static str) -> Registration {
    reg.with_subject(pointer)
}

/// What a `CheckFn` returns for a decode: `Ok` when the event deserialized, else the reason.
pub fn checked<T>(decoded: Result<T, HandlerOutcome>) -> Result<(), String> {
    match decoded {
        Ok(_) | Err(HandlerOutcome::Succeeded) => Ok(()),
        Err(HandlerOutcome::Failed(failure) | HandlerOutcome::Undecodable(failure)) => Err(failure.reason),
    }
}

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

// ---- autoref specialization --------------------------------------------------------------
//
// Generated code calls a method on `&&..&Wrapper(&value)`; method resolution takes the impl
// with the fewest dereferences whose bounds hold, so each tier below is tried in order. The
// last tier of each family holds for every type, so that a type the handler cannot use fails
// once, on the assertion of `#[dead_letter]` spanned on the user's type (`assert_event`,
// `assert_argument`) or on `ClassifiableError`, and not again in every place generated code
// uses it.

/// `ClassifiableError::__dlq_finish((&&&&Classifier(&err)).__dlq_failure(), &err)` classifies
/// by the first tier the error type satisfies:
/// 1. `Classify + Error`: its own class and kind, the whole `source()` chain;
/// 2. `Error`: the defaults of `classify_error`;
/// 3. `AsRef<dyn Error + Send + Sync>` (`anyhow::Error`, `Box<dyn Error + Send + Sync>`);
/// 4. `Classify + Debug` without `Error`: its class, the `Debug` text as the reason.
///
/// Tiers 1 to 3 return the failure; the last holds for every type and returns [`ByClassify`],
/// and `ClassifiableError<ByClassify>` then requires `Classify + Debug`. That bound is checked
/// on the call of a trait function named by its path, so an error type that is none of the
/// four fails with `ClassifiableError`'s message on the user's return type and no note
/// pointing in here.
pub struct Classifier<'a, E>(pub &'a E);

/// The failure as tiers 1 to 3 classify it.
pub struct Classified(pub FailureInfo);

/// The last tier: the error type must classify itself (`Classify + Debug`).
pub struct ByClassify;

pub trait ViaClassify {
    fn __dlq_failure(&self) -> Classified;
}
impl<E: Classify + StdError + 'static> ViaClassify for &&&Classifier<'_, E> {
    fn __dlq_failure(&self) -> Classified {
        let info = FailureInfo::from_error(self.0.classify(), self.0.kind(), self.0);
        Classified(info.with_retry_after(self.0.retry_after()))
    }
}

pub trait ViaError {
    fn __dlq_failure(&self) -> Classified;
}
impl<E: StdError + 'static> ViaError for &&Classifier<'_, E> {
    fn __dlq_failure(&self) -> Classified {
        Classified(FailureInfo::from_error(classify_error(self.0), short_type_name::<E>(), self.0))
    }
}

pub trait ViaDynError {
    fn __dlq_failure(&self) -> Classified;
}
impl<E: AsRef<dyn StdError + Send + Sync + 'static>> ViaDynError for &Classifier<'_, E> {
    fn __dlq_failure(&self) -> Classified {
        let err: &(dyn StdError + 'static) = self.0.as_ref();
        Classified(FailureInfo::from_error(classify_error(err), short_type_name::<E>(), err))
    }
}

pub trait ViaFallback {
    fn __dlq_failure(&self) -> ByClassify;
}
impl<E> ViaFallback for Classifier<'_, E> {
    fn __dlq_failure(&self) -> ByClassify {
        ByClassify
    }
}

/// Error types a handler can return, by the tier that classifies them (see [`Classifier`]).
#[diagnostic::on_unimplemented(
    message = "the error type `{Self}` of a `#[dead_letter]` handler cannot be classified",
    label = "`{Self}` does not implement `std::error::Error`",
    note = "implement `std::error::Error` for it (and derive `dlq_core::Classify` to choose its class), or derive `Debug` and `dlq_core::Classify` for it",
    note = "or return `Box<dyn std::error::Error + Send + Sync>` or `anyhow::Error`: a `String` converts with `.into()`, and a `Box<dyn Error>` needs `+ Send + Sync`",
    note = "to choose the class of such an error, wrap it in `dlq_core::Permanent::new(..)` or `dlq_core::Transient::new(..)`, or call `.permanent()` or `.transient()` from `dlq_core::classify::MarkError`"
)]
pub trait ClassifiableError<Tier> {
    fn __dlq_finish(tier: Tier, error: &Self) -> FailureInfo;
}

#[diagnostic::do_not_recommend]
impl<E> ClassifiableError<Classified> for E {
    fn __dlq_finish(tier: Classified, _: &E) -> FailureInfo {
        tier.0
    }
}

#[diagnostic::do_not_recommend]
impl<E: Classify + fmt::Debug> ClassifiableError<ByClassify> for E {
    fn __dlq_finish(_: ByClassify, error: &E) -> FailureInfo {
        FailureInfo::new(error.classify(), error.kind(), format!("{error:?}"), Vec::new(), None)
            .with_retry_after(error.retry_after())
    }
}

/// `(&&&Retainer(&event)).__dlq_retain()` keeps the event for parking: it clones a `Clone`
/// event (cheap, and serialized only if the handler fails) and serializes any other event up
/// front (`serde_json::to_vec`). A type that is not an event fails on `assert_event`.
pub struct Retainer<'a, T>(pub &'a T);

/// The retained event.
pub enum Retained<T> {
    Value(T, fn(&T, usize) -> Result<Payload, Error>),
    /// The event's compact JSON serialization.
    Serialized(Result<Vec<u8>, Error>),
}

impl<T> Retained<T> {
    /// The event as the store of the current scope keeps it: over its `max_payload_bytes`,
    /// cut here, before the store is called (and so before its park timeout starts), with the
    /// length and SHA-256 of the event's compact JSON serialization.
    pub fn into_payload(self) -> Result<Payload, Error> {
        let max = crate::live::payload_limit();
        match self {
            Self::Value(v, to_payload) => to_payload(&v, max),
            Self::Serialized(bytes) => bytes.map(|bytes| Payload::from_serialized_within(bytes, max)),
        }
    }
}

fn to_payload<T: serde::Serialize>(event: &T, max_bytes: usize) -> Result<Payload, Error> {
    Payload::from_event_within(event, max_bytes).map_err(Error::Serialize)
}

pub trait ViaClone<T> {
    fn __dlq_retain(&self) -> Retained<T>;
}
impl<T: Clone + serde::Serialize> ViaClone<T> for &&Retainer<'_, T> {
    fn __dlq_retain(&self) -> Retained<T> {
        Retained::Value(self.0.clone(), to_payload::<T>)
    }
}

pub trait ViaSerialize<T> {
    fn __dlq_retain(&self) -> Retained<T>;
}
impl<T: serde::Serialize> ViaSerialize<T> for &Retainer<'_, T> {
    fn __dlq_retain(&self) -> Retained<T> {
        Retained::Serialized(serde_json::to_vec(self.0).map_err(Error::Serialize))
    }
}

pub trait ViaNotAnEvent<T> {
    fn __dlq_retain(&self) -> Retained<T>;
}
impl<T> ViaNotAnEvent<T> for Retainer<'_, T> {
    fn __dlq_retain(&self) -> Retained<T> {
        let message = format!("`{}` is not serializable", std::any::type_name::<T>());
        Retained::Serialized(Err(Error::Serialize(serde::ser::Error::custom(message))))
    }
}

/// `(&&Decoder::<T>::new()).__dlq_decode(&payload)` deserializes the event; a type that is not
/// an event fails on `assert_event`.
pub struct Decoder<T>(PhantomData<fn() -> T>);

impl<T> Decoder<T> {
    pub const fn new() -> Self {
        Self(PhantomData)
    }
}

pub trait ViaDeserialize<T> {
    fn __dlq_decode(&self, payload: &Payload) -> Result<T, HandlerOutcome>;
}
impl<T: serde::de::DeserializeOwned> ViaDeserialize<T> for &Decoder<T> {
    fn __dlq_decode(&self, payload: &Payload) -> Result<T, HandlerOutcome> {
        decode(payload)
    }
}

pub trait ViaNotDeserializable<T> {
    fn __dlq_decode(&self, payload: &Payload) -> Result<T, HandlerOutcome>;
}
impl<T> ViaNotDeserializable<T> for Decoder<T> {
    fn __dlq_decode(&self, _: &Payload) -> Result<T, HandlerOutcome> {
        let reason = format!("`{}` is not deserializable", std::any::type_name::<T>());
        Err(HandlerOutcome::Undecodable(FailureInfo::new(
            ErrorClass::Permanent,
            "undecodable",
            reason,
            Vec::new(),
            None,
        )))
    }
}

/// `(&&Extractor::<T>::new()).__dlq_extract(&invocation)` fills an argument after the event; a
/// type that cannot be one fails on `assert_argument`.
pub struct Extractor<T>(PhantomData<fn() -> T>);

impl<T> Extractor<T> {
    pub const fn new() -> Self {
        Self(PhantomData)
    }
}

pub trait ViaFromInvocation<T> {
    fn __dlq_extract(&self, invocation: &Invocation) -> Result<T, FailureInfo>;
    fn __dlq_missing(&self, context: &Context) -> Option<&'static str>;
}
impl<T: FromInvocation> ViaFromInvocation<T> for &Extractor<T> {
    fn __dlq_extract(&self, invocation: &Invocation) -> Result<T, FailureInfo> {
        T::from_invocation(invocation)
    }
    fn __dlq_missing(&self, context: &Context) -> Option<&'static str> {
        T::missing_from(context)
    }
}

pub trait ViaUnsupported<T> {
    fn __dlq_extract(&self, invocation: &Invocation) -> Result<T, FailureInfo>;
    fn __dlq_missing(&self, _: &Context) -> Option<&'static str> {
        None
    }
}
impl<T> ViaUnsupported<T> for Extractor<T> {
    fn __dlq_extract(&self, _: &Invocation) -> Result<T, FailureInfo> {
        let reason = format!("`{}` cannot be a handler argument", std::any::type_name::<T>());
        Err(FailureInfo::new(ErrorClass::Permanent, "unsupported_argument", reason, Vec::new(), None))
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

/// Runs one test generated by `store_conformance_tests!` on a current-thread runtime, as
/// `#[tokio::test]` would, so the test crate needs no tokio of its own.
#[cfg(feature = "testing")]
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime for a conformance test")
        .block_on(future)
}

/// A [`Registry`](crate::handlers::Registry) of exactly the named handlers, checked by the compiler: each name must be a
/// function annotated with `#[dead_letter]`.
///
/// Pin the handlers an application expects in a test, or give a retrier an explicit list.
///
/// ```
/// use dlq_core::{dead_letter, handlers};
///
/// #[dead_letter(event_type = "doc-pay")]
/// async fn handle_payment(amount: u64) -> Result<(), std::io::Error> { Ok(()) }
/// #[dead_letter(event_type = "doc-refund")]
/// async fn handle_refund(amount: u64) -> Result<(), std::io::Error> { Ok(()) }
///
/// let set = handlers![handle_payment, handle_refund].unwrap();
/// assert_eq!(set.event_types().collect::<Vec<_>>(), ["doc-pay", "doc-refund"]);
/// ```
///
/// A plain function is rejected:
/// ```compile_fail
/// async fn not_annotated(amount: u64) -> Result<(), std::io::Error> { Ok(()) }
/// let set = dlq_core::handlers![not_annotated];
/// ```
#[macro_export]
macro_rules! handlers {
    ($($handler:tt)*) => {
        $crate::__private::__handlers!($crate; $($handler)*)
    };
}

#[cfg(test)]
#[allow(clippy::needless_borrow, reason = "autoref specialization is chosen by the number of references")]
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
        let info = ClassifiableError::__dlq_finish((&&&&Classifier(&io)).__dlq_failure(), &io);
        assert_eq!(info.class, ErrorClass::Transient);

        let boxed: Box<dyn StdError + Send + Sync> = Box::new(crate::Permanent::new(std::io::Error::other("x")));
        let info = ClassifiableError::__dlq_finish((&&&&Classifier(&boxed)).__dlq_failure(), &boxed);
        assert_eq!(info.class, ErrorClass::Permanent);

        let info = ClassifiableError::__dlq_finish((&&&&Classifier(&Custom::Bad)).__dlq_failure(), &Custom::Bad);
        assert_eq!(
            (info.class, info.kind.as_str(), info.reason.as_str()),
            (ErrorClass::Permanent, "Custom::Bad", "Bad")
        );
    }

    #[test]
    fn retainer_clones_or_serializes() {
        #[derive(serde::Serialize)]
        struct NotClone(u8);
        let r = (&&&Retainer(&5u32)).__dlq_retain();
        assert!(matches!(r, Retained::Value(5, _)));
        assert!(matches!(r.into_payload(), Ok(Payload::Json(_))));
        let r = (&&&Retainer(&NotClone(1))).__dlq_retain();
        assert!(matches!(r, Retained::Serialized(Ok(ref bytes)) if bytes == b"1"));
        assert!(matches!(r.into_payload(), Ok(Payload::Json(_))));
        let r = (&&&Retainer(&std::time::Instant::now())).__dlq_retain();
        assert!(matches!(r.into_payload(), Err(Error::Serialize(_))));
    }

    #[test]
    fn decode_reports_undecodable() {
        let p = Payload::Json(serde_json::json!("x"));
        assert!(matches!(decode::<u32>(&p), Err(HandlerOutcome::Undecodable(_))));
        assert_eq!(decode::<u32>(&Payload::Raw { bytes: b"7".to_vec(), truncated: None }).ok(), Some(7));
        assert_eq!((&&Decoder::<u32>::new()).__dlq_decode(&p).ok(), None);
        let p = Payload::Json(serde_json::json!(7));
        assert_eq!((&&Decoder::<u32>::new()).__dlq_decode(&p).ok(), Some(7));
        assert!(matches!(
            (&&Decoder::<std::time::Instant>::new()).__dlq_decode(&p),
            Err(HandlerOutcome::Undecodable(_))
        ));
    }

    #[test]
    fn checked_keeps_only_the_reason() {
        let p = Payload::Json(serde_json::json!("x"));
        assert_eq!(checked(decode::<String>(&p)), Ok(()));
        let err = checked(decode::<u32>(&p)).unwrap_err();
        assert!(err.starts_with("payload does not deserialize into `u32`: invalid type"), "{err}");
    }

    #[test]
    fn extractor_falls_back_only_for_unsupported_types() {
        let invocation = Invocation {
            payload: Payload::Json(serde_json::json!(null)),
            context: std::sync::Arc::new(crate::Context::new().with(7u8)),
            attempt: crate::handler::Attempt::first(),
            runner: crate::handler::Runner::Retrier,
        };
        let state = (&&Extractor::<crate::State<u8>>::new()).__dlq_extract(&invocation);
        assert_eq!(state.ok(), Some(crate::State(7)));
        let unsupported = (&&Extractor::<String>::new()).__dlq_extract(&invocation);
        assert_eq!(unsupported.map_err(|f| f.kind), Err("unsupported_argument".to_owned()));
    }
}
