//! A worker: one OS thread, pinned to a CPU, running a tokio `current_thread` runtime
//! (Pingora's "NoSteal" model). Its connections never leave it, so per-connection and
//! per-worker state (the upstream pool, the access-log buffer) needs no locks.
//!
//! At `worker_connections` open connections a new one makes room by closing the
//! longest-idle parked keep-alive connections (as nginx reuses its keep-alive
//! connections); when none is idle it is accepted and closed at once, counted as
//! `refused` (a prompt close, not a hang in the kernel's backlog).

use crate::handlers::services::Services;
use crate::http::idle::IdleTimers;
use crate::http::session::{self, Service, SessionParams};
use crate::http::{Conn, ConnInfo, Exchange, ExchangeError};
use crate::limit::Held;
use crate::log::access::LogBuffers;
use crate::metrics::{Metrics, WorkerStats};
use crate::net::{Sock, WorkerAcceptor};
use crate::state::{Current, Shared};
use crate::upstream::UpstreamPool;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::{watch, Notify};

/// Everything a worker's tasks share.
pub struct Worker {
    pub id: usize,
    pub shared: Arc<Current>,
    /// What the handlers may use (counters, upstream pool, file I/O backend).
    pub svc: Rc<Services>,
    /// Access-log lines not yet written, per file.
    pub access_log: Rc<RefCell<LogBuffers>>,
    pub shutdown: watch::Receiver<bool>,
    /// The worker-local view of `shutdown`, and the idle connections' timers.
    pub idle: Rc<IdleTimers>,
    /// The config snapshot sessions get: refreshed when `shared`'s generation moves,
    /// so taking it per request is one load of a line only SIGHUP writes and touches
    /// no reference count other workers share (the `Rc` is this worker's, the `Arc`
    /// inside it is cloned once per reload).
    #[allow(clippy::redundant_allocation)]
    snapshot: RefCell<Rc<Arc<Shared>>>,
    pub max_connections: usize,
    conn_closed: Notify,
    /// Heads of answered requests whose allocations the next requests reuse (per
    /// worker, not per connection: an idle connection holds none).
    spare_heads: RefCell<Vec<edge_http::RequestHead>>,
    /// Read buffers of connections gone idle, for the next connection that reads.
    spare_rbufs: RefCell<Vec<bytes::BytesMut>>,
    /// Idle keep-alive connections kept without a task.
    parking: super::parking::Parking,
    /// When "worker_connections are not enough" was last logged.
    refused_logged: std::cell::Cell<Option<std::time::Instant>>,
}

/// Most recycled request heads a worker keeps, and the largest it keeps.
const SPARE_HEADS: usize = 64;
const SPARE_HEAD_BYTES: usize = 8 * 1024;

/// The session loop's view of a worker: the config snapshot, the counters, the
/// shutdown signal, the router and the access log.
impl Service for Worker {
    type Config = Rc<Arc<Shared>>;

    fn config(&self) -> Rc<Arc<Shared>> {
        // One Acquire load per request; the `ArcSwap` only after a reload
        // (`Current::generation` explains the ordering).
        let mut snap = self.snapshot.borrow_mut();
        if snap.generation != self.shared.generation() {
            *snap = Rc::new(self.shared.load_full());
        }
        snap.clone()
    }

