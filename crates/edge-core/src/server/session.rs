//! The HTTP/1.1 session: read a request head, route it, let the handler answer, log it,
//! and loop while the connection may be kept alive. Pipelined requests are answered in
//! order because the next head is only parsed after the current response is written.
//!
//! Errors in the request (the codec's 400/414/431/413/501/505, or 408 when a started head
//! stalls) are answered with `Connection: close` and the connection is closed, so a
//! smuggling attempt can never desynchronise what we and the client think the next
//! request is.

use super::conn::Conn;
use super::exchange::{Exchange, ExchangeError};
use super::route::Handler;
use super::state::Shared;
use super::worker::Worker;
use crate::handlers;
use bytes::Buf;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

enum HeadOutcome {
    Request(Box<edge_http::RequestHead>, usize),
    /// Clean end: EOF or idle timeout between requests, or shutdown while idle.
    Close,
    /// Answer with this status and close.
    Error(u16),
}

pub async fn serve(w: &Rc<Worker>, stream: TcpStream, peer: SocketAddr) {
    let mut conn = Conn::new(stream, peer);
    let mut served: u64 = 0;
    loop {
        let shared = w.shared.load_full();
        match read_head(w, &mut conn, &shared, served).await {
            HeadOutcome::Close => break,
            HeadOutcome::Error(status) => {
                w.stats().bad_requests.fetch_add(1, Relaxed);
                w.stats().count_status(status);
                w.stats().requests.fetch_add(1, Relaxed);
                let _ = conn
                    .write_all(&edge_http::error_response(status), shared.timeouts.send)
                    .await;
                tracing::info!("client {peer}: request rejected with {status}");
                break;
            }
            HeadOutcome::Request(req, n) => {
                conn.rbuf.advance(n);
                served += 1;
                let keep_alive = req.keep_alive
                    && served < shared.keepalive_requests
                    && !shared.timeouts.keepalive.is_zero()
                    && !w.draining();
                let mut ex =
                    Exchange::new(*req, keep_alive, shared.limits.max_body, w.shutdown.clone());
                let result = dispatch(w, &mut conn, &mut ex, &shared).await;
                let stats = w.stats();
                stats.requests.fetch_add(1, Relaxed);
                if ex.status != 0 {
                    stats.count_status(ex.status);
                }
                stats.bytes_out.fetch_add(ex.body_bytes_sent, Relaxed);
                w.access_log.borrow_mut().log(&conn.peer, &ex);
                match result {
                    Ok(()) if ex.keep_alive && ex.body.is_none() => continue,
                    Ok(()) => break,
                    Err(ExchangeError::Client(e)) => {
                        tracing::debug!("client {peer}: {e}");
                        return; // no graceful shutdown on a broken socket
                    }
                    Err(ExchangeError::Aborted(why)) => {
                        tracing::warn!("client {peer}: response aborted: {why}");
                        abort(conn.io);
                        return;
                    }
                }
            }
        }
    }
    let _ = conn.io.shutdown().await;
}

/// Closes with RST so the client cannot mistake a cut response for a complete one.
fn abort(io: TcpStream) {
    let _ = socket2::SockRef::from(&io).set_linger(Some(std::time::Duration::ZERO));
    drop(io);
}

async fn read_head(w: &Worker, conn: &mut Conn, shared: &Shared, served: u64) -> HeadOutcome {
    // Between requests: wait for the first byte with keepalive_timeout, and leave at once
    // on shutdown. Once a byte is in, the whole head has client_header_timeout.
    if conn.rbuf.is_empty() {
        let idle = if served == 0 {
            shared.timeouts.client_header
        } else {
            shared.timeouts.keepalive
        };
        let mut shutdown = w.shutdown.clone();
        if served > 0 && w.draining() {
            return HeadOutcome::Close;
        }
        let r = tokio::select! {
            r = conn.fill(idle) => r,
            _ = shutdown.changed(), if served > 0 => return HeadOutcome::Close,
        };
        match r {
            Ok(0) => return HeadOutcome::Close,
            Ok(n) => {
                w.stats().bytes_in.fetch_add(n as u64, Relaxed);
            }
            // Nothing was received: nginx closes silently here too.
            Err(_) => return HeadOutcome::Close,
        }
    }
    let deadline = tokio::time::Instant::now() + shared.timeouts.client_header;
    // parse_request starts from the beginning each time, so parse again only when the
    // new bytes hold a line end (a head cannot complete without one). A client trickling
    // a head one byte at a time then costs one parse per line, not one per byte.
    let mut reparse = true;
    loop {
        if reparse {
            match edge_http::parse_request(&conn.rbuf, &shared.limits) {
                Ok(Some((head, n))) => return HeadOutcome::Request(Box::new(head), n),
                Ok(None) => {}
                Err(e) => return HeadOutcome::Error(e.status()),
            }
        }
        let before = conn.rbuf.len();
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match conn.fill(left).await {
            Ok(0) => return HeadOutcome::Close, // EOF mid-head: nobody to answer
            Ok(n) => {
                w.stats().bytes_in.fetch_add(n as u64, Relaxed);
                // Past the request-line limit the codec must see it to answer 414/431.
                reparse = memchr::memchr(b'\n', &conn.rbuf[before..]).is_some()
                    || conn.rbuf.len() > shared.limits.max_request_line;
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return HeadOutcome::Error(408),
            Err(_) => return HeadOutcome::Close,
        }
    }
}

async fn dispatch(
    w: &Rc<Worker>,
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Arc<Shared>,
) -> Result<(), ExchangeError> {
    let Some(route) = shared.router.find(ex.req.path()).cloned() else {
        return handlers::simple::finish_without_body(conn, ex, shared, 404).await;
    };
    match &route.handler {
        Handler::Proxy(p) => handlers::proxy::handle(w, conn, ex, shared, &route, p).await,
        Handler::Static { root, index } => {
            handlers::static_files::handle(w, conn, ex, shared, &route, root, index).await
        }
        Handler::Return(r) => handlers::simple::handle_return(conn, ex, shared, &route, r).await,
        Handler::EmptyGif => handlers::simple::handle_empty_gif(conn, ex, shared, &route).await,
    }
}
