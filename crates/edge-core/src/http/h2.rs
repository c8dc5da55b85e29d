//! HTTP/2 for clients, on the `h2` crate: each stream is served by the same session
//! code, router, handlers and cache as an HTTP/1.1 request.
//!
//! A stream's request becomes a [`edge_http::RequestHead`] directly
//! ([`edge_http::request_from_fields`]: pseudo-headers become the method, target and
//! `Host`, cookies are joined, connection-specific fields dropped), with every limit and
//! check our HTTP/1.1 parser applies. A body without `content-length` is presented
//! chunked. The handler's response head, version-neutral, goes to the stream's
//! [`super::head::HeadSlot`] and out as HEADERS; its body's bytes, written into the
//! stream's [`StreamIo`], go out as DATA frames as the client's flow-control window
//! allows.
//!
//! Defences (each counted in [`crate::metrics::H2Stats`]):
//! - at most [`MAX_CONCURRENT_STREAMS`] streams per connection, and as many stream
//!   runners: a stream the client resets keeps its slot until its runner is done with
//!   it, so resetting streams cannot start more work than the limit (rapid reset,
//!   CVE-2023-44487); a client that resets more than [`RESET_FLOOD`] streams, and more
//!   than half of its streams, gets GOAWAY ENHANCE_YOUR_CALM;
//! - the header list (after HPACK decoding) is bounded by `client_max_header_size`, so
//!   an HPACK bomb or a flood of CONTINUATION frames ends in an error, not in memory;
//! - resets the server must send, and resets the client sends before a stream is
//!   accepted, are bounded by the `h2` crate's limits set here.

