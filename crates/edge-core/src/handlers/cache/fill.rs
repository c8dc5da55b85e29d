//! Misses: the leader fetches from the origin, sends the body to its own client as it
//! reads it and writes the object; followers stream the temp file as it grows.
//!
//! How it fits: [`super::handle`] joins the collapse lock of the key
//! (`cache.inflight().join`). The leader calls [`fetch_and_fill`]: a GET without the
//! client's validators or Range, then [`respond`] decides with `policy::storable`, opens
//! an `ObjectWriter` and publishes the head to the followers. The origin-to-disk copy
//! ([`pump`]) then runs in its own task on the worker, at the origin's pace, and hands
//! each chunk it reads to the leader's client through a bounded channel
//! ([`LeadRelay`], [`super::stream::Relay`]) before writing it: no read back from the
//! file. The channel is never waited on while storing: a leader's client that falls
//! behind by [`RELAY_DEPTH`] chunks is told so and reads the rest from the file like a
//! follower ([`super::stream::stream_fill`]), so a slow first client never slows the
//! others, and a leader whose client hangs up still completes the object. The failure
//! rules of `edge_cache::inflight` apply: a leader failing before the head makes
//! followers retry; after the head, followers' connections are cut (their head promised
//! a length); a disk write error fails the fill but never the leader's own client (the
//! rest of the body goes through the relay, at its pace). Responses that are not
//! stored, and fills without a collapse lock (`cache_lock = false`), are relayed to the
//! client directly by [`pump`], paced by the client.

use super::ctx::{fill_head, mark, CacheStatus, Ctx, MayStore, OwnedCtx};
use super::store::{publish, Store};
use super::stream::{Leader, Relay, RELAY_DEPTH};
use crate::http::conn::Conn;
use crate::http::exchange::{BodyLen, Exchange, ExchangeError, Framing};
use crate::http::respond::{error_page, respond as respond_page};
use crate::upstream::relay::{self as proxy, client_head_planned};
use crate::upstream::{fetch_with, UpstreamError, UpstreamResponse};
use bytes::Bytes;
use edge_cache::{policy, FillHandle, FillState, ObjectWriter};
use edge_http::{BodyKind, Method, RangeOutcome};
use std::sync::atomic::Ordering::Relaxed;
use std::time::SystemTime;
use tokio::sync::mpsc;

/// Upstream read buffer growth.
const UP_BUF: usize = 64 * 1024;
/// Upstream read buffer growth while storing: each read becomes one disk write (a
/// hand-off to the file I/O pool) and one write to the leader's client, so a fast
/// origin's body goes in fewer, larger steps.
const STORE_BUF: usize = 256 * 1024;
/// Bytes gathered before a write to the client.
const FLUSH_AT: usize = 64 * 1024;

/// A miss (or a refetch after expiry, `st = Expired`): fetch the whole object from the
/// origin and answer the client, storing it when `store` and the response allow.
/// GETs the object from the origin (the request built by `fill_head`, plus `extra`
/// header lines such as validators), returning the response and the request and
/// response times that RFC 9111's age calculation needs.
pub async fn fetch_origin(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    extra: &[u8],
) -> (
    Result<UpstreamResponse, UpstreamError>,
    SystemTime,
    SystemTime,
) {
    crate::handlers::context::upstream_fields(conn, ex, ctx.shared, ctx.route);
    let fields = ex.upstream_fields.clone();
    let head = fill_head(
        ctx,
        &ex.req,
        ex.client_addr().ip(),
        extra,
        fields.as_deref(),
    );
    let t0 = SystemTime::now();
    let affinity = ctx.affinity();
    let up = fetch_with(
        ctx.w.upstream(),
        Some((conn, ex)),
        &ctx.p.upstream,
        &head,
        &Method::Get,
        affinity,
        fields.as_ref().and_then(|f| f.host.as_deref()),
    )
    .await;
    (up, t0, SystemTime::now())
}

pub async fn fetch_and_fill(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    handle: Option<FillHandle>,
    st: CacheStatus,
    store: MayStore,
) -> Result<(), ExchangeError> {
    let (up, t0, t1) = fetch_origin(ctx, conn, ex, b"").await;
    match up {
        Ok(up) => respond(ctx, conn, ex, up, handle, st, store, t0, t1).await,
        Err(e) => {
            drop(handle); // followers join again; one of them retries the origin
            mark(ctx.w, ex, st);
            upstream_failed(ctx, conn, ex, e).await
        }
    }
}

