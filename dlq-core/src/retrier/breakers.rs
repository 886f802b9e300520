//! The retrier's side of the circuits: per event type, the window of recent outcomes that
//! trips the breaker, the cached shared state (read from the store at most once per poll
//! interval), the trial, and the ramp and limits that bound each claim. See `docs/BREAKER.md`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::record::{Circuit, CircuitState, CircuitWrite, Circuits};
use crate::store::{ClaimCap, StoreId};
use crate::{Error, RetrierConfig, breaker_config::BreakerConfig, record::RetrierHeartbeat, store::prelude::*};

/// Buckets of a window.
const BUCKETS: usize = 10;

/// Outcomes of one type over a sliding window, in [`BUCKETS`] buckets.
#[derive(Debug)]
struct Window {
    span: Duration,
    /// `(bucket start, calls, transient failures)`, oldest first.
    buckets: std::collections::VecDeque<(Instant, u32, u32)>,
}

impl Window {
    fn new(span: Duration) -> Self {
        Self { span, buckets: std::collections::VecDeque::new() }
    }

    fn add(&mut self, at: Instant, failed: bool) -> (u32, u32) {
        let width = self.span / u32::try_from(BUCKETS).unwrap_or(10);
        while self.buckets.front().is_some_and(|(start, _, _)| at.saturating_duration_since(*start) >= self.span) {
            self.buckets.pop_front();
        }
        match self.buckets.back_mut() {
            Some((start, calls, fails)) if at.saturating_duration_since(*start) < width => {
                *calls += 1;
                *fails += u32::from(failed);
            }
            _ => self.buckets.push_back((at, 1, u32::from(failed))),
        }
        self.buckets.iter().fold((0, 0), |(c, f), (_, calls, fails)| (c + calls, f + fails))
    }

    fn clear(&mut self) {
        self.buckets.clear();
    }
}

/// A token bucket for a type's rate.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// What this process keeps of one type.
#[derive(Debug)]
struct TypeLocal {
    window: Window,
    bucket: Bucket,
    in_flight: usize,
    /// When the circuit last closed after being open: the ramp's start.
    closed_since: Option<Instant>,
}

#[derive(Debug, Default)]
struct Local {
    circuits: HashMap<String, Circuit>,
    /// The store's clock at the last read, and tokio's at the same moment.
    read: Option<(DateTime<Utc>, Instant)>,
    stale: bool,
    types: HashMap<String, TypeLocal>,
    /// Live retriers handling each type (from the heartbeats), at least 1.
    sharing: HashMap<String, usize>,
    /// Whether the last plan left a limited type out for want of a token or a slot.
    held_back: bool,
}

impl Local {
    fn store_now(&self) -> Option<DateTime<Utc>> {
        let (at, read) = self.read?;
        Some(at + chrono::Duration::from_std(read.elapsed()).unwrap_or_default())
    }

    fn get(&self, event_type: &str) -> Circuit {
        self.circuits.get(event_type).cloned().unwrap_or_else(|| Circuit::closed(event_type))
    }

    /// Takes `c` into the cache, starting the ramp when it closed after being open.
    fn take(&mut self, c: Circuit, now: Instant) {
        let was = self.circuits.get(&c.event_type).map_or(CircuitState::Closed, |old| old.state);
        if let Some(t) = self.types.get_mut(&c.event_type)
            && was != CircuitState::Closed
            && c.state == CircuitState::Closed
        {
            t.closed_since = Some(now);
            t.bucket = Bucket { tokens: 0.0, at: now };
            t.window.clear();
        }
        self.circuits.insert(c.event_type.clone(), c);
    }
}

/// What one batch claims.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Types claimed together with the batch size.
    pub(crate) free: Vec<String>,
    /// Types claimed on their own, with their limit in this retrier and, where the store
    /// keeps caps, the cap across every retrier.
    pub(crate) limited: Vec<(String, usize, Option<ClaimCap>)>,
    /// Open or abandoned half-open circuits whose trial is due.
    pub(crate) trials: Vec<Circuit>,
}

