//! Every connection a `PgStore` opens over TCP has `TCP_NODELAY`, which sqlx 0.9.0 leaves off:
//! its pool's, its listener's and its singleton lock's. The sockets are read back from this
//! process's file descriptors and matched to the server's `pg_stat_activity` by port.
//!
//! A test binary of its own: the store sets the option on every connection of the process to
//! the server, so the connection opened by sqlx alone must be checked before any store exists.

#![cfg(target_os = "linux")]

use std::collections::BTreeMap;
use std::time::Duration;

use dlq_core::store::prelude::*;
use dlq_sqlx::postgres::{PgConfig, PgStore};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};

#[sqlx::test(migrations = false)]
async fn every_connection_a_store_opens_has_tcp_nodelay(_: PgPoolOptions, options: PgConnectOptions) {
    assert!(options.get_socket().is_none() && !options.get_host().starts_with('/'), "the test needs TCP");
    let mut plain = PgConnection::connect_with(&options).await.unwrap();
    let port: i32 = sqlx::query_scalar("SELECT inet_client_port()").fetch_one(&mut plain).await.unwrap();
    assert_eq!(
        nodelay_by_local_port().get(&port),
        Some(&false),
        "sqlx opened this connection without TCP_NODELAY; if it sets it now (after 0.9.0), \
         dlq-sqlx's pg/nodelay.rs can go (docs/DESIGN.md)"
    );

    let store = PgStore::connect_with(&url_of(&options), PgConfig::default()).await.unwrap();
    // Three pool connections at once, the listener (a wait returns once it listens), the lock.
    let pool = store.pool();
    let held = tokio::try_join!(pool.acquire(), pool.acquire(), pool.acquire()).unwrap();
    store.wait_for_work(store.work_ticket(), Duration::from_secs(60)).await;
    let lock = store
        .singleton()
        .expect("PostgreSQL has the lock")
        .try_lock_singleton()
        .await
        .unwrap()
        .expect("the lock is free");

    let rows: Vec<(i32, String)> = sqlx::query_as(
        "SELECT client_port, query FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid() ORDER BY client_port",
    )
    .fetch_all(&mut plain)
    .await
    .unwrap();
    assert!(rows.iter().any(|(_, query)| query.starts_with("LISTEN")), "the listener is connected: {rows:?}");
    assert!(rows.iter().any(|(_, query)| query.contains("advisory_lock")), "the lock is held: {rows:?}");
    assert!(rows.len() >= 5, "three pool connections, the listener and the lock: {rows:?}");
    let sockets = nodelay_by_local_port();
    for (port, query) in &rows {
        assert_eq!(sockets.get(port), Some(&true), "the store's connection from port {port} (last ran {query:?})");
    }
    drop((held, lock));
}

/// The URL of `options`' database: `DATABASE_URL` (as the test harness connects) with the
/// database name replaced.
fn url_of(options: &PgConnectOptions) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let (path, params) = base.split_once('?').map_or((base.as_str(), None), |(path, params)| (path, Some(params)));
    let server = path.rsplit_once('/').map_or(path, |(server, _)| server);
    let database = options.get_database().expect("the test database");
    params.map_or_else(|| format!("{server}/{database}"), |params| format!("{server}/{database}?{params}"))
}

/// Whether `TCP_NODELAY` is on, for each connected TCP socket of this process by local port.
fn nodelay_by_local_port() -> BTreeMap<i32, bool> {
    let mut found = BTreeMap::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let entry = entry.unwrap();
        let Some(fd) = entry.file_name().to_str().and_then(|name| name.parse().ok()) else { continue };
        let is_socket =
            std::fs::read_link(entry.path()).is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        let Some(socket) = is_socket.then(|| duplicate(fd).ok()).flatten() else { continue };
        let socket = std::net::TcpStream::from(socket);
        if let (Ok(local), Ok(_), Ok(nodelay)) = (socket.local_addr(), socket.peer_addr(), socket.nodelay()) {
            found.insert(i32::from(local.port()), nodelay);
        }
    }
    found
}

/// A descriptor of the test's own for the socket behind `fd`.
#[allow(unsafe_code)]
fn duplicate(fd: std::os::fd::RawFd) -> std::io::Result<std::os::fd::OwnedFd> {
    // SAFETY: the borrow lasts for one `fcntl(F_DUPFD_CLOEXEC)`; the connections read are held
    // open by the test meanwhile, and a descriptor closed since the listing only fails the call.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()
}
