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
use std::time::Instant;
use tokio::net::TcpStream;

pub struct PooledConn {
    pub stream: TcpStream,
    pub server: usize,
    /// Requests already sent on this connection (0: new).
    pub uses: u64,
}

/// Idle connections with the time each was returned, oldest first.
type IdleList = Vec<(PooledConn, Instant)>;

#[derive(Default)]
pub struct UpstreamPool {
    /// Keyed by (group id, server index).
    idle: RefCell<HashMap<(usize, usize), IdleList>>,
}

impl UpstreamPool {
    /// An idle, still-open connection to `server` of group `group_id`, if any.
    pub fn take(
        &self,
        group_id: usize,
        server: usize,
        max_idle: std::time::Duration,
        probe: bool,
    ) -> Option<PooledConn> {
        let mut idle = self.idle.borrow_mut();
        let list = idle.get_mut(&(group_id, server))?;
        while let Some((conn, since)) = list.pop() {
            if since.elapsed() >= max_idle {
                continue;
            }
            if !probe {
                return Some(conn);
            }
            let mut byte = [0u8; 1];
            match conn.stream.try_read(&mut byte) {
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
        let list = idle.entry((group_id, conn.server)).or_default();
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
