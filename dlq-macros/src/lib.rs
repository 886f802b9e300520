//! Procedural macros of `dlq`: [`#[dead_letter]`](macro@dead_letter) and
//! [`#[derive(Classify)]`](derive@Classify).
//!
//! Use them through `dlq_core` (`use dlq_core::{dead_letter, Classify};`): the generated code
//! names the runtime through `::dlq_core::__private`, so this crate alone is not enough.
//!
//! Parsing of the attribute's arguments lives in `attr.rs`, reading the annotated function in
//! `handler.rs`, generation in `expand.rs`, the derive in `classify.rs`, and the expansion of
//! `dlq_core::handlers!` in `handlers.rs`.

use proc_macro::TokenStream;

mod attr;
mod classify;
mod duration;
mod errors;
mod expand;
mod handler;
mod handlers;
mod options;
mod upcast;

/// Gives an async event handler dead-letter-queue semantics.
///
/// ```
/// use dlq_core::{dead_letter, with_store, Classify, HandlerError, MemoryStore, State};
/// use serde::{Deserialize, Serialize};
/// use std::sync::Arc;
///
/// #[derive(Debug, Clone, Serialize, Deserialize)]
/// struct Payment { id: u64, currency: String }
///
/// #[derive(Clone)]
/// struct Ledger;
///
/// #[derive(Debug, thiserror::Error, Classify)]
/// enum PaymentError {
///     #[error("currency {0:?} is not ISO 4217")]
///     #[dlq(permanent)]
///     BadCurrency(String),
///     #[error("ledger unavailable")]
///     LedgerDown, // unmarked: transient
/// }
///
/// /// Books a payment.
/// #[dead_letter(event_type = "payment", max_retries = 240, backoff = "exp", max = "6h")]
/// async fn handle_payment(p: Payment, State(_ledger): State<Ledger>) -> Result<(), PaymentError> {
///     if p.currency.trim() != p.currency {
///         return Err(PaymentError::BadCurrency(p.currency));
///     }
///     Ok(())
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = Arc::new(MemoryStore::new());
/// let poison = Payment { id: 7, currency: "USD ".into() };
/// let result = with_store(store, handle_payment(poison, State(Ledger))).await;
/// assert!(matches!(result, Err(HandlerError::Parked { .. }))); // safe to ack upstream
/// # });
/// ```
///
/// # The handler
/// - an `async fn`, not generic, not a method;
/// - its first argument is the event: any owned `Serialize + DeserializeOwned` type (any
///   pattern); not `&str` or another borrowing type, since the event is stored and decoded later;
/// - further arguments are `dlq_core::State<T>` (filled from the `Context` given to the
///   retrier or `Dispatcher`) and `dlq_core::handlers::Attempt` (which row, how many retries so far);
/// - it returns `Result<T, E>` (or an alias such as `anyhow::Result<T>`) where `E` implements
///   `Classify + Error` (see [`derive@Classify`]), `Error` (classified by the defaults: transient,
///   `serde_json` errors permanent, class markers found anywhere in the `source()` chain),
///   `AsRef<dyn Error + Send + Sync>` (`Box<dyn Error + Send + Sync>`, `anyhow::Error`), or
///   `Classify + Debug`.
///
/// The function keeps its name, visibility, attributes and docs, and now returns
/// `Result<T, HandlerError<E>>`: on `Err` the caller can tell whether the event is parked
/// (safe to acknowledge upstream), fatal (nothing parked: stop) or could not be parked (do not
/// acknowledge). The success path adds no I/O: it keeps the event (a clone, or its JSON when it
/// is not `Clone`) until the body returns.
///
/// # Arguments
/// | key | value | default |
/// | --- | --- | --- |
/// | `event_type` | the name events are stored and dispatched under (required, non-empty) | |
/// | `version` | the version of the event's contract the handler decodes, stored with every row it parks (`u32` from 1); bump it whenever the event's shape changes | 1 |
/// | `upcast` | `[v1_to_v2, v2_to_v3, ...]`: one function per version before `version`, from version 1 up, each taking the previous version's event (or `serde_json::Value`) to the next | none |
/// | `max_retries` | retries after the first failure before the event is parked dead (`u32`) | 25 |
/// | `backoff` | `"exp"`, `"fixed"`, `"linear"` or `"none"` | `"exp"` |
/// | `base` | the first delay (the step for `"linear"`, the delay for `"fixed"`) | `"1s"` |
/// | `max` | the longest delay (`"exp"`, `"linear"`) | `"1h"` |
/// | `jitter` | random spread from `0.0` to `1.0` | `0.15` |
/// | `max_age` | give up once the event has been failing this long | none |
/// | `timeout` | the longest one attempt may run | none |
/// | `breaker` | the event type's circuit breaker, as a rule: `"<percent>% [of <min-calls>] [in <window>]"` | none |
/// | `encrypt` | `true`: the payload and the error's texts are sealed at rest (AES-256-GCM under the key ring of `DLQ_KEYS`) | `false` |
/// | `clear` | `["/id", ...]`: JSON pointers of payload fields kept readable beside the ciphertext; needs `encrypt = true` | none |
/// | `subject` | a JSON pointer (RFC 6901) to the payload field naming whose data the event holds, for erasure (`dlq erase --subject`) | none |
/// | `redact` | `["/card/number", ...]`: JSON pointers of payload fields operators see masked in the CLI and the console | none |
/// | `crate` | the path of `dlq_core`, when it is reached under another name | `"::dlq_core"` |
///
/// Durations are strings that [`humantime::parse_duration`] reads, in whole milliseconds:
/// numbers with units such as `ms`, `s`, `m`, `h`, `d`, added up: `"250ms"`, `"30s"`,
/// `"1h 30m"`, `"1h30m"`, `"7d"`. Defaults are those of `RetryPolicy::DEFAULT`.
///
/// `breaker = "50% of 20 in 1m"` opens the type's circuit when, within a minute, at least 20
/// retries ran and at least half of them failed transiently: the same rule, checked by the
/// same parser at compile time, as the retrier configuration's `breaker` and `threshold`
/// (`docs/BREAKER.md`); what the rule leaves out keeps `BreakerConfig::default()`. The
/// configuration wins over the attribute, so an operator can override code: a retrier uses,
/// for each type, its entry in the configuration's `breakers`, else this attribute, else the
/// configuration's default `breaker` (`RetrierConfig::resolve_breaker`). Without the
/// attribute, the same breaker is the configuration
/// ```toml
/// [dlq.retry.breakers.payment]
/// threshold = "50% of 20 in 1m"
/// ```
///
/// `subject = "/customer_id"` stores each failed event of the type under the keyed hash
/// (HMAC-SHA256 under `DLQ_SUBJECT_KEY`) of the string or number at that pointer, so that
/// `dlq erase --subject customer-42` deletes every row of that customer; the subject itself
/// is never stored (`dlq_core::subject`). A registry holding such a type refuses to build
/// without a subject key. Without the attribute, the same is `SourceMeta::subject` on the
/// event's source.
///
/// [`humantime::parse_duration`]: https://docs.rs/humantime/2/humantime/fn.parse_duration.html
///
/// # What it expands to
/// Roughly (every runtime item is named by absolute path through `::dlq_core::__private`):
/// ```ignore
/// // The live wrapper: the user's name, attributes and visibility.
/// async fn handle_payment(__dlq_arg0: Payment, __dlq_arg1: State<Ledger>)
///     -> Result<(), HandlerError<PaymentError>>
/// {
///     let retained = /* a clone of the event, or its JSON */;
///     match handle_payment::__dlq_inner(__dlq_arg0, __dlq_arg1).await {
///         Ok(ok) => Ok(ok),
///         Err(err) => {
///             let failure = /* classified by the most specific of the four tiers above */;
///             Err(park_live(<handle_payment as Handler>::registration(), retained, failure, err).await)
///         }
///     }
/// }
///
/// // A type of the same name, so that `handlers![handle_payment]` can name the handler.
/// #[doc(hidden)]
/// struct handle_payment {}
///
/// impl handle_payment {
///     // The body, with the argument patterns as written.
///     async fn __dlq_inner(p: Payment, State(_ledger): State<Ledger>) -> Result<(), PaymentError> { /* .. */ }
///     // The registry's entry point: decode, extract, run, classify.
///     fn __dlq_dispatch(invocation: Invocation) -> BoxFuture<'static, HandlerOutcome> { /* .. */ }
///     // The decode alone, for `Registration::check_payload` (`dlq redrive --validate`).
///     fn __dlq_check(payload: &Payload) -> Result<(), String> { /* .. */ }
///     const __DLQ_REGISTRATION: Registration = registration(
///         ("payment", 1), // the event type and the `version = N` of its contract
///         concat!(module_path!(), "::handle_payment"),
///         (file!(), line!()), // of the function's name
///         (
///             { let mut policy = RetryPolicy::DEFAULT; policy.max_retries = 240; /* .. */ policy },
///             None, // or `Some("50% of 20 in 1m")`, the `breaker = "..."` rule
///         ),
///         (Self::__dlq_dispatch, Self::__dlq_check),
///         Some(Self::__dlq_missing_state), // the first `State<T>` its context lacks
///     ); // wrapped in `with_subject(.., "/customer_id")` with a `subject = "..."`
/// }
///
/// impl Handler for handle_payment { /* EVENT_TYPE, registration() */ }
/// inventory::submit! { handle_payment::__DLQ_REGISTRATION }
/// const _: () = { assert_event::<Payment>(); assert_argument::<State<Ledger>>(); };
/// ```
///
/// # Errors
/// Misuse is a compile error on the offending token, all of them reported at once; the
/// function is still emitted so that the rest of the crate keeps compiling. For example a
/// handler that is not `async`:
/// ```compile_fail
/// #[dlq_core::dead_letter(event_type = "payment")]
/// fn handle(amount: u64) -> Result<(), std::io::Error> { Ok(()) }
/// ```
/// an unknown key (the message lists the valid ones):
/// ```compile_fail
/// #[dlq_core::dead_letter(event_type = "payment", retries = 3)]
/// async fn handle(amount: u64) -> Result<(), std::io::Error> { Ok(()) }
/// ```
/// a `subject` that is not a JSON pointer (it starts with `/`):
/// ```compile_fail
/// #[dlq_core::dead_letter(event_type = "payment", subject = "customer_id")]
/// async fn handle(p: serde_json::Value) -> Result<(), std::io::Error> { Ok(()) }
/// ```
/// an event that borrows (take `String` instead):
/// ```compile_fail
/// #[dlq_core::dead_letter(event_type = "note")]
/// async fn handle(note: &str) -> Result<(), std::io::Error> { Ok(()) }
/// ```
/// or an argument that cannot be filled after the event:
/// ```compile_fail
/// #[dlq_core::dead_letter(event_type = "payment")]
/// async fn handle(amount: u64, note: String) -> Result<(), std::io::Error> { Ok(()) }
/// ```
#[proc_macro_attribute]
pub fn dead_letter(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::dead_letter(args.into(), item.into()).into()
}

