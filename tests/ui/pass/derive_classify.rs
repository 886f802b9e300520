//! `#[derive(Classify)]` with `thiserror`, on enums (marked and unmarked variants, a default
//! for the type), generic types and structs.
#![deny(warnings, missing_docs)]

use dlq_core::{Classify, ErrorClass};

/// Why a payment failed.
#[derive(Debug, thiserror::Error, Classify)]
pub enum PaymentError {
    /// The currency is not ISO 4217.
    #[error("currency {0:?} is not ISO 4217")]
    #[dlq(permanent)]
    BadCurrency(String),
    /// The ledger is down.
    #[error("ledger unavailable")]
    LedgerDown,
    /// The credentials were refused.
    #[error("credentials refused")]
    #[dlq(fatal)]
    Unauthorized {
        /// The user.
        user: String,
    },
}

/// Defaults to permanent.
#[derive(Debug, thiserror::Error, Classify)]
#[dlq(permanent)]
pub enum Validation<T: std::fmt::Debug> {
    /// Permanent by default.
    #[error("bad {0:?}")]
    Bad(T),
    /// Marked transient.
    #[error("busy")]
    #[dlq(transient)]
    Busy,
}

/// A struct error.
#[derive(Debug, thiserror::Error, Classify)]
#[error("fenced")]
#[dlq(fatal)]
pub struct Fenced;

/// Uninhabited.
#[derive(Debug, Classify)]
pub enum Never {}

#[dlq_core::dead_letter(event_type = "payment")]
async fn handle(currency: String) -> Result<(), PaymentError> {
    Err(PaymentError::BadCurrency(currency))
}

fn main() {
    assert_eq!(PaymentError::BadCurrency("USD ".into()).classify(), ErrorClass::Permanent);
    assert_eq!(PaymentError::LedgerDown.classify(), ErrorClass::Transient);
    let fatal = PaymentError::Unauthorized { user: "x".into() };
    assert_eq!((fatal.classify(), fatal.kind()), (ErrorClass::Fatal, "PaymentError::Unauthorized"));
    assert_eq!(Validation::Bad(1).classify(), ErrorClass::Permanent);
    assert_eq!(Validation::<u8>::Busy.classify(), ErrorClass::Transient);
    assert_eq!((Fenced.classify(), Fenced.kind()), (ErrorClass::Fatal, "Fenced"));
    let _ = handle(String::new());
}
