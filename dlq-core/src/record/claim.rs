//! The claim/settle cycle a retrier drives: what a claim asks for ([`ClaimRequest`],
//! [`ClaimCap`]), what it returns ([`Claimed`] under a [`Lease`]), and the outcomes written
//! back ([`Settlement`], [`SettleReport`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{DeadLetter, DeadReason, DlqId, Payload};
use crate::classify::FailureInfo;

/// The proof that a retrier holds a row: every outcome write must present the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The row.
    pub id: DlqId,
    /// The claim's fencing token.
    pub token: Uuid,
}

/// What a claim asks for.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// Only these event types.
    pub event_types: Vec<String>,
    /// At most this many rows.
    pub limit: usize,
    /// How long the lease lasts.
    pub lease: Duration,
    /// Who claims (host:pid:name), recorded as `lease_owner`.
    pub owner: String,
}

impl ClaimRequest {
    /// What the claim takes of `due` (rows of the request's event types that are due, in any
    /// order): at most `limit`, each event type an equal share of them, its oldest first by
    /// `order` (`(retry_after, id)`); a share a type cannot fill goes to the types with more,
    /// so one type's backlog never holds back the others' rows. Returned oldest first.
    ///
    /// For store implementations: `QueueStore::claim`
    /// shares its batch this way.
    ///
    /// ```
    /// use dlq_core::store::ClaimRequest;
    /// use std::time::Duration;
    ///
    /// let request = ClaimRequest {
    ///     event_types: vec!["payment".into(), "refund".into()],
    ///     limit: 2,
    ///     lease: Duration::from_secs(60),
    ///     owner: "doc".into(),
    /// };
    /// // (event type, retry_after): a payment backlog older than the one due refund.
    /// let due = vec![("payment", 3), ("payment", 1), ("refund", 9), ("payment", 2)];
    /// let taken = request.share(due, |r| r.0, |r| r.1);
    /// assert_eq!(taken, [("payment", 1), ("refund", 9)], "not payments 1 and 2");
    /// ```
    pub fn share<T, K: Ord>(
        &self,
        mut due: Vec<T>,
        event_type: impl Fn(&T) -> &str,
        order: impl Fn(&T) -> K,
    ) -> Vec<T> {
        due.sort_by_key(|r| order(r));
        // Each row's rank within its type, oldest first.
        let ranks: Vec<usize> = {
            let mut seen = std::collections::HashMap::new();
            due.iter()
                .map(|r| {
                    let rank = seen.entry(event_type(r)).or_insert(0);
                    *rank += 1;
                    *rank
                })
                .collect()
        };
        // Taken rank by rank; the sort is stable, so oldest first within a rank.
        let mut ranked: Vec<(usize, T)> = ranks.into_iter().zip(due).collect();
        ranked.sort_by_key(|(rank, _)| *rank);
        ranked.truncate(self.limit);
        let mut taken: Vec<T> = ranked.into_iter().map(|(_, r)| r).collect();
        taken.sort_by_key(|r| order(r));
        taken
    }
}

/// Limits a claim of one event type keeps across every retrier that shares the store: the
/// type's `max-concurrent` and `max-rate` (and the ramp after its circuit closes), checked
/// and recorded by the store in one atomic step, so that however many processes claim, the
/// limits hold as a whole (`CappedClaimStore::claim_capped`).
///
/// ```
/// use dlq_core::store::ClaimCap;
/// use std::time::Duration;
///
/// let cap = ClaimCap { in_flight: Some(4), starts: Some((40, Duration::from_secs(1))) };
/// // 20 wanted, 3 running, 38 started within the window: 1 more may start.
/// assert_eq!(cap.allows(20, 3, 38), 1);
/// assert_eq!(ClaimCap::default().allows(20, 3, 38), 20, "no limit");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClaimCap {
    /// At most this many rows of the type `PROCESSING` under a live lease, the new ones included.
    pub in_flight: Option<usize>,
    /// At most `.0` rows of the type claimed within any window of `.1`, the new ones included.
    pub starts: Option<(u32, Duration)>,
}

impl ClaimCap {
    /// How many of `want` rows a claim may take with `in_flight` rows of the type held under
    /// a live lease and `started` rows claimed within the window.
    #[must_use]
    pub fn allows(&self, want: usize, in_flight: usize, started: u64) -> usize {
        let mut n = want;
        if let Some(max) = self.in_flight {
            n = n.min(max.saturating_sub(in_flight));
        }
        if let Some((max, _)) = self.starts {
            let left = u64::from(max).saturating_sub(started);
            n = n.min(usize::try_from(left).unwrap_or(usize::MAX));
        }
        n
    }