/// Implements `dlq_core::Classify` from `#[dlq(...)]` markers.
///
/// Mark variants `#[dlq(transient)]`, `#[dlq(permanent)]` or `#[dlq(fatal)]`; unmarked
/// variants are transient, unless the type itself carries a marker, which is then the default.
/// `kind()` is `"Type::Variant"` (`"Type"` for a struct). `#[dlq(crate = "...")]` on the type
/// names `dlq_core` when it is reached under another path.
///
/// ```
/// use dlq_core::{Classify, ErrorClass};
///
/// #[derive(Debug, thiserror::Error, Classify)]
/// enum PaymentError {
///     #[error("currency {0:?} is not ISO 4217")]
///     #[dlq(permanent)]
///     BadCurrency(String),
///     #[error("ledger unavailable")]
///     LedgerDown,
///     #[error("credentials refused")]
///     #[dlq(fatal)]
///     Unauthorized,
/// }
///
/// let err = PaymentError::BadCurrency("USD ".into());
/// assert_eq!((err.classify(), err.kind()), (ErrorClass::Permanent, "PaymentError::BadCurrency"));
/// assert_eq!(PaymentError::LedgerDown.classify(), ErrorClass::Transient);
///
/// #[derive(Debug, thiserror::Error, Classify)]
/// #[error("payload failed validation")]
/// #[dlq(permanent)]
/// struct Invalid;
///
/// assert_eq!((Invalid.classify(), Invalid.kind()), (ErrorClass::Permanent, "Invalid"));
/// ```
///
/// An unknown or repeated marker is a compile error:
/// ```compile_fail
/// #[derive(Debug, dlq_core::Classify)]
/// enum PaymentError {
///     #[dlq(retryable)]
///     Timeout,
/// }
/// ```
#[proc_macro_derive(Classify, attributes(dlq))]
pub fn derive_classify(item: TokenStream) -> TokenStream {
    classify::derive(item.into()).into()
}

/// Not public API: the expansion of `dlq_core::handlers!`, which passes `$crate; paths...`.
#[doc(hidden)]
#[proc_macro]
pub fn __handlers(input: TokenStream) -> TokenStream {
    handlers::expand(input.into()).into()
}

/// The crate's README, its page on crates.io: its examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
