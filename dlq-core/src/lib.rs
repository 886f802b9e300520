//! Dead-letter-queue semantics for async Rust event handlers.
//!
//! Annotate a handler with [`#[dead_letter]`](dead_letter) and from then on a poison event
//! never blocks the stream and never silently disappears: its failure is classified
//! ([`ErrorClass`]), parked durably with its payload, error chain and retry schedule
//! ([`DeadLetterStore`]), retried with backoff by a [`Retrier`] that any number of processes
//! can run at once, and left for an operator to inspect, repair and redrive when it cannot
//! succeed as it is.
//!
//! The shortest complete program: a handler, a store, a failure parked by the live path, and a
//! retrier that redelivers it once the downstream is back.
//!
//! ```
//! use dlq_core::{dead_letter, handlers, with_store, Classify, MemoryStore, Retrier, Status};
//! use serde::{Deserialize, Serialize};
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicBool, Ordering};
//!
//! #[derive(Debug, Clone, Serialize, Deserialize)]
//! struct Payment { id: u64, currency: String }
//!
//! #[derive(Debug, thiserror::Error, Classify)]
//! enum PaymentError {
//!     #[error("currency {0:?} is not ISO 4217")]
//!     #[dlq(permanent)] // retrying cannot help: parked dead at once
//!     BadCurrency(String),
//!     #[error("ledger unavailable")]
//!     #[dlq(transient)] // parked, retried with backoff
//!     LedgerDown,
//! }
//!
//! static LEDGER_UP: AtomicBool = AtomicBool::new(false);
//!
//! #[dead_letter(event_type = "payment", max_retries = 240, backoff = "none")]
//! async fn handle_payment(p: Payment) -> Result<(), PaymentError> {
//!     if p.currency.trim() != p.currency {
//!         return Err(PaymentError::BadCurrency(p.currency));
//!     }
//!     if !LEDGER_UP.load(Ordering::SeqCst) {
//!         return Err(PaymentError::LedgerDown);
//!     }
//!     Ok(())
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = Arc::new(MemoryStore::new()); // or dlq_sqlx::PgStore / SqliteStore
//!
//! // The live path: a failing call parks its event and says so.
//! let err = with_store(store.clone(), handle_payment(Payment { id: 7, currency: "EUR".into() })).await.unwrap_err();
//! assert!(err.is_parked()); // safe to ack upstream; the event waits, visible, in the store
//! let id = err.dlq_id().unwrap();
//!
//! // The retrier: redelivers due rows to their handlers (`run_until(shutdown)` in a service).
//! LEDGER_UP.store(true, Ordering::SeqCst);
//! let retrier = Retrier::new(store.clone(), handlers![handle_payment]?);
//! retrier.run_once().await?;
//! assert_eq!(store.get_now(id).unwrap().status, Status::Succeeded);
//! # Ok::<(), dlq_core::Error>(())
//! # }).unwrap();
//! ```
//!
//! # Registration
//! [`handlers!`] builds a retrier's [`Registry`](handlers::Registry) from an explicit list of annotated handlers,
//! checked by the compiler: the way to say which handlers a process retries. Every annotated
//! handler also registers itself through `inventory`: [`registry()`](handlers::registry) (and
//! [`Retrier::discover`]) collects every one linked into the binary, in no particular order.
//! Both fail on a duplicate event type, naming the two handlers.
//!
//! # Modules by audience
//! - The crate root: what an application writes: the attribute and classification
//!   ([`dead_letter`], [`Classify`], [`ErrorClass`], [`Permanent`], [`Transient`], [`Fatal`]),
//!   the live path ([`Scope`], [`with_store`], [`install_store`], [`HandlerError`]), the
//!   retrier ([`Retrier`], [`RetrierConfig`], [`CancellationToken`], [`handlers!`]), handler
//!   state ([`State`], [`Context`]), the stores ([`DeadLetterStore`], [`MemoryStore`]) and the
//!   row read back ([`DeadLetter`], [`DlqId`], [`Status`], [`Payload`], [`ListFilter`], [`Error`]).
//! - [`adapter`]: broker adapters and consumers: the [`Dispatcher`](adapter::Dispatcher) that
//!   runs a handler on raw input with its [`SourceMeta`](adapter::SourceMeta), and the circuit
//!   view a consumer checks before pulling more ([`adapter::circuit`]).
//! - [`handlers`](mod@handlers): the [`Registry`](handlers::Registry) of a process, one handler's
//!   registration, and upcasters for old payload versions.
//! - [`retry`]: backoff, retry policy, the circuit breaker's and the retrier's settings.
//! - [`classify`]: how an error becomes a class and a fingerprint, for code that classifies
//!   by hand ([`classify::FailureInfo`], [`classify::classify_error`], [`classify::MarkError`]).
//! - [`admin`]: operators: redrive, discard, patch, undo, pause, stats, and the records they
//!   read (attempts, audit entries, failure groups, retrier heartbeats).
//! - [`catalog`]: the type catalog: the event types, versions and schemas a store knows of.
//! - [`redact`], [`sealed`], [`subject`]: sensitive payloads: what operators may see,
//!   encryption at rest with key rings, erasure by data subject.
//! - [`observe`]: metrics and health, for a service's `/metrics` and health check.
//! - [`store`]: the store contract in parts ([`store::QueueStore`], [`store::ReadStore`],
//!   [`store::OperatorStore`], [`store::FleetStore`], [`store::PrivacyStore`], the optional
//!   [`store::SingletonStore`] and [`store::CappedClaimStore`]; [`DeadLetterStore`] is the
//!   five required ones together), what a store receives and answers
//!   ([`store::NewDeadLetter`], [`store::Parked`], claims and settlements, circuits,
//!   operations), and [`store::prelude`] to call a concrete store's methods.
//! - `testing` (feature `testing`): an application's tests (assertions on parked rows, a
//!   harness on a paused clock) and the conformance suite a new store runs.

