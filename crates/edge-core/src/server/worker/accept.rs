//! Taking new connections: the accept loop on the worker's own sockets (or the
//! channel from an accept thread), and admitting each connection under
//! `worker_connections` and `limit_conn`.
//!
//! At `worker_connections` open connections a new one makes room by closing the
//! longest-idle parked keep-alive connections (as nginx reuses its keep-alive
//! connections); when none is idle it is accepted and closed at once, counted as
//! `refused` (a prompt close, not a hang in the kernel's backlog).
//!
//! How it fits: the worker thread ([`super`]) runs [`accept_loop`] or [`channel_loop`];
//! an admitted connection goes to [`super::serve::start_session`].

use super::serve::start_session;
use super::service::Worker;
use crate::http::session::Service;
use crate::limit::Held;
use crate::state::Shared;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;

/// Most idle connections closed at once when a worker is full (nginx closes up to 32;
/// a small `worker_connections` closes fewer, a sixteenth of it, at least one).
const RECLAIM_BATCH: usize = 32;

impl Worker {
    fn full(&self) -> bool {
        self.svc.stats().active.load(Relaxed) as usize >= self.max_connections
    }

    /// At `worker_connections`: close the longest-idle parked keep-alive connections to
    /// make room (nginx does the same with its reusable connections). False when none
    /// was idle: the worker is full of busy connections.
    fn make_room(&self) -> bool {
        let batch = (self.max_connections / 16).clamp(1, RECLAIM_BATCH);
        let n = self.parking.close_oldest(batch);
        if n == 0 {
            return false;
        }
        self.svc.stats().reclaimed.fetch_add(n as u64, Relaxed);
        self.connections_closed(n);
        true
    }

    /// Takes a new connection: served when there is room (made by closing idle ones
    /// if need be), else closed at once and counted (`refused` in /status): a client
    /// beyond `worker_connections` gets a prompt close, not a hang in the backlog.
    pub(super) fn admit(
        self: &Rc<Self>,
        stream: std::net::TcpStream,
        peer: SocketAddr,
        listen: usize,
    ) {
        // The client's `limit_conn` counts first: a connection over its limit must not
        // make room by closing other clients' idle connections. On a PROXY listener the
        // client is known only once its header is read (`proxied_session`).
        let cfg = self.config();
        let proxied = cfg.listeners.get(listen).is_some_and(|l| l.proxy_protocol);
        let held = if proxied {
            Held::default()
        } else {
            match self.accept_limits(&cfg, peer, listen) {
                Some(held) => held,
                None => {
                    drop(stream);
                    return;
                }
            }
        };
        if self.full() && !self.make_room() {
            self.svc.stats().refused.fetch_add(1, Relaxed);
            let now = std::time::Instant::now();
            let last = self.refused_logged.get();
            if last.is_none_or(|t| now.duration_since(t) >= REFUSED_LOG_INTERVAL) {
                self.refused_logged.set(Some(now));
                tracing::warn!(
                    "worker {}: {} worker_connections are not enough, refusing new connections",
                    self.id,
                    self.max_connections
                );
            }
            drop(stream);
            return;
        }
        start_session(self, &cfg, stream, peer, listen, held);
    }

    /// The `limit_conn` counts a new connection of `client` on listener `listen` takes
    /// before its first request ([`crate::limit::accept_rules`]); None: over a limit,
    /// close it now (counted in the zone; no response: there is no request yet, and
    /// on TLS no session). A connection from a proxy `real_ip` trusts to name its
    /// clients in a request field is not counted here: its requests are, each for
    /// the client it names.
    pub(super) fn accept_limits(
        &self,
        cfg: &Shared,
        client: SocketAddr,
        listen: usize,
    ) -> Option<Held> {
        let rules = match cfg.accept_limits.get(listen) {
            Some(r) if !r.is_empty() => r,
            _ => return Some(Held::default()),
        };
        let by_field = cfg.real_ip.as_ref().is_some_and(|r| {
            matches!(r.source, crate::http::client_addr::RealIpSource::Header(_))
                && r.trusts(client.ip())
        });
        if by_field {
            return Some(Held::default());
        }
        let proto = cfg.listeners.get(listen);
        let facts = crate::vars::Client {
            peer: client,
            tls: proto.is_some_and(|l| l.tls.is_some()),
            server_port: proto.map_or(0, |l| l.addr.port()),
        };
        let mut buf = self.svc.take_buf(64);
        let held = crate::limit::admit(rules, facts, &mut buf, self.id);
        self.svc.give_buf(buf);
        match held {
            Ok(h) => Some(h),
            Err(why) => {
                tracing::debug!("client {client}: limit_conn at accept: {why:?}, closing");
                None
            }
        }
    }
}