use super::conn::{ClientIo, Conn, ConnInfo};
use super::h2stream::{request_head, ConnState, Job, RunnerSlot, StreamIo};
use super::idle::IdleEnd;
use super::session::Service;
use crate::metrics::H2Stats;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How long an idle connection keeps its stream runners (a busy connection's next
/// requests come well within it).
const RUNNER_GRACE: std::time::Duration = std::time::Duration::from_millis(100);
/// Idle runners a connection keeps (past them a runner done with its stream ends): a
/// busy connection holds at most this many idle streams' state (~6 KB each) beyond
/// its open streams, however many it had open at its peak.
const IDLE_RUNNERS_KEPT: usize = 16;
/// How long a connection with nothing left to send stays after its GOAWAY for the
/// client to close it (the `h2` crate waits for the answer to a PING first: a client
/// far away needs a round trip); then it is closed (nginx's `lingering_timeout` is 5 s
/// too).
const GOAWAY_LINGER: std::time::Duration = std::time::Duration::from_secs(5);
/// Streams a client may have open at once (nginx: `http2_max_concurrent_streams` 128).
pub const MAX_CONCURRENT_STREAMS: u32 = 128;
/// Flow-control windows we grant the client for request bodies.
const STREAM_WINDOW: u32 = 256 * 1024;
const CONN_WINDOW: u32 = 1024 * 1024;
/// Response bytes the `h2` crate may hold per stream beyond the client's window.
const MAX_SEND_BUFFER: usize = 256 * 1024;
/// Client resets of streams not yet accepted, before GOAWAY (h2's own rapid-reset
/// defence; ours counts the accepted ones).
const MAX_PENDING_ACCEPT_RESETS: usize = 64;
/// Streams we reset on the client's errors, before GOAWAY.
const MAX_LOCAL_ERROR_RESETS: usize = 1024;
/// Client resets of accepted streams per connection past which, when they are also
/// more than half of its streams, the connection is closed (rapid reset).
pub const RESET_FLOOD: u64 = 200;

/// Serves one HTTP/2 connection (after TLS and ALPN, or h2c with prior knowledge).
///
/// `client` is the connection's client address ([`Conn::client`]): its `peer`, or a
/// PROXY header's source; `held`, the `limit_conn` counts it took when accepted (kept
/// with the connection's state, for all its streams, until it closes).
pub async fn serve<S, T>(
    w: Rc<S>,
    io: T,
    peer: SocketAddr,
    client: SocketAddr,
    info: ConnInfo,
    held: crate::limit::Held,
) where
    S: Service + 'static,
    T: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let cfg = w.config();
    let params = S::params(&cfg);
    let timeouts = *params.timeouts;
    let header_list = params.limits.max_header_bytes.min(u32::MAX as usize) as u32;
    drop(cfg);
    let stats = &w.stats().h2;
    stats.connections.fetch_add(1, Relaxed);
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONN_WINDOW)
        .max_header_list_size(header_list)
        .max_send_buffer_size(MAX_SEND_BUFFER)
        .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESETS)
        .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS));
    let gather = Gather::new(io);
    let mut conn = match tokio::time::timeout(
        timeouts.client_header,
        builder.handshake::<_, Bytes>(Coalesce(gather.clone())),
    )
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            count_error(stats, &e);
            tracing::debug!("client {peer}: HTTP/2 preface: {e}");
            return;
        }
        Err(_) => return,
    };
    let state = Rc::new(ConnState::default());
    state.held.absorb(held);
    if client != peer {
        state.client.set(Some(client));
    }
    // However the connection ends, its runners end with their stream.
    let _runners = RetireOnDrop(&state);
    let mut goaway_sent = false;
    // How much of keepalive_timeout the connection has already waited idle.
    let mut idle_spent = std::time::Duration::ZERO;
    // While responses wait in the crate for the client's window: bytes written when
    // last checked, and for how long none were.
    let mut last_written = 0;
    let mut stalled = std::time::Duration::ZERO;
    // The streams taken in one go (kept: one allocation per connection).
    let mut batch = Vec::new();
    loop {
        if !goaway_sent && w.draining() {
            // Stopping or upgrading: GOAWAY, let the open streams finish.
            conn.graceful_shutdown();
            goaway_sent = true;
        }
        if state.active.get() >= MAX_CONCURRENT_STREAMS as usize {
            // Every slot busy (streams the client reset included): drive the
            // connection without taking new streams until a runner is done with one.
            tokio::select! {
                biased;
                _ = state.slot_free.notified() => continue,
                r = std::future::poll_fn(|cx| conn.poll_closed(cx)) => {
                    if let Err(e) = r {
                        count_error(stats, &e);
                    }
                    break;
                }
            }
        }
        // What the connection waits for besides new streams:
        // - streams open: their end (or a stop);
        // - none open, but responses still queued in the `h2` crate (sent as the
        //   client's window allows): the client reading them, in RUNNER_GRACE steps,
        //   as long as it reads something within send_timeout;
        // - after GOAWAY, nothing left: the client closing, for GOAWAY_LINGER;
        // - else idle: keepalive_timeout (its first RUNNER_GRACE with the runners
        //   kept, then without).
        let busy = state.active.get() > 0;
        let phase = if busy {
            Phase::Busy
        } else if conn.has_streams() {
            Phase::Sending
        } else if goaway_sent {
            Phase::Linger
        } else {
            let left = timeouts.keepalive.saturating_sub(idle_spent);
            if left > RUNNER_GRACE && !state.idle_runners.borrow().is_empty() {
                Phase::Grace
            } else {
                retire_runners(&state);
                gather.borrow_mut().release();
                Phase::Idle(left)
            }
        };
        let wait = match phase {
            Phase::Busy => std::time::Duration::from_secs(86_400),
            Phase::Sending | Phase::Grace => RUNNER_GRACE,
            Phase::Linger => GOAWAY_LINGER,
            Phase::Idle(left) => left,
        };
        let next = tokio::select! {
            biased;
            r = std::future::poll_fn(|cx| poll_accept_gathered(&mut conn, &gather, stats, cx)) => r,
            _ = std::future::poll_fn(|cx| state.poll_all_done(cx)), if busy => continue,
            end = w.idle().wait(wait, !goaway_sent), if !goaway_sent || !busy => {
                if end == IdleEnd::Draining {
                    conn.graceful_shutdown();
                    goaway_sent = true;
                    continue;
                }
                match phase {
                    Phase::Busy => {}
                    Phase::Sending => {
                        let written = gather.borrow().written;
                        if written != last_written {
                            last_written = written;
                            stalled = std::time::Duration::ZERO;
                        } else {
                            stalled += wait;
                            if stalled >= timeouts.send {
                                // The client reads nothing of what is queued for it.
                                tracing::debug!("client {peer}: HTTP/2: send_timeout");
                                close(&mut conn, timeouts.send).await;
                                break;
                            }
                        }
                    }
                    Phase::Linger => {
                        // GOAWAY went out, nothing is left to send, and the client has
                        // not closed (nor answered the PING that follows GOAWAY).
                        close(&mut conn, timeouts.send).await;
                        break;
                    }
                    Phase::Grace => {
                        // The runners' grace is over; the rest of keepalive_timeout
                        // follows.
                        idle_spent += wait;
                        retire_runners(&state);
                        gather.borrow_mut().release();
                    }
                    Phase::Idle(_) => {
                        conn.graceful_shutdown();
                        goaway_sent = true;
                    }
                }
                continue;
            }
        };
        stalled = std::time::Duration::ZERO;
        idle_spent = std::time::Duration::ZERO;
        match next {
            None => break,
            Some(Err(e)) => {
                count_error(stats, &e);
                tracing::debug!("client {peer}: HTTP/2: {e}");
                break;
            }
            Some(Ok(first)) => {
                // Every request already received is taken now (each stream's runner
                // runs after this task yields, so the responses ready at once leave
                // together in the connection's next write).
                batch.push(first);
                let mut end = None;
                while state.active.get() + batch.len() < MAX_CONCURRENT_STREAMS as usize {
                    let next = std::future::poll_fn(|cx| {
                        Poll::Ready(poll_accept_gathered(&mut conn, &gather, stats, cx))
                    });
                    match next.await {
                        Poll::Ready(Some(Ok(s))) => batch.push(s),
                        Poll::Ready(other) => {
                            end = Some(other);
                            break;
                        }
                        Poll::Pending => break,
                    }
                }
                for (req, respond) in batch.drain(..) {
                    start_stream(&w, &state, req, respond, peer, info);
                }
                match end {
                    Some(None) => break,
                    Some(Some(Err(e))) => {
                        count_error(stats, &e);
                        tracing::debug!("client {peer}: HTTP/2: {e}");
                        break;
                    }
                    _ => {}
                }
            }
        }
        let resets = state.client_resets.get();
        if resets > RESET_FLOOD && resets * 2 > state.streams.get() {
            stats.rapid_reset_goaways.fetch_add(1, Relaxed);
            tracing::warn!(
                "client {peer}: HTTP/2 rapid reset: {resets} of {} streams reset, closing",
                state.streams.get()
            );
            conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
            // Sends the GOAWAY, bounded by send_timeout.
            let _ = tokio::time::timeout(
                timeouts.send,
                std::future::poll_fn(|cx| conn.poll_closed(cx)),
            )
            .await;
            return;
        }
    }
}

