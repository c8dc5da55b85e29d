//! Serving an accepted connection: plain HTTP/1.1 (registered with the reactor only
//! when it has to wait), a PROXY protocol header first, TLS (with kTLS when offered),
//! HTTP/2 by ALPN or the h2c preface, and the session loop that parks idle keep-alive
//! connections and resumes them when they become readable.
//!
//! How it fits: the accept path ([`super::accept`]) calls [`start_session`]; the worker
//! thread's parker ([`super`]) resumes parked connections with [`run_session`]. The
//! sessions themselves are [`crate::http::session`] and [`crate::http::h2`].

use super::service::Worker;
use crate::http::session::{self, Service};
use crate::http::ConnInfo;
use crate::limit::Held;
use crate::net::Sock;
use crate::state::Shared;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;

/// Serves an accepted connection on listener `listen`, under `cfg` (the snapshot
/// [`Worker::admit`] took); `held`: the `limit_conn` counts it took at accept.
pub(super) fn start_session(
    w: &Rc<Worker>,
    cfg: &Shared,
    stream: std::net::TcpStream,
    peer: std::net::SocketAddr,
    listen: usize,
    held: Held,
) {
    // TCP_NODELAY is set by the session on the first kept-alive exchange.
    let stats = w.svc.stats();
    stats.accepted.fetch_add(1, Relaxed);
    stats.active.fetch_add(1, Relaxed);
    let (proto, deferred, proxy_protocol) = match cfg.listeners.get(listen) {
        Some(p) if p.tls.is_some() || p.http2 => (Some(p.clone()), p.deferred, p.proxy_protocol),
        Some(p) => (None, p.deferred, p.proxy_protocol),
        None => (None, false, false),
    };
    if proxy_protocol {
        // Its header first, in a task of its own (the fast path below is untouched).
        match tokio::net::TcpStream::from_std(stream) {
            Ok(stream) => {
                let info = ConnInfo {
                    listen: listen as u16,
                    tls: proto.as_ref().is_some_and(|p| p.tls.is_some()),
                    sni_cert: None,
                };
                let session = proxied_session(w.clone(), stream, peer, proto, info);
                tokio::task::spawn_local(Box::pin(session));
            }
            Err(e) => {
                tracing::error!("worker {}: cannot register connection: {e}", w.id);
                w.connections_closed(1);
            }
        }
        return;
    }
    match proto {
        // Plain HTTP/1.1. From a deferred listener the request is in already: it is
        // served without registering the socket with the reactor until it has to wait
        // (`net::Sock`). Otherwise it usually is not there yet, and a first read would
        // only fail with EAGAIN: registered at once.
        None => {
            let mut sock = Sock::raw(stream);
            if !deferred {
                if let Err(e) = sock.register() {
                    tracing::error!("worker {}: cannot register connection: {e}", w.id);
                    w.connections_closed(1);
                    return;
                }
            }
            let info = ConnInfo {
                listen: listen as u16,
                ..ConnInfo::default()
            };
            if held.is_empty() {
                run_session(w, session::Start::New(sock, peer, info))
            } else {
                let mut conn = crate::http::Conn::new(sock, peer, info);
                conn.held = held;
                run_session(w, session::Start::Conn(conn))
            }
        }
        Some(p) => match tokio::net::TcpStream::from_std(stream) {
            Ok(stream) => {
                let info = ConnInfo {
                    listen: listen as u16,
                    tls: p.tls.is_some(),
                    sni_cert: None,
                };
                tokio::task::spawn_local(Box::pin(secure_session(
                    w.clone(),
                    stream,
                    peer,
                    peer,
                    p,
                    info,
                    held,
                )));
            }
            Err(e) => {
                tracing::error!("worker {}: cannot register connection: {e}", w.id);
                w.connections_closed(1);
            }
        },
    }
}

