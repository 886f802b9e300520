//! The admin layer (`dlq_core::admin::Admin`: audited patches and undo, bulk actions that
//! stop and resume) on every store: `MemoryStore`, `SqliteStore` and `PgStore` (fresh
//! database per test from `#[sqlx::test]`; set `DATABASE_URL`). What the stores do for it
//! (filters and keyset pages, `apply` with its refusals and audit notes, operations and their
//! cursors, `patch`) is in the conformance suite (`store_conformance_tests!`).

use std::ops::ControlFlow;
use std::sync::Arc;

use dlq_core::admin::{Admin, BulkPlan, Pacing};
use dlq_core::store::{ClaimRequest, OperationState, PatchRequest, Refused, Settlement};
use dlq_core::{
    DlqId, Error, ErrorClass, ListFilter, MemoryStore, Payload, Status, adapter::DeadReason, classify::FailureInfo,
    store::NewDeadLetter, store::prelude::*,
};

type Store = Arc<dyn DeadLetterStore>;

fn dead(event_type: &str, kind: &str, reason: &str, n: i64) -> NewDeadLetter {
    let failure = FailureInfo::new(ErrorClass::Permanent, kind, reason.to_owned(), vec![], None);
    NewDeadLetter::new(event_type, Payload::Json(serde_json::json!({ "n": n })), failure).dead(DeadReason::Permanent)
}

async fn park_dead(store: &Store, n: i64) -> Vec<DlqId> {
    let letters = (0..n).map(|i| dead("payment", "BadCurrency", &format!("currency USD{i} unknown"), i)).collect();
    store.park_many(letters).await.unwrap().into_iter().map(|p| p.id).collect()
}

async fn patch_keeps_patch_and_original_and_undo_restores_it(store: Store) {
    let failure = FailureInfo::new(ErrorClass::Permanent, "Decode", "bad".into(), vec![], None);
    let raw =
        NewDeadLetter::new("payment", Payload::from_bytes(b"\xffnot json"), failure).dead(DeadReason::Undecodable);
    let raw = store.park(raw).await.unwrap().id;
    let id = park_dead(&store, 1).await[0];
    let admin = Admin::new(store.clone(), "carol");
    let patch = serde_json::json!([{"op": "replace", "path": "/n", "value": 42}]);
    let done = admin.patch(id, &patch, "fix n").await.unwrap();
    assert_eq!(store.get(id).await.unwrap().unwrap().payload, Payload::Json(serde_json::json!({"n": 42})));
    let entry = store.audit_entry(done.audit_id).await.unwrap().unwrap();
    assert_eq!((entry.reason.as_deref(), &entry.diff["patch"]), (Some("fix n"), &patch));
    assert_eq!(entry.diff["payload"]["old"], serde_json::json!({"n": 0}));

    let undone = admin.undo(done.audit_id, None, false).await.unwrap();
    assert_eq!(store.get(id).await.unwrap().unwrap().payload, Payload::Json(serde_json::json!({"n": 0})));
    assert_eq!(store.audit_entry(undone.audit_id).await.unwrap().unwrap().diff["undo_of"], done.audit_id);

    // Undoing an older patch would revert the later ones with it: refused, listing them,
    // unless forced; the latest can be undone as it is.
    let set = |n: i64| serde_json::json!([{"op": "replace", "path": "/n", "value": n}]);
    let older = admin.patch(id, &set(1), "older").await.unwrap();
    let later = admin.patch(id, &set(2), "later fix").await.unwrap();
    let refused = admin.undo(older.audit_id, None, false).await.unwrap_err().to_string();
    assert!(refused.contains(&format!("audit entry {}", later.audit_id)) && refused.contains("later fix"), "{refused}");
    assert_eq!(store.get(id).await.unwrap().unwrap().payload, Payload::Json(serde_json::json!({"n": 2})), "untouched");
    assert!(admin.undo(done.audit_id, None, false).await.is_err(), "an undone patch was followed by its undo");
    admin.undo(older.audit_id, Some("back to before both"), true).await.unwrap();
    assert_eq!(store.get(id).await.unwrap().unwrap().payload, Payload::Json(serde_json::json!({"n": 0})));
    let latest = admin.patch(id, &set(3), "latest").await.unwrap();
    admin.undo(latest.audit_id, None, false).await.unwrap();
    assert_eq!(store.get(id).await.unwrap().unwrap().payload, Payload::Json(serde_json::json!({"n": 0})));

    // A raw payload: replaced whole, and the undo restores its bytes exactly.
    let replaced = admin.replace_payload(raw, Payload::Json(serde_json::json!({"ok": true})), "rewrote").await.unwrap();
    admin.undo(replaced.audit_id, Some("back"), false).await.unwrap();
    assert_eq!(store.get(raw).await.unwrap().unwrap().payload, Payload::from_bytes(b"\xffnot json"));

    for (patch, want) in [
        (serde_json::json!({"op": "nope"}), "not an RFC 6902"),
        (serde_json::json!([{"op": "remove", "path": "/missing"}]), "does not apply"),
    ] {
        let err = admin.patch(id, &patch, "x").await.unwrap_err();
        assert!(err.to_string().contains(want), "{err}");
    }
    assert!(admin.patch(id, &patch, "  ").await.unwrap_err().to_string().contains("needs a reason"));
    assert!(matches!(admin.patch(999_999, &patch, "x").await.unwrap_err(), Error::NotFound(999_999)));
    let redrive = admin.start(BulkPlan::redrive(ListFilter::default().ids([id]), "")).await.unwrap();
    redrive.run(Pacing::default(), |_| ControlFlow::Continue(())).await.unwrap();
    let redrive_entry = store.audit(id).await.unwrap().last().unwrap().id;
    assert!(admin.undo(redrive_entry, None, false).await.unwrap_err().to_string().contains("only patches"));
}

