//! The poison-message incident on a real Kafka-protocol broker (tansu at 127.0.0.1:9092, or
//! `$KAFKA_BROKERS`; `scripts/test.sh` starts it) with the dead letters in PostgreSQL
//! (`#[sqlx::test]`, a fresh database each). Every test has a topic of 3 partitions and a
//! consumer group of its own.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{DbProxy, KillTest, Ledger, POSTED_IN_DB, Payment, eventually, handle_payment};
use dlq_consumers::kafka::{self, KEY_HEADER, KafkaConsumer, republish};
use dlq_consumers::{DEDUPE_KEY_HEADER, DLQ_ID_HEADER, RunStats};
use dlq_core::{
    CancellationToken, Context, DeadLetterStore, DeadReason, Dispatcher, ListFilter, Retrier, RetrierConfig, Status,
    handlers,
};
use dlq_sqlx::{PgConfig, PgStore};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use sqlx::PgPool;

const PARTITIONS: i32 = 3;

fn brokers() -> String {
    std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// A topic of 3 partitions of its own for one test, and a consumer group for it.
struct TestTopic {
    name: String,
    group: String,
    producer: FutureProducer,
    /// The offset after the last record produced, per partition (tansu 0.6 answers a
    /// ListOffsets for the latest offset with 1, so the test keeps its own).
    ends: Mutex<Vec<i64>>,
}

impl TestTopic {
    async fn new(test: &str) -> Self {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        let name = format!("dlqtest-{test}-{nanos}");
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", brokers()).create().unwrap();
        let topic = NewTopic::new(&name, PARTITIONS, TopicReplication::Fixed(1));
        let created = admin
            .create_topics([&topic], &AdminOptions::new())
            .await
            .expect("a Kafka-protocol broker at $KAFKA_BROKERS or 127.0.0.1:9092 (scripts/test.sh starts tansu)");
        assert!(created.iter().all(Result::is_ok), "topic {name}: {created:?}");
        let producer = ClientConfig::new().set("bootstrap.servers", brokers()).create().unwrap();
        Self { group: format!("{name}-ledger"), name, producer, ends: Mutex::new(vec![0; PARTITIONS as usize]) }
    }

    /// Produces payments `1..=n` keyed by id, `poison` among them; returns where each
    /// poison landed: (id, partition, offset).
    async fn produce(&self, n: u64, poison: &[u64]) -> Vec<(u64, i32, i64)> {
        let mut landed = Vec::new();
        let mut sends = Vec::new();
        for id in 1..=n {
            let (key, payload) = (id.to_string(), Payment::new(id, poison.contains(&id)).bytes());
            let record = FutureRecord::to(&self.name).key(&key).payload(&payload);
            sends.push((id, self.producer.send_result(record).map_err(|(e, _)| e).unwrap()));
            if sends.len() == 1_000 || id == n {
                for (id, delivery) in sends.drain(..) {
                    let delivery = delivery.await.unwrap().map_err(|(e, _)| e).unwrap();
                    self.landed(delivery.partition, delivery.offset);
                    if poison.contains(&id) {
                        landed.push((id, delivery.partition, delivery.offset));
                    }
                }
            }
        }
        landed
    }

    /// Notes a record produced at `partition`/`offset`.
    fn landed(&self, partition: i32, offset: i64) {
        let end = &mut self.ends.lock().unwrap()[partition as usize];
        *end = (*end).max(offset + 1);
    }

    fn consumer(&self) -> StreamConsumer {
        let consumer: StreamConsumer = kafka::consumer_config(&brokers(), &self.group).create().unwrap();
        consumer.subscribe(&[&self.name]).unwrap();
        consumer
    }

    /// The group's committed offset of each partition (0 when none).
    fn committed(&self) -> Vec<i64> {
        let probe: BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", brokers()).set("group.id", &self.group).create().unwrap();
        let mut partitions = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            partitions.add_partition(&self.name, p);
        }
        let committed = probe.committed_offsets(partitions, Duration::from_secs(10)).unwrap();
        (0..PARTITIONS)
            .map(|p| match committed.find_partition(&self.name, p).map(|e| e.offset()) {
                Some(Offset::Offset(offset)) => offset,
                _ => 0,
            })
            .collect()
    }

    /// Records produced but not committed by the group, over all partitions.
    fn lag(&self) -> i64 {
        let ends = self.ends.lock().unwrap().clone();
        ends.iter().zip(self.committed()).map(|(end, committed)| end - committed).sum()
    }
}

