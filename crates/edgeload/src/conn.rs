//! One load-generating connection: connect (paced by `--ramp`), send requests (closed
//! loop, or on an open-loop schedule), read and frame responses, record, reconnect.
//!
//! How it fits: a worker thread ([`crate::worker`]) spawns one [`run`] task per
//! connection on its single-threaded runtime. The task owns its buffers for its whole
//! life (read buffer, write buffer, in-flight ring, response reader), so the request
//! path allocates nothing: requests are copied from pre-serialised bytes, responses are
//! framed in place by [`crate::codec`], and measurements go into the thread's
//! [`ThreadStats`] through a `RefCell` (one thread, no atomics).
//!
//! Sockets are `socket2` sockets driven through tokio's `AsyncFd`, so the TCP handshake
//! can be timed exactly (connect() to writable) and reads clear readiness after a short
//! read (one read syscall per response, like wrk).
//!
//! `https://` runs the TLS handshake of [`crate::tls`] after the TCP connect, then the
//! same loop over a [`crate::tls::TlsStream`]: [`Conn::drive`] is generic over the
//! [`Transport`], so plain HTTP compiles to its own copy with no TLS branch in it.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
use tokio::time::{sleep_until, timeout_at, Sleep};

use crate::codec::{Completed, ResponseReader, Step};
use crate::shared::Shared;
use crate::stats::{record, ThreadStats};
use crate::transport::{Plain, Transport};

/// Read buffer per connection. Bigger than the largest head the parser accepts, so a
/// partial head always fits after compaction.
pub const READ_BUF: usize = 64 * 1024;
/// Body bytes still to come from which the rest is dropped unread rather than read
/// (`Conn::discard_body`): a smaller rest costs one read either way.
const DISCARD_MIN: u64 = 16 * 1024;
/// First pause after a failed connect (doubles up to [`MAX_RETRY_BACKOFF`]), so a dead
/// server does not turn the client into a busy loop.
pub(crate) const RETRY_BACKOFF: Duration = Duration::from_millis(10);
pub(crate) const MAX_RETRY_BACKOFF: Duration = Duration::from_millis(500);

/// When a connection sends.
#[derive(Debug, Clone, Copy)]
pub enum Pacing {
    /// Send the next batch as soon as the previous one is answered.
    Closed,
    /// Send request `k` at `t0 + k * interval` (wrk2's model); latency is measured from
    /// that intended time, which corrects for coordinated omission.
    Open {
        t0: Instant,
        interval_ns: f64,
        k: u64,
    },
}

impl Pacing {
    #[inline]
    pub(crate) fn due(&self) -> Option<Instant> {
        match *self {
            Pacing::Closed => None,
            Pacing::Open { t0, interval_ns, k } => {
                Some(t0 + Duration::from_nanos((k as f64 * interval_ns) as u64))
            }
        }
    }

    #[inline]
    pub(crate) fn advance(&mut self) {
        if let Pacing::Open { k, .. } = self {
            *k += 1;
        }
    }
}

/// A request on the wire, waiting for its response.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    class: usize,
    /// When it should have been sent (open loop) or was sent (closed loop).
    intended: Instant,
    /// Where its latency starts ([`open_loop_start`]; `intended` in closed loop).
    from: Instant,
    sent: Instant,
}

/// How a connection's life ended.
enum End {
    /// No more requests to send (`--requests` reached).
    Finished,
    /// Closed (by the server, an error or a timeout): open a new one.
    Reconnect,
}

/// What one non-blocking socket operation did ([`socket_op`]).
enum Moved<'a> {
    /// `n > 0` bytes, and the readiness guard it went through, if any.
    Bytes(usize, Option<AsyncFdReadyGuard<'a, TcpStream>>),
    /// Nothing yet (would block, or interrupted): wait for readiness.
    NotNow,
    /// The peer closed.
    Closed,
    /// A socket error.
    Failed,
}

