//! HTTP/2 for clients, on the `h2` crate: each stream is served by the same session
//! code, router, handlers and cache as an HTTP/1.1 request.
//!
//! A stream's request is written as an HTTP/1.1 head (pseudo-headers become the
//! request line and `Host`, cookies are joined, connection-specific fields dropped) and
//! parsed by our own parser, so every limit and check of HTTP/1.1 applies to it too. A
//! body without `content-length` is presented chunked. The handler's response, written
//! as HTTP/1.1 bytes into the stream's [`StreamIo`], is parsed back: the head becomes
//! HEADERS, the body (by `Content-Length`, chunked or until the end) DATA frames sent
//! as the client's flow-control window allows.
//!
//! Defences (each counted in [`crate::metrics::H2Stats`]):
//! - at most [`MAX_CONCURRENT_STREAMS`] streams per connection, and as many stream
//!   tasks: a stream the client resets keeps its slot until its task has ended, so
//!   resetting streams cannot start more work than the limit (rapid reset,
//!   CVE-2023-44487); a client that resets more than [`RESET_FLOOD`] streams, and more
//!   than half of its streams, gets GOAWAY ENHANCE_YOUR_CALM;
//! - the header list (after HPACK decoding) is bounded by `client_max_header_size`, so
//!   an HPACK bomb or a flood of CONTINUATION frames ends in an error, not in memory;
//! - resets the server must send, and resets the client sends before a stream is
//!   accepted, are bounded by the `h2` crate's limits set here.

use super::conn::{ClientIo, Conn};
use super::h2stream::{request_head, ConnState, StreamIo};
use super::session::Service;
use crate::metrics::H2Stats;
use bytes::Bytes;
use edge_http::Method;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

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
pub async fn serve<S, T>(w: Rc<S>, io: T, peer: SocketAddr)
where
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
    let mut conn = match tokio::time::timeout(
        timeouts.client_header,
        builder.handshake::<_, Bytes>(Coalesce::new(io)),
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
    let mut goaway_sent = false;
    loop {
        if !goaway_sent && w.draining() {
            // Stopping or upgrading: GOAWAY, let the open streams finish.
            conn.graceful_shutdown();
            goaway_sent = true;
        }
        if state.active.get() >= MAX_CONCURRENT_STREAMS as usize {
            // Every slot busy (streams the client reset included): drive the
            // connection without taking new streams until a task ends.
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
        // With no stream open the connection is idle: keepalive_timeout applies; with
        // streams open only a stop interrupts the wait.
        let idle = if state.active.get() == 0 {
            timeouts.keepalive
        } else {
            std::time::Duration::from_secs(86_400)
        };
        let next = tokio::select! {
            biased;
            r = conn.accept() => r,
            _ = w.idle().wait(idle, true), if !goaway_sent => {
                conn.graceful_shutdown();
                goaway_sent = true;
                continue;
            }
        };
        match next {
            None => break,
            Some(Err(e)) => {
                count_error(stats, &e);
                tracing::debug!("client {peer}: HTTP/2: {e}");
                break;
            }
            Some(Ok(first)) => {
                // Every request already received is taken now (each stream's task
                // runs after this one yields, so the responses ready at once leave
                // together in the connection's next write).
                let mut batch = vec![first];
                let mut end = None;
                while state.active.get() + batch.len() < MAX_CONCURRENT_STREAMS as usize {
                    match std::future::poll_fn(|cx| Poll::Ready(conn.poll_accept(cx))).await {
                        Poll::Ready(Some(Ok(s))) => batch.push(s),
                        Poll::Ready(other) => {
                            end = Some(other);
                            break;
                        }
                        Poll::Pending => break,
                    }
                }
                for (req, respond) in batch {
                    start_stream(&w, &state, req, respond, peer);
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

/// Bytes of frames gathered before they are written (then split into TLS records of
/// 16 KiB).
const COALESCE: usize = 64 * 1024;
/// A write at least this big is not gathered but passed on (after what is gathered).
const PASS_THROUGH: usize = 4 * 1024;

/// Gathers the connection's writes until the `h2` crate flushes. Without it every DATA
/// frame of 256 bytes or more is its own write (the crate keeps one such payload at a
/// time): one syscall and one TLS record per response, for responses it could send
/// together. With it, the responses ready when the connection task runs leave in one
/// write.
struct Coalesce<T> {
    inner: T,
    buf: Vec<u8>,
    /// Bytes of `buf` already written.
    pos: usize,
}

impl<T: AsyncWrite + Unpin> Coalesce<T> {
    fn new(inner: T) -> Coalesce<T> {
        Coalesce {
            inner,
            buf: Vec::new(),
            pos: 0,
        }
    }

    /// Writes out what is gathered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.pos < self.buf.len() {
            match ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.pos..])) {
                Ok(0) => return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
                Ok(n) => self.pos += n,
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
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesce<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
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
        let this = self.get_mut();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total >= PASS_THROUGH || this.buf.len() + total > COALESCE {
            // What is gathered goes first (order), then a big piece (a DATA frame of
            // a large body, its 9-byte head with it) goes straight to TLS, which
            // copies it into its records anyway: no copy here.
            ready!(this.poll_drain(cx))?;
            if total >= PASS_THROUGH {
                return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
            }
        }
        for b in bufs {
            this.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// Serves one stream in a task of its own. Its work is boxed once, so the task stays
/// small: spawning and finishing it copy a few words, not the ~6 KB state of the
/// handlers. (Polling it inline first, to spare the task for hits that complete at
/// once, measured no better and made throughput bimodal.)
fn start_stream<S: Service + 'static>(
    w: &Rc<S>,
    state: &Rc<ConnState>,
    req: http::Request<RecvStream>,
    respond: SendResponse<Bytes>,
    peer: SocketAddr,
) {
    w.stats().h2.streams.fetch_add(1, Relaxed);
    state.streams.set(state.streams.get() + 1);
    state.active.set(state.active.get() + 1);
    let (w2, st) = (w.clone(), state.clone());
    tokio::task::spawn_local(async move {
        Box::pin(stream_task(&*w2, req, respond, peer, &st)).await;
        let resets = st.resets_unreported.take();
        if resets > 0 {
            w2.stats().h2.client_resets.fetch_add(resets, Relaxed);
        }
        st.active.set(st.active.get() - 1);
        st.slot_free.notify_one();
    });
}

fn count_error(stats: &H2Stats, e: &h2::Error) {
    let i = if e.is_io() {
        6
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
    state: &Rc<ConnState>,
) {
    let (parts, body) = req.into_parts();
    let has_body = !body.is_end_stream();
    let mut rbuf = w.take_rbuf();
    let chunked = match request_head(&parts, has_body, &mut rbuf) {
        Ok(c) => c,
        Err(status) => {
            let resp = http::Response::builder().status(status).body(());
            if let Ok(r) = resp {
                let _ = respond.send_response(r, true);
            }
            return;
        }
    };
    let io = StreamIo::new(
        body,
        has_body,
        chunked,
        respond,
        Method::from_token(parts.method.as_str()),
        state.clone(),
    );
    let mut conn = Conn::over(ClientIo::H2(Box::new(io)), peer);
    conn.rbuf = rbuf;
    super::session::serve_stream(w, conn).await;
}
