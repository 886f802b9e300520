//! The optional singleton lock ([`SingletonStore`], offered by [`FleetStore::singleton`]).

use super::*;

/// The singleton lock is offered, and handed to one holder at a time, and again once it is
/// released.
pub async fn singleton_lock_has_one_holder<S: DeadLetterStore + ?Sized>(s: &S) {
    let s =
        s.singleton().expect("FleetStore::singleton offers the lock: list `singleton` only for a store that has it");
    let mut lock = s.try_lock_singleton().await.expect("try_lock_singleton").expect("a free lock");
    assert!(s.try_lock_singleton().await.expect("try_lock_singleton").is_none(), "one holder at a time");
    assert!(lock.still_held().await);
    lock.release().await;
    let again = s.try_lock_singleton().await.expect("try_lock_singleton").expect("free once released");
    again.release().await;
}
