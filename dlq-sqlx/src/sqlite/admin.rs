//! Reads, audited patches and purge: get, list, stats, groups, history, patch, purge (the
//! batched actions of the admin layer are in `ops`).

use std::time::Duration;

use dlq_core::store::{HistogramBucket, StoreResult};
use dlq_core::store::{PatchRequest, patch_diff};
use dlq_core::{
    DeadLetter, DlqId, Error, ListFilter, Payload, Status, admin::AttemptRecord, admin::AuditEntry,
    admin::FailureGroup, admin::Order, admin::StatsRow, store::AuditNote,
};
use sqlx::Row;
use sqlx::sqlite::{SqlitePool, SqliteRow};

use super::codec::{self, PayloadColumns, sql};
use super::statement::Composed;
use super::write::begin;

pub(super) static SELECT_ONE: Composed = Composed::new(include_str!("sql/get.sql"));
static SELECT_LIST: Composed = Composed::new(include_str!("sql/list.sql"));
static SELECT_LIST_OLDEST: Composed = Composed::new(include_str!("sql/list_oldest.sql"));
static COUNT: Composed = Composed::new(include_str!("sql/count_matching.sql"));
static SELECT_GROUPS: Composed = Composed::new(include_str!("sql/groups.sql"));
const SELECT_STATS: &str = include_str!("sql/stats.sql");
const SELECT_HISTOGRAM: &str = include_str!("sql/created_histogram.sql");
const SELECT_ATTEMPTS: &str = include_str!("sql/attempts.sql");
const SELECT_AUDIT: &str = include_str!("sql/audit.sql");
pub(super) const SELECT_AUDIT_ENTRY: &str = include_str!("sql/audit_entry.sql");
const INSERT_AUDIT: &str = include_str!("sql/audit_insert.sql");
const PATCH_ROW: &str = include_str!("sql/patch_write.sql");
const MARK_UNREADABLE: &str = include_str!("sql/mark_unreadable.sql");
const COUNT_UNREADABLE: &str = include_str!("sql/count_unreadable.sql");
const REVEAL_ROW: &str = include_str!("sql/reveal_row.sql");
const PURGE_SLICE_IDS: &str = include_str!("sql/purge_slice.sql");
const PURGE_ATTEMPTS: &str = include_str!("sql/purge_attempts.sql");
const PURGE_AUDIT: &str = include_str!("sql/purge_audit.sql");
const PURGE_EVENTS: &str = include_str!("sql/purge_events.sql");
const COUNT_PURGEABLE: &str = include_str!("sql/purgeable.sql");

/// Rows a purge deletes per transaction: SQLite has one writer, and parks wait for the slice
/// in hand, not for the whole purge.
const PURGE_SLICE: i64 = 5_000;

use super::codec::Query;

pub(super) fn bind_filter<'q>(query: Query<'q>, filter: &ListFilter) -> Query<'q> {
    let (lower, upper) = filter.id_range();
    query
        .bind(filter.status.map(Status::as_str))
        .bind(filter.event_type.clone())
        .bind(filter.fingerprint.clone())
        .bind(codec::json_list(&filter.ids))
        .bind(codec::limit(filter.limit))
        .bind(filter.kind.clone())
        .bind(filter.reason.clone())
        .bind(filter.since.map(|t| t.timestamp_micros()))
        .bind(filter.until.map(|t| t.timestamp_micros()))
        .bind(lower)
        .bind(upper)
}

pub(super) async fn get(pool: &SqlitePool, id: DlqId) -> StoreResult<Option<DeadLetter>> {
    let row = sqlx::query(SELECT_ONE.sql()).bind(id).fetch_optional(pool).await.map_err(sql)?;
    row.as_ref().map(codec::letter).transpose()
}

pub(super) async fn list(pool: &SqlitePool, filter: ListFilter) -> StoreResult<Vec<DeadLetter>> {
    let statement = match filter.order {
        Order::NewestFirst => SELECT_LIST.sql(),
        Order::OldestFirst => SELECT_LIST_OLDEST.sql(),
    };
    let rows = bind_filter(sqlx::query(statement), &filter).fetch_all(pool).await.map_err(sql)?;
    rows.iter().map(codec::letter).collect()
}

pub(super) async fn count(pool: &SqlitePool, filter: ListFilter) -> StoreResult<u64> {
    let n: i64 =
        bind_filter(sqlx::query(COUNT.sql()), &filter).fetch_one(pool).await.map_err(sql)?.try_get(0).map_err(sql)?;
    Ok(u64::try_from(n).unwrap_or_default())
}

