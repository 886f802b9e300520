//! Reads, audited patches and purge: what the admin layer reads and patches (its batched
//! actions are in `ops`).

use std::time::Duration;

use dlq_core::store::{HistogramBucket, PatchRequest, StoreResult, patch_diff};
use dlq_core::{
    DeadLetter, DlqId, ListFilter, Payload, Status, admin::AttemptRecord, admin::AuditEntry, admin::FailureGroup,
    admin::Order, admin::StatsRow,
};
use sqlx::Row;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;

use super::{PgStore, micros, park, row, session};

fn db(err: sqlx::Error) -> dlq_core::Error {
    dlq_core::Error::store(err)
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Binds a filter as `$1..$11` (status, event type, fingerprint, ids, limit, kind, reason
/// substring, since, until, and the keyset's open id range), as `sql/filter.sql` reads them.
/// The range's lower end is `lower` ([`id_floor`]: the keyset's, narrowed by `since`). An
/// unbounded end is bound as NULL, not as `i64::MIN`/`MAX`: a range that covers every id would
/// still draw the planner to the primary key (366 ms to count the last hour's 7,000 rows of a
/// million, instead of a few ms from the hour's first id).
///
/// The statement is not kept prepared: PostgreSQL then plans each execution with its values,
/// where `$2::text IS NULL OR event_type = $2` folds to `event_type = 'payment'` and uses the
/// index. A kept statement switches to a generic plan after five executions, and the generic
/// plan of such optional conditions is a scan of the whole table (125 ms a count at a million
/// rows, against a few milliseconds planned with the values).
fn bind_filter<'q>(
    query: Query<'q, sqlx::Postgres, PgArguments>,
    f: &ListFilter,
    lower: Option<DlqId>,
) -> Query<'q, sqlx::Postgres, PgArguments> {
    let (_, upper) = f.id_range();
    let upper = (upper != DlqId::MAX).then_some(upper);
    query
        .persistent(false)
        .bind(f.status.map(Status::as_str))
        .bind(f.event_type.as_deref())
        .bind(f.fingerprint.as_deref())
        .bind(&f.ids)
        .bind(limit(f.limit))
        .bind(f.kind.as_deref())
        .bind(f.reason.as_deref())
        .bind(f.since)
        .bind(f.until)
        .bind(lower)
        .bind(upper)
}

/// The smallest id a row created at `since` or later can have (`dlq_first_id_since`, migration
/// 0051: from the parks' tally buckets), or `None` when it is not known. Read before the
/// statement it narrows, so that PostgreSQL plans that statement with the bound's value (its
/// estimate of an id range from the primary key's statistics), which a subquery would hide.
async fn first_id_since(store: &PgStore, since: Option<chrono::DateTime<chrono::Utc>>) -> StoreResult<Option<DlqId>> {
    let Some(since) = since else { return Ok(None) };
    let first: i64 = sqlx::query_scalar(store.inner.sql.first_id_since.sql())
        .bind(since)
        .fetch_one(&store.inner.pool)
        .await
        .map_err(db)?;
    Ok((first != i64::MIN).then_some(first))
}

/// `sql`, a statement over `sql/filter.sql`, with `f` bound ([`bind_filter`]) and its id range
/// narrowed to what `f.since` can match ([`id_floor`]).
async fn filtered<'q>(
    store: &PgStore,
    sql: impl sqlx::SqlSafeStr,
    f: &'q ListFilter,
) -> StoreResult<Query<'q, sqlx::Postgres, PgArguments>> {
    let lower = id_floor(store, f).await?;
    Ok(bind_filter(sqlx::query(sql), f, lower))
}

/// The exclusive lower end of the ids `f` can match: its keyset's, raised to just below the
/// first id a row created at its `since` can have. `None`: unbounded.
async fn id_floor(store: &PgStore, f: &ListFilter) -> StoreResult<Option<DlqId>> {
    let (keyset, _) = f.id_range();
    let since = first_id_since(store, f.since).await?.map(|first| first.saturating_sub(1));
    let keyset = (keyset != DlqId::MIN).then_some(keyset);
    Ok(keyset.max(since))
}

pub(crate) async fn get(store: &PgStore, id: DlqId) -> StoreResult<Option<DeadLetter>> {
    let found = sqlx::query(store.inner.sql.get.sql()).bind(id).fetch_optional(&store.inner.pool).await.map_err(db)?;
    found.as_ref().map(row::letter).transpose()
}

pub(crate) async fn list(store: &PgStore, filter: ListFilter) -> StoreResult<Vec<DeadLetter>> {
    let statement = match filter.order {
        Order::NewestFirst => &store.inner.sql.list,
        Order::OldestFirst => &store.inner.sql.list_oldest,
    };
    let query = filtered(store, statement.sql(), &filter).await?;
    let rows = session::rows_unnamed(&store.inner.session, &store.inner.pool, query).await.map_err(db)?;
    row::letters(&rows)
}

