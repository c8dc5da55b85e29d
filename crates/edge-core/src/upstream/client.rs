//! The upstream client: pick a server of the group, reuse a pooled keep-alive
//! connection or open one, send the request head and stream the client's request body,
//! and read the response head. The proxy handler and the cache (fills, revalidations,
//! background refreshes) all fetch through [`fetch_with`]; the response body is relayed
//! by [`super::relay`] or written to the cache by the caller.
//!
//! Errors before the response head are [`UpstreamError`]s: 502 (refused, reset,
//! malformed) or 504 (connect or read timeout); nothing panics.
//!
//! A request that failed on a *reused* connection before any response byte, and whose
//! body was not yet sent, is retried once on a fresh connection: the origin may have
//! closed the idle connection just as we reused it (the keep-alive race every proxy has).

use super::{PooledConn, UpstreamGroup, UpstreamIo, UpstreamPool};
use crate::http::{Conn, Exchange};
use crate::metrics::WorkerStats;
use bytes::{Buf, BytesMut};
use edge_http::{BodyDecoder, BodyKind, Limits, Method, ResponseHead};
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::io::AsyncReadExt;

/// What the client borrows from its worker: the keep-alive pool and the counters.
#[derive(Clone, Copy)]
pub struct Local<'a> {
    pub pool: &'a UpstreamPool,
    pub stats: &'a WorkerStats,
}

/// Upstream read buffer.
pub(super) const UP_BUF: usize = 64 * 1024;

/// Limits applied to upstream response heads (larger than client limits: origins send
/// long Set-Cookie and CSP headers).
fn upstream_limits() -> Limits {
    Limits {
        max_request_line: 16 * 1024,
        max_header_bytes: 64 * 1024,
        max_headers: 200,
        max_body: None,
    }
}

/// Why the upstream exchange failed before a response head reached the client.
#[derive(Debug)]
pub enum UpstreamError {
    Connect(io::Error),
    ConnectTimeout,
    ReadTimeout,
    Closed,
    Bad(String),
    /// The client's request body was bad or too large (the status to answer).
    ClientBody(u16),
    /// The client went away while we were sending its body.
    Client(io::Error),
}

impl UpstreamError {
    pub fn status(&self) -> u16 {
        match self {
            UpstreamError::ConnectTimeout | UpstreamError::ReadTimeout => 504,
            UpstreamError::ClientBody(s) => *s,
            _ => 502,
        }
    }
}

/// The log line's description of an upstream failure (nginx's wording).
impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            UpstreamError::Connect(e) => format!("connect() failed ({e})"),
            UpstreamError::ConnectTimeout => "upstream timed out while connecting".into(),
            UpstreamError::ReadTimeout => "upstream timed out while reading response header".into(),
            UpstreamError::Closed => {
                "upstream prematurely closed connection while reading response header".into()
            }
            UpstreamError::Bad(m) => format!("upstream sent an invalid response: {m}"),
            UpstreamError::ClientBody(s) => format!("client request body rejected ({s})"),
            UpstreamError::Client(e) => format!("client error: {e}"),
        };
        f.write_str(&s)
    }
}

/// An upstream response whose head has been read, and the reading of its body: every
/// consumer of a body (the proxy's relay, a fill, a partial object's completion, a
/// slice's relay) takes it piece by piece with [`UpstreamResponse::next_piece`] and
/// [`UpstreamResponse::read_body`], so framing errors, a close that ends a body and a
/// close that cuts one mean the same everywhere.
pub struct UpstreamResponse {
    pub head: ResponseHead,
    pub conn: PooledConn,
    /// Bytes after the head already read (and not yet taken as body pieces).
    pub buf: BytesMut,
    pub(super) group_id: usize,
    /// The body's framing (`head.body`), decoding `buf`.
    dec: BodyDecoder,
}

/// A piece of the body decoded from the front of [`UpstreamResponse::buf`]: its payload
/// is `buf[start..start + len]` (none when only framing was read); the caller then
/// advances `buf` (or splits it) by `consumed`.
#[derive(Clone, Copy, Debug)]
pub struct Piece {
    pub start: usize,
    pub len: usize,
    pub consumed: usize,
}

