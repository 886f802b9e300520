//! The queue part ([`QueueStore`]): parking, dedupe, claims, settlements and wake-ups. These
//! tests need nothing but that part.

use super::*;

/// Every field of a parked JSON letter reads back as it was written.
pub async fn park_and_get<S: QueueStore + ?Sized>(s: &S) {
    let mut headers = BTreeMap::new();
    headers.insert("content-type".to_owned(), "application/json".to_owned());
    headers.insert("x-tenant".to_owned(), "ünïcødé ✓".to_owned());
    let source = SourceMeta {
        headers,
        trace_context: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        ..SourceMeta::kafka("payments", 3, 1_204_331)
    };
    let chain = vec!["hydration failed".to_owned(), "connection refused".to_owned()];
    let fail = FailureInfo::new(
        ErrorClass::Transient,
        "PaymentError::LedgerDown",
        "hydration failed".into(),
        chain,
        Some("at handle_payment (src/lib.rs:10)\nat main".into()),
    );
    let payload = Payload::Json(
        json!({ "id": 7, "amount": 10.5, "currency": "USD ", "tags": ["a", "b"], "nested": { "ok": true, "none": null } }),
    );
    let new = NewDeadLetter::new("payment", payload.clone(), fail.clone())
        .with_handler("shop::handle_payment")
        .with_source(source.clone())
        .retry(Duration::from_secs(30), 240);
    let parked = s.park(new).await.expect("park");
    assert!(!parked.deduplicated);
    let l = get(s, parked.id).await;
    assert_eq!((l.id, l.event_type.as_str(), l.handler.as_str()), (parked.id, "payment", "shop::handle_payment"));
    assert_eq!(l.payload, payload);
    assert_eq!(l.status, Status::Pending);
    assert_eq!(l.failure, fail);
    assert_eq!((l.retry_count, l.max_retries, l.redrive_count), (0, 240, 0));
    assert_gap(l.created_at, l.retry_after, Duration::from_secs(30));
    assert_eq!(l.dead_reason, None);
    assert_eq!((l.lease_owner, l.lease_until, l.last_attempt_at), (None, None, None));
    assert_eq!(l.dedupe_key.as_deref(), Some("payments/3/1204331"));
    assert_eq!(l.source, source);
    assert_eq!((l.updated_at, l.first_failed_at), (l.created_at, l.created_at));
    assert!(close(l.created_at, Utc::now(), Duration::from_secs(5)), "created_at is now");
    assert!(s.get(parked.id + 1000).await.expect("get").is_none());
}

/// Each row keeps the version of the event's contract its payload was written in, through
/// `park`, `park_many` and a claim; a letter that sets none is version 1.
pub async fn park_keeps_the_payload_version<S: QueueStore + ?Sized>(s: &S) {
    let unset = park(s, letter("payment", 0)).await;
    let v3 = park(s, letter("payment", 1).with_version(3)).await;
    let many = s
        .park_many(vec![letter("payment", 2).with_version(2), letter("payment", 3).with_version(u32::MAX >> 1)])
        .await
        .expect("park_many");
    let ids = [unset, v3, many[0].id, many[1].id];
    let mut versions = Vec::new();
    for id in ids {
        versions.push(get(s, id).await.version);
    }
    assert_eq!(versions, [1, 3, 2, u32::MAX >> 1]);
    let mut claimed: Vec<_> = claim(s, &["payment"], LONG).await.iter().map(|c| (c.id(), c.version)).collect();
    claimed.sort_unstable();
    assert_eq!(claimed, [(ids[0], 1), (ids[1], 3), (ids[2], 2), (ids[3], u32::MAX >> 1)]);
}

