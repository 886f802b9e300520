//! `PgStore` keeps the semantics of `dlq_core::MemoryStore` on real PostgreSQL: dedupe,
//! claim order and leases, fenced settlement, attempt history, audit log, admin actions.

mod pg_support;

use std::collections::BTreeMap;
use std::time::Duration;

use dlq_core::store::{ActionKind, Claimed, Maintenance, Refused, Settlement};
use dlq_core::{
    ErrorClass, ListFilter, Payload, Status, adapter::DeadReason, adapter::SourceMeta, classify::FailureInfo,
    store::NewDeadLetter, store::prelude::*,
};
use pg_support::*;
use sqlx::PgPool;

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn park_then_get_round_trips_every_field(pool: PgPool) {
    let store = store(&pool).await;
    let mut source = SourceMeta::kafka("payments", 3, 1_204_331);
    source.headers = BTreeMap::from([("content-type".to_owned(), "application/json".to_owned())]);
    source.trace_context = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned());
    let mut failure = FailureInfo::new(
        ErrorClass::Transient,
        "PaymentError::LedgerDown",
        "ledger unavailable".into(),
        vec!["ledger unavailable".into(), "connection refused".into()],
        Some("at handle_payment (src/lib.rs:10)".into()),
    );
    failure.fingerprint = "0123456789abcdef".into();
    let letter =
        NewDeadLetter::new("payment", Payload::Json(serde_json::json!({"id": 7, "currency": "USD "})), failure.clone())
            .with_handler("app::handle_payment")
            .with_source(source.clone())
            .retry(Duration::from_secs(3600), 240);
    let before = db_now(&pool).await;
    let parked = store.park(letter).await.unwrap();
    assert!(!parked.deduplicated);
    let row = store.get(parked.id).await.unwrap().unwrap();
    assert_eq!(row.event_type, "payment");
    assert_eq!(row.handler, "app::handle_payment");
    assert_eq!(row.payload, Payload::Json(serde_json::json!({"id": 7, "currency": "USD "})));
    assert_eq!(row.status, Status::Pending);
    assert_eq!(row.failure, failure);
    assert_eq!(row.max_retries, 240);
    assert_eq!(row.retry_count, 0);
    assert_eq!(row.dedupe_key.as_deref(), Some("payments/3/1204331"));
    assert_eq!(row.source, source);
    let due_in = row.retry_after - before;
    assert!(due_in >= chrono::TimeDelta::seconds(3599) && due_in <= chrono::TimeDelta::seconds(3700), "{due_in}");
    assert_eq!(store.get(parked.id + 1000).await.unwrap(), None);
    let attempts = store.attempts(parked.id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!((attempts[0].attempt, attempts[0].outcome.as_str()), (0, "failed"));
}

/// One statement parks letters whose optional columns are filled next to letters that leave
/// them empty: each row gets its own letter's values (the batch goes as one array of
/// `dlq_park_letter`, written field by field by the store, see `pg/park_rows.rs`).
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_batch_of_full_and_bare_letters_keeps_each_letters_fields(pool: PgPool) {
    let store = store(&pool).await;
    let failure = |reason: &str| {
        FailureInfo::new(
            ErrorClass::Transient,
            "io",
            reason.into(),
            vec![reason.into()],
            Some("at f (src/lib.rs:1)".into()),
        )
    };
    let bare = |n: u32| {
        let mut f = failure(&format!("bare {n}"));
        f.stacktrace = None;
        NewDeadLetter::new("payment", Payload::Json(serde_json::json!({ "n": n })), f)
    };
    let mut source = SourceMeta::kafka("payments", 3, 77);
    source.trace_context = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned());
    let mut full =
        NewDeadLetter::new("payment", Payload::Raw { bytes: vec![0xff, 0x00, 0xfe], truncated: None }, failure("full"))
            .with_source(source.clone());
    full.dead_reason = Some(dlq_core::adapter::DeadReason::Undecodable);
    let bare_batch = || (0..3).map(bare).collect::<Vec<_>>();
    for batch in [vec![bare(0), full.clone(), bare(1)], bare_batch()] {
        let expected: Vec<NewDeadLetter> = batch.clone();
        let parked = store.park_many(batch).await.unwrap();
        for (letter, parked) in expected.iter().zip(parked) {
            let row = store.get(parked.id).await.unwrap().unwrap();
            assert_eq!(row.payload, letter.payload);
            assert_eq!(row.failure, letter.failure);
            assert_eq!(row.dead_reason, letter.dead_reason);
            assert_eq!(row.status, letter.status());
            assert_eq!(row.dedupe_key, letter.dedupe_key);
            assert_eq!(row.source, letter.source);
        }
    }
}

/// The park statement answers with the ids it inserted, not one row per letter; the store
/// gives keyless letters the keyless ids in ascending order and keyed letters theirs by key.
/// A batch that interleaves both, repeats a key and carries one already stored gives every
/// letter the row holding its own payload.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_batch_of_keyed_and_keyless_letters_gives_each_letter_its_own_row(pool: PgPool) {
    let store = store(&pool).await;
    let stored = store.park(letter("payment", 100).with_dedupe_key("stored")).await.unwrap();
    let keys = [None, Some("a"), None, Some("stored"), Some("b"), None, Some("a"), None, Some("c")];
    let batch: Vec<NewDeadLetter> = keys
        .iter()
        .enumerate()
        .map(|(n, key)| {
            let letter = letter("payment", i64::try_from(n).unwrap());
            match key {
                Some(key) => letter.with_dedupe_key(*key),
                None => letter,
            }
        })
        .collect();
    let parked = store.park_many(batch).await.unwrap();
    assert_eq!(
        parked.iter().map(|p| p.deduplicated).collect::<Vec<_>>(),
        [false, false, false, true, false, false, true, false, false]
    );
    assert_eq!(parked[3].id, stored.id);
    assert_eq!(parked[6].id, parked[1].id, "a key repeated in the batch gets its first letter's row");
    for (n, p) in parked.iter().enumerate().filter(|(_, p)| !p.deduplicated) {
        let row = store.get(p.id).await.unwrap().unwrap();
        assert_eq!(row.payload, Payload::Json(serde_json::json!({ "n": n })), "letter {n}");
        assert_eq!(row.dedupe_key.as_deref(), keys[n], "letter {n}");
    }
    let mut ids: Vec<_> = parked.iter().filter(|p| !p.deduplicated).map(|p| p.id).collect();
    ids.dedup();
    assert_eq!(ids.len(), 7, "seven rows, each once");
}