impl Piece {
    /// The payload's range in the buffer the piece was decoded from.
    pub fn data(&self) -> std::ops::Range<usize> {
        self.start..self.start + self.len
    }
}

impl UpstreamResponse {
    /// The next piece of the body from the bytes read so far. `None`: they hold no
    /// more of it (see [`UpstreamResponse::read_body`]), or the body is complete
    /// ([`UpstreamResponse::body_done`]). `Err`: the origin's framing is broken (the
    /// log text every body consumer uses).
    pub fn next_piece(&mut self) -> Result<Option<Piece>, String> {
        if self.buf.is_empty() || self.body_done() {
            return Ok(None);
        }
        let d = self
            .dec
            .decode(&self.buf)
            .map_err(|e| format!("upstream body: {e}"))?;
        if d.consumed == 0 {
            return Ok(None);
        }
        // A payload is a sub-slice of the buffer; framing alone (a chunk's size line,
        // the last chunk) has none, and its empty slice may point anywhere.
        let start = if d.data.is_empty() {
            d.consumed
        } else {
            d.data.as_ptr() as usize - self.buf.as_ptr() as usize
        };
        Ok(Some(Piece {
            start,
            len: d.data.len(),
            consumed: d.consumed,
        }))
    }

    /// Whether the whole body has been taken (a bodiless response at once: its decoder
    /// starts done).
    pub fn body_done(&self) -> bool {
        self.dec.is_done()
    }

    /// Reads more of the body into `buf` (growing it by `grow` when less than 4 KiB is
    /// free), the read bounded by the group's `read_timeout` (a timeout is counted in
    /// `stats.upstream_timeouts`). `Ok(true)`: more bytes to take. `Ok(false)`: the
    /// origin closed where its body may end (a close-delimited body is then complete).
    /// `Err`: a close before the body's end, a failed read or a timeout (the log text
    /// every body consumer uses).
    pub async fn read_body(
        &mut self,
        group: &UpstreamGroup,
        grow: usize,
        stats: &WorkerStats,
    ) -> Result<bool, String> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(grow);
        }
        let read = self.conn.stream.read_buf(&mut self.buf);
        match tokio::time::timeout(group.read_timeout, read).await {
            Ok(Ok(0)) => match self.dec.on_eof() {
                Ok(()) => Ok(false),
                Err(_) => Err("upstream closed before the body ended".into()),
            },
            Ok(Ok(_)) => Ok(true),
            Ok(Err(e)) => Err(format!("upstream read failed: {e}")),
            Err(_) => {
                stats.upstream_timeouts.fetch_add(1, Relaxed);
                Err(crate::http::conn::timed_out("upstream body read").to_string())
            }
        }
    }

    /// Gives the connection back to the worker's pool when its response is complete
    /// (a bodiless answer such as a 304, or a body read to its end) and reusable;
    /// otherwise it is closed.
    pub fn release(self, pool: &UpstreamPool, group: &UpstreamGroup) {
        if self.head.keep_alive
            && self.body_done()
            && self.buf.is_empty()
            && self.head.body != BodyKind::CloseDelimited
            && group.keepalive > 0
        {
            pool.put(self.group_id, self.conn, group.keepalive);
        }
    }
}

fn group_id(g: &Arc<UpstreamGroup>) -> usize {
    Arc::as_ptr(g) as usize
}

/// Sends the request upstream and reads the response head, retrying as the module doc
/// says. On success the response body is still to be read from `UpstreamResponse`.
pub async fn fetch(
    w: Local<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    group: &Arc<UpstreamGroup>,
    affinity: Option<u64>,
) -> Result<UpstreamResponse, UpstreamError> {
    let head = build_request_head(ex, group);
    let method = ex.req.method.clone();
    let fields = ex.upstream_fields.clone();
    let sni = fields.as_ref().and_then(|f| f.host.as_deref());
    fetch_with(w, Some((conn, ex)), group, &head, &method, affinity, sni).await
}

