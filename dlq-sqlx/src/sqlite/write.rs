//! The hot path: parking, claiming and writing outcomes, each in one `BEGIN IMMEDIATE`
//! transaction (the write lock is taken up front, so no transaction fails on upgrading it).

use dlq_core::store::{ClaimCap, ClaimRequest, Claimed, SettleReport, Settlement, StoreResult};
use dlq_core::{Status, store::DEFAULT_MAX_PAYLOAD_BYTES, store::NewDeadLetter, store::Parked};
use sqlx::sqlite::{SqliteConnection, SqlitePool};
use sqlx::{Row, Sqlite, Transaction};
use uuid::Uuid;

use super::codec::{self, FailureColumns, PayloadColumns, sql};
use super::statement::Composed;

const BEGIN_IMMEDIATE: &str = include_str!("sql/begin_immediate.sql");
const INSERT_EVENT: &str = include_str!("sql/park.sql");
const SELECT_DEDUPED: &str = include_str!("sql/dedupe_lookup.sql");
const INSERT_ATTEMPT: &str = include_str!("sql/attempt_insert.sql");
const CAP_COUNTS: &str = include_str!("sql/cap_counts.sql");
const CAP_FORGET: &str = include_str!("sql/cap_forget.sql");
const CAP_RECORD: &str = include_str!("sql/cap_record.sql");
const SELECT_DUE: &str = include_str!("sql/claim_due.sql");
const SELECT_EXPIRED: &str = include_str!("sql/claim_expired.sql");
static CLAIM_ROW: Composed = Composed::new(include_str!("sql/claim_row.sql"));
const SELECT_HELD: &str = include_str!("sql/lease_held.sql");
const SETTLE_ROW: &str = include_str!("sql/settle_row.sql");

pub(super) async fn begin(pool: &SqlitePool) -> StoreResult<Transaction<'static, Sqlite>> {
    pool.begin_with(BEGIN_IMMEDIATE).await.map_err(sql)
}

/// Parks letters in input order; an event type and dedupe key that a live row already holds
/// (or a letter parked earlier in the same batch) returns that row's id. A key whose rows all
/// finished (SUCCEEDED, DISCARDED) parks a new row.
pub(super) async fn park(pool: &SqlitePool, letters: Vec<NewDeadLetter>) -> StoreResult<Vec<Parked>> {
    if letters.is_empty() {
        return Ok(Vec::new());
    }
    let mut tx = begin(pool).await?;
    let parked = park_in(&mut tx, letters).await?;
    tx.commit().await.map_err(sql)?;
    Ok(parked)
}

/// Parks letters on the caller's connection (in the caller's transaction, if one is open).
pub(super) async fn park_in(conn: &mut SqliteConnection, letters: Vec<NewDeadLetter>) -> StoreResult<Vec<Parked>> {
    let at = codec::now_micros();
    let mut parked = Vec::with_capacity(letters.len());
    for letter in letters {
        // A payload over the limit is cut and parked dead (`too_large`), never retried.
        let letter = letter.fit(DEFAULT_MAX_PAYLOAD_BYTES);
        let mut one = park_one(conn, &letter, at).await?;
        one.truncated = letter.payload.is_truncated();
        parked.push(one);
    }
    Ok(parked)
}

