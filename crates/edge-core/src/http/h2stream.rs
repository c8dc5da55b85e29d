//! One HTTP/2 stream seen as an HTTP/1.1 byte stream (see [`super::h2`]): the request
//! head written as HTTP/1.1 ([`request_head`]), the request body read from DATA frames,
//! the response parsed back into HEADERS and DATA frames ([`StreamIo`]).

use bytes::{Bytes, BytesMut};
use edge_http::{BodyDecoder, BodyKind, Method};
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// DATA payload per frame: with its 9-byte frame head, exactly one full TLS record
/// (16 KiB), so no record carries a frame's few leftover bytes alone.
const DATA_CHUNK: usize = 16 * 1024 - 9;
/// Decoded response bytes a stream holds before its writer waits for the window.
const PENDING_HIGH: usize = 64 * 1024;
/// Largest response head a handler writes (ours are far smaller), and most fields.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
const MAX_RESPONSE_HEADERS: usize = 64;

/// The `:authority` / `Host`-less, body framing and connection-specific checks of one
/// request, as an HTTP/1.1 head. Err: the status to answer with.
pub fn request_head(
    parts: &http::request::Parts,
    has_body: bool,
    out: &mut BytesMut,
) -> Result<bool, u16> {
    let Some(path) = parts.uri.path_and_query() else {
        // CONNECT (no :path): not a proxy.
        return Err(405);
    };
    // RFC 9113 8.3.1: `:path` is origin-form, or `*` for OPTIONS. Anything else (an
    // absolute URI would name a host other than `:authority`) is malformed.
    let p = path.as_str();
    if !(p.starts_with('/') || (p == "*" && parts.method == http::Method::OPTIONS)) {
        return Err(400);
    }
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.extend_from_slice(b" ");
    out.extend_from_slice(path.as_str().as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let authority = parts.uri.authority();
    if let Some(a) = authority {
        out.extend_from_slice(b"Host: ");
        out.extend_from_slice(a.as_str().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let mut cookies: Option<Vec<u8>> = None;
    let mut has_length = false;
    for (name, value) in &parts.headers {
        match name.as_str() {
            // :authority wins over host (RFC 9113 8.3.1).
            "host" if authority.is_some() => continue,
            // Connection-specific fields are malformed in HTTP/2 (the h2 crate refuses
            // most); 100-continue is HTTP/1.1's business.
            "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade"
            | "te" | "expect" => continue,
            "cookie" => {
                let c = cookies.get_or_insert_with(Vec::new);
                if !c.is_empty() {
                    c.extend_from_slice(b"; ");
                }
                c.extend_from_slice(value.as_bytes());
                continue;
            }
            "content-length" => has_length = true,
            _ => {}
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(c) = cookies {
        out.extend_from_slice(b"cookie: ");
        out.extend_from_slice(&c);
        out.extend_from_slice(b"\r\n");
    }
    let chunked = has_body && !has_length;
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(chunked)
}

/// The per-connection state its stream tasks share.
#[derive(Default)]
pub struct ConnState {
    /// Stream tasks running.
    pub active: Cell<usize>,
    pub streams: Cell<u64>,
    pub client_resets: Cell<u64>,
    /// Client resets not yet added to the worker's `client_resets` counter (each
    /// stream task adds them when it ends).
    pub resets_unreported: Cell<u64>,
    pub slot_free: tokio::sync::Notify,
    /// Response field names seen on this connection, and what they are.
    names: NameMemo,
    /// Stream runners waiting for a stream (see `h2::run_streams`).
    pub(super) idle_runners: RefCell<Vec<Rc<RunnerSlot>>>,
    /// The connection is over: runners end after their stream.
    pub(super) closed: Cell<bool>,
    /// The connection's task, waiting for its last open stream to end.
    all_done: RefCell<Option<Waker>>,
    /// The connection's client address ([`super::Conn::client`]), when not its peer.
    pub client: Cell<Option<std::net::SocketAddr>>,
    /// The connection's `limit_conn` counts: an HTTP/2 connection counts once, for
    /// all its streams, until it closes.
    pub held: crate::limit::Held,
}

impl ConnState {
    /// Ready once no stream is open.
    pub(super) fn poll_all_done(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.active.get() == 0 {
            return Poll::Ready(());
        }
        *self.all_done.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The last open stream has ended.
    pub(super) fn wake_connection(&self) {
        if let Some(w) = self.all_done.borrow_mut().take() {
            w.wake();
        }
    }
}

/// A stream's request and the handle its response goes out by.
pub type Job = (http::Request<RecvStream>, SendResponse<Bytes>);

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

/// Where the response of a stream stands.
enum Tx {
    /// No head yet.
    Head(SendResponse<Bytes>),
    /// Head sent; body frames go here.
    Body(SendStream<Bytes>),
    /// END_STREAM or RST_STREAM sent.
    Done,
}

/// One stream seen as an HTTP/1.1 byte stream by the session and the handlers.
pub struct StreamIo {
    /// The request body still to read (None: none, or all read).
    recv: Option<RecvStream>,
    /// The receiving half once it carries no body (none, or all read): it tells
    /// whether the client reset the stream (the sending half cannot).
    recv_done: Option<RecvStream>,
    /// The request body is presented chunked (it had no content-length).
    chunked_in: bool,
    /// Framed request-body bytes not yet read.
    in_pending: Bytes,
    tx: Tx,
    /// The response head so far.
    head_buf: BytesMut,
    method: Method,
    /// The response body's framing, once the head is in.
    body: Option<BodyDecoder>,
    /// Decoded body bytes not yet sent: first `out_shared` (a slice of the bytes the
    /// head came in, taken without a copy), then `out`.
    out_shared: Bytes,
    out: BytesMut,
    /// The response body is complete (END_STREAM goes with the last of `out`).
    out_done: bool,
    ended: bool,
    state: Rc<ConnState>,
    /// The client reset this stream (counted once).
    reset_seen: bool,
    /// The body that came with the head failed: the error of the next write.
    error_after_head: Option<io::Error>,
}

impl StreamIo {
    /// A stream's I/O: `recv` is the stream's receiving half, `has_body` whether the
    /// request has a body, presented chunked when `chunked_in`.
    pub fn new(
        recv: RecvStream,
        has_body: bool,
        chunked_in: bool,
        respond: SendResponse<Bytes>,
        method: Method,
        state: Rc<ConnState>,
    ) -> StreamIo {
        let (recv, recv_done) = if has_body {
            (Some(recv), None)
        } else {
            (None, Some(recv))
        };
        StreamIo {
            recv,
            recv_done,
            chunked_in,
            in_pending: Bytes::new(),
            tx: Tx::Head(respond),
            head_buf: BytesMut::new(),
            method,
            body: None,
            out_shared: Bytes::new(),
            out: BytesMut::new(),
            out_done: false,
            ended: false,
            state,
            reset_seen: false,
            error_after_head: None,
        }
    }
}

fn broken(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, format!("HTTP/2 stream: {e}"))
}

impl StreamIo {
    /// The `limit_conn` counts of the stream's connection.
    pub fn held(&self) -> &crate::limit::Held {
        &self.state.held
    }

    /// Notes an error of the stream; a reset by the client counts towards the
    /// connection's rapid-reset tally.
    fn failed(&mut self, e: h2::Error) -> io::Error {
        let by_client = e.is_remote() && e.is_reset();
        self.closed_under(by_client);
        broken(e)
    }

    /// The stream ended before its response was complete (an error of the `h2` crate,
    /// or no more send capacity): counts it if the client reset it. Sending on a reset
    /// stream fails with a user error that does not say who reset it, so the
    /// receiving half, which does, is asked.
    fn closed_under(&mut self, by_client: bool) {
        if !self.reset_seen && (by_client || self.reset_by_client()) {
            self.reset_seen = true;
            let s = &self.state;
            s.client_resets.set(s.client_resets.get() + 1);
            s.resets_unreported.set(s.resets_unreported.get() + 1);
        }
        self.ended = true;
        self.tx = Tx::Done;
    }

    /// Whether the client reset the stream. Its receiving half ends with the reset
    /// and says who sent it (after any body data still queued, dropped: the stream is
    /// dead). Once the request was received whole (END_STREAM) that half ends cleanly
    /// even when a reset follows, and in `h2` 0.4 only a reset received from the
    /// client closes a stream that way: then the sending half has its reason.
    fn reset_by_client(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        if let Some(r) = self.recv.as_mut().or(self.recv_done.as_mut()) {
            loop {
                match r.poll_data(&mut cx) {
                    Poll::Ready(Some(Ok(data))) => {
                        let _ = r.flow_control().release_capacity(data.len());
                    }
                    Poll::Ready(Some(Err(e))) => return e.is_remote() && e.is_reset(),
                    Poll::Ready(None) => break,
                    // The request is still open: not reset.
                    Poll::Pending => return false,
                }
            }
        }
        let reset = match &mut self.tx {
            Tx::Head(r) => r.poll_reset(&mut cx),
            Tx::Body(s) => s.poll_reset(&mut cx),
            Tx::Done => return false,
        };
        matches!(reset, Poll::Ready(Ok(_)))
    }

    /// Resets the stream: the response cannot be completed.
    pub fn reset(&mut self) {
        match std::mem::replace(&mut self.tx, Tx::Done) {
            Tx::Head(mut r) => r.send_reset(Reason::INTERNAL_ERROR),
            Tx::Body(mut s) => s.send_reset(Reason::INTERNAL_ERROR),
            Tx::Done => {}
        }
        self.ended = true;
    }

    /// The response head, `head` (complete, ours), goes out as HEADERS. Header values
    /// are slices of `head` (no copy); hop-by-hop fields are dropped. A 1xx is dropped
    /// (100-continue is not used over HTTP/2).
    fn send_head(&mut self, head: Bytes) -> io::Result<()> {
        let Some(parsed) = ResponseHead::parse(&head, &self.state.names)? else {
            return Ok(());
        };
        let ResponseHead {
            status,
            mut kind,
            fields,
        } = parsed;
        if self.method == Method::Head || matches!(status.as_u16(), 204 | 304) {
            kind = BodyKind::Empty;
        }
        let mut resp = http::Response::new(());
        *resp.status_mut() = status;
        *resp.headers_mut() = fields;
        let end = matches!(kind, BodyKind::Empty | BodyKind::Length(0));
        let Tx::Head(mut r) = std::mem::replace(&mut self.tx, Tx::Done) else {
            return Err(broken("response head sent twice"));
        };
        match r.send_response(resp, end) {
            Ok(s) if !end => {
                self.tx = Tx::Body(s);
                self.body = Some(BodyDecoder::new(kind, None).upstream());
            }
            Ok(_) => self.ended = true,
            Err(e) => {
                // Put back for `failed` to ask whether the client reset the stream.
                self.tx = Tx::Head(r);
                return Err(self.failed(e));
            }
        }
        Ok(())
    }

    /// Sends decoded body bytes as the window allows; Ready once `out` is empty (and
    /// the stream ended, if the body is complete).
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let pending = self.pending();
            let Tx::Body(s) = &mut self.tx else {
                return Poll::Ready(Ok(()));
            };
            if pending == 0 {
                if self.out_done {
                    if let Err(e) = s.send_data(Bytes::new(), true) {
                        return Poll::Ready(Err(self.failed(e)));
                    }
                    self.ended = true;
                    self.tx = Tx::Done;
                }
                return Poll::Ready(Ok(()));
            }
            // Capacity already assigned is used first: `poll_capacity` only reports an
            // increase, so asking it while some is left would wait for nothing.
            let left = s.capacity();
            let cap = if left > 0 {
                left
            } else {
                s.reserve_capacity(pending);
                match s.poll_capacity(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(None) => {
                        // Reset (by the client, or by the h2 crate), or the connection
                        // is gone.
                        self.closed_under(false);
                        return Poll::Ready(Err(broken("stream closed")));
                    }
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(self.failed(e))),
                    Poll::Ready(Some(Ok(0))) => return Poll::Pending,
                    Poll::Ready(Some(Ok(n))) => n,
                }
            };
            let chunk = if self.out_shared.is_empty() {
                let n = cap.min(self.out.len()).min(DATA_CHUNK);
                self.out.split_to(n).freeze()
            } else {
                let n = cap.min(self.out_shared.len()).min(DATA_CHUNK);
                self.out_shared.split_to(n)
            };
            let end = self.out_shared.is_empty() && self.out.is_empty() && self.out_done;
            if let Err(e) = s.send_data(chunk, end) {
                return Poll::Ready(Err(self.failed(e)));
            }
            if end {
                self.ended = true;
                self.tx = Tx::Done;
                return Poll::Ready(Ok(()));
            }
        }
    }

    /// Takes response head bytes; once the head is whole it goes out, and what follows
    /// it in the same write is taken as body.
    fn write_head(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.head_buf.is_empty() {
            // The usual case: the head whole in one write, the body (or its start)
            // after it. Both are copied once, into one buffer the head's field values
            // and the first DATA frame are slices of.
            let scan = &buf[..buf.len().min(MAX_RESPONSE_HEAD)];
            if let Some(end) = memchr::memmem::find(scan, b"\r\n\r\n") {
                let n = end + 4;
                // As much body as one write queues, no more (the rest is written
                // again).
                let all = Bytes::copy_from_slice(&buf[..buf.len().min(n + PENDING_HIGH)]);
                self.send_head(all.slice(..n))?;
                if n == all.len() || !matches!(self.tx, Tx::Body(_)) {
                    // Bytes past a bodiless head are the caller's to write again
                    // (and refused then).
                    return Poll::Ready(Ok(n));
                }
                let body = all.slice(n..);
                return match self.write_body(cx, &body, Some(&body)) {
                    Poll::Ready(Ok(used)) => Poll::Ready(Ok(n + used)),
                    // The head is out, so it is reported taken; the error is the
                    // next write's.
                    Poll::Ready(Err(e)) => {
                        self.error_after_head = Some(e);
                        Poll::Ready(Ok(n))
                    }
                    Poll::Pending => Poll::Ready(Ok(n)),
                };
            }
        }
        let room = MAX_RESPONSE_HEAD.saturating_sub(self.head_buf.len());
        if room == 0 {
            return Poll::Ready(Err(broken("response head too large")));
        }
        let take = room.min(buf.len());
        // Where the head ends: searched from a little before the new bytes (the blank
        // line may straddle two writes).
        let from = self.head_buf.len().saturating_sub(3);
        self.head_buf.extend_from_slice(&buf[..take]);
        let Some(end) = memchr::memmem::find(&self.head_buf[from..], b"\r\n\r\n") else {
            return Poll::Ready(Ok(take));
        };
        let n = from + end + 4;
        // Bytes of `buf` past the head are not taken now: the caller writes them
        // again, as body.
        let consumed = take - (self.head_buf.len() - n);
        let head = self.head_buf.split_to(n).freeze();
        self.head_buf.clear();
        self.send_head(head)?;
        Poll::Ready(Ok(consumed))
    }

    /// Takes body bytes: decoded (by the head's framing) and queued, then sent as the
    /// window allows. `shared`: `buf` is this `Bytes`, whose slices are queued without
    /// a copy.
    fn write_body(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
        shared: Option<&Bytes>,
    ) -> Poll<io::Result<usize>> {
        if self.pending() >= PENDING_HIGH {
            ready!(self.poll_drain(cx))?;
        }
        let Some(dec) = self.body.as_mut() else {
            return Poll::Ready(Err(broken("body without a head")));
        };
        let mut used = 0;
        // (`self.pending()`, spelt out: the decoder borrows `self.body`.)
        while used < buf.len()
            && self.out_shared.len() + self.out.len() < PENDING_HIGH
            && !self.out_done
        {
            let d = dec
                .decode(&buf[used..])
                .map_err(|e| broken(format!("response body: {e}")))?;
            match shared {
                Some(b) if self.out_shared.is_empty() && self.out.is_empty() => {
                    self.out_shared = b.slice_ref(d.data);
                }
                _ => self.out.extend_from_slice(d.data),
            }
            used += d.consumed;
            if d.done {
                self.out_done = true;
            }
            if d.consumed == 0 {
                break;
            }
        }
        if self.out_done {
            // Anything after the body's end belongs to no response.
            used = buf.len();
        }
        // Send what the window allows now; the rest goes on the next write or flush.
        if let Poll::Ready(Err(e)) = self.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        if used == 0 {
            // The decoder took nothing (cannot happen with a non-empty buffer): wait
            // for the window rather than report a zero-length write.
            return match self.poll_drain(cx) {
                Poll::Ready(Ok(())) => Poll::Ready(Err(broken("response body stalled"))),
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            };
        }
        Poll::Ready(Ok(used))
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
            if !this.in_pending.is_empty() {
                let n = this.in_pending.len().min(buf.remaining());
                buf.put_slice(&this.in_pending.split_to(n));
                return Poll::Ready(Ok(()));
            }
            let Some(r) = this.recv.as_mut() else {
                if this.chunked_in {
                    this.chunked_in = false;
                    this.in_pending = Bytes::from_static(b"0\r\n\r\n");
                    continue;
                }
                return Poll::Ready(Ok(()));
            };
            match ready!(r.poll_data(cx)) {
                None => this.recv_done = this.recv.take(),
                Some(Err(e)) => return Poll::Ready(Err(this.failed(e))),
                Some(Ok(data)) => {
                    let _ = r.flow_control().release_capacity(data.len());
                    if data.is_empty() {
                        continue;
                    }
                    this.in_pending = if this.chunked_in {
                        let mut b = BytesMut::with_capacity(data.len() + 20);
                        b.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                        b.extend_from_slice(&data);
                        b.extend_from_slice(b"\r\n");
                        b.freeze()
                    } else {
                        data
                    };
                }
            }
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
        if let Some(e) = this.error_after_head.take() {
            return Poll::Ready(Err(e));
        }
        match this.tx {
            Tx::Head(_) => this.write_head(cx, buf),
            Tx::Body(_) => this.write_body(cx, buf, None),
            Tx::Done => Poll::Ready(Err(broken("response already complete"))),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_drain(cx)
    }

    /// Ends the response: a body that runs "until close" is complete now.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.tx {
            Tx::Head(_) => {
                this.reset();
                Poll::Ready(Ok(()))
            }
            Tx::Body(_) => {
                if !this.body_complete() {
                    // A length or chunked body cut short: the client must not take it
                    // for a whole response.
                    this.reset();
                    return Poll::Ready(Ok(()));
                }
                this.out_done = true;
                this.poll_drain(cx)
            }
            Tx::Done => Poll::Ready(Ok(())),
        }
    }
}

impl StreamIo {
    /// Decoded body bytes not yet sent.
    fn pending(&self) -> usize {
        self.out_shared.len() + self.out.len()
    }

    /// Whether the body written so far is the whole body: its framing said so, or it
    /// runs until the end of the response (no length, not chunked).
    fn body_complete(&self) -> bool {
        self.out_done || self.body.as_ref().is_some_and(|d| d.is_close_delimited())
    }
}

impl Drop for StreamIo {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        match std::mem::replace(&mut self.tx, Tx::Done) {
            Tx::Head(mut r) => r.send_reset(Reason::INTERNAL_ERROR),
            Tx::Body(mut s) => {
                if self.body_complete() {
                    // What is left goes out (the h2 crate queues it past the window,
                    // within max_send_buffer_size), then END_STREAM.
                    let first = std::mem::take(&mut self.out_shared);
                    let rest = std::mem::take(&mut self.out).freeze();
                    if (!first.is_empty() && s.send_data(first, false).is_err())
                        || s.send_data(rest, true).is_err()
                    {
                        s.send_reset(Reason::INTERNAL_ERROR);
                    }
                } else {
                    s.send_reset(Reason::INTERNAL_ERROR);
                }
            }
            Tx::Done => {}
        }
    }
}

