//! What the broker tests share: the payment handler of the quickstart with a ledger that
//! counts side effects, and a TCP proxy in front of PostgreSQL that a test can cut to take
//! the store down and bring it back.

#![allow(dead_code, reason = "each test binary uses a part")]

use std::collections::{BTreeSet, HashMap};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlq_core::{Classify, Context, ListFilter, State, adapter::Dispatcher, dead_letter, handlers, store::prelude::*};
use dlq_sqlx::{PgConfig, PgStore};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
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

/// The event type of [`post_payment`].
pub(crate) const POSTED_IN_DB: &str = "payment-posted-in-db";

/// The payment handler of the kill tests: its side effect is a row in table `posted` of the
/// test database, so it outlives the consumer process.
#[dead_letter(event_type = "payment-posted-in-db")]
pub(crate) async fn post_payment(p: Payment, State(pool): State<PgPool>) -> Result<(), PaymentError> {
    if p.currency != "USD" {
        return Err(PaymentError::BadCurrency(p.currency));
    }
    sqlx::query("INSERT INTO posted (payment_id) VALUES ($1)")
        .bind(p.id as i64)
        .execute(&pool)
        .await
        .map_err(|_| PaymentError::LedgerDown)?;
    Ok(())
}

/// A consumer process killed with SIGKILL mid-stream and restarted: payments
/// `1..=PAYMENTS` with every hundredth-and-seventh poison, posted by [`post_payment`] from
/// this test binary run again as a child process (its test named by [`run`](Self::run)),
/// which reads the database URL from `DLQ_KILL_DATABASE_URL`.
pub(crate) struct KillTest {
    pool: PgPool,
    store: PgStore,
    url: String,
    pub(crate) poison: Vec<u64>,
}

impl KillTest {
    pub(crate) const PAYMENTS: u64 = 2_000;

    pub(crate) async fn new(pool: PgPool) -> Self {
        let store = PgStore::from_pool(pool.clone(), PgConfig::default()).await.unwrap();
        sqlx::query("CREATE TABLE posted (payment_id BIGINT NOT NULL)").execute(&pool).await.unwrap();
        let db = pool.connect_options().get_database().unwrap().to_owned();
        let url = format!("{}/{db}", std::env::var("DATABASE_URL").unwrap().rsplit_once('/').unwrap().0);
        let poison = (1..=Self::PAYMENTS).filter(|id| id % 100 == 7).collect();
        Self { pool, store, url, poison }
    }

    /// An environment variable the child process was given.
    pub(crate) fn var(name: &str) -> String {
        std::env::var(name).unwrap_or_else(|_| panic!("{name}: this test runs only as a kill test's child process"))
    }

    /// The child process's dispatcher: [`post_payment`] on the parent's database.
    pub(crate) async fn child_dispatcher() -> Dispatcher {
        let pool = PgPool::connect(&Self::var("DLQ_KILL_DATABASE_URL")).await.unwrap();
        let store = Arc::new(PgStore::from_pool(pool.clone(), PgConfig::default()).await.unwrap());
        Dispatcher::new(store, handlers![post_payment].unwrap()).context(Context::new().with(pool))
    }

    /// Payments posted (`distinct`: distinct payments posted).
    pub(crate) async fn posted(&self, distinct: bool) -> i64 {
        let sql =
            if distinct { "SELECT count(DISTINCT payment_id) FROM posted" } else { "SELECT count(*) FROM posted" };
        sqlx::query_scalar::<_, i64>(sql).fetch_one(&self.pool).await.unwrap()
    }

    /// How many times the payments `ids` were posted, over all of them.
    pub(crate) async fn posted_in(&self, ids: std::ops::RangeInclusive<u64>) -> i64 {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM posted WHERE payment_id BETWEEN $1 AND $2")
            .bind(*ids.start() as i64)
            .bind(*ids.end() as i64)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// The healthy payments among `ids`.
    pub(crate) fn healthy_in(&self, ids: std::ops::RangeInclusive<u64>) -> i64 {
        ids.filter(|id| !self.poison.contains(id)).count() as i64
    }

    /// Starts this test binary again as a child process running the ignored test
    /// `child_test` with `env`.
    pub(crate) fn start(&self, child_test: &str, env: &[(&str, &str)]) -> Child {
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", child_test, "--ignored", "--nocapture"])
            .env("DLQ_KILL_DATABASE_URL", &self.url)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }

    pub(crate) async fn parked(&self) -> Vec<dlq_core::DeadLetter> {
        self.store.list(ListFilter::default()).await.unwrap()
    }

    /// Runs the child test `child_test` with `env`, kills it with SIGKILL once 700 payments
    /// are posted and 7 poison parked, runs it again until every payment is posted or parked and `settled` holds
    /// (the broker has nothing left to deliver again: no poison still in flight), and checks
    /// that each poison was parked exactly once and nothing was lost.
    pub(crate) async fn run<F: Future<Output = bool>>(
        &self,
        child_test: &str,
        env: &[(&str, &str)],
        settled: impl FnMut() -> F,
    ) {
        let mut first = self.start(child_test, env);
        // Mid-stream: payments posted and poison parked, the parks committed (a poison's park
        // lands a little after the payments around it are posted).
        eventually(Duration::from_secs(120), "the first consumer to post 700 payments and park 7 poison", || async {
            self.posted(false).await >= 700 && self.parked().await.len() >= 7
        })
        .await;
        first.kill().unwrap(); // SIGKILL: no ack, no commit, no cleanup
        first.wait().unwrap();

        // The second one gets what the first had not settled, and the rest.
        let mut second = self.start(child_test, env);
        self.all_done().await;
        eventually(Duration::from_secs(60), "every message is acknowledged", settled).await;
        second.kill().unwrap();
        second.wait().unwrap();
        self.check_accounted().await;
    }

    /// Waits until every healthy payment is posted and every poison parked.
    pub(crate) async fn all_done(&self) {
        let healthy = (Self::PAYMENTS - self.poison.len() as u64) as i64;
        eventually(Duration::from_secs(120), "every healthy payment is posted", || async {
            self.posted(true).await == healthy
        })
        .await;
        eventually(Duration::from_secs(30), "every poison is parked", || async {
            self.parked().await.len() == self.poison.len()
        })
        .await;
    }

    /// Checks that each poison was parked exactly once and that side effects and parked rows
    /// account for every payment produced.
    pub(crate) async fn check_accounted(&self) {
        let rows = self.parked().await;
        let keys: BTreeSet<_> = rows.iter().map(|r| r.dedupe_key.clone().unwrap()).collect();
        assert_eq!((rows.len(), keys.len()), (self.poison.len(), self.poison.len()), "each poison parked once");
        let ids: BTreeSet<u64> =
            rows.iter().map(|r| serde_json::from_slice::<Payment>(&r.payload.to_bytes()).unwrap().id).collect();
        assert_eq!(ids, self.poison.iter().copied().collect(), "side effects + parked rows = produced");
    }
}
