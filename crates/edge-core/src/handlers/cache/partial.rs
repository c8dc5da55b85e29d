//! Partial content without `slice` (issue 28.2): a 206 from the origin is stored as a
//! partial object, ranges inside it are served from it, and a request that needs
//! bytes outside it fetches only those and stores the union.
//!
//! How it fits: the stored form is `edge_cache::part` (status 206 plus its
//! `Content-Range` line), found by the normal lookup of the key.
//! [`super::handle`] sends a fresh object whose status is 206 here ([`serve`]; a 200
//! object's hit pays that one status comparison), and a miss with one client `Range`
//! under `range_fetch = "forward"` ([`forward_miss`]). Both go
//! to the origin alone (no collapse lock): each request fetches exactly the bytes it
//! needs, so a request never waits on another's range that may not cover its own. A
//! stale partial object is not revalidated: [`super::revalidate`] makes it a miss
//! ([`miss`]). What is served from a part:
//! - a single `Range` inside it (206, `If-Range` checked against its validators), a
//!   `HEAD` (200 head with the complete length), a 304 for matching validators, a 416
//!   for a range past the complete length: `X-Cache-Status: HIT`;
//! - anything else is completed ([`complete`]): `Range: bytes=a-b` for the missing
//!   bytes next to the part, with `If-Range` (its strong ETag, or Last-Modified). A 206
//!   for exactly those bytes with the same strong validator and complete length is
//!   combined: the stored part and the new bytes are written in order to a new object
//!   (a temp file renamed at the commit, `edge_cache::storage`), a 200 object when it
//!   is now whole; the client gets its bytes from the same pass. A 200 replaces the
//!   part (the normal fill, [`super::fill::respond`]); any other answer (changed
//!   object, no validator, wrong range) is dropped and the client's request is
//!   fetched as a miss, whose response replaces the part.
//!
//! [`combine`] also completes a partial slice of a `slice`d location
//! (`super::slice`), in a task of its own with no client attached.

use super::ctx::{mark, CacheStatus, Ctx, MayStore};
use super::fill;
use super::head;
use super::store::{publish, Store};
use crate::config::RangeFetch;
use crate::http::conn::Conn;
use crate::http::exchange::{BodyLen, Exchange, ExchangeError};
use crate::upstream::UpstreamResponse;
use edge_cache::hit::{not_modified, validators};
use edge_cache::part::{self, Need, Part};
use edge_cache::{policy, HitBody, HitEntry, ObjectWriter};
use edge_http::{HeaderMap, Method, RangeOutcome};
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::time::SystemTime;

/// The most bytes neither held nor wanted that a completion fetches so that the
/// stored range stays one range; a request further from the part replaces it.
pub const MAX_GAP: u64 = 1 << 20;
/// Stored bytes read per step while combining.
const READ_STEP: u64 = 256 * 1024;
/// Bytes gathered before a write to the client.
const FLUSH_AT: usize = 64 * 1024;

/// Whether a miss forwards the client's `Range` ([`forward_extra`]).
pub fn forwards(ctx: &Ctx<'_>, ex: &Exchange) -> bool {
    ctx.p.rules.range_fetch == RangeFetch::Forward && forward_extra(ctx, ex).is_some()
}

/// A miss that [`forwards`]: the client's range fetched for it alone.
pub async fn forward_miss(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    may: MayStore,
) -> Result<(), ExchangeError> {
    miss(ctx, conn, ex, may).await
}

/// The header lines that forward the client's `Range` (and its `If-Range`) on a miss
/// under `range_fetch = "forward"`: only a GET with one valid single-range `Range`.
pub fn forward_extra(ctx: &Ctx<'_>, ex: &Exchange) -> Option<Vec<u8>> {
    if ctx.p.rules.range_fetch != RangeFetch::Forward || ex.req.method != Method::Get {
        return None;
    }
    let h = &ex.req.headers;
    let mut ranges = h.get_all("range");
    let (range, None) = (ranges.next()?, ranges.next()) else {
        return None;
    };
    match edge_http::parse_range(range, u64::MAX) {
        RangeOutcome::Partial(set) if set.iter().count() == 1 => {}
        _ => return None,
    }
    let mut extra = Vec::with_capacity(64);
    edge_http::write_header(&mut extra, "Range", range);
    let mut conds = h.get_all("if-range");
    match (conds.next(), conds.next()) {
        (Some(c), None) => edge_http::write_header(&mut extra, "If-Range", c),
        (None, None) => {}
        _ => return None,
    }
    Some(extra)
}