/// Runs `op` (a read, or a discard) once on the socket: through the readiness `guard`
/// (which a would-block clears), or straight when there is none (bytes the transport
/// already holds).
fn socket_op<'a, T: Transport>(
    fd: &'a AsyncFd<TcpStream>,
    guard: Option<AsyncFdReadyGuard<'a, TcpStream>>,
    transport: &mut T,
    mut op: impl FnMut(&mut T, &TcpStream) -> io::Result<usize>,
) -> Moved<'a> {
    let (res, guard) = match guard {
        Some(mut g) => match g.try_io(|s| op(transport, s.get_ref())) {
            Err(_would_block) => return Moved::NotNow,
            Ok(r) => (r, Some(g)),
        },
        None => (op(transport, fd.get_ref()), None),
    };
    match res {
        Ok(0) => Moved::Closed,
        Ok(n) => Moved::Bytes(n, guard),
        Err(e)
            if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::WouldBlock =>
        {
            Moved::NotNow
        }
        Err(_) => Moved::Failed,
    }
}

/// Why connect() failed.
enum ConnectError {
    Timeout,
    Failed,
}

/// Everything a connection task owns.
struct Conn {
    shared: Arc<Shared>,
    stats: Rc<RefCell<ThreadStats>>,
    pacing: Pacing,
    depth: usize,
    rbuf: Box<[u8]>,
    start: usize,
    end: usize,
    wbuf: Vec<u8>,
    inflight: VecDeque<InFlight>,
    reader: ResponseReader,
    rng: crate::mix::SplitMix64,
    /// `--seek`: where this connection's current read is.
    seek: crate::target::SeekState,
    timer: Pin<Box<Sleep>>,
    /// Body bytes may be dropped unread (not `--copy-bodies`, not `--verify`).
    discard: bool,
    /// The request budget (`--requests`) ran out.
    exhausted: bool,
    /// A request ticket taken before connecting, so that no connection is opened that
    /// will have nothing to send (exact connection counts under `--requests`).
    held_ticket: bool,
    /// Since when the connection has had room for another request (established, or its
    /// pipeline no longer full): see [`open_loop_start`].
    room_since: Instant,
}

/// How late a send may be, on a connection that had room for it, and still count as
/// the client's own timer slack: tokio's timers tick in milliseconds and round up, so
/// a send is up to about 1 ms late with nothing else going on.
const TIMER_SLACK: Duration = Duration::from_millis(2);

/// Where an open-loop request's latency starts. From its intended time (`due`) when the
/// connection was busy then, so that a server that held the connection is charged for
/// the wait (the coordinated-omission correction); but from the actual send (`now`)
/// when the connection had room at `due` and the send is late by no more than the
/// timer's slack: that lateness is the client's, not the server's, and counting it put
/// a floor of about 1 ms under every open-loop latency (mean 1.18 ms against a service
/// time of 0.09 ms, on a server that answers at once). A later send on an idle
/// connection (an overloaded client) is still charged from `due`, as wrk2 does.
pub(crate) fn open_loop_start(due: Instant, now: Instant, room_since: Instant) -> Instant {
    if room_since <= due && now.saturating_duration_since(due) <= TIMER_SLACK {
        now
    } else {
        due
    }
}

/// When connection `g` opens (`--ramp`) and how it paces its requests (`-R`); shared
/// with the HTTP/3 loop ([`crate::h3`]).
pub(crate) fn schedule(shared: &Shared, g: usize) -> (Instant, Pacing) {
    let cfg = &shared.cfg;
    let open_at = shared.start
        + cfg
            .ramp
            .map_or(Duration::ZERO, |r| Duration::from_secs_f64(g as f64 / r));
    let pacing = match cfg.open_loop {
        None => Pacing::Closed,
        Some(o) => {
            let interval_ns = cfg.connections as f64 / o.rate * 1e9;
            // Stagger the connections over one interval so sends are evenly spread.
            let phase =
                Duration::from_nanos((interval_ns * g as f64 / cfg.connections as f64) as u64);
            Pacing::Open {
                t0: open_at + phase,
                interval_ns,
                k: 0,
            }
        }
    };
    (open_at, pacing)
}

