//! For store implementers: the types of the claim/settle cycle a retrier drives, beside
//! [`DeadLetterStore`] itself. Applications never need them.
//!
//! A retrier claims due rows ([`ClaimRequest`] → [`Claimed`], each under a [`Lease`]), runs
//! their handlers, and writes every outcome back as a [`Settlement`] fenced by the lease's
//! token ([`SettleReport`] counts the fenced ones). A new store passes the conformance suite
//! of `dlq_core::testing` when it keeps this contract.
//!
//! # Writing a store
//! The contract comes in parts, one trait each, so that a store is built and checked part by
//! part:
//!
//! | part | what it holds | who calls it |
//! | --- | --- | --- |
//! | [`QueueStore`] | park, claim, settle, wait for work, get | the live path, adapters, retriers |
//! | [`ReadStore`] | pages, attempts, audit, counts, stats, groups | `Admin`, the console, `dlq` |
//! | [`OperatorStore`] | batches, patches, bulk operations, upgrades, purge | `Admin`, retriers' upkeep |
//! | [`FleetStore`] | heartbeats, circuits, the type catalog | retriers, the console |
//! | [`PrivacyStore`] | erasure, sealed rows, audited reveals | `Admin`, retriers |
//! | [`SingletonStore`] (optional) | one lock holder across processes | a `singleton` retrier |
//! | [`CappedClaimStore`] (optional) | claims within a shared cap | a retrier with limits |
//!
//! [`DeadLetterStore`] is every required part together, implemented for any type that has
//! them: it is what `Arc<dyn DeadLetterStore>` holds and what `Admin`, the console and a
//! `Retrier` take. No method answers "unsupported" when called: a capability a store lacks is
//! a part it does not implement. The two optional parts are offered through
//! [`QueueStore::capped_claims`] and [`FleetStore::singleton`], read when a retrier starts.
//!
//! Start with [`QueueStore`] and run its part of the conformance kit
//! (`dlq_core::store_conformance_tests!` with the list `[queue]`, feature `testing`), then add the
//! others. Methods with a default (`settle_and_claim`, `work_ticket`, `count`,
//! `count_purgeable`, `created_histogram`, `maintain`, `table_health`, `max_payload_bytes`,
//! `capacity`, `store_id`) are correct as they are and only slower; the kit does not accept
//! the default of [`wait_for_work`](QueueStore::wait_for_work) (it must wake on parks and
//! redrives). Bulk patches need [`patch_rows`](OperatorStore::patch_rows) to keep each row's
//! operation mark in its audit entry and to check it under the row's lock: the kit's
//! `patch_rows_patch_each_row_once` presents a committed batch again and expects no row
//! patched twice. A store kept in one process can hold every table in a `Vec` behind one
//! `Mutex` and do each call's work under the lock: each call is then one transaction.
//!
//! ```
//! use dlq_core::store::{ClaimRequest, Settlement};
//! use dlq_core::store::prelude::*;
//! use dlq_core::{ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload, Status};
//! use std::time::Duration;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let failure = FailureInfo::new(ErrorClass::Transient, "io", "ledger down".into(), vec![], None);
//! let id = store.park(NewDeadLetter::new("payment", Payload::Json(1.into()), failure)).await?.id;
//!
//! let request = ClaimRequest {
//!     event_types: vec!["payment".into()],
//!     limit: 10,
//!     lease: Duration::from_secs(30),
//!     owner: "retrier-1".into(),
//! };
//! let claimed = store.claim(request).await?;
//! assert_eq!(claimed[0].id(), id);
//!
//! let report = store.settle(vec![Settlement::Succeeded { lease: claimed[0].lease }]).await?;
//! assert_eq!((report.applied, report.fenced.len()), (1, 0));
//! assert_eq!(store.get(id).await?.unwrap().status, Status::Succeeded);
//! # Ok::<(), dlq_core::Error>(())
//! # }).unwrap();
//! ```

use std::time::Duration;