/// A miss that fetches for this request alone: its range forwarded when
/// [`forward_extra`] allows, else the whole object (the normal fill).
pub async fn miss(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    may: MayStore,
) -> Result<(), ExchangeError> {
    match forward_extra(ctx, ex) {
        Some(extra) => Box::pin(fetch_forwarded(ctx, conn, ex, &extra, may)).await,
        None => {
            Box::pin(fill::fetch_and_fill(
                ctx,
                conn,
                ex,
                None,
                CacheStatus::Miss,
                may,
            ))
            .await
        }
    }
}

/// A miss whose client `Range` goes to the origin (`extra` from [`forward_extra`]):
/// a 206 is relayed and stored as a partial object; anything else is the normal fill
/// (a 200 is stored whole and the client gets its range from it).
pub async fn fetch_forwarded(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    extra: &[u8],
    may: MayStore,
) -> Result<(), ExchangeError> {
    let (up, t0, t1) = fill::fetch_origin(ctx, conn, ex, extra).await;
    let up = match up {
        Ok(up) => up,
        Err(e) => {
            mark(ctx.w, ex, CacheStatus::Miss);
            return fill::upstream_failed(ctx, conn, ex, e).await;
        }
    };
    if up.head.status != 206 {
        let st = CacheStatus::Miss;
        return fill::respond(ctx, conn, ex, up, None, st, may, t0, t1).await;
    }
    let writer = match may {
        MayStore::Yes => open_writer(ctx, &ex.req.headers, &up.head.headers, None, t0, t1).await,
        MayStore::No => None,
    };
    let store = publish(writer, None);
    mark(ctx.w, ex, CacheStatus::Miss);
    ex.cache.fwd_status = Some(206);
    ex.cache.stored = store.is_some();
    fill::pump(ctx, Some((conn, ex)), up, store, None).await
}

/// Opens the writer of a partial object from an origin 206 (`policy::storable_part`):
/// holding what the response carries, or `union` when combining. A union that is the
/// whole representation is stored as a 200 object. `None`: serve uncached.
async fn open_writer(
    ctx: &Ctx<'_>,
    req: &HeaderMap,
    resp: &HeaderMap,
    union: Option<Part>,
    t0: SystemTime,
    t1: SystemTime,
) -> Option<ObjectWriter> {
    let (fresh, got) = match policy::storable_part(&Method::Get, req, resp, &ctx.p.policy, t0, t1) {
        Ok(f) => f,
        Err(why) => {
            tracing::debug!("not caching part of {}: {}", ctx.key, why.as_str());
            return None;
        }
    };
    let p = union.unwrap_or(got);
    let status = if p.is_whole() { 200 } else { 206 };
    let mut meta = policy::build_meta(&ctx.key, status, resp, fresh, t0, t1, Some(p.len()));
    meta.header_block = part::block_for(&meta.header_block, &p);
    // A whole object is served compressed or not by Accept-Encoding, as one fetched
    // whole is (`fill::open_writer`).
    let varies = p.is_whole()
        && (ctx.p.compress.as_ref()).is_some_and(|pol| {
            let facts = crate::compress::facts_of_block(200, &meta.header_block, Some(p.len()));
            crate::compress::varies(pol, &facts)
        });
    fill::begin_store(ctx, req, meta, varies).await
}

