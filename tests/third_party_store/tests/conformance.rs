//! The whole conformance kit on `VecStore`.

use third_party_store::VecStore;

async fn fresh_store() -> VecStore {
    VecStore::new()
}

dlq_core::store_conformance_tests!(fresh_store);
