//! Decoding `dlq_events` rows into [`DeadLetter`]s (and a claim's columns into
//! [`Claimed`]s): private row types derive
//! [`sqlx::FromRow`] for the columns as stored, and a conversion step turns them into the
//! `dlq_core` records (class and status names, the JSON chain and headers, counts).
//!
//! Every `jsonb` column is read as a [`StoredJson`]: PostgreSQL accepts documents serde cannot
//! read, and one such row must not fail a list, a page or a bulk action over many.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use dlq_core::store::{Claimed, Lease};
use dlq_core::{
    DeadLetter, ErrorClass, Payload, Status, adapter::DeadReason, adapter::SourceMeta, classify::FailureInfo,
    store::Truncation,
};
use sqlx::error::BoxDynError;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgRow, PgTypeInfo, PgValueFormat, PgValueRef};
use sqlx::{Column, FromRow, Postgres, Row, ValueRef};
use uuid::Uuid;

use crate::stored_json::{self, StoredJson};

type Result<T> = std::result::Result<T, dlq_core::Error>;

/// `jsonb`'s type OID: its binary form is a version byte (1) before the text.
const JSONB: Oid = Oid(3802);

impl sqlx::Type<Postgres> for StoredJson {
    fn type_info() -> PgTypeInfo {
        <serde_json::Value as sqlx::Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <serde_json::Value as sqlx::Type<Postgres>>::compatible(ty)
    }
}

/// Read from the bytes PostgreSQL sends (as sqlx's own `serde_json::Value` decoding reads them).
impl<'r> sqlx::Decode<'r, Postgres> for StoredJson {
    fn decode(value: PgValueRef<'r>) -> std::result::Result<Self, BoxDynError> {
        let versioned = value.format() == PgValueFormat::Binary && value.type_info().oid() == Some(JSONB);
        let mut text = value.as_bytes()?;
        if versioned {
            match text.split_first() {
                Some((1, rest)) => text = rest,
                _ => return Err("unsupported jsonb format version (expected 1)".into()),
            }
        }
        Ok(Self::parse(text))
    }
}

/// The payload columns, as read by every `SELECT` of a row and by the patch lock.
#[derive(FromRow)]
pub(crate) struct PayloadRow {
    payload: Option<StoredJson>,
    payload_raw: Option<Vec<u8>>,
    payload_truncated: bool,
    payload_original_len: Option<i64>,
    payload_sha256: Option<String>,
}

impl PayloadRow {
    /// The payload columns at `[payload, payload_raw, payload_truncated, payload_original_len,
    /// payload_sha256]` of a result set's row.
    fn read(row: &PgRow, [payload, raw, truncated, original_len, sha256]: [usize; 5]) -> Result<Self> {
        Ok(Self {
            payload: at(row, payload)?,
            payload_raw: at(row, raw)?,
            payload_truncated: at(row, truncated)?,
            payload_original_len: at(row, original_len)?,
            payload_sha256: at(row, sha256)?,
        })
    }

    /// The stored payload (see [`stored_json::payload`]).
    pub(crate) fn into_payload(self) -> Payload {
        let truncated = self.payload_truncated.then(|| Truncation {
            original_len: u64::try_from(self.payload_original_len.unwrap_or(0)).unwrap_or(0),
            original_sha256: self.payload_sha256.unwrap_or_default(),
        });
        stored_json::payload(self.payload, self.payload_raw, truncated)
    }
}

/// The failure columns.
struct FailureRow {
    error_class: String,
    error_kind: String,
    error_reason: String,
    error_chain: StoredJson,
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
        info.chain = self.error_chain.into_chain();
        info.stacktrace = self.error_stacktrace;
        info.fingerprint = self.fingerprint;
        Ok(info)
    }
}

/// The source metadata columns.
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

/// A whole `dlq_events` row (extra columns, such as a claim's `lease_token`, are ignored).
struct EventRow {
    id: i64,
    event_type: String,
    handler: String,
    payload: PayloadRow,
    version: u32,
    failure: FailureRow,
    status: String,
    retry_count: u32,
    max_retries: u32,
    retry_after: DateTime<Utc>,
    dead_reason: Option<String>,
    lease_owner: Option<String>,
    lease_until: Option<DateTime<Utc>>,
    dedupe_key: Option<String>,
    source: SourceRow,
    redrive_count: u32,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    first_failed_at: DateTime<Utc>,
    last_attempt_at: Option<DateTime<Utc>>,
}

