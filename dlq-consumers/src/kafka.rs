//! Kafka (feature `kafka`, through `rdkafka`): a consumed record into a handler call, with
//! its offset committed only once the record is done.
//!
//! A record's identity is `topic/partition/offset`: [`source_of`] fills
//! [`SourceMeta::kafka`] with it, the headers, the record's key (header [`KEY_HEADER`]) and
//! the `traceparent` header as trace context, and its dedupe key ([`dedupe_key`]) makes a
//! redelivered record park once. A replay sent by [`republish`] keeps the identity of the
//! event it replays: its [`DEDUPE_KEY_HEADER`] is its dedupe key, so if it fails again it is
//! parked under the original key (as a new row, the row it came from being discarded), while
//! its source records where the replay was read. [`KafkaConsumer::run`] handles the records
//! of each partition in order and settles each one:
//!
//! - handled or parked → its offset is **stored**, and committed with the next commit
//!   (every `auto.commit.interval.ms`, at a rebalance, and when the loop ends): the partition
//!   moves on;
//! - parking failed (the store is down) → **nothing is stored**: the same record is handled
//!   again after [`KafkaConsumer::retry_delay`] (doubling up to 30 s) until it is done, so no
//!   offset is ever committed past it. While it waits, the loop does not take new records;
//!   past the consumer's `max.poll.interval.ms` (5 minutes by default) Kafka gives its
//!   partitions to another member, which starts from the last committed offset;
//! - over the store's payload limit, or a fatal error → the loop stops with
//!   [`Error::TooLarge`] or [`Error::Fatal`], and the record's offset is not committed.
//!
//! Offsets are stored, not committed one by one: the consumer must be created with
//! `enable.auto.offset.store=false`, as [`consumer_config`] does, or the client would commit
//! records that are not done yet. A crash loses at most the stored offsets not yet
//! committed: those records are delivered again, handled again (at least once), and a failure
//! parked before the crash is found by its dedupe key instead of being parked twice.
//!
//! A member that is killed (no clean leave) keeps its partitions until the group coordinator
//! misses its heartbeats for `session.timeout.ms` (45 s by default): only then does another
//! member of the group get them and resume from their committed offsets. Lower it (it must
//! stay within the broker's `group.min.session.timeout.ms`, 6 s by default) to fail over
//! sooner. A consumer dropped after [`KafkaConsumer::run`] returns leaves the group at once.
//!
//! ```no_run
//! use std::sync::Arc;
//! use dlq_consumers::kafka::{self, KafkaConsumer};
//! use dlq_core::{dead_letter, handlers, adapter::Dispatcher};
//! use rdkafka::consumer::{Consumer, StreamConsumer};
//!
//! #[dead_letter(event_type = "payment")]
//! async fn handle_payment(amount_cents: i64) -> Result<(), std::io::Error> { Ok(()) }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(dlq_sqlx::PgStore::connect("postgres://postgres@127.0.0.1:5432/postgres").await?);
//! let consumer: StreamConsumer = kafka::consumer_config("127.0.0.1:9092", "ledger").create()?;
//! consumer.subscribe(&["payments"])?;
//! let adapter = KafkaConsumer::new(Dispatcher::new(store, handlers![handle_payment]?), "payment");
//! let stats = adapter.run(&consumer, async { tokio::signal::ctrl_c().await.ok(); }).await?;
//! println!("{} handled, {} parked", stats.succeeded, stats.parked);
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use dlq_core::{DlqId, ListFilter, Scope, adapter::Dispatched, adapter::Dispatcher, adapter::SourceMeta};
use rdkafka::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use crate::{Action, DEDUPE_KEY_HEADER, DLQ_ID_HEADER, Error, RunStats};