fn adapter(store: Arc<dyn DeadLetterStore>, ledger: &Ledger) -> KafkaConsumer {
    let dispatcher =
        Dispatcher::new(store, handlers![handle_payment].unwrap()).context(Context::new().with(ledger.clone()));
    KafkaConsumer::new(dispatcher, "payment").retry_delay(Duration::from_millis(200))
}

/// Runs `adapter` on a new consumer of `topic` in a task until the token is cancelled.
fn spawn_run(adapter: KafkaConsumer, topic: &TestTopic, stop: &CancellationToken) -> tokio::task::JoinHandle<RunStats> {
    let (consumer, stop) = (topic.consumer(), stop.clone());
    tokio::spawn(async move { adapter.run(&consumer, stop.cancelled_owned()).await.unwrap() })
}

async fn rows(store: &dyn DeadLetterStore) -> Vec<dlq_core::DeadLetter> {
    store.list(ListFilter::default()).await.unwrap()
}

/// `bytes` as a JSON value (PostgreSQL's JSONB keeps no key order).
fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

#[sqlx::test(migrations = false)]
async fn a_poison_record_is_parked_dead_and_its_partition_moves_on(pool: PgPool) {
    let store: Arc<dyn DeadLetterStore> = Arc::new(PgStore::from_pool(pool, PgConfig::default()).await.unwrap());
    let topic = TestTopic::new("poison").await;
    let landed = topic.produce(10_000, &[4_321]).await;
    let ledger = Ledger::default();

    let stop = CancellationToken::new();
    let run = spawn_run(adapter(store.clone(), &ledger), &topic, &stop);
    eventually(Duration::from_secs(120), "every payment is handled", || async { ledger.distinct() == 9_999 }).await;
    eventually(Duration::from_secs(30), "the consumer lag reaches 0", || async { topic.lag() == 0 }).await;
    stop.cancel();
    let stats = run.await.unwrap();

    assert_eq!((stats.succeeded, stats.parked, stats.retried), (9_999, 1, 0));
    let rows = rows(&*store).await;
    assert_eq!(rows.len(), 1, "nothing but the poison is parked");
    let (poison, [(_, partition, offset)]) = (&rows[0], landed.as_slice()) else { panic!("{landed:?}") };
    assert_eq!((poison.status, poison.dead_reason), (Status::FailedPermanently, Some(DeadReason::Permanent)));
    assert_eq!(poison.source.topic.as_deref(), Some(topic.name.as_str()));
    assert_eq!((poison.source.partition, poison.source.offset), (Some(*partition), Some(*offset)));
    assert_eq!(poison.dedupe_key, Some(format!("{}/{partition}/{offset}", topic.name)));
    assert_eq!(poison.source.headers.get(KEY_HEADER).map(String::as_str), Some("4321"), "the record's key");
    assert_eq!(json(&poison.payload.to_bytes()), json(&Payment::new(4_321, true).bytes()), "the payload, as JSON");
}