/// A response head as HEADERS wants it.
struct ResponseHead {
    status: http::StatusCode,
    /// How the body that follows is framed.
    kind: BodyKind,
    /// The fields, hop-by-hop ones dropped; values are slices of the head.
    fields: http::HeaderMap,
}

impl ResponseHead {
    /// Parses a complete HTTP/1.1 response head written by our own code (so strict:
    /// one space after the version, CRLF line ends, no folding). `Ok(None)`: a 1xx.
    fn parse(head: &Bytes, names: &NameMemo) -> io::Result<Option<ResponseHead>> {
        let bad = || broken("response head does not parse");
        let (line, mut rest) = split_line(head).ok_or_else(bad)?;
        let code = match line {
            [b'H', b'T', b'T', b'P', b'/', b'1', b'.', b'0' | b'1', b' ', a, b, c, ..]
                if line.len() == 12 || line[12] == b' ' =>
            {
                [a, b, c].iter().try_fold(0u16, |n, d| {
                    d.is_ascii_digit().then(|| n * 10 + u16::from(*d - b'0'))
                })
            }
            _ => None,
        }
        .ok_or_else(bad)?;
        let status = http::StatusCode::from_u16(code).map_err(broken)?;
        if code < 200 {
            return Ok(None);
        }
        let mut kind = BodyKind::CloseDelimited;
        let mut fields = http::HeaderMap::with_capacity(16);
        let mut n = 0;
        let mut memo = names.cursor();
        loop {
            let (line, next) = split_line(rest).ok_or_else(bad)?;
            rest = next;
            if line.is_empty() {
                break;
            }
            n += 1;
            if n > MAX_RESPONSE_HEADERS {
                return Err(broken("response head has too many fields"));
            }
            let colon = memchr::memchr(b':', line).ok_or_else(bad)?;
            let value = edge_http::trim_ows(&line[colon + 1..]);
            // A name that is not a valid field name is left out, as before HTTP/2.
            let Some(name) = memo.lookup(&line[..colon]) else {
                continue;
            };
            match name {
                Name::Hop => {}
                Name::TransferEncoding => {
                    if value.windows(7).any(|w| w.eq_ignore_ascii_case(b"chunked")) {
                        kind = BodyKind::Chunked;
                    }
                }
                Name::Field(name, churns) => {
                    if name == http::header::CONTENT_LENGTH && kind != BodyKind::Chunked {
                        let n = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
                        kind = BodyKind::Length(n.ok_or_else(|| broken("bad content-length"))?);
                    }
                    let Ok(mut v) = http::HeaderValue::from_maybe_shared(head.slice_ref(value))
                    else {
                        continue;
                    };
                    if churns {
                        v.set_sensitive(true);
                    }
                    fields.append(name, v);
                }
            }
        }
        Ok(Some(ResponseHead {
            status,
            kind,
            fields,
        }))
    }
}

