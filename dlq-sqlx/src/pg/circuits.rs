//! The `dlq_circuits` and `dlq_circuit_log` tables: each event type's circuit, written by
//! compare-and-set, and the log of its changes (`docs/BREAKER.md`).

use std::time::Duration;

use dlq_core::adapter::CircuitState;
use dlq_core::store::{Circuit, CircuitLogEntry, CircuitWrite, Circuits, StoreResult};
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::{PgStore, micros};

fn db(err: sqlx::Error) -> dlq_core::Error {
    dlq_core::Error::store(err)
}

fn decode(r: &PgRow) -> StoreResult<Circuit> {
    let mut c = Circuit::closed(&r.try_get::<String, _>("event_type").map_err(db)?);
    c.state = r.try_get::<String, _>("state").map_err(db)?.parse::<CircuitState>()?;
    c.open_until = r.try_get("open_until").map_err(db)?;
    c.cool_down = Duration::from_micros(u64::try_from(r.try_get::<i64, _>("cool_down_us").map_err(db)?).unwrap_or(0));
    c.trial_owner = r.try_get("trial_owner").map_err(db)?;
    c.trial_until = r.try_get("trial_until").map_err(db)?;
    c.paused = r.try_get("paused").map_err(db)?;
    c.paused_by = r.try_get("paused_by").map_err(db)?;
    c.pause_reason = r.try_get("pause_reason").map_err(db)?;
    c.reason = r.try_get("reason").map_err(db)?;
    c.version = r.try_get("version").map_err(db)?;
    c.updated_at = r.try_get("updated_at").map_err(db)?;
    Ok(c)
}

pub(crate) async fn all(store: &PgStore) -> StoreResult<Circuits> {
    let rows = sqlx::query(store.inner.sql.circuits.sql()).fetch_all(&store.inner.pool).await.map_err(db)?;
    let at = match rows.first() {
        Some(row) => row.try_get("read_at").map_err(db)?,
        None => chrono::Utc::now(),
    };
    let mut circuits = Vec::new();
    for row in &rows {
        if row.try_get::<Option<String>, _>("event_type").map_err(db)?.is_some() {
            circuits.push(decode(row)?);
        }
    }
    Ok(Circuits::new(at, circuits))
}

pub(crate) async fn write(store: &PgStore, w: CircuitWrite) -> StoreResult<Option<Circuit>> {
    let sql = &store.inner.sql;
    let statement = if w.expected_version == 0 { sql.circuit_insert.sql() } else { sql.circuit_update.sql() };
    let row = sqlx::query(statement)
        .bind(&w.event_type)
        .bind(w.state.as_str())
        .bind(w.expected_version)
        .bind(w.open_for.map(micros))
        .bind(micros(w.cool_down))
        .bind(&w.trial_owner)
        .bind(w.trial_for.map(micros))
        .bind(w.paused)
        .bind(&w.paused_by)
        .bind(&w.pause_reason)
        .bind(&w.reason)
        .bind(&w.actor)
        .bind(w.logged_as)
        .fetch_optional(&store.inner.pool)
        .await
        .map_err(db)?;
    row.as_ref().map(decode).transpose()
}

pub(crate) async fn log(
    store: &PgStore,
    event_type: Option<String>,
    limit: usize,
) -> StoreResult<Vec<CircuitLogEntry>> {
    let rows = sqlx::query(store.inner.sql.circuit_log.sql())
        .bind(event_type)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&store.inner.pool)
        .await
        .map_err(db)?;
    rows.iter()
        .map(|r| {
            Ok(CircuitLogEntry::from_parts(
                r.try_get("event_type").map_err(db)?,
                r.try_get("from_state").map_err(db)?,
                r.try_get("to_state").map_err(db)?,
                r.try_get("reason").map_err(db)?,
                r.try_get("actor").map_err(db)?,
                r.try_get("at").map_err(db)?,
            ))
        })
        .collect()
}