/// The header of a parked record's [`SourceMeta`] that keeps the record's key (UTF-8 as it
/// is, other bytes as `0x`-prefixed hex); [`republish`] sends it as the key again.
///
/// ```
/// use rdkafka::message::{OwnedMessage, Timestamp};
/// let record = OwnedMessage::new(None, Some(vec![0xff, 0x01]), "payments".into(), Timestamp::NotAvailable, 0, 7, None);
/// let source = dlq_consumers::kafka::source_of(&record);
/// assert_eq!(source.headers[dlq_consumers::kafka::KEY_HEADER], "0xff01");
/// ```
pub const KEY_HEADER: &str = "Kafka-Key";

/// The W3C trace-context header copied into [`SourceMeta::trace_context`].
const TRACEPARENT: &str = "traceparent";

/// The longest wait between two tries of a record whose parking failed.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);

/// A consumer configuration for [`KafkaConsumer::run`]: `bootstrap.servers` and `group.id`
/// as given, offsets stored by the adapter only once a record is done
/// (`enable.auto.offset.store=false`) and committed by the client every second, and a new
/// group starting at the earliest record. Set more keys on the result before `create()`.
///
/// ```
/// let config = dlq_consumers::kafka::consumer_config("127.0.0.1:9092", "ledger");
/// assert_eq!(config.get("enable.auto.offset.store"), Some("false"));
/// ```
pub fn consumer_config(bootstrap_servers: &str, group_id: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap_servers)
        .set("group.id", group_id)
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest");
    config
}

/// The source metadata of a Kafka record: topic, partition, offset, headers (several values
/// of one header joined with `", "`; values that are not UTF-8 as `0x`-prefixed hex), the
/// key under [`KEY_HEADER`], and the `traceparent` header as trace context.
///
/// ```
/// use rdkafka::message::{Header, OwnedHeaders, OwnedMessage, Timestamp};
///
/// let headers = OwnedHeaders::new().insert(Header { key: "traceparent", value: Some("00-4bf9-01") });
/// let record = OwnedMessage::new(None, Some(b"customer-7".to_vec()), "payments".into(),
///     Timestamp::NotAvailable, 2, 41, Some(headers));
/// let source = dlq_consumers::kafka::source_of(&record);
/// assert_eq!(source.dedupe_key().as_deref(), Some("payments/2/41"));
/// assert_eq!(source.headers["Kafka-Key"], "customer-7");
/// assert_eq!(source.trace_context.as_deref(), Some("00-4bf9-01"));
/// ```
pub fn source_of<M: Message>(record: &M) -> SourceMeta {
    let mut source = SourceMeta::kafka(record.topic(), record.partition(), record.offset());
    if let Some(key) = record.key() {
        source.headers.insert(KEY_HEADER.to_owned(), text(key));
    }
    if let Some(headers) = record.headers() {
        for header in headers.iter() {
            let value = header.value.map(text).unwrap_or_default();
            if header.key.eq_ignore_ascii_case(TRACEPARENT) && source.trace_context.is_none() {
                source.trace_context = Some(value.clone());
            }
            source
                .headers
                .entry(header.key.to_owned())
                .and_modify(|joined| {
                    joined.push_str(", ");
                    joined.push_str(&value);
                })
                .or_insert(value);
        }
    }
    source
}

/// The dedupe key of a record: the original event's key when the record is a replay
/// carrying a valid [`DEDUPE_KEY_HEADER`] (see [`replay_key`](crate::replay_key); a value
/// that is too long, not UTF-8, holds control characters or appears twice is ignored), else
/// the record's own identity `topic/partition/offset`. [`KafkaConsumer::dispatch`] and
/// [`scope_for`] park a failure under it, so a replay that fails again is parked under the
/// key of the event it replays, not under its own offset.
///
/// ```
/// use rdkafka::message::{Header, OwnedHeaders, OwnedMessage, Timestamp};
/// use dlq_consumers::DEDUPE_KEY_HEADER;
///
/// let record = |headers| OwnedMessage::new(None, None, "payments".into(), Timestamp::NotAvailable, 1, 90, headers);
/// assert_eq!(dlq_consumers::kafka::dedupe_key(&record(None)), "payments/1/90");
/// let replay = OwnedHeaders::new().insert(Header { key: DEDUPE_KEY_HEADER, value: Some("payments/2/41") });
/// assert_eq!(dlq_consumers::kafka::dedupe_key(&record(Some(replay))), "payments/2/41");
/// let forged = OwnedHeaders::new().insert(Header { key: DEDUPE_KEY_HEADER, value: Some("x\r\ny") });
/// assert_eq!(dlq_consumers::kafka::dedupe_key(&record(Some(forged))), "payments/1/90");
/// ```
pub fn dedupe_key<M: Message>(record: &M) -> String {
    dedupe_key_of(record, &source_of(record))
}

