//! The poison-message incident on a real NATS JetStream server (127.0.0.1:4222, or
//! `$NATS_URL`) with the dead letters in PostgreSQL (`#[sqlx::test]`, a fresh database each).

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, consumer, consumer::pull, stream};
use common::{DbProxy, KillTest, Ledger, POSTED_IN_DB, Payment, eventually, handle_payment};
use dlq_consumers::nats::{JetStreamConsumer, republish};
use dlq_consumers::{Action, DEDUPE_KEY_HEADER, DLQ_ID_HEADER, MAX_REPLAY_KEY_LEN};
use dlq_core::admin::Admin;
use dlq_core::{
    CancellationToken, Context, ListFilter, Retrier, RetrierConfig, Status, adapter::DeadReason, adapter::Dispatched,
    adapter::Dispatcher, handlers, store::prelude::*,
};
use dlq_sqlx::{PgConfig, PgStore};
use futures_util::StreamExt;
use sqlx::PgPool;

/// A stream of its own for one test: `DLQ_<name>_<nanos>` on subject `dlqtest.<name>.<nanos>`.
struct TestStream {
    js: jetstream::Context,
    name: String,
    subject: String,
}

impl TestStream {
    async fn new(test: &str) -> Self {
        let url = std::env::var("NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".into());
        let client = async_nats::connect(&url).await.expect("NATS with JetStream at $NATS_URL or 127.0.0.1:4222");
        let js = jetstream::new(client);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        let (name, subject) = (format!("DLQ_{test}_{nanos}"), format!("dlqtest.{test}.{nanos}"));
        js.create_stream(stream::Config { name: name.clone(), subjects: vec![subject.clone()], ..Default::default() })
            .await
            .unwrap();
        Self { js, name, subject }
    }

    /// Publishes payments `1..=n`, `poison` among them, and waits until all are stored.
    async fn publish(&self, n: u64, poison: &[u64]) {
        let mut acks = Vec::new();
        for id in 1..=n {
            let bytes = Payment::new(id, poison.contains(&id)).bytes();
            acks.push(self.js.publish(self.subject.clone(), bytes.into()).await.unwrap());
            if acks.len() == 512 {
                for ack in acks.drain(..) {
                    ack.await.unwrap();
                }
            }
        }
        for ack in acks {
            ack.await.unwrap();
        }
    }

    async fn consumer(&self, ack_wait: Duration) -> consumer::PullConsumer {
        let config = pull::Config { durable_name: Some("ledger".into()), ack_wait, ..Default::default() };
        self.js.get_stream(&self.name).await.unwrap().get_or_create_consumer("ledger", config).await.unwrap()
    }

    /// Whether the consumer has delivered and seen acknowledged every message.
    async fn drained(&self) -> bool {
        let consumer = self.consumer(Duration::from_secs(30)).await;
        let info = consumer.get_info().await.unwrap();
        info.num_pending == 0 && info.num_ack_pending == 0
    }

    async fn delete(self) {
        self.js.delete_stream(&self.name).await.unwrap();
    }
}

fn adapter(store: Arc<dyn DeadLetterStore>, ledger: &Ledger) -> JetStreamConsumer {
    let dispatcher =
        Dispatcher::new(store, handlers![handle_payment].unwrap()).context(Context::new().with(ledger.clone()));
    JetStreamConsumer::new(dispatcher, "payment").nak_delay(Duration::from_millis(300))
}

/// `bytes` as a JSON value (PostgreSQL's JSONB keeps no key order).
fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

async fn rows(store: &dyn DeadLetterStore) -> Vec<dlq_core::DeadLetter> {
    store.list(ListFilter::default()).await.unwrap()
}

/// Runs `adapter` on the consumer's messages in a task until the token is cancelled.
fn spawn_run(
    adapter: JetStreamConsumer,
    consumer: consumer::PullConsumer,
    stop: &CancellationToken,
) -> tokio::task::JoinHandle<dlq_consumers::RunStats> {
    let stop = stop.clone();
    tokio::spawn(async move {
        let messages = consumer.messages().await.unwrap();
        adapter.run(messages, stop.cancelled_owned()).await.unwrap()
    })
}

