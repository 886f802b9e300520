//! The store conformance suite on `PgStore`: each test on a fresh database from
//! `#[sqlx::test]` (set `DATABASE_URL`, e.g. `postgres://postgres@127.0.0.1:5432/postgres`),
//! migrated by `PgStore::from_pool` as an application's would be.

use dlq_sqlx::{PgConfig, PgStore};
use sqlx::PgPool;

macro_rules! pg_tests {
    ($($name:ident),* $(,)?) => {$(
        #[sqlx::test(migrations = false)]
        async fn $name(pool: PgPool) {
            let store = PgStore::from_pool(pool, PgConfig::default().max_payload_bytes(8 << 20)).await.expect("PgStore with migrations");
            dlq_sqlx::conformance::$name(&store).await;
        }
    )*};
}

dlq_sqlx::conformance_suite!(pg_tests);
