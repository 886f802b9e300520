//! What a park answers when its connection dies, or when the server would not keep it: a
//! connection lost mid-park is `ParkFailed`, never `Parked`; a park whose answer was lost after
//! its commit, parked again, finds its first row by its dedupe key; `PgConfig::durability_check`
//! refuses parks that `synchronous_commit = off` would not keep, also for a role that is not a
//! superuser. (With a standby: `scripts/failover.sh`.)

mod pg_support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlq_core::{HandlerError, Scope, adapter::DeadReason, dead_letter, store::prelude::*};
use dlq_sqlx::postgres::DurabilityCheck;
use dlq_sqlx::{PgConfig, PgStore};
use pg_support::*;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[dead_letter(event_type = "pg-durability-cut", backoff = "none")]
async fn downstream(n: u64) -> Result<(), std::io::Error> {
    Err(std::io::Error::other(format!("downstream down for {n}")))
}

/// Runs the handler through the live path into `store`, with dedupe key `key`.
async fn live_park(store: &PgStore, key: &str) -> Result<(), HandlerError<std::io::Error>> {
    Scope::new().store(Arc::new(store.clone())).dedupe_key(key).run(downstream(7)).await
}

async fn rows_with_key(pool: &PgPool, key: &str) -> Vec<i64> {
    sqlx::query_scalar("SELECT id FROM dlq_events WHERE dedupe_key = $1 ORDER BY id")
        .bind(key)
        .fetch_all(pool)
        .await
        .expect("rows")
}

/// A park killed while it waits (`pg_terminate_backend` on its backend, blocked on a row lock
/// another transaction holds) answers `ParkFailed` on the live path; once the lock is gone,
/// the redelivery parks one row, and the next finds it.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_park_whose_connection_dies_is_park_failed_never_parked(pool: PgPool) {
    let store = store_with(&pool, PgConfig::default().park_timeout(Duration::from_secs(120))).await;
    // Another transaction holds the event's dedupe key: the park's insert waits for it.
    let mut holder = pool.begin().await.unwrap();
    let letter = letter("pg-durability-cut", 1).with_dedupe_key("cut-1");
    store.park_in(&mut holder, letter).await.unwrap();
    let parking = tokio::spawn({
        let store = store.clone();
        async move { live_park(&store, "cut-1").await }
    });
    let started = Instant::now();
    let pid = loop {
        let waiting: Option<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_optional(&pool)
        .await
        .unwrap();
        if let Some(pid) = waiting {
            break pid;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the park never waited on the lock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)").bind(pid).fetch_one(&pool).await.unwrap();
    assert!(killed);
    let answer = parking.await.unwrap();
    let Err(HandlerError::ParkFailed { store_error, .. }) = answer else { panic!("not ParkFailed: {answer:?}") };
    assert!(matches!(store_error, dlq_core::Error::Store(_)), "the connection's error, not a timeout: {store_error:?}");
    holder.rollback().await.unwrap();
    assert!(rows_with_key(&pool, "cut-1").await.is_empty(), "nothing stored");

    let Err(HandlerError::Parked { id, deduplicated: false, .. }) = live_park(&store, "cut-1").await else {
        panic!("the redelivery is parked")
    };
    let Err(HandlerError::Parked { id: again, deduplicated: true, .. }) = live_park(&store, "cut-1").await else {
        panic!("the next redelivery finds its row")
    };
    assert_eq!((again, rows_with_key(&pool, "cut-1").await), (id, vec![id]));
}

/// A TCP proxy to the server of `options` that cuts a connection instead of passing on the
/// server's answer to a message from the client that contains `marker` (set with [`Cut::arm`]):
/// the server ran the statement (and committed it), the client never hears so.
struct Cut {
    marker: Arc<Mutex<Option<Vec<u8>>>>,
    port: u16,
}

impl Cut {
    async fn start(options: &PgConnectOptions) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = format!("{}:{}", options.get_host(), options.get_port());
        let marker: Arc<Mutex<Option<Vec<u8>>>> = Arc::default();
        let armed = Arc::clone(&marker);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(&server).await.unwrap();
                tokio::spawn(Self::pipe(client, server, Arc::clone(&armed)));
            }
        });
        Self { marker, port }
    }

    fn arm(&self, marker: &str) {
        *self.marker.lock().unwrap() = Some(marker.as_bytes().to_vec());
    }

    async fn pipe(
        mut client: tokio::net::TcpStream,
        mut server: tokio::net::TcpStream,
        marker: Arc<Mutex<Option<Vec<u8>>>>,
    ) {
        let (mut client_read, mut client_write) = client.split();
        let (mut server_read, mut server_write) = server.split();
        let (mut up, mut down) = (vec![0; 1 << 16], vec![0; 1 << 16]);
        let mut cutting = false;
        loop {
            tokio::select! {
                read = client_read.read(&mut up) => {
                    let Ok(n @ 1..) = read else { return };
                    {
                        let mut marker = marker.lock().unwrap();
                        if marker.as_ref().is_some_and(|m| up[..n].windows(m.len()).any(|w| w == m.as_slice())) {
                            *marker = None;
                            cutting = true;
                        }
                    }
                    if server_write.write_all(&up[..n]).await.is_err() { return }
                }
                read = server_read.read(&mut down) => {
                    let Ok(n @ 1..) = read else { return };
                    if cutting {
                        return; // both sockets close: the answer is lost
                    }
                    if client_write.write_all(&down[..n]).await.is_err() { return }
                }
            }
        }
    }
}