/// Answers with an error page for a failed upstream exchange (502/504), one log line.
pub async fn upstream_failed(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    e: UpstreamError,
) -> Result<(), ExchangeError> {
    if let UpstreamError::Client(e) = e {
        return Err(ExchangeError::Client(e));
    }
    let status = e.status();
    if !matches!(e, UpstreamError::ClientBody(_)) {
        tracing::error!(
            "upstream \"{}\": {} while proxying \"{} {}\" for {}",
            ctx.p.upstream.name,
            e,
            ex.req.method.as_str(),
            ex.req.target,
            ex.client_addr()
        );
    }
    if ex.body.is_some() && matches!(e, UpstreamError::ClientBody(_)) {
        ex.keep_alive = false;
        ex.body = None;
    }
    let page = error_page(status);
    let extra = proxy::error_headers(ex);
    respond_page(
        conn,
        ex,
        &ctx.shared.timeouts,
        status,
        "text/html",
        &page,
        &extra,
    )
    .await
}

/// The origin answered a fill: decide whether to store it, publish the head to the
/// followers, and stream the body to the client and the file.
#[allow(clippy::too_many_arguments)]
pub async fn respond(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    up: UpstreamResponse,
    handle: Option<FillHandle>,
    st: CacheStatus,
    store: MayStore,
    t0: SystemTime,
    t1: SystemTime,
) -> Result<(), ExchangeError> {
    let writer = if store == MayStore::Yes {
        open_writer(ctx, &ex.req.headers, &up, t0, t1).await
    } else {
        None
    };
    let store = publish(writer, handle);
    mark(ctx.w, ex, st);
    ex.cache.fwd_status = Some(up.head.status);
    ex.cache.stored = store.is_some();
    match store {
        Some(s) if s.handle.is_some() => lead(ctx, conn, ex, up, s).await,
        other => pump(ctx, Some((conn, ex)), up, other, None).await,
    }
}

/// A stored fill (followers may join): the origin-to-disk copy runs in its own task,
/// and this request's client gets the origin's bytes from it through the relay.
async fn lead(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    up: UpstreamResponse,
    store: Store,
) -> Result<(), ExchangeError> {
    let fill = store.handle.as_ref().map(|h| h.fill().clone());
    let head = match fill.as_ref().map(|f| f.state()) {
        Some(FillState::Streaming { head, .. }) => head,
        _ => return pump(ctx, Some((conn, ex)), up, Some(store), None).await,
    };
    let (Some(fill), Some(owned)) = (fill, OwnedCtx::new(ctx)) else {
        return pump(ctx, Some((conn, ex)), up, Some(store), None).await;
    };
    let (tx, rx) = mpsc::channel(RELAY_DEPTH);
    let mut extra = Vec::new();
    for v in up.head.headers.get_all("set-cookie") {
        edge_http::write_header(&mut extra, "Set-Cookie", v);
    }
    tokio::task::spawn_local(async move {
        if let Some(c) = owned.ctx() {
            let _ = pump(&c, None, up, Some(store), Some(tx)).await;
        }
    });
    let leader = Leader {
        extra,
        relay: Some(rx),
        from_origin: true,
    };
    super::deliver::filling(ctx, conn, ex, &fill, head, Some(leader)).await
}

/// Opens the object writer when the response may be stored (RFC 9111 via
/// `policy::storable`); `None` means "serve uncached".
pub async fn open_writer(
    ctx: &Ctx<'_>,
    req: &edge_http::HeaderMap,
    up: &UpstreamResponse,
    t0: SystemTime,
    t1: SystemTime,
) -> Option<ObjectWriter> {
    let h = &up.head;
    let fresh = match policy::storable(
        &Method::Get,
        req,
        h.status,
        &h.headers,
        &ctx.p.policy,
        t0,
        t1,
    ) {
        Ok(f) => f,
        Err(why) => {
            tracing::debug!("not caching {}: {}", ctx.key, why.as_str());
            return None;
        }
    };
    let len = match h.body {
        BodyKind::Length(n) => Some(n),
        BodyKind::Empty => Some(0),
        BodyKind::Chunked | BodyKind::CloseDelimited => None,
    };
    let meta = policy::build_meta(&ctx.key, h.status, &h.headers, fresh, t0, t1, len);
    // Clients get this object compressed or not by their Accept-Encoding.
    let varies = (ctx.p.compress.as_ref())
        .is_some_and(|pol| crate::compress::varies(pol, &crate::compress::facts_of_head(h)));
    begin_store(ctx, req, meta, varies).await
}

