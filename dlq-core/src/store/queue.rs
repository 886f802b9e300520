//! The queue's part of a store: what parks, claims, settles and wakes.

use super::*;

/// The queue: parking failed events, claiming due rows under a lease, settling each outcome
/// fenced by its token, and waking whoever waits for work. The first part a store for a new
/// database implements: the conformance kit's `queue` tests need nothing else.
///
/// ```
/// use std::time::Duration;
/// use dlq_core::store::{ClaimRequest, QueueStore, Settlement};
/// use dlq_core::{ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload, Status};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let failure = FailureInfo::new(ErrorClass::Transient, "io", "ledger down".into(), vec![], None);
/// let id = store.park(NewDeadLetter::new("payment", Payload::Json(1.into()), failure)).await?.id;
/// let request = ClaimRequest { event_types: vec!["payment".into()], limit: 10, lease: Duration::from_secs(30), owner: "doc".into() };
/// let claimed = store.claim(request).await?;
/// store.settle(vec![Settlement::Succeeded { lease: claimed[0].lease }]).await?;
/// assert_eq!(store.get(id).await?.unwrap().status, Status::Succeeded);
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
pub trait QueueStore: Send + Sync + 'static {
    /// Parks one failed event.
    ///
    /// Unless a live row holds its event type and dedupe key (then that row's id comes back,
    /// `deduplicated: true`, and nothing is written, no attempt either), it stores
    /// `letter.fit(self.max_payload_bytes())` (a payload over the limit, or already cut, is
    /// kept cut and parked dead `too_large`, [`Parked::truncated`]) as a new row with a new,
    /// never reused id: in [`letter.status()`](NewDeadLetter::status), with `created_at`,
    /// `updated_at` and `first_failed_at` now, `retry_after` now + `retry_delay` (saturating:
    /// a huge delay is never due), the letter's other fields as they are, no lease
    /// ([`DeadLetter::new`] builds such a row). It appends attempt 0 to the row's history:
    /// outcome `failed`, the failure's class and reason, no owner. Then it wakes
    /// [`wait_for_work`](Self::wait_for_work).
    fn park(&self, letter: NewDeadLetter) -> BoxFuture<'_, StoreResult<Parked>>;

    /// Parks many failed events in one write; ids come back in input order. Each letter is
    /// parked as by [`park`](Self::park), in order: a later letter of the batch dedupes
    /// against an earlier one.
    fn park_many(&self, letters: Vec<NewDeadLetter>) -> BoxFuture<'_, StoreResult<Vec<Parked>>>;

    /// Claims due rows for a retry: of the request's event types, `PENDING` rows whose
    /// `retry_after` passed and `PROCESSING` rows whose `lease_until` passed, at most `limit`,
    /// each event type an equal share of them, its oldest first in `(retry_after, id)` order
    /// (a share a type cannot fill goes to the others: [`ClaimRequest::share`]), so that one
    /// type's backlog never holds back another type's due rows. Each becomes `PROCESSING` under a fresh
    /// token, with `lease_owner` the request's owner, `lease_until` now + `lease`
    /// (saturating), and `last_attempt_at` and `updated_at` now; it comes back as
    /// [`Claimed::of`] the updated row.
    fn claim(&self, request: ClaimRequest) -> BoxFuture<'_, StoreResult<Vec<Claimed>>>;

    /// Writes the outcomes of retries, each fenced by its lease token. A
    /// [`Settlement::Repeated`] (attempts a retrier ran back to back under one claim) is
    /// written as its earlier failures, each a counted retry appended to the attempt history,
    /// then its final outcome ([`Settlement::earlier_failures`], [`Settlement::last`] and
    /// [`Settlement::counted`] give the parts); `store_conformance_tests!` checks it.
    ///
    /// A lease holds its row while the row is `PROCESSING` under its token and `lease_until`
    /// has not passed: an expired lease is fenced even when nobody claimed the row again, and
    /// a token is spent by its first outcome (a second outcome of the same lease is fenced).
    /// Fenced ids are reported in input order. A written outcome clears the lease
    /// (`lease_owner`, `lease_until`), sets `updated_at`, and:
    /// - `Succeeded`: `SUCCEEDED`, the failure kept;
    /// - `Retry`: `PENDING`, `retry_count + 1`, `retry_after` now + `delay`, the new failure;
    /// - `Dead`: `FAILED_PERMANENTLY` with its reason and failure, `retry_count + 1` when it
    ///   `counts`;
    /// - `Release`: `PENDING`, due now, nothing counted or recorded.
    ///
    /// Every attempt but a release is appended to the row's history
    /// ([`attempts`](ReadStore::attempts)): numbered the row's `retry_count` before it + 1 (so the
    /// numbers start again at 1 after a redrive), with its outcome name
    /// ([`Settlement::outcome_name`]; `retry` for each earlier failure of a `Repeated`), the
    /// class and reason of its failure (none for a success) and the lease's owner. An outcome
    /// that leaves the row pending ([`Settlement::pending_again`]) wakes
    /// [`wait_for_work`](Self::wait_for_work).
    fn settle(&self, outcomes: Vec<Settlement>) -> BoxFuture<'_, StoreResult<SettleReport>>;

    /// Writes the outcomes of one batch, then claims the next: what a retrier's claim loop
    /// does between two batches. The default makes the two calls one after the other;
    /// PostgreSQL does both in one statement (one round trip and one commit instead of two).
    /// Rows that the outcomes leave due at once may or may not be among those claimed (the
    /// default's claim sees them; PostgreSQL's single statement does not).
    ///
    /// The claim's own result comes back beside the report: when the outcomes were written
    /// and the claim failed, the caller still learns what was written.
    ///
    /// # Errors
    /// The outcome write's error; nothing was claimed then either.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlq_core::store::{ClaimRequest, Settlement};
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "503".into(), vec![], None);
    /// for n in 0..4 {
    ///     let letter = NewDeadLetter::new("payment", Payload::Json(n.into()), failure.clone());
    ///     store.park(letter.retry(Duration::ZERO, 5)).await?;
    /// }
    /// let request = ClaimRequest {
    ///     event_types: vec!["payment".into()],
    ///     limit: 2,
    ///     lease: Duration::from_secs(60),
    ///     owner: "doc".into(),
    /// };
    /// let first = store.claim(request.clone()).await?;
    /// let done = first.iter().map(|c| Settlement::Succeeded { lease: c.lease }).collect();
    /// let (report, next) = store.settle_and_claim(done, request).await?;
    /// assert_eq!(report.applied, 2);
    /// assert_eq!(next?.len(), 2, "the other two rows");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn settle_and_claim(
        &self,
        outcomes: Vec<Settlement>,
        next: ClaimRequest,
    ) -> BoxFuture<'_, StoreResult<(SettleReport, StoreResult<Vec<Claimed>>)>> {
        Box::pin(async move {
            let report = self.settle(outcomes).await?;
            Ok((report, self.claim(next).await))
        })
    }

    /// Where the store's wake-ups stand now: taken before looking for work (before a claim),
    /// handed to [`wait_for_work`](Self::wait_for_work), so that work announced between the
    /// two is not missed. The default (no wake-ups) is always the same ticket.
    fn work_ticket(&self) -> WorkTicket {
        WorkTicket::default()
    }

    /// Waits until new work may be due (a park, a redrive, a retry made due) since `after`
    /// was taken ([`work_ticket`](Self::work_ticket)), or `max` elapsed. It returns at once
    /// when work was announced after the ticket, even before this call: a retrier that
    /// claimed nothing and then waits does not sleep through a park that committed in
    /// between.
    ///
    /// The default sleeps for `max`; stores with a notification channel wake earlier
    /// ([`WorkSignal`] does it in one process). The conformance kit requires a wake-up soon
    /// after a park, after a redrive, and for an announcement made between the ticket and the
    /// wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, MemoryStore, Payload, store::NewDeadLetter};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// let ticket = store.work_ticket(); // before the claim that found nothing
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// store.park(NewDeadLetter::new("payment", Payload::Json(1.into()), failure)).await?;
    /// // The park came before the wait: the wait returns at once, not after an hour.
    /// tokio::time::timeout(Duration::from_secs(10), store.wait_for_work(ticket, Duration::from_secs(3600)))
    ///     .await
    ///     .expect("woken");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn wait_for_work(&self, after: WorkTicket, max: Duration) -> BoxFuture<'_, ()> {
        let _ = after;
        Box::pin(tokio::time::sleep(max))
    }

    /// Reads one row.
    fn get(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Option<DeadLetter>>>;

    /// The largest payload this store keeps whole, in bytes
    /// ([`DEFAULT_MAX_PAYLOAD_BYTES`] unless configured).
    /// A larger one is cut and parked dead ([`DeadReason::TooLarge`]).
    /// The live path and a [`Dispatcher`](crate::adapter::Dispatcher) read it to decide "too large" and
    /// cut the event themselves before they call [`park`](Self::park), so a store must report
    /// the limit its `park` applies.
    fn max_payload_bytes(&self) -> usize {
        crate::store::DEFAULT_MAX_PAYLOAD_BYTES
    }

    /// Which circuits this store holds: the key under which this process keeps what it knows
    /// of them (`circuit_of`, and `circuit()` for the live path's store). Two store values that read and write the same circuits return
    /// equal ids; two whose circuits differ must not (see [`StoreId`]).
    ///
    /// The default is the store's address ([`StoreId::of`]): right for a store that owns its
    /// circuits and lives as long as the process, but a store created where a dropped one
    /// lived would see the dropped one's views until its circuits are first read. A store
    /// created and dropped many times keeps a [`StoreId::unique`] taken at its creation; a
    /// store on a database names the database and schema ([`StoreId::named`]), so that two
    /// values on the same one share their views. A store that wraps another and forwards its
    /// circuits forwards this too.
    ///
    /// ```
    /// use dlq_core::{store::prelude::*, MemoryStore};
    /// let store = MemoryStore::new();
    /// assert_eq!(store.store_id(), store.clone().store_id());
    /// assert_ne!(store.store_id(), MemoryStore::new().store_id());
    /// ```
    fn store_id(&self) -> StoreId {
        StoreId::of(self)
    }

    /// The claims within a cap this store makes ([`CappedClaimStore`]), or `None`: a retrier
    /// then keeps its own share of each type's `max-concurrent`, `max-rate` and ramp. A store
    /// that implements the part answers `Some(self)`.
    fn capped_claims(&self) -> Option<&dyn CappedClaimStore>;
}
