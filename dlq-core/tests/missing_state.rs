//! A handler's `State<T>` missing from the context of whoever runs it.

use std::sync::Arc;

use dlq_core::{
    Context, Error, MemoryStore, Payload, Retrier, State, Status, adapter::Dispatched, adapter::Dispatcher,
    dead_letter, handlers, store::NewDeadLetter,
};

#[derive(Clone)]
struct Ledger;

#[dead_letter(event_type = "missing-state-post")]
async fn post(amount: u64, _ledger: State<Ledger>) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

async fn parked_row(store: &MemoryStore) -> dlq_core::DlqId {
    use dlq_core::{ErrorClass, classify::FailureInfo, store::prelude::*};
    let failure = FailureInfo::new(ErrorClass::Transient, "io", "ledger down".into(), vec![], None);
    let letter =
        NewDeadLetter::new("missing-state-post", Payload::Json(5.into()), failure).retry(Default::default(), 3);
    store.park(letter).await.unwrap().id
}

/// `run_once` makes the same start-up check as `run_until`: without it, every call spent a
/// retry of each claimed row on a configuration error (`missing_state`).
#[tokio::test]
async fn run_once_refuses_a_missing_state_before_claiming_anything() {
    let store = Arc::new(MemoryStore::new());
    let id = parked_row(&store).await;
    let retrier = Retrier::new(store.clone(), handlers![post].unwrap());

    let once = retrier.run_once().await.unwrap_err();
    assert!(matches!(&once, Error::MissingState { type_name, .. } if type_name.ends_with("::Ledger")), "{once}");
    let until = retrier.run_until(std::future::ready(())).await.unwrap_err();
    assert_eq!(once.to_string(), until.to_string());

    let row = store.get_now(id).unwrap();
    assert_eq!((row.status, row.retry_count, row.failure.kind.as_str()), (Status::Pending, 0, "io"));
    assert_eq!((row.lease_owner, row.lease_until, row.last_attempt_at), (None, None, None));

    // With the value in its context, the same row runs.
    assert_eq!(retrier.context(Context::new().with(Ledger)).run_once().await.unwrap(), 1);
    assert_eq!(store.get_now(id).unwrap().status, Status::Succeeded);
}

/// The parked failure names the dispatcher, whose context lacks the value, not a retrier.
#[tokio::test]
async fn a_dispatcher_without_the_state_parks_a_reason_naming_the_dispatcher() {
    let store = Arc::new(MemoryStore::new());
    let dispatcher = Dispatcher::new(store.clone(), handlers![post].unwrap());
    let Dispatched::Parked { id, failure, .. } = dispatcher.dispatch("missing-state-post", b"5").await.unwrap() else {
        panic!("not parked")
    };
    let expected = "no `missing_state::Ledger` in the dispatcher's context: add it with `Context::new().with(value)` \
                    and pass the context to `Dispatcher::context`";
    assert_eq!((failure.kind.as_str(), failure.reason.as_str()), ("missing_state", expected));
    let row = store.get_now(id).unwrap();
    assert_eq!((row.status, row.failure.reason.as_str()), (Status::Pending, expected));
}
