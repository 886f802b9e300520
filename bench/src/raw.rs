//! The baseline: hand-written SQL doing dlq's transitions on dlq's own table, from 4 tasks
//! (a connection each), claiming 50 with `FOR UPDATE SKIP LOCKED` (index walk pinned) and
//! settling by id array. No library in between; every statement commits durably.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sqlx::PgPool;

use crate::Scenario;
use crate::common::{Bench, CHUNK, Result, payload, until_done};

const INSERT: &str = "
INSERT INTO {table} (event_type, payload, error_class, error_kind, error_reason, error_chain, fingerprint,
    status, max_retries, retry_after)
SELECT 'bench', p, 'transient', 'io::Error', 'downstream 503', '[\"downstream 503\"]', '0123456789abcdef',
    'PENDING', 5, now()
FROM unnest($1::jsonb[]) AS p";

/// The jobs' one type's due rows, in the order of dlq's due index `(event_type, retry_after, id)`.
const CLAIM: &str = "
WITH due AS (
    SELECT id FROM dlq_events WHERE event_type = 'bench' AND status = 'PENDING' AND retry_after <= now()
    ORDER BY retry_after, id LIMIT 50 FOR UPDATE SKIP LOCKED
)
UPDATE dlq_events e SET status = 'PROCESSING', lease_until = now() + interval '5 minutes',
    lease_token = gen_random_uuid(), updated_at = now()
FROM due WHERE e.id = due.id RETURNING e.id, e.retry_count, e.payload";

const COMPLETE: &str = "
UPDATE dlq_events SET status = 'SUCCEEDED', lease_token = NULL, lease_until = NULL, updated_at = now()
WHERE id = ANY($1)";

const RETRY: &str = "
UPDATE dlq_events SET status = 'PENDING', retry_count = retry_count + 1, retry_after = now(),
    error_reason = 'downstream 503 (first attempt)', lease_token = NULL, lease_until = NULL, updated_at = now()
WHERE id = ANY($1)";

/// Whether every job is done (raw SQL and dlq): nothing left in the partial indexes of due and
/// leased rows. Polled every 20 ms while the workers run, so it must stay cheap: the same test as
/// one `status IN (…)` scan read the whole table on every poll (5 ms at 20,000 rows, the
/// planner having no statistics), CPU the workers then lacked.
pub(crate) const DONE: &str = "SELECT NOT EXISTS (SELECT 1 FROM dlq_events WHERE status = 'PENDING')
    AND NOT EXISTS (SELECT 1 FROM dlq_events WHERE status = 'PROCESSING')";

pub(crate) async fn run(scenario: Scenario, bench: &Bench) -> Result<Option<Duration>> {
    let (_, pool) = bench.fresh_pool("raw").await?;
    dlq_sqlx::postgres::migrate(&pool, "public").await?;
    let start = Instant::now();
    fill(&pool, bench.rows).await?;
    let took = match scenario {
        Scenario::Enqueue => start.elapsed(),
        Scenario::Drain => drain(&pool, false).await?,
        Scenario::FailOnce => drain(&pool, true).await?,
    };
    pool.close().await;
    Ok(Some(took))
}

async fn fill(pool: &PgPool, rows: usize) -> Result<()> {
    fill_into(pool, "dlq_events", rows).await
}

/// Inserts `rows` jobs into `table` (dlq's or a copy of it), `CHUNK` a statement.
pub(crate) async fn fill_into(pool: &PgPool, table: &str, rows: usize) -> Result<()> {
    let insert = INSERT.replace("{table}", table);
    for chunk in (0..rows).collect::<Vec<_>>().chunks(CHUNK) {
        let payloads: Vec<serde_json::Value> = chunk.iter().map(|&n| payload(n)).collect();
        sqlx::query(sqlx::AssertSqlSafe(insert.clone())).bind(payloads).execute(pool).await?;
    }
    Ok(())
}

/// 4 tasks claiming and settling until the poll sees every row done. With `fail_once`, a
/// row's first attempt is written back as a retry due at once.
async fn drain(pool: &PgPool, fail_once: bool) -> Result<Duration> {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (pool, stop) = (pool.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                // The plan the claim has once the table has statistics (the ordered walk of the
                // partial index), pinned: on a burst the planner alone would read and sort every
                // due row for each claim, and the baseline would measure that instead.
                let mut conn = pool.acquire().await?.detach();
                sqlx::raw_sql("SET enable_bitmapscan = off; SET enable_sort = off").execute(&mut conn).await?;
                while !stop.load(Ordering::Relaxed) {
                    let rows: Vec<(i64, i32, Option<serde_json::Value>)> =
                        sqlx::query_as(CLAIM).fetch_all(&mut conn).await?;
                    if rows.is_empty() {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    }
                    let (first, again): (Vec<_>, Vec<_>) = rows.iter().partition(|r| fail_once && r.1 == 0);
                    if !first.is_empty() {
                        let ids: Vec<i64> = first.iter().map(|r| r.0).collect();
                        sqlx::query(RETRY).bind(ids).execute(&mut conn).await?;
                    }
                    if !again.is_empty() {
                        let ids: Vec<i64> = again.iter().map(|r| r.0).collect();
                        sqlx::query(COMPLETE).bind(ids).execute(&mut conn).await?;
                    }
                }
                Ok::<_, sqlx::Error>(())
            })
        })
        .collect();
    let took = until_done(pool, DONE, start).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await??;
    }
    took
}
