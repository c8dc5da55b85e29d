//! A worker: one OS thread, pinned to a CPU, running a tokio `current_thread` runtime
//! (Pingora's "NoSteal" model). Its connections never leave it, so per-connection and
//! per-worker state (the upstream pool, the access-log buffer) needs no locks.
//!
//! Accepting stops when `worker_connections` connections are open (the socket stays in
//! the kernel's backlog, nothing is refused by us) and resumes when one closes.

use super::session;
use super::state::Shared;
use crate::log::access::AccessLogBuf;
use crate::metrics::Metrics;
use crate::net::WorkerAcceptor;
use crate::upstream::UpstreamPool;
use arc_swap::ArcSwap;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::{watch, Notify};

/// Everything a worker's tasks share.
pub struct Worker {
    pub id: usize,
    pub shared: Arc<ArcSwap<Shared>>,
    pub metrics: Arc<Metrics>,
    pub pool: UpstreamPool,
    pub access_log: RefCell<AccessLogBuf>,
    pub shutdown: watch::Receiver<bool>,
    pub max_connections: usize,
    /// The file I/O backend (`aio.mode`), chosen once.
    pub file_io: crate::aio::FileBackend,
    conn_closed: Notify,
}

impl Worker {
    pub fn stats(&self) -> &crate::metrics::WorkerStats {
        &self.metrics.workers[self.id]
    }

    pub fn draining(&self) -> bool {
        *self.shutdown.borrow()
    }
}

/// What a worker thread is started with.
pub struct WorkerSpec {
    pub id: usize,
    pub cpu: Option<usize>,
    pub acceptor: WorkerAcceptor,
    pub shared: Arc<ArcSwap<Shared>>,
    pub metrics: Arc<Metrics>,
    pub access_log: AccessLogBuf,
    pub shutdown: watch::Receiver<bool>,
    pub max_connections: usize,
    pub file_io: crate::aio::FileBackend,
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
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!("worker {}: cannot build runtime: {e}", spec.id);
                    return;
                }
            };
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, run(spec));
        })
}

async fn run(spec: WorkerSpec) {
    let worker = Rc::new(Worker {
        id: spec.id,
        shared: spec.shared,
        metrics: spec.metrics,
        pool: UpstreamPool::default(),
        access_log: RefCell::new(spec.access_log),
        shutdown: spec.shutdown,
        max_connections: spec.max_connections,
        file_io: spec.file_io,
        conn_closed: Notify::new(),
    });
    tokio::task::spawn_local(crate::log::access::flusher(worker.clone()));
    match spec.acceptor {
        WorkerAcceptor::Sockets(socks) => {
            let mut tasks = Vec::new();
            for s in socks {
                match tokio::net::TcpListener::from_std(s) {
                    Ok(l) => tasks.push(tokio::task::spawn_local(accept_loop(worker.clone(), l))),
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
    // Not accepting any more: let open connections finish (the main thread bounds this
    // with shutdown_timeout), then flush the log.
    while worker.stats().active.load(Relaxed) > 0 {
        worker.conn_closed.notified().await;
    }
    worker.access_log.borrow_mut().flush();
}

async fn wait_for_capacity(w: &Worker) {
    while w.stats().active.load(Relaxed) as usize >= w.max_connections {
        w.conn_closed.notified().await;
    }
}

async fn accept_loop(w: Rc<Worker>, listener: tokio::net::TcpListener) {
    let mut shutdown = w.shutdown.clone();
    loop {
        wait_for_capacity(&w).await;
        if w.draining() {
            return;
        }
        let res = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.changed() => return,
        };
        match res {
            Ok((stream, peer)) => start_session(&w, stream, peer),
            Err(e) => {
                // EMFILE/ENFILE/ENOBUFS: back off instead of spinning (nginx disables
                // accept events for a while in the same case).
                tracing::error!("worker {}: accept() failed: {e}", w.id);
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

async fn channel_loop(w: Rc<Worker>, mut rx: tokio::sync::mpsc::Receiver<std::net::TcpStream>) {
    let mut shutdown = w.shutdown.clone();
    loop {
        wait_for_capacity(&w).await;
        if w.draining() {
            return;
        }
        let s = tokio::select! {
            s = rx.recv() => s,
            _ = shutdown.changed() => return,
        };
        let Some(s) = s else { return };
        let peer = match s.peer_addr() {
            Ok(p) => p,
            Err(_) => continue,
        };
        if s.set_nonblocking(true).is_err() {
            continue;
        }
        match tokio::net::TcpStream::from_std(s) {
            Ok(stream) => start_session(&w, stream, peer),
            Err(e) => tracing::error!("worker {}: cannot register connection: {e}", w.id),
        }
    }
}

fn start_session(w: &Rc<Worker>, stream: tokio::net::TcpStream, peer: std::net::SocketAddr) {
    // Responses are written whole (head and body in as few writes as possible), so Nagle
    // only adds delay; background.md notes nginx's 40 ms tcp_nopush stall on loopback.
    let _ = stream.set_nodelay(true);
    let stats = w.stats();
    stats.accepted.fetch_add(1, Relaxed);
    stats.active.fetch_add(1, Relaxed);
    let w = w.clone();
    tokio::task::spawn_local(async move {
        session::serve(&w, stream, peer).await;
        w.stats().active.fetch_sub(1, Relaxed);
        w.conn_closed.notify_waiters();
    });
}
