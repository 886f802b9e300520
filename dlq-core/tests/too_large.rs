//! The live path on `MemoryStore` with an event one byte over the store's limit (64 MiB: the
//! store has no other): `TooLarge`, with the row's id and the hash of the event's bytes.

use std::sync::Arc;

use dlq_core::{
    HandlerError, MemoryStore, Payload, Status, adapter::DeadReason, dead_letter, store::prelude::*, with_store,
};
use serde::{Deserialize, Serialize};
use sha2::Digest;

/// Fields in another order than sorted keys: a hash over a `serde_json::Value` of it (keys
/// sorted) is not the hash of its serialization.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Upload {
    name: String,
    blob: String,
}

#[dead_letter(event_type = "upload")]
async fn handle_upload(u: Upload) -> Result<(), std::io::Error> {
    Err(std::io::Error::other(format!("scanner down for {}", u.name)))
}

#[tokio::test]
async fn a_live_event_over_the_limit_is_too_large_with_the_hash_of_its_serialization() {
    let store = Arc::new(MemoryStore::new());
    let max = store.max_payload_bytes();
    let blob = "x".repeat(max + 1 - r#"{"name":"scan","blob":""}"#.len());
    // serde_json::to_vec of the upload, written out: its fields in declaration order.
    let original = format!(r#"{{"name":"scan","blob":"{blob}"}}"#).into_bytes();
    assert_eq!(original.len(), max + 1);
    let err = with_store(store.clone(), handle_upload(Upload { name: "scan".into(), blob })).await.unwrap_err();
    let HandlerError::TooLarge { id, .. } = &err else { panic!("expected TooLarge, got {err:?}") };
    let row = store.get_now(*id).unwrap();
    assert_eq!((row.status, row.dead_reason), (Status::FailedPermanently, Some(DeadReason::TooLarge)));
    let Payload::Raw { bytes, truncated: Some(t) } = row.payload else { panic!("expected a cut payload") };
    let preview = max.min(dlq_core::store::TOO_LARGE_PREVIEW_BYTES);
    assert!(bytes == original[..preview], "the first bytes of the serialization, a preview of them");
    assert_eq!(t.original_len, original.len() as u64);
    let sha256: String = sha2::Sha256::digest(&original).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(t.original_sha256, sha256);
    assert_eq!((err.dlq_id(), err.is_parked()), (Some(*id), false));
}