#[sqlx::test(migrations = false)]
async fn a_poison_message_is_parked_dead_and_the_stream_moves_on(pool: PgPool) {
    let store: Arc<dyn DeadLetterStore> = Arc::new(PgStore::from_pool(pool, PgConfig::default()).await.unwrap());
    let stream = TestStream::new("poison").await;
    stream.publish(10_000, &[4_321]).await;
    let ledger = Ledger::default();

    let stop = CancellationToken::new();
    let run = spawn_run(adapter(store.clone(), &ledger), stream.consumer(Duration::from_secs(30)).await, &stop);
    eventually(Duration::from_secs(120), "the consumer drains the stream", || stream.drained()).await;
    stop.cancel();
    let stats = run.await.unwrap();

    assert_eq!((stats.succeeded, stats.parked, stats.retried), (9_999, 1, 0));
    assert_eq!(ledger.distinct(), 9_999);
    let rows = rows(&*store).await;
    assert_eq!(rows.len(), 1, "nothing but the poison is parked");
    let poison = &rows[0];
    assert_eq!((poison.status, poison.dead_reason), (Status::FailedPermanently, Some(DeadReason::Permanent)));
    assert_eq!(poison.source.topic.as_deref(), Some(stream.subject.as_str()));
    assert_eq!(poison.source.offset, Some(4_321), "the stream sequence");
    assert_eq!(poison.dedupe_key.as_deref(), Some(format!("{}/4321", stream.name).as_str()));
    assert_eq!(json(&poison.payload.to_bytes()), json(&Payment::new(4_321, true).bytes()), "the payload, as JSON");
    stream.delete().await;
}

#[sqlx::test(migrations = false)]
async fn a_redelivery_after_a_crash_before_the_ack_does_not_park_twice(pool: PgPool) {
    let store: Arc<dyn DeadLetterStore> = Arc::new(PgStore::from_pool(pool, PgConfig::default()).await.unwrap());
    let stream = TestStream::new("crash").await;
    stream.publish(20, &[7]).await;
    let ledger = Ledger::default();
    let adapter = adapter(store.clone(), &ledger);

    // The first consumer handles 1..=6 and parks 7, then dies before acknowledging 7.
    let consumer = stream.consumer(Duration::from_secs(1)).await;
    let mut messages = consumer.messages().await.unwrap();
    for _ in 1..=6 {
        let handled = adapter.handle(&messages.next().await.unwrap().unwrap()).await.unwrap();
        assert_eq!(Action::of_dispatch(&handled), Action::Ack);
    }
    let poison = messages.next().await.unwrap().unwrap();
    let first = adapter.dispatch(&poison).await.unwrap();
    assert_eq!(Action::of_dispatch(&first), Action::Ack);
    let Ok(Dispatched::Parked { id: first_id, .. }) = first else { panic!("{first:?}") };
    drop((poison, messages, consumer)); // the crash: no ack for 7, nor for what was prefetched

    // A new consumer gets 7 again after the ack wait, and the rest.
    let stop = CancellationToken::new();
    let run = spawn_run(adapter.clone(), stream.consumer(Duration::from_secs(1)).await, &stop);
    eventually(Duration::from_secs(30), "the restarted consumer drains the stream", || stream.drained()).await;
    stop.cancel();
    let stats = run.await.unwrap();

    assert_eq!(stats.parked, 1, "7 was redelivered and found parked");
    let rows = rows(&*store).await;
    assert_eq!(rows.len(), 1, "parked once: {rows:?}");
    assert_eq!(rows[0].id, first_id);
    assert_eq!(ledger.distinct(), 19, "every other payment posted at least once");
    stream.delete().await;
}

