//! `TCP_NODELAY` on the store's connections, which sqlx 0.9.0 opens without it.
//!
//! Without it the kernel holds a small write back while an earlier one is unacknowledged,
//! and PostgreSQL acknowledges late (delayed ACK, about 40 ms on Linux): a statement larger
//! than one TLS record, a `COPY`'s `CopyDone`. sqlx 0.9.0 gives no access to its socket, so
//! after each connection is made the store looks for it: on Linux, among this process's file
//! descriptors (`/proc/self/fd`), every TCP socket whose peer is the server's address gets
//! `TCP_NODELAY`. That is the new connection and any other connection of the process to the
//! same server (which sqlx before 0.9.0, libpq and tokio-postgres all open with it). Elsewhere
//! nothing is set.
//!
//! The hook runs after the connection's own handshake (TLS and startup), whose two waits of
//! about 45 ms each stay. Where one connection's first statement is what a person waits for (a
//! `dlq` verb over TLS), [`watch_tcp_nodelay`] looks while the connection is being made: a
//! thread that scans every 200 µs until dropped, so the option is on before the TLS
//! handshake writes (PostgreSQL answers the TLS request only after it has started a server
//! process for the connection: a few milliseconds at least).

use std::io;
use std::net::SocketAddr;

use sqlx::PgPool;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, Postgres};

/// Sets `TCP_NODELAY` on every TCP connection of this process to the server `options` names
/// and returns how many it found. A Unix socket (`host` a directory, or `socket`) needs none:
/// `Ok(0)`. Not on Linux: `Ok(0)`, nothing is set.
///
/// [`PgStore::connect_with`](super::PgStore::connect_with) calls it after each new
/// connection, as do the store's listener and lock connections. A pool given to
/// [`PgStore::from_pool`](super::PgStore::from_pool) gets it from [`with_tcp_nodelay`], or
/// from an `after_connect` of its own:
///
/// ```no_run
/// # async fn demo(options: sqlx::postgres::PgConnectOptions) -> Result<(), sqlx::Error> {
/// let server = options.clone();
/// let pool = sqlx::postgres::PgPoolOptions::new()
///     .after_connect(move |_conn, _meta| {
///         let server = server.clone();
///         Box::pin(async move {
///             let _ = dlq_sqlx::postgres::set_tcp_nodelay(&server).await;
///             Ok(())
///         })
///     })
///     .connect_with(options)
///     .await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// When `/proc/self/fd` cannot be read, the host does not resolve, or the option cannot be
/// set on a socket found.
pub async fn set_tcp_nodelay(options: &PgConnectOptions) -> io::Result<usize> {
    let Some(host) = tcp_host(options) else { return Ok(0) };
    let server: Vec<SocketAddr> = tokio::net::lookup_host((host, options.get_port())).await?.collect();
    set_on_sockets_to(&server)
}

/// The host `options` reaches PostgreSQL at over TCP, without the brackets sqlx keeps around
/// an IPv6 address (`[::1]`); `None` for a Unix socket (`socket`, or `host` a directory), and
/// off Linux, where nothing is set.
fn tcp_host(options: &PgConnectOptions) -> Option<&str> {
    let host = options.get_host();
    if options.get_socket().is_some() || host.starts_with('/') || !cfg!(target_os = "linux") {
        return None;
    }
    Some(host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host))
}

/// `pool` with an `after_connect` hook that calls [`set_tcp_nodelay`] for the server `options`
/// names, in place of any earlier `after_connect` (a pool with a hook of its own calls
/// [`set_tcp_nodelay`] in it). A failure is logged at `debug` and the connection used as it is.
///
/// ```no_run
/// # async fn demo(options: sqlx::postgres::PgConnectOptions) -> Result<(), Box<dyn std::error::Error>> {
/// use dlq_sqlx::postgres::{PgConfig, PgStore, with_tcp_nodelay};
///
/// let pool = with_tcp_nodelay(sqlx::postgres::PgPoolOptions::new().max_connections(20), &options)
///     .connect_with(options)
///     .await?;
/// let store = PgStore::from_pool(pool, PgConfig::default()).await?;
/// # Ok(()) }
/// ```
pub fn with_tcp_nodelay(pool: PgPoolOptions, options: &PgConnectOptions) -> PgPoolOptions {
    let server = options.clone();
    pool.after_connect(move |_conn, _meta| {
        let server = server.clone();
        Box::pin(async move {
            set(&server).await;
            Ok(())
        })
    })
}

