//! The `dlq_retriers` table: one heartbeat row per running retrier.

use chrono::{DateTime, Utc};
use dlq_core::StoreResult;
use sqlx::Row;

use super::PgStore;

/// A running (or crashed: see `last_seen`) retrier, from its heartbeat row.
///
/// ```no_run
/// # async fn demo(store: dlq_sqlx::PgStore) -> Result<(), dlq_core::Error> {
/// for r in store.retriers().await? {
///     println!("{} on {} (pid {}), last seen {}", r.owner, r.host, r.pid, r.last_seen);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetrierHeartbeat {
    /// The retrier's owner name, also its `lease_owner`.
    pub owner: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: i32,
    /// The event types it handles.
    pub event_types: Vec<String>,
    /// Whether it runs in singleton mode (then at most one of them claims at a time).
    pub singleton: bool,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it last refreshed the row; an old value means the retrier died.
    pub last_seen: DateTime<Utc>,
}

impl PgStore {
    /// Inserts or refreshes the heartbeat row of `beat.owner`.
    pub(crate) async fn beat(&self, beat: &RetrierHeartbeat) -> Result<(), sqlx::Error> {
        sqlx::query(self.inner.sql.heartbeat.sql())
            .bind(&beat.owner)
            .bind(&beat.host)
            .bind(beat.pid)
            .bind(&beat.event_types)
            .bind(beat.singleton)
            .execute(&self.inner.pool)
            .await
            .map(drop)
    }

    /// Removes the heartbeat row of `owner`.
    pub(crate) async fn forget(&self, owner: &str) -> Result<(), sqlx::Error> {
        sqlx::query(self.inner.sql.heartbeat_remove.sql()).bind(owner).execute(&self.inner.pool).await.map(drop)
    }

    /// The heartbeat rows of the retriers sharing this store, oldest first.
    ///
    /// # Errors
    /// The database error.
    pub async fn retriers(&self) -> StoreResult<Vec<RetrierHeartbeat>> {
        let rows = sqlx::query(self.inner.sql.retriers.sql())
            .fetch_all(&self.inner.pool)
            .await
            .map_err(dlq_core::Error::store)?;
        let decode = |r: &sqlx::postgres::PgRow| -> Result<RetrierHeartbeat, sqlx::Error> {
            Ok(RetrierHeartbeat {
                owner: r.try_get("owner")?,
                host: r.try_get("host")?,
                pid: r.try_get("pid")?,
                event_types: r.try_get("event_types")?,
                singleton: r.try_get("singleton")?,
                started_at: r.try_get("started_at")?,
                last_seen: r.try_get("last_seen")?,
            })
        };
        rows.iter().map(decode).collect::<Result<_, _>>().map_err(dlq_core::Error::store)
    }
}
