//! `dlq stats`: counts, top groups, growth, retriers, orphans, saturation, table health.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, DurationRound, Utc};
use serde::Serialize;

use super::Admin;
use crate::Error;
use crate::observe::unreadable_problem;
use crate::record::{FailureGroup, ListFilter, RetrierHeartbeat, Status};
use crate::store::TableHealth;
use crate::{observe::Capacity, record::CircuitState, store::Circuit};

/// Rows by status for one event type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StatusCounts {
    /// The event type.
    pub event_type: String,
    /// `PENDING` rows.
    pub pending: u64,
    /// `PROCESSING` rows.
    pub processing: u64,
    /// `SUCCEEDED` rows.
    pub succeeded: u64,
    /// `FAILED_PERMANENTLY` rows.
    pub failed_permanently: u64,
    /// `DISCARDED` rows.
    pub discarded: u64,
}

impl StatusCounts {
    fn add(&mut self, status: Status, n: u64) {
        let slot = match status {
            Status::Pending => &mut self.pending,
            Status::Processing => &mut self.processing,
            Status::Succeeded => &mut self.succeeded,
            Status::FailedPermanently => &mut self.failed_permanently,
            Status::Discarded => &mut self.discarded,
        };
        *slot += n;
    }
}

/// Rows parked recently, over windows of whole minutes: each starts at the start of a minute
/// and runs to the report, so "the last 5 minutes" covers 5 to 6 minutes and says from when.
///
/// Whole minutes let a store count them without reading the rows: PostgreSQL sums its
/// per-minute tally of parks, kept by the table's triggers, so a row counts in the minute it
/// was parked even when a purge removed it since. Other stores count the rows created in the
/// window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Growth {
    /// Parked since [`since_5m`](Self::since_5m).
    pub last_5m: u64,
    /// Parked since [`since_1h`](Self::since_1h).
    pub last_1h: u64,
    /// The start of the minute 5 minutes before the report.
    pub since_5m: DateTime<Utc>,
    /// The start of the minute an hour before the report.
    pub since_1h: DateTime<Utc>,
}

/// An event type with `PENDING` rows that no live retrier handles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Orphan {
    /// The event type.
    pub event_type: String,
    /// Its pending rows.
    pub pending: u64,
    /// The handler that would take it, when the embedding service registers one.
    pub expected_handler: Option<String>,
}

/// What `dlq stats` shows.
#[derive(Debug, Clone, Serialize)]
pub struct StatsReport {
    /// When the report was made.
    pub at: DateTime<Utc>,
    /// Rows by event type and status.
    pub counts: Vec<StatusCounts>,
    /// The largest failure groups.
    pub groups: Vec<FailureGroup>,
    /// Rows parked recently.
    pub growth: Growth,
    /// Live retriers.
    pub retriers: Vec<RetrierHeartbeat>,
    /// Pending types no live retrier handles.
    pub orphans: Vec<Orphan>,
    /// `entries / max_entries`, where the store has a limit.
    pub saturation: Option<f64>,
    /// The row limit and how full it is, where the store has one.
    pub capacity: Option<Capacity>,
    /// The events table's vacuum state (PostgreSQL).
    pub table: Option<TableHealth>,
    /// The circuits that are not plainly closed (open, half-open or paused); empty on a
    /// store without circuits.
    pub circuits: Vec<Circuit>,
    /// Sealed rows whose latest claim could not open them: the retrier that claimed them
    /// lacks their key ([`PrivacyStore::count_unreadable`](crate::store::PrivacyStore::count_unreadable));
    /// `None` where the store does not count them.
    pub sealed_unreadable: Option<u64>,
    /// Things an operator should act on, in words.
    pub warnings: Vec<String>,
}

/// Dead tuples past which the claim slows down noticeably (a warning).
const DEAD_TUPLES_WARN: u64 = 100_000;
/// A last vacuum older than this, with dead tuples, is a warning.
const VACUUM_AGE_WARN: chrono::TimeDelta = chrono::TimeDelta::hours(24);

impl Admin {
    /// The failure groups of the rows `filter` selects ([`crate::store::ReadStore::groups`]), each
    /// sample reason scrubbed of its sample row's redacted values ([`crate::redact`]).
    ///
    /// [`crate::store::ReadStore::groups`]: crate::store::ReadStore::groups
    ///
    /// # Errors
    /// The store's error.
    pub async fn groups(&self, filter: ListFilter) -> Result<Vec<FailureGroup>, Error> {
        let mut groups = self.store.groups(filter).await?;
        self.redact_groups(&mut groups).await?;
        Ok(groups)
    }

    /// Scrubs the sample reason of each group of a type with redacted fields: one read of
    /// its sample row.
    async fn redact_groups(&self, groups: &mut [FailureGroup]) -> Result<(), Error> {
        let policy = self.redaction().await?;
        for group in groups.iter_mut().filter(|g| !policy.pointers(&g.event_type).is_empty()) {
            let sample = match self.store.get(group.sample_id).await? {
                Some(letter) => {
                    let audit = self.store.audit(letter.id).await?;
                    Some(super::Detail { letter, attempts: Vec::new(), audit })
                }
                None => None,
            };
            policy.group(group, sample.as_ref());
        }
        Ok(())
    }

