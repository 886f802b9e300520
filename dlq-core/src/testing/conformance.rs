//! The conformance suite of [`DeadLetterStore`]: one async function per rule of the contract,
//! each taking a fresh, empty store and panicking (like a test) when the store breaks it.
//! `MemoryStore`, `SqliteStore` and `PgStore` all pass it; run it on your own store with
//! [`store_conformance_tests!`](crate::store_conformance_tests), which generates one test per
//! function.
//!
//! Time-dependent checks sleep for a few hundred milliseconds of real time, since SQL stores
//! use their database's clock: run the suite with tokio's clock running, not paused.
//!
//! ```
//! use dlq_core::MemoryStore;
//! use dlq_core::testing::conformance;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! conformance::park_and_get(&MemoryStore::new()).await;
//! conformance::settle_fences_stale_tokens(&MemoryStore::new()).await;
//! # });
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use uuid::Uuid;

use crate::store::{
    ActionKind, BatchAction, BatchReport, ClaimCap, ClaimRequest, Claimed, Lease, OperationState, OperationStep,
    PatchBatch, PatchRequest, Refused, RowEdit, Settlement, StoreResult, operation_patch_diff, payload_from_diff,
};
use crate::{
    DeadLetter, DeadLetterStore, DlqId, Error, ErrorClass, ListFilter, Payload, Status, admin::StatsRow,
    classify::FailureInfo, record::DeadReason, record::SourceMeta, store::AuditNote, store::NewDeadLetter,
    store::VersionUpgrade,
};

/// A long lease: the row stays claimed for the whole test.
const LONG: Duration = Duration::from_secs(60);
/// A short lease, and a sleep that outlasts it.
const SHORT: Duration = Duration::from_millis(200);
const PAST_SHORT: Duration = Duration::from_millis(300);
/// How long a test waits for a wake-up before it calls it lost: far past what a loaded
/// machine needs, far short of the hour the waits are given as their maximum.
const PATIENCE: Duration = Duration::from_secs(60);
/// Slack for comparing two times taken by the same store clock (microsecond rounding).
const ROUNDING: Duration = Duration::from_millis(1);

fn failure(kind: &str, reason: &str) -> FailureInfo {
    FailureInfo::new(ErrorClass::Transient, kind, reason.to_owned(), vec![reason.to_owned()], None)
}

fn letter(event_type: &str, n: u64) -> NewDeadLetter {
    NewDeadLetter::new(event_type, Payload::Json(json!({ "n": n })), failure("io", "ledger down"))
}

fn request(types: &[&str], limit: usize, lease: Duration, owner: &str) -> ClaimRequest {
    ClaimRequest { event_types: types.iter().map(|t| (*t).to_owned()).collect(), limit, lease, owner: owner.to_owned() }
}

async fn park<S: DeadLetterStore>(s: &S, letter: NewDeadLetter) -> DlqId {
    s.park(letter).await.expect("park").id
}

async fn get<S: DeadLetterStore>(s: &S, id: DlqId) -> DeadLetter {
    s.get(id).await.expect("get").unwrap_or_else(|| panic!("row {id} not found"))
}

async fn claim<S: DeadLetterStore>(s: &S, types: &[&str], lease: Duration) -> Vec<Claimed> {
    s.claim(request(types, 100, lease, "conformance")).await.expect("claim")
}

async fn claim_one<S: DeadLetterStore>(s: &S, event_type: &str) -> Lease {
    let claimed = claim(s, &[event_type], LONG).await;
    assert_eq!(claimed.len(), 1, "expected one due `{event_type}` row");
    claimed[0].lease
}

fn ids(claimed: &[Claimed]) -> Vec<DlqId> {
    claimed.iter().map(|c| c.lease.id).collect()
}

fn close(a: DateTime<Utc>, b: DateTime<Utc>, within: Duration) -> bool {
    (a - b).abs() <= chrono::Duration::from_std(within).unwrap_or(chrono::TimeDelta::MAX)
}

fn assert_gap(from: DateTime<Utc>, to: DateTime<Utc>, gap: Duration) {
    let expected = from + chrono::Duration::from_std(gap).unwrap_or(chrono::TimeDelta::MAX);
    assert!(close(to, expected, ROUNDING), "{to} is not {gap:?} after {from}");
}

/// One batch of `action` on `ids` by `actor` (no loop guard, no operation), as the admin
/// layer applies it.
async fn act<S: DeadLetterStore>(s: &S, action: ActionKind, ids: &[DlqId], actor: &str) -> BatchReport {
    let note = AuditNote::new(actor, format!("{} by the conformance suite", action.as_str()));
    let batch = BatchAction { action, ids: ids.to_vec(), note, max_redrives: None, step: None };
    s.apply(batch).await.expect("apply")
}

/// Redrives `ids`; returns those moved.
async fn redrive<S: DeadLetterStore>(s: &S, ids: &[DlqId], actor: &str) -> Vec<DlqId> {
    act(s, ActionKind::Redrive, ids, actor).await.moved
}

/// Discards `ids`; returns those moved.
async fn discard<S: DeadLetterStore>(s: &S, ids: &[DlqId], actor: &str) -> Vec<DlqId> {
    act(s, ActionKind::Discard, ids, actor).await.moved
}

/// Replaces a payload as a plain patch of `actor` (no RFC 6902 patch, no undo).
async fn patch<S: DeadLetterStore>(s: &S, id: DlqId, payload: Payload, actor: &str) -> StoreResult<i64> {
    let note = AuditNote { actor: actor.to_owned(), reason: None };
    s.patch(PatchRequest { id, payload, note, patch: None, undo_of: None }).await
}

async fn settle_ok<S: DeadLetterStore>(s: &S, outcome: Settlement) {
    let report = s.settle(vec![outcome]).await.expect("settle");
    assert_eq!((report.applied, report.fenced), (1, vec![]), "the lease was held");
}

