//! Assertions on what a store holds, for an application's tests.

use std::fmt::Write as _;

use crate::{DeadLetter, ListFilter, Status, store::prelude::*};

/// Which rows an assertion looks at: an event type (`"payment"`) or a whole [`ListFilter`].
///
/// ```
/// use dlq_core::testing::Matching;
/// use dlq_core::{ListFilter, Status};
///
/// assert_eq!("payment".into_filter().event_type.as_deref(), Some("payment"));
/// let dead = ListFilter::default().event_type("payment").status(Status::FailedPermanently);
/// assert_eq!(dead.clone().into_filter(), dead);
/// ```
pub trait Matching {
    /// The rows to look at, as a filter.
    fn into_filter(self) -> ListFilter;
}

impl Matching for &str {
    fn into_filter(self) -> ListFilter {
        ListFilter::default().event_type(self)
    }
}

impl Matching for ListFilter {
    fn into_filter(self) -> ListFilter {
        self
    }
}

/// The statuses of a row that still waits in the store (not `SUCCEEDED` or `DISCARDED`).
const WAITING: [Status; 3] = [Status::Pending, Status::Processing, Status::FailedPermanently];

/// The one dead letter that `matching` selects among the rows still waiting in `store`
/// (`PENDING`, `PROCESSING` or `FAILED_PERMANENTLY`; a filter with a status selects that
/// status instead).
///
/// # Panics
/// When no row or more than one matches, with a message that lists what the store holds.
///
/// ```
/// use dlq_core::testing::{Harness, assert_parked};
/// use dlq_core::{dead_letter, handlers, ListFilter, Status};
///
/// #[dead_letter(event_type = "doc-assert-parked", max_retries = 5)]
/// async fn handle_refund(amount: i64) -> Result<(), std::io::Error> {
///     Err(std::io::Error::other("ledger down"))
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let harness = Harness::new(handlers![handle_refund]?);
/// harness.call(handle_refund(30)).await.unwrap_err();
///
/// let letter = assert_parked(harness.store(), "doc-assert-parked").await;
/// assert_eq!((letter.status, letter.failure.reason.as_str()), (Status::Pending, "ledger down"));
///
/// // A filter says more: here, that the row waits for a retry rather than an operator.
/// let pending = ListFilter::default().event_type("doc-assert-parked").status(Status::Pending);
/// assert_eq!(assert_parked(harness.store(), pending).await.id, letter.id);
/// # Ok::<(), dlq_core::Error>(())
/// # }).unwrap();
/// ```
///
/// A failed assertion shows the store:
///
/// ```should_panic
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = dlq_core::MemoryStore::new();
/// // panics: "expected one parked dead letter with event type "payment", found none; the store is empty"
/// dlq_core::testing::assert_parked(&store, "payment").await;
/// # });
/// ```
pub async fn assert_parked<S: DeadLetterStore + ?Sized>(store: &S, matching: impl Matching) -> DeadLetter {
    let filter = matching.into_filter();
    let mut found = Vec::new();
    match filter.status {
        Some(_) => found = list(store, filter.clone()).await,
        None => {
            for status in WAITING {
                found.extend(list(store, filter.clone().status(status)).await);
            }
        }
    }
    if found.len() == 1 {
        return found.remove(0);
    }
    let count = if found.is_empty() { "none".to_owned() } else { found.len().to_string() };
    let what = describe(&filter);
    panic!("expected one parked dead letter {what}, found {count}; {}", contents(store).await);
}

/// Asserts that no dead letter waits in `store`: every row (if any) has `SUCCEEDED` or was
/// `DISCARDED`.
///
/// # Panics
/// When a row is `PENDING`, `PROCESSING` or `FAILED_PERMANENTLY`, listing what the store holds.
///
/// ```
/// use dlq_core::testing::{Harness, assert_nothing_parked};
/// use dlq_core::{dead_letter, handlers};
///
/// #[dead_letter(event_type = "doc-assert-nothing")]
/// async fn handle_signup(user: String) -> Result<(), std::io::Error> { Ok(()) }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let harness = Harness::new(handlers![handle_signup]?);
/// harness.call(handle_signup("ada".into())).await?;
/// assert_nothing_parked(harness.store()).await;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn assert_nothing_parked<S: DeadLetterStore + ?Sized>(store: &S) {
    let stats = store.stats().await.unwrap_or_else(|e| panic!("the store could not count its dead letters: {e}"));
    let parked: u64 = stats.iter().filter(|row| WAITING.contains(&row.status)).map(|row| row.count).sum();
    if parked > 0 {
        panic!("expected no parked dead letter, found {parked}; {}", contents(store).await);
    }
}

async fn list<S: DeadLetterStore + ?Sized>(store: &S, filter: ListFilter) -> Vec<DeadLetter> {
    store.list(filter).await.unwrap_or_else(|e| panic!("the store could not list its dead letters: {e}"))
}

