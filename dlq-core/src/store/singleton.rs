//! An optional part: one retrier at a time across every process.

use super::*;

/// An optional part: a lock only one process holds at a time, for retriers configured with
/// `singleton`. A store offers it through [`FleetStore::singleton`]; one that cannot (SQLite
/// has no session-scoped lock) does not implement it, and such a retrier refuses to start.
///
/// ```
/// use dlq_core::store::prelude::*;
/// use dlq_core::MemoryStore;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let locks = store.singleton().expect("MemoryStore has the lock");
/// let lock = locks.try_lock_singleton().await?.expect("free");
/// assert!(locks.try_lock_singleton().await?.is_none(), "one holder at a time");
/// lock.release().await;
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
pub trait SingletonStore: Send + Sync {
    /// Tries to take the store-wide lock of `singleton` mode: `Some` while this process holds
    /// it, `None` when another one does.
    fn try_lock_singleton(&self) -> BoxFuture<'_, StoreResult<Option<Box<dyn SingletonLock>>>>;
}
