//! Batched operator actions with their audit note, and resumable operations
//! (`dlq_operations`).

use dlq_core::store::{
    ActionKind, BatchAction, BatchReport, Operation, OperationState, OperationStep, PatchBatch, Refusal, Refused,
    RowEdit, StoreResult, operation_patch_diff, refusal,
};
use dlq_core::{DlqId, Error, Status, admin::AuditEntry, store::AuditNote};
use sqlx::Row;
use sqlx::sqlite::{SqlitePool, SqliteRow};

use super::admin::{SELECT_AUDIT_ENTRY, audit_entry, insert_audit, write_payload};
use super::codec::{self, sql};
use super::statement::Composed;
use super::write::begin;

const LOCK_ROWS: &str = include_str!("sql/action_rows.sql");
const REDRIVE_ROWS: &str = include_str!("sql/redrive_ids.sql");
const DISCARD_ROWS: &str = include_str!("sql/discard_ids.sql");
static PATCH_ROWS: Composed = Composed::new(include_str!("sql/patch_rows_read.sql"));
const MARKED: &str = include_str!("sql/patch_rows_marked.sql");
const ADVANCE: &str = include_str!("sql/op_advance.sql");
const INSERT_OPERATION: &str = include_str!("sql/op_insert.sql");
const SELECT_OPERATION: &str = include_str!("sql/op_get.sql");
const SET_STATE: &str = include_str!("sql/op_state.sql");

/// One locked row: what [`refusal`] needs.
struct Locked {
    id: DlqId,
    status: Status,
    truncated: bool,
    redrive_count: u32,
}

fn locked(row: &SqliteRow) -> StoreResult<Locked> {
    Ok(Locked {
        id: row.try_get(0).map_err(sql)?,
        status: row.try_get::<String, _>(1).map_err(sql)?.parse()?,
        truncated: row.try_get(2).map_err(sql)?,
        redrive_count: u32::try_from(row.try_get::<i64, _>(3).map_err(sql)?).unwrap_or(u32::MAX),
    })
}

/// Sorts a batch's ids into moved and refused by the shared rule.
fn verdicts(batch: &BatchAction, rows: &[Locked]) -> BatchReport {
    let mut report = BatchReport::default();
    for &id in &batch.ids {
        let Some(row) = rows.iter().find(|r| r.id == id) else {
            report.refused.push(Refusal { id, why: Refused::NotFound });
            continue;
        };
        match refusal(batch.action, row.status, row.truncated, row.redrive_count, batch.max_redrives) {
            Some(why) => report.refused.push(Refusal { id, why }),
            None => report.moved.push(id),
        }
    }
    report
}

pub(super) async fn apply(pool: &SqlitePool, batch: BatchAction) -> StoreResult<BatchReport> {
    let at = codec::now_micros();
    let mut tx = begin(pool).await?;
    let found = sqlx::query(LOCK_ROWS).bind(codec::json_list(&batch.ids)).fetch_all(&mut *tx).await.map_err(sql)?;
    let rows = found.iter().map(locked).collect::<StoreResult<Vec<_>>>()?;
    let report = verdicts(&batch, &rows);
    let (update, to) = match batch.action {
        ActionKind::Redrive => (REDRIVE_ROWS, Status::Pending),
        ActionKind::Discard => (DISCARD_ROWS, Status::Discarded),
        ActionKind::Patch => return Err(Error::Invalid("a patch batch is written by patch_rows, not apply".into())),
    };
    sqlx::query(update).bind(codec::json_list(&report.moved)).bind(at).execute(&mut *tx).await.map_err(sql)?;
    for row in rows.iter().filter(|r| report.moved.contains(&r.id)) {
        let diff = serde_json::json!({ "status": [row.status.as_str(), to.as_str()] });
        insert_audit(&mut tx, row.id, batch.action.as_str(), &batch.note, &diff, at).await?;
    }
    if let Some(step) = batch.step {
        advance(&mut tx, step, &report, at).await?;
    }
    tx.commit().await.map_err(sql)?;
    Ok(report)
}

/// One batch of a patch operation in one write transaction: the rows read, the operation's
/// marks read, each row the rules let through written with its audit entry, the cursor moved.
pub(super) async fn patch_rows(pool: &SqlitePool, batch: PatchBatch) -> StoreResult<BatchReport> {
    let PatchBatch { rows: edits, note, patch, step } = batch;
    let at = codec::now_micros();
    let ids: Vec<DlqId> = edits.iter().map(|e| e.id).collect();
    let mut tx = begin(pool).await?;
    let found = sqlx::query(PATCH_ROWS.sql()).bind(codec::json_list(&ids)).fetch_all(&mut *tx).await.map_err(sql)?;
    let rows = found.iter().map(codec::letter).collect::<StoreResult<Vec<_>>>()?;
    let marked: Vec<DlqId> = sqlx::query_scalar(MARKED)
        .bind(codec::json_list(&ids))
        .bind(step.operation)
        .fetch_all(&mut *tx)
        .await
        .map_err(sql)?;
    let mut report = BatchReport::default();
    for edit in edits {
        let id = edit.id;
        let why = match rows.iter().find(|r| r.id == id) {
            None => Some(Refused::NotFound),
            Some(row) => patch_refusal(row.status, &row.payload, &edit, marked.contains(&id), step.operation),
        };
        if let Some(why) = why {
            report.refused.push(Refusal { id, why });
            continue;
        }
        let diff = operation_patch_diff(&edit.old, &edit.new, &patch, step.operation);
        write_payload(&mut tx, id, &edit.new, &note, &diff, at).await?;
        report.moved.push(id);
    }
    advance(&mut tx, step, &report, at).await?;
    tx.commit().await.map_err(sql)?;
    Ok(report)
}