    /// The window of the rate limit, when there is one.
    #[must_use]
    pub fn window(&self) -> Option<Duration> {
        self.starts.map(|(_, window)| window)
    }
}

/// A row claimed for a retry: what a retry reads of it, and the lease to present with the
/// outcome.
///
/// A claim returns only these columns, not the whole [`DeadLetter`]: a retrier claims a
/// batch between two runs of its handlers, and the error, its chain and the source metadata
/// it never reads were most of what each claim sent. The whole row is
/// `QueueStore::get(claimed.id())`.
///
/// ```
/// use dlq_core::store::Claimed;
/// use dlq_core::{DeadLetter, ErrorClass, classify::FailureInfo, Payload};
///
/// let failure = FailureInfo::new(ErrorClass::Transient, "timeout", "gateway timed out".into(), vec![], None);
/// let letter = DeadLetter::new(7, "payment", Payload::Json(serde_json::json!({"id": 1})), failure, chrono::Utc::now());
/// let token = uuid::Uuid::new_v4();
/// let claimed = Claimed::of(&letter, token);
/// assert_eq!((claimed.id(), claimed.lease.token), (7, token));
/// assert_eq!((claimed.event_type.as_str(), claimed.retry_count), ("payment", 0));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    /// The lease to present with the outcome; `lease.id` is the row's id.
    pub lease: Lease,
    /// The event type, which names the handler that retries it.
    pub event_type: String,
    /// The payload as stored.
    pub payload: Payload,
    /// The version of the event's contract the payload is written in.
    pub version: u32,
    /// Retries run so far.
    pub retry_count: u32,
    /// The retry budget stored with the row.
    pub max_retries: u32,
    /// When the row came due; a claim returns its rows in `(retry_after, id)` order.
    pub retry_after: DateTime<Utc>,
    /// When the event first failed (a handler's `max_age` counts from here).
    pub first_failed_at: DateTime<Utc>,
    /// The W3C `traceparent` of the event that failed, if it carried one.
    pub trace_context: Option<String>,
}

impl Claimed {
    /// The claimed row's id.
    #[must_use]
    pub const fn id(&self) -> DlqId {
        self.lease.id
    }

    /// The claim of `letter` under the fencing `token`: for a store that reads whole rows.
    #[must_use]
    pub fn of(letter: &DeadLetter, token: Uuid) -> Self {
        Self {
            lease: Lease { id: letter.id, token },
            event_type: letter.event_type.clone(),
            payload: letter.payload.clone(),
            version: letter.version,
            retry_count: letter.retry_count,
            max_retries: letter.max_retries,
            retry_after: letter.retry_after,
            first_failed_at: letter.first_failed_at,
            trace_context: letter.source.trace_context.clone(),
        }
    }
}

/// The outcome of a retry, written fenced by the lease token.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// The handler succeeded: `SUCCEEDED`.
    Succeeded {
        /// The claim.
        lease: Lease,
    },
    /// The handler failed transiently: back to `PENDING`, `retry_count + 1`, due after `delay`.
    Retry {
        /// The claim.
        lease: Lease,
        /// The wait, measured from the store's clock.
        delay: Duration,
        /// What went wrong.
        failure: FailureInfo,
    },
    /// Give up: `FAILED_PERMANENTLY` with `reason`.
    Dead {
        /// The claim.
        lease: Lease,
        /// Why.
        reason: DeadReason,
        /// What went wrong.
        failure: FailureInfo,
        /// Whether this attempt counts as a retry (`retry_count + 1`).
        counts: bool,
    },
    /// Not run (shutdown): back to `PENDING`, due at once, attempt not counted.
    Release {
        /// The claim.
        lease: Lease,
    },
    /// Attempts run back to back under one claim: each of `failed` failed transiently with no
    /// wait before the next (the retrier runs such a retry at once instead of writing it and
    /// claiming the row again), then `last` is the outcome of the final attempt. A store
    /// writes it as `failed.len()` `Retry` outcomes followed by `last`: each failure counts as
    /// a retry and is appended to the attempt history in order, the row keeps the latest
    /// failure, and the lease is `last`'s. Build it with [`Settlement::repeated`], which keeps
    /// it flat.
    Repeated {
        /// The failures of the earlier attempts, oldest first.
        failed: Vec<FailureInfo>,
        /// The outcome of the final attempt (never itself `Repeated`).
        last: Box<Settlement>,
    },
}

