//! One HTTP/2 stream (see [`super::h2`]): the request head taken from the stream's
//! fields ([`request_head`]), the request body read from DATA frames, the response's
//! version-neutral head sent as HEADERS ([`HeadSlot`], [`response_fields`]) and its
//! body's bytes as DATA frames ([`StreamIo`]).

use super::head::{BodyIn, BodyLen, HeadSlot, PendingHead};
use bytes::{Bytes, BytesMut};
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
/// Response body bytes a stream holds before its writer waits for the window.
const PENDING_HIGH: usize = 64 * 1024;
/// Most fields of a response head.
const MAX_RESPONSE_HEADERS: usize = 64;

/// The request head of a stream, checked as our HTTP/1.1 parser checks one
/// ([`edge_http::request_from_fields`]), and its size as HTTP/1.1 lines (for
/// `$request_length`). Err: the status to answer with.
pub fn request_head(
    parts: &http::request::Parts,
    has_body: bool,
    limits: &edge_http::Limits,
    spare: Option<Box<edge_http::RequestHead>>,
) -> Result<(Box<edge_http::RequestHead>, usize), u16> {
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
    let authority = parts.uri.authority().map(|a| a.as_str());
    let fields = || {
        parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes()))
    };
    let head = edge_http::request_from_fields(
        parts.method.as_str(),
        p,
        authority,
        fields,
        has_body,
        limits,
        spare,
    )
    .map_err(|e| e.status())?;
    let len = parts.method.as_str().len()
        + p.len()
        + 13
        + authority.map_or(0, |a| a.len() + 8)
        + fields().map(|(n, v)| n.len() + v.len() + 4).sum::<usize>();
    Ok((head, len))
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

/// One stream as the session and the handlers see it: the request body read from DATA
/// frames, the response head taken from its [`HeadSlot`] and sent as HEADERS, the
/// response body's bytes (no framing of any kind) written as DATA frames.
pub struct StreamIo {
    /// The request body still to read (None: none, or all read).
    recv: Option<RecvStream>,
    /// The receiving half once it carries no body (none, or all read): it tells
    /// whether the client reset the stream (the sending half cannot).
    recv_done: Option<RecvStream>,
    /// The request body as the session's decoder reads it.
    body_in: BodyIn,
    tx: Tx,
    /// Where the exchange leaves the response head.
    slot: Rc<HeadSlot>,
    /// Body bytes still to come when the head gave the length (None: until the end).
    left: Option<u64>,
    /// Body bytes not yet sent.
    out: BytesMut,
    /// The response body is complete (END_STREAM goes with the last of `out`).
    out_done: bool,
    ended: bool,
    state: Rc<ConnState>,
    /// The client reset this stream (counted once).
    reset_seen: bool,
}

