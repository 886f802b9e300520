//! The `dlq_retriers` table on SQLite: one heartbeat row per running retrier.

use std::time::Duration;

use dlq_core::admin::RetrierHeartbeat;
use dlq_core::store::StoreResult;
use sqlx::Row;
use sqlx::sqlite::SqlitePool;

use super::codec::{self, sql};
use super::write::begin;

const EXPIRE: &str = include_str!("sql/heartbeat_expire.sql");
const UPSERT: &str = include_str!("sql/heartbeat.sql");
const REMOVE: &str = include_str!("sql/heartbeat_remove.sql");
const ALL: &str = include_str!("sql/retriers.sql");

/// Inserts or refreshes `beat`'s row and removes the rows not refreshed for `expire_after`.
pub(super) async fn beat(pool: &SqlitePool, beat: &RetrierHeartbeat, expire_after: Duration) -> StoreResult<()> {
    let at = codec::now_micros();
    let mut tx = begin(pool).await?;
    sqlx::query(EXPIRE)
        .bind(&beat.owner)
        .bind(codec::earlier(at, expire_after))
        .execute(&mut *tx)
        .await
        .map_err(sql)?;
    sqlx::query(UPSERT)
        .bind(&beat.owner)
        .bind(&beat.host)
        .bind(beat.pid)
        .bind(codec::json_list(&beat.event_types))
        .bind(beat.singleton)
        .bind(at)
        .execute(&mut *tx)
        .await
        .map_err(sql)?;
    tx.commit().await.map_err(sql)
}

pub(super) async fn remove(pool: &SqlitePool, owner: &str) -> StoreResult<()> {
    sqlx::query(REMOVE).bind(owner).execute(pool).await.map(drop).map_err(sql)
}

pub(super) async fn all(pool: &SqlitePool) -> StoreResult<Vec<RetrierHeartbeat>> {
    let rows = sqlx::query(ALL).fetch_all(pool).await.map_err(sql)?;
    rows.iter()
        .map(|r| {
            let types: String = r.try_get("event_types").map_err(sql)?;
            Ok(RetrierHeartbeat {
                owner: r.try_get("owner").map_err(sql)?,
                host: r.try_get("host").map_err(sql)?,
                pid: r.try_get("pid").map_err(sql)?,
                event_types: serde_json::from_str(&types).map_err(dlq_core::Error::Serialize)?,
                singleton: r.try_get("singleton").map_err(sql)?,
                started_at: codec::time(r.try_get("started_at").map_err(sql)?)?,
                last_seen: codec::time(r.try_get("last_seen").map_err(sql)?)?,
            })
        })
        .collect()
}