/// Minimum time between two "not enough worker_connections" log lines of a worker.
const REFUSED_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Accepts on one of this worker's sockets. Without `multi_accept`, one connection per
/// wake-up: the worker lets its other ready tasks run before accepting again, as nginx
/// does with `multi_accept off`. With it, every connection already waiting is taken
/// first.
///
/// The listener is polled through the reactor, but connections are accepted with
/// `accept4` directly: they are not registered with the reactor until they have to wait
/// (`net::Sock`). The reactor is edge-triggered, so the listener's readiness must be
/// cleared only once its queue is empty. Finding that out with one more `accept4`
/// that fails with EAGAIN is expensive: Linux builds a socket inode, dentry and file
/// before it looks at the queue, and tears them down again (1.5-2 µs here, most of
/// the gap to nginx on short connections). A zero-timeout `poll(2)` asks the same
/// question for a fraction of that.
pub(super) async fn accept_loop(
    w: Rc<Worker>,
    listener: tokio::io::unix::AsyncFd<std::net::TcpListener>,
    listen: usize,
    multi: bool,
) {
    use crate::net::sys::{accept_nonblocking, has_pending};
    let mut shutdown = w.shutdown.clone();
    loop {
        if w.draining() {
            return;
        }
        let mut ready = tokio::select! {
            r = listener.readable() => match r {
                Ok(g) => g,
                Err(e) => {
                    tracing::error!("worker {}: listener failed: {e}", w.id);
                    return;
                }
            },
            _ = shutdown.changed() => return,
        };
        // A wake-up usually means a connection is there; a stale one (or one another
        // worker took first on a shared socket) ends in EAGAIN, which clears the
        // readiness.
        let mut backoff = false;
        loop {
            match ready.try_io(|l| accept_nonblocking(l.get_ref())) {
                Ok(Ok((stream, peer))) => {
                    w.admit(stream, peer, listen);
                    if multi && has_pending(ready.get_inner()) {
                        continue;
                    }
                }
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => {
                    // EMFILE/ENFILE/ENOBUFS: back off instead of spinning (nginx
                    // disables accept events for a while in the same case).
                    tracing::error!("worker {}: accept() failed: {e}", w.id);
                    backoff = true;
                }
                Err(_would_block) => {}
            }
            break;
        }
        if backoff {
            drop(ready);
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        } else if has_pending(ready.get_inner()) {
            // More are waiting: let the worker's other ready tasks run first. Not
            // `yield_now`, which would also make the runtime poll epoll: one more
            // syscall per connection.
            drop(ready);
            requeue().await;
        } else {
            // Empty: the next connection's edge wakes us (tokio clears only the
            // readiness this guard saw, not a newer event's).
            ready.clear_ready();
        }
    }
}

/// Puts the task at the back of the worker's run queue once (it runs again after the
/// tasks already ready, without an epoll poll in between).
async fn requeue() {
    let mut again = false;
    std::future::poll_fn(|cx| {
        if again {
            return std::task::Poll::Ready(());
        }
        again = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await
}

pub(super) async fn channel_loop(
    w: Rc<Worker>,
    mut rx: tokio::sync::mpsc::Receiver<crate::net::Accepted>,
) {
    let mut shutdown = w.shutdown.clone();
    loop {
        if w.draining() {
            return;
        }
        let s = tokio::select! {
            s = rx.recv() => s,
            _ = shutdown.changed() => return,
        };
        // Accepted non-blocking, with its peer (accept4): no syscall here.
        let Some(a) = s else { return };
        let crate::net::Accepted {
            stream,
            peer,
            listen,
            turn,
        } = a;
        w.admit(stream, peer, listen);
        // The accept thread takes its next connection once this worker has let its
        // other ready tasks run: a worker busy with them is not accepting, and the
        // kernel gives the next connection to an acceptor whose worker is free.
        requeue().await;
        drop(turn);
    }
}
