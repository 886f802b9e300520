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

use crate::DeadLetterStore;

mod assert;
pub mod canary;
pub mod conformance;
mod harness;

pub use assert::{Matching, assert_nothing_parked, assert_parked};
pub use harness::Harness;

/// What a conformance test's setup returns: the store under test, and whatever must live as
/// long as the test does.
///
/// Implemented for every [`DeadLetterStore`] and for a `(store, guard)` pair, whose guard (a
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
    type Store: DeadLetterStore;

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

impl<S: DeadLetterStore> Fixture for S {
    type Store = S;

    fn store(&self) -> &S {
        self
    }
}

impl<S: DeadLetterStore, G> Fixture for (S, G) {
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
#[macro_export]
macro_rules! store_conformance_tests {
    ($(#[$attr:meta])* async fn $setup:ident ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        async fn $setup($($arg: $ty),*) $(-> $ret)? $body
        $crate::__store_conformance_each!({ attrs: [$(#[$attr])*], setup: $setup, args: [$($arg: $ty),*] });
    };
    ($setup:path $(,)?) => {
        $crate::__store_conformance_each!({ setup: $setup });
    };
}

/// Calls `__store_conformance_test!` once per function of the suite.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_conformance_each {
    ($setup:tt) => {
        $crate::__store_conformance_test!($setup park_and_get);
        $crate::__store_conformance_test!($setup park_keeps_the_payload_version);
        $crate::__store_conformance_test!($setup park_raw_payloads);
        $crate::__store_conformance_test!($setup park_large_payload_whole);
        $crate::__store_conformance_test!($setup park_over_limit_is_dead_and_never_claimed);
        $crate::__store_conformance_test!($setup park_hostile_text);
        $crate::__store_conformance_test!($setup park_dead_on_arrival);
        $crate::__store_conformance_test!($setup park_many_keeps_order);
        $crate::__store_conformance_test!($setup dedupe_returns_first_id);
        $crate::__store_conformance_test!($setup dedupe_is_per_event_type);
        $crate::__store_conformance_test!($setup dedupe_parks_anew_once_finished);
        $crate::__store_conformance_test!($setup claim_takes_only_due_rows);
        $crate::__store_conformance_test!($setup concurrent_claims_are_disjoint);
        $crate::__store_conformance_test!($setup claim_only_requested_types);
        $crate::__store_conformance_test!($setup claim_limit_and_order);
        $crate::__store_conformance_test!($setup claim_shares_the_batch_among_event_types);
        $crate::__store_conformance_test!($setup claim_reclaims_expired_leases);
        $crate::__store_conformance_test!($setup settle_succeeded);
        $crate::__store_conformance_test!($setup settle_retry_not_due_until_delay);
        $crate::__store_conformance_test!($setup settle_dead_counts);
        $crate::__store_conformance_test!($setup settle_release);
        $crate::__store_conformance_test!($setup huge_delays_saturate);
        $crate::__store_conformance_test!($setup settle_fences_stale_tokens);
        $crate::__store_conformance_test!($setup settle_same_lease_twice_first_wins);
        $crate::__store_conformance_test!($setup settle_repeated_attempts);
        $crate::__store_conformance_test!($setup settle_fences_expired_leases);
        $crate::__store_conformance_test!($setup attempt_history);
        $crate::__store_conformance_test!($setup redrive_only_dead_rows);
        $crate::__store_conformance_test!($setup apply_refuses_what_it_must_and_audits_the_reason);
        $crate::__store_conformance_test!($setup operation_cursor_moves_with_its_batch_only_once);
        $crate::__store_conformance_test!($setup discard_rules);
        $crate::__store_conformance_test!($setup patch_records_diff);
        $crate::__store_conformance_test!($setup upgrade_rewrites_payload_and_version);
        $crate::__store_conformance_test!($setup patch_rows_patch_each_row_once);
        $crate::__store_conformance_test!($setup purge_by_age);
        $crate::__store_conformance_test!($setup erase_by_subject);
        $crate::__store_conformance_test!($setup subject_key_check_keeps_the_first);
        $crate::__store_conformance_test!($setup type_catalog_newest_version_wins);
        $crate::__store_conformance_test!($setup type_catalog_keeps_every_shape_of_a_version);
        $crate::__store_conformance_test!($setup list_filters_newest_first);
        $crate::__store_conformance_test!($setup list_keyset_pages_and_other_filters);
        $crate::__store_conformance_test!($setup stats_counts);
        $crate::__store_conformance_test!($setup created_histogram_buckets);
        $crate::__store_conformance_test!($setup groups_by_fingerprint);
        $crate::__store_conformance_test!($setup wait_for_work_wakes_on_park);
        $crate::__store_conformance_test!($setup wait_for_work_wakes_on_redrive);
        $crate::__store_conformance_test!($setup wait_for_work_keeps_a_park_announced_before_the_wait);
        $crate::__store_conformance_test!($setup singleton_lock_has_one_holder);
        $crate::__store_conformance_test!($setup heartbeats_refresh_and_expire);
        $crate::__store_conformance_test!($setup circuits_compare_and_set);
        $crate::__store_conformance_test!($setup circuit_trial_taken_once);
        $crate::__store_conformance_test!($setup claim_capped_keeps_the_cap);
        $crate::__store_conformance_test!($setup settle_and_claim_writes_then_claims);
        $crate::__store_conformance_test!($setup sealed_rows_keep_no_plaintext);
        $crate::__store_conformance_test!($setup sealed_rows_drain_after_rotation);
        $crate::__store_conformance_test!($setup sealed_rows_of_envelope_v1_open);
        $crate::__store_conformance_test!($setup reveal_is_audited);
        $crate::__store_conformance_test!($setup unreadable_rows_are_counted);
    };
}

/// One conformance test.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_conformance_test {
    ({ setup: $setup:path } $name:ident) => {
        #[test]
        fn $name() {
            $crate::__private::block_on(async {
                let fixture = $setup().await;
                $crate::testing::conformance::$name($crate::testing::Fixture::store(&fixture)).await;
                $crate::testing::Fixture::teardown(fixture).await;
            });
        }
    };
    ({ attrs: [$(#[$attr:meta])*], setup: $setup:ident, args: [$($arg:ident : $ty:ty),*] } $name:ident) => {
        $(#[$attr])*
        async fn $name($($arg: $ty),*) {
            let fixture = $setup($($arg),*).await;
            $crate::testing::conformance::$name($crate::testing::Fixture::store(&fixture)).await;
            $crate::testing::Fixture::teardown(fixture).await;
        }
    };
}
