//! `PgStore` on a database set up as managed ones are: a role that is no superuser and owns
//! only its schema, with production-like `statement_timeout`, `lock_timeout` and
//! `idle_in_transaction_session_timeout`, and fewer connections than the pool asks for. Also
//! the conformance suite on a store connected as such a role. Run with
//! `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres` (trust auth). TLS required
//! (`sslmode=require`) is the `dlq` binary's test (dlq-cli/tests/roles.rs), built with TLS.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod pg_support;

use std::time::Duration;

use dlq_core::store::prelude::*;
use dlq_sqlx::{PgConfig, PgStore};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use pg_support::{claim, letter};

const SCHEMA: &str = "dq";

/// A login role that owns only the schema `dq` of the test's database, named after the
/// database and dropped by [`Owner::drop`] (roles are cluster-wide).
struct Owner {
    admin: PgPool,
    name: String,
}

impl Owner {
    async fn new(admin: &PgPool, settings: &str) -> Self {
        let db: String = sqlx::query_scalar("SELECT current_database()::text").fetch_one(admin).await.unwrap();
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&db, &mut hasher);
        let name = format!("m{:016x}", std::hash::Hasher::finish(&hasher));
        // A role of the same name was left by an earlier run of this test that failed.
        let create = format!(
            "DROP ROLE IF EXISTS {name}; CREATE ROLE {name} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE; CREATE SCHEMA {SCHEMA} AUTHORIZATION {name}; \
             {settings}"
        )
        .replace("{role}", &name);
        sqlx::raw_sql(sqlx::AssertSqlSafe(create)).execute(admin).await.unwrap();
        Self { admin: admin.clone(), name }
    }

    fn options(&self) -> PgConnectOptions {
        (*self.admin.connect_options()).clone().username(&self.name)
    }

    async fn drop(self) {
        let drop = format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; DROP OWNED BY {0}; DROP ROLE {0}", self.name);
        sqlx::raw_sql(sqlx::AssertSqlSafe(drop)).execute(&self.admin).await.unwrap();
    }
}

/// `statement_timeout = 1ms` on the role: every statement of a migration takes longer, and
/// the migrations still apply (lifted on the migration's own connection). Then the store keeps
/// working under production-like limits over TLS.
#[sqlx::test(migrations = false)]
async fn migrations_outlast_the_roles_statement_timeout(admin: PgPool) {
    let owner = Owner::new(&admin, "ALTER ROLE {role} SET statement_timeout = '1ms'").await;
    let pool = PgPoolOptions::new().max_connections(2).connect_lazy_with(owner.options());
    let timeout: String = sqlx::query_scalar("SHOW statement_timeout").fetch_one(&pool).await.unwrap();
    assert_eq!(timeout, "1ms", "the role's setting applies");
    dlq_sqlx::postgres::migrate(&pool, SCHEMA).await.expect("migrations under a 1 ms statement_timeout");
    pool.close().await;
    owner.drop().await;
}

/// Production-like limits on the role (`statement_timeout` 200 ms, `lock_timeout` 100 ms,
/// `idle_in_transaction_session_timeout` 100 ms): parking, claiming, settling, the upkeep and
/// a purge all work. A purge slice slower than the statement timeout (a statement-level
/// trigger that sleeps 300 ms stands for a cold cache on a large table) completes rather than
/// being cancelled.
#[sqlx::test(migrations = false)]
async fn production_limits(admin: PgPool) {
    let owner = Owner::new(
        &admin,
        "ALTER ROLE {role} SET statement_timeout = '200ms'; ALTER ROLE {role} SET lock_timeout = '100ms'; \
         ALTER ROLE {role} SET idle_in_transaction_session_timeout = '100ms'",
    )
    .await;
    let pool = PgPoolOptions::new().max_connections(4).connect_lazy_with(owner.options());
    let store = PgStore::from_pool(pool, PgConfig::default().schema(SCHEMA)).await.expect("migrated");
    let mut ids = Vec::new();
    for n in 0..20 {
        ids.push(store.park(letter("payment", n)).await.expect("park").id);
    }
    let claimed = claim(&store, &["payment"], 20).await;
    let outcomes = claimed.iter().map(|c| dlq_core::store::Settlement::Succeeded { lease: c.lease }).collect();
    store.settle(outcomes).await.expect("settle");
    store.maintain().await.expect("upkeep");

    // A slow slice: the trigger runs inside the purge's statement.
    sqlx::raw_sql(
        "CREATE FUNCTION dq.slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.3); RETURN NULL; END $$; \
         CREATE TRIGGER slow AFTER DELETE ON dq.dlq_events FOR EACH STATEMENT EXECUTE FUNCTION dq.slow()",
    )
    .execute(&admin)
    .await
    .unwrap();
    assert_eq!(store.purge(Duration::ZERO).await.expect("a purge slice slower than statement_timeout"), 20);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM dq.dlq_events").fetch_one(&admin).await.unwrap();
    assert_eq!(left, 0);
    store.pool().close().await;
    owner.drop().await;
}

