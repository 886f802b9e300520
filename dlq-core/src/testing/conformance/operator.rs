//! Operator writes ([`OperatorStore`]): batches, patches, bulk operations, upgrades, purge.

use super::*;

/// A redrive batch moves only dead rows back to `PENDING`, due now, with the retry count
/// reset and the redrive count up, and audits each with the note; the others are refused
/// with their status.
pub async fn redrive_only_dead_rows<S: DeadLetterStore + ?Sized>(s: &S) {
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
pub async fn apply_refuses_what_it_must_and_audits_the_reason<S: DeadLetterStore + ?Sized>(s: &S) {
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
pub async fn operation_cursor_moves_with_its_batch_only_once<S: DeadLetterStore + ?Sized>(s: &S) {
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
pub async fn discard_rules<S: DeadLetterStore + ?Sized>(s: &S) {
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
pub async fn patch_records_diff<S: DeadLetterStore + ?Sized>(s: &S) {
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
pub async fn upgrade_rewrites_payload_and_version<S: DeadLetterStore + ?Sized>(s: &S) {
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
pub async fn patch_rows_patch_each_row_once<S: DeadLetterStore + ?Sized>(s: &S) {
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
pub async fn purge_by_age<S: DeadLetterStore + ?Sized>(s: &S) {
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

/// `wait_for_work` returns after a redrive too: the redriven row is due at once.
pub async fn wait_for_work_wakes_on_redrive<S: DeadLetterStore + ?Sized>(s: &S) {
    let id = park(s, letter("payment", 1).dead(DeadReason::Permanent)).await;
    start_wakeups(s).await;
    let ticket = s.work_ticket();
    let ids = [id];
    let redrive_while_waiting =
        async { tokio::join!(s.wait_for_work(ticket, Duration::from_secs(3600)), redrive(s, &ids, "ops")) };
    let woken = tokio::time::timeout(PATIENCE, redrive_while_waiting).await;
    assert_eq!(woken.expect("the redrive did not wake the wait").1, [id]);
}

/// A payload over the store's limit is cut, reported (`Parked::truncated`), parked dead
/// (`too_large`), never claimed, and not redriven until an operator patches in a whole one.
pub async fn park_over_limit_is_dead_and_never_claimed<S: DeadLetterStore + ?Sized>(s: &S) {
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

/// SQL metacharacters and unusual Unicode in every text field are stored as they are.
pub async fn park_hostile_text<S: DeadLetterStore + ?Sized>(s: &S) {
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

/// A key whose row finished (`SUCCEEDED`, `DISCARDED`) does not swallow a new failure of the
/// event: it is parked as a new row with the same key, and redeliveries find that one. A dead
/// row (`FAILED_PERMANENTLY`) is alive: it still dedupes.
pub async fn dedupe_parks_anew_once_finished<S: DeadLetterStore + ?Sized>(s: &S) {
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
