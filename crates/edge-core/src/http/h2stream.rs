//! The state an HTTP/2 connection shares with its streams ([`ConnState`]), and one
//! stream as the session and the handlers see it ([`StreamIo`]): the request body read
//! from DATA frames, the response's version-neutral head encoded straight into HEADERS
//! from its field lines, and its body's bytes framed as DATA as the client's windows
//! allow. Frames are written into the connection's output buffer, which the
//! connection's task ([`super::h2`]) writes to the socket.

use super::head::{BodyIn, BodyLen, HeadSlot, PendingHead};
use bytes::{Buf, Bytes, BytesMut};
use edge_http::h2::{self as wire, hpack};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// DATA payload per frame: with its 9-byte frame head, exactly one full TLS record
/// (16 KiB), so no record carries a frame's few leftover bytes alone.
pub(super) const DATA_CHUNK: usize = 16 * 1024 - 9;
/// Response body bytes a stream holds beyond what its windows let out at once (the
/// rest of a write waits).
const PENDING_HIGH: usize = 64 * 1024;
/// Frames the output buffer holds before streams stop adding DATA to it (they keep
/// what they have until it drains: a client that does not read holds at most this
/// plus each stream's [`PENDING_HIGH`]).
pub(super) const OUT_HIGH: usize = 256 * 1024;
/// Most fields of a response head.
const MAX_RESPONSE_HEADERS: usize = 64;
/// Streams a client may have open at once (nginx: `http2_max_concurrent_streams` 128).
pub const MAX_CONCURRENT_STREAMS: u32 = 128;
/// Flow-control windows we grant the client for request bodies.
pub(super) const STREAM_WINDOW: u32 = 256 * 1024;
pub(super) const CONN_WINDOW: u32 = 1024 * 1024;

/// One stream's state, kept by the connection until both sides are done with it.
pub(super) struct Stream {
    pub id: u32,
    /// What the client's window lets us send on this stream.
    pub send_window: i64,
    /// Request body bytes received and not yet read, and whether END_STREAM came.
    pub recv: VecDeque<Bytes>,
    pub recv_len: usize,
    pub remote_end: bool,
    /// What is left of the window we granted, and what was read since the last
    /// WINDOW_UPDATE.
    pub recv_window: i64,
    pub recv_unacked: u32,
    /// The request's content-length, and the body bytes received.
    pub expect_len: Option<u64>,
    pub received: u64,
    pub reader: Option<Waker>,
    /// Response body bytes waiting for window (or for room in the output buffer), and
    /// whether END_STREAM follows them.
    pub pending: BytesMut,
    pub pending_end: bool,
    pub writer: Option<Waker>,
    /// END_STREAM or RST_STREAM sent: nothing more goes out on the stream.
    pub local_end: bool,
    /// Reset (by either side): the stream's I/O fails.
    pub reset: bool,
    /// The stream's [`StreamIo`] is gone.
    pub io_gone: bool,
}

impl Stream {
    pub fn new(id: u32, send_window: i64, remote_end: bool, expect_len: Option<u64>) -> Stream {
        Stream {
            id,
            send_window,
            recv: VecDeque::new(),
            recv_len: 0,
            remote_end,
            recv_window: STREAM_WINDOW as i64,
            recv_unacked: 0,
            expect_len,
            received: 0,
            reader: None,
            pending: BytesMut::new(),
            pending_end: false,
            writer: None,
            local_end: false,
            reset: false,
            io_gone: false,
        }
    }

    pub(super) fn wake_all(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }
}

/// The connection's protocol state that its streams write into.
pub(super) struct Inner {
    /// Frames to write.
    pub out: Vec<u8>,
    pub enc: hpack::Encoder,
    pub streams: Vec<Stream>,
    /// What the client's connection window lets us send.
    pub conn_send: i64,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE and SETTINGS_MAX_FRAME_SIZE.
    pub peer_window: i64,
    pub peer_frame: usize,
    /// What is left of the connection window we granted, and the request body bytes
    /// read (or dropped) since the last connection WINDOW_UPDATE.
    pub conn_recv: i64,
    pub conn_recv_unacked: u32,
    /// Some stream has response bytes pending.
    pub blocked: bool,
    /// The connection is gone: every stream operation fails.
    pub dead: bool,
    /// The connection's task, to wake when frames were queued.
    pub waker: Option<Waker>,
}

