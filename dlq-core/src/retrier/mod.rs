//! The retrier engine: claims due dead letters, runs their handlers, writes the outcomes.
//!
//! - here: [`Retrier`] and how it is built and configured, and its [`RetrierStats`];
//! - `run`: [`Retrier::run_until`] and the loops beside the claim loops (heartbeat, purge,
//!   store upkeep, singleton leadership), each worker's claim loop, [`Retrier::run_once`];
//! - `pipeline`: one batch, stage by stage: claim → open → upcast → run → decide → settle;
//! - `sealed`: the key ring and the sealing of an encrypted type's failures;
//! - `breakers`: the retrier's side of the circuits: windows, cached state, claim plans, limits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Error;
use crate::RetrierConfig;
use crate::handler::Context;
use crate::registry::Registry;
use crate::store::prelude::*;

mod breakers;
mod pipeline;
mod run;
mod sealed;

use breakers::Breakers;

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
    /// Claimed rows of encrypted types it could not open (their key is not in its ring): not
    /// run, nothing counted against them, left to a retrier that holds the key. Not part of
    /// `claimed`.
    pub sealed_unreadable: u64,
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
    sealed_unreadable: AtomicU64,
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
            sealed_unreadable: get(&self.sealed_unreadable),
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
    keys: Option<Arc<crate::sealed::KeyRing>>,
    /// [`accept_schema_change`](Retrier::accept_schema_change).
    accept_schema_change: bool,
    /// Whether the versions were checked against the catalog ([`Retrier::run_once`] checks once).
    versions_checked: Arc<std::sync::atomic::AtomicBool>,
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
            keys: self.keys.clone(),
            accept_schema_change: self.accept_schema_change,
            versions_checked: Arc::clone(&self.versions_checked),
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
    /// `inventory`, see [`registry()`](crate::handlers::registry())), with the default configuration.
    ///
    /// Convenient, but it runs whatever handlers the linker kept: prefer [`new`](Self::new)
    /// with an explicit [`handlers!`](macro@crate::handlers) list, which the compiler checks.
    ///
    /// # Errors
    /// A duplicate event type in the registry.
    pub fn discover(store: Arc<S>) -> Result<Self, Error> {
        Ok(Self::new(store, crate::registry::registry()?.clone()))
    }

    /// A retrier over the handlers of `registry`, built with [`handlers!`](macro@crate::handlers),
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
        let breakers = Arc::new(Breakers::new(&config, breakers_of(&registry), store.capped_claims().is_some()));
        Self {
            store,
            registry,
            context: Arc::new(Context::new()),
            config,
            owner: default_owner().into(),
            counters: Arc::default(),
            breakers,
            keys: None,
            accept_schema_change: false,
            versions_checked: Arc::default(),
        }
    }

    /// Sets the configuration.
    #[must_use]
    pub fn config(mut self, config: RetrierConfig) -> Self {
        if !config.owner.is_empty() {
            self.owner = config.owner.as_str().into();
        }
        self.breakers =
            Arc::new(Breakers::new(&config, breakers_of(&self.registry), self.store.capped_claims().is_some()));
        self.config = config;
        self
    }

    /// Sets the values for `State<T>` handler arguments.
    #[must_use]
    pub fn context(mut self, context: Context) -> Self {
        self.context = Arc::new(context);
        self
    }

    /// Opens and seals the rows of encrypted types (`encrypt = true`) with `keys` instead of
    /// the installed ring ([`install_keys`](crate::sealed::install_keys)). A retrier with an
    /// encrypted handler and no ring refuses to start.
    ///
    /// ```
    /// use dlq_core::{dead_letter, handlers, sealed::KeyRing, MemoryStore, Retrier};
    /// use std::sync::Arc;
    ///
    /// #[dead_letter(event_type = "doc-retrier-keys", encrypt = true)]
    /// async fn charge(card: String) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let retrier = Retrier::new(Arc::new(MemoryStore::new()), handlers![charge]?);
    /// # if dlq_core::sealed::installed_keys().is_none() {
    /// assert!(matches!(retrier.run_once().await, Err(dlq_core::Error::Sealed(_))), "no keys: no start");
    /// # }
    /// let retrier = retrier.keys(KeyRing::new("k1", [("k1", [7; 32])])?);
    /// assert_eq!(retrier.run_once().await?, 0);
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    #[must_use]
    pub fn keys(mut self, keys: crate::sealed::KeyRing) -> Self {
        self.keys = Some(Arc::new(keys));
        self
    }

    /// Starts even when a handler's event has another shape than the JSON Schema its version
    /// was first published with in the store's type catalog, and makes the handler's schema
    /// that version's there (so `dlq redrive --validate` and later starts agree with it).
    ///
    /// Without it, such a retrier refuses to start ([`Error::SchemaChanged`], naming the type,
    /// the declared and the newest version and the fix): the event changed but its
    /// `#[dead_letter(version = N)]` did not, so every parked row of version N would fail to
    /// decode and die. Bump the version and add an upcaster instead; use this only for a
    /// change that old rows still decode under (a new optional field), or once they are gone.
    /// A type whose event exports no JSON Schema is not checked.
    ///
    /// ```
    /// use dlq_core::catalog::VersionSchema;
    /// use dlq_core::{dead_letter, handlers, store::prelude::*, MemoryStore, Retrier};
    /// use std::sync::Arc;
    ///
    /// #[derive(serde::Serialize, serde::Deserialize, dlq_core::schemars::JsonSchema)]
    /// #[schemars(crate = "dlq_core::schemars")]
    /// struct Payment { amount_cents: i64, note: Option<String> }
    ///
    /// #[dead_letter(event_type = "doc-accept-schema")]
    /// async fn pay(payment: Payment) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// // Version 1 was first published without `note`.
    /// let v1 = dlq_core::catalog::EventTypeInfo::new("doc-accept-schema", 1, "old-pod");
    /// let mut v1 = v1;
    /// v1.schema = Some(serde_json::json!({"type": "object", "required": ["amount_cents"]}));
    /// store.publish_types(vec![v1]).await?;
    ///
    /// let refused = Retrier::new(store.clone(), handlers![pay]?).run_once().await.unwrap_err();
    /// assert!(matches!(refused, dlq_core::Error::SchemaChanged(_)), "{refused}");
    /// // `note` is optional: version 1's rows still decode.
    /// let retrier = Retrier::new(store.clone(), handlers![pay]?).accept_schema_change();
    /// assert_eq!(retrier.run_once().await?, 0);
    /// assert_eq!(store.version_schemas().await?.len(), 1, "the handler's schema is now version 1's");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    #[must_use]
    pub fn accept_schema_change(mut self) -> Self {
        self.accept_schema_change = true;
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
    /// use dlq_core::{MemoryStore, handlers::Registry, Retrier, RetrierConfig};
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
}

/// Each handler's event type and the breaker of its attribute, for [`Breakers::new`].
fn breakers_of(
    registry: &Registry,
) -> impl Iterator<Item = (&'static str, Option<crate::breaker_config::BreakerConfig>)> + '_ {
    registry.iter().map(|r| (r.event_type(), r.breaker()))
}

/// `host:pid:<random>`: unique even for two retriers in one process.
fn default_owner() -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{}:{}:{}", crate::record::host_name(), std::process::id(), &suffix[..8])
}

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod breaker_tests;