#[sqlx::test(migrations = false)]
async fn a_ledger_outage_is_parked_committed_and_retried_to_success(pool: PgPool) {
    let store: Arc<dyn DeadLetterStore> = Arc::new(PgStore::from_pool(pool, PgConfig::default()).await.unwrap());
    let topic = TestTopic::new("outage").await;
    let ledger = Ledger::default();

    ledger.set_down(true);
    topic.produce(30, &[]).await;
    let stop = CancellationToken::new();
    let run = spawn_run(adapter(store.clone(), &ledger), &topic, &stop);
    eventually(Duration::from_secs(60), "the outage's records are committed", || async { topic.lag() == 0 }).await;
    assert_eq!(ledger.distinct(), 0);
    assert!(rows(&*store).await.iter().all(|r| r.status == Status::Pending), "parked transient, to retry");

    ledger.set_down(false);
    let config = RetrierConfig::from_json_str(r#"{"poll-interval": "100ms"}"#).unwrap();
    let retrier = Retrier::new(store.clone(), handlers![handle_payment].unwrap())
        .config(config)
        .context(Context::new().with(ledger.clone()));
    let retrying = tokio::spawn({
        let stop = stop.clone();
        async move { retrier.run_until(stop.cancelled_owned()).await.unwrap() }
    });
    eventually(Duration::from_secs(60), "every payment is posted", || async { ledger.distinct() == 30 }).await;
    stop.cancel();
    let (stats, _) = (run.await.unwrap(), retrying.await.unwrap());

    assert_eq!(stats.parked, 30);
    let rows = rows(&*store).await;
    assert_eq!(rows.len(), 30);
    assert!(rows.iter().all(|r| r.status == Status::Succeeded), "{rows:?}");
}

#[sqlx::test(migrations = false)]
async fn while_the_database_is_down_no_offset_is_committed_past_the_record_that_could_not_be_parked(pool: PgPool) {
    let db = pool.connect_options().get_database().unwrap().to_owned();
    PgStore::from_pool(pool, PgConfig::default()).await.unwrap(); // the schema
    let proxy = DbProxy::start().await;
    let config = PgConfig::default().park_timeout(Duration::from_millis(500));
    let store: Arc<dyn DeadLetterStore> = Arc::new(PgStore::connect_with(&proxy.url(&db), config).await.unwrap());
    let topic = TestTopic::new("dbdown").await;
    let landed = topic.produce(60, &[30]).await;
    let [(_, partition, offset)] = landed.as_slice() else { panic!("{landed:?}") };
    let ledger = Ledger::default();

    proxy.set_up(false);
    let stop = CancellationToken::new();
    let run = spawn_run(adapter(store.clone(), &ledger), &topic, &stop);
    // The poison cannot be parked: it is handled again and again (each try opens a
    // connection that the proxy refuses), and its partition's committed offset never passes
    // it, however many auto-commits go by.
    eventually(Duration::from_secs(60), "the poison is tried three times", || async { proxy.refused() >= 3 }).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let committed = topic.committed();
    assert!(committed[*partition as usize] <= *offset, "committed {committed:?}, poison at {partition}/{offset}");
    assert!(topic.lag() > 0 && ledger.distinct() < 59);

    proxy.set_up(true);
    eventually(Duration::from_secs(60), "every record is accounted for", || async { topic.lag() == 0 }).await;
    stop.cancel();
    let stats = run.await.unwrap();

    assert!(stats.retried >= 2, "tried again while the database was down: {stats:?}");
    assert_eq!((stats.parked, ledger.distinct()), (1, 59), "{stats:?}");
    let rows = rows(&*store).await;
    assert_eq!(rows.len(), 1, "parked once: {rows:?}");
    assert_eq!((rows[0].source.partition, rows[0].source.offset), (Some(*partition), Some(*offset)));
}

#[sqlx::test(migrations = false)]
async fn republish_puts_parked_events_back_on_their_topic_with_key_and_dedupe_key(pool: PgPool) {
    let store: Arc<dyn DeadLetterStore> = Arc::new(PgStore::from_pool(pool, PgConfig::default()).await.unwrap());
    let topic = TestTopic::new("republish").await;
    let landed = topic.produce(5, &[2]).await;
    let [(_, partition, offset)] = landed.as_slice() else { panic!("{landed:?}") };
    let traced = OwnedHeaders::new().insert(Header { key: "traceparent", value: Some("00-abc-01") });
    let (key, payload) = ("99", Payment::new(99, true).bytes());
    let record = FutureRecord::to(&topic.name).key(key).payload(&payload).headers(traced);
    let delivery = topic.producer.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| e).unwrap();
    topic.landed(delivery.partition, delivery.offset);
    let ledger = Ledger::default();

    let stop = CancellationToken::new();
    let run = spawn_run(adapter(store.clone(), &ledger), &topic, &stop);
    eventually(Duration::from_secs(60), "all six records are done", || async { topic.lag() == 0 }).await;
    stop.cancel();
    assert_eq!(run.await.unwrap().parked, 2);
    let parked = rows(&*store).await;
    let traced = parked.iter().find(|r| r.source.headers.get(KEY_HEADER).map(String::as_str) == Some("99")).unwrap();
    assert_eq!(traced.source.trace_context.as_deref(), Some("00-abc-01"));

    let ids =
        republish(&*store, &topic.producer, ListFilter::default().status(Status::FailedPermanently), "test: replay")
            .await
            .unwrap();
    assert_eq!(ids.len(), 2);

    // Read the partition of payment 2 from just after it: its replay is there, same key.
    let reader: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", format!("{}-reader", topic.group))
        .create()
        .unwrap();
    let mut from = TopicPartitionList::new();
    from.add_partition_offset(&topic.name, *partition, Offset::Offset(offset + 1)).unwrap();
    reader.assign(&from).unwrap();
    let replay = loop {
        let record = tokio::time::timeout(Duration::from_secs(30), reader.recv()).await.unwrap().unwrap();
        if record.key() == Some(b"2".as_slice()) {
            break record.detach();
        }
    };
    assert_eq!(json(replay.payload().unwrap()), json(&Payment::new(2, true).bytes()));
    let header = |name: &str| {
        let headers = replay.headers().unwrap();
        headers.iter().find(|h| h.key == name).and_then(|h| h.value).map(|v| String::from_utf8(v.to_vec()).unwrap())
    };
    assert_eq!(header(DEDUPE_KEY_HEADER), Some(format!("{}/{partition}/{offset}", topic.name)));
    let original = parked.iter().find(|r| r.source.offset == Some(*offset) && r.source.partition == Some(*partition));
    assert_eq!(header(DLQ_ID_HEADER), Some(original.unwrap().id.to_string()));
    for id in ids {
        let row = store.get(id).await.unwrap().unwrap();
        assert_eq!(row.status, Status::Discarded, "the broker holds the event now");
        assert_eq!(store.audit(id).await.unwrap().len(), 1, "the republish is audited");
    }
}

