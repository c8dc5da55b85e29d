//! Listeners and serving threads: [`start`] binds, spawns, and returns a handle.
//!
//! How it fits: the binary and the edgecache server (which embeds the origin for its
//! default config) both call [`start`]. Binding happens on the caller's thread, so a bad
//! address is an `Err` and not a log line; then each serving thread runs its own tokio
//! `current_thread` runtime with its own listener. With more than one thread the
//! listeners share the port through `SO_REUSEPORT` (the kernel spreads connections, no
//! shared accept queue); with one thread there is no `SO_REUSEPORT`, so a port already in
//! use by anyone is an error, never a silent split of traffic.

use crate::pick::Picker;
use crate::respond::Ctx;
use crate::stats::{Stats, StatsSnapshot};
use crate::Options;
use socket2::{Domain, Protocol, Socket, Type};
use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::watch;

/// Listen backlog (the kernel caps it at `net.core.somaxconn`).
const BACKLOG: i32 = 4096;
/// Most serving threads one origin starts.
pub const MAX_THREADS: usize = 256;
/// Pause after a failed accept (EMFILE and friends) so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(10);

/// A running origin. Dropping it stops it too (like [`OriginHandle::shutdown`]): keep it
/// alive for as long as the origin should serve.
pub struct OriginHandle {
    addr: SocketAddr,
    stop: Option<watch::Sender<bool>>,
    threads: Vec<JoinHandle<()>>,
    stats: Arc<Stats>,
}

impl OriginHandle {
    /// The address actually bound (the real port when `listen` had port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes every connection, and joins the serving threads.
    pub fn shutdown(self) {
        drop(self);
    }

    /// The `/stats` counters, summed over threads.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// Zeroes the counters (as `POST /stats/reset` does).
    pub fn reset_stats(&self) {
        self.stats.reset();
    }
}

impl Drop for OriginHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn listener(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::TcpListener> {
    let err = |what: &str, e: io::Error| io::Error::new(e.kind(), format!("{what} {addr}: {e}"));
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| err("socket", e))?;
    s.set_reuse_address(true)
        .map_err(|e| err("SO_REUSEADDR", e))?;
    if reuse_port {
        s.set_reuse_port(true).map_err(|e| err("SO_REUSEPORT", e))?;
    }
    s.set_nonblocking(true).map_err(|e| err("O_NONBLOCK", e))?;
    s.bind(&addr.into()).map_err(|e| err("bind", e))?;
    s.listen(BACKLOG).map_err(|e| err("listen", e))?;
    Ok(s.into())
}

/// Binds synchronously (so bind errors are returned, not logged) and serves on
/// background OS threads (each a tokio current_thread runtime; SO_REUSEPORT listeners
/// per thread via socket2). Returns once listening.
pub fn start(opts: Options) -> io::Result<OriginHandle> {
    let threads = opts.threads;
    if threads == 0 || threads > MAX_THREADS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("threads must be 1..={MAX_THREADS}"),
        ));
    }
    if opts.count == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "count must be at least 1",
        ));
    }
    let mut listeners = Vec::with_capacity(threads);
    if threads == 1 {
        listeners.push(listener(opts.listen, false)?);
    } else {
        if opts.listen.port() != 0 {
            // A probe without SO_REUSEPORT: fails if anyone (even another reuseport
            // group of the same user) holds the port, which the group bind would not.
            drop(listener(opts.listen, false)?);
        }
        listeners.push(listener(opts.listen, true)?);
        let bound = listeners[0].local_addr()?;
        for _ in 1..threads {
            listeners.push(listener(bound, true)?);
        }
    }
    let addr = listeners[0].local_addr()?;
    let stats = Arc::new(Stats::new(threads));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut handle = OriginHandle {
        addr,
        stop: Some(stop_tx),
        threads: Vec::new(),
        stats: stats.clone(),
    };
    for (i, l) in listeners.into_iter().enumerate() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let picker = Picker::new(
            &opts.sizes,
            opts.count,
            opts.obj_dist,
            0x5eed_0000 + i as u64,
        );
        let (max_age, stats, stop) = (opts.max_age, stats.clone(), stop_rx.clone());
        let t = std::thread::Builder::new()
            .name(format!("edgeorigin-{i}"))
            .spawn(move || {
                // Built on the thread itself: the body cache holds `Rc`s.
                let ctx = Ctx {
                    thread: i,
                    max_age,
                    picker,
                    date: Default::default(),
                    stats,
                    bodies: Default::default(),
                };
                worker(rt, l, ctx, stop)
            })?;
        handle.threads.push(t);
    }
    Ok(handle)
}

/// One serving thread: accept and spawn connections until told to stop.
fn worker(
    rt: tokio::runtime::Runtime,
    l: std::net::TcpListener,
    ctx: Ctx,
    mut stop: watch::Receiver<bool>,
) {
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let l = match tokio::net::TcpListener::from_std(l) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("edgeorigin: registering the listener failed: {e}");
                return;
            }
        };
        let ctx = Rc::new(RefCell::new(ctx));
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                r = l.accept() => match r {
                    Ok((stream, _)) => {
                        tokio::task::spawn_local(crate::conn::serve(stream, ctx.clone()));
                    }
                    Err(e) => {
                        eprintln!("edgeorigin: accept() failed: {e}");
                        tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    }
                },
            }
        }
    });
    // Dropping the LocalSet and the runtime closes every connection of this thread.
}
