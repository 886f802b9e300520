//! Privacy: erasure by subject, and what sealed and redacted rows need.

use super::*;

/// Privacy: erasing every row of a data subject, the subject key's check value, the sealed
/// rows a retrier could not open, and the audited reveal of a redacted or sealed row.
///
/// ```
/// use dlq_core::store::prelude::*;
/// use dlq_core::MemoryStore;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// assert_eq!(store.count_unreadable().await?, 0);
/// assert!(store.erasures(10).await?.is_empty());
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
pub trait PrivacyStore: Send + Sync + 'static {
    /// For store implementers; applications erase through
    /// `Admin::erase`. Deletes every row stored under
    /// `request.subject` ([`NewDeadLetter::subject`]), whatever its status, with its attempts
    /// and audit entries, and records the erasure ([`Erasure`]: the hash's first
    /// [`RECORDED_PREFIX`](crate::subject::RECORDED_PREFIX) digits, the three counts, the
    /// note's actor and reason), all in one transaction.
    fn erase(&self, request: EraseRequest) -> BoxFuture<'_, StoreResult<Erasure>>;

    /// The newest `limit` erasure records ([`erase`](Self::erase)), newest first.
    fn erasures(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<Erasure>>>;

    /// For store implementers; `Admin::erase` and the live path
    /// call it. Keeps `check` as the check value of the subject key
    /// ([`SubjectKey::check`](crate::subject::SubjectKey::check)) unless the store keeps one
    /// already, and returns the one it keeps (`check` itself the first time), atomically: two
    /// first calls with different values both get the value of the one that won. Kept until
    /// the store is dropped; nothing else changes it.
    fn subject_key_check(&self, check: KeyCheck) -> BoxFuture<'_, StoreResult<KeyCheck>>;

    /// For store implementers: how many rows are stored under `subject`, whatever their
    /// status (what [`erase`](Self::erase) would delete now).
    fn count_subject(&self, subject: SubjectHash) -> BoxFuture<'_, StoreResult<u64>>;

    /// Marks the rows of `leases` as claimed by a retrier that could not open them (sealed
    /// under a key it does not hold, [`crate::sealed`]), under that claim: the row is counted
    /// by [`count_unreadable`](Self::count_unreadable) while that claim is its latest (status
    /// `PROCESSING`, the same lease token), whichever process asks. A retrier that can open
    /// it claims it again in time (a new token) and runs it: it is no longer counted. A lease
    /// that no longer holds its row marks nothing. The conformance kit checks that the marks
    /// are counted (`unreadable_rows_are_counted`).
    fn mark_unreadable(&self, leases: Vec<Lease>) -> BoxFuture<'_, StoreResult<()>>;

    /// How many rows are left unreadable under their latest claim
    /// ([`mark_unreadable`](Self::mark_unreadable)): what `dlq stats` and
    /// `health` report.
    fn count_unreadable(&self) -> BoxFuture<'_, StoreResult<u64>>;

    /// For store implementers; applications reveal through
    /// `Admin::reveal`. Records that an operator was shown row
    /// `id` whole (its redacted fields, its sealed payload opened): an audit entry with action
    /// `reveal`, the note's actor and reason and an empty object as its diff; returns its id.
    /// [`Error::NotFound`] for an unknown id. The conformance kit checks it
    /// (`reveal_is_audited`).
    fn reveal(&self, id: DlqId, note: AuditNote) -> BoxFuture<'_, StoreResult<i64>>;
}