/// A fresh stored partial object (status 206) for this request. What it fetches may
/// be stored unless `no_cache` says otherwise (the key was stored before, so
/// `cache_min_uses` is met).
pub async fn serve(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    entry: HitEntry,
) -> Result<(), ExchangeError> {
    let may = if ctx.p.rules.no_cache.any(&ex.req) {
        MayStore::No
    } else {
        MayStore::Yes
    };
    let Some(p) = Part::of(&entry.meta) else {
        // Never served: a part that does not say which bytes it holds.
        ctx.cache
            .drop_corrupt(&entry, "a stored 206 without a valid Content-Range");
        return miss(ctx, conn, ex, may).await;
    };
    let meta = entry.meta.clone();
    let reply = if not_modified(&meta, &ex.req.method, &ex.req.headers) {
        Reply::NotModified
    } else {
        let v = validators(&meta);
        match edge_http::evaluate_range(&ex.req.method, &ex.req.headers, &v, p.total) {
            RangeOutcome::Partial(set) => match set.iter().next() {
                Some(r) if set.iter().count() == 1 && p.covers(&r.as_range()) => {
                    Reply::Range(r.as_range())
                }
                Some(r) if set.iter().count() == 1 => {
                    let want = r.as_range();
                    return Box::pin(complete(ctx, conn, ex, entry, p, want, true, may)).await;
                }
                // Several ranges: fetched as a miss (the whole object, or the client's
                // ranges relayed uncached), which replaces the part.
                _ => return miss(ctx, conn, ex, may).await,
            },
            RangeOutcome::Unsatisfiable => Reply::Unsatisfiable,
            RangeOutcome::Full(_) if ex.is_head() => Reply::Head,
            RangeOutcome::Full(_) => {
                let want = 0..p.total;
                return Box::pin(complete(ctx, conn, ex, entry, p, want, false, may)).await;
            }
        }
    };
    reply_from_part(ctx, conn, ex, &entry, &p, reply).await
}

/// What a partial object answers by itself.
enum Reply {
    NotModified,
    Unsatisfiable,
    /// A HEAD for the whole representation.
    Head,
    /// These bytes of the representation, all held.
    Range(Range<u64>),
}

/// The lines of a stored part's block that describe the part, not the representation.
const PART_LINES: &[&str] = &["content-range"];

async fn reply_from_part(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    entry: &HitEntry,
    p: &Part,
    reply: Reply,
) -> Result<(), ExchangeError> {
    mark(ctx.w, ex, CacheStatus::Hit);
    let send = ctx.shared.timeouts.send;
    if ex.body.is_some()
        && ex
            .discard_body(conn, ctx.shared.timeouts.client_body, send)
            .await
            .is_err()
    {
        ex.keep_alive = false;
        ex.body = None;
    }
    let meta = &entry.meta;
    let now = SystemTime::now();
    let age = policy::age(meta, now).as_secs();
    ex.cache.ttl = Some(policy::ttl_secs(meta, now));
    let mut out = Vec::with_capacity(320 + meta.header_block.len());
    let range = match reply {
        Reply::Unsatisfiable => {
            head::write_unsatisfiable(ex, meta, p.total, age, &mut out);
            None
        }
        Reply::NotModified | Reply::Head => {
            let status = if matches!(reply, Reply::Head) {
                200
            } else {
                304
            };
            ex.begin_stored_head(&mut out, status);
            head::copy_block_without(&meta.header_block, PART_LINES, &mut out);
            let body = if status == 200 {
                edge_http::write_header_u64(&mut out, "Content-Length", p.total);
                BodyLen::Known(p.total)
            } else {
                BodyLen::None
            };
            head::finish_head(ex, age, &mut out, body);
            None
        }
        Reply::Range(r) => {
            ex.begin_stored_head(&mut out, 206);
            head::copy_block_without(&meta.header_block, PART_LINES, &mut out);
            edge_http::write_header(&mut out, "Content-Range", p.content_range(&r).as_bytes());
            edge_http::write_header_u64(&mut out, "Content-Length", r.end - r.start);
            head::finish_head(ex, age, &mut out, BodyLen::Known(r.end - r.start));
            (!ex.is_head()).then_some(r)
        }
    };
    let Some(r) = range else {
        conn.write_all(&out, send).await?;
        return Ok(());
    };
    // Body offsets: the part's first byte is the body's first.
    let sent = Box::pin(send_part(
        ctx,
        conn,
        entry,
        &out,
        r.start - p.start,
        r.end - r.start,
    ))
    .await?;
    ex.body_bytes_sent = sent;
    ctx.w.stats().cache_bytes_hit.add(sent);
    Ok(())
}

