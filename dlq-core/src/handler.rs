//! What a handler receives besides its event, and what it reports back to a retrier.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::classify::{ErrorClass, FailureInfo};
use crate::record::{DlqId, Payload};
use futures_util::future::BoxFuture;

/// Typed values handed to handlers through [`State<T>`] arguments: one value per type.
///
/// ```
/// use dlq_core::Context;
///
/// #[derive(Clone)]
/// struct Ledger { url: String }
///
/// let ctx = Context::new().with(Ledger { url: "http://ledger".into() });
/// assert_eq!(ctx.get::<Ledger>().unwrap().url, "http://ledger");
/// assert!(ctx.get::<u32>().is_none());
/// ```
#[derive(Clone, Default)]
pub struct Context {
    values: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl Context {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// The context with `value` added (replacing any value of the same type).
    #[must_use]
    pub fn with<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.insert(value);
        self
    }

    /// Adds `value`, replacing any value of the same type.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.values.insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`, if one was added.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.values.get(&TypeId::of::<T>()).and_then(|v| v.downcast_ref())
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").field("values", &self.values.len()).finish()
    }
}

/// A handler argument filled from the [`Context`] given to the retrier or dispatcher.
///
/// When a handler is called directly, the caller passes `State(value)` itself.
///
/// ```
/// use dlq_core::{dead_letter, State};
///
/// #[derive(Clone)]
/// struct Ledger;
///
/// #[dead_letter(event_type = "doc-state")]
/// async fn handle(amount: u64, State(_ledger): State<Ledger>) -> Result<(), std::io::Error> {
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct State<T>(pub T);

/// Metadata of the attempt a handler is running: which row, how many retries so far, when
/// the event first failed. On the live path (first call) `id` is `None` and `retry_count` 0.
///
/// ```
/// let first = dlq_core::handlers::Attempt::first();
/// assert_eq!(first.retry_count, 0);
/// assert!(first.id.is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attempt {
    /// The dead-letter row being retried.
    pub id: Option<DlqId>,
    /// Failed retries before this one.
    pub retry_count: u32,
    /// When the event first failed.
    pub first_failed_at: Option<DateTime<Utc>>,
}

impl Attempt {
    /// The metadata of a first, live attempt.
    pub const fn first() -> Self {
        Self { id: None, retry_count: 0, first_failed_at: None }
    }
}

/// One run of a registered handler by a retrier or [`Dispatcher`](crate::adapter::Dispatcher).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The event, as stored.
    pub payload: Payload,
    /// The values for `State<T>` arguments.
    pub context: Arc<Context>,
    /// Which attempt this is.
    pub attempt: Attempt,
    /// Who runs it, and so whose context `context` is.
    pub runner: Runner,
}

/// Who runs a registered handler: a [`Retrier`](crate::Retrier) on a stored row or a
/// [`Dispatcher`](crate::adapter::Dispatcher) on raw input. A `missing_state` failure names it, since
/// the context that lacks the value is the one given to it.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// A retrier, whose context comes from `Retrier::context`.
    Retrier,
    /// A dispatcher, whose context comes from `Dispatcher::context`.
    Dispatcher,
}

impl Runner {
    /// `retrier` or `dispatcher`.
    pub const fn noun(self) -> &'static str {
        match self {
            Self::Retrier => "retrier",
            Self::Dispatcher => "dispatcher",
        }
    }

    /// The type whose `context` method sets its context.
    pub const fn type_name(self) -> &'static str {
        match self {
            Self::Retrier => "Retrier",
            Self::Dispatcher => "Dispatcher",
        }
    }
}

/// Handler arguments after the event: [`State<T>`] and [`Attempt`].
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a `#[dead_letter]` handler argument",
    label = "unsupported handler argument",
    note = "after the event, a handler takes only `dlq_core::State<T>` (from the retrier's context) and `dlq_core::handlers::Attempt`"
)]
pub trait FromInvocation: Sized {
    /// Extracts the argument, or says why it cannot.
    #[allow(clippy::result_large_err, reason = "the error is the failure record itself, built once on a cold path")]
    fn from_invocation(invocation: &Invocation) -> Result<Self, FailureInfo>;

    /// The type this argument needs in `context` and does not find there, if any: checked
    /// once when a retrier starts, so a missing value is a configuration error, not a
    /// failure charged to every row.
    fn missing_from(context: &Context) -> Option<&'static str> {
        let _ = context;
        None
    }
}

