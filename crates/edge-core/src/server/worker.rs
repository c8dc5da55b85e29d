//! A worker: one OS thread, pinned to a CPU, running a tokio `current_thread` runtime
//! (Pingora's "NoSteal" model). Its connections never leave it, so per-connection and
//! per-worker state (the upstream pool, the access-log buffer) needs no locks.
//!
//! This file starts the thread and its runtime and runs the worker's tasks (accepting,
//! the shutdown relay, the parker, the clock). The worker's shared state and the session
//! loop's view of it are [`service`]; taking and admitting connections (at
//! `worker_connections` the longest-idle parked ones make room, else a new one is
//! refused) is [`accept`]; serving a connection (PROXY, TLS, HTTP/2, HTTP/1.1, parking)
//! is [`serve`].

mod accept;
pub mod quic;
mod serve;
mod service;

pub use service::Worker;

use crate::handlers::services::Services;
use crate::http::idle::IdleTimers;
use crate::http::session;
use crate::log::access::LogBuffers;
use crate::metrics::Metrics;
use crate::net::WorkerAcceptor;
use crate::state::Current;
use crate::upstream::UpstreamPool;
use accept::{accept_loop, channel_loop};
use serve::run_session;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::{watch, Notify};

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
    /// The worker's UDP sockets of `quic = true` listeners (HTTP/3).
    pub quic: Vec<quic::QuicSocket>,
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
            large_send: Default::default(),
        }),
        access_log: Rc::new(RefCell::new(LogBuffers::default())),
        snapshot: RefCell::new(Rc::new(spec.shared.load_full())),
        shutdown: spec.shutdown,
        idle: Rc::new(IdleTimers::default()),
        max_connections: spec.max_connections,
        conn_closed: Notify::new(),
        spare_heads: RefCell::new(Vec::new()),
        spare_rbufs: RefCell::new(Vec::new()),
        parking: crate::server::parking::Parking::default(),
        refused_logged: std::cell::Cell::new(None),
    });
    tokio::task::spawn_local(crate::log::access::flusher(worker.access_log.clone()));
    tokio::task::spawn_local(local_ticker(worker.clone()));
    tokio::task::spawn_local(watch_shutdown(worker.clone()));
    tokio::task::spawn_local(parker(worker.clone()));
    let quic_tasks: Vec<_> = spec
        .quic
        .into_iter()
        .map(|s| tokio::task::spawn_local(quic::run(worker.clone(), s)))
        .collect();
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
    for t in quic_tasks {
        let _ = t.await;
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