pub(crate) async fn count(store: &PgStore, filter: ListFilter) -> StoreResult<u64> {
    let only_time = (filter.since.is_some() || filter.until.is_some())
        && filter
            == ListFilter { since: filter.since, until: filter.until, limit: filter.limit, ..ListFilter::default() };
    let query = if only_time {
        // A count by creation time alone: the primary key from the first id that can match
        // (see count_created.sql).
        sqlx::query(store.inner.sql.count_created.sql()).bind(filter.since).bind(filter.until).bind(limit(filter.limit))
    } else {
        filtered(store, store.inner.sql.count_matching.sql(), &filter).await?
    };
    let rows = session::rows_unnamed(&store.inner.session, &store.inner.pool, query).await.map_err(db)?;
    let n: i64 = rows.first().ok_or(sqlx::Error::RowNotFound).and_then(|r| r.try_get(0)).map_err(db)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

pub(crate) async fn stats(store: &PgStore) -> StoreResult<Vec<StatsRow>> {
    let rows = sqlx::query(store.inner.sql.stats.sql()).fetch_all(&store.inner.pool).await.map_err(db)?;
    let mut stats = rows
        .iter()
        .map(|r| {
            Ok(StatsRow {
                event_type: r.try_get("event_type").map_err(db)?,
                status: r.try_get::<String, _>("status").map_err(db)?.parse()?,
                count: u64::try_from(r.try_get::<i64, _>("count").map_err(db)?).unwrap_or(0),
                oldest_due: r.try_get("oldest_due").map_err(db)?,
            })
        })
        .collect::<StoreResult<Vec<_>>>()?;
    stats.sort_by(|a, b| (&a.event_type, a.status).cmp(&(&b.event_type, b.status)));
    Ok(stats)
}

pub(crate) async fn created_histogram(
    store: &PgStore,
    since: chrono::DateTime<chrono::Utc>,
    step: Duration,
    buckets: u32,
) -> StoreResult<Vec<HistogramBucket>> {
    let step = dlq_core::store::histogram_step(step)?;
    #[allow(clippy::cast_precision_loss, reason = "a step of at most a year, in seconds")]
    let seconds = step.num_milliseconds() as f64 / 1000.0;
    let tallied_window = tallied(since, step, chrono::Utc::now());
    let statement = if tallied_window { &store.inner.sql.parked_histogram } else { &store.inner.sql.created_histogram };
    let mut query = sqlx::query_as(statement.sql()).bind(since).bind(seconds).bind(f64::from(buckets));
    if !tallied_window {
        query = query.persistent(false).bind(first_id_since(store, Some(since)).await?);
    }
    let rows: Vec<(String, i32, i64)> = query.fetch_all(&store.inner.pool).await.map_err(db)?;
    Ok(rows
        .into_iter()
        .filter_map(|(event_type, bucket, count)| {
            let bucket = u32::try_from(bucket).ok().filter(|b| *b < buckets)?;
            Some(HistogramBucket::new(event_type, bucket, u64::try_from(count).unwrap_or(0)))
        })
        .collect())
}

/// Whether dlq_parked_hours answers a histogram from `since` in steps of `step` (migrations
/// 0010 and 0030): whole hours from an hour's start within the 31 days it keeps (the console's
/// charts), or whole minutes from a minute's start within the last 90 minutes, which it keeps
/// per minute for two hours (the growth counts). Any other window reads the rows, from the
/// first id created in it (migration 0051).
fn tallied(since: chrono::DateTime<chrono::Utc>, step: chrono::TimeDelta, now: chrono::DateTime<chrono::Utc>) -> bool {
    let on = |unit: i64| {
        since.timestamp().rem_euclid(unit) == 0
            && since.timestamp_subsec_nanos() == 0
            && step.num_seconds() % unit == 0
            && step.subsec_nanos() == 0
    };
    (on(3600) && since > now - chrono::TimeDelta::days(30)) || (on(60) && since >= now - chrono::TimeDelta::minutes(90))
}

/// Failure groups: from the tallies (migration 0010) when the filter is one of status, event
/// type and fingerprint, as the console's and `dlq stats`' lists are; otherwise an aggregate
/// over the matching rows.
pub(crate) async fn groups(store: &PgStore, filter: ListFilter) -> StoreResult<Vec<FailureGroup>> {
    let tallied = filter.ids.is_empty()
        && filter.kind.is_none()
        && filter.reason.is_none()
        && filter.since.is_none()
        && filter.until.is_none()
        && filter.after.is_none();
    let query = if tallied {
        sqlx::query(store.inner.sql.groups_tallied.sql())
            .persistent(false)
            .bind(filter.status.map(Status::as_str))
            .bind(filter.event_type.as_deref())
            .bind(filter.fingerprint.as_deref())
            .bind(limit(filter.limit))
    } else {
        filtered(store, store.inner.sql.groups.sql(), &filter).await?
    };
    let rows = session::rows_unnamed(&store.inner.session, &store.inner.pool, query).await.map_err(db)?;
    rows.iter()
        .map(|r| {
            Ok(FailureGroup {
                fingerprint: r.try_get("fingerprint").map_err(db)?,
                event_type: r.try_get("event_type").map_err(db)?,
                kind: r.try_get("error_kind").map_err(db)?,
                sample_reason: r.try_get("error_reason").map_err(db)?,
                sample_id: r.try_get("newest").map_err(db)?,
                count: u64::try_from(r.try_get::<i64, _>("count").map_err(db)?).unwrap_or(0),
                first_seen: r.try_get("first_seen").map_err(db)?,
                last_seen: r.try_get("last_seen").map_err(db)?,
            })
        })
        .collect()
}

fn attempt(r: &PgRow) -> Result<AttemptRecord, sqlx::Error> {
    Ok(AttemptRecord {
        dlq_id: r.try_get("dlq_id")?,
        attempt: u32::try_from(r.try_get::<i32, _>("attempt")?).unwrap_or(0),
        outcome: r.try_get("outcome")?,
        error_class: r.try_get("error_class")?,
        error_reason: r.try_get("error_reason")?,
        owner: r.try_get("owner")?,
        at: r.try_get("at")?,
    })
}

pub(crate) async fn attempts(store: &PgStore, id: DlqId) -> StoreResult<Vec<AttemptRecord>> {
    let rows = sqlx::query(store.inner.sql.attempts.sql()).bind(id).fetch_all(&store.inner.pool).await.map_err(db)?;
    rows.iter().map(attempt).collect::<Result<_, _>>().map_err(db)
}

pub(crate) fn audit_entry(r: &PgRow) -> Result<AuditEntry, sqlx::Error> {
    Ok(AuditEntry {
        id: r.try_get("id")?,
        dlq_id: r.try_get("dlq_id")?,
        action: r.try_get("action")?,
        actor: r.try_get("actor")?,
        reason: r.try_get("reason")?,
        diff: r.try_get::<crate::stored_json::StoredJson, _>("diff")?.into_value(),
        at: r.try_get("at")?,
    })
}

pub(crate) async fn audit(store: &PgStore, id: DlqId) -> StoreResult<Vec<AuditEntry>> {
    let rows = sqlx::query(store.inner.sql.audit.sql()).bind(id).fetch_all(&store.inner.pool).await.map_err(db)?;
    rows.iter().map(audit_entry).collect::<Result<_, _>>().map_err(db)
}

pub(crate) fn actor(actor: &str) -> String {
    let mut actor = actor.to_owned();
    park::clean(&mut actor);
    actor
}

pub(crate) async fn patch(store: &PgStore, request: PatchRequest) -> StoreResult<i64> {
    let inner = &store.inner;
    let PatchRequest { id, payload, note, patch, undo_of } = request;
    let payload = park::jsonb_storable(payload);
    payload.check_fits(inner.config.max_payload_bytes)?;
    let mut tx = inner.pool.begin().await.map_err(db)?;
    let locked = sqlx::query(inner.sql.patch_lock.sql()).bind(id).fetch_optional(&mut *tx).await.map_err(db)?;
    let Some(current) = locked else { return Err(dlq_core::Error::NotFound(id)) };
    let status: Status = current.try_get::<String, _>("status").map_err(db)?.parse()?;
    if matches!(status, Status::Processing | Status::Succeeded) {
        let needs = "any status but PROCESSING or SUCCEEDED";
        return Err(dlq_core::Error::InvalidState { id, status, action: "patch", needs });
    }
    let old = row::payload(&current)?;
    let diff = patch_diff(&old, &payload, patch.as_ref(), undo_of);
    let entry = write_payload(store, &mut tx, id, payload, &note, diff).await?;
    tx.commit().await.map_err(db)?;
    Ok(entry)
}

/// Writes `payload` over row `id` (locked by the caller) with its audit entry (action
/// `patch`, `diff`); returns the entry's id.
async fn write_payload(
    store: &PgStore,
    conn: &mut sqlx::PgConnection,
    id: DlqId,
    payload: Payload,
    note: &dlq_core::store::AuditNote,
    diff: serde_json::Value,
) -> StoreResult<i64> {
    let (json, raw, truncated) = match payload {
        Payload::Json(value) => (Some(value), None, None),
        Payload::Raw { bytes, truncated } => (None, Some(bytes), truncated),
    };
    sqlx::query_scalar(store.inner.sql.patch_write.sql())
        .bind(id)
        .bind(json)
        .bind(raw)
        .bind(truncated.is_some())
        .bind(truncated.as_ref().map(|t| i64::try_from(t.original_len).unwrap_or(i64::MAX)))
        .bind(truncated.map(|t| t.original_sha256))
        .bind(actor(&note.actor))
        .bind(diff)
        .bind(note.reason.as_deref().map(actor))
        .fetch_one(conn)
        .await
        .map_err(db)
}

/// Rows deleted per statement, so that no purge holds locks or grows WAL for long.
const PURGE_SLICE: i64 = 5_000;

pub(crate) async fn purge(store: &PgStore, older_than: Duration) -> StoreResult<u64> {
    let mut total = 0;
    // Each slice starts after the last row of the slice before (see purge.sql).
    let mut after: (Option<chrono::DateTime<chrono::Utc>>, i64) = (None, 0);
    loop {
        // The walk of the index in order: on a table filled moments before (no statistics)
        // the planner otherwise picks a bitmap scan of every finished row and a sort that
        // `LIMIT` cannot cut short (720 ms a slice with 500,000 rows left, against 17 ms). Not
        // `enable_sort = off` as the claim (migration 0007): the slice's answer sorts 5,000
        // rows, and that setting's cost penalty tipped the plan into JIT compilation, about
        // 2 s a slice; JIT is off for the same reason. A slice is bounded (PURGE_SLICE rows,
        // locked with SKIP LOCKED, so it waits on no one) but may outlast a managed database's
        // `statement_timeout` on a cold cache: that limit is lifted for the slice alone.
        let mut tx = store.inner.pool.begin().await.map_err(db)?;
        sqlx::raw_sql(
            "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL jit = off; \
             SET LOCAL statement_timeout = 0",
        )
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        let (done, at, id): (i64, Option<chrono::DateTime<chrono::Utc>>, Option<i64>) =
            sqlx::query_as(store.inner.sql.purge.sql())
                .bind(micros(older_than))
                .bind(PURGE_SLICE)
                .bind(after.0)
                .bind(after.1)
                .fetch_one(&mut *tx)
                .await
                .map_err(db)?;
        tx.commit().await.map_err(db)?;
        total += done.unsigned_abs();
        match (at, id) {
            (Some(at), Some(id)) if done >= PURGE_SLICE => after = (Some(at), id),
            _ => return Ok(total),
        }
    }
}

pub(crate) async fn count_purgeable(store: &PgStore, older_than: Duration) -> StoreResult<u64> {
    let n: i64 = sqlx::query_scalar(store.inner.sql.purgeable.sql())
        .bind(micros(older_than))
        .fetch_one(&store.inner.pool)
        .await
        .map_err(db)?;
    Ok(n.unsigned_abs())
}

/// Deletes up to `n` of the oldest finished or dead rows; returns how many went.
pub(crate) async fn drop_oldest(store: &PgStore, n: u64) -> StoreResult<u64> {
    let done = sqlx::query(store.inner.sql.drop_oldest.sql())
        .bind(i64::try_from(n).unwrap_or(i64::MAX))
        .execute(&store.inner.pool)
        .await
        .map_err(db)?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeDelta, Utc};

    use super::tallied;

    #[test]
    fn the_tallies_answer_whole_hours_and_recent_whole_minutes() {
        let now = DateTime::<Utc>::from_timestamp(1_800_000_000 + 1234, 0).unwrap();
        let minute = DateTime::<Utc>::from_timestamp(1_800_000_000 + 1200, 0).unwrap();
        let hour = DateTime::<Utc>::from_timestamp(1_800_000_000, 0).unwrap(); // on the hour
        assert!(tallied(hour - TimeDelta::days(29), TimeDelta::hours(1), now), "a chart");
        assert!(!tallied(hour - TimeDelta::days(31), TimeDelta::hours(1), now), "past what is kept");
        assert!(tallied(minute - TimeDelta::minutes(60), TimeDelta::minutes(61), now), "the last hour's growth");
        assert!(!tallied(minute - TimeDelta::minutes(120), TimeDelta::minutes(1), now), "rounded to its hour by now");
        assert!(!tallied(minute + TimeDelta::seconds(1), TimeDelta::minutes(1), now), "not a minute's start");
        assert!(!tallied(minute, TimeDelta::seconds(90), now), "not whole minutes");
        assert!(!tallied(minute, TimeDelta::minutes(1) + TimeDelta::milliseconds(1), now));
    }
}
