//! HTTP/2 for clients (RFC 9113), our own: each stream is served by the same session
//! code, router, handlers and cache as an HTTP/1.1 request.
//!
//! The connection's task reads frames, decodes header blocks with our HPACK decoder
//! (`edge_http::h2`), and hands each request to a stream runner as a
//! [`edge_http::RequestHead`] built directly from the decoded list (pseudo-headers
//! become the method, target and `Host`, cookies are joined; every limit and check our
//! HTTP/1.1 parser applies). A body without `content-length` is presented chunked. A
//! stream's response head, version-neutral, is HPACK-encoded straight from its field
//! lines into the connection's output buffer as HEADERS; its body's bytes go there as
//! DATA frames as the client's windows allow ([`super::h2stream`]). The task writes
//! what every stream queued in one write when they have run.
//!
//! Defences (each counted in [`crate::metrics::H2Stats`]):
//! - at most [`MAX_CONCURRENT_STREAMS`] streams per connection (more are refused with
//!   REFUSED_STREAM); a stream the client resets keeps its place until its runner is
//!   done with it, so resetting streams cannot start more work than the limit (rapid
//!   reset, CVE-2023-44487); a client that resets more than [`RESET_FLOOD`] streams
//!   before their response was complete, and more than half of its streams, gets
//!   GOAWAY ENHANCE_YOUR_CALM;
//! - the header list (after HPACK decoding) is bounded by `client_max_header_size`: a
//!   list over it is answered 431 (decoded to keep the HPACK state, not kept), one over
//!   four times it ends the connection (an HPACK bomb); a header block may span at
//!   most [`max_continuations`] CONTINUATION frames (CONTINUATION floods);
//! - request bodies are bounded by the windows we grant, and must match their
//!   content-length (else RST_STREAM PROTOCOL_ERROR);
//! - the output buffer is bounded: while it holds [`OUT_HIGH`] bytes the connection
//!   reads nothing more (a flood of PINGs or SETTINGS from a client that does not read
//!   our answers stops at TCP); streams we reset on the client's errors are bounded
//!   ([`MAX_LOCAL_ERROR_RESETS`]).

