//! One claimed row: its attempts (with the immediate retries under the same claim), the
//! handler's call under its timeout and panic guard, the breaker fed, and the outcome decided.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::backoff::now;
use crate::classify::{ErrorClass, FailureInfo};
use crate::handler::{Attempt, HandlerOutcome, Invocation, Registration, Runner};
use crate::record::{Claimed, DeadReason, Settlement};
use crate::store::prelude::*;
use crate::upcast::{Upcast, upcast};

use super::{Counters, Retrier};

/// A row whose retry succeeded on its payload upcast from `from` to its handler's version:
/// the store rewrites the row in that version once the success is written.
#[derive(Debug)]
pub(super) struct Upcasted {
    pub(super) id: crate::DlqId,
    pub(super) from: u32,
    pub(super) to: u32,
    pub(super) payload: crate::Payload,
}

/// What becomes of an attempt's outcome once its type's breaker has counted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Written as it is.
    Keep,
    /// Released uncounted: a transient failure while the circuit is (now) open is the
    /// outage's, not the row's.
    Release,
}

impl<S: DeadLetterStore + ?Sized> Retrier<S> {
    /// Runs one claimed row on its payload in its handler's version (see
    /// [`Self::run_in_version`]); with the upcast payload when it succeeded on one.
    pub(super) async fn run_one(
        &self,
        mut claimed: Claimed,
        trial: bool,
        claimed_at: Instant,
        stop: &CancellationToken,
    ) -> (Settlement, Option<Upcasted>) {
        let lease = claimed.lease;
        let Ok(reg) = self.registry.get(&claimed.event_type) else {
            return (Settlement::Release { lease }, None);
        };
        let from = claimed.version;
        let stored = std::mem::replace(&mut claimed.payload, crate::Payload::Json(serde_json::Value::Null));
        claimed.payload = match upcast(reg, from, stored) {
            Upcast::Current(payload) | Upcast::Upcasted(payload) => payload,
            // Not this row's fault, nor the downstream's: a trial says nothing of the downstream.
            Upcast::Ahead(failure) => {
                if trial {
                    self.feed_breaker(&claimed.event_type, true, None).await;
                }
                return (Settlement::Dead { lease, reason: DeadReason::Undecodable, failure, counts: false }, None);
            }
            Upcast::Failed(failure) => {
                if trial {
                    self.feed_breaker(&claimed.event_type, true, None).await;
                }
                return (Settlement::Dead { lease, reason: DeadReason::Permanent, failure, counts: true }, None);
            }
        };
        let upcast = (from != reg.version).then(|| claimed.payload.clone());
        let settlement = self.run_in_version(claimed, trial, claimed_at, stop).await;
        let upcasted = match (upcast, settlement.last()) {
            (Some(payload), Settlement::Succeeded { .. }) => {
                Some(Upcasted { id: lease.id, from, to: reg.version, payload })
            }
            _ => None,
        };
        (settlement, upcasted)
    }

    /// Rewrites each row whose success on an upcast payload the store wrote (not fenced) in
    /// its handler's version, audited as an `upgrade` by this retrier. A failed rewrite is
    /// logged: the row's success stands, and its payload stays in the version it was parked in.
    pub(super) async fn record_upcasts(&self, upcasted: Vec<Upcasted>, report: &crate::record::SettleReport) {
        for Upcasted { id, from, to, payload } in upcasted {
            if report.fenced.contains(&id) {
                continue;
            }
            let reason = format!("upcast from version {from} to {to} by a retry that succeeded");
            let note = crate::store::AuditNote::new(&*self.owner, reason);
            let upgrade = crate::store::VersionUpgrade { id, from, to, payload, note };
            if let Err(error) = self.store.upgrade(upgrade).await {
                tracing::warn!(id, from, to, %error, "the row succeeded on its upcast payload, which could not be stored");
            }
        }
    }

