//! Batched operator actions with their audit note, resumable operations
//! (`dlq_operations`), and the table's health for `dlq stats`.

use dlq_core::store::{
    ActionKind, BatchAction, BatchReport, Operation, OperationState, OperationStep, Refusal, Refused, StoreResult,
    TableHealth, refusal,
};
use dlq_core::{AuditEntry, AuditNote, DlqId, Status};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::PgStore;
use super::admin::{actor, audit_entry};

fn db(err: sqlx::Error) -> dlq_core::Error {
    dlq_core::Error::store(err)
}

fn unsigned(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Sorts a batch's ids into moved and refused by the shared rule, from the locked rows.
fn verdicts(batch: &BatchAction, rows: &[PgRow]) -> StoreResult<BatchReport> {
    let mut report = BatchReport::default();
    for &id in &batch.ids {
        let Some(row) = rows.iter().find(|r| r.try_get::<i64, _>("id").ok() == Some(id)) else {
            report.refused.push(Refusal { id, why: Refused::NotFound });
            continue;
        };
        let status: Status = row.try_get::<String, _>("status").map_err(db)?.parse()?;
        let truncated: bool = row.try_get("payload_truncated").map_err(db)?;
        let redrives = u32::try_from(row.try_get::<i32, _>("redrive_count").map_err(db)?).unwrap_or(0);
        match refusal(batch.action, status, truncated, redrives, batch.max_redrives) {
            Some(why) => report.refused.push(Refusal { id, why }),
            None => report.moved.push(id),
        }
    }
    Ok(report)
}

pub(crate) async fn apply(store: &PgStore, batch: BatchAction) -> StoreResult<BatchReport> {
    let sql = &store.inner.sql;
    let mut tx = store.inner.pool.begin().await.map_err(db)?;
    let rows = sqlx::query(sql.action_lock.sql()).bind(&batch.ids).fetch_all(&mut *tx).await.map_err(db)?;
    let report = verdicts(&batch, &rows)?;
    let who = actor(&batch.note.actor);
    let why = batch.note.reason.as_deref().map(actor);
    if !report.moved.is_empty() {
        let query = match batch.action {
            ActionKind::Redrive => {
                sqlx::query(sql.redrive_ids.sql()).bind(&report.moved).bind(who).bind(why).bind(sql.channel.as_str())
            }
            ActionKind::Discard => sqlx::query(sql.discard_ids.sql()).bind(&report.moved).bind(who).bind(why),
        };
        query.execute(&mut *tx).await.map_err(db)?;
    }
    if let Some(step) = batch.step {
        advance(store, &mut tx, step, &report).await?;
    }
    tx.commit().await.map_err(db)?;
    Ok(report)
}

async fn advance(
    store: &PgStore,
    conn: &mut PgConnection,
    step: OperationStep,
    report: &BatchReport,
) -> StoreResult<()> {
    let refused = report.refused.len() as u64 + step.refused_before;
    let done = sqlx::query(store.inner.sql.op_advance.sql())
        .bind(step.operation)
        .bind(step.to)
        .bind(i64::try_from(report.moved.len()).unwrap_or(i64::MAX))
        .bind(i64::try_from(refused).unwrap_or(i64::MAX))
        .bind(step.from)
        .execute(conn)
        .await
        .map_err(db)?;
    if done.rows_affected() == 0 {
        return Err(dlq_core::Error::Conflict { operation: step.operation });
    }
    Ok(())
}

pub(crate) async fn audit_one(store: &PgStore, id: i64) -> StoreResult<Option<AuditEntry>> {
    let row =
        sqlx::query(store.inner.sql.audit_entry.sql()).bind(id).fetch_optional(&store.inner.pool).await.map_err(db)?;
    row.as_ref().map(audit_entry).transpose().map_err(db)
}

fn operation(row: &PgRow) -> StoreResult<Operation> {
    let action = match row.try_get::<String, _>("action").map_err(db)?.as_str() {
        "discard" => ActionKind::Discard,
        _ => ActionKind::Redrive,
    };
    Ok(Operation {
        id: row.try_get("id").map_err(db)?,
        action,
        spec: row.try_get("spec").map_err(db)?,
        note: AuditNote { actor: row.try_get("actor").map_err(db)?, reason: row.try_get("reason").map_err(db)? },
        cursor: row.try_get::<DlqId, _>("cursor_id").map_err(db)?,
        moved: unsigned(row.try_get("moved").map_err(db)?),
        refused: unsigned(row.try_get("refused").map_err(db)?),
        state: OperationState::parse(&row.try_get::<String, _>("state").map_err(db)?)?,
        created_at: row.try_get("created_at").map_err(db)?,
        updated_at: row.try_get("updated_at").map_err(db)?,
    })
}

pub(crate) async fn create(
    store: &PgStore,
    action: ActionKind,
    spec: serde_json::Value,
    note: AuditNote,
) -> StoreResult<Operation> {
    let row = sqlx::query(store.inner.sql.op_insert.sql())
        .bind(action.as_str())
        .bind(spec)
        .bind(actor(&note.actor))
        .bind(note.reason.as_deref().map(actor))
        .fetch_one(&store.inner.pool)
        .await
        .map_err(db)?;
    operation(&row)
}

pub(crate) async fn get(store: &PgStore, id: i64) -> StoreResult<Option<Operation>> {
    let row = sqlx::query(store.inner.sql.op_get.sql()).bind(id).fetch_optional(&store.inner.pool).await.map_err(db)?;
    row.as_ref().map(operation).transpose()
}

pub(crate) async fn set_state(store: &PgStore, id: i64, state: OperationState) -> StoreResult<()> {
    let done = sqlx::query(store.inner.sql.op_state.sql())
        .bind(id)
        .bind(state.as_str())
        .execute(&store.inner.pool)
        .await
        .map_err(db)?;
    if done.rows_affected() == 0 {
        return Err(dlq_core::Error::OperationNotFound(id));
    }
    Ok(())
}

pub(crate) async fn table_health(store: &PgStore) -> StoreResult<Option<TableHealth>> {
    let found = sqlx::query(store.inner.sql.table_health.sql())
        .bind(&store.inner.config.schema)
        .fetch_optional(&store.inner.pool)
        .await
        .map_err(db)?;
    let table = found
        .map(|r| -> StoreResult<TableHealth> {
            Ok(TableHealth {
                live_tuples: unsigned(r.try_get("n_live_tup").map_err(db)?),
                dead_tuples: unsigned(r.try_get("n_dead_tup").map_err(db)?),
                autovacuum: r.try_get("autovacuum").map_err(db)?,
                last_vacuum: r.try_get("last_vacuum").map_err(db)?,
            })
        })
        .transpose()?;
    Ok(table)
}
