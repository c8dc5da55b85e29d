//! Misses: the leader fetches from the origin and writes the object while it streams
//! the response to its client; collapsed followers stream the same temp file as it
//! grows (no polling, no waiting for the end).
//!
//! How it fits: [`super::handle`] joins the collapse lock of the key
//! (`cache.inflight().join`). The leader calls [`fetch_and_fill`]: a GET without the
//! client's validators or Range, then [`respond`] decides with `policy::storable`, opens
//! an `ObjectWriter`, publishes the head to followers and [`pump`]s the body to the
//! client and the file. Followers call [`follow`]: wait for the head (bounded by
//! `cache_lock_timeout`), then send the bytes already written and sleep until more
//! arrive. The failure rules of `edge_cache::inflight` apply: a leader failing before
//! the head makes followers retry; after the head, followers' connections are cut (their
//! head promised a length); a disk write error fails the fill but never the leader's own
//! client; a leader whose client goes away keeps filling the object for the followers.

use super::{fill_head, hit, mark, CacheStatus, Ctx};
use crate::handlers::proxy::{self, client_head, fetch_with, UpstreamError, UpstreamResponse};
use crate::handlers::simple::{bodiless, error_page, respond as respond_page};
use crate::server::conn::{timed_out, Conn};
use crate::server::exchange::{Exchange, ExchangeError};
use crate::server::file_body::send_file_range;
use edge_cache::hit::{evaluate_range, RangeOutcome};
use edge_cache::inflight::{known_len, FillError};
use edge_cache::{policy, Fill, FillHandle, ObjectWriter, WaitHead};
use edge_http::{BodyDecoder, BodyKind, Method};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::io::AsyncReadExt;

/// Upstream read buffer growth.
const UP_BUF: usize = 64 * 1024;
/// Bytes gathered before a write to the client.
const FLUSH_AT: usize = 64 * 1024;

/// Where a fill's body goes besides the client: the object file, and the followers
/// when this request leads a collapsed fill.
pub struct Store {
    pub writer: ObjectWriter,
    pub handle: Option<FillHandle>,
}

impl Store {
    /// Append body bytes and tell followers; on a write error (ENOSPC, EIO) the fill
    /// fails (followers abort) and the caller continues uncached.
    fn write(&mut self, data: &[u8]) -> bool {
        match self.writer.write(data) {
            Ok(()) => {
                if let Some(h) = &self.handle {
                    h.progress(self.writer.written());
                }
                true
            }
            Err(_) => false, // counted and rate-limit logged by the cache
        }
    }

    /// Commit the object and release followers.
    fn finish(self) {
        let len = self.writer.written();
        match self.writer.finish() {
            Ok(()) => {
                if let Some(h) = self.handle {
                    h.done(len);
                }
            }
            Err(e) => {
                tracing::debug!("cache commit failed: {e}");
                if let Some(h) = self.handle {
                    h.fail();
                }
            }
        }
    }
}

/// A miss (or a refetch after expiry, `st = Expired`): fetch the whole object from the
/// origin and answer the client, storing it when `store` and the response allow.
pub async fn fetch_and_fill(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    handle: Option<FillHandle>,
    st: CacheStatus,
    store: bool,
) -> Result<(), ExchangeError> {
    let head = fill_head(ctx, &ex.req, conn.peer.ip(), b"");
    let t0 = SystemTime::now();
    let up = fetch_with(
        ctx.w,
        Some((conn, ex)),
        &ctx.p.upstream,
        &head,
        &Method::Get,
    )
    .await;
    let t1 = SystemTime::now();
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
            proxy::describe(&e),
            ex.req.method.as_str(),
            ex.req.target,
            conn.peer
        );
    }
    if ex.body.is_some() && matches!(e, UpstreamError::ClientBody(_)) {
        ex.keep_alive = false;
        ex.body = None;
    }
    let page = error_page(status);
    let extra = proxy::error_headers(ex, ctx.route);
    respond_page(conn, ex, ctx.shared, status, "text/html", &page, &extra).await
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
    store: bool,
    t0: SystemTime,
    t1: SystemTime,
) -> Result<(), ExchangeError> {
    let writer = if store {
        open_writer(ctx, &ex.req.headers, &up, t0, t1)
    } else {
        None
    };
    let store = publish(writer, handle);
    mark(ctx.w, ex, st);
    pump(ctx, Some((conn, ex)), up, store).await
}