impl Inner {
    pub fn new() -> Inner {
        Inner {
            out: Vec::new(),
            enc: hpack::Encoder::new(),
            streams: Vec::new(),
            conn_send: wire::DEFAULT_WINDOW,
            peer_window: wire::DEFAULT_WINDOW,
            peer_frame: wire::DEFAULT_MAX_FRAME,
            conn_recv: wire::DEFAULT_WINDOW,
            conn_recv_unacked: 0,
            blocked: false,
            dead: false,
            waker: None,
        }
    }

    pub fn find(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    pub fn wake_conn(&mut self) {
        if let Some(w) = &self.waker {
            w.wake_by_ref();
        }
    }

    /// Room for DATA in the output buffer.
    fn out_room(&self) -> usize {
        OUT_HIGH.saturating_sub(self.out.len())
    }

    /// Frames up to `data.len()` bytes of stream `i`'s body as the windows and the
    /// output buffer allow, END_STREAM on the last frame when `end` and all of it
    /// went; returns how many bytes went.
    fn frame_data(&mut self, i: usize, data: &[u8], end: bool) -> usize {
        let s = &self.streams[i];
        let can = s.send_window.min(self.conn_send).clamp(0, i64::MAX) as usize;
        let n = data.len().min(can).min(self.out_room());
        let chunk = DATA_CHUNK.min(self.peer_frame);
        let mut sent = 0;
        while sent < n {
            let k = (n - sent).min(chunk);
            let last = sent + k == data.len();
            let flags = if last && end { wire::END_STREAM } else { 0 };
            wire::put_head(&mut self.out, k, wire::DATA, flags, s.id);
            self.out.extend_from_slice(&data[sent..sent + k]);
            sent += k;
        }
        if n == data.len() && end && n == 0 {
            wire::put_head(&mut self.out, 0, wire::DATA, wire::END_STREAM, s.id);
        }
        let s = &mut self.streams[i];
        s.send_window -= n as i64;
        self.conn_send -= n as i64;
        if n == data.len() && end {
            s.local_end = true;
        }
        n
    }

    /// Moves pending response bytes into DATA frames as the windows and the output
    /// buffer allow (after a WINDOW_UPDATE, a SETTINGS, or a drained buffer), and
    /// wakes the streams' writers.
    pub fn pump(&mut self) {
        if !self.blocked {
            return;
        }
        let mut still = false;
        let mut i = 0;
        while i < self.streams.len() {
            let s = &mut self.streams[i];
            if s.pending.is_empty() && !s.pending_end {
                i += 1;
                continue;
            }
            let mut data = std::mem::take(&mut s.pending);
            let end = s.pending_end;
            let n = self.frame_data(i, &data, end);
            let s = &mut self.streams[i];
            if n < data.len() {
                data.advance(n);
                s.pending = data;
                still = true;
            } else {
                s.pending_end = false;
            }
            if let Some(w) = s.writer.take() {
                w.wake();
            }
            if !self.reap(i) {
                i += 1;
            }
        }
        self.blocked = still;
    }

    /// Whether frames wait to be written, or response bytes wait for window.
    pub fn sending(&self) -> bool {
        !self.out.is_empty() || self.blocked
    }

    /// Resets stream `i` with `code` (a stream error, or our own end of it): RST_STREAM
    /// unless our side of it is already over, then [`Inner::abandon`].
    pub fn reset_stream(&mut self, i: usize, code: u32) {
        let s = &self.streams[i];
        if !s.local_end {
            wire::put_rst(&mut self.out, s.id, code);
        }
        self.abandon(i);
    }

    /// Stream `i` is reset (by either side): nothing more goes out on it, what it
    /// holds is dropped, its I/O fails from now on; removed once its I/O is gone.
    pub fn abandon(&mut self, i: usize) {
        let s = &mut self.streams[i];
        s.local_end = true;
        s.reset = true;
        s.pending = BytesMut::new();
        s.pending_end = false;
        s.wake_all();
        self.drop_recv(i);
        self.reap(i);
    }

    /// The response body of stream `i` is complete: END_STREAM now, or after the bytes
    /// still pending (as the windows open).
    fn end_body(&mut self, i: usize) {
        if self.streams[i].pending.is_empty() {
            self.frame_data(i, &[], true);
        } else {
            self.streams[i].pending_end = true;
            self.blocked = true;
        }
    }

    /// Gives back the connection window of request body bytes stream `i` will never
    /// read.
    fn drop_recv(&mut self, i: usize) {
        let s = &mut self.streams[i];
        let n = s.recv_len;
        s.recv.clear();
        s.recv_len = 0;
        self.release_conn(n);
    }

    /// Request body bytes read or dropped: the connection's window grows again once
    /// half of it was used.
    pub fn release_conn(&mut self, n: usize) {
        self.conn_recv_unacked += n as u32;
        if self.conn_recv_unacked >= CONN_WINDOW / 2 {
            wire::put_window_update(&mut self.out, 0, self.conn_recv_unacked);
            self.conn_recv += self.conn_recv_unacked as i64;
            self.conn_recv_unacked = 0;
        }
    }

    /// Removes stream `i` once nothing more can happen on it: its I/O is gone and its
    /// response is ended (or it was reset). A request body still coming is stopped with
    /// RST_STREAM NO_ERROR (RFC 9113 8.1). True if removed.
    pub fn reap(&mut self, i: usize) -> bool {
        let s = &self.streams[i];
        if !(s.io_gone && s.local_end && s.pending.is_empty()) {
            return false;
        }
        if !s.remote_end && !s.reset {
            wire::put_rst(&mut self.out, s.id, wire::NO_ERROR);
        }
        self.drop_recv(i);
        self.streams.swap_remove(i);
        true
    }

    /// Writes a response head as HEADERS (and CONTINUATION when it is larger than the
    /// client's frame size): `:status`, then the head's field lines, each encoded as it
    /// is (no intermediate map; connection-specific fields left out).
    pub(super) fn headers(&mut self, id: u32, p: &PendingHead, end: bool) -> io::Result<()> {
        let start = self.out.len();
        self.out.extend_from_slice(&[0; 9]);
        self.enc.status(&mut self.out, p.status);
        let mut lines = edge_http::FieldLines::new(&p.fields, MAX_RESPONSE_HEADERS);
        for (name, value) in lines.by_ref() {
            self.enc.field(&mut self.out, name, value);
        }
        // Sent even when there were too many fields: the encoder's table took some of
        // them, and the client's must follow. The caller then resets the stream.
        self.finish_headers(start, id, end);
        if lines.overflowed() {
            return Err(broken("response head has too many fields"));
        }
        Ok(())
    }

    fn finish_headers(&mut self, start: usize, id: u32, end: bool) {
        let len = self.out.len() - start - 9;
        let flags = if end { wire::END_STREAM } else { 0 };
        if len <= self.peer_frame {
            let head = wire::frame_head(len, wire::HEADERS, flags | wire::END_HEADERS, id);
            self.out[start..start + 9].copy_from_slice(&head);
            return;
        }
        let block = self.out.split_off(start + 9);
        self.out.truncate(start);
        let mut chunks = block.chunks(self.peer_frame).peekable();
        let mut ty = wire::HEADERS;
        let mut fl = flags;
        while let Some(c) = chunks.next() {
            let last = chunks.peek().is_none();
            let f = if last { fl | wire::END_HEADERS } else { fl };
            wire::put_frame(&mut self.out, ty, f, id, c);
            ty = wire::CONTINUATION;
            fl = 0;
        }
    }
}

/// The per-connection state its stream tasks share.
pub struct ConnState {
    pub(super) inner: RefCell<Inner>,
    /// Stream tasks running.
    pub active: Cell<usize>,
    pub streams: Cell<u64>,
    pub client_resets: Cell<u64>,
    /// Client resets not yet added to the worker's `client_resets` counter (each
    /// stream task adds them when it ends).
    pub resets_unreported: Cell<u64>,
    /// Stream runners waiting for a stream (see `h2::run_streams`).
    pub(super) idle_runners: RefCell<Vec<Rc<RunnerSlot>>>,
    /// The connection is over: runners end after their stream.
    pub(super) closed: Cell<bool>,
    /// The connection's client address ([`super::Conn::client`]), when not its peer.
    pub client: Cell<Option<std::net::SocketAddr>>,
    /// The connection's `limit_conn` counts: an HTTP/2 connection counts once, for
    /// all its streams, until it closes.
    pub held: crate::limit::Held,
}

impl Default for ConnState {
    fn default() -> Self {
        ConnState {
            inner: RefCell::new(Inner::new()),
            active: Cell::new(0),
            streams: Cell::new(0),
            client_resets: Cell::new(0),
            resets_unreported: Cell::new(0),
            idle_runners: RefCell::default(),
            closed: Cell::new(false),
            client: Cell::new(None),
            held: Default::default(),
        }
    }
}

impl ConnState {
    /// A stream task ended: the connection recomputes what it waits for.
    pub(super) fn stream_done(&self) {
        let now = self.active.get() - 1;
        self.active.set(now);
        // The last one, or a runner free again after all were busy (the connection
        // reads no frames then).
        if now == 0 || now + 1 >= MAX_CONCURRENT_STREAMS as usize {
            self.inner.borrow_mut().wake_conn();
        }
    }
}

/// A stream's request head, its size as HTTP/1.1 lines, and its I/O.
pub type Job = (Box<edge_http::RequestHead>, usize, StreamIo);

/// Where an idle runner waits for its next stream.
#[derive(Default)]
pub struct RunnerSlot {
    job: RefCell<Option<Job>>,
    waker: RefCell<Option<Waker>>,
    /// Told to end (the connection is idle or gone).
    retire: Cell<bool>,
}

impl RunnerSlot {
    pub fn give(&self, job: Job) {
        *self.job.borrow_mut() = Some(job);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// The runner's next stream, or None once it is told to end.
    pub fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Job>> {
        if let Some(j) = self.job.borrow_mut().take() {
            return Poll::Ready(Some(j));
        }
        if self.retire.get() {
            return Poll::Ready(None);
        }
        *self.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }

    pub fn end(&self) {
        self.retire.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }
}

/// One stream as the session and the handlers see it: the request body read from DATA
/// frames, the response head taken from its [`HeadSlot`] and sent as HEADERS, the
/// response body's bytes (no framing of any kind) written as DATA frames.
pub struct StreamIo {
    state: Rc<ConnState>,
    id: u32,
    /// The request has a body still to read.
    body_left: bool,
    /// The request body as the session's decoder reads it.
    body_in: BodyIn,
    /// Where the exchange leaves the response head.
    slot: Rc<HeadSlot>,
    head_sent: bool,
    /// Body bytes still to come when the head gave the length (None: until the end).
    left: Option<u64>,
    /// The response body is complete.
    out_done: bool,
    /// The response is over (sent whole, or reset).
    ended: bool,
}

pub(super) fn broken(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, format!("HTTP/2 stream: {e}"))
}

impl StreamIo {
    /// The I/O of stream `id` (already in the connection's table): `has_body` whether
    /// the request has a body, presented chunked when `chunked_in`.
    pub(super) fn new(state: Rc<ConnState>, id: u32, has_body: bool, chunked_in: bool) -> StreamIo {
        StreamIo {
            state,
            id,
            body_left: has_body,
            body_in: BodyIn::new(chunked_in),
            slot: Rc::default(),
            head_sent: false,
            left: None,
            out_done: false,
            ended: false,
        }
    }