    fn params(cfg: &Rc<Arc<Shared>>) -> SessionParams<'_> {
        SessionParams {
            limits: &cfg.limits,
            timeouts: &cfg.timeouts,
            keepalive_requests: cfg.keepalive_requests,
            real_ip: cfg.real_ip.as_ref(),
        }
    }

    fn stats(&self) -> &WorkerStats {
        self.svc.stats()
    }

    fn idle(&self) -> &Rc<IdleTimers> {
        &self.idle
    }

    async fn call(
        &self,
        cfg: &Rc<Arc<Shared>>,
        conn: &mut Conn,
        ex: &mut Exchange,
    ) -> Result<(), ExchangeError> {
        crate::handlers::dispatch(&self.svc, conn, ex, cfg).await
    }

    fn spare_head(&self) -> Option<edge_http::RequestHead> {
        self.spare_heads.borrow_mut().pop()
    }

    fn recycle_head(&self, head: edge_http::RequestHead) {
        let mut spare = self.spare_heads.borrow_mut();
        if spare.len() < SPARE_HEADS && head.headers.capacity_bytes() <= SPARE_HEAD_BYTES {
            spare.push(head);
        }
    }

    fn take_rbuf(&self) -> bytes::BytesMut {
        let mut b = self.spare_rbufs.borrow_mut().pop().unwrap_or_default();
        b.reserve(crate::http::conn::READ_BUF);
        b
    }

    fn recycle_rbuf(&self, buf: bytes::BytesMut) {
        let mut spare = self.spare_rbufs.borrow_mut();
        if spare.len() < SPARE_HEADS
            && buf.is_empty()
            && buf.capacity() <= 4 * crate::http::conn::READ_BUF
        {
            spare.push(buf);
        }
    }

    fn can_park(&self) -> bool {
        true
    }

    fn log(&self, cfg: &Rc<Arc<Shared>>, conn: &Conn, ex: &Exchange) {
        let slot = ex.routed.log.unwrap_or(cfg.logs.top.slot);
        let Some(log) = cfg.logs.get(slot) else {
            return; // off: no clock read, no line built
        };
        let ctx = crate::handlers::context::vars(
            crate::handlers::context::client_of(conn, ex, cfg),
            ex,
            cfg,
        );
        let body_read = ex.body.is_none();
        let facts = crate::vars::LogFacts {
            status: ex.status,
            cache_status: ex.cache_status,
            body_bytes_sent: ex.body_bytes_sent,
            bytes_sent: ex.header_bytes + ex.body_bytes_sent,
            request_length: ex.head_length
                + match ex.req.body {
                    edge_http::BodyKind::Length(n) if body_read => n,
                    _ => 0,
                },
            request_time: ex.started.elapsed(),
            upstream_response_time: ex.upstream_started.map(|t| t.elapsed()),
            ..Default::default()
        };
        self.access_log.borrow_mut().log(log, &ctx, facts);
    }
}

/// What a worker thread is started with.
pub struct WorkerSpec {
    pub id: usize,
    pub cpu: Option<usize>,
    pub acceptor: WorkerAcceptor,
    pub shared: Arc<Current>,
    pub metrics: Arc<Metrics>,
    pub shutdown: watch::Receiver<bool>,
    /// Set when the stop's time is up: the worker stops waiting for its connections and
    /// ends (its runtime drops them, closing their sockets).
    pub abort: watch::Receiver<bool>,
    pub max_connections: usize,
    /// `multi_accept`: take every waiting connection on a wake-up.
    pub multi_accept: bool,
    /// Each worker builds its own file I/O backend from this, on its own thread.
    pub aio: crate::aio::AioSetup,
    /// The compression pool (started on first use), shared by every worker.
    pub compress: crate::compress::PoolSetup,
}

/// Starts the worker thread.
pub fn spawn(spec: WorkerSpec) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("worker-{}", spec.id))
        .spawn(move || {
            if let Some(cpu) = spec.cpu {
                if let Err(e) = crate::affinity::pin_current_thread(cpu) {
                    tracing::warn!(
                        "worker {}: sched_setaffinity() to CPU {cpu} failed: {e}",
                        spec.id
                    );
                }
            }
            let Some(rt) = crate::rt::thread_runtime(&format!("worker {}", spec.id)) else {
                return;
            };
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, run(spec));
        })
}