/// What HEADERS would carry for the response head `head`: its status, how its body is
/// framed and its fields (hop-by-hop ones dropped); None for a 1xx. `memo` is the
/// connection's memo of field names. (The fuzz target `h2_response_head` drives it.)
pub fn response_fields(
    head: &Bytes,
    memo: &NameMemo,
) -> io::Result<Option<(http::StatusCode, BodyKind, http::HeaderMap)>> {
    Ok(ResponseHead::parse(head, memo)?.map(|h| (h.status, h.kind, h.fields)))
}

/// The first CRLF-ended line of `b` and what follows it; None when there is none, or a
/// line ends in a bare LF.
fn split_line(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let lf = memchr::memchr(b'\n', b)?;
    let line = b[..lf].strip_suffix(b"\r")?;
    Some((line, &b[lf + 1..]))
}

/// What a response field name is to HTTP/2.
#[derive(Clone)]
enum Name {
    /// Connection-specific: not sent.
    Hop,
    /// Framing only: not sent.
    TransferEncoding,
    /// Sent; `true` when its values churn (see [`churns_hpack`]).
    Field(http::HeaderName, bool),
}

impl Name {
    fn of(raw: &[u8]) -> Option<Name> {
        let name = http::HeaderName::from_bytes(raw).ok()?;
        Some(match name.as_str() {
            "transfer-encoding" => Name::TransferEncoding,
            "connection" | "keep-alive" | "proxy-connection" | "upgrade" => Name::Hop,
            n => Name::Field(name.clone(), churns_hpack(n)),
        })
    }
}

