//! Accept strategies: each a small type behind one trait, chosen once at startup.
//!
//! - `reuseport`: one socket per worker per address (SO_REUSEPORT). The kernel spreads
//!   connections by hash; no lock, no herd. Best throughput; one busy worker keeps its own
//!   queue waiting (the long tail of background.md lever 3).
//! - `shared`: one socket, registered in every worker's epoll. Every worker is woken for
//!   each connection and the busiest tends to win (LIFO-like); the baseline to compare.
//! - `blocking`: one blocking socket, one accept thread per worker blocked in accept().
//!   The kernel wakes blocked acceptors in FIFO order, so the load is balanced; the thread
//!   hands each connection to its worker through a bounded channel.
//!
//! `exclusive` (EPOLLEXCLUSIVE) and `mutex` (nginx's accept_mutex) need an epoll loop of
//! their own below the runtime; they are refused at startup with a clear message until
//! the accept-strategy experiment lands.

use super::listener::{bind_listener, ListenSpec};
use crate::config::AcceptKind;
use std::io;
use std::net::TcpListener;

/// What one worker accepts from.
pub enum WorkerAcceptor {
    /// Listening sockets this worker polls in its own reactor.
    Sockets(Vec<TcpListener>),
    /// Connections accepted by threads outside the runtime.
    Channel(tokio::sync::mpsc::Receiver<std::net::TcpStream>),
}

/// Binds the listen addresses for `workers` workers.
pub trait AcceptStrategy: Send + Sync {
    fn name(&self) -> &'static str;
    /// Binds everything (before any worker starts) and returns one acceptor per worker.
    fn prepare(&self, listens: &[ListenSpec], workers: usize) -> io::Result<Vec<WorkerAcceptor>>;
}

/// The strategy for `accept = ...`, or an error for one this build refuses.
pub fn strategy_for(kind: AcceptKind) -> Result<Box<dyn AcceptStrategy>, String> {
    match kind {
        AcceptKind::Reuseport => Ok(Box::new(Reuseport)),
        AcceptKind::Shared => Ok(Box::new(Shared)),
        AcceptKind::Blocking => Ok(Box::new(Blocking)),
        AcceptKind::Exclusive | AcceptKind::Mutex => Err(format!(
            "accept = \"{}\" is not available in this build; use \"reuseport\", \"shared\" or \"blocking\"",
            kind.as_str()
        )),
    }
}

struct Reuseport;
impl AcceptStrategy for Reuseport {
    fn name(&self) -> &'static str {
        "reuseport"
    }
    fn prepare(&self, listens: &[ListenSpec], workers: usize) -> io::Result<Vec<WorkerAcceptor>> {
        let mut out = Vec::with_capacity(workers);
        for _ in 0..workers {
            let mut socks = Vec::with_capacity(listens.len());
            for l in listens {
                socks.push(bind_listener(*l, true, true)?);
            }
            out.push(WorkerAcceptor::Sockets(socks));
        }
        Ok(out)
    }
}

struct Shared;
impl AcceptStrategy for Shared {
    fn name(&self) -> &'static str {
        "shared"
    }
    fn prepare(&self, listens: &[ListenSpec], workers: usize) -> io::Result<Vec<WorkerAcceptor>> {
        let socks: Vec<TcpListener> = listens
            .iter()
            .map(|l| bind_listener(*l, false, true))
            .collect::<Result<_, _>>()?;
        (0..workers)
            .map(|_| {
                socks
                    .iter()
                    .map(TcpListener::try_clone)
                    .collect::<Result<Vec<_>, _>>()
                    .map(WorkerAcceptor::Sockets)
            })
            .collect()
    }
}

/// Connections queued between an accept thread and its worker before accept() pauses.
const BLOCKING_HANDOFF_QUEUE: usize = 1024;

struct Blocking;
impl AcceptStrategy for Blocking {
    fn name(&self) -> &'static str {
        "blocking"
    }
    fn prepare(&self, listens: &[ListenSpec], workers: usize) -> io::Result<Vec<WorkerAcceptor>> {
        let socks: Vec<TcpListener> = listens
            .iter()
            .map(|l| bind_listener(*l, false, false))
            .collect::<Result<_, _>>()?;
        let mut out = Vec::with_capacity(workers);
        for w in 0..workers {
            let (tx, rx) = tokio::sync::mpsc::channel(BLOCKING_HANDOFF_QUEUE);
            for s in &socks {
                let sock = s.try_clone()?;
                let tx = tx.clone();
                std::thread::Builder::new()
                    .name(format!("accept-{w}"))
                    .spawn(move || loop {
                        match sock.accept() {
                            Ok((stream, _)) => {
                                // A full queue blocks this thread, which stops it accepting:
                                // the kernel then wakes the next waiting acceptor instead.
                                if tx.blocking_send(stream).is_err() {
                                    return; // worker gone: shutting down
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => {
                                tracing::error!("accept() failed: {e}");
                                std::thread::sleep(std::time::Duration::from_millis(100));
                            }
                        }
                    })?;
            }
            out.push(WorkerAcceptor::Channel(rx));
        }
        Ok(out)
    }
}
