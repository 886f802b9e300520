//! The conformance suite of the store contract: one async function per rule, each taking a
//! fresh, empty store and panicking (like a test) when the store breaks it, in one module per
//! part of the contract ([`queue`], [`reads`], [`operator`], [`fleet`], [`privacy`], and the
//! optional [`singleton`] and [`capped_claims`]). The [`queue`] tests need only a
//! [`QueueStore`]; the others need a whole [`DeadLetterStore`], since they set their rows up
//! through the queue and read them back.
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
//! conformance::queue::park_and_get(&MemoryStore::new()).await;
//! conformance::queue::settle_fences_stale_tokens(&MemoryStore::new()).await;
//! # });
//! ```

pub mod capped_claims;
pub mod fleet;
pub mod operator;
pub mod privacy;
pub mod queue;
pub mod reads;
pub mod singleton;

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
    DeadLetter, DlqId, Error, ErrorClass, ListFilter, Payload, Status, admin::StatsRow, classify::FailureInfo,
    record::DeadReason, record::SourceMeta, store::AuditNote, store::NewDeadLetter, store::VersionUpgrade,
    store::prelude::*,
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

async fn park<S: QueueStore + ?Sized>(s: &S, letter: NewDeadLetter) -> DlqId {
    s.park(letter).await.expect("park").id
}

async fn get<S: QueueStore + ?Sized>(s: &S, id: DlqId) -> DeadLetter {
    s.get(id).await.expect("get").unwrap_or_else(|| panic!("row {id} not found"))
}

async fn claim<S: QueueStore + ?Sized>(s: &S, types: &[&str], lease: Duration) -> Vec<Claimed> {
    s.claim(request(types, 100, lease, "conformance")).await.expect("claim")
}

async fn claim_one<S: QueueStore + ?Sized>(s: &S, event_type: &str) -> Lease {
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
async fn act<S: OperatorStore + ?Sized>(s: &S, action: ActionKind, ids: &[DlqId], actor: &str) -> BatchReport {
    let note = AuditNote::new(actor, format!("{} by the conformance suite", action.as_str()));
    let batch = BatchAction { action, ids: ids.to_vec(), note, max_redrives: None, step: None };
    s.apply(batch).await.expect("apply")
}

/// Redrives `ids`; returns those moved.
async fn redrive<S: OperatorStore + ?Sized>(s: &S, ids: &[DlqId], actor: &str) -> Vec<DlqId> {
    act(s, ActionKind::Redrive, ids, actor).await.moved
}

/// Discards `ids`; returns those moved.
async fn discard<S: OperatorStore + ?Sized>(s: &S, ids: &[DlqId], actor: &str) -> Vec<DlqId> {
    act(s, ActionKind::Discard, ids, actor).await.moved
}

/// Replaces a payload as a plain patch of `actor` (no RFC 6902 patch, no undo).
async fn patch<S: OperatorStore + ?Sized>(s: &S, id: DlqId, payload: Payload, actor: &str) -> StoreResult<i64> {
    let note = AuditNote { actor: actor.to_owned(), reason: None };
    s.patch(PatchRequest { id, payload, note, patch: None, undo_of: None }).await
}

async fn settle_ok<S: QueueStore + ?Sized>(s: &S, outcome: Settlement) {
    let report = s.settle(vec![outcome]).await.expect("settle");
    assert_eq!((report.applied, report.fenced), (1, vec![]), "the lease was held");
}

const HOSTILE: &str = "'); DROP TABLE dlq_events; -- \" \\ % _ ` $1 ?1 :x \u{202e}evil ✓ 💥";

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

/// Starts the store's listener, if it has one: a first wait does. A listener announces once
/// it listens (what was parked before is due), which would end the wait of a test as a park
/// would; this short wait takes that announcement. It bounds no assertion: a listener slower
/// than that only lets a test pass on the listener's announcement.
async fn start_wakeups<S: QueueStore + ?Sized>(s: &S) {
    s.wait_for_work(s.work_ticket(), SHORT).await;
}