/// Field names of one connection's responses, as written (case and all), with what
/// they are: the responses of a connection repeat the same names in the same order,
/// so each is validated, lowercased and classified once, not once per response.
#[derive(Default)]
pub struct NameMemo {
    seen: RefCell<Vec<(Box<[u8]>, Name)>>,
}

/// Names remembered per connection (past it, new names are classified every time),
/// and the longest remembered (an origin's odd long names are not kept: at most 4 KiB
/// per connection).
const MEMO_NAMES: usize = 64;
const MEMO_NAME_LEN: usize = 64;

impl NameMemo {
    fn cursor(&self) -> MemoCursor<'_> {
        MemoCursor {
            memo: self,
            next: 0,
        }
    }
}

/// Looks names up in a [`NameMemo`], trying first the one after the last found.
struct MemoCursor<'a> {
    memo: &'a NameMemo,
    next: usize,
}

impl MemoCursor<'_> {
    fn lookup(&mut self, raw: &[u8]) -> Option<Name> {
        let mut seen = self.memo.seen.borrow_mut();
        let hit = match seen.get(self.next) {
            Some((n, _)) if **n == *raw => Some(self.next),
            _ => seen.iter().position(|(n, _)| **n == *raw),
        };
        if let Some(i) = hit {
            self.next = i + 1;
            return Some(seen[i].1.clone());
        }
        let name = Name::of(raw)?;
        if seen.len() < MEMO_NAMES && raw.len() <= MEMO_NAME_LEN {
            seen.push((raw.into(), name.clone()));
            self.next = seen.len();
        }
        Some(name)
    }
}