/// [`fetch`] with a prepared request head (cache fills and revalidations send their own:
/// GET, no client validators or Range). `client` is the connection whose request body
/// is streamed upstream (None for background refreshes, which send no body); `method`
/// is the method of `head` (it decides how the response body is framed); `affinity` is
/// the request's key hash for a `consistent_hash` group (None: round robin); `sni` is
/// the `Host` that `proxy_set_header` set, the TLS server name of `https://` servers
/// (None: the server's own name). Pooled connections are reused only for the same name.
pub async fn fetch_with(
    w: Local<'_>,
    mut client: Option<(&mut Conn, &mut Exchange)>,
    group: &Arc<UpstreamGroup>,
    head: &[u8],
    method: &Method,
    affinity: Option<u64>,
    sni: Option<&str>,
) -> Result<UpstreamResponse, UpstreamError> {
    let gid = group_id(group);
    if let Some((_, ex)) = client.as_mut() {
        // `$upstream_response_time` runs from here to the end of the response.
        ex.upstream_started
            .get_or_insert_with(std::time::Instant::now);
    }
    let sni_tag = sni.map_or(0, |s| twox_hash::XxHash3_64::oneshot(s.as_bytes()) | 1);
    let mut attempts = 0;
    let max_attempts = group.servers.len() + 1;
    // A request that cannot be replayed (a streamed body, or a method that is not
    // idempotent) has its pooled connection probed first (one non-blocking recv). Others
    // skip the probe: a reused connection that turns out dead is retried once on a fresh
    // one (below), so the common case (GET) pays no extra syscall.
    let probe = client.as_ref().is_some_and(|(_, ex)| ex.body.is_some()) || !idempotent(method);
    let mut fresh_only = false;
    // Servers this request failed to connect to (retries go elsewhere).
    let mut tried: u64 = 0;
    loop {
        attempts += 1;
        let server = group.pick(affinity, tried);
        let pooled = if fresh_only {
            None
        } else {
            w.pool
                .take(gid, server, sni_tag, group.keepalive_timeout, probe)
        };
        let (mut up, reused) = match pooled {
            Some(c) => (c, true),
            None => match connect(group, server, sni, sni_tag).await {
                Ok(c) => (c, false),
                Err(e) => {
                    group.mark_failed(server);
                    if server < 64 {
                        tried |= 1 << server;
                    }
                    w.stats.upstream_connect_errors.fetch_add(1, Relaxed);
                    if attempts < max_attempts && group.servers.len() > 1 && !group.is_down_all() {
                        continue;
                    }
                    return Err(e);
                }
            },
        };
        if reused {
            w.stats.upstream_reused.fetch_add(1, Relaxed);
        }
        w.stats.upstream_requests.fetch_add(1, Relaxed);
        let body_pending = client.as_ref().is_some_and(|(_, ex)| ex.body.is_some());
        let client_now = client.as_mut().map(|(c, e)| (&mut **c, &mut **e));
        match exchange_once(client_now, group, &mut up, head, method).await {
            Ok((resp, buf)) => {
                group.mark_ok(server);
                up.uses += 1;
                return Ok(UpstreamResponse {
                    dec: BodyDecoder::new(resp.body, None).upstream(),
                    head: resp,
                    conn: up,
                    buf,
                    group_id: gid,
                });
            }
            // The origin closed an idle connection as we reused it (the keep-alive race):
            // retry an idempotent request once, on a new connection.
            Err(UpstreamError::Closed)
                if reused && !body_pending && idempotent(method) && attempts < max_attempts =>
            {
                fresh_only = true;
                continue;
            }
            Err(e @ (UpstreamError::ClientBody(_) | UpstreamError::Client(_))) => return Err(e),
            Err(e) => {
                if matches!(e, UpstreamError::ReadTimeout) {
                    w.stats.upstream_timeouts.fetch_add(1, Relaxed);
                } else {
                    w.stats.upstream_bad_responses.fetch_add(1, Relaxed);
                }
                group.mark_failed(server);
                return Err(e);
            }
        }
    }
}

