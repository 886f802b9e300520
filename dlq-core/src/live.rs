//! The live path: a handler called by the application parks its own failures.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use crate::Error;
use crate::classify::{ErrorClass, FailureInfo};
use crate::handler::{Attempt, Context, HandlerOutcome, Invocation, Registration, Runner};
use crate::record::{DeadReason, DlqId, NewDeadLetter, Parked, Payload, SourceMeta};
use crate::registry::Registry;
use crate::sealed::KeyRing;
use crate::store::prelude::*;

/// Why an annotated handler returned `Err`: the caller can always tell whether the event is
/// safe to acknowledge upstream.
///
/// ```
/// use dlq_core::{dead_letter, with_store, HandlerError, MemoryStore, classify::MarkError};
/// use std::sync::Arc;
///
/// #[dead_letter(event_type = "doc-live", max_retries = 3)]
/// async fn handle(amount: i64) -> Result<(), dlq_core::Permanent> {
///     if amount < 0 { return Err(std::io::Error::other("negative amount").permanent()); }
///     Ok(())
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = Arc::new(MemoryStore::new());
/// let result = with_store(store.clone(), handle(-5)).await;
/// match result {
///     Err(HandlerError::Parked { id, class, .. }) => {
///         assert_eq!(class, dlq_core::ErrorClass::Permanent);
///         assert!(store.get_now(id).is_some()); // safe to ack upstream
///     }
///     other => panic!("{other:?}"),
/// }
/// # });
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum HandlerError<E> {
    /// The event is durably parked: acknowledge it upstream.
    Parked {
        /// The dead-letter row: of this handler's event type, holding this event.
        id: DlqId,
        /// `true` when this failure was not stored because the row `id` already holds the
        /// same event (same event type and dedupe key, still alive: a redelivery); `false`
        /// when this failure was parked as the new row `id`.
        deduplicated: bool,
        /// How the error was classified (transient: will be retried; permanent: dead).
        class: ErrorClass,
        /// The handler's error.
        error: E,
    },
    /// The error is fatal: nothing was parked; stop consuming.
    Fatal {
        /// The handler's error.
        error: E,
    },
    /// The event is over the store's payload limit
    /// ([`crate::store::QueueStore::max_payload_bytes`]: [`DEFAULT_MAX_PAYLOAD_BYTES`](crate::store::DEFAULT_MAX_PAYLOAD_BYTES)
    /// unless the store says otherwise): a dead row (`too_large`) records the failure with
    /// the payload's first bytes, length and SHA-256, so it is visible, but **the event
    /// itself is not saved**. Acknowledging it upstream loses it: keep it elsewhere first (a
    /// broker's dead-letter topic, object storage), or raise the store's limit.
    ///
    /// "Over the limit" is the length of the event's compact JSON serialization
    /// (`serde_json::to_vec(&event)`), and the row's [`Truncation`](crate::store::Truncation) holds
    /// the length and SHA-256 of those bytes. It is decided before the store is called, from
    /// that serialization alone: which of `TooLarge` and `Parked` a call gets does not depend
    /// on how fast the machine is, and the store's park timeout bounds only the writing of the
    /// row that records it.
    TooLarge {
        /// The dead-letter row that records the failure.
        id: DlqId,
        /// How the error was classified.
        class: ErrorClass,
        /// The handler's error.
        error: E,
    },
    /// The handler failed inside a [`Scope::defer_park`] scope: nothing is parked yet. Park
    /// `letter` yourself, typically inside the caller's own database transaction
    /// (`PgStore::park_in`, `SqliteStore::park_in`), so the dead letter commits or rolls back
    /// with the rest of the caller's work.
    Deferred {
        /// The dead letter to park, with its state, retry schedule, source and dedupe key set.
        letter: Box<NewDeadLetter>,
        /// How the error was classified.
        class: ErrorClass,
        /// The handler's error.
        error: E,
    },
    /// Parking failed: do not acknowledge the event upstream.
    ParkFailed {
        /// The handler's error.
        error: E,
        /// Why the store could not park it.
        store_error: Error,
    },
}

impl<E> HandlerError<E> {
    /// Whether the event is durably parked, so it is safe to acknowledge upstream.
    pub const fn is_parked(&self) -> bool {
        matches!(self, Self::Parked { .. })
    }

    /// The dead-letter row's id: the parked event's ([`Parked`](Self::Parked)), or the row
    /// that records a [`TooLarge`](Self::TooLarge) event (which is not saved: check
    /// [`is_parked`](Self::is_parked) before acknowledging upstream). `None` when no row was
    /// written.
    pub const fn dlq_id(&self) -> Option<DlqId> {
        match self {
            Self::Parked { id, .. } | Self::TooLarge { id, .. } => Some(*id),
            _ => None,
        }
    }

    /// The handler's error.
    pub const fn error(&self) -> &E {
        match self {
            Self::Parked { error, .. }
            | Self::TooLarge { error, .. }
            | Self::Deferred { error, .. }
            | Self::Fatal { error }
            | Self::ParkFailed { error, .. } => error,
        }
    }

    /// The handler's error, by value.
    pub fn into_error(self) -> E {
        match self {
            Self::Parked { error, .. }
            | Self::TooLarge { error, .. }
            | Self::Deferred { error, .. }
            | Self::Fatal { error }
            | Self::ParkFailed { error, .. } => error,
        }
    }
}

impl<E: fmt::Display> fmt::Display for HandlerError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Parked { id, deduplicated: false, class, error } => {
                write!(f, "{error} (parked as dead letter {id}, {class})")
            }
            Self::Parked { id, deduplicated: true, class, error } => {
                write!(f, "{error} (already parked as dead letter {id}, {class})")
            }
            Self::TooLarge { id, error, .. } => {
                write!(f, "{error} (event over the store's payload limit: not saved; dead letter {id} records it)")
            }
            Self::Deferred { error, .. } => write!(f, "{error} (dead letter not parked yet: the caller parks it)"),
            Self::Fatal { error } => write!(f, "fatal: {error} (not parked)"),
            Self::ParkFailed { error, store_error } => write!(f, "{error} (parking failed: {store_error})"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for HandlerError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.error())
    }
}