#[sqlx::test(migrations = false)]
async fn while_the_database_is_down_the_message_is_nakked_and_parked_once_when_it_is_back(pool: PgPool) {
    let db = pool.connect_options().get_database().unwrap().to_owned();
    PgStore::from_pool(pool, PgConfig::default()).await.unwrap(); // the schema
    let proxy = DbProxy::start().await;
    let config = PgConfig::default().park_timeout(Duration::from_millis(500));
    let store: Arc<dyn DeadLetterStore> = Arc::new(PgStore::connect_with(&proxy.url(&db), config).await.unwrap());
    let stream = TestStream::new("dbdown").await;
    let ledger = Ledger::default();

    proxy.set_up(false);
    stream.publish(50, &[3]).await;
    let stop = CancellationToken::new();
    let run = spawn_run(adapter(store.clone(), &ledger), stream.consumer(Duration::from_secs(30)).await, &stop);
    eventually(Duration::from_secs(30), "the healthy payments are handled", || async { ledger.distinct() == 49 }).await;
    // The poison is nakked, redelivered, nakked…: each try to park it opens a connection that
    // the proxy refuses.
    eventually(Duration::from_secs(60), "the poison is tried three times", || async { proxy.refused() >= 3 }).await;
    assert!(!stream.drained().await, "the poison is not acked while it cannot be parked");

    proxy.set_up(true);
    eventually(Duration::from_secs(30), "the poison is parked and acked", || stream.drained()).await;
    stop.cancel();
    let stats = run.await.unwrap();

    assert!(stats.retried >= 2, "nakked and redelivered: {stats:?}");
    assert_eq!(stats.parked, 1);
    let rows = rows(&*store).await;
    assert_eq!(rows.len(), 1, "parked once: {rows:?}");
    assert_eq!(rows[0].source.offset, Some(3));
    stream.delete().await;
}