/// [`dedupe_key`] of `record`, whose source is `source`.
fn dedupe_key_of<M: Message>(record: &M, source: &SourceMeta) -> String {
    // A Kafka source always has one: its topic, partition and offset.
    let own = source.dedupe_key().unwrap_or_default();
    let Some(headers) = record.headers() else { return own };
    let values =
        headers.iter().filter(|header| header.key == DEDUPE_KEY_HEADER).map(|header| header.value.unwrap_or_default());
    crate::pick_dedupe_key(values, own)
}

/// `bytes` as text: UTF-8 as it is, anything else as `0x`-prefixed lowercase hex.
fn text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => format!("0x{}", dlq_core::admin::hex(bytes)),
    }
}

/// The bytes [`text`] made: hex decoded, anything else as its UTF-8.
fn bytes(text: &str) -> Vec<u8> {
    match text.strip_prefix("0x").and_then(dlq_core::admin::unhex) {
        // Only bytes that are not UTF-8 were written as hex.
        Some(decoded) if std::str::from_utf8(&decoded).is_err() => decoded,
        _ => text.as_bytes().to_vec(),
    }
}

/// A [`Scope`] for calling a typed `#[dead_letter]` handler on `record`: its source and
/// dedupe key ([`dedupe_key`]) set, so a failure parks with them. Then store the record's offset when
/// [`Action::of_handler`] says [`Action::Ack`].
///
/// ```no_run
/// use dlq_consumers::{kafka, Action};
/// use dlq_core::dead_letter;
/// use rdkafka::consumer::{Consumer, StreamConsumer};
/// use rdkafka::Message;
///
/// #[dead_letter(event_type = "doc-kafka-typed")]
/// async fn handle(amount: i64) -> Result<(), std::io::Error> { Ok(()) }
///
/// # async fn demo(consumer: StreamConsumer) -> Result<(), Box<dyn std::error::Error>> {
/// let record = consumer.recv().await?;
/// let amount: i64 = serde_json::from_slice(record.payload().unwrap_or_default())?;
/// let result = kafka::scope_for(&record).run(handle(amount)).await;
/// if Action::of_handler(&result) == Action::Ack {
///     consumer.store_offset_from_message(&record)?;
/// }
/// # Ok(()) }
/// ```
pub fn scope_for<M: Message>(record: &M) -> Scope {
    let source = source_of(record);
    let key = dedupe_key_of(record, &source);
    Scope::new().source(source).dedupe_key(key)
}

/// Runs registered handlers on the records of a Kafka consumer (see the module docs).
///
/// ```no_run
/// # use dlq_consumers::kafka::KafkaConsumer;
/// # fn demo(dispatcher: dlq_core::adapter::Dispatcher) {
/// let adapter = KafkaConsumer::new(dispatcher, "payment").retry_delay(std::time::Duration::from_secs(2));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct KafkaConsumer {
    dispatcher: Dispatcher,
    event_type: String,
    retry_delay: Duration,
}

impl KafkaConsumer {
    /// Dispatches every record to the handler of `event_type`. A record whose parking
    /// failed is tried again after 1 s, then 2 s, 4 s, ... up to 30 s.
    pub fn new(dispatcher: Dispatcher, event_type: impl Into<String>) -> Self {
        Self { dispatcher, event_type: event_type.into(), retry_delay: Duration::from_secs(1) }
    }