/// The head `head`, then `n` body bytes of a part from body offset `off`: from RAM in
/// one write, from the file by the location's send mode (sendfile or reads through
/// the file I/O backend). Not `hit::send_body`: a second caller would cost every 200
/// hit its inlining (measured: +60 instructions per 1 KiB hit).
async fn send_part(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    entry: &HitEntry,
    head: &[u8],
    off: u64,
    n: u64,
) -> Result<u64, ExchangeError> {
    let send = ctx.shared.timeouts.send;
    let file = match &entry.body {
        HitBody::Mem(b) => {
            conn.write_two(head, &b[off as usize..(off + n) as usize], send)
                .await?;
            return Ok(n);
        }
        HitBody::File(f) => f,
    };
    conn.write_all(head, send).await?;
    let mode = ctx.shared.send.mode_for(entry.body_len);
    let at = entry.body_offset + off;
    let io = &ctx.w.file_io;
    match crate::http::send::send_file_range(conn, io, file, at, n, mode, send).await {
        Ok(k) => Ok(k),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            // Shorter than its header says: cut, and dropped for the next request.
            ctx.cache
                .drop_corrupt(entry, &format!("reading the body: {e}"));
            Err(ExchangeError::Aborted(format!("reading cached part: {e}")))
        }
        Err(e) => Err(ExchangeError::Client(e)),
    }
}

/// The client wants `want` (all of it: `ranged` false) and the part lacks some of it:
/// fetch the missing bytes and combine, or fall back to a miss.
#[allow(clippy::too_many_arguments)]
async fn complete(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    entry: HitEntry,
    p: Part,
    want: Range<u64>,
    ranged: bool,
    may: MayStore,
) -> Result<(), ExchangeError> {
    let Need::Combine { fetch, union } = part::need(&p, &want, MAX_GAP) else {
        return miss(ctx, conn, ex, may).await;
    };
    if may == MayStore::No {
        return miss(ctx, conn, ex, may).await;
    }
    let mut extra = Vec::with_capacity(96);
    let value = part::range_request(&fetch, p.total);
    edge_http::write_header(&mut extra, "Range", value.as_bytes());
    if let Some(v) = part::if_range(&entry.meta) {
        edge_http::write_header(&mut extra, "If-Range", v.as_bytes());
    }
    let (up, t0, t1) = fill::fetch_origin(ctx, conn, ex, &extra).await;
    let up = match up {
        Ok(up) => up,
        Err(e) => {
            mark(ctx.w, ex, CacheStatus::Miss);
            return fill::upstream_failed(ctx, conn, ex, e).await;
        }
    };
    if up.head.status == 200 {
        // The object changed (If-Range failed) or the origin ignores Range: it
        // replaces the part.
        let st = CacheStatus::Miss;
        return fill::respond(ctx, conn, ex, up, None, st, may, t0, t1).await;
    }
    let exact = Part {
        start: fetch.start,
        end: fetch.end,
        total: p.total,
    };
    let h = &up.head.headers;
    if Part::of_response(up.head.status, h) != Some(exact)
        || !part::same_representation(&entry.meta, h)
    {
        // Not the same representation (or not the bytes asked for): never combined.
        tracing::debug!(
            "not combining {}: origin answered {} {:?}",
            ctx.key,
            up.head.status,
            h.get_str("content-range")
        );
        ctx.w.stats().partial_not_combined.fetch_add(1, Relaxed);
        drop(up);
        return miss(ctx, conn, ex, may).await;
    }
    let u = Part {
        start: union.start,
        end: union.end,
        total: p.total,
    };
    let writer = open_writer(ctx, &ex.req.headers, h, Some(u), t0, t1).await;
    // The client's head: the new response's fields (RFC 9111 3.4), for its bytes.
    let date = h
        .get_str("date")
        .and_then(|v| edge_http::parse_http_date(v.trim()));
    let mut block = policy::date_line(date, t1);
    block.extend_from_slice(&policy::header_block(h));
    let whole = Part {
        start: 0,
        end: p.total,
        total: p.total,
    };
    let block = part::block_for(&block, &whole);
    let store = publish(writer, None);
    mark(ctx.w, ex, CacheStatus::Miss);
    ex.cache.fwd_status = Some(206);
    ex.cache.stored = store.is_some();
    let mut out = Vec::with_capacity(FLUSH_AT + 1024);
    let len = if ranged {
        want.end - want.start
    } else {
        p.total
    };
    if ranged {
        ex.begin_stored_head(&mut out, 206);
        out.extend_from_slice(&block);
        edge_http::write_header(
            &mut out,
            "Content-Range",
            whole.content_range(&want).as_bytes(),
        );
        edge_http::write_header_u64(&mut out, "Content-Length", want.end - want.start);
    } else {
        ex.begin_stored_head(&mut out, 200);
        out.extend_from_slice(&block);
        edge_http::write_header_u64(&mut out, "Content-Length", p.total);
    }
    head::finish_head(ex, 0, &mut out, BodyLen::Known(len));
    let to_client = !ex.is_head();
    let mut sink = Sink::new(store, out, if to_client { want } else { 0..0 });
    let res = combine(ctx, Some(conn), &entry, &p, &fetch, up, &mut sink).await;
    let Sink {
        store,
        mut out,
        sent,
        mut client_error,
        ..
    } = sink;
    ex.body_bytes_sent = sent;
    ctx.w.stats().cache_bytes_origin.fetch_add(sent, Relaxed);
    if let Err(why) = res {
        drop(store); // the temp file is removed: nothing half-written is servable
        return match client_error {
            Some(e) => Err(ExchangeError::Client(e)),
            None => Err(ExchangeError::Aborted(why)),
        };
    }
    if let Some(s) = store {
        if s.finish(&ctx.w.file_io).await {
            ctx.w.stats().partial_combined.fetch_add(1, Relaxed);
        }
    }
    flush(
        Some(conn),
        &mut out,
        ctx.shared.timeouts.send,
        &mut client_error,
    )
    .await;
    match client_error {
        Some(e) => Err(ExchangeError::Client(e)),
        None => Ok(()),
    }
}

