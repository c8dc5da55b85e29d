//! One HTTP/2 stream seen as an HTTP/1.1 byte stream (see [`super::h2`]): the request
//! head written as HTTP/1.1 ([`request_head`]), the request body read from DATA frames,
//! the response parsed back into HEADERS and DATA frames ([`StreamIo`]).

use bytes::{Bytes, BytesMut};
use edge_http::{BodyDecoder, BodyKind, Limits, Method};
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Decoded response bytes a stream holds before its writer waits for the window.
const PENDING_HIGH: usize = 64 * 1024;
/// Largest response head a handler writes (ours are far smaller).
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// The `:authority` / `Host`-less, body framing and connection-specific checks of one
/// request, as an HTTP/1.1 head. Err: the status to answer with.
pub fn request_head(
    parts: &http::request::Parts,
    has_body: bool,
    out: &mut Vec<u8>,
) -> Result<bool, u16> {
    let Some(path) = parts.uri.path_and_query() else {
        // CONNECT (no :path): not a proxy.
        return Err(405);
    };
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
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
    pub slot_free: tokio::sync::Notify,
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
    /// The request body is presented chunked (it had no content-length).
    chunked_in: bool,
    /// Framed request-body bytes not yet read.
    in_pending: Bytes,
    tx: Tx,
    /// The response head so far.
    head_buf: Vec<u8>,
    method: Method,
    limits: Limits,
    /// The response body's framing, once the head is in.
    body: Option<BodyDecoder>,
    /// Decoded body bytes not yet sent.
    out: BytesMut,
    /// The response body is complete (END_STREAM goes with the last of `out`).
    out_done: bool,
    ended: bool,
    state: Rc<ConnState>,
    /// The client reset this stream (counted once).
    reset_seen: bool,
}

impl StreamIo {
    /// A stream's I/O: `recv` is the request body (None: the request had none),
    /// presented chunked when `chunked_in`.
    pub fn new(
        recv: Option<RecvStream>,
        chunked_in: bool,
        respond: SendResponse<Bytes>,
        method: Method,
        limits: Limits,
        state: Rc<ConnState>,
    ) -> StreamIo {
        StreamIo {
            recv,
            chunked_in,
            in_pending: Bytes::new(),
            tx: Tx::Head(respond),
            head_buf: Vec::new(),
            method,
            limits,
            body: None,
            out: BytesMut::new(),
            out_done: false,
            ended: false,
            state,
            reset_seen: false,
        }
    }
}

fn broken(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, format!("HTTP/2 stream: {e}"))
}

impl StreamIo {
    /// Notes an error of the stream; a reset by the client counts towards the
    /// connection's rapid-reset tally.
    fn failed(&mut self, e: h2::Error) -> io::Error {
        if e.is_remote() && e.is_reset() && !self.reset_seen {
            self.reset_seen = true;
            self.state
                .client_resets
                .set(self.state.client_resets.get() + 1);
        }
        self.ended = true;
        self.tx = Tx::Done;
        broken(e)
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

    /// The response head is complete in `head_buf`: HEADERS go out.
    fn send_head(&mut self, head: edge_http::ResponseHead) -> io::Result<()> {
        let mut resp = http::Response::builder().status(head.status);
        for (name, value) in head.headers.iter() {
            let lower = name.to_ascii_lowercase();
            if matches!(
                lower.as_str(),
                "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade"
            ) {
                continue;
            }
            let (Ok(n), Ok(v)) = (
                http::HeaderName::from_bytes(lower.as_bytes()),
                http::HeaderValue::from_bytes(value),
            ) else {
                continue;
            };
            resp = resp.header(n, v);
        }
        let resp = resp.body(()).map_err(broken)?;
        let end = matches!(head.body, BodyKind::Empty | BodyKind::Length(0));
        let Tx::Head(mut r) = std::mem::replace(&mut self.tx, Tx::Done) else {
            return Err(broken("response head sent twice"));
        };
        match r.send_response(resp, end) {
            Ok(s) if !end => {
                self.tx = Tx::Body(s);
                self.body = Some(BodyDecoder::new(head.body, None).upstream());
            }
            Ok(_) => self.ended = true,
            Err(e) => return Err(self.failed(e)),
        }
        Ok(())
    }

    /// Sends decoded body bytes as the window allows; Ready once `out` is empty (and
    /// the stream ended, if the body is complete).
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let Tx::Body(s) = &mut self.tx else {
                return Poll::Ready(Ok(()));
            };
            if self.out.is_empty() {
                if self.out_done {
                    if let Err(e) = s.send_data(Bytes::new(), true) {
                        return Poll::Ready(Err(self.failed(e)));
                    }
                    self.ended = true;
                    self.tx = Tx::Done;
                }
                return Poll::Ready(Ok(()));
            }
            s.reserve_capacity(self.out.len());
            let cap = match s.poll_capacity(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    self.ended = true;
                    self.tx = Tx::Done;
                    return Poll::Ready(Err(broken("stream closed")));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(self.failed(e))),
                Poll::Ready(Some(Ok(0))) => return Poll::Pending,
                Poll::Ready(Some(Ok(n))) => n,
            };
            let chunk = self.out.split_to(cap.min(self.out.len())).freeze();
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

    fn write_head(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = MAX_RESPONSE_HEAD.saturating_sub(self.head_buf.len());
        if room == 0 {
            return Err(broken("response head too large"));
        }
        let take = room.min(buf.len());
        self.head_buf.extend_from_slice(&buf[..take]);
        match edge_http::parse_response(&self.head_buf, &self.limits, &self.method) {
            Ok(None) => Ok(take),
            Err(e) => Err(broken(format!("response head: {e}"))),
            Ok(Some((head, n))) => {
                // Bytes of `buf` past the head are not taken now: the caller writes
                // them again, as body.
                let consumed = take - (self.head_buf.len() - n);
                self.head_buf.clear();
                if head.status >= 200 {
                    self.head_buf = Vec::new();
                    self.send_head(head)?;
                }
                // A 1xx is dropped (100-continue is not used over HTTP/2).
                Ok(consumed)
            }
        }
    }

    fn write_body(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.out.len() >= PENDING_HIGH {
            ready!(self.poll_drain(cx))?;
        }
        let Some(dec) = self.body.as_mut() else {
            return Poll::Ready(Err(broken("body without a head")));
        };
        let mut used = 0;
        while used < buf.len() && self.out.len() < PENDING_HIGH && !self.out_done {
            let d = dec
                .decode(&buf[used..])
                .map_err(|e| broken(format!("response body: {e}")))?;
            self.out.extend_from_slice(d.data);
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
                None => this.recv = None,
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
        match this.tx {
            Tx::Head(_) => Poll::Ready(this.write_head(buf)),
            Tx::Body(_) => this.write_body(cx, buf),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn head_of(req: http::Request<()>, has_body: bool) -> (String, bool) {
        let (parts, ()) = req.into_parts();
        let mut out = Vec::new();
        let chunked = request_head(&parts, has_body, &mut out).unwrap();
        (String::from_utf8(out).unwrap(), chunked)
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
        let (head, n) = edge_http::parse_request(h.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        assert_eq!(n, h.len());
        assert_eq!(head.headers.get("host"), Some(&b"a.example"[..]));
    }

    #[test]
    fn connect_is_refused() {
        let req = http::Request::builder()
            .method("CONNECT")
            .uri("a.example:443")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        assert_eq!(request_head(&parts, false, &mut Vec::new()), Err(405));
    }
}
