//! The model and the code agree on `PgStore`: paths the checker visits are followed through
//! PostgreSQL at `$DATABASE_URL` (or `postgres://postgres@127.0.0.1:5432/postgres`; the test
//! fails, not skips, when none answers), in a schema of this test's own, emptied before each
//! path and dropped at the end, a fresh store each path (a store remembers where its claims
//! stand). The store's rows, cursor and answers are compared with the model's after each step
//! (`follow`). Its clock is the database's: its configurations expire no lease. 40 paths of each
//! configuration, spread over all of them.

mod follow;

use dlq_model::{Operation, Protocol};
use dlq_sqlx::{PgConfig, PgStore};
use follow::{agree, wall_clock};

fn url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// This process's schema.
fn schema() -> String {
    format!("dlq_model_{}", std::process::id())
}

/// The tables a path writes.
const TABLES: &str = "dlq_events, dlq_attempts, dlq_audit, dlq_operations, dlq_erasures, dlq_tallies, dlq_parked_hours";

async fn store() -> PgStore {
    let config = PgConfig::default().schema(schema()).run_migrations(false);
    let store = PgStore::connect_with(&url(), config).await.expect("PostgreSQL at DATABASE_URL");
    let truncate =
        format!("TRUNCATE {}", TABLES.split(", ").map(|t| format!("{}.{t}", schema())).collect::<Vec<_>>().join(", "));
    // The schema's name is this test's own, digits and letters: safe to write into SQL.
    sqlx::query(sqlx::AssertSqlSafe(truncate)).execute(store.pool()).await.expect("emptied");
    store
}

/// Every configuration in one test: one schema, migrated once.
#[tokio::test]
async fn the_pg_store_follows_the_model() {
    let setup = PgStore::connect_with(&url(), PgConfig::default().schema(schema()))
        .await
        .expect("PostgreSQL at DATABASE_URL (set it, or start one at 127.0.0.1:5432)");
    let configurations = [
        ("retries", wall_clock(Protocol { events: 1, ..Protocol::retries() })),
        ("two consumers", wall_clock(Protocol::two_consumers())),
        ("redrive", wall_clock(Protocol::operators(Operation::Redrive))),
        ("discard", wall_clock(Protocol::operators(Operation::Discard))),
        ("patch", wall_clock(Protocol::operators(Operation::Patch))),
    ];
    let result = tokio::spawn(async move {
        for (name, protocol) in configurations {
            agree(name, protocol, false, 40, store).await;
        }
    })
    .await;
    let drop = format!("DROP SCHEMA {} CASCADE", schema());
    sqlx::query(sqlx::AssertSqlSafe(drop)).execute(setup.pool()).await.expect("dropped");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic.into_panic());
    }
}
