//! The storage contract every backend (memory, PostgreSQL, SQLite) keeps.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::Error;
use crate::record::{
    AttemptRecord, AuditEntry, ClaimRequest, Claimed, DeadLetter, DlqId, FailureGroup, ListFilter, NewDeadLetter,
    Parked, Payload, RetrierHeartbeat, SettleReport, Settlement, StatsRow,
};

/// A boxed, sendable future: the return type of [`DeadLetterStore`] methods, so the trait
/// stays usable as `dyn DeadLetterStore`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The result type of store operations.
pub type StoreResult<T> = Result<T, Error>;

/// Durable storage of dead letters.
///
/// Implementations: [`MemoryStore`](crate::MemoryStore) here; `PgStore` and `SqliteStore`
/// in `dlq-sqlx`. All keep the same semantics, checked by one conformance suite:
///
/// - `park` with a dedupe key already stored returns the first row's id, `deduplicated: true`;
/// - `claim` moves due `PENDING` rows, and `PROCESSING` rows whose lease expired, to
///   `PROCESSING` with a fresh token, oldest `retry_after` first, skipping rows others hold;
/// - `settle` writes an outcome only while the presented token still holds the row; a stale
///   token changes nothing and is reported in [`SettleReport::fenced`];
/// - operator actions (`redrive`, `discard`, `patch_payload`) append to the audit log.
///
/// ```
/// use dlq_core::{DeadLetterStore, ErrorClass, FailureInfo, MemoryStore, NewDeadLetter, Payload};
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
pub trait DeadLetterStore: Send + Sync + 'static {
    /// Parks one failed event.
    fn park(&self, letter: NewDeadLetter) -> BoxFuture<'_, StoreResult<Parked>>;

    /// Parks many failed events in one write; ids come back in input order.
    fn park_many(&self, letters: Vec<NewDeadLetter>) -> BoxFuture<'_, StoreResult<Vec<Parked>>>;

    /// Claims due rows for a retry.
    fn claim(&self, request: ClaimRequest) -> BoxFuture<'_, StoreResult<Vec<Claimed>>>;

    /// Writes the outcomes of retries, each fenced by its lease token.
    fn settle(&self, outcomes: Vec<Settlement>) -> BoxFuture<'_, StoreResult<SettleReport>>;

    /// Waits until new work may be due (a park or redrive happened) or `max` elapsed.
    ///
    /// The default sleeps for `max`; stores with a notification channel wake earlier.
    fn wait_for_work(&self, max: Duration) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(max))
    }

    /// Reads one row.
    fn get(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Option<DeadLetter>>>;

    /// Lists rows, newest first.
    fn list(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>>;

    /// Counts rows by event type and status.
    fn stats(&self) -> BoxFuture<'_, StoreResult<Vec<StatsRow>>>;

    /// Groups dead and pending rows by fingerprint, largest group first.
    fn groups(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<FailureGroup>>>;

    /// The attempt history of one row, oldest first.
    fn attempts(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AttemptRecord>>>;

    /// The audit log of one row, oldest first.
    fn audit(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AuditEntry>>>;

    /// Moves matching `FAILED_PERMANENTLY` rows back to `PENDING`, due now, with
    /// `retry_count` reset and `redrive_count + 1`. Returns the ids redriven.
    fn redrive(&self, filter: ListFilter, actor: &str) -> BoxFuture<'_, StoreResult<Vec<DlqId>>>;

    /// Moves matching rows that are not `PROCESSING` to `DISCARDED`. Returns the ids.
    fn discard(&self, filter: ListFilter, actor: &str) -> BoxFuture<'_, StoreResult<Vec<DlqId>>>;

    /// Replaces the payload of a row that is not `PROCESSING`, recording the diff.
    fn patch_payload(&self, id: DlqId, payload: Payload, actor: &str) -> BoxFuture<'_, StoreResult<()>>;

    /// Deletes `SUCCEEDED` and `DISCARDED` rows last updated more than `older_than` ago.
    fn purge(&self, older_than: Duration) -> BoxFuture<'_, StoreResult<u64>>;

    /// The largest payload this store keeps whole, in bytes
    /// ([`DEFAULT_MAX_PAYLOAD_BYTES`](crate::DEFAULT_MAX_PAYLOAD_BYTES) unless configured).
    /// A larger one is cut and parked dead ([`DeadReason::TooLarge`](crate::DeadReason::TooLarge)).
    fn max_payload_bytes(&self) -> usize {
        crate::DEFAULT_MAX_PAYLOAD_BYTES
    }

    /// Inserts or refreshes the heartbeat row of `beat.owner`, and removes the rows of
    /// retriers not seen for `expire_after` (they crashed or were killed).
    fn heartbeat(&self, beat: &RetrierHeartbeat, expire_after: Duration) -> BoxFuture<'_, StoreResult<()>>;

    /// Removes the heartbeat row of `owner` (a retrier that stops).
    fn remove_heartbeat(&self, owner: &str) -> BoxFuture<'_, StoreResult<()>>;

    /// The heartbeat rows of the retriers sharing this store, oldest first.
    fn retriers(&self) -> BoxFuture<'_, StoreResult<Vec<RetrierHeartbeat>>>;

    /// Tries to take the store-wide lock of `singleton` mode: `Some` while this process holds
    /// it, `None` when another one does. The default says the store has no such lock
    /// ([`Error::Unsupported`]), and a retrier configured as a singleton refuses to start.
    fn try_lock_singleton(&self) -> BoxFuture<'_, StoreResult<Option<Box<dyn SingletonLock>>>> {
        Box::pin(async { Err(Error::Unsupported { store: "this store", what: "singleton mode (use PostgreSQL)" }) })
    }
}

/// A held singleton lock ([`DeadLetterStore::try_lock_singleton`]).
///
/// ```
/// use dlq_core::{DeadLetterStore, MemoryStore};
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