    /// The stats report with the `top` largest failure groups.
    ///
    /// # Errors
    /// The store's error.
    pub async fn stats(&self, top: usize) -> Result<StatsReport, Error> {
        let at = Utc::now();
        // Independent reads: asked together, so the report takes as long as the slowest.
        let store = &self.store;
        let (
            rows,
            groups,
            (since_5m, last_5m),
            (since_1h, last_1h),
            retriers,
            capacity,
            table,
            circuits,
            sealed_unreadable,
        ) = tokio::try_join!(
            store.stats(),
            store.groups(ListFilter::default().limit(top)),
            self.parked_since(at, 5),
            self.parked_since(at, 60),
            store.retriers(),
            store.capacity(),
            store.table_health(),
            async {
                match store.circuits().await {
                    Ok(read) => Ok(read.circuits.into_iter().filter(|c| !c.is_claimable()).collect()),
                    Err(Error::Unsupported { .. }) => Ok(Vec::new()),
                    Err(error) => Err(error),
                }
            },
            async {
                match store.count_unreadable().await {
                    Ok(n) => Ok(Some(n)),
                    Err(Error::Unsupported { .. }) => Ok(None),
                    Err(error) => Err(error),
                }
            },
        )?;
        let mut counts: BTreeMap<String, StatusCounts> = BTreeMap::new();
        for row in rows {
            let entry = counts
                .entry(row.event_type.clone())
                .or_insert_with(|| StatusCounts { event_type: row.event_type.clone(), ..StatusCounts::default() });
            entry.add(row.status, row.count);
        }
        let mut groups = groups;
        self.redact_groups(&mut groups).await?;
        let growth = Growth { last_5m, last_1h, since_5m, since_1h };
        let orphans = self.orphans(&counts, &retriers);
        let saturation = capacity.map(|c| c.saturation());
        let mut report = StatsReport {
            at,
            counts: counts.into_values().collect(),
            groups,
            growth,
            retriers,
            orphans,
            saturation,
            capacity,
            table,
            circuits,
            sealed_unreadable,
            warnings: Vec::new(),
        };
        report.warnings = warnings(&report);
        Ok(report)
    }

    /// The rows parked from the start of the minute `minutes` before `at` to now, as one
    /// histogram bucket of whole minutes (see [`Growth`]).
    async fn parked_since(&self, at: DateTime<Utc>, minutes: u32) -> Result<(DateTime<Utc>, u64), Error> {
        let since =
            at.duration_trunc(chrono::TimeDelta::minutes(1)).unwrap_or(at) - chrono::TimeDelta::minutes(minutes.into());
        let window = std::time::Duration::from_secs(60 * u64::from(minutes + 1));
        let buckets = self.store.created_histogram(since, window, 1).await?;
        Ok((since, buckets.iter().map(|b| b.count).sum()))
    }

    fn orphans(&self, counts: &BTreeMap<String, StatusCounts>, retriers: &[RetrierHeartbeat]) -> Vec<Orphan> {
        let handled: BTreeSet<&str> = retriers.iter().flat_map(|r| r.event_types.iter().map(String::as_str)).collect();
        counts
            .values()
            .filter(|c| c.pending > 0 && !handled.contains(c.event_type.as_str()))
            .map(|c| Orphan {
                event_type: c.event_type.clone(),
                pending: c.pending,
                expected_handler: self
                    .registry
                    .as_ref()
                    .and_then(|r| r.get(&c.event_type).ok())
                    .map(|reg| format!("{} ({})", reg.handler(), reg.site())),
            })
            .collect()
    }
}

fn warnings(report: &StatsReport) -> Vec<String> {
    let mut out = Vec::new();
    for orphan in &report.orphans {
        out.push(format!(
            "{} pending `{}` rows and no live retrier handles that type",
            orphan.pending, orphan.event_type
        ));
    }
    for c in &report.circuits {
        if c.paused {
            let by = c.paused_by.as_deref().unwrap_or("an operator");
            let why = c.pause_reason.as_deref().unwrap_or("no reason given");
            out.push(format!("`{}` is paused by {by}: {why} (dlq resume {})", c.event_type, c.event_type));
        }
        if c.state != CircuitState::Closed {
            let why = c.reason.as_deref().unwrap_or("");
            out.push(format!("`{}` circuit is {}: {why}", c.event_type, c.state));
        }
    }
    if let Some(n) = report.sealed_unreadable.filter(|n| *n > 0) {
        out.push(unreadable_problem(n));
    }
    if let Some(s) = report.saturation.filter(|s| *s >= crate::observe::SATURATION_WARNING) {
        out.push(format!("the store is {:.0}% full (max_entries)", s * 100.0));
    }
    if let Some(table) = &report.table {
        if !table.autovacuum {
            out.push("autovacuum is off for dlq_events: dead tuples from claims will slow every claim".into());
        }
        if table.dead_tuples >= DEAD_TUPLES_WARN {
            out.push(format!("dlq_events has {} dead tuples: run VACUUM dlq_events", table.dead_tuples));
        }
        let stale = table.last_vacuum.is_none_or(|t| report.at - t > VACUUM_AGE_WARN);
        if stale && table.dead_tuples > 0 {
            let age = table
                .last_vacuum
                .map_or_else(|| "never".to_owned(), |t| format!("{}h ago", (report.at - t).num_hours()));
            out.push(format!("dlq_events was last vacuumed {age} ({} dead tuples)", table.dead_tuples));
        }
    }
    out
}