/// Raw payloads (not UTF-8, JSON with `\u0000`, truncated) read back byte for byte.
pub async fn park_raw_payloads<S: QueueStore + ?Sized>(s: &S) {
    let big: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    let payloads = [
        Payload::from_bytes(b"\xff\xfe not json \x00 at all"),
        Payload::from_bytes(br#"{"a":"nul \u0000 inside"}"#),
        Payload::from_bytes(&big).fit(100),
        Payload::Raw { bytes: Vec::new(), truncated: None },
    ];
    assert!(payloads[..2].iter().all(|p| matches!(p, Payload::Raw { truncated: None, .. })));
    assert!(payloads[2].is_truncated());
    for payload in payloads {
        let new = NewDeadLetter::new("raw", payload.clone(), failure("decode", "undecodable"));
        let id = park(s, new.dead(DeadReason::Undecodable)).await;
        let l = get(s, id).await;
        assert_eq!(l.payload, payload);
        assert_eq!(l.payload.is_truncated(), payload.is_truncated());
        // A cut payload is dead for being too large, whatever else was wrong with it.
        let reason = if payload.is_truncated() { DeadReason::TooLarge } else { DeadReason::Undecodable };
        assert_eq!(l.dead_reason, Some(reason));
    }
}

/// A 5 MB event (over the 1 MiB limits of brokers, under the store's) is stored whole and
/// retried: parking it is safe to acknowledge.
pub async fn park_large_payload_whole<S: QueueStore + ?Sized>(s: &S) {
    let text = "x".repeat(5 * 1024 * 1024);
    let payload = Payload::Json(json!({ "blob": text }));
    let parked = s.park(NewDeadLetter::new("payment", payload.clone(), failure("io", "down"))).await.expect("park");
    assert!(!parked.truncated);
    let l = get(s, parked.id).await;
    assert_eq!((l.status, l.payload.is_truncated()), (Status::Pending, false));
    assert_eq!(l.payload, payload);
    let claimed = s.claim(request(&["payment"], 10, LONG, "me")).await.expect("claim");
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].payload, payload);
}

/// A letter parked dead is `FAILED_PERMANENTLY` with its reason, and never claimed.
pub async fn park_dead_on_arrival<S: QueueStore + ?Sized>(s: &S) {
    let id = park(s, letter("payment", 1).dead(DeadReason::Permanent)).await;
    let l = get(s, id).await;
    assert_eq!((l.status, l.dead_reason), (Status::FailedPermanently, Some(DeadReason::Permanent)));
    assert!(claim(s, &["payment"], LONG).await.is_empty());
}

/// `park_many` returns one id per letter, in input order.
pub async fn park_many_keeps_order<S: QueueStore + ?Sized>(s: &S) {
    assert!(s.park_many(Vec::new()).await.expect("park_many").is_empty());
    let letters: Vec<_> = (0..5).map(|n| letter(if n % 2 == 0 { "even" } else { "odd" }, n)).collect();
    let parked = s.park_many(letters).await.expect("park_many");
    assert_eq!(parked.len(), 5);
    assert!(parked.windows(2).all(|w| w[0].id < w[1].id), "ids ascend in input order");
    for (n, p) in parked.iter().enumerate() {
        assert!(!p.deduplicated);
        assert_eq!(get(s, p.id).await.payload, Payload::Json(json!({ "n": n })));
    }
}

/// Only rows whose `retry_after` passed are claimed; the claim sets the lease.
pub async fn claim_takes_only_due_rows<S: QueueStore + ?Sized>(s: &S) {
    let due = park(s, letter("payment", 1)).await;
    park(s, letter("payment", 2).retry(Duration::from_secs(3600), 5)).await;
    park(s, letter("payment", 3).dead(DeadReason::Permanent)).await;
    let claimed = s.claim(request(&["payment"], 10, LONG, "host-a:1")).await.expect("claim");
    assert_eq!(ids(&claimed), vec![due]);
    let row = get(s, due).await;
    assert_eq!(claimed[0], Claimed::of(&row, claimed[0].lease.token), "the claim carries the stored row's values");
    assert_eq!((row.status, row.lease_owner.as_deref()), (Status::Processing, Some("host-a:1")));
    let (until, attempt) = (row.lease_until.expect("lease_until"), row.last_attempt_at.expect("last_attempt_at"));
    assert_gap(attempt, until, LONG);
    assert_eq!(row.updated_at, attempt);
    assert!(close(attempt, Utc::now(), Duration::from_secs(5)));
    assert!(claim(s, &["payment"], LONG).await.is_empty(), "a live lease is not claimed again");
}