pub(super) async fn created_histogram(
    pool: &SqlitePool,
    since: chrono::DateTime<chrono::Utc>,
    step: std::time::Duration,
    buckets: u32,
) -> StoreResult<Vec<HistogramBucket>> {
    let step = dlq_core::store::histogram_step(step)?.num_microseconds().unwrap_or(i64::MAX);
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(SELECT_HISTOGRAM)
        .bind(since.timestamp_micros())
        .bind(step)
        .bind(i64::from(buckets))
        .fetch_all(pool)
        .await
        .map_err(sql)?;
    Ok(rows
        .into_iter()
        .filter_map(|(event_type, bucket, count)| {
            let bucket = u32::try_from(bucket).ok().filter(|b| *b < buckets)?;
            Some(HistogramBucket::new(event_type, bucket, u64::try_from(count).unwrap_or_default()))
        })
        .collect())
}

pub(super) async fn stats(pool: &SqlitePool) -> StoreResult<Vec<StatsRow>> {
    let rows: Vec<(String, String, i64, Option<i64>)> =
        sqlx::query_as(SELECT_STATS).bind(codec::now_micros()).fetch_all(pool).await.map_err(sql)?;
    let mut stats = rows
        .into_iter()
        .map(|(event_type, status, count, oldest)| {
            Ok(StatsRow {
                event_type,
                status: status.parse()?,
                count: u64::try_from(count).unwrap_or_default(),
                oldest_due: oldest.map(codec::time).transpose()?,
            })
        })
        .collect::<StoreResult<Vec<_>>>()?;
    // `Status` orders by lifecycle, not by name.
    stats.sort_by(|a, b| (&a.event_type, a.status).cmp(&(&b.event_type, b.status)));
    Ok(stats)
}

pub(super) async fn groups(pool: &SqlitePool, filter: ListFilter) -> StoreResult<Vec<FailureGroup>> {
    let rows = bind_filter(sqlx::query(SELECT_GROUPS.sql()), &filter).fetch_all(pool).await.map_err(sql)?;
    rows.iter()
        .map(|row| {
            Ok(FailureGroup {
                fingerprint: row.try_get(0).map_err(sql)?,
                event_type: row.try_get(1).map_err(sql)?,
                kind: row.try_get(2).map_err(sql)?,
                sample_reason: row.try_get(3).map_err(sql)?,
                sample_id: row.try_get(4).map_err(sql)?,
                count: u64::try_from(row.try_get::<i64, _>(5).map_err(sql)?).unwrap_or_default(),
                first_seen: codec::time(row.try_get(6).map_err(sql)?)?,
                last_seen: codec::time(row.try_get(7).map_err(sql)?)?,
            })
        })
        .collect()
}

fn attempt(row: &SqliteRow) -> StoreResult<AttemptRecord> {
    Ok(AttemptRecord {
        dlq_id: row.try_get("dlq_id").map_err(sql)?,
        attempt: u32::try_from(row.try_get::<i64, _>("attempt").map_err(sql)?).unwrap_or(u32::MAX),
        outcome: row.try_get("outcome").map_err(sql)?,
        error_class: row.try_get("error_class").map_err(sql)?,
        error_reason: row.try_get("error_reason").map_err(sql)?,
        owner: row.try_get("owner").map_err(sql)?,
        at: codec::time(row.try_get("at").map_err(sql)?)?,
    })
}

pub(super) async fn attempts(pool: &SqlitePool, id: DlqId) -> StoreResult<Vec<AttemptRecord>> {
    let rows = sqlx::query(SELECT_ATTEMPTS).bind(id).fetch_all(pool).await.map_err(sql)?;
    rows.iter().map(attempt).collect()
}

pub(super) fn audit_entry(row: &SqliteRow) -> StoreResult<AuditEntry> {
    let diff: crate::stored_json::StoredJson = row.try_get("diff").map_err(sql)?;
    Ok(AuditEntry {
        id: row.try_get("id").map_err(sql)?,
        dlq_id: row.try_get("dlq_id").map_err(sql)?,
        action: row.try_get("action").map_err(sql)?,
        actor: row.try_get("actor").map_err(sql)?,
        reason: row.try_get("reason").map_err(sql)?,
        diff: diff.into_value(),
        at: codec::time(row.try_get("at").map_err(sql)?)?,
    })
}

pub(super) async fn audit(pool: &SqlitePool, id: DlqId) -> StoreResult<Vec<AuditEntry>> {
    let rows = sqlx::query(SELECT_AUDIT).bind(id).fetch_all(pool).await.map_err(sql)?;
    rows.iter().map(audit_entry).collect()
}

/// Appends an audit entry; returns its id.
pub(super) async fn insert_audit(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    id: DlqId,
    action: &str,
    note: &AuditNote,
    diff: &serde_json::Value,
    at: i64,
) -> StoreResult<i64> {
    let done = sqlx::query(INSERT_AUDIT)
        .bind(id)
        .bind(action.to_owned())
        .bind(note.actor.clone())
        .bind(diff.to_string())
        .bind(at)
        .bind(note.reason.clone())
        .execute(&mut **tx)
        .await
        .map_err(sql)?;
    Ok(done.last_insert_rowid())
}