/// Opens the writer of `meta`'s object: under its variant key (`Vary`), with `Vary:
/// Accept-Encoding` added to the identity form's headers when `varies` (the location
/// serves it compressed or not by the client's Accept-Encoding, and says so to
/// downstream caches), the directories, temp file and header made on the file I/O
/// backend's pool. Errors are counted and logged (rate limited) by the cache: `None`,
/// serve uncached. Used by whole objects ([`open_writer`]) and partial ones
/// (`super::partial`).
pub async fn begin_store(
    ctx: &Ctx<'_>,
    req: &edge_http::HeaderMap,
    mut meta: edge_cache::ObjectMeta,
    varies: bool,
) -> Option<ObjectWriter> {
    meta.key = edge_cache::variant_key(&ctx.key, &meta.vary, req);
    if varies {
        if let Some(b) = edge_cache::coded::with_vary_accept_encoding(&meta.header_block) {
            meta.header_block = b;
        }
    }
    ctx.w.file_io.begin_write(ctx.cache, meta).await
}

/// Relays the upstream body to the client (when there is one) and into the store (when
/// storing). If the client goes away mid-body and a store is open, the body is still
/// read to its end (each read bounded by the upstream `read_timeout`), so followers and
/// the cache get the whole object. `relay` feeds the leader's client of a stored miss
/// (the fill task's side of [`Relay`], see [`LeadRelay`]).
pub async fn pump(
    ctx: &Ctx<'_>,
    mut client: Option<(&mut Conn, &mut Exchange)>,
    mut up: UpstreamResponse,
    mut store: Option<Store>,
    relay: Option<mpsc::Sender<Relay>>,
) -> Result<(), ExchangeError> {
    let mut lead = relay.map(LeadRelay::new);
    let group = &ctx.p.upstream;
    let send = ctx.shared.timeouts.send;
    // What goes to the client, gathered up to FLUSH_AT (the fill task has no client).
    let mut out = Vec::with_capacity(if client.is_some() { FLUSH_AT + 1024 } else { 0 });
    let mut framing = Framing::default();
    let mut to_client = false;
    // The part of the body the client gets (all of it unless it asked for one range).
    let mut want = 0..u64::MAX;
    // The client's compression (or decoding) of what it gets here: on the fly, since
    // this response is not the stored object's copy (that is made on later hits).
    let mut filter = None;
    if let Some((_, ex)) = client.as_mut() {
        match leader_range(ex, &up, store.as_ref()) {
            Some(r) => {
                range_head(ex, &up, &r, &mut out);
                want = r.unwrap_or(0..0);
            }
            None => {
                let comp = ctx.w.compression(ctx.p.compress.as_ref());
                let (plan, f) = crate::compress::for_relay(
                    comp,
                    &ex.req.headers,
                    &up.head,
                    ex.is_head(),
                    ctx.w.stats(),
                );
                filter = f;
                framing = client_head_planned(&mut out, ex, &up.head, plan);
            }
        }
        to_client = !ex.is_head();
    }
    let mut coded = Vec::new();
    let mut pos: u64 = 0; // body bytes decoded so far
    let mut sent: u64 = 0;
    let mut client_error: Option<std::io::Error> = None;
    let result: Result<(), String> = loop {
        let mut bad = None;
        loop {
            let p = match up.next_piece() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => {
                    bad = Some(e);
                    break;
                }
            };
            let len = p.len;
            // The leader's client and the store get the decoded bytes as a slice of the
            // read buffer itself (no copy).
            let wants = lead.as_ref().is_some_and(LeadRelay::wants);
            let chunk = (len > 0 && (wants || store.is_some()))
                .then(|| up.buf.split_to(p.consumed).freeze().slice(p.data()));
            let data: &[u8] = match &chunk {
                Some(c) => c,
                None => &up.buf[p.data()],
            };
            if !data.is_empty() {
                let end = pos + len as u64;
                if let (Some(l), Some(c), true) = (lead.as_mut(), &chunk, wants) {
                    match store {
                        Some(_) => {
                            let last = matches!(up.head.body, BodyKind::Length(t) if end >= t);
                            l.offer(c.clone(), last);
                        }
                        None => l.give(c.clone()).await,
                    }
                }
                // (While storing, every non-empty piece is a chunk.)
                if let (Some(s), Some(c)) = (store.as_mut(), &chunk) {
                    if !s.write_bytes(&ctx.w.file_io, c.clone()).await {
                        let at = s.writer.written();
                        store = None; // fails the fill; the leader's client goes on
                        if let Some(l) = lead.as_mut() {
                            l.store_failed(at, pos, data).await;
                        }
                    }
                }
                let (lo, hi) = (pos.max(want.start), end.min(want.end));
                if to_client && client_error.is_none() && lo < hi {
                    let part = &data[(lo - pos) as usize..(hi - pos) as usize];
                    match filter.as_mut() {
                        Some(f) => {
                            coded.clear();
                            match f.push(part, &mut coded).await {
                                Ok(()) => {
                                    framing.frame(&mut out, &coded);
                                    sent += coded.len() as u64;
                                }
                                // A corrupt coded body: this client is cut; the store
                                // (the origin's bytes) goes on.
                                Err(e) => client_error = Some(e),
                            }
                        }
                        None => {
                            framing.frame(&mut out, part);
                            sent += part.len() as u64;
                        }
                    }
                }
                pos = end;
            }
            if chunk.is_none() {
                bytes::Buf::advance(&mut up.buf, p.consumed);
            }
            if out.len() >= FLUSH_AT {
                flush(&mut client, &mut out, send, &mut client_error).await;
            }
        }
        if let Some(b) = bad {
            break Err(b);
        }
        let relay_open = lead.as_ref().is_some_and(LeadRelay::open);
        if store.is_none()
            && !relay_open
            && (client_error.is_some() || !to_client || pos >= want.end)
        {
            // Nobody left to feed: the client is gone, asked for HEAD, or has its whole
            // range, and the object is not being stored (the connection is closed).
            break Ok(());
        }
        if up.body_done() {
            break Ok(());
        }
        // Send what we have before waiting on the origin, so the client sees bytes as
        // they arrive (followers were already told by `progress`).
        flush(&mut client, &mut out, send, &mut client_error).await;
        let grow = if store.is_some() { STORE_BUF } else { UP_BUF };
        match up.read_body(group, grow, ctx.w.stats()).await {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(why) => break Err(why),
        }
    };
    if result.is_ok() {
        if let (Some(f), None) = (filter.as_mut(), &client_error) {
            coded.clear();
            match f.finish(&mut coded).await {
                Ok(()) => {
                    framing.frame(&mut out, &coded);
                    sent += coded.len() as u64;
                    f.account(ctx.w.stats());
                }
                Err(e) => client_error = Some(e),
            }
        }
    }
    ctx.w.stats().cache_bytes_origin.fetch_add(sent, Relaxed);
    if let Some((_, ex)) = client.as_mut() {
        ex.body_bytes_sent = sent;
    }
    if let Err(why) = result {
        drop(store); // the temp file is removed; followers abort
        return match client_error {
            Some(e) => Err(ExchangeError::Client(e)),
            None if client.is_some() => Err(ExchangeError::Aborted(why)),
            None => {
                tracing::warn!("cache fill of {} failed: {why}", ctx.key);
                Ok(())
            }
        };
    }
    if let Some(s) = store {
        if let (Err(Some(body)), Some(l)) = (s.commit(&ctx.w.file_io).await, lead.as_mut()) {
            l.held_not_stored(&body).await;
        }
    }
    if let Some(l) = lead {
        l.end().await;
    }
    if client_error.is_none() {
        framing.finish(&mut out);
    }
    flush(&mut client, &mut out, send, &mut client_error).await;
    up.release(&ctx.w.pool, group);
    match client_error {
        Some(e) => Err(ExchangeError::Client(e)),
        None => Ok(()),
    }
}