/// What a connection's wait is for (see [`serve`]).
#[derive(Clone, Copy)]
enum Phase {
    Busy,
    Sending,
    Linger,
    Grace,
    Idle(std::time::Duration),
}

/// Ends a connection now: GOAWAY with the last stream processed, what is queued
/// written, TLS closed; all within `limit`.
async fn close<T: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut h2::server::Connection<Coalesce<T>, Bytes>,
    limit: std::time::Duration,
) {
    conn.abrupt_shutdown(Reason::NO_ERROR);
    let _ = tokio::time::timeout(limit, std::future::poll_fn(|cx| conn.poll_closed(cx))).await;
}

/// Bytes of frames gathered before they are written (then split into TLS records of
/// 16 KiB).
const COALESCE: usize = 64 * 1024;
/// A write at least this big is not gathered but passed on (after what is gathered).
const PASS_THROUGH: usize = 4 * 1024;

/// The connection's socket as the `h2` crate sees it: writes are gathered, and while
/// the connection task polls the crate for new streams ([`Gather::defer`]) its flushes
/// are put off, so that what it writes in one poll leaves in one write when the poll is
/// over ([`poll_accept_gathered`]). Without it every response of
/// 256 bytes or more was its own write: the crate holds one such DATA payload at a time
/// and flushes the socket before it takes the next.
struct Coalesce<T>(Rc<RefCell<Gather<T>>>);