    /// The first wait before a record whose parking failed is handled again; it doubles at
    /// each failure, up to 30 s.
    #[must_use]
    pub const fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// Runs the handler on one record, without storing its offset. A failure is parked with
    /// the record's [`source_of`] and [`dedupe_key`].
    ///
    /// A store error is not an `Err` here but part of the result, whose [`Action`] is then
    /// [`Action::Retry`].
    ///
    /// # Errors
    /// The store's error when the failure could not be parked.
    pub async fn dispatch<M: Message>(&self, record: &M) -> Result<Dispatched, dlq_core::Error> {
        let payload = record.payload().unwrap_or_default();
        let source = source_of(record);
        let key = dedupe_key_of(record, &source);
        crate::supersede_origin(self.dispatcher.store(), &self.event_type, &source, &key).await?;
        self.dispatcher.dispatch_keyed(&self.event_type, payload, source, Some(key)).await
    }

    /// Consumes `consumer`'s records until `shutdown` completes, then commits the offsets
    /// of the records done. The consumer must be subscribed (or assigned) and created with
    /// `enable.auto.offset.store=false` ([`consumer_config`]).
    ///
    /// # Errors
    /// [`Error::Fatal`] when a handler's error is fatal, [`Error::TooLarge`] for a record over
    /// the store's payload limit (in both cases the record's offset is not committed, and
    /// the offsets of the records done before it are); [`Error::Broker`] when the consumer
    /// fails.
    pub async fn run<C>(&self, consumer: &StreamConsumer<C>, shutdown: impl Future) -> Result<RunStats, Error>
    where
        C: ConsumerContext + 'static,
    {
        let mut stats = RunStats::default();
        let mut shutdown = std::pin::pin!(shutdown);
        let mut done = BTreeMap::new();
        let stopped = loop {
            let record = tokio::select! {
                biased;
                _ = &mut shutdown => break Ok(()),
                record = consumer.recv() => record.map_err(Error::broker)?,
            };
            let mut delay = self.retry_delay;
            let result = loop {
                let result = self.dispatch(&record).await;
                if Action::of_dispatch(&result) != Action::Retry {
                    break result;
                }
                stats.count(&result);
                if let Err(error) = &result {
                    tracing::warn!(%error, topic = record.topic(), partition = record.partition(),
                        offset = record.offset(), retry_in = ?delay, "parking failed: the record is not committed and will be handled again");
                }
                tokio::select! {
                    biased;
                    _ = &mut shutdown => return finish(consumer, &done, Ok(stats)),
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(MAX_RETRY_DELAY);
            };
            stats.count(&result);
            match result {
                Ok(Dispatched::Fatal(failure)) => break Err(Error::fatal(&failure)),
                Ok(Dispatched::TooLarge { .. }) => {
                    let at = format!("{}/{}/{}", record.topic(), record.partition(), record.offset());
                    break Err(Error::TooLarge { at });
                }
                _ => {}
            }
            // A partition taken away by a rebalance while its record ran cannot store an
            // offset: its new owner delivers the record again, and the dedupe key keeps a
            // parked failure from being parked twice.
            if let Err(error) = consumer.store_offset_from_message(&record) {
                tracing::debug!(%error, topic = record.topic(), partition = record.partition(), "offset not stored");
            } else {
                done.insert((record.topic().to_owned(), record.partition()), record.offset() + 1);
            }
        };
        finish(consumer, &done, stopped.map(|()| stats))
    }
}

/// Commits the next offsets in `done` (synchronously), then returns `outcome`; a commit
/// error is returned only when `outcome` is `Ok`.
fn finish<C: ConsumerContext + 'static>(
    consumer: &StreamConsumer<C>,
    done: &BTreeMap<(String, i32), i64>,
    outcome: Result<RunStats, Error>,
) -> Result<RunStats, Error> {
    if done.is_empty() {
        return outcome;
    }
    let mut offsets = TopicPartitionList::new();
    for ((topic, partition), next) in done {
        if let Err(error) = offsets.add_partition_offset(topic, *partition, Offset::Offset(*next)) {
            tracing::warn!(%error, topic, partition, "offset not committed");
        }
    }
    let committed = consumer.commit(&offsets, CommitMode::Sync);
    match (outcome, committed) {
        (Ok(_), Err(error)) => Err(Error::broker(error)),
        (outcome, Err(error)) => {
            tracing::warn!(%error, "offsets not committed while stopping");
            outcome
        }
        (outcome, Ok(())) => outcome,
    }
}