/// Declares a struct holding the position of each named column in a result set.
macro_rules! columns {
    ($(#[$doc:meta])* $columns:ident { $($name:ident),* $(,)? }) => {
        $(#[$doc])*
        struct $columns {
            $($name: usize,)*
        }

        impl $columns {
            fn of(row: &PgRow) -> Result<Self> {
                let at = |name: &str| row.try_column(name).map(Column::ordinal).map_err(dlq_core::Error::store);
                Ok(Self { $($name: at(stringify!($name))?,)* })
            }
        }
    };
}

columns!(
    /// Where each column of an [`EventRow`] sits in one result set: looked up by name once
    /// for all the set's rows (a list decodes a page of rows; a by-name read of each column
    /// of each row was a third of a retrier's CPU).
    Columns {
        id,
        event_type,
        handler,
        payload,
        payload_raw,
        payload_truncated,
        payload_original_len,
        payload_sha256,
        version,
        error_class,
        error_kind,
        error_reason,
        error_chain,
        error_stacktrace,
        fingerprint,
        status,
        retry_count,
        max_retries,
        retry_after,
        dead_reason,
        lease_owner,
        lease_until,
        dedupe_key,
        source_topic,
        source_partition,
        source_offset,
        source_headers,
        trace_context,
        redrive_count,
        created_at,
        updated_at,
        first_failed_at,
        last_attempt_at,
    }
);

columns!(
    /// Where each column a claim returns (`claim_rows.sql`) sits in its result set.
    ClaimColumns {
        id,
        event_type,
        payload,
        payload_raw,
        payload_truncated,
        payload_original_len,
        payload_sha256,
        version,
        retry_count,
        max_retries,
        retry_after,
        first_failed_at,
        trace_context,
        lease_token,
    }
);

/// The value at `index`, whose type the schema fixes (so sqlx's per-value type check is skipped;
/// a value of another shape still fails to decode, never silently).
fn at<'r, T: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>>(row: &'r PgRow, index: usize) -> Result<T> {
    row.try_get_unchecked(index).map_err(dlq_core::Error::store)
}

/// A count column (the schema keeps counts at 0 or more).
fn count(row: &PgRow, index: usize) -> Result<u32> {
    let n: i32 = at(row, index)?;
    u32::try_from(n).map_err(dlq_core::Error::store)
}

impl EventRow {
    fn read(row: &PgRow, c: &Columns) -> Result<Self> {
        Ok(Self {
            id: at(row, c.id)?,
            event_type: at(row, c.event_type)?,
            handler: at(row, c.handler)?,
            payload: PayloadRow::read(
                row,
                [c.payload, c.payload_raw, c.payload_truncated, c.payload_original_len, c.payload_sha256],
            )?,
            version: count(row, c.version)?,
            failure: FailureRow {
                error_class: at(row, c.error_class)?,
                error_kind: at(row, c.error_kind)?,
                error_reason: at(row, c.error_reason)?,
                error_chain: at(row, c.error_chain)?,
                error_stacktrace: at(row, c.error_stacktrace)?,
                fingerprint: at(row, c.fingerprint)?,
            },
            status: at(row, c.status)?,
            retry_count: count(row, c.retry_count)?,
            max_retries: count(row, c.max_retries)?,
            retry_after: at(row, c.retry_after)?,
            dead_reason: at(row, c.dead_reason)?,
            lease_owner: at(row, c.lease_owner)?,
            lease_until: at(row, c.lease_until)?,
            dedupe_key: at(row, c.dedupe_key)?,
            source: SourceRow {
                source_topic: at(row, c.source_topic)?,
                source_partition: at(row, c.source_partition)?,
                source_offset: at(row, c.source_offset)?,
                source_headers: at(row, c.source_headers)?,
                trace_context: at(row, c.trace_context)?,
            },
            redrive_count: count(row, c.redrive_count)?,
            created_at: at(row, c.created_at)?,
            updated_at: at(row, c.updated_at)?,
            first_failed_at: at(row, c.first_failed_at)?,
            last_attempt_at: at(row, c.last_attempt_at)?,
        })
    }
}

impl TryFrom<EventRow> for DeadLetter {
    type Error = dlq_core::Error;

    fn try_from(row: EventRow) -> Result<Self> {
        let failure = row.failure.into_failure()?;
        let mut l = Self::new(row.id, &row.event_type, row.payload.into_payload(), failure, row.created_at);
        l.handler = row.handler;
        l.version = row.version;
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
    name.parse()
}

/// The payload columns of a row.
pub(crate) fn payload(row: &PgRow) -> Result<Payload> {
    Ok(PayloadRow::from_row(row).map_err(dlq_core::Error::store)?.into_payload())
}

/// A whole `dlq_events` row.
pub(crate) fn letter(row: &PgRow) -> Result<DeadLetter> {
    EventRow::read(row, &Columns::of(row)?)?.try_into()
}

/// Whole `dlq_events` rows of one result set, in order, each column found once for all.
pub(crate) fn letters<'r>(rows: impl IntoIterator<Item = &'r PgRow>) -> Result<Vec<DeadLetter>> {
    let mut columns = None;
    let mut letters = Vec::new();
    for row in rows {
        let c = match &columns {
            Some(c) => c,
            None => columns.insert(Columns::of(row)?),
        };
        letters.push(EventRow::read(row, c)?.try_into()?);
    }
    Ok(letters)
}

/// The claimed rows of a claiming statement's result set, in the order they came, each column
/// found once for all; a row without a lease token (a settling statement that claimed
/// nothing) stands for none.
pub(crate) fn claimed(rows: &[PgRow]) -> Result<Vec<Claimed>> {
    let mut columns = None;
    let mut claimed = Vec::with_capacity(rows.len());
    for row in rows {
        let c = match &columns {
            Some(c) => c,
            None => columns.insert(ClaimColumns::of(row)?),
        };
        let Some(token) = at::<Option<Uuid>>(row, c.lease_token)? else {
            continue;
        };
        let payload = PayloadRow::read(
            row,
            [c.payload, c.payload_raw, c.payload_truncated, c.payload_original_len, c.payload_sha256],
        )?;
        claimed.push(Claimed {
            lease: Lease { id: at(row, c.id)?, token },
            event_type: at(row, c.event_type)?,
            payload: payload.into_payload(),
            version: count(row, c.version)?,
            retry_count: count(row, c.retry_count)?,
            max_retries: count(row, c.max_retries)?,
            retry_after: at(row, c.retry_after)?,
            first_failed_at: at(row, c.first_failed_at)?,
            trace_context: at(row, c.trace_context)?,
        });
    }
    Ok(claimed)
}
