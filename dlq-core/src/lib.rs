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
//! - The crate root: what applications use (the attribute, classification, the live path,
//!   the retrier and its configuration, the records an operator reads).
//! - [`store`]: what someone writing a new [`DeadLetterStore`] needs besides the trait.

#![cfg_attr(docsrs, feature(doc_auto_cfg))]

mod action;
pub mod admin;
mod backoff;
mod breaker;
mod breakers;
mod circuit;
mod classify;
mod config;
mod error;
mod handler;
mod health;
mod live;
mod memory;
mod observe;
mod otel;
mod record;
mod registry;
mod retrier;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;

#[doc(hidden)]
pub mod __private;

pub use backoff::{Backoff, BackoffKind, RetryPolicy};
pub use breaker::BreakerConfig;
pub use circuit::{Circuit, CircuitLogEntry, CircuitState, CircuitView, circuit, refresh_circuits};
pub use classify::{
    Classify, ErrorClass, FailureInfo, Fatal, MarkError, Permanent, Transient, classify_error, fingerprint,
    retry_after_hint,
};
pub use config::RetrierConfig;
pub use dlq_macros::{Classify, dead_letter};
pub use error::Error;
pub use handler::{Attempt, Context, Handler, Registration, State};
pub use health::{Capacity, Health, HealthStatus, SATURATION_ERROR, SATURATION_WARNING, health};
pub use live::{Dispatched, Dispatcher, HandlerError, Scope, current_store, install_store, with_store};
pub use memory::MemoryStore;
pub use observe::{
    MAX_TYPE_LABEL_CHARS, MAX_UNREGISTERED_TYPE_LABELS, METRICS, OTHER_EVENT_TYPES, StoreGauges, describe_metrics,
    record_overflow, type_label,
};
pub use record::{
    AttemptRecord, AuditEntry, AuditNote, DEFAULT_MAX_PAYLOAD_BYTES, DeadLetter, DeadReason, DlqId, FailureGroup,
    ListFilter, NewDeadLetter, Order, Parked, Payload, RetrierHeartbeat, SourceMeta, StatsRow, Status,
    TOO_LARGE_PREVIEW_BYTES, Truncation,
};
pub use registry::{Registry, registry};
pub use retrier::{Retrier, RetrierStats};
pub use store::DeadLetterStore;
/// The shutdown signal of [`Retrier::run_until`] most services already have (re-exported
/// from `tokio-util`): pass `token.cancelled_owned()`.
pub use tokio_util::sync::CancellationToken;