/// The fill task's side of the leader's relay: every chunk read from the origin goes to
/// the leader's client before it is written to disk, without ever waiting for that
/// client while the object is being stored (the fill runs at the origin's pace). One
/// slot of the channel is kept for `Behind`: a client that lets [`RELAY_DEPTH`] - 1
/// chunks pile up is told so and reads the rest from the file. Once nothing is stored
/// (a disk write error) the client is the only reader left, and the relay waits for it.
struct LeadRelay {
    /// `None` once the client is gone (or never wanted a body: HEAD, 304, 416).
    tx: Option<mpsc::Sender<Relay>>,
    /// `Behind` was sent: the client reads the file.
    behind: bool,
    /// The store failed: every chunk goes through the relay, at the client's pace.
    paced: bool,
    /// The chunk that ends a known-length body, sent after the commit: a client that
    /// has the whole body can count on the object being in the index (as `Store`
    /// publishes the last byte to followers only then).
    held: Option<Bytes>,
    /// Body bytes sent through the relay before `Behind`.
    relayed: u64,
}

impl LeadRelay {
    fn new(tx: mpsc::Sender<Relay>) -> LeadRelay {
        LeadRelay {
            tx: Some(tx),
            behind: false,
            paced: false,
            held: None,
            relayed: 0,
        }
    }

