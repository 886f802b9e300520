//! The retrier's pipeline. Every batch goes through these stages in this order, and so does
//! this file:
//!
//! 1. **claim**: the free types in one claim (or the rows the previous batch's write claimed
//!    for it), then each limited type within its cap, then the trial of each open circuit;
//! 2. **open**: sealed payloads opened; a row this retrier cannot open is marked and left;
//! 3. **upcast**: each row becomes a [`Row`], its registration looked up once, and its payload
//!    is brought to its handler's version;
//! 4. **run**: its handler called under its timeout and a panic guard, and called again at
//!    once while it fails transiently and the claim allows (`immediate-retries`);
//! 5. **decide**: each attempt's outcome becomes a [`Settlement`], the type's breaker counts
//!    it (and releases it when the circuit is open), an encrypted type's failure texts are
//!    sealed;
//! 6. **settle**: the outcomes written, each fenced by its lease (with the next batch's claim
//!    when the loop chains), then the upcast payloads stored and every row counted.
//!
//! Around it, not in it: the breakers (`breakers`) plan each claim and count each outcome, and
//! hold the per-type pacing; heartbeats, purge and store upkeep run beside the claim loops
//! (`run`).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use futures_util::stream::{self, StreamExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::Error;
use crate::backoff::now;
use crate::classify::{ErrorClass, FailureInfo};
use crate::handler::{Attempt, HandlerOutcome, Invocation, Registration, Runner};
use crate::record::{ClaimCap, ClaimRequest, Claimed, DeadReason, DlqId, Lease, Payload, SettleReport, Settlement};
use crate::redact::LogText;
use crate::sealed::{self, SealError};
use crate::store::{Circuit, prelude::*};
use crate::upcast::{Upcast, upcast};

use super::sealed::seal_failures;
use super::{Counters, Retrier};

/// A batch's rows claimed so far and the plan they were claimed under (its limited types and
/// trials are claimed when the batch starts): claimed fresh, or by the write of the previous
/// batch's outcomes, for the batch after it.
pub(super) struct ClaimedBatch {
    plan: super::breakers::Plan,
    claimed: Vec<Claimed>,
    /// When the claim was asked for: the leases run from about then.
    at: Instant,
}

/// One claimed row from the upcast on: what the stages after it read, built once, with the
/// one registry lookup the row gets. Its payload travels beside it, from stage to stage.
struct Row<'r> {
    lease: Lease,
    event_type: String,
    retry_count: u32,
    max_retries: u32,
    first_failed_at: DateTime<Utc>,
    trace_context: Option<String>,
    reg: &'r Registration,
    /// The row is its circuit's trial: one attempt, whose outcome decides the circuit.
    trial: bool,
}

/// A row whose retry succeeded on its payload upcast from `from` to its handler's version:
/// the store rewrites the row in that version once the success is written.
#[derive(Debug)]
struct Upcasted {
    id: DlqId,
    from: u32,
    to: u32,
    payload: Payload,
}

/// What the metrics need of each claimed row once its outcome is known: its event type and
/// when it first failed.
type RowsForMetrics = HashMap<DlqId, (String, DateTime<Utc>)>;

