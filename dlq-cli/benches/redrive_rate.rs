//! The rate limit, measured: how long `dlq redrive --all --rate 200/s` takes over 1,000 dead
//! rows in a fresh SQLite file (expect about 5 s), beside the same redrive without `--rate`.
//! Not a test: it prints the figures, it asserts none.
//!
//! ```sh
//! cargo bench -p dlq-cli --bench redrive_rate
//! ```

use std::process::Command;
use std::time::{Duration, Instant};

use dlq_core::{
    ErrorClass, Payload, adapter::DeadReason, classify::FailureInfo, store::NewDeadLetter, store::prelude::*,
};

const ROWS: u64 = 1_000;

/// A fresh SQLite file holding `ROWS` dead rows; returns its URL.
async fn seeded(dir: &std::path::Path, name: &str) -> Result<String, Box<dyn std::error::Error>> {
    let url = format!("sqlite://{}", dir.join(name).display());
    let store = dlq_sqlx::SqliteStore::connect(&format!("{url}?mode=rwc")).await?;
    let letters = (0..ROWS)
        .map(|n| {
            let failure = FailureInfo::new(ErrorClass::Permanent, "Bench", "down".into(), vec![], None);
            NewDeadLetter::new("payment", Payload::Json(n.into()), failure).dead(DeadReason::Permanent)
        })
        .collect();
    store.park_many(letters).await?;
    Ok(url)
}

/// Runs the `dlq` binary's redrive of every row on `url` with `extra` arguments; returns the
/// wall time and the rows it moved.
fn redrive(url: &str, extra: &[&str]) -> Result<(Duration, u64), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_dlq"))
        .args(["redrive", "--all", "--reason", "bench", "--json"])
        .args(extra)
        .env("DATABASE_URL", url)
        .output()?;
    let elapsed = started.elapsed();
    if !out.status.success() {
        return Err(format!("dlq failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok((elapsed, report["moved"].as_u64().unwrap_or_default()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    for (label, extra) in [("no --rate", &[][..]), ("--rate 200/s", &["--rate", "200/s"][..])] {
        let url = seeded(dir.path(), &format!("{}.db", label.replace(['-', ' ', '/'], "_"))).await?;
        let (elapsed, moved) = redrive(&url, extra)?;
        let rate = moved as f64 / elapsed.as_secs_f64();
        println!("dlq redrive --all {label:<13} {moved} rows in {:>6.2} s ({rate:>7.0} rows/s)", elapsed.as_secs_f64());
    }
    Ok(())
}
