//! The store conformance suite on `MemoryStore`, the reference model of the contract.

use dlq_core::MemoryStore;

async fn memory_store() -> MemoryStore {
    MemoryStore::new()
}

dlq_core::store_conformance_tests!([queue, reads, operator, fleet, privacy, singleton, capped_claims] memory_store);