/// The circuits of one retrier (shared by its claim loops).
#[derive(Debug)]
pub(crate) struct Breakers {
    configs: HashMap<String, BreakerConfig>,
    poll: Duration,
    lease: Duration,
    /// Whether the store keeps circuits (else everything stays in this process).
    shared: AtomicBool,
    /// Whether the store keeps limits across retriers
    /// (`QueueStore::capped_claims`): then each claim of a limited type carries
    /// its whole cap, else this retrier keeps its share.
    store_caps_claims: bool,
    local: Mutex<Local>,
}

impl Breakers {
    /// The circuits of `handlers`, each an event type and its attribute's breaker, as
    /// [`RetrierConfig::resolve_breaker`] weighs them against the configuration.
    pub(crate) fn new<'a>(
        config: &RetrierConfig,
        handlers: impl Iterator<Item = (&'a str, Option<BreakerConfig>)>,
        store_caps_claims: bool,
    ) -> Self {
        let now = Instant::now();
        let mut configs = HashMap::new();
        let mut types = HashMap::new();
        for (t, attribute) in handlers {
            if let Some(b) = config.resolve_breaker(t, attribute.as_ref()) {
                configs.insert(t.to_owned(), b.clone());
                let local = TypeLocal {
                    window: Window::new(b.window),
                    bucket: Bucket { tokens: 1.0, at: now },
                    in_flight: 0,
                    closed_since: None,
                };
                types.insert(t.to_owned(), local);
            }
        }
        let local = Mutex::new(Local { types, ..Local::default() });
        Self {
            configs,
            poll: config.poll_interval,
            lease: config.lease,
            shared: AtomicBool::new(true),
            store_caps_claims,
            local,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads the circuits from the store when the last read is older than the poll interval
    /// (or a write of ours lost its compare-and-set).
    pub(crate) async fn refresh<S: DeadLetterStore + ?Sized>(&self, store: &S) {
        if !self.shared.load(Ordering::Relaxed) {
            return;
        }
        {
            let local = self.lock();
            if !local.stale && local.read.is_some_and(|(_, at)| at.elapsed() < self.poll) {
                return;
            }
        }
        match store.circuits().await {
            Ok(read) => self.take_read(store.store_id(), read),
            Err(Error::Unsupported { .. }) => {
                tracing::info!("this store keeps no circuits: each retrier keeps its breakers to itself");
                self.shared.store(false, Ordering::Relaxed);
            }
            Err(error) => tracing::debug!(%error, "could not read the circuits; keeping the last known"),
        }
    }

    fn take_read(&self, store: StoreId, read: Circuits) {
        let now = Instant::now();
        crate::circuit::publish(store, read.circuits.iter(), read.at);
        let mut local = self.lock();
        for c in read.circuits {
            local.take(c, now);
        }
        local.read = Some((read.at, now));
        local.stale = false;
    }

    /// Records how many live retriers handle each type, for the per-process share of limits.
    pub(crate) fn share(&self, beats: &[RetrierHeartbeat]) {
        let mut sharing: HashMap<String, usize> = HashMap::new();
        for t in beats.iter().flat_map(|b| &b.event_types) {
            *sharing.entry(t.clone()).or_default() += 1;
        }
        self.lock().sharing = sharing;
    }

    /// Sorts the handled types into claimed freely, claimed with a limit, due for a trial,
    /// and not claimed (paused, open, another retrier's trial, limit reached).
    pub(crate) fn plan<'a>(&self, event_types: impl Iterator<Item = &'a str>, batch: usize) -> Plan {
        let now = Instant::now();
        let mut local = self.lock();
        let store_now = local.store_now();
        let due = |at: Option<DateTime<Utc>>| match (at, store_now) {
            (Some(at), Some(now)) => at <= now,
            (Some(_), None) => false,
            (None, _) => true,
        };
        let mut plan = Plan::default();
        local.held_back = false;
        for t in event_types {
            let c = local.get(t);
            if c.paused {
                continue;
            }
            match c.state {
                CircuitState::Open if due(c.open_until) => plan.trials.push(c),
                CircuitState::HalfOpen if due(c.trial_until) => plan.trials.push(c),
                CircuitState::Open | CircuitState::HalfOpen => {}
                CircuitState::Closed => match self.limit(&mut local, t, batch, now) {
                    None => plan.free.push(t.to_owned()),
                    Some((0, _)) => local.held_back = true,
                    Some((n, cap)) => {
                        // Reserved now, so that the retrier's other claim loops see the slots
                        // and tokens taken; what the claim does not use is given back.
                        if let Some(state) = local.types.get_mut(t) {
                            state.in_flight += n;
                            #[allow(clippy::cast_precision_loss, reason = "a batch")]
                            let spent = n as f64;
                            state.bucket.tokens -= spent;
                        }
                        plan.limited.push((t.to_owned(), n, cap));
                    }
                },
            }
        }
        plan
    }

    /// The most rows of `t` one claim of this retrier may take now, and the cap the store
    /// keeps across retriers when it can; `None` when nothing limits `t`.
    ///
    /// Without the store's caps each retrier keeps an equal share of the limits (`sharing`,
    /// from the heartbeats); with them, this retrier's own count only spares claims bound to
    /// come back empty, and the store has the last word.
    fn limit(&self, local: &mut Local, t: &str, batch: usize, now: Instant) -> Option<(usize, Option<ClaimCap>)> {
        let config = self.configs.get(t)?;
        let share = if self.store_caps_claims { 1 } else { local.sharing.get(t).copied().unwrap_or(1).max(1) };
        let state = local.types.get_mut(t)?;
        let mut limit = None;
        if let Some(max) = config.max_concurrent {
            limit = Some(max.div_ceil(share).saturating_sub(state.in_flight).min(batch));
        }
        let ramping = state.closed_since.filter(|since| now.saturating_duration_since(*since) < config.ramp);
        let rate = match ramping {
            Some(since) => {
                let steps = 10.0 * now.saturating_duration_since(since).as_secs_f64() / config.ramp.as_secs_f64();
                let ramped = f64::from(config.ramp_from) * steps.exp2();
                Some(config.max_rate.map_or(ramped, |max| ramped.min(f64::from(max))))
            }
            None => config.max_rate.map(f64::from),
        };
        if let Some(rate) = rate {
            #[allow(clippy::cast_precision_loss, reason = "a handful of retriers")]
            let per_second = rate / share as f64;
            let bucket = &mut state.bucket;
            let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
            bucket.tokens = (bucket.tokens + per_second * elapsed).min(per_second.max(1.0));
            bucket.at = now;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "whole tokens, >= 0")]
            let whole = bucket.tokens.floor().max(0.0) as usize;
            limit = Some(limit.map_or(whole, |l: usize| l.min(whole)).min(batch));
        }
        let cap = self
            .store_caps_claims
            .then(|| ClaimCap { in_flight: config.max_concurrent, starts: rate.map(starts_per_window) });
        limit.map(|n| (n, cap))
    }

    /// How long a claim loop with nothing to do may wait: the poll interval, or less when a
    /// limited type earns a token or an open circuit's trial falls due sooner.
    pub(crate) fn wait_hint(&self, poll: Duration) -> Duration {
        let local = self.lock();
        let mut wait = poll;
        if local.held_back {
            // Rows of a limited type wait for a token or a slot: look again soon.
            wait = wait.min(Duration::from_millis(100));
        }
        if let Some(now) = local.store_now() {
            for c in local.circuits.values().filter(|c| c.state == CircuitState::Open && !c.paused) {
                let until = c.open_until.map_or(Duration::ZERO, |u| (u - now).to_std().unwrap_or_default());
                wait = wait.min(until + Duration::from_millis(1));
            }
        }
        wait
    }

    /// Gives back what a limited claim of `t` reserved but did not get (`unused` rows).
    pub(crate) fn unreserve(&self, t: &str, unused: usize) {
        if let Some(state) = self.lock().types.get_mut(t) {
            state.in_flight = state.in_flight.saturating_sub(unused);
            #[allow(clippy::cast_precision_loss, reason = "a batch")]
            let unused = unused as f64;
            state.bucket.tokens += unused;
        }
    }

    /// Rows of `t` from a limited claim settled: their concurrency slots are free again.
    pub(crate) fn finished(&self, t: &str, n: usize) {
        if let Some(state) = self.lock().types.get_mut(t) {
            state.in_flight = state.in_flight.saturating_sub(n);
        }
    }

    /// Whether `t` has a rate limit (`max-rate`): its attempts are paced by claims, so none
    /// runs again at once under its claim.
    pub(crate) fn rate_limited(&self, t: &str) -> bool {
        self.configs.get(t).is_some_and(|c| c.max_rate.is_some())
    }

    /// Whether rows of `t` may run now: closed and not paused, as last known.
    pub(crate) fn admits(&self, t: &str) -> bool {
        self.lock().circuits.get(t).is_none_or(Circuit::is_claimable)
    }

    /// Counts one outcome of `t`; the write that opens the circuit when it trips (the cache
    /// says open at once, so the batch's other rows stop).
    pub(crate) fn record(&self, t: &str, transient: bool, reason: &str, owner: &str) -> Option<CircuitWrite> {
        let config = self.configs.get(t).filter(|c| c.enabled)?;
        let now = Instant::now();
        let mut local = self.lock();
        let (calls, fails) = local.types.get_mut(t)?.window.add(now, transient);
        let tripped = calls >= config.min_calls && fails * 100 >= calls * u32::from(config.threshold_percent);
        let current = local.get(t);
        if !tripped || current.state != CircuitState::Closed {
            return None;
        }
        let why = format!(
            "{fails} of {calls} calls failed transiently in {} (last: {reason})",
            humantime::format_duration(config.window)
        );
        let mut write = current.write(CircuitState::Open, owner, why);
        write.cool_down = config.cool_down;
        write.open_for = Some(config.cool_down);
        let mut optimistic = current;
        optimistic.state = CircuitState::Open;
        local.circuits.insert(t.to_owned(), optimistic);
        if let Some(state) = local.types.get_mut(t) {
            state.window.clear();
        }
        Some(write)
    }

    /// The write that takes the trial of `c` for `owner`.
    pub(crate) fn trial(&self, c: &Circuit, owner: &str) -> CircuitWrite {
        let why = match c.state {
            CircuitState::HalfOpen => "the trial's holder did not report back: trial taken over".to_owned(),
            _ => format!("cool-down of {} over: one trial row", humantime::format_duration(c.cool_down)),
        };
        let mut write = c.write(CircuitState::HalfOpen, owner, why);
        write.trial_owner = Some(owner.to_owned());
        write.trial_for = Some(self.lease);
        write
    }

    /// The write after the trial of `t`: open again with a doubled, capped cool-down when it
    /// failed transiently, closed otherwise (`None`: no row was due).
    pub(crate) fn after_trial(&self, t: &str, failed: Option<&str>, owner: &str) -> CircuitWrite {
        let current = self.lock().get(t);
        let config = self.configs.get(t).cloned().unwrap_or_default();
        match failed {
            Some(reason) => {
                let cool_down = current.cool_down.max(config.cool_down).saturating_mul(2).min(config.max_cool_down);
                let why = format!("trial failed transiently: {reason}");
                let mut write = current.write(CircuitState::Open, owner, why);
                write.cool_down = cool_down;
                write.open_for = Some(cool_down);
                write
            }
            None => {
                let mut write = current.write(CircuitState::Closed, owner, "trial succeeded: ramping up");
                write.cool_down = config.cool_down;
                write
            }
        }
    }

    /// Writes `write` to the store (compare-and-set) and takes the result into the cache; a
    /// lost race marks the cache stale. Returns whether the write was applied (or, on a store
    /// without circuits, kept locally).
    pub(crate) async fn commit<S: DeadLetterStore + ?Sized>(&self, store: &S, write: CircuitWrite) -> bool {
        let (t, to, reason) = (write.event_type.clone(), write.state, write.reason.clone());
        let written = if self.shared.load(Ordering::Relaxed) {
            store.write_circuit(write.clone()).await
        } else {
            Err(Error::Unsupported { store: "this store", what: "circuits" })
        };
        let now = Instant::now();
        let circuit = match written {
            Ok(Some(c)) => c,
            Ok(None) => {
                tracing::debug!(event_type = %t, "circuit changed by another retrier; re-reading");
                self.lock().stale = true;
                return false;
            }
            Err(error) => {
                if !matches!(error, Error::Unsupported { .. }) {
                    tracing::warn!(%error, event_type = %t, "could not write the circuit; applying it in this retrier only");
                }
                let store_now = self.lock().store_now().unwrap_or_else(crate::backoff::now);
                let mut local_only = write.applied_to(&self.lock().get(&t), store_now);
                if local_only.is_none() {
                    let mut base = self.lock().get(&t);
                    base.version = write.expected_version;
                    local_only = write.applied_to(&base, store_now);
                }
                let Some(c) = local_only else { return false };
                c
            }
        };
        match to {
            CircuitState::Open => tracing::warn!(event_type = %t, %reason, "circuit opened"),
            _ => tracing::info!(event_type = %t, %reason, "circuit {to}"),
        }
        crate::observe::circuit_transition(&t, write.logged_as);
        let store_now = circuit.updated_at.unwrap_or_else(crate::backoff::now);
        crate::circuit::publish(store.store_id(), std::iter::once(&circuit), store_now);
        let mut local = self.lock();
        if local.read.is_none() {
            local.read = Some((store_now, now));
        }
        local.take(circuit, now);
        true
    }
}

