//! The reads ([`ReadStore`]): pages, attempts, stats, histograms and failure groups.

use super::*;

/// Every attempt is appended: the original failure as attempt 0, then one per settled retry.
pub async fn attempt_history<S: DeadLetterStore + ?Sized>(s: &S) {
    let id = park(s, letter("payment", 1)).await;
    let other = park(s, letter("payment", 2).dead(DeadReason::Permanent)).await;
    let lease = claim_one(s, "payment").await;
    settle_ok(s, Settlement::Retry { lease, delay: Duration::ZERO, failure: failure("http", "503") }).await;
    let lease = claim_one(s, "payment").await;
    settle_ok(s, Settlement::Release { lease }).await;
    let lease = claim_one(s, "payment").await;
    let fail = FailureInfo::new(ErrorClass::Permanent, "v", "bad".into(), vec![], None);
    settle_ok(s, Settlement::Dead { lease, reason: DeadReason::Permanent, failure: fail, counts: true }).await;
    assert_eq!(redrive(s, &[id], "ops").await, [id]);
    let lease = claim_one(s, "payment").await;
    settle_ok(s, Settlement::Succeeded { lease }).await;
    let history = s.attempts(id).await.expect("attempts");
    let summary: Vec<_> = history
        .iter()
        .map(|a| (a.dlq_id, a.attempt, a.outcome.as_str(), a.error_class.as_deref(), a.error_reason.as_deref()))
        .collect();
    let expected = vec![
        (id, 0, "failed", Some("transient"), Some("ledger down")),
        (id, 1, "retry", Some("transient"), Some("503")),
        (id, 2, "dead", Some("permanent"), Some("bad")),
        (id, 1, "succeeded", None, None),
    ];
    assert_eq!(summary, expected);
    assert_eq!(history[0].owner, None);
    assert!(history[1..].iter().all(|a| a.owner.as_deref() == Some("conformance")));
    assert!(history.windows(2).all(|w| w[0].at <= w[1].at), "oldest first");
    let dead_on_arrival = s.attempts(other).await.expect("attempts");
    assert_eq!((dead_on_arrival.len(), dead_on_arrival[0].error_class.as_deref()), (1, Some("transient")));
    assert!(s.attempts(other + 1000).await.expect("attempts").is_empty());
}

/// `list` applies every filter field and the limit, newest first, over rows in every status
/// (succeeded and in-flight rows included, which PostgreSQL keeps out of its operator indexes).
pub async fn list_filters_newest_first<S: DeadLetterStore + ?Sized>(s: &S) {
    let done = park(s, letter("payment", 0)).await;
    settle_ok(s, Settlement::Succeeded { lease: claim_one(s, "payment").await }).await;
    let held = park(s, letter("payment", 9)).await;
    claim_one(s, "payment").await;
    let a = park(s, letter("payment", 1).retry(Duration::from_secs(3600), 5)).await;
    let b = park(s, NewDeadLetter::new("refund", Payload::Json(json!(2)), failure("parse", "bad"))).await;
    let c = park(s, letter("payment", 3).dead(DeadReason::Permanent)).await;
    let list = |f: ListFilter| async move { s.list(f).await.expect("list").iter().map(|l| l.id).collect::<Vec<_>>() };
    assert_eq!(list(ListFilter::default()).await, vec![c, b, a, held, done]);
    assert_eq!(list(ListFilter::default().limit(2)).await, vec![c, b]);
    assert_eq!(list(ListFilter::default().limit(0)).await, Vec::<DlqId>::new());
    assert_eq!(list(ListFilter::default().event_type("payment")).await, vec![c, a, held, done]);
    assert_eq!(list(ListFilter::default().status(Status::FailedPermanently)).await, vec![c]);
    assert_eq!(list(ListFilter::default().status(Status::Succeeded)).await, vec![done]);
    assert_eq!(list(ListFilter::default().event_type("payment").status(Status::Processing)).await, vec![held]);
    assert_eq!(list(ListFilter::default().event_type("payment").status(Status::Pending)).await, vec![a]);
    let fp = get(s, a).await.failure.fingerprint;
    assert_eq!(list(ListFilter::default().fingerprint(&fp)).await, vec![c, a, held, done]);
    assert_eq!(list(ListFilter::default().fingerprint(&fp).status(Status::Succeeded)).await, vec![done]);
    assert_eq!(list(ListFilter::default().ids([a, b, 999_999])).await, vec![b, a]);
    assert_eq!(list(ListFilter::default().ids([a]).status(Status::Succeeded)).await, Vec::<DlqId>::new());
    let rows = s.list(ListFilter::default().ids([b])).await.expect("list");
    assert_eq!(rows, vec![get(s, b).await]);
}

