//! Broker adapters for dlq: each turns a message into a handler call with its
//! [`SourceMeta`](dlq_core::adapter::SourceMeta) filled and a dedupe key from the message's identity,
//! and settles the message by what happened:
//!
//! | handler outcome | [`Action`] | NATS JetStream | Kafka |
//! | --- | --- | --- | --- |
//! | succeeded, or the failure is durably parked | [`Ack`](Action::Ack) | ack | the offset is stored, then committed |
//! | parking failed (the database is down) | [`Retry`](Action::Retry) | nak with a delay: redelivered | not committed: handled again after a delay |
//! | over the store's payload limit | [`TooLarge`](Action::TooLarge) | term: kept in the stream, not redelivered | consumption stops: not committed |
//! | fatal error | [`Stop`](Action::Stop) | nak, consumption stops | consumption stops: not committed |
//!
//! A redelivered message (after a crash, a nak or a seek) carries the same identity, so a
//! failure parked before is not parked twice: the store returns the first row. A replay put
//! back on the broker by `republish` carries the original event's dedupe key in the
//! [`DEDUPE_KEY_HEADER`] header, and the adapters park it under that key if it fails again.
//!
//! Modules, each behind its feature (both on by default): `nats` (JetStream through
//! `async-nats`, pure Rust) and `kafka` (the Kafka protocol through `rdkafka`, which builds
//! librdkafka from the source it ships: it needs a C compiler and `make`, no system library).
//! Both clients are re-exported ([`rdkafka`], [`async_nats`]): use them from here and your
//! types are always the adapter's.
#![cfg_attr(docsrs, feature(doc_cfg))]

use dlq_core::{HandlerError, adapter::Dispatched};

#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "nats")]
pub mod nats;

/// The Kafka client the [`kafka`] adapter is built on (feature `kafka`), re-exported so that
/// an application uses the very version whose types the adapter takes (a `StreamConsumer`, a
/// `FutureProducer`), without a dependency of its own to keep in step.
///
/// ```no_run
/// use dlq_consumers::rdkafka::consumer::{Consumer, StreamConsumer};
///
/// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let consumer: StreamConsumer = dlq_consumers::kafka::consumer_config("127.0.0.1:9092", "ledger").create()?;
/// consumer.subscribe(&["payments"])?;
/// # Ok(()) }
/// ```
#[cfg(feature = "kafka")]
pub use rdkafka;

/// The NATS client the [`nats`] adapter is built on (feature `nats`), re-exported so that an
/// application uses the very version whose types the adapter takes (a JetStream `Message`, a
/// `jetstream::Context`), without a dependency of its own to keep in step.
///
/// ```no_run
/// use dlq_consumers::async_nats::jetstream;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let js = jetstream::new(dlq_consumers::async_nats::connect("127.0.0.1:4222").await?);
/// let stream = js.get_stream("PAYMENTS").await?;
/// # Ok(()) }
/// ```
#[cfg(feature = "nats")]
pub use async_nats;

/// What the consumer does with a message once its handler has run.
///
/// ```
/// use dlq_consumers::Action;
/// use dlq_core::adapter::Dispatched;
///
/// assert_eq!(Action::of_dispatch(&Ok(Dispatched::Succeeded)), Action::Ack);
/// let down: Result<Dispatched, _> = Err(dlq_core::Error::NoStore);
/// assert_eq!(Action::of_dispatch(&down), Action::Retry);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Action {
    /// Handled, or its failure is durably parked: acknowledge or commit it.
    Ack,
    /// Parking failed: do not acknowledge; have the broker deliver it again later.
    Retry,
    /// The event is over the store's payload limit: a dead row records the failure, but the
    /// event itself is not saved, so it must not be acknowledged as if it were parked.
    TooLarge,
    /// The handler's error is fatal (the pipeline is broken): stop consuming.
    Stop,
}