async fn bulk_redrive_stops_and_resumes_without_moving_a_row_twice(store: Store) {
    let rows = park_dead(&store, 7).await;
    let admin = Admin::new(store.clone(), "dave");
    let plan = BulkPlan::redrive(ListFilter::default(), "downstream back").batch(2).max(6);

    let dry = admin.dry_run(plan.clone()).unwrap().run(Pacing::default(), |_| ControlFlow::Continue(())).await.unwrap();
    assert_eq!(dry.moved_ids, rows[..6]);
    assert_eq!(store.count(ListFilter::default().status(Status::Pending)).await.unwrap(), 0, "dry run moves nothing");

    let bulk = admin.start(plan).await.unwrap();
    let op = bulk.operation().unwrap().id;
    let first = bulk.run(Pacing::default(), |_| ControlFlow::Break(())).await.unwrap();
    assert_eq!((first.moved, first.state, first.cursor), (2, OperationState::Stopped, rows[1]));

    let rest = admin.resume(op).await.unwrap().run(Pacing::default(), |_| ControlFlow::Continue(())).await.unwrap();
    assert_eq!((rest.moved, rest.state), (6, OperationState::Done), "max 6 over both runs");
    assert_eq!(rest.moved_ids, rows[2..6]);
    for (i, id) in rows.iter().enumerate() {
        let letter = store.get(*id).await.unwrap().unwrap();
        let want = if i < 6 { (Status::Pending, 1) } else { (Status::FailedPermanently, 0) };
        assert_eq!((letter.status, letter.redrive_count), want, "row {i}");
        assert_eq!(store.audit(*id).await.unwrap().len(), want.1 as usize);
    }
    assert!(admin.resume(op).await.unwrap_err().to_string().contains("done"));
    let discard = BulkPlan::discard(ListFilter::default(), " ");
    assert!(admin.start(discard).await.unwrap_err().to_string().contains("discard needs a reason"));
}

/// `Admin::redrive` and `Admin::discard` take every matching row, past `ListFilter`'s default
/// limit of 100 (where the store's own `redrive` and `discard`, now gone, stopped without a
/// word), with the loop guard and the reason in the audit log.
async fn redrive_and_discard_take_every_matching_row(store: Store) {
    let rows = park_dead(&store, 130).await;
    let admin = Admin::new(store.clone(), "erin");
    let first = admin.redrive(ListFilter::default().event_type("payment"), "ledger back").await.unwrap();
    assert_eq!((first.moved, first.moved_ids.first(), first.moved_ids.last()), (130, rows.first(), rows.last()));
    let pending = ListFilter::default().status(Status::Pending).limit(1_000);
    assert_eq!(store.count(pending.clone()).await.unwrap(), 130);
    let audit = store.audit(rows[129]).await.unwrap();
    assert_eq!((audit[0].actor.as_str(), audit[0].reason.as_deref()), ("erin", Some("ledger back")));

    // Discarding every pending row and redriving again: discarded is final, and the count of
    // refusals says so.
    let discarded = admin.discard(ListFilter::default().status(Status::Pending), "replayed elsewhere").await.unwrap();
    assert_eq!(discarded.moved, 130);
    let named = admin.redrive(ListFilter::default().ids([rows[0], rows[129]]), "again").await.unwrap();
    assert_eq!(named.moved, 0);
    assert!(named.refusals.iter().all(|r| r.why == Refused::Status { status: Status::Discarded }), "{named:?}");
}