/// Sets `TCP_NODELAY` on the connections to the server `options` names while they are being
/// made: until the returned guard is dropped, a thread looks for them every 200 µs (at most
/// for 30 s), so the option is on before the TLS handshake. Hold it around the first
/// connection of a short-lived program; a long-lived pool needs only [`with_tcp_nodelay`]
/// (it pays the handshake's waits once per connection). Not on Linux, or for a Unix socket:
/// a guard that does nothing.
///
/// ```no_run
/// # async fn demo(options: sqlx::postgres::PgConnectOptions) -> Result<(), sqlx::Error> {
/// let pool = dlq_sqlx::postgres::with_tcp_nodelay(sqlx::postgres::PgPoolOptions::new(), &options)
///     .connect_lazy_with(options.clone());
/// let watch = dlq_sqlx::postgres::watch_tcp_nodelay(&options);
/// let first = pool.acquire().await?; // the handshake runs with TCP_NODELAY
/// drop(watch);
/// # Ok(()) }
/// ```
pub fn watch_tcp_nodelay(options: &PgConnectOptions) -> NodelayWatch {
    let Some(host) = tcp_host(options).map(str::to_owned) else { return NodelayWatch { stop: None } };
    let port = options.get_port();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = std::sync::Arc::clone(&stop);
    let spawned = std::thread::Builder::new().name("dlq-nodelay".into()).spawn(move || {
        use std::net::ToSocketAddrs as _;
        let Ok(server) = (host.as_str(), port).to_socket_addrs().map(Iterator::collect::<Vec<_>>) else { return };
        let until = std::time::Instant::now() + WATCH_AT_MOST;
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) && std::time::Instant::now() < until {
            let _ = set_on_sockets_to(&server);
            std::thread::sleep(WATCH_EVERY);
        }
    });
    NodelayWatch { stop: spawned.is_ok().then_some(stop) }
}

/// How often [`watch_tcp_nodelay`] looks.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_micros(200);
/// How long [`watch_tcp_nodelay`] looks at most.
const WATCH_AT_MOST: std::time::Duration = std::time::Duration::from_secs(30);

/// The guard of [`watch_tcp_nodelay`]: the watch stops when it is dropped.
#[derive(Debug)]
#[must_use = "the watch stops when the guard is dropped"]
pub struct NodelayWatch {
    stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Drop for NodelayWatch {
    fn drop(&mut self) {
        if let Some(stop) = &self.stop {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// A connection from `pool`, as `pool.acquire()`; when the pool has none idle and room for
/// another, so that it will most likely make one, under [`watch_tcp_nodelay`]: the new
/// connection's TLS handshake then does not wait on delayed ACKs (about 90 ms, paid by the
/// park or claim that happened to need it). A connection handed back meanwhile serves the
/// call instead, and the watch ends with it.
pub(crate) async fn acquire(pool: &PgPool) -> Result<PoolConnection<Postgres>, sqlx::Error> {
    let makes_one = pool.num_idle() == 0 && pool.size() < pool.options().get_max_connections();
    let _watch = makes_one.then(|| watch_tcp_nodelay(&pool.connect_options()));
    pool.acquire().await
}

/// A connection of its own to the server `options` names, made under [`watch_tcp_nodelay`]
/// (its TLS handshake does not wait on delayed ACKs) and with `TCP_NODELAY` checked after.
pub(crate) async fn connect(options: &PgConnectOptions) -> Result<sqlx::PgConnection, sqlx::Error> {
    let watch = watch_tcp_nodelay(options);
    let conn = <sqlx::PgConnection as sqlx::Connection>::connect_with(options).await?;
    drop(watch);
    set(options).await;
    Ok(conn)
}

/// [`set_tcp_nodelay`], its failure logged.
pub(crate) async fn set(options: &PgConnectOptions) {
    match set_tcp_nodelay(options).await {
        Ok(found) => tracing::trace!(found, "TCP_NODELAY set on the connections to PostgreSQL"),
        Err(error) => tracing::debug!(%error, "TCP_NODELAY not set on the connections to PostgreSQL"),
    }
}

#[cfg(target_os = "linux")]
fn set_on_sockets_to(server: &[SocketAddr]) -> io::Result<usize> {
    use std::os::unix::ffi::OsStrExt;

    let mut found = 0;
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let Ok(entry) = entry else { continue };
        let Some(fd) = entry.file_name().to_str().and_then(|name| name.parse().ok()) else { continue };
        // A socket's link reads `socket:[inode]`; files, pipes and the like are skipped unopened.
        let Ok(target) = std::fs::read_link(entry.path()) else { continue };
        if !target.as_os_str().as_bytes().starts_with(b"socket:") {
            continue;
        }
        // Closed since the listing: nothing to do.
        let Ok(socket) = duplicate(fd) else { continue };
        // Any socket: a Unix or UDP one, a listener, has no such peer.
        let socket = std::net::TcpStream::from(socket);
        if socket.peer_addr().is_ok_and(|peer| server.contains(&peer)) {
            if !socket.nodelay()? {
                socket.set_nodelay(true)?;
            }
            found += 1;
        }
    }
    Ok(found)
}

#[cfg(not(target_os = "linux"))]
fn set_on_sockets_to(_server: &[SocketAddr]) -> io::Result<usize> {
    Ok(0)
}

/// A descriptor of our own for the open socket behind `fd`, another part of the process's.
/// Options set through it are the socket's, and the socket stays open while it is held, so
/// the checks and the `setsockopt` on it cannot reach another socket.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn duplicate(fd: std::os::fd::RawFd) -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: `fd` is only read from, by `fcntl(F_DUPFD_CLOEXEC)`, for as long as this
    // borrow lasts (the one call). If its owner closed it meanwhile, the call fails with
    // `EBADF`, or duplicates whatever took the number; the caller then only reads that
    // descriptor's peer address, and sets TCP_NODELAY only on a TCP socket connected to the
    // PostgreSQL server.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    borrowed.try_clone_to_owned()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    use super::*;

    /// Whether `stream` gets `TCP_NODELAY` within 5 s.
    fn gets_nodelay(stream: &TcpStream) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if stream.nodelay().unwrap() {
                return true;
            }
            std::thread::sleep(WATCH_EVERY);
        }
        false
    }

