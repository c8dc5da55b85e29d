//! The HTTP/1.1 session: read a request head, route it, let the handler answer, log it,
//! and loop while the connection may be kept alive. Pipelined requests are answered in
//! order because the next head is only parsed after the current response is written.
//!
//! Errors in the request (the codec's 400/414/431/413/501/505, or 408 when a started head
//! stalls) are answered with `Connection: close` and the connection is closed, so a
//! smuggling attempt can never desynchronise what we and the client think the next
//! request is.

use super::conn::{ClientIo, Conn};
use super::exchange::{Exchange, ExchangeError};
use super::idle::{IdleEnd, IdleTimers};
use super::Timeouts;
use crate::metrics::WorkerStats;
use crate::net::Sock;
use bytes::Buf;
use edge_http::Limits;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use tokio::io::AsyncWriteExt;

/// The limits a session applies, from the config snapshot of the moment.
pub struct SessionParams<'a> {
    pub limits: &'a Limits,
    pub timeouts: &'a Timeouts,
    pub keepalive_requests: u64,
    /// `real_ip`, when set: a request's client address may come from a trusted proxy.
    pub real_ip: Option<&'a super::client_addr::RealIp>,
    /// Per `[[listen]]` (by [`super::ConnInfo::listen`]): the `Alt-Svc` value of its
    /// TCP responses (`h3=":443"; ma=86400` on a `quic` listener).
    pub alt_svc: &'a [Option<bytes::Bytes>],
}

/// What the session loop needs from the layer above it: the config snapshot to apply to
/// the next request, the counters and shutdown signal of its worker, the request
/// handler (the router), and the access log. The session never names the worker or
/// the handlers: they implement this.
#[allow(async_fn_in_trait)]
pub trait Service {
    /// A config snapshot, taken once per request so a reload never changes a request
    /// half-way.
    type Config;

    fn config(&self) -> Self::Config;
    fn params(cfg: &Self::Config) -> SessionParams<'_>;
    fn stats(&self) -> &WorkerStats;
    /// The worker's idle timers and drain flag.
    fn idle(&self) -> &Rc<IdleTimers>;
    /// Answers one request (routing included).
    async fn call(
        &self,
        cfg: &Self::Config,
        conn: &mut Conn,
        ex: &mut Exchange,
    ) -> Result<(), ExchangeError>;
    /// Called once per answered request, after the response, with the config it was
    /// answered under.
    fn log(&self, cfg: &Self::Config, conn: &Conn, ex: &Exchange);

    /// A request head of an earlier request, for the parser to reuse its allocations.
    fn spare_head(&self) -> Option<Box<edge_http::RequestHead>> {
        None
    }

    /// An answered request's head, for [`Service::spare_head`].
    // Boxed on purpose: heads travel as pointers between parser, exchange and spares.
    #[allow(clippy::boxed_local)]
    fn recycle_head(&self, _head: Box<edge_http::RequestHead>) {}

    /// A read buffer for a connection whose next bytes are arriving.
    fn take_rbuf(&self) -> bytes::BytesMut {
        bytes::BytesMut::with_capacity(super::conn::READ_BUF)
    }

    /// The empty read buffer of a connection going idle, for [`Service::take_rbuf`].
    fn recycle_rbuf(&self, _buf: bytes::BytesMut) {}

    /// Whether a connection idle past [`IDLE_GRACE`] may leave its task and be
    /// [`Parked`] by the caller of [`serve_conn`] (which then resumes it as [`Start::Resume`]
    /// when it becomes readable). Without it the task waits.
    fn can_park(&self) -> bool {
        false
    }

    fn draining(&self) -> bool {
        self.idle().is_draining()
    }
}

/// How long a connection between requests still waits for its next request once the
/// server is stopping (a client that sent one just then gets its answer, with
/// `Connection: close`, instead of a connection closed under it).
pub const DRAIN_LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits up to [`DRAIN_LINGER`] for bytes on an idle connection of a stopping server.
async fn drain_linger<S: Service>(w: &S, conn: &mut Conn) -> Option<std::io::Result<usize>> {
    if conn.rbuf.capacity() == 0 {
        conn.rbuf = w.take_rbuf();
    }
    tokio::select! {
        biased;
        r = conn.fill_untimed() => Some(r),
        _ = w.idle().wait(DRAIN_LINGER, false) => None,
    }
}