    /// Where this stream's exchange leaves its response head.
    pub fn head_slot(&self) -> Rc<HeadSlot> {
        self.slot.clone()
    }

    /// The `limit_conn` counts of the stream's connection.
    pub fn held(&self) -> &crate::limit::Held {
        &self.state.held
    }

    /// Whether the stream was reset (by the client, or on an error) or the connection
    /// is gone.
    pub fn is_reset(&self) -> bool {
        let inner = self.state.inner.borrow();
        inner.dead || inner.find(self.id).is_none_or(|i| inner.streams[i].reset)
    }

    /// The stream's index, or the error for a stream that is gone or reset.
    fn index(&self, inner: &Inner) -> io::Result<usize> {
        if inner.dead {
            return Err(broken("connection closed"));
        }
        match inner.find(self.id) {
            Some(i) if !inner.streams[i].reset => Ok(i),
            _ => Err(broken("stream reset")),
        }
    }

    /// Resets the stream: the response cannot be completed.
    pub fn reset(&mut self) {
        self.ended = true;
        let mut inner = self.state.inner.borrow_mut();
        if let Some(i) = inner.find(self.id) {
            if !inner.streams[i].local_end {
                inner.reset_stream(i, wire::INTERNAL_ERROR);
                inner.wake_conn();
            }
        }
    }

