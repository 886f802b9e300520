//! Broker adapters for dlq: each turns a message into a handler call with its
//! [`SourceMeta`](dlq_core::SourceMeta) filled and a dedupe key from the message's identity,
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
//! failure parked before is not parked twice: the store returns the first row.
//!
//! Modules, each behind its feature (both on by default): `nats` (JetStream through
//! `async-nats`, pure Rust) and `kafka` (the Kafka protocol through `rdkafka`, which builds
//! librdkafka from the source it ships: it needs a C compiler and `make`, no system library).
#![cfg_attr(docsrs, feature(doc_cfg))]

use dlq_core::{Dispatched, HandlerError};

#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "nats")]
pub mod nats;

/// What the consumer does with a message once its handler has run.
///
/// ```
/// use dlq_consumers::Action;
/// use dlq_core::Dispatched;
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
    /// The action for a [`Dispatcher`](dlq_core::Dispatcher) result.
    ///
    /// ```
    /// # use dlq_consumers::Action;
    /// assert_eq!(Action::of_dispatch(&Ok(dlq_core::Dispatched::Succeeded)), Action::Ack);
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

    fn fatal(failure: &dlq_core::FailureInfo) -> Self {
        Self::Fatal { kind: failure.kind.clone(), reason: failure.reason.clone() }
    }
}

/// The header a republished message carries: the dead letter's dedupe key (the original
/// message's identity), so a consumer can tell a replay from a new event.
pub const DEDUPE_KEY_HEADER: &str = "Dlq-Dedupe-Key";

/// The header a republished message carries: the id of the dead letter it came from.
pub const DLQ_ID_HEADER: &str = "Dlq-Id";