/// Claims racing each other never hand out a row twice, and leave no due row behind.
pub async fn concurrent_claims_are_disjoint<S: QueueStore + ?Sized>(s: &S) {
    let letters: Vec<_> = (0..40).map(|n| letter("payment", n)).collect();
    let parked: BTreeSet<DlqId> = s.park_many(letters).await.expect("park_many").iter().map(|p| p.id).collect();
    let claims = (0..4).map(|n| s.claim(request(&["payment"], 15, LONG, &format!("worker-{n}"))));
    let mut seen = BTreeSet::new();
    for (n, claimed) in futures_util::future::join_all(claims).await.into_iter().enumerate() {
        for c in claimed.expect("claim") {
            assert!(seen.insert(c.lease.id), "row {} claimed twice", c.lease.id);
            let owner = get(s, c.lease.id).await.lease_owner;
            assert_eq!(owner, Some(format!("worker-{n}")), "the last claim holds the row");
        }
    }
    for c in claim(s, &["payment"], LONG).await {
        assert!(seen.insert(c.lease.id), "row {} claimed twice", c.lease.id);
    }
    assert_eq!(seen, parked, "every row claimed exactly once");
}

/// Only the requested event types are claimed; no types, no rows.
pub async fn claim_only_requested_types<S: QueueStore + ?Sized>(s: &S) {
    let a = park(s, letter("a", 1)).await;
    let b = park(s, letter("b", 2)).await;
    let c = park(s, letter("c", 3)).await;
    assert!(claim(s, &[], LONG).await.is_empty());
    assert!(claim(s, &["zzz"], LONG).await.is_empty());
    let mut got = ids(&claim(s, &["c", "a"], LONG).await);
    got.sort_unstable();
    assert_eq!(got, vec![a, c]);
    assert_eq!(get(s, b).await.status, Status::Pending);
}

/// Claims take at most `limit` rows, oldest `retry_after` first, then by id.
pub async fn claim_limit_and_order<S: QueueStore + ?Sized>(s: &S) {
    // Delays far above the time the parks take, so a loaded machine keeps the order.
    let late = park(s, letter("t", 1).retry(Duration::from_millis(1600), 5)).await;
    let first = park(s, letter("t", 2)).await;
    let middle = park(s, letter("t", 3).retry(Duration::from_millis(800), 5)).await;
    let ties = s.park_many(vec![letter("t", 4), letter("t", 5)]).await.expect("park_many");
    tokio::time::sleep(Duration::from_millis(1700)).await;
    assert!(s.claim(request(&["t"], 0, LONG, "x")).await.expect("claim").is_empty());
    let a = s.claim(request(&["t"], 2, LONG, "x")).await.expect("claim");
    let b = s.claim(request(&["t"], 2, LONG, "x")).await.expect("claim");
    let c = s.claim(request(&["t"], 2, LONG, "x")).await.expect("claim");
    assert_eq!(ids(&a), vec![first, ties[0].id]);
    assert_eq!(ids(&b), vec![ties[1].id, middle]);
    assert_eq!(ids(&c), vec![late]);
}

/// A claim of several event types gives each an equal share of its batch, the type's oldest
/// due rows; what a type cannot fill goes to the others. A backlog of one type, all of it due
/// before the other type's rows, does not hold those back.
pub async fn claim_shares_the_batch_among_event_types<S: QueueStore + ?Sized>(s: &S) {
    let backlog = s.park_many((0..10).map(|n| letter("payment", n)).collect()).await.expect("park_many");
    let backlog: Vec<DlqId> = backlog.iter().map(|p| p.id).collect();
    let refunds = s.park_many((0..3).map(|n| letter("refund", n)).collect()).await.expect("park_many");
    let refunds: Vec<DlqId> = refunds.iter().map(|p| p.id).collect();
    let first = s.claim(request(&["payment", "refund"], 4, LONG, "x")).await.expect("claim");
    let mut got = ids(&first);
    got.sort_unstable();
    assert_eq!(got, [backlog[0], backlog[1], refunds[0], refunds[1]], "two of each type, each its oldest");
    let second = s.claim(request(&["refund", "payment"], 6, LONG, "x")).await.expect("claim");
    let mut got = ids(&second);
    got.sort_unstable();
    let want = [&backlog[2..7], &refunds[2..]].concat();
    assert_eq!(got, want, "the refund left over gives its share to the payments");
    let claimed = s.claim(request(&["payment", "payment"], 10, LONG, "x")).await.expect("claim");
    assert_eq!(ids(&claimed), backlog[7..], "a type asked for twice is claimed once");
}