    /// Answers `status` with no body: a request refused before it became an exchange.
    pub fn refuse(&mut self, status: u16) -> io::Result<()> {
        self.slot.put(status, b"", BodyLen::None, false);
        self.start()
    }

    /// Sends the response head the exchange left in the slot, if it has not gone out
    /// yet.
    pub fn start(&mut self) -> io::Result<()> {
        if self.head_sent {
            return Ok(());
        }
        let Some(p) = self.slot.take() else {
            return Ok(());
        };
        self.send_head(p)
    }

    fn send_head(&mut self, p: PendingHead) -> io::Result<()> {
        let mut len = p.body;
        if p.head || matches!(p.status, 204 | 304) {
            len = BodyLen::None;
        }
        let end = matches!(len, BodyLen::None | BodyLen::Known(0));
        let mut inner = self.state.inner.borrow_mut();
        let i = self.index(&inner)?;
        self.head_sent = true;
        let r = inner.headers(self.id, &p, end);
        inner.wake_conn();
        if let Err(e) = r {
            inner.reset_stream(i, wire::INTERNAL_ERROR);
            self.ended = true;
            return Err(e);
        }
        if end {
            inner.streams[i].local_end = true;
            self.ended = true;
            self.out_done = true;
        } else {
            self.left = match len {
                BodyLen::Known(n) => Some(n),
                _ => None,
            };
        }
        Ok(())
    }

