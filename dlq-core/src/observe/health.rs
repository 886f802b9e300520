//! [`health`]: is the dead-letter pipeline working, from one look at the store.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::record::Status;
use crate::store::prelude::*;

/// The saturation at which [`health`] reports [`HealthStatus::Degraded`] and a retrier logs
/// an error (at [`SATURATION_WARNING`] it logs a warning).
pub const SATURATION_ERROR: f64 = 0.95;
/// The saturation at which a retrier logs a warning.
pub const SATURATION_WARNING: f64 = 0.8;

/// The overall verdict of [`health`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    /// Failures are parked and retried.
    Healthy,
    /// Failures are parked, but something needs attention (see [`Health::problems`]).
    Degraded,
    /// The store does not answer: failures cannot be parked.
    Down,
}

/// What [`health`] found.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Health {
    /// The verdict.
    pub status: HealthStatus,
    /// One line per problem, empty when healthy.
    pub problems: Vec<String>,
    /// `entries / max_entries` when the store has a row limit.
    pub saturation: Option<f64>,
    /// Retriers with a live heartbeat.
    pub live_retriers: usize,
    /// Event types with due `PENDING` rows that no live retrier handles.
    pub orphaned: Vec<String>,
    /// Encrypted rows whose latest claim could not open them (the retrier lacks their key,
    /// [`crate::store::PrivacyStore::count_unreadable`]); `None` where the store does not count them.
    pub sealed_unreadable: Option<u64>,
}

/// Checks the pipeline through `store`: one `stats()`, one `retriers()`, one `capacity()`
/// and one `count_unreadable()` call. [`HealthStatus::Down`] when the store does not answer;
/// [`HealthStatus::Degraded`] when it is [`SATURATION_ERROR`] full (or full with a park policy
/// that blocks), when due rows wait for an event type no live retrier handles, or when
/// encrypted rows are left claimed by retriers that lack their key; healthy otherwise.
///
/// ```
/// use dlq_core::{observe::health, observe::HealthStatus, MemoryStore};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let report = health(&MemoryStore::new()).await;
/// assert_eq!(report.status, HealthStatus::Healthy);
/// assert!(report.problems.is_empty());
/// # });
/// ```
pub async fn health(store: &(impl DeadLetterStore + ?Sized)) -> Health {
    let mut problems = Vec::new();
    let down = |problems: &mut Vec<String>, what: &str, error: crate::Error| {
        problems.push(format!("the dead-letter store does not answer ({what}): {error}"));
    };
    let stats = store.stats().await.map_err(|e| down(&mut problems, "stats", e)).ok();
    let retriers = store.retriers().await.map_err(|e| down(&mut problems, "retriers", e)).ok();
    let capacity = store.capacity().await.map_err(|e| down(&mut problems, "capacity", e)).ok().flatten();
    let (Some(stats), Some(retriers)) = (stats, retriers) else {
        return Health {
            status: HealthStatus::Down,
            problems,
            saturation: None,
            live_retriers: 0,
            orphaned: vec![],
            sealed_unreadable: None,
        };
    };
    let handled: BTreeSet<&str> = retriers.iter().flat_map(|r| r.event_types.iter().map(String::as_str)).collect();
    let orphaned: Vec<String> = stats
        .iter()
        .filter(|s| s.status == Status::Pending && s.oldest_due.is_some() && !handled.contains(s.event_type.as_str()))
        .map(|s| s.event_type.clone())
        .collect();
    for event_type in &orphaned {
        problems.push(format!("due `{event_type}` rows wait and no live retrier handles `{event_type}`"));
    }
    let saturation = capacity.map(|c| c.saturation());
    if let Some(c) = capacity
        && (c.saturation() >= SATURATION_ERROR || (c.blocks_when_full && c.entries >= c.max_entries))
    {
        let blocked = if c.blocks_when_full { ": parks wait for room" } else { "" };
        problems.push(format!("the store holds {} of its {} rows{blocked}", c.entries, c.max_entries));
    }
    let sealed_unreadable = match store.count_unreadable().await {
        Ok(n) => Some(n),
        Err(crate::Error::Unsupported { .. }) => None,
        Err(error) => {
            down(&mut problems, "unreadable rows", error);
            None
        }
    };
    if let Some(n) = sealed_unreadable.filter(|n| *n > 0) {
        problems.push(unreadable_problem(n));
    }
    let status = if problems.is_empty() { HealthStatus::Healthy } else { HealthStatus::Degraded };
    Health { status, problems, saturation, live_retriers: retriers.len(), orphaned, sealed_unreadable }
}

/// What `dlq stats` and health say of `n` sealed rows the retriers could not open.
pub(crate) fn unreadable_problem(n: u64) -> String {
    format!(
        "{n} encrypted row{} left claimed: the retrier that claimed {} lacks the key (`dlq show ID` names it; load it into a retrier's DLQ_KEYS)",
        if n == 1 { "" } else { "s" },
        if n == 1 { "it" } else { "them" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        ErrorClass, MemoryStore, Payload, admin::RetrierHeartbeat, classify::FailureInfo, store::NewDeadLetter,
    };
    use std::time::Duration;

    #[tokio::test]
    async fn due_rows_without_a_live_retrier_degrade() {
        let store = MemoryStore::new();
        let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
        store.park(NewDeadLetter::new("payment", Payload::Json(1.into()), failure)).await.unwrap();
        let report = health(&store).await;
        assert_eq!((report.status, report.orphaned.as_slice()), (HealthStatus::Degraded, &["payment".to_owned()][..]));
        assert!(report.problems[0].contains("no live retrier handles `payment`"), "{report:?}");

        let beat = RetrierHeartbeat::new("r1", ["payment"], false);
        store.heartbeat(&beat, Duration::from_secs(30)).await.unwrap();
        let report = health(&store).await;
        assert_eq!((report.status, report.live_retriers), (HealthStatus::Healthy, 1));
    }

    #[test]
    fn saturation_thresholds() {
        let c = |entries| crate::record::Capacity { entries, max_entries: 100, blocks_when_full: false };
        assert!(c(94).saturation() < SATURATION_ERROR && c(95).saturation() >= SATURATION_ERROR);
        assert!(c(80).saturation() >= SATURATION_WARNING);
    }
}
