//! What this process knows of each event type's circuit, per store ([`circuit_of`]) and for
//! the live path's store ([`circuit()`]): the views a retrier publishes and the live path reads.
//! The circuit's data is in the record ([`Circuit`], [`CircuitView`], [`StoreId`]).

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::record::{Circuit, CircuitView, StoreId};
use crate::{Error, store::prelude::*};

/// The views of every store this process read circuits from, by store and event type.
type Views = HashMap<StoreId, HashMap<String, CircuitView>>;

fn views() -> &'static RwLock<Views> {
    static VIEWS: OnceLock<RwLock<Views>> = OnceLock::new();
    VIEWS.get_or_init(RwLock::default)
}

/// What this process knows of `event_type`'s circuit in the store the live path uses here
/// ([`current_store`](crate::adapter::current_store): the [`Scope`](crate::Scope)'s store, else the
/// [installed](crate::install_store) one): kept up to date by every
/// [`Retrier`](crate::Retrier) running on that store in the process (within one poll
/// interval), or by [`refresh_circuits`] in a process that only consumes. Closed when
/// nothing is known, and without a store. [`circuit_of`] reads the views of any store.
///
/// A consumer can pause its upstream subscription while the type is open instead of parking
/// thousands of events; the live path itself parks failures of an open type with
/// `retry_after` at the next probe.
///
/// ```
/// let view = dlq_core::adapter::circuit("payment");
/// if view.is_open() || view.paused {
///     // stop pulling payments from the broker for a while
/// }
/// ```
pub fn circuit(event_type: &str) -> CircuitView {
    crate::live::current_store().map(|store| circuit_of(&*store, event_type)).unwrap_or_default()
}

/// What this process knows of `event_type`'s circuit in `store` (the views of the stores
/// with its [`store_id`](crate::store::QueueStore::store_id)): what [`circuit()`] reads for the live
/// path's store, for any store. Closed when nothing is known.
///
/// ```
/// use dlq_core::{admin::Admin, MemoryStore};
/// use std::sync::Arc;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let (paused, other) = (Arc::new(MemoryStore::new()), Arc::new(MemoryStore::new()));
/// Admin::new(paused.clone(), "alice").pause_type("payment", "ledger migration").await?;
/// dlq_core::adapter::refresh_circuits(&*paused).await?;
/// dlq_core::adapter::refresh_circuits(&*other).await?;
/// assert!(dlq_core::adapter::circuit_of(&*paused, "payment").paused);
/// assert!(!dlq_core::adapter::circuit_of(&*other, "payment").paused, "another store, other circuits");
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
pub fn circuit_of(store: &dyn DeadLetterStore, event_type: &str) -> CircuitView {
    let views = views().read().unwrap_or_else(std::sync::PoisonError::into_inner);
    views.get(&store.store_id()).and_then(|of_store| of_store.get(event_type)).copied().unwrap_or_default()
}

/// Publishes `circuits` of the store `store`, read when the store's clock said `store_now`,
/// to [`circuit_of`] (and [`circuit()`] where `store` is the live path's store).
pub(crate) fn publish<'a>(store: StoreId, circuits: impl Iterator<Item = &'a Circuit>, store_now: DateTime<Utc>) {
    let local_now = tokio::time::Instant::now();
    let label = crate::observe::store_label(&store);
    let mut views = views().write().unwrap_or_else(std::sync::PoisonError::into_inner);
    let of_store = views.entry(store).or_default();
    for c in circuits {
        let probe_at = c.open_until.map(|until| local_now + (until - store_now).to_std().unwrap_or_default());
        of_store.insert(c.event_type.clone(), CircuitView { state: c.state, paused: c.paused, probe_at });
        crate::observe::circuit_state(&label, &c.event_type, c.state, c.paused);
    }
}

/// Reads every circuit from `store` and publishes them to [`circuit_of`] `store` (and to
/// [`circuit()`] when `store` is the live path's store): for a process that parks failures
/// but runs no retrier on that store (a retrier does this itself every poll interval).
///
/// # Errors
/// The store's error ([`Error::Unsupported`] for a store without circuits).
///
/// ```
/// use dlq_core::{admin::Admin, MemoryStore};
/// use std::sync::Arc;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = Arc::new(MemoryStore::new());
/// Admin::new(store.clone(), "alice").pause_type("payment", "ledger migration").await?;
/// dlq_core::adapter::refresh_circuits(&*store).await?;
/// assert!(dlq_core::adapter::circuit_of(&*store, "payment").paused);
/// // And `dlq_core::adapter::circuit("payment")` where `store` is the live path's store:
/// assert!(dlq_core::with_store(store, async { dlq_core::adapter::circuit("payment").paused }).await);
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
pub async fn refresh_circuits(store: &dyn DeadLetterStore) -> Result<(), Error> {
    let read = store.circuits().await?;
    publish(store.store_id(), read.circuits.iter(), read.at);
    Ok(())
}

/// The live path's delay for a new transient failure of `event_type`: at least until the
/// next probe of the type's circuit in the live path's store, while it is open.
pub(crate) fn live_delay(event_type: &str, delay: Duration) -> Duration {
    circuit(event_type).next_probe_in().map_or(delay, |probe| delay.max(probe))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_id_text_leaves_credentials_out() {
        let text = |name: &str| StoreId::named(name).text();
        assert_eq!(text("postgres://db:5432/app?schema=dlq"), "postgres://db:5432/app?schema=dlq");
        assert_eq!(text("postgres://u:p@ss@db/app?schema=dlq"), "postgres://db/app?schema=dlq");
        assert_eq!(text("postgres://u@db"), "postgres://db");
        assert_eq!(text("x://db/a?sslpassword=p&Token=t&schema=s&api_secret=s"), "x://db/a?schema=s");
        assert_eq!(text("sqlite:/var/lib/dlq.db"), "sqlite:/var/lib/dlq.db");
        assert!(StoreId::unique().text().starts_with("unique-"));
    }
}