async fn run(spec: WorkerSpec) {
    let file_io = crate::aio::FileBackend::for_worker(&spec.aio);
    if let Some(slot) = spec.metrics.aio.get(spec.id) {
        let _ = slot.set((file_io.mode().as_str(), file_io.stats().clone()));
    }
    let settings = spec.shared.load().local;
    let local = settings.build(spec.metrics.workers.len());
    let worker = Rc::new(Worker {
        id: spec.id,
        shared: spec.shared.clone(),
        svc: Rc::new(Services {
            id: spec.id,
            metrics: spec.metrics,
            pool: UpstreamPool::default(),
            file_io,
            local: RefCell::new(local),
            local_settings: std::cell::Cell::new(settings),
            scratch: RefCell::new(Vec::new()),
            compress: crate::compress::Compressor::new(spec.compress.clone()),
            maps: RefCell::new(Default::default()),
        }),
        access_log: Rc::new(RefCell::new(LogBuffers::default())),
        snapshot: RefCell::new(Rc::new(spec.shared.load_full())),
        shutdown: spec.shutdown,
        idle: Rc::new(IdleTimers::default()),
        max_connections: spec.max_connections,
        conn_closed: Notify::new(),
        spare_heads: RefCell::new(Vec::new()),
        spare_rbufs: RefCell::new(Vec::new()),
        parking: super::parking::Parking::default(),
        refused_logged: std::cell::Cell::new(None),
    });
    tokio::task::spawn_local(crate::log::access::flusher(worker.access_log.clone()));
    tokio::task::spawn_local(local_ticker(worker.clone()));
    tokio::task::spawn_local(watch_shutdown(worker.clone()));
    tokio::task::spawn_local(parker(worker.clone()));
    match spec.acceptor {
        WorkerAcceptor::Sockets(socks) => {
            let mut tasks = Vec::new();
            for s in socks {
                let index = match s.local_addr() {
                    Ok(a) => worker.shared.load().listen_index(a),
                    Err(_) => 0,
                };
                match crate::net::sys::reactor_listener(s) {
                    Ok(l) => tasks.push(tokio::task::spawn_local(accept_loop(
                        worker.clone(),
                        l,
                        index,
                        spec.multi_accept,
                    ))),
                    Err(e) => {
                        tracing::error!("worker {}: cannot register listener: {e}", worker.id)
                    }
                }
            }
            for t in tasks {
                let _ = t.await;
            }
        }
        WorkerAcceptor::Channel(rx) => channel_loop(worker.clone(), rx).await,
    }
    // Not accepting any more: let open connections finish until the main thread says
    // the stop's time is up (`abort`), then flush the log. The connections' tasks still
    // running are dropped with the runtime when this returns: their sockets close.
    let mut abort = spec.abort;
    loop {
        // Registered before the count is read, so a close in between is not missed.
        let closed = worker.conn_closed.notified();
        tokio::pin!(closed);
        closed.as_mut().enable();
        if worker.svc.stats().active.load(Relaxed) == 0 {
            break;
        }
        tokio::select! {
            _ = closed => {}
            _ = abort.wait_for(|a| *a) => break,
        }
    }
    worker.access_log.borrow_mut().flush(true);
}

/// Relays the process-wide shutdown signal to the worker's own [`Drain`].
async fn watch_shutdown(w: Rc<Worker>) {
    let mut shutdown = w.shutdown.clone();
    while !*shutdown.borrow_and_update() {
        if shutdown.changed().await.is_err() {
            break;
        }
    }
    w.idle.start_draining();
    // Parked connections that send a request within the linger are resumed and answered
    // (with `Connection: close`); the rest are closed then.
    tokio::time::sleep(session::DRAIN_LINGER).await;
    let closed = w.parking.close_all();
    w.connections_closed(closed);
}

/// Resumes parked connections as they become readable.
async fn parker(w: Rc<Worker>) {
    loop {
        for p in w.parking.readable().await {
            run_session(&w, session::Start::Resume(p));
        }
    }
}

