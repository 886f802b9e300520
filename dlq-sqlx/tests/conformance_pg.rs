//! The store conformance suite on `PgStore`: each test on a fresh database from
//! `#[sqlx::test]` (set `DATABASE_URL`, e.g. `postgres://postgres@127.0.0.1:5432/postgres`),
//! migrated by `PgStore::from_pool` as an application's would be.

use dlq_sqlx::{PgConfig, PgStore};
use sqlx::PgPool;

dlq_core::store_conformance_tests! {
    [queue, reads, operator, fleet, privacy, singleton, capped_claims]
    #[sqlx::test(migrations = false)]
    async fn pg_store(pool: PgPool) -> PgStore {
        let config = PgConfig::default().max_payload_bytes(8 << 20);
        PgStore::from_pool(pool, config).await.expect("PgStore with migrations")
    }
}

/// The same suite with a retrier's outcomes committed durably (`PgConfig::durable_outcomes`),
/// whose statements differ from the default's.
mod durable_outcomes {
    use super::*;

    dlq_core::store_conformance_tests! {
        [queue, reads, operator, fleet, privacy, singleton, capped_claims]
        #[sqlx::test(migrations = false)]
        async fn pg_store(pool: PgPool) -> PgStore {
            let config = PgConfig::default().max_payload_bytes(8 << 20).durable_outcomes(true);
            PgStore::from_pool(pool, config).await.expect("PgStore with migrations")
        }
    }
}
