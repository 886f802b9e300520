//! One batch: its claims (the free types, the limited types under their caps, the trials of
//! open circuits), the run of its rows, and the write of their outcomes, counted.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::AtomicU64;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use futures_util::stream::{self, StreamExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::Error;
use crate::record::{ClaimCap, ClaimRequest, Claimed, DlqId, SettleReport, Settlement};
use crate::store::{Circuit, prelude::*};

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

/// What the metrics need of each claimed row once its outcome is known: its event type and
/// when it first failed.
type RowsForMetrics = HashMap<DlqId, (String, DateTime<Utc>)>;

/// How to count one row's outcome: the row, the stats counter of its final outcome, that
/// outcome's name, and how many failed attempts ran before it under the same claim.
type OutcomeKind<'a> = (DlqId, &'a AtomicU64, &'static str, usize);

impl<S: DeadLetterStore + ?Sized> Retrier<S> {
    /// One batch: the rows in `next` (claimed when the previous batch's outcomes were
    /// written) or a fresh claim, then the limited types' claims and the trials; runs them and
    /// writes their outcomes. With `chain`, that write also claims the following batch into
    /// `next`, unless the retrier is stopping.
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
        let ClaimedBatch { plan, mut claimed, at: claimed_at } = match next.take() {
            Some(batch) => batch,
            None => self.claim_free_types().await?,
        };
        // Once rows are claimed, a failing claim of another type must not strand them: it is
        // counted and logged (in `claim`) and the batch goes on.
        let limited = self.claim_limited_types(plan.limited, &mut claimed).await;
        let trials = self.claim_trials(plan.trials, &mut claimed).await;
        let claimed = self.open_sealed(claimed).await;
        let n = claimed.len();
        if n == 0 {
            return Ok(0);
        }
        Counters::add(&self.counters.claimed, n as u64);
        let rows: RowsForMetrics =
            claimed.iter().map(|c| (c.id(), (c.event_type.clone(), c.first_failed_at))).collect();
        let (outcomes, upcasted) = self.run_batch(claimed, &trials, claimed_at, stop).await;
        let outcomes: Vec<Settlement> = outcomes
            .into_iter()
            .map(|o| self.seal_outcome(rows.get(&o.lease().id).map(|(t, _)| t.as_str()), o))
            .collect();
        limited.iter().for_each(|(t, n)| self.breakers.finished(t, *n));
        let kinds: Vec<OutcomeKind<'_>> = outcomes
            .iter()
            .map(|o| (o.lease().id, self.counter_for(o.last()), o.outcome_name(), o.earlier_failures().len()))
            .collect();
        let report = self.write_outcomes(outcomes, chain && !stop.is_cancelled(), next, &rows).await?;
        self.record_upcasts(upcasted, &report).await;
        self.count_outcomes(kinds, &report, &rows);
        Ok(n)
    }

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

    /// The claim plan for the next batch, circuits refreshed from the store first.
    async fn plan(&self) -> super::breakers::Plan {
        self.breakers.refresh(&*self.store).await;
        self.breakers.plan(self.registry.event_types(), self.config.batch_size.max(1))
    }

    /// Gives back what a plan reserved for its limited types and did not claim.
    fn unreserve(&self, plan: &super::breakers::Plan) {
        plan.limited.iter().for_each(|(t, reserved, _)| self.breakers.unreserve(t, *reserved));
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

    /// Runs every claimed row (claimed at `claimed_at`); on shutdown, waits out the grace
    /// period and releases the rest.
    async fn run_batch(
        &self,
        claimed: Vec<Claimed>,
        trials: &HashSet<DlqId>,
        claimed_at: Instant,
        stop: &CancellationToken,
    ) -> (Vec<Settlement>, Vec<super::attempt::Upcasted>) {
        let leases: Vec<_> = claimed.iter().map(|c| c.lease).collect();
        let mut upcasted = Vec::new();
        let mut outcomes: Vec<Option<Settlement>> = vec![None; claimed.len()];
        let runs = stream::iter(claimed.into_iter().enumerate())
            .map(|(i, c)| {
                let trial = trials.contains(&c.id());
                self.run_one(c, trial, claimed_at, stop).map(move |s| (i, s))
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
}