/// `list` filters by error kind, reason substring and creation time too, and pages by keyset
/// (`after`) newest or oldest first; `count` counts what `list` lists, at most `limit`.
pub async fn list_keyset_pages_and_other_filters<S: DeadLetterStore + ?Sized>(s: &S) {
    let mut all = Vec::new();
    for n in 0..5 {
        let fail =
            FailureInfo::new(ErrorClass::Permanent, "BadCurrency", format!("currency USD{n} unknown"), vec![], None);
        all.push(
            park(s, NewDeadLetter::new("payment", Payload::Json(json!(n)), fail).dead(DeadReason::Permanent)).await,
        );
    }
    let refund = park(s, NewDeadLetter::new("refund", Payload::Json(json!(9)), failure("Timeout", "timed out"))).await;
    let list = |f: ListFilter| async move { s.list(f).await.expect("list").iter().map(|l| l.id).collect::<Vec<_>>() };
    assert_eq!(list(ListFilter::default().kind("Timeout")).await, [refund]);
    assert_eq!(list(ListFilter::default().reason_contains("USD3")).await, [all[3]]);
    assert_eq!(list(ListFilter::default().reason_contains("%")).await, Vec::<DlqId>::new(), "no LIKE matching");
    let hour = chrono::TimeDelta::hours(1);
    let now = Utc::now();
    assert_eq!(list(ListFilter::default().since(now - hour)).await.len(), 6);
    assert!(list(ListFilter::default().until(now - hour)).await.is_empty());
    assert!(list(ListFilter::default().since(now + hour)).await.is_empty());

    let payments = ListFilter::default().event_type("payment").limit(2);
    assert_eq!(list(payments.clone()).await, [all[4], all[3]]);
    assert_eq!(list(payments.clone().after(all[3])).await, [all[2], all[1]]);
    assert_eq!(list(payments.after(all[1])).await, [all[0]]);
    assert_eq!(list(ListFilter::default().oldest_first().after(all[1]).limit(2)).await, [all[2], all[3]]);
    assert_eq!(list(ListFilter::default().oldest_first().after(refund)).await, Vec::<DlqId>::new());

    assert_eq!(s.count(ListFilter::default().limit(usize::MAX)).await.expect("count"), 6);
    assert_eq!(s.count(ListFilter::default().limit(4)).await.expect("count"), 4, "a bounded count");
    assert_eq!(s.count(ListFilter::default().event_type("refund")).await.expect("count"), 1);
    assert_eq!(s.count(ListFilter::default().status(Status::Pending).kind("Timeout")).await.expect("count"), 1);
}

