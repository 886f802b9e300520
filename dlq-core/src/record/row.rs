//! The stored row: a dead letter as it is read back ([`DeadLetter`]), its id, where it is in
//! its life ([`Status`]) and why it is dead when it is ([`DeadReason`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Payload, SourceMeta};
use crate::classify::FailureInfo;

/// The id of a dead-letter row (`dlq_events.id`).
pub type DlqId = i64;

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $text)] $variant),* }

        text_forms!($name { $($variant => $text),* });
    };
}

string_enum! {
    /// Where a dead letter is in its life.
    ///
    /// `PENDING → PROCESSING → SUCCEEDED | PENDING (retry_count+1) | FAILED_PERMANENTLY`;
    /// operators move `FAILED_PERMANENTLY → PENDING` (redrive) and anything to `DISCARDED`.
    ///
    /// ```
    /// use dlq_core::Status;
    /// assert_eq!("FAILED_PERMANENTLY".parse::<Status>().unwrap(), Status::FailedPermanently);
    /// assert_eq!(Status::Pending.to_string(), "PENDING");
    /// ```
    Status {
        /// Waiting for its `retry_after`, then claimable by a retrier.
        Pending = "PENDING",
        /// Claimed by a retrier whose lease runs until `lease_until`.
        Processing = "PROCESSING",
        /// A retry succeeded.
        Succeeded = "SUCCEEDED",
        /// Dead: waits for an operator to repair and redrive or discard it.
        FailedPermanently = "FAILED_PERMANENTLY",
        /// Given up on by an operator.
        Discarded = "DISCARDED",
    }
}

string_enum! {
    /// Why a dead letter is `FAILED_PERMANENTLY`.
    ///
    /// ```
    /// assert_eq!(dlq_core::adapter::DeadReason::RetriesExhausted.as_str(), "retries_exhausted");
    /// ```
    DeadReason {
        /// The handler's error was classified permanent.
        Permanent = "permanent",
        /// `max_retries` retries failed.
        RetriesExhausted = "retries_exhausted",
        /// The event kept failing for longer than the policy's `max_age`.
        MaxAge = "max_age",
        /// The payload did not deserialize into the handler's event type.
        Undecodable = "undecodable",
        /// No handler is registered for the event type.
        NoHandler = "no_handler",
        /// The payload is over the store's size limit: only its first bytes, its length and
        /// its SHA-256 are kept, so it can be neither retried nor redriven (an operator can
        /// patch in the whole payload and then redrive it).
        TooLarge = "too_large",
    }
}

/// A stored dead letter, as the admin reads and the retrier see it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// The row's id.
    pub id: DlqId,
    /// The registered event type.
    pub event_type: String,
    /// The handler's path.
    pub handler: String,
    /// The event (possibly repaired by an operator).
    pub payload: Payload,
    /// The version of the event's contract the payload was written with (the handler's
    /// `#[dead_letter(version = N)]` when it was parked; 1 for rows parked before versions).
    pub version: u32,
    /// The lifecycle state.
    pub status: Status,
    /// The latest failure.
    pub failure: FailureInfo,
    /// Failed retries so far.
    pub retry_count: u32,
    /// The retry limit.
    pub max_retries: u32,
    /// When it becomes due.
    pub retry_after: DateTime<Utc>,
    /// Why it is dead, when it is.
    pub dead_reason: Option<DeadReason>,
    /// The retrier holding it, while `PROCESSING`.
    pub lease_owner: Option<String>,
    /// Until when that retrier holds it.
    pub lease_until: Option<DateTime<Utc>>,
    /// The dedupe key.
    pub dedupe_key: Option<String>,
    /// Where it came from.
    pub source: SourceMeta,
    /// How many times an operator redrove it.
    pub redrive_count: u32,
    /// When it was parked.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it first failed.
    pub first_failed_at: DateTime<Utc>,
    /// When a retrier last ran it.
    pub last_attempt_at: Option<DateTime<Utc>>,
}

impl DeadLetter {
    /// A row as freshly parked at `at`: `PENDING`, due at `at`, no lease, no retries, payload
    /// version 1. Stores
    /// outside this crate build the rows they read back with it, then set the public fields.
    ///
    /// ```
    /// use dlq_core::{DeadLetter, ErrorClass, classify::FailureInfo, Payload, Status};
    ///
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// let mut row = DeadLetter::new(7, "payment", Payload::Json(serde_json::json!({})), failure, chrono::Utc::now());
    /// row.status = Status::Succeeded;
    /// assert_eq!(row.id, 7);
    /// ```
    pub fn new(id: DlqId, event_type: &str, payload: Payload, failure: FailureInfo, at: DateTime<Utc>) -> Self {
        Self {
            id,
            event_type: event_type.to_owned(),
            handler: String::new(),
            payload,
            version: 1,
            status: Status::Pending,
            failure,
            retry_count: 0,
            max_retries: 0,
            retry_after: at,
            dead_reason: None,
            lease_owner: None,
            lease_until: None,
            dedupe_key: None,
            source: SourceMeta::default(),
            redrive_count: 0,
            created_at: at,
            updated_at: at,
            first_failed_at: at,
            last_attempt_at: None,
        }
    }
}