    /// Runs one claimed row: an attempt, and while it fails transiently with its retry due at
    /// once, up to `immediate_retries` more under the same claim (see [`Self::may_retry_under_same_claim`]).
    async fn run_in_version(
        &self,
        mut claimed: Claimed,
        trial: bool,
        claimed_at: Instant,
        stop: &CancellationToken,
    ) -> Settlement {
        let lease = claimed.lease;
        let Ok(reg) = self.registry.get(&claimed.event_type) else {
            return Settlement::Release { lease };
        };
        if !trial && !self.breakers.admits(&claimed.event_type) {
            // Its circuit opened or it was paused since the claim: not run, nothing counted.
            return Settlement::Release { lease };
        }
        if claimed.payload.is_truncated() {
            // Only the first bytes are stored: no run can succeed. Stores park such rows dead;
            // this covers rows written otherwise. As a trial it says nothing of the downstream:
            // the circuit closes rather than wait for the trial's hold to expire.
            if trial {
                self.feed_breaker(&claimed.event_type, true, None).await;
            }
            let reason = "the stored payload was cut to the store's size limit; patch in the whole event".to_owned();
            let failure = FailureInfo::new(ErrorClass::Permanent, "too_large", reason, Vec::new(), None);
            return Settlement::Dead { lease, reason: DeadReason::TooLarge, failure, counts: false };
        }
        // A trial is one attempt; a type with a rate limit is paced by its claims; a handler
        // whose backoff waits is never run again at once. For the others, the payload is kept
        // for another attempt.
        let mut immediate_retries_left = if trial
            || self.breakers.rate_limited(&claimed.event_type)
            || reg.policy.backoff.next_delay(claimed.retry_count + 2) > Duration::ZERO
        {
            0
        } else {
            self.config.immediate_retries
        };
        let mut failed = Vec::new();
        loop {
            let payload = if immediate_retries_left == 0 {
                // The handler takes the payload; what `decide` reads stays.
                std::mem::replace(&mut claimed.payload, crate::Payload::Json(serde_json::Value::Null))
            } else {
                claimed.payload.clone()
            };
            match self.attempt(&claimed, reg, payload, trial).await {
                Settlement::Retry { delay, failure, .. }
                    if immediate_retries_left > 0
                        && delay.is_zero()
                        && self.may_retry_under_same_claim(&claimed, reg, claimed_at, stop) =>
                {
                    failed.push(failure);
                    claimed.retry_count += 1;
                    immediate_retries_left -= 1;
                }
                last => return Settlement::repeated(failed, last),
            }
        }
    }

    /// Whether a row whose attempt just failed with its retry due at once may run again under
    /// the same claim: the retrier is not stopping, the type's circuit admits it, and the
    /// claim keeps more than half its lease after another attempt's `timeout`.
    fn may_retry_under_same_claim(
        &self,
        claimed: &Claimed,
        reg: &Registration,
        claimed_at: Instant,
        stop: &CancellationToken,
    ) -> bool {
        let next_attempt_ends = claimed_at.elapsed().saturating_add(reg.policy.timeout.unwrap_or_default());
        !stop.is_cancelled() && self.breakers.admits(&claimed.event_type) && next_attempt_ends < self.config.lease / 2
    }

    /// One attempt of a claimed row with `payload`, its outcome decided and fed to the type's
    /// breaker.
    async fn attempt(&self, claimed: &Claimed, reg: &Registration, payload: crate::Payload, trial: bool) -> Settlement {
        let lease = claimed.lease;
        let invocation = Invocation {
            payload,
            context: Arc::clone(&self.context),
            attempt: Attempt {
                id: Some(claimed.id()),
                retry_count: claimed.retry_count,
                first_failed_at: Some(claimed.first_failed_at),
            },
            runner: Runner::Retrier,
        };
        let span = tracing::info_span!(
            "dlq.retry",
            dlq_id = claimed.id(),
            event_type = %claimed.event_type,
            attempt = claimed.retry_count + 1,
            outcome = tracing::field::Empty,
            error = tracing::field::Empty,
            trace_context = claimed.trace_context.as_deref(),
        );
        if let Some(traceparent) = &claimed.trace_context {
            crate::otel::link(&span, traceparent);
        }
        let started = std::time::Instant::now();
        let outcome = self.invoke(reg, invocation).instrument(span.clone()).await;
        crate::observe::handler_took(&claimed.event_type, started.elapsed());
        // The breaker's reason is stored and shown to operators: never an encrypted type's
        // text, never a redacted value.
        let transient = match &outcome {
            HandlerOutcome::Failed(failure) => (failure.class != ErrorClass::Permanent)
                .then(|| crate::redact::loggable(reg, &claimed.payload, &failure.reason).into_owned()),
            _ => None,
        };
        let mut settlement = decide(claimed, reg, self.config.max_retries, outcome, lease);
        if self.feed_breaker(&claimed.event_type, trial, transient.as_deref()).await == Verdict::Release {
            // The type's circuit is open: the failure is the outage's, not the row's.
            settlement = Settlement::Release { lease };
        }
        span.record("outcome", settlement.outcome_name());
        if let Some(failure) = settlement.failure() {
            span.record("error", &*crate::redact::loggable(reg, &claimed.payload, &failure.reason));
        }
        settlement
    }