impl StreamIo {
    /// A stream's I/O: `recv` is the stream's receiving half, `has_body` whether the
    /// request has a body, presented chunked when `chunked_in`.
    pub fn new(
        recv: RecvStream,
        has_body: bool,
        chunked_in: bool,
        respond: SendResponse<Bytes>,
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
            body_in: BodyIn::new(chunked_in),
            tx: Tx::Head(respond),
            slot: Rc::default(),
            left: None,
            out: BytesMut::new(),
            out_done: false,
            ended: false,
            state,
            reset_seen: false,
        }
    }

    /// Where this stream's exchange leaves its response head.
    pub fn head_slot(&self) -> Rc<HeadSlot> {
        self.slot.clone()
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

    /// Answers `status` with no body: a request refused before it became an exchange.
    pub fn refuse(&mut self, status: u16) -> io::Result<()> {
        self.slot.put(status, b"", BodyLen::None, false);
        self.start()
    }

    /// Sends the response head the exchange left in the slot, if it has not gone out
    /// yet.
    pub fn start(&mut self) -> io::Result<()> {
        if !matches!(self.tx, Tx::Head(_)) {
            return Ok(());
        }
        let Some(p) = self.slot.take() else {
            return Ok(());
        };
        self.send_head(p)
    }

    /// The response head goes out as HEADERS: its field lines become the fields
    /// (values are slices of the lines, no copy; connection-specific fields dropped).
    fn send_head(&mut self, p: PendingHead) -> io::Result<()> {
        let status = http::StatusCode::from_u16(p.status).map_err(broken)?;
        let fields = response_fields(&p.fields, &self.state.names)?;
        let mut len = p.body;
        if p.head || matches!(p.status, 204 | 304) {
            len = BodyLen::None;
        }
        let end = matches!(len, BodyLen::None | BodyLen::Known(0));
        let mut resp = http::Response::new(());
        *resp.status_mut() = status;
        *resp.headers_mut() = fields;
        let Tx::Head(mut r) = std::mem::replace(&mut self.tx, Tx::Done) else {
            return Err(broken("response head sent twice"));
        };
        match r.send_response(resp, end) {
            Ok(s) if !end => {
                self.tx = Tx::Body(s);
                self.left = match len {
                    BodyLen::Known(n) => Some(n),
                    _ => None,
                };
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

    /// Sends queued body bytes as the window allows; Ready once `out` is empty (and
    /// the stream ended, if the body is complete).
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let pending = self.out.len();
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
            let n = cap.min(self.out.len()).min(DATA_CHUNK);
            let chunk = self.out.split_to(n).freeze();
            let end = self.out.is_empty() && self.out_done;
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

    /// Takes body bytes (the body itself: HTTP/2 frames it) and queues them, then sends
    /// what the window allows. Bytes past a body of known length belong to no
    /// response: they are taken and dropped.
    fn write_body(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.out.len() >= PENDING_HIGH {
            ready!(self.poll_drain(cx))?;
        }
        if self.out_done {
            return Poll::Ready(Ok(buf.len()));
        }
        let mut n = buf.len().min(PENDING_HIGH.saturating_sub(self.out.len()));
        let mut used = n;
        if let Some(left) = self.left {
            if n as u64 >= left {
                n = left as usize;
                used = buf.len();
                self.out_done = true;
            }
            self.left = Some(left - n as u64);
        }
        self.out.extend_from_slice(&buf[..n]);
        // Send what the window allows now; the rest goes on the next write or flush.
        if let Poll::Ready(Err(e)) = self.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        if used == 0 {
            // No room (cannot happen: a full queue was drained above): wait for the
            // window rather than report a zero-length write.
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
            if this.body_in.read_into(buf) {
                return Poll::Ready(Ok(()));
            }
            let Some(r) = this.recv.as_mut() else {
                if this.body_in.end() {
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
                    this.body_in.push(data);
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
        this.start()?;
        match this.tx {
            Tx::Head(_) => Poll::Ready(Err(broken("body without a head"))),
            Tx::Body(_) => this.write_body(cx, buf),
            Tx::Done => Poll::Ready(Err(broken("response already complete"))),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.start()?;
        this.poll_drain(cx)
    }

    /// Ends the response: a body that runs "until the end" is complete now.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.start()?;
        match this.tx {
            Tx::Head(_) => {
                this.reset();
                Poll::Ready(Ok(()))
            }
            Tx::Body(_) => {
                if !this.body_complete() {
                    // A body of known length cut short: the client must not take it
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
    /// Whether the body written so far is the whole body: all of its known length, or
    /// it runs until the end of the response.
    fn body_complete(&self) -> bool {
        self.out_done || self.left.is_none()
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
                    let rest = std::mem::take(&mut self.out).freeze();
                    if s.send_data(rest, true).is_err() {
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

/// The fields HEADERS carries for a response head's field lines `block`: valid names
/// only, connection-specific fields dropped (HTTP/2 frames the body itself), values
/// slices of `block`. `memo` is the connection's memo of field names. At most
/// [`MAX_RESPONSE_HEADERS`] lines (the fuzz target `h2_response_head` drives it).
pub fn response_fields(block: &Bytes, memo: &NameMemo) -> io::Result<http::HeaderMap> {
    let mut fields = http::HeaderMap::with_capacity(16);
    let mut memo = memo.cursor();
    let mut lines = edge_http::FieldLines::new(block, MAX_RESPONSE_HEADERS);
    for (name, value) in lines.by_ref() {
        // A name that is not a valid field name is left out, as before HTTP/2.
        let Some(Name::Field(name, churns)) = memo.lookup(name) else {
            continue;
        };
        let Ok(mut v) = http::HeaderValue::from_maybe_shared(block.slice_ref(value)) else {
            continue;
        };
        if churns {
            v.set_sensitive(true);
        }
        fields.append(name, v);
    }
    if lines.overflowed() {
        return Err(broken("response head has too many fields"));
    }
    Ok(fields)
}

/// What a response field name is to HTTP/2.
#[derive(Clone)]
enum Name {
    /// Connection-specific (framing included): not sent.
    Hop,
    /// Sent; `true` when its values churn (see [`churns_hpack`]).
    Field(http::HeaderName, bool),
}

impl Name {
    fn of(raw: &[u8]) -> Option<Name> {
        let name = http::HeaderName::from_bytes(raw).ok()?;
        Some(match name.as_str() {
            "connection" | "keep-alive" | "proxy-connection" | "upgrade" | "transfer-encoding" => {
                Name::Hop
            }
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

    fn head_of(req: http::Request<()>, has_body: bool) -> Result<edge_http::RequestHead, u16> {
        let (parts, ()) = req.into_parts();
        request_head(&parts, has_body, &edge_http::Limits::default(), None).map(|(h, _)| *h)
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

    fn fields(block: &str, memo: &NameMemo) -> io::Result<http::HeaderMap> {
        response_fields(&Bytes::copy_from_slice(block.as_bytes()), memo)
    }

    #[test]
    fn field_lines_become_header_maps() {
        let memo = NameMemo::default();
        let block = "Server: edgecache\r\nETag: \"x\"\r\nConnection: keep-alive\r\n\
                    Keep-Alive: timeout=5\r\nX-Cache-Status: HIT\r\nContent-Length:  1024 \r\n\
                    Transfer-Encoding: chunked\r\nBad Name: dropped\r\nno colon\r\n\
                    set-cookie: a\r\nSet-Cookie: b\r\n";
        // Twice: the second time every name comes from the memo, same result.
        for _ in 0..2 {
            let f = fields(block, &memo).unwrap();
            assert_eq!(f["server"], "edgecache");
            assert_eq!(f["content-length"], "1024");
            assert_eq!(f["x-cache-status"], "HIT");
            assert!(f["etag"].is_sensitive() && !f["server"].is_sensitive());
            for hop in ["connection", "keep-alive", "transfer-encoding"] {
                assert!(!f.contains_key(hop), "{hop}");
            }
            let cookies: Vec<_> = f.get_all("set-cookie").iter().collect();
            assert_eq!(cookies, ["a", "b"]);
            assert_eq!(f.len(), 6, "{f:?}");
        }
        // Names in another order, and new ones, on the same connection.
        let f = fields("X-Other: 1\r\nServer: e\r\n", &memo).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f["x-other"], "1");
        assert!(fields("", &memo).unwrap().is_empty());
    }

    #[test]
    fn too_many_fields_are_an_error_and_the_memo_stays_bounded() {
        let memo = NameMemo::default();
        let many: String = (0..=MAX_RESPONSE_HEADERS)
            .map(|i| format!("x-{i}: v\r\n"))
            .collect();
        assert!(fields(&many, &memo).is_err());
        assert!(memo.seen.borrow().len() <= MEMO_NAMES);
        let memo = NameMemo::default();
        let long = "x".repeat(MEMO_NAME_LEN + 1);
        let f = fields(&format!("{long}: v\r\nServer: e\r\n"), &memo).unwrap();
        assert_eq!(f[long.as_str()], "v");
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
        let h = head_of(req, false).unwrap();
        assert_eq!(h.target, "/x?y=1");
        assert_eq!(h.host(), Some("a.example"));
        assert_eq!(h.version, edge_http::Version::Http2);
        assert_eq!(h.headers.get("cookie"), Some(&b"a=1; b=2"[..]));
        assert!(!h.headers.contains("te"));
        // A body without content-length is presented chunked; with one, as it is.
        let req = http::Request::builder()
            .method("POST")
            .uri("https://a.example/up")
            .body(())
            .unwrap();
        assert_eq!(
            head_of(req, true).unwrap().body,
            edge_http::BodyKind::Chunked
        );
        let req = http::Request::builder()
            .method("POST")
            .uri("https://a.example/up")
            .header("content-length", "3")
            .body(())
            .unwrap();
        assert_eq!(
            head_of(req, true).unwrap().body,
            edge_http::BodyKind::Length(3)
        );
    }

    #[test]
    fn a_path_that_is_not_origin_form_is_refused() {
        // (The `http` crate itself refuses an absolute URI as a path; `*` it takes.)
        let uri = http::Uri::builder().path_and_query("*").build().unwrap();
        let get = http::Request::builder().method("GET").uri(uri.clone());
        let get = get.header("host", "a.example");
        assert_eq!(head_of(get.body(()).unwrap(), false).err(), Some(400));
        let options = http::Request::builder().method("OPTIONS").uri(uri);
        let options = options.header("host", "a.example");
        let h = head_of(options.body(()).unwrap(), false).unwrap();
        assert_eq!(
            (h.method, h.target.as_str()),
            (edge_http::Method::Options, "*")
        );
    }

    #[test]
    fn connect_is_refused() {
        let req = http::Request::builder()
            .method("CONNECT")
            .uri("a.example:443")
            .body(())
            .unwrap();
        assert_eq!(head_of(req, false).err(), Some(405));
    }
}
