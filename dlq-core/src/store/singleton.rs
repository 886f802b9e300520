//! An optional part: one retrier at a time across every process.

use super::*;

/// An optional part: a lock only one process holds at a time, for retriers configured with
/// `singleton`. A store offers it through [`FleetStore::singleton`]; one that cannot (SQLite
/// has no session-scoped lock) does not implement it, and such a retrier refuses to start.
pub trait SingletonStore: Send + Sync {
    /// Tries to take the store-wide lock of `singleton` mode: `Some` while this process holds
    /// it, `None` when another one does.
    fn try_lock_singleton(&self) -> BoxFuture<'_, StoreResult<Option<Box<dyn SingletonLock>>>>;
}
