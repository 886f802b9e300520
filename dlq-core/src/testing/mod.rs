//! Test support, behind the `testing` feature: assertions and a harness for an application's
//! own tests of its handlers, and the store conformance suite for anyone writing a
//! [`DeadLetterStore`].
//!
//! ```toml
//! [dev-dependencies]
//! dlq-core = { version = "0.1", features = ["testing"] }
//! tokio = { version = "1", features = ["rt", "macros"] }
//! ```
//!
//! The feature turns on tokio's `test-util`, so `#[tokio::test(start_paused = true)]` works
//! with those two tokio features alone.
//!
//! # Testing an application's handlers
//! A [`Harness`] runs handlers against a fresh [`MemoryStore`](crate::MemoryStore); with
//! tokio's clock paused, [`Harness::retry_next`] jumps to the next retry at once, so a test
//! of a handler with a backoff of hours takes milliseconds. [`assert_parked`] and
//! [`assert_nothing_parked`] say what is in the store, and list every row when they fail.
//!
//! ```
//! use dlq_core::testing::{Harness, assert_parked};
//! use dlq_core::{dead_letter, handlers, Permanent, classify::MarkError, Status};
//!
//! #[dead_letter(event_type = "doc-testing-payment", backoff = "exp")]
//! async fn handle_payment(currency: String) -> Result<(), Permanent> {
//!     if currency.trim() != currency {
//!         return Err(std::io::Error::other(format!("bad currency {currency:?}")).permanent());
//!     }
//!     Ok(())
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let harness = Harness::new(handlers![handle_payment]?);
//! harness.call(handle_payment("USD ".into())).await.unwrap_err();
//!
//! let letter = assert_parked(harness.store(), "doc-testing-payment").await;
//! assert_eq!(letter.status, Status::FailedPermanently);
//! assert_eq!(letter.failure.reason, r#"bad currency "USD ""#);
//! # Ok::<(), dlq_core::Error>(())
//! # }).unwrap();
//! ```
//!
//! # Testing a store
//! [`store_conformance_tests!`](crate::store_conformance_tests) generates one test per
//! function of [`conformance`], each on a fresh store from a setup function:
//!
//! ```
//! use dlq_core::MemoryStore;
//!
//! async fn fresh_store() -> MemoryStore {
//!     MemoryStore::new()
//! }
//!
//! dlq_core::store_conformance_tests!(fresh_store);
//! # fn main() {}
//! ```

use std::future::Future;

use crate::store::prelude::*;

mod assert;
pub mod canary;
pub mod conformance;
mod harness;

pub use assert::{Matching, assert_nothing_parked, assert_parked};
pub use harness::Harness;

/// What a conformance test's setup returns: the store under test, and whatever must live as
/// long as the test does.
///
/// Implemented for every store ([`QueueStore`], the first part) and for a `(store, guard)` pair, whose guard (a
/// temporary directory, a container handle) is dropped after the test. Implement it for a type
/// of your own when a passed test should clean up asynchronously, e.g. close a pool before its
/// database file is removed.
///
/// ```
/// use dlq_core::MemoryStore;
/// use dlq_core::testing::Fixture;
///
/// /// A store and the directory its files live in.
/// struct FileStore {
///     store: MemoryStore, // your store here
///     dir: std::path::PathBuf,
/// }
///
/// impl Fixture for FileStore {
///     type Store = MemoryStore;
///
///     fn store(&self) -> &MemoryStore {
///         &self.store
///     }
///
///     async fn teardown(self) {
///         // e.g. `self.store.close().await`, then the files go.
///         let _ = std::fs::remove_dir_all(&self.dir);
///     }
/// }
///
/// async fn file_store() -> FileStore {
///     let dir = std::env::temp_dir().join(format!("doc-fixture-{}", std::process::id()));
///     FileStore { store: MemoryStore::new(), dir }
/// }
///
/// dlq_core::store_conformance_tests!(file_store);
/// # fn main() {}
/// ```
pub trait Fixture {
    /// The store under test.
    type Store: QueueStore;

    /// The store under test.
    fn store(&self) -> &Self::Store;

    /// Runs after a test that passed (a failed test only drops the fixture). The default does
    /// nothing.
    fn teardown(self) -> impl Future<Output = ()>
    where
        Self: Sized,
    {
        async {}
    }
}

impl<S: QueueStore> Fixture for S {
    type Store = S;

    fn store(&self) -> &S {
        self
    }
}

impl<S: QueueStore, G> Fixture for (S, G) {
    type Store = S;

    fn store(&self) -> &S {
        &self.0
    }
}