type SharedStore = Arc<dyn DeadLetterStore>;

static GLOBAL_STORE: OnceLock<SharedStore> = OnceLock::new();

tokio::task_local! {
    static SCOPE: Scope;
}

/// Installs the store the live path parks into, once, at start-up.
///
/// # Errors
/// [`Error::StoreAlreadyInstalled`] on a second call.
///
/// ```
/// # fn main() -> Result<(), dlq_core::Error> {
/// dlq_core::install_store(std::sync::Arc::new(dlq_core::MemoryStore::new()))?;
/// # Ok(()) }
/// ```
pub fn install_store(store: Arc<dyn DeadLetterStore>) -> Result<(), Error> {
    GLOBAL_STORE.set(store).map_err(|_| Error::StoreAlreadyInstalled)
}

/// Runs `future` with `store` as the live path's store: shorthand for
/// `Scope::new().store(store).run(future)` (see [`Scope`]).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = std::sync::Arc::new(dlq_core::MemoryStore::new());
/// let n = dlq_core::with_store(store, async { 1 + 1 }).await;
/// assert_eq!(n, 2);
/// # });
/// ```
pub async fn with_store<F: Future>(store: Arc<dyn DeadLetterStore>, future: F) -> F::Output {
    Scope::new().store(store).run(future).await
}

/// The store the live path uses here: the [`Scope`]'s, else the installed one.
///
/// # Errors
/// [`Error::NoStore`] when neither exists.
pub fn current_store() -> Result<Arc<dyn DeadLetterStore>, Error> {
    SCOPE
        .try_with(|scope| scope.store.clone())
        .ok()
        .flatten()
        .or_else(|| GLOBAL_STORE.get().cloned())
        .ok_or(Error::NoStore)
}

/// Per-call settings of the live path: the store to park into, where the event came from,
/// and the key that makes parking it twice a no-op.
///
/// A consumer that may see an event twice (a broker redelivers after a crash, or after it
/// was told [`HandlerError::ParkFailed`] and did not acknowledge) gives each call the
/// event's identity: a second failure of the same event then returns the first dead letter
/// instead of parking a duplicate. A park that timed out can still land moments later (its
/// batch was being committed); with a dedupe key the redelivery finds that row.
///
/// The scope is a tokio task-local: it covers `future` and everything it awaits, but not a
/// task spawned inside it (`tokio::spawn`). A handler called in a spawned task falls back to
/// the installed store ([`install_store`]) without the source: wrap the spawned future in a
/// scope of its own.
///
/// ```
/// use dlq_core::{dead_letter, HandlerError, MemoryStore, Scope, adapter::SourceMeta};
/// use std::sync::Arc;
///
/// #[dead_letter(event_type = "doc-scope")]
/// async fn handle(n: u64) -> Result<(), std::io::Error> { Err(std::io::Error::other("down")) }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = Arc::new(MemoryStore::new());
/// let from = SourceMeta::kafka("payments", 3, 1_204_331);
/// let first = Scope::new().store(store.clone()).source(from.clone()).run(handle(7)).await;
/// let again = Scope::new().store(store.clone()).source(from).run(handle(7)).await;
/// assert_eq!(first.unwrap_err().dlq_id(), again.unwrap_err().dlq_id()); // one row, not two
/// assert_eq!(store.len(), 1);
/// # });
/// ```
#[derive(Clone, Default)]
pub struct Scope {
    store: Option<SharedStore>,
    keys: Option<Arc<KeyRing>>,
    source: Option<SourceMeta>,
    dedupe_key: Option<String>,
    defer_park: bool,
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("store", &self.store.is_some())
            .field("keys", &self.keys)
            .field("source", &self.source)
            .field("dedupe_key", &self.dedupe_key)
            .field("defer_park", &self.defer_park)
            .finish()
    }
}

impl Scope {
    /// A scope that changes nothing: the enclosing scope's store (or the installed one).
    pub fn new() -> Self {
        Self::default()
    }

