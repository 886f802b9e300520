//! Generated code is lint-clean: this file is compiled by `cargo clippy --all-targets` under
//! pedantic lints, with a module that shadows the prelude names generated code must not use.
#![deny(clippy::pedantic, unused_qualifications, missing_docs, warnings)]

use dlq_core::{Classify, State, dead_letter, handlers::Attempt};
use serde::{Deserialize, Serialize};

/// An event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Payment {
    /// Its id.
    pub id: u64,
}

/// An error.
#[derive(Debug, thiserror::Error, Classify)]
pub enum PaymentError {
    /// Bad.
    #[error("bad currency")]
    #[dlq(permanent)]
    BadCurrency,
    /// Down.
    #[error("ledger down")]
    LedgerDown,
}

/// A ledger.
#[derive(Debug, Clone)]
pub struct Ledger;

/// Handles payments.
///
/// # Errors
/// When the payment cannot be booked.
#[dead_letter(
    event_type = "lints-payment",
    max_retries = 240,
    backoff = "exp",
    base = "250ms",
    max = "7d",
    jitter = 0.2,
    max_age = "30d",
    timeout = "30s",
    breaker = "50% of 20 in 1m"
)]
pub async fn handle_payment(
    Payment { id, .. }: Payment,
    State(_ledger): State<Ledger>,
    attempt: Attempt,
) -> Result<(), PaymentError> {
    tokio::task::yield_now().await;
    if id == 0 || attempt.retry_count > 3 {
        return Err(PaymentError::BadCurrency);
    }
    Ok(())
}

mod shadowing {
    #![allow(dead_code)]
    use super::Payment;

    pub(crate) struct Option;
    pub(crate) struct Result;
    pub(crate) struct Box;
    pub(crate) struct Ok;
    pub(crate) struct Err;
    pub(crate) struct Some;
    pub(crate) struct Pin;

    #[dlq_core::dead_letter(event_type = "lints-shadowed", backoff = "fixed", base = "5s")]
    pub(crate) async fn handle(p: Payment) -> std::result::Result<u64, std::io::Error> {
        tokio::task::yield_now().await;
        std::result::Result::Ok(p.id)
    }
}

#[test]
fn handlers_are_registered() {
    let set = dlq_core::handlers![handle_payment, shadowing::handle].unwrap();
    assert_eq!(set.len(), 2);
}
