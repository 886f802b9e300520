//! The quickstart's payment stream on a NATS JetStream stream: 1,000 payments, one with the
//! currency `"USD "`, and a ledger that is down for the first two seconds.
//!
//! The poison message is parked dead and acked, so the stream moves on; the messages that hit
//! the outage are parked for retry and acked, and the retrier posts them once the ledger is
//! back. Start a NATS server with JetStream first (Debian's `nats-server`, or a release
//! binary):
//!
//! ```sh
//! nats-server -js &
//! cargo run --example nats_consumer
//! ```
//!
//! The dead letters go to the embedded SQLite store (`dlq-nats.db`), or to PostgreSQL when
//! `DATABASE_URL` is set; `NATS_URL` overrides `127.0.0.1:4222`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, consumer::pull, stream};
use dlq_consumers::nats::JetStreamConsumer;
use dlq_core::{
    CancellationToken, Classify, Context, ListFilter, Retrier, State, Status, adapter::Dispatcher, dead_letter,
    handlers, store::prelude::*,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payment {
    id: u64,
    amount_cents: i64,
    currency: String,
}

/// The downstream ledger: `down` simulates an outage; `posted` counts postings.
#[derive(Debug, Clone, Default)]
struct Ledger {
    down: Arc<AtomicBool>,
    posted: Arc<AtomicU64>,
}

#[derive(Debug, thiserror::Error, Classify)]
enum PaymentError {
    #[error("currency {0:?} is not an ISO 4217 code")]
    #[dlq(permanent)]
    BadCurrency(String),
    #[error("ledger unavailable (HTTP 503)")]
    #[dlq(transient)]
    LedgerDown,
}

#[dead_letter(event_type = "payment", max_retries = 240, backoff = "fixed", base = "500ms")]
async fn handle_payment(p: Payment, State(ledger): State<Ledger>) -> Result<(), PaymentError> {
    if p.currency.len() != 3 || !p.currency.chars().all(|c| c.is_ascii_uppercase()) {
        return Err(PaymentError::BadCurrency(p.currency));
    }
    if ledger.down.load(Ordering::SeqCst) {
        return Err(PaymentError::LedgerDown);
    }
    ledger.posted.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

const PAYMENTS: u64 = 1_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store: Arc<dyn DeadLetterStore> = match std::env::var("DATABASE_URL") {
        Ok(url) => Arc::new(dlq_sqlx::PgStore::connect(&url).await?),
        Err(_) => Arc::new(dlq_sqlx::SqliteStore::connect("sqlite://dlq-nats.db?mode=rwc").await?),
    };
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".into());
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let (name, subject) = (format!("PAYMENTS_{run}"), format!("payments.{run}"));

    // The stream, and the payments on it: #500 is the poison.
    let js = jetstream::new(async_nats::connect(&url).await?);
    let stream =
        js.create_stream(stream::Config { name, subjects: vec![subject.clone()], ..Default::default() }).await?;
    for id in 1..=PAYMENTS {
        let currency = if id == 500 { "USD " } else { "USD" };
        let payment = serde_json::to_vec(&Payment { id, amount_cents: 1_000, currency: currency.into() })?;
        js.publish(subject.clone(), payment.into()).await?.await?;
    }
    println!("published {PAYMENTS} payments to {subject} at {url}");

    // The consumer and the retrier, with the ledger down for the first two seconds.
    let ledger = Ledger::default();
    ledger.down.store(true, Ordering::SeqCst);
    let context = Context::new().with(ledger.clone());
    let dispatcher = Dispatcher::new(store.clone(), handlers![handle_payment]?).context(context.clone());
    let config = pull::Config { durable_name: Some("ledger".into()), ..Default::default() };
    let messages = stream.get_or_create_consumer("ledger", config).await?.messages().await?;
    let stop = CancellationToken::new();
    let consuming = tokio::spawn({
        let (stop, adapter) = (stop.clone(), JetStreamConsumer::new(dispatcher, "payment"));
        async move { adapter.run(messages, stop.cancelled_owned()).await }
    });
    let retrier = Retrier::new(store.clone(), handlers![handle_payment]?).context(context);
    let retrying = tokio::spawn({
        let stop = stop.clone();
        async move { retrier.run_until(stop.cancelled_owned()).await }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    ledger.down.store(false, Ordering::SeqCst);
    println!("the ledger is back");

    // Until every healthy payment is posted (at least once) and nothing is left to retry.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while ledger.posted.load(Ordering::SeqCst) < PAYMENTS - 1
        || !store.list(ListFilter::default().status(Status::Pending)).await?.is_empty()
    {
        if tokio::time::Instant::now() > deadline {
            return Err("the payments were not all posted within two minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.cancel();
    let stats = consuming.await??;
    retrying.await??;

    println!(
        "consumer: {} handled, {} parked ({} while the ledger was down); ledger postings: {}",
        stats.succeeded,
        stats.parked,
        stats.parked - 1,
        ledger.posted.load(Ordering::SeqCst)
    );
    let dead = store.list(ListFilter::default().status(Status::FailedPermanently)).await?;
    for row in dead.iter().filter(|row| row.source.topic.as_deref() == Some(subject.as_str())) {
        println!("dead: {} at {subject} #{:?}: {}", row.id, row.source.offset, row.failure.reason);
    }
    js.delete_stream(format!("PAYMENTS_{run}")).await?;
    Ok(())
}