/// The retrier's vacuum with `statement_timeout` 200 ms on the role: it waits longer than
/// that for its lock (held by another session until the vacuum has waited 300 ms, as a long
/// transaction would), and still vacuums rather than being cancelled.
#[sqlx::test(migrations = false)]
async fn a_vacuum_outlasts_the_roles_statement_timeout(admin: PgPool) {
    let owner = Owner::new(&admin, "ALTER ROLE {role} SET statement_timeout = '200ms'").await;
    let pool = PgPoolOptions::new().max_connections(4).connect_lazy_with(owner.options());
    let config = PgConfig::default().schema(SCHEMA).vacuum_dead_tuples(Some(1));
    let store = PgStore::from_pool(pool, config).await.expect("migrated");
    for n in 0..10 {
        store.park(letter("payment", n)).await.unwrap();
    }
    // Dead tuples, counted in pg_stat_user_tables once this session's statistics are flushed.
    let mut other = admin.acquire().await.unwrap();
    sqlx::query("DELETE FROM dq.dlq_events").execute(&mut *other).await.unwrap();
    sqlx::query("SELECT pg_stat_force_next_flush()").execute(&mut *other).await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *other).await.unwrap();
    let dead = "SELECT coalesce(sum(n_dead_tup), 0)::int8 FROM pg_stat_user_tables WHERE schemaname = 'dq' AND relname = 'dlq_events'";
    let started = std::time::Instant::now();
    while sqlx::query_scalar::<_, i64>(dead).fetch_one(&admin).await.unwrap() == 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "the dead tuples are never counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut blocker = admin.begin().await.unwrap();
    sqlx::query("LOCK TABLE dq.dlq_events IN SHARE UPDATE EXCLUSIVE MODE").execute(&mut *blocker).await.unwrap();
    let maintain = tokio::spawn({
        let store = store.clone();
        async move { store.maintain().await }
    });
    let waited = "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE usename = $1 AND query LIKE '%VACUUM (ANALYZE)%' \
                  AND wait_event_type = 'Lock' AND now() - query_start > interval '300 ms')";
    let started = std::time::Instant::now();
    while !sqlx::query_scalar::<_, bool>(waited).bind(&owner.name).fetch_one(&admin).await.unwrap() {
        assert!(!maintain.is_finished(), "the vacuum ended before its lock was free: {:?}", maintain.await);
        assert!(started.elapsed() < Duration::from_secs(30), "no vacuum waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    blocker.commit().await.unwrap();
    let done = maintain.await.unwrap().expect("the vacuum, longer than statement_timeout");
    assert_eq!(done, dlq_core::store::Maintenance::Vacuumed);
    let timeout: String = sqlx::query_scalar("SHOW statement_timeout").fetch_one(store.pool()).await.unwrap();
    assert_eq!(timeout, "200ms", "the connection's timeout is the role's again");
    drop(other);
    store.pool().close().await;
    owner.drop().await;
}

/// A pool of 10 on a role allowed 3 connections (`CONNECTION LIMIT 3`, as a small
/// `max_connections` would): concurrent parks and reads either succeed or fail with a clear
/// error within the park timeout, never hang, and every park that succeeded is stored.
#[sqlx::test(migrations = false)]
async fn a_pool_larger_than_the_server_allows(admin: PgPool) {
    let owner = Owner::new(&admin, "ALTER ROLE {role} CONNECTION LIMIT 3").await;
    let options = owner.options();
    let pool = PgPoolOptions::new().max_connections(10).acquire_timeout(Duration::from_secs(2));
    let config = PgConfig::default().schema(SCHEMA).park_timeout(Duration::from_secs(2));
    let store = PgStore::from_pool(pool.connect_lazy_with(options), config).await.expect("migrated");
    let tasks: Vec<_> = (0..40)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                let parked = store.park(letter("payment", n)).await;
                let read = store.list(dlq_core::ListFilter::default().limit(5)).await;
                (parked, read)
            })
        })
        .collect();
    let mut stored = Vec::new();
    let mut errors = Vec::new();
    for task in tasks {
        let (parked, read) = tokio::time::timeout(Duration::from_secs(60), task).await.expect("no hang").unwrap();
        match parked {
            Ok(parked) => stored.push(parked.id),
            Err(err) => errors.push(dlq_core::admin::one_line(&err)),
        }
        if let Err(err) = read {
            errors.push(dlq_core::admin::one_line(&err));
        }
    }
    for error in &errors {
        let clear = error.contains("too many connections")
            || error.contains("did not answer within")
            || error.contains("timed out");
        assert!(clear && !error.contains('\n'), "a clear one-line error: {error}");
    }
    let ids: Vec<i64> = stored.clone();
    let found: i64 = sqlx::query_scalar("SELECT count(*) FROM dq.dlq_events WHERE id = ANY($1)")
        .bind(&ids)
        .fetch_one(&admin)
        .await
        .unwrap();
    assert_eq!(found, i64::try_from(ids.len()).unwrap(), "every park that succeeded is stored");
    assert!(!stored.is_empty(), "three connections are enough to park");
    println!("{} parks stored, {} errors: {:?}", stored.len(), errors.len(), errors.first());
    store.pool().close().await;
    owner.drop().await;
}

/// The conformance suite on a store whose role is no superuser and owns only its schema,
/// migrated by it. One role serves every test of the suite (each test has its own database
/// and schema); it is created once and kept.
mod as_schema_owner {
    use super::*;

    const OWNER: &str = "dlq_conformance_owner";

    dlq_core::store_conformance_tests! {
        [queue, reads, operator, fleet, privacy, singleton, capped_claims]
        #[sqlx::test(migrations = false)]
        async fn pg_store(admin: PgPool) -> PgStore {
            // Concurrent tests race to create it: whichever loses finds it made.
            let create = format!(
                "DO $$ BEGIN CREATE ROLE {OWNER} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE; \
                 EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$; \
                 CREATE SCHEMA {SCHEMA} AUTHORIZATION {OWNER}"
            );
            sqlx::raw_sql(sqlx::AssertSqlSafe(create)).execute(&admin).await.unwrap();
            let options = (*admin.connect_options()).clone().username(OWNER);
            let pool = PgPoolOptions::new().max_connections(10).connect_lazy_with(options);
            let config = PgConfig::default().schema(SCHEMA).max_payload_bytes(8 << 20);
            PgStore::from_pool(pool, config).await.expect("migrated by the schema's owner")
        }
    }
}
