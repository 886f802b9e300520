//! Decoding `dlq_events` rows into [`DeadLetter`]s: private row types derive
//! [`sqlx::FromRow`] for the columns as stored, and a conversion step turns them into the
//! `dlq_core` records (class and status names, the JSON chain and headers, counts).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use dlq_core::{DeadLetter, DeadReason, ErrorClass, FailureInfo, Payload, SourceMeta, Status, Truncation};
use sqlx::FromRow;
use sqlx::postgres::PgRow;

type Result<T> = std::result::Result<T, dlq_core::Error>;

/// The payload columns, as read by every `SELECT` of a row and by the patch lock.
#[derive(FromRow)]
pub(crate) struct PayloadRow {
    payload: Option<serde_json::Value>,
    payload_raw: Option<Vec<u8>>,
    payload_truncated: bool,
    payload_original_len: Option<i64>,
    payload_sha256: Option<String>,
}

impl PayloadRow {
    /// The stored payload: the raw bytes when there are any, the JSON value otherwise.
    pub(crate) fn into_payload(self) -> Payload {
        let Some(bytes) = self.payload_raw else {
            return Payload::Json(self.payload.unwrap_or(serde_json::Value::Null));
        };
        let truncated = self.payload_truncated.then(|| Truncation {
            original_len: u64::try_from(self.payload_original_len.unwrap_or(0)).unwrap_or(0),
            original_sha256: self.payload_sha256.unwrap_or_default(),
        });
        Payload::Raw { bytes, truncated }
    }
}

/// The failure columns.
#[derive(FromRow)]
struct FailureRow {
    error_class: String,
    error_kind: String,
    error_reason: String,
    error_chain: serde_json::Value,
    error_stacktrace: Option<String>,
    fingerprint: String,
}

impl FailureRow {
    /// The failure exactly as stored (not bounded again).
    fn into_failure(self) -> Result<FailureInfo> {
        // `FailureInfo` is non-exhaustive: start from a blank one (built once) and fill it in.
        static BLANK: LazyLock<FailureInfo> =
            LazyLock::new(|| FailureInfo::new(ErrorClass::Transient, "", String::new(), Vec::new(), None));
        let mut info = BLANK.clone();
        info.class = class(&self.error_class)?;
        info.kind = self.error_kind;
        info.reason = self.error_reason;
        info.chain = match self.error_chain {
            serde_json::Value::Array(items) => {
                items.into_iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)).collect()
            }
            _ => Vec::new(),
        };
        info.stacktrace = self.error_stacktrace;
        info.fingerprint = self.fingerprint;
        Ok(info)
    }
}

/// The source metadata columns.
#[derive(FromRow)]
struct SourceRow {
    source_topic: Option<String>,
    source_partition: Option<i32>,
    source_offset: Option<i64>,
    source_headers: serde_json::Value,
    trace_context: Option<String>,
}

impl From<SourceRow> for SourceMeta {
    fn from(row: SourceRow) -> Self {
        let headers: BTreeMap<String, String> = serde_json::from_value(row.source_headers).unwrap_or_default();
        Self {
            topic: row.source_topic,
            partition: row.source_partition,
            offset: row.source_offset,
            headers,
            trace_context: row.trace_context,
        }
    }
}

/// A whole `dlq_events` row (extra columns, such as a claim's `lease_token`, are ignored).
#[derive(FromRow)]
struct EventRow {
    id: i64,
    event_type: String,
    handler: String,
    #[sqlx(flatten)]
    payload: PayloadRow,
    #[sqlx(flatten)]
    failure: FailureRow,
    status: String,
    // The schema checks the counts are not negative.
    #[sqlx(try_from = "i32")]
    retry_count: u32,
    #[sqlx(try_from = "i32")]
    max_retries: u32,
    retry_after: DateTime<Utc>,
    dead_reason: Option<String>,
    lease_owner: Option<String>,
    lease_until: Option<DateTime<Utc>>,
    dedupe_key: Option<String>,
    #[sqlx(flatten)]
    source: SourceRow,
    #[sqlx(try_from = "i32")]
    redrive_count: u32,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    first_failed_at: DateTime<Utc>,
    last_attempt_at: Option<DateTime<Utc>>,
}

impl TryFrom<EventRow> for DeadLetter {
    type Error = dlq_core::Error;

    fn try_from(row: EventRow) -> Result<Self> {
        let failure = row.failure.into_failure()?;
        let mut l = Self::new(row.id, &row.event_type, row.payload.into_payload(), failure, row.created_at);
        l.handler = row.handler;
        l.status = row.status.parse::<Status>()?;
        l.retry_count = row.retry_count;
        l.max_retries = row.max_retries;
        l.retry_after = row.retry_after;
        l.dead_reason = row.dead_reason.map(|r| r.parse::<DeadReason>()).transpose()?;
        // The column keeps the last holder; the record reports a holder only while it holds.
        l.lease_owner = if l.status == Status::Processing { row.lease_owner } else { None };
        l.lease_until = row.lease_until;
        l.dedupe_key = row.dedupe_key;
        l.source = row.source.into();
        l.redrive_count = row.redrive_count;
        l.updated_at = row.updated_at;
        l.first_failed_at = row.first_failed_at;
        l.last_attempt_at = row.last_attempt_at;
        Ok(l)
    }
}

/// A stored class name back to its class.
fn class(name: &str) -> Result<ErrorClass> {
    ErrorClass::from_name(name).ok_or_else(|| dlq_core::Error::Parse {
        what: "ErrorClass",
        value: name.to_owned(),
        expected: &["transient", "permanent", "fatal"],
    })
}

/// The payload columns of a row.
pub(crate) fn payload(row: &PgRow) -> Result<Payload> {
    Ok(PayloadRow::from_row(row).map_err(dlq_core::Error::store)?.into_payload())
}

/// A whole `dlq_events` row.
pub(crate) fn letter(row: &PgRow) -> Result<DeadLetter> {
    EventRow::from_row(row).map_err(dlq_core::Error::store)?.try_into()
}