/// A dead letter that wakes no retrier (no `NOTIFY` besides the park's own statement).
fn dead_letter_keyed(key: &str) -> dlq_core::store::NewDeadLetter {
    letter("pg-durability-lost-answer", 1).with_dedupe_key(key).retry(Duration::ZERO, 0).dead(DeadReason::Permanent)
}

/// The server commits a park and the connection dies before the answer arrives: the caller
/// gets an error, and the same letter parked again (the redelivery of an unknown outcome)
/// answers the first row, found by its dedupe key: one row, not two.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_park_retried_after_a_lost_answer_finds_its_first_row(pool: PgPool) {
    let cut = Cut::start(&pool.connect_options()).await;
    // Plain TCP, so that the proxy reads the statement: with the workspace's features sqlx has
    // TLS, which `sslmode=prefer` (the default) would take.
    let through = (*pool.connect_options()).clone().host("127.0.0.1").port(cut.port).ssl_mode(PgSslMode::Disable);
    // No test on acquire: the park's statement is the connection's next message.
    let proxied = PgPoolOptions::new().max_connections(4).test_before_acquire(false).connect_lazy_with(through);
    let store = store_with(&proxied, PgConfig::default().park_timeout(Duration::from_secs(60))).await;
    store.park(dead_letter_keyed("warm-up")).await.expect("a park through the proxy");

    cut.arm("lost-answer-1");
    let answer = store.park(dead_letter_keyed("lost-answer-1")).await;
    assert!(matches!(answer, Err(dlq_core::Error::Store(_))), "an error, never Ok: {answer:?}");
    let first = rows_with_key(&pool, "lost-answer-1").await;
    assert_eq!(first.len(), 1, "the server committed the park whose answer was lost");

    let again = store.park(dead_letter_keyed("lost-answer-1")).await.expect("the redelivery is parked");
    assert_eq!((again.id, again.deduplicated), (first[0], true), "the first row, found by its dedupe key");
    assert_eq!(rows_with_key(&pool, "lost-answer-1").await, first, "one row, not two");
}

/// A pool whose connections run with `synchronous_commit = off`, as role `role` if given.
fn unsynchronized(pool: &PgPool, role: Option<String>) -> PgPool {
    let options = (*pool.connect_options()).clone().options([("synchronous_commit", "off")]);
    PgPoolOptions::new()
        .max_connections(2)
        .after_connect(move |conn, _| {
            let role = role.clone();
            Box::pin(async move {
                if let Some(role) = role {
                    sqlx::query(sqlx::AssertSqlSafe(format!("SET ROLE \"{role}\""))).execute(&mut *conn).await?;
                }
                Ok(())
            })
        })
        .connect_lazy_with(options)
}

/// `synchronous_commit = off` answers a park before it is on disk: `Refuse` fails the store at
/// start-up, and the parks of a store that ran no migrations; `Warn` and `Off` park.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn durability_check_refuses_synchronous_commit_off(pool: PgPool) {
    let off = unsynchronized(&pool, None);
    let refuse = PgConfig::default().durability_check(DurabilityCheck::Refuse);
    let refused = PgStore::from_pool(off.clone(), refuse.clone()).await.map(|_| ());
    let Err(dlq_core::Error::Config { key, reason, .. }) = refused else { panic!("not refused: {refused:?}") };
    assert_eq!(key, "durability_check");
    assert!(reason.contains("synchronous_commit is off"), "{reason}");

    let lazy = PgStore::from_pool(off.clone(), refuse.run_migrations(false)).await.expect("nothing checked yet");
    for _ in 0..2 {
        let parked = lazy.park(letter("pg-durability", 1)).await;
        assert!(
            matches!(parked, Err(dlq_core::Error::Config { ref key, .. }) if key == "durability_check"),
            "{parked:?}"
        );
    }
    for check in [DurabilityCheck::Warn, DurabilityCheck::Off] {
        let store = PgStore::from_pool(off.clone(), PgConfig::default().durability_check(check)).await.unwrap();
        store.park(letter("pg-durability", 1)).await.expect("parked");
    }
}

/// The check reads what it needs as any role: a role with no privilege at all is refused by
/// the settings, not by a permission error.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn durability_check_works_for_a_role_without_privileges(pool: PgPool) {
    let database: String = sqlx::query_scalar("SELECT current_database()").fetch_one(&pool).await.unwrap();
    let role = format!("{database}_probe");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE ROLE \"{role}\" NOLOGIN"))).execute(&pool).await.unwrap();
    let off = unsynchronized(&pool, Some(role.clone()));
    let config = PgConfig::default().durability_check(DurabilityCheck::Refuse).run_migrations(false);
    let store = PgStore::from_pool(off.clone(), config).await.unwrap();
    let parked = store.park(letter("pg-durability", 1)).await;
    off.close().await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP ROLE \"{role}\""))).execute(&pool).await.unwrap();
    assert!(matches!(parked, Err(dlq_core::Error::Config { ref key, .. }) if key == "durability_check"), "{parked:?}");
}
