//! NATS JetStream (feature `nats`): a pulled message into a handler call, acked, nakked or
//! terminated by the outcome.
//!
//! The message's identity is its stream and stream sequence: [`source_of`] fills
//! [`SourceMeta::jetstream`] (subject, sequence, headers, `traceparent`), whose dedupe key
//! `stream/sequence` makes a redelivery park once. A replay sent by [`republish`] keeps the
//! identity of the event it replays: its [`DEDUPE_KEY_HEADER`] is its dedupe key
//! ([`dedupe_key`]), so if it fails again it is parked under the original key (as a new row,
//! the row it came from being discarded), while its source records the stream sequence where
//! the replay was read. [`JetStreamConsumer::run`] settles each message:
//!
//! - handled or parked → **ack**; the stream moves on;
//! - parking failed (store down) → **nak with a delay** ([`JetStreamConsumer::nak_delay`]):
//!   JetStream delivers it again, and it is parked once the store is back;
//! - over the store's payload limit → **term**: JetStream stops redelivering it to this
//!   consumer, and the stream keeps the message (under limits retention) at the sequence the
//!   `too_large` dead row records, so it can be read back with the stream's direct get;
//!   under work-queue retention a term deletes it, so raise the store's limit there instead;
//! - fatal → **nak** and the loop returns [`Error::Fatal`].
//!
//! A crash before the ack leaves the message unacknowledged: JetStream redelivers it after
//! the consumer's `ack_wait`, and a failure that was parked before the crash is found by its
//! dedupe key instead of being parked twice.
//!
//! ```no_run
//! use std::sync::Arc;
//! use async_nats::jetstream::{self, consumer::pull};
//! use dlq_consumers::nats::JetStreamConsumer;
//! use dlq_core::{dead_letter, handlers, adapter::Dispatcher};
//!
//! #[dead_letter(event_type = "payment")]
//! async fn handle_payment(amount_cents: i64) -> Result<(), std::io::Error> { Ok(()) }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(dlq_sqlx::PgStore::connect("postgres://postgres@127.0.0.1:5432/postgres").await?);
//! let js = jetstream::new(async_nats::connect("127.0.0.1:4222").await?);
//! let stream = js.get_stream("PAYMENTS").await?;
//! let consumer: jetstream::consumer::PullConsumer = stream
//!     .get_or_create_consumer("ledger", pull::Config { durable_name: Some("ledger".into()), ..Default::default() })
//!     .await?;
//! let adapter = JetStreamConsumer::new(Dispatcher::new(store, handlers![handle_payment]?), "payment");
//! let stats = adapter.run(consumer.messages().await?, async { tokio::signal::ctrl_c().await.ok(); }).await?;
//! println!("{} handled, {} parked", stats.succeeded, stats.parked);
//! # Ok(()) }
//! ```

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, Message};
use dlq_core::{DlqId, ListFilter, Scope, adapter::Dispatched, adapter::Dispatcher, adapter::SourceMeta};
use futures_util::{Stream, StreamExt};

use crate::{Action, DEDUPE_KEY_HEADER, DLQ_ID_HEADER, Error, RunStats};

/// The W3C trace-context header copied into [`SourceMeta::trace_context`].
const TRACEPARENT: &str = "traceparent";

/// The source metadata of a JetStream message: subject, stream sequence, headers (several
/// values of one header joined with `", "`), and the `traceparent` header as trace context.
///
/// # Errors
/// [`Error::Malformed`] for a message without JetStream metadata (not from a consumer).
///
/// ```no_run
/// # async fn demo(message: async_nats::jetstream::Message) -> Result<(), dlq_consumers::Error> {
/// let source = dlq_consumers::nats::source_of(&message)?;
/// println!("{:?} #{:?}, key {:?}", source.topic, source.offset, source.dedupe_key());
/// # Ok(()) }
/// ```
pub fn source_of(message: &Message) -> Result<SourceMeta, Error> {
    let info = message.info().map_err(|e| Error::Malformed(e.to_string()))?;
    let mut source = SourceMeta::jetstream(info.stream, message.subject.as_str(), info.stream_sequence);
    if let Some(headers) = &message.headers {
        for (name, values) in headers.iter() {
            let joined = values.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ");
            let name = name.to_string();
            if name.eq_ignore_ascii_case(TRACEPARENT) {
                source.trace_context = Some(joined.clone());
            }
            source.headers.entry(name).or_insert(joined);
        }
    }
    Ok(source)
}