/// Where combined bytes go: the new object (in representation order), and the
/// client's part of them (none for a slice completed in its own task, whose clients
/// stream the new object's file, `super::slice`).
pub(super) struct Sink {
    pub(super) store: Option<Store>,
    out: Vec<u8>,
    /// The representation bytes the client gets.
    want: Range<u64>,
    sent: u64,
    client_error: Option<std::io::Error>,
}

impl Sink {
    /// A sink that stores into `store` and sends the client `want`, after `out`.
    pub(super) fn new(store: Option<Store>, out: Vec<u8>, want: Range<u64>) -> Sink {
        Sink {
            store,
            out,
            want,
            sent: 0,
            client_error: None,
        }
    }

    /// `data` is the representation's bytes from `at`.
    async fn put(&mut self, ctx: &Ctx<'_>, conn: Option<&mut Conn>, at: u64, data: &[u8]) {
        if let Some(s) = self.store.as_mut() {
            if !s.write(&ctx.w.file_io, data).await {
                self.store = None; // counted and logged; the client still gets its bytes
            }
        }
        let end = at + data.len() as u64;
        let (lo, hi) = (at.max(self.want.start), end.min(self.want.end));
        if lo < hi && self.client_error.is_none() {
            self.out
                .extend_from_slice(&data[(lo - at) as usize..(hi - at) as usize]);
            self.sent += hi - lo;
        }
        if self.out.len() >= FLUSH_AT {
            let send = ctx.shared.timeouts.send;
            flush(conn, &mut self.out, send, &mut self.client_error).await;
        }
    }

