//! What the processes sharing a store tell each other: heartbeats, circuits, the type catalog.

use super::*;

/// The fleet: what retriers and consoles sharing a store tell each other through it
/// (heartbeats, circuit states and their log, the type catalog and its accepted schemas).
///
/// ```
/// use dlq_core::store::prelude::*;
/// use dlq_core::MemoryStore;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// assert!(store.retriers().await?.is_empty(), "no retrier has beaten yet");
/// assert!(store.singleton().is_some(), "MemoryStore offers the singleton lock");
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
pub trait FleetStore: Send + Sync + 'static {
    /// Inserts or refreshes the heartbeat row of `beat.owner` (`last_seen` now; a refresh
    /// keeps the row's `started_at`), and removes the rows of retriers not seen for
    /// `expire_after` (they crashed or were killed).
    fn heartbeat(&self, beat: &RetrierHeartbeat, expire_after: Duration) -> BoxFuture<'_, StoreResult<()>>;

    /// Removes the heartbeat row of `owner` (a retrier that stops).
    fn remove_heartbeat(&self, owner: &str) -> BoxFuture<'_, StoreResult<()>>;

    /// The heartbeat rows of the retriers sharing this store, oldest `started_at` first.
    fn retriers(&self) -> BoxFuture<'_, StoreResult<Vec<RetrierHeartbeat>>>;

    /// Every circuit written so far, with the store's clock (see `docs/BREAKER.md`). Types
    /// never written are closed. The conformance kit checks them
    /// (`circuits_compare_and_set`, `circuit_trial_taken_once`): a store keeps them as a table of [`Circuit`]s, written by [`write_circuit`](Self::write_circuit).
    fn circuits(&self) -> BoxFuture<'_, StoreResult<Circuits>>;

    /// Writes one circuit by compare-and-set ([`CircuitWrite::applied_to`]) and appends the
    /// change to the circuit log, in one transaction: `Some(circuit)` as written, `None` when
    /// the stored version was not `write.expected_version` (nothing written). In one process:
    /// under the table's lock, `write.applied_to(&current, now)` (current being
    /// [`Circuit::closed`] for a type never written), and the log entry
    /// [`CircuitLogEntry::new`]`(&write, current.state, now)`.
    fn write_circuit(&self, write: CircuitWrite) -> BoxFuture<'_, StoreResult<Option<Circuit>>>;

    /// The last `limit` circuit changes, newest first, of one type or of all.
    fn circuit_log(&self, event_type: Option<String>, limit: usize)
    -> BoxFuture<'_, StoreResult<Vec<CircuitLogEntry>>>;

    /// Writes records of the type catalog ([`crate::catalog`]), one per event type, in one
    /// transaction: a record whose type the catalog lacks is added; one whose version is the
    /// same as or newer than the stored record's replaces it; one with an older version
    /// changes nothing (the newest version wins: a process left on an old version during a
    /// rolling deploy does not hide the new contract). [`merge`](crate::catalog::merge) does
    /// it for a catalog kept in memory.
    ///
    /// ```
    /// use dlq_core::{store::prelude::*, MemoryStore, catalog::EventTypeInfo};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// store.publish_types(vec![EventTypeInfo::new("payment", 2, "new-pod")]).await?;
    /// store.publish_types(vec![EventTypeInfo::new("payment", 1, "old-pod")]).await?;
    /// assert_eq!(store.event_types().await?[0].published_by, "new-pod");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn publish_types(&self, types: Vec<EventTypeInfo>) -> BoxFuture<'_, StoreResult<()>>;

    /// The type catalog: one record per event type ever published, by event type.
    fn event_types(&self) -> BoxFuture<'_, StoreResult<Vec<EventTypeInfo>>>;

    /// For store implementers: every JSON Schema each version of each type was published
    /// with, by event type, version, then first publication
    /// ([`VersionSchema`](crate::catalog::VersionSchema)). [`publish_types`](Self::publish_types)
    /// keeps them: for each record's [`version_schemas`](EventTypeInfo::version_schemas) (in
    /// the same transaction, whatever the newest-version rule did with the record), a shape
    /// ([`digest`](crate::catalog::VersionSchema::digest)) new to its type and version is
    /// added as it is; a known one keeps its `first_published_at` and takes the new
    /// `published_at` and `published_by`. [`merge_schemas`](crate::catalog::merge_schemas)
    /// does it for a catalog kept in memory. A retrier refuses to start when its event's shape
    /// is not the one its version was first published with.
    fn version_schemas(&self) -> BoxFuture<'_, StoreResult<Vec<crate::catalog::VersionSchema>>>;

    /// For store implementers: makes `schema` the only schema of its type and version (what
    /// a retrier started with [`accept_schema_change`](crate::Retrier::accept_schema_change)
    /// does), in one transaction ([`accept_schema`](crate::catalog::accept_schema) in memory).
    fn accept_schema(&self, schema: crate::catalog::VersionSchema) -> BoxFuture<'_, StoreResult<()>>;

    /// The singleton lock of this store ([`SingletonStore`]), or `None`: a retrier configured
    /// with `singleton` then refuses to start ([`Error::Unsupported`](crate::Error::Unsupported)).
    /// A store that implements the part answers `Some(self)`.
    fn singleton(&self) -> Option<&dyn SingletonStore>;
}
