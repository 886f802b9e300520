//! Payload versions through the public API, on `MemoryStore`: rows parked by earlier versions of
//! a handler are upcast by the retrier from their own version to the handler's, rewritten in it
//! (and audited) only once the retry succeeds; a failing upcaster parks the row dead, a row of
//! a newer version than the handler's (a rollback) is left without being charged a retry, and
//! each handler stores its version on the rows it parks.

use std::sync::Arc;

use dlq_core::store::NewDeadLetter;
use dlq_core::{
    ErrorClass, MemoryStore, Payload, Retrier, Status, adapter::DeadReason, classify::FailureInfo, dead_letter,
    handlers, handlers::UpcastError, store::prelude::*, with_store,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Version 1: amounts in cents, no currency.
#[derive(Serialize, Deserialize)]
struct PaymentV1 {
    id: u64,
    cents: i64,
}

/// Version 3, the handler's: the currency is required and `cents` is now `amount_cents`.
#[derive(Debug, Serialize, Deserialize)]
struct Payment {
    id: u64,
    amount_cents: i64,
    currency: String,
}

/// Version 2 added the currency; every payment before it was in euros. Payments with a
/// negative amount were refunds, which version 2 no longer accepts.
fn v1_to_v2(old: PaymentV1) -> Result<Value, UpcastError> {
    if old.cents < 0 {
        return Err(UpcastError::new(format!("payment {} is a refund", old.id)));
    }
    Ok(json!({ "id": old.id, "cents": old.cents, "currency": "EUR" }))
}

/// Version 3 renamed `cents` to `amount_cents`: done on the JSON, the version 2 struct is gone.
fn v2_to_v3(mut v: Value) -> Result<Value, UpcastError> {
    let cents = v.as_object_mut().and_then(|o| o.remove("cents")).ok_or_else(|| UpcastError::new("no `cents`"))?;
    v["amount_cents"] = cents;
    Ok(v)
}

#[dead_letter(event_type = "upcast-payment", version = 3, upcast = [v1_to_v2, v2_to_v3], max_retries = 5)]
async fn handle(payment: Payment) -> Result<(), std::io::Error> {
    if payment.currency == "XXX" {
        return Err(std::io::Error::other("ledger down"));
    }
    Ok(())
}

fn park_as(version: u32, payload: Value) -> NewDeadLetter {
    let failure = FailureInfo::new(ErrorClass::Transient, "io", "ledger down".into(), vec![], None);
    NewDeadLetter::new("upcast-payment", Payload::Json(payload), failure).with_version(version)
}

async fn park(store: &MemoryStore, version: u32, payload: Value) -> i64 {
    store.park(park_as(version, payload)).await.unwrap().id
}

#[tokio::test]
async fn the_retrier_upcasts_from_each_rows_version_and_rewrites_the_row_once_it_succeeds() {
    let store = Arc::new(MemoryStore::new());
    let v1 = park(&store, 1, json!({ "id": 1, "cents": 500 })).await;
    let v2 = park(&store, 2, json!({ "id": 2, "cents": 700, "currency": "USD" })).await;
    let v3 = park(&store, 3, json!({ "id": 3, "amount_cents": 900, "currency": "GBP" })).await;
    let retrier = Retrier::new(Arc::clone(&store), handlers![handle].unwrap());
    assert_eq!(retrier.run_once().await.unwrap(), 3);
    let want = [
        (v1, json!({ "id": 1, "amount_cents": 500, "currency": "EUR" }), Some(1)),
        (v2, json!({ "id": 2, "amount_cents": 700, "currency": "USD" }), Some(2)),
        (v3, json!({ "id": 3, "amount_cents": 900, "currency": "GBP" }), None),
    ];
    for (id, payload, upcast_from) in want {
        let row = store.get(id).await.unwrap().unwrap();
        assert_eq!((row.status, row.version, row.payload), (Status::Succeeded, 3, Payload::Json(payload)));
        let audit = store.audit(id).await.unwrap();
        let upgrades: Vec<_> = audit.iter().filter(|a| a.action == "upgrade").collect();
        match upcast_from {
            Some(from) => {
                assert_eq!(upgrades.len(), 1, "row {id}");
                let reason = format!("upcast from version {from} to 3 by a retry that succeeded");
                assert_eq!(upgrades[0].reason.as_deref(), Some(reason.as_str()));
                assert_eq!(upgrades[0].diff["version"], json!([from, 3]));
                assert!(upgrades[0].actor.contains(std::process::id().to_string().as_str()), "the retrier");
            }
            None => assert!(upgrades.is_empty(), "a row of the handler's version is not rewritten"),
        }
    }
}

#[tokio::test]
async fn a_failed_retry_keeps_the_row_in_its_own_version() {
    let store = Arc::new(MemoryStore::new());
    let id = park(&store, 2, json!({ "id": 4, "cents": 100, "currency": "XXX" })).await;
    let retrier = Retrier::new(Arc::clone(&store), handlers![handle].unwrap());
    assert_eq!(retrier.run_once().await.unwrap(), 1);
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!((row.status, row.retry_count, row.version), (Status::Pending, 1, 2));
    assert_eq!(row.payload, Payload::Json(json!({ "id": 4, "cents": 100, "currency": "XXX" })));
    assert!(store.audit(id).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_failing_upcaster_parks_the_row_dead_and_a_newer_version_is_left_uncharged() {
    let store = Arc::new(MemoryStore::new());
    let refund = park(&store, 1, json!({ "id": 5, "cents": -100 })).await;
    let garbled = park(&store, 2, json!({ "id": 6 })).await;
    let newer = park(&store, 4, json!({ "id": 7, "amount": { "cents": 1 } })).await;
    let retrier = Retrier::new(Arc::clone(&store), handlers![handle].unwrap());
    assert_eq!(retrier.run_once().await.unwrap(), 3);
    let row = store.get(refund).await.unwrap().unwrap();
    assert_eq!((row.status, row.dead_reason, row.version), (Status::FailedPermanently, Some(DeadReason::Permanent), 1));
    assert_eq!((row.failure.kind.as_str(), row.failure.class), ("upcast", ErrorClass::Permanent));
    assert_eq!(row.failure.reason, "upcasting from version 1 to 2 failed: payment 5 is a refund");
    let row = store.get(garbled).await.unwrap().unwrap();
    assert_eq!(row.failure.reason, "upcasting from version 2 to 3 failed: no `cents`");
    let row = store.get(newer).await.unwrap().unwrap();
    assert_eq!((row.status, row.retry_count, row.version), (Status::FailedPermanently, 0, 4));
    assert_eq!((row.dead_reason, row.failure.kind.as_str()), (Some(DeadReason::Undecodable), "version_ahead"));
    assert!(
        row.failure.reason.contains("version 4 of `upcast-payment`, newer than version 3"),
        "{}",
        row.failure.reason
    );
}

#[tokio::test]
async fn a_handler_parks_its_failures_in_its_own_version() {
    let store = Arc::new(MemoryStore::new());
    let event = Payment { id: 8, amount_cents: 1, currency: "XXX".into() };
    let err = with_store(store.clone(), handle(event)).await.unwrap_err();
    let id = err.dlq_id().unwrap();
    assert_eq!(store.get(id).await.unwrap().unwrap().version, 3);
}
