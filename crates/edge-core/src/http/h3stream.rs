//! One HTTP/3 request stream (see [`crate::quic`]): the request body read from DATA
//! frames, the response's version-neutral head sent as a HEADERS frame (from the
//! exchange's [`HeadSlot`], as on HTTP/2) and its body's bytes as DATA frames.
//!
//! The `h3` crate's sending calls are `async fn`s that borrow the stream. A stream's
//! sends therefore run one at a time as a boxed operation that owns the sending half
//! while it runs ([`Sending`]) and hands it back when done. Body bytes written while an
//! operation runs gather in one buffer and leave as the next DATA frame, so a handler's
//! many small writes become few frames, and a write never waits unless
//! [`PENDING_HIGH`] bytes are already waiting.
//!
//! A response that cannot be completed (the handler failed mid-body, the stream was
//! dropped early) is reset (`H3_REQUEST_CANCELLED`), never finished: quinn finishes a
//! dropped stream cleanly, which would let the client take a cut body for a whole one.

use super::h3fields::NameMemo;
use super::head::{BodyIn, BodyLen, HeadSlot, PendingHead};
use bytes::{Buf, Bytes, BytesMut};
use h3::error::{Code, StreamError};
use std::cell::Cell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The sending half of a request stream.
pub type SendHalf = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
/// The receiving half.
pub type RecvHalf = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;

/// Body bytes a stream gathers while a send runs before its writer waits.
const PENDING_HIGH: usize = 64 * 1024;

/// The per-connection state its streams share.
pub struct ConnState {
    /// The `limit_conn` counts of the connection: it counts once for all its
    /// streams, until it closes.
    pub held: crate::limit::Held,
    /// Response field names seen on this connection.
    pub names: NameMemo,
    /// Streams being served.
    pub active: Cell<usize>,
    /// Told when the last stream being served ends.
    pub idle: tokio::sync::Notify,
    /// The QUIC connection: its client address now (it changes when the client
    /// migrates).
    pub quic: quinn::Connection,
    /// The handshake, while early data may arrive.
    pub handshake: Rc<Handshake>,
}

/// Where a connection that takes early data stands in its handshake.
#[derive(Default)]
pub struct Handshake {
    /// Requests arriving now came as early data (0-RTT).
    pub pending: Cell<bool>,
    /// Told when it completes (or fails).
    pub done: tokio::sync::Notify,
}

/// What one send operation does.
enum Op {
    Head(http::Response<()>, bool),
    Data(Bytes, bool),
    Finish,
}

/// A running send: it owns the sending half until it is done.
type Sending = Pin<Box<dyn Future<Output = (SendHalf, Result<(), StreamError>)>>>;

/// Holds the sending half inside a running send. Dropped before the send is done
/// (the stream's owner gave up on it), it resets the stream.
struct Guard(Option<SendHalf>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(s) = &mut self.0 {
            s.stop_stream(Code::H3_REQUEST_CANCELLED);
        }
    }
}

async fn run(op: Op, s: SendHalf) -> (SendHalf, Result<(), StreamError>) {
    let mut g = Guard(Some(s));
    let s = g.0.as_mut().expect("just set");
    let r = match op {
        Op::Head(resp, end) => match s.send_response(resp).await {
            Ok(()) if end => s.finish().await,
            r => r,
        },
        Op::Data(b, end) => match s.send_data(b).await {
            Ok(()) if end => s.finish().await,
            r => r,
        },
        Op::Finish => s.finish().await,
    };
    (g.0.take().expect("held until here"), r)
}

fn broken(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, format!("HTTP/3 stream: {e}"))
}