impl Settlement {
    /// `failed` attempts, then `last`: a [`Settlement::Repeated`], or `last` alone when nothing
    /// failed before it. A `last` that is itself repeated is merged, so the result is flat.
    ///
    /// ```
    /// use dlq_core::store::{Lease, Settlement};
    /// use dlq_core::{ErrorClass, classify::FailureInfo};
    ///
    /// let lease = Lease { id: 7, token: uuid::Uuid::new_v4() };
    /// let timeout = FailureInfo::new(ErrorClass::Transient, "io", "timed out".into(), vec![], None);
    /// let outcome = Settlement::repeated(vec![timeout.clone()], Settlement::Succeeded { lease });
    /// assert_eq!((outcome.lease(), outcome.outcome_name(), outcome.counted()), (lease, "succeeded", 1));
    /// assert_eq!(outcome.earlier_failures(), [timeout.clone()]);
    /// assert_eq!(outcome.last(), &Settlement::Succeeded { lease });
    /// assert_eq!(outcome.failure(), Some(&timeout), "the row keeps the latest failure");
    /// assert_eq!(Settlement::repeated(vec![], Settlement::Succeeded { lease }), Settlement::Succeeded { lease });
    /// ```
    #[must_use]
    pub fn repeated(mut failed: Vec<FailureInfo>, last: Self) -> Self {
        let last = match last {
            Self::Repeated { failed: more, last } => {
                failed.extend(more);
                *last
            }
            last => last,
        };
        if failed.is_empty() { last } else { Self::Repeated { failed, last: Box::new(last) } }
    }

    /// The outcome of the final attempt: `last` of a [`Settlement::Repeated`], else itself.
    #[must_use]
    pub fn last(&self) -> &Self {
        match self {
            Self::Repeated { last, .. } => last.last(),
            other => other,
        }
    }

    /// The failures of the attempts before the final one (empty but for
    /// [`Settlement::Repeated`]), oldest first.
    #[must_use]
    pub fn earlier_failures(&self) -> &[FailureInfo] {
        match self {
            Self::Repeated { failed, .. } => failed,
            _ => &[],
        }
    }

    /// How many retries this outcome adds to the row's `retry_count`: one per earlier failure,
    /// plus one when the final attempt counts (`Retry`, or `Dead` with `counts`).
    #[must_use]
    pub fn counted(&self) -> u32 {
        let last = match self.last() {
            Self::Retry { .. } | Self::Dead { counts: true, .. } => 1,
            _ => 0,
        };
        u32::try_from(self.earlier_failures().len()).unwrap_or(u32::MAX).saturating_add(last)
    }

    /// Whether the row is `PENDING` again after this outcome (its final attempt is a `Retry`
    /// or a `Release`): stores wake waiting retriers when they write one.
    ///
    /// ```
    /// use dlq_core::store::{Lease, Settlement};
    ///
    /// let lease = Lease { id: 7, token: uuid::Uuid::new_v4() };
    /// assert!(Settlement::Release { lease }.pending_again());
    /// assert!(!Settlement::Succeeded { lease }.pending_again());
    /// ```
    #[must_use]
    pub fn pending_again(&self) -> bool {
        matches!(self.last(), Self::Retry { .. } | Self::Release { .. })
    }

    /// The lease this outcome is fenced by.
    #[must_use]
    pub fn lease(&self) -> Lease {
        match self {
            Self::Succeeded { lease } | Self::Release { lease } => *lease,
            Self::Retry { lease, .. } | Self::Dead { lease, .. } => *lease,
            Self::Repeated { last, .. } => last.lease(),
        }
    }

    /// The failure the row keeps after this outcome, if it records one: the final attempt's,
    /// else the latest earlier failure.
    #[must_use]
    pub fn failure(&self) -> Option<&FailureInfo> {
        match self {
            Self::Retry { failure, .. } | Self::Dead { failure, .. } => Some(failure),
            Self::Repeated { failed, last } => last.failure().or(failed.last()),
            _ => None,
        }
    }

    /// The name of the final attempt's outcome in the attempt history.
    #[must_use]
    pub fn outcome_name(&self) -> &'static str {
        match self {
            Self::Succeeded { .. } => "succeeded",
            Self::Retry { .. } => "retry",
            Self::Dead { .. } => "dead",
            Self::Release { .. } => "released",
            Self::Repeated { last, .. } => last.outcome_name(),
        }
    }
}

/// What a batch of settlements did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SettleReport {
    /// Rows written.
    pub applied: u64,
    /// Rows whose lease was no longer held by the token presented: nothing written.
    pub fenced: Vec<DlqId>,
}
