//! Batched operator actions with their audit note, resumable operations
//! (`dlq_operations`), and the table's health for `dlq stats`.

use dlq_core::store::{
    ActionKind, BatchAction, BatchReport, Maintenance, Operation, OperationState, OperationStep, PatchBatch, Refusal,
    Refused, RowEdit, StoreResult, TableHealth, operation_patch_diff, refusal,
};
use dlq_core::{DlqId, Payload, Status, admin::AuditEntry, store::AuditNote};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use std::time::Duration;

use super::admin::{actor, audit_entry};
use super::session::SessionConnection;
use super::{PgStore, park};

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

/// A patch batch given to `apply`: patches are written by `patch_rows`.
fn patch_by_apply() -> dlq_core::Error {
    dlq_core::Error::Invalid("a patch batch is written by patch_rows, not apply".into())
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
            ActionKind::Patch => return Err(patch_by_apply()),
        };
        query.execute(&mut *tx).await.map_err(db)?;
    }
    if let Some(step) = batch.step {
        advance(store, &mut tx, step, &report).await?;
    }
    tx.commit().await.map_err(db)?;
    Ok(report)
}

/// One batch of a patch operation: the rows locked, the operation's marks read under their
/// locks, each row the rules let through written with its audit entry, the cursor moved.
pub(crate) async fn patch_rows(store: &PgStore, batch: PatchBatch) -> StoreResult<BatchReport> {
    let sql = &store.inner.sql;
    let PatchBatch { rows: edits, note, patch, step } = batch;
    let ids: Vec<DlqId> = edits.iter().map(|e| e.id).collect();
    let mut tx = store.inner.pool.begin().await.map_err(db)?;
    let locked = sqlx::query(sql.patch_rows_lock.sql()).bind(&ids).fetch_all(&mut *tx).await.map_err(db)?;
    let marked: Vec<DlqId> = sqlx::query_scalar(sql.patch_rows_marked.sql())
        .bind(&ids)
        .bind(step.operation)
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?;
    let mut report = BatchReport::default();
    let mut json = Vec::new();
    let mut raw = Vec::new();
    let mut diffs = Vec::new();
    for edit in edits {
        let id = edit.id;
        let current = locked.iter().find(|r| r.try_get::<i64, _>("id").ok() == Some(id));
        let why = match current {
            None => Some(Refused::NotFound),
            Some(row) => patch_refusal(store, row, &edit, marked.contains(&id), step.operation)?,
        };
        if let Some(why) = why {
            report.refused.push(Refusal { id, why });
            continue;
        }
        diffs.push(operation_patch_diff(&edit.old, &edit.new, &patch, step.operation));
        // Not cut: `check_fits` refused cut payloads.
        let (doc, bytes) = match park::jsonb_storable(edit.new) {
            Payload::Json(value) => (Some(value), None),
            Payload::Raw { bytes, .. } => (None, Some(bytes)),
        };
        json.push(doc);
        raw.push(bytes);
        report.moved.push(id);
    }
    if !report.moved.is_empty() {
        sqlx::query(sql.patch_rows_write.sql())
            .bind(&report.moved)
            .bind(json)
            .bind(raw)
            .bind(diffs)
            .bind(actor(&note.actor))
            .bind(note.reason.as_deref().map(actor))
            .execute(&mut *tx)
            .await
            .map_err(db)?;
    }
    advance(store, &mut tx, step, &report).await?;
    tx.commit().await.map_err(db)?;
    Ok(report)
}