/// A connection of a `proxy_protocol` listener: its PROXY header, read under
/// `client_header_timeout` and bounded by `client_max_header_size`, then TLS, HTTP/2 or
/// HTTP/1.1 as on any listener, with the header's source as the connection's client
/// address ([`crate::http::client_addr`]). A connection without a valid header is closed
/// without a response, counted (`proxy_protocol_errors`) and logged at debug.
async fn proxied_session(
    w: Rc<Worker>,
    mut stream: tokio::net::TcpStream,
    peer: SocketAddr,
    proto: Option<crate::tls::ListenerProto>,
    info: ConnInfo,
) {
    let (timeout, max) = {
        let cfg = w.config();
        (cfg.timeouts.client_header, cfg.limits.max_header_bytes)
    };
    let read = crate::net::proxy_protocol::read_header(&mut stream, max);
    let err = match tokio::time::timeout(timeout, read).await {
        Ok(Ok(h)) => {
            let client = match h.addrs {
                Some(a) => {
                    let cfg = w.config();
                    crate::http::client_addr::RealIp::proxied(cfg.real_ip.as_ref(), peer, a.src)
                }
                // UNKNOWN, LOCAL (a health check), AF_UNIX: the connection's own.
                None => peer,
            };
            let held = {
                let cfg = w.config();
                w.accept_limits(&cfg, client, info.listen as usize)
            };
            let Some(held) = held else {
                drop(stream);
                w.connections_closed(1);
                return;
            };
            match proto {
                Some(p) => secure_session(w, stream, peer, client, p, info, held).await,
                None => {
                    let mut conn = crate::http::Conn::new(Sock::registered(stream), peer, info);
                    conn.client = client;
                    conn.held = held;
                    session_loop(w, session::Start::Conn(conn)).await;
                }
            }
            return;
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "PROXY protocol header timed out".to_string(),
    };
    w.svc.stats().proxy_protocol_errors.fetch_add(1, Relaxed);
    tracing::debug!("client {peer}: {err}, closing");
    drop(stream);
    w.connections_closed(1);
}

/// A connection of a TLS or HTTP/2 listener: the handshake, then HTTP/2 (ALPN `h2`, or
/// the h2c preface on a plain listener) or HTTP/1.1. HTTP/1.1 connections are parked
/// when idle like plain ones (TLS ones when the session holds nothing unread); HTTP/2
/// connections keep their task.
///
/// `client` is the connection's client address (`peer`, or a PROXY header's source);
/// `held`, the `limit_conn` counts it took when accepted.
async fn secure_session(
    w: Rc<Worker>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    client: SocketAddr,
    proto: crate::tls::ListenerProto,
    mut info: ConnInfo,
    held: Held,
) {
    let timeout = w.config().timeouts.client_header;
    let stats = w.svc.stats();
    match proto.tls {
        Some(cfg) => {
            use crate::net::ktls::{self, Offload, TlsIo};
            // A handshake that may end in kTLS is read record by record.
            let io = TlsIo::new(stream, proto.ktls && ktls::worth_trying());
            let accept = tokio_rustls::TlsAcceptor::from(cfg).accept(io);
            match tokio::time::timeout(timeout, accept).await {
                Ok(Ok(tls)) => {
                    let sc = tls.get_ref().1;
                    let resumed = sc.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                    stats.tls.handshake_done(resumed);
                    let h2 = sc.alpn_protocol() == Some(crate::tls::ALPN_H2);
                    info.sni_cert = match (sc.server_name(), &proto.sni) {
                        (Some(name), Some(sni)) => sni.chosen_index(name),
                        _ => None,
                    };
                    let mut tls = Box::new(tls);
                    if proto.ktls {
                        match ktls::offload(tls) {
                            Offload::Kernel { tcp, plaintext } => {
                                stats.tls.ktls[0].fetch_add(1, Relaxed);
                                let sock = Sock::ktls(tcp);
                                if h2 {
                                    let _ = sock.set_nodelay(true);
                                    let io = ktls::Prefixed {
                                        prefix: plaintext,
                                        sock,
                                    };
                                    crate::http::h2::serve(w.clone(), io, peer, client, info, held)
                                        .await;
                                    w.connections_closed(1);
                                } else {
                                    // A plain socket to the session from here on
                                    // (sendfile included), parked like one.
                                    let mut conn = crate::http::Conn::new(sock, peer, info);
                                    conn.client = client;
                                    conn.held = held;
                                    conn.rbuf = plaintext;
                                    session_loop(w, session::Start::Conn(conn)).await;
                                }
                                return;
                            }
                            Offload::User(t) => {
                                stats.tls.ktls[1].fetch_add(1, Relaxed);
                                tls = t;
                            }
                            Offload::Failed(e) => {
                                stats.tls.ktls[2].fetch_add(1, Relaxed);
                                tracing::debug!("client {peer}: {e}");
                                w.connections_closed(1);
                                return;
                            }
                        }
                    }
                    if h2 {
                        let _ = tls.get_ref().0.tcp().set_nodelay(true);
                        crate::http::h2::serve(w.clone(), tls, peer, client, info, held).await;
                    } else {
                        // HTTP/1.1: the ordinary session, parked like a plain
                        // connection when idle; it counts the close itself.
                        let io = crate::http::conn::ClientIo::Tls(tls);
                        let mut conn = crate::http::Conn::over(io, peer, info);
                        conn.client = client;
                        conn.held = held;
                        session_loop(w, session::Start::Conn(conn)).await;
                        return;
                    }
                }
                Ok(Err(e)) => {
                    let kind = crate::tls::handshake_error_kind(&e);
                    stats.tls.handshake_errors[kind].fetch_add(1, Relaxed);
                    tracing::debug!("client {peer}: TLS handshake: {e}");
                }
                Err(_) => {
                    stats.tls.handshake_errors[0].fetch_add(1, Relaxed);
                }
            }
        }
        None => match h2c_preface(&stream, timeout).await {
            Some(true) => {
                let _ = stream.set_nodelay(true);
                crate::http::h2::serve(w.clone(), stream, peer, client, info, held).await;
            }
            Some(false) => {
                // HTTP/1.1 on a listener that also takes h2c: the ordinary session.
                let mut conn = crate::http::Conn::new(Sock::registered(stream), peer, info);
                conn.client = client;
                conn.held = held;
                run_session(&w, session::Start::Conn(conn));
                return;
            }
            None => {}
        },
    }
    w.connections_closed(1);
}

/// The client connection preface of HTTP/2 (RFC 9113 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether a plain connection opens with the HTTP/2 preface (h2c with prior
/// knowledge); None if it closes or sends nothing within `timeout`.
async fn h2c_preface(stream: &tokio::net::TcpStream, timeout: std::time::Duration) -> Option<bool> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = [0u8; H2_PREFACE.len()];
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return None,
        };
        if buf[..n] != H2_PREFACE[..n] {
            return Some(false);
        }
        if n == H2_PREFACE.len() {
            return Some(true);
        }
        // A preface split across packets: its rest is on the way.
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
    }
}

