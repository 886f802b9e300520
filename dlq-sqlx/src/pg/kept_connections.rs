//! Connections kept checked out between the statements of a burst.
//!
//! sqlx's pool pings a connection when it hands it out (`test_before_acquire`, on by default)
//! and always when it takes it back: two more round trips, and two more wake-ups of a
//! PostgreSQL backend, for every statement. A retrier worker writes one statement per batch
//! and then, a few milliseconds later, the next; the group-commit writer likewise. Between two
//! such statements the connection waits here instead of going back to the pool.
//!
//! - A kept connection is reused only while it is fresh: its last statement succeeded less
//!   than [`FRESH_FOR`] ago. A sweeper task hands older ones back to the pool, which tests them
//!   as usual, so an idle store holds none for more than about `1.5 × FRESH_FOR`.
//! - One that has been out of the pool for [`MAX_OUT_OF_POOL`] goes back too, so the pool's
//!   `max_lifetime` still applies.
//! - None is kept while the pool has no connection to spare (every connection in use, at its
//!   maximum): others may be waiting for one.
//! - `Pool::close` hands every kept connection back at once.
//! - A connection whose statement failed, or whose future was dropped mid-statement, is not
//!   kept: it goes back to the pool, which tests it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgRow, Postgres};
use sqlx::query::Query;

/// How long after its last statement a kept connection is reused without a test.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// How long a connection stays out of the pool, however busy.
const MAX_OUT_OF_POOL: Duration = Duration::from_secs(30);

/// A connection out of the pool and what it is kept for.
struct Kept {
    conn: PoolConnection<Postgres>,
    /// When its last statement succeeded.
    used: Instant,
    /// When it left the pool.
    out: Instant,
}

/// The kept connections of one store, oldest first.
pub(crate) struct KeptConnections {
    pool: PgPool,
    kept: Mutex<Vec<Kept>>,
}

/// A connection taken for one statement: give it back with [`KeptConnections::keep`] once the
/// statement succeeded.
pub(crate) struct TakenConnection {
    pub(crate) conn: PoolConnection<Postgres>,
    out: Instant,
}

impl KeptConnections {
    /// An empty set of kept connections from `pool`, and its sweeper task (which ends with
    /// the set, or when the pool closes). Must be called inside a tokio runtime.
    pub(crate) fn start(pool: PgPool) -> Arc<Self> {
        let connections = Arc::new(Self { pool: pool.clone(), kept: Mutex::new(Vec::new()) });
        tokio::spawn(sweep(Arc::downgrade(&connections), pool));
        connections
    }

    /// The freshest kept connection, else one from the pool (tested by the pool as usual; a new
    /// one made with `TCP_NODELAY` from the start, [`super::nodelay::acquire`]).
    pub(crate) async fn take(&self) -> Result<TakenConnection, sqlx::Error> {
        let (gone, kept) = {
            let mut kept = self.lock();
            (stale(&mut kept, Instant::now()), kept.pop())
        };
        drop(gone);
        match kept {
            Some(Kept { conn, out, .. }) => Ok(TakenConnection { conn, out }),
            None => Ok(TakenConnection { conn: super::nodelay::acquire(&self.pool).await?, out: Instant::now() }),
        }
    }

    /// Keeps `taken`, whose statement just succeeded, for the next statement; or hands it back
    /// to the pool when the pool has none to spare or it has been out for [`MAX_OUT_OF_POOL`].
    pub(crate) fn keep(&self, taken: TakenConnection) {
        let now = Instant::now();
        let spare = self.pool.num_idle() > 0 || self.pool.size() < self.pool.options().get_max_connections();
        if spare && !self.pool.is_closed() && now.duration_since(taken.out) < MAX_OUT_OF_POOL {
            self.lock().push(Kept { conn: taken.conn, used: now, out: taken.out });
        }
    }

