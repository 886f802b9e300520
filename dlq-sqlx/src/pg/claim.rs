//! Claiming due rows and writing the outcomes of their retries, fenced by lease tokens.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use dlq_core::store::{ClaimCap, ClaimRequest, Claimed, SettleReport, Settlement, StoreResult};
use sqlx::Row;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use uuid::Uuid;

use super::schema::ClaimStmt;
use super::{PgStore, micros, row};

/// Claims up to `request.limit` due rows in one statement (see `sql/claim.sql`); the rows
/// come back in claim order, `(retry_after, id)`.
pub(crate) async fn claim(store: &PgStore, request: ClaimRequest) -> StoreResult<Vec<Claimed>> {
    if request.event_types.is_empty() || request.limit == 0 {
        return Ok(Vec::new());
    }
    let since = store.inner.floors.since(&request.event_types, Instant::now());
    claim_from(store, &request, since).await
}

/// Claims like [`claim`], each type's pending rows from its floor in `since`.
async fn claim_from(
    store: &PgStore,
    request: &ClaimRequest,
    since: Vec<Option<DateTime<Utc>>>,
) -> StoreResult<Vec<Claimed>> {
    let rows = store
        .inner
        .kept_connections
        .fetch_all(claim_query(store, request, since))
        .await
        .map_err(dlq_core::Error::store)?;
    let claimed = claimed_rows(&rows)?;
    store.inner.floors.claimed(&claimed);
    Ok(claimed)
}

/// How often a claim walks the due index from its oldest entry whatever its floor: the
/// longest a row that came due behind the floor waits.
const FULL_WALK_EVERY: Duration = Duration::from_secs(30);

/// How far behind its floor a claim starts: a row parked by a transaction that began up to
/// this long before the floor's claim is still found by the next claim.
const FLOOR_MARGIN: chrono::TimeDelta = chrono::TimeDelta::milliseconds(250);

/// Where the next claim of each event type starts its walk of the type's due rows
/// (migrations 0031, 0033): [`FLOOR_MARGIN`] before the `retry_after` of the newest row of the
/// type a claim took. Rows come due in `retry_after` order, so what a claim has not seen yet
/// lies after that point, except a row parked by a transaction that began long before the
/// floor's claim, or left by another retrier's claim that rolled back: the claim after
/// [`FULL_WALK_EVERY`] walks the type from its oldest entry and finds those.
///
/// From the oldest entry, every claim of a drain stepped over the dead index entries of every
/// row claimed since the last vacuum.
#[derive(Debug, Default)]
pub(crate) struct ClaimFloors(std::sync::Mutex<HashMap<String, Floor>>);

#[derive(Debug, Clone, Copy)]
struct Floor {
    since: Option<DateTime<Utc>>,
    walked: Instant,
}

/// The event types a process keeps floors for; past it they start over (a retrier claims the
/// types it has handlers for).
const MAX_FLOORS: usize = 1024;

impl ClaimFloors {
    /// Where the next claim of each of `event_types` at `now` starts, in the same order
    /// (`None`: the type's oldest entry).
    pub(crate) fn since(&self, event_types: &[String], now: Instant) -> Vec<Option<DateTime<Utc>>> {
        let mut floors = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if floors.len() + event_types.len() > MAX_FLOORS {
            floors.clear();
        }
        event_types
            .iter()
            .map(|event_type| {
                let floor = floors.entry(event_type.clone()).or_insert(Floor { since: None, walked: now });
                if floor.since.is_some() && now.saturating_duration_since(floor.walked) < FULL_WALK_EVERY {
                    return floor.since.map(|since| since - FLOOR_MARGIN);
                }
                floor.walked = now;
                None
            })
            .collect()
    }

    /// Records the rows a claim took: each type's floor moves up to its newest.
    pub(crate) fn claimed(&self, claimed: &[Claimed]) {
        if claimed.is_empty() {
            return;
        }
        let mut floors = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for row in claimed {
            if let Some(floor) = floors.get_mut(&row.event_type) {
                floor.since = Some(floor.since.map_or(row.retry_after, |since| since.max(row.retry_after)));
            }
        }
    }
}

