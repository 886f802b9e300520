//! `MemoryStore`'s clock under a paused tokio clock that was paused before the store first
//! read the time. Alone in its binary: the store's clock origin is set once per process.

use std::time::Duration;

use dlq_core::store::ClaimRequest;
use dlq_core::{ErrorClass, MemoryStore, Payload, classify::FailureInfo, store::NewDeadLetter, store::prelude::*};

#[test]
fn a_clock_paused_before_the_stores_origin_still_brings_rows_due() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    runtime.block_on(async {
        // Real time passes while tokio's clock stands: the store's origin is set after it.
        std::thread::sleep(Duration::from_millis(50));
        let store = MemoryStore::new();
        let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
        let letter = NewDeadLetter::new("clock", Payload::Json(1.into()), failure).retry(Duration::from_secs(1), 3);
        let id = store.park(letter).await.unwrap().id;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let request = ClaimRequest {
            event_types: vec!["clock".into()],
            limit: 1,
            lease: Duration::from_secs(60),
            owner: "t".into(),
        };
        let claimed = store.claim(request).await.unwrap();
        assert_eq!(claimed.iter().map(|c| c.lease.id).collect::<Vec<_>>(), [id], "due a second later");
    });
}