/// The worker's clock: every [`crate::http::idle::TICK`] the idle timers advance; once a
/// second the open-file cache's clock, reloads of `[memory_cache]`/`open_file_cache`,
/// the counters and the top objects' windows. Runs until the worker's runtime ends (draining connections still
/// need their timeouts).
async fn local_ticker(w: Rc<Worker>) {
    use crate::http::idle::TICK;
    let mut every = tokio::time::interval(TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let per_second = (std::time::Duration::from_secs(1).as_millis() / TICK.as_millis()) as u64;
    let mut n = 0u64;
    loop {
        every.tick().await;
        w.idle.tick();
        n += 1;
        if n.is_multiple_of(per_second) {
            w.svc.tick(&w.shared.load());
            let expired = w.parking.expire(std::time::Instant::now());
            w.connections_closed(expired);
            w.svc.stats().parked.store(w.parking.len() as u64, Relaxed);
            crate::metrics::top::tick(&w.svc.stats().top);
        }
    }
}

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
    fn admit(self: &Rc<Self>, stream: std::net::TcpStream, peer: SocketAddr, listen: usize) {
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
    fn accept_limits(&self, cfg: &Shared, client: SocketAddr, listen: usize) -> Option<Held> {
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
async fn accept_loop(
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

async fn channel_loop(w: Rc<Worker>, mut rx: tokio::sync::mpsc::Receiver<crate::net::Accepted>) {
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

/// Serves an accepted connection on listener `listen`, under `cfg` (the snapshot
/// [`Worker::admit`] took); `held`: the `limit_conn` counts it took at accept.
fn start_session(
    w: &Rc<Worker>,
    cfg: &Shared,
    stream: std::net::TcpStream,
    peer: std::net::SocketAddr,
    listen: usize,
    held: Held,
) {
    // TCP_NODELAY is set by the session on the first kept-alive exchange.
    let stats = w.svc.stats();
    stats.accepted.fetch_add(1, Relaxed);
    stats.active.fetch_add(1, Relaxed);
    let (proto, deferred, proxy_protocol) = match cfg.listeners.get(listen) {
        Some(p) if p.tls.is_some() || p.http2 => (Some(p.clone()), p.deferred, p.proxy_protocol),
        Some(p) => (None, p.deferred, p.proxy_protocol),
        None => (None, false, false),
    };
    if proxy_protocol {
        // Its header first, in a task of its own (the fast path below is untouched).
        match tokio::net::TcpStream::from_std(stream) {
            Ok(stream) => {
                let info = ConnInfo {
                    listen: listen as u16,
                    tls: proto.as_ref().is_some_and(|p| p.tls.is_some()),
                    sni_cert: None,
                };
                let session = proxied_session(w.clone(), stream, peer, proto, info);
                tokio::task::spawn_local(Box::pin(session));
            }
            Err(e) => {
                tracing::error!("worker {}: cannot register connection: {e}", w.id);
                w.connections_closed(1);
            }
        }
        return;
    }
    match proto {
        // Plain HTTP/1.1. From a deferred listener the request is in already: it is
        // served without registering the socket with the reactor until it has to wait
        // (`net::Sock`). Otherwise it usually is not there yet, and a first read would
        // only fail with EAGAIN: registered at once.
        None => {
            let mut sock = Sock::raw(stream);
            if !deferred {
                if let Err(e) = sock.register() {
                    tracing::error!("worker {}: cannot register connection: {e}", w.id);
                    w.connections_closed(1);
                    return;
                }
            }
            let info = ConnInfo {
                listen: listen as u16,
                ..ConnInfo::default()
            };
            if held.is_empty() {
                run_session(w, session::Start::New(sock, peer, info))
            } else {
                let mut conn = crate::http::Conn::new(sock, peer, info);
                conn.held = held;
                run_session(w, session::Start::Conn(conn))
            }
        }
        Some(p) => match tokio::net::TcpStream::from_std(stream) {
            Ok(stream) => {
                let info = ConnInfo {
                    listen: listen as u16,
                    tls: p.tls.is_some(),
                    sni_cert: None,
                };
                tokio::task::spawn_local(Box::pin(secure_session(
                    w.clone(),
                    stream,
                    peer,
                    peer,
                    p,
                    info,
                    held,
                )));
            }
            Err(e) => {
                tracing::error!("worker {}: cannot register connection: {e}", w.id);
                w.connections_closed(1);
            }
        },
    }
}

/// A connection of a `proxy_protocol` listener: its PROXY header, read under
/// `client_header_timeout` and bounded by `client_max_header_size`, then TLS, HTTP/2 or
/// HTTP/1.1 as on any listener, with the header's source as the connection's client
/// address ([`crate::http::client_addr`]). A connection without a valid header is closed
/// without a response, counted (`proxy_protocol_errors`) and logged at debug.
async fn proxied_session(
    w: Rc<Worker>,
    mut stream: tokio::net::TcpStream,
    peer: SocketAddr,
    proto: Option<crate::tls::ListenerProto>,
    info: ConnInfo,
) {
    let (timeout, max) = {
        let cfg = w.config();
        (cfg.timeouts.client_header, cfg.limits.max_header_bytes)
    };
    let read = crate::net::proxy_protocol::read_header(&mut stream, max);
    let err = match tokio::time::timeout(timeout, read).await {
        Ok(Ok(h)) => {
            let client = match h.addrs {
                Some(a) => {
                    let cfg = w.config();
                    crate::http::client_addr::RealIp::proxied(cfg.real_ip.as_ref(), peer, a.src)
                }
                // UNKNOWN, LOCAL (a health check), AF_UNIX: the connection's own.
                None => peer,
            };
            let held = {
                let cfg = w.config();
                w.accept_limits(&cfg, client, info.listen as usize)
            };
            let Some(held) = held else {
                drop(stream);
                w.connections_closed(1);
                return;
            };
            match proto {
                Some(p) => secure_session(w, stream, peer, client, p, info, held).await,
                None => {
                    let mut conn = crate::http::Conn::new(Sock::registered(stream), peer, info);
                    conn.client = client;
                    conn.held = held;
                    session_loop(w, session::Start::Conn(conn)).await;
                }
            }
            return;
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "PROXY protocol header timed out".to_string(),
    };
    w.svc.stats().proxy_protocol_errors.fetch_add(1, Relaxed);
    tracing::debug!("client {peer}: {err}, closing");
    drop(stream);
    w.connections_closed(1);
}

/// A connection of a TLS or HTTP/2 listener: the handshake, then HTTP/2 (ALPN `h2`, or
/// the h2c preface on a plain listener) or HTTP/1.1. HTTP/1.1 connections are parked
/// when idle like plain ones (TLS ones when the session holds nothing unread); HTTP/2
/// connections keep their task.
///
/// `client` is the connection's client address (`peer`, or a PROXY header's source);
/// `held`, the `limit_conn` counts it took when accepted.
async fn secure_session(
    w: Rc<Worker>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    client: SocketAddr,
    proto: crate::tls::ListenerProto,
    mut info: ConnInfo,
    held: Held,
) {
    let timeout = w.config().timeouts.client_header;
    let stats = w.svc.stats();
    match proto.tls {
        Some(cfg) => {
            use crate::net::ktls::{self, Offload, TlsIo};
            // A handshake that may end in kTLS is read record by record.
            let io = TlsIo::new(stream, proto.ktls && ktls::worth_trying());
            let accept = tokio_rustls::TlsAcceptor::from(cfg).accept(io);
            match tokio::time::timeout(timeout, accept).await {
                Ok(Ok(tls)) => {
                    let sc = tls.get_ref().1;
                    let resumed = sc.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                    stats.tls.handshake_done(resumed);
                    let h2 = sc.alpn_protocol() == Some(crate::tls::ALPN_H2);
                    info.sni_cert = match (sc.server_name(), &proto.sni) {
                        (Some(name), Some(sni)) => sni.chosen_index(name),
                        _ => None,
                    };
                    let mut tls = Box::new(tls);
                    if proto.ktls {
                        match ktls::offload(tls) {
                            Offload::Kernel { tcp, plaintext } => {
                                stats.tls.ktls[0].fetch_add(1, Relaxed);
                                let sock = Sock::ktls(tcp);
                                if h2 {
                                    let _ = sock.set_nodelay(true);
                                    let io = ktls::Prefixed {
                                        prefix: plaintext,
                                        sock,
                                    };
                                    crate::http::h2::serve(w.clone(), io, peer, client, info, held)
                                        .await;
                                    w.connections_closed(1);
                                } else {
                                    // A plain socket to the session from here on
                                    // (sendfile included), parked like one.
                                    let mut conn = crate::http::Conn::new(sock, peer, info);
                                    conn.client = client;
                                    conn.held = held;
                                    conn.rbuf = plaintext;
                                    session_loop(w, session::Start::Conn(conn)).await;
                                }
                                return;
                            }
                            Offload::User(t) => {
                                stats.tls.ktls[1].fetch_add(1, Relaxed);
                                tls = t;
                            }
                            Offload::Failed(e) => {
                                stats.tls.ktls[2].fetch_add(1, Relaxed);
                                tracing::debug!("client {peer}: {e}");
                                w.connections_closed(1);
                                return;
                            }
                        }
                    }
                    if h2 {
                        let _ = tls.get_ref().0.tcp().set_nodelay(true);
                        crate::http::h2::serve(w.clone(), tls, peer, client, info, held).await;
                    } else {
                        // HTTP/1.1: the ordinary session, parked like a plain
                        // connection when idle; it counts the close itself.
                        let io = crate::http::conn::ClientIo::Tls(tls);
                        let mut conn = crate::http::Conn::over(io, peer, info);
                        conn.client = client;
                        conn.held = held;
                        session_loop(w, session::Start::Conn(conn)).await;
                        return;
                    }
                }
                Ok(Err(e)) => {
                    let kind = crate::tls::handshake_error_kind(&e);
                    stats.tls.handshake_errors[kind].fetch_add(1, Relaxed);
                    tracing::debug!("client {peer}: TLS handshake: {e}");
                }
                Err(_) => {
                    stats.tls.handshake_errors[0].fetch_add(1, Relaxed);
                }
            }
        }
        None => match h2c_preface(&stream, timeout).await {
            Some(true) => {
                let _ = stream.set_nodelay(true);
                crate::http::h2::serve(w.clone(), stream, peer, client, info, held).await;
            }
            Some(false) => {
                // HTTP/1.1 on a listener that also takes h2c: the ordinary session.
                let mut conn = crate::http::Conn::new(Sock::registered(stream), peer, info);
                conn.client = client;
                conn.held = held;
                run_session(&w, session::Start::Conn(conn));
                return;
            }
            None => {}
        },
    }
    w.connections_closed(1);
}

/// The client connection preface of HTTP/2 (RFC 9113 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether a plain connection opens with the HTTP/2 preface (h2c with prior
/// knowledge); None if it closes or sends nothing within `timeout`.
async fn h2c_preface(stream: &tokio::net::TcpStream, timeout: std::time::Duration) -> Option<bool> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = [0u8; H2_PREFACE.len()];
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return None,
        };
        if buf[..n] != H2_PREFACE[..n] {
            return Some(false);
        }
        if n == H2_PREFACE.len() {
            return Some(true);
        }
        // A preface split across packets: its rest is on the way.
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
    }
}

/// Runs a session task: a new connection, or a parked one that became readable. When
/// the session parks its connection, the worker keeps it (or resumes it at once if it is
/// readable already); the connection stays counted in `active` until it closes.
///
/// The session is polled once right here, in the caller's task: a connection whose
/// request is already in (a deferred accept, a parked connection that became readable)
/// is usually answered, and a short one closed, within that poll, with no task spawned.
/// Only when it has to wait does it get a task of its own, which polls it again at once
/// and so hands its own waker to whatever it waits on (a future's wake-up goes to the
/// waker of its latest poll). Boxed once: the task moves a pointer, not the session's
/// 5 KB state.
fn run_session(w: &Rc<Worker>, start: session::Start) {
    let mut fut = Box::pin(session_loop(w.clone(), start));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    if std::future::Future::poll(fut.as_mut(), &mut cx).is_pending() {
        tokio::task::spawn_local(fut);
    }
}

/// A connection's session in the current task, until it closes or is parked (and not
/// readable already: then it goes on here).
async fn session_loop(w: Rc<Worker>, start: session::Start) {
    let mut next = Some(start);
    while let Some(start) = next.take() {
        // One call site, so the session's future is built in place in this one's state
        // (three calls, one per kind of start, each cost a 5 KB copy).
        let (conn, served, nodelay) = start.into_conn();
        let parked = session::serve_conn(&*w, conn, served, nodelay).await;
        match parked {
            Some(p) if !w.draining() => {
                // Readable already: go on in this task.
                next = w.parking.park(p).map(session::Start::Resume);
                if next.is_none() {
                    return;
                }
            }
            _ => w.connections_closed(1),
        }
    }
}

impl Worker {
    /// `n` connections closed: counted, and whoever waits for room or for the drain
    /// to finish is told.
    fn connections_closed(&self, n: usize) {
        if n > 0 {
            self.svc.stats().active.fetch_sub(n as u64, Relaxed);
            self.conn_closed.notify_waiters();
        }
    }
}
