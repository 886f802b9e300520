//! [`HardenedListener`]: the HTTP server's own refusals (a request hyper could not read) with
//! a body and the console's security headers, as the console answers its own.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A listener for `axum::serve` whose connections answer the server's own refusals as the
/// console answers its refusals. hyper, which `axum::serve` runs, refuses a request it cannot
/// read before any route sees it (a request target past 64 KiB: 414; a head past about
/// 400 KiB or more than 100 header fields: 431; malformed HTTP: 400) with a bare status line,
/// no body and none of the console's headers, then closes the connection. On a connection
/// from this listener such an answer leaves with a line saying why, `Content-Type:
/// text/plain`, and the security headers of every console response ([`crate::harden`]).
///
/// It recognizes hyper's refusal by what only it writes: a `4xx` head, whole in one write,
/// with `content-length: 0` and `connection: close` and no `content-security-policy` (every
/// answer of the console has one). Serve the console, and any route beside it, wrapped in
/// [`crate::harden`]; `dlq serve` does.
///
/// ```no_run
/// # async fn demo(app: axum::Router) -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// axum::serve(dlq_web::HardenedListener::new(listener), app).await
/// # }
/// ```
#[derive(Debug)]
pub struct HardenedListener<L>(L);

impl<L> HardenedListener<L> {
    /// Wraps `listener` (a `tokio::net::TcpListener`, or any `axum::serve::Listener`).
    pub const fn new(listener: L) -> Self {
        Self(listener)
    }
}

impl<L: Listener> Listener for HardenedListener<L> {
    type Io = Hardened<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = self.0.accept().await;
        (Hardened { io, pending: Vec::new(), at: 0 }, addr)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// A connection of a [`HardenedListener`]: writes through, except a bare refusal of the
/// server, which it replaces with the console's.
#[derive(Debug)]
pub struct Hardened<T> {
    io: T,
    /// The replacement still to write, from `at`.
    pending: Vec<u8>,
    at: usize,
}

impl<T: AsyncWrite + Unpin> Hardened<T> {
    /// Writes what is left of a replacement.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.at < self.pending.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.pending[self.at..]))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.at += n;
        }
        self.pending.clear();
        self.at = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Hardened<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Hardened<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        ready!(self.drain(cx))?;
        if let Some(answer) = bare_refusal(buf).map(refusal) {
            self.pending = answer;
            // Written by the next flush if the socket is full now: the refusal is hyper's
            // last write before it flushes and closes.
            if let Poll::Ready(Err(e)) = self.drain(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The status of `written` when it is a refusal of the server itself: a whole `4xx` head
/// with no body (`content-length: 0`), closing the connection, without the console's
/// `content-security-policy`.
fn bare_refusal(written: &[u8]) -> Option<u16> {
    let head = std::str::from_utf8(written).ok()?;
    let rest = head.strip_prefix("HTTP/1.1 ").or_else(|| head.strip_prefix("HTTP/1.0 "))?;
    let status: u16 = rest.get(..3)?.parse().ok()?;
    if !(400..500).contains(&status) || !head.ends_with("\r\n\r\n") || head.len() > 1024 {
        return None;
    }
    let lower = head.to_ascii_lowercase();
    let bare = lower.contains("\r\ncontent-length: 0\r\n")
        && lower.contains("\r\nconnection: close\r\n")
        && !lower.contains("\r\ncontent-security-policy:");
    bare.then_some(status)
}

/// The console's answer for a refusal of the server with `status`.
fn refusal(status: u16) -> Vec<u8> {
    let why = match status {
        414 => "414 URI Too Long: the request's path and query are past this server's limit\n",
        431 => "431 Request Header Fields Too Large: the request's header fields are past this server's limit\n",
        400 => "400 Bad Request: the request could not be read as HTTP\n",
        _ => "the request could not be read\n",
    };
    let reason = axum::http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("Error");
    let mut head = format!("HTTP/1.1 {status} {reason}\r\n");
    for (name, value) in crate::security::HEADERS {
        head.push_str(&format!("{}: {value}\r\n", name.as_str()));
    }
    let length = why.len();
    head.push_str(&format!(
        "cache-control: no-store\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {length}\r\n\
         connection: close\r\n\r\n{why}"
    ));
    head.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bare_refusal_is_replaced() {
        let hyper = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\
                      date: Sat, 28 Nov 2026 17:56:28 GMT\r\n\r\n";
        assert_eq!(bare_refusal(hyper), Some(431));
        let ours = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-security-policy: default-src 'none'\r\n\
                     connection: close\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(bare_refusal(ours), None, "the console's own answer");
        assert_eq!(bare_refusal(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"), None);
        assert_eq!(bare_refusal(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"), None, "kept alive");
        assert_eq!(bare_refusal(b"<html>HTTP/1.1 400"), None);
        let answer = String::from_utf8(refusal(414)).unwrap();
        assert!(answer.starts_with("HTTP/1.1 414 URI Too Long\r\n") && answer.contains("x-frame-options: DENY\r\n"));
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())) && body.contains("path and query"));
    }
}