#[sqlx::test(migrations = false)]
async fn a_ledger_outage_is_parked_acked_and_retried_to_success(pool: PgPool) {
    let store: Arc<dyn DeadLetterStore> = Arc::new(PgStore::from_pool(pool, PgConfig::default()).await.unwrap());
    let stream = TestStream::new("outage").await;
    let ledger = Ledger::default();

    ledger.set_down(true);
    stream.publish(30, &[]).await;
    let stop = CancellationToken::new();
    let run = spawn_run(adapter(store.clone(), &ledger), stream.consumer(Duration::from_secs(30)).await, &stop);
    eventually(Duration::from_secs(30), "the stream is drained during the outage", || stream.drained()).await;
    assert_eq!(ledger.distinct(), 0);

    ledger.set_down(false);
    let config = RetrierConfig::from_json_str(r#"{"poll-interval": "100ms"}"#).unwrap();
    let retrier = Retrier::new(store.clone(), handlers![handle_payment].unwrap())
        .config(config)
        .context(Context::new().with(ledger.clone()));
    let retrying = tokio::spawn({
        let stop = stop.clone();
        async move { retrier.run_until(stop.cancelled_owned()).await.unwrap() }
    });
    eventually(Duration::from_secs(30), "every payment is posted", || async { ledger.distinct() == 30 }).await;
    stop.cancel();
    let (stats, _) = (run.await.unwrap(), retrying.await.unwrap());

    assert_eq!(stats.parked, 30);
    let rows = rows(&*store).await;
    assert_eq!(rows.len(), 30);
    assert!(rows.iter().all(|r| r.status == Status::Succeeded), "{rows:?}");
    stream.delete().await;
}

#[sqlx::test(migrations = false)]
async fn republish_puts_parked_events_back_on_their_subject_with_the_dedupe_key(pool: PgPool) {
    let store: Arc<dyn DeadLetterStore> = Arc::new(PgStore::from_pool(pool, PgConfig::default()).await.unwrap());
    let stream = TestStream::new("republish").await;
    stream.publish(5, &[2]).await;
    let ledger = Ledger::default();
    let adapter = adapter(store.clone(), &ledger);
    let consumer = stream.consumer(Duration::from_secs(30)).await;
    let mut messages = consumer.messages().await.unwrap();
    for _ in 1..=5 {
        let handled = adapter.handle(&messages.next().await.unwrap().unwrap()).await.unwrap();
        assert_eq!(Action::of_dispatch(&handled), Action::Ack);
    }
    let parked = rows(&*store).await;
    assert_eq!(parked.len(), 1);

    let filter = ListFilter::default().status(Status::FailedPermanently);
    let ids = republish(&Admin::new(store.clone(), "test"), &stream.js, filter, "test: replay").await.unwrap();
    assert_eq!(ids, vec![parked[0].id]);

    let replay = messages.next().await.unwrap().unwrap();
    assert_eq!(replay.info().unwrap().stream_sequence, 6, "appended to the same subject");
    assert_eq!(json(&replay.payload), json(&Payment::new(2, true).bytes()));
    let key = replay.headers.as_ref().and_then(|h| h.get(DEDUPE_KEY_HEADER)).map(|v| v.as_str().to_owned());
    assert_eq!(key, Some(format!("{}/2", stream.name)));
    let row = store.get(parked[0].id).await.unwrap().unwrap();
    assert_eq!(row.status, Status::Discarded, "the broker holds the event now");
    assert_eq!(store.audit(row.id).await.unwrap().len(), 1, "the republish is audited");
    stream.delete().await;
}

#[sqlx::test(migrations = false)]
async fn a_replay_that_fails_again_is_parked_under_the_original_key_and_republished_with_it(pool: PgPool) {
    let store: Arc<dyn DeadLetterStore> = Arc::new(PgStore::from_pool(pool, PgConfig::default()).await.unwrap());
    let stream = TestStream::new("replay").await;
    stream.publish(3, &[2]).await;
    let ledger = Ledger::default();
    let adapter = adapter(store.clone(), &ledger);
    let consumer = stream.consumer(Duration::from_secs(30)).await;
    let mut messages = consumer.messages().await.unwrap();
    for _ in 1..=3 {
        let handled = adapter.handle(&messages.next().await.unwrap().unwrap()).await.unwrap();
        assert_eq!(Action::of_dispatch(&handled), Action::Ack);
    }
    let [first] = rows(&*store).await.try_into().unwrap();
    let key = format!("{}/2", stream.name);
    assert_eq!(first.dedupe_key.as_deref(), Some(key.as_str()));

    // Replayed, and still poison: it fails again, at stream sequence 4.
    let dead = || ListFilter::default().status(Status::FailedPermanently);
    assert_eq!(
        republish(&Admin::new(store.clone(), "test"), &stream.js, dead(), "test: replay").await.unwrap(),
        vec![first.id]
    );
    let replay = messages.next().await.unwrap().unwrap();
    assert_eq!(dlq_consumers::nats::dedupe_key(&replay).unwrap(), key);
    let handled = adapter.handle(&replay).await.unwrap();
    let Ok(Dispatched::Parked { id: second_id, .. }) = handled else { panic!("{handled:?}") };
    assert_ne!(second_id, first.id, "a new row: the first one is finished (discarded by the republish)");
    let second = store.get(second_id).await.unwrap().unwrap();
    assert_eq!(second.dedupe_key.as_deref(), Some(key.as_str()), "the original event's key, not {}/4", stream.name);
    assert_eq!(second.status, Status::FailedPermanently);
    assert_eq!(second.source.offset, Some(4), "its source is where the replay was read");
    assert_eq!(second.source.headers.get(DLQ_ID_HEADER), Some(&first.id.to_string()));
    let history: BTreeSet<_> =
        rows(&*store).await.into_iter().filter(|r| r.dedupe_key.as_ref() == Some(&key)).map(|r| r.id).collect();
    assert_eq!(history, BTreeSet::from([first.id, second_id]), "the event's history, found by its key");

    // The second replay carries the same key again.
    assert_eq!(
        republish(&Admin::new(store.clone(), "test"), &stream.js, dead(), "test: replay again").await.unwrap(),
        vec![second_id]
    );
    let again = messages.next().await.unwrap().unwrap();
    assert_eq!(again.info().unwrap().stream_sequence, 5);
    let header = |name| again.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str().to_owned());
    assert_eq!(header(DEDUPE_KEY_HEADER), Some(key));
    assert_eq!(header(DLQ_ID_HEADER), Some(second_id.to_string()));
    stream.delete().await;
}

