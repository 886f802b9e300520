//! Privacy ([`PrivacyStore`]): erasure, sealed rows, reveals.

use super::*;

/// `erase` deletes every row stored under one subject hash, in every status (one being
/// retried too), with its attempts and audit entries, in `park` and `park_many` alike; it keeps
/// other subjects' rows and rows without a subject, frees the dedupe keys, and records the
/// erasure with the hash's prefix, the counts and the note, newest first.
pub async fn erase_by_subject<S: DeadLetterStore + ?Sized>(s: &S) {
    use crate::subject::{Count, EraseRequest, SubjectKey};
    let key = SubjectKey::new([42; 32]).expect("key");
    let (who, other) = (key.hash("customer-42"), key.hash("customer-7"));
    let mine = |n| letter("payment", n).with_subject(who.clone());
    let pending = park(s, mine(1).with_dedupe_key("k-1")).await;
    let dead = park(s, mine(2).dead(DeadReason::Permanent)).await;
    let batch = s.park_many(vec![mine(3), letter("payment", 4).with_subject(other.clone())]).await.expect("park_many");
    let (claimed, theirs) = (batch[0].id, batch[1].id);
    let nobody = park(s, letter("payment", 5)).await;
    assert_eq!(discard(s, &[dead], "ops").await, [dead], "an audited row");
    let claimed_now = s.claim(request(&["payment"], 100, LONG, "conformance")).await.expect("claim");
    let retried = claimed_now.iter().find(|c| c.id() == theirs).expect("their row claimed").lease;
    let retry = Settlement::Retry { lease: retried, delay: Duration::ZERO, failure: failure("io", "again") };
    settle_ok(s, retry).await;
    assert!(ids(&claimed_now).contains(&claimed), "a row being retried is erased too");

    assert_eq!(s.count_subject(who.clone()).await.expect("count_subject"), 3, "what an erasure would delete");
    assert_eq!(s.count_subject(key.hash("nobody")).await.expect("count_subject"), 0);
    let erased = s.erase(EraseRequest::new(who.clone(), AuditNote::new("alice", "GDPR request 118"))).await;
    let erased = erased.expect("erase");
    // Attempt 0 of each row, unless the store keeps it in the row itself (PostgreSQL).
    assert_eq!((erased.rows, erased.audit), (Count::Of(3), Count::Of(1)));
    assert!(matches!(erased.attempts, Count::Of(0 | 3)), "attempts erased: {}", erased.attempts);
    assert_eq!(s.count_subject(who.clone()).await.expect("count_subject"), 0);
    assert_eq!((erased.subject_prefix.as_str(), erased.actor.as_str()), (who.prefix(), "alice"));
    assert_eq!(erased.reason, "GDPR request 118");
    for id in [pending, dead, claimed] {
        assert!(s.get(id).await.expect("get").is_none(), "row {id} erased");
        assert!(s.attempts(id).await.expect("attempts").is_empty() && s.audit(id).await.expect("audit").is_empty());
    }
    for id in [theirs, nobody] {
        assert!(s.get(id).await.expect("get").is_some(), "row {id} kept");
    }
    let again = s.park(mine(6).with_dedupe_key("k-1")).await.expect("park");
    assert!(!again.deduplicated, "an erased row's dedupe key is free");
    let twice = s.erase(EraseRequest::new(who, AuditNote::new("bob", "second request"))).await.expect("erase");
    assert_eq!((twice.rows, twice.audit), (Count::Of(1), Count::Of(0)));
    assert_eq!(s.attempts(theirs).await.expect("attempts").len(), 2, "their row's history is kept");
    let records = s.erasures(10).await.expect("erasures");
    assert_eq!(records.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>(), ["second request", "GDPR request 118"]);
    assert!(records[0].id > records[1].id && records[0].at >= records[1].at);
    assert_eq!(s.erasures(1).await.expect("erasures").len(), 1, "the limit");
}

