//! Retention and `max_entries` on PostgreSQL: purge by age, the `reject`, `drop_oldest` and
//! `block` overflow policies, and the saturation gauge.

mod pg_support;

use std::time::Duration;

use dlq_core::store::{Maintenance, Settlement};
use dlq_core::{ListFilter, Status, adapter::DeadReason, store::prelude::*};
use dlq_sqlx::postgres::{Overflow, PgConfig};
use pg_support::*;
use sqlx::PgPool;

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn reject_refuses_parks_past_max_entries(pool: PgPool) {
    let store = store_with(&pool, PgConfig::default().max_entries(3, Overflow::Reject)).await;
    assert_eq!(store.saturation(), 0.0);
    let parked = store.park_many((0..3).map(|n| letter("payment", n)).collect()).await.unwrap();
    assert!((store.saturation() - 1.0).abs() < f64::EPSILON);
    let err = store.park(letter("payment", 9)).await.unwrap_err();
    assert!(matches!(err, dlq_core::Error::Full { entries: 3, max: 3 }), "{err}");
    assert_eq!(store.entries().await.unwrap(), 3, "nothing was written");
    admin(&store, "ops").discard(ListFilter::default().ids([parked[2].id]), "make room").await.unwrap();
    store.purge(Duration::ZERO).await.unwrap();
    store.park(letter("payment", 10)).await.expect("room again after a purge");
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn drop_oldest_deletes_old_finished_and_dead_rows_but_never_pending_ones(pool: PgPool) {
    let store = store_with(&pool, PgConfig::default().max_entries(4, Overflow::DropOldest)).await;
    let dead = store.park(letter("payment", 1).dead(DeadReason::Permanent)).await.unwrap().id;
    let succeeded = store.park(letter("payment", 2)).await.unwrap().id;
    let claimed = claim(&store, &["payment"], 1).await;
    assert_eq!(claimed[0].id(), succeeded);
    store.settle(vec![Settlement::Succeeded { lease: claimed[0].lease }]).await.unwrap();
    let pending: Vec<_> = store
        .park_many(vec![letter("other", 3), letter("other", 4)])
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    let newest = store.park_many(vec![letter("other", 5), letter("other", 6)]).await.unwrap();
    assert_eq!(store.get(dead).await.unwrap(), None, "the oldest dead row went first");
    assert_eq!(store.get(succeeded).await.unwrap(), None);
    assert!(store.attempts(dead).await.unwrap().is_empty(), "with its history");
    for id in pending.iter().chain(newest.iter().map(|p| &p.id)) {
        assert_eq!(store.get(*id).await.unwrap().unwrap().status, Status::Pending);
    }
    let err = store.park(letter("other", 7)).await.unwrap_err();
    assert!(matches!(err, dlq_core::Error::Full { .. }), "only pending rows left: {err}");
}

/// How long a test waits for something that must happen before it calls it lost: far past
/// what a loaded machine needs, far short of the hour a blocked park may wait here.
const PATIENCE: Duration = Duration::from_secs(60);

/// A park into a full table waits for room: its count of the rows waits on a lock the test
/// holds, so that count sees the table full, and room is made only after it. A park that did
/// not wait would end with `Full`; one that waited past its timeout would outlast the patience.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn block_waits_for_room_up_to_the_park_timeout(pool: PgPool) {
    let config = PgConfig::default().max_entries(2, Overflow::Block).park_timeout(Duration::from_secs(3600));
    let store = store_with(&pool, config).await;
    let parked = store.park_many(vec![letter("payment", 1), letter("payment", 2)]).await.unwrap();
    let mut lock = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE dlq_events IN ACCESS EXCLUSIVE MODE").execute(&mut *lock).await.unwrap();
    let blocked = {
        let store = store.clone();
        tokio::spawn(async move { store.park(letter("payment", 3)).await })
    };
    let waiting =
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'";
    let counting = async {
        while sqlx::query_scalar::<_, i64>(waiting).fetch_one(&pool).await.unwrap() == 0 {
            assert!(!blocked.is_finished(), "the park ended instead of waiting for room");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(PATIENCE, counting).await.expect("the blocked park never counted the rows");
    lock.commit().await.unwrap();
    admin(&store, "ops").discard(ListFilter::default().ids([parked[1].id]), "make room").await.unwrap();
    store.purge(Duration::ZERO).await.unwrap();
    let parked = tokio::time::timeout(PATIENCE, blocked).await.expect("room was made").unwrap();
    let parked = parked.expect("parked once there was room");
    assert!(store.get(parked.id).await.unwrap().is_some());

    let short =
        store_with(&pool, PgConfig::default().max_entries(2, Overflow::Block).park_timeout(Duration::from_millis(300)))
            .await;
    let err = tokio::time::timeout(PATIENCE, short.park(letter("payment", 4))).await;
    let err = err.expect("gave up at its park timeout").unwrap_err();
    assert!(matches!(err, dlq_core::Error::Full { .. } | dlq_core::Error::Timeout(_)), "{err}");
}

/// A blocked park whose count of the rows runs into its deadline (here: waiting on a lock the
/// test holds) is refused as full when the last count said so, not as a timeout: the caller
/// learns why, however slow the database is.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_blocked_park_whose_count_runs_out_of_time_is_refused_as_full(pool: PgPool) {
    let roomy = store_with(&pool, PgConfig::default()).await;
    roomy.park_many(vec![letter("payment", 1), letter("payment", 2)]).await.unwrap();
    let config = PgConfig::default().max_entries(2, Overflow::Block).park_timeout(Duration::from_millis(300));
    let store = store_with(&pool, config.run_migrations(false)).await;
    assert!((store.refresh_saturation().await.unwrap() - 1.0).abs() < f64::EPSILON, "counted: full");
    let mut lock = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE dlq_events IN ACCESS EXCLUSIVE MODE").execute(&mut *lock).await.unwrap();
    let refused = tokio::time::timeout(PATIENCE, store.park(letter("payment", 3))).await;
    let err = refused.expect("gave up at its park timeout").unwrap_err();
    assert!(matches!(err, dlq_core::Error::Full { entries: 2, max: 2 }), "{err}");
    lock.rollback().await.unwrap();
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn saturation_gauge_follows_the_count(pool: PgPool) {
    let store = store_with(&pool, PgConfig::default().max_entries(10, Overflow::Reject)).await;
    store.park_many((0..4).map(|n| letter("payment", n)).collect()).await.unwrap();
    assert!((store.saturation() - 0.4).abs() < 1e-9, "{}", store.saturation());
    sqlx::query("DELETE FROM dlq_events WHERE id IN (SELECT id FROM dlq_events LIMIT 2)").execute(&pool).await.unwrap();
    assert!((store.refresh_saturation().await.unwrap() - 0.2).abs() < 1e-9);
    assert_eq!(store_with(&pool, PgConfig::default()).await.saturation(), 0.0, "no limit, no saturation");
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn retention_purges_only_old_succeeded_and_discarded_rows(pool: PgPool) {
    let store = store_with(&pool, PgConfig::default()).await;
    let ids: Vec<_> = store
        .park_many(vec![
            letter("payment", 1),
            letter("payment", 2),
            letter("payment", 3).dead(DeadReason::Permanent),
            letter("x", 4),
        ])
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    let claimed = claim(&store, &["payment"], 1).await;
    store.settle(vec![Settlement::Succeeded { lease: claimed[0].lease }]).await.unwrap();
    admin(&store, "ops").discard(ListFilter::default().ids([ids[1]]), "not needed").await.unwrap();
    assert_eq!(store.purge(Duration::from_secs(3600)).await.unwrap(), 0, "younger than the retention");
    sqlx::query("UPDATE dlq_events SET updated_at = now() - interval '2 hours'").execute(&pool).await.unwrap();
    assert_eq!(store.purge(Duration::from_secs(3600)).await.unwrap(), 2);
    let left: Vec<_> = store.list(ListFilter::default()).await.unwrap().into_iter().map(|l| l.id).collect();
    assert_eq!(left, vec![ids[3], ids[2]], "dead and pending rows are kept");
}

/// A purge deletes in slices, each starting after the last row of the one before in
/// `(updated_at, id)` order: rows that share one instant (a bulk redrive or discard stamps
/// thousands alike) all go, across slice boundaries, and none of another status or age does.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_purge_of_many_slices_of_one_instant_deletes_each_row_once(pool: PgPool) {
    let store = store_with(&pool, PgConfig::default()).await;
    let kept = store.park_many(vec![letter("payment", 1), letter("payment", 2)]).await.unwrap();
    sqlx::query("UPDATE dlq_events SET updated_at = now() - interval '30 days'").execute(&pool).await.unwrap();
    sqlx::query(
        "INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, fingerprint, status, updated_at)
         SELECT 'payment', jsonb_build_object('n', g), 'transient', 'io', 'down', 'io: down',
                CASE WHEN g % 2 = 0 THEN 'SUCCEEDED' ELSE 'DISCARDED' END, now() - interval '30 days'
         FROM generate_series(1, 12001) AS g",
    )
    .execute(&pool)
    .await
    .unwrap();
    let recent = store.park(letter("payment", 3)).await.unwrap().id;
    sqlx::query("UPDATE dlq_events SET status = 'SUCCEEDED' WHERE id = $1").bind(recent).execute(&pool).await.unwrap();
    assert_eq!(store.count_purgeable(Duration::from_secs(86_400)).await.unwrap(), 12_001);
    assert_eq!(store.purge(Duration::from_secs(86_400)).await.unwrap(), 12_001, "three slices, every row once");
    let mut left: Vec<_> = store.list(ListFilter::default()).await.unwrap().into_iter().map(|l| l.id).collect();
    left.sort_unstable();
    assert_eq!(left, vec![kept[0].id, kept[1].id, recent], "pending rows and a recent finished row stay");
}

/// Waits until the statistics show at least (or, `below`, fewer than) `n` dead tuples.
async fn dead_tuples(store: &dlq_sqlx::PgStore, n: u64, below: bool) -> u64 {
    for _ in 0..100 {
        let dead = store.table_health().await.unwrap().unwrap().dead_tuples;
        if (dead >= n) != below {
            return dead;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the statistics never showed {} {n} dead tuples", if below { "fewer than" } else { "at least" });
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_retrier_vacuums_the_table_once_its_dead_tuples_pass_the_threshold(pool: PgPool) {
    let store = store_with(&pool, PgConfig::default().vacuum_dead_tuples(Some(500))).await;
    store.park_many((0..400).map(|n| letter("payment", n)).collect()).await.unwrap();
    sqlx::query("UPDATE dlq_events SET status = 'SUCCEEDED'").execute(&pool).await.unwrap();
    dead_tuples(&store, 400, false).await;
    assert_eq!(store.maintain().await.unwrap(), Maintenance::Light, "400 dead tuples: under the threshold");

    store.park_many((400..1000).map(|n| letter("payment", n)).collect()).await.unwrap();
    sqlx::query("UPDATE dlq_events SET status = 'SUCCEEDED' WHERE status = 'PENDING'").execute(&pool).await.unwrap();
    dead_tuples(&store, 1000, false).await;
    assert_eq!(store.maintain().await.unwrap(), Maintenance::Vacuumed, "1,000 dead tuples: vacuumed");
    dead_tuples(&store, 500, true).await;
    assert!(store.table_health().await.unwrap().unwrap().last_vacuum.is_some());
    assert_eq!(store.maintain().await.unwrap(), Maintenance::Light, "not again within 30 s");

    let off = store_with(&pool, PgConfig::default().vacuum_dead_tuples(None).run_migrations(false)).await;
    assert_eq!(off.maintain().await.unwrap(), Maintenance::Light, "turned off");
}