struct Gather<T> {
    inner: T,
    buf: Vec<u8>,
    /// Bytes of `buf` already written.
    pos: usize,
    /// Flushes only gather (the caller drains after the poll).
    defer: bool,
    /// Bytes written to the socket so far.
    written: u64,
}

impl<T: AsyncWrite + Unpin> Gather<T> {
    fn new(inner: T) -> Rc<RefCell<Gather<T>>> {
        Rc::new(RefCell::new(Gather {
            inner,
            buf: Vec::new(),
            pos: 0,
            defer: false,
            written: 0,
        }))
    }

    /// Writes out what is gathered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.pos < self.buf.len() {
            match ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.pos..])) {
                Ok(0) => return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    self.pos += n;
                    self.written += n as u64;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        self.buf.clear();
        self.pos = 0;
        if self.buf.capacity() > COALESCE {
            self.buf.shrink_to(COALESCE);
        }
        Poll::Ready(Ok(()))
    }

    /// Gives the gathering buffer back when it holds nothing (the connection is idle:
    /// an idle connection should not keep up to [`COALESCE`] bytes).
    fn release(&mut self) {
        if self.pos == self.buf.len() && self.buf.capacity() > 0 {
            self.buf = Vec::new();
            self.pos = 0;
        }
    }

    /// Writes out what is gathered and flushes the socket (TLS records included).
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesce<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0.borrow_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesce<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.poll_write_vectored(cx, &[std::io::IoSlice::new(data)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let mut g = self.0.borrow_mut();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total >= PASS_THROUGH || g.buf.len() + total > COALESCE {
            // What is gathered goes first (order), then a big piece (a DATA frame of
            // a large body, its 9-byte head with it) goes straight to TLS, which
            // copies it into its records anyway: no copy here.
            ready!(g.poll_drain(cx))?;
            if total >= PASS_THROUGH {
                let r = Pin::new(&mut g.inner).poll_write_vectored(cx, bufs);
                if let Poll::Ready(Ok(n)) = r {
                    g.written += n as u64;
                }
                return r;
            }
        }
        for b in bufs {
            g.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let mut g = self.0.borrow_mut();
        if g.defer {
            return Poll::Ready(Ok(()));
        }
        g.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let mut g = self.0.borrow_mut();
        ready!(g.poll_drain(cx))?;
        Pin::new(&mut g.inner).poll_shutdown(cx)
    }
}

/// Polls the connection for its next stream with the socket's flushes put off, then
/// writes what that poll produced (the frames of every response ready) at once. A
/// write that cannot finish waits for the socket like any (the task is woken when it
/// can go on); a failed one ends the connection (counted as an I/O error), as the
/// `h2` crate's own would.
fn poll_accept_gathered<T: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut h2::server::Connection<Coalesce<T>, Bytes>,
    gather: &RefCell<Gather<T>>,
    stats: &H2Stats,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Job, h2::Error>>> {
    gather.borrow_mut().defer = true;
    let r = conn.poll_accept(cx);
    let mut g = gather.borrow_mut();
    g.defer = false;
    if let Poll::Ready(Some(Err(_))) = r {
        // The crate's own error says more than a write on its way out would.
        return r;
    }
    if let Poll::Ready(Err(e)) = g.poll_flush(cx) {
        tracing::debug!("HTTP/2: write: {e}");
        stats.errors[IO_ERROR].fetch_add(1, Relaxed);
        return Poll::Ready(None);
    }
    r
}

/// Serves one stream: hands it to an idle runner of the connection, or starts one.
fn start_stream<S: Service + 'static>(
    w: &Rc<S>,
    state: &Rc<ConnState>,
    req: http::Request<RecvStream>,
    respond: SendResponse<Bytes>,
    peer: SocketAddr,
    info: ConnInfo,
) {
    w.stats().h2.streams.fetch_add(1, Relaxed);
    state.streams.set(state.streams.get() + 1);
    state.active.set(state.active.get() + 1);
    let job = (req, respond);
    if let Some(r) = state.idle_runners.borrow_mut().pop() {
        r.give(job);
        return;
    }
    let (w, st) = (w.clone(), state.clone());
    tokio::task::spawn_local(run_streams(w, st, job, peer, info));
}

