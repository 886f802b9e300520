//! The live path: a handler called by the application parks its own failures.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use crate::Error;
use crate::classify::{ErrorClass, FailureInfo};
use crate::handler::{Attempt, Context, HandlerOutcome, Invocation, Registration};
use crate::record::{DEFAULT_MAX_PAYLOAD_BYTES, DeadReason, DlqId, NewDeadLetter, Payload, SourceMeta};
use crate::registry::Registry;
use crate::store::DeadLetterStore;

/// Why an annotated handler returned `Err`: the caller can always tell whether the event is
/// safe to acknowledge upstream.
///
/// ```
/// use dlq_core::{dead_letter, with_store, HandlerError, MemoryStore, MarkError};
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
        /// The dead-letter row.
        id: DlqId,
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

    /// The dead-letter id, when parked.
    pub const fn dlq_id(&self) -> Option<DlqId> {
        match self {
            Self::Parked { id, .. } => Some(*id),
            _ => None,
        }
    }

    /// The handler's error.
    pub const fn error(&self) -> &E {
        match self {
            Self::Parked { error, .. } | Self::Fatal { error } | Self::ParkFailed { error, .. } => error,
        }
    }

    /// The handler's error, by value.
    pub fn into_error(self) -> E {
        match self {
            Self::Parked { error, .. } | Self::Fatal { error } | Self::ParkFailed { error, .. } => error,
        }
    }
}

impl<E: fmt::Display> fmt::Display for HandlerError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Parked { id, class, error } => write!(f, "{error} (parked as dead letter {id}, {class})"),
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
    static SCOPED_STORE: SharedStore;
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

/// Runs `future` with `store` as the live path's store for this task: the override for tests.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = std::sync::Arc::new(dlq_core::MemoryStore::new());
/// let n = dlq_core::with_store(store, async { 1 + 1 }).await;
/// assert_eq!(n, 2);
/// # });
/// ```
pub async fn with_store<F: Future>(store: Arc<dyn DeadLetterStore>, future: F) -> F::Output {
    SCOPED_STORE.scope(store, future).await
}

/// The store the live path uses here: the task's override, else the installed one.
///
/// # Errors
/// [`Error::NoStore`] when neither exists.
pub fn current_store() -> Result<Arc<dyn DeadLetterStore>, Error> {
    SCOPED_STORE.try_with(Arc::clone).ok().or_else(|| GLOBAL_STORE.get().cloned()).ok_or(Error::NoStore)
}

/// Builds the letter for a failure of `reg`'s handler, deciding its initial state.
pub(crate) fn letter_for(reg: &Registration, payload: Payload, failure: FailureInfo) -> NewDeadLetter {
    let letter = NewDeadLetter::new(reg.event_type, payload, failure).with_handler(reg.handler);
    let policy = reg.policy;
    match letter.failure.class {
        ErrorClass::Permanent | ErrorClass::Fatal => letter.dead(DeadReason::Permanent),
        ErrorClass::Transient { .. } if policy.max_retries == 0 => {
            letter.retry(std::time::Duration::ZERO, 0).dead(DeadReason::RetriesExhausted)
        }
        ErrorClass::Transient { retry_after } => {
            let delay = retry_after.unwrap_or_else(|| policy.backoff.next_delay(1));
            letter.retry(delay, policy.max_retries)
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
    let parked = async {
        let store = current_store()?;
        store.park(letter_for(reg, payload?, failure)).await
    };
    match parked.await {
        Ok(p) => HandlerError::Parked { id: p.id, class, error },
        Err(store_error) => {
            tracing::error!(event_type = reg.event_type, %store_error, "dead letter could not be parked");
            HandlerError::ParkFailed { error, store_error }
        }
    }
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
        /// The dead-letter row.
        id: DlqId,
        /// The failure recorded.
        failure: FailureInfo,
        /// Set when the event was parked dead at once.
        dead_reason: Option<DeadReason>,
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
/// use dlq_core::{dead_letter, Dispatched, Dispatcher, MemoryStore};
/// use std::sync::Arc;
///
/// #[dead_letter(event_type = "doc-dispatch")]
/// async fn handle(amount: u64) -> Result<(), std::io::Error> { Ok(()) }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let dispatcher = Dispatcher::new(Arc::new(MemoryStore::new()))?;
/// assert_eq!(dispatcher.dispatch("doc-dispatch", b"42").await?, Dispatched::Succeeded);
/// let bad = dispatcher.dispatch("doc-dispatch", b"\"not a number\"").await?;
/// assert!(matches!(bad, Dispatched::Parked { dead_reason: Some(dlq_core::DeadReason::Undecodable), .. }));
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct Dispatcher {
    store: Arc<dyn DeadLetterStore>,
    registry: Registry,
    context: Arc<Context>,
    max_payload_bytes: usize,
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher").field("registry", &self.registry).finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// A dispatcher over every registered handler, parking into `store`.
    ///
    /// # Errors
    /// A duplicate event type in the registry.
    pub fn new(store: Arc<dyn DeadLetterStore>) -> Result<Self, Error> {
        Ok(Self::with_registry(store, crate::registry()?.clone()))
    }

    /// A dispatcher over the handlers of `registry` only (see [`handlers!`](crate::handlers)).
    pub fn with_registry(store: Arc<dyn DeadLetterStore>, registry: Registry) -> Self {
        Self { store, registry, context: Arc::new(Context::new()), max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES }
    }

    /// Sets the values for `State<T>` arguments.
    #[must_use]
    pub fn context(mut self, context: Context) -> Self {
        self.context = Arc::new(context);
        self
    }

    /// Sets the largest payload stored whole.
    #[must_use]
    pub const fn max_payload_bytes(mut self, max: usize) -> Self {
        self.max_payload_bytes = max;
        self
    }

    /// Runs the handler for `event_type` on `bytes`.
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
        let payload = Payload::from_bytes(bytes, self.max_payload_bytes);
        let Ok(reg) = self.registry.get(event_type) else {
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
            let parked = self.store.park(letter).await?;
            return Ok(Dispatched::Parked { id: parked.id, failure, dead_reason: Some(DeadReason::NoHandler) });
        };
        let invocation =
            Invocation { payload: payload.clone(), context: Arc::clone(&self.context), attempt: Attempt::first() };
        let (letter, failure) = match (reg.dispatch)(invocation).await {
            HandlerOutcome::Succeeded => return Ok(Dispatched::Succeeded),
            HandlerOutcome::Failed(failure) if failure.class == ErrorClass::Fatal => {
                return Ok(Dispatched::Fatal(failure));
            }
            HandlerOutcome::Failed(failure) => (letter_for(reg, payload, failure.clone()), failure),
            HandlerOutcome::Undecodable(failure) => {
                let letter = NewDeadLetter::new(reg.event_type, payload, failure.clone())
                    .with_handler(reg.handler)
                    .retry(std::time::Duration::ZERO, reg.policy.max_retries)
                    .dead(DeadReason::Undecodable);
                (letter, failure)
            }
        };
        let letter = letter.with_source(source);
        let dead_reason = letter.dead_reason;
        let parked = self.store.park(letter).await?;
        Ok(Dispatched::Parked { id: parked.id, failure, dead_reason })
    }
}
