//! What the broker tests share: the payment handler of the quickstart with a ledger that
//! counts side effects, and a TCP proxy in front of PostgreSQL that a test can cut to take
//! the store down and bring it back.

#![allow(dead_code, reason = "each test binary uses a part")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlq_core::{Classify, State, dead_letter};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A payment event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Payment {
    pub(crate) id: u64,
    pub(crate) amount_cents: i64,
    pub(crate) currency: String,
}

impl Payment {
    /// Payment `id`; `poison` gives it the currency `"USD "`.
    pub(crate) fn new(id: u64, poison: bool) -> Self {
        Self { id, amount_cents: 1_000 + id as i64, currency: if poison { "USD " } else { "USD" }.into() }
    }

    pub(crate) fn bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap()
    }
}

/// The downstream ledger: counts postings per payment id; `down` simulates an outage.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ledger {
    pub(crate) down: Arc<AtomicBool>,
    pub(crate) posted: Arc<Mutex<HashMap<u64, u32>>>,
}

impl Ledger {
    /// How many distinct payments were posted at least once.
    pub(crate) fn distinct(&self) -> usize {
        self.posted.lock().unwrap().len()
    }

    pub(crate) fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }
}

#[derive(Debug, thiserror::Error, Classify)]
pub(crate) enum PaymentError {
    #[error("currency {0:?} is not an ISO 4217 code")]
    #[dlq(permanent)]
    BadCurrency(String),
    #[error("ledger unavailable (HTTP 503)")]
    #[dlq(transient)]
    LedgerDown,
}

#[dead_letter(event_type = "payment", max_retries = 240, backoff = "fixed", base = "200ms")]
pub(crate) async fn handle_payment(p: Payment, State(ledger): State<Ledger>) -> Result<(), PaymentError> {
    if p.currency.len() != 3 || !p.currency.chars().all(|c| c.is_ascii_uppercase()) {
        return Err(PaymentError::BadCurrency(p.currency));
    }
    if ledger.down.load(Ordering::SeqCst) {
        return Err(PaymentError::LedgerDown);
    }
    *ledger.posted.lock().unwrap().entry(p.id).or_default() += 1;
    Ok(())
}

/// A TCP proxy to PostgreSQL at 127.0.0.1:5432. While down it cuts every open connection
/// and closes new ones at once, as a crashed or unreachable database server would.
pub(crate) struct DbProxy {
    pub(crate) port: u16,
    up: watch::Sender<bool>,
    refused: Arc<AtomicUsize>,
}

impl DbProxy {
    pub(crate) async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (up, _) = watch::channel(true);
        let (state, refused) = (up.clone(), Arc::new(AtomicUsize::new(0)));
        let counted = refused.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut watch = state.subscribe();
                if !*watch.borrow_and_update() {
                    counted.fetch_add(1, Ordering::SeqCst);
                    continue; // dropped: closed at once
                }
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect("127.0.0.1:5432").await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = watch.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Self { port, up, refused }
    }

    /// How many connections were closed at once because the proxy was down.
    pub(crate) fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }

    /// The URL of database `db` through the proxy.
    pub(crate) fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    pub(crate) fn set_up(&self, up: bool) {
        self.up.send_replace(up);
    }
}

/// Polls `check` every 50 ms until it holds, or panics after `limit` with `what`.
pub(crate) async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out after {limit:?} waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