    fn open(&self) -> bool {
        self.tx.is_some()
    }

    /// Whether the client takes the next chunk from the relay (not from the file).
    fn wants(&self) -> bool {
        self.tx.is_some() && (!self.behind || self.paced)
    }

    /// A chunk that is also being stored: queued without waiting, or the client is
    /// told it is behind. `last`: it ends a known-length body (held until the commit).
    fn offer(&mut self, b: Bytes, last: bool) {
        let Some(tx) = &self.tx else {
            return;
        };
        if self.behind {
            return;
        }
        if last {
            self.held = Some(b);
            return;
        }
        let msg = if tx.capacity() > 1 {
            self.relayed += b.len() as u64;
            Relay::Data(b)
        } else {
            self.behind = true;
            Relay::Behind
        };
        // Full cannot happen (the last slot is `Behind`'s): closed, the client is gone.
        if tx.try_send(msg).is_err() {
            self.tx = None;
        }
    }

    /// A chunk when nothing is stored: the client paces the fill.
    async fn give(&mut self, b: Bytes) {
        if let Some(tx) = &self.tx {
            if tx.send(Relay::Data(b)).await.is_err() {
                self.tx = None;
            }
        }
    }

    /// The disk write of `data` (body offset `pos`) failed; the file holds the body up
    /// to `at`. A client reading the file gets the rest from the relay from there; one
    /// fed from the relay already has `data` (it was offered before the write).
    async fn store_failed(&mut self, at: u64, pos: u64, data: &[u8]) {
        self.paced = true;
        let Some(tx) = &self.tx else {
            return;
        };
        if self.behind {
            let skip = (at.saturating_sub(pos) as usize).min(data.len());
            let tail = Bytes::copy_from_slice(&data[skip..]);
            let ok = tx.send(Relay::From(at)).await.is_ok()
                && (tail.is_empty() || tx.send(Relay::Data(tail)).await.is_ok());
            if !ok {
                self.tx = None;
            }
        }
    }

    /// A body `Store` held in memory is not in the file (its commit failed, and so did
    /// writing it there for the file's readers). A client reading the file gets the
    /// rest from the relay, from where the relay left off (as after a failed write).
    async fn held_not_stored(&mut self, body: &[u8]) {
        self.store_failed(self.relayed, 0, body).await;
    }

