//! A service binary that ships the `dlq` command line with its own handlers linked
//! (`dlq_cli::Embedded`), for `tests/tests/cli_validate.rs`: `dlq-embedded <dlq arguments>`.
//!
//! Its one handler takes `payment` events; `--validate` refuses payloads that do not
//! deserialize into `Payment`.

use std::process::ExitCode;

use dlq_core::{dead_letter, handlers};
use serde::{Deserialize, Serialize};

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

#[tokio::main]
async fn main() -> ExitCode {
    match handlers![handle_payment] {
        Ok(registry) => dlq_cli::Embedded::default().registry(registry).run_from(std::env::args_os()).await,
        Err(err) => {
            eprintln!("dlq-embedded: {err}");
            ExitCode::FAILURE
        }
    }
}