/// Opens the object writer when the response may be stored (RFC 9111 via
/// `policy::storable`); `None` means "serve uncached".
pub fn open_writer(
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
    // Errors are counted and logged (rate limited) by the cache: serve uncached.
    ctx.cache.begin_write(&ctx.key, req, meta).ok()
}

/// Publishes the head to the followers (or tells them to fetch on their own).
pub fn publish(writer: Option<ObjectWriter>, handle: Option<FillHandle>) -> Option<Store> {
    let Some(writer) = writer else {
        if let Some(h) = handle {
            h.uncacheable();
        }
        return None;
    };
    let handle = match handle {
        Some(mut h) => match writer.reader() {
            Ok(file) => {
                h.publish_head(Arc::new(writer.meta().clone()), file, writer.body_offset());
                Some(h)
            }
            Err(e) => {
                tracing::warn!("cache: cannot reopen the object being written: {e}");
                h.uncacheable();
                return None;
            }
        },
        None => None,
    };
    Some(Store { writer, handle })
}

/// Relays the upstream body to the client (when there is one) and into the store (when
/// storing). If the client goes away mid-body and a store is open, the body is still
/// read to its end (each read bounded by the upstream `read_timeout`), so followers and
/// the cache get the whole object.
pub async fn pump(
    ctx: &Ctx<'_>,
    mut client: Option<(&mut Conn, &mut Exchange)>,
    mut up: UpstreamResponse,
    mut store: Option<Store>,
) -> Result<(), ExchangeError> {
    let group = &ctx.p.upstream;
    let send = ctx.shared.timeouts.send;
    let mut out = Vec::with_capacity(FLUSH_AT + 1024);
    let mut chunked = false;
    let mut to_client = false;
    // The part of the body the client gets (all of it unless it asked for one range).
    let mut want = 0..u64::MAX;
    if let Some((_, ex)) = client.as_mut() {
        match leader_range(ex, &up, store.as_ref()) {
            Some(r) => {
                range_head(ctx, ex, &up, &r, &mut out);
                want = r.unwrap_or(0..0);
            }
            None => chunked = client_head(&mut out, ex, &up.head, ctx.route),
        }
        to_client = !ex.is_head();
    }
    let mut dec = BodyDecoder::new(up.head.body, None).upstream();
    let mut pos: u64 = 0; // body bytes decoded so far
    let mut sent: u64 = 0;
    let mut client_error: Option<std::io::Error> = None;
    let result: Result<(), String> = loop {
        let mut bad = None;
        while !up.buf.is_empty() && !dec.is_done() {
            let d = match dec.decode(&up.buf) {
                Ok(d) => d,
                Err(e) => {
                    bad = Some(format!("upstream body: {e}"));
                    break;
                }
            };
            if !d.data.is_empty() {
                if let Some(s) = store.as_mut() {
                    if !s.write(d.data) {
                        store = None; // fails the fill; this client continues uncached
                    }
                }
                let end = pos + d.data.len() as u64;
                let (lo, hi) = (pos.max(want.start), end.min(want.end));
                if to_client && client_error.is_none() && lo < hi {
                    let part = &d.data[(lo - pos) as usize..(hi - pos) as usize];
                    if chunked {
                        edge_http::write_chunk_header(&mut out, part.len());
                        out.extend_from_slice(part);
                        out.extend_from_slice(b"\r\n");
                    } else {
                        out.extend_from_slice(part);
                    }
                    sent += part.len() as u64;
                }
                pos = end;
            }
            let n = d.consumed;
            bytes::Buf::advance(&mut up.buf, n);
            if out.len() >= FLUSH_AT {
                flush(&mut client, &mut out, send, &mut client_error).await;
            }
            if n == 0 {
                break;
            }
        }
        if let Some(b) = bad {
            break Err(b);
        }
        if store.is_none() && (client_error.is_some() || !to_client || pos >= want.end) {
            // Nobody left to feed: the client is gone, asked for HEAD, or has its whole
            // range, and the object is not being stored (the connection is closed).
            break Ok(());
        }
        if dec.is_done() || up.head.body == BodyKind::Empty {
            break Ok(());
        }
        // Send what we have before waiting on the origin, so the client sees bytes as
        // they arrive (followers were already told by `progress`).
        flush(&mut client, &mut out, send, &mut client_error).await;
        if up.buf.capacity() - up.buf.len() < 4096 {
            up.buf.reserve(UP_BUF);
        }
        match tokio::time::timeout(group.read_timeout, up.conn.stream.read_buf(&mut up.buf)).await {
            Ok(Ok(0)) => {
                if dec.on_eof().is_err() {
                    break Err("upstream closed before the body ended".into());
                }
                break Ok(());
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => break Err(format!("upstream read failed: {e}")),
            Err(_) => {
                ctx.w.stats().upstream_timeouts.fetch_add(1, Relaxed);
                break Err(timed_out("upstream body read").to_string());
            }
        }
    };
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
        s.finish();
    }
    if chunked && client_error.is_none() {
        out.extend_from_slice(edge_http::LAST_CHUNK);
    }
    flush(&mut client, &mut out, send, &mut client_error).await;
    let done = dec.is_done();
    up.release(ctx.w, group, done);
    match client_error {
        Some(e) => Err(ExchangeError::Client(e)),
        None => Ok(()),
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
    match evaluate_range(store.writer.meta(), &ex.req.headers, len) {
        RangeOutcome::Partial(r) if r.len() == 1 => Some(Some(r[0].clone())),
        RangeOutcome::Unsatisfiable => Some(None),
        _ => None,
    }
}

/// The leader's 206 (or 416 for `None`) head: the origin's headers, our framing.
fn range_head(
    ctx: &Ctx<'_>,
    ex: &mut Exchange,
    up: &UpstreamResponse,
    r: &Option<std::ops::Range<u64>>,
    out: &mut Vec<u8>,
) {
    let BodyKind::Length(len) = up.head.body else {
        return;
    };
    ex.begin_head(out, if r.is_some() { 206 } else { 416 });
    proxy::write_forwarded_headers(out, &up.head.headers);
    let (cr, n) = match r {
        Some(r) => (
            format!("bytes {}-{}/{len}", r.start, r.end - 1),
            r.end - r.start,
        ),
        None => (format!("bytes */{len}"), 0),
    };
    edge_http::write_header(out, "Content-Range", cr.as_bytes());
    edge_http::write_header(out, "Content-Length", n.to_string().as_bytes());
    out.extend_from_slice(&ctx.route.add_headers);
    if let Some(cs) = ex.cache_status {
        edge_http::write_header(out, "X-Cache-Status", cs.as_bytes());
    }
    ex.end_head(out);
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

/// How following a fill ended.
pub enum Followed {
    /// The response was sent (or failed).
    Done(Result<(), ExchangeError>),
    /// The leader failed before the head: join again.
    Retry,
    /// Fetch on our own: uncached after "not storable" or `cache_lock_timeout`
    /// (`store` false), or storing our own variant when the leader's response varies
    /// and this request wants another one (`store` true).
    Alone { store: bool },
}

/// A collapsed follower: wait for the leader's head, then stream the object as it is
/// written. `X-Cache-Status: HIT` (nginx reports its cache-lock waiters the same way).
pub async fn follow(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    fill: &Arc<Fill>,
) -> Followed {
    let head = match fill.wait_head().await {
        WaitHead::Head(h) => h,
        WaitHead::Retry => return Followed::Retry,
        WaitHead::Uncacheable | WaitHead::TimedOut => return Followed::Alone { store: false },
    };
    // The leader's response varies on request headers this request may not share.
    if !head.meta.vary.is_empty()
        && edge_cache::variant_key(&ctx.key, &head.meta.vary, &ex.req.headers) != head.meta.key
    {
        return Followed::Alone { store: true };
    }
    Followed::Done(stream_fill(ctx, conn, ex, fill, head).await)
}

async fn stream_fill(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    fill: &Arc<Fill>,
    head: Arc<edge_cache::FillHead>,
) -> Result<(), ExchangeError> {
    mark(ctx.w, ex, CacheStatus::Hit);
    let shared = ctx.shared;
    let send = shared.timeouts.send;
    if ex.body.is_some()
        && ex
            .discard_body(conn, shared.timeouts.client_body, send)
            .await
            .is_err()
    {
        ex.keep_alive = false;
        ex.body = None;
    }
    let meta = &head.meta;
    let age = policy::age(meta, SystemTime::now()).as_secs();
    let mut out = Vec::with_capacity(512 + meta.header_block.len());
    if edge_cache::hit::not_modified(meta, &ex.req.headers) {
        hit::write_not_modified(ctx, ex, meta, age, &mut out);
        conn.write_all(&out, send).await?;
        return Ok(());
    }
    let no_body = bodiless(meta.status);
    // One range of a body whose length is known is streamed as a 206 while it arrives
    // (players send `Range` on every request, so a popular new video gets many ranged
    // followers). Several ranges, or an unknown length, get the whole body: a valid
    // answer to a Range request (RFC 9110 14.2).
    let mut want: Option<std::ops::Range<u64>> = None;
    if let (Some(len), 200) = (known_len(meta), meta.status) {
        match evaluate_range(meta, &ex.req.headers, len) {
            RangeOutcome::Partial(r) if r.len() == 1 => want = Some(r[0].clone()),
            RangeOutcome::Unsatisfiable => {
                hit::write_unsatisfiable(ctx, ex, meta, len, age, &mut out);
                conn.write_all(&out, send).await?;
                return Ok(());
            }
            _ => {}
        }
    }
    let mut chunked = false;
    if let (Some(r), Some(len)) = (&want, known_len(meta)) {
        ex.begin_head(&mut out, 206);
        out.extend_from_slice(&meta.header_block);
        let cr = format!("bytes {}-{}/{len}", r.start, r.end - 1);
        edge_http::write_header(&mut out, "Content-Range", cr.as_bytes());
        let n = r.end - r.start;
        edge_http::write_header(&mut out, "Content-Length", n.to_string().as_bytes());
    } else {
        ex.begin_head(&mut out, meta.status);
        out.extend_from_slice(&meta.header_block);
        match known_len(meta) {
            _ if no_body => {}
            Some(n) => {
                edge_http::write_header(&mut out, "Content-Length", n.to_string().as_bytes())
            }
            None if ex.chunked_ok() && !ex.is_head() => {
                edge_http::write_header(&mut out, "Transfer-Encoding", b"chunked");
                chunked = true;
            }
            None => ex.keep_alive = false, // HTTP/1.0: the body ends when we close
        }
    }
    hit::finish_head(ctx, ex, age, &mut out);
    conn.write_all(&out, send).await?;
    if ex.is_head() || no_body {
        return Ok(());
    }
    let mut reader = fill.reader(head.clone());
    let mut sent = 0u64;
    let want = want.unwrap_or(0..u64::MAX);
    let result = loop {
        if reader.position() >= want.end {
            break Ok(()); // the requested range is complete
        }
        let avail = match reader.wait_available().await {
            Ok(Some(r)) => r,
            Ok(None) => break Ok(()),
            Err(FillError::LeaderFailed) => {
                break Err(ExchangeError::Aborted(
                    "cache fill leader failed mid-body".into(),
                ))
            }
            Err(e) => break Err(ExchangeError::Aborted(e.to_string())),
        };
        // The part of what arrived that the client asked for.
        let (lo, hi) = (avail.start.max(want.start), avail.end.min(want.end));
        if lo >= hi {
            reader.advance(avail.end - avail.start);
            continue;
        }
        let n = hi - lo;
        if chunked {
            let mut ch = Vec::with_capacity(16);
            edge_http::write_chunk_header(&mut ch, n as usize);
            conn.write_all(&ch, send).await?;
        }
        let off = head.body_offset + lo;
        match send_file_range(conn, &head.file, off, n, shared.sendfile, send).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break Err(ExchangeError::Aborted(format!("reading cache fill: {e}")))
            }
            Err(e) => break Err(ExchangeError::Client(e)),
        }
        if chunked {
            conn.write_all(b"\r\n", send).await?;
        }
        reader.advance(avail.end - avail.start);
        sent += n;
    };
    ex.body_bytes_sent = sent;
    ctx.w.stats().cache_bytes_hit.fetch_add(sent, Relaxed);
    result?;
    if chunked {
        conn.write_all(edge_http::LAST_CHUNK, send).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use edge_cache::{Cache, CacheConfig, FillState, Join, ObjectMeta};

    fn cache(dir: &std::path::Path) -> Arc<Cache> {
        Cache::open(CacheConfig {
            path: dir.to_path_buf(),
            ..CacheConfig::default()
        })
        .unwrap()
    }

    fn leader(c: &Cache, key: &str) -> (FillHandle, Arc<Fill>) {
        let h = edge_cache::key_hash(key);
        let Join::Leader(handle) = c.inflight().join(h) else {
            panic!("first join leads")
        };
        let Join::Follower(f) = c.inflight().join(h) else {
            panic!("second join follows")
        };
        (handle, f)
    }

    fn meta(key: &str, len: u64) -> ObjectMeta {
        let mut m = ObjectMeta::new(key, 200, SystemTime::now());
        m.freshness.lifetime = std::time::Duration::from_secs(60);
        m.body_len = len;
        m
    }

    #[test]
    fn a_stored_fill_streams_to_followers_and_commits() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        let key = "http://h/a";
        let (handle, f) = leader(&c, key);
        let writer = c
            .begin_write(key, &edge_http::HeaderMap::new(), meta(key, 5))
            .unwrap();
        let mut store = publish(Some(writer), Some(handle)).expect("storing");
        assert!(matches!(f.state(), FillState::Streaming { written: 0, .. }));
        assert!(store.write(b"hel"));
        assert!(matches!(f.state(), FillState::Streaming { written: 3, .. }));
        assert!(store.write(b"lo"));
        store.finish();
        assert!(matches!(f.state(), FillState::Done { len: 5, .. }));
        let now = SystemTime::now();
        assert!(matches!(
            c.lookup(key, &edge_http::HeaderMap::new(), now),
            edge_cache::Lookup::Fresh(_)
        ));
        c.shutdown();
    }

    #[test]
    fn no_writer_tells_followers_to_fetch_alone() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        let (handle, f) = leader(&c, "http://h/b");
        assert!(publish(None, Some(handle)).is_none());
        assert!(matches!(f.state(), FillState::Uncacheable));
        c.shutdown();
    }

    #[test]
    fn a_short_body_fails_the_fill_instead_of_committing() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        let key = "http://h/c";
        let (handle, f) = leader(&c, key);
        let writer = c
            .begin_write(key, &edge_http::HeaderMap::new(), meta(key, 10))
            .unwrap();
        let mut store = publish(Some(writer), Some(handle)).unwrap();
        assert!(store.write(b"only 7!"));
        store.finish(); // Content-Length said 10: the commit refuses
        assert!(matches!(f.state(), FillState::Failed { head: Some(_) }));
        let now = SystemTime::now();
        assert!(matches!(
            c.lookup(key, &edge_http::HeaderMap::new(), now),
            edge_cache::Lookup::Miss
        ));
        c.shutdown();
    }
}