impl<T: Clone + Send + Sync + 'static> FromInvocation for State<T> {
    fn missing_from(context: &Context) -> Option<&'static str> {
        context.get::<T>().is_none().then(std::any::type_name::<T>)
    }

    fn from_invocation(invocation: &Invocation) -> Result<Self, FailureInfo> {
        invocation.context.get::<T>().cloned().map(State).ok_or_else(|| {
            let name = std::any::type_name::<T>();
            let runner = invocation.runner;
            FailureInfo::new(
                ErrorClass::Transient,
                "missing_state",
                format!(
                    "no `{name}` in the {}'s context: add it with `Context::new().with(value)` and pass the context to `{}::context`",
                    runner.noun(),
                    runner.type_name()
                ),
                Vec::new(),
                None,
            )
        })
    }
}

impl FromInvocation for Attempt {
    fn from_invocation(invocation: &Invocation) -> Result<Self, FailureInfo> {
        Ok(invocation.attempt)
    }
}

/// What one run of a registered handler came to.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq)]
pub enum HandlerOutcome {
    /// The handler returned `Ok`.
    Succeeded,
    /// The handler returned `Err` (or panicked, or timed out).
    Failed(FailureInfo),
    /// The payload did not deserialize into the handler's event type.
    Undecodable(FailureInfo),
}

/// The type-erased entry point of a registered handler.
#[doc(hidden)]
pub type DispatchFn = fn(Invocation) -> BoxFuture<'static, HandlerOutcome>;

/// Whether a payload deserializes into a registered handler's event type, without running it.
#[doc(hidden)]
pub type CheckFn = fn(&Payload) -> Result<(), String>;

/// A handler's registration: made by `#[dead_letter]`, collected by `inventory`, listed by
/// a [`Registry`](crate::handlers::Registry).
///
/// ```
/// let reg = dlq_core::handlers::registry().unwrap().get("doc-registration").unwrap();
/// assert_eq!(reg.event_type(), "doc-registration");
/// assert_eq!(reg.policy().max_retries, 3);
/// assert!(reg.handler().ends_with("::handle"));
/// # #[dlq_core::dead_letter(event_type = "doc-registration", max_retries = 3)]
/// # async fn handle(n: u32) -> Result<(), std::io::Error> { Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Registration {
    pub(crate) event_type: &'static str,
    /// The version of the event's contract: `#[dead_letter(version = N)]`, 1 by default.
    pub(crate) version: u32,
    /// The chain from version 1: link `i` upcasts version `i + 1` to `i + 2`.
    pub(crate) upcast: &'static [crate::upcast::UpcastFn],
    pub(crate) handler: &'static str,
    pub(crate) file: &'static str,
    pub(crate) line: u32,
    pub(crate) policy: crate::backoff::RetryPolicy,
    /// The attribute's `breaker = "..."` rule, checked when the handler compiled.
    pub(crate) breaker: Option<&'static str>,
    pub(crate) dispatch: DispatchFn,
    pub(crate) check: CheckFn,
    pub(crate) missing_state: fn(&Context) -> Option<&'static str>,
    /// The attribute's `encrypt = true` (with its `clear` fields).
    pub(crate) sealing: Option<crate::sealed::Sealing>,
    /// The attribute's `subject = "/pointer"`: where in the payload the subject is.
    pub(crate) subject: Option<&'static str>,
    /// JSON pointers of the payload fields shown redacted (published in the type catalog).
    pub(crate) redact: &'static [&'static str],
    /// The JSON Schemas of its event type by version, for the types that implement
    /// `schemars::JsonSchema` (published in the type catalog).
    pub(crate) schemas: Option<fn() -> crate::catalog::Schemas>,
}

/// Deserializes the stored payload into the handler's event type.
#[allow(clippy::result_large_err, reason = "the outcome is what the handler returns anyway, once per run")]
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

/// A `check` for hand-made registrations in tests: every payload decodes.
#[cfg(test)]
pub(crate) fn accepts_any(_: &Payload) -> Result<(), String> {
    Ok(())
}

/// A registration for tests of `event_type` in `version`, without upcasters.
#[cfg(test)]
pub(crate) const fn for_tests(event_type: &'static str, version: u32) -> Registration {
    fn succeed(_: Invocation) -> BoxFuture<'static, HandlerOutcome> {
        Box::pin(async { HandlerOutcome::Succeeded })
    }
    Registration {
        event_type,
        version,
        upcast: &[],
        handler: "tests::handle",
        file: file!(),
        line: line!(),
        policy: crate::backoff::RetryPolicy::DEFAULT,
        breaker: None,
        dispatch: succeed,
        check: accepts_any,
        missing_state: needs_no_state,
        sealing: None,
        subject: None,
        redact: &[],
        schemas: None,
    }
}

/// A `missing_state` for handlers without `State<T>` arguments.
pub(crate) fn needs_no_state(_: &Context) -> Option<&'static str> {
    None
}

