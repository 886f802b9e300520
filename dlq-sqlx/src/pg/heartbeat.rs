//! The `dlq_retriers` table: one heartbeat row per running retrier, and the advisory lock of
//! singleton mode.

use std::time::Duration;

use dlq_core::admin::RetrierHeartbeat;
use dlq_core::store::{BoxFuture, SingletonLock, StoreResult};
use sqlx::postgres::{PgAdvisoryLock, PgAdvisoryLockGuard, PgConnection};
use sqlx::{Connection, Either, Row};

use super::{PgStore, micros};

impl PgStore {
    /// Inserts or refreshes the heartbeat row of `beat.owner`; removes stale rows.
    pub(crate) async fn beat(&self, beat: &RetrierHeartbeat, expire_after: Duration) -> StoreResult<()> {
        sqlx::query(self.inner.sql.heartbeat.sql())
            .bind(&beat.owner)
            .bind(&beat.host)
            .bind(beat.pid)
            .bind(&beat.event_types)
            .bind(beat.singleton)
            .bind(micros(expire_after))
            .bind(super::RELEASE_FIRST_MIGRATION)
            .execute(&self.inner.pool)
            .await
            .map(drop)
            .map_err(dlq_core::Error::store)
    }

    /// Removes the heartbeat row of `owner`.
    pub(crate) async fn forget(&self, owner: &str) -> StoreResult<()> {
        sqlx::query(self.inner.sql.heartbeat_remove.sql())
            .bind(owner)
            .execute(&self.inner.pool)
            .await
            .map(drop)
            .map_err(dlq_core::Error::store)
    }

    /// The heartbeat rows of the retriers sharing this store, oldest first.
    pub(crate) async fn heartbeats(&self) -> StoreResult<Vec<RetrierHeartbeat>> {
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

    /// Tries the schema's advisory lock on a connection of its own (to the session URL behind
    /// a transaction pooler): held as long as that connection lives, released by the server if
    /// the process dies.
    pub(crate) async fn lock_singleton(&self) -> StoreResult<Option<Box<dyn SingletonLock>>> {
        let lock = PgAdvisoryLock::new(format!("dlq-retrier:{}", self.inner.config.schema));
        let options = self.inner.session.options(&self.inner.pool);
        let conn = super::nodelay::connect(&options).await.map_err(dlq_core::Error::store)?;
        match lock.try_acquire(conn).await.map_err(dlq_core::Error::store)? {
            Either::Left(guard) => Ok(Some(Box::new(AdvisoryLock(guard)))),
            Either::Right(conn) => {
                drop(conn.close().await);
                Ok(None)
            }
        }
    }
}

/// A held advisory lock and its connection.
struct AdvisoryLock(PgAdvisoryLockGuard<PgConnection>);

impl SingletonLock for AdvisoryLock {
    fn still_held(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let conn: &mut PgConnection = self.0.as_mut();
            sqlx::query("SELECT 1").execute(conn).await.is_ok()
        })
    }

    fn release(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            match self.0.release_now().await {
                Ok(conn) => drop(conn.close().await),
                Err(error) => tracing::debug!(%error, "lock connection closed; the server released the lock"),
            }
        })
    }
}
