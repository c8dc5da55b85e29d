//! The worker's shared state ([`Worker`]) and the session loop's view of it: the
//! config snapshot, the counters, the shutdown signal, the router, the access log and
//! the recycled request heads and read buffers.
//!
//! How it fits: the worker thread ([`super`]) builds one [`Worker`] per thread; the
//! accept path ([`super::accept`]) and the connections' sessions ([`super::serve`])
//! share it through an `Rc`.

use crate::handlers::services::Services;
use crate::http::idle::IdleTimers;
use crate::http::session::{Service, SessionParams};
use crate::http::{Conn, Exchange, ExchangeError};
use crate::log::access::LogBuffers;
use crate::metrics::WorkerStats;
use crate::state::{Current, Shared};
use std::cell::RefCell;
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
    pub(super) snapshot: RefCell<Rc<Arc<Shared>>>,
    pub max_connections: usize,
    pub(super) conn_closed: Notify,
    /// Heads of answered requests whose allocations the next requests reuse (per
    /// worker, not per connection: an idle connection holds none).
    /// Boxes, not heads: a spare is handed to the parser and filled in place, and the
    /// head then moves as a pointer (`edge_http::parse_request_reusing`).
    #[allow(clippy::vec_box)]
    pub(super) spare_heads: RefCell<Vec<Box<edge_http::RequestHead>>>,
    /// Read buffers of connections gone idle, for the next connection that reads.
    pub(super) spare_rbufs: RefCell<Vec<bytes::BytesMut>>,
    /// Idle keep-alive connections kept without a task.
    pub(super) parking: crate::server::parking::Parking,
    /// When "worker_connections are not enough" was last logged.
    pub(super) refused_logged: std::cell::Cell<Option<std::time::Instant>>,
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
            alt_svc: &cfg.alt_svc,
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

    fn spare_head(&self) -> Option<Box<edge_http::RequestHead>> {
        self.spare_heads.borrow_mut().pop()
    }

    fn recycle_head(&self, head: Box<edge_http::RequestHead>) {
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

impl Worker {
    /// `n` connections closed: counted, and whoever waits for room or for the drain
    /// to finish is told.
    pub(super) fn connections_closed(&self, n: usize) {
        if n > 0 {
            self.svc.stats().active.fetch_sub(n as u64, Relaxed);
            self.conn_closed.notify_waiters();
        }
    }
}
