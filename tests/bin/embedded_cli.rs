//! A service binary that ships the `dlq` command line with its own handlers linked
//! (`dlq_cli::Embedded`), for `tests/tests/cli_validate.rs`: `dlq-embedded <dlq arguments>`.
//!
//! Its handler of `payment` events makes `--validate` refuse payloads that do not deserialize
//! into `Payment`; its handler of `invoice` events, version 2 with one upcaster, is what
//! `dlq-embedded upgrade invoice` rewrites version 1 rows in.

use std::process::ExitCode;

use dlq_core::{dead_letter, handlers, handlers::UpcastError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payment {
    id: u64,
    amount_cents: i64,
    currency: String,
}

#[dead_letter(event_type = "payment")]
async fn handle_payment(p: Payment) -> Result<(), std::io::Error> {
    let _ = p;
    Ok(())
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Invoice {
    id: u64,
    currency: String,
}

/// Version 2 requires the currency: version 1's invoices were all in euros, and had no credit
/// notes (a negative total), which version 2 cannot represent.
fn invoice_v1_to_v2(mut v: Value) -> Result<Value, UpcastError> {
    if v["total"].as_i64().is_some_and(|total| total < 0) {
        return Err(UpcastError::new("a credit note has no version 2"));
    }
    v["currency"] = "EUR".into();
    Ok(v)
}

#[dead_letter(event_type = "invoice", version = 2, upcast = [invoice_v1_to_v2])]
async fn handle_invoice(invoice: Invoice) -> Result<(), std::io::Error> {
    let _ = invoice;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match handlers![handle_payment, handle_invoice] {
        Ok(registry) => dlq_cli::Embedded::default().registry(registry).run_from(std::env::args_os()).await,
        Err(err) => {
            eprintln!("dlq-embedded: {err}");
            ExitCode::FAILURE
        }
    }
}