/// A lease that expired is claimed again, with a new token; a live one is not.
pub async fn claim_reclaims_expired_leases<S: QueueStore + ?Sized>(s: &S) {
    let id = park(s, letter("payment", 1)).await;
    let first = s.claim(request(&["payment"], 10, SHORT, "a")).await.expect("claim");
    assert_eq!(ids(&first), vec![id]);
    assert!(s.claim(request(&["payment"], 10, SHORT, "b")).await.expect("claim").is_empty());
    tokio::time::sleep(PAST_SHORT).await;
    let second = s.claim(request(&["payment"], 10, LONG, "b")).await.expect("claim");
    assert_eq!(ids(&second), vec![id]);
    assert_ne!(first[0].lease.token, second[0].lease.token, "a fresh token");
    assert_eq!(get(s, id).await.lease_owner.as_deref(), Some("b"));
    let stale = s.settle(vec![Settlement::Succeeded { lease: first[0].lease }]).await.expect("settle");
    assert_eq!((stale.applied, stale.fenced), (0, vec![id]));
    settle_ok(s, Settlement::Succeeded { lease: second[0].lease }).await;
    assert_eq!(get(s, id).await.status, Status::Succeeded);
}

/// `Succeeded` ends the row and clears the lease; the token is spent.
pub async fn settle_succeeded<S: QueueStore + ?Sized>(s: &S) {
    let id = park(s, letter("payment", 1)).await;
    let lease = claim_one(s, "payment").await;
    let before = get(s, id).await;
    settle_ok(s, Settlement::Succeeded { lease }).await;
    let l = get(s, id).await;
    assert_eq!((l.status, l.retry_count), (Status::Succeeded, 0));
    assert_eq!((l.lease_owner, l.lease_until), (None, None));
    assert_eq!((l.failure, l.last_attempt_at), (before.failure, before.last_attempt_at));
    assert!(l.updated_at >= before.updated_at);
    let again = s.settle(vec![Settlement::Succeeded { lease }]).await.expect("settle");
    assert_eq!((again.applied, again.fenced), (0, vec![id]), "a spent token is fenced");
    assert!(claim(s, &["payment"], LONG).await.is_empty());
}

/// `Retry` counts the attempt, records the failure, and is not due before its delay.
pub async fn settle_retry_not_due_until_delay<S: QueueStore + ?Sized>(s: &S) {
    let traced = FailureInfo::new(ErrorClass::Transient, "io", "first".into(), vec!["first".into()], Some("t".into()));
    let id = park(s, NewDeadLetter::new("payment", Payload::Json(json!(1)), traced)).await;
    let lease = claim_one(s, "payment").await;
    let second = failure("http", "503 from ledger");
    settle_ok(s, Settlement::Retry { lease, delay: PAST_SHORT, failure: second.clone() }).await;
    let l = get(s, id).await;
    assert_eq!((l.status, l.retry_count, l.dead_reason), (Status::Pending, 1, None));
    assert_eq!(l.failure, second, "the failure is replaced, stack trace included");
    assert_eq!((l.lease_owner, l.lease_until), (None, None));
    assert_gap(l.updated_at, l.retry_after, PAST_SHORT);
    assert!(claim(s, &["payment"], LONG).await.is_empty(), "not due before the delay");
    tokio::time::sleep(PAST_SHORT + Duration::from_millis(50)).await;
    let lease = claim_one(s, "payment").await;
    settle_ok(s, Settlement::Retry { lease, delay: Duration::ZERO, failure: second }).await;
    assert_eq!(get(s, id).await.retry_count, 2);
    assert_eq!(claim(s, &["payment"], LONG).await.len(), 1, "a zero delay is due at once");
}