    #[test]
    fn the_watch_sets_it_on_a_connection_being_made_to_the_server_and_on_no_other() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let options = PgConnectOptions::new().host("127.0.0.1").port(server.local_addr().unwrap().port());
        let before = TcpStream::connect(server.local_addr().unwrap()).unwrap();
        assert!(!before.nodelay().unwrap(), "a new socket starts without it");

        let watch = watch_tcp_nodelay(&options);
        let to_server = TcpStream::connect(server.local_addr().unwrap()).unwrap();
        let to_other = TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert!(gets_nodelay(&to_server), "the connection to the server gets it while the watch runs");
        assert!(gets_nodelay(&before), "and so does the earlier one");
        assert!(!to_other.nodelay().unwrap(), "a connection to another address keeps its own setting");
        drop(watch);
    }

    /// The client end of the connection whose server end is `accepted`, among this process's
    /// descriptors.
    fn client_end(accepted: &TcpStream) -> TcpStream {
        let client = accepted.peer_addr().unwrap();
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .filter_map(|fd| duplicate(fd).ok().map(TcpStream::from))
            .find(|socket| socket.local_addr().is_ok_and(|local| local == client))
            .expect("the client end is a descriptor of this process")
    }

    /// Makes a connection with `make` to a server that never answers, and asserts that its
    /// client end gets the option while it is being made, before the server answered anything.
    async fn gets_it_before_the_handshake<F: Future<Output = ()> + Send + 'static>(
        make: impl FnOnce(PgConnectOptions) -> F,
    ) {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let options = PgConnectOptions::new()
            .host("127.0.0.1")
            .port(server.local_addr().unwrap().port())
            .ssl_mode(sqlx::postgres::PgSslMode::Disable);
        let making = tokio::spawn(make(options));
        let accepted = tokio::task::spawn_blocking(move || server.accept().unwrap().0).await.unwrap();
        let client = client_end(&accepted);
        assert!(gets_nodelay(&client), "the connection being made gets TCP_NODELAY");
        assert!(!making.is_finished(), "while the server has not answered");
        making.abort();
    }

    /// A pool with no idle connection makes one for the caller.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_the_pool_makes_for_a_caller_gets_it_before_the_handshake() {
        gets_it_before_the_handshake(|options| async move {
            let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect_lazy_with(options);
            let _ = acquire(&pool).await;
        })
        .await;
    }

    /// A connection of the store's own (listener, lock, session).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_of_its_own_gets_it_before_the_handshake() {
        gets_it_before_the_handshake(|options| async move {
            let _ = connect(&options).await;
        })
        .await;
    }

    #[test]
    fn a_unix_socket_needs_no_watch() {
        let watch = watch_tcp_nodelay(&PgConnectOptions::new().socket("/run/postgresql"));
        assert!(watch.stop.is_none());
    }
}