    /// The body ended cleanly and the commit is over: the held chunk, then `End`. While
    /// storing this never waits: without room for both the client is told it is behind
    /// and reads the end from the (committed) file.
    async fn end(self) {
        let Some(tx) = self.tx else {
            return;
        };
        if self.paced {
            if let Some(b) = self.held {
                if tx.send(Relay::Data(b)).await.is_err() {
                    return;
                }
            }
            let _ = tx.send(Relay::End).await;
            return;
        }
        if self.behind {
            return;
        }
        let _ = match self.held {
            Some(b) if tx.capacity() >= 2 => tx
                .try_send(Relay::Data(b))
                .and_then(|()| tx.try_send(Relay::End)),
            Some(_) => tx.try_send(Relay::Behind),
            None => tx.try_send(Relay::End),
        };
    }
}

/// The leader's own `Range` on a miss: the fill fetches the whole object, and the
/// client gets its single range as a 206 while the rest is stored (nginx's range filter
/// does the same). `Some(Some(r))`: send `r`; `Some(None)`: unsatisfiable (416);
/// `None`: the whole response (no Range, several ranges, `If-Range` mismatch, unknown
/// length, or not stored, so there is no metadata to check `If-Range` against).
fn leader_range(
    ex: &Exchange,
    up: &UpstreamResponse,
    store: Option<&Store>,
) -> Option<Option<std::ops::Range<u64>>> {
    let (store, BodyKind::Length(len)) = (store?, up.head.body) else {
        return None;
    };
    if up.head.status != 200 || !ex.req.headers.contains("range") {
        return None;
    }
    let v = edge_cache::hit::validators(store.writer.meta());
    match edge_http::evaluate_range(&ex.req.method, &ex.req.headers, &v, len) {
        RangeOutcome::Partial(r) if r.len() == 1 => Some(Some(r[0].as_range())),
        RangeOutcome::Unsatisfiable => Some(None),
        _ => None,
    }
}

/// The leader's 206 (or 416 for `None`) head: the origin's headers, our framing.
fn range_head(
    ex: &mut Exchange,
    up: &UpstreamResponse,
    r: &Option<std::ops::Range<u64>>,
    out: &mut Vec<u8>,
) {
    let BodyKind::Length(len) = up.head.body else {
        return;
    };
    let status = if r.is_some() { 206 } else { 416 };
    crate::upstream::relay::begin_forwarded_head(out, ex, status, &up.head.headers);
    ex.cache.fwd_status = Some(up.head.status);
    let (cr, n) = match r {
        Some(r) => (
            format!("bytes {}-{}/{len}", r.start, r.end - 1),
            r.end - r.start,
        ),
        None => (format!("bytes */{len}"), 0),
    };
    edge_http::write_header(out, "Content-Range", cr.as_bytes());
    edge_http::write_header_u64(out, "Content-Length", n);
    ex.write_cache_status(out);
    ex.end_head(out, BodyLen::Known(n));
}

