//! Helpers shared by the PostgreSQL tests of this directory (`mod support;` in each).

#![allow(dead_code, reason = "each test file uses a different subset")]
#![allow(unreachable_pub, reason = "test helpers")]

use std::time::Duration;

use sqlx::PgPool;

/// The capped claims the store records (`dlq_starts`, which forgets those past the rate's
/// window), copied as they are written.
pub struct ClaimLog;

impl ClaimLog {
    pub async fn start(pool: &PgPool) -> Self {
        sqlx::raw_sql(
            "CREATE TABLE claims_seen (at TIMESTAMPTZ NOT NULL, n INT NOT NULL);
             CREATE FUNCTION see_claim() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO claims_seen VALUES (NEW.at, NEW.n); RETURN NULL; END $$;
             CREATE TRIGGER see_claim AFTER INSERT ON dlq_starts FOR EACH ROW EXECUTE FUNCTION see_claim();",
        )
        .execute(pool)
        .await
        .unwrap();
        Self
    }

    /// Rows claimed in all, and the most claimed within any one second.
    pub async fn read(self, pool: &PgPool) -> (i64, i64) {
        sqlx::query_as(
            "SELECT coalesce(sum(n), 0)::int8,
                    coalesce(max((SELECT sum(b.n) FROM claims_seen b
                                  WHERE b.at >= a.at AND b.at < a.at + interval '1 second')), 0)::int8
             FROM claims_seen a",
        )
        .fetch_one(pool)
        .await
        .unwrap()
    }
}

/// Polls `check` until it holds; fails only if it never does within a minute, far past what
/// a loaded machine needs.
pub async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