/// A `SUCCEEDED` row's payload is the one its handler ran with: a patch, a whole new payload,
/// an undo of an earlier patch and a group patch are refused, each with one line naming the
/// row and its status, and nothing is written. The store refuses too, under its row lock (a row
/// can succeed between the admin layer's read and its write).
async fn a_succeeded_row_is_never_patched_nor_undone(store: Store) {
    let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    let letter = NewDeadLetter::new("payment", Payload::Json(serde_json::json!({ "n": 1 })), failure);
    let id = store.park(letter).await.unwrap().id;
    let admin = Admin::new(store.clone(), "alice");
    let add = serde_json::json!([{ "op": "add", "path": "/m", "value": 2 }]);
    let earlier = admin.patch(id, &add, "add m").await.unwrap();
    let request = ClaimRequest {
        event_types: vec!["payment".into()],
        limit: 1,
        lease: std::time::Duration::from_secs(60),
        owner: "test".into(),
    };
    let lease = store.claim(request).await.unwrap()[0].lease;
    store.settle(vec![Settlement::Succeeded { lease }]).await.unwrap();
    let before = store.get(id).await.unwrap().unwrap().payload;
    let replace = serde_json::json!([{ "op": "replace", "path": "/n", "value": 7 }]);
    let refusals = [
        admin.patch(id, &replace, "fix").await.map(drop),
        admin.replace_payload(id, Payload::Json(serde_json::json!({ "n": 7 })), "fix").await.map(drop),
        admin.undo(earlier.audit_id, None, false).await.map(drop),
        admin.undo(earlier.audit_id, None, true).await.map(drop),
    ];
    for refused in refusals {
        let err = refused.unwrap_err();
        assert!(matches!(err, Error::InvalidState { status: Status::Succeeded, .. }), "{err:?}");
        let line = dlq_core::admin::one_line(&err);
        assert!(line.contains(&format!("dead letter {id} is SUCCEEDED")) && !line.contains('\n'), "{line}");
    }
    let preview = admin.patch_preview(ListFilter::default().ids([id]), &replace, 10).await.unwrap();
    assert!(preview.patched.is_empty(), "{preview:?}");
    assert!(preview.refused[0].reason.contains("SUCCEEDED"), "{preview:?}");
    let group = BulkPlan::patch(ListFilter::default().ids([id]), replace.clone(), "fix");
    let report = admin.start(group).await.unwrap().run(Pacing::default(), |_| ControlFlow::Continue(())).await.unwrap();
    assert_eq!((report.moved, report.state), (0, OperationState::Done));
    assert_eq!(report.refusals[0].why, Refused::Status { status: Status::Succeeded });
    let note = dlq_core::store::AuditNote::new("bob", "fix");
    let request = PatchRequest { id, payload: Payload::Json(serde_json::json!(0)), note, patch: None, undo_of: None };
    let err = store.patch(request).await.unwrap_err();
    assert!(matches!(err, Error::InvalidState { status: Status::Succeeded, .. }), "the store refuses: {err:?}");
    assert_eq!(store.get(id).await.unwrap().unwrap().payload, before, "nothing written");
    assert_eq!(store.audit(id).await.unwrap().len(), 1, "the earlier patch only");
}