    /// Runs one statement on a taken connection and keeps the connection if it succeeded.
    pub(crate) async fn fetch_all(&self, query: Query<'_, Postgres, PgArguments>) -> Result<Vec<PgRow>, sqlx::Error> {
        let mut taken = self.take().await?;
        let rows = query.fetch_all(&mut *taken.conn).await?;
        self.keep(taken);
        Ok(rows)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Kept>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Removes the kept connections that are no longer fresh at `now` (the oldest ones), for
/// the caller to drop outside the lock: a dropped `PoolConnection` goes back to its pool.
fn stale(kept: &mut Vec<Kept>, now: Instant) -> Vec<Kept> {
    let n = kept.iter().take_while(|k| now.duration_since(k.used) >= FRESH_FOR).count();
    kept.drain(..n).collect()
}

/// Every `FRESH_FOR / 2`, hands the stale kept connections back; when the pool closes, all of them.
async fn sweep(connections: Weak<KeptConnections>, pool: PgPool) {
    let closed = pool.close_event();
    drop(pool);
    let mut closed = std::pin::pin!(closed);
    loop {
        let closing = tokio::select! {
            () = &mut closed => true,
            () = tokio::time::sleep(FRESH_FOR / 2) => false,
        };
        let Some(connections) = connections.upgrade() else { return };
        let gone = if closing {
            std::mem::take(&mut *connections.lock())
        } else {
            stale(&mut connections.lock(), Instant::now())
        };
        drop(gone);
        if closing {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

    async fn backend(taken: &mut TakenConnection) -> i32 {
        sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *taken.conn).await.unwrap()
    }

    #[sqlx::test]
    async fn a_fresh_connection_is_reused_and_a_stale_one_goes_back_to_the_pool(pool: PgPool) {
        let connections = KeptConnections::start(pool.clone());
        let mut first = connections.take().await.unwrap();
        let pid = backend(&mut first).await;
        connections.keep(first);
        assert_eq!(pool.num_idle(), 0, "kept out of the pool");
        let mut again = connections.take().await.unwrap();
        assert_eq!(backend(&mut again).await, pid, "the kept connection is taken again");
        connections.keep(again);
        // The sweeper hands it back once it is no longer fresh (sqlx returns a connection to
        // its pool from a task of its own: poll for it, on a loaded machine too).
        tokio::time::sleep(FRESH_FOR * 2).await;
        let start = std::time::Instant::now();
        while !(connections.lock().is_empty() && pool.num_idle() == 1) && start.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(connections.lock().is_empty());
        assert_eq!(pool.num_idle(), 1);
    }

    #[sqlx::test]
    async fn none_is_kept_when_the_pool_has_none_to_spare(_: PgPoolOptions, options: PgConnectOptions) {
        let pool = PgPoolOptions::new().max_connections(1).connect_with(options).await.unwrap();
        let connections = KeptConnections::start(pool.clone());
        let mut only = connections.take().await.unwrap();
        backend(&mut only).await;
        connections.keep(only);
        assert!(connections.lock().is_empty(), "the pool's only connection goes back");
        let conn = tokio::time::timeout(Duration::from_secs(5), pool.acquire()).await;
        assert!(matches!(conn, Ok(Ok(_))), "another caller gets it at once");
    }

    #[sqlx::test]
    async fn closing_the_pool_hands_the_kept_connections_back_at_once(pool: PgPool) {
        let connections = KeptConnections::start(pool.clone());
        let mut conn = connections.take().await.unwrap();
        backend(&mut conn).await;
        connections.keep(conn);
        // Without the close event, the close would wait for the sweeper (FRESH_FOR or more).
        let closed = tokio::time::timeout(FRESH_FOR * 9 / 10, pool.close()).await;
        assert!(closed.is_ok(), "Pool::close waited for a kept connection");
        assert!(connections.lock().is_empty());
    }

    #[sqlx::test]
    async fn a_connection_out_of_the_pool_too_long_goes_back(pool: PgPool) {
        let connections = KeptConnections::start(pool.clone());
        let mut conn = connections.take().await.unwrap();
        backend(&mut conn).await;
        conn.out -= MAX_OUT_OF_POOL;
        connections.keep(conn);
        assert!(connections.lock().is_empty());
    }
}
