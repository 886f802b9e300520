//! Dead-letter-queue semantics for async Rust event handlers.
//!
//! Annotate a handler with [`#[dead_letter]`](dead_letter) and from then on a poison event
//! never blocks the stream and never silently disappears: its failure is classified
//! ([`ErrorClass`]), parked durably with its payload, error chain and retry schedule
//! ([`DeadLetterStore`]), retried with backoff by a [`Retrier`] that any number of processes
//! can run at once, and left for an operator to inspect, repair and redrive when it cannot
//! succeed as it is.
//!
//! ```
//! use dlq_core::{dead_letter, with_store, HandlerError, MemoryStore, Classify};
//! use serde::{Deserialize, Serialize};
//! use std::sync::Arc;
//!
//! #[derive(Debug, Clone, Serialize, Deserialize)]
//! struct Payment { id: u64, currency: String }
//!
//! #[derive(Debug, thiserror::Error, Classify)]
//! enum PaymentError {
//!     #[error("currency {0:?} is not ISO 4217")]
//!     #[dlq(permanent)]
//!     BadCurrency(String),
//!     #[error("ledger unavailable")]
//!     #[dlq(transient)]
//!     LedgerDown,
//! }
//!
//! #[dead_letter(event_type = "payment", max_retries = 240, backoff = "exp")]
//! async fn handle_payment(p: Payment) -> Result<(), PaymentError> {
//!     if p.currency.trim() != p.currency {
//!         return Err(PaymentError::BadCurrency(p.currency));
//!     }
//!     Ok(())
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = Arc::new(MemoryStore::new());
//! let poison = Payment { id: 7, currency: "USD ".into() };
//! let err = with_store(store.clone(), handle_payment(poison)).await.unwrap_err();
//! assert!(err.is_parked()); // safe to ack upstream; the event waits, visible, in the store
//! # });
//! ```
//!
//! # Registration
//! Every annotated handler registers itself through `inventory`; [`registry()`] checks them
//! once (a duplicate event type is an error naming both handlers). Only handlers in code
//! linked into the binary register, in no particular order. [`handlers!`] builds a registry
//! from an explicit list the compiler checks.

#![cfg_attr(docsrs, feature(doc_auto_cfg))]

mod backoff;
mod classify;
mod config;
mod error;
mod handler;
mod live;
mod memory;
mod record;
mod registry;
mod retrier;
mod store;

#[doc(hidden)]
pub mod __private;

pub use backoff::{Backoff, BackoffKind, RetryPolicy};
pub use classify::{
    Classify, ErrorClass, FailureInfo, Fatal, MAX_CHAIN_LEN, MAX_REASON_BYTES, MAX_STACKTRACE_BYTES, MarkError,
    Permanent, Transient, bounded, classify_error, fingerprint,
};
pub use config::RetrierConfig;
pub use dlq_macros::{Classify, dead_letter};
pub use error::Error;
pub use handler::{
    Attempt, Context, DispatchFn, FromInvocation, Handler, HandlerOutcome, Invocation, Registration, State,
};
pub use live::{Dispatched, Dispatcher, HandlerError, Scope, current_store, install_store, with_store};
pub use memory::MemoryStore;
pub use record::{
    AttemptRecord, AuditEntry, ClaimRequest, Claimed, DEFAULT_MAX_PAYLOAD_BYTES, DeadLetter, DeadReason, DlqId,
    FailureGroup, Lease, ListFilter, NewDeadLetter, Parked, Payload, RetrierHeartbeat, SettleReport, Settlement,
    SourceMeta, StatsRow, Status, Truncation, jsonb_safe,
};
pub use registry::{Registry, registry};
pub use retrier::{Retrier, RetrierStats};
pub use store::{BoxFuture, DeadLetterStore, SingletonLock, StoreResult};
/// The shutdown signal of [`Retrier::run_until`] most services already have (re-exported
/// from `tokio-util`): pass `token.cancelled_owned()`.
pub use tokio_util::sync::CancellationToken;
