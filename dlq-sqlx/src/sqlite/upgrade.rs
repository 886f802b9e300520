//! A row's payload rewritten in a newer version of its event's contract
//! ([`OperatorStore::upgrade`](dlq_core::store::OperatorStore::upgrade)): checked and written with
//! its audit entry in one `BEGIN IMMEDIATE` transaction.

use dlq_core::store::{StoreResult, VersionUpgrade};
use dlq_core::{Error, Status};
use sqlx::sqlite::SqlitePool;

use super::admin::{SELECT_ONE, insert_audit};
use super::codec::{self, PayloadColumns, sql};
use super::write::begin;

const UPGRADE_ROW: &str = include_str!("sql/upgrade_write.sql");

pub(super) async fn upgrade(pool: &SqlitePool, upgrade: VersionUpgrade) -> StoreResult<i64> {
    let id = upgrade.id;
    upgrade.payload.check_fits(dlq_core::store::DEFAULT_MAX_PAYLOAD_BYTES)?;
    let at = codec::now_micros();
    let mut tx = begin(pool).await?;
    let row = sqlx::query(SELECT_ONE.sql()).bind(id).fetch_optional(&mut *tx).await.map_err(sql)?;
    let old = row.as_ref().map(codec::letter).transpose()?.ok_or(Error::NotFound(id))?;
    if old.status == Status::Processing {
        return Err(Error::InvalidState {
            id,
            status: old.status,
            action: "upgrade",
            needs: "any status but PROCESSING",
        });
    }
    if old.version != upgrade.from {
        return Err(Error::VersionChanged { id, expected: upgrade.from, found: old.version });
    }
    PayloadColumns::new(&upgrade.payload)?
        .bind(sqlx::query(UPGRADE_ROW).bind(id))
        .bind(i64::from(upgrade.to))
        .execute(&mut *tx)
        .await
        .map_err(sql)?;
    let diff = upgrade.diff(&old.payload);
    let entry = insert_audit(&mut tx, id, "upgrade", &upgrade.note, &diff, at).await?;
    tx.commit().await.map_err(sql)?;
    Ok(entry)
}