use crate::Error;
pub use crate::action::{
    ActionKind, BatchAction, BatchReport, Maintenance, Operation, OperationState, OperationStep, PatchBatch,
    PatchRequest, Refusal, Refused, RowEdit, TableHealth, operation_patch_diff, patch_diff, patched_by,
    payload_from_diff, refusal,
};
pub use crate::catalog::EventTypeInfo;
use crate::record::{
    AttemptRecord, AuditEntry, DeadLetter, DlqId, FailureGroup, ListFilter, RetrierHeartbeat, StatsRow, Status,
};
pub use crate::record::{
    AuditNote, ClaimCap, ClaimRequest, Claimed, DEFAULT_MAX_PAYLOAD_BYTES, DeadReason, Lease, NewDeadLetter, Order,
    Parked, SettleReport, Settlement, SourceMeta, TOO_LARGE_PREVIEW_BYTES, Truncation,
};
pub use crate::upcast::VersionUpgrade;
/// A boxed, sendable future (from `futures-util`): the return type of [`DeadLetterStore`]
/// methods, so the trait stays usable as `dyn DeadLetterStore`.
pub use futures_util::future::BoxFuture;

/// A point in a store's stream of wake-ups ([`crate::store::QueueStore::work_ticket`]).
///
/// ```
/// use dlq_core::store::WorkSignal;
///
/// let signal = WorkSignal::new();
/// let before = signal.ticket();
/// signal.announce();
/// assert_ne!(signal.ticket(), before, "an announcement moves the ticket on");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkTicket(u64);

/// The wake-ups of a store in one process, for implementers: [`announce`](Self::announce)
/// after a write that makes work due (a park, a redrive, a retry due again);
/// [`ticket`](Self::ticket) and [`wait`](Self::wait) implement
/// [`crate::store::QueueStore::work_ticket`] and [`crate::store::QueueStore::wait_for_work`]. Unlike a bare
/// `tokio::sync::Notify`, an announcement made while nobody waits is not lost: a wait on an
/// older ticket returns at once. Clones share the signal.
///
/// ```
/// use std::time::Duration;
/// use dlq_core::store::WorkSignal;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let signal = WorkSignal::new();
/// let ticket = signal.ticket();
/// signal.announce(); // nobody waits yet
/// tokio::time::timeout(Duration::from_secs(10), signal.wait(ticket, Duration::from_secs(3600))).await.unwrap();
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct WorkSignal {
    epoch: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
}

impl WorkSignal {
    /// A signal nobody has announced on.
    pub fn new() -> Self {
        Self { epoch: std::sync::Arc::new(tokio::sync::watch::Sender::new(0)) }
    }