    /// Parks into `store`.
    #[must_use]
    pub fn store(mut self, store: Arc<dyn DeadLetterStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Seals the events of encrypted types (`encrypt = true`) with `keys` instead of the
    /// installed ring ([`install_keys`](crate::sealed::install_keys)).
    ///
    /// ```
    /// use dlq_core::{dead_letter, sealed, MemoryStore, Scope};
    /// use std::sync::Arc;
    ///
    /// #[dead_letter(event_type = "doc-scope-keys", encrypt = true)]
    /// async fn handle(card: String) -> Result<(), std::io::Error> { Err(std::io::Error::other("declined")) }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let keys = sealed::KeyRing::new("k1", [("k1", [7; 32])])?;
    /// let id = Scope::new().store(store.clone()).keys(keys).run(handle("4111".into())).await.unwrap_err().dlq_id().unwrap();
    /// assert_eq!(sealed::sealed_key(&store.get_now(id).unwrap().payload), Some("k1"));
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    #[must_use]
    pub fn keys(mut self, keys: KeyRing) -> Self {
        self.keys = Some(Arc::new(keys));
        self
    }

    /// Records where the event came from; its topic/partition/offset is the dedupe key unless
    /// [`dedupe_key`](Self::dedupe_key) sets one.
    #[must_use]
    pub fn source(mut self, source: SourceMeta) -> Self {
        self.source = Some(source);
        self
    }

    /// Makes a second park of the same event return the first row (an event id, a message id).
    #[must_use]
    pub fn dedupe_key(mut self, key: impl Into<String>) -> Self {
        self.dedupe_key = Some(key.into());
        self
    }

    /// Parks nothing: a failing handler returns [`HandlerError::Deferred`] with the dead
    /// letter instead, for the caller to park in its own transaction, so that the business
    /// write and the dead letter commit together or not at all. Fatal errors are still
    /// [`HandlerError::Fatal`].
    ///
    /// ```
    /// use dlq_core::{dead_letter, store::prelude::*, HandlerError, MemoryStore, Scope};
    ///
    /// #[dead_letter(event_type = "doc-defer")]
    /// async fn handle(n: u64) -> Result<(), std::io::Error> { Err(std::io::Error::other("ledger down")) }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// match Scope::new().defer_park().run(handle(7)).await {
    ///     Err(HandlerError::Deferred { letter, .. }) => {
    ///         // With PostgreSQL: `pg_store.park_in(&mut tx, *letter).await?` before `tx.commit()`.
    ///         store.park(*letter).await?;
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// assert_eq!(store.len(), 1);
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    #[must_use]
    pub fn defer_park(mut self) -> Self {
        self.defer_park = true;
        self
    }

    /// Runs `future` in this scope. A store not set here is inherited from the enclosing scope.
    pub async fn run<F: Future>(mut self, future: F) -> F::Output {
        if self.store.is_none() {
            self.store = SCOPE.try_with(|outer| outer.store.clone()).ok().flatten();
        }
        if self.keys.is_none() {
            self.keys = SCOPE.try_with(|outer| outer.keys.clone()).ok().flatten();
        }
        SCOPE.scope(self, future).await
    }

    /// `letter` with the current scope's dedupe key and source, if any.
    fn apply_current(mut letter: NewDeadLetter) -> NewDeadLetter {
        let Ok((key, source)) = SCOPE.try_with(|s| (s.dedupe_key.clone(), s.source.clone())) else {
            return letter;
        };
        if let Some(key) = key {
            letter = letter.with_dedupe_key(key);
        }
        if let Some(source) = source {
            letter = letter.with_source(source);
        }
        letter
    }
}

/// The key ring the live path seals with here: the [`Scope`]'s, else the installed one.
fn current_keys() -> Option<Arc<KeyRing>> {
    SCOPE.try_with(|scope| scope.keys.clone()).ok().flatten().or_else(crate::sealed::installed_keys)
}

/// Seals `letter` when its type is encrypted, then parks it ([`park_observed`]); a payload
/// cut to fit once sealed is reported [`Parked::truncated`] as a store reports one it cut.
/// The first park of `reg`'s type into `store` in this process publishes the type's catalog
/// record first ([`publish_for_live`]): the tools mask what the type redacts from
/// its first row on, whether or not a retrier has started.
async fn park_sealed(
    store: &dyn DeadLetterStore,
    letter: NewDeadLetter,
    reg: Option<&Registration>,
    keys: Option<&KeyRing>,
) -> Result<Parked, Error> {
    if letter.subject.is_some() {
        once_per_store(store, FirstPark::Subject, remember_check(store)).await;
    }
    if let Some(reg) = reg {
        once_per_store(store, FirstPark::Type(reg.event_type), publish_for_live(store, reg)).await;
    }
    let sealing = reg.and_then(|r| r.sealing);
    let (letter, cut) = crate::sealed::seal_letter(letter, sealing, keys, store.max_payload_bytes())?;
    let mut parked = park_observed(store, letter).await?;
    parked.truncated |= cut && !parked.deduplicated;
    Ok(parked)
}

/// What the live path does before its first park into a store, once per store and process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum FirstPark {
    /// Remember the subject key's check value ([`remember_check`]).
    Subject,
    /// Publish the type's catalog record ([`publish_for_live`]).
    Type(&'static str),
}

/// Runs `step` unless this process has done `what` for `store` already; remembers it when the
/// step says it is done (a store that was down is tried again at the next park).
async fn once_per_store(store: &dyn DeadLetterStore, what: FirstPark, step: impl Future<Output = bool>) {
    type Done = std::sync::Mutex<std::collections::HashSet<(crate::store::StoreId, FirstPark)>>;
    static DONE: OnceLock<Done> = OnceLock::new();
    let done = DONE.get_or_init(Done::default);
    let key = (store.store_id(), what);
    if done.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&key) {
        return;
    }
    if step.await {
        done.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key);
    }
}

/// The largest payload the live path's store here keeps whole
/// ([`crate::store::QueueStore::max_payload_bytes`]); no limit without a store (the park then fails
/// with [`Error::NoStore`], or a deferred letter is cut by the store the caller parks it in).
pub(crate) fn payload_limit() -> usize {
    current_store().map_or(usize::MAX, |store| store.max_payload_bytes())
}

/// Builds the letter for a failure of `reg`'s handler, deciding its initial state. The row
/// keeps the handler's own `max_retries` whatever the class, so a redrive gets that many. A
/// payload already cut to the store's limit parks dead (`too_large`), as the store would.
pub(crate) fn letter_for(reg: &Registration, payload: Payload, failure: FailureInfo) -> NewDeadLetter {
    let mut letter =
        NewDeadLetter::new(reg.event_type, payload, failure).with_handler(reg.handler).with_version(reg.version);
    if let Some(pointer) = reg.subject {
        letter.subject = crate::subject::stamp_pointer(reg.event_type, &letter.payload, pointer);
    }
    if letter.payload.is_truncated() {
        return letter.retry(std::time::Duration::ZERO, reg.policy.max_retries).dead(DeadReason::TooLarge);
    }
    let policy = reg.policy;
    match letter.failure.class {
        ErrorClass::Permanent | ErrorClass::Fatal => {
            letter.retry(std::time::Duration::ZERO, policy.max_retries).dead(DeadReason::Permanent)
        }
        ErrorClass::Transient if policy.max_retries == 0 => {
            letter.retry(std::time::Duration::ZERO, 0).dead(DeadReason::RetriesExhausted)
        }
        ErrorClass::Transient => {
            let delay = letter.failure.retry_after.unwrap_or_else(|| policy.backoff.next_delay(1));
            // While the type's circuit is open, no sooner than its next probe.
            letter.retry(crate::circuit::live_delay(reg.event_type, delay), policy.max_retries)
        }
    }
}