/// `stats` counts rows by event type and status, ordered by type then lifecycle.
pub async fn stats_counts<S: DeadLetterStore + ?Sized>(s: &S) {
    assert!(s.stats().await.expect("stats").is_empty());
    for n in 0..3 {
        park(s, letter("payment", n)).await;
    }
    park(s, letter("payment", 9).dead(DeadReason::Permanent)).await;
    park(s, letter("refund", 1).dead(DeadReason::NoHandler)).await;
    park(s, letter("audit", 1)).await;
    claim_one(s, "audit").await;
    let lease = s.claim(request(&["payment"], 1, LONG, "x")).await.expect("claim")[0].lease;
    settle_ok(s, Settlement::Succeeded { lease }).await;
    let stats = s.stats().await.expect("stats");
    let due: Vec<_> = stats.iter().filter(|r| r.oldest_due.is_some()).map(|r| (&*r.event_type, r.status)).collect();
    assert_eq!(due, [("payment", Status::Pending)], "only pending rows that are due have an oldest due time");
    let in_the_past = |t: DateTime<Utc>| t <= Utc::now() + ROUNDING && Utc::now() - t < chrono::Duration::minutes(1);
    assert!(stats.iter().filter_map(|r| r.oldest_due).all(in_the_past), "{stats:?}");
    let row = |t: &str, status, count| StatsRow { event_type: t.to_owned(), status, count, oldest_due: None };
    assert_eq!(
        stats.into_iter().map(|r| StatsRow { oldest_due: None, ..r }).collect::<Vec<_>>(),
        vec![
            row("audit", Status::Processing, 1),
            row("payment", Status::Pending, 2),
            row("payment", Status::Succeeded, 1),
            row("payment", Status::FailedPermanently, 1),
            row("refund", Status::FailedPermanently, 1),
        ]
    );
}

/// `created_histogram` counts rows per type and bucket of creation time, within its window.
pub async fn created_histogram_buckets<S: DeadLetterStore + ?Sized>(s: &S) {
    // Three buckets of 10 minutes, the last one from 5 minutes ago to 5 minutes from now.
    let start = Utc::now() - chrono::TimeDelta::minutes(25);
    let step = Duration::from_secs(600);
    assert!(s.created_histogram(start, step, 3).await.expect("histogram").is_empty());
    for n in 0..3 {
        park(s, letter("payment", n)).await;
    }
    park(s, letter("refund", 1).dead(DeadReason::Permanent)).await;
    // One row in flight and one succeeded: every row counts where it was created.
    let one = || async { s.claim(request(&["payment"], 1, LONG, "conformance")).await.expect("claim")[0].lease };
    settle_ok(s, Settlement::Succeeded { lease: one().await }).await;
    one().await;
    let window = ListFilter { since: Some(start), ..ListFilter::default() };
    assert_eq!(s.count(window).await.expect("count"), 4, "rows created since the window's start");
    let mut buckets = s.created_histogram(start, step, 3).await.expect("histogram");
    buckets.sort_by(|a, b| a.event_type.cmp(&b.event_type));
    let found: Vec<_> = buckets.iter().map(|b| (b.event_type.as_str(), b.bucket, b.count)).collect();
    assert_eq!(found, [("payment", 2, 3), ("refund", 2, 1)], "every row created now is in the last bucket");
    let before = s.created_histogram(start - chrono::TimeDelta::hours(1), step, 3).await.expect("histogram");
    assert!(before.is_empty(), "nothing was created an hour before: {before:?}");
    assert!(s.created_histogram(start, Duration::ZERO, 3).await.is_err(), "a zero step is an error");
}