/// Generates one test per function of the [conformance suite](crate::testing::conformance),
/// each on a fresh store from a setup function (needs the `testing` feature).
///
/// **The common form** names an `async fn` with no arguments that returns a fresh store, or
/// any [`Fixture`]. Each test is a plain `#[test]` that runs on a current-thread tokio runtime
/// of its own (tokio's clock running): the test crate needs no dependency but `dlq-core`.
///
/// ```
/// use dlq_core::MemoryStore;
///
/// async fn fresh_store() -> MemoryStore {
///     MemoryStore::new()
/// }
///
/// dlq_core::store_conformance_tests!(fresh_store);
/// # fn main() {}
/// ```
///
/// **The attribute form** takes a whole setup function, with its test attributes and
/// arguments. Every test gets those attributes and arguments and hands them to the setup
/// function: use it when a test attribute provides the database, as `#[sqlx::test]` gives
/// each test a fresh one (a test file with
/// `sqlx = { version = "0.9", features = ["runtime-tokio", "postgres"] }` in its dev-dependencies):
///
/// ```ignore
/// use dlq_sqlx::{PgConfig, PgStore};
/// use sqlx::PgPool;
///
/// dlq_core::store_conformance_tests! {
///     #[sqlx::test(migrations = false)]
///     async fn pg_store(pool: PgPool) -> PgStore {
///         PgStore::from_pool(pool, PgConfig::default()).await.expect("migrated store")
///     }
/// }
/// ```
///
/// With `#[tokio::test]` it needs tokio's `rt` and `macros` features:
///
/// ```
/// dlq_core::store_conformance_tests! {
///     #[tokio::test]
///     async fn memory_store() -> dlq_core::MemoryStore {
///         dlq_core::MemoryStore::new()
///     }
/// }
/// # fn main() {}
/// ```
///
/// The tests are named after the suite's functions (`park_and_get`, `claim_takes_only_due_rows`,
/// ...): invoke the macro once per module, in a test file or a `#[cfg(test)] mod` of its own.
///
/// **Parts.** Without a list, the macro runs the parts every [`DeadLetterStore`](crate::DeadLetterStore)
/// has: `queue`, `reads`, `operator`, `fleet` and `privacy` (one module of
/// [`conformance`] each). A list in brackets before the setup runs those parts only: a store
/// that so far implements [`QueueStore`] alone runs `[queue]`, and a store with the optional
/// parts adds `singleton` and `capped_claims`. A part the store lacks does not compile.
///
/// ```
/// use dlq_core::MemoryStore;
///
/// async fn fresh_store() -> MemoryStore {
///     MemoryStore::new()
/// }
///
/// dlq_core::store_conformance_tests!([queue, reads, operator, fleet, privacy, singleton, capped_claims] fresh_store);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! store_conformance_tests {
    ([$($part:ident),* $(,)?] $(#[$attr:meta])* async fn $setup:ident ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        async fn $setup($($arg: $ty),*) $(-> $ret)? $body
        $crate::__store_conformance_each!({ attrs: [$(#[$attr])*], setup: $setup, args: [$($arg: $ty),*] } [$($part),*]);
    };
    ($(#[$attr:meta])* async fn $setup:ident ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $crate::store_conformance_tests!([queue, reads, operator, fleet, privacy] $(#[$attr])* async fn $setup($($arg: $ty),*) $(-> $ret)? $body);
    };
    ([$($part:ident),* $(,)?] $setup:path $(,)?) => {
        $crate::__store_conformance_each!({ setup: $setup } [$($part),*]);
    };
    ($setup:path $(,)?) => {
        $crate::__store_conformance_each!({ setup: $setup } [queue, reads, operator, fleet, privacy]);
    };
}

/// Calls `__store_conformance_test!` once per function of the listed parts of the suite.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_conformance_each {
    ($setup:tt [$($part:ident),*]) => {
        $($crate::__store_conformance_each!($setup $part);)*
    };
    ($setup:tt queue) => {
        $crate::__store_conformance_test!($setup queue::park_and_get);
        $crate::__store_conformance_test!($setup queue::park_keeps_the_payload_version);
        $crate::__store_conformance_test!($setup queue::park_raw_payloads);
        $crate::__store_conformance_test!($setup queue::park_large_payload_whole);
        $crate::__store_conformance_test!($setup queue::park_dead_on_arrival);
        $crate::__store_conformance_test!($setup queue::park_many_keeps_order);
        $crate::__store_conformance_test!($setup queue::claim_takes_only_due_rows);
        $crate::__store_conformance_test!($setup queue::concurrent_claims_are_disjoint);
        $crate::__store_conformance_test!($setup queue::claim_only_requested_types);
        $crate::__store_conformance_test!($setup queue::claim_limit_and_order);
        $crate::__store_conformance_test!($setup queue::claim_shares_the_batch_among_event_types);
        $crate::__store_conformance_test!($setup queue::claim_reclaims_expired_leases);
        $crate::__store_conformance_test!($setup queue::settle_succeeded);
        $crate::__store_conformance_test!($setup queue::settle_retry_not_due_until_delay);
        $crate::__store_conformance_test!($setup queue::settle_dead_counts);
        $crate::__store_conformance_test!($setup queue::huge_delays_saturate);
        $crate::__store_conformance_test!($setup queue::settle_fences_stale_tokens);
        $crate::__store_conformance_test!($setup queue::wait_for_work_wakes_on_park);
        $crate::__store_conformance_test!($setup queue::wait_for_work_keeps_a_park_announced_before_the_wait);
        $crate::__store_conformance_test!($setup queue::settle_and_claim_writes_then_claims);
    };
    ($setup:tt reads) => {
        $crate::__store_conformance_test!($setup reads::attempt_history);
        $crate::__store_conformance_test!($setup reads::list_filters_newest_first);
        $crate::__store_conformance_test!($setup reads::list_keyset_pages_and_other_filters);
        $crate::__store_conformance_test!($setup reads::stats_counts);
        $crate::__store_conformance_test!($setup reads::created_histogram_buckets);
        $crate::__store_conformance_test!($setup reads::groups_by_fingerprint);
        $crate::__store_conformance_test!($setup reads::dedupe_is_per_event_type);
        $crate::__store_conformance_test!($setup reads::dedupe_returns_first_id);
        $crate::__store_conformance_test!($setup reads::settle_release);
        $crate::__store_conformance_test!($setup reads::settle_same_lease_twice_first_wins);
        $crate::__store_conformance_test!($setup reads::settle_repeated_attempts);
        $crate::__store_conformance_test!($setup reads::settle_fences_expired_leases);
    };
    ($setup:tt operator) => {
        $crate::__store_conformance_test!($setup operator::redrive_only_dead_rows);
        $crate::__store_conformance_test!($setup operator::apply_refuses_what_it_must_and_audits_the_reason);
        $crate::__store_conformance_test!($setup operator::operation_cursor_moves_with_its_batch_only_once);
        $crate::__store_conformance_test!($setup operator::discard_rules);
        $crate::__store_conformance_test!($setup operator::patch_records_diff);
        $crate::__store_conformance_test!($setup operator::upgrade_rewrites_payload_and_version);
        $crate::__store_conformance_test!($setup operator::patch_rows_patch_each_row_once);
        $crate::__store_conformance_test!($setup operator::purge_by_age);
        $crate::__store_conformance_test!($setup operator::wait_for_work_wakes_on_redrive);
        $crate::__store_conformance_test!($setup operator::park_over_limit_is_dead_and_never_claimed);
        $crate::__store_conformance_test!($setup operator::park_hostile_text);
        $crate::__store_conformance_test!($setup operator::dedupe_parks_anew_once_finished);
    };
    ($setup:tt fleet) => {
        $crate::__store_conformance_test!($setup fleet::type_catalog_newest_version_wins);
        $crate::__store_conformance_test!($setup fleet::type_catalog_keeps_every_shape_of_a_version);
        $crate::__store_conformance_test!($setup fleet::heartbeats_refresh_and_expire);
        $crate::__store_conformance_test!($setup fleet::circuits_compare_and_set);
        $crate::__store_conformance_test!($setup fleet::circuit_trial_taken_once);
    };
    ($setup:tt privacy) => {
        $crate::__store_conformance_test!($setup privacy::erase_by_subject);
        $crate::__store_conformance_test!($setup privacy::subject_key_check_keeps_the_first);
        $crate::__store_conformance_test!($setup privacy::sealed_rows_keep_no_plaintext);
        $crate::__store_conformance_test!($setup privacy::sealed_rows_drain_after_rotation);
        $crate::__store_conformance_test!($setup privacy::sealed_rows_of_envelope_v1_open);
        $crate::__store_conformance_test!($setup privacy::reveal_is_audited);
        $crate::__store_conformance_test!($setup privacy::unreadable_rows_are_counted);
    };
    ($setup:tt singleton) => {
        $crate::__store_conformance_test!($setup singleton::singleton_lock_has_one_holder);
    };
    ($setup:tt capped_claims) => {
        $crate::__store_conformance_test!($setup capped_claims::claim_capped_keeps_the_cap);
    };
}

/// One conformance test.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_conformance_test {
    ({ setup: $setup:path } $part:ident :: $name:ident) => {
        #[test]
        fn $name() {
            $crate::__private::block_on(async {
                let fixture = $setup().await;
                $crate::testing::conformance::$part::$name($crate::testing::Fixture::store(&fixture)).await;
                $crate::testing::Fixture::teardown(fixture).await;
            });
        }
    };
    ({ attrs: [$(#[$attr:meta])*], setup: $setup:ident, args: [$($arg:ident : $ty:ty),*] } $part:ident :: $name:ident) => {
        $(#[$attr])*
        async fn $name($($arg: $ty),*) {
            let fixture = $setup($($arg),*).await;
            $crate::testing::conformance::$part::$name($crate::testing::Fixture::store(&fixture)).await;
            $crate::testing::Fixture::teardown(fixture).await;
        }
    };
}
