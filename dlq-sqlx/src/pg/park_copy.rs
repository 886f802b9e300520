//! `park_many` of many keyless letters through binary `COPY`, straight into `dlq_events`.
//!
//! `COPY` is PostgreSQL's cheapest way in for rows: no executor, no projection, no decoding of
//! a record array, and the client's encoding overlaps the server's inserting, as the rows go
//! in chunks. It has no `ON CONFLICT` and no `RETURNING`, so only letters without a dedupe key
//! take it (a keyless row enters no unique index but the primary key), and the ids are drawn
//! from the table's sequence first:
//!
//! 1. `BEGIN`;
//! 2. the transaction's `now()`, one id per letter (`nextval`) and the `NOTIFY` for the
//!    pending rows (debounced as every park's; sent at the commit);
//! 3. `COPY dlq_events (id, …) FROM STDIN (FORMAT binary)`: each row due at that `now()` plus
//!    its delay (the database's clock, as park.sql's `now()`), and created at it (the columns'
//!    defaults, in the same transaction); the optional columns no letter of the batch fills
//!    are left out, to their defaults too (a fifth fewer bytes for a small letter); the tally trigger
//!    counts the rows from its transition table, as it counts any insert that does not tell
//!    it otherwise;
//! 4. `COMMIT`: all of the letters are stored, or none. (A `NOTIFY` outside the transaction
//!    would commit on its own, a second WAL flush per call: 4 ms of 25 here.)
//!
//! A batch with a dedupe key in it goes through park.sql, whose `ON CONFLICT` on the
//! live-rows index is the dedupe.
//!
//! sqlx 0.9.0 sends `CopyDone` as a write of its own, which without `TCP_NODELAY` waits for
//! the server's delayed ACK (8–9 ms a `COPY` here): on a pool the store did not build, the
//! option is set ([`super::nodelay::set`]) before each `COPY`.

use chrono::{DateTime, Utc};
use dlq_core::Payload;
use dlq_core::store::{NewDeadLetter, Parked, SubjectHash};
use sqlx::Connection;
use sqlx::postgres::PgConnection;

use super::schema::Sql;

/// The fewest letters a `park_many` takes to `COPY`: under it the four round trips more than
/// one `INSERT` cost more than `COPY` saves (about 2 µs a row).
pub(crate) const COPY_MIN_LETTERS: usize = 64;

/// How many bytes of rows go in one `CopyData` message: the server inserts one chunk while
/// the next is encoded.
const CHUNK_BYTES: usize = 64 << 10;

/// Whether `letters` (prepared) go through `COPY`: enough of them, and none with a dedupe key.
pub(crate) fn copyable(letters: &[NewDeadLetter]) -> bool {
    letters.len() >= COPY_MIN_LETTERS && letters.iter().all(|l| l.dedupe_key.is_none())
}

/// Parks prepared keyless letters through `COPY` in one transaction on `conn`; ids in input
/// order. `wake`: whether the transaction sends the `NOTIFY` (for pending rows).
pub(crate) async fn park(
    conn: &mut PgConnection,
    sql: &Sql,
    letters: &[NewDeadLetter],
    wake: bool,
) -> Result<Vec<Parked>, sqlx::Error> {
    let count = i64::try_from(letters.len()).map_err(|_| sqlx::Error::Protocol("too many letters".into()))?;
    let mut tx = conn.begin().await?;
    let (now, mut ids, _woken): (DateTime<Utc>, Vec<i64>, i64) = sqlx::query_as(sql.park_ids.sql())
        .bind(count)
        .bind(sql.channel.as_str())
        .bind(wake)
        .fetch_one(&mut *tx)
        .await?;
    if ids.len() != letters.len() {
        return Err(sqlx::Error::Protocol("the park's id draw returned a different count".into()));
    }
    ids.sort_unstable();
    let now = pg_micros(now);
    let columns = Columns::of(letters);
    let mut copy = tx.copy_in_raw(&columns.statement(&sql.quoted_schema)).await?;
    let mut buf = Vec::with_capacity(CHUNK_BYTES + 4096);
    buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    buf.extend_from_slice(&[0; 8]);
    for (letter, &id) in letters.iter().zip(&ids) {
        if let Err(error) = write_row(&mut buf, columns, letter, id, now) {
            let _ = copy.abort("a letter could not be encoded").await;
            return Err(sqlx::Error::Encode(error));
        }
        if buf.len() >= CHUNK_BYTES {
            copy.send(std::mem::take(&mut buf)).await?;
            buf.reserve(CHUNK_BYTES + 4096);
        }
    }
    buf.extend_from_slice(&(-1_i16).to_be_bytes());
    copy.send(buf).await?;
    let copied = copy.finish().await?;
    if copied != letters.len() as u64 {
        return Err(sqlx::Error::Protocol(format!("COPY stored {copied} rows of {}", letters.len())));
    }
    tx.commit().await?;
    Ok(letters
        .iter()
        .zip(ids)
        .map(|(letter, id)| Parked { id, deduplicated: false, truncated: letter.payload.is_truncated() })
        .collect())
}