/// The consumer process of the kill test: consumes topic `DLQ_KILL_TOPIC` as group
/// `DLQ_KILL_GROUP` into the database `DLQ_KILL_DATABASE_URL` until it is killed. Its
/// offsets are committed only every minute, so a kill redelivers all it did.
#[tokio::test]
#[ignore = "the consumer process that a_consumer_killed_mid_stream_loses_nothing_and_parks_nothing_twice starts and kills"]
async fn kill_test_consumer_process() {
    let dispatcher = KillTest::child_dispatcher().await;
    let mut config = kafka::consumer_config(&brokers(), &KillTest::var("DLQ_KILL_GROUP"));
    // Nothing committed before the kill; the killed member leaves the group quickly.
    config.set("auto.commit.interval.ms", "60000").set("session.timeout.ms", "6000");
    let consumer: StreamConsumer = config.create().unwrap();
    consumer.subscribe(&[&KillTest::var("DLQ_KILL_TOPIC")]).unwrap();
    KafkaConsumer::new(dispatcher, POSTED_IN_DB).run(&consumer, std::future::pending::<()>()).await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_consumer_killed_mid_stream_loses_nothing_and_parks_nothing_twice(pool: PgPool) {
    let test = KillTest::new(pool).await;
    let topic = TestTopic::new("kill").await;
    topic.produce(KillTest::PAYMENTS, &test.poison).await;
    let env = [("DLQ_KILL_TOPIC", topic.name.as_str()), ("DLQ_KILL_GROUP", topic.group.as_str())];
    test.run("kill_test_consumer_process", &env).await;
    assert!(
        test.posted(false).await > test.posted(true).await,
        "the records done before the kill were delivered again"
    );
}
