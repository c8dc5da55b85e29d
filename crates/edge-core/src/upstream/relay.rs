//! Relaying an upstream response to the client: the response head (hop-by-hop, Date,
//! Server and framing headers replaced by ours) and the body, streamed with
//! backpressure: we read from the upstream only as fast as the client takes bytes, so a
//! slow client never makes us buffer a whole object. [`proxy_pass`] is the whole
//! uncached proxy exchange, used by the proxy handler and by the cache's bypass.
//!
//! A failure after the head was sent can only be signalled by cutting the connection
//! (RST), which the session does for `ExchangeError::Aborted`.

use super::client::{fetch, Local, UpstreamError, UpstreamResponse, UP_BUF};
pub use super::headers::write_forwarded_headers;
use super::UpstreamGroup;
use crate::compress::{Compressor, Plan, Policy};
use crate::http::exchange::{BodyLen, Framing};
use crate::http::respond::{error_page, respond};
use crate::http::{Conn, Exchange, ExchangeError, Timeouts};
use bytes::Buf;
use edge_http::{BodyKind, HeaderMap, ResponseHead};
use std::sync::Arc;

/// Bytes gathered before a write to the client (head plus the first body bytes go out in
/// one write for small objects).
const FLUSH_AT: usize = 64 * 1024;

/// Proxies one request without the cache (also the cache's bypass path): fetch, then
/// relay; an error before the head is answered with a 502/504 page and one log line.
#[allow(clippy::too_many_arguments)]
pub async fn proxy_pass(
    w: Local<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    t: &Timeouts,
    group: &Arc<UpstreamGroup>,
    compress: Option<(&Policy, &Compressor)>,
    affinity: Option<u64>,
) -> Result<(), ExchangeError> {
    match fetch(w, conn, ex, group, affinity).await {
        Ok(up) => {
            let relay = relay_response(w, conn, ex, t.send, group, up, compress);
            relay.await
        }
        Err(e) => upstream_error(conn, ex, t, group, e).await,
    }
}

/// A body transform failed mid-response (a corrupt body from the origin for a
/// decoder): the client's connection is cut.
fn filter_failed(e: std::io::Error) -> ExchangeError {
    ExchangeError::Aborted(format!("response body transform: {e}"))
}

/// Answers a proxied request whose upstream exchange failed before the head: a 502/504
/// page and one log line (none for a client that went away or sent a bad body).
pub async fn upstream_error(
    conn: &mut Conn,
    ex: &mut Exchange,
    t: &Timeouts,
    group: &UpstreamGroup,
    e: UpstreamError,
) -> Result<(), ExchangeError> {
    match e {
        UpstreamError::Client(e) => Err(ExchangeError::Client(e)),
        e => {
            let status = e.status();
            if !matches!(e, UpstreamError::ClientBody(_)) {
                tracing::error!(
                    "upstream \"{}\": {} while proxying \"{} {}\" for {}",
                    group.name,
                    e,
                    ex.req.method.as_str(),
                    ex.req.target,
                    ex.client_addr()
                );
            }
            if ex.body.is_some() {
                ex.keep_alive = false; // the request body was not consumed
                ex.body = None;
            }
            let extra = error_headers(ex);
            respond(
                conn,
                ex,
                t,
                status,
                "text/html",
                &error_page(status),
                &extra,
            )
            .await
        }
    }
}

/// Extra headers of an error page for a proxied request: on a cached location,
/// `X-Cache-Status` (the location's `add_header`s come with the head's end).
pub fn error_headers(ex: &Exchange) -> Vec<u8> {
    let mut extra = Vec::new();
    ex.write_cache_status(&mut extra);
    extra
}

/// Writes the response head for the client from an upstream head: hop-by-hop, Date,
/// Server and framing headers replaced by ours. Returns how the body's bytes are framed.
pub fn client_head(out: &mut Vec<u8>, ex: &mut Exchange, head: &ResponseHead) -> Framing {
    client_head_planned(out, ex, head, Plan::AsIs { vary: false })
}