use super::conn::{ClientIo, Conn, ConnInfo};
use super::h2stream::{
    ConnState, Job, RunnerSlot, Stream, StreamIo, CONN_WINDOW, MAX_CONCURRENT_STREAMS, OUT_HIGH,
    STREAM_WINDOW,
};
use super::head::{BodyLen, PendingHead};
use super::idle::IdleEnd;
use super::session::Service;
use crate::metrics::H2Stats;
use bytes::{Buf, Bytes, BytesMut};
use edge_http::h2::{self as wire, hpack, FrameHead, RequestError};
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How long an idle connection keeps its stream runners (a busy connection's next
/// requests come well within it).
const RUNNER_GRACE: std::time::Duration = std::time::Duration::from_millis(100);
/// Idle runners a connection keeps (past them a runner done with its stream ends): a
/// busy connection holds at most this many idle streams' state beyond its open
/// streams, however many it had open at its peak.
const IDLE_RUNNERS_KEPT: usize = 16;
/// Streams we reset on the client's errors, before GOAWAY.
const MAX_LOCAL_ERROR_RESETS: usize = 1024;
/// Client resets of streams whose response was not complete, per connection, past
/// which (when they are also more than half of its streams) the connection is closed
/// (rapid reset).
pub const RESET_FLOOD: u64 = 200;
/// The largest frame we take (our SETTINGS_MAX_FRAME_SIZE: the default).
const MAX_FRAME: usize = wire::DEFAULT_MAX_FRAME;
/// Read buffer per connection while it is busy.
const READ_BUF: usize = 16 * 1024 + 9;

/// CONTINUATION frames a header block may have: enough for a list at the limit in
/// full frames, and at least 5.
fn max_continuations(header_list: usize) -> usize {
    (header_list * 5 / 4 / MAX_FRAME).max(5)
}

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
    let header_list = params.limits.max_header_bytes.min(u32::MAX as usize);
    drop(cfg);
    w.stats().h2.connections.fetch_add(1, Relaxed);
    let state = Rc::new(ConnState::default());
    state.held.absorb(held);
    if client != peer {
        state.client.set(Some(client));
    }
    // However the connection ends, its runners end with their stream.
    let _runners = RetireOnDrop(&state);
    let mut d = Driver::new(w.clone(), io, state.clone(), peer, info, header_list);
    // The preface and the client's SETTINGS, within client_header_timeout.
    let hello = std::future::poll_fn(|cx| loop {
        match d.poll_drive(cx) {
            Poll::Ready(Drive::Activity) if d.settings_seen => return Poll::Ready(true),
            Poll::Ready(Drive::Activity) => continue,
            Poll::Ready(Drive::Closed) => return Poll::Ready(false),
            Poll::Pending => return Poll::Pending,
        }
    });
    match tokio::time::timeout(timeouts.client_header, hello).await {
        Ok(true) => {}
        Ok(false) => {
            d.close(timeouts.send).await;
            return;
        }
        Err(_) => return,
    }
    // How much of keepalive_timeout the connection has already waited idle.
    let mut idle_spent = std::time::Duration::ZERO;
    // While responses wait for the client's window: bytes written when last checked,
    // and for how long none were.
    let mut last_written = 0;
    let mut stalled = std::time::Duration::ZERO;
    loop {
        if !d.goaway_sent && w.draining() {
            // Stopping or upgrading: GOAWAY, let the open streams finish.
            d.goaway(wire::NO_ERROR, "");
        }
        // What the connection waits for besides frames:
        // - streams open: their end (or a stop);
        // - none open, but responses still waiting for the client's window: the client
        //   reading them, in RUNNER_GRACE steps, as long as it reads something within
        //   send_timeout;
        // - else idle: keepalive_timeout (its first RUNNER_GRACE with the runners
        //   kept, then without).
        let busy = state.active.get() > 0;
        let phase = if busy {
            Phase::Busy
        } else if d.sending() {
            Phase::Sending
        } else if d.goaway_sent {
            break;
        } else {
            let left = timeouts.keepalive.saturating_sub(idle_spent);
            if left > RUNNER_GRACE && !state.idle_runners.borrow().is_empty() {
                Phase::Grace
            } else {
                retire_runners(&state);
                d.release();
                Phase::Idle(left)
            }
        };
        let wait = match phase {
            Phase::Busy => std::time::Duration::from_secs(86_400),
            Phase::Sending | Phase::Grace => RUNNER_GRACE,
            Phase::Idle(left) => left,
        };
        let goaway_sent = d.goaway_sent;
        let next = tokio::select! {
            biased;
            r = std::future::poll_fn(|cx| d.poll_drive(cx)) => Some(r),
            end = w.idle().wait(wait, !goaway_sent), if !goaway_sent || !busy => {
                if end == IdleEnd::Draining {
                    d.goaway(wire::NO_ERROR, "");
                    continue;
                }
                None
            }
        };
        match next {
            Some(Drive::Closed) => break,
            Some(Drive::Activity) => {
                stalled = std::time::Duration::ZERO;
                idle_spent = std::time::Duration::ZERO;
            }
            None => match phase {
                Phase::Busy => {}
                Phase::Sending => {
                    if d.written != last_written {
                        last_written = d.written;
                        stalled = std::time::Duration::ZERO;
                    } else {
                        stalled += wait;
                        if stalled >= timeouts.send {
                            // The client reads nothing of what is queued for it.
                            tracing::debug!("client {peer}: HTTP/2: send_timeout");
                            d.goaway(wire::NO_ERROR, "");
                            break;
                        }
                    }
                }
                Phase::Grace => {
                    // The runners' grace is over; the rest of keepalive_timeout
                    // follows.
                    idle_spent += wait;
                    retire_runners(&state);
                    d.release();
                }
                Phase::Idle(_) => d.goaway(wire::NO_ERROR, ""),
            },
        }
    }
    d.close(timeouts.send).await;
}

/// What a connection's wait is for (see [`serve`]).
#[derive(Clone, Copy)]
enum Phase {
    Busy,
    Sending,
    Grace,
    Idle(std::time::Duration),
}

/// What [`Driver::poll_drive`] reports.
enum Drive {
    /// Frames came, or the streams' count changed: the connection's wait is
    /// recomputed.
    Activity,
    /// The connection is over (the client closed it, an error, or a GOAWAY and nothing
    /// left to do).
    Closed,
}

/// A header block being received over HEADERS and CONTINUATION frames.
struct Block {
    id: u32,
    end_stream: bool,
    buf: Vec<u8>,
    frames: usize,
}

/// A connection error: the GOAWAY is queued, the connection ends once it is written.
struct ConnError;

/// The connection's task side: the socket, the frames read, and the HPACK decoder.
struct Driver<S, T> {
    w: Rc<S>,
    io: T,
    st: Rc<ConnState>,
    peer: SocketAddr,
    info: ConnInfo,
    rbuf: BytesMut,
    /// Bytes of the output buffer already written.
    wpos: usize,
    /// Bytes written to the socket so far.
    written: u64,
    read_eof: bool,
    dec: hpack::Decoder,
    list: hpack::HeaderList,
    header_list: usize,
    /// The highest stream the client opened.
    last_id: u32,
    block: Option<Block>,
    preface_done: bool,
    settings_seen: bool,
    goaway_sent: bool,
    /// The client sent GOAWAY: no more streams come.
    peer_goaway: bool,
    /// A connection error was queued: write it and end.
    closing: bool,
    local_resets: usize,
    /// `st.active` when last reported.
    active_seen: usize,
}

