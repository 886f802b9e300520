//! Erasure by data subject: one statement deletes a subject's rows with their history and
//! records the erasure (`sql/erase.sql`, migrations 0022 and 0023); the subject key's check
//! value (migration 0035).

use dlq_core::store::{EraseRequest, Erasure, KeyCheck, StoreResult, SubjectHash};
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PgStore;

fn db(err: sqlx::Error) -> dlq_core::Error {
    dlq_core::Error::store(err)
}

/// Deletes the rows of `request.subject` and records it.
pub(crate) async fn erase(store: &PgStore, request: EraseRequest) -> StoreResult<Erasure> {
    let reason = request.note.reason.clone().unwrap_or_default();
    let row = sqlx::query(store.inner.sql.erase.sql())
        .bind(request.subject.as_str())
        .bind(request.subject.prefix())
        .bind(&request.note.actor)
        .bind(reason)
        .fetch_one(&store.inner.pool)
        .await
        .map_err(db)?;
    erasure(&row).map_err(db)
}

/// The newest `limit` erasure records.
pub(crate) async fn erasures(store: &PgStore, limit: usize) -> StoreResult<Vec<Erasure>> {
    let rows = sqlx::query(store.inner.sql.erasures.sql())
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&store.inner.pool)
        .await
        .map_err(db)?;
    rows.iter().map(erasure).collect::<Result<_, _>>().map_err(db)
}

/// Keeps `check` unless a check value is kept already; the kept one.
pub(crate) async fn key_check(store: &PgStore, check: KeyCheck) -> StoreResult<KeyCheck> {
    let pool = &store.inner.pool;
    sqlx::query(store.inner.sql.subject_key_check.sql()).bind(check.as_str()).execute(pool).await.map_err(db)?;
    let kept: String = sqlx::query_scalar(store.inner.sql.subject_key_read.sql()).fetch_one(pool).await.map_err(db)?;
    KeyCheck::from_hex(kept)
}

/// The rows stored under `subject`.
pub(crate) async fn count_subject(store: &PgStore, subject: SubjectHash) -> StoreResult<u64> {
    let query = sqlx::query_scalar::<_, i64>(store.inner.sql.count_subject.sql()).bind(subject.as_str());
    Ok(query.fetch_one(&store.inner.pool).await.map_err(db)?.unsigned_abs())
}

fn erasure(row: &PgRow) -> Result<Erasure, sqlx::Error> {
    let count = |name: &str| row.try_get::<i64, _>(name);
    let counts = (count("erased_rows")?, count("erased_attempts")?, count("erased_audit")?);
    let note = dlq_core::store::AuditNote::new(row.try_get::<String, _>("actor")?, row.try_get::<String, _>("reason")?);
    Ok(Erasure::stored(
        row.try_get("id")?,
        row.try_get::<String, _>("subject_prefix")?,
        counts,
        note,
        row.try_get("at")?,
    ))
}