async fn park_one(conn: &mut SqliteConnection, l: &NewDeadLetter, at: i64) -> StoreResult<Parked> {
    let payload = PayloadColumns::new(&l.payload)?;
    let failure = FailureColumns::new(&l.failure);
    let headers = serde_json::to_string(&l.source.headers).map_err(dlq_core::Error::Serialize)?;
    let inserted = payload
        .bind(sqlx::query(INSERT_EVENT).bind(&l.event_type).bind(&l.handler))
        .bind(failure.class)
        .bind(&failure.kind)
        .bind(&failure.reason)
        .bind(failure.chain)
        .bind(failure.stacktrace)
        .bind(failure.fingerprint)
        .bind(l.status().as_str())
        .bind(i64::from(l.max_retries))
        .bind(codec::later(at, l.retry_delay))
        .bind(codec::dead_reason(l.dead_reason))
        .bind(&l.dedupe_key)
        .bind(&l.source.topic)
        .bind(l.source.partition)
        .bind(l.source.offset)
        .bind(headers)
        .bind(&l.source.trace_context)
        .bind(at)
        .bind(l.subject.as_ref().map(dlq_core::store::SubjectHash::as_str))
        .bind(i64::from(l.version))
        .fetch_optional(&mut *conn)
        .await
        .map_err(sql)?;
    let Some(row) = inserted else {
        // The write lock is held since BEGIN IMMEDIATE: the conflicting live row is still live.
        let id: i64 = sqlx::query_scalar(SELECT_DEDUPED)
            .bind(&l.event_type)
            .bind(&l.dedupe_key)
            .fetch_one(&mut *conn)
            .await
            .map_err(sql)?;
        return Ok(Parked { id, deduplicated: true, truncated: false });
    };
    let id: i64 = row.try_get("id").map_err(sql)?;
    sqlx::query(INSERT_ATTEMPT)
        .bind(id)
        .bind(0_i64)
        .bind("failed")
        .bind(failure.class)
        .bind(failure.reason)
        .bind(None::<String>)
        .bind(at)
        .execute(&mut *conn)
        .await
        .map_err(sql)?;
    Ok(Parked { id, deduplicated: false, truncated: false })
}

/// Claims due rows, each event type a share of the batch, its oldest `retry_after` first,
/// each with a fresh token; within `cap` (for the one type of the request) across every
/// process sharing the file, when given: the write transaction (`BEGIN IMMEDIATE`) makes count, claim and record one step.
pub(super) async fn claim(
    pool: &SqlitePool,
    mut req: ClaimRequest,
    cap: Option<ClaimCap>,
) -> StoreResult<Vec<Claimed>> {
    if req.limit == 0 || req.event_types.is_empty() {
        return Ok(Vec::new());
    }
    let at = codec::now_micros();
    let lease_until = codec::later(at, req.lease);
    let mut tx = begin(pool).await?;
    let mut window_start = None;
    if let Some(cap) = cap {
        req.event_types.truncate(1);
        let since = cap.window().map_or(at, |w| codec::earlier(at, w));
        let (in_flight, started): (i64, i64) = sqlx::query_as(CAP_COUNTS)
            .bind(&req.event_types[0])
            .bind(at)
            .bind(since)
            .fetch_one(&mut *tx)
            .await
            .map_err(sql)?;
        req.limit = cap.allows(req.limit, usize::try_from(in_flight).unwrap_or(0), u64::try_from(started).unwrap_or(0));
        if req.limit == 0 {
            return Ok(Vec::new());
        }
        window_start = cap.window().map(|_| since);
    }
    // Up to a batch of each type's oldest due rows, and of the expired leases; the request
    // shares the batch among the types.
    let mut due: Vec<(i64, i64, String)> = sqlx::query_as(SELECT_EXPIRED)
        .bind(codec::json_list(&req.event_types))
        .bind(at)
        .bind(codec::limit(req.limit))
        .fetch_all(&mut *tx)
        .await
        .map_err(sql)?;
    let mut types: Vec<&String> = req.event_types.iter().collect();
    types.sort_unstable();
    types.dedup();
    for event_type in types {
        let rows: Vec<(i64, i64, String)> = sqlx::query_as(SELECT_DUE)
            .bind(event_type)
            .bind(at)
            .bind(codec::limit(req.limit))
            .fetch_all(&mut *tx)
            .await
            .map_err(sql)?;
        due.extend(rows);
    }
    let due = req.share(due, |r| &r.2, |r| (r.1, r.0));
    let mut claimed = Vec::with_capacity(due.len());
    for (id, ..) in due {
        let token = Uuid::new_v4();
        let row = sqlx::query(CLAIM_ROW.sql())
            .bind(id)
            .bind(&req.owner)
            .bind(lease_until)
            .bind(token.to_string())
            .bind(at)
            .fetch_one(&mut *tx)
            .await
            .map_err(sql)?;
        claimed.push(Claimed::of(&codec::letter(&row)?, token));
    }
    if let Some(since) = window_start.filter(|_| !claimed.is_empty()) {
        sqlx::query(CAP_FORGET).bind(&req.event_types[0]).bind(since).execute(&mut *tx).await.map_err(sql)?;
        sqlx::query(CAP_RECORD)
            .bind(&req.event_types[0])
            .bind(at)
            .bind(i64::try_from(claimed.len()).unwrap_or(i64::MAX))
            .execute(&mut *tx)
            .await
            .map_err(sql)?;
    }
    tx.commit().await.map_err(sql)?;
    Ok(claimed)
}