impl Registration {
    /// Made by the generated code only (see `__private::registration`).
    pub(crate) const fn new(
        (event_type, version, upcast): (&'static str, u32, &'static [crate::upcast::UpcastFn]),
        handler: &'static str,
        (file, line): (&'static str, u32),
        (policy, breaker): (crate::backoff::RetryPolicy, Option<&'static str>),
        (dispatch, check): (DispatchFn, CheckFn),
        missing_state: Option<fn(&Context) -> Option<&'static str>>,
    ) -> Self {
        let missing_state = match missing_state {
            Some(f) => f,
            None => needs_no_state,
        };
        Self {
            event_type,
            version,
            upcast,
            handler,
            file,
            line,
            policy,
            breaker,
            dispatch,
            check,
            missing_state,
            sealing: None,
            subject: None,
            redact: &[],
            schemas: None,
        }
    }

    /// The registration with its events sealed at rest (`encrypt = true`).
    #[must_use]
    pub(crate) const fn sealed(mut self, sealing: crate::sealed::Sealing) -> Self {
        self.sealing = Some(sealing);
        self
    }

    /// Whether its events are encrypted at rest (`encrypt = true`), and which payload fields
    /// stay in clear (see [`crate::sealed`]).
    ///
    /// ```
    /// #[dlq_core::dead_letter(event_type = "doc-registration-sealing", encrypt = true, clear = ["/id"])]
    /// async fn handle(n: serde_json::Value) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// let sealing = <handle as dlq_core::handlers::Handler>::registration().sealing().unwrap();
    /// assert_eq!(sealing.clear(), ["/id"]);
    /// ```
    pub const fn sealing(&self) -> Option<crate::sealed::Sealing> {
        self.sealing
    }

    /// The same registration, its subject found at the JSON `pointer` of each payload
    /// (checked when the handler compiled). Made by the generated code only.
    pub(crate) const fn with_subject(mut self, pointer: &'static str) -> Self {
        self.subject = Some(pointer);
        self
    }

    /// The attribute's `subject = "..."` JSON pointer: where in a payload the subject is
    /// whose rows `dlq erase` deletes ([`crate::subject`]).
    ///
    /// ```standalone_crate
    /// // Alone in its test binary: a type with a subject needs `DLQ_SUBJECT_KEY` to start, and
    /// // doctests merged into one binary would all see this registration.
    /// #[dlq_core::dead_letter(event_type = "doc-registration-subject", subject = "/customer_id")]
    /// async fn handle(p: serde_json::Value) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// assert_eq!(<handle as dlq_core::handlers::Handler>::registration().subject_pointer(), Some("/customer_id"));
    /// ```
    pub const fn subject_pointer(&self) -> Option<&'static str> {
        self.subject
    }

    /// The event type it handles.
    pub const fn event_type(&self) -> &'static str {
        self.event_type
    }

    /// The version of the event's contract the handler decodes: its attribute's `version = N`,
    /// 1 without one. Every row the handler parks stores it ([`DeadLetter::version`](crate::DeadLetter::version)).
    ///
    /// ```
    /// #[dlq_core::dead_letter(event_type = "doc-registration-version", version = 2, upcast = [dlq_core::handlers::unchanged])]
    /// async fn handle(n: u32) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// assert_eq!(<handle as dlq_core::handlers::Handler>::registration().version(), 2);
    /// ```
    pub const fn version(&self) -> u32 {
        self.version
    }

    /// How many upcasters its chain has: one per version before its own, named by its
    /// attribute's `upcast = [...]` (see [`crate::handlers::UpcastError`]).
    pub const fn upcasters(&self) -> usize {
        self.upcast.len()
    }