/// A rate as the store's cap: `rate` claims in a window 10 % longer than a second (or, under
/// one per second, one claim per 1.1 / `rate` seconds). Claims land a few milliseconds before
/// their handlers start, so a window of exactly one second at the store would let a second
/// seen by the handlers hold a little more than the rate; the tenth keeps it within.
fn starts_per_window(rate: f64) -> (u32, Duration) {
    const SLACK: f64 = 1.1;
    if rate >= 1.0 {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a rate of at most u32::MAX")]
        let whole = rate.floor().min(f64::from(u32::MAX)) as u32;
        (whole, Duration::from_secs_f64(SLACK))
    } else {
        (1, Duration::from_secs_f64(SLACK / rate.max(1e-3)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breakers(rule: &str) -> Breakers {
        let config =
            RetrierConfig { breaker: Some(BreakerConfig::parse_rule(rule).unwrap()), ..RetrierConfig::default() };
        Breakers::new(&config, [("payment", None)].into_iter(), false)
    }

    #[tokio::test(start_paused = true)]
    async fn trips_at_the_share_once_enough_calls_ran() {
        let b = breakers("50% of 4 in 10s");
        assert!(b.record("payment", true, "down", "me").is_none());
        assert!(b.record("payment", false, "ok", "me").is_none());
        assert!(b.record("payment", true, "down", "me").is_none(), "3 calls: below the minimum");
        let write = b.record("payment", false, "ok", "me").expect("2 of 4 failed");
        assert_eq!((write.state, write.expected_version), (CircuitState::Open, 0));
        assert!(write.reason.contains("2 of 4 calls"), "{}", write.reason);
        assert!(!b.admits("payment"), "the batch's other rows stop at once");
        assert!(b.record("payment", true, "down", "me").is_none(), "opened once");
    }

    #[tokio::test(start_paused = true)]
    async fn old_outcomes_leave_the_window() {
        let b = breakers("50% of 4 in 10s");
        for _ in 0..3 {
            assert!(b.record("payment", true, "down", "me").is_none());
        }
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(b.record("payment", true, "down", "me").is_none(), "the three failures expired");
        assert!(b.record("refund", true, "down", "me").is_none(), "no breaker for that type");
    }

    #[tokio::test(start_paused = true)]
    async fn cool_down_doubles_up_to_the_cap_and_closing_ramps() {
        let mut config = BreakerConfig::parse_rule("50% of 2 in 10s").unwrap();
        config.cool_down = Duration::from_secs(2);
        config.max_cool_down = Duration::from_secs(5);
        config.ramp = Duration::from_secs(10);
        let retrier = RetrierConfig { breaker: Some(config), ..RetrierConfig::default() };
        let b = Breakers::new(&retrier, [("payment", None)].into_iter(), false);
        let store = crate::MemoryStore::new();
        b.record("payment", true, "down", "me");
        let open = b.record("payment", true, "down", "me").unwrap();
        assert!(b.commit(&store, open).await);
        let c = b.lock().get("payment");
        let trial = b.trial(&c, "me");
        assert!(b.commit(&store, trial).await);
        let again = b.after_trial("payment", Some("still down"), "me");
        assert_eq!(again.cool_down, Duration::from_secs(4));
        assert!(b.commit(&store, again).await);
        let c = b.lock().get("payment");
        assert!(b.commit(&store, b.trial(&c, "me")).await);
        assert_eq!(b.after_trial("payment", Some("down"), "me").cool_down, Duration::from_secs(5), "capped");
        let close = b.after_trial("payment", None, "me");
        assert!(b.commit(&store, close).await);
        assert!(b.admits("payment"));
        let plan = b.plan(["payment"].into_iter(), 50);
        assert!(plan.free.is_empty() && plan.limited.is_empty(), "no token yet: {plan:?}");
        tokio::time::advance(Duration::from_secs(5)).await;
        let plan = b.plan(["payment"].into_iter(), 50);
        assert_eq!(plan.limited, [("payment".to_owned(), 32, None)], "2^5 rows/s half-way through the ramp");
        tokio::time::advance(Duration::from_secs(6)).await;
        let plan = b.plan(["payment"].into_iter(), 50);
        assert_eq!(plan.free, ["payment"], "ramp over, no max-rate: unlimited");
    }

    #[tokio::test(start_paused = true)]
    async fn limits_are_shared_between_live_retriers() {
        let config = BreakerConfig { max_concurrent: Some(10), max_rate: Some(100), ..BreakerConfig::default() };
        let retrier = RetrierConfig { breaker: Some(config), ..RetrierConfig::default() };
        let b = Breakers::new(&retrier, [("payment", None)].into_iter(), false);
        let beats: Vec<_> = (0..4).map(|i| RetrierHeartbeat::new(&format!("r{i}"), ["payment"], false)).collect();
        b.share(&beats);
        tokio::time::advance(Duration::from_secs(1)).await;
        let plan = b.plan(["payment"].into_iter(), 50);
        assert_eq!(plan.limited, [("payment".to_owned(), 3, None)], "10 / 4 handlers, rounded up");
        assert!(b.plan(["payment"].into_iter(), 50).limited.is_empty(), "all 3 slots reserved");
        b.unreserve("payment", 1);
        assert_eq!(b.plan(["payment"].into_iter(), 50).limited, [("payment".to_owned(), 1, None)], "one given back");
        b.finished("payment", 3);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(b.plan(["payment"].into_iter(), 50).limited, [("payment".to_owned(), 3, None)]);
    }

    #[tokio::test(start_paused = true)]
    async fn with_a_store_that_caps_claims_each_claim_carries_the_whole_limits() {
        let config = BreakerConfig { max_concurrent: Some(10), max_rate: Some(100), ..BreakerConfig::default() };
        let retrier = RetrierConfig { breaker: Some(config), ..RetrierConfig::default() };
        let b = Breakers::new(&retrier, [("payment", None)].into_iter(), true);
        let beats: Vec<_> = (0..4).map(|i| RetrierHeartbeat::new(&format!("r{i}"), ["payment"], false)).collect();
        b.share(&beats);
        tokio::time::advance(Duration::from_secs(1)).await;
        let cap = ClaimCap { in_flight: Some(10), starts: Some((100, Duration::from_secs_f64(1.1))) };
        let plan = b.plan(["payment"].into_iter(), 50);
        assert_eq!(plan.limited, [("payment".to_owned(), 10, Some(cap))], "no share: the store keeps the whole");
    }

    #[test]
    fn rates_become_windows_a_tenth_longer_than_their_second() {
        assert_eq!(starts_per_window(40.0), (40, Duration::from_secs_f64(1.1)));
        assert_eq!(starts_per_window(2.5), (2, Duration::from_secs_f64(1.1)));
        assert_eq!(starts_per_window(0.5), (1, Duration::from_secs_f64(2.2)), "under one per second");
    }
}