/// `Dead` parks the row dead with its reason; `counts` decides whether it is a retry.
pub async fn settle_dead_counts<S: QueueStore + ?Sized>(s: &S) {
    let counted = park(s, letter("payment", 1)).await;
    let uncounted = park(s, letter("payment", 2)).await;
    let claimed = claim(s, &["payment"], LONG).await;
    assert_eq!(ids(&claimed), vec![counted, uncounted]);
    let last = failure("io", "still down");
    let permanent = FailureInfo::new(ErrorClass::Permanent, "undecodable", "missing field `id`".into(), vec![], None);
    let outcomes = vec![
        Settlement::Dead {
            lease: claimed[0].lease,
            reason: DeadReason::RetriesExhausted,
            failure: last.clone(),
            counts: true,
        },
        Settlement::Dead {
            lease: claimed[1].lease,
            reason: DeadReason::Undecodable,
            failure: permanent.clone(),
            counts: false,
        },
    ];
    let report = s.settle(outcomes).await.expect("settle");
    assert_eq!((report.applied, report.fenced), (2, vec![]));
    let (a, b) = (get(s, counted).await, get(s, uncounted).await);
    assert_eq!(
        (a.status, a.dead_reason, a.retry_count),
        (Status::FailedPermanently, Some(DeadReason::RetriesExhausted), 1)
    );
    assert_eq!((b.status, b.dead_reason, b.retry_count), (Status::FailedPermanently, Some(DeadReason::Undecodable), 0));
    assert_eq!((a.failure, b.failure), (last, permanent));
    assert_eq!((a.lease_until, b.lease_owner), (None, None));
    assert!(claim(s, &["payment"], LONG).await.is_empty());
}

/// Delays too large for any clock saturate (or are capped, at no less than 50 years): the row
/// is simply never due, and nothing fails.
pub async fn huge_delays_saturate<S: QueueStore + ?Sized>(s: &S) {
    let far = Utc::now() + chrono::Duration::days(365 * 50);
    let parked = park(s, letter("payment", 1).retry(Duration::MAX, 5)).await;
    assert!(get(s, parked).await.retry_after > far);
    let id = park(s, letter("payment", 2)).await;
    let lease = claim_one(s, "payment").await;
    settle_ok(s, Settlement::Retry { lease, delay: Duration::MAX, failure: failure("io", "x") }).await;
    assert!(get(s, id).await.retry_after > far);
    assert!(claim(s, &["payment"], LONG).await.is_empty());
    let due = park(s, letter("payment", 3)).await;
    let claimed = s.claim(request(&["payment"], 5, Duration::MAX, "x")).await.expect("claim");
    assert_eq!(ids(&claimed), vec![due]);
    assert!(get(s, due).await.lease_until.is_some_and(|until| until > far));
    settle_ok(s, Settlement::Succeeded { lease: claimed[0].lease }).await;
}

/// An outcome with a token that does not hold the row (stale, unknown, reused) writes nothing.
pub async fn settle_fences_stale_tokens<S: QueueStore + ?Sized>(s: &S) {
    let a = park(s, letter("payment", 1)).await;
    let b = park(s, letter("payment", 2)).await;
    let claimed = claim(s, &["payment"], LONG).await;
    let before = get(s, a).await;
    let forged = Lease { id: a, token: Uuid::new_v4() };
    let missing = Lease { id: b + 1000, token: Uuid::new_v4() };
    let outcomes = vec![
        Settlement::Succeeded { lease: forged },
        Settlement::Retry { lease: missing, delay: Duration::ZERO, failure: failure("io", "x") },
        Settlement::Succeeded { lease: claimed[1].lease },
    ];
    let report = s.settle(outcomes).await.expect("settle");
    assert_eq!(report.applied, 1);
    assert_eq!(report.fenced, vec![a, b + 1000], "fenced ids in input order");
    assert_eq!(get(s, a).await, before, "a fenced outcome changes nothing");
    assert_eq!(get(s, b).await.status, Status::Succeeded);
    assert!(s.settle(Vec::new()).await.expect("settle").fenced.is_empty());
    settle_ok(s, Settlement::Release { lease: claimed[0].lease }).await;
}

