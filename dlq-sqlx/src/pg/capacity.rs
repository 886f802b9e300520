//! `max_entries`: admission of parks, the overflow policies, and the saturation gauge.
//!
//! Counting every row on every park would cost a scan per batch, so each process keeps the
//! last exact count (at most a second old) plus what it parked since, and counts again when
//! that is stale or says the table is full. The limit is therefore exact for one process and
//! soft across processes: concurrent parkers elsewhere can overshoot it by their in-flight rows.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use dlq_core::store::StoreResult;
use tokio::time::Instant;

use super::{PgStore, admin};

/// What a park does when the table holds `max_entries` rows.
///
/// ```
/// use dlq_sqlx::postgres::{Overflow, PgConfig};
/// let config = PgConfig::default().max_entries(10_000, Overflow::Block);
/// assert_eq!(config.overflow, Overflow::Block);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Overflow {
    /// Refuse the park with [`dlq_core::Error::Full`].
    #[default]
    Reject,
    /// Delete the oldest finished or dead rows (`SUCCEEDED`, `DISCARDED`,
    /// `FAILED_PERMANENTLY`) to make room. `PENDING` rows are never dropped: when only they
    /// remain, the park is refused with [`dlq_core::Error::Full`].
    DropOldest,
    /// Wait for room (made by retention, a purge or an operator) until the park timeout,
    /// then refuse with [`dlq_core::Error::Full`] (also when the deadline meets a count of the
    /// rows after one that said full), or [`dlq_core::Error::Timeout`] when nothing said the
    /// table was full; either way the caller learns the event was not parked.
    Block,
}

/// How long a count is trusted.
const FRESH: Duration = Duration::from_secs(1);
/// How often a blocked park looks for room.
const BLOCK_POLL: Duration = Duration::from_millis(50);

pub(crate) struct Capacity {
    max: u64,
    policy: Overflow,
    state: Mutex<State>,
}

struct State {
    count: u64,
    counted_at: Option<Instant>,
}

impl Capacity {
    pub(crate) const fn new(max: u64, policy: Overflow) -> Self {
        Self { max, policy, state: Mutex::new(State { count: 0, counted_at: None }) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Rows in use over the limit, from the last count and this process's parks since.
    pub(crate) fn saturation(&self) -> f64 {
        let count = self.lock().count;
        if self.max == 0 {
            return if count == 0 { 0.0 } else { 1.0 };
        }
        #[allow(clippy::cast_precision_loss, reason = "a gauge: 53 bits of precision are plenty")]
        let ratio = count as f64 / self.max as f64;
        ratio
    }

    /// The limit as `dlq_core` reports it, for `entries` rows.
    pub(crate) fn report(&self, entries: u64) -> dlq_core::observe::Capacity {
        dlq_core::observe::Capacity { entries, max_entries: self.max, blocks_when_full: self.policy == Overflow::Block }
    }

    /// Records an exact count.
    pub(crate) fn observe(&self, count: u64) {
        let mut state = self.lock();
        state.count = count;
        state.counted_at = Some(Instant::now());
    }

    /// Reserves room for `n` rows if the recent count says there is some.
    fn try_reserve(&self, n: u64) -> bool {
        let mut state = self.lock();
        let fresh = state.counted_at.is_some_and(|at| at.elapsed() < FRESH);
        if fresh && state.count.saturating_add(n) <= self.max {
            state.count += n;
            return true;
        }
        false
    }

    /// Admits `n` new rows, applying the overflow policy when the table is full.
    pub(crate) async fn admit(&self, store: &PgStore, n: u64, deadline: Instant) -> StoreResult<()> {
        let timeout = store.inner.config.park_timeout;
        loop {
            if self.try_reserve(n) {
                return Ok(());
            }
            let last = self.lock().count;
            let entries = match bounded(deadline, timeout, store.entries()).await {
                // A blocked park whose count of the rows ran into the deadline: the last count
                // said full, so the park is refused as full, as it would have been a moment later.
                Err(dlq_core::Error::Timeout(_))
                    if self.policy == Overflow::Block && last.saturating_add(n) > self.max =>
                {
                    dlq_core::observe::record_overflow("block", "rejected", n);
                    return Err(dlq_core::Error::Full { entries: last, max: self.max });
                }
                counted => counted?,
            };
            self.observe(entries);
            if self.try_reserve(n) {
                return Ok(());
            }
            let full = dlq_core::Error::Full { entries, max: self.max };
            match self.policy {
                Overflow::Reject => {
                    dlq_core::observe::record_overflow("reject", "rejected", n);
                    return Err(full);
                }
                Overflow::DropOldest => {
                    let excess = entries.saturating_add(n).saturating_sub(self.max);
                    let dropped = bounded(deadline, timeout, admin::drop_oldest(store, excess)).await?;
                    if dropped == 0 {
                        dlq_core::observe::record_overflow("drop_oldest", "rejected", n);
                        return Err(full);
                    }
                    dlq_core::observe::record_overflow("drop_oldest", "dropped", dropped);
                    tracing::info!(dropped, max_entries = self.max, "dropped the oldest dead and finished rows");
                    self.observe(entries.saturating_sub(dropped));
                }
                Overflow::Block => {
                    if Instant::now() + BLOCK_POLL >= deadline {
                        dlq_core::observe::record_overflow("block", "rejected", n);
                        return Err(full);
                    }
                    dlq_core::observe::record_overflow("block", "blocked", n);
                    tokio::time::sleep(BLOCK_POLL).await;
                }
            }
        }
    }
}

async fn bounded<T>(deadline: Instant, timeout: Duration, fut: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
    tokio::time::timeout_at(deadline, fut).await.unwrap_or(Err(dlq_core::Error::Timeout(timeout)))
}
