//! A failed event on its way into the store ([`NewDeadLetter`]) and what parking it did
//! ([`Parked`]).

use std::time::Duration;

use super::{DeadReason, DlqId, Payload, SourceMeta, Status};
use crate::classify::FailureInfo;
use crate::subject::SubjectHash;

/// A failed event about to be parked.
///
/// ```
/// use dlq_core::{ErrorClass, classify::FailureInfo, store::NewDeadLetter, Payload, retry::RetryPolicy};
///
/// let failure = FailureInfo::new(ErrorClass::Transient, "io", "ledger down".into(), vec![], None);
/// let letter = NewDeadLetter::new("payment", Payload::Json(serde_json::json!({"amount": 5})), failure)
///     .with_dedupe_key("payments/0/17");
/// assert_eq!(letter.status(), dlq_core::Status::Pending);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NewDeadLetter {
    /// The registered event type.
    pub event_type: String,
    /// The handler's path, `module::fn`.
    pub handler: String,
    /// The event.
    pub payload: Payload,
    /// The version of the event's contract the payload is written in: the handler's
    /// `#[dead_letter(version = N)]`, 1 unless set ([`NewDeadLetter::with_version`]).
    pub version: u32,
    /// What went wrong.
    pub failure: FailureInfo,
    /// Set when the event is dead on arrival (permanent, undecodable, no retries allowed).
    pub dead_reason: Option<DeadReason>,
    /// How long from now until the first retry.
    pub retry_delay: Duration,
    /// The policy's retry limit, stored with the row.
    pub max_retries: u32,
    /// The event's identity for its event type: while a row of the same event type and key
    /// is alive (not `SUCCEEDED` or `DISCARDED`), parking it again returns that row's id
    /// ([`Parked::deduplicated`]); the same key under another event type is another event's.
    pub dedupe_key: Option<String>,
    /// Where the event came from.
    pub source: SourceMeta,
    /// The keyed hash of whose data the event holds, that `dlq erase` finds it by
    /// (`subject`); set from the source's subject by [`with_source`](Self::with_source).
    pub subject: Option<SubjectHash>,
}

impl NewDeadLetter {
    /// A pending letter due at once, for an unnamed handler, with the default retry limit.
    pub fn new(event_type: &str, payload: Payload, failure: FailureInfo) -> Self {
        Self {
            event_type: event_type.to_owned(),
            handler: String::new(),
            payload,
            version: 1,
            failure,
            dead_reason: None,
            retry_delay: Duration::ZERO,
            max_retries: crate::backoff::RetryPolicy::DEFAULT.max_retries,
            dedupe_key: None,
            source: SourceMeta::default(),
            subject: None,
        }
    }

    /// Sets the subject's keyed hash (`SubjectKey::hash`).
    ///
    /// ```
    /// use dlq_core::{ErrorClass, classify::FailureInfo, store::NewDeadLetter, Payload, subject::SubjectKey};
    ///
    /// let key = SubjectKey::new([7; 32])?;
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "ledger down".into(), vec![], None);
    /// let letter = NewDeadLetter::new("payment", Payload::Json(1.into()), failure).with_subject(key.hash("customer-42"));
    /// assert_eq!(letter.subject, Some(key.hash("customer-42")));
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
    #[must_use]
    pub fn with_subject(mut self, subject: SubjectHash) -> Self {
        self.subject = Some(subject);
        self
    }

    /// Sets the dedupe key.
    #[must_use]
    pub fn with_dedupe_key(mut self, key: impl Into<String>) -> Self {
        self.dedupe_key = Some(key.into());
        self
    }

    /// Sets the source metadata (and the dedupe key from it, when none is set). A source
    /// naming a subject ([`SourceMeta::subject`]) sets the letter's subject to its keyed hash
    /// under the process's key (`subject::key`) and is kept without it; with no key
    /// configured the subject is left out and an error logged (without the subject).
    #[must_use]
    pub fn with_source(mut self, mut source: SourceMeta) -> Self {
        if self.dedupe_key.is_none() {
            self.dedupe_key = source.dedupe_key();
        }
        if let Some(subject) = source.subject.take() {
            self.subject = crate::subject::stamp(&self.event_type, &subject).or(self.subject);
        }
        self.source = source;
        self
    }

    /// Sets the version of the event's contract the payload is written in.
    ///
    /// ```
    /// use dlq_core::{ErrorClass, classify::FailureInfo, store::NewDeadLetter, Payload};
    ///
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// let letter = NewDeadLetter::new("payment", Payload::Json(serde_json::json!({})), failure);
    /// assert_eq!((letter.version, letter.with_version(3).version), (1, 3));
    /// ```
    #[must_use]
    pub const fn with_version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// Sets the handler path.
    #[must_use]
    pub fn with_handler(mut self, handler: impl Into<String>) -> Self {
        self.handler = handler.into();
        self
    }

    /// Parks the letter dead with `reason`.
    #[must_use]
    pub const fn dead(mut self, reason: DeadReason) -> Self {
        self.dead_reason = Some(reason);
        self
    }

    /// Sets the delay until the first retry and the retry limit.
    #[must_use]
    pub const fn retry(mut self, delay: Duration, max_retries: u32) -> Self {
        self.retry_delay = delay;
        self.max_retries = max_retries;
        self
    }

    /// The letter as a store with a payload limit of `max_bytes` keeps it: unchanged when the
    /// payload fits; otherwise the payload is cut ([`Payload::fit`]) and the letter parked
    /// dead with [`DeadReason::TooLarge`], so no retrier ever claims what it cannot decode.
    ///
    /// ```
    /// use dlq_core::{adapter::DeadReason, ErrorClass, classify::FailureInfo, store::NewDeadLetter, Payload, Status};
    ///
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// let letter = NewDeadLetter::new("upload", Payload::from_bytes(&[7; 64]), failure).fit(16);
    /// assert_eq!((letter.status(), letter.dead_reason), (Status::FailedPermanently, Some(DeadReason::TooLarge)));
    /// assert!(letter.payload.is_truncated());
    /// ```
    #[must_use]
    pub fn fit(mut self, max_bytes: usize) -> Self {
        if self.payload.is_truncated() || self.payload.len_within(max_bytes).is_none() {
            self.payload = self.payload.cut(max_bytes);
            self.dead_reason = Some(DeadReason::TooLarge);
        }
        self
    }

    /// The status the row is created in.
    pub const fn status(&self) -> Status {
        if self.dead_reason.is_some() { Status::FailedPermanently } else { Status::Pending }
    }
}

/// The result of parking one letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parked {
    /// The row's id.
    pub id: DlqId,
    /// `true` when a live row (`PENDING`, `PROCESSING` or `FAILED_PERMANENTLY`) of the same
    /// event type already held the letter's dedupe key, and its id was returned: the letter
    /// itself was not stored. `false` when the letter was stored as the new row `id` (also when
    /// the key's earlier rows had all finished: `SUCCEEDED` or `DISCARDED`).
    pub deduplicated: bool,
    /// `true` when the payload was over the store's limit: the row keeps only its first
    /// bytes and is dead ([`DeadReason::TooLarge`]); the event itself is not saved.
    pub truncated: bool,
}
