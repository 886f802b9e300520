//! The retrier engine: claims due dead letters, runs their handlers, writes the outcomes.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use futures_util::stream::{self, StreamExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::Error;
use crate::RetrierConfig;
use crate::breakers::Breakers;
use crate::classify::{ErrorClass, FailureInfo};
use crate::handler::{Attempt, Context, HandlerOutcome, Invocation, Registration, Runner};
use crate::memory::now;
use crate::record::{ClaimCap, ClaimRequest, Claimed, DeadReason, DlqId, RetrierHeartbeat, SettleReport, Settlement};
use crate::registry::Registry;
use crate::store::{DeadLetterStore, SingletonLock};

/// Counters of what a retrier did, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetrierStats {
    /// Rows claimed.
    pub claimed: u64,
    /// Retries that succeeded.
    pub succeeded: u64,
    /// Retries that failed and were rescheduled.
    pub retried: u64,
    /// Failed attempts run again at once under the same claim (`immediate-retries`); not part
    /// of the sum below, which counts each claimed row once by its final outcome.
    pub retried_at_once: u64,
    /// Rows parked dead.
    pub dead: u64,
    /// Rows released unrun at shutdown.
    pub released: u64,
    /// Outcomes the store refused because this retrier's claim no longer held the row (lease
    /// expired, claim lost in a database restart, row changed by an operator).
    pub fenced: u64,
    /// Outcomes not written because the store call failed; the rows run again once their
    /// lease expires. `claimed` = `succeeded + retried + dead + released + fenced + unwritten`.
    pub unwritten: u64,
    /// Handler panics (recorded as transient failures).
    pub panics: u64,
    /// Handler timeouts (recorded as transient failures).
    pub timeouts: u64,
    /// Store calls that failed (the retrier keeps going).
    pub store_errors: u64,
}

/// Rows claimed by the write of a batch's outcomes, for the batch after it, and the plan they
/// were claimed under (its limited types and trials are claimed when that batch starts).
struct ClaimedBatch {
    plan: crate::breakers::Plan,
    claimed: Vec<Claimed>,
    /// When the claim was asked for: the leases run from about then.
    at: Instant,
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

#[derive(Debug, Default)]
struct Counters {
    claimed: AtomicU64,
    succeeded: AtomicU64,
    retried: AtomicU64,
    retried_at_once: AtomicU64,
    dead: AtomicU64,
    released: AtomicU64,
    fenced: AtomicU64,
    unwritten: AtomicU64,
    panics: AtomicU64,
    timeouts: AtomicU64,
    store_errors: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> RetrierStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RetrierStats {
            claimed: get(&self.claimed),
            succeeded: get(&self.succeeded),
            retried: get(&self.retried),
            retried_at_once: get(&self.retried_at_once),
            dead: get(&self.dead),
            released: get(&self.released),
            fenced: get(&self.fenced),
            unwritten: get(&self.unwritten),
            panics: get(&self.panics),
            timeouts: get(&self.timeouts),
            store_errors: get(&self.store_errors),
        }
    }
}

/// The retrier engine, generic over the store: claims due rows for the registered event
/// types in batches, runs their handlers with a concurrency limit, and writes each outcome
/// fenced by the claim's token.
///
/// - success: `SUCCEEDED`;
/// - transient failure: back to `PENDING` after the policy's backoff (or the error's hint),
///   until `max_retries` (`retries_exhausted`) or `max_age` (`max_age`) say dead;
/// - permanent failure: `FAILED_PERMANENTLY` (`permanent`);
/// - a stored payload that no longer deserializes: `FAILED_PERMANENTLY` (`undecodable`),
///   payload untouched;
/// - a panic or a per-attempt timeout: a transient failure; the retrier goes on;
/// - a fatal error: recorded as a transient failure and logged at `error`, since the
///   retrier has no upstream to stop.
///
/// ```
/// use dlq_core::{dead_letter, handlers, with_store, MemoryStore, Retrier, Status};
/// use std::sync::Arc;
///
/// #[dead_letter(event_type = "doc-retrier", backoff = "none")]
/// async fn flaky(n: u32) -> Result<(), std::io::Error> {
///     static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
///     if CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
///         return Err(std::io::Error::other("downstream 503"));
///     }
///     Ok(())
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = Arc::new(MemoryStore::new());
/// let id = with_store(store.clone(), flaky(1)).await.unwrap_err().dlq_id().unwrap();
///
/// let retrier = Retrier::new(store.clone(), handlers![flaky]?);
/// retrier.run_once().await?;
/// assert_eq!(store.get_now(id).unwrap().status, Status::Succeeded);
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
pub struct Retrier<S: ?Sized> {
    store: Arc<S>,
    registry: Registry,
    context: Arc<Context>,
    config: RetrierConfig,
    owner: Arc<str>,
    counters: Arc<Counters>,
    breakers: Arc<Breakers>,
}

