//! `dlq_core::testing::Harness` as an application's tests use it.

use std::time::Duration;

use dlq_core::testing::Harness;
use dlq_core::{
    ErrorClass, Payload, classify::FailureInfo, dead_letter, handlers, store::NewDeadLetter, store::prelude::*,
};

#[dead_letter(event_type = "harness-down", backoff = "none", max_retries = 10)]
async fn handle_down(n: u64) -> Result<(), std::io::Error> {
    Err(std::io::Error::other(format!("down {n}")))
}

fn letter(event_type: &str, delay: Duration) -> NewDeadLetter {
    let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    NewDeadLetter::new(event_type, Payload::Json(1.into()), failure).retry(delay, 3)
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = r#"retry_next: no pending dead letter of ["harness-down"] to retry"#)]
async fn retry_next_with_nothing_pending_says_so() {
    let harness = Harness::new(handlers![handle_down].unwrap());
    // A row of a type the harness has no handler for is not retried.
    harness.store().park(letter("other", Duration::ZERO)).await.unwrap();
    harness.retry_next().await;
}

#[tokio::test(start_paused = true)]
async fn retry_next_waits_for_the_earliest_row_only() {
    let harness = Harness::new(handlers![handle_down].unwrap());
    let late = harness.store().park(letter("harness-down", Duration::from_secs(7200))).await.unwrap().id;
    let soon = harness.store().park(letter("harness-down", Duration::from_secs(60))).await.unwrap().id;
    let started = tokio::time::Instant::now();
    assert_eq!(harness.retry_next().await, 1);
    assert_eq!(started.elapsed().as_secs(), 60);
    assert_eq!(harness.store().get_now(soon).unwrap().retry_count, 1);
    assert_eq!(harness.store().get_now(late).unwrap().retry_count, 0);
}

#[derive(Clone)]
struct Ledger;

#[dead_letter(event_type = "harness-state", backoff = "none")]
async fn handle_with_state(n: u64, _ledger: dlq_core::State<Ledger>) -> Result<(), std::io::Error> {
    Err(std::io::Error::other(format!("down {n}")))
}

#[tokio::test]
#[should_panic(expected = "give it with `Harness::context`")]
async fn retry_due_without_a_handlers_state_says_how_to_give_it() {
    let harness = Harness::new(handlers![handle_with_state].unwrap());
    harness.retry_due().await;
}

#[tokio::test]
async fn retry_due_passes_the_context_to_handlers() {
    let harness = Harness::new(handlers![handle_with_state].unwrap()).context(dlq_core::Context::new().with(Ledger));
    let id = harness.call(handle_with_state(1, dlq_core::State(Ledger))).await.unwrap_err().dlq_id().unwrap();
    assert_eq!(harness.retry_due().await, 1);
    let letter = harness.store().get_now(id).unwrap();
    assert_eq!((letter.retry_count, letter.failure.reason.as_str()), (1, "down 1"));
}