impl<S: Service + 'static, T: AsyncRead + AsyncWrite + Unpin> Driver<S, T> {
    fn new(
        w: Rc<S>,
        io: T,
        st: Rc<ConnState>,
        peer: SocketAddr,
        info: ConnInfo,
        header_list: usize,
    ) -> Self {
        {
            let mut inner = st.inner.borrow_mut();
            let mut p = Vec::with_capacity(18);
            for (id, v) in [
                (
                    wire::SETTINGS_MAX_CONCURRENT_STREAMS,
                    MAX_CONCURRENT_STREAMS,
                ),
                (wire::SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW),
                (wire::SETTINGS_MAX_HEADER_LIST_SIZE, header_list as u32),
            ] {
                p.extend_from_slice(&id.to_be_bytes());
                p.extend_from_slice(&v.to_be_bytes());
            }
            wire::put_frame(&mut inner.out, wire::SETTINGS, 0, 0, &p);
            let more = CONN_WINDOW - wire::DEFAULT_WINDOW as u32;
            wire::put_window_update(&mut inner.out, 0, more);
            inner.conn_recv = CONN_WINDOW as i64;
        }
        Driver {
            w,
            io,
            st,
            peer,
            info,
            rbuf: BytesMut::new(),
            wpos: 0,
            written: 0,
            read_eof: false,
            dec: hpack::Decoder::new(4096),
            list: hpack::HeaderList::default(),
            header_list,
            last_id: 0,
            block: None,
            preface_done: false,
            settings_seen: false,
            goaway_sent: false,
            peer_goaway: false,
            closing: false,
            local_resets: 0,
            active_seen: 0,
        }
    }

    fn stats(&self) -> &H2Stats {
        &self.w.stats().h2
    }

    /// Frames queued, or response bytes waiting for the client's window.
    fn sending(&self) -> bool {
        self.st.inner.borrow().sending()
    }

    /// Gives back the buffers' memory (the connection is idle).
    fn release(&mut self) {
        if self.rbuf.is_empty() {
            self.rbuf = BytesMut::new();
        }
        let mut inner = self.st.inner.borrow_mut();
        if inner.out.is_empty() {
            inner.out = Vec::new();
        }
        self.list.shrink();
    }

    /// Queues GOAWAY: no stream past the last one opened will be served. A graceful one
    /// (NO_ERROR) goes once; an error's goes even after it (RFC 9113 6.8 allows more
    /// than one).
    fn goaway(&mut self, code: u32, debug: &str) {
        if self.goaway_sent && code == wire::NO_ERROR {
            return;
        }
        self.goaway_sent = true;
        let mut inner = self.st.inner.borrow_mut();
        wire::put_goaway(&mut inner.out, self.last_id, code, debug.as_bytes());
        inner.wake_conn();
    }

    /// A connection error: GOAWAY with `code`, counted; every stream fails.
    fn conn_error(&mut self, code: u32, why: &str) -> ConnError {
        tracing::debug!(
            "client {}: HTTP/2 connection error {code:#x} {why}",
            self.peer
        );
        count_error(self.stats(), code);
        self.end_connection(code, why)
    }

    /// GOAWAY with `code`; every stream fails; the connection ends once it is written.
    fn end_connection(&mut self, code: u32, debug: &str) -> ConnError {
        self.goaway(code, debug);
        self.fail_streams();
        self.closing = true;
        ConnError
    }

    /// The index of stream `id` in the table, None for a stream already closed; a
    /// frame (`what`) on a stream the client never opened is a connection error.
    fn known(&mut self, id: u32, what: &'static str) -> Result<Option<usize>, ConnError> {
        let i = self.st.inner.borrow().find(id);
        if i.is_none() && id > self.last_id {
            return Err(self.conn_error(wire::PROTOCOL_ERROR, what));
        }
        Ok(i)
    }

    /// Every stream fails from now on (the connection is ending).
    fn fail_streams(&mut self) {
        let mut inner = self.st.inner.borrow_mut();
        inner.dead = true;
        for s in &mut inner.streams {
            s.reset = true;
            s.wake_all();
        }
    }

    /// The socket failed (`what`: a read or a write): counted, every stream fails, the
    /// connection is over.
    fn io_failed(&mut self, what: &str, e: std::io::Error) -> Drive {
        tracing::debug!("client {}: HTTP/2: {what}: {e}", self.peer);
        self.stats().errors[IO_ERROR].fetch_add(1, Relaxed);
        self.fail_streams();
        Drive::Closed
    }

    /// Writes the output buffer; Ready(Ok) once it is all written and flushed.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        loop {
            let mut inner = self.st.inner.borrow_mut();
            if self.wpos >= inner.out.len() {
                inner.out.clear();
                if inner.out.capacity() > 4 * OUT_HIGH {
                    inner.out.shrink_to(OUT_HIGH);
                }
                self.wpos = 0;
                drop(inner);
                return Pin::new(&mut self.io).poll_flush(cx);
            }
            match Pin::new(&mut self.io).poll_write(cx, &inner.out[self.wpos..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => {
                    self.wpos += n;
                    self.written += n as u64;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Writes what the streams queued, reads and handles frames; Ready when something
    /// changes what the connection waits for.
    fn poll_drive(&mut self, cx: &mut Context<'_>) -> Poll<Drive> {
        let mut activity = false;
        loop {
            {
                let mut inner = self.st.inner.borrow_mut();
                if !inner
                    .waker
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    inner.waker = Some(cx.waker().clone());
                }
                inner.pump();
            }
            let flushed = match self.poll_write_out(cx) {
                Poll::Ready(Ok(())) => true,
                Poll::Ready(Err(e)) => return Poll::Ready(self.io_failed("write", e)),
                Poll::Pending => false,
            };
            let active = self.st.active.get();
            // Nothing left to do: an error written, or no more streams to come.
            let done = self.closing
                || ((self.goaway_sent || self.peer_goaway || self.read_eof)
                    && self.block.is_none());
            if done && flushed && active == 0 && !self.st.inner.borrow().blocked {
                return Poll::Ready(Drive::Closed);
            }
            if self.closing {
                return Poll::Pending;
            }
            let unwritten = self.st.inner.borrow().out.len() - self.wpos;
            // Every runner busy (streams the client reset included, until their
            // runners are done with them): no new frames until one is free.
            if self.read_eof || unwritten >= OUT_HIGH || active >= MAX_CONCURRENT_STREAMS as usize {
                break;
            }
            if self.rbuf.capacity() - self.rbuf.len() < 4096 {
                self.rbuf.reserve(READ_BUF);
            }
            match poll_read_buf(&mut self.io, cx, &mut self.rbuf) {
                Poll::Ready(Ok(0)) => {
                    self.read_eof = true;
                    activity = true;
                    // A header block left unfinished: nothing more comes for it.
                    self.block = None;
                }
                Poll::Ready(Ok(_)) => {
                    activity = true;
                    let _ = self.process();
                }
                Poll::Ready(Err(e)) => return Poll::Ready(self.io_failed("read", e)),
                Poll::Pending => break,
            }
        }
        let active = self.st.active.get();
        if activity || active != self.active_seen {
            self.active_seen = active;
            return Poll::Ready(Drive::Activity);
        }
        Poll::Pending
    }

    /// Handles the complete frames in the read buffer.
    fn process(&mut self) -> Result<(), ConnError> {
        if !self.preface_done {
            let n = self.rbuf.len().min(wire::PREFACE.len());
            if self.rbuf[..n] != wire::PREFACE[..n] {
                return Err(self.conn_error(wire::PROTOCOL_ERROR, "bad preface"));
            }
            if n < wire::PREFACE.len() {
                return Ok(());
            }
            self.rbuf.advance(n);
            self.preface_done = true;
        }
        while self.rbuf.len() >= 9 {
            let head = FrameHead::parse(self.rbuf[..9].try_into().expect("nine bytes"));
            if head.len > MAX_FRAME {
                return Err(self.conn_error(wire::FRAME_SIZE_ERROR, "frame too large"));
            }
            if self.rbuf.len() < 9 + head.len {
                self.rbuf.reserve(9 + head.len - self.rbuf.len());
                break;
            }
            self.rbuf.advance(9);
            let payload = self.rbuf.split_to(head.len);
            if !self.settings_seen {
                if head.ty != wire::SETTINGS || head.flags & wire::ACK != 0 {
                    return Err(self.conn_error(wire::PROTOCOL_ERROR, "no SETTINGS first"));
                }
                self.settings_seen = true;
            }
            let r = self.frame(head, payload);
            if r.is_err() || self.closing {
                self.rbuf.clear();
                return r;
            }
        }
        Ok(())
    }

    fn frame(&mut self, head: FrameHead, payload: BytesMut) -> Result<(), ConnError> {
        if self.block.is_some() && head.ty != wire::CONTINUATION {
            return Err(self.conn_error(wire::PROTOCOL_ERROR, "expected CONTINUATION"));
        }
        match head.ty {
            wire::DATA => self.data(head, payload),
            wire::HEADERS => self.headers(head, payload),
            wire::CONTINUATION => self.continuation(head, &payload),
            wire::PRIORITY => {
                if head.stream == 0 {
                    return Err(self.conn_error(wire::PROTOCOL_ERROR, "PRIORITY on stream 0"));
                }
                if head.len != 5 {
                    self.stream_error(head.stream, wire::FRAME_SIZE_ERROR)?;
                }
                Ok(())
            }
            wire::RST_STREAM => self.rst_stream(head, &payload),
            wire::SETTINGS => self.settings(head, &payload),
            wire::PING => {
                if head.stream != 0 {
                    return Err(self.conn_error(wire::PROTOCOL_ERROR, "PING on a stream"));
                }
                if head.len != 8 {
                    return Err(self.conn_error(wire::FRAME_SIZE_ERROR, "PING size"));
                }
                if head.flags & wire::ACK == 0 {
                    let mut inner = self.st.inner.borrow_mut();
                    wire::put_frame(&mut inner.out, wire::PING, wire::ACK, 0, &payload);
                }
                Ok(())
            }
            wire::GOAWAY => {
                if head.stream != 0 {
                    return Err(self.conn_error(wire::PROTOCOL_ERROR, "GOAWAY on a stream"));
                }
                self.peer_goaway = true;
                Ok(())
            }
            wire::WINDOW_UPDATE => self.window_update(head, &payload),
            wire::PUSH_PROMISE => Err(self.conn_error(wire::PROTOCOL_ERROR, "PUSH_PROMISE")),
            // Unknown types are ignored (RFC 9113 4.1).
            _ => Ok(()),
        }
    }

    /// Strips a frame's padding (PADDED flag); the padding's length, or a connection
    /// error.
    fn unpad(&mut self, head: &FrameHead, payload: &mut BytesMut) -> Result<usize, ConnError> {
        if head.flags & wire::PADDED == 0 {
            return Ok(0);
        }
        let Some(&pad) = payload.first() else {
            return Err(self.conn_error(wire::FRAME_SIZE_ERROR, "padded frame without length"));
        };
        let pad = pad as usize;
        if pad + 1 > payload.len() {
            return Err(self.conn_error(wire::PROTOCOL_ERROR, "padding too long"));
        }
        payload.advance(1);
        payload.truncate(payload.len() - pad);
        Ok(pad + 1)
    }

    /// Resets stream `id` on its error (if it is open); bounded per connection.
    fn stream_error(&mut self, id: u32, code: u32) -> Result<(), ConnError> {
        {
            let mut inner = self.st.inner.borrow_mut();
            match inner.find(id) {
                Some(i) => inner.reset_stream(i, code),
                None => wire::put_rst(&mut inner.out, id, code),
            }
        }
        self.local_resets += 1;
        if self.local_resets > MAX_LOCAL_ERROR_RESETS {
            return Err(self.conn_error(wire::ENHANCE_YOUR_CALM, "too_many_internal_resets"));
        }
        Ok(())
    }

    fn data(&mut self, head: FrameHead, mut payload: BytesMut) -> Result<(), ConnError> {
        let id = head.stream;
        if id == 0 {
            return Err(self.conn_error(wire::PROTOCOL_ERROR, "DATA on stream 0"));
        }
        let total = payload.len();
        {
            let mut inner = self.st.inner.borrow_mut();
            if total as i64 > inner.conn_recv {
                drop(inner);
                return Err(self.conn_error(wire::FLOW_CONTROL_ERROR, "connection window"));
            }
            inner.conn_recv -= total as i64;
        }
        let pad = self.unpad(&head, &mut payload)?;
        let known = self.known(id, "DATA on an idle stream")?;
        let mut inner = self.st.inner.borrow_mut();
        let Some(i) = known else {
            // A stream already closed (reset, or answered): its bytes are dropped.
            inner.release_conn(total);
            return Ok(());
        };
        inner.release_conn(pad);
        let len = payload.len();
        let s = &mut inner.streams[i];
        // Bytes the stream will not take: Some(code) resets it, None drops them.
        let refused = if s.remote_end {
            Some(Some(wire::STREAM_CLOSED))
        } else if s.reset {
            Some(None)
        } else if len as i64 > s.recv_window {
            Some(Some(wire::FLOW_CONTROL_ERROR))
        } else if s.expect_len.is_some_and(|n| s.received + len as u64 > n) {
            // More body than its content-length: malformed (RFC 9113 8.1.1).
            Some(Some(wire::PROTOCOL_ERROR))
        } else {
            None
        };
        if let Some(code) = refused {
            inner.release_conn(len);
            drop(inner);
            return code.map_or(Ok(()), |code| self.stream_error(id, code));
        }
        s.recv_window -= len as i64;
        s.received += len as u64;
        if len > 0 {
            s.recv_len += len;
            s.recv.push_back(payload.freeze());
            if let Some(w) = s.reader.take() {
                w.wake();
            }
        }
        drop(inner);
        if head.flags & wire::END_STREAM != 0 {
            return self.end_of_request(id);
        }
        Ok(())
    }

    /// END_STREAM on stream `id`: the request is complete (its body must be as long as
    /// its content-length said).
    fn end_of_request(&mut self, id: u32) -> Result<(), ConnError> {
        let mut inner = self.st.inner.borrow_mut();
        let Some(i) = inner.find(id) else {
            return Ok(());
        };
        let s = &mut inner.streams[i];
        if s.expect_len.is_some_and(|n| s.received != n) {
            drop(inner);
            return self.stream_error(id, wire::PROTOCOL_ERROR);
        }
        s.remote_end = true;
        if let Some(w) = s.reader.take() {
            w.wake();
        }
        inner.reap(i);
        Ok(())
    }

    fn headers(&mut self, head: FrameHead, mut payload: BytesMut) -> Result<(), ConnError> {
        if head.stream == 0 {
            return Err(self.conn_error(wire::PROTOCOL_ERROR, "HEADERS on stream 0"));
        }
        self.unpad(&head, &mut payload)?;
        if head.flags & wire::PRIORITY_FLAG != 0 {
            if payload.len() < 5 {
                return Err(self.conn_error(wire::FRAME_SIZE_ERROR, "HEADERS priority"));
            }
            payload.advance(5);
        }
        let end_stream = head.flags & wire::END_STREAM != 0;
        if head.flags & wire::END_HEADERS != 0 {
            return self.header_block(head.stream, end_stream, &payload);
        }
        self.block = Some(Block {
            id: head.stream,
            end_stream,
            buf: payload.to_vec(),
            frames: 0,
        });
        Ok(())
    }

    fn continuation(&mut self, head: FrameHead, payload: &[u8]) -> Result<(), ConnError> {
        let limit = max_continuations(self.header_list);
        let Some(b) = self.block.as_mut() else {
            return Err(self.conn_error(wire::PROTOCOL_ERROR, "CONTINUATION without HEADERS"));
        };
        if b.id != head.stream {
            return Err(self.conn_error(wire::PROTOCOL_ERROR, "CONTINUATION on another stream"));
        }
        b.frames += 1;
        if b.frames > limit {
            return Err(self.conn_error(wire::ENHANCE_YOUR_CALM, "too_many_continuations"));
        }
        b.buf.extend_from_slice(payload);
        if head.flags & wire::END_HEADERS == 0 {
            return Ok(());
        }
        let b = self.block.take().expect("a block");
        self.header_block(b.id, b.end_stream, &b.buf)
    }

    /// A complete header block on stream `id`: a new request, or trailers.
    fn header_block(&mut self, id: u32, end_stream: bool, block: &[u8]) -> Result<(), ConnError> {
        match self.dec.decode(block, &mut self.list, self.header_list) {
            Ok(()) => {}
            Err(hpack::DecodeError::Compression(why)) => {
                return Err(self.conn_error(wire::COMPRESSION_ERROR, why));
            }
            Err(hpack::DecodeError::WayTooLarge) => {
                return Err(self.conn_error(wire::ENHANCE_YOUR_CALM, "header_list_way_too_large"));
            }
        }
        let remote_end = {
            let inner = self.st.inner.borrow();
            inner.find(id).map(|i| inner.streams[i].remote_end)
        };
        if let Some(remote_end) = remote_end {
            // Trailers: they end the request (their fields are not used).
            if remote_end {
                return self.stream_error(id, wire::STREAM_CLOSED);
            }
            if !end_stream {
                return self.stream_error(id, wire::PROTOCOL_ERROR);
            }
            return self.end_of_request(id);
        }
        if id <= self.last_id {
            // A stream already closed: the block kept the HPACK state, nothing more.
            return Ok(());
        }
        if id.is_multiple_of(2) {
            return Err(self.conn_error(wire::PROTOCOL_ERROR, "even stream id"));
        }
        self.last_id = id;
        if self.goaway_sent {
            // Past the GOAWAY's last stream: not served (the client may retry it).
            return self.stream_error(id, wire::REFUSED_STREAM);
        }
        if self.list.over_limit {
            self.answer(id, 431, end_stream);
            return Ok(());
        }
        // Open streams as the client counts them (those it reset are closed to it,
        // even while their runners finish).
        let open = self
            .st
            .inner
            .borrow()
            .streams
            .iter()
            .filter(|s| !s.reset)
            .count();
        if open >= MAX_CONCURRENT_STREAMS as usize {
            let mut inner = self.st.inner.borrow_mut();
            wire::put_rst(&mut inner.out, id, wire::REFUSED_STREAM);
            return Ok(());
        }
        let head = {
            let cfg = self.w.config();
            let params = S::params(&cfg);
            wire::request_head(&self.list, !end_stream, params.limits, self.w.spare_head())
        };
        let (head, len) = match head {
            Ok(h) => h,
            Err(RequestError::Malformed(why)) => {
                tracing::debug!("client {}: HTTP/2 stream {id}: malformed: {why}", self.peer);
                return self.stream_error(id, wire::PROTOCOL_ERROR);
            }
            Err(RequestError::Status(status)) => {
                self.answer(id, status, end_stream);
                return Ok(());
            }
        };
        let expect_len = match head.body {
            edge_http::BodyKind::Length(n) => Some(n),
            _ => None,
        };
        if end_stream && expect_len.is_some_and(|n| n > 0) {
            // A content-length with no body: malformed.
            return self.stream_error(id, wire::PROTOCOL_ERROR);
        }
        let chunked = head.body == edge_http::BodyKind::Chunked;
        {
            let mut inner = self.st.inner.borrow_mut();
            let window = inner.peer_window;
            inner
                .streams
                .push(Stream::new(id, window, end_stream, expect_len));
        }
        let io = StreamIo::new(self.st.clone(), id, !end_stream, chunked);
        start_stream(&self.w, &self.st, (head, len, io), self.peer, self.info);
        let resets = self.st.client_resets.get();
        if resets > RESET_FLOOD && resets * 2 > self.st.streams.get() {
            self.stats().rapid_reset_goaways.fetch_add(1, Relaxed);
            tracing::warn!(
                "client {}: HTTP/2 rapid reset: {resets} of {} streams reset, closing",
                self.peer,
                self.st.streams.get()
            );
            return Err(self.end_connection(wire::ENHANCE_YOUR_CALM, ""));
        }
        Ok(())
    }

    /// Answers stream `id` with `status` and no body, without a handler (a request
    /// refused before it became one).
    fn answer(&mut self, id: u32, status: u16, end_stream: bool) {
        let p = PendingHead {
            status,
            fields: Bytes::new(),
            body: BodyLen::None,
            head: false,
        };
        let mut inner = self.st.inner.borrow_mut();
        let _ = inner.headers(id, &p, true);
        if !end_stream {
            // Its body is not wanted.
            wire::put_rst(&mut inner.out, id, wire::NO_ERROR);
        }
    }

    fn rst_stream(&mut self, head: FrameHead, payload: &[u8]) -> Result<(), ConnError> {
        if head.stream == 0 {
            return Err(self.conn_error(wire::PROTOCOL_ERROR, "RST_STREAM on stream 0"));
        }
        if payload.len() != 4 {
            return Err(self.conn_error(wire::FRAME_SIZE_ERROR, "RST_STREAM size"));
        }
        let Some(i) = self.known(head.stream, "RST_STREAM on an idle stream")? else {
            return Ok(());
        };
        let mut inner = self.st.inner.borrow_mut();
        let s = &mut inner.streams[i];
        if !s.local_end {
            // The response was not complete.
            let st = &self.st;
            st.client_resets.set(st.client_resets.get() + 1);
            st.resets_unreported.set(st.resets_unreported.get() + 1);
        }
        s.remote_end = true;
        inner.abandon(i);
        Ok(())
    }

    fn settings(&mut self, head: FrameHead, payload: &[u8]) -> Result<(), ConnError> {
        if head.stream != 0 {
            return Err(self.conn_error(wire::PROTOCOL_ERROR, "SETTINGS on a stream"));
        }
        if head.flags & wire::ACK != 0 {
            if !payload.is_empty() {
                return Err(self.conn_error(wire::FRAME_SIZE_ERROR, "SETTINGS ACK with a payload"));
            }
            return Ok(());
        }
        if !payload.len().is_multiple_of(6) {
            return Err(self.conn_error(wire::FRAME_SIZE_ERROR, "SETTINGS size"));
        }
        let mut inner = self.st.inner.borrow_mut();
        for p in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([p[0], p[1]]);
            let v = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
            match id {
                wire::SETTINGS_HEADER_TABLE_SIZE => inner.enc.set_peer_table_size(v as usize),
                wire::SETTINGS_ENABLE_PUSH if v > 1 => {
                    drop(inner);
                    return Err(self.conn_error(wire::PROTOCOL_ERROR, "ENABLE_PUSH"));
                }
                wire::SETTINGS_INITIAL_WINDOW_SIZE => {
                    if v as i64 > wire::MAX_WINDOW {
                        drop(inner);
                        return Err(self.conn_error(wire::FLOW_CONTROL_ERROR, "window size"));
                    }
                    let delta = v as i64 - inner.peer_window;
                    inner.peer_window = v as i64;
                    let mut over = false;
                    for s in &mut inner.streams {
                        s.send_window += delta;
                        over |= s.send_window > wire::MAX_WINDOW;
                    }
                    if over {
                        drop(inner);
                        return Err(self.conn_error(wire::FLOW_CONTROL_ERROR, "window overflow"));
                    }
                }
                wire::SETTINGS_MAX_FRAME_SIZE => {
                    if !(wire::DEFAULT_MAX_FRAME as u32..=(1 << 24) - 1).contains(&v) {
                        drop(inner);
                        return Err(self.conn_error(wire::PROTOCOL_ERROR, "MAX_FRAME_SIZE"));
                    }
                    inner.peer_frame = v as usize;
                }
                _ => {}
            }
        }
        wire::put_frame(&mut inner.out, wire::SETTINGS, wire::ACK, 0, &[]);
        Ok(())
    }

    fn window_update(&mut self, head: FrameHead, payload: &[u8]) -> Result<(), ConnError> {
        if payload.len() != 4 {
            return Err(self.conn_error(wire::FRAME_SIZE_ERROR, "WINDOW_UPDATE size"));
        }
        let inc = (u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
            & 0x7fff_ffff) as i64;
        let mut inner = self.st.inner.borrow_mut();
        if head.stream == 0 {
            if inc == 0 {
                drop(inner);
                return Err(self.conn_error(wire::PROTOCOL_ERROR, "WINDOW_UPDATE of 0"));
            }
            inner.conn_send += inc;
            if inner.conn_send > wire::MAX_WINDOW {
                drop(inner);
                return Err(self.conn_error(wire::FLOW_CONTROL_ERROR, "window overflow"));
            }
            return Ok(());
        }
        drop(inner);
        let Some(i) = self.known(head.stream, "WINDOW_UPDATE on an idle stream")? else {
            return Ok(());
        };
        let mut inner = self.st.inner.borrow_mut();
        if inc == 0 {
            drop(inner);
            return self.stream_error(head.stream, wire::PROTOCOL_ERROR);
        }
        let s = &mut inner.streams[i];
        s.send_window += inc;
        if s.send_window > wire::MAX_WINDOW {
            drop(inner);
            return self.stream_error(head.stream, wire::FLOW_CONTROL_ERROR);
        }
        Ok(())
    }

    /// Ends the connection: what is queued written (GOAWAY included) and the socket
    /// shut down, within `limit`.
    async fn close(&mut self, limit: std::time::Duration) {
        self.fail_streams();
        let _ =
            tokio::time::timeout(limit, std::future::poll_fn(|cx| self.poll_write_out(cx))).await;
        let _ = tokio::time::timeout(
            limit,
            std::future::poll_fn(|cx| Pin::new(&mut self.io).poll_shutdown(cx)),
        )
        .await;
    }
}