/// Parks a failure of the live path and says what happened.
pub(crate) async fn park_failure<E>(
    reg: &Registration,
    payload: Result<Payload, Error>,
    failure: FailureInfo,
    error: E,
) -> HandlerError<E> {
    let class = failure.class;
    if class == ErrorClass::Fatal {
        return HandlerError::Fatal { error };
    }
    // Only an encrypted type needs the ring.
    let keys = reg.sealing.and_then(|_| current_keys());
    if SCOPE.try_with(|s| s.defer_park).unwrap_or(false) {
        let sealed = payload.and_then(|payload| {
            let letter = Scope::apply_current(letter_for(reg, payload, failure));
            Ok(crate::sealed::seal_letter(letter, reg.sealing, keys.as_deref(), payload_limit())?.0)
        });
        return match sealed {
            Ok(letter) => HandlerError::Deferred { letter: Box::new(letter), class, error },
            Err(store_error) => HandlerError::ParkFailed { error, store_error },
        };
    }
    let parked = async {
        let store = current_store()?;
        let letter = Scope::apply_current(letter_for(reg, payload?, failure));
        park_sealed(&*store, letter, Some(reg), keys.as_deref()).await
    };
    match parked.await {
        Ok(p) if p.truncated => {
            tracing::error!(
                event_type = reg.event_type,
                dlq_id = p.id,
                "event over the store's payload limit: only its first bytes are kept"
            );
            HandlerError::TooLarge { id: p.id, class, error }
        }
        Ok(p) => HandlerError::Parked { id: p.id, deduplicated: p.deduplicated, class, error },
        Err(store_error) => {
            tracing::error!(event_type = reg.event_type, %store_error, "dead letter could not be parked");
            if matches!(store_error, Error::NoStore | Error::Serialize(_) | Error::Sealed(_)) {
                // It never reached a store; `park_observed` counts the failures that did.
                crate::observe::park_failed(reg.event_type);
            }
            HandlerError::ParkFailed { error, store_error }
        }
    }
}

/// Parks `letter` in a `dlq.park` span (fields `event_type`, `class`, `dead_reason`,
/// `dlq_id`) and counts it: `dlq_parked_total`, or `dlq_park_failures_total` when the store
/// did not take it.
pub(crate) async fn park_observed(store: &dyn DeadLetterStore, mut letter: NewDeadLetter) -> Result<Parked, Error> {
    use tracing::Instrument as _;
    if letter.source.trace_context.is_none() {
        letter.source.trace_context = crate::otel::current_traceparent();
    }
    let event_type = letter.event_type.clone();
    let (class, dead_reason) = (letter.failure.class, letter.dead_reason);
    let span = tracing::info_span!(
        "dlq.park",
        event_type = %event_type,
        class = class.as_str(),
        dead_reason = dead_reason.map(DeadReason::as_str),
        dlq_id = tracing::field::Empty,
    );
    let result = store.park(letter).instrument(span.clone()).await;
    match &result {
        Ok(parked) => {
            span.record("dlq_id", parked.id);
            crate::observe::parked(&event_type, class, dead_reason);
        }
        Err(error) => {
            span.in_scope(|| tracing::warn!(%error, "park failed"));
            crate::observe::park_failed(&event_type);
        }
    }
    result
}

/// What [`Dispatcher::dispatch`] did with one raw event.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Dispatched {
    /// The handler succeeded; nothing was stored.
    Succeeded,
    /// The event is durably parked (handler failure, undecodable bytes, or no handler):
    /// acknowledge it upstream.
    Parked {
        /// The dead-letter row: of this event type, holding this event.
        id: DlqId,
        /// `true` when this failure was not stored because the row `id` already holds the
        /// same event (same event type and dedupe key, still alive: a redelivery); `false`
        /// when it was parked as the new row `id`.
        deduplicated: bool,
        /// The failure recorded (when `deduplicated`, the failure of this call, which the row
        /// does not hold: it keeps its own).
        failure: FailureInfo,
        /// Set when the event was parked dead at once.
        dead_reason: Option<DeadReason>,
    },
    /// The event is over the store's payload limit (the bytes given are longer than
    /// [`crate::store::QueueStore::max_payload_bytes`]): a dead row (`too_large`) records the failure
    /// with their first bytes, and the length and SHA-256 of the bytes exactly as given, but
    /// the event itself is not saved (see [`HandlerError::TooLarge`]).
    TooLarge {
        /// The dead-letter row that records the failure.
        id: DlqId,
        /// The failure recorded.
        failure: FailureInfo,
    },
    /// The handler's error was fatal: nothing was parked; stop consuming.
    Fatal(FailureInfo),
}