/// A [`Scope`] for calling a typed `#[dead_letter]` handler on `message`: its source and
/// dedupe key ([`dedupe_key`]) set, so a failure parks with them. Settle the message with
/// [`Action::of_handler`] and [`settle`].
///
/// # Errors
/// [`Error::Malformed`] for a message without JetStream metadata.
///
/// ```no_run
/// use dlq_consumers::{nats, Action};
/// use dlq_core::dead_letter;
/// use std::time::Duration;
///
/// #[dead_letter(event_type = "doc-nats-typed")]
/// async fn handle(amount: i64) -> Result<(), std::io::Error> { Ok(()) }
///
/// # async fn demo(message: async_nats::jetstream::Message) -> Result<(), Box<dyn std::error::Error>> {
/// let amount: i64 = serde_json::from_slice(&message.payload)?;
/// let result = nats::scope_for(&message)?.run(handle(amount)).await;
/// nats::settle(&message, Action::of_handler(&result), Duration::from_secs(5)).await?;
/// # Ok(()) }
/// ```
pub fn scope_for(message: &Message) -> Result<Scope, Error> {
    let source = source_of(message)?;
    let key = dedupe_key_of(message, &source);
    Ok(Scope::new().source(source).dedupe_key(key))
}

/// The dedupe key of a message: the original event's key when the message is a replay
/// carrying a valid [`DEDUPE_KEY_HEADER`] (see [`replay_key`](crate::replay_key); a value
/// that is too long, holds control characters or appears twice is ignored), else the
/// message's own identity `stream/sequence`. [`JetStreamConsumer::dispatch`] and
/// [`scope_for`] park a failure under it, so a replay that fails again is parked under the
/// key of the event it replays, not under its own sequence.
///
/// # Errors
/// [`Error::Malformed`] for a message without JetStream metadata.
///
/// ```no_run
/// # async fn demo(message: async_nats::jetstream::Message) -> Result<(), dlq_consumers::Error> {
/// let key = dlq_consumers::nats::dedupe_key(&message)?;
/// println!("parked under {key} if it fails");
/// # Ok(()) }
/// ```
pub fn dedupe_key(message: &Message) -> Result<String, Error> {
    Ok(dedupe_key_of(message, &source_of(message)?))
}

/// [`dedupe_key`] of `message`, whose source is `source`.
fn dedupe_key_of(message: &Message, source: &SourceMeta) -> String {
    // A JetStream source always has one: its stream and sequence.
    let own = source.dedupe_key().unwrap_or_default();
    let Some(headers) = &message.headers else { return own };
    let values = headers.get_all(DEDUPE_KEY_HEADER).map(|value| value.as_str().as_bytes());
    crate::pick_dedupe_key(values, own)
}

/// Settles `message` by `action`: ack, nak after `nak_delay`, or term. [`Action::Stop`]
/// naks too (without a delay), so another consumer can take the message.
///
/// # Errors
/// The broker's error when the acknowledgement could not be sent.
///
/// ```no_run
/// # async fn demo(message: async_nats::jetstream::Message) -> Result<(), dlq_consumers::Error> {
/// dlq_consumers::nats::settle(&message, dlq_consumers::Action::Ack, std::time::Duration::ZERO).await?;
/// # Ok(()) }
/// ```
pub async fn settle(message: &Message, action: Action, nak_delay: Duration) -> Result<(), Error> {
    let kind = match action {
        Action::Ack => AckKind::Ack,
        Action::Retry => AckKind::Nak(Some(nak_delay)),
        Action::TooLarge => AckKind::Term,
        Action::Stop => AckKind::Nak(None),
    };
    message.ack_with(kind).await.map_err(Error::broker)
}

/// Runs registered handlers on the messages of a JetStream consumer (see the module docs).
///
/// ```no_run
/// # use dlq_consumers::nats::JetStreamConsumer;
/// # fn demo(dispatcher: dlq_core::adapter::Dispatcher) {
/// let adapter = JetStreamConsumer::new(dispatcher, "payment").nak_delay(std::time::Duration::from_secs(2));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct JetStreamConsumer {
    dispatcher: Dispatcher,
    event_type: String,
    nak_delay: Duration,
}

impl JetStreamConsumer {
    /// Dispatches every message to the handler of `event_type`. Messages whose parking
    /// fails are nakked with a delay of 5 s.
    pub fn new(dispatcher: Dispatcher, event_type: impl Into<String>) -> Self {
        Self { dispatcher, event_type: event_type.into(), nak_delay: Duration::from_secs(5) }
    }

    /// How long JetStream waits before redelivering a message whose parking failed.
    #[must_use]
    pub const fn nak_delay(mut self, delay: Duration) -> Self {
        self.nak_delay = delay;
        self
    }