impl Action {
    /// The action for a [`Dispatcher`](dlq_core::adapter::Dispatcher) result.
    ///
    /// ```
    /// # use dlq_consumers::Action;
    /// assert_eq!(Action::of_dispatch(&Ok(dlq_core::adapter::Dispatched::Succeeded)), Action::Ack);
    /// ```
    pub fn of_dispatch(result: &Result<Dispatched, dlq_core::Error>) -> Self {
        match result {
            Ok(Dispatched::Succeeded | Dispatched::Parked { .. }) => Self::Ack,
            Ok(Dispatched::TooLarge { .. }) => Self::TooLarge,
            Ok(Dispatched::Fatal(_)) => Self::Stop,
            // `Dispatched` is non-exhaustive: an outcome not known here is not acked.
            Ok(_) | Err(_) => Self::Retry,
        }
    }

    /// The action for an annotated handler's result (called inside a
    /// [`Scope`](dlq_core::Scope)). A [`HandlerError::Deferred`] is not parked yet: `Retry`
    /// until the caller has parked it.
    ///
    /// ```
    /// # use dlq_consumers::Action;
    /// use dlq_core::HandlerError;
    ///
    /// let fatal: Result<(), HandlerError<&str>> = Err(HandlerError::Fatal { error: "bad credentials" });
    /// assert_eq!(Action::of_handler(&fatal), Action::Stop);
    /// assert_eq!(Action::of_handler(&Ok::<(), HandlerError<&str>>(())), Action::Ack);
    /// ```
    pub fn of_handler<T, E>(result: &Result<T, HandlerError<E>>) -> Self {
        match result {
            Ok(_) | Err(HandlerError::Parked { .. }) => Self::Ack,
            Err(HandlerError::TooLarge { .. }) => Self::TooLarge,
            Err(HandlerError::Fatal { .. }) => Self::Stop,
            Err(_) => Self::Retry,
        }
    }
}

/// What a consumer loop did, message by message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunStats {
    /// Messages whose handler succeeded (acked).
    pub succeeded: u64,
    /// Messages whose failure was parked, or found parked already (acked).
    pub parked: u64,
    /// Messages not acknowledged because parking failed (nak / seek back).
    pub retried: u64,
    /// Messages over the store's payload limit.
    pub too_large: u64,
}

impl RunStats {
    /// Counts one dispatch result.
    fn count(&mut self, result: &Result<Dispatched, dlq_core::Error>) {
        match result {
            Ok(Dispatched::Succeeded) => self.succeeded += 1,
            Ok(Dispatched::Parked { .. }) => self.parked += 1,
            Ok(Dispatched::TooLarge { .. }) => self.too_large += 1,
            Ok(_) => {}
            Err(_) => self.retried += 1,
        }
    }
}