/// Why a locked row of a patch batch is not written, by the rule of `patch_rows`.
fn patch_refusal(
    store: &PgStore,
    row: &PgRow,
    edit: &RowEdit,
    marked: bool,
    operation: i64,
) -> StoreResult<Option<Refused>> {
    let status: Status = row.try_get::<String, _>("status").map_err(db)?.parse()?;
    if let Some(why) = refusal(ActionKind::Patch, status, false, 0, None) {
        return Ok(Some(why));
    }
    if marked {
        return Ok(Some(Refused::AlreadyPatched { operation }));
    }
    if super::row::payload(row)? != edit.old {
        return Ok(Some(Refused::Changed));
    }
    let fits = park::jsonb_storable(edit.new.clone()).check_fits(store.inner.config.max_payload_bytes);
    Ok(fits.err().map(|e| Refused::Unfit { message: e.to_string() }))
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

pub(crate) async fn mark_unreadable(store: &PgStore, leases: Vec<dlq_core::store::Lease>) -> StoreResult<()> {
    let (ids, tokens): (Vec<DlqId>, Vec<uuid::Uuid>) = leases.into_iter().map(|l| (l.id, l.token)).unzip();
    sqlx::query(store.inner.sql.mark_unreadable.sql())
        .bind(ids)
        .bind(tokens)
        .execute(&store.inner.pool)
        .await
        .map_err(db)?;
    Ok(())
}

pub(crate) async fn count_unreadable(store: &PgStore) -> StoreResult<u64> {
    let n: i64 =
        sqlx::query_scalar(store.inner.sql.count_unreadable.sql()).fetch_one(&store.inner.pool).await.map_err(db)?;
    Ok(unsigned(n))
}

pub(crate) async fn reveal(store: &PgStore, id: DlqId, note: AuditNote) -> StoreResult<i64> {
    let entry: Option<i64> = sqlx::query_scalar(store.inner.sql.reveal.sql())
        .bind(id)
        .bind(actor(&note.actor))
        .bind(note.reason)
        .fetch_optional(&store.inner.pool)
        .await
        .map_err(db)?;
    entry.ok_or(dlq_core::Error::NotFound(id))
}

fn operation(row: &PgRow) -> StoreResult<Operation> {
    let action = row.try_get::<String, _>("action").map_err(db)?.parse::<ActionKind>()?;
    Ok(Operation {
        id: row.try_get("id").map_err(db)?,
        action,
        spec: row.try_get("spec").map_err(db)?,
        note: AuditNote { actor: row.try_get("actor").map_err(db)?, reason: row.try_get("reason").map_err(db)? },
        cursor: row.try_get::<DlqId, _>("cursor_id").map_err(db)?,
        moved: unsigned(row.try_get("moved").map_err(db)?),
        refused: unsigned(row.try_get("refused").map_err(db)?),
        state: row.try_get::<String, _>("state").map_err(db)?.parse::<OperationState>()?,
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

/// The retrier-driven vacuum's state in this process.
#[derive(Debug, Default)]
pub(crate) struct VacuumState {
    /// When this process last vacuumed `dlq_events` (or tried).
    last: Option<std::time::Instant>,
    /// Whether the role may vacuum the tables (it owns them), once known.
    allowed: Option<bool>,
    /// Tally rows this process folded since it last vacuumed `dlq_tallies`.
    folded: u64,
}

/// The shortest time between two vacuums by this process, and since any vacuum of the table.
const VACUUM_EVERY: Duration = Duration::from_secs(30);

/// Folded tally rows (each a dead tuple) past which this process vacuums `dlq_tallies`: the
/// table stays a few pages, so the stats that sum it stay sub-millisecond.
const TALLY_VACUUM_ROWS: u64 = 20_000;

/// The retrier's upkeep (`OperatorStore::maintain`): folds the tallies, then vacuums
/// `dlq_events` when it needs it.
pub(crate) async fn maintain(store: &PgStore) -> StoreResult<Maintenance> {
    fold_tallies(store).await?;
    vacuum_if_needed(store).await
}

/// Folds `dlq_tallies` into one row per key, and vacuums it once this process has folded
/// [`TALLY_VACUUM_ROWS`] rows.
pub(crate) async fn fold_tallies(store: &PgStore) -> StoreResult<u64> {
    let folded: i64 =
        sqlx::query_scalar(store.inner.sql.fold_tallies.sql()).fetch_one(&store.inner.pool).await.map_err(db)?;
    let folded = unsigned(folded);
    let due = {
        let mut state = store.inner.vacuum.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.folded += folded;
        state.folded >= TALLY_VACUUM_ROWS
    };
    if due {
        let mut conn = SessionConnection::acquire(&store.inner.session, &store.inner.pool).await.map_err(db)?;
        if may_vacuum(store, &mut conn).await? {
            sqlx::query(store.inner.sql.vacuum_tallies.sql())
                .persistent(false)
                .execute(&mut *conn)
                .await
                .map_err(db)?;
        }
        store.inner.vacuum.lock().unwrap_or_else(std::sync::PoisonError::into_inner).folded = 0;
    }
    Ok(folded)
}

/// Whether this role may vacuum the store's tables: it must own them (PostgreSQL skips a
/// table the role does not own with a warning, not an error). Asked once per process.
async fn may_vacuum(store: &PgStore, conn: &mut sqlx::PgConnection) -> StoreResult<bool> {
    let known = store.inner.vacuum.lock().unwrap_or_else(std::sync::PoisonError::into_inner).allowed;
    if let Some(allowed) = known {
        return Ok(allowed);
    }
    let owns: bool = sqlx::query_scalar(
        "SELECT coalesce(bool_and(pg_has_role(c.relowner, 'MEMBER')), false) FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 \
         AND c.relname IN ('dlq_events', 'dlq_tallies')",
    )
    .bind(&store.inner.config.schema)
    .fetch_one(&mut *conn)
    .await
    .map_err(db)?;
    store.inner.vacuum.lock().unwrap_or_else(std::sync::PoisonError::into_inner).allowed = Some(owns);
    if !owns {
        tracing::warn!(
            "this role does not own dlq_events, so it cannot vacuum it: dead tuples wait for autovacuum \
             (make the role the table's owner, or set PgConfig::vacuum_dead_tuples(None) to silence this)"
        );
    }
    Ok(owns)
}

/// `VACUUM (ANALYZE)` of `dlq_events` when its dead tuples pass the configured threshold:
/// at most one retrier at a time (a session advisory lock), at most every 30 s, and not
/// within 30 s of another vacuum (autovacuum's, or another process's).
pub(crate) async fn vacuum_if_needed(store: &PgStore) -> StoreResult<Maintenance> {
    let Some(threshold) = store.inner.config.vacuum_dead_tuples else { return Ok(Maintenance::Light) };
    let recent = |at: Option<std::time::Instant>| at.is_some_and(|t| t.elapsed() < VACUUM_EVERY);
    {
        let state = store.inner.vacuum.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.allowed == Some(false) || recent(state.last) {
            return Ok(Maintenance::Light);
        }
    }
    let Some(health) = table_health(store).await? else { return Ok(Maintenance::Light) };
    let vacuumed_lately = health
        .last_vacuum
        .is_some_and(|at| chrono::Utc::now() - at < chrono::TimeDelta::seconds(VACUUM_EVERY.as_secs() as i64));
    if health.dead_tuples < threshold || vacuumed_lately {
        return Ok(Maintenance::Light);
    }
    let mut conn = SessionConnection::acquire(&store.inner.session, &store.inner.pool).await.map_err(db)?;
    if !may_vacuum(store, &mut conn).await? {
        return Ok(Maintenance::Light);
    }
    let key = format!("dlq vacuum {}", store.inner.config.schema);
    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext($1))")
        .bind(&key)
        .fetch_one(&mut *conn)
        .await
        .map_err(db)?;
    if !locked {
        return Ok(Maintenance::Light); // another retrier vacuums it now
    }
    let started = std::time::Instant::now();
    // A vacuum cannot run in a transaction, so no `SET LOCAL`: the role's `statement_timeout`
    // (200 ms on some managed databases) is lifted on this connection for the vacuum, and
    // put back after it.
    let mut result = sqlx::raw_sql("SET statement_timeout = 0").execute(&mut *conn).await.map(|_| ());
    if result.is_ok() {
        result = sqlx::query(store.inner.sql.vacuum.sql()).persistent(false).execute(&mut *conn).await.map(|_| ());
    }
    let reset = sqlx::raw_sql("RESET statement_timeout").execute(&mut *conn).await;
    let unlocked = sqlx::query("SELECT pg_advisory_unlock(hashtext($1))").bind(&key).execute(&mut *conn).await;
    let unlocked = unlocked.and(reset);
    let mut state = store.inner.vacuum.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    state.last = Some(std::time::Instant::now());
    state.folded = 0; // vacuum.sql vacuums dlq_tallies too
    if let Err(error) = unlocked {
        // A session lock outlives the statement: drop the connection so that it goes too.
        conn.discard();
        tracing::warn!(%error, "could not release the vacuum lock or reset its timeout; its connection is closed");
    }
    drop(state);
    result.map_err(db)?;
    tracing::info!(dead_tuples = health.dead_tuples, took = ?started.elapsed(), "vacuumed dlq_events");
    Ok(Maintenance::Vacuumed)
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