/// The seed of connection `g`'s URL picker.
pub(crate) fn seed(shared: &Shared, g: usize) -> u64 {
    (g as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ shared.seed
}

/// Runs connection number `g` (0..connections) until the worker drops it at the end of
/// the test, or until `--requests` is used up.
pub async fn run(shared: Arc<Shared>, stats: Rc<RefCell<ThreadStats>>, g: usize) {
    let cfg = &shared.cfg;
    let (open_at, pacing) = schedule(&shared, g);
    let seed = seed(&shared, g);
    let mut c = Conn {
        depth: cfg.pipeline,
        pacing,
        rbuf: vec![0u8; READ_BUF].into_boxed_slice(),
        start: 0,
        end: 0,
        wbuf: Vec::with_capacity(4096),
        inflight: VecDeque::with_capacity(cfg.pipeline),
        reader: ResponseReader::new(cfg.verify),
        rng: crate::mix::SplitMix64::new(seed),
        seek: Default::default(),
        timer: Box::pin(sleep_until(open_at.into())),
        discard: !cfg.copy_bodies,
        exhausted: false,
        held_ticket: false,
        room_since: open_at,
        stats,
        shared: shared.clone(),
    };
    sleep_until(open_at.into()).await;
    let mut scheduled = open_at;
    let mut backoff = RETRY_BACKOFF;
    // Sockets this connection has opened: picks its `--source` address.
    let mut sockets: u64 = 0;
    loop {
        if c.shared.cfg.requests.is_some() && !c.held_ticket {
            if !c.ticket() {
                return;
            }
            c.held_ticket = true;
        }
        let t0 = Instant::now();
        let source = c
            .shared
            .cfg
            .source
            .as_ref()
            .map(|s| s.pick(g, sockets, c.shared.cfg.connections));
        sockets += 1;
        let fd = match connect(c.shared.cfg.addr, source, t0 + c.shared.cfg.timeout).await {
            Ok(fd) => fd,
            Err(e) => {
                {
                    let mut s = c.stats.borrow_mut();
                    match e {
                        ConnectError::Timeout => s.errors.connect_timeout += 1,
                        ConnectError::Failed => s.errors.connect += 1,
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_RETRY_BACKOFF);
                continue;
            }
        };
        let end = if c.shared.cfg.tls.is_none() {
            backoff = RETRY_BACKOFF;
            {
                let mut s = c.stats.borrow_mut();
                record(&mut s.connect, t0.elapsed());
                s.connections += 1;
            }
            c.drive(&fd, &mut Plain, scheduled).await
        } else {
            let shared = c.shared.clone();
            let client = shared.cfg.tls.as_ref().expect("checked above");
            let t1 = Instant::now();
            record(&mut c.stats.borrow_mut().connect, t1.duration_since(t0));
            match crate::tls::handshake(&fd, client, t1 + shared.cfg.timeout).await {
                Ok(mut tls) => {
                    backoff = RETRY_BACKOFF;
                    {
                        let mut s = c.stats.borrow_mut();
                        record(&mut s.tls_handshake, t1.elapsed());
                        s.tls.handshakes += 1;
                        s.tls.resumed += u64::from(tls.resumed());
                        s.connections += 1;
                    }
                    c.drive(&fd, &mut tls, scheduled).await
                }
                Err(e) => {
                    c.stats.borrow_mut().tls_failure(e);
                    drop(fd);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_RETRY_BACKOFF);
                    continue;
                }
            }
        };
        match end {
            End::Finished => return,
            End::Reconnect => {
                drop(fd);
                c.reset();
                scheduled = Instant::now();
            }
        }
    }
}

/// Non-blocking connect, timed to writability; `deadline` bounds the handshake. With a
/// `source` address (`--source`) the socket is bound to it first.
async fn connect(
    addr: SocketAddr,
    source: Option<IpAddr>,
    deadline: Instant,
) -> Result<AsyncFd<TcpStream>, ConnectError> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(|_| ConnectError::Failed)?;
    sock.set_nonblocking(true)
        .map_err(|_| ConnectError::Failed)?;
    sock.set_tcp_nodelay(true)
        .map_err(|_| ConnectError::Failed)?;
    if let Some(ip) = source {
        crate::source::bind(&sock, ip).map_err(|_| ConnectError::Failed)?;
    }
    match sock.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(_) => return Err(ConnectError::Failed),
    }
    let stream = TcpStream::from(sock);
    // SAFETY: `stream` owns its file descriptor (it came straight from `Socket::new`) and
    // moves into the AsyncFd, which is the only owner until it is dropped; nothing else
    // closes or replaces that descriptor meanwhile, and `as_raw_fd` of a TcpStream always
    // returns the same one. Exercised by `tests::connect_times_the_handshake`.
    let fd = unsafe { AsyncFd::register(stream) }.map_err(|_| ConnectError::Failed)?;
    match timeout_at(deadline.into(), fd.writable()).await {
        Err(_) => return Err(ConnectError::Timeout),
        Ok(Err(_)) => return Err(ConnectError::Failed),
        Ok(Ok(_ready)) => {}
    }
    match fd.get_ref().take_error() {
        Ok(None) => Ok(fd),
        _ => Err(ConnectError::Failed),
    }
}

