//! The whole conformance kit on `VecStore`, and its first part on a store that has only that
//! part, as a store for a new database starts.

use third_party_store::VecStore;

async fn fresh_store() -> VecStore {
    VecStore::new()
}

dlq_core::store_conformance_tests!(fresh_store);

/// A store with the queue part alone (`QueueStore`, here handed to a `VecStore`): the kit's
/// `queue` tests run on it before any other part is written.
mod queue_only {
    use std::time::Duration;

    use dlq_core::DlqId;
    use dlq_core::store::{
        BoxFuture, CappedClaimStore, ClaimRequest, Claimed, NewDeadLetter, Parked, QueueStore, SettleReport, Settlement,
        StoreResult, WorkTicket,
    };
    use third_party_store::VecStore;

    pub struct QueueOnly(VecStore);

    impl QueueStore for QueueOnly {
        fn park(&self, letter: NewDeadLetter) -> BoxFuture<'_, StoreResult<Parked>> {
            self.0.park(letter)
        }
        fn park_many(&self, letters: Vec<NewDeadLetter>) -> BoxFuture<'_, StoreResult<Vec<Parked>>> {
            self.0.park_many(letters)
        }
        fn claim(&self, request: ClaimRequest) -> BoxFuture<'_, StoreResult<Vec<Claimed>>> {
            self.0.claim(request)
        }
        fn settle(&self, outcomes: Vec<Settlement>) -> BoxFuture<'_, StoreResult<SettleReport>> {
            self.0.settle(outcomes)
        }
        fn work_ticket(&self) -> WorkTicket {
            self.0.work_ticket()
        }
        fn wait_for_work(&self, after: WorkTicket, max: Duration) -> BoxFuture<'_, ()> {
            self.0.wait_for_work(after, max)
        }
        fn get(&self, id: DlqId) -> BoxFuture<'_, StoreResult<Option<dlq_core::DeadLetter>>> {
            self.0.get(id)
        }
        fn capped_claims(&self) -> Option<&dyn CappedClaimStore> {
            None
        }
    }

    async fn queue_only() -> QueueOnly {
        QueueOnly(VecStore::new())
    }

    dlq_core::store_conformance_tests!([queue] queue_only);
}