    /// Work may be due: wakes every waiter, and every later wait on an older ticket.
    pub fn announce(&self) {
        self.epoch.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Where the announcements stand now.
    pub fn ticket(&self) -> WorkTicket {
        WorkTicket(*self.epoch.borrow())
    }

    /// Returns once an announcement was made after `after` was taken (at once if one was
    /// already), or after `max`.
    pub async fn wait(&self, after: WorkTicket, max: Duration) {
        let mut epoch = self.epoch.subscribe();
        let _ = tokio::time::timeout(max, epoch.wait_for(|now| *now != after.0)).await;
    }
}

impl Default for WorkSignal {
    fn default() -> Self {
        Self::new()
    }
}

/// The result type of store operations.
pub type StoreResult<T> = Result<T, Error>;

/// Durable storage of dead letters.
///
/// Implementations: [`MemoryStore`](crate::MemoryStore) here; `PgStore` and `SqliteStore`
/// in `dlq-sqlx`. All keep the same semantics, checked by one conformance suite:
///
/// - `park` with an event type and dedupe key that a live row (`PENDING`, `PROCESSING`,
///   `FAILED_PERMANENTLY`) already holds returns that row's id, `deduplicated: true`, and
///   stores nothing; the same key under another event type, or a key whose rows all finished
///   (`SUCCEEDED`, `DISCARDED`), parks a new row;
/// - `claim` moves due `PENDING` rows, and `PROCESSING` rows whose lease expired, to
///   `PROCESSING` with a fresh token, each event type an equal share of the batch, its oldest
///   `retry_after` first, skipping rows others hold;
/// - `settle` writes an outcome only while the presented token still holds the row; a stale
///   token changes nothing and is reported in [`SettleReport::fenced`];
/// - [`apply`](OperatorStore::apply) and [`patch`](OperatorStore::patch), the primitives of operator actions,
///   change rows only with an audit entry (actor, reason, diff) in the same transaction.
///
/// Applications read rows through the trait, and act on them (redrive, discard, patch, undo)
/// only through `Admin`, which adds what operators rely on: a reason
/// for the audit log, the loop guard, validation, and bulk actions that walk every matching
/// row in resumable batches. The methods it calls ([`apply`](OperatorStore::apply),
/// [`patch`](OperatorStore::patch), [`audit_entry`](ReadStore::audit_entry) and the operation methods) are
/// for store implementers.
///
/// ```
/// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let failure = FailureInfo::new(ErrorClass::Permanent, "io", "bad".into(), vec![], None);
/// let letter = NewDeadLetter::new("payment", Payload::Json(serde_json::json!({})), failure);
/// let parked = store.park(letter).await?;
/// assert_eq!(store.get(parked.id).await?.unwrap().event_type, "payment");
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
pub trait DeadLetterStore: QueueStore + ReadStore + OperatorStore + FleetStore + PrivacyStore {}

impl<S: QueueStore + ReadStore + OperatorStore + FleetStore + PrivacyStore + ?Sized> DeadLetterStore for S {}

mod capped;
mod fleet;
mod operator;
mod privacy;
mod queue;
mod reads;
mod singleton;

pub use capped::CappedClaimStore;
pub use fleet::FleetStore;
pub use operator::OperatorStore;
pub use privacy::PrivacyStore;
pub use queue::QueueStore;
pub use reads::ReadStore;
pub use singleton::SingletonStore;

/// Every part of the store contract, to call a store's methods on a concrete store
/// (`MemoryStore`, `PgStore`): `use dlq_core::store::prelude::*;`. Through
/// `Arc<dyn DeadLetterStore>` they need no import.
///
/// ```
/// use dlq_core::store::prelude::*;
/// use dlq_core::{MemoryStore, ListFilter};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// assert!(store.list(ListFilter::default()).await?.is_empty());
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
pub mod prelude {
    pub use super::{
        CappedClaimStore, DeadLetterStore, FleetStore, OperatorStore, PrivacyStore, QueueStore, ReadStore,
        SingletonStore,
    };
}

pub use crate::record::{Circuit, CircuitLogEntry, CircuitWrite, Circuits, StoreId};
pub use crate::subject::{EraseRequest, Erasure, KeyCheck, SubjectHash};

/// The rows one event type created in one bucket of [`crate::store::ReadStore::created_histogram`].
///
/// ```
/// let bucket = dlq_core::store::HistogramBucket::new("payment", 3, 12);
/// assert_eq!((bucket.event_type.as_str(), bucket.bucket, bucket.count), ("payment", 3, 12));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct HistogramBucket {
    /// The event type.
    pub event_type: String,
    /// The bucket's index: it starts at `since + bucket × step`.
    pub bucket: u32,
    /// Rows created in it.
    pub count: u64,
}

impl HistogramBucket {
    /// A bucket's count, for stores outside this crate.
    pub fn new(event_type: impl Into<String>, bucket: u32, count: u64) -> Self {
        Self { event_type: event_type.into(), bucket, count }
    }
}

/// A histogram's step as a `TimeDelta`: positive and at most a year.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(dlq_core::store::histogram_step(Duration::from_secs(3600))?, chrono::TimeDelta::hours(1));
/// assert!(dlq_core::store::histogram_step(Duration::ZERO).is_err());
/// # Ok::<(), dlq_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::Config`] for a zero step or one over a year.
pub fn histogram_step(step: Duration) -> StoreResult<chrono::TimeDelta> {
    chrono::TimeDelta::from_std(step)
        .ok()
        .filter(|s| *s > chrono::TimeDelta::zero() && *s <= chrono::TimeDelta::days(366))
        .ok_or_else(|| Error::Config {
            key: "histogram step".into(),
            file: None,
            reason: format!("{step:?}: expected more than zero and at most a year"),
        })
}

/// A held singleton lock ([`crate::store::SingletonStore::try_lock_singleton`]).
///
/// ```
/// use dlq_core::{store::prelude::*, MemoryStore};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let mut lock = store.try_lock_singleton().await?.expect("free");
/// assert!(store.try_lock_singleton().await?.is_none(), "one holder at a time");
/// assert!(lock.still_held().await);
/// lock.release().await;
/// assert!(store.try_lock_singleton().await?.is_some());
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
pub trait SingletonLock: Send {
    /// Whether the lock still holds (one round trip; `false` when the connection died).
    fn still_held(&mut self) -> BoxFuture<'_, bool>;

    /// Releases the lock.
    fn release(self: Box<Self>) -> BoxFuture<'static, ()>;
}
