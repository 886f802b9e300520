//! The machine's limit beside each table: the scenario's rows written with raw SQL's
//! `INSERT … unnest` (1,000 a statement) into an `UNLOGGED` copy of dlq's table with no index,
//! no constraint and no trigger (`LIKE dlq_events INCLUDING DEFAULTS`): the heap and the
//! JSONB parse, without the WAL, the B-trees or the tallies. A drain writes each row once
//! (its last state), fail-once twice (the failed attempt, then the success), so the limit
//! inserts the rows once or twice. The WAL's own limit, flushes a second, is
//! `pg_test_fsync`'s (docs/BENCHMARKS.md).

use std::time::{Duration, Instant};

use crate::Scenario;
use crate::common::{Bench, Result};

pub(crate) const LABEL: &str = "limit: the same rows into an unlogged, unindexed copy of the table";

pub(crate) async fn run(scenario: Scenario, bench: &Bench) -> Result<Option<Duration>> {
    let (_, pool) = bench.fresh_pool("limit").await?;
    dlq_sqlx::postgres::migrate(&pool, "public").await?;
    sqlx::raw_sql("CREATE UNLOGGED TABLE dlq_events_bare (LIKE dlq_events INCLUDING DEFAULTS)").execute(&pool).await?;
    let writes = if scenario == Scenario::FailOnce { 2 } else { 1 };
    let start = Instant::now();
    for _ in 0..writes {
        crate::raw::fill_into(&pool, "dlq_events_bare", bench.rows).await?;
    }
    let took = start.elapsed();
    pool.close().await;
    Ok(Some(took))
}
