//! Values between `dlq_core` types and SQLite columns: times as unix microseconds, payloads,
//! failures and whole rows.

use std::time::Duration;

use chrono::{DateTime, Utc};
use dlq_core::store::StoreResult;
use dlq_core::{
    DeadLetter, Error, ErrorClass, Payload, Status, adapter::DeadReason, adapter::SourceMeta, classify::FailureInfo,
    store::Truncation,
};
use sqlx::FromRow;
use sqlx::error::BoxDynError;
use sqlx::sqlite::{Sqlite, SqliteRow, SqliteTypeInfo, SqliteValueRef};

use crate::stored_json::{self, StoredJson};

/// The latest time chrono can represent, as stored.
fn max_micros() -> i64 {
    DateTime::<Utc>::MAX_UTC.timestamp_micros()
}

/// This host's clock, in unix microseconds.
pub(super) fn now_micros() -> i64 {
    Utc::now().timestamp_micros()
}

/// `at + delay`, saturating at the latest representable time.
pub(super) fn later(at: i64, delay: Duration) -> i64 {
    let delay = i64::try_from(delay.as_micros()).unwrap_or(i64::MAX);
    at.saturating_add(delay).min(max_micros())
}

/// `at - delay`, saturating at the earliest representable time.
pub(super) fn earlier(at: i64, delay: Duration) -> i64 {
    let delay = i64::try_from(delay.as_micros()).unwrap_or(i64::MAX);
    at.saturating_sub(delay).max(DateTime::<Utc>::MIN_UTC.timestamp_micros())
}

pub(super) fn time(micros: i64) -> StoreResult<DateTime<Utc>> {
    DateTime::from_timestamp_micros(micros).ok_or_else(|| decode_error(format!("timestamp {micros} out of range")))
}

/// A store error for a value the database holds but `dlq_core` cannot represent.
pub(super) fn decode_error(message: impl Into<String>) -> Error {
    Error::store(sqlx::Error::Decode(message.into().into()))
}

pub(super) fn sql(err: sqlx::Error) -> Error {
    Error::store(err)
}

/// A list as a JSON array, bound as one parameter and read with `json_each`.
pub(super) fn json_list<T: serde::Serialize>(items: &[T]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".to_owned())
}

pub(super) fn limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The payload columns: `payload` (JSON text), `payload_raw`, `payload_truncated`,
/// `payload_original_len`, `payload_sha256`.
pub(super) struct PayloadColumns {
    pub(super) json: Option<String>,
    pub(super) raw: Option<Vec<u8>>,
    pub(super) truncated: bool,
    pub(super) original_len: Option<i64>,
    pub(super) sha256: Option<String>,
}

/// A statement being built, as the SQLite store's writers bind it.
pub(super) type Query<'q> = sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>;