impl Conn {
    /// Clears per-connection state before a reconnect. In-flight requests of the old
    /// connection are dropped (already counted as errors where they failed).
    fn reset(&mut self) {
        self.start = 0;
        self.end = 0;
        self.inflight.clear();
        self.reader.reset();
    }

    /// Takes one request from the `--requests` budget.
    #[inline]
    fn ticket(&mut self) -> bool {
        if self.held_ticket {
            self.held_ticket = false;
            return true;
        }
        if self.exhausted || !self.shared.take_ticket() {
            self.exhausted = true;
            return false;
        }
        true
    }

    /// Appends one request (class chosen by weight) to the write buffer.
    #[inline]
    fn push_request(&mut self, intended: Instant, from: Instant, sent: Instant) {
        let cfg = &self.shared.cfg;
        let class = match &cfg.seek {
            None => {
                let class = self.shared.picker.pick(self.rng.next_u64());
                cfg.classes[class].write_request(&mut self.rng, &mut self.wbuf);
                class
            }
            Some(seek) => {
                let picker = &self.shared.picker;
                let (class, id, first, last) =
                    self.seek
                        .next(seek, &cfg.classes, |r| picker.pick(r), &mut self.rng);
                cfg.classes[class].write_range_request(id, first, last, &mut self.wbuf);
                class
            }
        };
        self.inflight.push_back(InFlight {
            class,
            intended,
            from,
            sent,
        });
    }

    /// Queues what is due now: a full batch in closed loop once the previous one is
    /// answered; in open loop every request whose intended time has come, up to the
    /// pipeline depth.
    fn queue_due(&mut self, now: Instant) {
        self.wbuf.clear();
        match self.pacing {
            Pacing::Closed => {
                if self.inflight.is_empty() {
                    for _ in 0..self.depth {
                        if !self.ticket() {
                            break;
                        }
                        self.push_request(now, now, now);
                    }
                }
            }
            Pacing::Open { .. } => {
                while self.inflight.len() < self.depth {
                    let Some(due) = self.pacing.due() else { break };
                    if due > now || !self.ticket() {
                        break;
                    }
                    self.push_request(due, open_loop_start(due, now, self.room_since), now);
                    self.pacing.advance();
                }
            }
        }
    }

    /// Counts one failure for every request in flight (their classes' error columns).
    fn fail_inflight(&mut self, per_request_timeout: bool) {
        let mut s = self.stats.borrow_mut();
        if per_request_timeout {
            s.errors.timeout += self.inflight.len() as u64;
        } else {
            s.errors.read += 1;
        }
        for f in &self.inflight {
            s.class_error(f.class);
        }
    }