/// Why a row of a patch batch is not written, by the rule of `patch_rows`.
fn patch_refusal(
    status: Status,
    payload: &dlq_core::Payload,
    edit: &RowEdit,
    marked: bool,
    operation: i64,
) -> Option<Refused> {
    if let Some(why) = refusal(ActionKind::Patch, status, false, 0, None) {
        return Some(why);
    }
    if marked {
        return Some(Refused::AlreadyPatched { operation });
    }
    if *payload != edit.old {
        return Some(Refused::Changed);
    }
    let fits = edit.new.check_fits(dlq_core::store::DEFAULT_MAX_PAYLOAD_BYTES);
    fits.err().map(|e| Refused::Unfit { message: e.to_string() })
}

async fn advance(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    step: OperationStep,
    report: &BatchReport,
    at: i64,
) -> StoreResult<()> {
    let done = sqlx::query(ADVANCE)
        .bind(step.operation)
        .bind(step.to)
        .bind(report.moved.len() as i64)
        .bind(report.refused.len() as i64 + i64::try_from(step.refused_before).unwrap_or(0))
        .bind(at)
        .bind(step.from)
        .execute(&mut **tx)
        .await
        .map_err(sql)?;
    if done.rows_affected() == 0 {
        return Err(Error::Conflict { operation: step.operation });
    }
    Ok(())
}

pub(super) async fn audit_one(pool: &SqlitePool, id: i64) -> StoreResult<Option<AuditEntry>> {
    let row = sqlx::query(SELECT_AUDIT_ENTRY).bind(id).fetch_optional(pool).await.map_err(sql)?;
    row.as_ref().map(audit_entry).transpose()
}

pub(super) async fn create(
    pool: &SqlitePool,
    action: ActionKind,
    spec: serde_json::Value,
    note: AuditNote,
) -> StoreResult<Operation> {
    let id: i64 = sqlx::query_scalar(INSERT_OPERATION)
        .bind(action.as_str())
        .bind(spec.to_string())
        .bind(note.actor)
        .bind(note.reason)
        .bind(codec::now_micros())
        .fetch_one(pool)
        .await
        .map_err(sql)?;
    get(pool, id).await?.ok_or(Error::OperationNotFound(id))
}

fn operation(row: &SqliteRow) -> StoreResult<Operation> {
    let action = row.try_get::<String, _>("action").map_err(sql)?.parse::<ActionKind>()?;
    let spec: String = row.try_get("spec").map_err(sql)?;
    let count = |column: &str| -> StoreResult<u64> {
        Ok(u64::try_from(row.try_get::<i64, _>(column).map_err(sql)?).unwrap_or_default())
    };
    Ok(Operation {
        id: row.try_get("id").map_err(sql)?,
        action,
        spec: serde_json::from_str(&spec).map_err(|e| codec::decode_error(format!("operation spec: {e}")))?,
        note: AuditNote { actor: row.try_get("actor").map_err(sql)?, reason: row.try_get("reason").map_err(sql)? },
        cursor: row.try_get("cursor_id").map_err(sql)?,
        moved: count("moved")?,
        refused: count("refused")?,
        state: row.try_get::<String, _>("state").map_err(sql)?.parse::<OperationState>()?,
        created_at: codec::time(row.try_get("created_at").map_err(sql)?)?,
        updated_at: codec::time(row.try_get("updated_at").map_err(sql)?)?,
    })
}

pub(super) async fn get(pool: &SqlitePool, id: i64) -> StoreResult<Option<Operation>> {
    let row = sqlx::query(SELECT_OPERATION).bind(id).fetch_optional(pool).await.map_err(sql)?;
    row.as_ref().map(operation).transpose()
}

pub(super) async fn set_state(pool: &SqlitePool, id: i64, state: OperationState) -> StoreResult<()> {
    let done = sqlx::query(SET_STATE)
        .bind(id)
        .bind(state.as_str())
        .bind(codec::now_micros())
        .execute(pool)
        .await
        .map_err(sql)?;
    if done.rows_affected() == 0 {
        return Err(Error::OperationNotFound(id));
    }
    Ok(())
}