/// `subject_key_check` keeps the first check value it is given and returns it to every later
/// call, whatever value that call brings (an erasure then tells a wrong key from a subject
/// without rows).
pub async fn subject_key_check_keeps_the_first<S: DeadLetterStore + ?Sized>(s: &S) {
    use crate::subject::SubjectKey;
    let (first, other) = (SubjectKey::new([42; 32]).expect("key"), SubjectKey::new([7; 32]).expect("key"));
    assert_eq!(s.subject_key_check(first.check()).await.expect("check"), first.check(), "kept");
    assert_eq!(s.subject_key_check(first.check()).await.expect("check"), first.check(), "the same again");
    assert_eq!(s.subject_key_check(other.check()).await.expect("check"), first.check(), "another is not kept");
    assert_eq!(s.subject_key_check(first.check()).await.expect("check"), first.check());
}

/// Sealed rows (`encrypt = true`): nothing the store answers holds the plaintext (rows,
/// lists, groups, attempts, audit entries, claims), a retry's sealed failure is kept as
/// written, and the claimed payload opens to the event, bit for bit, through to `SUCCEEDED`.
pub async fn sealed_rows_keep_no_plaintext<S: DeadLetterStore + ?Sized>(s: &S) {
    let (ring, _) = rings();
    let id = park(s, sealed_letter(&ring, "payment", 7)).await;
    let lease = claim_one(s, "payment").await;
    let again = crate::sealed::seal_failure(&ring, "payment", failure("Declined", &format!("again {SEALED_MARKER}")));
    let again = again.expect("sealed");
    settle_ok(s, Settlement::Retry { lease, delay: Duration::ZERO, failure: again.clone() }).await;
    let row = get(s, id).await;
    assert_eq!(row.failure, again, "the sealed failure is kept as written");
    assert_eq!(crate::sealed::clear_fields(&row.payload).and_then(|c| c["/id"].as_u64()), Some(7));
    let claimed = claim(s, &["payment"], LONG).await;
    let opened = crate::sealed::open_payload(&ring, "payment", claimed[0].payload.clone()).expect("opens");
    assert_eq!(opened, Payload::Json(json!({ "id": 7, "pan": SEALED_MARKER })));
    let answered = format!(
        "{:?}{:?}{:?}{:?}{:?}{:?}{claimed:?}",
        get(s, id).await,
        s.list(ListFilter::default()).await.expect("list"),
        s.groups(ListFilter::default()).await.expect("groups"),
        s.attempts(id).await.expect("attempts"),
        s.audit(id).await.expect("audit"),
        s.stats().await.expect("stats"),
    );
    assert!(!answered.contains(SEALED_MARKER), "plaintext came back from the store: {answered}");
    settle_ok(s, Settlement::Succeeded { lease: claimed[0].lease }).await;
    assert_eq!(get(s, id).await.status, Status::Succeeded);
}

/// Rotation: rows sealed under `k1` still open and drain once `k2` is active.
pub async fn sealed_rows_drain_after_rotation<S: DeadLetterStore + ?Sized>(s: &S) {
    let (k1, rotated) = rings();
    let old = park(s, sealed_letter(&k1, "payment", 1)).await;
    let new = park(s, sealed_letter(&rotated, "payment", 2)).await;
    assert_eq!(crate::sealed::sealed_key(&get(s, new).await.payload), Some("k2"));
    for row in claim(s, &["payment"], LONG).await {
        let opened =
            crate::sealed::open_payload(&rotated, "payment", row.payload).expect("opens with the rotated ring");
        assert!(matches!(opened, Payload::Json(ref v) if v["pan"] == SEALED_MARKER), "{opened:?}");
        settle_ok(s, Settlement::Succeeded { lease: row.lease }).await;
    }
    assert_eq!((get(s, old).await.status, get(s, new).await.status), (Status::Succeeded, Status::Succeeded));
}

