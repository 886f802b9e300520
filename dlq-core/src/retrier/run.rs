//! Running a retrier: [`Retrier::run_until`] with the loops beside its claim loops (heartbeat,
//! purge, store upkeep), singleton leadership, each worker's claim loop, and
//! [`Retrier::run_once`].

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::record::RetrierHeartbeat;
use crate::store::{SingletonLock, prelude::*};

use super::{Retrier, RetrierStats};

impl<S: DeadLetterStore + ?Sized> Retrier<S> {
    /// Runs until `shutdown` completes, then stops claiming, lets in-flight handlers finish
    /// within `shutdown_grace` and releases the rows still running, removes its heartbeat,
    /// and returns what it did. Returns at once when the configuration says `enabled: false`.
    ///
    /// Around the claim loops it keeps a heartbeat row in the store (see
    /// [`crate::store::FleetStore::retriers`]), removes the rows of retriers that stopped beating,
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
    /// # use dlq_core::{MemoryStore, handlers::Registry, Retrier};
    /// # use std::sync::Arc;
    /// # async fn serve(retrier: Retrier<MemoryStore>) -> Result<(), dlq_core::Error> {
    /// // In a service: runs until Ctrl-C.
    /// let stats = retrier.run_until(tokio::signal::ctrl_c()).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// ```
    /// use dlq_core::{MemoryStore, handlers::Registry, Retrier};
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
    /// a store without a lock, [`Error::SchemaChanged`] when a handler's event is not the shape
    /// its version was first published with in the store's type catalog (a changed event
    /// without a version bump; see [`accept_schema_change`](Self::accept_schema_change)). While running, store failures (a database outage) are logged,
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
        self.check_keys()?;
        if let Err(error) = self.check_versions().await {
            // Published all the same: `dlq redrive --validate` then reports the mismatch.
            publish_or_warn(&*self.store, self.registry.catalog(&self.owner)).await;
            return Err(error);
        }
        crate::observe::describe_metrics();
        let beat = RetrierHeartbeat::new(&self.owner, self.registry.event_types(), self.config.singleton);
        let expire_after = self.config.heartbeat.saturating_mul(3);
        if let Err(error) = self.store.heartbeat(&beat, expire_after).await {
            tracing::warn!(%error, "could not register the retrier's heartbeat");
        }
        let published = publish_or_warn(&*self.store, self.registry.catalog(&self.owner)).await;
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
            self.keep_beating(beat, expire_after, published, &stop),
            self.keep_purging(&stop),
            self.keep_maintaining(&stop)
        );
        if let Err(error) = self.store.remove_heartbeat(&self.owner).await {
            tracing::warn!(%error, "could not remove the retrier's heartbeat");
        }
        result.map(|()| self.stats())
    }

    /// Refuses to start when a handler declares a version whose schema in the store's type
    /// catalog has another shape than its event's ([`Error::SchemaChanged`]), unless
    /// [`accept_schema_change`](Self::accept_schema_change) says to make the handler's that
    /// version's. A catalog the store cannot read now is logged and not checked.
    async fn check_versions(&self) -> Result<(), Error> {
        let (schemas, types) = match (self.store.version_schemas().await, self.store.event_types().await) {
            (Ok(schemas), Ok(types)) => (schemas, types),
            (Err(error), _) | (_, Err(error)) => {
                tracing::warn!(%error, "could not read the type catalog to check the handlers' versions against it");
                return Ok(());
            }
        };
        let catalog = crate::catalog::Catalog::new(types);
        for record in self.registry.catalog(&self.owner) {
            let Err(mismatch) = crate::catalog::check_versions(std::slice::from_ref(&record), &schemas, &catalog)
            else {
                continue;
            };
            let (Some(schema), true) = (record.schema, self.accept_schema_change) else {
                return Err(Error::SchemaChanged(mismatch));
            };
            tracing::warn!(%mismatch, "accepted by `accept_schema_change`: the handler's schema becomes the version's");
            let accepted =
                crate::catalog::VersionSchema::new(record.event_type, record.version, schema, record.published_by);
            self.store.accept_schema(accepted).await?;
        }
        self.versions_checked.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    async fn run_workers(&self, stop: &CancellationToken) {
        // A fixed rate means one batch per period, so one loop.
        let workers = if self.config.fixed_rate.is_some() { 1 } else { self.config.workers.max(1) };
        let loops = (0..workers).map(|_| self.worker(stop));
        futures_util::future::join_all(loops).await;
    }

    /// Refreshes the heartbeat, then the row and retrier gauges (one `stats()` and one
    /// `retriers()` call), every `heartbeat`.
    /// Until the type catalog is published (the store was down at start-up), tries again with
    /// each heartbeat.
    async fn keep_beating(
        &self,
        mut beat: RetrierHeartbeat,
        expire_after: Duration,
        mut published: bool,
        stop: &CancellationToken,
    ) {
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
            if !published {
                published = publish_or_warn(&*self.store, self.registry.catalog(&self.owner)).await;
            }
        }
    }

    async fn refresh_gauges(&self, gauges: &mut crate::observe::StoreGauges) {
        if let Some(beats) = gauges.refresh_handling(&*self.store, self.registry.event_types()).await {
            self.breakers.share(&beats);
        }
    }

    /// Asks the store for its upkeep (`OperatorStore::maintain`) every `heartbeat`.
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
        // A store without the lock is refused at start, before any claim.
        let Some(locks) = self.store.singleton() else {
            return Err(Error::Unsupported { store: "this store", what: "singleton mode (use PostgreSQL)" });
        };
        while !stop.is_cancelled() {
            match locks.try_lock_singleton().await {
                Ok(Some(lock)) => {
                    tracing::info!(owner = %self.owner, "singleton retrier elected");
                    self.lead(lock, every, stop).await;
                }
                Ok(None) => {}
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
                    // Taken before the claim: a park that commits after the claim looked
                    // wakes the wait below even if its announcement comes before the wait.
                    let ticket = self.store.work_ticket();
                    let full = match self.run_batch_once(stop, &mut next, true).await {
                        Ok(n) => n >= self.config.batch_size,
                        Err(_) => false,
                    };
                    if next.is_none() && !full {
                        let hint = self.breakers.wait_hint(self.config.poll_interval);
                        tokio::select! {
                            () = self.store.wait_for_work(ticket, hint) => {}
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
    /// [`Error::MissingState`] when a handler's `State<T>` is not in the context, and
    /// [`Error::SchemaChanged`] (checked on the first call), both before anything is claimed
    /// (as [`run_until`](Self::run_until) does), so no row spends a retry on them. The store's error from the claim or the outcome write (rows whose
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
        self.check_keys()?;
        if !self.versions_checked.load(std::sync::atomic::Ordering::Relaxed) {
            self.check_versions().await?;
        }
        // Not part of a run: nothing cancels it, and it claims nothing beyond its batch.
        self.run_batch_once(&CancellationToken::new(), &mut None, false).await
    }
}

/// Publishes `records` into `store`'s catalog, logging (not failing) when the store cannot take
/// them: the process handles events without the catalog; tools then report the types as
/// unknown. Says whether it was published.
async fn publish_or_warn<S: DeadLetterStore + ?Sized>(store: &S, records: Vec<crate::catalog::EventTypeInfo>) -> bool {
    if records.is_empty() {
        return true;
    }
    match store.publish_types(records).await {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(%error, "could not publish the event types into the store's catalog; will try again");
            false
        }
    }
}
