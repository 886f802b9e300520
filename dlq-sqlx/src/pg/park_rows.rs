//! A park batch as one `dlq_park_versioned[]` argument (migration 0020: migration 0016's
//! `dlq_park_letter` with the payload's version), written straight from the letters into sqlx's argument buffer in PostgreSQL's binary format.
//!
//! One array of rows, not one array per column: with 23 arrays PostgreSQL received, copied
//! and joined 23 values per statement (`unnest` fills a tuplestore per array), and the store
//! first moved every letter's fields into 23 vectors to bind them. The fields a letter may
//! leave empty come as one nested `dlq_park_extra`, NULL when it has none of them: every
//! field of a record costs 8 bytes of type and length, NULL or not.

use std::sync::Mutex;

use dlq_core::{Payload, store::NewDeadLetter};
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgArgumentBuffer, PgConnection, PgTypeInfo};
use sqlx::{Encode, Postgres, Type};

use super::micros;

/// PostgreSQL's fixed OIDs of the field types (its catalog's `pg_type.dat`).
const BYTEA: u32 = 17;
const INT8: u32 = 20;
const INT4: u32 = 23;
const TEXT: u32 = 25;
const JSONB: u32 = 3802;

/// Fields of `dlq_park_versioned` and of `dlq_park_extra`, as [`write_row`] writes them.
const FIELDS: i32 = 13;
const EXTRA_FIELDS: i32 = 11;

/// The OIDs of the park types in one database: they are created by a migration, so they
/// differ from database to database.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Oids {
    /// `dlq_park_versioned`.
    letter: u32,
    /// `dlq_park_versioned[]`.
    array: u32,
    /// `dlq_park_extra`.
    extra: u32,
}

/// `dlq_park_versioned` in one schema, and its OIDs, looked up on first use.
#[derive(Debug)]
pub(crate) struct RowType {
    /// The schema-qualified type name.
    name: String,
    oids: Mutex<Option<Oids>>,
}

impl RowType {
    /// The type in the schema `quoted_schema` (validated and double-quoted).
    pub(crate) fn new(quoted_schema: &str) -> Self {
        Self { name: format!("{quoted_schema}.dlq_park_versioned"), oids: Mutex::new(None) }
    }

    /// The OIDs, looked up on `conn` unless known (the extra type is the type of the letter's
    /// `extra` field).
    pub(crate) async fn resolve(&self, conn: &mut PgConnection) -> Result<Oids, sqlx::Error> {
        if let Some(known) = *self.lock() {
            return Ok(known);
        }
        let (letter, array, extra): (Oid, Oid, Oid) = sqlx::query_as(
            "SELECT t.oid, t.typarray, a.atttypid FROM pg_catalog.pg_type t
             JOIN pg_catalog.pg_attribute a ON a.attrelid = t.typrelid AND a.attname = 'extra'
             WHERE t.oid = $1::regtype",
        )
        .bind(&self.name)
        .fetch_one(conn)
        .await?;
        let oids = Oids { letter: letter.0, array: array.0, extra: extra.0 };
        *self.lock() = Some(oids);
        Ok(oids)
    }