impl<S: ?Sized> Clone for Retrier<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            registry: self.registry.clone(),
            context: Arc::clone(&self.context),
            config: self.config.clone(),
            owner: Arc::clone(&self.owner),
            counters: Arc::clone(&self.counters),
            breakers: Arc::clone(&self.breakers),
        }
    }
}

impl<S: ?Sized> std::fmt::Debug for Retrier<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retrier")
            .field("registry", &self.registry)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S: DeadLetterStore + ?Sized> Retrier<S> {
    /// A retrier over every `#[dead_letter]` handler linked into the binary (found through
    /// `inventory`, see [`registry()`](crate::registry())), with the default configuration.
    ///
    /// Convenient, but it runs whatever handlers the linker kept: prefer [`new`](Self::new)
    /// with an explicit [`handlers!`](crate::handlers) list, which the compiler checks.
    ///
    /// # Errors
    /// A duplicate event type in the registry.
    pub fn discover(store: Arc<S>) -> Result<Self, Error> {
        Ok(Self::new(store, crate::registry()?.clone()))
    }

    /// A retrier over the handlers of `registry`, built with [`handlers!`](crate::handlers),
    /// with the default configuration.
    ///
    /// ```
    /// use dlq_core::{dead_letter, handlers, MemoryStore, Retrier};
    /// use std::sync::Arc;
    ///
    /// #[dead_letter(event_type = "doc-retrier-new")]
    /// async fn handle_refund(amount: u64) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// let retrier = Retrier::new(Arc::new(MemoryStore::new()), handlers![handle_refund]?);
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
    pub fn new(store: Arc<S>, registry: Registry) -> Self {
        let config = RetrierConfig::default();
        let breakers = Arc::new(Breakers::new(&config, breakers_of(&registry), store.supports_claim_capped()));
        Self {
            store,
            registry,
            context: Arc::new(Context::new()),
            config,
            owner: default_owner().into(),
            counters: Arc::default(),
            breakers,
        }
    }

    /// Sets the configuration.
    #[must_use]
    pub fn config(mut self, config: RetrierConfig) -> Self {
        if !config.owner.is_empty() {
            self.owner = config.owner.as_str().into();
        }
        self.breakers =
            Arc::new(Breakers::new(&config, breakers_of(&self.registry), self.store.supports_claim_capped()));
        self.config = config;
        self
    }

    /// Sets the values for `State<T>` handler arguments.
    #[must_use]
    pub fn context(mut self, context: Context) -> Self {
        self.context = Arc::new(context);
        self
    }

    /// What the retrier did so far.
    pub fn stats(&self) -> RetrierStats {
        self.counters.snapshot()
    }

    /// The store it runs on.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// The name it claims under (`lease_owner`) and its heartbeat row's key: the configured
    /// `owner`, or `host:pid:<random>`.
    ///
    /// ```
    /// use dlq_core::{MemoryStore, Registry, Retrier, RetrierConfig};
    /// use std::sync::Arc;
    ///
    /// let config = RetrierConfig::from_json_str(r#"{"owner": "worker-1"}"#)?;
    /// let retrier = Retrier::new(Arc::new(MemoryStore::new()), Registry::default()).config(config);
    /// assert_eq!(retrier.owner(), "worker-1");
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Runs until `shutdown` completes, then stops claiming, lets in-flight handlers finish
    /// within `shutdown_grace` and releases the rows still running, removes its heartbeat,
    /// and returns what it did. Returns at once when the configuration says `enabled: false`.
    ///
    /// Around the claim loops it keeps a heartbeat row in the store (see
    /// [`DeadLetterStore::retriers`]), removes the rows of retriers that stopped beating,
    /// purges finished rows past `retention`, and in `singleton` mode claims only while it
    /// holds the store's singleton lock (the others wait as standbys and take over).
    ///
    /// `shutdown` is any `Send` future; what it resolves to is ignored, so the retrier stops
    /// when it completes, whatever its output: `tokio::signal::ctrl_c()` (which also completes
    /// at once, with an error, when the signal handler cannot be installed), a
    /// [`CancellationToken`]'s `cancelled_owned()`, a `tokio::sync::oneshot::Receiver` (which
    /// also completes when its sender is dropped), or `std::future::pending::<()>()` to run
    /// until the task is dropped.
    ///
    /// ```
    /// # use dlq_core::{MemoryStore, Registry, Retrier};
    /// # use std::sync::Arc;
    /// # async fn serve(retrier: Retrier<MemoryStore>) -> Result<(), dlq_core::Error> {
    /// // In a service: runs until Ctrl-C.
    /// let stats = retrier.run_until(tokio::signal::ctrl_c()).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// ```
    /// use dlq_core::{MemoryStore, Registry, Retrier};
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let retrier = Retrier::new(Arc::new(MemoryStore::new()), Registry::default());
    /// let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    /// let running = tokio::spawn({
    ///     let retrier = retrier.clone();
    ///     async move { retrier.run_until(rx).await }
    /// });
    /// stop.send(()).unwrap();
    /// assert_eq!(running.await.unwrap()?.claimed, 0);
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// Before it starts: [`Error::Config`] for unusable settings, [`Error::MissingState`] when
    /// a handler's `State<T>` is not in the context, [`Error::Unsupported`] for `singleton` on
    /// a store without a lock. While running, store failures (a database outage) are logged,
    /// counted in the stats and retried; they never end the run.
    ///
    /// ```
    /// use dlq_core::{dead_letter, Context, MemoryStore, Retrier, State};
    /// use std::sync::Arc;
    ///
    /// #[derive(Clone)]
    /// struct Ledger;
    ///
    /// #[dead_letter(event_type = "doc-run-until")]
    /// async fn post(amount: u64, _ledger: State<Ledger>) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let registry = dlq_core::handlers![post]?;
    ///
    /// // A handler's `State<Ledger>` missing from the context is a configuration error.
    /// let err = Retrier::new(store.clone(), registry.clone()).run_until(async {}).await.unwrap_err();
    /// assert!(matches!(err, dlq_core::Error::MissingState { .. }), "{err}");
    ///
    /// let retrier = Retrier::new(store, registry).context(Context::new().with(Ledger));
    /// let shutdown = tokio_util::sync::CancellationToken::new();
    /// let running = tokio::spawn({
    ///     let (retrier, shutdown) = (retrier.clone(), shutdown.clone());
    ///     async move { retrier.run_until(shutdown.cancelled_owned()).await }
    /// });
    /// shutdown.cancel();
    /// let stats = running.await.unwrap()?;
    /// assert_eq!(stats.claimed, 0);
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn run_until(&self, shutdown: impl Future + Send) -> Result<RetrierStats, Error> {
        if !self.config.enabled {
            tracing::info!("dead-letter retrier disabled by configuration");
            return Ok(self.stats());
        }
        self.config.validate()?;
        self.registry.check_context(&self.context)?;
        crate::observe::describe_metrics();
        let beat = RetrierHeartbeat::new(&self.owner, self.registry.event_types(), self.config.singleton);
        let expire_after = self.config.heartbeat.saturating_mul(3);
        if let Err(error) = self.store.heartbeat(&beat, expire_after).await {
            tracing::warn!(%error, "could not register the retrier's heartbeat");
        }
        // One token per run: the shutdown future cancels it, and so does the work ending early
        // (singleton unsupported), which stops the background loops too.
        let stop = CancellationToken::new();
        let work = async {
            let result = if self.config.singleton {
                self.run_singleton(&stop).await
            } else {
                self.run_workers(&stop).await;
                Ok(())
            };
            stop.cancel();
            result
        };
        let trigger = async {
            tokio::select! {
                _ = shutdown => stop.cancel(),
                () = stop.cancelled() => {}
            }
        };
        let (result, (), (), (), ()) = tokio::join!(
            work,
            trigger,
            self.keep_beating(beat, expire_after, &stop),
            self.keep_purging(&stop),
            self.keep_maintaining(&stop)
        );
        if let Err(error) = self.store.remove_heartbeat(&self.owner).await {
            tracing::warn!(%error, "could not remove the retrier's heartbeat");
        }
        result.map(|()| self.stats())
    }

    async fn run_workers(&self, stop: &CancellationToken) {
        // A fixed rate means one batch per period, so one loop.
        let workers = if self.config.fixed_rate.is_some() { 1 } else { self.config.workers.max(1) };
        let loops = (0..workers).map(|_| self.worker(stop));
        futures_util::future::join_all(loops).await;
    }

    /// Refreshes the heartbeat, then the row and retrier gauges (one `stats()` and one
    /// `retriers()` call), every `heartbeat`.
    async fn keep_beating(&self, mut beat: RetrierHeartbeat, expire_after: Duration, stop: &CancellationToken) {
        let mut gauges = crate::observe::StoreGauges::default();
        loop {
            self.refresh_gauges(&mut gauges).await;
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.config.heartbeat) => {}
            }
            beat.last_seen = chrono::Utc::now();
            if let Err(error) = self.store.heartbeat(&beat, expire_after).await {
                tracing::warn!(%error, "could not refresh the retrier's heartbeat");
            }
        }
    }

    async fn refresh_gauges(&self, gauges: &mut crate::observe::StoreGauges) {
        if let Some(beats) = gauges.refresh_handling(&*self.store, self.registry.event_types()).await {
            self.breakers.share(&beats);
        }
    }

    /// Asks the store for its upkeep (`DeadLetterStore::maintain`) every `heartbeat`.
    async fn keep_maintaining(&self, stop: &CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.config.heartbeat) => {}
            }
            if let Err(error) = self.store.maintain().await {
                tracing::warn!(%error, "store upkeep failed");
            }
        }
    }

    async fn keep_purging(&self, stop: &CancellationToken) {
        let Some(retention) = self.config.retention else { return };
        loop {
            match self.store.purge(retention).await {
                Ok(0) => {}
                Ok(purged) => tracing::info!(purged, "purged finished dead letters past retention"),
                Err(error) => tracing::warn!(%error, "retention purge failed"),
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.config.purge_interval) => {}
            }
        }
    }

    /// Alternates between standby (trying the lock every heartbeat) and leadership terms
    /// until shutdown.
    async fn run_singleton(&self, stop: &CancellationToken) -> Result<(), Error> {
        let every = self.config.heartbeat;
        while !stop.is_cancelled() {
            match self.store.try_lock_singleton().await {
                Ok(Some(lock)) => {
                    tracing::info!(owner = %self.owner, "singleton retrier elected");
                    self.lead(lock, every, stop).await;
                }
                Ok(None) => {}
                Err(error @ Error::Unsupported { .. }) => return Err(error),
                Err(error) => tracing::warn!(%error, "singleton lock attempt failed; retrying"),
            }
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(every) => {}
            }
        }
        Ok(())
    }

    /// One leadership term: the claim loops run while the lock still holds.
    async fn lead(&self, mut lock: Box<dyn SingletonLock>, every: Duration, stop: &CancellationToken) {
        let term = stop.child_token();
        let watchdog = async {
            loop {
                tokio::select! {
                    () = term.cancelled() => break,
                    () = tokio::time::sleep(every) => {}
                }
                let held = tokio::time::timeout(every, lock.still_held()).await;
                if !matches!(held, Ok(true)) {
                    tracing::warn!("singleton lock lost; stepping down");
                    break;
                }
            }
            term.cancel();
        };
        tokio::join!(self.run_workers(&term), watchdog);
        lock.release().await;
    }

    async fn worker(&self, stop: &CancellationToken) {
        match self.config.fixed_rate {
            None => {
                // Rows claimed by the write of the previous batch's outcomes (one round trip
                // between batches instead of two), with the plan they were claimed under.
                let mut next = None;
                while !stop.is_cancelled() {
                    let full = match self.run_batch_once(stop, &mut next, true).await {
                        Ok(n) => n >= self.config.batch_size,
                        Err(_) => false,
                    };
                    if next.is_none() && !full {
                        tokio::select! {
                            () = self.store.wait_for_work(self.breakers.wait_hint(self.config.poll_interval)) => {}
                            () = stop.cancelled() => {}
                        }
                    }
                }
                if let Some(next) = next {
                    self.give_back(next).await;
                }
            }
            Some(every) => {
                let mut ticks = tokio::time::interval(every);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = ticks.tick() => {}
                        () = stop.cancelled() => return,
                    }
                    // Claims keep to the ticks: none is made with the outcomes' write.
                    let _ = self.run_batch_once(stop, &mut None, false).await;
                }
            }
        }
    }

    /// Claims one batch, runs it and writes the outcomes. Returns how many rows it claimed.
    ///
    /// # Errors
    /// [`Error::MissingState`] when a handler's `State<T>` is not in the context, checked
    /// before anything is claimed (as [`run_until`](Self::run_until) does), so no row spends
    /// a retry on it. The store's error from the claim or the outcome write (rows whose
    /// outcome could not be written keep their lease and are claimed again when it expires).
    ///
    /// ```
    /// use dlq_core::{dead_letter, handlers, Context, MemoryStore, Retrier, State};
    /// use std::sync::Arc;
    ///
    /// #[derive(Clone)]
    /// struct Ledger;
    ///
    /// #[dead_letter(event_type = "doc-run-once")]
    /// async fn post(amount: u64, _ledger: State<Ledger>) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let retrier = Retrier::new(Arc::new(MemoryStore::new()), handlers![post]?);
    /// let err = retrier.run_once().await.unwrap_err();
    /// assert!(matches!(err, dlq_core::Error::MissingState { .. }), "{err}");
    /// assert_eq!(retrier.context(Context::new().with(Ledger)).run_once().await?, 0);
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn run_once(&self) -> Result<usize, Error> {
        self.registry.check_context(&self.context)?;
        // Not part of a run: nothing cancels it, and it claims nothing beyond its batch.
        self.run_batch_once(&CancellationToken::new(), &mut None, false).await
    }

    /// One batch: the rows in `next` (claimed when the previous batch's outcomes were
    /// written) or a fresh claim, then the limited types' claims and the trials; runs them and
    /// writes their outcomes. With `chain`, that write also claims the following batch into
    /// `next`, unless the retrier is stopping.
    async fn run_batch_once(
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
        let (plan, mut claimed, claimed_at) = match next.take() {
            Some(ClaimedBatch { plan, claimed, at }) => (plan, claimed, at),
            None => {
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
                (plan, claimed, at)
            }
        };
        // Once rows are claimed, a failing claim of another type must not strand them: it is
        // counted and logged (in `claim`) and the batch goes on.
        let mut limited: Vec<(String, usize)> = Vec::new();
        for (event_type, reserved, cap) in plan.limited {
            let got = self.claim(vec![event_type.clone()], reserved, cap).await.unwrap_or_default();
            self.breakers.unreserve(&event_type, reserved - got.len());
            limited.push((event_type, got.len()));
            claimed.extend(got);
        }
        let mut trials = HashSet::new();
        for circuit in plan.trials {
            if let Ok(Some(trial)) = self.take_trial(&circuit).await {
                trials.insert(trial.id());
                claimed.push(trial);
            }
        }
        let n = claimed.len();
        if n == 0 {
            return Ok(0);
        }
        Counters::add(&self.counters.claimed, n as u64);
        // What the metrics need of each row once its outcome is known.
        let rows: HashMap<DlqId, (String, DateTime<Utc>)> =
            claimed.iter().map(|c| (c.id(), (c.event_type.clone(), c.first_failed_at))).collect();
        let outcomes = self.run_batch(claimed, &trials, claimed_at, stop).await;
        limited.iter().for_each(|(t, n)| self.breakers.finished(t, *n));
        let kinds: Vec<(DlqId, &AtomicU64, &'static str, usize)> = outcomes
            .iter()
            .map(|o| (o.lease().id, self.counter_for(o.last()), o.outcome_name(), o.earlier_failures().len()))
            .collect();
        let written = if chain && !stop.is_cancelled() {
            self.settle_and_claim(outcomes, next).await
        } else {
            self.store.settle(outcomes).await
        };
        let report = match written {
            Ok(report) => report,
            Err(error) => {
                // Nothing was written: the rows keep their lease and run again once it expires.
                Counters::add(&self.counters.unwritten, n as u64);
                rows.values().for_each(|(event_type, _)| crate::observe::retried(event_type, "unwritten"));
                self.store_error(&error);
                return Err(error);
            }
        };
        // Each claimed row is counted once: by its outcome, or as fenced when the store
        // refused to write it.
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
        Ok(n)
    }

    /// The claim plan for the next batch, circuits refreshed from the store first.
    async fn plan(&self) -> crate::breakers::Plan {
        self.breakers.refresh(&*self.store).await;
        self.breakers.plan(self.registry.event_types(), self.config.batch_size.max(1))
    }

    /// Gives back what a plan reserved for its limited types and did not claim.
    fn unreserve(&self, plan: &crate::breakers::Plan) {
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
    async fn give_back(&self, next: ClaimedBatch) {
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
        let claim = match cap {
            Some(cap) => self.store.claim_capped(request, cap),
            None => self.store.claim(request),
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
    async fn take_trial(&self, circuit: &crate::store::Circuit) -> Result<Option<Claimed>, Error> {
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
    ) -> Vec<Settlement> {
        let leases: Vec<_> = claimed.iter().map(|c| c.lease).collect();
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
                    Some((i, settlement)) => outcomes[i] = Some(settlement),
                    None => break,
                },
                () = &mut grace => break,
            }
        }
        outcomes.into_iter().zip(leases).map(|(o, lease)| o.unwrap_or(Settlement::Release { lease })).collect()
    }

    /// Runs one claimed row: an attempt, and while it fails transiently with its retry due at
    /// once, up to `immediate_retries` more under the same claim (see [`Self::may_retry_under_same_claim`]).
    async fn run_one(
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
        let transient = match &outcome {
            HandlerOutcome::Failed(failure) => (failure.class != ErrorClass::Permanent).then(|| failure.reason.clone()),
            _ => None,
        };
        let mut settlement = decide(claimed, reg, self.config.max_retries, outcome, lease);
        if self.feed_breaker(&claimed.event_type, trial, transient.as_deref()).await == Verdict::Release {
            // The type's circuit is open: the failure is the outage's, not the row's.
            settlement = Settlement::Release { lease };
        }
        span.record("outcome", settlement.outcome_name());
        if let Some(failure) = settlement.failure() {
            span.record("error", failure.reason.as_str());
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
            tracing::error!(id = claimed.id(), reason = %failure.reason, "fatal error in a retried handler; recorded as transient");
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

/// Each handler's event type and the breaker of its attribute, for [`Breakers::new`].
fn breakers_of(registry: &Registry) -> impl Iterator<Item = (&'static str, Option<crate::BreakerConfig>)> + '_ {
    registry.iter().map(|r| (r.event_type(), r.breaker()))
}

/// `host:pid:<random>`: unique even for two retriers in one process.
fn default_owner() -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{}:{}:{}", crate::record::host_name(), std::process::id(), &suffix[..8])
}

/// `at + delay`, saturating at the largest time chrono can hold.
fn later(at: chrono::DateTime<chrono::Utc>, delay: Duration) -> chrono::DateTime<chrono::Utc> {
    chrono::Duration::from_std(delay)
        .ok()
        .and_then(|d| at.checked_add_signed(d))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod breaker_tests;
