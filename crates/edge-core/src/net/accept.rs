//! Accept strategies: each a small type behind one trait, chosen once at startup.
//!
//! - `reuseport`: one socket per worker per address (SO_REUSEPORT). The kernel spreads
//!   connections by hash; no lock, no herd. Best throughput; one busy worker keeps its own
//!   queue waiting (the long tail of docs/background.md, lever 4).
//! - `shared`: one socket, registered in every worker's epoll. Every worker is woken for
//!   each connection and the busiest tends to win (LIFO-like); the baseline to compare.
//! - `blocking`: one blocking socket, one accept thread per worker blocked in accept().
//!   The kernel wakes blocked acceptors in FIFO order, so the load is balanced; the thread
//!   hands each connection to its worker through a bounded channel.
//! - `exclusive`: one non-blocking socket; each worker's accept thread waits in its own
//!   epoll instance where the socket is registered with EPOLLEXCLUSIVE, so one waiter is
//!   woken per connection, and it drains accept4() until EAGAIN. Wake-ups favour the
//!   most recent waiter (LIFO-like): the thread that just handed a connection over is
//!   back in epoll_wait first, which is exactly the imbalance docs/background.md (lever 4) describes.
//! - `mutex`: nginx's accept_mutex: one blocking socket, and only the accept thread that
//!   holds a process-wide mutex waits in accept(); the others wait for the mutex.
//!
//! tokio cannot register a socket with EPOLLEXCLUSIVE and has no accept mutex, so the
//! last three strategies accept on small threads below the runtime; the worker receives
//! ready connections from a bounded channel.
//!
//! An accept thread takes its next connection only once its worker has taken the last
//! one and come round its loop (the [`Turn`]): a worker busy with CPU-heavy work is not
//! in accept(), exactly as an nginx worker or a seed-004 worker that blocks in accept()
//! itself is not, so the kernel gives the connection to an acceptor whose worker is free.
//! Without this, an acceptor handed connections to its busy worker as fast as they came
//! and the strategies balanced nothing but the hand-off.

use super::listener::{bind_listener, Blocking, ListenSpec, PortSharing};
use super::sys::Epoll;
use crate::config::AcceptKind;
use std::io;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A connection accepted below the runtime: already non-blocking, with its peer and the
/// index of its `[[listen]]` (which says whether it speaks TLS), and its accept thread's
/// turn: the thread accepts again once every `Accepted` it handed over is dropped, which
/// the worker does after it has served the connection's first poll and let its other
/// ready tasks run.
pub struct Accepted {
    pub stream: std::net::TcpStream,
    pub peer: std::net::SocketAddr,
    pub listen: usize,
    pub turn: TurnTicket,
}

/// One accept thread's hand-offs not yet taken round by its worker: the thread waits
/// for none before it accepts again.
struct Turn {
    outstanding: AtomicUsize,
    thread: std::thread::Thread,
}

/// A hand-off outstanding on its accept thread's turn; dropping it ends it.
pub struct TurnTicket(Arc<Turn>);

impl Turn {
    /// The turn of the calling thread (the accept thread).
    fn new() -> Arc<Turn> {
        Arc::new(Turn {
            outstanding: AtomicUsize::new(0),
            thread: std::thread::current(),
        })
    }

    fn ticket(self: &Arc<Turn>) -> TurnTicket {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        TurnTicket(self.clone())
    }

    /// Waits (on the accept thread) until the worker has taken round every hand-off;
    /// false once the worker is gone (shutdown: its channel is closed).
    fn wait(&self, tx: &Handoff) -> bool {
        while self.outstanding.load(Ordering::Acquire) > 0 {
            if tx.is_closed() {
                return false;
            }
            // A ticket dropped between the load and the park unparks first: park then
            // returns at once. The timeout only bounds how late a shutdown is noticed.
            std::thread::park_timeout(std::time::Duration::from_millis(100));
        }
        !tx.is_closed()
    }
}

impl Drop for TurnTicket {
    fn drop(&mut self) {
        if self.0.outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.thread.unpark();
        }
    }
}

/// What one worker accepts from.
pub enum WorkerAcceptor {
    /// Listening sockets this worker polls in its own reactor.
    Sockets(Vec<TcpListener>),
    /// Connections accepted by threads outside the runtime.
    Channel(tokio::sync::mpsc::Receiver<Accepted>),
}

/// How the strategies are to set up their sockets and threads.
#[derive(Debug, Clone, Default)]
pub struct AcceptPlan {
    pub workers: usize,
    /// Accept every pending connection on a wake-up (`multi_accept`).
    pub multi_accept: bool,
    /// Per worker, the CPU its reuseport sockets ask the kernel for (`SO_INCOMING_CPU`,
    /// `reuseport_steering = "cpu"`); empty: no steering.
    pub incoming_cpu: Vec<Option<usize>>,
}

impl AcceptPlan {
    pub fn workers(workers: usize) -> AcceptPlan {
        AcceptPlan {
            workers,
            ..AcceptPlan::default()
        }
    }
}

