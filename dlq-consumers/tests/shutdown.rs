//! `run` stops on any shutdown future, whatever it resolves to: `ctrl_c()` (an
//! `io::Result<()>`) and a oneshot receiver (a `Result<(), RecvError>`) are passed as they are.
//! No broker is needed: the shutdown is ready before any message is asked for.

use std::sync::Arc;

use dlq_consumers::RunStats;
use dlq_core::{MemoryStore, adapter::Dispatcher, handlers::Registry};

fn dispatcher() -> Dispatcher {
    Dispatcher::new(Arc::new(MemoryStore::new()), Registry::default())
}

/// A receiver whose sender has already sent.
fn stopped() -> tokio::sync::oneshot::Receiver<()> {
    let (stop, rx) = tokio::sync::oneshot::channel();
    stop.send(()).unwrap();
    rx
}

#[cfg(feature = "nats")]
#[tokio::test]
async fn jetstream_run_stops_on_a_oneshot_receiver_and_takes_ctrl_c() {
    use async_nats::jetstream::Message;
    use dlq_consumers::nats::JetStreamConsumer;

    let adapter = JetStreamConsumer::new(dispatcher(), "payment");
    let never = || futures_util::stream::pending::<Result<Message, std::io::Error>>();
    assert_eq!(adapter.run(never(), stopped()).await.unwrap(), RunStats::default());
    // Compiles as written; not awaited, since nothing here sends the signal.
    drop(adapter.run(never(), tokio::signal::ctrl_c()));
}

#[cfg(feature = "kafka")]
#[tokio::test]
async fn kafka_run_stops_on_a_oneshot_receiver_and_takes_ctrl_c() {
    use dlq_consumers::kafka::{self, KafkaConsumer};
    use rdkafka::consumer::StreamConsumer;

    // Created without a broker: nothing is received before the shutdown.
    let consumer: StreamConsumer = kafka::consumer_config("127.0.0.1:1", "shutdown-test").create().unwrap();
    let adapter = KafkaConsumer::new(dispatcher(), "payment");
    assert_eq!(adapter.run(&consumer, stopped()).await.unwrap(), RunStats::default());
    drop(adapter.run(&consumer, tokio::signal::ctrl_c()));
}