/// Reads into the spare capacity of `buf`.
fn poll_read_buf<T: AsyncRead + Unpin>(
    io: &mut T,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
) -> Poll<std::io::Result<usize>> {
    let spare = buf.spare_capacity_mut();
    let mut rb = ReadBuf::uninit(spare);
    match Pin::new(io).poll_read(cx, &mut rb) {
        Poll::Ready(Ok(())) => {
            let n = rb.filled().len();
            // SAFETY: `ReadBuf` guarantees its first `n` bytes were initialized by the
            // read, and they are the first `n` bytes of `buf`'s spare capacity.
            unsafe { buf.set_len(buf.len() + n) };
            Poll::Ready(Ok(n))
        }
        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        Poll::Pending => Poll::Pending,
    }
}

/// Serves one stream: hands it to an idle runner of the connection, or starts one.
fn start_stream<S: Service + 'static>(
    w: &Rc<S>,
    state: &Rc<ConnState>,
    job: Job,
    peer: SocketAddr,
    info: ConnInfo,
) {
    w.stats().h2.streams.fetch_add(1, Relaxed);
    state.streams.set(state.streams.get() + 1);
    state.active.set(state.active.get() + 1);
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
/// nor an allocation of its session's state, which goes into the runner's one slot.
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
    while let Some((head, len, io)) = job.take() {
        // A stream the client reset before its runner came to it is not served.
        if !io.is_reset() {
            slot.set(Some(stream_task(&*w, head, len, io, peer, info, &st)));
            if let Some(f) = slot.as_mut().as_pin_mut() {
                f.await;
            }
            slot.set(None);
        }
        let resets = st.resets_unreported.take();
        if resets > 0 {
            w.stats().h2.client_resets.fetch_add(resets, Relaxed);
        }
        st.stream_done();
        if st.closed.get() || st.idle_runners.borrow().len() >= IDLE_RUNNERS_KEPT {
            break;
        }
        st.idle_runners.borrow_mut().push(me.clone());
        job = std::future::poll_fn(|cx| me.poll_next(cx)).await;
    }
}

/// Where [`H2Stats::errors`] counts I/O errors.
const IO_ERROR: usize = 6;

fn count_error(stats: &H2Stats, code: u32) {
    let i = match code {
        wire::NO_ERROR | wire::CANCEL => return,
        wire::PROTOCOL_ERROR => 0,
        wire::FLOW_CONTROL_ERROR => 1,
        wire::FRAME_SIZE_ERROR => 2,
        wire::COMPRESSION_ERROR => 3,
        wire::ENHANCE_YOUR_CALM => 4,
        _ => 5,
    };
    stats.errors[i].fetch_add(1, Relaxed);
}

async fn stream_task<S: Service>(
    w: &S,
    head: Box<edge_http::RequestHead>,
    len: usize,
    io: StreamIo,
    peer: SocketAddr,
    info: ConnInfo,
    state: &Rc<ConnState>,
) {
    let mut conn = Conn::over(ClientIo::H2(Box::new(io)), peer, info);
    if let Some(client) = state.client.get() {
        conn.client = client;
    }
    super::session::serve_stream(w, conn, head, len).await;
}