/// `groups` groups pending and dead rows by fingerprint and type, largest group first.
pub async fn groups_by_fingerprint<S: DeadLetterStore + ?Sized>(s: &S) {
    let timeout = |ms: u32| failure("io", &format!("timeout after {ms} ms"));
    for ms in [100, 250, 3000] {
        park(s, NewDeadLetter::new("payment", Payload::Json(json!(ms)), timeout(ms))).await;
    }
    park(s, NewDeadLetter::new("payment", Payload::Json(json!(1)), timeout(7)).dead(DeadReason::Permanent)).await;
    park(s, NewDeadLetter::new("refund", Payload::Json(json!(1)), timeout(5))).await;
    park(s, NewDeadLetter::new("payment", Payload::Json(json!(2)), failure("parse", "bad currency"))).await;
    let done = park(s, NewDeadLetter::new("audit", Payload::Json(json!(3)), timeout(1))).await;
    settle_ok(s, Settlement::Succeeded { lease: claim_one(s, "audit").await }).await;
    assert_eq!(get(s, done).await.status, Status::Succeeded);
    let groups = s.groups(ListFilter::default()).await.expect("groups");
    let fp = timeout(1).fingerprint;
    let summary: Vec<_> = groups.iter().map(|g| (g.event_type.as_str(), g.kind.as_str(), g.count)).collect();
    assert_eq!(summary[0], ("payment", "io", 4));
    assert_eq!(summary.len(), 3);
    assert!(summary[1..].contains(&("refund", "io", 1)) && summary[1..].contains(&("payment", "parse", 1)));
    assert_eq!((groups[0].fingerprint.as_str(), groups[0].kind.as_str()), (fp.as_str(), "io"));
    assert!(groups[0].sample_reason.starts_with("timeout after "), "{}", groups[0].sample_reason);
    assert!(groups[0].first_seen <= groups[0].last_seen);
    let sample = get(s, groups[0].sample_id).await;
    assert_eq!((sample.event_type.as_str(), sample.failure.fingerprint), ("payment", fp.clone()), "a row of the group");
    let refunds = s.groups(ListFilter::default().event_type("refund")).await.expect("groups");
    assert_eq!((refunds.len(), refunds[0].sample_reason.as_str()), (1, "timeout after 5 ms"));
    assert_eq!(s.groups(ListFilter::default().limit(1)).await.expect("groups").len(), 1);
    let dead = s.groups(ListFilter::default().status(Status::FailedPermanently)).await.expect("groups");
    assert_eq!(dead.iter().map(|g| g.count).collect::<Vec<_>>(), vec![1]);
    assert!(s.groups(ListFilter::default().status(Status::Succeeded)).await.expect("groups").is_empty());
}

/// A dedupe key is unique per event type: two handlers failing on one source event (fan-out)
/// get a row each, holding their own type and event; a redelivery to each finds its own row.
pub async fn dedupe_is_per_event_type<S: DeadLetterStore + ?Sized>(s: &S) {
    let from = SourceMeta::kafka("payments", 3, 42);
    let payment = s.park(letter("payment", 1).with_source(from.clone())).await.expect("park");
    let receipt = s.park(letter("receipt", 2).with_source(from.clone())).await.expect("park");
    assert!(!payment.deduplicated && !receipt.deduplicated && payment.id != receipt.id, "{payment:?} {receipt:?}");
    let (p, r) = (get(s, payment.id).await, get(s, receipt.id).await);
    assert_eq!((p.event_type.as_str(), p.payload), ("payment", Payload::Json(json!({ "n": 1 }))));
    assert_eq!((r.event_type.as_str(), r.payload), ("receipt", Payload::Json(json!({ "n": 2 }))));
    // Redelivered to each handler: each finds its own row, no third row.
    for (event_type, n, first) in [("receipt", 2, receipt.id), ("payment", 1, payment.id)] {
        let again = s.park(letter(event_type, n).with_source(from.clone())).await.expect("park");
        assert_eq!((again.id, again.deduplicated), (first, true), "{event_type}");
    }
    // The same in one batch: the key under two types is two rows, the repeat a duplicate.
    let key = "orders/0/7";
    let batch = vec![
        letter("payment", 3).with_dedupe_key(key),
        letter("receipt", 4).with_dedupe_key(key),
        letter("payment", 5).with_dedupe_key(key),
    ];
    let parked = s.park_many(batch).await.expect("park_many");
    assert_eq!(parked.iter().map(|p| p.deduplicated).collect::<Vec<_>>(), [false, false, true]);
    assert_eq!(parked[2].id, parked[0].id);
    assert_eq!(get(s, parked[1].id).await.event_type, "receipt");
    assert_eq!(s.list(ListFilter::default()).await.expect("list").len(), 4);
}