/// A group patch is a stored operation: stopped after its first batch and resumed (by another
/// admin, as another console or `dlq patch --resume` would), every row is patched exactly once
/// (an array `add`, which a second application would repeat, appears once per row), each
/// audited with the operation's mark; a row the patch does not fit is skipped with why, and
/// the run goes on.
async fn a_group_patch_stopped_and_resumed_patches_each_row_once(store: Store) {
    let failure = FailureInfo::new(ErrorClass::Permanent, "NoTag", "untagged".into(), vec![], None);
    let mut letters: Vec<_> = (0..7)
        .map(|n| serde_json::json!({ "n": n, "tags": ["a"] }))
        .chain([serde_json::json!({ "n": 7 })])
        .map(|p| NewDeadLetter::new("payment", Payload::Json(p), failure.clone()).dead(DeadReason::Permanent))
        .collect();
    letters.rotate_right(5); // the row without tags in the middle: rows[4]
    let rows: Vec<DlqId> = store.park_many(letters).await.unwrap().into_iter().map(|p| p.id).collect();
    let untagged = rows[4];
    let original = store.get(rows[0]).await.unwrap().unwrap().payload;
    let admin = Admin::new(store.clone(), "frank");
    let add = serde_json::json!([{ "op": "add", "path": "/tags/-", "value": "replayed" }]);
    let plan = BulkPlan::patch(ListFilter::default().event_type("payment"), add.clone(), "tag the replays").batch(2);

    let dry = admin.dry_run(plan.clone()).unwrap().run(Pacing::default(), |_| ControlFlow::Continue(())).await.unwrap();
    assert_eq!((dry.moved, dry.refused), (7, 1));
    let bulk = admin.start(plan).await.unwrap();
    let op = bulk.operation().unwrap().id;
    let first = bulk.run(Pacing::default(), |_| ControlFlow::Break(())).await.unwrap();
    assert_eq!((first.moved, first.state, first.cursor), (2, OperationState::Stopped, rows[1]));
    let other = Admin::new(store.clone(), "grace");
    let err = other.resume_as(op, dlq_core::store::ActionKind::Redrive).await.unwrap_err();
    assert!(err.to_string().contains("is a patch, not a redrive"), "{err}");
    let rest = other.resume(op).await.unwrap().run(Pacing::default(), |_| ControlFlow::Continue(())).await.unwrap();
    assert_eq!((rest.moved, rest.refused, rest.state), (7, 1, OperationState::Done));
    assert_eq!(rest.refusals[0].id, untagged);
    assert!(rest.refusals[0].why.to_string().starts_with("patch does not apply"), "{:?}", rest.refusals);
    for &id in &rows {
        let payload = store.get(id).await.unwrap().unwrap().payload;
        let audit = store.audit(id).await.unwrap();
        if id == untagged {
            assert_eq!((payload, audit.len()), (Payload::Json(serde_json::json!({ "n": 7 })), 0));
            continue;
        }
        let Payload::Json(doc) = payload else { panic!("JSON") };
        assert_eq!(doc["tags"], serde_json::json!(["a", "replayed"]), "row {id}: patched once");
        assert_eq!(audit.len(), 1, "row {id}");
        assert!(dlq_core::store::patched_by(&audit[0].diff, op) && audit[0].diff["patch"] == add);
    }
    assert!(admin.resume(op).await.unwrap_err().to_string().contains("done"));
    // Undo restores a row patched by the operation.
    let entry = store.audit(rows[0]).await.unwrap()[0].id;
    admin.undo(entry, None, false).await.unwrap();
    assert_eq!(store.get(rows[0]).await.unwrap().unwrap().payload, original);
}

macro_rules! on_every_store {
    ($($check:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test]
            async fn $check() {
                super::$check(std::sync::Arc::new(super::MemoryStore::new())).await;
            })*
        }
        mod sqlite {
            $(#[tokio::test]
            async fn $check() {
                let store = dlq_sqlx::SqliteStore::in_memory().await.expect("SQLite store");
                super::$check(std::sync::Arc::new(store)).await;
            })*
        }
        mod pg {
            $(#[sqlx::test(migrations = false)]
            async fn $check(pool: sqlx::PgPool) {
                let store = dlq_sqlx::PgStore::from_pool(pool, dlq_sqlx::PgConfig::default()).await.expect("PgStore");
                super::$check(std::sync::Arc::new(store)).await;
            })*
        }
    };
}

on_every_store!(
    redrive_and_discard_take_every_matching_row,
    patch_keeps_patch_and_original_and_undo_restores_it,
    bulk_redrive_stops_and_resumes_without_moving_a_row_twice,
    a_succeeded_row_is_never_patched_nor_undone,
    a_group_patch_stopped_and_resumed_patches_each_row_once,
);