/// Why a consumer loop stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A handler's error was fatal: consumption stopped; the message was not acknowledged.
    #[error("fatal handler error, consumption stopped: {kind}: {reason}")]
    Fatal {
        /// The error's kind (type and variant).
        kind: String,
        /// The error's message.
        reason: String,
    },
    /// An event over the store's payload limit stopped a consumer that cannot set it aside.
    #[error("event at {at} is over the store's payload limit and was not saved; consumption stopped")]
    TooLarge {
        /// Where the event is: topic/partition/offset.
        at: String,
    },
    /// The broker (connection, acknowledgement, commit) failed.
    #[error("broker error: {0}")]
    Broker(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The message lacks what the adapter needs (a JetStream message without its metadata).
    #[error("malformed message: {0}")]
    Malformed(String),
    /// The store failed (reading rows to republish, auditing them).
    #[error("store error: {0}")]
    Store(#[from] dlq_core::Error),
}

impl Error {
    fn broker(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Broker(error.into())
    }

    fn fatal(failure: &dlq_core::classify::FailureInfo) -> Self {
        Self::Fatal { kind: failure.kind.clone(), reason: failure.reason.clone() }
    }
}

/// The header a republished message carries: the dead letter's dedupe key (the original
/// message's identity), so a consumer can tell a replay from a new event.
///
/// The adapters honour it: a message that carries one valid value of it is dispatched with
/// that value as its dedupe key (see [`replay_key`]), so a replay that fails again is parked
/// under the original event's key, and its source still says where the replay was read. One
/// event keeps one key through any number of replays, and its history is found by that key.
pub const DEDUPE_KEY_HEADER: &str = "Dlq-Dedupe-Key";

/// The longest [`DEDUPE_KEY_HEADER`] value, in bytes, that an adapter takes as a dedupe key:
/// 1 KiB. The adapters' own keys (`topic/partition/offset`, `stream/sequence`) are far
/// shorter; a longer value is not a key dlq wrote.
pub const MAX_REPLAY_KEY_LEN: usize = 1024;

/// The dedupe key a [`DEDUPE_KEY_HEADER`] value stands for, or `None` when it cannot be one.
///
/// The header's value is text anyone who can publish to the topic can write, so it is taken
/// only when it is 1 to [`MAX_REPLAY_KEY_LEN`] bytes of UTF-8 without control characters
/// (no newlines, no NUL). Any other value is ignored, not refused: the message is handled
/// under its own identity (`topic/partition/offset`, `stream/sequence`) and loses nothing,
/// the header stays in its source's headers for an operator to see, and the adapter logs a
/// warning (with the value's length, not the value).
///
/// ```
/// use dlq_consumers::{replay_key, MAX_REPLAY_KEY_LEN};
///
/// assert_eq!(replay_key(b"payments/2/41"), Some("payments/2/41"));
/// assert_eq!(replay_key(b""), None);
/// assert_eq!(replay_key(b"payments/2/41\nforged: line"), None);
/// assert_eq!(replay_key(&[0xff, 0xfe]), None, "not UTF-8");
/// assert_eq!(replay_key("k".repeat(MAX_REPLAY_KEY_LEN + 1).as_bytes()), None);
/// assert!(replay_key("k".repeat(MAX_REPLAY_KEY_LEN).as_bytes()).is_some());
/// ```
pub fn replay_key(value: &[u8]) -> Option<&str> {
    if value.is_empty() || value.len() > MAX_REPLAY_KEY_LEN {
        return None;
    }
    let key = std::str::from_utf8(value).ok()?;
    (!key.chars().any(char::is_control)).then_some(key)
}

/// The dedupe key of a message: the one of its [`DEDUPE_KEY_HEADER`] values (`values`) when
/// there is exactly one and [`replay_key`] takes it, else `own`, the message's identity.
/// Logs why a header present was not taken.
#[cfg(any(feature = "kafka", feature = "nats"))]
fn pick_dedupe_key<'a>(mut values: impl Iterator<Item = &'a [u8]>, own: String) -> String {
    let Some(first) = values.next() else { return own };
    if values.next().is_some() {
        tracing::warn!(header = DEDUPE_KEY_HEADER, key = %own, "the header appears more than once: ignored, the message keeps its own dedupe key");
        return own;
    }
    if let Some(key) = replay_key(first) {
        return key.to_owned();
    }
    tracing::warn!(header = DEDUPE_KEY_HEADER, len = first.len(), max = MAX_REPLAY_KEY_LEN, key = %own,
        "the header's value is empty, too long, not UTF-8 or holds control characters: ignored, the message keeps its own dedupe key");
    own
}

/// The header a republished message carries: the id of the dead letter it came from.
///
/// Before the adapters run a replay they finish that row, when it is still alive under the
/// replay's event type and dedupe key: it is discarded through
/// [`Admin`](dlq_core::admin::Admin), audited as actor [`REPLAY_ACTOR`], "superseded by its
/// replay". `republish` discards it too, but only once the broker has acknowledged the send,
/// and a consumer may read the replay before that discard lands: a replay that failed again
/// would then be deduplicated into the row about to be discarded, and its failure would
/// vanish. Finishing the row first parks the new failure as a new row under the same key.
pub const DLQ_ID_HEADER: &str = "Dlq-Id";

/// The actor of the audit entry an adapter writes when it finishes the row a replay came from
/// (see [`DLQ_ID_HEADER`]).
///
/// ```
/// assert_eq!(dlq_consumers::REPLAY_ACTOR, "dlq-consumers");
/// ```
pub const REPLAY_ACTOR: &str = "dlq-consumers";

