//! Values between `dlq_core` types and SQLite columns: times as unix microseconds, payloads,
//! failures and whole rows.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use dlq_core::{
    DeadLetter, DeadReason, Error, ErrorClass, FailureInfo, Payload, SourceMeta, Status, StoreResult, Truncation,
};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

/// The columns of `dlq_events` that [`letter`] reads, for `SELECT` and `RETURNING`.
macro_rules! event_columns {
    () => {
        "id, event_type, handler, payload, payload_raw, payload_truncated, payload_original_len, payload_sha256, \
         error_class, error_kind, error_reason, error_chain, error_stacktrace, fingerprint, status, retry_count, \
         max_retries, retry_after, dead_reason, lease_owner, lease_until, dedupe_key, source_topic, \
         source_partition, source_offset, source_headers, trace_context, redrive_count, created_at, updated_at, \
         first_failed_at, last_attempt_at"
    };
}
pub(super) use event_columns;

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

fn count(value: i64, column: &str) -> StoreResult<u32> {
    u32::try_from(value).map_err(|_| decode_error(format!("{column} {value} out of range")))
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

impl PayloadColumns {
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

fn payload(row: &SqliteRow) -> StoreResult<Payload> {
    if let Some(json) = row.try_get::<Option<String>, _>("payload").map_err(sql)? {
        let value = serde_json::from_str(&json).map_err(|e| decode_error(format!("stored payload: {e}")))?;
        return Ok(Payload::Json(value));
    }
    let bytes: Vec<u8> = row.try_get::<Option<Vec<u8>>, _>("payload_raw").map_err(sql)?.unwrap_or_default();
    let truncated = if row.try_get::<bool, _>("payload_truncated").map_err(sql)? {
        let len: i64 = row.try_get::<Option<i64>, _>("payload_original_len").map_err(sql)?.unwrap_or_default();
        Some(Truncation {
            original_len: u64::try_from(len).unwrap_or_default(),
            original_sha256: row.try_get::<Option<String>, _>("payload_sha256").map_err(sql)?.unwrap_or_default(),
        })
    } else {
        None
    };
    Ok(Payload::Raw { bytes, truncated })
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
            class: failure.class.name(),
            kind: failure.kind.clone(),
            reason: failure.reason.clone(),
            chain: json_list(&failure.chain),
            stacktrace: failure.stacktrace.clone(),
            fingerprint: failure.fingerprint.clone(),
        }
    }
}

fn failure(row: &SqliteRow) -> StoreResult<FailureInfo> {
    let class: String = row.try_get("error_class").map_err(sql)?;
    let class = ErrorClass::from_name(&class).ok_or_else(|| decode_error(format!("error_class `{class}`")))?;
    let chain: String = row.try_get("error_chain").map_err(sql)?;
    let chain: Vec<String> = serde_json::from_str(&chain).map_err(|e| decode_error(format!("error_chain: {e}")))?;
    // `new` bounds and fingerprints; the stored values are kept exactly as they are.
    let mut info = FailureInfo::new(class, "", String::new(), Vec::new(), None);
    info.kind = row.try_get("error_kind").map_err(sql)?;
    info.reason = row.try_get("error_reason").map_err(sql)?;
    info.chain = chain;
    info.stacktrace = row.try_get("error_stacktrace").map_err(sql)?;
    info.fingerprint = row.try_get("fingerprint").map_err(sql)?;
    Ok(info)
}

fn source(row: &SqliteRow) -> StoreResult<SourceMeta> {
    let headers: String = row.try_get("source_headers").map_err(sql)?;
    let headers: BTreeMap<String, String> =
        serde_json::from_str(&headers).map_err(|e| decode_error(format!("source_headers: {e}")))?;
    Ok(SourceMeta {
        topic: row.try_get("source_topic").map_err(sql)?,
        partition: row.try_get("source_partition").map_err(sql)?,
        offset: row.try_get("source_offset").map_err(sql)?,
        headers,
        trace_context: row.try_get("trace_context").map_err(sql)?,
    })
}

fn optional_time(row: &SqliteRow, column: &str) -> StoreResult<Option<DateTime<Utc>>> {
    row.try_get::<Option<i64>, _>(column).map_err(sql)?.map(time).transpose()
}

fn required_time(row: &SqliteRow, column: &str) -> StoreResult<DateTime<Utc>> {
    time(row.try_get(column).map_err(sql)?)
}

/// Reads a row of `dlq_events` selected with [`event_columns!`].
pub(super) fn letter(row: &SqliteRow) -> StoreResult<DeadLetter> {
    let id: i64 = row.try_get("id").map_err(sql)?;
    let event_type: String = row.try_get("event_type").map_err(sql)?;
    let created_at = required_time(row, "created_at")?;
    let mut l = DeadLetter::new(id, &event_type, payload(row)?, failure(row)?, created_at);
    l.handler = row.try_get("handler").map_err(sql)?;
    l.status = row.try_get::<String, _>("status").map_err(sql)?.parse::<Status>()?;
    l.retry_count = count(row.try_get("retry_count").map_err(sql)?, "retry_count")?;
    l.max_retries = count(row.try_get("max_retries").map_err(sql)?, "max_retries")?;
    l.retry_after = required_time(row, "retry_after")?;
    l.dead_reason = row.try_get::<Option<String>, _>("dead_reason").map_err(sql)?.map(|r| r.parse()).transpose()?;
    l.lease_owner = row.try_get("lease_owner").map_err(sql)?;
    l.lease_until = optional_time(row, "lease_until")?;
    l.dedupe_key = row.try_get("dedupe_key").map_err(sql)?;
    l.source = source(row)?;
    l.redrive_count = count(row.try_get("redrive_count").map_err(sql)?, "redrive_count")?;
    l.updated_at = required_time(row, "updated_at")?;
    l.first_failed_at = required_time(row, "first_failed_at")?;
    l.last_attempt_at = optional_time(row, "last_attempt_at")?;
    Ok(l)
}

/// The dead reason column value.
pub(super) fn dead_reason(reason: Option<DeadReason>) -> Option<&'static str> {
    reason.map(DeadReason::as_str)
}

/// A payload as JSON for audit diffs: raw bytes as lossy text (as `MemoryStore` records it).
pub(super) fn payload_json(payload: &Payload) -> serde_json::Value {
    match payload {
        Payload::Json(v) => v.clone(),
        Payload::Raw { bytes, .. } => serde_json::Value::String(String::from_utf8_lossy(bytes).into_owned()),
    }
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
