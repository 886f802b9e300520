//! The reads of a store: rows, their history, counts and groups, for operators.

use super::*;

/// What operators read: pages of rows, their attempts and audit log, counts, the stats and
/// failure groups, and the health of the table. Nothing here writes.
///
/// ```
/// use dlq_core::store::{NewDeadLetter, prelude::*};
/// use dlq_core::{ErrorClass, ListFilter, MemoryStore, Payload, classify::FailureInfo};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
/// let id = store.park(NewDeadLetter::new("payment", Payload::Json(1.into()), failure)).await?.id;
/// assert_eq!(store.list(ListFilter::default()).await?[0].id, id);
/// assert_eq!(store.attempts(id).await?.len(), 1, "the failure that parked it");
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
pub trait ReadStore: Send + Sync + 'static {
    /// Lists the rows [`filter.matches`](ListFilter::matches) (every field of the filter, the
    /// keyset `after` included), in `filter.order` (by id: newest first by default), at most
    /// `filter.limit`.
    fn list(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>>;

    /// Counts rows by event type and status: one row per pair that has rows, ordered by event
    /// type, then status in lifecycle order ([`Status`]'s `Ord`), with
    /// [`oldest_due`](StatsRow::oldest_due) for `PENDING`.
    fn stats(&self) -> BoxFuture<'_, StoreResult<Vec<StatsRow>>>;

    /// Groups the `PENDING` and `FAILED_PERMANENTLY` rows that `filter` matches by event type
    /// and fingerprint, largest group first, at most `filter.limit` groups; each group's
    /// sample (id, reason) and kind are its newest row's.
    fn groups(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<Vec<FailureGroup>>>;

    /// The attempt history of one row, oldest first.
    fn attempts(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AttemptRecord>>>;

    /// The audit log of one row, oldest first.
    fn audit(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Vec<AuditEntry>>>;

    /// For store implementers: one audit entry by its id (what `Admin::undo` reads).
    ///
    fn audit_entry(&self, id: i64) -> BoxFuture<'_, StoreResult<Option<AuditEntry>>>;

    /// Counts the rows matching `filter`, at most `filter.limit` (a bounded count: growth over
    /// a window, a dry run's size).
    fn count(&self, filter: ListFilter) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(async move { Ok(self.list(filter).await?.len() as u64) })
    }

    /// Counts the rows [`purge`](OperatorStore::purge) would delete now (what `dlq purge` shows before
    /// it asks). The default pages through the `SUCCEEDED` and `DISCARDED` rows parked
    /// before the cutoff; the SQL stores count in one statement.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// store.park(NewDeadLetter::new("payment", Payload::Json(1.into()), failure)).await?;
    /// assert_eq!(store.count_purgeable(Duration::ZERO).await?, 0, "a pending row is never purged");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn count_purgeable(&self, older_than: Duration) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(async move {
            let cutoff = chrono::Duration::from_std(older_than)
                .ok()
                .and_then(|age| chrono::Utc::now().checked_sub_signed(age))
                .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
            let mut total = 0;
            for status in [Status::Succeeded, Status::Discarded] {
                let mut after = None;
                loop {
                    // A row last updated before the cutoff was parked before it too.
                    let mut page = ListFilter::default().status(status).oldest_first().limit(1_000);
                    page.until = Some(cutoff);
                    page.after = after;
                    let rows = self.list(page).await?;
                    total += rows.iter().filter(|r| r.updated_at < cutoff).count() as u64;
                    match rows.last() {
                        Some(last) if rows.len() == 1_000 => after = Some(last.id),
                        _ => break,
                    }
                }
            }
            Ok(total)
        })
    }

    /// Rows created per event type in `buckets` consecutive buckets of `step` from `since`
    /// (the console's charts): one entry per type and bucket that has rows. The default counts
    /// each bucket of each type with [`count`](Self::count); the SQL stores answer with one
    /// grouped query over the window's rows. PostgreSQL answers windows of whole hours
    /// that start on the hour (within the last 30 days) from its hourly count of parks, kept
    /// by the table's triggers: there a row counts in the hour it was parked even after a
    /// purge removed it.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
    /// use std::time::Duration;
    ///
    /// let store = MemoryStore::new();
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// store.park(NewDeadLetter::new("payment", Payload::from_bytes(b"{}"), failure)).await?;
    /// // Eight buckets of 15 minutes from 50 minutes ago: the row created now is in bucket 3.
    /// let since = chrono::Utc::now() - chrono::TimeDelta::minutes(50);
    /// let buckets = store.created_histogram(since, Duration::from_secs(900), 8).await?;
    /// assert_eq!((buckets.len(), buckets[0].bucket, buckets[0].count), (1, 3, 1));
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    fn created_histogram(
        &self,
        since: chrono::DateTime<chrono::Utc>,
        step: Duration,
        buckets: u32,
    ) -> BoxFuture<'_, StoreResult<Vec<HistogramBucket>>> {
        Box::pin(async move {
            let step = histogram_step(step)?;
            let mut types: Vec<String> = self.stats().await?.into_iter().map(|row| row.event_type).collect();
            types.sort();
            types.dedup();
            let mut found = Vec::new();
            for event_type in types {
                for bucket in 0..buckets {
                    let from = since + step * i32::try_from(bucket).unwrap_or(i32::MAX);
                    let filter =
                        ListFilter::default().event_type(&event_type).since(from).until(from + step).limit(usize::MAX);
                    let count = self.count(filter).await?;
                    if count > 0 {
                        found.push(HistogramBucket { event_type: event_type.clone(), bucket, count });
                    }
                }
            }
            Ok(found)
        })
    }

    /// The vacuum state of the events table, for stores that have one (PostgreSQL): dead
    /// tuples slow every claim until a vacuum removes them. The default knows nothing.
    fn table_health(&self) -> BoxFuture<'_, StoreResult<Option<TableHealth>>> {
        Box::pin(async { Ok(None) })
    }

    /// How full the store is, when it has a row limit (`None` otherwise, the default).
    /// `health()` and the retriers' saturation gauge read it; a store may
    /// count its rows to answer, so it is not called per park.
    fn capacity(&self) -> BoxFuture<'_, StoreResult<Option<crate::record::Capacity>>> {
        Box::pin(async { Ok(None) })
    }
}
