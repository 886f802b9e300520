//! The classic incident, replayed: a stream of payment events where one event carries the
//! currency `"USD "` (a trailing space) and the ledger downstream is down for a while.
//!
//! Without a dead-letter queue the poison event blocks the partition or is dropped. Here it is
//! parked dead with its reason while the rest flow on; the events that hit the outage are
//! parked for retry and a retrier brings them home once the ledger is back; finally an
//! operator repairs the poison event's payload and redrives it.
//!
//! Run it with the embedded SQLite store (a file `dlq-quickstart.db` in the current directory):
//!
//! ```sh
//! cargo run --example quickstart
//! ```
//!
//! or on PostgreSQL:
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo run --example quickstart
//! ```
//!
//! To be the operator yourself (the "On call" walkthrough of docs/OPERATING.md), set
//! `DLQ_QUICKSTART_ON_CALL=1`: the poison event stays parked, and the service keeps its
//! retrier running until Ctrl-C, so that `dlq` in another terminal can inspect, patch and
//! redrive it (`DATABASE_URL=sqlite://dlq-quickstart.db dlq stats`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dlq_core::admin::Admin;
use dlq_core::{
    CancellationToken, Classify, Context, DlqId, HandlerError, ListFilter, Retrier, RetrierConfig, State, Status,
    dead_letter, handlers, store::prelude::*,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payment {
    id: u64,
    amount_cents: i64,
    currency: String,
}

/// The downstream ledger; `down` simulates an outage.
#[derive(Debug, Clone, Default)]
struct Ledger {
    down: Arc<AtomicBool>,
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
    Ok(())
}

async fn open_store() -> Result<Arc<dyn DeadLetterStore>, Box<dyn std::error::Error>> {
    Ok(match std::env::var("DATABASE_URL") {
        Ok(url) => {
            // What is printed of a database URL never holds its password.
            let shown = dlq_sqlx::mask_passwords(&url);
            println!("store: PostgreSQL at {shown}");
            let store = dlq_sqlx::PgStore::connect(&url).await.map_err(|e| {
                let why = dlq_sqlx::mask_passwords(&dlq_core::admin::one_line(&e)).into_owned();
                format!("cannot open the store at {shown}: {why}")
            })?;
            Arc::new(store)
        }
        Err(_) => {
            println!("store: SQLite file dlq-quickstart.db (set DATABASE_URL for PostgreSQL)");
            Arc::new(dlq_sqlx::SqliteStore::connect("sqlite://dlq-quickstart.db?mode=rwc").await?)
        }
    })
}

async fn show(store: &dyn DeadLetterStore, ids: &[DlqId]) -> Result<(), dlq_core::Error> {
    let rows = store.list(ListFilter::default().ids(ids.iter().copied())).await?;
    println!("  {:>5}  {:<20} {:>7}  {:<18} last error", "id", "status", "retries", "dead reason");
    for row in rows.iter().rev() {
        let dead = row.dead_reason.map(|r| r.as_str()).unwrap_or("-");
        println!("  {:>5}  {:<20} {:>7}  {:<18} {}", row.id, row.status, row.retry_count, dead, row.failure.reason);
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = open_store().await?;
    dlq_core::install_store(Arc::clone(&store))?;
    dlq_core::handlers::registry()?; // fail fast on a duplicate event type

    let ledger = Ledger::default();
    let mut parked = Vec::new();
    println!("\n1. consuming 10 payments; event 4 is poison, the ledger is down for events 6-7");
    for id in 1..=10 {
        let currency = if id == 4 { "USD " } else { "USD" };
        ledger.down.store((6..=7).contains(&id), Ordering::SeqCst);
        let payment = Payment { id, amount_cents: 1_000 + id as i64, currency: currency.into() };
        match handle_payment(payment, State(ledger.clone())).await {
            Ok(()) => println!("  event {id:>2}: ok, ack"),
            Err(HandlerError::Parked { id: dlq_id, class, error, .. }) => {
                println!("  event {id:>2}: parked as dead letter {dlq_id} ({class}: {error}), ack");
                parked.push(dlq_id);
            }
            Err(other) => return Err(format!("event {id}: {other}; not acked").into()),
        }
    }
    println!("\n2. the dead letters, as parked");
    show(&*store, &parked).await?;

    println!("\n3. a retrier runs (backoff: fixed 500 ms); the ledger comes back after a second");
    ledger.down.store(true, Ordering::SeqCst);
    let shutdown = CancellationToken::new();
    let config = RetrierConfig::from_json_str(r#"{"poll-interval": "100ms"}"#)?;
    // `State<Ledger>` comes from the context; without it the retrier refuses to start.
    let context = Context::new().with(ledger.clone());
    let retrier = Retrier::new(Arc::clone(&store), handlers![handle_payment]?).config(config).context(context);
    let running = tokio::spawn({
        let (retrier, shutdown) = (retrier.clone(), shutdown.clone());
        async move { retrier.run_until(shutdown.cancelled_owned()).await }
    });
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    ledger.down.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(800)).await;
    show(&*store, &parked).await?;

    if std::env::var_os("DLQ_QUICKSTART_ON_CALL").is_some_and(|v| !v.is_empty()) {
        println!("\n4. on call: the poison event waits for you; the retrier runs until Ctrl-C");
        println!("   try: DATABASE_URL=sqlite://dlq-quickstart.db dlq stats (or your DATABASE_URL)");
        tokio::signal::ctrl_c().await?;
        shutdown.cancel();
        let stats = running.await??;
        println!("\nretrier: {} succeeded, {} retried, {} dead", stats.succeeded, stats.retried, stats.dead);
        return Ok(());
    }

    println!("\n4. an operator repairs the poison payment's currency and redrives it");
    // Every operator action goes through the admin layer: audited with the actor and a reason.
    let admin = Admin::new(Arc::clone(&store), "quickstart-operator");
    let dead = store.list(ListFilter::default().ids(parked.iter().copied()).status(Status::FailedPermanently)).await?;
    let fix = serde_json::json!([{ "op": "replace", "path": "/currency", "value": "USD" }]);
    for row in &dead {
        admin.patch(row.id, &fix, "trailing space from the EU gateway").await?;
    }
    // (An empty id list would select every dead row: redrive only when there are some.)
    if !dead.is_empty() {
        let repaired = ListFilter::default().ids(dead.iter().map(|row| row.id));
        let report = admin.redrive(repaired, "currency repaired").await?;
        println!("  redriven: {:?}, refused: {}", report.moved_ids, report.refused);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    shutdown.cancel();
    let stats = running.await??;
    show(&*store, &parked).await?;
    println!("\nretrier: {} succeeded, {} retried, {} dead", stats.succeeded, stats.retried, stats.dead);
    Ok(())
}