impl PayloadColumns {
    /// Binds the five columns, in the table's order (`payload`, `payload_raw`,
    /// `payload_truncated`, `payload_original_len`, `payload_sha256`), after what `query` has.
    pub(super) fn bind(self, query: Query<'_>) -> Query<'_> {
        query.bind(self.json).bind(self.raw).bind(self.truncated).bind(self.original_len).bind(self.sha256)
    }

    pub(super) fn new(payload: &Payload) -> StoreResult<Self> {
        match payload {
            Payload::Json(value) => {
                let json = serde_json::to_string(value).map_err(Error::Serialize)?;
                Ok(Self { json: Some(json), raw: None, truncated: false, original_len: None, sha256: None })
            }
            Payload::Raw { bytes, truncated } => Ok(Self {
                json: None,
                raw: Some(bytes.clone()),
                truncated: truncated.is_some(),
                original_len: truncated.as_ref().map(|t| i64::try_from(t.original_len).unwrap_or(i64::MAX)),
                sha256: truncated.as_ref().map(|t| t.original_sha256.clone()),
            }),
        }
    }
}

/// A JSON text column, read as its bytes: SQLite's `json_valid` accepts text serde cannot read
/// (`1e400`, nesting past 128, invalid UTF-8 in a string), kept as text (see [`StoredJson`]).
impl sqlx::Type<Sqlite> for StoredJson {
    fn type_info() -> SqliteTypeInfo {
        <String as sqlx::Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <&[u8] as sqlx::Type<Sqlite>>::compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, Sqlite> for StoredJson {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Self::parse(<&[u8] as sqlx::Decode<'r, Sqlite>>::decode(value)?))
    }
}

/// The payload columns as stored.
#[derive(FromRow)]
struct PayloadRow {
    payload: Option<StoredJson>,
    payload_raw: Option<Vec<u8>>,
    payload_truncated: bool,
    payload_original_len: Option<i64>,
    payload_sha256: Option<String>,
}

impl From<PayloadRow> for Payload {
    /// The stored payload (see [`stored_json::payload`]).
    fn from(row: PayloadRow) -> Self {
        let truncated = row.payload_truncated.then(|| Truncation {
            original_len: u64::try_from(row.payload_original_len.unwrap_or_default()).unwrap_or_default(),
            original_sha256: row.payload_sha256.unwrap_or_default(),
        });
        stored_json::payload(row.payload, row.payload_raw, truncated)
    }
}

/// The failure columns: `error_class`, `error_kind`, `error_reason`, `error_chain` (JSON
/// text), `error_stacktrace`, `fingerprint`.
pub(super) struct FailureColumns {
    pub(super) class: &'static str,
    pub(super) kind: String,
    pub(super) reason: String,
    pub(super) chain: String,
    pub(super) stacktrace: Option<String>,
    pub(super) fingerprint: String,
}

impl FailureColumns {
    pub(super) fn new(failure: &FailureInfo) -> Self {
        Self {
            class: failure.class.as_str(),
            kind: failure.kind.clone(),
            reason: failure.reason.clone(),
            chain: json_list(&failure.chain),
            stacktrace: failure.stacktrace.clone(),
            fingerprint: failure.fingerprint.clone(),
        }
    }
}

/// The failure columns as stored.
#[derive(FromRow)]
struct FailureRow {
    error_class: String,
    error_kind: String,
    error_reason: String,
    error_chain: StoredJson,
    error_stacktrace: Option<String>,
    fingerprint: String,
}

impl TryFrom<FailureRow> for FailureInfo {
    type Error = Error;

    fn try_from(row: FailureRow) -> StoreResult<Self> {
        let class: ErrorClass =
            row.error_class.parse().map_err(|_| decode_error(format!("error_class `{}`", row.error_class)))?;
        // `new` bounds and fingerprints; the stored values are kept exactly as they are.
        let mut info = Self::new(class, "", String::new(), Vec::new(), None);
        info.kind = row.error_kind;
        info.reason = row.error_reason;
        info.chain = row.error_chain.into_chain();
        info.stacktrace = row.error_stacktrace;
        info.fingerprint = row.fingerprint;
        Ok(info)
    }
}

/// The source metadata columns as stored.
#[derive(FromRow)]
struct SourceRow {
    source_topic: Option<String>,
    source_partition: Option<i32>,
    source_offset: Option<i64>,
    source_headers: StoredJson,
    trace_context: Option<String>,
}

impl From<SourceRow> for SourceMeta {
    fn from(row: SourceRow) -> Self {
        Self {
            topic: row.source_topic,
            partition: row.source_partition,
            offset: row.source_offset,
            headers: row.source_headers.into_headers(),
            trace_context: row.trace_context,
            subject: None,
        }
    }
}

/// A row of `dlq_events` selected with its columns of `sql/event_columns.sql`: times in unix
/// microseconds.
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
    #[sqlx(try_from = "i64")]
    retry_count: u32,
    #[sqlx(try_from = "i64")]
    max_retries: u32,
    retry_after: i64,
    dead_reason: Option<String>,
    lease_owner: Option<String>,
    lease_until: Option<i64>,
    dedupe_key: Option<String>,
    #[sqlx(flatten)]
    source: SourceRow,
    #[sqlx(try_from = "i64")]
    redrive_count: u32,
    created_at: i64,
    updated_at: i64,
    first_failed_at: i64,
    last_attempt_at: Option<i64>,
    #[sqlx(try_from = "i64")]
    version: u32,
}

impl TryFrom<EventRow> for DeadLetter {
    type Error = Error;

    fn try_from(row: EventRow) -> StoreResult<Self> {
        let mut l =
            Self::new(row.id, &row.event_type, row.payload.into(), row.failure.try_into()?, time(row.created_at)?);
        l.handler = row.handler;
        l.version = row.version;
        l.status = row.status.parse::<Status>()?;
        l.retry_count = row.retry_count;
        l.max_retries = row.max_retries;
        l.retry_after = time(row.retry_after)?;
        l.dead_reason = row.dead_reason.map(|r| r.parse()).transpose()?;
        l.lease_owner = row.lease_owner;
        l.lease_until = row.lease_until.map(time).transpose()?;
        l.dedupe_key = row.dedupe_key;
        l.source = row.source.into();
        l.redrive_count = row.redrive_count;
        l.updated_at = time(row.updated_at)?;
        l.first_failed_at = time(row.first_failed_at)?;
        l.last_attempt_at = row.last_attempt_at.map(time).transpose()?;
        Ok(l)
    }
}

/// Reads a row of `dlq_events` selected with its columns of `sql/event_columns.sql`.
pub(super) fn letter(row: &SqliteRow) -> StoreResult<DeadLetter> {
    EventRow::from_row(row).map_err(sql)?.try_into()
}

/// The dead reason column value.
pub(super) fn dead_reason(reason: Option<DeadReason>) -> Option<&'static str> {
    reason.map(DeadReason::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_saturates_at_the_latest_time() {
        assert_eq!(later(0, Duration::from_micros(5)), 5);
        assert_eq!(later(now_micros(), Duration::MAX), max_micros());
        assert!(time(later(now_micros(), Duration::MAX)).is_ok());
    }

    #[test]
    fn earlier_saturates_at_the_earliest_time() {
        assert_eq!(earlier(10, Duration::from_micros(4)), 6);
        assert!(time(earlier(now_micros(), Duration::MAX)).is_ok());
    }

    #[test]
    fn payload_columns_keep_truncation() {
        let payload = Payload::from_bytes(&[b'x'; 64]).fit(16);
        let cols = PayloadColumns::new(&payload).unwrap();
        assert!(cols.truncated);
        assert_eq!(cols.original_len, Some(64));
        assert_eq!(cols.raw.as_deref(), Some(&[b'x'; 16][..]));
        assert_eq!(cols.sha256.map(|s| s.len()), Some(64));
    }
}
