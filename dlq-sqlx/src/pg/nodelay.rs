//! `TCP_NODELAY` on the store's connections, which sqlx 0.9.0 opens without it.
//!
//! Without it the kernel holds a small write back while an earlier one is unacknowledged,
//! and PostgreSQL acknowledges late (delayed ACK, about 40 ms on Linux): a statement larger
//! than one TLS record, a `COPY`'s `CopyDone`. sqlx 0.9.0 gives no access to its socket, so
//! after each connection is made the store looks for it: on Linux, among this process's file
//! descriptors (`/proc/self/fd`), every TCP socket whose peer is the server's address gets
//! `TCP_NODELAY`. That is the new connection and any other connection of the process to the
//! same server (which sqlx before 0.9.0, libpq and tokio-postgres all open with it). Elsewhere
//! nothing is set. The connection's own handshake (TLS and startup) ran before the hook, so
//! its waits stay until sqlx sets the option itself.

use std::io;
use std::net::SocketAddr;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

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
    let host = options.get_host();
    if options.get_socket().is_some() || host.starts_with('/') || !cfg!(target_os = "linux") {
        return Ok(0);
    }
    // sqlx keeps the brackets of an IPv6 host (`[::1]`).
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let server: Vec<SocketAddr> = tokio::net::lookup_host((host, options.get_port())).await?.collect();
    set_on_sockets_to(&server)
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
            socket.set_nodelay(true)?;
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