/// `with event type "payment", status PENDING`, or `(any)` for an empty filter.
fn describe(filter: &ListFilter) -> String {
    let mut parts = Vec::new();
    if let Some(t) = &filter.event_type {
        parts.push(format!("event type {t:?}"));
    }
    if let Some(status) = filter.status {
        parts.push(format!("status {status}"));
    }
    if let Some(fp) = &filter.fingerprint {
        parts.push(format!("fingerprint {fp:?}"));
    }
    if !filter.ids.is_empty() {
        parts.push(format!("id in {:?}", filter.ids));
    }
    if parts.is_empty() { "(any)".to_owned() } else { format!("with {}", parts.join(", ")) }
}

/// Rows shown when an assertion fails.
const SHOWN: usize = 20;

/// What the store holds, newest first, one row a line.
async fn contents<S: DeadLetterStore + ?Sized>(store: &S) -> String {
    let rows = list(store, ListFilter::default().limit(SHOWN + 1)).await;
    if rows.is_empty() {
        return "the store is empty".to_owned();
    }
    let mut out = String::from("the store holds (newest first):");
    for l in rows.iter().take(SHOWN) {
        let dead = l.dead_reason.map(|r| format!(" ({r})")).unwrap_or_default();
        let _ = write!(
            out,
            "\n  #{} {:?} {}{dead}, retries {}/{}: {}",
            l.id, l.event_type, l.status, l.retry_count, l.max_retries, l.failure.reason
        );
    }
    if rows.len() > SHOWN {
        out.push_str("\n  ...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ErrorClass, MemoryStore, Payload, classify::FailureInfo, record::DeadReason, store::NewDeadLetter};

    fn letter(event_type: &str, reason: &str) -> NewDeadLetter {
        let failure = FailureInfo::new(ErrorClass::Transient, "io", reason.to_owned(), vec![], None);
        NewDeadLetter::new(event_type, Payload::Json(serde_json::json!(1)), failure)
    }

    /// The message of the panic `future` ends with.
    async fn panic_message(future: impl std::future::Future<Output = ()>) -> String {
        use futures_util::FutureExt;
        let panic = std::panic::AssertUnwindSafe(future).catch_unwind().await.expect_err("the assertion passed");
        panic.downcast_ref::<String>().cloned().expect("a formatted panic message")
    }

    #[tokio::test]
    async fn assert_parked_returns_the_one_waiting_row_of_the_type() {
        let store = MemoryStore::new();
        store.park(letter("refund", "other type")).await.unwrap();
        let id = store.park(letter("payment", "ledger down")).await.unwrap().id;
        assert_eq!(assert_parked(&store, "payment").await.id, id);
        let dead = store.park(letter("payment", "bad").dead(DeadReason::Permanent)).await.unwrap().id;
        let filter = ListFilter::default().event_type("payment").status(Status::FailedPermanently);
        assert_eq!(assert_parked(&store, filter).await.id, dead);
    }

    #[tokio::test]
    async fn assert_parked_lists_the_store_when_nothing_matches() {
        let store = MemoryStore::new();
        let message = panic_message(async {
            assert_parked(&store, "payment").await;
        })
        .await;
        assert_eq!(
            message,
            r#"expected one parked dead letter with event type "payment", found none; the store is empty"#
        );
        store.park(letter("refund", "ledger down").dead(DeadReason::Permanent)).await.unwrap();
        store.park(letter("payment", "bad iban")).await.unwrap();
        store.park(letter("payment", "bad iban again")).await.unwrap();
        let message = panic_message(async {
            assert_parked(&store, "payment").await;
        })
        .await;
        let expected = r#"expected one parked dead letter with event type "payment", found 2; the store holds (newest first):
  #3 "payment" PENDING, retries 0/25: bad iban again
  #2 "payment" PENDING, retries 0/25: bad iban
  #1 "refund" FAILED_PERMANENTLY (permanent), retries 0/25: ledger down"#;
        assert_eq!(message, expected);
    }

    #[tokio::test]
    async fn finished_rows_are_not_parked() {
        let store = MemoryStore::new();
        assert_nothing_parked(&store).await;
        let id = store.park(letter("payment", "down")).await.unwrap().id;
        let message = panic_message(assert_nothing_parked(&store)).await;
        assert!(message.starts_with("expected no parked dead letter, found 1; the store holds"), "{message}");
        // A clone shares the rows: the admin acts on this store.
        let admin = crate::admin::Admin::new(std::sync::Arc::new(store.clone()), "test");
        admin.discard(ListFilter::default().ids([id]), "not a real payment").await.unwrap();
        assert_nothing_parked(&store).await;
        let message = panic_message(async {
            assert_parked(&store, "payment").await;
        })
        .await;
        assert!(message.contains("found none") && message.contains("DISCARDED"), "{message}");
    }
}