    /// Feeds one outcome of `event_type` to its breaker (a trial's decides the circuit), and
    /// says whether the outcome stands: a transient failure is released uncounted when the
    /// circuit is (now) open.
    async fn feed_breaker(&self, event_type: &str, trial: bool, transient: Option<&str>) -> Verdict {
        let write = if trial {
            Some(self.breakers.after_trial(event_type, transient, &self.owner))
        } else {
            self.breakers.record(event_type, transient.is_some(), transient.unwrap_or(""), &self.owner)
        };
        if let Some(write) = write {
            self.breakers.commit(&*self.store, write).await;
        }
        if transient.is_some() && (trial || !self.breakers.admits(event_type)) {
            Verdict::Release
        } else {
            Verdict::Keep
        }
    }

    async fn invoke(&self, reg: &Registration, invocation: Invocation) -> HandlerOutcome {
        let run = AssertUnwindSafe((reg.dispatch)(invocation)).catch_unwind();
        let result = match reg.policy.timeout {
            Some(limit) => match tokio::time::timeout(limit, run).await {
                Ok(result) => result,
                Err(_) => {
                    Counters::add(&self.counters.timeouts, 1);
                    crate::observe::retry_timed_out(reg.event_type);
                    let reason = format!("attempt timed out after {limit:?}");
                    return HandlerOutcome::Failed(FailureInfo::new(
                        ErrorClass::Transient,
                        "timeout",
                        reason,
                        Vec::new(),
                        None,
                    ));
                }
            },
            None => run.await,
        };
        result.unwrap_or_else(|panic| {
            Counters::add(&self.counters.panics, 1);
            crate::observe::retry_panicked(reg.event_type);
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_owned());
            HandlerOutcome::Failed(FailureInfo::new(
                ErrorClass::Transient,
                "panic",
                format!("handler panicked: {message}"),
                Vec::new(),
                None,
            ))
        })
    }
}

/// The outcome to write for one run of a claimed row.
fn decide(
    claimed: &Claimed,
    reg: &Registration,
    max_retries_override: Option<u32>,
    outcome: HandlerOutcome,
    lease: crate::store::Lease,
) -> Settlement {
    let failure = match outcome {
        HandlerOutcome::Succeeded => return Settlement::Succeeded { lease },
        HandlerOutcome::Undecodable(failure) => {
            return Settlement::Dead { lease, reason: DeadReason::Undecodable, failure, counts: true };
        }
        HandlerOutcome::Failed(failure) => failure,
    };
    let retry_after = match failure.class {
        ErrorClass::Permanent => {
            return Settlement::Dead { lease, reason: DeadReason::Permanent, failure, counts: true };
        }
        ErrorClass::Fatal => {
            // The error text can echo the event: an encrypted type's log line names the kind
            // only, a redacted field's value is masked.
            let reason = crate::redact::loggable(reg, &claimed.payload, &failure.reason);
            tracing::error!(id = claimed.id(), kind = %failure.kind, %reason, "fatal error in a retried handler; recorded as transient");
            None
        }
        ErrorClass::Transient => failure.retry_after,
    };
    let retries = claimed.retry_count + 1;
    let max_retries = max_retries_override.unwrap_or(claimed.max_retries);
    if retries >= max_retries {
        return Settlement::Dead { lease, reason: DeadReason::RetriesExhausted, failure, counts: true };
    }
    let delay = retry_after.unwrap_or_else(|| reg.policy.backoff.next_delay(retries + 1));
    if let Some(max_age) = reg.policy.max_age {
        // Durations come from the attribute and the handler's error: saturate, never panic.
        let horizon = later(claimed.first_failed_at, max_age);
        let next = later(now(), delay);
        if next > horizon {
            return Settlement::Dead { lease, reason: DeadReason::MaxAge, failure, counts: true };
        }
    }
    Settlement::Retry { lease, delay, failure }
}

/// `at + delay`, saturating at the largest time chrono can hold.
fn later(at: chrono::DateTime<chrono::Utc>, delay: Duration) -> chrono::DateTime<chrono::Utc> {
    chrono::Duration::from_std(delay)
        .ok()
        .and_then(|d| at.checked_add_signed(d))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
}