/// How to count one row's outcome: the row, the stats counter of its final outcome, that
/// outcome's name, and how many failed attempts ran before it under the same claim.
type OutcomeKind<'a> = (DlqId, &'a AtomicU64, &'static str, usize);

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
    /// One batch through every stage: the rows in `next` (claimed when the previous batch's
    /// outcomes were written) or a fresh claim, then the limited types' claims and the trials;
    /// runs them and writes their outcomes. With `chain`, that write also claims the following
    /// batch into `next`, unless the retrier is stopping.
    pub(super) async fn run_batch_once(
        &self,
        stop: &CancellationToken,
        next: &mut Option<ClaimedBatch>,
        chain: bool,
    ) -> Result<usize, Error> {
        if stop.is_cancelled() || self.registry.is_empty() {
            if let Some(next) = next.take() {
                self.give_back(next).await;
            }
            return Ok(0);
        }
        // 1. claim
        let ClaimedBatch { plan, mut claimed, at: claimed_at } = match next.take() {
            Some(batch) => batch,
            None => self.claim_free_types().await?,
        };
        // Once rows are claimed, a failing claim of another type must not strand them: it is
        // counted and logged (in `claim`) and the batch goes on.
        let limited = self.claim_limited_types(plan.limited, &mut claimed).await;
        let trials = self.claim_trials(plan.trials, &mut claimed).await;
        // 2. open
        let claimed = self.open(claimed).await;
        let n = claimed.len();
        if n == 0 {
            return Ok(0);
        }
        Counters::add(&self.counters.claimed, n as u64);
        let rows: RowsForMetrics =
            claimed.iter().map(|c| (c.id(), (c.event_type.clone(), c.first_failed_at))).collect();
        // 3. to 5., each row on its own
        let (outcomes, upcasted) = self.run_rows(claimed, &trials, claimed_at, stop).await;
        limited.iter().for_each(|(t, n)| self.breakers.finished(t, *n));
        // 6. settle
        let kinds: Vec<OutcomeKind<'_>> = outcomes
            .iter()
            .map(|o| (o.lease().id, self.counter_for(o.last()), o.outcome_name(), o.earlier_failures().len()))
            .collect();
        let report = self.write_outcomes(outcomes, chain && !stop.is_cancelled(), next, &rows).await?;
        self.record_upcasts(upcasted, &report).await;
        self.count_outcomes(kinds, &report, &rows);
        Ok(n)
    }

    // ---- 1. claim ------------------------------------------------------------------------

    /// A fresh batch: the plan, and one claim of its free types (its limited types and
    /// trials are claimed when the batch starts, as for a batch claimed ahead). A failed claim
    /// gives back what the plan reserved.
    async fn claim_free_types(&self) -> Result<ClaimedBatch, Error> {
        let at = Instant::now();
        let plan = self.plan().await;
        let mut claimed = Vec::new();
        if !plan.free.is_empty() {
            claimed = match self.claim(plan.free.clone(), self.config.batch_size.max(1), None).await {
                Ok(rows) => rows,
                Err(error) => {
                    self.unreserve(&plan);
                    return Err(error);
                }
            };
        }
        Ok(ClaimedBatch { plan, claimed, at })
    }

    /// Claims each limited type on its own, within what the plan reserved for it (and its cap
    /// across retriers), into `claimed`; gives back the reservation it did not use. Returns
    /// how many rows of each type it claimed, for the breakers once they have run. A failed
    /// claim counts as none.
    async fn claim_limited_types(
        &self,
        limited: Vec<(String, usize, Option<ClaimCap>)>,
        claimed: &mut Vec<Claimed>,
    ) -> Vec<(String, usize)> {
        let mut counts = Vec::new();
        for (event_type, reserved, cap) in limited {
            let got = self.claim(vec![event_type.clone()], reserved, cap).await.unwrap_or_default();
            self.breakers.unreserve(&event_type, reserved - got.len());
            counts.push((event_type, got.len()));
            claimed.extend(got);
        }
        counts
    }

    /// Takes the trial of each due circuit and claims its row into `claimed`. Returns the
    /// ids of the trial rows.
    async fn claim_trials(&self, circuits: Vec<Circuit>, claimed: &mut Vec<Claimed>) -> HashSet<DlqId> {
        let mut trials = HashSet::new();
        for circuit in circuits {
            if let Ok(Some(trial)) = self.take_trial(&circuit).await {
                trials.insert(trial.id());
                claimed.push(trial);
            }
        }
        trials
    }

    /// Takes the trial of an open circuit (compare-and-set: one retrier wins) and claims its
    /// one row; with no row due, closes the circuit again.
    async fn take_trial(&self, circuit: &Circuit) -> Result<Option<Claimed>, Error> {
        let t = &circuit.event_type;
        if !self.breakers.commit(&*self.store, self.breakers.trial(circuit, &self.owner)).await {
            return Ok(None);
        }
        let claimed = self.claim(vec![t.clone()], 1, None).await?.pop();
        if claimed.is_none() {
            let mut close = self.breakers.after_trial(t, None, &self.owner);
            close.reason = "no due row to try: closed".into();
            self.breakers.commit(&*self.store, close).await;
        }
        Ok(claimed)
    }

    /// One claim of `event_types`, at most `limit` rows.
    async fn claim(
        &self,
        event_types: Vec<String>,
        limit: usize,
        cap: Option<ClaimCap>,
    ) -> Result<Vec<Claimed>, Error> {
        let request = self.request(event_types, limit);
        // A limited type's claim keeps its cap across every retrier when the store can.
        let claim = match (cap, self.store.capped_claims()) {
            (Some(cap), Some(capped)) => capped.claim_capped(request, cap),
            _ => self.store.claim(request),
        };
        self.timed(limit, claim, |c| c.as_ref().ok().map(Vec::len)).await.inspect_err(|e| self.store_error(e))
    }

    /// A claim of at most `limit` rows of `event_types`, leased to this retrier.
    fn request(&self, event_types: Vec<String>, limit: usize) -> ClaimRequest {
        ClaimRequest { event_types, limit, lease: self.config.lease, owner: self.owner.to_string() }
    }

    /// Runs a store call that claims (alone, or with a batch's outcomes) under a `dlq.claim`
    /// span; when `claimed` finds how many rows it claimed, records its time and that count.
    async fn timed<T>(
        &self,
        limit: usize,
        call: impl Future<Output = T>,
        claimed: impl FnOnce(&T) -> Option<usize>,
    ) -> T {
        let span = tracing::debug_span!("dlq.claim", batch_size = limit, claimed = tracing::field::Empty);
        let started = std::time::Instant::now();
        let out = call.instrument(span.clone()).await;
        if let Some(n) = claimed(&out) {
            crate::observe::claim_took(started.elapsed());
            span.record("claimed", n);
        }
        out
    }

    /// The claim plan for the next batch, circuits refreshed from the store first.
    async fn plan(&self) -> super::breakers::Plan {
        self.breakers.refresh(&*self.store).await;
        self.breakers.plan(self.registry.event_types(), self.config.batch_size.max(1))
    }

    /// Gives back what a plan reserved for its limited types and did not claim.
    fn unreserve(&self, plan: &super::breakers::Plan) {
        plan.limited.iter().for_each(|(t, reserved, _)| self.breakers.unreserve(t, *reserved));
    }

    // ---- 2. open -------------------------------------------------------------------------

    /// The claimed rows with their payloads opened. A row this retrier cannot open (its key
    /// is not in the ring, or the key does not authenticate it) is left out: it is not run
    /// and nothing is counted against it; it stays claimed until its lease expires, when any
    /// retrier (one holding the key) may claim it again. Each is logged with its key id and
    /// counted in [`RetrierStats::sealed_unreadable`](super::RetrierStats::sealed_unreadable).
    ///
    /// The store marks them under this claim ([`PrivacyStore::mark_unreadable`]), so
    /// `dlq stats` and health count them from any process.
    async fn open(&self, claimed: Vec<Claimed>) -> Vec<Claimed> {
        if !claimed.iter().any(|c| sealed::sealed_key(&c.payload).is_some()) {
            return claimed;
        }
        let ring = self.key_ring();
        let mut unreadable = Vec::new();
        let mut opened = Vec::with_capacity(claimed.len());
        for row in claimed {
            let Some(key) = sealed::sealed_key(&row.payload).map(str::to_owned) else {
                opened.push(row);
                continue;
            };
            let result = match ring.as_deref() {
                Some(ring) => sealed::open_payload(ring, &row.event_type, row.payload),
                None => Err(SealError::NoKeyProvider { hint: "this retrier has no key ring".into() }),
            };
            match result {
                Ok(payload) => opened.push(Claimed { payload, ..row }),
                Err(error) => {
                    unreadable.push(row.lease);
                    Counters::add(&self.counters.sealed_unreadable, 1);
                    crate::observe::sealed_unreadable(&row.event_type);
                    tracing::error!(
                        event_type = %row.event_type,
                        dlq_id = row.lease.id,
                        key = %key,
                        %error,
                        "sealed row not run: this retrier cannot open it; it is left, uncounted, for a retrier that holds the key"
                    );
                }
            }
        }
        if !unreadable.is_empty()
            && let Err(error) = self.store.mark_unreadable(unreadable).await
        {
            tracing::warn!(%error, "could not mark the unreadable sealed rows in the store: `dlq stats` does not count them");
        }
        opened
    }

    // ---- 3. to 5., each row --------------------------------------------------------------

    /// Runs every claimed row (claimed at `claimed_at`), at most `concurrency` at once; on
    /// shutdown, waits out the grace period and releases the rest.
    async fn run_rows(
        &self,
        claimed: Vec<Claimed>,
        trials: &HashSet<DlqId>,
        claimed_at: Instant,
        stop: &CancellationToken,
    ) -> (Vec<Settlement>, Vec<Upcasted>) {
        let leases: Vec<_> = claimed.iter().map(|c| c.lease).collect();
        let mut upcasted = Vec::new();
        let mut outcomes: Vec<Option<Settlement>> = vec![None; claimed.len()];
        let runs = stream::iter(claimed.into_iter().enumerate())
            .map(|(i, c)| {
                let trial = trials.contains(&c.id());
                self.run_row(c, trial, claimed_at, stop).map(move |s| (i, s))
            })
            .buffer_unordered(self.config.concurrency.max(1));
        let mut runs = std::pin::pin!(runs);
        let grace = async {
            stop.cancelled().await;
            tokio::time::sleep(self.config.shutdown_grace).await;
        };
        let mut grace = std::pin::pin!(grace);
        loop {
            tokio::select! {
                next = runs.next() => match next {
                    Some((i, (settlement, upcast))) => {
                        outcomes[i] = Some(settlement);
                        upcasted.extend(upcast);
                    }
                    None => break,
                },
                () = &mut grace => break,
            }
        }
        let outcomes =
            outcomes.into_iter().zip(leases).map(|(o, lease)| o.unwrap_or(Settlement::Release { lease })).collect();
        (outcomes, upcasted)
    }

    /// One claimed row through the upcast, its run and the decision of its outcome, sealed
    /// for an encrypted type; with the upcast payload when it succeeded on one.
    async fn run_row(
        &self,
        claimed: Claimed,
        trial: bool,
        claimed_at: Instant,
        stop: &CancellationToken,
    ) -> (Settlement, Option<Upcasted>) {
        let Claimed {
            lease,
            event_type,
            payload,
            version,
            retry_count,
            max_retries,
            first_failed_at,
            trace_context,
            ..
        } = claimed;
        // A type no longer handled here (the registry changed under a running claim loop).
        let Ok(reg) = self.registry.get(&event_type) else {
            return (Settlement::Release { lease }, None);
        };
        let row = Row { lease, event_type, retry_count, max_retries, first_failed_at, trace_context, reg, trial };
        // 3. upcast
        let payload = match self.upcast(&row, version, payload).await {
            Ok(payload) => payload,
            Err(dead) => return (self.seal(&row, dead), None),
        };
        let upcast = (version != reg.version).then(|| payload.clone());
        // 4. run, and 5. decide, attempt by attempt
        let settlement = self.run(&row, payload, claimed_at, stop).await;
        let upcasted = match (upcast, settlement.last()) {
            (Some(payload), Settlement::Succeeded { .. }) => {
                Some(Upcasted { id: lease.id, from: version, to: reg.version, payload })
            }
            _ => None,
        };
        (self.seal(&row, settlement), upcasted)
    }

    /// The payload, stored in `version`, in its handler's version; else the row's dead
    /// outcome (a version ahead of the handler's, or an upcaster that failed). As a trial it
    /// says nothing of the downstream: the circuit closes rather than wait out the trial.
    async fn upcast(&self, row: &Row<'_>, version: u32, payload: Payload) -> Result<Payload, Settlement> {
        let lease = row.lease;
        let dead = match upcast(row.reg, version, payload) {
            Upcast::Current(payload) | Upcast::Upcasted(payload) => return Ok(payload),
            // Not this row's fault, nor the downstream's.
            Upcast::Ahead(failure) => {
                Settlement::Dead { lease, reason: DeadReason::Undecodable, failure, counts: false }
            }
            Upcast::Failed(failure) => Settlement::Dead { lease, reason: DeadReason::Permanent, failure, counts: true },
        };
        if row.trial {
            self.feed_breaker(&row.event_type, true, None).await;
        }
        Err(dead)
    }

    /// Runs one row on `payload` (in its handler's version): an attempt, and while it fails
    /// transiently with its retry due at once, up to `immediate_retries` more under the same
    /// claim (see [`Self::may_retry_under_same_claim`]).
    async fn run(&self, row: &Row<'_>, payload: Payload, claimed_at: Instant, stop: &CancellationToken) -> Settlement {
        let lease = row.lease;
        if !row.trial && !self.breakers.admits(&row.event_type) {
            // Its circuit opened or it was paused since the claim: not run, nothing counted.
            return Settlement::Release { lease };
        }
        if claimed_at.elapsed() >= self.config.lease {
            // The claim ran out before the row's turn came (a slow claim of the batch's other
            // types, a wait behind `concurrency`): another retrier may be running it now.
            return Settlement::Release { lease };
        }
        if payload.is_truncated() {
            // Only the first bytes are stored: no run can succeed. Stores park such rows dead;
            // this covers rows written otherwise. As a trial it says nothing of the downstream:
            // the circuit closes rather than wait for the trial's hold to expire.
            if row.trial {
                self.feed_breaker(&row.event_type, true, None).await;
            }
            let reason = "the stored payload was cut to the store's size limit; patch in the whole event".to_owned();
            let failure = FailureInfo::new(ErrorClass::Permanent, "too_large", reason, Vec::new(), None);
            return Settlement::Dead { lease, reason: DeadReason::TooLarge, failure, counts: false };
        }
        // What failure texts may say in logs and circuit reasons, read from the event before a
        // handler takes it.
        let log = LogText::of(row.reg, &payload);
        // A trial is one attempt; a type with a rate limit is paced by its claims; a handler
        // whose backoff waits is never run again at once.
        let mut retry_count = row.retry_count;
        let mut immediate_retries_left = if row.trial
            || self.breakers.rate_limited(&row.event_type)
            || row.reg.policy.backoff.next_delay(retry_count + 2) > Duration::ZERO
        {
            0
        } else {
            self.config.immediate_retries
        };
        let mut failed = Vec::new();
        loop {
            if immediate_retries_left == 0 {
                // The last attempt under this claim takes the payload; those before it, a copy.
                let last = self.attempt(row, retry_count, payload, &log).await;
                return Settlement::repeated(failed, last);
            }
            match self.attempt(row, retry_count, payload.clone(), &log).await {
                Settlement::Retry { delay, failure, .. }
                    if delay.is_zero() && self.may_retry_under_same_claim(row, claimed_at, stop) =>
                {
                    failed.push(failure);
                    retry_count += 1;
                    immediate_retries_left -= 1;
                }
                last => return Settlement::repeated(failed, last),
            }
        }
    }

    /// Whether a row whose attempt just failed with its retry due at once may run again under
    /// the same claim: the retrier is not stopping, the type's circuit admits it, and the
    /// claim keeps more than half its lease after another attempt's `timeout`.
    fn may_retry_under_same_claim(&self, row: &Row<'_>, claimed_at: Instant, stop: &CancellationToken) -> bool {
        let next_attempt_ends = claimed_at.elapsed().saturating_add(row.reg.policy.timeout.unwrap_or_default());
        !stop.is_cancelled() && self.breakers.admits(&row.event_type) && next_attempt_ends < self.config.lease / 2
    }

    /// One attempt (after `retry_count` retries) of a row with `payload`: the handler's call,
    /// its outcome decided and fed to the type's breaker.
    async fn attempt(&self, row: &Row<'_>, retry_count: u32, payload: Payload, log: &LogText) -> Settlement {
        let lease = row.lease;
        let invocation = Invocation {
            payload,
            context: Arc::clone(&self.context),
            attempt: Attempt { id: Some(lease.id), retry_count, first_failed_at: Some(row.first_failed_at) },
            runner: Runner::Retrier,
        };
        let span = tracing::info_span!(
            "dlq.retry",
            dlq_id = lease.id,
            event_type = %row.event_type,
            attempt = retry_count + 1,
            outcome = tracing::field::Empty,
            error = tracing::field::Empty,
            trace_context = row.trace_context.as_deref(),
        );
        if let Some(traceparent) = &row.trace_context {
            crate::otel::link(&span, traceparent);
        }
        let started = std::time::Instant::now();
        let outcome = self.invoke(row.reg, invocation).instrument(span.clone()).await;
        crate::observe::handler_took(&row.event_type, started.elapsed());
        // The breaker's reason is stored and shown to operators: never an encrypted type's
        // text, never a redacted value.
        let transient = match &outcome {
            HandlerOutcome::Failed(failure) => {
                (failure.class != ErrorClass::Permanent).then(|| log.say(&failure.reason).into_owned())
            }
            _ => None,
        };
        // 5. decide
        let mut settlement = decide(row, retry_count, self.config.max_retries, outcome, log);
        if self.feed_breaker(&row.event_type, row.trial, transient.as_deref()).await == Verdict::Release {
            // The type's circuit is open: the failure is the outage's, not the row's.
            settlement = Settlement::Release { lease };
        }
        span.record("outcome", settlement.outcome_name());
        if let Some(failure) = settlement.failure() {
            span.record("error", &*log.say(&failure.reason));
        }
        settlement
    }

    /// The handler's call, under its timeout and a panic guard: a timeout and a panic are
    /// transient failures.
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

    /// `outcome` with its failures sealed when the row's type is encrypted: the text a
    /// handler's error echoes never reaches the store in clear.
    fn seal(&self, row: &Row<'_>, outcome: Settlement) -> Settlement {
        if row.reg.sealing.is_none() {
            return outcome;
        }
        seal_failures(self.key_ring().as_deref(), &row.event_type, outcome)
    }

    // ---- 6. settle -----------------------------------------------------------------------

    /// Writes a batch's outcomes, and with `chain` claims the next batch into `next` in the
    /// same store call. When nothing could be written, counts every row as unwritten (they
    /// keep their lease and run again once it expires) and returns the store's error.
    async fn write_outcomes(
        &self,
        outcomes: Vec<Settlement>,
        chain: bool,
        next: &mut Option<ClaimedBatch>,
        rows: &RowsForMetrics,
    ) -> Result<SettleReport, Error> {
        let n = outcomes.len();
        let written =
            if chain { self.settle_and_claim(outcomes, next).await } else { self.store.settle(outcomes).await };
        written.inspect_err(|error| {
            Counters::add(&self.counters.unwritten, n as u64);
            rows.values().for_each(|(event_type, _)| crate::observe::retried(event_type, "unwritten"));
            self.store_error(error);
        })
    }

    /// Writes a batch's outcomes and claims the next batch's free types in the same store
    /// call, into `next`. A failed claim is counted and logged like any other and leaves
    /// `next` empty; a failed write is the caller's to handle.
    async fn settle_and_claim(
        &self,
        outcomes: Vec<Settlement>,
        next: &mut Option<ClaimedBatch>,
    ) -> Result<SettleReport, Error> {
        let plan = self.plan().await;
        if plan.free.is_empty() {
            self.unreserve(&plan);
            return self.store.settle(outcomes).await;
        }
        let request = self.request(plan.free.clone(), self.config.batch_size.max(1));
        let limit = request.limit;
        let at = Instant::now();
        let written = self.store.settle_and_claim(outcomes, request);
        let written = self.timed(limit, written, |w| match w {
            Ok((_, Ok(claimed))) => Some(claimed.len()),
            _ => None,
        });
        let (report, claimed) = match written.await {
            Ok(written) => written,
            Err(error) => {
                self.unreserve(&plan);
                return Err(error);
            }
        };
        match claimed {
            Ok(claimed) => {
                if claimed.is_empty() {
                    // Nothing due: the loop waits for work and plans afresh.
                    self.unreserve(&plan);
                } else {
                    *next = Some(ClaimedBatch { plan, claimed, at });
                }
            }
            Err(error) => {
                self.store_error(&error);
                self.unreserve(&plan);
            }
        }
        Ok(report)
    }

    /// Hands rows claimed for a batch that will not run back to the store at once (the
    /// retrier is stopping), and what their plan reserved.
    pub(super) async fn give_back(&self, next: ClaimedBatch) {
        self.unreserve(&next.plan);
        let n = next.claimed.len() as u64;
        Counters::add(&self.counters.claimed, n);
        let released = next.claimed.iter().map(|c| Settlement::Release { lease: c.lease }).collect();
        match self.store.settle(released).await {
            Ok(report) => {
                Counters::add(&self.counters.fenced, report.fenced.len() as u64);
                Counters::add(&self.counters.released, n - report.fenced.len() as u64);
            }
            Err(error) => {
                // They keep their lease and run again once it expires.
                Counters::add(&self.counters.unwritten, n);
                self.store_error(&error);
            }
        }
    }

    /// Rewrites each row whose success on an upcast payload the store wrote (not fenced) in
    /// its handler's version, audited as an `upgrade` by this retrier. A failed rewrite is
    /// logged: the row's success stands, and its payload stays in the version it was parked in.
    async fn record_upcasts(&self, upcasted: Vec<Upcasted>, report: &SettleReport) {
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

    /// Counts each claimed row once, in the stats and the metrics: by its outcome, or as
    /// fenced when the store refused to write it (then none of its attempts was written);
    /// warns about the fenced ones.
    fn count_outcomes(&self, kinds: Vec<OutcomeKind<'_>>, report: &SettleReport, rows: &RowsForMetrics) {
        let fenced: HashSet<DlqId> = report.fenced.iter().copied().collect();
        let now = Utc::now();
        for (id, counter, outcome, earlier) in kinds {
            let is_fenced = fenced.contains(&id);
            // A fenced outcome wrote none of its attempts.
            let earlier = if is_fenced { 0 } else { earlier };
            Counters::add(if is_fenced { &self.counters.fenced } else { counter }, 1);
            Counters::add(&self.counters.retried_at_once, earlier as u64);
            if let Some((event_type, first_failed_at)) = rows.get(&id) {
                (0..earlier).for_each(|_| crate::observe::retried(event_type, "retry"));
                crate::observe::retried(event_type, if is_fenced { "fenced" } else { outcome });
                if !is_fenced && outcome == "succeeded" {
                    crate::observe::recovered(event_type, now - *first_failed_at);
                }
            }
        }
        if !report.fenced.is_empty() {
            tracing::warn!(
                ids = ?report.fenced,
                "outcomes not written: this retrier's claim on these rows no longer holds (its lease expired, \
                 the claim was lost in a database restart, or an operator changed the row); \
                 whoever holds them now writes their outcome, and unclaimed ones run again"
            );
        }
    }

    fn counter_for(&self, outcome: &Settlement) -> &AtomicU64 {
        match outcome {
            Settlement::Succeeded { .. } => &self.counters.succeeded,
            Settlement::Retry { .. } => &self.counters.retried,
            Settlement::Dead { .. } => &self.counters.dead,
            Settlement::Release { .. } => &self.counters.released,
            Settlement::Repeated { last, .. } => self.counter_for(last),
        }
    }

    fn store_error(&self, error: &Error) {
        Counters::add(&self.counters.store_errors, 1);
        crate::observe::store_error();
        tracing::warn!(%error, "dead-letter store call failed; retrying later");
    }
}