/// A letter's optional fields travel in one nested `dlq_park_extra`, sent only when it has
/// one of them (migration 0016): a letter with any single one of them keeps it, and the
/// letters around it keep theirs empty.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_letter_with_one_optional_field_keeps_it(pool: PgPool) {
    let store = store(&pool).await;
    let bare = || letter("payment", 0);
    let with_source = |edit: fn(&mut SourceMeta)| {
        let mut source = SourceMeta::default();
        edit(&mut source);
        let mut letter = bare();
        letter.source = source;
        letter
    };
    let mut stacktrace = bare();
    stacktrace.failure.stacktrace = Some("at f (src/lib.rs:1)".into());
    let mut raw = bare();
    raw.payload = Payload::Raw { bytes: vec![0xff, 0xfe], truncated: None };
    let batch = vec![
        raw,
        stacktrace,
        bare().dead(DeadReason::Permanent),
        bare().with_dedupe_key("alone"),
        with_source(|s| s.topic = Some("payments".into())),
        with_source(|s| s.partition = Some(0)),
        with_source(|s| s.offset = Some(0)),
        with_source(|s| s.headers = BTreeMap::from([("k".to_owned(), String::new())])),
        with_source(|s| s.trace_context = Some(String::new())),
    ];
    let mut interleaved = Vec::new();
    for letter in batch {
        interleaved.extend([letter, bare()]);
    }
    let parked = store.park_many(interleaved.clone()).await.unwrap();
    for (letter, parked) in interleaved.iter().zip(parked) {
        let row = store.get(parked.id).await.unwrap().unwrap();
        assert_eq!(
            (&row.payload, &row.failure, row.dead_reason, row.status, &row.dedupe_key, &row.source),
            (&letter.payload, &letter.failure, letter.dead_reason, letter.status(), &letter.dedupe_key, &letter.source),
        );
    }
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn dedupe_key_returns_the_first_row_in_input_order(pool: PgPool) {
    let store = store(&pool).await;
    let first = store.park(letter("payment", 1).with_dedupe_key("k1")).await.unwrap();
    let again = store.park(letter("payment", 2).with_dedupe_key("k1")).await.unwrap();
    assert_eq!(again.id, first.id);
    assert!(again.deduplicated);
    let batch = vec![
        letter("payment", 3),
        letter("payment", 4).with_dedupe_key("k2"),
        letter("payment", 5).with_dedupe_key("k1"),
        letter("payment", 6).with_dedupe_key("k2"),
        letter("payment", 7),
    ];
    let parked = store.park_many(batch).await.unwrap();
    assert_eq!(parked.len(), 5);
    assert!(!parked[0].deduplicated && !parked[1].deduplicated && !parked[4].deduplicated);
    assert_eq!((parked[2].id, parked[2].deduplicated), (first.id, true));
    assert_eq!((parked[3].id, parked[3].deduplicated), (parked[1].id, true));
    assert!(parked[0].id < parked[1].id && parked[1].id < parked[4].id);
    let payload = store.get(parked[4].id).await.unwrap().unwrap().payload;
    assert_eq!(payload, Payload::Json(serde_json::json!({"n": 7})));
    assert_eq!(store.list(ListFilter::default()).await.unwrap().len(), 4);
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn claim_takes_due_rows_of_known_types_oldest_first(pool: PgPool) {
    let store = store(&pool).await;
    let later = store.park(letter("payment", 1)).await.unwrap().id;
    let future = store.park(letter("payment", 2).retry(Duration::from_secs(3600), 5)).await.unwrap().id;
    let other = store.park(letter("refund", 3)).await.unwrap().id;
    let dead = store.park(letter("payment", 4).dead(DeadReason::Permanent)).await.unwrap().id;
    let earlier = store.park(letter("payment", 5)).await.unwrap().id;
    sqlx::query("UPDATE dlq_events SET retry_after = now() - interval '1 hour' WHERE id = $1")
        .bind(earlier)
        .execute(&pool)
        .await
        .unwrap();
    let claimed = claim(&store, &["payment"], 10).await;
    let ids: Vec<_> = claimed.iter().map(|c| c.id()).collect();
    assert_eq!(ids, vec![earlier, later]);
    assert!(!ids.contains(&future) && !ids.contains(&other) && !ids.contains(&dead));
    for c in &claimed {
        let row = store.get(c.id()).await.unwrap().unwrap();
        assert_eq!(row.status, Status::Processing);
        assert_eq!(row.lease_owner.as_deref(), Some("test-retrier"));
        assert!(row.lease_until.is_some() && row.last_attempt_at.is_some());
        assert_eq!(*c, Claimed::of(&row, c.lease.token), "the claim carries the stored row's values");
    }
    assert!(claim(&store, &["payment"], 10).await.is_empty(), "held rows are not claimed twice");
    assert!(claim(&store, &[], 10).await.is_empty());
    assert_eq!(claim(&store, &["refund", "payment"], 1).await.len(), 1);
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn expired_leases_are_reclaimed_and_the_old_token_is_fenced(pool: PgPool) {
    let store = store(&pool).await;
    let id = store.park(letter("payment", 1)).await.unwrap().id;
    let first = store.claim(request(&["payment"], 10, Duration::from_millis(50))).await.unwrap();
    assert_eq!(first.len(), 1);
    tokio::time::sleep(Duration::from_millis(120)).await;
    let report = store.settle(vec![Settlement::Succeeded { lease: first[0].lease }]).await.unwrap();
    assert_eq!((report.applied, report.fenced.clone()), (0, vec![id]), "an expired lease writes nothing");
    let second = claim(&store, &["payment"], 10).await;
    assert_eq!(second.len(), 1);
    assert_ne!(second[0].lease.token, first[0].lease.token);
    let stale = store.settle(vec![Settlement::Succeeded { lease: first[0].lease }]).await.unwrap();
    assert_eq!(stale.fenced, vec![id]);
    let fresh = store.settle(vec![Settlement::Succeeded { lease: second[0].lease }]).await.unwrap();
    assert_eq!((fresh.applied, fresh.fenced.len()), (1, 0));
    let again = store.settle(vec![Settlement::Succeeded { lease: second[0].lease }]).await.unwrap();
    assert_eq!(again.fenced, vec![id], "settled once only");
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!(row.status, Status::Succeeded);
    assert_eq!((row.lease_owner, row.lease_until), (None, None));
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_batch_of_outcomes_settles_each_kind(pool: PgPool) {
    let store = store(&pool).await;
    let ids: Vec<_> = store.park_many((0..5).map(|n| letter("payment", n)).collect()).await.unwrap();
    let claimed = claim(&store, &["payment"], 10).await;
    assert_eq!(claimed.len(), 5);
    let lease = |i: usize| claimed.iter().find(|c| c.id() == ids[i].id).unwrap().lease;
    let retry_failure =
        FailureInfo::new(ErrorClass::Transient, "http", "503 from ledger".into(), vec!["503".into()], None);
    let dead_failure = FailureInfo::new(ErrorClass::Permanent, "validation", "bad currency".into(), vec![], None);
    let before = db_now(&pool).await;
    let report = store
        .settle(vec![
            Settlement::Succeeded { lease: lease(0) },
            Settlement::Retry { lease: lease(1), delay: Duration::from_secs(600), failure: retry_failure.clone() },
            Settlement::Dead {
                lease: lease(2),
                reason: DeadReason::Permanent,
                failure: dead_failure.clone(),
                counts: true,
            },
            Settlement::Dead {
                lease: lease(3),
                reason: DeadReason::Undecodable,
                failure: dead_failure.clone(),
                counts: false,
            },
            Settlement::Release { lease: lease(4) },
        ])
        .await
        .unwrap();
    assert_eq!((report.applied, report.fenced.len()), (5, 0));
    let get = |i: usize| {
        let store = store.clone();
        let id = ids[i].id;
        async move { store.get(id).await.unwrap().unwrap() }
    };
    assert_eq!(get(0).await.status, Status::Succeeded);
    let retried = get(1).await;
    assert_eq!((retried.status, retried.retry_count), (Status::Pending, 1));
    assert_eq!(retried.failure, retry_failure, "the failure is replaced, not appended");
    let wait = retried.retry_after - before;
    assert!(wait >= chrono::TimeDelta::seconds(599) && wait <= chrono::TimeDelta::seconds(700), "{wait}");
    let dead = get(2).await;
    assert_eq!(
        (dead.status, dead.dead_reason, dead.retry_count),
        (Status::FailedPermanently, Some(DeadReason::Permanent), 1)
    );
    let undecodable = get(3).await;
    assert_eq!((undecodable.dead_reason, undecodable.retry_count), (Some(DeadReason::Undecodable), 0));
    let released = get(4).await;
    assert_eq!((released.status, released.retry_count), (Status::Pending, 0));
    let history = store.attempts(ids[1].id).await.unwrap();
    let outcomes: Vec<_> = history.iter().map(|a| (a.attempt, a.outcome.as_str(), a.owner.as_deref())).collect();
    assert_eq!(outcomes, vec![(0, "failed", None), (1, "retry", Some("test-retrier"))]);
    assert_eq!(history[1].error_reason.as_deref(), Some("503 from ledger"));
    assert_eq!(history[0].error_reason.as_deref(), Some("ledger down"), "attempt 0 keeps the original failure");
    assert_eq!(history[0].at, store.get(ids[1].id).await.unwrap().unwrap().first_failed_at);
    assert_eq!(store.attempts(ids[3].id).await.unwrap()[1].attempt, 1);
    assert_eq!(store.attempts(ids[4].id).await.unwrap().len(), 1, "a release is not an attempt");
    assert_eq!(store.attempts(ids[0].id).await.unwrap()[1].outcome, "succeeded");
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn operators_redrive_discard_patch_and_purge_with_audit(pool: PgPool) {
    let store = store(&pool).await;
    let dead = store.park(letter("payment", 1).dead(DeadReason::Permanent)).await.unwrap().id;
    let pending = store.park(letter("payment", 2)).await.unwrap().id;
    let redriven = admin(&store, "alice").redrive(ListFilter::default(), "ledger fixed").await.unwrap();
    assert_eq!(redriven.moved_ids, vec![dead], "only dead rows are redriven");
    let row = store.get(dead).await.unwrap().unwrap();
    assert_eq!((row.status, row.dead_reason, row.redrive_count, row.retry_count), (Status::Pending, None, 1, 0));
    let audit = store.audit(dead).await.unwrap();
    assert_eq!((audit[0].action.as_str(), audit[0].actor.as_str()), ("redrive", "alice"));
    assert_eq!(audit[0].reason.as_deref(), Some("ledger fixed"));
    assert_eq!(audit[0].diff, serde_json::json!({"status": ["FAILED_PERMANENTLY", "PENDING"]}));

    let bob = admin(&store, "bob");
    let new_payload = Payload::Json(serde_json::json!({"n": 2, "fixed": true}));
    bob.replace_payload(pending, new_payload.clone(), "add the flag").await.unwrap();
    assert_eq!(store.get(pending).await.unwrap().unwrap().payload, new_payload);
    let patch = &store.audit(pending).await.unwrap()[0];
    assert_eq!(patch.diff, serde_json::json!({"payload": {"old": {"n": 2}, "new": {"n": 2, "fixed": true}}}));
    assert_eq!((patch.actor.as_str(), patch.reason.as_deref()), ("bob", Some("add the flag")));
    assert!(matches!(
        bob.replace_payload(9_999, new_payload.clone(), "x").await,
        Err(dlq_core::Error::NotFound(9_999))
    ));
    let held = claim(&store, &["payment"], 1).await;
    let err = bob.replace_payload(held[0].lease.id, new_payload, "x").await.unwrap_err();
    assert!(matches!(err, dlq_core::Error::InvalidState { status: Status::Processing, .. }), "{err}");

    let carol = admin(&store, "carol");
    let discarded = carol.discard(ListFilter::default(), "test data").await.unwrap();
    assert_eq!(discarded.moved_ids.len(), 1, "the PROCESSING row is not discarded");
    assert_eq!(discarded.refusals[0].why, Refused::Status { status: Status::Processing });
    assert_eq!(carol.discard(ListFilter::default(), "test data").await.unwrap().moved, 0, "nor twice");
    let discarded = discarded.moved_ids;
    let entry = store.audit(discarded[0]).await.unwrap().pop().unwrap();
    assert_eq!(entry.diff, serde_json::json!({"status": ["PENDING", "DISCARDED"]}));

    assert_eq!(store.purge(Duration::from_secs(3600)).await.unwrap(), 0, "too recent");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(store.purge(Duration::from_millis(1)).await.unwrap(), 1);
    assert_eq!(store.get(discarded[0]).await.unwrap(), None);
    assert!(
        store.attempts(discarded[0]).await.unwrap().is_empty() && store.audit(discarded[0]).await.unwrap().is_empty()
    );
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn list_stats_and_groups(pool: PgPool) {
    let store = store(&pool).await;
    let bad = |n: i64| {
        let f = FailureInfo::new(ErrorClass::Permanent, "validation", format!("currency {n} is invalid"), vec![], None);
        NewDeadLetter::new("payment", Payload::Json(serde_json::json!({"n": n})), f).dead(DeadReason::Permanent)
    };
    let ids = store.park_many(vec![bad(1), bad(2), bad(3), letter("payment", 4), letter("refund", 5)]).await.unwrap();
    let listed = store.list(ListFilter::default().status(Status::FailedPermanently).limit(2)).await.unwrap();
    assert_eq!(listed.iter().map(|l| l.id).collect::<Vec<_>>(), vec![ids[2].id, ids[1].id], "newest first");
    let by_id = store.list(ListFilter::default().ids([ids[4].id])).await.unwrap();
    assert_eq!(by_id[0].event_type, "refund");
    let stats = store.stats().await.unwrap();
    let counts: Vec<_> = stats.iter().map(|s| (s.event_type.as_str(), s.status, s.count)).collect();
    assert_eq!(
        counts,
        vec![
            ("payment", Status::Pending, 1),
            ("payment", Status::FailedPermanently, 3),
            ("refund", Status::Pending, 1)
        ]
    );
    let groups = store.groups(ListFilter::default()).await.unwrap();
    assert_eq!(groups[0].count, 3, "numbers are masked in fingerprints");
    assert_eq!(groups[0].sample_reason, "currency 3 is invalid");
    assert_eq!(groups.len(), 3);
    let only = store.groups(ListFilter::default().fingerprint(&groups[0].fingerprint)).await.unwrap();
    assert_eq!(only.len(), 1);
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn concurrent_parks_are_group_committed_and_each_caller_gets_its_own_id(pool: PgPool) {
    let store = store(&pool).await;
    let tasks: Vec<_> = (0..200)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move { (n, store.park(letter("payment", n)).await.unwrap()) })
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    for task in tasks {
        let (n, parked) = task.await.unwrap();
        assert!(ids.insert(parked.id));
        let row = store.get(parked.id).await.unwrap().unwrap();
        assert_eq!(row.payload, Payload::Json(serde_json::json!({"n": n})), "id {} belongs to park {n}", parked.id);
    }
    let statements: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT xmin::text) FROM dlq_events").fetch_one(&pool).await.unwrap();
    assert!(statements < 200, "200 parks were written by {statements} transactions");
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn park_in_commits_and_rolls_back_with_the_callers_transaction(pool: PgPool) {
    let store = store(&pool).await;
    let mut tx = pool.begin().await.unwrap();
    let id = store.park_in(&mut tx, letter("payment", 1)).await.unwrap().id;
    tx.rollback().await.unwrap();
    assert_eq!(store.get(id).await.unwrap(), None);
    let mut tx = pool.begin().await.unwrap();
    let parked = store
        .park_many_in(&mut tx, vec![letter("payment", 2), letter("payment", 3).with_dedupe_key("k")])
        .await
        .unwrap();
    assert_eq!(store.get(parked[0].id).await.unwrap(), None, "invisible before commit");
    tx.commit().await.unwrap();
    assert!(store.get(parked[0].id).await.unwrap().is_some());
    let mut tx = pool.begin().await.unwrap();
    let again = store.park_in(&mut tx, letter("payment", 4).with_dedupe_key("k")).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!((again.id, again.deduplicated), (parked[1].id, true));
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_park_wakes_a_waiting_retrier(pool: PgPool) {
    let store = store(&pool).await;
    // The first wait starts the listener, which wakes it once its `LISTEN` holds: after that
    // only a `NOTIFY` wakes a waiter.
    let patience = Duration::from_secs(60);
    tokio::time::timeout(patience, store.wait_for_work(store.work_ticket(), Duration::from_secs(3600)))
        .await
        .expect("the listener starts and wakes its waiters");
    // The wait is polled first, so it waits before the park is sent; its maximum is far past
    // the test's patience, so only the park's `NOTIFY` can end it in time.
    let woken = tokio::time::timeout(patience, async {
        tokio::join!(
            store.wait_for_work(store.work_ticket(), Duration::from_secs(3600)),
            store.park(letter("payment", 1))
        )
    })
    .await;
    let ((), parked) = woken.expect("the park woke the waiter");
    parked.unwrap();
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn concurrent_claims_never_overlap(pool: PgPool) {
    let store = store(&pool).await;
    store.park_many((0..300).map(|n| letter("payment", n)).collect()).await.unwrap();
    let claims: Vec<_> = (0..4)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let got = claim(&store, &["payment"], 25).await;
                    if got.is_empty() {
                        return mine;
                    }
                    mine.extend(got.into_iter().map(|c| c.id()));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for c in claims {
        all.extend(c.await.unwrap());
    }
    let unique: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!((all.len(), unique.len()), (300, 300));
}

/// Rows `dlq_attempts` holds for one row (the history less what the row itself keeps).
async fn history_rows(pool: &PgPool, id: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM dlq_attempts WHERE dlq_id = $1").bind(id).fetch_one(pool).await.unwrap()
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn attempt_zero_is_kept_once_when_retries_replace_the_error(pool: PgPool) {
    let store = store(&pool).await;
    let id = store.park(letter("payment", 1)).await.unwrap().id;
    for n in 1..=3 {
        let claimed = claim(&store, &["payment"], 1).await;
        let failure = FailureInfo::new(ErrorClass::Transient, "http", format!("failure {n}"), vec![], None);
        let retry = Settlement::Retry { lease: claimed[0].lease, delay: Duration::ZERO, failure };
        assert_eq!(store.settle(vec![retry]).await.unwrap().applied, 1);
    }
    let history = store.attempts(id).await.unwrap();
    let summary: Vec<_> = history.iter().map(|a| (a.attempt, a.outcome.as_str(), a.error_reason.as_deref())).collect();
    assert_eq!(
        summary,
        vec![
            (0, "failed", Some("ledger down")),
            (1, "retry", Some("failure 1")),
            (2, "retry", Some("failure 2")),
            (3, "retry", Some("failure 3")),
        ]
    );
    assert_eq!(store.get(id).await.unwrap().unwrap().failure.reason, "failure 3");
    let written = history_rows(&pool, id).await;
    assert_eq!(written, 3, "one history row per retry; the original failure stays on the row");
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_success_stays_in_the_history_through_a_refused_patch_and_discard(pool: PgPool) {
    let store = store(&pool).await;
    let id = store.park(letter("payment", 1)).await.unwrap().id;
    let claimed = claim(&store, &["payment"], 1).await;
    store.settle(vec![Settlement::Succeeded { lease: claimed[0].lease }]).await.unwrap();
    let expected = vec![(0, "failed".to_owned(), None), (1, "succeeded".to_owned(), Some("test-retrier".to_owned()))];
    let summary = |h: Vec<dlq_core::admin::AttemptRecord>| {
        h.into_iter().map(|a| (a.attempt, a.outcome, a.owner)).collect::<Vec<_>>()
    };
    let before = store.attempts(id).await.unwrap();
    assert_eq!(summary(before.clone()), expected);
    let ops = admin(&store, "ops");
    // A succeeded row's payload is the one its handler ran with: a patch is refused.
    let refused = ops.replace_payload(id, Payload::Json(serde_json::json!({"n": 2})), "first").await;
    assert!(matches!(refused, Err(dlq_core::Error::InvalidState { .. })), "{refused:?}");
    let after_patch = store.attempts(id).await.unwrap();
    assert_eq!(after_patch, before, "the success keeps its time and is recorded once");
    // Nor is it discarded: it is not dead, it succeeded.
    let discard = ops.discard(ListFilter::default().ids([id]), "done twice").await.unwrap();
    assert_eq!(discard.refusals[0].why, Refused::Status { status: Status::Succeeded });
    assert_eq!(store.get(id).await.unwrap().unwrap().status, Status::Succeeded);
    assert_eq!(summary(store.attempts(id).await.unwrap()), expected);
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_burst_of_parks_wakes_a_listener(pool: PgPool) {
    let store = store(&pool).await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await.unwrap();
    listener.listen(store.channel()).await.unwrap();
    for n in 0..60 {
        store.park(letter("payment", n)).await.unwrap();
    }
    // How many notifications a burst sends depends on how long it takes: the count per
    // window is the unit test's (`pg::notify`, on a paused clock). Here: they reach a listener.
    let woken = tokio::time::timeout(Duration::from_secs(60), listener.recv()).await;
    woken.expect("the burst woke retriers").unwrap();
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn the_dlq_history_view_shows_what_attempts_returns(pool: PgPool) {
    let store = store(&pool).await;
    let retried = store.park(letter("payment", 1)).await.unwrap().id;
    let fresh = store.park(letter("payment", 2)).await.unwrap().id;
    let claimed = claim(&store, &["payment"], 1).await;
    let failure = FailureInfo::new(ErrorClass::Transient, "http", "503".into(), vec![], None);
    store.settle(vec![Settlement::Retry { lease: claimed[0].lease, delay: Duration::ZERO, failure }]).await.unwrap();
    let claimed = claim(&store, &["payment"], 2).await;
    let lease = claimed.iter().find(|c| c.lease.id == retried).unwrap().lease;
    store.settle(vec![Settlement::Succeeded { lease }]).await.unwrap();

    for id in [retried, fresh] {
        let from_store: Vec<(i32, String, Option<String>, Option<String>)> = store
            .attempts(id)
            .await
            .unwrap()
            .into_iter()
            .map(|a| (i32::try_from(a.attempt).unwrap(), a.outcome, a.error_reason, a.owner))
            .collect();
        let from_sql: Vec<(i32, String, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT attempt, outcome, error_reason, owner FROM dlq_history WHERE dlq_id = $1 ORDER BY attempt",
        )
        .bind(id)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(from_sql, from_store, "row {id}");
    }
    let outcomes: Vec<String> =
        sqlx::query_scalar("SELECT outcome FROM dlq_history WHERE dlq_id = $1 ORDER BY attempt")
            .bind(retried)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(outcomes, ["failed", "retry", "succeeded"]);
    let written = history_rows(&pool, retried).await;
    assert_eq!(written, 1, "the first retry writes one history row; the original stays on the row");
}

/// A row whose original failure an earlier version copied to `dlq_attempts` (before migration
/// 0013: `first_failure_logged`) keeps one attempt 0 through later retries.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn an_original_failure_copied_by_an_earlier_version_is_read_once(pool: PgPool) {
    let store = store(&pool).await;
    let id = store.park(letter("payment", 1)).await.unwrap().id;
    sqlx::query(
        "WITH copied AS (INSERT INTO dlq_attempts (dlq_id, attempt, outcome, error_class, error_reason, at)
             SELECT id, 0, 'failed', error_class, error_reason, first_failed_at FROM dlq_events WHERE id = $1)
         UPDATE dlq_events SET first_failure_logged = true, error_reason = 'a later failure' WHERE id = $1",
    )
    .bind(id)
    .execute(&pool)
    .await
    .unwrap();
    let claimed = claim(&store, &["payment"], 1).await;
    let failure = FailureInfo::new(ErrorClass::Transient, "http", "503".into(), vec![], None);
    store.settle(vec![Settlement::Retry { lease: claimed[0].lease, delay: Duration::ZERO, failure }]).await.unwrap();
    let history: Vec<(u32, String, Option<String>)> =
        store.attempts(id).await.unwrap().into_iter().map(|a| (a.attempt, a.outcome, a.error_reason)).collect();
    let original = letter("payment", 1).failure.reason;
    assert_eq!(history, [(0, "failed".to_owned(), Some(original)), (1, "retry".to_owned(), Some("503".to_owned()))]);
    let from_view: i64 = sqlx::query_scalar("SELECT count(*) FROM dlq_history WHERE dlq_id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(from_view, 2);
}

/// Heap tuples one call of the claim's PENDING branch (`dlq_claim_due`, migrations 0007, 0033)
/// fetches (see `tuples_read_by`: the bound below leaves room for an earlier call's, and is far
/// below every due row).
async fn tuples_read_by_a_pending_claim(pool: &PgPool, limit: i32) -> (i64, i64, i64) {
    tuples_read_by(pool, &format!("SELECT count(*) FROM dlq_claim_due(ARRAY['burst'], {limit}, NULL)")).await
}

/// What `counting` (a statement answering one count) answers, and the heap tuples it read
/// from `dlq_events` (sequentially, by index), in a transaction rolled back: the session's
/// statistics counters not yet flushed, which may still hold an earlier statement's.
async fn tuples_read_by(pool: &PgPool, counting: &str) -> (i64, i64, i64) {
    let mut tx = pool.begin().await.unwrap();
    let counted: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(counting.to_owned())).fetch_one(&mut *tx).await.unwrap();
    let (seq_tup_read, idx_tup_fetch): (i64, i64) = sqlx::query_as(
        "SELECT seq_tup_read, idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relid = 'dlq_events'::regclass",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    (counted, seq_tup_read, idx_tup_fetch)
}

/// Right after a burst of parks, before any ANALYZE, the planner used to read every
/// due row (a bitmap heap scan and a sort) to claim 50. The claim walks the partial index in
/// order and stops at the batch, with or without statistics.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_claim_after_a_burst_reads_the_batch_not_every_due_row(pool: PgPool) {
    sqlx::query(
        "INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, fingerprint, retry_after)
         SELECT 'burst', to_jsonb(g), 'transient', 'io', 'down', 'f', now() - interval '1 second'
         FROM generate_series(1, 20000) AS g",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (claimed, seq, fetched) = tuples_read_by_a_pending_claim(&pool, 50).await;
    assert_eq!((claimed, seq), (50, 0));
    assert!(fetched < 1000, "without statistics a claim of 50 fetched {fetched} rows");

    sqlx::query("ANALYZE dlq_events").execute(&pool).await.unwrap();
    let (claimed, seq, fetched) = tuples_read_by_a_pending_claim(&pool, 50).await;
    assert_eq!((claimed, seq), (50, 0));
    assert!(fetched < 1000, "with statistics a claim of 50 fetched {fetched} rows");

    // The whole claim still takes the oldest due rows first.
    let store = store(&pool).await;
    let ids: Vec<i64> = claim(&store, &["burst"], 50).await.iter().map(|c| c.id()).collect();
    let oldest: Vec<i64> = sqlx::query_scalar("SELECT id FROM dlq_events ORDER BY retry_after, id LIMIT 50")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(ids, oldest);
}

/// Shared buffers one call of `dlq_claim_due` for `event_type` from `since` touches (its
/// function scan's, which include the statements it runs), in a transaction rolled back. A
/// call for a type with no rows comes first, so that planning the function's statements on a
/// new connection is not counted; not a call for the same type, whose walk would mark the
/// dead index entries it passed, for every later walk to skip.
async fn buffers_of_a_pending_claim(
    pool: &PgPool,
    event_type: &str,
    since: Option<chrono::DateTime<chrono::Utc>>,
) -> (usize, i64) {
    let mut tx = pool.begin().await.unwrap();
    let mut plan = serde_json::Value::Null;
    for event_type in ["none", event_type] {
        plan = sqlx::query_scalar(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM dlq_claim_due(ARRAY[$1], 50, ARRAY[$2])",
        )
        .bind(event_type)
        .bind(since)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    }
    tx.rollback().await.unwrap();
    let node = &plan[0]["Plan"];
    (node["Actual Rows"].as_u64().unwrap() as usize, node["Shared Hit Blocks"].as_i64().unwrap())
}

/// Migrations 0031 and 0033: a claim starts its walk of a type's due rows at the type's floor, a
/// margin behind the `retry_after` of the newest row of the type a claim took, so a drain does
/// not step over the dead entries of every row claimed since the last vacuum.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_claim_starts_from_its_floor_and_still_finds_a_row_due_before_it(pool: PgPool) {
    sqlx::query(
        "INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, fingerprint, retry_after)
         SELECT 'burst', to_jsonb(g), 'transient', 'io', 'down', 'f', now() - interval '1 hour' + g * interval '1 ms'
         FROM generate_series(1, 20000) AS g",
    )
    .execute(&pool)
    .await
    .unwrap();
    // A drain so far: the oldest 19,900 rows claimed and done, their index entries dead.
    let floor: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "WITH done AS (
             UPDATE dlq_events SET status = 'SUCCEEDED' WHERE id IN (
                 SELECT id FROM dlq_events ORDER BY retry_after, id LIMIT 19900)
             RETURNING retry_after)
         SELECT max(retry_after) FROM done",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let (walked_rows, walked) = buffers_of_a_pending_claim(&pool, "burst", None).await;
    let (floored_rows, floored) = buffers_of_a_pending_claim(&pool, "burst", Some(floor)).await;
    assert_eq!((walked_rows, floored_rows), (50, 50));
    assert!(floored * 5 < walked, "from the floor: {floored} buffers, from the oldest: {walked}");

    // Through the store: a claim sets the floor. A row that came due just behind it (parked by
    // a transaction that began a moment before the claim) is found by the next claims; one
    // far behind it waits for the periodic walk from the oldest (30 s), so the claims right
    // after do not find it.
    let store = store(&pool).await;
    let first = claim(&store, &["burst"], 50).await;
    assert_eq!(first.len(), 50);
    let newest = first.iter().map(|c| c.retry_after).max().unwrap();
    let straggler = |retry_after: chrono::DateTime<chrono::Utc>| {
        sqlx::query_scalar::<_, i64>(
            "INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, fingerprint, retry_after)
             VALUES ('burst', '{}', 'transient', 'io', 'down', 'f', $1) RETURNING id",
        )
        .bind(retry_after)
        .fetch_one(&pool)
    };
    let near = straggler(newest - chrono::TimeDelta::milliseconds(100)).await.unwrap();
    let far = straggler(chrono::Utc::now() - chrono::TimeDelta::hours(2)).await.unwrap();
    let mut claims: Vec<Vec<i64>> = Vec::new();
    while claims.len() < 4 && claims.last().is_none_or(|c| !c.is_empty()) {
        claims.push(claim(&store, &["burst"], 50).await.iter().map(|c| c.id()).collect());
    }
    let ids: Vec<i64> = claims.concat();
    assert!(ids.contains(&near) && !ids.contains(&far), "{claims:?}");
    assert_eq!(ids.len(), 51, "the other 50 and the near straggler: {claims:?}");
}

/// Migrations 0032 to 0034: each event type's due rows are a range of their own. A claim of
/// one type reads that type's rows, however many due rows of a type nobody claims (its
/// circuit open) lie before them (the same range gives `stats` each type's oldest due row);
/// a claim of both types gives each half of its batch.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_flood_of_one_type_neither_slows_nor_holds_back_another(pool: PgPool) {
    let park = |event_type: &'static str, rows: i32, ago: &'static str| {
        sqlx::query(
            "INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, fingerprint, retry_after)
             SELECT $1, to_jsonb(g), 'transient', 'io', 'down', 'f', now() - $3::interval + g * interval '1 ms'
             FROM generate_series(1, $2) AS g",
        )
        .bind(event_type)
        .bind(rows)
        .bind(ago)
        .execute(&pool)
    };
    park("flood", 20_000, "1 hour").await.unwrap();
    park("receipt", 60, "1 minute").await.unwrap();
    let (rows, buffers) = buffers_of_a_pending_claim(&pool, "receipt", None).await;
    assert_eq!(rows, 50);
    // A visit or two of each of the 50 rows and the index's descent; a walk past the flood
    // visited each of its 20,000 rows.
    assert!(buffers < 1_000, "a claim of 50 behind 20,000 due rows of another type touched {buffers} buffers");

    let store = store(&pool).await;
    let stats = store.stats().await.unwrap();
    let oldest = |t: &str| stats.iter().find(|r| r.event_type == t).and_then(|r| r.oldest_due).unwrap();
    assert!(oldest("flood") < oldest("receipt"), "{stats:?}");

    let both = claim(&store, &["flood", "receipt"], 50).await;
    let receipts = both.iter().filter(|c| c.event_type == "receipt").count();
    assert_eq!((both.len(), receipts), (50, 25), "each type half of the batch, the flood's older rows too");
}

/// `stats` and `groups` read the tallies (migration 0010); these are what a scan of the table
/// says, whatever changed the rows: the store's own calls, an operator's SQL, a fold.
async fn tallies_match_the_table(store: &dlq_sqlx::PgStore, pool: &PgPool, when: &str) {
    let scanned: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT event_type, status, count(*) FROM dlq_events GROUP BY 1, 2 ORDER BY 1, 2")
            .fetch_all(pool)
            .await
            .unwrap();
    let mut tallied: Vec<(String, String, i64)> = store
        .stats()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.event_type, r.status.as_str().to_owned(), i64::try_from(r.count).unwrap()))
        .collect();
    tallied.sort();
    assert_eq!(tallied, scanned, "stats {when}");
    let scanned: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT fingerprint, event_type, count(*) FROM dlq_events \
         WHERE status IN ('PENDING', 'FAILED_PERMANENTLY') GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut tallied: Vec<(String, String, i64)> = store
        .groups(ListFilter::default().limit(1_000))
        .await
        .unwrap()
        .into_iter()
        .map(|g| (g.fingerprint, g.event_type, i64::try_from(g.count).unwrap()))
        .collect();
    tallied.sort();
    assert_eq!(tallied, scanned, "groups {when}");
}

/// Every third claimed row succeeds, every third is retried at once, every third dies.
fn mixed_outcomes(claimed: &[dlq_core::store::Claimed]) -> Vec<Settlement> {
    claimed
        .iter()
        .enumerate()
        .map(|(i, c)| match i % 3 {
            0 => Settlement::Succeeded { lease: c.lease },
            1 => Settlement::Retry {
                lease: c.lease,
                delay: Duration::ZERO,
                failure: failure(ErrorClass::Transient, "ledger down again"),
            },
            _ => Settlement::Dead {
                lease: c.lease,
                reason: DeadReason::Permanent,
                failure: failure(ErrorClass::Permanent, "bad currency"),
                counts: true,
            },
        })
        .collect()
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn stats_and_groups_follow_every_change_without_scanning(pool: PgPool) {
    let store = store(&pool).await;
    for n in 0..30 {
        let ty = ["payment", "refund", "invoice"][usize::try_from(n % 3).unwrap()];
        let mut parked = letter(ty, n);
        if n % 5 == 0 {
            parked.failure = failure(ErrorClass::Permanent, "card declined");
        }
        store.park(parked).await.unwrap();
    }
    tallies_match_the_table(&store, &pool, "after parking").await;

    let claimed = claim(&store, &["payment", "refund"], 8).await;
    tallies_match_the_table(&store, &pool, "with rows claimed").await;
    store.settle(mixed_outcomes(&claimed)).await.unwrap();
    tallies_match_the_table(&store, &pool, "after settling").await;
    let claimed = claim(&store, &["payment", "invoice"], 6).await;
    store.settle(claimed.iter().map(|c| Settlement::Succeeded { lease: c.lease }).collect()).await.unwrap();
    tallies_match_the_table(&store, &pool, "after settling successes only").await;

    assert_eq!(store.maintain().await.unwrap(), Maintenance::Light, "folds; nothing to vacuum");
    let keys: i64 = sqlx::query_scalar("SELECT count(*) FROM dlq_tallies").fetch_one(&pool).await.unwrap();
    let distinct: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT (event_type, dlq_tallied(status), fingerprint)) FROM dlq_events")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(keys, distinct, "folded: one row per key, none for empty keys");
    tallies_match_the_table(&store, &pool, "after the fold").await;

    let ops = admin(&store, "ops");
    ops.redrive(ListFilter::default().event_type("invoice"), "replay").await.unwrap();
    let dead_refunds = ListFilter::default().event_type("refund").status(Status::FailedPermanently);
    ops.discard(dead_refunds, "cleanup").await.unwrap();
    tallies_match_the_table(&store, &pool, "after redrive and discard").await;

    // An operator's SQL goes through the same triggers.
    sqlx::query("UPDATE dlq_events SET status = 'DISCARDED', updated_at = now() - interval '30 days' WHERE id % 4 = 0")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("DELETE FROM dlq_events WHERE id % 7 = 0").execute(&pool).await.unwrap();
    tallies_match_the_table(&store, &pool, "after an operator's UPDATE and DELETE").await;
    store.purge(Duration::from_secs(86_400)).await.unwrap();
    tallies_match_the_table(&store, &pool, "after the purge").await;
    sqlx::query("TRUNCATE dlq_events CASCADE").execute(&pool).await.unwrap();
    tallies_match_the_table(&store, &pool, "after TRUNCATE").await;
    assert!(store.stats().await.unwrap().is_empty());
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn charts_on_whole_hours_count_parks_without_scanning(pool: PgPool) {
    let store = store(&pool).await;
    // 90 rows parked over the last 30 hours, as an `INSERT … SELECT` from an operator or a
    // backfill would write them.
    sqlx::query(
        "INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, fingerprint, created_at)
         SELECT (ARRAY['payment', 'refund'])[1 + i % 2], jsonb_build_object('i', i), 'transient', 'io', 'down',
                'fp', now() - (i * 20) * interval '1 minute'
         FROM generate_series(0, 89) AS i",
    )
    .execute(&pool)
    .await
    .unwrap();
    let now = chrono::Utc::now().timestamp();
    let end = chrono::DateTime::from_timestamp(now - now.rem_euclid(3600) + 3600, 0).unwrap();
    let since = end - chrono::TimeDelta::hours(48);
    let expected = || async {
        let rows: Vec<(String, i32, i64)> = sqlx::query_as(
            "SELECT event_type, floor(extract(epoch FROM created_at - $1) / 3600)::int4, count(*)
             FROM dlq_events WHERE created_at >= $1 GROUP BY 1, 2 ORDER BY 1, 2",
        )
        .bind(since)
        .fetch_all(&pool)
        .await
        .unwrap();
        rows.into_iter().map(|(t, b, n)| (t, u32::try_from(b).unwrap(), u64::try_from(n).unwrap())).collect::<Vec<_>>()
    };
    let charted = || async {
        let mut rows: Vec<_> = store
            .created_histogram(since, Duration::from_secs(3600), 48)
            .await
            .unwrap()
            .into_iter()
            .map(|b| (b.event_type, b.bucket, b.count))
            .collect();
        rows.sort();
        rows
    };
    let before = expected().await;
    assert_eq!(before.iter().map(|r| r.2).sum::<u64>(), 90);
    assert_eq!(charted().await, before, "hourly counts, unfolded");
    store.maintain().await.unwrap();
    assert_eq!(charted().await, before, "hourly counts, folded");
    // A purged row was still parked in its hour.
    sqlx::query("DELETE FROM dlq_events WHERE id % 3 = 0").execute(&pool).await.unwrap();
    assert_eq!(charted().await, before, "after a delete");
    assert_ne!(expected().await, before);
}

/// Rows created `minutes` ago (one each), as an `INSERT … SELECT` from an operator or a
/// backfill would write them: the table's trigger tallies them.
async fn created_minutes_ago(pool: &PgPool, minutes: &[i32]) {
    sqlx::query(
        "INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, fingerprint, created_at)
         SELECT 'payment', jsonb_build_object('m', m), 'transient', 'io', 'down', 'fp', now() - m * interval '1 minute'
         FROM unnest($1::int4[]) AS m",
    )
    .bind(minutes)
    .execute(pool)
    .await
    .unwrap();
}

/// Rows whose `created_at` is at or after `since`, counted from the table.
async fn created_since(pool: &PgPool, since: chrono::DateTime<chrono::Utc>) -> u64 {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM dlq_events WHERE created_at >= $1")
        .bind(since)
        .fetch_one(pool)
        .await
        .unwrap();
    u64::try_from(n).unwrap()
}

/// Migration 0030: `dlq stats`' and the overview's growth ("parked in the last 5 minutes, the
/// last hour") are windows of whole minutes summed from the per-minute tally of parks, so a
/// purge does not lower them, and the fold keeps the last two hours per minute while rounding
/// older minutes to their hour.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn growth_is_counted_per_minute_from_the_tallies(pool: PgPool) {
    let store = store(&pool).await;
    let minutes: Vec<i32> = (0..200).collect();
    created_minutes_ago(&pool, &minutes).await;
    store.park(letter("payment", 1)).await.unwrap();
    let admin = dlq_core::admin::Admin::new(std::sync::Arc::new(store.clone()), "test");
    let growth = admin.stats(5).await.unwrap().growth;
    assert_eq!(growth.since_1h.timestamp() % 60, 0, "a minute's start: {growth:?}");
    assert_eq!(growth.since_1h + chrono::TimeDelta::minutes(55), growth.since_5m);
    let expected = (created_since(&pool, growth.since_5m).await, created_since(&pool, growth.since_1h).await);
    assert_eq!((growth.last_5m, growth.last_1h), expected);
    assert!((6..=7).contains(&expected.0) && (61..=62).contains(&expected.1), "{expected:?}");

    let unfolded: Vec<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
        "SELECT hour FROM dlq_parked_hours WHERE hour < now() - interval '3 hours' AND extract(minute FROM hour) <> 0",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(unfolded.is_empty(), "a backfill's older rows are counted per hour: {unfolded:?}");

    sqlx::query("DELETE FROM dlq_events").execute(&pool).await.unwrap();
    store.maintain().await.unwrap();
    let after = admin.stats(5).await.unwrap().growth;
    if after.since_5m == growth.since_5m {
        assert_eq!((after.last_5m, after.last_1h), (growth.last_5m, growth.last_1h), "a purged row was parked");
    }
    let stored: Vec<(chrono::DateTime<chrono::Utc>, i64)> =
        sqlx::query_as("SELECT hour, n FROM dlq_parked_hours ORDER BY hour").fetch_all(&pool).await.unwrap();
    assert_eq!(stored.iter().map(|r| r.1).sum::<i64>(), 201, "the fold keeps every park: {stored:?}");
    let cut = chrono::Utc::now() - chrono::TimeDelta::hours(2);
    let rounded = |t: chrono::DateTime<chrono::Utc>| t.timestamp() % 3600 == 0;
    assert!(stored.iter().filter(|r| r.0 < cut - chrono::TimeDelta::hours(1)).all(|r| rounded(r.0)), "{stored:?}");
    assert!(stored.iter().filter(|r| r.0 >= cut).any(|r| !rounded(r.0)), "minutes kept: {stored:?}");
}

/// Migration 0030 on a table parked by the previous release, whose tally holds parks per hour:
/// the last two hours are recounted per minute from the rows still there, and a row purged
/// before the upgrade stays counted on its hour, so every hour's total is unchanged.
#[sqlx::test(migrations = false)]
async fn an_upgrade_recounts_the_last_two_hours_per_minute(pool: PgPool) {
    dlq_sqlx::postgres::MIGRATOR.run_to(29, &pool).await.unwrap();
    let minutes: Vec<i32> = (0..300).step_by(3).collect();
    created_minutes_ago(&pool, &minutes).await;
    let purged: Vec<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
        "DELETE FROM dlq_events WHERE created_at > now() - interval '100 minutes' AND id % 2 = 0 RETURNING created_at",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(purged.len() >= 10, "{purged:?}");
    let hours = || async {
        let rows: Vec<(chrono::DateTime<chrono::Utc>, i64)> = sqlx::query_as(
            "SELECT date_bin('1 hour', hour, '1970-01-01 00:00:00+00'), sum(n)::int8 FROM dlq_parked_hours GROUP BY 1 ORDER BY 1",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        rows
    };
    let before = hours().await;
    assert_eq!(before.iter().map(|r| r.1).sum::<i64>(), 100);
    let store = store(&pool).await; // runs migration 0030
    assert_eq!(hours().await, before, "every hour's total is kept");
    let now = chrono::Utc::now().timestamp();
    let since = chrono::DateTime::from_timestamp(now - now.rem_euclid(60) - 80 * 60, 0).unwrap();
    let counted: u64 =
        store.created_histogram(since, Duration::from_secs(81 * 60), 1).await.unwrap().iter().map(|b| b.count).sum();
    // The purged rows are counted where they stay: on the start of their hour.
    let hour = |t: chrono::DateTime<chrono::Utc>| t.timestamp() - t.timestamp().rem_euclid(3600);
    let purged_in_window = purged.iter().filter(|t| hour(**t) >= since.timestamp()).count();
    assert_eq!(counted, created_since(&pool, since).await + u64::try_from(purged_in_window).unwrap());
}

/// Migration 0014: the hour a park is charted under is the UTC hour holding it (as 0010 defined
/// it, in any session time zone and before 1970), computed inline rather than by a SQL-function
/// call per parked row.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn the_hour_of_a_park_is_the_utc_hour_computed_inline(pool: PgPool) {
    let plan: Vec<String> =
        sqlx::query_scalar("EXPLAIN (VERBOSE, COSTS OFF) SELECT dlq_hour(created_at) FROM dlq_events")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(!plan.concat().contains("dlq_hour("), "not inlined: {plan:?}");
    let mut conn = pool.acquire().await.unwrap();
    for zone in ["UTC", "Asia/Kolkata", "America/St_Johns", "Europe/Berlin"] {
        sqlx::query(sqlx::AssertSqlSafe(format!("SET TIME ZONE '{zone}'"))).execute(&mut *conn).await.unwrap();
        let differ: Vec<String> = sqlx::query_scalar(
            "SELECT t::text FROM unnest($1::timestamptz[]) AS t
             WHERE dlq_hour(t) IS DISTINCT FROM to_timestamp(floor(extract(epoch FROM t) / 3600) * 3600)",
        )
        .bind(
            [
                "2026-03-29 00:59:59.999999+00",
                "2026-03-29 01:00:00+00",
                "2026-10-25 00:30:00+00",
                "2026-11-25 11:17:42.5+05:30",
                "2026-11-25 12:00:00+00",
                "1969-12-31 23:30:00+00",
                "1900-06-01 12:34:56+00",
            ]
            .map(|t| chrono::DateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S%.f%#z").unwrap().to_utc())
            .to_vec(),
        )
        .fetch_all(&mut *conn)
        .await
        .unwrap();
        assert!(differ.is_empty(), "{zone}: {differ:?}");
    }
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_batch_is_settled_and_the_next_claimed_in_one_statement(pool: PgPool) {
    let store = store(&pool).await;
    store.park_many((0..25).map(|n| letter("payment", n)).collect()).await.unwrap();
    let lease = Duration::from_secs(60);
    let first = claim(&store, &["payment"], 10).await;
    // A mixed batch (a success, a retry due at once, a dead end) plus a lease that no longer
    // holds its row: written, fenced, and the next ten claimed, none of them settled here.
    let expired = store.claim(request(&["payment"], 1, Duration::from_millis(1))).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut outcomes = mixed_outcomes(&first);
    outcomes.push(Settlement::Succeeded { lease: expired[0].lease });
    let (report, next) = store.settle_and_claim(outcomes, request(&["payment"], 10, lease)).await.unwrap();
    assert_eq!((report.applied, report.fenced.clone()), (10, vec![expired[0].lease.id]));
    let next = next.unwrap();
    assert_eq!(next.len(), 10);
    let settled: Vec<_> = first.iter().map(|c| c.id()).collect();
    assert!(next.iter().all(|c| !settled.contains(&c.id())), "a row settled here is not claimed here");
    for c in &next {
        let row = store.get(c.id()).await.unwrap().unwrap();
        assert_eq!((row.status, row.lease_owner.as_deref()), (Status::Processing, Some("test-retrier")));
        assert_eq!(*c, Claimed::of(&row, c.lease.token), "the claim carries the stored row's values");
    }
    assert_eq!(store.get(first[1].id()).await.unwrap().unwrap().status, Status::Pending);
    assert_eq!(store.get(first[2].id()).await.unwrap().unwrap().status, Status::FailedPermanently);
    let history = store.attempts(first[1].id()).await.unwrap();
    assert_eq!(history.iter().map(|a| a.outcome.as_str()).collect::<Vec<_>>(), ["failed", "retry"]);
    tallies_match_the_table(&store, &pool, "after a mixed batch and a claim").await;

    // Successes only, and a claim that finds the rest (the expired row and the retries).
    let successes = next.iter().map(|c| Settlement::Succeeded { lease: c.lease }).collect();
    let (report, rest) = store.settle_and_claim(successes, request(&["payment"], 50, lease)).await.unwrap();
    assert_eq!((report.applied, report.fenced.len()), (10, 0));
    let rest = rest.unwrap();
    assert_eq!(rest.len(), 25 - 10 - 10 + 3, "the rows not claimed yet and the 3 retries");
    tallies_match_the_table(&store, &pool, "after successes and a claim").await;

    // Nothing left to claim: the outcomes are still written.
    let successes = rest.iter().map(|c| Settlement::Succeeded { lease: c.lease }).collect();
    let (report, none) = store.settle_and_claim(successes, request(&["payment"], 50, lease)).await.unwrap();
    assert_eq!(report.applied, 8);
    assert!(none.unwrap().is_empty());
    let (report, none) = store.settle_and_claim(Vec::new(), request(&["payment"], 50, lease)).await.unwrap();
    assert_eq!(report, dlq_core::store::SettleReport::default());
    assert!(none.unwrap().is_empty());
    let dead = 3;
    assert_eq!(store.list(ListFilter::default().status(Status::Succeeded)).await.unwrap().len(), 25 - dead);
    tallies_match_the_table(&store, &pool, "after the last batch").await;
}

/// A park batch is one `dlq_park_letter[]` (migration 0016), whose OIDs the store looks up once.
/// A schema dropped and migrated again under a running store gets a new type OID; parks report
/// the error instead of storing anything wrong, and park again once the store has looked the
/// new OIDs up and prepared its statement again on that connection. At most two parks fail
/// here: one for the store's stale OIDs, and one on the connection whose prepared statement
/// still names them (which one comes first depends on the connection the pool hands out).
#[sqlx::test(migrations = false)]
async fn parks_go_on_after_the_schema_is_dropped_and_migrated_again(pool: PgPool) {
    let store = store_with(&pool, dlq_sqlx::postgres::PgConfig::default().schema("again")).await;
    store.park(letter("payment", 1)).await.unwrap();
    sqlx::query("DROP SCHEMA again CASCADE").execute(&pool).await.unwrap();
    dlq_sqlx::postgres::migrate(&pool, "again").await.unwrap();
    let mut outcomes = Vec::new();
    for n in 2..8 {
        outcomes.push(store.park(letter("payment", n)).await.map_err(|e| e.to_string()));
    }
    // The first parks after it may fail (its type's OID is gone), and say so; the rest park.
    assert!(outcomes[2..].iter().all(Result::is_ok), "{outcomes:#?}");
    let parked = outcomes.iter().filter(|o| o.is_ok()).count();
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM again.dlq_events").fetch_one(&pool).await.unwrap();
    assert_eq!(stored, parked as i64, "{outcomes:#?}");
}

/// `PgConfig::max_batch_bytes`: a park that would take a group-commit batch past the limit
/// waits for the next batch, and every park is stored. Each park statement appends one tally
/// row per (type, status, fingerprint), one here, counting its rows: the batches' sizes.
#[sqlx::test(migrations = false)]
async fn a_batch_byte_limit_splits_concurrent_parks_into_more_statements(pool: PgPool) {
    async fn batches(config: dlq_sqlx::postgres::PgConfig, pool: &PgPool, event_type: &str) -> Vec<i64> {
        let store = std::sync::Arc::new(store_with(pool, config).await);
        let parks: Vec<_> = (0..16)
            .map(|n| {
                let store = std::sync::Arc::clone(&store);
                let letter = letter(event_type, n);
                tokio::spawn(async move { store.park(letter).await })
            })
            .collect();
        for park in parks {
            park.await.unwrap().unwrap();
        }
        let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM dlq_events WHERE event_type = $1")
            .bind(event_type)
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(stored, 16);
        sqlx::query_scalar("SELECT n FROM dlq_tallies WHERE event_type = $1")
            .bind(event_type)
            .fetch_all(pool)
            .await
            .unwrap()
    }
    let config = dlq_sqlx::postgres::PgConfig::default;
    // A limit below any letter: each park alone.
    assert_eq!(batches(config().max_batch_bytes(1), &pool, "limited").await, vec![1; 16]);
    // Room for two of these letters (about 250 bytes each) but not three.
    let pairs = batches(config().max_batch_bytes(600), &pool, "pairs").await;
    assert!(pairs.iter().all(|&n| n <= 2) && pairs.contains(&2), "{pairs:?}");
    // The default, without TLS: one batch, or the first park then the other fifteen.
    let default = batches(config(), &pool, "default").await;
    assert!(default.len() <= 2, "{default:?}");
}

/// One `park_many` larger than the batch byte limit (over TLS, one TLS record) goes as several
/// park statements in one transaction: every letter gets its own row, in order; a dedupe key
/// repeated across pieces finds the first piece's row; and when one piece fails, nothing of
/// the call is stored.
#[sqlx::test(migrations = false)]
async fn a_park_many_past_the_byte_limit_goes_in_pieces_all_or_nothing(pool: PgPool) {
    let config = dlq_sqlx::postgres::PgConfig::default().max_batch_bytes(600);
    let store = store_with(&pool, config).await;
    let keyed = |n: i64| letter("pieces", n).with_dedupe_key("k");
    let letters: Vec<_> = (0..20).map(|n| if n == 2 || n == 17 { keyed(n) } else { letter("pieces", n) }).collect();
    let parked = store.park_many(letters).await.unwrap();
    assert_eq!(parked.len(), 20);
    assert!(parked[17].deduplicated && parked[17].id == parked[2].id, "{:?}", parked[17]);
    for (n, p) in parked.iter().enumerate().filter(|(n, _)| *n != 17) {
        assert!(!p.deduplicated);
        let row = store.get(p.id).await.unwrap().unwrap();
        assert_eq!(row.payload, Payload::Json(serde_json::json!({ "n": n })), "letter {n}");
    }
    // Each park statement appends one tally row (one key here) counting its rows.
    let pieces: Vec<i64> =
        sqlx::query_scalar("SELECT n FROM dlq_tallies WHERE event_type = 'pieces'").fetch_all(&pool).await.unwrap();
    assert!(pieces.len() > 5 && pieces.iter().all(|&n| n <= 2), "{pieces:?}");
    assert_eq!(pieces.iter().sum::<i64>(), 19);

    sqlx::raw_sql(
        "CREATE FUNCTION refuse_35() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.payload->>'n' = '35' THEN RAISE EXCEPTION 'letter 35 refused'; END IF; RETURN NEW; END $$;
         CREATE TRIGGER refuse_35 BEFORE INSERT ON dlq_events FOR EACH ROW EXECUTE FUNCTION refuse_35();",
    )
    .execute(&pool)
    .await
    .unwrap();
    let error = store.park_many((20..40).map(|n| letter("doomed", n)).collect()).await.unwrap_err();
    assert!(format!("{error:#}").contains("letter 35 refused"), "{error:#}");
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM dlq_events WHERE event_type = 'doomed'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, 0, "the pieces before the failed one were rolled back");
    // The writer goes on: the next park is stored.
    store.park(letter("after", 1)).await.unwrap();
}

/// A `park_many` in pieces that outlasts the park timeout: the caller gets `Timeout` (and must
/// treat it as not parked), but the transaction is not cut between its statements: it commits
/// whole, and no connection is handed back to the pool inside it. Each park statement is
/// slowed down by 10 ms (a statement trigger), so the 50 pieces take about 0.5 s against a
/// 300 ms timeout, however fast or loaded the machine.
#[sqlx::test(migrations = false)]
async fn a_park_many_in_pieces_that_times_out_is_stored_whole(pool: PgPool) {
    let config = dlq_sqlx::postgres::PgConfig::default().max_batch_bytes(600).park_timeout(Duration::from_millis(300));
    let store = store_with(&pool, config).await;
    slow_parks(&pool, 0.01).await;
    // The writer warmed up (its connection made, the byte limit chosen) within the timeout.
    let mut warm = false;
    for _ in 0..10 {
        if store.park(letter("warm", 0)).await.is_ok() {
            warm = true;
            break;
        }
    }
    assert!(warm, "a single park within 300 ms");
    // Keyed: a keyless batch this large goes through `COPY` instead (see the next test).
    let letters = (0..100).map(|n| letter("slow", n).with_dedupe_key(format!("slow/{n}"))).collect();
    let error = store.park_many(letters).await.unwrap_err();
    assert!(matches!(error, dlq_core::Error::Timeout(_)), "{error:?}");
    a_timed_out_park_is_stored_whole(&pool).await;
}

/// The names of the valid indexes of `dlq_events` that enforce a dedupe key.
async fn dedupe_indexes(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
         WHERE i.indrelid = 'dlq_events'::regclass AND i.indisunique AND i.indisvalid
           AND c.relname LIKE '%dedupe%' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// A table parked by the previous release (one row per dedupe key across every type) is
/// migrated in place: its rows keep their keys, a redelivery of a stored event still finds its
/// row, the same key under another type parks a row of its own, and only the new index is left.
#[sqlx::test(migrations = false)]
async fn a_table_of_the_previous_release_dedupes_per_event_type_once_migrated(pool: PgPool) {
    dlq_sqlx::postgres::MIGRATOR.run_to(16, &pool).await.unwrap();
    assert_eq!(dedupe_indexes(&pool).await, ["dlq_events_dedupe_key"]);
    sqlx::query(
        "INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, fingerprint, max_retries, dedupe_key)
         VALUES ('payment', '{\"n\": 1}', 'transient', 'io', 'ledger down', 'io: ledger down', 5, 'payments/3/42')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stored: i64 = sqlx::query_scalar("SELECT id FROM dlq_events").fetch_one(&pool).await.unwrap();
    let store = store(&pool).await; // runs migrations 0017 and 0018
    assert_eq!(dedupe_indexes(&pool).await, ["dlq_events_live_dedupe"]);
    let from = SourceMeta::kafka("payments", 3, 42);
    let again = store.park(letter("payment", 1).with_source(from.clone())).await.unwrap();
    assert_eq!((again.id, again.deduplicated), (stored, true));
    let receipt = store.park(letter("receipt", 1).with_source(from)).await.unwrap();
    assert!(!receipt.deduplicated && receipt.id != stored, "{receipt:?}");
}

/// Two rows of type `payment`, inserted as an earlier release's schema allows: a unique index
/// on the type then fails to build.
async fn two_payments(pool: &PgPool) {
    for n in 0..2 {
        sqlx::query(
            "INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, fingerprint, max_retries)
             VALUES ('payment', jsonb_build_object('n', $1::int), 'transient', 'io', 'down', 'io: down', 5)",
        )
        .bind(n)
        .execute(pool)
        .await
        .unwrap();
    }
}

/// The subject index (migration 0023) is built CONCURRENTLY too: an interrupted build is
/// dropped and built again, on the subject column, valid.
#[sqlx::test(migrations = false)]
async fn an_interrupted_subject_index_build_is_built_again(pool: PgPool) {
    dlq_sqlx::postgres::MIGRATOR.run_to(22, &pool).await.unwrap();
    two_payments(&pool).await;
    let failed = sqlx::query("CREATE UNIQUE INDEX CONCURRENTLY dlq_events_subject ON dlq_events (event_type)")
        .execute(&pool)
        .await;
    assert!(failed.is_err(), "a unique build over two rows of one type fails and leaves its index INVALID");
    store(&pool).await;
    let (valid, definition): (bool, String) = sqlx::query_as(
        "SELECT indisvalid, pg_get_indexdef(indexrelid) FROM pg_index WHERE indexrelid = 'dlq_events_subject'::regclass",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(valid && definition.contains("(subject) WHERE (subject IS NOT NULL)"), "{definition}");
}

/// Every dlq function that runs queries plans them with JIT off (migration 0029). On a big table
/// a generic plan's estimated cost passes `jit_above_cost`, and PostgreSQL compiled the claim
/// with LLVM on every call: 200 ms a claim at 10 million due rows, for a 1 ms walk.
/// `CREATE OR REPLACE FUNCTION` drops a function's settings, so a migration that rewrites one
/// must set it again, and a new function must choose: only the two one-line helpers that
/// PostgreSQL inlines (a `SET` would stop that) go without.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn every_dlq_function_that_queries_plans_without_jit(pool: PgPool) {
    let with_jit: Vec<String> = sqlx::query_scalar(
        "SELECT proname::text FROM pg_proc
         WHERE pronamespace = current_schema()::regnamespace AND proname LIKE 'dlq\\_%'
           AND NOT 'jit=off' = ANY(coalesce(proconfig, '{}'))
         ORDER BY proname",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(with_jit, ["dlq_hour", "dlq_minute", "dlq_tallied"]);
    let claim: Vec<String> =
        sqlx::query_scalar("SELECT unnest(proconfig) FROM pg_proc WHERE proname = 'dlq_claim_due'")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(claim.contains(&"jit=off".to_owned()) && claim.contains(&"enable_sort=off".to_owned()), "{claim:?}");
}

/// The purge's keyset index (migration 0027) is built CONCURRENTLY as well, and replaces the
/// one on `updated_at` alone (0028): an interrupted build is dropped and built again.
#[sqlx::test(migrations = false)]
async fn an_interrupted_finished_index_build_is_built_again_and_replaces_the_old_one(pool: PgPool) {
    dlq_sqlx::postgres::MIGRATOR.run_to(26, &pool).await.unwrap();
    two_payments(&pool).await;
    let failed = sqlx::query("CREATE UNIQUE INDEX CONCURRENTLY dlq_events_finished_at ON dlq_events (event_type)")
        .execute(&pool)
        .await;
    assert!(failed.is_err(), "a unique build over two rows of one type fails and leaves its index INVALID");
    store(&pool).await;
    let indexes: Vec<(String, bool, String)> = sqlx::query_as(
        "SELECT c.relname::text, i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index i
         JOIN pg_class c ON c.oid = i.indexrelid
         WHERE i.indrelid = 'dlq_events'::regclass AND c.relname LIKE 'dlq_events_finished%'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(indexes.len(), 1, "{indexes:?}");
    let (name, valid, definition) = &indexes[0];
    assert_eq!(name, "dlq_events_finished_at");
    assert!(*valid && definition.contains("(updated_at, id) WHERE"), "{definition}");
}

/// A concurrent index build that was interrupted leaves an INVALID index under the migration's
/// name, enforcing nothing; the next migration run drops it and builds the real one.
#[sqlx::test(migrations = false)]
async fn an_interrupted_concurrent_index_build_is_built_again(pool: PgPool) {
    dlq_sqlx::postgres::MIGRATOR.run_to(16, &pool).await.unwrap();
    two_payments(&pool).await;
    // A unique build over two rows of one type fails, and leaves its index INVALID.
    let failed = sqlx::query("CREATE UNIQUE INDEX CONCURRENTLY dlq_events_live_dedupe ON dlq_events (event_type)")
        .execute(&pool)
        .await;
    assert!(failed.is_err());
    let invalid: bool =
        sqlx::query_scalar("SELECT NOT indisvalid FROM pg_index WHERE indexrelid = 'dlq_events_live_dedupe'::regclass")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(invalid);
    let store = store(&pool).await;
    assert_eq!(dedupe_indexes(&pool).await, ["dlq_events_live_dedupe"]);
    let key = "payments/0/1";
    let first = store.park(letter("payment", 3).with_dedupe_key(key)).await.unwrap();
    let again = store.park(letter("payment", 3).with_dedupe_key(key)).await.unwrap();
    assert_eq!((again.id, again.deduplicated), (first.id, true));
}

/// Operations stored by the previous release (redrives and discards only) are kept when
/// `patch` joins the actions: the check is swapped online (added `NOT VALID`, then validated)
/// and ends valid, accepting a patch operation and refusing any other action.
#[sqlx::test(migrations = false)]
async fn operations_of_the_previous_release_are_kept_when_patch_joins_the_actions(pool: PgPool) {
    dlq_sqlx::postgres::MIGRATOR.run_to(18, &pool).await.unwrap();
    let insert = "INSERT INTO dlq_operations (action, spec, actor) VALUES ($1, '{}', 'alice') RETURNING id";
    let old: i64 = sqlx::query_scalar(insert).bind("redrive").fetch_one(&pool).await.unwrap();
    assert!(sqlx::query(insert).bind("patch").execute(&pool).await.is_err(), "not before the migration");
    let store = store(&pool).await; // runs migration 0019
    let valid: bool = sqlx::query_scalar(
        "SELECT convalidated FROM pg_constraint WHERE conname = 'dlq_operations_action_check' \
         AND conrelid = 'dlq_operations'::regclass",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(valid, "validated, not left NOT VALID");
    assert_eq!(store.operation(old).await.unwrap().unwrap().action, ActionKind::Redrive);
    let note = dlq_core::store::AuditNote::new("bob", "tag them");
    let patch = store.create_operation(ActionKind::Patch, serde_json::json!({}), note).await.unwrap();
    assert_eq!(store.operation(patch.id).await.unwrap().unwrap().action, ActionKind::Patch);
    assert!(sqlx::query(insert).bind("bogus").execute(&pool).await.is_err());
}

/// Letters for a bulk park, each filling the columns another way: JSON, raw and cut payloads,
/// dead and pending, NUL characters, source fields without a dedupe key, subjects, versions,
/// stack traces, delays.
fn varied_keyless_letters(count: u32) -> Vec<NewDeadLetter> {
    (0..count)
        .map(|n| {
            let mut failure = FailureInfo::new(
                if n % 4 == 3 { ErrorClass::Permanent } else { ErrorClass::Transient },
                "io::Error",
                format!("downstream 503 #{n}"),
                vec![format!("downstream 503 #{n}"), "reset".into()],
                (n % 3 == 0).then(|| format!("at f (src/lib.rs:{n})")),
            );
            let payload = match n % 5 {
                0 => Payload::Json(serde_json::json!({ "n": n, "lines": [1, 2, { "a": null }] })),
                1 => Payload::Raw { bytes: vec![0xff, 0x00, u8::try_from(n % 256).unwrap()], truncated: None },
                // Over the stores' 64-byte limit: stored cut, with the original's length and hash.
                2 => Payload::Json(serde_json::json!({ "n": n, "pad": "x".repeat(200) })),
                3 => Payload::Json(serde_json::json!({ "n": n, "nul": "a\u{0}b" })),
                _ => Payload::Json(serde_json::json!(n)),
            };
            if n % 5 == 4 {
                failure.reason = format!("nul \0 in the reason {n}");
            }
            let mut letter = NewDeadLetter::new(if n % 2 == 0 { "payment" } else { "refund" }, payload, failure)
                .with_handler(format!("app::handler_{}", n % 3))
                .retry(Duration::from_millis(u64::from(n) * 1_234), 5 + n);
            letter.version = 1 + n % 3;
            if n % 4 == 3 {
                letter.dead_reason = Some(DeadReason::Permanent);
            }
            if n % 6 == 1 {
                letter.source = SourceMeta { topic: Some(format!("orders\0{n}")), ..SourceMeta::default() };
                letter.source.partition = Some(i32::try_from(n).unwrap());
                letter.source.offset = Some(i64::from(n) * 1_000_000_007);
                letter.source.headers = BTreeMap::from([("k".to_owned(), format!("v{n}"))]);
                letter.source.trace_context = Some(format!("00-{n:032x}-00f067aa0ba902b7-01"));
            }
            if n % 7 == 2 {
                letter = letter.with_subject(dlq_core::store::SubjectHash::from_hex(format!("{n:064x}")).unwrap());
            }
            assert_eq!(letter.dedupe_key, None);
            letter
        })
        .collect()
}

/// Every column of a schema's rows in id order, the times as offsets from `created_at`.
async fn rows_of(pool: &PgPool, schema: &str) -> Vec<serde_json::Value> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT to_jsonb(e) - 'id' - 'created_at' - 'updated_at' - 'first_failed_at' - 'retry_after'
             || jsonb_build_object('due_in', (retry_after - created_at)::text,
                                   'times_agree', updated_at = created_at AND first_failed_at = created_at)
         FROM {schema}.dlq_events e ORDER BY id"
    )))
    .fetch_all(pool)
    .await
    .unwrap()
}

/// A schema's tallies and parked minutes, summed per key.
async fn tallies_of(pool: &PgPool, schema: &str) -> Vec<(String, String, String, i64, i64)> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT t.event_type, t.status, t.fingerprint, sum(t.n)::int8,
                (SELECT sum(n)::int8 FROM {schema}.dlq_parked_hours h WHERE h.event_type = t.event_type)
         FROM {schema}.dlq_tallies t GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
    )))
    .fetch_all(pool)
    .await
    .unwrap()
}

/// A `park_many` of many keyless letters goes through `COPY` (`pg/park_copy.rs`); small ones
/// through the park statement. Both store the same columns, tallies and parked minutes, and
/// answer each letter with its own row's id, in input order, and whether it was cut.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_bulk_park_by_copy_stores_what_the_park_statement_stores(pool: PgPool) {
    let copied = store_with(&pool, dlq_sqlx::PgConfig::default().max_payload_bytes(64)).await;
    let inserted = store_with(&pool, dlq_sqlx::PgConfig::default().schema("by_insert").max_payload_bytes(64)).await;
    let letters = varied_keyless_letters(150);
    let by_copy = copied.park_many(letters.clone()).await.unwrap();
    let mut by_insert = Vec::new();
    for few in letters.chunks(5) {
        by_insert.extend(inserted.park_many(few.to_vec()).await.unwrap());
    }
    let rows = rows_of(&pool, "public").await;
    assert_eq!(rows.len(), 150);
    assert_eq!(rows, rows_of(&pool, "by_insert").await);
    assert_eq!(tallies_of(&pool, "public").await, tallies_of(&pool, "by_insert").await);
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM dlq_events ORDER BY id").fetch_all(&pool).await.unwrap();
    assert_eq!(by_copy.iter().map(|p| p.id).collect::<Vec<_>>(), ids, "each letter's own row, in input order");
    let flags = |parked: &[dlq_core::store::Parked]| -> Vec<(bool, bool)> {
        parked.iter().map(|p| (p.deduplicated, p.truncated)).collect()
    };
    assert_eq!(flags(&by_copy), flags(&by_insert));
    assert_eq!(by_copy.iter().filter(|p| p.truncated).count(), 30);
    for (letter, parked) in letters.iter().zip(&by_copy).step_by(7) {
        let row = copied.get(parked.id).await.unwrap().unwrap();
        assert_eq!((row.event_type.as_str(), row.max_retries), (letter.event_type.as_str(), letter.max_retries));
        assert_eq!(copied.attempts(parked.id).await.unwrap().len(), 1, "attempt 0, the row's own failure");
    }
}

/// A bulk park by `COPY` wakes a waiting retrier (its `NOTIFY` goes out with its commit).
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_bulk_park_by_copy_wakes_a_waiting_retrier(pool: PgPool) {
    let store = store(&pool).await;
    let patience = Duration::from_secs(60);
    tokio::time::timeout(patience, store.wait_for_work(store.work_ticket(), Duration::from_secs(3600)))
        .await
        .expect("the listener starts and wakes its waiters");
    let letters: Vec<NewDeadLetter> = (0..100).map(|n| letter("payment", n)).collect();
    let woken = tokio::time::timeout(patience, async {
        tokio::join!(store.wait_for_work(store.work_ticket(), Duration::from_secs(3600)), store.park_many(letters))
    })
    .await;
    let ((), parked) = woken.expect("the bulk park woke the waiter");
    assert_eq!(parked.unwrap().len(), 100);
}

/// A bulk park by `COPY` that outlasts the park timeout: the caller gets `Timeout`, and the
/// transaction runs on to its commit, every letter stored, no connection left inside it. Each
/// statement that inserts is slowed down by 1 s (a statement trigger) against a 300 ms timeout.
#[sqlx::test(migrations = false)]
async fn a_bulk_park_by_copy_that_times_out_is_stored_whole(pool: PgPool) {
    let config = dlq_sqlx::postgres::PgConfig::default().park_timeout(Duration::from_millis(300));
    let store = store_with(&pool, config).await;
    slow_parks(&pool, 1.0).await;
    let error = store.park_many((0..100).map(|n| letter("slow", n)).collect()).await.unwrap_err();
    assert!(matches!(error, dlq_core::Error::Timeout(_)), "{error:?}");
    a_timed_out_park_is_stored_whole(&pool).await;
}

/// Waits (30 s at most) until the 100 letters of type `slow` whose park timed out are stored,
/// and checks that no connection was left inside their transaction.
async fn a_timed_out_park_is_stored_whole(pool: &PgPool) {
    let count = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM dlq_events WHERE event_type = 'slow'")
            .fetch_one(pool)
            .await
            .unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while count().await < 100 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(count().await, 100, "the park's transaction ran to its commit");
    let in_transaction: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(in_transaction, 0);
}

/// Inserts `n` rows created `ago` (an interval) before now, in one statement that the table's
/// triggers tally as any insert (a backfill's older rows land on their hour); their ids.
async fn insert_created(pool: &PgPool, ago: &str, n: i64) -> Vec<i64> {
    sqlx::query_scalar(
        "INSERT INTO dlq_events (event_type, payload, error_class, error_kind, error_reason, fingerprint, created_at)
         SELECT 'made', to_jsonb(g), 'transient', 'io', 'down', 'f', now() - $1::interval
         FROM generate_series(1, $2) AS g RETURNING id",
    )
    .bind(ago)
    .bind(n)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Gives the row `id` (alone in its tally bucket) the id `to`, and its bucket `first_id`.
async fn renumber(pool: &PgPool, id: i64, to: i64, first_id: Option<i64>) {
    sqlx::query("UPDATE dlq_events SET id = $2 WHERE id = $1").bind(id).bind(to).execute(pool).await.unwrap();
    sqlx::query("UPDATE dlq_parked_hours SET first_id = $2 WHERE first_id = $1")
        .bind(id)
        .bind(first_id)
        .execute(pool)
        .await
        .unwrap();
}

/// The ids a list of rows created from `ago` on returns (newest first), with the store's count
/// of them, by creation time alone and beside a status.
async fn listed_since(store: &dlq_sqlx::PgStore, pool: &PgPool, ago: &str) -> Vec<i64> {
    let since: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT now() - $1::interval").bind(ago).fetch_one(pool).await.unwrap();
    let filter = ListFilter::default().since(since).limit(100_000);
    let ids: Vec<i64> = store.list(filter.clone()).await.unwrap().iter().map(|l| l.id).collect();
    assert_eq!(store.count(filter.clone()).await.unwrap(), ids.len() as u64, "count since {ago}");
    let pending = store.count(filter.status(Status::Pending)).await.unwrap();
    assert_eq!(pending, ids.len() as u64, "count of pending rows since {ago}");
    ids
}

/// The rows the database holds created from `ago` on, newest first: what a filter must return.
async fn expected_since(pool: &PgPool, ago: &str) -> Vec<i64> {
    sqlx::query_scalar("SELECT id FROM dlq_events WHERE created_at >= now() - $1::interval ORDER BY id DESC")
        .bind(ago)
        .fetch_all(pool)
        .await
        .unwrap()
}

/// A filter on creation time walks the primary key from the first id a matching row can have
/// (migration 0051: each tally bucket keeps its smallest id; there is no created_at index). It
/// reads only the recent rows, and misses none: not a row created late with a small id, not
/// when a bucket does not know its first id (the previous release's parks), not when the
/// window reaches past the 31 days the buckets are kept.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_filter_on_creation_time_reads_from_the_first_id_that_can_match_and_misses_no_row(pool: PgPool) {
    let store = store(&pool).await;
    insert_created(&pool, "3 hours", 20_000).await;
    let recent = insert_created(&pool, "10 minutes", 10).await;
    let (counted, seq, fetched) =
        tuples_read_by(&pool, "SELECT dlq_count_created(now() - interval '1 hour', NULL, 1000000)").await;
    assert_eq!((counted, seq), (10, 0));
    assert!(fetched < 1_000, "a count of the last hour's 10 rows fetched {fetched} rows");
    let mut newest_first = recent.clone();
    newest_first.reverse();
    assert_eq!(listed_since(&store, &pool, "1 hour").await, newest_first);

    // A row created now but numbered before every other (ids are drawn when a row is
    // inserted, its created_at is its transaction's start), and one created long ago last.
    let early = insert_created(&pool, "0 seconds", 1).await[0];
    renumber(&pool, early, 0, Some(0)).await;
    insert_created(&pool, "5 hours", 1).await;
    for ago in ["1 hour", "4 hours", "6 hours", "0 seconds"] {
        assert_eq!(listed_since(&store, &pool, ago).await, expected_since(&pool, ago).await, "since {ago}");
    }
    assert!(listed_since(&store, &pool, "1 hour").await.contains(&0));
    assert_eq!(listed_since(&store, &pool, "-1 hour").await, Vec::<i64>::new(), "nothing is created in the future");

    // The fold keeps each bucket's first id; a bucket that does not know its own gives no bound.
    sqlx::query("SELECT dlq_fold_tallies()").execute(&pool).await.unwrap();
    assert_eq!(listed_since(&store, &pool, "1 hour").await, expected_since(&pool, "1 hour").await);
    // A row parked by the previous release, whose park statement writes no first id, and
    // numbered below every first id known.
    let unknown = insert_created(&pool, "0 seconds", 1).await[0];
    renumber(&pool, unknown, -1, None).await;
    let unknown: i64 =
        sqlx::query_scalar("SELECT dlq_first_id_since(now() - interval '1 hour')").fetch_one(&pool).await.unwrap();
    assert_eq!(unknown, i64::MIN);
    assert_eq!(listed_since(&store, &pool, "1 hour").await, expected_since(&pool, "1 hour").await);
    assert!(listed_since(&store, &pool, "1 hour").await.contains(&-1));
    sqlx::query("SELECT dlq_fold_tallies()").execute(&pool).await.unwrap();
    assert_eq!(listed_since(&store, &pool, "4 hours").await, expected_since(&pool, "4 hours").await);

    // A row older than the buckets kept: the fold has dropped its hour, and a window reaching
    // back to it walks the whole key.
    insert_created(&pool, "40 days", 1).await;
    sqlx::query("SELECT dlq_fold_tallies()").execute(&pool).await.unwrap();
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM dlq_parked_hours WHERE hour < now() - interval '31 days'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(kept, 0);
    let all = listed_since(&store, &pool, "41 days").await;
    assert_eq!(all.len(), 20_014);
    assert_eq!(all, expected_since(&pool, "41 days").await);

    // A chart's window the tallies do not answer (it starts off the minute) reads the same rows.
    let since: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT now() - interval '59 minutes 30 seconds'").fetch_one(&pool).await.unwrap();
    let buckets = store.created_histogram(since, Duration::from_secs(600), 6).await.unwrap();
    let charted: u64 = buckets.iter().filter(|b| b.event_type == "made").map(|b| b.count).sum();
    assert_eq!(charted, expected_since(&pool, "59 minutes 30 seconds").await.len() as u64);
}