    /// Sends and receives on one established connection until it must be replaced.
    /// `scheduled`: when this connection was meant to exist (for the Delay figure).
    async fn drive<T: Transport>(
        &mut self,
        fd: &AsyncFd<TcpStream>,
        transport: &mut T,
        scheduled: Instant,
    ) -> End {
        let timeout = self.shared.cfg.timeout;
        let mut first_send = true;
        self.room_since = Instant::now();
        loop {
            let now = Instant::now();
            self.queue_due(now);
            if self.inflight.is_empty() && self.exhausted {
                return End::Finished;
            }
            if !self.wbuf.is_empty() {
                if first_send {
                    first_send = false;
                    let due = match self.pacing {
                        Pacing::Closed => scheduled,
                        Pacing::Open { .. } => self.inflight.front().map_or(now, |f| f.intended),
                    };
                    let delay = now.saturating_duration_since(due);
                    let mut s = self.stats.borrow_mut();
                    record(&mut s.delay, delay);
                    if delay > timeout {
                        s.errors.delay_timeout += 1;
                    }
                }
                if let Err(e) = transport.write_all(fd, &self.wbuf, now + timeout).await {
                    if e.kind() == io::ErrorKind::TimedOut {
                        self.fail_inflight(true);
                    } else {
                        self.stats.borrow_mut().errors.write += 1;
                        for f in &self.inflight {
                            self.stats.borrow_mut().class_error(f.class);
                        }
                    }
                    return End::Reconnect;
                }
            }
            match self.wait_and_read(fd, transport, timeout).await {
                None => {}
                Some(end) => return end,
            }
        }
    }