/// [`client_head`] for a response sent according to a compression `plan`: the coding
/// lines and `Vary` set for it ([`crate::compress::transform_block`]); a transformed
/// body's length is unknown (the protocol's encoder frames it).
pub fn client_head_planned(
    out: &mut Vec<u8>,
    ex: &mut Exchange,
    head: &ResponseHead,
    plan: Plan,
) -> Framing {
    if plan == (Plan::AsIs { vary: false }) {
        begin_forwarded_head(out, ex, head.status, &head.headers);
    } else {
        let mut lines = Vec::with_capacity(512);
        write_forwarded_headers(&mut lines, &head.headers);
        begin_forwarded_head(out, ex, head.status, &HeaderMap::new());
        out.extend_from_slice(&crate::compress::transform_block(&lines, plan));
    }
    let body = match plan {
        Plan::Encode(_) | Plan::Decode(_) => BodyKind::Chunked,
        Plan::AsIs { .. } => head.body,
    };
    let len = match body {
        BodyKind::Empty => {
            if let Some(cl) = head.headers.get("content-length") {
                edge_http::write_header(out, "Content-Length", cl);
            }
            BodyLen::None
        }
        BodyKind::Length(n) => {
            edge_http::write_header_u64(out, "Content-Length", n);
            BodyLen::Known(n)
        }
        BodyKind::Chunked | BodyKind::CloseDelimited => BodyLen::Unknown,
    };
    ex.write_cache_status(out);
    ex.end_head(out, len)
}

/// The head of a response relayed from upstream, up to its end-to-end headers: the
/// status line, `Server`, the origin's `Date` when it is valid (RFC 9110 6.6.1: a
/// proxy forwards it; ours when it is missing or invalid) and the forwarded headers.
/// On a cached location it also notes the origin's status for `Cache-Status`.
pub fn begin_forwarded_head(out: &mut Vec<u8>, ex: &mut Exchange, status: u16, h: &HeaderMap) {
    ex.begin_stored_head(out, status);
    match h.get_str("date") {
        Some(d) if edge_http::parse_http_date(d).is_some() => {
            edge_http::write_header(out, "Date", d.trim().as_bytes())
        }
        _ => edge_http::write_header(out, "Date", &edge_http::http_date_now()),
    }
    if ex.cache_status.is_some() && ex.cache.fwd_status.is_none() {
        ex.cache.fwd_status = Some(status);
    }
    write_forwarded_headers(out, h);
}

/// Sends the upstream response to the client, streaming the body; `tee` sees every body
/// byte (the cache writer hooks in here). Returns the connection to the pool when the
/// body ended cleanly and the upstream allows reuse.
#[allow(clippy::too_many_arguments)]
pub async fn relay_response(
    w: Local<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    send: std::time::Duration,
    group: &UpstreamGroup,
    mut up: UpstreamResponse,
    compress: Option<(&Policy, &Compressor)>,
) -> Result<(), ExchangeError> {
    let mut out = Vec::with_capacity(FLUSH_AT + 1024);
    let (plan, mut filter) =
        crate::compress::for_relay(compress, &ex.req.headers, &up.head, ex.is_head(), w.stats);
    let framing = client_head_planned(&mut out, ex, &up.head, plan);
    let head_len = out.len();
    let mut coded = Vec::new();
    let mut sent: u64 = 0;
    let to_client = !ex.is_head();
    loop {
        while let Some(p) = up.next_piece().map_err(ExchangeError::Aborted)? {
            let data = &up.buf[p.data()];
            if !data.is_empty() && to_client {
                match filter.as_mut() {
                    Some(f) => {
                        coded.clear();
                        f.push(data, &mut coded).await.map_err(filter_failed)?;
                        framing.frame(&mut out, &coded);
                        sent += coded.len() as u64;
                    }
                    None => {
                        framing.frame(&mut out, data);
                        sent += data.len() as u64;
                    }
                }
            }
            up.buf.advance(p.consumed);
            if out.len() >= FLUSH_AT {
                conn.write_all(&out, send).await?;
                out.clear();
            }
        }
        if up.body_done() {
            break;
        }
        // Flush what we have before waiting on the origin, so the client (and collapsed
        // followers) see bytes as they arrive.
        if !out.is_empty() {
            conn.write_all(&out, send).await?;
            out.clear();
        }
        match up.read_body(group, UP_BUF, w.stats).await {
            Ok(true) => {}
            Ok(false) => break,
            Err(why) => {
                ex.body_bytes_sent = sent;
                return Err(ExchangeError::Aborted(why));
            }
        }
    }
    if let Some(f) = filter.as_mut() {
        coded.clear();
        f.finish(&mut coded).await.map_err(filter_failed)?;
        framing.frame(&mut out, &coded);
        sent += coded.len() as u64;
        f.account(w.stats);
    }
    framing.finish(&mut out);
    if !out.is_empty() || head_len > 0 {
        conn.write_all(&out, send).await?;
    }
    ex.body_bytes_sent = sent;
    up.release(w.pool, group);
    Ok(())
}
