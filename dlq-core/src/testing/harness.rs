//! `Harness`: an application's handlers on a fresh `MemoryStore`, retried on demand.

use std::future::Future;
use std::sync::Arc;

use crate::backoff::now;
use crate::{Context, MemoryStore, Retrier, RetrierConfig, Status, registry::Registry, with_store};

/// Runs an application's annotated handlers against a fresh [`MemoryStore`], and retries
/// their parked failures on demand, as a retrier would: River's `rivertest` for `dlq`.
///
/// - [`call`](Self::call) runs a handler call with the harness's store as the live path's
///   store, so its failures park there;
/// - [`retry_due`](Self::retry_due) runs one retrier batch over the rows due now;
/// - [`retry_next`](Self::retry_next) waits until the next row falls due, then runs a batch.
///   With tokio's clock paused (`#[tokio::test(start_paused = true)]`) the wait takes no
///   time, however long the backoff.
///
/// Check the outcome with [`assert_parked`](super::assert_parked),
/// [`assert_nothing_parked`](super::assert_nothing_parked) or the store itself
/// ([`MemoryStore::get_now`]).
///
/// ```
/// use dlq_core::testing::Harness;
/// use dlq_core::{dead_letter, handlers, Status};
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// static CALLS: AtomicU32 = AtomicU32::new(0);
///
/// /// The ledger answers 503 twice, then accepts the payment.
/// #[dead_letter(event_type = "doc-harness", max_retries = 5, backoff = "fixed", base = "1h")]
/// async fn handle_payment(amount: u64) -> Result<(), std::io::Error> {
///     if CALLS.fetch_add(1, Ordering::SeqCst) < 2 {
///         return Err(std::io::Error::other("ledger answered 503"));
///     }
///     Ok(())
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// // In a test: #[tokio::test(start_paused = true)]
/// let harness = Harness::new(handlers![handle_payment]?);
/// let id = harness.call(handle_payment(100)).await.unwrap_err().dlq_id().unwrap();
///
/// assert_eq!(harness.retry_due().await, 0, "the first retry is an hour away");
/// harness.retry_next().await; // an hour later: 503 again
/// harness.retry_next().await; // another hour: accepted
///
/// let letter = harness.store().get_now(id).unwrap();
/// assert_eq!((letter.status, letter.retry_count), (Status::Succeeded, 1));
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct Harness {
    store: MemoryStore,
    registry: Registry,
    context: Context,
}

impl Harness {
    /// A harness over the handlers of `registry` (usually [`handlers!`](macro@crate::handlers)),
    /// with an empty store.
    ///
    /// ```
    /// #[dlq_core::dead_letter(event_type = "doc-harness-new")]
    /// async fn handle_signup(user: String) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// let harness = dlq_core::testing::Harness::new(dlq_core::handlers![handle_signup]?);
    /// assert!(harness.store().is_empty());
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
    pub fn new(registry: Registry) -> Self {
        Self { store: MemoryStore::new(), registry, context: Context::new() }
    }

    /// Sets the values of the handlers' `State<T>` arguments when they are retried.
    ///
    /// ```
    /// use dlq_core::testing::Harness;
    /// use dlq_core::{dead_letter, handlers, Context, State};
    ///
    /// #[derive(Clone)]
    /// struct Ledger;
    ///
    /// #[dead_letter(event_type = "doc-harness-context")]
    /// async fn handle(amount: u64, _ledger: State<Ledger>) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// let harness = Harness::new(handlers![handle]?).context(Context::new().with(Ledger));
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
    #[must_use]
    pub fn context(mut self, context: Context) -> Self {
        self.context = context;
        self
    }

    /// The store the handlers park into.
    ///
    /// ```
    /// let harness = dlq_core::testing::Harness::new(dlq_core::handlers::Registry::default());
    /// assert_eq!(harness.store().len(), 0);
    /// ```
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// Runs `future` (a call of an annotated handler, or any code that calls them) with this
    /// harness's store as the live path's store ([`with_store`]).
    ///
    /// ```
    /// # #[dlq_core::dead_letter(event_type = "doc-harness-call")]
    /// # async fn handle(amount: u64) -> Result<(), std::io::Error> { Err(std::io::Error::other("down")) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let harness = dlq_core::testing::Harness::new(dlq_core::handlers![handle]?);
    /// let err = harness.call(handle(7)).await.unwrap_err();
    /// assert!(err.is_parked());
    /// assert_eq!(harness.store().len(), 1);
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn call<F: Future>(&self, future: F) -> F::Output {
        with_store(Arc::new(self.store.clone()), future).await
    }

    /// Runs one retrier batch ([`Retrier::run_once`]) over the rows due now, one attempt per
    /// row, and returns how many rows it ran. A production retrier runs a retry that is due
    /// at once (`backoff = "none"`) again under the same claim, up to
    /// [`RetrierConfig::immediate_retries`](crate::RetrierConfig::immediate_retries) times;
    /// the harness steps attempt by attempt instead, so that a test sees each one.
    ///
    /// # Panics
    /// When the context lacks a handler's `State<T>` (see [`context`](Self::context)).
    ///
    /// ```
    /// # #[dlq_core::dead_letter(event_type = "doc-harness-due", backoff = "none")]
    /// # async fn handle(amount: u64) -> Result<(), std::io::Error> { Err(std::io::Error::other("down")) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let harness = dlq_core::testing::Harness::new(dlq_core::handlers![handle]?);
    /// harness.call(handle(7)).await.unwrap_err();
    /// assert_eq!(harness.retry_due().await, 1); // no backoff: due at once
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn retry_due(&self) -> usize {
        if let Err(e) = self.registry.check_context(&self.context) {
            panic!("{e}: give it with `Harness::context`");
        }
        let config = RetrierConfig { immediate_retries: 0, ..RetrierConfig::default() };
        let retrier = Retrier::new(Arc::new(self.store.clone()), self.registry.clone())
            .config(config)
            .context(self.context.clone());
        retrier.run_once().await.unwrap_or_else(|e| panic!("the retrier failed on the memory store: {e}"))
    }

    /// Waits until the earliest pending row of the harness's handlers falls due, then runs
    /// [`retry_due`](Self::retry_due). With tokio's clock paused, the wait takes no time;
    /// with it running, it waits in real time.
    ///
    /// # Panics
    /// When no row of the harness's handlers is pending: there is nothing to retry.
    ///
    /// ```
    /// # #[dlq_core::dead_letter(event_type = "doc-harness-next", backoff = "fixed", base = "6h")]
    /// # async fn handle(amount: u64) -> Result<(), std::io::Error> { Err(std::io::Error::other("down")) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
    /// let harness = dlq_core::testing::Harness::new(dlq_core::handlers![handle]?);
    /// let id = harness.call(handle(7)).await.unwrap_err().dlq_id().unwrap();
    /// assert_eq!(harness.retry_next().await, 1); // six hours later, at once
    /// assert_eq!(harness.store().get_now(id).unwrap().retry_count, 1);
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn retry_next(&self) -> usize {
        let types: Vec<&str> = self.registry.event_types().collect();
        let next = self
            .store
            .snapshot()
            .into_iter()
            .filter(|l| l.status == Status::Pending && types.contains(&l.event_type.as_str()))
            .map(|l| l.retry_after)
            .min();
        let Some(next) = next else {
            panic!("retry_next: no pending dead letter of {types:?} to retry");
        };
        if let Ok(wait) = (next - now()).to_std() {
            tokio::time::sleep(wait).await;
        }
        self.retry_due().await
    }
}