/// A second park with a stored dedupe key returns the first id and changes nothing.
pub async fn dedupe_returns_first_id<S: DeadLetterStore + ?Sized>(s: &S) {
    let first = s.park(letter("payment", 1).with_dedupe_key("payments/0/17")).await.expect("park");
    let again = s.park(letter("payment", 2).with_dedupe_key("payments/0/17")).await.expect("park");
    assert_eq!(
        (first.deduplicated, again),
        (false, crate::store::Parked { id: first.id, deduplicated: true, truncated: false })
    );
    assert_eq!(get(s, first.id).await.payload, Payload::Json(json!({ "n": 1 })));
    let batch = vec![
        letter("payment", 3).with_source(SourceMeta::kafka("payments", 1, 5)),
        letter("payment", 4).with_dedupe_key("payments/0/17"),
        letter("payment", 5).with_source(SourceMeta::kafka("payments", 1, 5)),
        letter("payment", 6),
    ];
    let parked = s.park_many(batch).await.expect("park_many");
    assert_eq!(parked.iter().map(|p| p.deduplicated).collect::<Vec<_>>(), [false, true, true, false]);
    assert_eq!((parked[1].id, parked[2].id), (first.id, parked[0].id));
    assert_eq!(s.list(ListFilter::default()).await.expect("list").len(), 3);
    assert_eq!(s.attempts(first.id).await.expect("attempts").len(), 1, "no attempt for a deduplicated park");
}

/// `Release` puts the row back, due at once, without counting or recording an attempt.
pub async fn settle_release<S: DeadLetterStore + ?Sized>(s: &S) {
    let id = park(s, letter("payment", 1).retry(Duration::ZERO, 3)).await;
    let lease = claim_one(s, "payment").await;
    settle_ok(s, Settlement::Release { lease }).await;
    let l = get(s, id).await;
    assert_eq!((l.status, l.retry_count, l.lease_owner, l.lease_until), (Status::Pending, 0, None, None));
    assert_eq!(l.retry_after, l.updated_at, "due at once");
    assert_eq!(s.attempts(id).await.expect("attempts").len(), 1, "only the original failure");
    assert_eq!(ids(&claim(s, &["payment"], LONG).await), vec![id]);
}

/// Two outcomes for one lease in one batch: the first is written, the second is fenced (the
/// token is spent), and the report says so.
pub async fn settle_same_lease_twice_first_wins<S: DeadLetterStore + ?Sized>(s: &S) {
    let id = park(s, letter("payment", 1)).await;
    let lease = claim_one(s, "payment").await;
    let dead = failure("io", "second outcome");
    let outcomes = vec![
        Settlement::Succeeded { lease },
        Settlement::Dead { lease, reason: DeadReason::Permanent, failure: dead, counts: true },
    ];
    let report = s.settle(outcomes).await.expect("settle");
    assert_eq!((report.applied, report.fenced), (1, vec![id]));
    let l = get(s, id).await;
    assert_eq!((l.status, l.retry_count, l.dead_reason), (Status::Succeeded, 0, None), "the first outcome is written");
    let outcomes: Vec<_> = s.attempts(id).await.expect("attempts").into_iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, ["failed", "succeeded"]);
}