    /// Waits until the socket is readable or a timer is due (next open-loop send, or the
    /// oldest request's timeout), then reads and frames what arrived. `None`: carry on.
    /// Bytes the transport already holds (TLS) are read without waiting.
    async fn wait_and_read<T: Transport>(
        &mut self,
        fd: &AsyncFd<TcpStream>,
        transport: &mut T,
        timeout: Duration,
    ) -> Option<End> {
        if transport.buffered() {
            return self.read_and_frame(fd, None, transport);
        }
        let now = Instant::now();
        let read_deadline = self.inflight.front().map(|f| f.sent + timeout);
        let send_due = if self.inflight.len() < self.depth && !self.exhausted {
            self.pacing.due()
        } else {
            None
        };
        let wake = match (read_deadline, send_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let readable = match wake {
            Some(w) => {
                // Keep an armed timer that fires no later than needed: re-arming the
                // timer wheel on every request is the costly part, and an early wake-up
                // only re-checks.
                let armed = self.timer.deadline().into_std();
                if !(armed <= w && armed > now) {
                    self.timer.as_mut().reset(w.into());
                }
                tokio::select! {
                    biased;
                    r = fd.readable() => Some(r),
                    () = &mut self.timer => None,
                }
            }
            None => Some(fd.readable().await),
        };
        let guard = match readable {
            None => {
                // A timer fired: is the oldest request overdue?
                let now = Instant::now();
                if self
                    .inflight
                    .front()
                    .is_some_and(|f| now >= f.sent + timeout)
                {
                    self.fail_inflight(true);
                    return Some(End::Reconnect);
                }
                return None;
            }
            Some(Err(_)) => {
                self.fail_inflight(false);
                return Some(End::Reconnect);
            }
            Some(Ok(g)) => g,
        };
        self.read_and_frame(fd, Some(guard), transport)
    }

    /// Reads once (through the readiness `guard`, or straight from what the transport
    /// buffered when there is none) and frames what arrived.
    #[inline]
    fn read_and_frame<T: Transport>(
        &mut self,
        fd: &AsyncFd<TcpStream>,
        guard: Option<AsyncFdReadyGuard<'_, TcpStream>>,
        transport: &mut T,
    ) -> Option<End> {
        if self.discard && self.start == self.end && transport.can_discard() {
            let left = self.reader.discardable();
            if left >= DISCARD_MIN {
                return self.discard_body(fd, guard, transport, left);
            }
        }
        if self.end == self.rbuf.len() {
            self.rbuf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let space = self.rbuf.len() - self.end;
        let (rbuf, end) = (&mut self.rbuf, self.end);
        let (n, guard) = match socket_op(fd, guard, transport, |t, s| t.read(s, &mut rbuf[end..])) {
            Moved::Bytes(n, g) => (n, g),
            other => return self.not_moved(other),
        };
        if let Some(mut g) = guard {
            if transport.drained(n, space) {
                // The socket is empty: skip the read that would only say EAGAIN.
                g.clear_ready();
            }
        }
        self.end += n;
        self.stats.borrow_mut().bytes += n as u64;
        self.frame_responses(Instant::now())
    }

    /// The read buffer is empty and `left` bytes of the current body are still to come:
    /// drops what the socket holds of them unread ([`Transport::discard`]), so a large
    /// body costs the client no copy (`--copy-bodies` turns this off).
    fn discard_body<T: Transport>(
        &mut self,
        fd: &AsyncFd<TcpStream>,
        guard: Option<AsyncFdReadyGuard<'_, TcpStream>>,
        transport: &mut T,
        left: u64,
    ) -> Option<End> {
        let want = left.min(usize::MAX as u64) as usize;
        let (n, guard) = match socket_op(fd, guard, transport, |t, s| t.discard(s, want)) {
            Moved::Bytes(n, g) => (n, g),
            other => return self.not_moved(other),
        };
        if let Some(mut g) = guard {
            if n < want {
                g.clear_ready(); // the socket held less than the body's rest: drained
            }
        }
        {
            let mut st = self.stats.borrow_mut();
            st.bytes += n as u64;
            st.discarded += n as u64;
        }
        match self.reader.discarded(n as u64) {
            Some(done) => self.finished(done, Instant::now()),
            None => None,
        }
    }

    /// What a socket operation that moved no bytes means for the connection: wait for
    /// readiness (`None`), or end it.
    fn not_moved(&mut self, m: Moved<'_>) -> Option<End> {
        match m {
            Moved::Bytes(..) | Moved::NotNow => None,
            Moved::Closed => Some(self.on_eof()),
            Moved::Failed => {
                self.fail_inflight(false);
                Some(End::Reconnect)
            }
        }
    }

    /// Frames every complete response in the buffer and records it.
    fn frame_responses(&mut self, now: Instant) -> Option<End> {
        loop {
            let (used, step) = match self.reader.advance(&self.rbuf[self.start..self.end]) {
                Ok(r) => r,
                Err(_) => {
                    self.fail_inflight(false);
                    return Some(End::Reconnect);
                }
            };
            self.start += used;
            match step {
                Step::NeedMore => break,
                Step::Done(done) => {
                    if let Some(end) = self.finished(done, now) {
                        return Some(end);
                    }
                }
            }
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        None
    }

    /// A response is complete: it answers the oldest request in flight, and is recorded.
    /// `Some` when the connection must be replaced (an answer nobody asked for, or the
    /// server closes after it).
    fn finished(&mut self, done: Completed, now: Instant) -> Option<End> {
        let was_full = self.inflight.len() >= self.depth;
        let Some(f) = self.inflight.pop_front() else {
            // A response nobody asked for: the stream is out of sync.
            self.stats.borrow_mut().errors.read += 1;
            return Some(End::Reconnect);
        };
        if was_full {
            self.room_since = now;
        }
        self.stats.borrow_mut().response(
            f.class,
            done.status,
            done.bytes,
            done.verdict,
            now.saturating_duration_since(f.from),
            now.saturating_duration_since(f.sent),
        );
        if !done.keep_alive {
            // The server closes after this response; pipelined requests behind it are
            // lost and resent on the next connection's schedule.
            return Some(End::Reconnect);
        }
        None
    }

    /// The server closed the connection.
    fn on_eof(&mut self) -> End {
        match self.reader.eof() {
            Ok(Some(done)) => {
                // A close-delimited body is complete (the connection ends either way).
                let _ = self.finished(done, Instant::now());
            }
            Ok(None) if self.inflight.is_empty() => {} // idle keep-alive close: not an error
            Ok(None) | Err(_) => self.fail_inflight(false),
        }
        End::Reconnect
    }
}

#[cfg(test)]
mod tests;