    /// Takes body bytes (the body itself: HTTP/2 frames it): as many as the windows
    /// allow go out as DATA now, the rest (up to [`PENDING_HIGH`]) waits in the
    /// stream. Bytes past a body of known length belong to no response: they are taken
    /// and dropped.
    fn write_body(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.out_done {
            return Poll::Ready(Ok(buf.len()));
        }
        let mut n = buf.len();
        let mut end = false;
        if let Some(left) = self.left {
            if n as u64 >= left {
                n = left as usize;
                end = true;
            }
        }
        let mut inner = self.state.inner.borrow_mut();
        let i = self.index(&inner)?;
        let mut took = 0;
        if inner.streams[i].pending.is_empty() {
            took = inner.frame_data(i, &buf[..n], end);
            if took > 0 {
                inner.wake_conn();
            }
        }
        let room = PENDING_HIGH.saturating_sub(inner.streams[i].pending.len());
        let more = (n - took).min(room);
        if more > 0 {
            let s = &mut inner.streams[i];
            s.pending.extend_from_slice(&buf[took..took + more]);
            took += more;
            if end && took == n {
                s.pending_end = true;
            }
            inner.blocked = true;
        }
        if took == 0 {
            inner.streams[i].writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if let Some(left) = &mut self.left {
            *left -= took as u64;
        }
        if end && took == n {
            self.out_done = true;
            if inner.streams[i].local_end {
                self.ended = true;
            }
            // Bytes past the known length are taken (and dropped) with the last.
            return Poll::Ready(Ok(buf.len()));
        }
        Poll::Ready(Ok(took))
    }

    /// Ready once the stream holds no response bytes (they are in the connection's
    /// output buffer).
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.ended && self.head_sent {
            return Poll::Ready(Ok(()));
        }
        let mut inner = self.state.inner.borrow_mut();
        let i = self.index(&inner)?;
        let s = &mut inner.streams[i];
        if s.pending.is_empty() && !s.pending_end {
            if s.local_end {
                self.ended = true;
            }
            return Poll::Ready(Ok(()));
        }
        s.writer = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Whether the body written so far is the whole body: all of its known length, or
    /// it runs until the end of the response.
    fn body_complete(&self) -> bool {
        self.out_done || self.left.is_none()
    }

    /// Ends the response body (END_STREAM after what is pending).
    fn finish(&mut self) -> io::Result<()> {
        self.out_done = true;
        let mut inner = self.state.inner.borrow_mut();
        let i = self.index(&inner)?;
        if !inner.streams[i].local_end {
            inner.end_body(i);
            inner.wake_conn();
        }
        Ok(())
    }
}

impl AsyncRead for StreamIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            // Once the response is out the stream has nothing more to say: EOF (the
            // session then ends the exchange).
            if this.ended {
                return Poll::Ready(Ok(()));
            }
            if this.body_in.read_into(buf) {
                return Poll::Ready(Ok(()));
            }
            if !this.body_left {
                if this.body_in.end() {
                    continue;
                }
                return Poll::Ready(Ok(()));
            }
            let mut inner = this.state.inner.borrow_mut();
            let i = this.index(&inner)?;
            let s = &mut inner.streams[i];
            if let Some(data) = s.recv.pop_front() {
                let n = data.len();
                s.recv_len -= n;
                s.recv_unacked += n as u32;
                if s.recv_unacked >= STREAM_WINDOW / 2 && !s.remote_end {
                    let (id, k) = (s.id, s.recv_unacked);
                    s.recv_unacked = 0;
                    s.recv_window += k as i64;
                    wire::put_window_update(&mut inner.out, id, k);
                }
                inner.release_conn(n);
                inner.wake_conn();
                this.body_in.push(data);
                continue;
            }
            if s.remote_end {
                this.body_left = false;
                continue;
            }
            s.reader = Some(cx.waker().clone());
            return Poll::Pending;
        }
    }
}