/// The optional columns a batch's `COPY` lists: those at least one of its letters fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Columns {
    /// A raw payload: `payload_raw`, and a cut one's `payload_truncated`,
    /// `payload_original_len`, `payload_sha256`.
    raw: bool,
    stacktrace: bool,
    dead_reason: bool,
    /// `source_topic`, `source_partition`, `source_offset`, `source_headers`, `trace_context`.
    source: bool,
    subject: bool,
    /// A version other than the column's default, 1.
    version: bool,
}

impl Columns {
    fn of(letters: &[NewDeadLetter]) -> Self {
        let mut columns =
            Self { raw: false, stacktrace: false, dead_reason: false, source: false, subject: false, version: false };
        for letter in letters {
            let src = &letter.source;
            columns.raw |= matches!(letter.payload, Payload::Raw { .. });
            columns.stacktrace |= letter.failure.stacktrace.is_some();
            columns.dead_reason |= letter.dead_reason.is_some();
            columns.source |= src.topic.is_some()
                || src.partition.is_some()
                || src.offset.is_some()
                || !src.headers.is_empty()
                || src.trace_context.is_some();
            columns.subject |= letter.subject.is_some();
            columns.version |= letter.version != 1;
        }
        columns
    }

    /// The `COPY` statement, in the order [`write_row`] writes the fields.
    fn statement(self, quoted_schema: &str) -> String {
        let mut names = vec![
            "id",
            "event_type",
            "handler",
            "payload",
            "error_class",
            "error_kind",
            "error_reason",
            "error_chain",
            "fingerprint",
            "status",
            "max_retries",
            "retry_after",
        ];
        let optional: [(bool, &[&str]); 6] = [
            (self.raw, &["payload_raw", "payload_truncated", "payload_original_len", "payload_sha256"]),
            (self.stacktrace, &["error_stacktrace"]),
            (self.dead_reason, &["dead_reason"]),
            (self.source, &["source_topic", "source_partition", "source_offset", "source_headers", "trace_context"]),
            (self.subject, &["subject"]),
            (self.version, &["version"]),
        ];
        for (listed, columns) in optional {
            if listed {
                names.extend_from_slice(columns);
            }
        }
        format!("COPY {quoted_schema}.dlq_events ({}) FROM STDIN (FORMAT binary)", names.join(", "))
    }

    /// How many fields a row has.
    fn count(self) -> i16 {
        12 + 4 * i16::from(self.raw)
            + i16::from(self.stacktrace)
            + i16::from(self.dead_reason)
            + 5 * i16::from(self.source)
            + i16::from(self.subject)
            + i16::from(self.version)
    }
}

/// Microseconds since 2000-01-01 UTC, PostgreSQL's binary `timestamptz`.
fn pg_micros(at: DateTime<Utc>) -> i64 {
    const PG_EPOCH_UNIX_SECONDS: i64 = 946_684_800;
    at.timestamp_micros() - PG_EPOCH_UNIX_SECONDS * 1_000_000
}