/// Methods that may be sent twice (RFC 9110 9.2.2): the only ones retried.
fn idempotent(m: &Method) -> bool {
    matches!(
        m,
        Method::Get | Method::Head | Method::Options | Method::Trace | Method::Put | Method::Delete
    )
}

impl UpstreamGroup {
    fn is_down_all(&self) -> bool {
        (0..self.servers.len()).all(|i| self.is_down(i))
    }
}

/// The TLS server name for an `https://` server: `sni` (a `proxy_set_header` Host,
/// without its port) when it is a valid name or address, else the server's own.
fn server_name(
    own: &rustls::pki_types::ServerName<'static>,
    sni: Option<&str>,
) -> rustls::pki_types::ServerName<'static> {
    sni.map(crate::vars::normalize_host)
        .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
        .and_then(|h| rustls::pki_types::ServerName::try_from(h.to_string()).ok())
        .unwrap_or_else(|| own.clone())
}

async fn connect(
    group: &UpstreamGroup,
    server: usize,
    sni: Option<&str>,
    sni_tag: u64,
) -> Result<PooledConn, UpstreamError> {
    let s = &group.servers[server];
    let addr = s.addr;
    match tokio::time::timeout(group.connect_timeout, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            let stream = match (&s.tls_name, &group.tls) {
                (Some(name), Some(cfg)) => {
                    // The handshake shares connect_timeout with the TCP connect's own.
                    let c = tokio_rustls::TlsConnector::from(cfg.clone());
                    match tokio::time::timeout(
                        group.connect_timeout,
                        c.connect(server_name(name, sni), stream),
                    )
                    .await
                    {
                        Ok(Ok(t)) => UpstreamIo::Tls(Box::new(t)),
                        Ok(Err(e)) => {
                            return Err(UpstreamError::Connect(io::Error::new(
                                e.kind(),
                                format!("TLS handshake with {} ({addr}): {e}", s.name),
                            )))
                        }
                        Err(_) => return Err(UpstreamError::ConnectTimeout),
                    }
                }
                _ => UpstreamIo::Tcp(stream),
            };
            Ok(PooledConn {
                stream,
                server,
                sni: sni_tag,
                uses: 0,
            })
        }
        Ok(Err(e)) => Err(UpstreamError::Connect(io::Error::new(
            e.kind(),
            format!("{e} to {addr}"),
        ))),
        Err(_) => Err(UpstreamError::ConnectTimeout),
    }
}

/// The request head sent upstream: hop-by-hop headers removed (and those the client's
/// Connection header names), Host passed through, X-Forwarded-For appended with the
/// request's client address ([`Exchange::client_addr`]).
pub fn build_request_head(ex: &Exchange, group: &UpstreamGroup) -> Vec<u8> {
    let opts = HeadOptions {
        fields: ex.upstream_fields.as_deref(),
        ..HeadOptions::default()
    };
    request_head(&ex.req, ex.client_addr().ip(), group, &opts)
}

/// How [`request_head`] departs from forwarding the client's request as is.
#[derive(Default)]
pub struct HeadOptions<'a> {
    /// Send this method instead of the client's (a cache fill turns HEAD into GET).
    pub method: Option<&'a str>,
    /// Request headers not forwarded (lowercase names), e.g. the client's validators.
    pub strip: &'a [&'a str],
    /// Extra `Name: value\r\n` lines (a revalidation's own validators).
    pub extra: &'a [u8],
    /// The location's `proxy_set_header`, rendered for the request.
    pub fields: Option<&'a crate::http::fields::UpstreamFields>,
}

