//! Decoding `dlq_events` rows into [`DeadLetter`]s.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use dlq_core::{DeadLetter, DeadReason, ErrorClass, FailureInfo, Payload, SourceMeta, Status, Truncation};
use sqlx::Row;
use sqlx::postgres::PgRow;

type Result<T> = std::result::Result<T, dlq_core::Error>;

fn get<'r, T>(row: &'r PgRow, column: &str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(column).map_err(dlq_core::Error::store)
}

fn count(row: &PgRow, column: &str) -> Result<u32> {
    Ok(u32::try_from(get::<i32>(row, column)?).unwrap_or(0))
}

/// A stored class name back to its class (a transient class loses its retry-after hint).
pub(crate) fn class(name: &str) -> Result<ErrorClass> {
    ErrorClass::from_name(name).ok_or_else(|| dlq_core::Error::Parse {
        what: "ErrorClass",
        value: name.to_owned(),
        expected: &["transient", "permanent", "fatal"],
    })
}

/// The payload columns of a row.
pub(crate) fn payload(row: &PgRow) -> Result<Payload> {
    if let Some(bytes) = get::<Option<Vec<u8>>>(row, "payload_raw")? {
        let truncated = if get::<bool>(row, "payload_truncated")? {
            Some(Truncation {
                original_len: u64::try_from(get::<Option<i64>>(row, "payload_original_len")?.unwrap_or(0)).unwrap_or(0),
                original_sha256: get::<Option<String>>(row, "payload_sha256")?.unwrap_or_default(),
            })
        } else {
            None
        };
        return Ok(Payload::Raw { bytes, truncated });
    }
    let value: Option<serde_json::Value> = get(row, "payload")?;
    Ok(Payload::Json(value.unwrap_or(serde_json::Value::Null)))
}

/// The failure columns of a row, exactly as stored (not bounded again).
fn failure(row: &PgRow) -> Result<FailureInfo> {
    let class = class(&get::<String>(row, "error_class")?)?;
    let chain: serde_json::Value = get(row, "error_chain")?;
    let chain = match chain {
        serde_json::Value::Array(items) => {
            items.into_iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)).collect()
        }
        _ => Vec::new(),
    };
    // `FailureInfo` is non-exhaustive: start from a blank one (built once) and fill it in.
    static BLANK: LazyLock<FailureInfo> =
        LazyLock::new(|| FailureInfo::new(ErrorClass::TRANSIENT, "", String::new(), Vec::new(), None));
    let mut info = BLANK.clone();
    info.class = class;
    info.kind = get(row, "error_kind")?;
    info.reason = get(row, "error_reason")?;
    info.chain = chain;
    info.stacktrace = get(row, "error_stacktrace")?;
    info.fingerprint = get(row, "fingerprint")?;
    Ok(info)
}

fn source(row: &PgRow) -> Result<SourceMeta> {
    let headers: serde_json::Value = get(row, "source_headers")?;
    let headers: BTreeMap<String, String> = serde_json::from_value(headers).unwrap_or_default();
    Ok(SourceMeta {
        topic: get(row, "source_topic")?,
        partition: get(row, "source_partition")?,
        offset: get(row, "source_offset")?,
        headers,
        trace_context: get(row, "trace_context")?,
    })
}

/// A whole `dlq_events` row.
pub(crate) fn letter(row: &PgRow) -> Result<DeadLetter> {
    let created_at: DateTime<Utc> = get(row, "created_at")?;
    let event_type: String = get(row, "event_type")?;
    let mut l = DeadLetter::new(get(row, "id")?, &event_type, payload(row)?, failure(row)?, created_at);
    l.handler = get(row, "handler")?;
    l.status = get::<String>(row, "status")?.parse::<Status>()?;
    l.retry_count = count(row, "retry_count")?;
    l.max_retries = count(row, "max_retries")?;
    l.retry_after = get(row, "retry_after")?;
    l.dead_reason = get::<Option<String>>(row, "dead_reason")?.map(|r| r.parse::<DeadReason>()).transpose()?;
    // The column keeps the last holder; the record reports a holder only while it holds.
    l.lease_owner = if l.status == Status::Processing { get(row, "lease_owner")? } else { None };
    l.lease_until = get(row, "lease_until")?;
    l.dedupe_key = get(row, "dedupe_key")?;
    l.source = source(row)?;
    l.redrive_count = count(row, "redrive_count")?;
    l.updated_at = get(row, "updated_at")?;
    l.first_failed_at = get(row, "first_failed_at")?;
    l.last_attempt_at = get(row, "last_attempt_at")?;
    Ok(l)
}
