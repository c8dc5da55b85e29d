//! HTTP/3 for clients, on quinn and the `h3` crate: each request stream is served by
//! the same session code, router, handlers and cache as an HTTP/1.1 request or an
//! HTTP/2 stream.
//!
//! A stream's request becomes a [`edge_http::RequestHead`] through the same checks as
//! HTTP/2's ([`super::h3fields::request_head`]: pseudo-headers, Host, content-length,
//! limits); its response's version-neutral head goes out as HEADERS and its body as
//! DATA frames ([`super::h3stream::StreamIo`]).
//!
//! Defences (each counted in [`crate::metrics::QuicStats`]): the handshake must complete
//! within `client_header_timeout`; quinn bounds the streams a client may open
//! ([`crate::quic::MAX_STREAMS`]) and the flow-control windows; the header section of a
//! request is bounded by `client_max_header_size` (h3's own default is unlimited);
//! QPACK runs without a dynamic table (the `h3` crate has none), so there is no table
//! to bound. Early data (0-RTT, `early_data = true`): a GET or HEAD that arrives before
//! the handshake completes is served at once and goes upstream with `Early-Data: 1`
//! (RFC 8470: an origin may answer 425, which reaches the client, which retries); any
//! other method is held until the handshake completes, so it can never be replayed.

use super::conn::{ClientIo, Conn, ConnInfo};
use super::h3stream::{ConnState, Handshake, StreamIo};
use super::session::Service;
use bytes::Bytes;
use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;

/// What a connection's server decided at accept.
pub struct Accepted {
    pub info: ConnInfo,
    /// The `limit_conn` counts the connection took.
    pub held: crate::limit::Held,
    /// `early_data = true` on the listener.
    pub early_data: bool,
    /// The listener's certificates (which names the SNI-chosen one covers).
    pub sni: Option<std::sync::Arc<crate::tls::SniResolver>>,
}

/// Serves one QUIC connection from its handshake to its close (counting the close is
/// the caller's, after this returns). `handshake_over` is called once the handshake is
/// over, done or failed (with early data: once the connection may serve requests).
pub async fn serve<S: Service + 'static>(
    w: Rc<S>,
    connecting: quinn::Connecting,
    a: Accepted,
    handshake_over: impl FnOnce(),
) {
    let (timeout, header_limit) = {
        let cfg = w.config();
        let p = S::params(&cfg);
        (p.timeouts.client_header, p.limits.max_header_bytes)
    };
    let stats = &w.stats().quic;
    let handshake = Rc::new(Handshake::default());
    let conn = if a.early_data {
        match connecting.into_0rtt() {
            Ok((conn, accepted)) => {
                // A server takes early data (and sends 0.5-RTT) at once; whether the
                // client sent any is known when the handshake completes (or fails:
                // then every stream fails with the connection).
                handshake.pending.set(true);
                let hs = handshake.clone();
                tokio::task::spawn_local(async move {
                    // (A server's always resolves, to true, once the handshake is
                    // complete or the connection is gone.)
                    let _ = accepted.await;
                    hs.pending.set(false);
                    hs.done.notify_waiters();
                });
                conn
            }
            Err(connecting) => match complete(connecting, timeout).await {
                Some(c) => c,
                None => {
                    stats.handshake_errors.fetch_add(1, Relaxed);
                    return;
                }
            },
        }
    } else {
        match complete(connecting, timeout).await {
            Some(c) => c,
            None => {
                stats.handshake_errors.fetch_add(1, Relaxed);
                return;
            }
        }
    };
    handshake_over();
    stats.handshakes.fetch_add(1, Relaxed);
    let mut info = a.info;
    info.sni_cert = sni_cert(&conn, a.sni.as_deref());
    let state = Rc::new(ConnState {
        held: a.held,
        names: Default::default(),
        active: Cell::new(0),
        idle: tokio::sync::Notify::new(),
        quic: conn.clone(),
        handshake,
    });
    let mut builder = h3::server::builder();
    builder.max_field_section_size(header_limit as u64);
    let built = builder.build::<_, Bytes>(h3_quinn::Connection::new(conn.clone()));
    let mut h3c = match tokio::time::timeout(timeout, built).await {
        Ok(Ok(c)) => c,
        _ => {
            stats.connection_errors.fetch_add(1, Relaxed);
            conn.close(0u32.into(), b"");
            return;
        }
    };
    let mut goaway = false;
    loop {
        let next = tokio::select! {
            biased;
            r = h3c.accept() => r,
            _ = w.idle().wait(std::time::Duration::from_secs(86_400), true), if !goaway => {
                // Stopping: GOAWAY. It still takes every request the client may have
                // sent already (at most its stream limit), and the streams open finish;
                // then the client closes, or we do once it has been idle a while.
                goaway = true;
                let _ = h3c.shutdown(crate::quic::MAX_STREAMS as usize).await;
                continue;
            }
            _ = state.idle.notified(), if goaway && state.active.get() > 0 => continue,
            _ = tokio::time::sleep(GOAWAY_LINGER), if goaway && state.active.get() == 0 => break,
        };
        match next {
            Ok(Some(resolver)) => {
                stats.streams.fetch_add(1, Relaxed);
                state.active.set(state.active.get() + 1);
                let (w, st) = (w.clone(), state.clone());
                tokio::task::spawn_local(Box::pin(async move {
                    stream_task(&*w, resolver, info, &st).await;
                    st.active.set(st.active.get() - 1);
                    if st.active.get() == 0 {
                        st.idle.notify_waiters();
                    }
                }));
            }
            Ok(None) => break,
            Err(e) => {
                if !e.is_h3_no_error() {
                    stats.connection_errors.fetch_add(1, Relaxed);
                    tracing::debug!("client {}: HTTP/3: {e}", conn.remote_address());
                }
                break;
            }
        }
    }
    // No new request (GOAWAY sent, or the client is done): the streams being served
    // finish first (a stop's deadline bounds them); then the connection closes.
    loop {
        let idle = state.idle.notified();
        tokio::pin!(idle);
        idle.as_mut().enable();
        if state.active.get() == 0 || conn.close_reason().is_some() {
            break;
        }
        idle.await;
    }
    conn.close(H3_NO_ERROR.into(), b"");
}