/// Writes outcomes in order; an outcome whose token no longer holds an unexpired lease is
/// fenced: nothing is written and its id is reported.
pub(super) async fn settle(pool: &SqlitePool, outcomes: Vec<Settlement>) -> StoreResult<SettleReport> {
    let mut report = SettleReport::default();
    if outcomes.is_empty() {
        return Ok(report);
    }
    let at = codec::now_micros();
    let mut tx = begin(pool).await?;
    for outcome in &outcomes {
        if settle_one(&mut tx, outcome, at).await? {
            report.applied += 1;
        } else {
            report.fenced.push(outcome.lease().id);
        }
    }
    tx.commit().await.map_err(sql)?;
    Ok(report)
}

/// The column changes of one outcome.
struct Change {
    status: Status,
    add_retry: i64,
    retry_after: Option<i64>,
    dead_reason: Option<&'static str>,
}

fn change(outcome: &Settlement, at: i64) -> Change {
    let (status, retry_after, dead_reason) = match outcome.last() {
        Settlement::Succeeded { .. } => (Status::Succeeded, None, None),
        Settlement::Retry { delay, .. } => (Status::Pending, Some(codec::later(at, *delay)), None),
        Settlement::Dead { reason, .. } => (Status::FailedPermanently, None, Some(reason.as_str())),
        Settlement::Release { .. } | Settlement::Repeated { .. } => (Status::Pending, Some(at), None),
    };
    Change { status, add_retry: i64::from(outcome.counted()), retry_after, dead_reason }
}

async fn settle_one(tx: &mut Transaction<'static, Sqlite>, outcome: &Settlement, at: i64) -> StoreResult<bool> {
    let lease = outcome.lease();
    let held: Option<(Option<String>, i64)> = sqlx::query_as(SELECT_HELD)
        .bind(lease.id)
        .bind(lease.token.to_string())
        .bind(at)
        .fetch_optional(&mut **tx)
        .await
        .map_err(sql)?;
    let Some((owner, retry_count)) = held else { return Ok(false) };
    let c = change(outcome, at);
    let f = outcome.failure().map(FailureColumns::new);
    sqlx::query(SETTLE_ROW)
        .bind(lease.id)
        .bind(c.status.as_str())
        .bind(c.add_retry)
        .bind(c.retry_after)
        .bind(f.as_ref().map(|f| f.class))
        .bind(f.as_ref().map(|f| f.kind.clone()))
        .bind(f.as_ref().map(|f| f.reason.clone()))
        .bind(f.as_ref().map(|f| f.chain.clone()))
        .bind(f.as_ref().and_then(|f| f.stacktrace.clone()))
        .bind(c.dead_reason)
        .bind(f.as_ref().map(|f| f.fingerprint.clone()))
        .bind(at)
        .execute(&mut **tx)
        .await
        .map_err(sql)?;
    // The earlier attempts of a repeated outcome, then the final one (a release is no attempt).
    let earlier = outcome.earlier_failures().iter().map(|f| ("retry", Some(f)));
    let last = outcome.last();
    let last = (!matches!(last, Settlement::Release { .. })).then(|| (last.outcome_name(), last.failure()));
    for (n, (name, failure)) in (1..).zip(earlier.chain(last)) {
        sqlx::query(INSERT_ATTEMPT)
            .bind(lease.id)
            .bind(retry_count + n)
            .bind(name)
            .bind(failure.map(|f| f.class.as_str()))
            .bind(failure.map(|f| f.reason.as_str()))
            .bind(owner.as_deref())
            .bind(at)
            .execute(&mut **tx)
            .await
            .map_err(sql)?;
    }
    Ok(true)
}