/// Claims within `cap` across every process: in one transaction, under the type's advisory
/// lock (taken in its own statement, so that the counts, read after it, see the previous
/// holder's claim), counts the rows in flight and the rows claimed within the window,
/// claims what the cap leaves, and records them.
pub(crate) async fn claim_capped(
    store: &PgStore,
    mut request: ClaimRequest,
    cap: ClaimCap,
) -> StoreResult<Vec<Claimed>> {
    if request.event_types.is_empty() || request.limit == 0 {
        return Ok(Vec::new());
    }
    request.event_types.truncate(1);
    let sql = &store.inner.sql;
    let event_type = request.event_types[0].clone();
    let window = cap.window().map_or(0, micros);
    let mut tx = store.inner.pool.begin().await.map_err(dlq_core::Error::store)?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(format!("dlq cap {} {event_type}", store.inner.config.schema))
        .execute(&mut *tx)
        .await
        .map_err(dlq_core::Error::store)?;
    let (in_flight, started): (i64, i64) = sqlx::query_as(sql.cap_counts.sql())
        .bind(&event_type)
        .bind(window)
        .fetch_one(&mut *tx)
        .await
        .map_err(dlq_core::Error::store)?;
    request.limit =
        cap.allows(request.limit, usize::try_from(in_flight).unwrap_or(0), u64::try_from(started).unwrap_or(0));
    if request.limit == 0 {
        tx.commit().await.map_err(dlq_core::Error::store)?;
        return Ok(Vec::new());
    }
    let since = store.inner.floors.since(&request.event_types, Instant::now());
    let claimed =
        claimed_rows(&claim_query(store, &request, since).fetch_all(&mut *tx).await.map_err(dlq_core::Error::store)?)?;
    store.inner.floors.claimed(&claimed);
    if cap.starts.is_some() && !claimed.is_empty() {
        sqlx::query(sql.cap_record.sql())
            .bind(&event_type)
            .bind(i32::try_from(claimed.len()).unwrap_or(i32::MAX))
            .bind(window)
            .execute(&mut *tx)
            .await
            .map_err(dlq_core::Error::store)?;
    }
    tx.commit().await.map_err(dlq_core::Error::store)?;
    Ok(claimed)
}

/// The claim statement of `request` from the floors `since` (one per event type), every
/// parameter bound.
fn claim_query<'q>(
    store: &'q PgStore,
    request: &'q ClaimRequest,
    since: Vec<Option<DateTime<Utc>>>,
) -> Query<'q, sqlx::Postgres, PgArguments> {
    sqlx::query(store.inner.sql.claim_with_limit(request.limit))
        .bind(&request.event_types)
        .bind(micros(request.lease))
        .bind(&request.owner)
        .bind(since)
}

/// The claimed rows of a claiming statement's result (a row without a lease token stands for none),
/// in claim order, `(retry_after, id)`.
fn claimed_rows(rows: &[PgRow]) -> StoreResult<Vec<Claimed>> {
    let mut claimed = row::claimed(rows)?;
    claimed.sort_by_key(|c| (c.retry_after, c.id()));
    Ok(claimed)
}

/// The outcome arrays of a batch, one element per settlement, for `unnest`.
#[derive(Default)]
struct Outcomes {
    ids: Vec<i64>,
    tokens: Vec<Uuid>,
    outcomes: Vec<&'static str>,
    delay_us: Vec<i64>,
    counts: Vec<i32>,
    dead_reason: Vec<Option<&'static str>>,
    error_class: Vec<Option<&'static str>>,
    error_kind: Vec<Option<String>>,
    error_reason: Vec<Option<String>>,
    error_chain: Vec<Option<serde_json::Value>>,
    stacktrace: Vec<Option<String>>,
    fingerprint: Vec<Option<String>>,
    /// The failures of a repeated outcome's earlier attempts, `[{"class", "reason"}]`.
    earlier: Vec<Option<serde_json::Value>>,
}