    /// Runs the handler on one message, without settling it. A failure is parked with the
    /// message's [`source_of`] and [`dedupe_key`].
    ///
    /// # Errors
    /// [`Error::Malformed`] for a message without JetStream metadata. A store error is not
    /// an `Err` here but part of the result, whose [`Action`] is then [`Action::Retry`].
    pub async fn dispatch(&self, message: &Message) -> Result<Result<Dispatched, dlq_core::Error>, Error> {
        let source = source_of(message)?;
        let key = dedupe_key_of(message, &source);
        if let Err(error) = crate::supersede_origin(self.dispatcher.store(), &self.event_type, &source, &key).await {
            return Ok(Err(error));
        }
        Ok(self.dispatcher.dispatch_keyed(&self.event_type, &message.payload, source, Some(key)).await)
    }

    /// Runs the handler on one message and settles it; returns what was done.
    ///
    /// # Errors
    /// [`Error::Fatal`] after nakking the message, when the handler's error is fatal; the
    /// broker's error when the acknowledgement could not be sent.
    pub async fn handle(&self, message: &Message) -> Result<Result<Dispatched, dlq_core::Error>, Error> {
        let result = self.dispatch(message).await?;
        let action = Action::of_dispatch(&result);
        if let Err(error) = &result {
            tracing::warn!(%error, subject = %message.subject, "parking failed: nak, the message will be redelivered");
        }
        settle(message, action, self.nak_delay).await?;
        if let Ok(Dispatched::Fatal(failure)) = &result {
            return Err(Error::fatal(failure));
        }
        Ok(result)
    }

    /// Consumes `messages` (e.g. `PullConsumer::messages()`) until the stream ends or
    /// `shutdown` completes, settling each message as it goes.
    ///
    /// # Errors
    /// [`Error::Fatal`] when a handler's error is fatal; [`Error::Broker`] when the stream
    /// yields an error or an acknowledgement fails.
    pub async fn run<S, E>(&self, messages: S, shutdown: impl Future) -> Result<RunStats, Error>
    where
        S: Stream<Item = Result<Message, E>>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let mut stats = RunStats::default();
        let mut messages = std::pin::pin!(messages);
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let next = tokio::select! {
                biased;
                _ = &mut shutdown => return Ok(stats),
                next = messages.next() => next,
            };
            let Some(message) = next else { return Ok(stats) };
            let message = message.map_err(Error::broker)?;
            let result = self.handle(&message).await?;
            stats.count(&result);
        }
    }
}

/// Publishes the payloads of every row `filter` selects back onto their original subject
/// (their source's topic), each with the [`DEDUPE_KEY_HEADER`] and [`DLQ_ID_HEADER`]
/// headers, waits for JetStream to store each one, then discards the row through `admin`
/// (audited with its actor and `reason`), so the retrier no longer runs it: the broker now
/// holds the event. Returns the ids republished.
///
/// Rows are walked oldest first, page by page, to the last one: the filter's order, `after`
/// and `limit` are ignored, as in a [`BulkPlan`](dlq_core::admin::BulkPlan). Rows without a
/// source topic are skipped, and so are `PROCESSING` rows (a retrier holds them) and
/// `DISCARDED` ones (dropped, or republished already).
///
/// # Errors
/// An empty reason, before anything is published; the store's error listing or discarding;
/// the broker's error publishing (rows republished before it are already discarded; the
/// others are untouched).
///
/// ```no_run
/// use std::sync::Arc;
/// use dlq_core::admin::Admin;
/// use dlq_core::{ListFilter, Status};
///
/// # async fn demo(store: Arc<dyn dlq_core::DeadLetterStore>, js: &async_nats::jetstream::Context) -> Result<(), dlq_consumers::Error> {
/// let admin = Admin::new(store, "alice");
/// let filter = ListFilter::default().event_type("payment").status(Status::FailedPermanently);
/// let ids = dlq_consumers::nats::republish(&admin, js, filter, "replay after the ledger fix").await?;
/// println!("{} events are back on their subjects", ids.len());
/// # Ok(()) }
/// ```
pub async fn republish(
    admin: &dlq_core::admin::Admin,
    js: &jetstream::Context,
    filter: ListFilter,
    reason: &str,
) -> Result<Vec<DlqId>, Error> {
    crate::republish_rows(admin, filter, reason, |row, subject| async move {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(DLQ_ID_HEADER, row.id.to_string().as_str());
        if let Some(key) = &row.dedupe_key {
            headers.insert(DEDUPE_KEY_HEADER, key.as_str());
        }
        let ack =
            js.publish_with_headers(subject, headers, row.payload.to_bytes().into()).await.map_err(Error::broker)?;
        ack.await.map(drop).map_err(Error::broker)
    })
    .await
}