/// The request head sent upstream for `req`, see [`build_request_head`].
pub fn request_head(
    req: &edge_http::RequestHead,
    peer: std::net::IpAddr,
    group: &UpstreamGroup,
    opts: &HeadOptions<'_>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(opts.method.unwrap_or(req.method.as_str()).as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.path_and_query().as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    // An https:// group talks to its origin by name: Host is that name (the certificate
    // and the origin's virtual host are for it), not the client's.
    let fields = opts.fields;
    let set_host = fields.and_then(|f| f.host.as_deref());
    match (set_host.or(group.tls_host.as_deref()), req.host()) {
        (Some(h), _) => edge_http::write_header(&mut out, "Host", h.as_bytes()),
        (None, Some(h)) => edge_http::write_header(&mut out, "Host", h.as_bytes()),
        (None, None) => edge_http::write_header(
            &mut out,
            "Host",
            group.servers[0].addr.to_string().as_bytes(),
        ),
    }
    let named: Vec<String> = req
        .headers
        .tokens("connection")
        .map(|t| String::from_utf8_lossy(t).to_ascii_lowercase())
        .collect();
    let mut xff: Option<Vec<u8>> = None;
    let mut via: Vec<u8> = Vec::new();
    for (name, value) in req.headers.iter() {
        if name.eq_ignore_ascii_case("via") {
            via.extend_from_slice(value);
            via.extend_from_slice(b", ");
            continue;
        }
        if edge_http::is_hop_by_hop(name)
            || name.eq_ignore_ascii_case("host")
            || name.eq_ignore_ascii_case("content-length")
            || named.iter().any(|n| name.eq_ignore_ascii_case(n))
            || opts.strip.iter().any(|n| name.eq_ignore_ascii_case(n))
            || fields.is_some_and(|f| f.sets(name))
        {
            continue;
        }
        if name.eq_ignore_ascii_case("x-forwarded-for") {
            let v = xff.get_or_insert_with(Vec::new);
            if !v.is_empty() {
                v.extend_from_slice(b", ");
            }
            v.extend_from_slice(value);
            continue;
        }
        edge_http::write_header(&mut out, name, value);
    }
    if let Some(f) = fields {
        out.extend_from_slice(&f.lines);
    }
    if !fields.is_some_and(|f| f.sets("x-forwarded-for")) {
        let mut v = xff.unwrap_or_default();
        if !v.is_empty() {
            v.extend_from_slice(b", ");
        }
        v.extend_from_slice(peer.to_string().as_bytes());
        edge_http::write_header(&mut out, "X-Forwarded-For", &v);
    }
    // RFC 9110 7.6.3: who forwarded it (a parent refuses a request it already saw).
    via.extend_from_slice(&crate::http::node::get().via);
    edge_http::write_header(&mut out, "Via", &via);
    out.extend_from_slice(opts.extra);
    match req.body {
        BodyKind::Length(n) => edge_http::write_header_u64(&mut out, "Content-Length", n),
        BodyKind::Chunked => edge_http::write_header(&mut out, "Transfer-Encoding", b"chunked"),
        _ => {}
    }
    if group.keepalive == 0 {
        edge_http::write_header(&mut out, "Connection", b"close");
    }
    out.extend_from_slice(b"\r\n");
    out
}

async fn exchange_once(
    client: Option<(&mut Conn, &mut Exchange)>,
    group: &UpstreamGroup,
    up: &mut PooledConn,
    head: &[u8],
    method: &Method,
) -> Result<(ResponseHead, BytesMut), UpstreamError> {
    // Head (and, for small bodies already buffered, nothing else: the body follows).
    if let Err(e) = up.stream.write_all_timed(head, group.send_timeout).await {
        return Err(if e.kind() == io::ErrorKind::TimedOut {
            UpstreamError::ReadTimeout
        } else {
            UpstreamError::Closed
        });
    }
    let mut client = client;
    if let Some((conn, ex)) = client.as_mut() {
        if ex.body.is_some() {
            ex.send_continue(conn, group.send_timeout)
                .await
                .map_err(UpstreamError::Client)?;
            stream_request_body(conn, ex, group, up).await?;
        }
    }
    read_response_head(up, method, group, client).await
}

