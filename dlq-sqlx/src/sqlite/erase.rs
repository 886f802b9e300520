//! Erasure by data subject (migration 0010): a subject's rows deleted with their history and
//! the erasure recorded, in one `BEGIN IMMEDIATE` transaction; the subject key's check value
//! (migration 0014).

use dlq_core::store::{EraseRequest, Erasure, KeyCheck, StoreResult, SubjectHash};
use sqlx::Row;
use sqlx::sqlite::{SqliteConnection, SqlitePool, SqliteRow};

use super::codec::{self, sql};
use super::write::begin;

const ERASE_ATTEMPTS: &str = include_str!("sql/erase_attempts.sql");
const ERASE_AUDIT: &str = include_str!("sql/erase_audit.sql");
const ERASE_EVENTS: &str = include_str!("sql/erase_events.sql");
const INSERT_ERASURE: &str = include_str!("sql/erasure_insert.sql");
const KEEP_KEY_CHECK: &str = include_str!("sql/subject_key_check.sql");
const KEY_CHECK: &str = include_str!("sql/subject_key_read.sql");
const COUNT_SUBJECT: &str = include_str!("sql/count_subject.sql");
const SELECT_ERASURES: &str = include_str!("sql/erasures.sql");

/// Deletes the rows of `request.subject` and records it.
pub(super) async fn erase(pool: &SqlitePool, request: EraseRequest) -> StoreResult<Erasure> {
    let subject = request.subject.as_str();
    let mut tx = begin(pool).await?;
    // History first: the rows' ids are found by their subject.
    let attempts = delete(&mut tx, ERASE_ATTEMPTS, subject).await?;
    let audit = delete(&mut tx, ERASE_AUDIT, subject).await?;
    let rows = delete(&mut tx, ERASE_EVENTS, subject).await?;
    let at = codec::now_micros();
    let reason = request.note.reason.clone().unwrap_or_default();
    let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let id: i64 = sqlx::query_scalar(INSERT_ERASURE)
        .bind(request.subject.prefix())
        .bind(signed(rows))
        .bind(signed(attempts))
        .bind(signed(audit))
        .bind(&request.note.actor)
        .bind(reason)
        .bind(at)
        .fetch_one(&mut *tx)
        .await
        .map_err(sql)?;
    tx.commit().await.map_err(sql)?;
    Ok(Erasure::new(id, request.subject.prefix(), (rows, attempts, audit), request.note, codec::time(at)?))
}

/// Runs one of the erasure's deletes: how many rows it deleted.
async fn delete(conn: &mut SqliteConnection, statement: &'static str, subject: &str) -> StoreResult<u64> {
    let done = sqlx::query(statement).bind(subject).execute(conn).await.map_err(sql)?;
    Ok(done.rows_affected())
}

/// The newest `limit` erasure records.
pub(super) async fn erasures(pool: &SqlitePool, limit: usize) -> StoreResult<Vec<Erasure>> {
    let rows = sqlx::query(SELECT_ERASURES).bind(codec::limit(limit)).fetch_all(pool).await.map_err(sql)?;
    rows.iter().map(erasure).collect()
}

/// Keeps `check` unless a check value is kept already; the kept one.
pub(super) async fn key_check(pool: &SqlitePool, check: KeyCheck) -> StoreResult<KeyCheck> {
    let mut tx = begin(pool).await?;
    let kept: Option<String> = sqlx::query_scalar(KEEP_KEY_CHECK)
        .bind(check.as_str())
        .bind(codec::now_micros())
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql)?;
    let kept = match kept {
        Some(kept) => kept,
        None => sqlx::query_scalar(KEY_CHECK).fetch_one(&mut *tx).await.map_err(sql)?,
    };
    tx.commit().await.map_err(sql)?;
    KeyCheck::from_hex(kept)
}

/// The rows stored under `subject`.
pub(super) async fn count_subject(pool: &SqlitePool, subject: SubjectHash) -> StoreResult<u64> {
    let count: i64 = sqlx::query_scalar(COUNT_SUBJECT).bind(subject.as_str()).fetch_one(pool).await.map_err(sql)?;
    Ok(count.unsigned_abs())
}

fn erasure(row: &SqliteRow) -> StoreResult<Erasure> {
    let get = |name: &str| row.try_get::<i64, _>(name).map_err(sql);
    let counts = (get("erased_rows")?, get("erased_attempts")?, get("erased_audit")?);
    let text = |name: &str| row.try_get::<String, _>(name).map_err(sql);
    let note = dlq_core::store::AuditNote::new(text("actor")?, text("reason")?);
    Ok(Erasure::stored(get("id")?, text("subject_prefix")?, counts, note, codec::time(get("at")?)?))
}
