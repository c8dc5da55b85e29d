//! The per-worker keep-alive pool: idle upstream connections by (group, server), at most
//! `keepalive` per group, each dropped after the group's `keepalive_timeout` idle.
//!
//! A pooled connection may have been closed by the origin while idle. When the caller
//! cannot replay its request (a streamed body), `take` peeks at the connection without
//! blocking: readable data or EOF on an idle HTTP connection means it is unusable, so it
//! is dropped and the next one (or a new connection) is used. Other callers skip the
//! probe and retry on a fresh connection if the reused one fails before any response.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A connection to an upstream server: plain, or TLS for `https://` servers.
pub enum UpstreamIo {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl UpstreamIo {
    /// The TCP socket underneath.
    pub fn socket(&self) -> &TcpStream {
        match self {
            UpstreamIo::Tcp(s) => s,
            UpstreamIo::Tls(t) => t.get_ref().0,
        }
    }

    /// Writes all of `buf` (and, over TLS, flushes the records); each write must make
    /// progress within `limit`.
    pub async fn write_all_timed(&mut self, buf: &[u8], limit: Duration) -> io::Result<()> {
        match self {
            UpstreamIo::Tcp(s) => crate::http::conn::write_all_timed(s, buf, limit).await,
            UpstreamIo::Tls(t) => {
                let work = async {
                    t.write_all(buf).await?;
                    t.flush().await
                };
                // TLS: the whole write under one limit per call (a head or a body
                // piece of at most 64 KiB).
                match tokio::time::timeout(limit, work).await {
                    Ok(r) => r,
                    Err(_) => Err(crate::http::conn::timed_out("upstream send")),
                }
            }
        }
    }
}

crate::net::delegate_async_io!(UpstreamIo { Tcp, Tls });

pub struct PooledConn {
    pub stream: UpstreamIo,
    pub server: usize,
    /// The TLS server name it was opened with, hashed (0: the server's own name): a
    /// connection is reused only for requests that want the same name.
    pub sni: u64,
    /// Requests already sent on this connection (0: new).
    pub uses: u64,
}

/// Idle connections with the time each was returned, oldest first.
type IdleList = Vec<(PooledConn, Instant)>;

#[derive(Default)]
pub struct UpstreamPool {
    /// Keyed by (group id, server index, server name tag).
    idle: RefCell<HashMap<(usize, usize, u64), IdleList>>,
}

impl UpstreamPool {
    /// An idle, still-open connection to `server` of group `group_id`, if any.
    pub fn take(
        &self,
        group_id: usize,
        server: usize,
        sni: u64,
        max_idle: std::time::Duration,
        probe: bool,
    ) -> Option<PooledConn> {
        let mut idle = self.idle.borrow_mut();
        let list = idle.get_mut(&(group_id, server, sni))?;
        while let Some((conn, since)) = list.pop() {
            if since.elapsed() >= max_idle {
                continue;
            }
            if !probe {
                return Some(conn);
            }
            // TLS too: bytes on an idle connection (a close_notify) make it unusable.
            let mut byte = [0u8; 1];
            match conn.stream.socket().try_read(&mut byte) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(conn),
                _ => continue, // EOF, stray bytes or error: unusable
            }
        }
        None
    }

    /// Returns a connection whose response was fully read, keeping at most `max` idle.
    pub fn put(&self, group_id: usize, conn: PooledConn, max: usize) {
        if max == 0 {
            return;
        }
        let mut idle = self.idle.borrow_mut();
        let list = idle.entry((group_id, conn.server, conn.sni)).or_default();
        if list.len() >= max {
            list.remove(0); // drop the oldest
        }
        list.push((conn, Instant::now()));
    }

    /// Idle connections held, for /status.
    pub fn idle_count(&self) -> usize {
        self.idle.borrow().values().map(Vec::len).sum()
    }
}