/// Forwards an interim (1xx) response from the origin to the client (RFC 9110 15.2: a
/// proxy forwards them), end-to-end headers only: `103 Early Hints` lets a browser
/// preload while the origin works. HTTP/1.0 clients cannot take them; a `100 Continue`
/// is not repeated when we already sent our own. Never stored.
async fn forward_interim(
    conn: &mut Conn,
    ex: &Exchange,
    head: &ResponseHead,
    send: std::time::Duration,
) -> io::Result<()> {
    if ex.req.version != edge_http::Version::Http11 || (head.status == 100 && ex.continue_sent) {
        return Ok(());
    }
    let mut out = Vec::with_capacity(256);
    edge_http::write_status_line(&mut out, head.status);
    super::headers::write_forwarded_headers(&mut out, &head.headers);
    out.extend_from_slice(b"\r\n");
    conn.write_all(&out, send).await
}

/// Streams the client's request body upstream, re-framed (Content-Length as is, chunked
/// re-chunked), never holding more than one read buffer.
async fn stream_request_body(
    conn: &mut Conn,
    ex: &mut Exchange,
    group: &UpstreamGroup,
    up: &mut PooledConn,
) -> Result<(), UpstreamError> {
    let Some(mut dec) = ex.body.take() else {
        return Ok(());
    };
    let chunked = ex.req.body == BodyKind::Chunked;
    let mut out = Vec::with_capacity(UP_BUF + 32);
    let body_timeout = group.send_timeout;
    loop {
        if !conn.rbuf.is_empty() {
            let d = match dec.decode(&conn.rbuf) {
                Ok(d) => d,
                Err(e) => {
                    ex.keep_alive = false;
                    return Err(UpstreamError::ClientBody(e.status()));
                }
            };
            out.clear();
            if chunked && !d.data.is_empty() {
                edge_http::write_chunk_header(&mut out, d.data.len());
                out.extend_from_slice(d.data);
                out.extend_from_slice(b"\r\n");
            } else {
                out.extend_from_slice(d.data);
            }
            let (n, done) = (d.consumed, d.done);
            conn.rbuf.advance(n);
            if done && chunked {
                out.extend_from_slice(edge_http::LAST_CHUNK);
            }
            if !out.is_empty() {
                up.stream
                    .write_all_timed(&out, body_timeout)
                    .await
                    .map_err(|_| UpstreamError::Closed)?;
            }
            if done {
                return Ok(());
            }
            if n > 0 {
                continue;
            }
        }
        match conn.fill(body_timeout).await {
            Ok(0) => {
                ex.keep_alive = false;
                return Err(UpstreamError::ClientBody(400));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                ex.keep_alive = false;
                return Err(UpstreamError::ClientBody(408));
            }
            Err(e) => return Err(UpstreamError::Client(e)),
        }
    }
}

async fn read_response_head(
    up: &mut PooledConn,
    method: &Method,
    group: &UpstreamGroup,
    mut client: Option<(&mut Conn, &mut Exchange)>,
) -> Result<(ResponseHead, BytesMut), UpstreamError> {
    let limits = upstream_limits();
    let mut buf = BytesMut::with_capacity(UP_BUF);
    loop {
        if !buf.is_empty() {
            match edge_http::parse_response(&buf, &limits, method) {
                Ok(Some((head, n))) => {
                    buf.advance(n);
                    if (100..200).contains(&head.status) {
                        if head.status == 101 {
                            return Err(UpstreamError::Bad(
                                "protocol upgrade is not supported".into(),
                            ));
                        }
                        if let Some((conn, ex)) = client.as_mut() {
                            forward_interim(conn, ex, &head, group.send_timeout)
                                .await
                                .map_err(UpstreamError::Client)?;
                        }
                        continue; // then wait for the final response
                    }
                    return Ok((head, buf));
                }
                Ok(None) => {}
                Err(e) => return Err(UpstreamError::Bad(e.to_string())),
            }
        }
        match tokio::time::timeout(group.read_timeout, up.stream.read_buf(&mut buf)).await {
            Ok(Ok(0)) => return Err(UpstreamError::Closed),
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return Err(UpstreamError::Closed),
            Err(_) => return Err(UpstreamError::ReadTimeout),
        }
    }
}