#![cfg_attr(docsrs, feature(doc_auto_cfg))]

/// The text forms of an enum stored or typed as text, one convention for every such enum:
/// `as_str` (what is stored and printed), `Display`, `FromStr` (an unknown text is
/// [`Error::Parse`] naming the accepted ones) and `ALL` (every value, in declaration order).
macro_rules! text_forms {
    ($name:ident { $($variant:ident => $text:literal),* $(,)? }) => {
        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),*];

            /// The text stored and shown: what [`FromStr`](std::str::FromStr) parses back.
            pub const fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),* }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = crate::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok(Self::$variant),)*
                    other => Err(crate::Error::Parse {
                        what: stringify!($name),
                        value: other.to_owned(),
                        expected: &[$($text),*],
                    }),
                }
            }
        }
    };
}

mod action;
pub mod admin;
mod backoff;
mod breaker_config;
pub mod catalog;
mod circuit;
pub mod classify;
mod config;
mod error;
mod handler;
mod live;
mod memory;
pub mod observe;
mod otel;
mod record;
pub mod redact;
mod registry;
mod retrier;
pub mod sealed;
pub mod store;
pub mod subject;
#[cfg(feature = "testing")]
pub mod testing;
mod upcast;
mod validate;

#[doc(hidden)]
pub mod __private;

pub use classify::{Classify, ErrorClass, Fatal, Permanent, Transient};
pub use config::RetrierConfig;
pub use dlq_macros::{Classify, dead_letter};
pub use error::Error;
pub use handler::{Context, State};
pub use live::{HandlerError, Scope, install_store, with_store};
pub use memory::MemoryStore;
pub use record::{DeadLetter, DlqId, ListFilter, Payload, Status};
pub use retrier::Retrier;
/// The `schemars` crate `#[dead_letter]` takes event types' JSON Schemas from: derive
/// `dlq_core::schemars::JsonSchema` on an event type (with `#[schemars(crate = "dlq_core::schemars")]`)
/// and its schema goes into the store's type catalog ([`catalog`]).
#[cfg(feature = "schemars")]
pub use schemars;
pub use store::DeadLetterStore;
/// The shutdown signal of [`Retrier::run_until`] most services already have (re-exported
/// from `tokio-util`): pass `token.cancelled_owned()`.
pub use tokio_util::sync::CancellationToken;

/// For broker adapters and consumers: run a handler on raw input ([`Dispatcher`](adapter::Dispatcher)) with
/// the message's source, and check an event type's circuit before pulling more.
///
/// ```
/// use dlq_core::adapter::SourceMeta;
///
/// let from = SourceMeta::kafka("payments", 2, 41);
/// assert_eq!(from.dedupe_key().as_deref(), Some("payments/2/41"));
/// assert!(!dlq_core::adapter::circuit("payment").is_open(), "closed while nothing is known");
/// ```
pub mod adapter {
    pub use crate::circuit::{circuit, circuit_of, refresh_circuits};
    pub use crate::live::{Dispatched, Dispatcher, current_store};
    pub use crate::record::{CircuitState, CircuitView, DeadReason, SourceMeta};
}

/// The handlers of a process: the [`Registry`](handlers::Registry) a retrier runs ([`handlers!`](macro@crate::handlers),
/// [`registry()`](handlers::registry)), one handler's [`Registration`](handlers::Registration) and
/// [`Attempt`](handlers::Attempt), and the upcasters that
/// bring old payload versions up to date.
///
/// ```
/// use dlq_core::{dead_letter, handlers};
///
/// #[dead_letter(event_type = "doc-handlers-module")]
/// async fn handle(amount: u64) -> Result<(), std::io::Error> { Ok(()) }
///
/// let registry: dlq_core::handlers::Registry = handlers![handle]?;
/// assert!(registry.get("doc-handlers-module").is_ok());
/// # Ok::<(), dlq_core::Error>(())
/// ```
pub mod handlers {
    pub use crate::handler::{Attempt, Handler, Registration};
    pub use crate::registry::{Registry, registry};
    pub use crate::upcast::{UpcastError, UpcastFn, unchanged};
}

/// How failures are retried: the backoff and retry policy, the circuit breaker's settings,
/// the retrier's own settings and what a run did.
///
/// ```
/// use dlq_core::retry::RetryPolicy;
///
/// assert!(RetryPolicy::DEFAULT.max_retries > 0);
/// ```
pub mod retry {
    pub use crate::backoff::{Backoff, BackoffKind, RetryPolicy};
    pub use crate::breaker_config::BreakerConfig;
    pub use crate::config::RetrierConfig;
    pub use crate::retrier::RetrierStats;
}

/// The crate's README, its page on crates.io: its examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
