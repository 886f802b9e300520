//! The operator layer every front end is a shell over (`dlq_core::admin::Admin`: the CLI's
//! verbs, the console's buttons) on `VecStore`: a patch and its undo, a redrive of every
//! matching row, and a stored bulk plan run in batches to its end.

use std::ops::ControlFlow;
use std::sync::Arc;

use dlq_core::admin::{Admin, BulkPlan, Pacing};
use dlq_core::store::{NewDeadLetter, OperationState};
use dlq_core::{store::prelude::*, adapter::DeadReason, DlqId, ErrorClass, classify::FailureInfo, ListFilter, Payload, Status};
use serde_json::json;
use third_party_store::VecStore;

async fn park_dead(store: &VecStore, event_type: &str, n: u64) -> DlqId {
    let failure =
        FailureInfo::new(ErrorClass::Permanent, "BadCurrency", "currency \"USD \" unknown".into(), vec![], None);
    let payload = Payload::Json(json!({ "n": n, "currency": "USD " }));
    let letter = NewDeadLetter::new(event_type, payload, failure).dead(DeadReason::Permanent);
    store.park(letter).await.unwrap().id
}

#[tokio::test]
async fn the_admin_layer_patches_undoes_redrives_and_runs_a_bulk_plan() {
    let store = Arc::new(VecStore::new());
    let mut payments = Vec::new();
    for n in 0..3 {
        payments.push(park_dead(&store, "payment", n).await);
    }
    let refunds = [park_dead(&store, "refund", 1).await, park_dead(&store, "refund", 2).await];
    let admin = Admin::new(store.clone(), "alice");

    // A patch, then its undo: the original payload, exactly, with both in the audit log.
    let fix = json!([{ "op": "replace", "path": "/currency", "value": "USD" }]);
    let patched = admin.patch(payments[0], &fix, "trailing space from the gateway").await.unwrap();
    assert_eq!(
        store.get(payments[0]).await.unwrap().unwrap().payload,
        Payload::Json(json!({"n": 0, "currency": "USD"}))
    );
    admin.undo(patched.audit_id, Some("wrong row"), false).await.unwrap();
    let row = store.get(payments[0]).await.unwrap().unwrap();
    assert_eq!(row.payload, Payload::Json(json!({"n": 0, "currency": "USD "})));
    let audit = admin.show(payments[0]).await.unwrap().audit;
    assert_eq!(
        audit.iter().map(|a| (a.action.as_str(), a.actor.as_str())).collect::<Vec<_>>(),
        [("patch", "alice"); 2]
    );

    // Every dead payment, audited; the refunds are left alone.
    let report = admin.redrive(ListFilter::default().event_type("payment"), "ledger fixed").await.unwrap();
    assert_eq!((report.moved, report.refused, report.state), (3, 0, OperationState::Done));
    for id in &payments {
        let row = store.get(*id).await.unwrap().unwrap();
        assert_eq!((row.status, row.redrive_count), (Status::Pending, 1));
    }
    assert_eq!(admin.redrive(ListFilter::default().event_type("payment"), "again").await.unwrap().moved, 0);

    // A stored plan, one row per batch: its operation's cursor follows the batches to the end.
    let plan = BulkPlan::discard(ListFilter::default().event_type("refund"), "not ours").batch(1);
    let report = admin.start(plan).await.unwrap().run(Pacing::default(), |_| ControlFlow::Continue(())).await.unwrap();
    assert_eq!((report.moved, report.state), (2, OperationState::Done));
    let operation = store.operation(report.operation.expect("stored")).await.unwrap().expect("operation");
    assert_eq!((operation.state, operation.cursor, operation.moved), (OperationState::Done, refunds[1], 2));
    for id in refunds {
        assert_eq!(store.get(id).await.unwrap().unwrap().status, Status::Discarded);
    }
}