#[sqlx::test(migrations = false)]
async fn a_dedupe_key_header_too_long_or_with_control_characters_is_ignored(pool: PgPool) {
    let store: Arc<dyn DeadLetterStore> = Arc::new(PgStore::from_pool(pool, PgConfig::default()).await.unwrap());
    let stream = TestStream::new("forged").await;
    let forged = [
        "k".repeat(MAX_REPLAY_KEY_LEN + 1),
        format!("{}/1\tforged", stream.name),
        "k".repeat(MAX_REPLAY_KEY_LEN), // the longest taken
    ];
    for value in &forged {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(DEDUPE_KEY_HEADER, value.as_str());
        let payload = Payment::new(7, true).bytes().into();
        stream.js.publish_with_headers(stream.subject.clone(), headers, payload).await.unwrap().await.unwrap();
    }
    let ledger = Ledger::default();
    let adapter = adapter(store.clone(), &ledger);
    let consumer = stream.consumer(Duration::from_secs(30)).await;
    let mut messages = consumer.messages().await.unwrap();
    for _ in &forged {
        let handled = adapter.handle(&messages.next().await.unwrap().unwrap()).await.unwrap();
        assert!(matches!(handled, Ok(Dispatched::Parked { .. })), "{handled:?}");
    }

    let mut rows = rows(&*store).await;
    rows.sort_by_key(|r| r.source.offset);
    assert_eq!(rows.len(), forged.len(), "each parked on its own row");
    let keys: Vec<_> = rows.iter().map(|r| r.dedupe_key.clone().unwrap()).collect();
    let own = |sequence| format!("{}/{sequence}", stream.name);
    assert_eq!(keys, [own(1), own(2), forged[2].clone()], "the bad values are ignored, each message keeps its own key");
    assert_eq!(rows[0].source.headers.get(DEDUPE_KEY_HEADER), Some(&forged[0]), "kept for an operator to see");
    stream.delete().await;
}

/// The consumer process of the kill test: consumes stream `DLQ_KILL_STREAM` through the
/// durable consumer `ledger` into the database `DLQ_KILL_DATABASE_URL` until it is killed.
#[tokio::test]
#[ignore = "the consumer process that a_consumer_killed_mid_stream_loses_nothing_and_parks_nothing_twice starts and kills"]
async fn kill_test_consumer_process() {
    let dispatcher = KillTest::child_dispatcher().await;
    let client =
        async_nats::connect(std::env::var("NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".into())).await.unwrap();
    let stream = jetstream::new(client).get_stream(KillTest::var("DLQ_KILL_STREAM")).await.unwrap();
    let config =
        pull::Config { durable_name: Some("ledger".into()), ack_wait: Duration::from_secs(2), ..Default::default() };
    let consumer = stream.get_or_create_consumer("ledger", config).await.unwrap();
    let adapter = JetStreamConsumer::new(dispatcher, POSTED_IN_DB);
    adapter.run(consumer.messages().await.unwrap(), std::future::pending::<()>()).await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_consumer_killed_mid_stream_loses_nothing_and_parks_nothing_twice(pool: PgPool) {
    let test = KillTest::new(pool).await;
    let stream = TestStream::new("kill").await;
    stream.publish(KillTest::PAYMENTS, &test.poison).await;
    test.run("kill_test_consumer_process", &[("DLQ_KILL_STREAM", stream.name.as_str())], || stream.drained()).await;
    stream.delete().await;
}