/// Response fields whose values change from one response to the next (per object):
/// entering them in the connection's HPACK dynamic table would evict the fields that do
/// repeat (server, content-type, cache-control, x-cache-status) for entries that are
/// rarely used again, and cost a table search and insert per response. They are sent
/// as literals that are never indexed instead (3-5% less CPU per 1 KiB HTTP/2 hit,
/// `edgebench tls` h2-1k, A/B twice). `content-length` is not among them: objects of
/// one size repeat it; nor is `date`, the same for every response of a second: indexed,
/// it is one byte instead of a Huffman-coded literal each time.
fn churns_hpack(name: &str) -> bool {
    const CHURN: [&str; 6] = [
        "age",
        "etag",
        "last-modified",
        "expires",
        "cache-status",
        "x-checksum",
    ];
    CHURN.iter().any(|c| name.eq_ignore_ascii_case(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head_of(req: http::Request<()>, has_body: bool) -> (String, bool) {
        let (parts, ()) = req.into_parts();
        let mut out = BytesMut::new();
        let chunked = request_head(&parts, has_body, &mut out).unwrap();
        (String::from_utf8(out.to_vec()).unwrap(), chunked)
    }

    /// Per-response values stay out of the HPACK table; fields that repeat go in.
    #[test]
    fn only_churning_fields_skip_the_hpack_table() {
        for n in ["age", "ETag", "x-checksum", "cache-status", "last-modified"] {
            assert!(churns_hpack(n), "{n}");
        }
        for n in [
            "server",
            "content-type",
            "content-length",
            "cache-control",
            "x-cache-status",
            "date",
        ] {
            assert!(!churns_hpack(n), "{n}");
        }
    }

    fn parse(head: &str, memo: &NameMemo) -> io::Result<Option<ResponseHead>> {
        ResponseHead::parse(&Bytes::copy_from_slice(head.as_bytes()), memo)
    }

    #[test]
    fn response_heads_become_header_maps() {
        let memo = NameMemo::default();
        let head =
            "HTTP/1.1 200 OK\r\nServer: edgecache\r\nETag: \"x\"\r\nConnection: keep-alive\r\n\
                    Keep-Alive: timeout=5\r\nX-Cache-Status: HIT\r\nContent-Length:  1024 \r\n\
                    Bad Name: dropped\r\nset-cookie: a\r\nSet-Cookie: b\r\n\r\n";
        // Twice: the second time every name comes from the memo, same result.
        for _ in 0..2 {
            let h = parse(head, &memo).unwrap().unwrap();
            assert_eq!(h.status, 200);
            assert_eq!(h.kind, BodyKind::Length(1024));
            let f = &h.fields;
            assert_eq!(f["server"], "edgecache");
            assert_eq!(f["content-length"], "1024");
            assert_eq!(f["x-cache-status"], "HIT");
            assert!(f["etag"].is_sensitive() && !f["server"].is_sensitive());
            assert!(!f.contains_key("connection") && !f.contains_key("keep-alive"));
            let cookies: Vec<_> = f.get_all("set-cookie").iter().collect();
            assert_eq!(cookies, ["a", "b"]);
            assert_eq!(f.len(), 6, "{f:?}");
        }
        // Names in another order, and new ones, on the same connection.
        let h = parse(
            "HTTP/1.0 404 Not Found\r\nX-Other: 1\r\nServer: e\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            &memo,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.status, 404);
        assert_eq!(h.kind, BodyKind::Chunked);
        assert_eq!(h.fields.len(), 2);
        assert_eq!(h.fields["x-other"], "1");
        // No length, not chunked: the body runs until the end; no reason phrase is fine.
        let h = parse("HTTP/1.1 200\r\n\r\n", &memo).unwrap().unwrap();
        assert_eq!(h.kind, BodyKind::CloseDelimited);
        // A 1xx is not sent.
        assert!(
            parse("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", &memo)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn malformed_response_heads_are_errors() {
        let memo = NameMemo::default();
        for head in [
            "HTTP/1.1 200 OK\nServer: e\r\n\r\n",
            "HTTP/1.1 200 OK\r\nServer: e\n\r\n",
            "HTTP/1.1 2x0 OK\r\n\r\n",
            "HTTP/1.1 20 OK\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "HTTP/2.0 200 OK\r\n\r\n",
            "HTTP/1.1 099 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
            "HTTP/1.1 200 OK\r\nServer: e\r\n",
            "",
        ] {
            assert!(parse(head, &memo).is_err(), "{head:?}");
        }
        let many: String = (0..=MAX_RESPONSE_HEADERS)
            .map(|i| format!("x-{i}: v\r\n"))
            .collect();
        assert!(parse(&format!("HTTP/1.1 200 OK\r\n{many}\r\n"), &memo).is_err());
        // The memo stays bounded, in names and in their length.
        assert!(memo.seen.borrow().len() <= MEMO_NAMES);
        let memo = NameMemo::default();
        let long = "x".repeat(MEMO_NAME_LEN + 1);
        let h = parse(
            &format!("HTTP/1.1 200 OK\r\n{long}: v\r\nServer: e\r\n\r\n"),
            &memo,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.fields[long.as_str()], "v");
        let seen: Vec<_> = memo.seen.borrow().iter().map(|(n, _)| n.len()).collect();
        assert_eq!(seen, [6], "only Server is remembered");
    }

    #[test]
    fn request_heads_follow_rfc_9113() {
        let req = http::Request::builder()
            .method("GET")
            .uri("https://a.example/x?y=1")
            .header("host", "other.example")
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .header("te", "trailers")
            .header("accept", "*/*")
            .body(())
            .unwrap();
        let (h, chunked) = head_of(req, false);
        assert!(!chunked);
        assert_eq!(
            h,
            "GET /x?y=1 HTTP/1.1\r\nHost: a.example\r\naccept: */*\r\ncookie: a=1; b=2\r\n\r\n"
        );
        // A body without content-length is presented chunked; with one, as it is.
        let req = http::Request::builder()
            .method("POST")
            .uri("https://a.example/up")
            .body(())
            .unwrap();
        let (h, chunked) = head_of(req, true);
        assert!(chunked);
        assert!(h.ends_with("transfer-encoding: chunked\r\n\r\n"), "{h}");
        let req = http::Request::builder()
            .method("POST")
            .uri("https://a.example/up")
            .header("content-length", "3")
            .body(())
            .unwrap();
        assert!(!head_of(req, true).1);
        // The head parses with our own parser.
        let req = http::Request::builder()
            .method("GET")
            .uri("https://a.example/p")
            .body(())
            .unwrap();
        let (h, _) = head_of(req, false);
        let (head, n) = edge_http::parse_request(h.as_bytes(), &edge_http::Limits::default())
            .unwrap()
            .unwrap();
        assert_eq!(n, h.len());
        assert_eq!(head.headers.get("host"), Some(&b"a.example"[..]));
    }

    #[test]
    fn a_path_that_is_not_origin_form_is_refused() {
        // (The `http` crate itself refuses an absolute URI as a path; `*` it takes.)
        let uri = http::Uri::builder().path_and_query("*").build().unwrap();
        let get = http::Request::builder().method("GET").uri(uri.clone());
        let (parts, ()) = get.body(()).unwrap().into_parts();
        assert_eq!(request_head(&parts, false, &mut BytesMut::new()), Err(400));
        let options = http::Request::builder().method("OPTIONS").uri(uri);
        let (parts, ()) = options.body(()).unwrap().into_parts();
        assert!(request_head(&parts, false, &mut BytesMut::new()).is_ok());
    }

    #[test]
    fn connect_is_refused() {
        let req = http::Request::builder()
            .method("CONNECT")
            .uri("a.example:443")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        assert_eq!(request_head(&parts, false, &mut BytesMut::new()), Err(405));
    }
}