/// How long a connection that got our GOAWAY may stay with no request open before we
/// close it (its requests on the way still arrive within it).
const GOAWAY_LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// HTTP/3's "no error" code (RFC 9114 8.1), for a connection we close cleanly.
const H3_NO_ERROR: u32 = 0x100;

/// The handshake, bounded by `timeout`.
async fn complete(
    connecting: quinn::Connecting,
    timeout: std::time::Duration,
) -> Option<quinn::Connection> {
    match tokio::time::timeout(timeout, connecting).await {
        Ok(Ok(c)) => Some(c),
        Ok(Err(e)) => {
            tracing::debug!("QUIC handshake: {e}");
            None
        }
        Err(_) => None,
    }
}

/// The certificate the client's SNI name chose by name (421 for a Host it does not
/// cover, as on TCP).
fn sni_cert(conn: &quinn::Connection, sni: Option<&crate::tls::SniResolver>) -> Option<u16> {
    let hd = conn.handshake_data()?;
    let hd = hd.downcast::<quinn::crypto::rustls::HandshakeData>().ok()?;
    sni?.chosen_index(hd.server_name.as_deref()?)
}

/// Serves one request stream.
async fn stream_task<S: Service>(
    w: &S,
    resolver: h3::server::RequestResolver<h3_quinn::Connection, Bytes>,
    info: ConnInfo,
    state: &Rc<ConnState>,
) {
    let Ok((req, stream)) = resolver.resolve_request().await else {
        return;
    };
    let (parts, ()) = req.into_parts();
    // HTTP/3 does not say up front whether a body follows: a content-length does, and
    // the methods that carry one do (read until the stream's end).
    let has_body = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0")
        || !matches!(
            parts.method,
            http::Method::GET | http::Method::HEAD | http::Method::OPTIONS | http::Method::DELETE
        );
    if state.handshake.pending.get() {
        // The handshake task was woken with this stream when the handshake completed
        // in the same flight: let it run first, so a 1-RTT request is not taken for
        // early data.
        tokio::task::yield_now().await;
    }
    let early = state.handshake.pending.get();
    let safe = matches!(parts.method, http::Method::GET | http::Method::HEAD);
    if early && safe {
        w.stats().quic.early_data_served.fetch_add(1, Relaxed);
    }
    if early && !safe {
        // Early data may be replayed: anything but GET and HEAD waits for the
        // handshake (or for the connection to fail with it).
        w.stats().quic.early_data_held.fetch_add(1, Relaxed);
        let done = state.handshake.done.notified();
        tokio::pin!(done);
        done.as_mut().enable();
        if state.handshake.pending.get() {
            done.await;
        }
        if state.quic.close_reason().is_some() {
            return;
        }
    }
    let head = {
        let cfg = w.config();
        let params = S::params(&cfg);
        super::h3fields::request_head(&parts, has_body, params.limits, w.spare_head())
    };
    let (send, recv) = stream.split();
    let (mut head, len) = match head {
        Ok(h) => h,
        Err(status) => {
            let mut io = StreamIo::new(send, recv, false, false, state.clone());
            let _ = io.refuse(status);
            use tokio::io::AsyncWriteExt;
            let _ = io.shutdown().await;
            return;
        }
    };
    head.version = edge_http::Version::Http3;
    if early && state.handshake.pending.get() {
        head.headers.insert("Early-Data", &b"1"[..]);
    }
    let chunked = head.body == edge_http::BodyKind::Chunked;
    let io = StreamIo::new(send, recv, has_body, chunked, state.clone());
    let peer: SocketAddr = state.quic.remote_address();
    let conn = Conn::over(ClientIo::H3(Box::new(io)), peer, info);
    super::session::serve_stream(w, conn, head, len).await;
}