/// Finishes the row a replay came from, before the replay runs (see [`DLQ_ID_HEADER`]): the
/// row `source`'s [`DLQ_ID_HEADER`] names, when it is alive, of `event_type` and keyed `key`.
/// Anything else (no header, a header that is not an id, a row of another event or type, a
/// row being retried or finished) leaves the store untouched.
#[cfg(any(feature = "kafka", feature = "nats"))]
async fn supersede_origin(
    store: &std::sync::Arc<dyn dlq_core::DeadLetterStore>,
    event_type: &str,
    source: &dlq_core::adapter::SourceMeta,
    key: &str,
) -> Result<(), dlq_core::Error> {
    use dlq_core::store::{ActionKind, refusal};

    let Some(id) = source.headers.get(DLQ_ID_HEADER).and_then(|id| id.parse::<dlq_core::DlqId>().ok()) else {
        return Ok(());
    };
    let Some(row) = store.get(id).await? else { return Ok(()) };
    let movable = refusal(ActionKind::Discard, row.status, false, 0, None).is_none();
    if !movable || row.event_type != event_type || row.dedupe_key.as_deref() != Some(key) {
        return Ok(());
    }
    let at = format!(
        "{}/{}/{}",
        source.topic.as_deref().unwrap_or_default(),
        source.partition.map(|p| p.to_string()).unwrap_or_default(),
        source.offset.map(|o| o.to_string()).unwrap_or_default()
    );
    let admin = dlq_core::admin::Admin::new(store.clone(), REPLAY_ACTOR);
    admin
        .discard(dlq_core::ListFilter::default().ids([id]), &format!("superseded by its replay, read at {at}"))
        .await?;
    Ok(())
}

/// Rows a republish lists per page.
#[cfg(any(feature = "kafka", feature = "nats"))]
const REPUBLISH_PAGE: usize = 100;

/// What `kafka::republish` and `nats::republish` share: every row `filter` selects, oldest
/// first, page by page (the filter's order, `after` and `limit` are ignored, as in a
/// [`BulkPlan`](dlq_core::admin::BulkPlan): a default filter's 100 rows are no cap), that has
/// a source topic and that a discard may move (not `PROCESSING`, not `DISCARDED`: those are
/// being retried, or were dropped or republished already), is handed to `send` with its
/// topic; once the broker holds it, the row is discarded through `admin`, audited with its
/// actor and `reason`. Returns the ids sent.
#[cfg(any(feature = "kafka", feature = "nats"))]
async fn republish_rows<F, Fut>(
    admin: &dlq_core::admin::Admin,
    filter: dlq_core::ListFilter,
    reason: &str,
    mut send: F,
) -> Result<Vec<dlq_core::DlqId>, Error>
where
    F: FnMut(dlq_core::DeadLetter, String) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    use dlq_core::ListFilter;
    use dlq_core::store::{ActionKind, refusal};

    // A discard needs a reason: refused here, before anything is sent, not after the first row.
    admin.dry_run(dlq_core::admin::BulkPlan::discard(ListFilter::default(), reason))?;
    let mut done = Vec::new();
    let mut cursor = 0;
    loop {
        let page = filter.clone().oldest_first().after(cursor).limit(REPUBLISH_PAGE);
        let rows = admin.store().list(page).await?;
        let full = rows.len() == REPUBLISH_PAGE;
        let Some(last) = rows.last().map(|row| row.id) else { return Ok(done) };
        for row in rows {
            let movable = refusal(ActionKind::Discard, row.status, false, 0, None).is_none();
            let Some(topic) = row.source.topic.clone().filter(|_| movable) else { continue };
            let id = row.id;
            send(row, topic).await?;
            let report = admin.discard(ListFilter::default().ids([id]), reason).await?;
            if report.moved == 0 {
                // The consumer that read the replay may have finished the row already (see
                // DLQ_ID_HEADER); anything else changed it meanwhile.
                let finished =
                    admin.store().get(id).await?.is_some_and(|row| {
                        matches!(row.status, dlq_core::Status::Succeeded | dlq_core::Status::Discarded)
                    });
                if !finished {
                    tracing::warn!(
                        id,
                        "republished, but not discarded (it changed meanwhile): a retrier may run it too"
                    );
                }
            }
            done.push(id);
        }
        if !full {
            return Ok(done);
        }
        cursor = last;
    }
}