/// The rest of a head once its first bytes are in the buffer: parse, and read more
/// under `client_header_timeout` while it is incomplete.
async fn read_rest_of_head<S: Service>(
    w: &S,
    conn: &mut Conn,
    params: &SessionParams<'_>,
) -> HeadOutcome {
    // The head's deadline, from the first time it is found incomplete (a head that
    // arrives whole, the usual case, costs no clock read).
    let mut deadline = None;
    // parse_request starts from the beginning each time, so parse again only when the
    // new bytes hold a line end (a head cannot complete without one). A client trickling
    // a head one byte at a time then costs one parse per line, not one per byte.
    let mut reparse = true;
    loop {
        if reparse {
            match edge_http::parse_request_reusing(&conn.rbuf, params.limits, w.spare_head()) {
                Ok(Some((head, n))) => return HeadOutcome::Request(head, n),
                Ok(None) => {}
                Err(e) => return HeadOutcome::Error(e.status()),
            }
        }
        let before = conn.rbuf.len();
        let deadline = *deadline
            .get_or_insert_with(|| tokio::time::Instant::now() + params.timeouts.client_header);
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match conn.fill(left).await {
            Ok(0) => return HeadOutcome::Close, // EOF mid-head: nobody to answer
            Ok(n) => {
                w.stats().bytes_in.add(n as u64);
                // Past the request-line limit the codec must see it to answer 414/431.
                reparse = memchr::memchr(b'\n', &conn.rbuf[before..]).is_some()
                    || conn.rbuf.len() > params.limits.max_request_line;
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return HeadOutcome::Error(408),
            Err(_) => return HeadOutcome::Close,
        }
    }
}

/// How long a connection waits for its next bytes with its read buffer (and its task)
/// in place before it gives them back and is parked (a busy connection's next request
/// comes well within it; a browser's next page view does not). Shorter keeps fewer
/// buffers and tasks alive through a burst of new connections (bench/idle-memory.py:
/// at 1000 new connections a second, 300 ms cost 1.7 KB per idle connection, 100 ms
/// well under 1 KiB).
const IDLE_GRACE: std::time::Duration = std::time::Duration::from_millis(100);

/// Most connections a worker lets wait out [`IDLE_GRACE`] with their buffer and task;
/// past it (a burst of connections going idle together) a connection is parked at
/// once, so memory follows the busy connections, not a burst (bench/idle-memory.py).
const MAX_IN_GRACE: usize = 128;

/// An idle keep-alive connection taken out of its task: all that is kept while it
/// waits (a few hundred bytes with the runtime's registration) until it is resumed ([`Start::Resume`]).
pub struct Parked {
    /// Plain TCP, or TLS with nothing buffered inside the session.
    pub io: ClientIo,
    pub peer: SocketAddr,
    pub info: super::conn::ConnInfo,
    /// [`Conn::client`].
    pub client: SocketAddr,
    pub served: u64,
    pub nodelay: bool,
    /// What is left of its idle timeout.
    pub idle_left: std::time::Duration,
    /// [`Conn::held`]: its `limit_conn` counts stay while it is parked.
    pub held: crate::limit::Held,
}

enum HeadOutcome {
    Request(Box<edge_http::RequestHead>, usize),
    /// Idle past the grace period and the service parks idle connections: leave the
    /// task, with this much of the idle timeout left.
    Park(std::time::Duration),
    /// Clean end: EOF or idle timeout between requests, or shutdown while idle.
    Close,
    /// Answer with this status and close.
    Error(u16),
}

/// How a session task starts.
pub enum Start {
    New(Sock, SocketAddr, super::conn::ConnInfo),
    /// A connection ready for its first request: TLS whose handshake is done (HTTP/1.1
    /// by ALPN), in user space or the kernel's (then with the bytes rustls had already
    /// decrypted in its buffer).
    Conn(Conn),
    Resume(Parked),
}

impl Start {
    /// The connection, with how many requests it has served and whether TCP_NODELAY
    /// is set: what [`serve_conn`] goes on from.
    pub fn into_conn(self) -> (Conn, u64, bool) {
        match self {
            Start::New(stream, peer, info) => (Conn::new(stream, peer, info), 0, false),
            Start::Conn(conn) => (conn, 0, false),
            Start::Resume(p) => {
                let mut conn = Conn::over(p.io, p.peer, p.info);
                conn.client = p.client;
                conn.held = p.held;
                (conn, p.served, p.nodelay)
            }
        }
    }
}

/// One HTTP/2 stream, whose request came as `head` (`len`: its size, for
/// `$request_length`) rather than as bytes to parse.
pub async fn serve_stream<S: Service>(
    w: &S,
    conn: Conn,
    head: Box<edge_http::RequestHead>,
    len: usize,
) {
    serve(w, conn, 0, true, Some(head), len).await;
}

/// Serves `conn` (which has answered `served` requests) until it closes, or until it is
/// idle and the service parks idle connections ([`Service::can_park`]): then its state
/// is returned, and the caller starts it again as [`Start::Resume`] when it becomes
/// readable. A TLS connection is parked only when its session holds nothing unread
/// ([`ClientIo::parkable`]).
pub async fn serve_conn<S: Service>(
    w: &S,
    conn: Conn,
    served: u64,
    nodelay: bool,
) -> Option<Parked> {
    serve(w, conn, served, nodelay, None, 0).await
}

/// [`serve_conn`], whose first request may be given already (an HTTP/2 stream's, of
/// `given_len` bytes as HTTP/1.1 lines).
async fn serve<S: Service>(
    w: &S,
    mut conn: Conn,
    mut served: u64,
    mut nodelay: bool,
    mut given: Option<Box<edge_http::RequestHead>>,
    given_len: usize,
) -> Option<Parked> {
    let peer = conn.peer;
    loop {
        let cfg = w.config();
        let params = S::params(&cfg);
        // (The head is matched where `read_head` leaves it: an HTTP/1.1 request pays no
        // move of it for the HTTP/2 case.)
        match read_head(w, &mut conn, &params, served, &mut given).await {
            HeadOutcome::Close => break,
            HeadOutcome::Park(idle_left) => {
                let Conn {
                    io,
                    rbuf,
                    peer,
                    info,
                    client,
                    host_memo: _,
                    held,
                } = conn;
                if rbuf.capacity() > 0 {
                    w.recycle_rbuf(rbuf);
                }
                return Some(Parked {
                    io,
                    peer,
                    info,
                    client,
                    served,
                    nodelay,
                    idle_left,
                    held,
                });
            }
            HeadOutcome::Error(status) => {
                w.stats().bad_requests.fetch_add(1, Relaxed);
                w.stats().count_status(status);
                w.stats().requests.add(1);
                if let Some(sent) = conn.io.refuse_stream(status) {
                    // The stream answers with the status alone. HTTP/2's HEADERS end
                    // it; an HTTP/3 stream is finished after them.
                    if sent.is_ok() && matches!(conn.io, ClientIo::H3(_)) {
                        let _ = conn.end_stream(params.timeouts.send).await;
                    }
                    return None;
                }
                let _ = conn
                    .write_all(&edge_http::error_response(status), params.timeouts.send)
                    .await;
                tracing::info!("client {peer}: request rejected with {status}");
                // The FIN goes out before the close, ahead of whatever the client
                // still sends after its bad request.
                let _ = conn.io.shutdown().await;
                return None;
            }
            HeadOutcome::Request(req, n) => {
                // The config as it is now: a reload while this keep-alive connection
                // waited for the request applies to it (the head was read under the
                // limits of the config it was waiting under).
                let cfg = w.config();
                let params = S::params(&cfg);
                conn.rbuf.advance(n);
                served += 1;
                // One exchange per HTTP/2 stream.
                let one_shot = matches!(conn.io, ClientIo::H2(_) | ClientIo::H3(_));
                w.stats().count_version(req.version);
                let keep_alive = req.keep_alive
                    && served < params.keepalive_requests
                    && !params.timeouts.keepalive.is_zero()
                    && !w.draining();
                if keep_alive && !nodelay {
                    // Responses are written whole (head and body in as few writes as
                    // possible), so on a connection that stays open Nagle only adds
                    // delay (docs/background.md: nginx's 40 ms tcp_nopush stall on
                    // loopback). Set on the first kept-alive exchange, as nginx does:
                    // a one-request connection skips the syscall.
                    conn.io.set_nodelay();
                    nodelay = true;
                }
                let client = match params.real_ip {
                    Some(r) => r.resolve(conn.client, &req),
                    None => conn.client,
                };
                let mut ex = Exchange::new(
                    req,
                    keep_alive,
                    params.limits.max_body,
                    w.idle().clone(),
                    client,
                );
                ex.head_length = if given_len > 0 { given_len } else { n } as u64;
                if let Some(slot) = conn.io.head_slot() {
                    ex.encode_for_h2(slot);
                }
                if !matches!(conn.io, ClientIo::H3(_)) {
                    if let Some(Some(v)) = params.alt_svc.get(usize::from(conn.info.listen)) {
                        ex.alt_svc = Some(v.clone());
                    }
                }
                // Counted when read (the family's meaning), so a scrape that follows a
                // response always includes its request.
                let n = w.stats().requests.bump();
                crate::metrics::top::record(n, &ex.req);
                let mut result = w.call(&cfg, &mut conn, &mut ex).await;
                if result.is_ok() {
                    // TLS may hold the response's last record (a no-op on TCP).
                    if let Err(e) = conn.flush(params.timeouts.send).await {
                        result = Err(ExchangeError::Client(e));
                    }
                }
                let stats = w.stats();
                if ex.status != 0 {
                    stats.count_status(ex.status);
                }
                stats.bytes_out.add(ex.body_bytes_sent);
                w.log(&cfg, &conn, &ex);
                let ex_keep = ex.keep_alive && ex.body.is_none();
                w.recycle_head(ex.into_request());
                match result {
                    Ok(()) if ex_keep && !one_shot => continue,
                    Ok(()) => break,
                    Err(ExchangeError::Client(e)) => {
                        tracing::debug!("client {peer}: {e}");
                        return None; // no graceful shutdown on a broken socket
                    }
                    Err(ExchangeError::Aborted(why)) => {
                        tracing::warn!("client {peer}: response aborted: {why}");
                        conn.io.abort();
                        return None;
                    }
                }
            }
        }
    }
    // A plain close (the FIN follows the response): a separate shutdown() first would
    // only cost a syscall per connection (nginx does not either). An HTTP/2 stream's
    // response that runs until its end is ended now, and a TLS session (in user space or
    // the kernel's) with close_notify, so that the client can tell a response that runs
    // until the close from a cut one.
    let ends_with_shutdown = match &conn.io {
        ClientIo::H2(_) | ClientIo::H3(_) | ClientIo::Tls(_) => true,
        ClientIo::Tcp(s) => s.is_ktls(),
    };
    if ends_with_shutdown {
        let timeout = w.config();
        let send = S::params(&timeout).timeouts.send;
        let _ = conn.end_stream(send).await;
    }
    // Its read buffer goes back to the worker for the next connection or stream (a
    // 4 KiB allocation each, otherwise).
    if conn.rbuf.capacity() > 0 {
        conn.rbuf.clear();
        w.recycle_rbuf(std::mem::take(&mut conn.rbuf));
    }
    None
}

/// The next request head: the given one (an HTTP/2 stream's), else one read from the
/// connection.
async fn read_head<S: Service>(
    w: &S,
    conn: &mut Conn,
    params: &SessionParams<'_>,
    served: u64,
    given: &mut Option<Box<edge_http::RequestHead>>,
) -> HeadOutcome {
    // Tested first without a move of the (empty) head: this is every HTTP/1.1 request.
    if given.is_some() {
        if let Some(head) = given.take() {
            return HeadOutcome::Request(head, 0);
        }
    }
    // Between requests: wait for the first byte with keepalive_timeout, and leave at once
    // on shutdown. Once a byte is in, the whole head has client_header_timeout.
    if conn.rbuf.is_empty() {
        let idle = if served == 0 {
            params.timeouts.client_header
        } else {
            params.timeouts.keepalive
        };
        if served > 0 && w.draining() {
            // Stopping (a stop, or the old side of a binary upgrade): a request already
            // on its way still gets its answer, with `Connection: close`.
            return match drain_linger(w, conn).await {
                Some(Ok(n)) if n > 0 => {
                    w.stats().bytes_in.add(n as u64);
                    read_rest_of_head(w, conn, params).await
                }
                _ => HeadOutcome::Close,
            };
        }
        // A busy keep-alive connection's next request comes soon: wait for it with the
        // read buffer in place. The wait is a coarse worker-local timer (see `idle`),
        // not a runtime timer: a request arms and disarms nothing in tokio's wheel.
        let grace = idle.min(IDLE_GRACE);
        if served > 0
            && idle > grace
            && w.can_park()
            && w.idle().waiting() >= MAX_IN_GRACE
            && conn.io.parkable()
        {
            // A burst: enough connections already wait with their buffers and tasks;
            // this one is parked at once (and resumed at once if its bytes are in).
            return HeadOutcome::Park(idle);
        }
        if conn.rbuf.capacity() == 0 {
            // A new connection, or one back from idle: a buffer from the worker's spares.
            conn.rbuf = w.take_rbuf();
        }
        let first = tokio::select! {
            biased;
            r = conn.fill_untimed() => Some(r),
            end = w.idle().wait(grace, served > 0) => match end {
                IdleEnd::Draining => match drain_linger(w, conn).await {
                    Some(r) => Some(r),
                    None => return HeadOutcome::Close,
                },
                IdleEnd::Expired => None,
            },
        };
        let r = match first {
            Some(r) => r,
            // Nothing was received: nginx closes silently here too.
            None if idle <= grace => return HeadOutcome::Close,
            None => {
                let rest = idle - grace;
                if w.can_park() && conn.io.parkable() {
                    // Idle: the worker keeps the socket, not this task.
                    return HeadOutcome::Park(rest);
                }
                let Some(sock) = conn.io.tcp() else {
                    // TLS: bytes may already wait decrypted inside the session, so the
                    // socket's readiness says nothing; read (the buffer stays).
                    return match tokio::select! {
                        biased;
                        r = conn.fill_untimed() => r,
                        _ = w.idle().wait(rest, served > 0) => return HeadOutcome::Close,
                    } {
                        Ok(n) if n > 0 => {
                            w.stats().bytes_in.add(n as u64);
                            read_rest_of_head(w, conn, params).await
                        }
                        _ => HeadOutcome::Close,
                    };
                };
                // Idle: the connection gives its read buffer back to the worker while
                // it waits, so an idle connection is little more than its task.
                if conn.rbuf.capacity() > 0 {
                    w.recycle_rbuf(std::mem::take(&mut conn.rbuf));
                }
                let ready = tokio::select! {
                    biased;
                    r = sock.readable() => r,
                    _ = w.idle().wait(rest, served > 0) => return HeadOutcome::Close,
                };
                if ready.is_err() {
                    return HeadOutcome::Close;
                }
                conn.rbuf = w.take_rbuf();
                // Readable: this read returns at once (a spurious wake-up waits again,
                // still under the idle timeout).
                tokio::select! {
                    biased;
                    r = conn.fill_untimed() => r,
                    _ = w.idle().wait(rest, served > 0) => return HeadOutcome::Close,
                }
            }
        };
        match r {
            Ok(0) => return HeadOutcome::Close,
            Ok(n) => {
                w.stats().bytes_in.add(n as u64);
            }
            // Nothing was received: nginx closes silently here too.
            Err(_) => return HeadOutcome::Close,
        }
    }
    read_rest_of_head(w, conn, params).await
}