    /// Whether bytes of `r` are still wanted by anyone.
    fn wants(&self, r: &Range<u64>) -> bool {
        self.store.is_some()
            || (self.client_error.is_none() && r.start < self.want.end && self.want.start < r.end)
    }
}

/// Writes the union of the stored part and the fetched bytes, in order.
pub(super) async fn combine(
    ctx: &Ctx<'_>,
    mut conn: Option<&mut Conn>,
    entry: &HitEntry,
    p: &Part,
    fetch: &Range<u64>,
    mut up: UpstreamResponse,
    sink: &mut Sink,
) -> Result<(), String> {
    if fetch.start < p.start {
        let res = copy_origin(ctx, conn.as_deref_mut(), &mut up, fetch, sink).await;
        up.release(&ctx.w.pool, &ctx.p.upstream);
        res?;
        copy_stored(ctx, conn, entry, p, sink).await
    } else {
        copy_stored(ctx, conn.as_deref_mut(), entry, p, sink).await?;
        let res = copy_origin(ctx, conn, &mut up, fetch, sink).await;
        up.release(&ctx.w.pool, &ctx.p.upstream);
        res
    }
}

/// The stored part's bytes into the sink.
async fn copy_stored(
    ctx: &Ctx<'_>,
    mut conn: Option<&mut Conn>,
    entry: &HitEntry,
    p: &Part,
    sink: &mut Sink,
) -> Result<(), String> {
    if !sink.wants(&p.range()) {
        return Ok(());
    }
    let mut off = 0;
    let mut buf = Vec::new();
    while off < p.len() {
        let n = (p.len() - off).min(READ_STEP);
        let data: &[u8] = match &entry.body {
            HitBody::Mem(b) => &b[off as usize..(off + n) as usize],
            HitBody::File(f) => {
                buf.clear();
                let at = entry.body_offset + off;
                let (res, b) = ctx
                    .w
                    .file_io
                    .read_exact_append(f, at, n as usize, std::mem::take(&mut buf))
                    .await;
                buf = b;
                if let Err(e) = res {
                    ctx.cache
                        .drop_corrupt(entry, &format!("reading the body: {e}"));
                    return Err(format!("reading the stored part: {e}"));
                }
                &buf
            }
        };
        sink.put(ctx, conn.as_deref_mut(), p.start + off, data)
            .await;
        off += n;
    }
    Ok(())
}

/// The origin's body (the bytes `fetch`) into the sink; exactly that many bytes.
async fn copy_origin(
    ctx: &Ctx<'_>,
    mut conn: Option<&mut Conn>,
    up: &mut UpstreamResponse,
    fetch: &Range<u64>,
    sink: &mut Sink,
) -> Result<(), String> {
    let mut at = fetch.start;
    loop {
        while let Some(p) = up.next_piece()? {
            if p.len > 0 {
                let end = at + p.len as u64;
                if end > fetch.end {
                    return Err("the origin sent more than its Content-Range".into());
                }
                sink.put(ctx, conn.as_deref_mut(), at, &up.buf[p.data()])
                    .await;
                at = end;
            }
            bytes::Buf::advance(&mut up.buf, p.consumed);
        }
        if up.body_done() {
            break;
        }
        let send = ctx.shared.timeouts.send;
        flush(
            conn.as_deref_mut(),
            &mut sink.out,
            send,
            &mut sink.client_error,
        )
        .await;
        if !up
            .read_body(&ctx.p.upstream, 64 * 1024, ctx.w.stats())
            .await?
        {
            break;
        }
    }
    if at != fetch.end {
        return Err("the origin sent less than its Content-Range".into());
    }
    Ok(())
}

/// Writes `out` to the client (if any) unless it already failed; remembers the first
/// error.
async fn flush(
    conn: Option<&mut Conn>,
    out: &mut Vec<u8>,
    send: std::time::Duration,
    client_error: &mut Option<std::io::Error>,
) {
    let Some(conn) = conn else {
        out.clear();
        return;
    };
    if !out.is_empty() && client_error.is_none() {
        if let Err(e) = conn.write_all(out, send).await {
            *client_error = Some(e);
        }
    }
    out.clear();
}