/// Writes `out` to the client unless it already failed; remembers the first error.
async fn flush(
    client: &mut Option<(&mut Conn, &mut Exchange)>,
    out: &mut Vec<u8>,
    send: std::time::Duration,
    client_error: &mut Option<std::io::Error>,
) {
    if out.is_empty() {
        return;
    }
    if client_error.is_none() {
        if let Some((conn, _)) = client.as_mut() {
            if let Err(e) = conn.write_all(out, send).await {
                *client_error = Some(e);
            }
        }
    }
    out.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    fn drain(rx: &mut mpsc::Receiver<Relay>) -> Vec<String> {
        let mut got = Vec::new();
        while let Ok(m) = rx.try_recv() {
            got.push(match m {
                Relay::Data(b) => format!("data {}", b.len()),
                Relay::Behind => "behind".into(),
                Relay::From(at) => format!("from {at}"),
                Relay::End => "end".into(),
            });
        }
        got
    }

    #[test]
    fn a_reading_client_gets_every_chunk_and_the_last_after_the_commit() {
        let (tx, mut rx) = mpsc::channel(RELAY_DEPTH);
        let mut l = LeadRelay::new(tx);
        l.offer(Bytes::from_static(b"ab"), false);
        l.offer(Bytes::from_static(b"cde"), true);
        // The last chunk waits for the commit (`end`).
        assert_eq!(drain(&mut rx), ["data 2"]);
        rt().block_on(l.end());
        assert_eq!(drain(&mut rx), ["data 3", "end"]);
    }

    #[test]
    fn a_client_that_stops_reading_is_told_it_is_behind_and_nothing_waits() {
        let (tx, mut rx) = mpsc::channel(RELAY_DEPTH);
        let mut l = LeadRelay::new(tx);
        for _ in 0..RELAY_DEPTH * 3 {
            l.offer(Bytes::from_static(b"x"), false); // never blocks
        }
        assert!(!l.wants(), "the fill no longer feeds it");
        l.offer(Bytes::from_static(b"y"), true);
        rt().block_on(l.end()); // returns at once: the client reads the file
        let got = drain(&mut rx);
        assert_eq!(got.len(), RELAY_DEPTH);
        assert!(got[..RELAY_DEPTH - 1].iter().all(|m| m == "data 1"));
        assert_eq!(got[RELAY_DEPTH - 1], "behind");
    }

    #[test]
    fn without_room_for_the_last_chunk_and_the_end_the_client_reads_the_file() {
        let (tx, mut rx) = mpsc::channel(RELAY_DEPTH);
        let mut l = LeadRelay::new(tx);
        for _ in 0..RELAY_DEPTH - 1 {
            l.offer(Bytes::from_static(b"x"), false);
        }
        assert!(l.wants(), "one slot left: not behind yet");
        l.offer(Bytes::from_static(b"z"), true);
        rt().block_on(l.end());
        let got = drain(&mut rx);
        assert_eq!(got.len(), RELAY_DEPTH);
        assert_eq!(got.last().map(String::as_str), Some("behind"));
    }

    #[test]
    fn after_a_store_failure_a_client_behind_gets_the_rest_from_the_relay() {
        let (tx, mut rx) = mpsc::channel(RELAY_DEPTH * 4);
        let mut l = LeadRelay::new(tx);
        l.behind = true; // as after `Behind`
        let rt = rt();
        rt.block_on(l.store_failed(100, 90, &[7u8; 30]));
        assert!(l.wants(), "paced: every chunk goes through the relay now");
        rt.block_on(l.give(Bytes::from_static(b"more")));
        rt.block_on(l.end());
        assert_eq!(drain(&mut rx), ["from 100", "data 20", "data 4", "end"]);
    }

    /// A held body's commit failed (nothing of it in the file): a client that fell
    /// behind gets the rest from where the relay left it, never bytes twice.
    #[test]
    fn a_held_body_not_stored_reaches_a_client_behind_from_where_it_was() {
        let (tx, mut rx) = mpsc::channel(RELAY_DEPTH);
        let mut l = LeadRelay::new(tx);
        for _ in 0..RELAY_DEPTH {
            l.offer(Bytes::from_static(&[1u8; 10]), false);
        }
        assert!(l.behind);
        let rt = rt();
        let mut got = drain(&mut rx);
        assert_eq!(got.len(), RELAY_DEPTH);
        assert_eq!(got.pop().as_deref(), Some("behind"));
        // The whole body (RELAY_DEPTH chunks of 10 and the 10 never offered).
        rt.block_on(l.held_not_stored(&[1u8; (RELAY_DEPTH + 1) * 10]));
        rt.block_on(l.end());
        let at = (RELAY_DEPTH - 1) * 10;
        assert_eq!(
            drain(&mut rx),
            [format!("from {at}"), "data 20".into(), "end".into()]
        );
    }

    /// The same failure for a client that kept up: it has every chunk but the held last
    /// one, which comes with the end.
    #[test]
    fn a_held_body_not_stored_still_ends_a_client_that_kept_up() {
        let (tx, mut rx) = mpsc::channel(RELAY_DEPTH);
        let mut l = LeadRelay::new(tx);
        l.offer(Bytes::from_static(b"abc"), false);
        l.offer(Bytes::from_static(b"de"), true);
        let rt = rt();
        rt.block_on(l.held_not_stored(b"abcde"));
        rt.block_on(l.end());
        assert_eq!(drain(&mut rx), ["data 3", "data 2", "end"]);
    }

    #[test]
    fn a_client_that_hung_up_is_dropped_and_the_fill_goes_on() {
        let (tx, rx) = mpsc::channel(RELAY_DEPTH);
        drop(rx);
        let mut l = LeadRelay::new(tx);
        l.offer(Bytes::from_static(b"x"), false);
        assert!(!l.open() && !l.wants());
    }
}