/// Runs registered handlers on raw input: the consumer-loop path.
///
/// Bytes that do not deserialize into the handler's event type, and events of a type no
/// handler is registered for, are parked raw and dead (`undecodable`, `no_handler`): nothing
/// is dropped. A store error is returned, so the caller does not acknowledge the event.
///
/// ```
/// use dlq_core::{dead_letter, handlers, adapter::Dispatched, adapter::Dispatcher, MemoryStore};
/// use std::sync::Arc;
///
/// #[dead_letter(event_type = "doc-dispatch")]
/// async fn handle(amount: u64) -> Result<(), std::io::Error> { Ok(()) }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let dispatcher = Dispatcher::new(Arc::new(MemoryStore::new()), handlers![handle]?);
/// assert_eq!(dispatcher.dispatch("doc-dispatch", b"42").await?, Dispatched::Succeeded);
/// let bad = dispatcher.dispatch("doc-dispatch", b"\"not a number\"").await?;
/// assert!(matches!(bad, Dispatched::Parked { dead_reason: Some(dlq_core::adapter::DeadReason::Undecodable), .. }));
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct Dispatcher {
    store: Arc<dyn DeadLetterStore>,
    registry: Registry,
    context: Arc<Context>,
    keys: Option<Arc<KeyRing>>,
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher").field("registry", &self.registry).finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// A dispatcher over every `#[dead_letter]` handler linked into the binary (found
    /// through `inventory`), parking into `store`. Prefer [`new`](Self::new) with an explicit
    /// [`handlers!`](macro@crate::handlers) list.
    ///
    /// # Errors
    /// A duplicate event type in the registry.
    pub fn discover(store: Arc<dyn DeadLetterStore>) -> Result<Self, Error> {
        Ok(Self::new(store, crate::registry::registry()?.clone()))
    }

    /// A dispatcher over the handlers of `registry` (see [`handlers!`](macro@crate::handlers)),
    /// parking into `store`.
    pub fn new(store: Arc<dyn DeadLetterStore>, registry: Registry) -> Self {
        Self { store, registry, context: Arc::new(Context::new()), keys: None }
    }

    /// Seals the events of encrypted types (`encrypt = true`) with `keys` instead of the
    /// installed ring ([`install_keys`](crate::sealed::install_keys)).
    #[must_use]
    pub fn keys(mut self, keys: KeyRing) -> Self {
        self.keys = Some(Arc::new(keys));
        self
    }

    /// Sets the values for `State<T>` arguments.
    #[must_use]
    pub fn context(mut self, context: Context) -> Self {
        self.context = Arc::new(context);
        self
    }

    /// The store the dispatcher parks in: where a broker adapter reads and finishes the row a
    /// replay came from before it dispatches the replay.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dlq_core::{adapter::Dispatcher, store::prelude::*, MemoryStore};
    ///
    /// let store: Arc<dyn DeadLetterStore> = Arc::new(MemoryStore::new());
    /// let dispatcher = Dispatcher::new(store.clone(), dlq_core::handlers::Registry::from_registrations([])?);
    /// assert!(Arc::ptr_eq(dispatcher.store(), &store));
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
    pub const fn store(&self) -> &Arc<dyn DeadLetterStore> {
        &self.store
    }

    /// Runs the handler for `event_type` on `bytes`. An event from a broker carries no version:
    /// it is the handler's current version (a failure parks it in that version). Rows of older
    /// versions are upcast where they are retried, by the [`Retrier`](crate::Retrier).
    ///
    /// # Errors
    /// The store's error when a failure could not be parked: do not acknowledge the event.
    pub async fn dispatch(&self, event_type: &str, bytes: &[u8]) -> Result<Dispatched, Error> {
        self.dispatch_from(event_type, bytes, SourceMeta::default()).await
    }

    /// Runs the handler for `event_type` on `bytes` that came from `source`; the source's
    /// topic/partition/offset makes parking idempotent.
    ///
    /// # Errors
    /// The store's error when a failure could not be parked.
    pub async fn dispatch_from(&self, event_type: &str, bytes: &[u8], source: SourceMeta) -> Result<Dispatched, Error> {
        let key = source.dedupe_key();
        self.dispatch_keyed(event_type, bytes, source, key).await
    }

    /// Runs the handler for `event_type` on `bytes` that came from `source`, with `dedupe_key`
    /// as the event's identity (a JetStream `stream/sequence`, an event id): a second failure
    /// of the same event returns the first dead letter. `None` parks without a key.
    ///
    /// ```
    /// use dlq_core::{dead_letter, handlers, adapter::Dispatched, adapter::Dispatcher, MemoryStore, adapter::SourceMeta};
    /// use std::sync::Arc;
    ///
    /// #[dead_letter(event_type = "doc-keyed")]
    /// async fn handle(amount: u64) -> Result<(), std::io::Error> { Err(std::io::Error::other("down")) }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let dispatcher = Dispatcher::new(store.clone(), handlers![handle]?);
    /// let from = SourceMeta::jetstream("PAYMENTS", "payments.eu", 42);
    /// for _ in 0..2 {
    ///     dispatcher.dispatch_keyed("doc-keyed", b"5", from.clone(), from.dedupe_key()).await?;
    /// }
    /// assert_eq!(store.len(), 1);
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// The store's error when a failure could not be parked.
    pub async fn dispatch_keyed(
        &self,
        event_type: &str,
        bytes: &[u8],
        source: SourceMeta,
        dedupe_key: Option<String>,
    ) -> Result<Dispatched, Error> {
        // The handler decodes the whole input. A failure parks it as the store keeps it: over
        // the store's limit (the length of `bytes`, decided before the store is called), only
        // its first bytes, with the length and SHA-256 of `bytes` exactly as given.
        let max = self.store.max_payload_bytes();
        let Ok(reg) = self.registry.get(event_type) else {
            let payload = Payload::from_bytes_within(bytes, max);
            let failure = FailureInfo::new(
                ErrorClass::Permanent,
                "no_handler",
                format!("no handler is registered for event type `{event_type}`"),
                Vec::new(),
                None,
            );
            let letter = NewDeadLetter::new(event_type, payload, failure.clone())
                .with_source(source)
                .dead(DeadReason::NoHandler);
            return self.park(letter, dedupe_key, failure, None).await;
        };
        let payload = Payload::from_bytes(bytes);
        let invocation = Invocation {
            payload: payload.clone(),
            context: Arc::clone(&self.context),
            attempt: Attempt::first(),
            runner: Runner::Dispatcher,
        };
        let stored = || if bytes.len() > max { Payload::from_bytes_within(bytes, max) } else { payload };
        let (letter, failure) = match (reg.dispatch)(invocation).await {
            HandlerOutcome::Succeeded => return Ok(Dispatched::Succeeded),
            HandlerOutcome::Failed(failure) if failure.class == ErrorClass::Fatal => {
                return Ok(Dispatched::Fatal(failure));
            }
            HandlerOutcome::Failed(failure) => (letter_for(reg, stored(), failure.clone()), failure),
            HandlerOutcome::Undecodable(failure) => {
                let mut letter = NewDeadLetter::new(reg.event_type, stored(), failure.clone())
                    .with_handler(reg.handler)
                    .with_version(reg.version)
                    .retry(std::time::Duration::ZERO, reg.policy.max_retries)
                    .dead(DeadReason::Undecodable);
                if let Some(pointer) = reg.subject {
                    letter.subject = crate::subject::stamp_pointer(reg.event_type, &letter.payload, pointer);
                }
                (letter, failure)
            }
        };
        self.park(letter.with_source(source), dedupe_key, failure, Some(reg)).await
    }

    async fn park(
        &self,
        mut letter: NewDeadLetter,
        key: Option<String>,
        failure: FailureInfo,
        reg: Option<&Registration>,
    ) -> Result<Dispatched, Error> {
        letter.dedupe_key = key;
        let dead_reason = letter.dead_reason;
        let keys = self.keys.clone().or_else(crate::sealed::installed_keys);
        let parked = park_sealed(&*self.store, letter, reg, keys.as_deref()).await?;
        Ok(if parked.truncated {
            Dispatched::TooLarge { id: parked.id, failure }
        } else {
            Dispatched::Parked { id: parked.id, deduplicated: parked.deduplicated, failure, dead_reason }
        })
    }
}