struct RetireOnDrop<'a>(&'a ConnState);

impl Drop for RetireOnDrop<'_> {
    fn drop(&mut self) {
        self.0.closed.set(true);
        retire_runners(self.0);
    }
}

/// Tells the connection's idle runners to end: it has no stream open (an idle HTTP/2
/// connection holds no runner, nor its stream's state) or it is gone.
fn retire_runners(state: &ConnState) {
    for r in state.idle_runners.borrow_mut().drain(..) {
        r.end();
    }
}

/// A stream runner: a task that serves one stream after another on one connection.
/// The connection's streams are served by as many runners as are busy at once (at
/// most [`MAX_CONCURRENT_STREAMS`]); a runner done with a stream waits for the next,
/// unless [`IDLE_RUNNERS_KEPT`] already wait. So a stream mostly costs neither a task
/// (an allocation aligned to a cache line, the runtime's bookkeeping of it) nor an
/// allocation of its ~6 KB state, which goes into the runner's one slot (61.6k ->
/// 59.9k user-space instructions per 1 KiB hit, callgrind).
async fn run_streams<S: Service + 'static>(
    w: Rc<S>,
    st: Rc<ConnState>,
    first: Job,
    peer: SocketAddr,
    info: ConnInfo,
) {
    let me = Rc::new(RunnerSlot::default());
    let mut slot = Box::pin(None);
    let mut job = Some(first);
    while let Some((req, respond)) = job.take() {
        slot.set(Some(stream_task(&*w, req, respond, peer, info, &st)));
        if let Some(f) = slot.as_mut().as_pin_mut() {
            f.await;
        }
        slot.set(None);
        let resets = st.resets_unreported.take();
        if resets > 0 {
            w.stats().h2.client_resets.fetch_add(resets, Relaxed);
        }
        st.active.set(st.active.get() - 1);
        st.slot_free.notify_one();
        if st.active.get() == 0 {
            st.wake_connection();
        }
        if st.closed.get() || st.idle_runners.borrow().len() >= IDLE_RUNNERS_KEPT {
            break;
        }
        st.idle_runners.borrow_mut().push(me.clone());
        job = std::future::poll_fn(|cx| me.poll_next(cx)).await;
    }
}

/// Where [`H2Stats::errors`] counts I/O errors.
const IO_ERROR: usize = 6;

fn count_error(stats: &H2Stats, e: &h2::Error) {
    let i = if e.is_io() {
        IO_ERROR
    } else {
        match e.reason() {
            Some(Reason::NO_ERROR) | Some(Reason::CANCEL) => return,
            Some(Reason::PROTOCOL_ERROR) => 0,
            Some(Reason::FLOW_CONTROL_ERROR) => 1,
            Some(Reason::FRAME_SIZE_ERROR) => 2,
            Some(Reason::COMPRESSION_ERROR) => 3,
            Some(Reason::ENHANCE_YOUR_CALM) => 4,
            _ => 5,
        }
    };
    stats.errors[i].fetch_add(1, Relaxed);
}

async fn stream_task<S: Service>(
    w: &S,
    req: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    peer: SocketAddr,
    info: ConnInfo,
    state: &Rc<ConnState>,
) {
    let (parts, body) = req.into_parts();
    let has_body = !body.is_end_stream();
    let head = {
        let cfg = w.config();
        let params = S::params(&cfg);
        request_head(&parts, has_body, params.limits, w.spare_head())
    };
    let (head, len) = match head {
        Ok(h) => h,
        Err(status) => {
            let resp = http::Response::builder().status(status).body(());
            if let Ok(r) = resp {
                let _ = respond.send_response(r, true);
            }
            return;
        }
    };
    let chunked = head.body == edge_http::BodyKind::Chunked;
    let io = StreamIo::new(body, has_body, chunked, respond, state.clone());
    let mut conn = Conn::over(ClientIo::H2(Box::new(io)), peer, info);
    if let Some(client) = state.client.get() {
        conn.client = client;
    }
    super::session::serve_stream(w, conn, head, len).await;
}
