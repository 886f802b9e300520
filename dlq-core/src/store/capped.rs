//! An optional part: claims that keep a cap shared by every process.

use super::*;

/// An optional part: claims within a cap that every process sharing the store counts against,
/// offered through [`QueueStore::capped_claims`].
///
/// ```
/// use dlq_core::store::prelude::*;
/// use dlq_core::MemoryStore;
///
/// let store = MemoryStore::new();
/// assert!(store.capped_claims().is_some(), "MemoryStore keeps caps across its retriers");
/// ```
pub trait CappedClaimStore: Send + Sync {
    /// Claims like [`claim`](QueueStore::claim), for the one event type of `request`, within `cap`
    /// as a whole: the rows of that type under a live lease and those claimed within the
    /// cap's window, by any process sharing the store, are counted, the claim takes what the
    /// cap leaves (possibly nothing), and its rows are recorded, all in one atomic step. The
    /// retrier uses it for types with `max-concurrent`, `max-rate` or a ramp when
    /// the store offers it ([`QueueStore::capped_claims`]); otherwise each retrier keeps its
    /// share of the limits.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use dlq_core::store::{ClaimCap, ClaimRequest};
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
    /// use std::time::Duration;
    ///
    /// let store = MemoryStore::new();
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// for n in 0..10 {
    ///     store.park(NewDeadLetter::new("payment", Payload::Json(n.into()), failure.clone())).await?;
    /// }
    /// let request = ClaimRequest {
    ///     event_types: vec!["payment".into()],
    ///     limit: 10,
    ///     lease: Duration::from_secs(60),
    ///     owner: "doc".into(),
    /// };
    /// let cap = ClaimCap { in_flight: Some(4), starts: None };
    /// let capped = store.capped_claims().expect("MemoryStore offers capped claims");
    /// assert_eq!(capped.claim_capped(request.clone(), cap).await?.len(), 4);
    /// assert_eq!(capped.claim_capped(request, cap).await?.len(), 0, "4 are still held");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn claim_capped(&self, request: ClaimRequest, cap: ClaimCap) -> BoxFuture<'_, StoreResult<Vec<Claimed>>>;
}
