//! Arguments after the event: `State<T>` and `Attempt`, with patterns in any position.
#![deny(warnings)]

use dlq_core::{handlers::Attempt, State, dead_letter};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payment {
    id: u64,
    currency: String,
}

#[derive(Clone)]
struct Ledger {
    url: &'static str,
}

#[dead_letter(event_type = "extractors")]
async fn handle(
    Payment { id, ref currency }: Payment,
    State(ledger): State<Ledger>,
    mut attempt: Attempt,
) -> Result<(), std::io::Error> {
    attempt.retry_count += 1;
    let _ = (id, currency, ledger.url, attempt);
    Ok(())
}

fn main() {
    let payment = Payment { id: 1, currency: "EUR".into() };
    let _ = handle(payment, State(Ledger { url: "http://ledger" }), Attempt::first());
}