/// Sends the payloads of every row `filter` selects back to their original topic (their
/// source's topic), with their original key ([`KEY_HEADER`]) so the default partitioner puts
/// each on its key's partition again, their original headers, and the [`DEDUPE_KEY_HEADER`]
/// and [`DLQ_ID_HEADER`] headers; waits for the broker to acknowledge each one, then
/// discards the row through `admin` (audited with its actor and `reason`), so the retrier no
/// longer runs it: the topic now holds the event. Returns the ids republished.
///
/// Rows are walked oldest first, page by page, to the last one: the filter's order, `after`
/// and `limit` are ignored, as in a [`BulkPlan`](dlq_core::admin::BulkPlan). Rows without a
/// source topic are skipped, and so are `PROCESSING` rows (a retrier holds them) and
/// `DISCARDED` ones (dropped, or republished already).
///
/// # Errors
/// An empty reason, before anything is sent; the store's error listing or discarding; the
/// broker's error producing (rows republished before it are already discarded; the others
/// are untouched).
///
/// ```no_run
/// use std::sync::Arc;
/// use dlq_core::admin::Admin;
/// use dlq_core::{ListFilter, Status};
/// use rdkafka::producer::FutureProducer;
///
/// # async fn demo(store: Arc<dyn dlq_core::DeadLetterStore>) -> Result<(), Box<dyn std::error::Error>> {
/// let producer: FutureProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", "127.0.0.1:9092").create()?;
/// let admin = Admin::new(store, "alice");
/// let filter = ListFilter::default().event_type("payment").status(Status::FailedPermanently);
/// let ids = dlq_consumers::kafka::republish(&admin, &producer, filter, "replay after the ledger fix").await?;
/// println!("{} events are back on their topics", ids.len());
/// # Ok(()) }
/// ```
pub async fn republish(
    admin: &dlq_core::admin::Admin,
    producer: &FutureProducer,
    filter: ListFilter,
    reason: &str,
) -> Result<Vec<DlqId>, Error> {
    crate::republish_rows(admin, filter, reason, |row, topic| async move {
        let mut headers = OwnedHeaders::new();
        for (name, value) in &row.source.headers {
            if name != KEY_HEADER && name != DLQ_ID_HEADER && name != DEDUPE_KEY_HEADER {
                headers = headers.insert(Header { key: name, value: Some(&bytes(value)) });
            }
        }
        let id = row.id.to_string();
        headers = headers.insert(Header { key: DLQ_ID_HEADER, value: Some(&id) });
        if let Some(key) = &row.dedupe_key {
            headers = headers.insert(Header { key: DEDUPE_KEY_HEADER, value: Some(key) });
        }
        let payload = row.payload.to_bytes();
        let key = row.source.headers.get(KEY_HEADER).map(|key| bytes(key));
        let mut record = FutureRecord::to(&topic).payload(&payload).headers(headers);
        if let Some(key) = &key {
            record = record.key(key);
        }
        producer.send(record, Duration::from_secs(30)).await.map(drop).map_err(|(error, _)| Error::broker(error))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::{bytes, text};

    #[test]
    fn keys_that_are_not_utf8_round_trip_through_hex() {
        assert_eq!(text(b"customer-7"), "customer-7");
        assert_eq!(text(&[0xff, 0x00, 0x10]), "0xff0010");
        assert_eq!(bytes("0xff0010"), vec![0xff, 0x00, 0x10]);
        assert_eq!(bytes("customer-7"), b"customer-7");
        // Text that merely looks like hex stays text: hex is only ever written for bytes
        // that are not UTF-8.
        assert_eq!(bytes("0x41"), b"0x41");
        assert_eq!(bytes("0xabc"), b"0xabc");
    }
}