impl Outcomes {
    /// Binds the arrays and the wake-up parameters ($1 to $15 of `settle_rows.sql`).
    fn bind<'q>(
        self,
        query: Query<'q, sqlx::Postgres, PgArguments>,
        store: &'q PgStore,
        wake: bool,
    ) -> Query<'q, sqlx::Postgres, PgArguments> {
        query
            .bind(self.ids)
            .bind(self.tokens)
            .bind(self.outcomes)
            .bind(self.delay_us)
            .bind(self.counts)
            .bind(self.dead_reason)
            .bind(self.error_class)
            .bind(self.error_kind)
            .bind(self.error_reason)
            .bind(self.error_chain)
            .bind(self.stacktrace)
            .bind(self.fingerprint)
            .bind(store.inner.sql.channel.as_str())
            .bind(wake)
            .bind(self.earlier)
    }

    fn push(&mut self, settlement: &Settlement) {
        let lease = settlement.lease();
        self.ids.push(lease.id);
        self.tokens.push(lease.token);
        self.outcomes.push(settlement.outcome_name());
        let (delay, reason) = match settlement.last() {
            Settlement::Retry { delay, .. } => (micros(*delay), None),
            Settlement::Dead { reason, .. } => (0, Some(reason.as_str())),
            _ => (0, None),
        };
        self.delay_us.push(delay);
        self.counts.push(i32::try_from(settlement.counted()).unwrap_or(i32::MAX));
        self.dead_reason.push(reason);
        let earlier = settlement.earlier_failures();
        self.earlier.push((!earlier.is_empty()).then(|| {
            let attempt = |f: &dlq_core::classify::FailureInfo| {
                let mut reason = f.reason.clone();
                super::park::clean(&mut reason);
                serde_json::json!({ "class": f.class.as_str(), "reason": reason })
            };
            serde_json::Value::Array(earlier.iter().map(attempt).collect())
        }));
        let failure = settlement.failure().map(|f| {
            let mut f = f.clone();
            [&mut f.kind, &mut f.reason, &mut f.fingerprint]
                .into_iter()
                .chain(f.chain.iter_mut())
                .chain(f.stacktrace.iter_mut())
                .for_each(super::park::clean);
            f
        });
        self.error_class.push(failure.as_ref().map(|f| f.class.as_str()));
        self.error_chain.push(failure.as_ref().map(|f| serde_json::Value::from(f.chain.clone())));
        self.error_kind.push(failure.as_ref().map(|f| f.kind.clone()));
        self.error_reason.push(failure.as_ref().map(|f| f.reason.clone()));
        self.fingerprint.push(failure.as_ref().map(|f| f.fingerprint.clone()));
        self.stacktrace.push(failure.and_then(|f| f.stacktrace));
    }
}

/// Writes every outcome of a batch in one statement: a batch of successes only with the lean
/// `sql/succeed_rows.sql`, any other batch whole with the general `sql/settle_rows.sql` (one
/// round trip and one commit per batch, however its outcomes mix). An outcome whose
/// token no longer holds its row (lease expired and reclaimed, or already settled) changes
/// nothing and is reported in [`SettleReport::fenced`].
pub(crate) async fn settle(store: &PgStore, outcomes: Vec<Settlement>) -> StoreResult<SettleReport> {
    let mut written = HashMap::with_capacity(outcomes.len());
    if let Some(query) = write_query(store, &outcomes, None) {
        record(&mut written, store.inner.kept_connections.fetch_all(query).await.map_err(dlq_core::Error::store)?)?;
    }
    Ok(report(&outcomes, written))
}

/// Writes a batch's outcomes and claims the next batch in one statement
/// (`sql/settle_claim.sql`): one round trip and one commit between two batches.
pub(crate) async fn settle_and_claim(
    store: &PgStore,
    outcomes: Vec<Settlement>,
    next: ClaimRequest,
) -> StoreResult<(SettleReport, StoreResult<Vec<Claimed>>)> {
    if next.event_types.is_empty() || next.limit == 0 {
        return Ok((settle(store, outcomes).await?, Ok(Vec::new())));
    }
    let since = store.inner.floors.since(&next.event_types, Instant::now());
    let Some(query) = write_query(store, &outcomes, Some((&next, since.clone()))) else {
        return Ok((report(&outcomes, HashMap::new()), claim_from(store, &next, since).await));
    };
    let rows = store.inner.kept_connections.fetch_all(query).await.map_err(dlq_core::Error::store)?;
    // One row carries the settled leases (the statement's rank 1; looked for in every row,
    // so that the order rows arrive in does not matter).
    let mut written = HashMap::with_capacity(outcomes.len());
    for r in &rows {
        let ids: Option<Vec<i64>> = r.try_get("settled_ids").map_err(dlq_core::Error::store)?;
        let tokens: Option<Vec<Uuid>> = r.try_get("settled_tokens").map_err(dlq_core::Error::store)?;
        for key in ids.unwrap_or_default().into_iter().zip(tokens.unwrap_or_default()) {
            *written.entry(key).or_default() += 1;
        }
    }
    let claimed = claimed_rows(&rows);
    if let Ok(claimed) = &claimed {
        store.inner.floors.claimed(claimed);
    }
    Ok((report(&outcomes, written), claimed))
}