#[cfg(all(test, any(feature = "kafka", feature = "nats")))]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::sync::{Arc, Mutex};

    use dlq_core::admin::Admin;
    use dlq_core::{
        DlqId, ErrorClass, ListFilter, MemoryStore, Payload, Status, adapter::DeadReason, adapter::SourceMeta,
        classify::FailureInfo, store::NewDeadLetter, store::prelude::*,
    };

    use super::{DLQ_ID_HEADER, Error, REPLAY_ACTOR, republish_rows, supersede_origin};

    /// `n` dead rows read from `payments` partition 0, offsets 0.., on `store`.
    async fn dead_from_topic(store: &MemoryStore, n: i64) -> Vec<DlqId> {
        let mut ids = Vec::new();
        for offset in 0..n {
            let failure = FailureInfo::new(ErrorClass::Permanent, "E", "bad".into(), vec![], None);
            let letter = NewDeadLetter::new("payment", Payload::Json(offset.into()), failure)
                .with_source(SourceMeta::kafka("payments", 0, offset))
                .dead(DeadReason::Permanent);
            ids.push(store.park(letter).await.unwrap().id);
        }
        ids
    }

    fn admin(store: &MemoryStore) -> Admin {
        Admin::new(Arc::new(store.clone()), "alice")
    }

    /// Every matching row is sent and discarded, past `ListFilter`'s default limit of 100
    /// (the store's own `discard`, now gone, was called on at most the first page listed),
    /// oldest first; rows without a topic, and rows already discarded, are not sent again.
    #[tokio::test]
    async fn every_matching_row_is_sent_then_discarded_with_the_reason() {
        let store = MemoryStore::new();
        let ids = dead_from_topic(&store, 150).await;
        let failure = FailureInfo::new(ErrorClass::Permanent, "E", "bad".into(), vec![], None);
        let no_topic = NewDeadLetter::new("payment", Payload::Json(0.into()), failure).dead(DeadReason::Permanent);
        let no_topic = store.park(no_topic).await.unwrap().id;
        admin(&store).discard(ListFilter::default().ids([ids[0]]), "dropped before").await.unwrap();
        let sent = Mutex::new(Vec::new());
        let send = |row: dlq_core::DeadLetter, topic: String| {
            sent.lock().unwrap().push((row.id, topic));
            async { Ok(()) }
        };
        let done = republish_rows(&admin(&store), ListFilter::default(), "replay", send).await.unwrap();
        assert_eq!(done, ids[1..]);
        let sent = sent.into_inner().unwrap();
        assert_eq!(sent.iter().map(|(id, _)| *id).collect::<Vec<_>>(), ids[1..]);
        assert!(sent.iter().all(|(_, topic)| topic == "payments"));
        let audit = store.audit(ids[149]).await.unwrap();
        assert_eq!((audit[0].actor.as_str(), audit[0].reason.as_deref()), ("alice", Some("replay")));
        let discarded = ListFilter::default().status(Status::Discarded).limit(1_000);
        assert_eq!(store.count(discarded).await.unwrap(), 150);
        assert_eq!(store.get_now(no_topic).unwrap().status, Status::FailedPermanently);
    }

    /// An empty reason is refused before anything is sent; a failed send stops the run, with
    /// the rows sent before it discarded and the others untouched.
    #[tokio::test]
    async fn nothing_is_sent_without_a_reason_and_a_failed_send_stops() {
        let store = MemoryStore::new();
        let ids = dead_from_topic(&store, 3).await;
        let never = |_: dlq_core::DeadLetter, _: String| async { panic!("nothing may be sent") };
        let err = republish_rows(&admin(&store), ListFilter::default(), " ", never).await.unwrap_err();
        assert!(err.to_string().contains("needs a reason"), "{err}");
        let refused = ids[1];
        let send = move |row: dlq_core::DeadLetter, _: String| async move {
            if row.id == refused { Err(Error::Malformed("broker refused".into())) } else { Ok(()) }
        };
        let err = republish_rows(&admin(&store), ListFilter::default(), "replay", send).await.unwrap_err();
        assert!(matches!(err, Error::Malformed(_)), "{err}");
        let status = |id| store.get_now(id).unwrap().status;
        assert_eq!(
            [status(ids[0]), status(ids[1]), status(ids[2])],
            [Status::Discarded, Status::FailedPermanently, Status::FailedPermanently]
        );
    }

    /// The source of a replay of row `id` keyed `key`, read at `payments/0/offset`.
    fn replay_source(id: &str, key: &str, offset: i64) -> SourceMeta {
        let mut source = SourceMeta::kafka("payments", 0, offset);
        source.headers.insert(DLQ_ID_HEADER.to_owned(), id.to_owned());
        source.headers.insert(super::DEDUPE_KEY_HEADER.to_owned(), key.to_owned());
        source
    }

    /// A consumer reads the replay as soon as the broker holds it, before the republish has
    /// discarded the row: the replay fails again. Its failure is a new row under the
    /// original key, the row it came from finished by the consumer, the republish's own
    /// discard then moving nothing, and nothing is lost.
    #[tokio::test]
    async fn a_replay_read_before_the_republish_discards_its_row_fails_into_a_new_row() {
        let store = MemoryStore::new();
        let [first] = dead_from_topic(&store, 1).await.try_into().unwrap();
        let key = store.get_now(first).unwrap().dedupe_key.unwrap();
        let dyn_store: Arc<dyn DeadLetterStore> = Arc::new(store.clone());
        let send = |row: dlq_core::DeadLetter, _: String| {
            let (store, key) = (dyn_store.clone(), key.clone());
            async move {
                // The consumer, between the broker's acknowledgement and the discard.
                let source = replay_source(&row.id.to_string(), &key, 7);
                supersede_origin(&store, "payment", &source, &key).await.unwrap();
                let failure = FailureInfo::new(ErrorClass::Permanent, "E", "still bad".into(), vec![], None);
                let again = NewDeadLetter::new("payment", row.payload.clone(), failure)
                    .with_source(source)
                    .with_dedupe_key(key)
                    .dead(DeadReason::Permanent);
                let parked = store.park(again).await.unwrap();
                assert!(!parked.deduplicated, "the replay's failure is a new row");
                Ok(())
            }
        };
        assert_eq!(republish_rows(&admin(&store), ListFilter::default(), "replay", send).await.unwrap(), [first]);
        let mut keyed = store.list(ListFilter::default().limit(10)).await.unwrap();
        keyed.sort_by_key(|row| row.id);
        let history: Vec<_> = keyed.iter().map(|row| (row.status, row.dedupe_key.clone())).collect();
        assert_eq!(
            history,
            [(Status::Discarded, Some(key.clone())), (Status::FailedPermanently, Some(key))],
            "the event's history: the replayed row, then the replay's failure"
        );
        let audit = store.audit(first).await.unwrap();
        assert_eq!(audit.len(), 1, "one discard: the consumer's; the republish moved nothing: {audit:?}");
        assert_eq!(audit[0].actor, REPLAY_ACTOR);
        assert_eq!(audit[0].reason.as_deref(), Some("superseded by its replay, read at payments/0/7"));
    }

    /// Only the row the replay names, alive, of the consumer's event type and under the
    /// replay's key is finished: a header that is not an id, another key (a forged header),
    /// another event type, or a row already finished leave the store untouched.
    #[tokio::test]
    async fn only_the_live_row_a_replay_names_under_its_key_and_type_is_finished() {
        let store = MemoryStore::new();
        let [row] = dead_from_topic(&store, 1).await.try_into().unwrap();
        let key = store.get_now(row).unwrap().dedupe_key.unwrap();
        let dyn_store: Arc<dyn DeadLetterStore> = Arc::new(store.clone());
        let id = row.to_string();
        for (id, key, event_type) in [
            ("not-an-id", key.as_str(), "payment"),
            ("", key.as_str(), "payment"),
            (id.as_str(), "payments/0/999", "payment"),
            (id.as_str(), key.as_str(), "refund"),
            ("424242", key.as_str(), "payment"),
        ] {
            supersede_origin(&dyn_store, event_type, &replay_source(id, key, 1), key).await.unwrap();
            assert_eq!(store.get_now(row).unwrap().status, Status::FailedPermanently, "{id} {key} {event_type}");
        }
        admin(&store).discard(ListFilter::default().ids([row]), "gone").await.unwrap();
        supersede_origin(&dyn_store, "payment", &replay_source(&id, &key, 1), &key).await.unwrap();
        assert_eq!(store.audit(row).await.unwrap().len(), 1, "a finished row is not discarded again");
    }
}

/// The crate's README, its page on crates.io: its examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
