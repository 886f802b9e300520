//! Where an event came from ([`SourceMeta`]): broker coordinates, headers, trace context.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where an event came from: topic/partition/offset, headers, trace context.
///
/// ```
/// let src = dlq_core::adapter::SourceMeta::kafka("payments", 3, 1_204_331);
/// assert_eq!(src.partition, Some(3));
/// ```
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceMeta {
    /// Topic, subject, queue or table.
    pub topic: Option<String>,
    /// Partition number.
    pub partition: Option<i32>,
    /// Offset or sequence number.
    pub offset: Option<i64>,
    /// Message headers.
    pub headers: BTreeMap<String, String>,
    /// W3C `traceparent` or similar.
    pub trace_context: Option<String>,
    /// Whose data the event holds ([`subject`](Self::subject)): never stored, serialized or
    /// printed; the row keeps its keyed hash (`subject`).
    #[serde(skip)]
    pub subject: Option<String>,
}

impl std::fmt::Debug for SourceMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceMeta")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("headers", &self.headers)
            .field("trace_context", &self.trace_context)
            .field("subject", &self.subject.as_ref().map(|_| ".."))
            .finish()
    }
}

impl SourceMeta {
    /// Metadata for a Kafka record.
    pub fn kafka(topic: &str, partition: i32, offset: i64) -> Self {
        Self { topic: Some(topic.to_owned()), partition: Some(partition), offset: Some(offset), ..Self::default() }
    }

    /// A NATS JetStream message: `subject` as the topic and the stream sequence as the offset
    /// (no partition). Its dedupe key is `stream/sequence`, the message's identity in the
    /// stream, kept in the `Nats-Stream` header so the row says which stream it came from.
    ///
    /// ```
    /// let src = dlq_core::adapter::SourceMeta::jetstream("PAYMENTS", "payments.eu", 42);
    /// assert_eq!((src.topic.as_deref(), src.partition, src.offset), (Some("payments.eu"), None, Some(42)));
    /// assert_eq!(src.dedupe_key().as_deref(), Some("PAYMENTS/42"));
    /// ```
    pub fn jetstream(stream: &str, subject: &str, stream_sequence: u64) -> Self {
        let mut headers = BTreeMap::new();
        headers.insert(JETSTREAM_STREAM_HEADER.to_owned(), stream.to_owned());
        Self {
            topic: Some(subject.to_owned()),
            offset: Some(i64::try_from(stream_sequence).unwrap_or(i64::MAX)),
            headers,
            ..Self::default()
        }
    }

    /// The same source, naming whose data the event holds (a customer id, an account
    /// number): the row is stored under the subject's keyed hash, so that `dlq erase --subject
    /// customer-42` finds and deletes it (`subject`). The subject itself is never
    /// stored, serialized or printed.
    ///
    /// ```
    /// let src = dlq_core::adapter::SourceMeta::kafka("payments", 3, 42).subject("customer-42");
    /// assert_eq!(src.subject.as_deref(), Some("customer-42"));
    /// assert!(!format!("{src:?}").contains("customer-42"));
    /// ```
    #[must_use]
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// The event's identity: `topic/partition/offset` when all three are known, or
    /// `stream/sequence` for a JetStream source ([`jetstream`](Self::jetstream)).
    ///
    /// ```
    /// let src = dlq_core::adapter::SourceMeta::kafka("payments", 3, 42);
    /// assert_eq!(src.dedupe_key().as_deref(), Some("payments/3/42"));
    /// ```
    pub fn dedupe_key(&self) -> Option<String> {
        if let (None, Some(stream)) = (self.partition, self.headers.get(JETSTREAM_STREAM_HEADER)) {
            return Some(format!("{stream}/{}", self.offset?));
        }
        Some(format!("{}/{}/{}", self.topic.as_ref()?, self.partition?, self.offset?))
    }
}

/// The header of a [`SourceMeta::jetstream`] source that names its stream.
const JETSTREAM_STREAM_HEADER: &str = "Nats-Stream";