/// Marks rows a retrier could not open, under the claim that found them (fenced).
pub(super) async fn mark_unreadable(pool: &SqlitePool, leases: Vec<dlq_core::store::Lease>) -> StoreResult<()> {
    let marks: Vec<serde_json::Value> = leases.iter().map(|l| serde_json::json!([l.id, l.token.to_string()])).collect();
    sqlx::query(MARK_UNREADABLE).bind(serde_json::Value::Array(marks).to_string()).execute(pool).await.map_err(sql)?;
    Ok(())
}

/// The rows whose latest claim could not open them.
pub(super) async fn count_unreadable(pool: &SqlitePool) -> StoreResult<u64> {
    let n: i64 = sqlx::query_scalar(COUNT_UNREADABLE).fetch_one(pool).await.map_err(sql)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Audits a reveal of row `id` (`NotFound` for no row).
pub(super) async fn reveal(pool: &SqlitePool, id: DlqId, note: AuditNote) -> StoreResult<i64> {
    let mut tx = begin(pool).await?;
    let found = sqlx::query(REVEAL_ROW).bind(id).fetch_optional(&mut *tx).await.map_err(sql)?;
    if found.is_none() {
        return Err(Error::NotFound(id));
    }
    let entry = insert_audit(&mut tx, id, "reveal", &note, &serde_json::json!({}), codec::now_micros()).await?;
    tx.commit().await.map_err(sql)?;
    Ok(entry)
}

pub(super) async fn patch(pool: &SqlitePool, request: PatchRequest) -> StoreResult<i64> {
    let PatchRequest { id, payload, note, patch, undo_of } = request;
    payload.check_fits(dlq_core::store::DEFAULT_MAX_PAYLOAD_BYTES)?;
    let at = codec::now_micros();
    let mut tx = begin(pool).await?;
    let row = sqlx::query(SELECT_ONE.sql()).bind(id).fetch_optional(&mut *tx).await.map_err(sql)?;
    let old = row.as_ref().map(codec::letter).transpose()?.ok_or(Error::NotFound(id))?;
    if matches!(old.status, Status::Processing | Status::Succeeded) {
        return Err(Error::InvalidState {
            id,
            status: old.status,
            action: "patch",
            needs: "any status but PROCESSING or SUCCEEDED",
        });
    }
    let diff = patch_diff(&old.payload, &payload, patch.as_ref(), undo_of);
    let entry = write_payload(&mut tx, id, &payload, &note, &diff, at).await?;
    tx.commit().await.map_err(sql)?;
    Ok(entry)
}

/// Writes `payload` over row `id` with its audit entry (action `patch`, `diff`) in `tx`;
/// returns the entry's id.
pub(super) async fn write_payload(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    id: DlqId,
    payload: &Payload,
    note: &AuditNote,
    diff: &serde_json::Value,
    at: i64,
) -> StoreResult<i64> {
    PayloadColumns::new(payload)?
        .bind(sqlx::query(PATCH_ROW).bind(id))
        .bind(at)
        .execute(&mut **tx)
        .await
        .map_err(sql)?;
    insert_audit(tx, id, "patch", note, diff, at).await
}

pub(super) async fn count_purgeable(pool: &SqlitePool, older_than: Duration) -> StoreResult<u64> {
    let cutoff = codec::earlier(codec::now_micros(), older_than);
    let n: i64 = sqlx::query_scalar(COUNT_PURGEABLE).bind(cutoff).fetch_one(pool).await.map_err(sql)?;
    Ok(n.unsigned_abs())
}

pub(super) async fn purge(pool: &SqlitePool, older_than: Duration) -> StoreResult<u64> {
    let cutoff = codec::earlier(codec::now_micros(), older_than);
    let mut total = 0;
    loop {
        let mut tx = begin(pool).await?;
        let ids: Vec<i64> = sqlx::query_scalar(PURGE_SLICE_IDS)
            .bind(cutoff)
            .bind(PURGE_SLICE)
            .fetch_all(&mut *tx)
            .await
            .map_err(sql)?;
        let ids = codec::json_list(&ids);
        for statement in [PURGE_ATTEMPTS, PURGE_AUDIT] {
            sqlx::query(statement).bind(&ids).execute(&mut *tx).await.map_err(sql)?;
        }
        let purged = sqlx::query(PURGE_EVENTS).bind(&ids).execute(&mut *tx).await.map_err(sql)?.rows_affected();
        tx.commit().await.map_err(sql)?;
        total += purged;
        if purged < PURGE_SLICE.unsigned_abs() {
            return Ok(total);
        }
    }
}
