//! Erasure by subject as an application uses it: a handler's `subject = "/pointer"` or the
//! source's subject, parked by the live path and a dispatcher, erased through the admin layer.

use std::sync::Arc;

use dlq_core::admin::Admin;
use dlq_core::subject::{Count, SubjectKey, install_key};
use dlq_core::{
    MemoryStore, Scope, adapter::Dispatcher, adapter::SourceMeta, dead_letter, handlers, store::prelude::*, with_store,
};
use serde_json::{Value, json};

#[dead_letter(event_type = "subject-card", subject = "/holder/id", max_retries = 3)]
async fn charge(card: Value) -> Result<(), std::io::Error> {
    let _ = card;
    Err(std::io::Error::other("issuer down"))
}

#[tokio::test]
async fn rows_named_by_pointer_or_source_are_erased_by_subject() {
    install_key(SubjectKey::new("this test's subject key, thirty-two bytes long").unwrap()).unwrap();
    let store = Arc::new(MemoryStore::new());
    // The live path: the subject at /holder/id, a string or a number.
    for card in [json!({"holder": {"id": "customer-42"}, "n": 1}), json!({"holder": {"id": 7}, "n": 2})] {
        with_store(store.clone(), charge(card)).await.unwrap_err();
    }
    // A dispatcher: the same pointer.
    let dispatcher = Dispatcher::new(store.clone(), handlers![charge].unwrap());
    let bytes = serde_json::to_vec(&json!({"holder": {"id": "customer-42"}, "n": 3})).unwrap();
    dispatcher.dispatch("subject-card", &bytes).await.unwrap();
    // The source names the subject where the payload does not.
    let source = SourceMeta::kafka("cards", 0, 9).subject("customer-42");
    Scope::new().store(store.clone()).source(source).run(charge(json!({"n": 4}))).await.unwrap_err();
    // No subject anywhere: never erased by one.
    with_store(store.clone(), charge(json!({"n": 5}))).await.unwrap_err();
    assert_eq!(store.len(), 5);

    // The live path left the process key's check value: another key's erasure is refused
    // before anything is deleted or recorded, instead of erasing 0 rows.
    let wrong = Admin::new(store.clone(), "dpo").with_subject_key(SubjectKey::new([1u8; 32]).unwrap());
    let err = wrong.erase("customer-42", "GDPR request 118").await.unwrap_err();
    assert!(matches!(err, dlq_core::Error::Config { .. }), "{err}");
    assert!(err.to_string().contains("not the key the store's subjects were hashed with"), "{err}");
    assert!(wrong.erasable("customer-42").await.is_err(), "nor counted");
    assert_eq!((store.len(), store.erasures(10).await.unwrap().len()), (5, 0));

    let admin = Admin::new(store.clone(), "dpo");
    assert_eq!(admin.erasable("customer-42").await.unwrap(), 3, "what the confirmation shows");
    let erased = admin.erase("customer-42", "GDPR request 118").await.unwrap();
    assert_eq!((erased.rows, erased.attempts, erased.audit), (Count::Of(3), Count::Of(3), Count::Of(0)));
    assert_eq!(admin.erase("7", "GDPR request 119").await.unwrap().rows, Count::Of(1), "a number, as written");
    let left: Vec<Value> =
        store.snapshot().iter().map(|r| serde_json::from_slice(&r.payload.to_bytes()).unwrap()).collect();
    assert_eq!(left, [json!({"n": 5})]);
    let records = store.erasures(10).await.unwrap();
    assert_eq!(records.len(), 2);
    assert!(!serde_json::to_string(&records).unwrap().contains("customer-42"));
}
