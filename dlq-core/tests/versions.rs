//! A forgotten version bump: the event changed, its handler still says version 1, and the
//! store's type catalog holds version 1's schema (published by the build that parked the rows).
//! The retrier refuses to start before any row is claimed, unless told to accept the change.

use std::sync::Arc;

use dlq_core::catalog::{Catalog, EventTypeInfo};
use dlq_core::schemars::JsonSchema;
use dlq_core::{Error, MemoryStore, Retrier, Status, dead_letter, handlers, store::prelude::*};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
struct Payment {
    id: u64,
    amount_cents: i64,
}

#[dead_letter(event_type = "versions-payment", backoff = "none")]
async fn handle(payment: Payment) -> Result<(), std::io::Error> {
    let _ = payment;
    Ok(())
}

/// The store as the old build left it: version 1 published with `cents`, version 2 (the
/// newest) published by a later build, and one row of version 1 waiting.
async fn store_of_the_old_builds() -> (Arc<MemoryStore>, dlq_core::DlqId) {
    let store = Arc::new(MemoryStore::new());
    let mut v1 = EventTypeInfo::new("versions-payment", 1, "payments-v1");
    v1.schema = Some(serde_json::json!({"type": "object", "required": ["id", "cents"],
        "properties": {"id": {"type": "integer"}, "cents": {"type": "integer"}}}));
    store.publish_types(vec![v1]).await.unwrap();
    store.publish_types(vec![EventTypeInfo::new("versions-payment", 2, "payments-v2")]).await.unwrap();
    let failure =
        dlq_core::classify::FailureInfo::new(dlq_core::ErrorClass::Transient, "io", "down".into(), vec![], None);
    let payload = dlq_core::Payload::Json(serde_json::json!({"id": 1, "cents": 5}));
    let letter = dlq_core::store::NewDeadLetter::new("versions-payment", payload, failure);
    (Arc::clone(&store), store.park(letter).await.unwrap().id)
}

#[tokio::test]
async fn a_changed_event_under_an_old_version_refuses_to_start() {
    let (store, id) = store_of_the_old_builds().await;
    let retrier = Retrier::new(Arc::clone(&store), handlers![handle].unwrap());
    let refused = retrier.run_until(async {}).await.unwrap_err();
    let Error::SchemaChanged(mismatch) = &refused else { panic!("{refused}") };
    assert_eq!((mismatch.version, mismatch.newest, mismatch.published_by.as_str()), (1, 2, "payments-v1"));
    let message = refused.to_string();
    for want in ["event type `versions-payment`", "declares version 1", "newest version is 2", "`version = 3`"] {
        assert!(message.contains(want), "{want}: {message}");
    }
    assert!(message.contains("upcaster from version 2") && message.contains("accept_schema_change"), "{message}");
    assert!(retrier.run_once().await.is_err(), "run_once refuses too");
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!((row.status, row.retry_count), (Status::Pending, 0), "no row claimed");
    assert!(store.retriers().await.unwrap().is_empty(), "no heartbeat left behind");

    // Its record was published all the same: the catalog reports the mismatch to tools.
    let catalog = Catalog::read(&*store).await.unwrap();
    assert_eq!(catalog.mismatches()[0].differing_by, retrier.owner());

    // Told to accept it, the retrier starts and makes its schema version 1's: the old row
    // then fails to decode, as the override says it may.
    let accepting = Retrier::new(Arc::clone(&store), handlers![handle].unwrap()).accept_schema_change();
    assert_eq!(accepting.run_once().await.unwrap(), 1);
    assert_eq!(store.get(id).await.unwrap().unwrap().status, Status::FailedPermanently);
    assert!(Catalog::read(&*store).await.unwrap().mismatches().is_empty());
    assert!(Retrier::new(store, handlers![handle].unwrap()).run_once().await.is_ok(), "later starts agree");
}