    /// Forgets the OIDs (after a failed park: the schema may have been dropped and migrated
    /// again), so that the next park looks them up.
    pub(crate) fn forget(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Oids>> {
        // A panic cannot leave the guarded `Option` half-written.
        self.oids.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Prepared letters as one `dlq_park_versioned[]` value.
pub(crate) struct ParkRows<'a> {
    pub(crate) letters: &'a [NewDeadLetter],
    /// The types' OIDs, from [`RowType::resolve`].
    pub(crate) oids: Oids,
}

/// About how many bytes `letter` takes in a park statement, `payload_len` being its payload's
/// size as stored: its fields with their 8-byte headers, and its `dlq_park_extra` if it has one.
pub(crate) fn encoded_len(letter: &NewDeadLetter, payload_len: usize) -> usize {
    let f = &letter.failure;
    let src = &letter.source;
    let text = letter.event_type.len()
        + letter.handler.len()
        + f.class.as_str().len()
        + f.kind.len()
        + f.reason.len()
        + f.fingerprint.len()
        + f.chain.iter().map(|c| c.len() + 3).sum::<usize>()
        + letter.status().as_str().len();
    // Element length and field count, the fields' headers, the JSONB version bytes, chain
    // brackets, max_retries, delay_us and version.
    let fixed = 8 + FIELDS as usize * 8 + 4 + 4 + 12 + 4;
    // Its length and field count, the fields' headers, then the values: an original length
    // and a SHA-256 in hex counted whether cut or not, a partition and an offset counted
    // whether set or not, each header with its JSON quotes and separators.
    let extra = if has_extra(letter) {
        8 + EXTRA_FIELDS as usize * 8
            + 8
            + 64
            + 4
            + 8
            + f.stacktrace.as_ref().map_or(0, String::len)
            + letter.dead_reason.map_or(0, |r| r.as_str().len())
            + letter.dedupe_key.as_ref().map_or(0, String::len)
            + src.topic.as_ref().map_or(0, String::len)
            + src.headers.iter().map(|(k, v)| k.len() + v.len() + 6).sum::<usize>()
            + src.trace_context.as_ref().map_or(0, String::len)
    } else {
        0
    };
    fixed + text + payload_len + extra
}

impl Type<Postgres> for ParkRows<'_> {
    fn type_info() -> PgTypeInfo {
        // Named for the default schema; `produces` gives the resolved type of the store's.
        PgTypeInfo::array_of("dlq_park_versioned")
    }
}

impl Encode<'_, Postgres> for ParkRows<'_> {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        let buf: &mut Vec<u8> = buf;
        // One dimension, no NULL elements, the element type, then the dimension's length and
        // lower bound (PostgreSQL's array_recv).
        let len = i32::try_from(self.letters.len()).map_err(|_| "too many letters for one array")?;
        for word in [1, 0, self.oids.letter as i32, len, 1] {
            buf.extend_from_slice(&word.to_be_bytes());
        }
        for letter in self.letters {
            sized(buf, |buf| write_row(buf, letter, self.oids.extra))?;
        }
        Ok(IsNull::No)
    }

    fn produces(&self) -> Option<PgTypeInfo> {
        Some(PgTypeInfo::with_oid(Oid(self.oids.array)))
    }
}