/// Runs a session task: a new connection, or a parked one that became readable. When
/// the session parks its connection, the worker keeps it (or resumes it at once if it is
/// readable already); the connection stays counted in `active` until it closes.
///
/// The session is polled once right here, in the caller's task: a connection whose
/// request is already in (a deferred accept, a parked connection that became readable)
/// is usually answered, and a short one closed, within that poll, with no task spawned.
/// Only when it has to wait does it get a task of its own, which polls it again at once
/// and so hands its own waker to whatever it waits on (a future's wake-up goes to the
/// waker of its latest poll). Boxed once: the task moves a pointer, not the session's
/// 5 KB state.
pub(super) fn run_session(w: &Rc<Worker>, start: session::Start) {
    let mut fut = Box::pin(session_loop(w.clone(), start));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    if std::future::Future::poll(fut.as_mut(), &mut cx).is_pending() {
        tokio::task::spawn_local(fut);
    }
}

/// A connection's session in the current task, until it closes or is parked (and not
/// readable already: then it goes on here).
pub(super) async fn session_loop(w: Rc<Worker>, start: session::Start) {
    let mut next = Some(start);
    while let Some(start) = next.take() {
        // One call site, so the session's future is built in place in this one's state
        // (three calls, one per kind of start, each cost a 5 KB copy).
        let (conn, served, nodelay) = start.into_conn();
        let parked = session::serve_conn(&*w, conn, served, nodelay).await;
        match parked {
            Some(p) if !w.draining() => {
                // Readable already: go on in this task.
                next = w.parking.park(p).map(session::Start::Resume);
                if next.is_none() {
                    return;
                }
            }
            _ => w.connections_closed(1),
        }
    }
}