/// A `Repeated` outcome writes each earlier failure as a counted retry, appended to the
/// history in order before the final attempt, and then its final outcome; the row keeps the
/// latest failure; a fenced one writes nothing. `settle_and_claim` writes it the same way.
pub async fn settle_repeated_attempts<S: DeadLetterStore + ?Sized>(s: &S) {
    let rows = [
        park(s, letter("payment", 1)).await,
        park(s, letter("payment", 2)).await,
        park(s, letter("payment", 3)).await,
        park(s, letter("payment", 4)).await,
    ];
    let [ok, again, released, forged_row] = rows;
    let claimed = claim(s, &["payment"], LONG).await;
    assert_eq!(ids(&claimed), rows);
    let (first, second, third) = (failure("io", "timed out"), failure("http", "503"), failure("http", "502"));
    let mut forged = claimed[3].lease;
    forged.token = Uuid::new_v4();
    let hour = Duration::from_secs(3600);
    let retry = Settlement::Retry { lease: claimed[1].lease, delay: hour, failure: third.clone() };
    let outcomes = vec![
        Settlement::repeated(vec![first.clone()], Settlement::Succeeded { lease: claimed[0].lease }),
        Settlement::repeated(vec![first.clone(), second.clone()], retry),
        Settlement::repeated(vec![second.clone()], Settlement::Release { lease: claimed[2].lease }),
        Settlement::repeated(vec![first.clone()], Settlement::Succeeded { lease: forged }),
    ];
    let report = s.settle(outcomes).await.expect("settle");
    assert_eq!((report.applied, report.fenced), (3, vec![forged_row]));
    let l = get(s, ok).await;
    assert_eq!((l.status, l.retry_count, &l.failure), (Status::Succeeded, 1, &first), "the earlier failure is kept");
    let l = get(s, again).await;
    assert_eq!((l.status, l.retry_count, &l.failure), (Status::Pending, 3, &third));
    assert_gap(l.updated_at, l.retry_after, hour);
    let l = get(s, released).await;
    assert_eq!((l.status, l.retry_count, &l.failure), (Status::Pending, 1, &second), "a release counts nothing more");
    assert_eq!(l.retry_after, l.updated_at, "due at once");
    let l = get(s, forged_row).await;
    assert_eq!((l.status, l.retry_count), (Status::Processing, 0), "the fenced outcome wrote nothing");
    // The forged row's real lease, through settle_and_claim: written, and `released` claimed.
    let dead = Settlement::Dead {
        lease: claimed[3].lease,
        reason: DeadReason::RetriesExhausted,
        failure: first.clone(),
        counts: true,
    };
    let outcomes = vec![Settlement::repeated(vec![third.clone()], dead)];
    let (report, next) =
        s.settle_and_claim(outcomes, request(&["payment"], 4, LONG, "conformance")).await.expect("settle and claim");
    assert_eq!((report.applied, ids(&next.expect("claim"))), (1, vec![released]));
    let l = get(s, forged_row).await;
    assert_eq!(
        (l.status, l.dead_reason, l.retry_count),
        (Status::FailedPermanently, Some(DeadReason::RetriesExhausted), 2)
    );
    let mut histories = Vec::new();
    for id in rows {
        let attempts = s.attempts(id).await.expect("attempts");
        assert!(attempts[1..].iter().all(|a| a.owner.as_deref() == Some("conformance")), "{attempts:?}");
        let summary: Vec<(u32, String, Option<String>)> =
            attempts.into_iter().skip(1).map(|a| (a.attempt, a.outcome, a.error_reason)).collect();
        histories.push(summary);
    }
    let a = |n: u32, outcome: &str, reason: Option<&str>| (n, outcome.to_owned(), reason.map(str::to_owned));
    assert_eq!(
        histories,
        [
            vec![a(1, "retry", Some("timed out")), a(2, "succeeded", None)],
            vec![a(1, "retry", Some("timed out")), a(2, "retry", Some("503")), a(3, "retry", Some("502"))],
            vec![a(1, "retry", Some("503"))],
            vec![a(1, "retry", Some("502")), a(2, "dead", Some("timed out"))],
        ]
    );
}

/// An outcome presented after its lease expired writes nothing, even if nobody reclaimed
/// the row.
pub async fn settle_fences_expired_leases<S: DeadLetterStore + ?Sized>(s: &S) {
    let id = park(s, letter("payment", 1)).await;
    let claimed = s.claim(request(&["payment"], 1, SHORT, "slow")).await.expect("claim");
    tokio::time::sleep(PAST_SHORT).await;
    let report = s.settle(vec![Settlement::Succeeded { lease: claimed[0].lease }]).await.expect("settle");
    assert_eq!((report.applied, report.fenced), (0, vec![id]));
    let l = get(s, id).await;
    assert_eq!((l.status, l.lease_owner.as_deref()), (Status::Processing, Some("slow")));
    assert_eq!(s.attempts(id).await.expect("attempts").len(), 1);
    assert_eq!(ids(&claim(s, &["payment"], LONG).await), vec![id], "the expired lease is reclaimable");
}