    /// The handler's path, `module::path::fn_name`.
    pub const fn handler(&self) -> &'static str {
        self.handler
    }

    /// The retry policy of its attribute.
    pub const fn policy(&self) -> &crate::backoff::RetryPolicy {
        &self.policy
    }

    /// The circuit breaker of its attribute's `breaker = "..."` rule (keys the rule leaves out
    /// keep [`BreakerConfig::default`](crate::retry::BreakerConfig)), or `None` without one.
    ///
    /// A retrier uses it only for a type without an entry in its configuration's `breakers`
    /// (see [`RetrierConfig::resolve_breaker`](crate::RetrierConfig::resolve_breaker)).
    ///
    /// ```
    /// #[dlq_core::dead_letter(event_type = "doc-registration-breaker", breaker = "25% of 10 in 30s")]
    /// async fn handle(n: u32) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// let breaker = <handle as dlq_core::handlers::Handler>::registration().breaker().unwrap();
    /// assert_eq!((breaker.threshold_percent, breaker.min_calls, breaker.window.as_secs()), (25, 10, 30));
    /// ```
    pub fn breaker(&self) -> Option<crate::breaker_config::BreakerConfig> {
        // `#[dead_letter]` rejects a rule that does not parse, with this same parser.
        self.breaker.and_then(|rule| crate::breaker_config::BreakerConfig::parse_rule(rule).ok())
    }

    /// `file:line` of the handler.
    pub fn site(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    /// `payload`, written in version `version` of the event's contract, brought to the
    /// handler's version through its upcasters: what a retrier decodes. `Err` says why it
    /// cannot be: a link failed, or the version is newer than the handler's.
    ///
    /// ```
    /// use dlq_core::{Payload, handlers::UpcastError};
    /// use serde_json::{json, Value};
    ///
    /// fn add_currency(mut v: Value) -> Result<Value, UpcastError> {
    ///     v["currency"] = json!("EUR");
    ///     Ok(v)
    /// }
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Payment { cents: i64, currency: String }
    ///
    /// #[dlq_core::dead_letter(event_type = "doc-upcast-payload", version = 2, upcast = [add_currency])]
    /// async fn handle(p: Payment) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// let reg = <handle as dlq_core::handlers::Handler>::registration();
    /// let v1 = Payload::Json(json!({"cents": 5}));
    /// assert_eq!(reg.upcast(1, v1.clone()), Ok(Payload::Json(json!({"cents": 5, "currency": "EUR"}))));
    /// assert_eq!(reg.upcast(2, v1.clone()), Ok(v1.clone()), "already the handler's version");
    /// assert!(reg.upcast(3, v1).unwrap_err().contains("newer than version 2"));
    /// ```
    ///
    /// # Errors
    /// Why the payload cannot be brought to the handler's version.
    pub fn upcast(&self, version: u32, payload: Payload) -> Result<Payload, String> {
        match crate::upcast::upcast(self, version, payload) {
            crate::upcast::Upcast::Current(payload) | crate::upcast::Upcast::Upcasted(payload) => Ok(payload),
            crate::upcast::Upcast::Ahead(failure) | crate::upcast::Upcast::Failed(failure) => Err(failure.reason),
        }
    }

    /// Whether `payload` deserializes into the handler's event type, checked without running
    /// the handler: what `dlq redrive --validate` asks before it moves a row. `Err` says why
    /// it does not (the same reason a retrier would park it with, as `undecodable`).
    ///
    /// ```
    /// use dlq_core::Payload;
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Payment { id: u64, currency: String }
    ///
    /// #[dlq_core::dead_letter(event_type = "doc-check-payload")]
    /// async fn handle(p: Payment) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// let reg = <handle as dlq_core::handlers::Handler>::registration();
    /// assert!(reg.check_payload(&Payload::Json(serde_json::json!({"id": 7, "currency": "USD"}))).is_ok());
    /// let err = reg.check_payload(&Payload::Json(serde_json::json!({"id": "7"}))).unwrap_err();
    /// assert!(err.contains("invalid type"), "{err}");
    /// ```
    ///
    /// # Errors
    /// Why the payload does not deserialize into the event type.
    pub fn check_payload(&self, payload: &Payload) -> Result<(), String> {
        (self.check)(payload)
    }
}

inventory::collect!(Registration);

/// Implemented by the type that `#[dead_letter]` generates beside each handler, under the
/// handler's own name, so `handlers![handle_payment]` compiles only for annotated handlers.
///
/// ```
/// use dlq_core::handlers::Handler;
///
/// #[dlq_core::dead_letter(event_type = "doc-handler")]
/// async fn handle_refund(amount: u64) -> Result<(), std::io::Error> { Ok(()) }
///
/// assert_eq!(<handle_refund as Handler>::EVENT_TYPE, "doc-handler");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `#[dead_letter]` handler",
    label = "not annotated with `#[dead_letter]`",
    note = "annotate the function with `#[dead_letter(event_type = \"...\")]`"
)]
pub trait Handler {
    /// The event type the handler is registered for.
    const EVENT_TYPE: &'static str;
    /// The handler's registration.
    fn registration() -> &'static Registration;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing_u8_reason(runner: Runner) -> (String, String) {
        let invocation = Invocation {
            payload: Payload::Json(serde_json::Value::Null),
            context: Arc::default(),
            attempt: Attempt::first(),
            runner,
        };
        let failure = State::<u8>::from_invocation(&invocation).unwrap_err();
        (failure.kind, failure.reason)
    }

    #[test]
    fn missing_state_names_the_runner_whose_context_lacks_it() {
        assert_eq!(
            missing_u8_reason(Runner::Retrier),
            (
                "missing_state".to_owned(),
                "no `u8` in the retrier's context: add it with `Context::new().with(value)` and pass the context to \
                 `Retrier::context`"
                    .to_owned()
            )
        );
        assert_eq!(
            missing_u8_reason(Runner::Dispatcher),
            (
                "missing_state".to_owned(),
                "no `u8` in the dispatcher's context: add it with `Context::new().with(value)` and pass the context \
                 to `Dispatcher::context`"
                    .to_owned()
            )
        );
    }
}