/// Rows sealed before envelope v2 (a row the store kept from an older dlq) open: the row read
/// back, its failure's texts, and the claimed payload through to `SUCCEEDED`.
pub async fn sealed_rows_of_envelope_v1_open<S: DeadLetterStore + ?Sized>(s: &S) {
    let (k1, rotated) = rings();
    let payload = Payload::Json(serde_json::from_str(V1_SEALED_PAYLOAD).expect("JSON"));
    let sealed_failure =
        FailureInfo { stacktrace: Some(V1_SEALED_FAILURE.into()), ..failure("Declined", "[encrypted, key k1]") };
    let id = park(s, NewDeadLetter::new("payment", payload, sealed_failure)).await;
    let row = get(s, id).await;
    let (opened, texts) = crate::sealed::open_letter(&rotated, "payment", row.payload, row.failure).expect("opens");
    assert_eq!(opened, Payload::Json(json!({ "id": 7, "pan": SEALED_MARKER })));
    assert_eq!(
        (texts.reason, texts.stacktrace),
        (format!("card {SEALED_MARKER} declined"), Some(SEALED_MARKER.into()))
    );
    let claimed = claim(s, &["payment"], LONG).await;
    let opened = crate::sealed::open_payload(&k1, "payment", claimed[0].payload.clone()).expect("opens");
    assert_eq!(opened, Payload::Json(json!({ "id": 7, "pan": SEALED_MARKER })));
    settle_ok(s, Settlement::Succeeded { lease: claimed[0].lease }).await;
    assert_eq!(get(s, id).await.status, Status::Succeeded);
}

/// `reveal` audits a reveal of an existing row (action `reveal`, the actor and reason, an
/// empty diff) and refuses an unknown id. A store that cannot audit one ([`Error::Unsupported`],
/// the default) reveals nothing: skipped.
pub async fn reveal_is_audited<S: DeadLetterStore + ?Sized>(s: &S) {
    let id = park(s, letter("payment", 1)).await;
    let entry = match s.reveal(id, AuditNote::new("alice", "chargeback 118")).await {
        Err(Error::Unsupported { .. }) => return,
        other => other.expect("reveal"),
    };
    let audit = s.audit(id).await.expect("audit");
    assert_eq!(audit.len(), 1);
    let a = &audit[0];
    assert_eq!((a.id, a.action.as_str(), a.actor.as_str()), (entry, "reveal", "alice"));
    assert_eq!((a.reason.as_deref(), &a.diff), (Some("chargeback 118"), &json!({})));
    assert!(matches!(s.reveal(id + 1_000, AuditNote::new("alice", "x")).await, Err(Error::NotFound(_))));
}

/// A row marked unreadable under its claim counts while that claim is its latest: from any
/// caller, until a new claim (a retrier holding the key) or an outcome ends it; a stale lease
/// marks nothing. A store that does not count ([`Error::Unsupported`]) is skipped.
pub async fn unreadable_rows_are_counted<S: DeadLetterStore + ?Sized>(s: &S) {
    let zero = match s.count_unreadable().await {
        Err(Error::Unsupported { .. }) => return,
        other => other.expect("count_unreadable"),
    };
    assert_eq!(zero, 0);
    let (a, b) = (park(s, letter("sealed", 1)).await, park(s, letter("sealed", 2)).await);
    let first = s.claim(request(&["sealed"], 10, SHORT, "keyless")).await.expect("claim");
    assert_eq!(ids(&first).len(), 2);
    let stale = Lease { id: a, token: Uuid::new_v4() };
    s.mark_unreadable(vec![stale]).await.expect("mark");
    assert_eq!(s.count_unreadable().await.expect("count"), 0, "a stale lease marks nothing");
    s.mark_unreadable(first.iter().map(|c| c.lease).collect()).await.expect("mark");
    assert_eq!(s.count_unreadable().await.expect("count"), 2);
    // The lease expires: still counted (no one could open it since).
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(s.count_unreadable().await.expect("count"), 2);
    // A retrier with the key claims them again and settles one: neither counts any more.
    let second = s.claim(request(&["sealed"], 10, LONG, "keyed")).await.expect("claim");
    assert_eq!(ids(&second).len(), 2);
    assert_eq!(s.count_unreadable().await.expect("count"), 0);
    let done = second.iter().find(|c| c.id() == b).expect("b").lease;
    settle_ok(s, Settlement::Succeeded { lease: done }).await;
    assert_eq!(s.count_unreadable().await.expect("count"), 0);
}