/// Every field of a parked JSON letter reads back as it was written.
pub async fn park_and_get<S: DeadLetterStore>(s: &S) {
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
pub async fn park_keeps_the_payload_version<S: DeadLetterStore>(s: &S) {
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
pub async fn park_raw_payloads<S: DeadLetterStore>(s: &S) {
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
pub async fn park_large_payload_whole<S: DeadLetterStore>(s: &S) {
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

/// A payload over the store's limit is cut, reported (`Parked::truncated`), parked dead
/// (`too_large`), never claimed, and not redriven until an operator patches in a whole one.
pub async fn park_over_limit_is_dead_and_never_claimed<S: DeadLetterStore>(s: &S) {
    let max = s.max_payload_bytes();
    let bytes = vec![b'7'; max + 10];
    let parked =
        s.park(NewDeadLetter::new("payment", Payload::from_bytes(&bytes), failure("io", "down"))).await.expect("park");
    assert!(parked.truncated);
    let l = get(s, parked.id).await;
    assert_eq!((l.status, l.dead_reason), (Status::FailedPermanently, Some(DeadReason::TooLarge)));
    let Payload::Raw { bytes: kept, truncated: Some(t) } = &l.payload else { panic!("{:?}", l.payload.len()) };
    assert_eq!((kept.len(), t.original_len), (max.min(crate::store::TOO_LARGE_PREVIEW_BYTES), bytes.len() as u64));
    assert!(s.claim(request(&["payment"], 10, LONG, "me")).await.expect("claim").is_empty());
    let refused = act(s, ActionKind::Redrive, &[parked.id], "ops").await;
    assert!(refused.moved.is_empty(), "a cut payload is not redriven");
    assert_eq!(refused.refused.iter().map(|r| &r.why).collect::<Vec<_>>(), [&Refused::TooLarge]);
    let err = patch(s, parked.id, Payload::from_bytes(&bytes), "ops").await.expect_err("too large");
    assert!(matches!(err, Error::PayloadTooLarge { .. }), "{err}");
    patch(s, parked.id, Payload::Json(json!(7)), "ops").await.expect("patch");
    assert_eq!(redrive(s, &[parked.id], "ops").await, [parked.id]);
}

const HOSTILE: &str = "'); DROP TABLE dlq_events; -- \" \\ % _ ` $1 ?1 :x \u{202e}evil ✓ 💥";

/// SQL metacharacters and unusual Unicode in every text field are stored as they are.
pub async fn park_hostile_text<S: DeadLetterStore>(s: &S) {
    let mut source = SourceMeta::kafka(HOSTILE, -1, i64::MAX);
    source.headers.insert(HOSTILE.to_owned(), HOSTILE.to_owned());
    source.trace_context = Some(HOSTILE.to_owned());
    let fail =
        FailureInfo::new(ErrorClass::Permanent, HOSTILE, HOSTILE.into(), vec![HOSTILE.into()], Some(HOSTILE.into()));
    let new = NewDeadLetter::new(HOSTILE, Payload::Json(json!({ HOSTILE: [HOSTILE] })), fail.clone())
        .with_handler(HOSTILE)
        .with_source(source.clone())
        .dead(DeadReason::Permanent);
    let id = park(s, new).await;
    let l = get(s, id).await;
    assert_eq!((l.event_type.as_str(), l.handler.as_str()), (HOSTILE, HOSTILE));
    assert_eq!(l.payload, Payload::Json(json!({ HOSTILE: [HOSTILE] })));
    assert_eq!((l.failure, l.source), (fail.clone(), source));
    assert_eq!(l.dedupe_key, Some(format!("{HOSTILE}/-1/{}", i64::MAX)));
    let listed = s.list(ListFilter::default().event_type(HOSTILE).fingerprint(&fail.fingerprint)).await.expect("list");
    assert_eq!(listed.iter().map(|l| l.id).collect::<Vec<_>>(), vec![id]);
    assert_eq!(s.list(ListFilter::default().event_type("%")).await.expect("list").len(), 0, "no LIKE matching");
    let note = AuditNote::new(HOSTILE, HOSTILE);
    let batch = BatchAction { action: ActionKind::Redrive, ids: vec![id], note, max_redrives: None, step: None };
    assert_eq!(s.apply(batch).await.expect("apply").moved, vec![id]);
    let audit = s.audit(id).await.expect("audit");
    assert_eq!((audit[0].actor.as_str(), audit[0].reason.as_deref()), (HOSTILE, Some(HOSTILE)));
}

/// A letter parked dead is `FAILED_PERMANENTLY` with its reason, and never claimed.
pub async fn park_dead_on_arrival<S: DeadLetterStore>(s: &S) {
    let id = park(s, letter("payment", 1).dead(DeadReason::Permanent)).await;
    let l = get(s, id).await;
    assert_eq!((l.status, l.dead_reason), (Status::FailedPermanently, Some(DeadReason::Permanent)));
    assert!(claim(s, &["payment"], LONG).await.is_empty());
}

/// `park_many` returns one id per letter, in input order.
pub async fn park_many_keeps_order<S: DeadLetterStore>(s: &S) {
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

/// A dedupe key is unique per event type: two handlers failing on one source event (fan-out)
/// get a row each, holding their own type and event; a redelivery to each finds its own row.
pub async fn dedupe_is_per_event_type<S: DeadLetterStore>(s: &S) {
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

/// A key whose row finished (`SUCCEEDED`, `DISCARDED`) does not swallow a new failure of the
/// event: it is parked as a new row with the same key, and redeliveries find that one. A dead
/// row (`FAILED_PERMANENTLY`) is alive: it still dedupes.
pub async fn dedupe_parks_anew_once_finished<S: DeadLetterStore>(s: &S) {
    let key = "payments/0/17";
    let first = park(s, letter("payment", 1).with_dedupe_key(key)).await;
    settle_ok(s, Settlement::Succeeded { lease: claim_one(s, "payment").await }).await;
    let second = s.park(letter("payment", 2).with_dedupe_key(key)).await.expect("park");
    assert!(!second.deduplicated && second.id != first, "a succeeded row takes no new failure: {second:?}");
    assert_eq!(get(s, second.id).await.payload, Payload::Json(json!({ "n": 2 })));
    assert_eq!(get(s, first).await.status, Status::Succeeded, "the finished row is left as it was");
    let again = s.park(letter("payment", 3).with_dedupe_key(key)).await.expect("park");
    assert_eq!((again.id, again.deduplicated), (second.id, true), "a redelivery finds the live row");
    assert_eq!(discard(s, &[second.id], "ops").await, [second.id]);
    let third = s.park(letter("payment", 4).with_dedupe_key(key).dead(DeadReason::Permanent)).await.expect("park");
    assert!(!third.deduplicated && third.id != second.id, "a discarded row takes no new failure: {third:?}");
    let dead = s.park(letter("payment", 5).with_dedupe_key(key)).await.expect("park");
    assert_eq!((dead.id, dead.deduplicated), (third.id, true), "a dead row is alive: it dedupes");
    let rows = s.list(ListFilter::default()).await.expect("list");
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r.dedupe_key.as_deref() == Some(key)), "one key, the event's history");
}

/// A second park with a stored dedupe key returns the first id and changes nothing.
pub async fn dedupe_returns_first_id<S: DeadLetterStore>(s: &S) {
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

/// Only rows whose `retry_after` passed are claimed; the claim sets the lease.
pub async fn claim_takes_only_due_rows<S: DeadLetterStore>(s: &S) {
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
pub async fn concurrent_claims_are_disjoint<S: DeadLetterStore>(s: &S) {
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
pub async fn claim_only_requested_types<S: DeadLetterStore>(s: &S) {
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
pub async fn claim_limit_and_order<S: DeadLetterStore>(s: &S) {
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
pub async fn claim_shares_the_batch_among_event_types<S: DeadLetterStore>(s: &S) {
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
pub async fn claim_reclaims_expired_leases<S: DeadLetterStore>(s: &S) {
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
pub async fn settle_succeeded<S: DeadLetterStore>(s: &S) {
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
pub async fn settle_retry_not_due_until_delay<S: DeadLetterStore>(s: &S) {
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
pub async fn settle_dead_counts<S: DeadLetterStore>(s: &S) {
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
pub async fn huge_delays_saturate<S: DeadLetterStore>(s: &S) {
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

/// `Release` puts the row back, due at once, without counting or recording an attempt.
pub async fn settle_release<S: DeadLetterStore>(s: &S) {
    let id = park(s, letter("payment", 1).retry(Duration::ZERO, 3)).await;
    let lease = claim_one(s, "payment").await;
    settle_ok(s, Settlement::Release { lease }).await;
    let l = get(s, id).await;
    assert_eq!((l.status, l.retry_count, l.lease_owner, l.lease_until), (Status::Pending, 0, None, None));
    assert_eq!(l.retry_after, l.updated_at, "due at once");
    assert_eq!(s.attempts(id).await.expect("attempts").len(), 1, "only the original failure");
    assert_eq!(ids(&claim(s, &["payment"], LONG).await), vec![id]);
}

/// An outcome with a token that does not hold the row (stale, unknown, reused) writes nothing.
pub async fn settle_fences_stale_tokens<S: DeadLetterStore>(s: &S) {
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

/// Two outcomes for one lease in one batch: the first is written, the second is fenced (the
/// token is spent), and the report says so.
pub async fn settle_same_lease_twice_first_wins<S: DeadLetterStore>(s: &S) {
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
pub async fn settle_repeated_attempts<S: DeadLetterStore>(s: &S) {
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
pub async fn settle_fences_expired_leases<S: DeadLetterStore>(s: &S) {
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

/// Every attempt is appended: the original failure as attempt 0, then one per settled retry.
pub async fn attempt_history<S: DeadLetterStore>(s: &S) {
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

/// A redrive batch moves only dead rows back to `PENDING`, due now, with the retry count
/// reset and the redrive count up, and audits each with the note; the others are refused
/// with their status.
pub async fn redrive_only_dead_rows<S: DeadLetterStore>(s: &S) {
    let pending = park(s, letter("payment", 1).retry(Duration::from_secs(3600), 5)).await;
    let dead = park(s, letter("payment", 2)).await;
    let lease = claim_one(s, "payment").await;
    let fail = failure("io", "still down");
    settle_ok(s, Settlement::Dead { lease, reason: DeadReason::RetriesExhausted, failure: fail.clone(), counts: true })
        .await;
    assert_eq!(get(s, dead).await.retry_count, 1);
    let done = park(s, letter("payment", 3)).await;
    settle_ok(s, Settlement::Succeeded { lease: claim_one(s, "payment").await }).await;
    let report = act(s, ActionKind::Redrive, &[pending, dead, done], "alice").await;
    assert_eq!(report.moved, vec![dead]);
    let refused: Vec<_> = report.refused.iter().map(|r| (r.id, r.why.clone())).collect();
    assert_eq!(
        refused,
        [(pending, Refused::Status { status: Status::Pending }), (done, Refused::Status { status: Status::Succeeded })]
    );
    let l = get(s, dead).await;
    assert_eq!((l.status, l.retry_count, l.dead_reason, l.redrive_count), (Status::Pending, 0, None, 1));
    assert_eq!((l.retry_after, l.failure), (l.updated_at, fail), "due now; the last failure is kept");
    let audit = s.audit(dead).await.expect("audit");
    assert_eq!(audit.len(), 1);
    assert_eq!((audit[0].dlq_id, audit[0].action.as_str(), audit[0].actor.as_str()), (dead, "redrive", "alice"));
    assert_eq!(audit[0].reason.as_deref(), Some("redrive by the conformance suite"));
    assert_eq!(audit[0].diff, json!({ "status": ["FAILED_PERMANENTLY", "PENDING"] }));
    assert!(close(audit[0].at, l.updated_at, ROUNDING));
    assert!(s.audit(pending).await.expect("audit").is_empty() && s.audit(done).await.expect("audit").is_empty());
    assert_eq!((get(s, pending).await.status, get(s, done).await.status), (Status::Pending, Status::Succeeded));
    assert!(redrive(s, &[pending, dead, done], "alice").await.is_empty(), "nothing dead is left");
    assert_eq!(ids(&claim(s, &["payment"], LONG).await), vec![dead], "redriven rows are due at once");
}

/// `apply` refuses unknown ids and, for a redrive, rows already redriven `max_redrives`
/// times (the loop guard) and cut payloads, moving the rest of the batch; `audit_entry` reads
/// each entry back by its id.
pub async fn apply_refuses_what_it_must_and_audits_the_reason<S: DeadLetterStore>(s: &S) {
    let rows: Vec<DlqId> = s
        .park_many((0..3).map(|n| letter("payment", n).dead(DeadReason::Permanent)).collect())
        .await
        .expect("park")
        .into_iter()
        .map(|p| p.id)
        .collect();
    let pending = park(s, letter("payment", 7).retry(Duration::from_secs(3600), 5)).await;
    let cut = Payload::from_bytes(&[b'x'; 64]).fit(8);
    let huge = park(s, NewDeadLetter::new("payment", cut, failure("io", "down")).dead(DeadReason::TooLarge)).await;
    let note = AuditNote::new("alice", "ledger back");
    let missing = huge + 1000;
    let batch = BatchAction {
        action: ActionKind::Redrive,
        ids: vec![rows[0], rows[1], pending, huge, missing],
        note: note.clone(),
        max_redrives: Some(1),
        step: None,
    };
    let report = s.apply(batch.clone()).await.expect("apply");
    assert_eq!(report.moved, [rows[0], rows[1]]);
    let why: Vec<(DlqId, Refused)> = report.refused.iter().map(|r| (r.id, r.why.clone())).collect();
    assert_eq!(
        why,
        [
            (pending, Refused::Status { status: Status::Pending }),
            (huge, Refused::TooLarge),
            (missing, Refused::NotFound)
        ]
    );
    let audit = s.audit(rows[0]).await.expect("audit");
    assert_eq!((audit[0].action.as_str(), audit[0].actor.as_str()), ("redrive", "alice"));
    assert_eq!(audit[0].reason.as_deref(), Some("ledger back"));
    assert_eq!(s.audit_entry(audit[0].id).await.expect("audit entry"), Some(audit[0].clone()));
    assert_eq!(s.audit_entry(audit[0].id + 1000).await.expect("audit entry"), None);

    // Row 0 dies again: the loop guard (at most one redrive) refuses it, not row 2.
    let lease = s.claim(request(&["payment"], 1, LONG, "conformance")).await.expect("claim")[0].lease;
    assert_eq!(lease.id, rows[0], "the oldest due row");
    let fail = failure("io", "still down");
    settle_ok(s, Settlement::Dead { lease, reason: DeadReason::Permanent, failure: fail, counts: true }).await;
    let again = s.apply(BatchAction { ids: vec![rows[0], rows[2]], ..batch.clone() }).await.expect("apply");
    assert_eq!(again.moved, [rows[2]]);
    assert_eq!(
        again.refused.iter().map(|r| (r.id, r.why.clone())).collect::<Vec<_>>(),
        [(rows[0], Refused::RedriveLimit { count: 1 })]
    );
    let forced = s.apply(BatchAction { ids: vec![rows[0]], max_redrives: None, ..batch }).await.expect("apply");
    assert_eq!(forced.moved, [rows[0]], "no limit without a guard");
    assert_eq!(get(s, rows[0]).await.redrive_count, 2);
}

/// A batch of an operation moves its cursor from where the batch started, in the batch's
/// transaction: a second batch presenting the same start is a conflict and moves nothing.
pub async fn operation_cursor_moves_with_its_batch_only_once<S: DeadLetterStore>(s: &S) {
    let rows = [
        park(s, letter("payment", 1).dead(DeadReason::Permanent)).await,
        park(s, letter("payment", 2).dead(DeadReason::Permanent)).await,
    ];
    let note = AuditNote::new("bob", "replay");
    let op = s.create_operation(ActionKind::Redrive, json!({"x": 1}), note.clone()).await.expect("create");
    assert_eq!((op.cursor, op.moved, op.refused, op.state), (0, 0, 0, OperationState::Running));
    assert_eq!((op.action, op.note.clone()), (ActionKind::Redrive, note.clone()));
    let step = OperationStep { operation: op.id, from: 0, to: rows[0], refused_before: 2 };
    let batch =
        BatchAction { action: ActionKind::Redrive, ids: vec![rows[0]], note, max_redrives: None, step: Some(step) };
    s.apply(batch.clone()).await.expect("apply");
    let err = s.apply(BatchAction { ids: vec![rows[1]], ..batch }).await.expect_err("the cursor moved");
    assert!(matches!(err, Error::Conflict { operation } if operation == op.id), "{err}");
    assert_eq!(get(s, rows[1]).await.status, Status::FailedPermanently, "rolled back");
    let stored = s.operation(op.id).await.expect("operation").expect("stored");
    assert_eq!((stored.cursor, stored.moved, stored.refused), (rows[0], 1, 2));
    assert_eq!(stored.spec, json!({"x": 1}));
    s.set_operation_state(op.id, OperationState::Stopped).await.expect("state");
    assert_eq!(s.operation(op.id).await.expect("operation").expect("stored").state, OperationState::Stopped);
    assert!(s.operation(op.id + 100).await.expect("operation").is_none());
    let second = s.create_operation(ActionKind::Discard, json!(null), AuditNote::new("c", "d")).await.expect("create");
    assert_ne!(second.id, op.id, "each operation has its own id");
}

/// A discard batch takes `PENDING` and `FAILED_PERMANENTLY` rows only (a `PROCESSING`,
/// `SUCCEEDED` or `DISCARDED` one is refused with its status), audits each with its previous
/// status, and is final: a discarded row is neither discarded again nor redriven.
pub async fn discard_rules<S: DeadLetterStore>(s: &S) {
    let processing = park(s, letter("payment", 0)).await;
    claim_one(s, "payment").await;
    let pending = park(s, letter("payment", 1)).await;
    let dead = park(s, letter("payment", 2).dead(DeadReason::Permanent)).await;
    let succeeded = park(s, letter("done", 3)).await;
    settle_ok(s, Settlement::Succeeded { lease: claim_one(s, "done").await }).await;
    let report = act(s, ActionKind::Discard, &[processing, pending, dead, succeeded], "bob").await;
    assert_eq!(report.moved, vec![pending, dead]);
    assert_eq!(
        report.refused.iter().map(|r| (r.id, r.why.clone())).collect::<Vec<_>>(),
        [
            (processing, Refused::Status { status: Status::Processing }),
            (succeeded, Refused::Status { status: Status::Succeeded })
        ]
    );
    assert_eq!(get(s, processing).await.status, Status::Processing);
    assert_eq!(get(s, succeeded).await.status, Status::Succeeded, "a success is not discarded");
    assert!(s.audit(succeeded).await.expect("audit").is_empty());
    for (id, from) in [(pending, "PENDING"), (dead, "FAILED_PERMANENTLY")] {
        let l = get(s, id).await;
        assert_eq!(l.status, Status::Discarded);
        let audit = s.audit(id).await.expect("audit");
        assert_eq!(audit.len(), 1);
        assert_eq!((audit[0].action.as_str(), audit[0].actor.as_str()), ("discard", "bob"));
        assert_eq!(audit[0].diff, json!({ "status": [from, "DISCARDED"] }));
    }
    let again = act(s, ActionKind::Discard, &[pending], "bob").await;
    assert_eq!(again.refused[0].why, Refused::Status { status: Status::Discarded });
    assert!(redrive(s, &[pending, dead], "bob").await.is_empty(), "discarded is final");
    assert!(claim(s, &["payment", "done"], LONG).await.is_empty());
}

/// `patch` replaces the payload of any row but a `PROCESSING` or `SUCCEEDED` one, returns its
/// audit entry's id, and audits the note and the diff ([`patch_diff`](crate::store::patch_diff)):
/// the old payload (a raw one's bytes in hex, so an undo restores them exactly), the RFC 6902
/// patch and the entry undone.
pub async fn patch_records_diff<S: DeadLetterStore>(s: &S) {
    let original = Payload::Json(json!({ "currency": "USD " }));
    let id = park(s, NewDeadLetter::new("payment", original, failure("v", "bad")).dead(DeadReason::Permanent)).await;
    let before = get(s, id).await;
    let fixed = Payload::Json(json!({ "currency": "USD" }));
    let first = patch(s, id, fixed.clone(), "carol").await.expect("patch");
    let l = get(s, id).await;
    assert_eq!((l.payload, l.status, l.failure), (fixed, Status::FailedPermanently, before.failure));
    assert!(l.updated_at >= before.updated_at);
    let raw = Payload::from_bytes(b"\xffraw");
    patch(s, id, raw.clone(), "carol").await.expect("patch");
    assert_eq!(get(s, id).await.payload, raw);
    let rfc6902 = json!([{ "op": "replace", "path": "/currency", "value": "EUR" }]);
    let note = AuditNote::new("dave", "undo the raw bytes");
    let request = PatchRequest {
        id,
        payload: Payload::Json(json!({ "currency": "EUR" })),
        note,
        patch: Some(rfc6902.clone()),
        undo_of: Some(first),
    };
    let third = s.patch(request).await.expect("patch");
    let audit = s.audit(id).await.expect("audit");
    let diffs: Vec<_> = audit.iter().map(|a| (a.action.as_str(), a.actor.as_str(), a.diff.clone())).collect();
    assert_eq!(
        diffs,
        vec![
            ("patch", "carol", json!({ "payload": { "old": { "currency": "USD " }, "new": { "currency": "USD" } } })),
            ("patch", "carol", json!({ "payload": { "old": { "currency": "USD" }, "new": "\u{FFFD}raw" } })),
            (
                "patch",
                "dave",
                json!({
                    "payload": { "old": "\u{FFFD}raw", "old_hex": "ff726177", "new": { "currency": "EUR" } },
                    "patch": rfc6902,
                    "undo_of": first,
                })
            ),
        ]
    );
    assert_eq!((audit[0].id, audit[2].id), (first, third), "patch returns its audit entry's id");
    assert_eq!((audit[0].reason.as_deref(), audit[2].reason.as_deref()), (None, Some("undo the raw bytes")));
    assert_eq!(payload_from_diff(&audit[2].diff), Some(raw), "the raw bytes, exactly");
    let busy = park(s, letter("busy", 1)).await;
    let lease = claim_one(s, "busy").await;
    let err = patch(s, busy, Payload::Json(json!(1)), "carol").await.expect_err("processing");
    assert!(matches!(err, Error::InvalidState { id, status: Status::Processing, .. } if id == busy), "{err}");
    assert_eq!(get(s, busy).await.payload, Payload::Json(json!({ "n": 1 })));
    settle_ok(s, Settlement::Succeeded { lease }).await;
    let err = patch(s, busy, Payload::Json(json!(1)), "carol").await.expect_err("succeeded");
    assert!(matches!(err, Error::InvalidState { id, status: Status::Succeeded, .. } if id == busy), "{err}");
    assert_eq!(get(s, busy).await.payload, Payload::Json(json!({ "n": 1 })));
    let err = patch(s, busy + 1000, Payload::Json(json!(1)), "carol").await.expect_err("missing");
    assert!(matches!(err, Error::NotFound(id) if id == busy + 1000), "{err}");
    assert!(s.audit(busy).await.expect("audit").is_empty());
}

/// `upgrade` rewrites a row's payload and version, keeps its status and `updated_at`, and
/// audits the old and new payloads as an `upgrade`; it refuses a row of another version, a
/// `PROCESSING` row and an unknown id, changing nothing.
pub async fn upgrade_rewrites_payload_and_version<S: DeadLetterStore>(s: &S) {
    let old = Payload::Json(json!({ "cents": 5 }));
    let id = park(s, NewDeadLetter::new("payment", old, failure("io", "down"))).await;
    let lease = claim_one(s, "payment").await;
    settle_ok(s, Settlement::Succeeded { lease }).await;
    let before = get(s, id).await;
    let new = Payload::Json(json!({ "amount_cents": 5, "currency": "EUR" }));
    let note = AuditNote::new("retrier h:1:w", "upcast from version 1 to 3");
    let upgrade = VersionUpgrade { id, from: 1, to: 3, payload: new.clone(), note };
    let entry = s.upgrade(upgrade.clone()).await.expect("upgrade");
    let l = get(s, id).await;
    assert_eq!((l.payload, l.version, l.status, l.updated_at), (new.clone(), 3, Status::Succeeded, before.updated_at));
    let audit = s.audit(id).await.expect("audit");
    let last = audit.last().expect("an audit entry");
    assert_eq!((last.id, last.action.as_str(), last.actor.as_str()), (entry, "upgrade", "retrier h:1:w"));
    assert_eq!(last.reason.as_deref(), Some("upcast from version 1 to 3"));
    assert_eq!(
        last.diff,
        json!({ "version": [1, 3], "payload": { "old": { "cents": 5 }, "new": { "amount_cents": 5, "currency": "EUR" } } })
    );
    let again = s.upgrade(upgrade.clone()).await.expect_err("the row is version 3 now");
    assert!(matches!(again, Error::VersionChanged { expected: 1, found: 3, .. }), "{again}");
    let missing = s.upgrade(VersionUpgrade { id: id + 1000, ..upgrade.clone() }).await.expect_err("unknown id");
    assert!(matches!(missing, Error::NotFound(_)), "{missing}");
    let held = park(s, letter("payment", 9)).await;
    claim_one(s, "payment").await;
    let busy = s.upgrade(VersionUpgrade { id: held, ..upgrade }).await.expect_err("a claimed row");
    assert!(matches!(busy, Error::InvalidState { status: Status::Processing, .. }), "{busy}");
    assert_eq!((get(s, held).await.version, s.audit(held).await.expect("audit").len()), (1, 0));
}

/// `patch_rows` writes each row of a patch operation's batch with the operation's mark in its
/// audit entry ([`operation_patch_diff`]) and moves the cursor with it; the same batch
/// presented again patches no row twice (the mark, checked under the row's lock), a stale
/// cursor is a conflict that writes nothing, and a row whose payload changed since it was
/// read, a `PROCESSING` or `SUCCEEDED` row, a result over the size limit and an unknown id
/// are refused.
pub async fn patch_rows_patch_each_row_once<S: DeadLetterStore>(s: &S) {
    let tags = |tags: &[&str]| Payload::Json(json!({ "tags": tags }));
    let untagged = || NewDeadLetter::new("payment", tags(&[]), failure("v", "bad")).dead(DeadReason::Permanent);
    let rows = [park(s, untagged()).await, park(s, untagged()).await];
    let changed = park(s, untagged()).await;
    patch(s, changed, tags(&["other"]), "carol").await.expect("patch");
    let big = park(s, untagged()).await;
    let busy = park(s, NewDeadLetter::new("busy", tags(&[]), failure("v", "bad"))).await;
    let lease = claim_one(s, "busy").await;
    let missing = busy + 1_000;
    let note = AuditNote::new("alice", "tag them");
    let doc = json!([{ "op": "add", "path": "/tags/-", "value": "x" }]);
    let op = s.create_operation(ActionKind::Patch, json!({ "patch": doc }), note.clone()).await.expect("create");
    assert_eq!(s.operation(op.id).await.expect("operation").expect("stored").action, ActionKind::Patch);
    let edit = |id| RowEdit { id, old: tags(&[]), new: tags(&["x"]) };
    let huge = Payload::Json(json!({ "tags": ["x".repeat(s.max_payload_bytes() + 1)] }));
    let step = OperationStep { operation: op.id, from: 0, to: missing, refused_before: 1 };
    let mut edits = vec![edit(rows[0]), edit(rows[1]), edit(changed), RowEdit { new: huge, ..edit(big) }, edit(busy)];
    edits.push(edit(missing));
    let batch = PatchBatch { rows: edits, note, patch: doc.clone(), step };
    let report = s.patch_rows(batch.clone()).await.expect("patch_rows");
    assert_eq!(report.moved, rows);
    let why: Vec<_> = report.refused.iter().map(|r| (r.id, r.why.clone())).collect();
    assert_eq!(why[0], (changed, Refused::Changed));
    assert!(
        matches!(&why[1], (id, Refused::Unfit { message }) if *id == big && message.contains("over the store's limit")),
        "{why:?}"
    );
    assert_eq!(why[2..], [(busy, Refused::Status { status: Status::Processing }), (missing, Refused::NotFound)]);
    let stored = s.operation(op.id).await.expect("operation").expect("stored");
    assert_eq!((stored.cursor, stored.moved, stored.refused), (missing, 2, 5));
    for id in rows {
        assert_eq!(get(s, id).await.payload, tags(&["x"]));
        let audit = s.audit(id).await.expect("audit");
        let entry: Vec<_> = audit.iter().map(|a| (a.action.as_str(), a.actor.as_str(), a.reason.as_deref())).collect();
        assert_eq!(entry, [("patch", "alice", Some("tag them"))]);
        assert_eq!(audit[0].diff, operation_patch_diff(&tags(&[]), &tags(&["x"]), &doc, op.id));
    }
    assert_eq!((get(s, changed).await.payload, get(s, big).await.payload), (tags(&["other"]), tags(&[])));

    // A stale cursor: nothing is written.
    let err = s.patch_rows(batch.clone()).await.expect_err("the cursor moved");
    assert!(matches!(err, Error::Conflict { operation } if operation == op.id), "{err}");
    // The committed batch presented again from the new cursor: no row is patched twice.
    settle_ok(s, Settlement::Succeeded { lease }).await;
    let again = PatchBatch { step: OperationStep { from: missing, ..step }, ..batch };
    let report = s.patch_rows(again).await.expect("patch_rows");
    assert!(report.moved.is_empty(), "{report:?}");
    let why: Vec<_> = report.refused.iter().map(|r| (r.id, r.why.clone())).take(2).collect();
    let done = Refused::AlreadyPatched { operation: op.id };
    assert_eq!(why, [(rows[0], done.clone()), (rows[1], done)]);
    assert_eq!(
        report.refused[4],
        crate::store::Refusal { id: busy, why: Refused::Status { status: Status::Succeeded } }
    );
    for id in rows {
        assert_eq!(get(s, id).await.payload, tags(&["x"]), "the array add once");
        assert_eq!(s.audit(id).await.expect("audit").len(), 1);
    }
}

/// Purge deletes `SUCCEEDED` and `DISCARDED` rows older than the age, with their history.
pub async fn purge_by_age<S: DeadLetterStore>(s: &S) {
    let succeeded = park(s, letter("payment", 1).with_dedupe_key("k-1")).await;
    settle_ok(s, Settlement::Succeeded { lease: claim_one(s, "payment").await }).await;
    let discarded = park(s, letter("payment", 2)).await;
    assert_eq!(discard(s, &[discarded], "ops").await, [discarded]);
    let pending = park(s, letter("payment", 3).retry(Duration::from_secs(3600), 5)).await;
    let dead = park(s, letter("payment", 4).dead(DeadReason::Permanent)).await;
    assert_eq!(s.purge(Duration::from_secs(3600)).await.expect("purge"), 0, "nothing is an hour old");
    assert_eq!(s.purge(Duration::from_secs(100 * 365 * 86_400)).await.expect("purge"), 0);
    // The old rows are a second old, the late one a fraction of that: a margin that a loaded
    // machine's pauses do not eat.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let late = park(s, letter("late", 5)).await;
    assert_eq!(discard(s, &[late], "ops").await, [late]);
    assert_eq!(s.count_purgeable(Duration::from_secs(3600)).await.expect("count"), 0);
    assert_eq!(s.count_purgeable(Duration::from_millis(500)).await.expect("count"), 2, "what purge deletes");
    assert_eq!(s.purge(Duration::from_millis(500)).await.expect("purge"), 2);
    assert_eq!(s.count_purgeable(Duration::from_millis(500)).await.expect("count"), 0);
    for id in [succeeded, discarded] {
        assert!(s.get(id).await.expect("get").is_none());
        assert!(s.attempts(id).await.expect("attempts").is_empty() && s.audit(id).await.expect("audit").is_empty());
    }
    for (id, status) in [(pending, Status::Pending), (dead, Status::FailedPermanently), (late, Status::Discarded)] {
        assert_eq!(get(s, id).await.status, status);
    }
    let reparked = s.park(letter("payment", 6).with_dedupe_key("k-1")).await.expect("park");
    assert!(!reparked.deduplicated && reparked.id > late, "a purged row's dedupe key is free; ids are not reused");
}

/// `erase` deletes every row stored under one subject hash, in every status (one being
/// retried too), with its attempts and audit entries, in `park` and `park_many` alike; it keeps
/// other subjects' rows and rows without a subject, frees the dedupe keys, and records the
/// erasure with the hash's prefix, the counts and the note, newest first.
pub async fn erase_by_subject<S: DeadLetterStore>(s: &S) {
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
pub async fn subject_key_check_keeps_the_first<S: DeadLetterStore>(s: &S) {
    use crate::subject::SubjectKey;
    let (first, other) = (SubjectKey::new([42; 32]).expect("key"), SubjectKey::new([7; 32]).expect("key"));
    assert_eq!(s.subject_key_check(first.check()).await.expect("check"), first.check(), "kept");
    assert_eq!(s.subject_key_check(first.check()).await.expect("check"), first.check(), "the same again");
    assert_eq!(s.subject_key_check(other.check()).await.expect("check"), first.check(), "another is not kept");
    assert_eq!(s.subject_key_check(first.check()).await.expect("check"), first.check());
}

/// The type catalog keeps one record per event type, every field as published (schemas by
/// version, redacted pointers, time to the microsecond); a record of the same or a newer version
/// replaces the stored one, an older version changes nothing (a rolling deploy's old process
/// starting late), and a batch naming a type twice keeps the newest.
pub async fn type_catalog_newest_version_wins<S: DeadLetterStore>(s: &S) {
    use crate::catalog::EventTypeInfo;
    assert!(s.event_types().await.expect("event_types").is_empty());
    s.publish_types(Vec::new()).await.expect("nothing to publish");
    let mut payment = EventTypeInfo::new("payment", 3, "host:1:new");
    payment.schema = Some(serde_json::json!({"type": "object", "required": ["cents"]}));
    payment.older_schemas = [(1, serde_json::json!({"type": "object"}))].into();
    payment.upcast_from = 1;
    payment.encrypted = true;
    payment.redact = vec!["/card/number".into(), "/name".into()];
    let refund = EventTypeInfo::new("refund", 1, "host:1:new");
    s.publish_types(vec![refund.clone(), payment.clone()]).await.expect("publish");
    assert_eq!(s.event_types().await.expect("event_types"), [payment.clone(), refund.clone()], "by event type");

    let old = EventTypeInfo::new("payment", 2, "host:2:old");
    let newer_refund = EventTypeInfo::new("refund", 2, "host:2:old");
    s.publish_types(vec![old, newer_refund.clone()]).await.expect("publish");
    assert_eq!(s.event_types().await.expect("event_types"), [payment.clone(), newer_refund.clone()]);

    let mut same = EventTypeInfo::new("payment", 3, "host:3:again");
    same.upcast_from = 2;
    let twice = vec![EventTypeInfo::new("card", 2, "a"), EventTypeInfo::new("card", 1, "b"), same.clone()];
    s.publish_types(twice).await.expect("publish");
    let catalog = s.event_types().await.expect("event_types");
    let kept: Vec<_> = catalog.iter().map(|i| (i.event_type.as_str(), i.version, i.published_by.as_str())).collect();
    assert_eq!(kept, [("card", 2, "a"), ("payment", 3, "host:3:again"), ("refund", 2, "host:2:old")]);
    assert_eq!(catalog[1], same, "the same version refreshes the whole record");
}

/// `publish_types` keeps every shape each version of a type was published with
/// (`version_schemas`): a shape new to its version is added, whatever the newest-version rule
/// does with the record (a process that changed its event without bumping its version is seen);
/// a known shape (annotations aside) keeps its first publication and takes the last publisher;
/// `accept_schema` makes one shape its version's only one.
pub async fn type_catalog_keeps_every_shape_of_a_version<S: DeadLetterStore>(s: &S) {
    use crate::catalog::{EventTypeInfo, VersionSchema};
    let at = |n: i64| DateTime::<Utc>::from_timestamp(1_700_000_000 + n, 0).expect("a time");
    let record = |version: u32, by: &str, n: i64| {
        let mut info = EventTypeInfo::new("payment", version, by);
        info.published_at = at(n);
        info
    };
    assert!(s.version_schemas().await.expect("version_schemas").is_empty());
    let cents = json!({"title": "Payment", "type": "object", "required": ["cents"]});
    let mut v1 = record(1, "payments-v1", 0);
    v1.schema = Some(cents);
    let mut v2 = record(2, "payments-v2", 10);
    v2.schema = Some(json!({"type": "object", "required": ["cents", "currency"]}));
    v2.older_schemas = [(1, json!({"title": "PaymentV1", "type": "object", "required": ["cents"]}))].into();
    let mut v3 = record(3, "payments-v3", 5);
    // Upcasters on `serde_json::Value`: schemas that take any JSON, no shape.
    let any_value = json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "AnyValue"});
    v3.older_schemas = [(1, json!(true)), (2, any_value)].into();
    s.publish_types(vec![v3]).await.expect("publish");
    s.publish_types(vec![v1]).await.expect("publish");
    s.publish_types(vec![v2]).await.expect("publish");
    let mut forgot = record(1, "payments-v3", 20);
    forgot.schema = Some(json!({"type": "object", "required": ["amount_cents"]}));
    s.publish_types(vec![forgot.clone()]).await.expect("publish");
    assert_eq!(s.event_types().await.expect("event_types")[0].version, 3, "the newest version's record stays");

    let stored = s.version_schemas().await.expect("version_schemas");
    let seen: Vec<_> =
        stored.iter().map(|v| (v.version, v.first_published_at, v.published_at, v.published_by.as_str())).collect();
    assert_eq!(
        seen,
        [(1, at(0), at(10), "payments-v2"), (1, at(20), at(20), "payments-v3"), (2, at(10), at(10), "payments-v2")],
        "by version, then first publication"
    );
    assert_eq!(stored[1].schema, json!({"type": "object", "required": ["amount_cents"]}), "as published");
    assert_eq!(stored[1].digest, crate::catalog::shape_digest(&stored[1].schema));
    assert_ne!(stored[0].digest, stored[1].digest);

    let accepted = VersionSchema::new("payment", 1, json!({"type": "object", "required": ["amount_cents"]}), "ops");
    s.accept_schema(accepted).await.expect("accept_schema");
    let stored = s.version_schemas().await.expect("version_schemas");
    let seen: Vec<_> = stored.iter().map(|v| (v.version, v.published_by.as_str())).collect();
    assert_eq!(seen, [(1, "ops"), (2, "payments-v2")], "one shape left for version 1");
    s.publish_types(vec![forgot]).await.expect("publish");
    assert_eq!(s.version_schemas().await.expect("version_schemas").len(), 2, "a known shape is not added twice");
}

/// `list` applies every filter field and the limit, newest first, over rows in every status
/// (succeeded and in-flight rows included, which PostgreSQL keeps out of its operator indexes).
pub async fn list_filters_newest_first<S: DeadLetterStore>(s: &S) {
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
pub async fn list_keyset_pages_and_other_filters<S: DeadLetterStore>(s: &S) {
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
pub async fn stats_counts<S: DeadLetterStore>(s: &S) {
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
pub async fn created_histogram_buckets<S: DeadLetterStore>(s: &S) {
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
pub async fn groups_by_fingerprint<S: DeadLetterStore>(s: &S) {
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

/// The string no byte a store returns may hold once its row is sealed.
pub const SEALED_MARKER: &str = "CARD-4111-1111-1111-1111";

/// A letter of `event_type` sealed under `ring`'s active key as `encrypt = true` parks it,
/// its payload and error text holding [`SEALED_MARKER`]; its `/id` kept in clear.
pub fn sealed_letter(ring: &crate::sealed::KeyRing, event_type: &str, n: u64) -> NewDeadLetter {
    let payload = Payload::Json(json!({ "id": n, "pan": SEALED_MARKER }));
    let text = format!("card {SEALED_MARKER} declined");
    let failure =
        FailureInfo::new(ErrorClass::Transient, "Declined", text.clone(), vec![text], Some(SEALED_MARKER.into()));
    let letter = NewDeadLetter::new(event_type, payload, failure);
    let sealing = Some(crate::sealed::Sealing::new(&["/id"]));
    crate::sealed::seal_letter(letter, sealing, Some(ring), usize::MAX).expect("sealed").0
}

/// A failure text sealed by dlq before envelope v2 (XChaCha20-Poly1305) under key `k1` (the
/// kit's `[1; 32]`), for event type `payment`: reason `card <SEALED_MARKER> declined`, the
/// same chain, stack trace [`SEALED_MARKER`]. Rows sealed so still open.
pub const V1_SEALED_FAILURE: &str = "dlq-sealed:v1:k1:9K+IrDmCmXe+nivGhcSYrfLtDmInfyrm:rh/8Gy7RiZtVLHvxZKSAOWxomclay1QlzNmJiD88gTeQDgZbSOL5BR4l8dKDVN1Naa7jE+A8LPaqni7pUBd/ZxTil3sOi3c8C9fZbwVQ0VqnVQyLDNtvyJvQ5nrQ4XdyEZiCewXOtaLILZGDKpE17mqsjPu7wmqtGZI1O6z/nl03gZ9GCV6t2ZHhebecZ7LrPstQoQzi3ZhCTEtxmnI=";

/// A payload sealed by dlq before envelope v2 (XChaCha20-Poly1305) under key `k1` for
/// `payment`: `{"id": 7, "pan": SEALED_MARKER}`, its `/id` kept in clear.
pub const V1_SEALED_PAYLOAD: &str = r#"{"clear":{"/id":7},"dlq_sealed":{"alg":"XChaCha20-Poly1305","data":"S/dOzLoNsi7V3+ozchB0GSyu/4YqthtNauZuDzKtTkzApncqKypx2WJ32lFZvDylRrfXPVDcFCU/6A==","key":"k1","nonce":"SU0DVLgyKOdpkbXOgu7ThWbtFvjtcVms","v":1}}"#;

/// Two key rings: `k1` alone, then `k2` active with `k1` still in it (a rotation).
fn rings() -> (crate::sealed::KeyRing, crate::sealed::KeyRing) {
    let k1 = crate::sealed::KeyRing::new("k1", [("k1", [1; 32])]).expect("ring");
    let rotated = crate::sealed::KeyRing::new("k2", [("k1", [1; 32]), ("k2", [2; 32])]).expect("ring");
    (k1, rotated)
}

/// Sealed rows (`encrypt = true`): nothing the store answers holds the plaintext (rows,
/// lists, groups, attempts, audit entries, claims), a retry's sealed failure is kept as
/// written, and the claimed payload opens to the event, bit for bit, through to `SUCCEEDED`.
pub async fn sealed_rows_keep_no_plaintext<S: DeadLetterStore>(s: &S) {
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
pub async fn sealed_rows_drain_after_rotation<S: DeadLetterStore>(s: &S) {
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
pub async fn sealed_rows_of_envelope_v1_open<S: DeadLetterStore>(s: &S) {
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

/// Starts the store's listener, if it has one: a first wait does. A listener announces once
/// it listens (what was parked before is due), which would end the wait of a test as a park
/// would; this short wait takes that announcement. It bounds no assertion: a listener slower
/// than that only lets a test pass on the listener's announcement.
async fn start_wakeups<S: DeadLetterStore>(s: &S) {
    s.wait_for_work(s.work_ticket(), SHORT).await;
}

/// `wait_for_work` returns after a park made while it waits, not at its maximum (an hour,
/// far past the kit's patience).
pub async fn wait_for_work_wakes_on_park<S: DeadLetterStore>(s: &S) {
    start_wakeups(s).await;
    let ticket = s.work_ticket();
    // `join!` polls the wait first: it is waiting when the park runs.
    let park_while_waiting =
        async { tokio::join!(s.wait_for_work(ticket, Duration::from_secs(3600)), park(s, letter("payment", 1))) };
    assert!(tokio::time::timeout(PATIENCE, park_while_waiting).await.is_ok(), "the park did not wake the wait");
}

/// `wait_for_work` returns after a redrive too: the redriven row is due at once.
pub async fn wait_for_work_wakes_on_redrive<S: DeadLetterStore>(s: &S) {
    let id = park(s, letter("payment", 1).dead(DeadReason::Permanent)).await;
    start_wakeups(s).await;
    let ticket = s.work_ticket();
    let ids = [id];
    let redrive_while_waiting =
        async { tokio::join!(s.wait_for_work(ticket, Duration::from_secs(3600)), redrive(s, &ids, "ops")) };
    let woken = tokio::time::timeout(PATIENCE, redrive_while_waiting).await;
    assert_eq!(woken.expect("the redrive did not wake the wait").1, [id]);
}

/// A park announced between the ticket and the wait is not lost: a retrier takes the ticket
/// before its claim, and a park that commits after the claim looked wakes the wait that follows,
/// even when its announcement arrives first.
pub async fn wait_for_work_keeps_a_park_announced_before_the_wait<S: DeadLetterStore>(s: &S) {
    start_wakeups(s).await;
    let ticket = s.work_ticket();
    park(s, letter("payment", 1)).await;
    // A store that relays its announcements (PostgreSQL's `NOTIFY`) may take a moment to see
    // it; its wait returns then. Its maximum is far past the patience: only the park ends it.
    let woken = tokio::time::timeout(PATIENCE, s.wait_for_work(ticket, Duration::from_secs(3600))).await;
    assert!(woken.is_ok(), "a park announced before the wait was lost");
}

/// A store with a singleton lock (others answer [`Error::Unsupported`]) hands it to one
/// holder at a time, and again once it is released.
pub async fn singleton_lock_has_one_holder<S: DeadLetterStore>(s: &S) {
    let mut lock = match s.try_lock_singleton().await {
        Err(Error::Unsupported { .. }) => return,
        other => other.expect("try_lock_singleton").expect("a free lock"),
    };
    assert!(s.try_lock_singleton().await.expect("try_lock_singleton").is_none(), "one holder at a time");
    assert!(lock.still_held().await);
    lock.release().await;
    let again = s.try_lock_singleton().await.expect("try_lock_singleton").expect("free once released");
    again.release().await;
}

/// Heartbeat rows: inserted, refreshed (keeping `started_at`), removed, and removed for a
/// retrier that stopped beating.
pub async fn heartbeats_refresh_and_expire<S: DeadLetterStore>(s: &S) {
    let a = crate::admin::RetrierHeartbeat::new("host:1:a", ["payment"], false);
    let b = crate::admin::RetrierHeartbeat::new("host:2:b", ["payment", "refund"], true);
    s.heartbeat(&a, LONG).await.expect("beat a");
    s.heartbeat(&b, LONG).await.expect("beat b");
    let rows = s.retriers().await.expect("retriers");
    assert_eq!(rows.iter().map(|r| r.owner.as_str()).collect::<Vec<_>>(), ["host:1:a", "host:2:b"]);
    assert_eq!((rows[1].event_types.len(), rows[1].singleton), (2, true));
    let started = rows[0].started_at;
    tokio::time::sleep(PAST_SHORT).await;
    s.heartbeat(&a, SHORT).await.expect("beat a again: b is stale");
    let rows = s.retriers().await.expect("retriers");
    assert_eq!(rows.len(), 1, "b stopped beating and was removed");
    assert!(close(rows[0].started_at, started, ROUNDING) && rows[0].last_seen > started);
    s.remove_heartbeat("host:1:a").await.expect("remove");
    assert!(s.retriers().await.expect("retriers").is_empty());
}

/// Circuits: a fresh store has none; a write applies only on the expected version, sets
/// `open_until` from the store's clock, and is logged (newest first) with actor and reason.
pub async fn circuits_compare_and_set<S: DeadLetterStore>(s: &S) {
    use crate::{record::CircuitState, store::Circuit};
    let read = s.circuits().await.expect("circuits");
    assert!(read.circuits.is_empty(), "a fresh store has no circuits");
    let closed = read.get("payment");
    assert_eq!((closed.state, closed.version), (CircuitState::Closed, 0));

    let mut open = closed.write(CircuitState::Open, "retrier-a", "11 of 20 calls failed");
    open.cool_down = Duration::from_secs(30);
    open.open_for = Some(Duration::from_secs(30));
    let written = s.write_circuit(open.clone()).await.expect("write").expect("version 0 matches");
    assert_eq!((written.state, written.version), (CircuitState::Open, 1));
    assert!(s.write_circuit(open).await.expect("write").is_none(), "a stale version writes nothing");

    let read = s.circuits().await.expect("circuits");
    let stored: Circuit = read.get("payment");
    assert_eq!((stored.state, stored.version, stored.cool_down), (CircuitState::Open, 1, Duration::from_secs(30)));
    let until = stored.open_until.expect("open_until");
    let left = (until - read.at).to_std().unwrap_or_default();
    assert!(left > Duration::from_secs(25) && left <= Duration::from_secs(30), "open for the cool-down: {left:?}");
    assert_eq!(stored.reason.as_deref(), Some("11 of 20 calls failed"));
    assert_eq!(read.get("refund").version, 0, "other types untouched");

    let mut pause = stored.write(CircuitState::Open, "alice", "ledger migration");
    pause.paused = true;
    pause.paused_by = Some("alice".into());
    pause.pause_reason = Some("ledger migration".into());
    pause.logged_as = "paused";
    let paused = s.write_circuit(pause).await.expect("write").expect("version 1 matches");
    assert!(paused.paused && paused.version == 2 && paused.paused_by.as_deref() == Some("alice"));

    let log = s.circuit_log(Some("payment".into()), 10).await.expect("log");
    let steps: Vec<_> = log.iter().map(|e| (e.from.as_str(), e.to.as_str(), e.actor.as_str())).collect();
    assert_eq!(steps, [("open", "paused", "alice"), ("closed", "open", "retrier-a")], "newest first");
    assert_eq!(log[0].reason, "ledger migration");
    assert!(s.circuit_log(Some("refund".into()), 10).await.expect("log").is_empty());
    assert_eq!(s.circuit_log(None, 1).await.expect("log").len(), 1, "limit");
}

/// Eight retriers race for the trial of an open circuit: exactly one wins.
pub async fn circuit_trial_taken_once<S: DeadLetterStore>(s: &S) {
    use crate::record::CircuitState;
    let closed = s.circuits().await.expect("circuits").get("payment");
    let mut open = closed.write(CircuitState::Open, "retrier-a", "down");
    open.open_for = Some(Duration::ZERO);
    let open = s.write_circuit(open).await.expect("write").expect("opened");
    // Eight retrier processes see the cool-down over and race for the trial.
    let races = (0..8).map(|i| {
        let mut trial = open.write(CircuitState::HalfOpen, &format!("retrier-{i}"), "cool-down over");
        trial.trial_owner = Some(format!("retrier-{i}"));
        trial.trial_for = Some(LONG);
        s.write_circuit(trial)
    });
    let results = futures_util::future::join_all(races).await;
    let winners: Vec<_> = results.into_iter().filter_map(|r| r.expect("write")).collect();
    assert_eq!(winners.len(), 1, "exactly one retrier holds the trial");
    let stored = s.circuits().await.expect("circuits").get("payment");
    assert_eq!((stored.state, stored.trial_owner.clone()), (CircuitState::HalfOpen, winners[0].trial_owner.clone()));
    assert!(stored.trial_until.is_some());
}

/// `claim_capped` (on a store that [supports it](DeadLetterStore::supports_claim_capped)) takes
/// no more than the cap leaves: rows of the type under a live lease count against
/// `in_flight`, and rows taken by capped claims within the window count against `starts`,
/// whoever claimed them; other types are not touched.
pub async fn claim_capped_keeps_the_cap<S: DeadLetterStore>(s: &S) {
    if !s.supports_claim_capped() {
        return;
    }
    for n in 0..12 {
        park(s, letter("capped", n)).await;
    }
    park(s, letter("other", 1)).await;
    let held = ClaimCap { in_flight: Some(3), starts: None };
    let capped =
        |limit: usize, cap: ClaimCap| s.claim_capped(request(&["capped", "other"], limit, LONG, "conformance"), cap);
    let first = capped(10, held).await.expect("capped claim");
    assert_eq!(first.len(), 3, "three may be in flight");
    assert!(first.iter().all(|c| c.event_type == "capped"), "only the request's first type");
    assert!(capped(10, held).await.expect("capped claim").is_empty(), "three are held");
    // A plain claim of another retrier counts too.
    assert_eq!(s.claim(request(&["capped"], 1, LONG, "another")).await.expect("claim").len(), 1);
    let wider = ClaimCap { in_flight: Some(5), starts: None };
    assert_eq!(capped(10, wider).await.expect("capped claim").len(), 1, "four held, five allowed");
    // Settled rows free their slots.
    let done = first.iter().map(|c| Settlement::Succeeded { lease: c.lease }).collect();
    assert_eq!(s.settle(done).await.expect("settle").applied, 3);
    // The rate: two claims within the window share its starts; no cap on slots.
    let rate = ClaimCap { in_flight: None, starts: Some((4, Duration::from_secs(3600))) };
    assert_eq!(capped(3, rate).await.expect("capped claim").len(), 3);
    assert_eq!(capped(3, rate).await.expect("capped claim").len(), 1, "4 per window, 3 taken");
    assert!(capped(3, rate).await.expect("capped claim").is_empty());
    // A window that has passed counts nothing.
    tokio::time::sleep(Duration::from_millis(30)).await;
    let short = ClaimCap { in_flight: None, starts: Some((4, Duration::from_millis(20))) };
    assert_eq!(capped(3, short).await.expect("capped claim").len(), 3, "the earlier claims are out of the window");
}

/// `settle_and_claim` writes the outcomes as `settle` would (fencing a lease that no longer
/// holds its row) and claims the next batch as `claim` would, never twice the same row; with
/// nothing left to claim the outcomes are still written.
pub async fn settle_and_claim_writes_then_claims<S: DeadLetterStore>(s: &S) {
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

/// `reveal` audits a reveal of an existing row (action `reveal`, the actor and reason, an
/// empty diff) and refuses an unknown id. A store that cannot audit one ([`Error::Unsupported`],
/// the default) reveals nothing: skipped.
pub async fn reveal_is_audited<S: DeadLetterStore>(s: &S) {
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
pub async fn unreadable_rows_are_counted<S: DeadLetterStore>(s: &S) {
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
