//! Which rows a read or an operator action applies to ([`ListFilter`]), and in what order
//! ([`Order`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{DeadLetter, DlqId, Status};

/// The order rows are listed in; keyset pagination ([`ListFilter::after`]) follows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// Highest id first (the default: what an operator wants to see).
    #[default]
    NewestFirst,
    /// Lowest id first (what a bulk action walks, its cursor the last id done).
    OldestFirst,
}

/// Which rows an admin read or action applies to. Empty fields match everything.
///
/// Pagination is by keyset: pass the last id of a page as [`after`](Self::after) to get the
/// next one, in [`order`](Self::order). Stores answer with an index range on the id, never an
/// `OFFSET`.
///
/// ```
/// use dlq_core::{ListFilter, Status};
/// let f = ListFilter::default().status(Status::FailedPermanently).event_type("payment").reason_contains("USD");
/// assert_eq!(f.limit, 100);
/// let next_page = f.clone().after(1_204);
/// assert_eq!(next_page.after, Some(1_204));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ListFilter {
    /// Only this status.
    pub status: Option<Status>,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Only this fingerprint.
    pub fingerprint: Option<String>,
    /// Only these ids.
    pub ids: Vec<DlqId>,
    /// Only this error kind (exact).
    pub kind: Option<String>,
    /// Only rows whose error reason contains this text (case-sensitive).
    pub reason: Option<String>,
    /// Only rows parked at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only rows parked before this time.
    pub until: Option<DateTime<Utc>>,
    /// Only rows strictly past this id in [`order`](Self::order) (keyset pagination).
    pub after: Option<DlqId>,
    /// Newest first (the default) or oldest first.
    pub order: Order,
    /// At most this many rows (100 by default) in one page of `list`. A bulk action of the
    /// admin layer (`Admin::redrive`, `Admin::discard`, a `BulkPlan`) ignores it, with `order`
    /// and `after`: it walks every matching row.
    pub limit: usize,
}

impl Default for ListFilter {
    fn default() -> Self {
        Self {
            status: None,
            event_type: None,
            fingerprint: None,
            ids: Vec::new(),
            kind: None,
            reason: None,
            since: None,
            until: None,
            after: None,
            order: Order::NewestFirst,
            limit: 100,
        }
    }
}

impl ListFilter {
    /// Only rows with `status`.
    #[must_use]
    pub fn status(mut self, status: Status) -> Self {
        self.status = Some(status);
        self
    }
    /// Only rows of `event_type`.
    #[must_use]
    pub fn event_type(mut self, event_type: &str) -> Self {
        self.event_type = Some(event_type.to_owned());
        self
    }
    /// Only rows with `fingerprint`.
    #[must_use]
    pub fn fingerprint(mut self, fingerprint: &str) -> Self {
        self.fingerprint = Some(fingerprint.to_owned());
        self
    }
    /// Only these ids.
    #[must_use]
    pub fn ids(mut self, ids: impl IntoIterator<Item = DlqId>) -> Self {
        self.ids = ids.into_iter().collect();
        self
    }
    /// Only rows whose error kind is `kind`.
    #[must_use]
    pub fn kind(mut self, kind: &str) -> Self {
        self.kind = Some(kind.to_owned());
        self
    }
    /// Only rows whose error reason contains `text`.
    #[must_use]
    pub fn reason_contains(mut self, text: &str) -> Self {
        self.reason = Some(text.to_owned());
        self
    }
    /// Only rows parked at or after `at`.
    #[must_use]
    pub const fn since(mut self, at: DateTime<Utc>) -> Self {
        self.since = Some(at);
        self
    }
    /// Only rows parked before `at`.
    #[must_use]
    pub const fn until(mut self, at: DateTime<Utc>) -> Self {
        self.until = Some(at);
        self
    }
    /// Only rows past `id` in the filter's order (the next page after a page ending at `id`).
    #[must_use]
    pub const fn after(mut self, id: DlqId) -> Self {
        self.after = Some(id);
        self
    }
    /// Lists oldest first.
    #[must_use]
    pub const fn oldest_first(mut self) -> Self {
        self.order = Order::OldestFirst;
        self
    }
    /// At most `limit` rows.
    #[must_use]
    pub const fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// The open id range `(lower, upper)` the filter's keyset leaves, for SQL
    /// (`id > lower AND id < upper`).
    ///
    /// ```
    /// use dlq_core::ListFilter;
    /// assert_eq!(ListFilter::default().after(10).id_range(), (i64::MIN, 10));
    /// assert_eq!(ListFilter::default().oldest_first().after(10).id_range(), (10, i64::MAX));
    /// ```
    pub fn id_range(&self) -> (DlqId, DlqId) {
        match (self.order, self.after) {
            (_, None) => (DlqId::MIN, DlqId::MAX),
            (Order::NewestFirst, Some(id)) => (DlqId::MIN, id),
            (Order::OldestFirst, Some(id)) => (id, DlqId::MAX),
        }
    }

    /// Whether `letter` passes the filter (the limit aside).
    pub fn matches(&self, letter: &DeadLetter) -> bool {
        let (lower, upper) = self.id_range();
        self.status.is_none_or(|s| s == letter.status)
            && self.event_type.as_ref().is_none_or(|t| *t == letter.event_type)
            && self.fingerprint.as_ref().is_none_or(|f| *f == letter.failure.fingerprint)
            && (self.ids.is_empty() || self.ids.contains(&letter.id))
            && self.kind.as_ref().is_none_or(|k| *k == letter.failure.kind)
            && self.reason.as_ref().is_none_or(|r| letter.failure.reason.contains(r.as_str()))
            && self.since.is_none_or(|t| letter.created_at >= t)
            && self.until.is_none_or(|t| letter.created_at < t)
            && letter.id > lower
            && letter.id < upper
    }
}