/// Has `store` keep the process's key's check value before the live path parks its first row
/// with a subject there (once per store: [`once_per_store`] remembers); a store that keeps
/// another key's is logged (without either key): the row is parked all the same. Whether it
/// is done (false: the store could not answer; tried again at the next park).
async fn remember_check(store: &dyn DeadLetterStore) -> bool {
    let Ok(Some(key)) = crate::subject::key() else { return true };
    let checked = store.subject_key_check(key.check()).await;
    match checked.and_then(|stored| crate::subject::check_key(key, &stored)) {
        Ok(()) => true,
        Err(error @ Error::Config { .. }) => {
            tracing::error!(%error, "the subject key differs from the one the store's subjects were hashed with");
            true
        }
        Err(error) => {
            tracing::warn!(%error, "could not check the subject key against the store's; will try again");
            false
        }
    }
}

/// Publishes `reg`'s record ([`EventTypeInfo::of`](crate::catalog::EventTypeInfo::of)) into `store`: what the live path and a
/// [`Dispatcher`] do before their first park of a type (once per store and
/// type: `live` remembers), so that the operator tools know from the first row what
/// the type redacts, seals and decodes. Whether it is done: a store that cannot take it now
/// is tried again at the next park; the park itself goes on (a park never waits on the
/// catalog).
async fn publish_for_live<S: DeadLetterStore + ?Sized>(store: &S, reg: &Registration) -> bool {
    let owner = format!("{}:{}:live", crate::record::host_name(), std::process::id());
    match store.publish_types(vec![crate::catalog::EventTypeInfo::of(reg, &owner)]).await {
        // A store without a catalog: nothing to publish, now or later.
        Ok(()) | Err(Error::Unsupported { .. }) => true,
        Err(error) => {
            tracing::warn!(%error, event_type = reg.event_type, "could not publish the event type into the store's catalog; will try again at its next park");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{ClaimRequest, Claimed, ListFilter, Parked, SettleReport, Settlement};
    use crate::store::{BoxFuture, StoreResult};
    use crate::{MemoryStore, Status, backoff::Backoff, backoff::RetryPolicy};
    use std::time::Duration;

    /// A store whose every call fails, as when the database is down.
    struct DownStore;

    fn down<T: Send + 'static>() -> BoxFuture<'static, StoreResult<T>> {
        Box::pin(async { Err(Error::store(std::io::Error::other("connection refused"))) })
    }

    impl QueueStore for DownStore {
        fn park(&self, _: NewDeadLetter) -> BoxFuture<'_, StoreResult<Parked>> {
            down()
        }

        fn park_many(&self, _: Vec<NewDeadLetter>) -> BoxFuture<'_, StoreResult<Vec<Parked>>> {
            down()
        }

        fn claim(&self, _: ClaimRequest) -> BoxFuture<'_, StoreResult<Vec<Claimed>>> {
            down()
        }

        fn settle(&self, _: Vec<Settlement>) -> BoxFuture<'_, StoreResult<SettleReport>> {
            down()
        }

        fn get(&self, _: DlqId) -> BoxFuture<'_, StoreResult<Option<crate::DeadLetter>>> {
            down()
        }

        fn capped_claims(&self) -> Option<&dyn CappedClaimStore> {
            None
        }
    }

    impl ReadStore for DownStore {
        fn list(&self, _: ListFilter) -> BoxFuture<'_, StoreResult<Vec<crate::DeadLetter>>> {
            down()
        }

        fn stats(&self) -> BoxFuture<'_, StoreResult<Vec<crate::admin::StatsRow>>> {
            down()
        }

        fn groups(&self, _: ListFilter) -> BoxFuture<'_, StoreResult<Vec<crate::admin::FailureGroup>>> {
            down()
        }

        fn attempts(&self, _: DlqId) -> BoxFuture<'_, StoreResult<Vec<crate::admin::AttemptRecord>>> {
            down()
        }

        fn audit(&self, _: DlqId) -> BoxFuture<'_, StoreResult<Vec<crate::admin::AuditEntry>>> {
            down()
        }

        fn audit_entry(&self, _: i64) -> BoxFuture<'_, StoreResult<Option<crate::admin::AuditEntry>>> {
            down()
        }
    }

    impl OperatorStore for DownStore {
        fn apply(&self, _: crate::store::BatchAction) -> BoxFuture<'_, StoreResult<crate::store::BatchReport>> {
            down()
        }

        fn patch(&self, _: crate::store::PatchRequest) -> BoxFuture<'_, StoreResult<i64>> {
            down()
        }

        fn patch_rows(&self, _: crate::store::PatchBatch) -> BoxFuture<'_, StoreResult<crate::store::BatchReport>> {
            down()
        }

        fn upgrade(&self, _: crate::store::VersionUpgrade) -> BoxFuture<'_, StoreResult<i64>> {
            down()
        }

        fn create_operation(
            &self,
            _: crate::store::ActionKind,
            _: serde_json::Value,
            _: crate::store::AuditNote,
        ) -> BoxFuture<'_, StoreResult<crate::store::Operation>> {
            down()
        }

        fn operation(&self, _: i64) -> BoxFuture<'_, StoreResult<Option<crate::store::Operation>>> {
            down()
        }

        fn set_operation_state(&self, _: i64, _: crate::store::OperationState) -> BoxFuture<'_, StoreResult<()>> {
            down()
        }

        fn purge(&self, _: Duration) -> BoxFuture<'_, StoreResult<u64>> {
            down()
        }
    }

    impl FleetStore for DownStore {
        fn circuits(&self) -> BoxFuture<'_, StoreResult<crate::store::Circuits>> {
            down()
        }
        fn write_circuit(
            &self,
            _: crate::store::CircuitWrite,
        ) -> BoxFuture<'_, StoreResult<Option<crate::store::Circuit>>> {
            down()
        }
        fn circuit_log(
            &self,
            _: Option<String>,
            _: usize,
        ) -> BoxFuture<'_, StoreResult<Vec<crate::store::CircuitLogEntry>>> {
            down()
        }
        fn version_schemas(&self) -> BoxFuture<'_, StoreResult<Vec<crate::catalog::VersionSchema>>> {
            down()
        }

        fn accept_schema(&self, _: crate::catalog::VersionSchema) -> BoxFuture<'_, StoreResult<()>> {
            down()
        }

        fn heartbeat(&self, _: &crate::admin::RetrierHeartbeat, _: Duration) -> BoxFuture<'_, StoreResult<()>> {
            down()
        }

        fn remove_heartbeat(&self, _: &str) -> BoxFuture<'_, StoreResult<()>> {
            down()
        }

        fn retriers(&self) -> BoxFuture<'_, StoreResult<Vec<crate::admin::RetrierHeartbeat>>> {
            down()
        }

        fn publish_types(&self, _: Vec<crate::catalog::EventTypeInfo>) -> BoxFuture<'_, StoreResult<()>> {
            down()
        }

        fn event_types(&self) -> BoxFuture<'_, StoreResult<Vec<crate::catalog::EventTypeInfo>>> {
            down()
        }

        fn singleton(&self) -> Option<&dyn SingletonStore> {
            None
        }
    }

    impl PrivacyStore for DownStore {
        fn mark_unreadable(&self, _: Vec<crate::store::Lease>) -> BoxFuture<'_, StoreResult<()>> {
            down()
        }
        fn count_unreadable(&self) -> BoxFuture<'_, StoreResult<u64>> {
            down()
        }
        fn reveal(&self, _: DlqId, _: crate::store::AuditNote) -> BoxFuture<'_, StoreResult<i64>> {
            down()
        }
        fn erase(&self, _: crate::store::EraseRequest) -> BoxFuture<'_, StoreResult<crate::store::Erasure>> {
            down()
        }

        fn erasures(&self, _: usize) -> BoxFuture<'_, StoreResult<Vec<crate::store::Erasure>>> {
            down()
        }

        fn subject_key_check(&self, _: crate::store::KeyCheck) -> BoxFuture<'_, StoreResult<crate::store::KeyCheck>> {
            down()
        }

        fn count_subject(&self, _: crate::store::SubjectHash) -> BoxFuture<'_, StoreResult<u64>> {
            down()
        }
    }

    fn echo(inv: Invocation) -> BoxFuture<'static, HandlerOutcome> {
        Box::pin(async move {
            match crate::handler::decode::<String>(&inv.payload) {
                Err(outcome) => outcome,
                Ok(s) if s == "ok" => HandlerOutcome::Succeeded,
                Ok(s) if s == "fatal" => HandlerOutcome::Failed(failure(ErrorClass::Fatal)),
                Ok(_) => HandlerOutcome::Failed(failure(ErrorClass::Transient)),
            }
        })
    }

    static ECHO: Registration = Registration {
        event_type: "echo",
        version: 1,
        upcast: &[],
        handler: "tests::echo",
        file: file!(),
        line: line!(),
        policy: RetryPolicy::new(5, Backoff::fixed(Duration::from_secs(30))),
        breaker: None,
        dispatch: echo,
        check: crate::handler::accepts_any,
        missing_state: crate::handler::needs_no_state,
        sealing: None,
        subject: None,
        redact: &[],
        schemas: None,
    };

    static NO_RETRIES: Registration =
        Registration { event_type: "once", policy: RetryPolicy::new(0, Backoff::NONE), ..ECHO };

    fn failure(class: ErrorClass) -> FailureInfo {
        FailureInfo::new(class, "Test", "it failed".into(), vec![], None)
    }

    fn payload() -> Result<Payload, Error> {
        Ok(Payload::Json(serde_json::json!("x")))
    }

    #[tokio::test]
    async fn transient_failure_is_parked_pending_with_backoff() {
        let store = Arc::new(MemoryStore::new());
        let err = with_store(store.clone(), park_failure(&ECHO, payload(), failure(ErrorClass::Transient), "e")).await;
        let id = err.dlq_id().expect("parked");
        let row = store.get_now(id).unwrap();
        assert_eq!((row.status, row.max_retries, row.handler.as_str()), (Status::Pending, 5, "tests::echo"));
        assert_eq!(row.retry_after - row.created_at, chrono::Duration::seconds(30));
    }

    #[tokio::test]
    async fn permanent_failure_is_parked_dead() {
        let store = Arc::new(MemoryStore::new());
        let err = with_store(store.clone(), park_failure(&ECHO, payload(), failure(ErrorClass::Permanent), "e")).await;
        let row = store.get_now(err.dlq_id().unwrap()).unwrap();
        assert_eq!((row.status, row.dead_reason), (Status::FailedPermanently, Some(DeadReason::Permanent)));
    }

    #[tokio::test]
    async fn zero_retries_parks_transient_failures_dead() {
        let store = Arc::new(MemoryStore::new());
        let err =
            with_store(store.clone(), park_failure(&NO_RETRIES, payload(), failure(ErrorClass::Transient), ())).await;
        let row = store.get_now(err.dlq_id().unwrap()).unwrap();
        assert_eq!(row.dead_reason, Some(DeadReason::RetriesExhausted));
    }

    #[tokio::test]
    async fn fatal_is_not_parked() {
        let store = Arc::new(MemoryStore::new());
        let err = with_store(store.clone(), park_failure(&ECHO, payload(), failure(ErrorClass::Fatal), "e")).await;
        assert!(matches!(err, HandlerError::Fatal { error: "e" }));
        assert!(store.is_empty());
    }

    #[tokio::test]
    async fn store_down_is_reported_not_swallowed() {
        let err =
            with_store(Arc::new(DownStore), park_failure(&ECHO, payload(), failure(ErrorClass::Transient), "e")).await;
        let HandlerError::ParkFailed { store_error, error } = err else { panic!("{err:?}") };
        assert_eq!(error, "e");
        assert!(store_error.to_string().contains("connection refused"), "{store_error}");
    }

    #[tokio::test]
    async fn unserializable_event_is_reported_not_swallowed() {
        let store = Arc::new(MemoryStore::new());
        let bad = Err(Error::Serialize(serde_json::from_str::<u8>("x").unwrap_err()));
        let err = with_store(store.clone(), park_failure(&ECHO, bad, failure(ErrorClass::Transient), "e")).await;
        assert!(matches!(err, HandlerError::ParkFailed { store_error: Error::Serialize(_), .. }));
        assert!(store.is_empty());
    }

    fn dispatcher(store: Arc<dyn DeadLetterStore>) -> Dispatcher {
        Dispatcher::new(store, Registry::from_registrations([&ECHO]).unwrap())
    }

    #[tokio::test]
    async fn dispatch_success_touches_no_store() {
        // DownStore fails every call, so success proves the store was never called.
        assert_eq!(dispatcher(Arc::new(DownStore)).dispatch("echo", b"\"ok\"").await.unwrap(), Dispatched::Succeeded);
    }

    #[tokio::test]
    async fn dispatch_parks_undecodable_bytes_raw() {
        let store = Arc::new(MemoryStore::new());
        let out = dispatcher(store.clone()).dispatch("echo", b"\xff\xfe not json").await.unwrap();
        let Dispatched::Parked { id, dead_reason, .. } = out else { panic!("{out:?}") };
        assert_eq!(dead_reason, Some(DeadReason::Undecodable));
        let row = store.get_now(id).unwrap();
        assert_eq!(row.payload, Payload::Raw { bytes: b"\xff\xfe not json".to_vec(), truncated: None });
        assert_eq!(row.status, Status::FailedPermanently);
    }

    #[tokio::test]
    async fn dispatch_parks_unknown_types_as_no_handler() {
        let store = Arc::new(MemoryStore::new());
        let out = dispatcher(store.clone()).dispatch("mystery", b"{}").await.unwrap();
        assert!(matches!(out, Dispatched::Parked { dead_reason: Some(DeadReason::NoHandler), .. }));
    }

    #[tokio::test]
    async fn dispatch_with_source_is_idempotent() {
        let store = Arc::new(MemoryStore::new());
        let d = dispatcher(store.clone());
        let src = SourceMeta::kafka("payments", 0, 7);
        let a = d.dispatch_from("echo", b"\"boom\"", src.clone()).await.unwrap();
        let b = d.dispatch_from("echo", b"\"boom\"", src).await.unwrap();
        let (Dispatched::Parked { id: a, .. }, Dispatched::Parked { id: b, .. }) = (a, b) else { panic!() };
        assert_eq!(a, b);
        assert_eq!(store.len(), 1);
    }

    #[tokio::test]
    async fn dispatch_store_down_is_an_error() {
        let err = dispatcher(Arc::new(DownStore)).dispatch("echo", b"\"boom\"").await.unwrap_err();
        assert!(matches!(err, Error::Store(_)));
    }

    #[tokio::test]
    async fn dispatch_fatal_parks_nothing() {
        let store = Arc::new(MemoryStore::new());
        let out = dispatcher(store.clone()).dispatch("echo", b"\"fatal\"").await.unwrap();
        assert!(matches!(out, Dispatched::Fatal(_)));
        assert!(store.is_empty());
    }

    #[test]
    fn dlq_id_names_the_row_of_a_too_large_event() {
        let too_large = HandlerError::TooLarge { id: 7, class: ErrorClass::Transient, error: "e" };
        assert_eq!((too_large.dlq_id(), too_large.is_parked()), (Some(7), false), "recorded, not saved");
        let parked = HandlerError::Parked { id: 8, deduplicated: false, class: ErrorClass::Transient, error: "e" };
        assert_eq!((parked.dlq_id(), parked.is_parked()), (Some(8), true));
        assert_eq!(HandlerError::Fatal { error: "e" }.dlq_id(), None);
    }

    /// A payload the live path already cut to the store's limit parks dead (`too_large`) and
    /// comes back as `TooLarge` with the row's id, whatever the class.
    #[tokio::test]
    async fn a_cut_payload_parks_too_large() {
        let store = Arc::new(MemoryStore::new());
        let cut = Payload::from_bytes_within(br#"{"z":1,"a":2}"#, 4);
        let err = with_store(store.clone(), park_failure(&ECHO, Ok(cut.clone()), failure(ErrorClass::Transient), "e"));
        let HandlerError::TooLarge { id, class: ErrorClass::Transient, .. } = err.await else { panic!() };
        let row = store.get_now(id).unwrap();
        assert_eq!((row.status, row.dead_reason), (Status::FailedPermanently, Some(DeadReason::TooLarge)));
        assert_eq!(row.payload, cut);
        let deferred = Scope::new().defer_park().run(park_failure(&ECHO, Ok(cut), failure(ErrorClass::Transient), ()));
        let HandlerError::Deferred { letter, .. } = deferred.await else { panic!() };
        assert_eq!(letter.dead_reason, Some(DeadReason::TooLarge), "as the store will park it");
    }

    #[tokio::test]
    async fn no_store_installed_is_reported() {
        let err = park_failure(&ECHO, payload(), failure(ErrorClass::Transient), ()).await;
        assert!(matches!(err, HandlerError::ParkFailed { store_error: Error::NoStore, .. }));
    }
}