impl AsyncWrite for StreamIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        this.start()?;
        if !this.head_sent {
            return Poll::Ready(Err(broken("body without a head")));
        }
        if this.ended {
            return Poll::Ready(Err(broken("response already complete")));
        }
        this.write_body(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.start()?;
        if !this.head_sent {
            return Poll::Ready(Ok(()));
        }
        this.poll_drain(cx)
    }

    /// Ends the response: a body that runs "until the end" is complete now.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.start()?;
        if !this.head_sent {
            this.reset();
            return Poll::Ready(Ok(()));
        }
        if this.ended {
            return Poll::Ready(Ok(()));
        }
        if !this.body_complete() {
            // A body of known length cut short: the client must not take it for a
            // whole response.
            this.reset();
            return Poll::Ready(Ok(()));
        }
        this.finish()?;
        this.poll_drain(cx)
    }
}

impl Drop for StreamIo {
    fn drop(&mut self) {
        let mut inner = self.state.inner.borrow_mut();
        let Some(i) = inner.find(self.id) else {
            return;
        };
        let s = &inner.streams[i];
        if !s.local_end && !s.pending_end {
            if self.head_sent && self.body_complete() && !inner.dead {
                // What is pending goes out as the window opens, then END_STREAM.
                inner.end_body(i);
            } else {
                inner.reset_stream(i, wire::INTERNAL_ERROR);
            }
        }
        // (reset_stream may have removed it already.)
        if let Some(i) = inner.find(self.id) {
            inner.streams[i].io_gone = true;
            inner.streams[i].reader = None;
            inner.streams[i].writer = None;
            inner.reap(i);
        }
        inner.wake_conn();
    }
}