/// One stream as the session and the handlers see it (see the module doc).
pub struct StreamIo {
    /// The request body still to read (None: none, or all read).
    recv: Option<RecvHalf>,
    /// The request body as the session's decoder reads it.
    body_in: BodyIn,
    /// The sending half while no send runs.
    send: Option<SendHalf>,
    /// The send running.
    sending: Option<Sending>,
    /// Where the exchange leaves the response head.
    slot: Rc<HeadSlot>,
    /// The head, taken from the slot, not yet handed to a send.
    head: Option<(http::Response<()>, bool)>,
    /// The head has been taken (a response has begun).
    head_taken: bool,
    /// Body bytes still to come when the head gave the length (None: until the end).
    left: Option<u64>,
    /// Body bytes not yet handed to a send.
    out: BytesMut,
    /// The body is complete: the stream finishes with the last of `out`.
    out_done: bool,
    /// The stream is finished (or reset): nothing more goes out.
    ended: bool,
    state: Rc<ConnState>,
}

impl StreamIo {
    /// A stream's I/O: `recv` is its receiving half (read only when `has_body`),
    /// presented chunked when `chunked_in`.
    pub fn new(
        send: SendHalf,
        recv: RecvHalf,
        has_body: bool,
        chunked_in: bool,
        state: Rc<ConnState>,
    ) -> StreamIo {
        StreamIo {
            recv: has_body.then_some(recv),
            body_in: BodyIn::new(chunked_in),
            send: Some(send),
            sending: None,
            slot: Rc::default(),
            head: None,
            head_taken: false,
            left: None,
            out: BytesMut::new(),
            out_done: false,
            ended: false,
            state,
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

    /// Answers `status` with no body: a request refused before it became an exchange.
    pub fn refuse(&mut self, status: u16) -> io::Result<()> {
        self.slot.put(status, b"", BodyLen::None, false);
        self.start()
    }

    /// Takes the response head the exchange left in the slot, if any: it goes out with
    /// the next send (a flush, a write or the end).
    pub fn start(&mut self) -> io::Result<()> {
        if self.head_taken {
            return Ok(());
        }
        let Some(p) = self.slot.take() else {
            return Ok(());
        };
        self.head_taken = true;
        let (resp, len) = self.response(p)?;
        let end = matches!(len, BodyLen::None | BodyLen::Known(0));
        self.left = match len {
            BodyLen::Known(n) => Some(n),
            _ => None,
        };
        if end {
            self.out_done = true;
        }
        self.head = Some((resp, end));
        Ok(())
    }

    /// The response for a head: its field lines become the fields (connection-specific
    /// ones dropped, as on HTTP/2: RFC 9114 4.2).
    fn response(&self, p: PendingHead) -> io::Result<(http::Response<()>, BodyLen)> {
        let status = http::StatusCode::from_u16(p.status).map_err(broken)?;
        let fields = super::h3fields::response_fields(&p.fields, &self.state.names)?;
        let mut len = p.body;
        if p.head || matches!(p.status, 204 | 304) || p.status < 200 {
            len = BodyLen::None;
        }
        let mut resp = http::Response::new(());
        *resp.status_mut() = status;
        *resp.headers_mut() = fields;
        Ok((resp, len))
    }

    /// Resets the stream: the response cannot be completed.
    pub fn reset(&mut self) {
        // A running send resets it as it is dropped.
        self.sending = None;
        if let Some(s) = &mut self.send {
            if !self.ended {
                s.stop_stream(Code::H3_REQUEST_CANCELLED);
            }
        }
        if let Some(r) = &mut self.recv {
            r.stop_sending(Code::H3_REQUEST_CANCELLED);
        }
        self.ended = true;
    }

    /// Polls the running send, if any; Ready once none runs.
    fn poll_sending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(f) = self.sending.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let (s, r) = ready!(f.as_mut().poll(cx));
        self.sending = None;
        self.send = Some(s);
        match r {
            Ok(()) => Poll::Ready(Ok(())),
            Err(e) => {
                self.ended = true;
                Poll::Ready(Err(broken(e)))
            }
        }
    }

    /// Hands what is waiting (the head, gathered body bytes, the end) to sends, one at
    /// a time. With `all`, Ready only once everything is handed over and no send runs;
    /// without, Ready as soon as the next send is started (a write goes on gathering).
    fn pump(&mut self, cx: &mut Context<'_>, all: bool) -> Poll<io::Result<()>> {
        loop {
            if self.sending.is_some() {
                match self.poll_sending(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending if all => return Poll::Pending,
                    Poll::Pending => return Poll::Ready(Ok(())),
                }
            }
            if self.ended {
                return Poll::Ready(Ok(()));
            }
            let op = if let Some((resp, end)) = self.head.take() {
                if end {
                    self.ended = true;
                }
                Op::Head(resp, end)
            } else if !self.out.is_empty() {
                let end = self.out_done;
                if end {
                    self.ended = true;
                }
                Op::Data(self.out.split().freeze(), end)
            } else if self.out_done && self.head_taken {
                self.ended = true;
                Op::Finish
            } else {
                return Poll::Ready(Ok(()));
            };
            let Some(s) = self.send.take() else {
                return Poll::Ready(Err(broken("stream already closed")));
            };
            self.sending = Some(Box::pin(run(op, s)));
        }
    }

    /// Queues body bytes (the body itself: HTTP/3 frames it). Bytes past a body of
    /// known length belong to no response and are an error.
    fn write_body(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.out_done {
            // The whole body is written (or the head said there is none: HEAD, 304).
            return Poll::Ready(Err(broken("response already complete")));
        }
        if self.out.len() >= PENDING_HIGH {
            ready!(self.pump(cx, true))?;
        }
        let mut used = 0usize;
        for b in bufs {
            let mut take = b.len();
            if let Some(left) = self.left {
                take = take.min(usize::try_from(left).unwrap_or(usize::MAX));
                self.left = Some(left - take as u64);
            }
            self.out.extend_from_slice(&b[..take]);
            used += take;
            if take < b.len() {
                break;
            }
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if used < total && used == 0 {
            return Poll::Ready(Err(broken("body longer than its content-length")));
        }
        if self.left == Some(0) {
            self.out_done = true;
        }
        // Starts the next send now if none runs; gathers otherwise.
        ready!(self.pump(cx, false))?;
        Poll::Ready(Ok(used))
    }

    /// Whether the body written so far is the whole body: all of its known length, or
    /// it runs until the end of the response.
    fn body_complete(&self) -> bool {
        self.out_done || self.left.is_none()
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
            if this.body_in.read_into(buf) {
                return Poll::Ready(Ok(()));
            }
            let Some(r) = this.recv.as_mut() else {
                if this.body_in.end() {
                    continue;
                }
                return Poll::Ready(Ok(()));
            };
            match ready!(r.poll_recv_data(cx)) {
                Ok(None) => this.recv = None,
                Err(e) => return Poll::Ready(Err(broken(e))),
                Ok(Some(mut data)) => {
                    let data = data.copy_to_bytes(data.remaining());
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
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if bufs.iter().all(|b| b.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        this.start()?;
        if !this.head_taken {
            return Poll::Ready(Err(broken("body without a head")));
        }
        this.write_body(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.start()?;
        this.pump(cx, true)
    }

    /// Ends the response: a body that runs "until the end" is complete now.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.start()?;
        if !this.head_taken {
            this.reset();
            return Poll::Ready(Ok(()));
        }
        if !this.ended || this.sending.is_some() {
            if !this.body_complete() {
                // A body of known length cut short: the client must not take it for a
                // whole response.
                this.reset();
                return Poll::Ready(Ok(()));
            }
            this.out_done = true;
        }
        this.pump(cx, true)
    }
}

impl Drop for StreamIo {
    fn drop(&mut self) {
        if self.ended && self.sending.is_none() {
            return;
        }
        if self.ended && self.out.is_empty() && self.head.is_none() {
            // The last send is still running (a finish, the last bytes): it goes on
            // by itself on the connection; dropping it here would reset the stream. It
            // is spawned to complete.
            if let Some(f) = self.sending.take() {
                tokio::task::spawn_local(async move {
                    let _ = f.await;
                });
            }
            return;
        }
        // Incomplete: reset (a running send resets it as it is dropped).
        self.reset();
    }
}
