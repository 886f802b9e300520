//! A row's payload rewritten in a newer version of its event's contract
//! ([`OperatorStore::upgrade`](dlq_core::store::OperatorStore::upgrade)): locked, checked, written
//! with its audit entry in one transaction.

use dlq_core::store::{StoreResult, VersionUpgrade};
use dlq_core::{Payload, Status};
use sqlx::Row;

use super::admin::actor;
use super::{PgStore, park, row};

fn db(err: impl std::error::Error + Send + Sync + 'static) -> dlq_core::Error {
    dlq_core::Error::store(err)
}

pub(crate) async fn upgrade(store: &PgStore, upgrade: VersionUpgrade) -> StoreResult<i64> {
    let inner = &store.inner;
    let upgrade = VersionUpgrade { payload: park::jsonb_storable(upgrade.payload), ..upgrade };
    let id = upgrade.id;
    upgrade.payload.check_fits(inner.config.max_payload_bytes)?;
    let mut tx = inner.pool.begin().await.map_err(db)?;
    let locked = sqlx::query(inner.sql.upgrade_lock.sql()).bind(id).fetch_optional(&mut *tx).await.map_err(db)?;
    let Some(current) = locked else { return Err(dlq_core::Error::NotFound(id)) };
    let status: Status = current.try_get::<String, _>("status").map_err(db)?.parse()?;
    if status == Status::Processing {
        let needs = "any status but PROCESSING";
        return Err(dlq_core::Error::InvalidState { id, status, action: "upgrade", needs });
    }
    let found = u32::try_from(current.try_get::<i32, _>("version").map_err(db)?).map_err(db)?;
    if found != upgrade.from {
        return Err(dlq_core::Error::VersionChanged { id, expected: upgrade.from, found });
    }
    let diff = upgrade.diff(&row::payload(&current)?);
    let (json, raw) = match upgrade.payload {
        Payload::Json(value) => (Some(value), None),
        Payload::Raw { bytes, .. } => (None, Some(bytes)),
    };
    let to = i32::try_from(upgrade.to).map_err(db)?;
    let entry: i64 = sqlx::query_scalar(inner.sql.upgrade_write.sql())
        .bind(id)
        .bind(json)
        .bind(raw)
        .bind(to)
        .bind(actor(&upgrade.note.actor))
        .bind(diff)
        .bind(upgrade.note.reason.as_deref().map(actor))
        .fetch_one(&mut *tx)
        .await
        .map_err(db)?;
    tx.commit().await.map_err(db)?;
    Ok(entry)
}
