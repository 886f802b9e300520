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
//! [`handlers!`] builds a retrier's [`Registry`] from an explicit list of annotated handlers,
//! checked by the compiler: the way to say which handlers a process retries. Every annotated
//! handler also registers itself through `inventory`: [`registry()`] (and
//! [`Retrier::discover`]) collects every one linked into the binary, in no particular order.
//! Both fail on a duplicate event type, naming the two handlers.
//!
//! # Modules by audience
//! - The crate root: what an application writes: the attribute and classification, the live
//!   path ([`Scope`], [`Dispatcher`], [`HandlerError`]), the retrier and its configuration,
//!   handler state ([`State`], [`Context`]), the row it reads back ([`DeadLetter`], [`Status`],
//!   [`ListFilter`]) and the circuit view a consumer checks ([`circuit`], [`circuit_of`]).
//! - [`admin`]: operators: redrive, discard, patch, undo, pause, stats, and the records they
//!   read (attempts, audit entries, failure groups, retrier heartbeats).
//! - [`observe`]: metrics and health, for a service's `/metrics` and health check.
//! - [`store`]: what someone writing a new [`DeadLetterStore`] needs besides the trait (what
//!   a store receives and answers: [`store::NewDeadLetter`], [`store::Parked`], claims and
//!   settlements, circuits, operations).
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
mod classify;
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

pub use backoff::{Backoff, BackoffKind, RetryPolicy};
pub use breaker_config::BreakerConfig;
pub use circuit::{circuit, circuit_of, refresh_circuits};
pub use classify::{
    Classify, ErrorClass, FailureInfo, Fatal, MarkError, Permanent, Transient, classify_error, fingerprint,
    retry_after_hint,
};
pub use config::RetrierConfig;
pub use dlq_macros::{Classify, dead_letter};
pub use error::Error;
pub use handler::{Attempt, Context, Handler, Registration, State};
pub use live::{Dispatched, Dispatcher, HandlerError, Scope, current_store, install_store, with_store};
pub use memory::MemoryStore;
pub use record::{
    CircuitState, CircuitView, DeadLetter, DeadReason, DlqId, ListFilter, Order, Payload, SourceMeta, Status,
};
pub use registry::{Registry, registry};
pub use retrier::{Retrier, RetrierStats};
/// The `schemars` crate `#[dead_letter]` takes event types' JSON Schemas from: derive
/// `dlq_core::schemars::JsonSchema` on an event type (with `#[schemars(crate = "dlq_core::schemars")]`)
/// and its schema goes into the store's type catalog ([`catalog`]).
#[cfg(feature = "schemars")]
pub use schemars;
pub use store::DeadLetterStore;
/// The shutdown signal of [`Retrier::run_until`] most services already have (re-exported
/// from `tokio-util`): pass `token.cancelled_owned()`.
pub use tokio_util::sync::CancellationToken;
pub use upcast::{UpcastError, UpcastFn, unchanged};

/// The crate's README, its page on crates.io: its examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
