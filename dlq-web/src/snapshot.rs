//! Store-wide figures (the overview's stats, the failure-group lists, the charts) kept for a
//! few seconds and refreshed in the background, so most page views ask the store nothing.
//!
//! PostgreSQL answers these from counts its triggers keep (`dlq_tallies`, a few milliseconds
//! at a million rows); SQLite and other stores aggregate over every row, so there a snapshot
//! spares most views that scan. A page shows the last snapshot when it is younger than
//! [`Options::snapshot_max_age`](crate::Options::snapshot_max_age) (charts: 5 minutes); an
//! older one is shown too, while one request refreshes it in the background
//! (stale-while-revalidate), unless it is older than three times that (the console sat
//! unviewed): then, as on the very first view, the page waits for its query. Every action the
//! console takes drops the snapshots, so its result shows on the next page view. Row lists, a
//! row's detail and one group's page are never cached: they read by index.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Failure;

/// A snapshot older than this many `max_age`s is not shown at all: the view computes anew.
const STALE_LIMIT: u32 = 3;

/// At most this many snapshots (the stats, the charts, a group list per filter) are kept.
const MAX_ENTRIES: usize = 32;

/// Snapshots by key: when each was taken, the value, and whether a refresh is under way.
#[derive(Default)]
pub(crate) struct Snapshots {
    entries: Mutex<HashMap<String, Entry>>,
}

struct Entry {
    taken: Instant,
    value: Arc<dyn std::any::Any + Send + Sync>,
    refreshing: bool,
}

impl Snapshots {
    /// The value under `key`: the snapshot when it is younger than `max_age`; else the stale
    /// snapshot while `compute` refreshes it in a background task; else (no snapshot yet)
    /// `compute`'s result, awaited. Returns the value and when it was computed.
    pub(crate) async fn get<T, F, Fut>(
        self: &Arc<Self>,
        key: String,
        max_age: Duration,
        compute: F,
    ) -> Result<(Arc<T>, Instant), Failure>
    where
        T: Send + Sync + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, Failure>> + Send + 'static,
    {
        let stale = {
            let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match entries.get_mut(&key) {
                Some(entry) => {
                    let value = Arc::clone(&entry.value).downcast::<T>().ok();
                    match value {
                        Some(value) if entry.taken.elapsed() < max_age => return Ok((value, entry.taken)),
                        // Too old to show while refreshing (the console sat unviewed): wait for
                        // fresh figures rather than show an on-call engineer stale ones.
                        _ if entry.taken.elapsed() >= max_age.saturating_mul(STALE_LIMIT) => None,
                        Some(value) if !entry.refreshing => {
                            entry.refreshing = true;
                            Some((value, entry.taken, true))
                        }
                        Some(value) => Some((value, entry.taken, false)),
                        None => None,
                    }
                }
                None => None,
            }
        };
        match stale {
            Some((value, taken, refresh)) => {
                if refresh {
                    let (snapshots, future) = (Arc::clone(self), compute());
                    tokio::spawn(async move {
                        let result = future.await;
                        snapshots.finish(key, result);
                    });
                }
                Ok((value, taken))
            }
            None => {
                let value = Arc::new(compute().await?);
                let taken = Instant::now();
                self.put(key, Arc::clone(&value) as Arc<dyn std::any::Any + Send + Sync>, taken);
                Ok((value, taken))
            }
        }
    }

    /// Stores a background refresh's result, or keeps the stale value when it failed (the next
    /// view tries again).
    fn finish<T: Send + Sync + 'static>(&self, key: String, result: Result<T, Failure>) {
        match result {
            Ok(value) => self.put(key, Arc::new(value), Instant::now()),
            Err(failure) => {
                tracing::warn!(error = %failure.message, "dlq-web: refreshing a snapshot failed; the next view tries again");
                let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(entry) = entries.get_mut(&key) {
                    entry.refreshing = false;
                }
            }
        }
    }

    fn put(&self, key: String, value: Arc<dyn std::any::Any + Send + Sync>, taken: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(&key) {
            let oldest = entries.iter().min_by_key(|(_, e)| e.taken).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                entries.remove(&oldest);
            }
        }
        entries.insert(key, Entry { taken, value, refreshing: false });
    }

    /// Drops every snapshot: an action changed the rows.
    pub(crate) fn clear(&self) {
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn fresh_stale_and_cleared() {
        let snapshots = Arc::new(Snapshots::default());
        let calls = Arc::new(AtomicU32::new(0));
        let compute = || {
            let calls = Arc::clone(&calls);
            async move { Ok::<_, Failure>(calls.fetch_add(1, Ordering::SeqCst) + 1) }
        };
        let age = Duration::from_millis(50);
        // The first view waits for the value; the next ones within max_age reuse it.
        assert_eq!(*snapshots.get("k".into(), age, compute).await.unwrap().0, 1);
        assert_eq!(*snapshots.get("k".into(), age, compute).await.unwrap().0, 1);
        // Past max_age the stale value answers at once, and a refresh runs behind it.
        tokio::time::sleep(age * 2).await;
        assert_eq!(*snapshots.get("k".into(), age, compute).await.unwrap().0, 1);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(*snapshots.get("k".into(), age, compute).await.unwrap().0, 2);
        // Past three times max_age it is not shown: the view waits for a fresh value.
        tokio::time::sleep(age * 4).await;
        assert_eq!(*snapshots.get("k".into(), age, compute).await.unwrap().0, 3);
        // An action clears it: the next view computes again.
        snapshots.clear();
        assert_eq!(*snapshots.get("k".into(), age, compute).await.unwrap().0, 4);
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }
}