/// Binds the listen addresses for the plan's workers.
pub trait AcceptStrategy: Send + Sync {
    fn name(&self) -> &'static str;
    /// Binds everything (before any worker starts) and returns one acceptor per worker.
    fn prepare(&self, listens: &[ListenSpec], plan: &AcceptPlan)
        -> io::Result<Vec<WorkerAcceptor>>;
}

/// The strategy for `accept = ...` (every kind is built on Linux).
pub fn strategy_for(kind: AcceptKind) -> Box<dyn AcceptStrategy> {
    match kind {
        AcceptKind::Reuseport => Box::new(Reuseport),
        AcceptKind::Shared => Box::new(Shared),
        AcceptKind::Blocking => Box::new(Threaded(ThreadMode::Blocking)),
        AcceptKind::Mutex => Box::new(Threaded(ThreadMode::Mutex)),
        AcceptKind::Exclusive => Box::new(Threaded(ThreadMode::Exclusive)),
    }
}

struct Reuseport;
impl AcceptStrategy for Reuseport {
    fn name(&self) -> &'static str {
        "reuseport"
    }
    fn prepare(
        &self,
        listens: &[ListenSpec],
        plan: &AcceptPlan,
    ) -> io::Result<Vec<WorkerAcceptor>> {
        let mut out = Vec::with_capacity(plan.workers);
        for w in 0..plan.workers {
            let mut socks = Vec::with_capacity(listens.len());
            for l in listens {
                let s = bind_listener(*l, PortSharing::ReusePort, Blocking::NonBlocking)?;
                if let Some(Some(cpu)) = plan.incoming_cpu.get(w) {
                    super::sys::set_incoming_cpu(&s, *cpu)?;
                }
                socks.push(s);
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
    fn prepare(
        &self,
        listens: &[ListenSpec],
        plan: &AcceptPlan,
    ) -> io::Result<Vec<WorkerAcceptor>> {
        let socks: Vec<TcpListener> = listens
            .iter()
            .map(|l| bind_listener(*l, PortSharing::Exclusive, Blocking::NonBlocking))
            .collect::<Result<_, _>>()?;
        (0..plan.workers)
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

/// Bound of the channel between an accept thread and its worker. The [`Turn`] keeps
/// what is queued to one accept round (one connection, or with `multi_accept` every one
/// that was waiting), so this is only a backstop.
const HANDOFF_QUEUE: usize = 1024;

#[derive(Clone, Copy, PartialEq, Eq)]
enum ThreadMode {
    Blocking,
    Mutex,
    Exclusive,
}

/// The strategies that accept on threads below the runtime.
struct Threaded(ThreadMode);

impl AcceptStrategy for Threaded {
    fn name(&self) -> &'static str {
        match self.0 {
            ThreadMode::Blocking => "blocking",
            ThreadMode::Mutex => "mutex",
            ThreadMode::Exclusive => "exclusive",
        }
    }

    fn prepare(
        &self,
        listens: &[ListenSpec],
        plan: &AcceptPlan,
    ) -> io::Result<Vec<WorkerAcceptor>> {
        let mode = self.0;
        let multi = plan.multi_accept;
        let blocking = if mode == ThreadMode::Exclusive {
            Blocking::NonBlocking
        } else {
            Blocking::Blocking
        };
        let socks: Vec<TcpListener> = listens
            .iter()
            .map(|l| bind_listener(*l, PortSharing::Exclusive, blocking))
            .collect::<Result<_, _>>()?;
        let accept_mutex = std::sync::Arc::new(std::sync::Mutex::new(()));
        let mut out = Vec::with_capacity(plan.workers);
        for w in 0..plan.workers {
            let (tx, rx) = tokio::sync::mpsc::channel(HANDOFF_QUEUE);
            match mode {
                ThreadMode::Exclusive => {
                    let socks = socks
                        .iter()
                        .map(TcpListener::try_clone)
                        .collect::<Result<Vec<_>, _>>()?;
                    let ep = exclusive_on(&socks)?;
                    spawn_acceptor(w, move || exclusive_loop(&ep, &socks, &tx, multi))?;
                }
                ThreadMode::Blocking | ThreadMode::Mutex => {
                    for (i, s) in socks.iter().enumerate() {
                        let sock = s.try_clone()?;
                        let tx = tx.clone();
                        let m = (mode == ThreadMode::Mutex).then(|| accept_mutex.clone());
                        spawn_acceptor(w, move || {
                            blocking_loop(&sock, i, &tx, m.as_deref(), multi)
                        })?;
                    }
                }
            }
            out.push(WorkerAcceptor::Channel(rx));
        }
        Ok(out)
    }
}

type Handoff = tokio::sync::mpsc::Sender<Accepted>;

fn spawn_acceptor(w: usize, f: impl FnOnce() + Send + 'static) -> io::Result<()> {
    std::thread::Builder::new()
        .name(format!("accept-{w}"))
        .spawn(f)
        .map(|_| ())
}

/// Logs an accept() failure and backs off (EMFILE and friends would otherwise spin).
fn accept_failed(e: &io::Error) {
    tracing::error!("accept() failed: {e}");
    std::thread::sleep(std::time::Duration::from_millis(100));
}

/// `blocking` and `mutex`: wait in accept(), holding the accept mutex if there is one.
/// With `multi`, every connection already waiting is taken on the same wake-up (under
/// the mutex, nobody else can take it first).
fn blocking_loop(
    sock: &TcpListener,
    index: usize,
    tx: &Handoff,
    mutex: Option<&std::sync::Mutex<()>>,
    multi: bool,
) {
    let turn = Turn::new();
    let mut batch = Vec::new();
    loop {
        // Not while the worker is busy: another acceptor (or mutex holder) whose worker
        // is free takes the connection.
        if !turn.wait(tx) {
            return;
        }
        {
            let _held = mutex.map(|m| m.lock().unwrap_or_else(|p| p.into_inner()));
            loop {
                match super::sys::accept_nonblocking(sock) {
                    Ok((stream, peer)) => batch.push(Accepted {
                        stream,
                        peer,
                        listen: index,
                        turn: turn.ticket(),
                    }),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        accept_failed(&e);
                        break;
                    }
                }
                if !multi || !super::sys::has_pending(sock) {
                    break;
                }
                if mutex.is_none() {
                    // Without the mutex another acceptor may take the waiting
                    // connection first, and this thread's next accept() would then
                    // block with its batch not handed over (until some later
                    // connection came): what is taken goes to the worker first.
                    for c in batch.drain(..) {
                        if tx.blocking_send(c).is_err() {
                            return;
                        }
                    }
                }
            }
        }
        for c in batch.drain(..) {
            if tx.blocking_send(c).is_err() {
                return; // worker gone: shutting down
            }
        }
    }
}

/// `exclusive`: epoll_wait (EPOLLEXCLUSIVE), then accept one connection, or with
/// `multi` every waiting one (until EAGAIN).
fn exclusive_loop(ep: &Epoll, socks: &[TcpListener], tx: &Handoff, multi: bool) {
    let turn = Turn::new();
    loop {
        if !turn.wait(tx) {
            return;
        }
        let ready = match ep.wait() {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                accept_failed(&e);
                continue;
            }
        };
        for idx in ready {
            let Some(sock) = socks.get(idx as usize) else {
                continue;
            };
            loop {
                match super::sys::accept_nonblocking(sock) {
                    Ok((stream, peer)) => {
                        let a = Accepted {
                            stream,
                            peer,
                            listen: idx as usize,
                            turn: turn.ticket(),
                        };
                        if tx.blocking_send(a).is_err() {
                            return;
                        }
                        if !multi {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        accept_failed(&e);
                        break;
                    }
                }
            }
        }
    }
}

/// A private epoll instance with every listening socket registered EPOLLEXCLUSIVE,
/// tagged with its index.
fn exclusive_on(socks: &[TcpListener]) -> io::Result<Epoll> {
    use std::os::fd::AsRawFd;
    let ep = Epoll::new()?;
    for (i, s) in socks.iter().enumerate() {
        ep.add_exclusive(s.as_raw_fd(), i as u64)?;
    }
    Ok(ep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Every strategy hands out working connections (the kernel side of each, without a
    /// runtime: the channel receivers are drained directly).
    #[test]
    fn every_strategy_accepts() {
        for kind in [
            AcceptKind::Reuseport,
            AcceptKind::Shared,
            AcceptKind::Blocking,
            AcceptKind::Mutex,
            AcceptKind::Exclusive,
        ] {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = probe.local_addr().unwrap();
            drop(probe);
            let s = strategy_for(kind);
            assert_eq!(s.name(), kind.as_str());
            let mut acceptors = s
                .prepare(&[ListenSpec::new(addr, 64)], &AcceptPlan::workers(2))
                .unwrap();
            for _ in 0..4 {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                c.write_all(b"x").unwrap();
                let mut got = None;
                for _ in 0..200 {
                    for a in acceptors.iter_mut() {
                        match a {
                            WorkerAcceptor::Sockets(socks) => {
                                for l in socks.iter() {
                                    if let Ok((s, _)) = l.accept() {
                                        got = Some(s);
                                    }
                                }
                            }
                            WorkerAcceptor::Channel(rx) => {
                                // Dropping the hand-off lets its thread accept again.
                                if let Ok(a) = rx.try_recv() {
                                    assert_eq!(a.listen, 0);
                                    assert_eq!(a.peer, c.local_addr().unwrap(), "the peer");
                                    got = Some(a.stream);
                                }
                            }
                        }
                    }
                    if got.is_some() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                let mut s =
                    got.unwrap_or_else(|| panic!("{}: no connection accepted", kind.as_str()));
                s.set_nonblocking(false).unwrap();
                let mut b = [0u8; 1];
                s.read_exact(&mut b).unwrap();
                assert_eq!(&b, b"x");
            }
        }
    }
}