/// 5. decide: the outcome to write for one attempt (after `retry_count` retries) of a row.
fn decide(
    row: &Row<'_>,
    retry_count: u32,
    max_retries_override: Option<u32>,
    outcome: HandlerOutcome,
    log: &LogText,
) -> Settlement {
    let lease = row.lease;
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
            let reason = log.say(&failure.reason);
            tracing::error!(id = lease.id, kind = %failure.kind, %reason, "fatal error in a retried handler; recorded as transient");
            None
        }
        ErrorClass::Transient => failure.retry_after,
    };
    let retries = retry_count + 1;
    let max_retries = max_retries_override.unwrap_or(row.max_retries);
    if retries >= max_retries {
        return Settlement::Dead { lease, reason: DeadReason::RetriesExhausted, failure, counts: true };
    }
    let delay = retry_after.unwrap_or_else(|| row.reg.policy.backoff.next_delay(retries + 1));
    if let Some(max_age) = row.reg.policy.max_age {
        // Durations come from the attribute and the handler's error: saturate, never panic.
        let horizon = later(row.first_failed_at, max_age);
        let next = later(now(), delay);
        if next > horizon {
            return Settlement::Dead { lease, reason: DeadReason::MaxAge, failure, counts: true };
        }
    }
    Settlement::Retry { lease, delay, failure }
}

/// `at + delay`, saturating at the largest time chrono can hold.
fn later(at: DateTime<Utc>, delay: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(delay).ok().and_then(|d| at.checked_add_signed(d)).unwrap_or(DateTime::<Utc>::MAX_UTC)
}