/// Writes a length word, then what `write` writes, then fills in the length.
fn sized(buf: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>) -> Result<(), BoxDynError>) -> Result<(), BoxDynError> {
    let at = buf.len();
    buf.extend_from_slice(&[0; 4]);
    write(buf)?;
    let len = i32::try_from(buf.len() - at - 4).map_err(|_| "a park row's value is over 2 GiB")?;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// One field of a record: its type, then its length and bytes, or -1 for NULL (PostgreSQL's
/// record_recv).
fn field(buf: &mut Vec<u8>, oid: u32, value: Option<&[u8]>) -> Result<(), BoxDynError> {
    buf.extend_from_slice(&oid.to_be_bytes());
    match value {
        Some(value) => sized(buf, |b| {
            b.extend_from_slice(value);
            Ok(())
        }),
        None => {
            buf.extend_from_slice(&(-1_i32).to_be_bytes());
            Ok(())
        }
    }
}

fn text(buf: &mut Vec<u8>, value: Option<&str>) -> Result<(), BoxDynError> {
    field(buf, TEXT, value.map(str::as_bytes))
}

/// A JSONB field, serialized in place: a version byte, then the JSON text.
fn jsonb(buf: &mut Vec<u8>, value: Option<&impl serde::Serialize>) -> Result<(), BoxDynError> {
    let Some(value) = value else {
        return field(buf, JSONB, None);
    };
    buf.extend_from_slice(&JSONB.to_be_bytes());
    sized(buf, |b| {
        b.push(1);
        serde_json::to_writer(b, value)?;
        Ok(())
    })
}

/// One letter as a `dlq_park_versioned`, its fields in the type's order; `extra` is the OID of
/// `dlq_park_extra`.
fn write_row(buf: &mut Vec<u8>, letter: &NewDeadLetter, extra: u32) -> Result<(), BoxDynError> {
    buf.extend_from_slice(&FIELDS.to_be_bytes());
    let f = &letter.failure;
    let json = match &letter.payload {
        Payload::Json(value) => Some(value),
        Payload::Raw { .. } => None,
    };
    text(buf, Some(&letter.event_type))?;
    text(buf, Some(&letter.handler))?;
    jsonb(buf, json)?;
    text(buf, Some(f.class.as_str()))?;
    text(buf, Some(&f.kind))?;
    text(buf, Some(&f.reason))?;
    jsonb(buf, Some(&f.chain))?;
    text(buf, Some(&f.fingerprint))?;
    text(buf, Some(letter.status().as_str()))?;
    int4(buf, Some(i32::try_from(letter.max_retries).unwrap_or(i32::MAX)))?;
    int8(buf, Some(micros(letter.retry_delay)))?;
    int4(buf, Some(i32::try_from(letter.version).map_err(|_| "a payload version over 2147483647")?))?;
    buf.extend_from_slice(&extra.to_be_bytes());
    if has_extra(letter) {
        sized(buf, |buf| write_extra(buf, letter))
    } else {
        buf.extend_from_slice(&(-1_i32).to_be_bytes());
        Ok(())
    }
}

/// Whether a letter has any field of `dlq_park_extra`.
fn has_extra(letter: &NewDeadLetter) -> bool {
    let src = &letter.source;
    matches!(letter.payload, Payload::Raw { .. })
        || letter.failure.stacktrace.is_some()
        || letter.dead_reason.is_some()
        || letter.dedupe_key.is_some()
        || src.topic.is_some()
        || src.partition.is_some()
        || src.offset.is_some()
        || !src.headers.is_empty()
        || src.trace_context.is_some()
}

/// A letter's optional fields as a `dlq_park_extra`, in the type's order.
fn write_extra(buf: &mut Vec<u8>, letter: &NewDeadLetter) -> Result<(), BoxDynError> {
    buf.extend_from_slice(&EXTRA_FIELDS.to_be_bytes());
    let (raw, truncation) = match &letter.payload {
        Payload::Json(_) => (None, None),
        Payload::Raw { bytes, truncated } => (Some(bytes.as_slice()), truncated.as_ref()),
    };
    let src = &letter.source;
    field(buf, BYTEA, raw)?;
    int8(buf, truncation.map(|t| i64::try_from(t.original_len).unwrap_or(i64::MAX)))?;
    text(buf, truncation.map(|t| t.original_sha256.as_str()))?;
    text(buf, letter.failure.stacktrace.as_deref())?;
    text(buf, letter.dead_reason.map(|r| r.as_str()))?;
    text(buf, letter.dedupe_key.as_deref())?;
    text(buf, src.topic.as_deref())?;
    int4(buf, src.partition)?;
    int8(buf, src.offset)?;
    jsonb(buf, (!src.headers.is_empty()).then_some(&src.headers))?;
    text(buf, src.trace_context.as_deref())
}

fn int8(buf: &mut Vec<u8>, value: Option<i64>) -> Result<(), BoxDynError> {
    field(buf, INT8, value.map(i64::to_be_bytes).as_ref().map(<[u8; 8]>::as_slice))
}

fn int4(buf: &mut Vec<u8>, value: Option<i32>) -> Result<(), BoxDynError> {
    field(buf, INT4, value.map(i32::to_be_bytes).as_ref().map(<[u8; 4]>::as_slice))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use dlq_core::{ErrorClass, adapter::DeadReason, adapter::SourceMeta, classify::FailureInfo};

    use super::*;

    /// The bytes `letter` takes in an encoded batch.
    fn encoded(letter: &NewDeadLetter) -> usize {
        let letters = std::slice::from_ref(letter);
        let mut buf = PgArgumentBuffer::default();
        let rows = ParkRows { letters, oids: Oids { letter: 1, array: 2, extra: 3 } };
        let _ = rows.encode_by_ref(&mut buf).unwrap();
        // The array's header: five words.
        buf.len() - 20
    }

    /// Batches are sized by the estimate (`PgConfig::max_batch_bytes`), so it must stay
    /// close to what is sent, for bare letters and for letters with every optional field.
    #[test]
    fn the_size_estimate_is_within_a_tenth_of_the_encoding() {
        let failure = FailureInfo::new(
            ErrorClass::Transient,
            "io::Error",
            "downstream 503".into(),
            vec!["downstream 503".into(), "connection reset by peer".into()],
            None,
        );
        let bare = NewDeadLetter::new("payment", Payload::Json(serde_json::json!({ "n": 7 })), failure.clone());
        let big = NewDeadLetter::new(
            "payment",
            Payload::Json(serde_json::json!({ "order": "x".repeat(2_000), "lines": [1, 2, 3] })),
            failure.clone(),
        );
        let mut source = SourceMeta::kafka("payments", 3, 1_204_331);
        source.headers = BTreeMap::from([("content-type".to_owned(), "application/json".to_owned())]);
        source.trace_context = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned());
        let mut full = NewDeadLetter::new("payment", Payload::Raw { bytes: vec![0xff; 300], truncated: None }, failure)
            .with_source(source)
            .dead(DeadReason::Undecodable);
        full.failure.stacktrace = Some("at handle (src/lib.rs:10)\nat main (src/main.rs:3)".into());
        for letter in [bare, big, full] {
            let (sent, estimate) = (encoded(&letter), encoded_len(&letter, letter.payload.len()));
            let off = sent.abs_diff(estimate) as f64 / sent as f64;
            assert!(off < 0.1, "estimated {estimate} bytes, sent {sent}");
        }
    }
}
