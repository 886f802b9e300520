//! The store conformance suite on `MemoryStore`, the reference model of the contract.

use dlq_core::MemoryStore;

macro_rules! memory_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() {
            dlq_sqlx::conformance::$name(&MemoryStore::new()).await;
        }
    )*};
}

dlq_sqlx::conformance_suite!(memory_tests);