/// One letter as a row of binary `COPY`, its fields in [`Columns::statement`]'s order: the
/// values park.sql inserts from its `dlq_park_versioned` fields.
fn write_row(
    buf: &mut Vec<u8>,
    columns: Columns,
    letter: &NewDeadLetter,
    id: i64,
    now: i64,
) -> Result<(), sqlx::error::BoxDynError> {
    buf.extend_from_slice(&columns.count().to_be_bytes());
    let f = &letter.failure;
    let src = &letter.source;
    let (json, raw, truncation) = match &letter.payload {
        Payload::Json(value) => (Some(value), None, None),
        Payload::Raw { bytes, truncated } => (None, Some(bytes.as_slice()), truncated.as_ref()),
    };
    value(buf, Some(&id.to_be_bytes()))?;
    text(buf, Some(&letter.event_type))?;
    text(buf, Some(&letter.handler))?;
    jsonb(buf, json)?;
    text(buf, Some(f.class.as_str()))?;
    text(buf, Some(&f.kind))?;
    text(buf, Some(&f.reason))?;
    jsonb(buf, Some(&f.chain))?;
    text(buf, Some(&f.fingerprint))?;
    text(buf, Some(letter.status().as_str()))?;
    value(buf, Some(&i32::try_from(letter.max_retries).unwrap_or(i32::MAX).to_be_bytes()))?;
    let due = now.saturating_add(super::micros(letter.retry_delay));
    value(buf, Some(&due.to_be_bytes()))?;
    if columns.raw {
        value(buf, raw)?;
        value(buf, Some(&[u8::from(truncation.is_some())]))?;
        let original_len = truncation.map(|t| i64::try_from(t.original_len).unwrap_or(i64::MAX).to_be_bytes());
        value(buf, original_len.as_ref().map(|b| &b[..]))?;
        text(buf, truncation.map(|t| t.original_sha256.as_str()))?;
    }
    if columns.stacktrace {
        text(buf, f.stacktrace.as_deref())?;
    }
    if columns.dead_reason {
        text(buf, letter.dead_reason.map(|r| r.as_str()))?;
    }
    if columns.source {
        text(buf, src.topic.as_deref())?;
        value(buf, src.partition.map(i32::to_be_bytes).as_ref().map(|b| &b[..]))?;
        value(buf, src.offset.map(i64::to_be_bytes).as_ref().map(|b| &b[..]))?;
        jsonb(buf, Some(&src.headers))?;
        text(buf, src.trace_context.as_deref())?;
    }
    if columns.subject {
        text(buf, letter.subject.as_ref().map(SubjectHash::as_str))?;
    }
    if columns.version {
        let version = i32::try_from(letter.version).map_err(|_| "a payload version over 2147483647")?;
        value(buf, Some(&version.to_be_bytes()))?;
    }
    Ok(())
}

/// One field: its length and bytes, or -1 for NULL.
fn value(buf: &mut Vec<u8>, bytes: Option<&[u8]>) -> Result<(), sqlx::error::BoxDynError> {
    match bytes {
        Some(bytes) => {
            let len = i32::try_from(bytes.len()).map_err(|_| "a park row's value is over 2 GiB")?;
            buf.extend_from_slice(&len.to_be_bytes());
            buf.extend_from_slice(bytes);
        }
        None => buf.extend_from_slice(&(-1_i32).to_be_bytes()),
    }
    Ok(())
}

fn text(buf: &mut Vec<u8>, value_: Option<&str>) -> Result<(), sqlx::error::BoxDynError> {
    value(buf, value_.map(str::as_bytes))
}

/// A JSONB field, serialized in place: its length, a version byte, then the JSON text.
fn jsonb(buf: &mut Vec<u8>, json: Option<&impl serde::Serialize>) -> Result<(), sqlx::error::BoxDynError> {
    let Some(json) = json else { return value(buf, None) };
    let at = buf.len();
    buf.extend_from_slice(&[0; 4]);
    buf.push(1);
    serde_json::to_writer(&mut *buf, json)?;
    let len = i32::try_from(buf.len() - at - 4).map_err(|_| "a park row's value is over 2 GiB")?;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}