/// The statement that writes `outcomes` (each lease once: the first outcome of a lease is
/// sent, the others are reported fenced) and, with `next`, claims the next batch from its
/// floor, every parameter bound; `None` when there is nothing to write.
fn write_query<'q>(
    store: &'q PgStore,
    outcomes: &[Settlement],
    next: Option<(&'q ClaimRequest, Vec<Option<DateTime<Utc>>>)>,
) -> Option<Query<'q, sqlx::Postgres, PgArguments>> {
    let mut seen = HashSet::with_capacity(outcomes.len());
    let unique: Vec<&Settlement> = outcomes.iter().filter(|s| seen.insert(s.lease())).collect();
    if unique.is_empty() {
        return None;
    }
    let sql = &store.inner.sql;
    let query = if unique.iter().all(|s| matches!(s, Settlement::Succeeded { .. })) {
        let statement = match next {
            Some((next, _)) => sql.claiming(ClaimStmt::AfterSuccesses, next.limit),
            None => sql.succeed.sql(),
        };
        let (ids, tokens): (Vec<i64>, Vec<Uuid>) = unique.iter().map(|s| (s.lease().id, s.lease().token)).unzip();
        sqlx::query(statement).bind(ids).bind(tokens)
    } else {
        let statement = match next {
            Some((next, _)) => sql.claiming(ClaimStmt::AfterOutcomes, next.limit),
            None => sql.settle.sql(),
        };
        let wake = unique.iter().any(|s| s.pending_again()) && store.inner.debounce.notify_now();
        let mut o = Outcomes::default();
        unique.into_iter().for_each(|s| o.push(s));
        o.bind(sqlx::query(statement), store, wake)
    };
    Some(match next {
        Some((next, since)) => {
            query.bind(&next.event_types).bind(micros(next.lease)).bind(next.owner.as_str()).bind(since)
        }
        None => query,
    })
}

/// Each outcome counted once: applied when the statement wrote its lease (as many times as
/// it was written), else fenced.
fn report(outcomes: &[Settlement], mut written: HashMap<(i64, Uuid), u32>) -> SettleReport {
    let mut report = SettleReport::default();
    for settlement in outcomes {
        let lease = settlement.lease();
        match written.get_mut(&(lease.id, lease.token)) {
            Some(n) if *n > 0 => {
                *n -= 1;
                report.applied += 1;
            }
            _ => report.fenced.push(lease.id),
        }
    }
    report
}

fn record(written: &mut HashMap<(i64, Uuid), u32>, rows: Vec<PgRow>) -> StoreResult<()> {
    for r in &rows {
        let key =
            (r.try_get("id").map_err(dlq_core::Error::store)?, r.try_get("token").map_err(dlq_core::Error::store)?);
        *written.entry(key).or_default() += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use chrono::{DateTime, TimeDelta, Utc};
    use dlq_core::store::Claimed;
    use dlq_core::{DeadLetter, ErrorClass, Payload, classify::FailureInfo};

    use super::{ClaimFloors, FLOOR_MARGIN, FULL_WALK_EVERY};

    fn claimed(due: &[(&str, DateTime<Utc>)]) -> Vec<Claimed> {
        let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
        due.iter()
            .enumerate()
            .map(|(id, (event_type, at))| {
                let mut letter =
                    DeadLetter::new(id as i64, event_type, Payload::from_bytes(b"{}"), failure.clone(), *at);
                letter.retry_after = *at;
                Claimed::of(&letter, uuid::Uuid::nil())
            })
            .collect()
    }

    #[test]
    fn each_type_s_floor_follows_its_newest_claimed_row_and_a_walk_from_the_oldest_comes_every_period() {
        let floors = ClaimFloors::default();
        let types = ["refund".to_owned(), "payment".to_owned()];
        let t0 = Instant::now();
        let at = Utc::now();
        assert_eq!(floors.since(&types, t0), [None, None], "the first claim walks from the oldest");
        floors.claimed(&claimed(&[("payment", at), ("payment", at + TimeDelta::seconds(1)), ("refund", at)]));
        let next = t0 + Duration::from_millis(10);
        let floor = at + TimeDelta::seconds(1) - FLOOR_MARGIN;
        assert_eq!(
            floors.since(&types, next),
            [Some(at - FLOOR_MARGIN), Some(floor)],
            "one floor per type, each a margin behind its own newest row"
        );
        assert_eq!(floors.since(&types[1..], next), [Some(floor)], "whatever types are claimed with it");
        assert_eq!(floors.since(&["receipt".to_owned()], next), [None], "a new type walks from its oldest");

        floors.claimed(&claimed(&[("payment", at)]));
        assert_eq!(floors.since(&types[1..], next), [Some(floor)], "an older row (a straggler) keeps the floor");
        floors.claimed(&[]);
        assert_eq!(floors.since(&types[1..], next), [Some(floor)], "so does a claim of nothing");
        floors.claimed(&claimed(&[("payment", at + TimeDelta::seconds(5))]));
        let moved = at + TimeDelta::seconds(5) - FLOOR_MARGIN;
        assert_eq!(floors.since(&types, next), [Some(at - FLOOR_MARGIN), Some(moved)], "a newer one moves it");

        let later = next + FULL_WALK_EVERY;
        assert_eq!(floors.since(&types, later), [None, None], "once a period, from the oldest");
        assert!(floors.since(&types, later).iter().all(Option::is_some), "the floors are kept for the next claims");
    }
}