/// `wait_for_work` returns after a park made while it waits, not at its maximum (an hour,
/// far past the kit's patience).
pub async fn wait_for_work_wakes_on_park<S: QueueStore + ?Sized>(s: &S) {
    start_wakeups(s).await;
    let ticket = s.work_ticket();
    // `join!` polls the wait first: it is waiting when the park runs.
    let park_while_waiting =
        async { tokio::join!(s.wait_for_work(ticket, Duration::from_secs(3600)), park(s, letter("payment", 1))) };
    assert!(tokio::time::timeout(PATIENCE, park_while_waiting).await.is_ok(), "the park did not wake the wait");
}

/// A park announced between the ticket and the wait is not lost: a retrier takes the ticket
/// before its claim, and a park that commits after the claim looked wakes the wait that follows,
/// even when its announcement arrives first.
pub async fn wait_for_work_keeps_a_park_announced_before_the_wait<S: QueueStore + ?Sized>(s: &S) {
    start_wakeups(s).await;
    let ticket = s.work_ticket();
    park(s, letter("payment", 1)).await;
    // A store that relays its announcements (PostgreSQL's `NOTIFY`) may take a moment to see
    // it; its wait returns then. Its maximum is far past the patience: only the park ends it.
    let woken = tokio::time::timeout(PATIENCE, s.wait_for_work(ticket, Duration::from_secs(3600))).await;
    assert!(woken.is_ok(), "a park announced before the wait was lost");
}

/// `settle_and_claim` writes the outcomes as `settle` would (fencing a lease that no longer
/// holds its row) and claims the next batch as `claim` would, never twice the same row; with
/// nothing left to claim the outcomes are still written.
pub async fn settle_and_claim_writes_then_claims<S: QueueStore + ?Sized>(s: &S) {
    for n in 0..9 {
        park(s, letter("payment", n)).await;
    }
    let first = s.claim(request(&["payment"], 4, LONG, "conformance")).await.expect("claim");
    assert_eq!(first.len(), 4);
    let mut stale = first[0].lease;
    stale.token = Uuid::new_v4();
    let mut outcomes: Vec<Settlement> = first.iter().map(|c| Settlement::Succeeded { lease: c.lease }).collect();
    outcomes.push(Settlement::Succeeded { lease: stale });
    let (report, next) =
        s.settle_and_claim(outcomes, request(&["payment"], 4, LONG, "conformance")).await.expect("settle and claim");
    assert_eq!((report.applied, report.fenced.clone()), (4, vec![stale.id]), "the stale token is fenced");
    let next = next.expect("claim");
    assert_eq!(next.len(), 4);
    assert!(next.iter().all(|c| !ids(&first).contains(&c.id())), "settled rows are not claimed again");
    for c in &first {
        assert_eq!(get(s, c.id()).await.status, Status::Succeeded);
    }
    let outcomes = next
        .iter()
        .map(|c| Settlement::Retry { lease: c.lease, delay: Duration::from_secs(3600), failure: failure("io", "503") })
        .collect();
    let (report, last) =
        s.settle_and_claim(outcomes, request(&["payment"], 4, LONG, "conformance")).await.expect("settle and claim");
    assert_eq!(report.applied, 4);
    let last = last.expect("claim");
    assert_eq!(ids(&last).len(), 1, "the one row never claimed; the retries are not due");
    let done = vec![Settlement::Succeeded { lease: last[0].lease }];
    let (report, none) =
        s.settle_and_claim(done, request(&["payment"], 4, LONG, "conformance")).await.expect("settle and claim");
    assert_eq!(report.applied, 1);
    assert!(none.expect("claim").is_empty());
    assert_eq!(get(s, last[0].id()).await.status, Status::Succeeded);
}
