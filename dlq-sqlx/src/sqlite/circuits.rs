//! The `dlq_circuits` and `dlq_circuit_log` tables on SQLite: the compare-and-set runs in one
//! `BEGIN IMMEDIATE` transaction (read the version, write, log), so processes sharing the
//! file take turns.

use std::time::Duration;

use dlq_core::adapter::CircuitState;
use dlq_core::store::{Circuit, CircuitLogEntry, CircuitWrite, Circuits, StoreResult};
use sqlx::Row;
use sqlx::sqlite::{SqlitePool, SqliteRow};

use super::codec::{self, sql};
use super::statement::Composed;
use super::write::begin;

static ALL: Composed = Composed::new(include_str!("sql/circuits.sql"));
static ONE: Composed = Composed::new(include_str!("sql/circuit.sql"));
const UPSERT: &str = include_str!("sql/circuit_write.sql");
const LOG: &str = include_str!("sql/circuit_log_insert.sql");
const LOG_READ: &str = include_str!("sql/circuit_log.sql");

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn decode(r: &SqliteRow) -> StoreResult<Circuit> {
    let opt_time = |col: &str| -> StoreResult<Option<chrono::DateTime<chrono::Utc>>> {
        r.try_get::<Option<i64>, _>(col).map_err(sql)?.map(codec::time).transpose()
    };
    let mut c = Circuit::closed(&r.try_get::<String, _>("event_type").map_err(sql)?);
    c.state = r.try_get::<String, _>("state").map_err(sql)?.parse::<CircuitState>()?;
    c.open_until = opt_time("open_until")?;
    c.cool_down = Duration::from_micros(u64::try_from(r.try_get::<i64, _>("cool_down_us").map_err(sql)?).unwrap_or(0));
    c.trial_owner = r.try_get("trial_owner").map_err(sql)?;
    c.trial_until = opt_time("trial_until")?;
    c.paused = r.try_get("paused").map_err(sql)?;
    c.paused_by = r.try_get("paused_by").map_err(sql)?;
    c.pause_reason = r.try_get("pause_reason").map_err(sql)?;
    c.reason = r.try_get("reason").map_err(sql)?;
    c.version = r.try_get("version").map_err(sql)?;
    c.updated_at = opt_time("updated_at")?;
    Ok(c)
}

pub(super) async fn all(pool: &SqlitePool) -> StoreResult<Circuits> {
    let at = codec::time(codec::now_micros())?;
    let rows = sqlx::query(ALL.sql()).fetch_all(pool).await.map_err(sql)?;
    Ok(Circuits::new(at, rows.iter().map(decode).collect::<StoreResult<_>>()?))
}

pub(super) async fn write(pool: &SqlitePool, w: CircuitWrite) -> StoreResult<Option<Circuit>> {
    let at_micros = codec::now_micros();
    let at = codec::time(at_micros)?;
    let mut tx = begin(pool).await?;
    let row = sqlx::query(ONE.sql()).bind(&w.event_type).fetch_optional(&mut *tx).await.map_err(sql)?;
    let current = row.as_ref().map(decode).transpose()?.unwrap_or_else(|| Circuit::closed(&w.event_type));
    let Some(next) = w.applied_to(&current, at) else { return Ok(None) };
    sqlx::query(UPSERT)
        .bind(&next.event_type)
        .bind(next.state.as_str())
        .bind(next.open_until.map(|t| t.timestamp_micros()))
        .bind(micros(next.cool_down))
        .bind(&next.trial_owner)
        .bind(next.trial_until.map(|t| t.timestamp_micros()))
        .bind(next.paused)
        .bind(&next.paused_by)
        .bind(&next.pause_reason)
        .bind(&next.reason)
        .bind(next.version)
        .bind(at_micros)
        .execute(&mut *tx)
        .await
        .map_err(sql)?;
    let entry = CircuitLogEntry::new(&w, current.state, at);
    sqlx::query(LOG)
        .bind(&entry.event_type)
        .bind(&entry.from)
        .bind(&entry.to)
        .bind(&entry.reason)
        .bind(&entry.actor)
        .bind(at_micros)
        .execute(&mut *tx)
        .await
        .map_err(sql)?;
    tx.commit().await.map_err(sql)?;
    Ok(Some(next))
}

pub(super) async fn log(
    pool: &SqlitePool,
    event_type: Option<String>,
    limit: usize,
) -> StoreResult<Vec<CircuitLogEntry>> {
    let rows = sqlx::query(LOG_READ)
        .bind(event_type)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(pool)
        .await
        .map_err(sql)?;
    rows.iter()
        .map(|r| {
            Ok(CircuitLogEntry::from_parts(
                r.try_get("event_type").map_err(sql)?,
                r.try_get("from_state").map_err(sql)?,
                r.try_get("to_state").map_err(sql)?,
                r.try_get("reason").map_err(sql)?,
                r.try_get("actor").map_err(sql)?,
                codec::time(r.try_get("at").map_err(sql)?)?,
            ))
        })
        .collect()
}
