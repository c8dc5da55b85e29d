//! Serving a stored object: 304 for matching validators, `Range` (one range → 206 with
//! `Content-Range`, several → multipart/byteranges, unsatisfiable → 416), HEAD, and the
//! full body.
//!
//! How it fits: [`super::handle`] calls [`serve`] on a fresh lookup (HIT), and the
//! revalidation code calls it to send a stale or refreshed object (STALE, UPDATING,
//! REVALIDATED). Its heads come from [`super::head`] (shared with misses): the stored
//! header block verbatim (no header parsing on hits), with the origin's `Date` as
//! stored; we add `Server`, `Age`, `Content-Length`, `X-Cache-Status` and
//! `Cache-Status`. Bodies up to
//! [`INLINE_BODY`] are `pread` into the same buffer as the head and go out in one write;
//! larger ones follow the head by `sendfile` (or `pread` in chunks when sendfile is off),
//! so the body is never copied more than once; and those over `aio.sendfile_max` leave
//! with the head in one `writev` from a mapping of the file (`http::mapped`: TCP paces a
//! large sendfile'd body with timers, not one written at once).

use super::ctx::{mark, CacheStatus, Ctx};
use super::head::{
    finish_head, write_full_head, write_multipart_head, write_not_modified, write_partial_head,
    write_unsatisfiable,
};
use crate::http::conn::Conn;
use crate::http::exchange::{BodyLen, Exchange, ExchangeError};
use crate::http::large_send::Method;
use crate::http::mapped::{is_file_fault, write_mapped};
use crate::http::respond::bodiless;
use crate::http::send::send_file_range;
use edge_cache::hit::{content_type, not_modified, validators};
use edge_cache::{policy, HitBody, HitEntry, ObjectMeta};
use edge_http::{Boundary, MultipartLayout, RangeIgnored, RangeOutcome};
use std::io;
use std::time::SystemTime;

/// Bodies (or ranges) up to this size are read into the head's buffer and sent with it
/// in one write; larger ones go by sendfile after the head.
pub const INLINE_BODY: u64 = 32 * 1024;

/// Sends `entry` to the client with `X-Cache-Status: st`. Not an `async fn`: it
/// returns [`send`]'s future itself, which its caller then holds without a wrapper
/// (each layer of future is copied into its caller's state on every hit).
pub fn serve<'a>(
    ctx: &'a Ctx<'a>,
    conn: &'a mut Conn,
    ex: &'a mut Exchange,
    entry: HitEntry,
    st: CacheStatus,
) -> impl std::future::Future<Output = Result<(), ExchangeError>> + 'a {
    mark(ctx.w, ex, st);
    send(ctx, conn, ex, entry, st)
}

/// [`serve`] once the status is marked (`st` says whether the RAM tier may take it).
pub async fn send(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    mut entry: HitEntry,
    st: CacheStatus,
) -> Result<(), ExchangeError> {
    if entry.mem().is_some() {
        // RFC 9211 `detail`: which tier answered (X-Cache-Status stays HIT).
        ex.cache.detail = Some("memory");
    }
    let shared = ctx.shared;
    // A GET with a body: consume it so the next request parses (or close).
    if ex.body.is_some()
        && ex
            .discard_body(conn, shared.timeouts.client_body, shared.timeouts.send)
            .await
            .is_err()
    {
        ex.keep_alive = false;
        ex.body = None;
    }
    let meta = entry.meta.clone();
    let now = SystemTime::now();
    let age = policy::age(&meta, now).as_secs();
    ex.cache.ttl = Some(policy::ttl_secs_at(&meta, age));
    if not_modified(&meta, &ex.req.method, &ex.req.headers) {
        let mut out = Vec::with_capacity(256 + meta.header_block.len());
        write_not_modified(ex, &meta, age, &mut out);
        conn.write_all(&out, shared.timeouts.send).await?;
        return Ok(());
    }
    if st == CacheStatus::Hit && !ex.is_head() && ctx.cache.memory_wants(&ctx.w.local, &entry) {
        Box::pin(admit_to_memory(ctx, &mut entry)).await?;
    }
    let len = entry.body_len;
    let outcome = if meta.status == 200 {
        edge_http::evaluate_range(&ex.req.method, &ex.req.headers, &validators(&meta), len)
    } else {
        RangeOutcome::Full(RangeIgnored::NotOk)
    };
    // The head is written before any await, and the outcome (with its range list) is
    // not held across one: this future is copied into its caller's on every hit, so
    // it keeps only what the sends need.
    let (out, body) = match outcome {
        RangeOutcome::Full(_) => {
            let mut out = head_buf(ctx, &meta, 0);
            write_full_head(ex, &meta, len, age, &mut out);
            if bodiless(meta.status) || ex.is_head() {
                (out, Then::HeadOnly)
            } else {
                (out, Then::Body(0..len))
            }
        }
        RangeOutcome::Partial(ranges) if ranges.len() == 1 => {
            let r = ranges[0].as_range();
            let mut out = head_buf(ctx, &meta, 64);
            write_partial_head(ex, &mut out, &meta, &r, len);
            finish_head(ex, age, &mut out, BodyLen::Known(r.end - r.start));
            if ex.is_head() {
                (out, Then::HeadOnly)
            } else {
                (out, Then::Body(r))
            }
        }
        RangeOutcome::Partial(ranges) => {
            let sent = Box::pin(send_multipart(ctx, conn, ex, &entry, &meta, &ranges, age)).await?;
            count_sent(ctx, ex, sent);
            return Ok(());
        }
        RangeOutcome::Unsatisfiable => {
            let mut out = head_buf(ctx, &meta, 64);
            write_unsatisfiable(ex, &meta, len, age, &mut out);
            (out, Then::HeadOnly)
        }
    };
    let sent = match body {
        Then::HeadOnly => {
            conn.write_all(&out, shared.timeouts.send).await?;
            ctx.w.give_buf(out);
            0
        }
        Then::Body(r) => match in_memory(&entry, &r) {
            // A RAM body, or a packed small object's bytes read with its header: with
            // the head in one writev, without the larger future of the file paths.
            Some(part) => {
                conn.write_two(&out, part, shared.timeouts.send).await?;
                ctx.w.give_buf(out);
                r.end - r.start
            }
            None => Box::pin(send_body(ctx, conn, &entry, out, r)).await?,
        },
    };
    count_sent(ctx, ex, sent);
    Ok(())
}

/// A hit's body bytes sent: the exchange's (`$body_bytes_sent`) and the cache's byte
/// counter.
fn count_sent(ctx: &Ctx<'_>, ex: &mut Exchange, sent: u64) {
    ex.body_bytes_sent = sent;
    ctx.w.stats().cache_bytes_hit.add(sent);
}

/// What follows a hit's head.
enum Then {
    /// Nothing: HEAD, 304-like statuses, 416.
    HeadOnly,
    /// These bytes of the body.
    Body(std::ops::Range<u64>),
}

/// The bytes of `range` of the body when they are in memory: a RAM-tier body, or the
/// first bytes a lookup read with the header.
fn in_memory<'e>(entry: &'e HitEntry, range: &std::ops::Range<u64>) -> Option<&'e [u8]> {
    let r = range.start as usize..range.end as usize;
    match &entry.body {
        HitBody::Mem(body) => body.get(r),
        HitBody::File(_) => entry.body_head.as_ref().and_then(|b| b.get(r)),
    }
}

/// A multipart/byteranges response (several ranges): its head, then each part's head
/// and bytes, then the closing boundary. Returns the body bytes sent.
async fn send_multipart(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    entry: &HitEntry,
    meta: &ObjectMeta,
    ranges: &[edge_http::ByteRange],
    age: u64,
) -> Result<u64, ExchangeError> {
    let send = ctx.shared.timeouts.send;
    let len = entry.body_len;
    let boundary = Boundary::from_seed(entry.hash as u64);
    let layout = MultipartLayout::new(ranges, len, content_type(meta), boundary.as_str());
    let mut out = head_buf(ctx, meta, 128);
    write_multipart_head(ex, meta, &layout, age, &mut out);
    if ex.is_head() {
        conn.write_all(&out, send).await?;
        ctx.w.give_buf(out);
        return Ok(0);
    }
    let mut sent = 0;
    for part in layout.parts() {
        out.extend_from_slice(part.head);
        sent += part.head.len() as u64;
        let body = part.range.as_range();
        let part = send_body(ctx, conn, entry, std::mem::take(&mut out), body);
        sent += Box::pin(part).await?;
    }
    conn.write_all(layout.tail(), send).await?;
    Ok(sent + layout.tail().len() as u64)
}

/// A head buffer with room for the stored block, our headers and an inline body: the
/// worker's scratch buffer when no other response holds it (no allocation per hit).
fn head_buf(ctx: &Ctx<'_>, meta: &ObjectMeta, extra: usize) -> Vec<u8> {
    let inline = if meta.body_len <= INLINE_BODY {
        meta.body_len as usize
    } else {
        0
    };
    ctx.w
        .take_buf(256 + extra + meta.header_block.len() + inline)
}

/// A fresh hit whose body is on disk and that the worker's RAM tier would take: read the
/// whole body once, offer it, and serve this response from it. A body at least as
/// large as `aio.directio` then has its pages dropped from the page cache, so it is not
/// held twice (RAM tier and page cache); smaller ones stay there (evicted from RAM, they
/// come back without a disk read).
pub(super) async fn admit_to_memory(
    ctx: &Ctx<'_>,
    entry: &mut HitEntry,
) -> Result<(), ExchangeError> {
    let Some(file) = entry.file() else {
        return Ok(());
    };
    let len = entry.body_len as usize;
    let (read, body) = ctx
        .w
        .file_io
        .read_exact_append(file, entry.body_offset, len, Vec::with_capacity(len))
        .await;
    if let Err(e) = read {
        ctx.cache
            .drop_corrupt(entry, &format!("reading the body: {e}"));
        return Err(abort(e));
    }
    // Read whole anyway: with `cache_verify` on, it is checked before it is kept.
    if ctx.cache.verify() != edge_cache::Verify::Off
        && !edge_cache::Cache::body_matches(entry, &body)
    {
        ctx.cache.drop_corrupt(entry, "body checksum mismatch");
        return Err(ExchangeError::Aborted(
            "cached body checksum mismatch".into(),
        ));
    }
    if ctx
        .shared
        .send
        .directio
        .is_some_and(|at| entry.body_len >= at)
    {
        // An object `aio.directio` keeps out of the page cache stays out of it.
        let io = &ctx.w.file_io;
        io.drop_cached_pages(file, entry.body_offset, entry.body_len);
    }
    // Ownership of the buffer moves: no copy.
    let body = bytes::Bytes::from(body);
    ctx.cache.offer_to_memory(&ctx.w.local, entry, body.clone());
    entry.body = HitBody::Mem(body);
    entry.body_offset = 0;
    Ok(())
}

/// Sends `head` followed by the body bytes in `range`: a RAM body leaves with the head
/// in one `writev`; a small range on disk is read into the head's buffer (one write), a
/// large one follows it by sendfile/pread, and one over `aio.sendfile_max` leaves with it
/// from a mapping of the file when its pages are cached ([`send_mapped`]). Returns the
/// body bytes sent.
pub(super) async fn send_body(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    entry: &HitEntry,
    head: Vec<u8>,
    range: std::ops::Range<u64>,
) -> Result<u64, ExchangeError> {
    let n = range.end - range.start;
    send_part(ctx, conn, entry, head, range, n, false).await
}

/// [`send_body`] for one part of a response body of `response_len` bytes (a slice's
/// share of a range that spans slices): whether the part leaves from a mapping is
/// decided by the whole response's length, since what TCP paces is the response, not
/// the part (a 1 MiB range over two slices would otherwise go by two sendfiles of
/// under `aio.sendfile_max` each; docs/results/video.md). `piece`: the part is less
/// than a whole slice and the response has other parts (an unaligned range over two
/// slices), which always leaves mapped (see the body).
pub(super) async fn send_part(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    entry: &HitEntry,
    head: Vec<u8>,
    range: std::ops::Range<u64>,
    response_len: u64,
    piece: bool,
) -> Result<u64, ExchangeError> {
    let send = ctx.shared.timeouts.send;
    let n = range.end - range.start;
    if let Some(part) = in_memory(entry, &range) {
        // A RAM body, or bytes the lookup read with the header (a packed small object):
        // no read, the head and the part in one writev.
        conn.write_two(&head, part, send).await?;
        ctx.w.give_buf(head);
        return Ok(n);
    }
    let HitBody::File(file) = &entry.body else {
        return Err(abort(io::Error::other("range outside the RAM tier's body")));
    };
    let off = entry.body_offset + range.start;
    let io = &ctx.w.file_io;
    if n <= INLINE_BODY {
        let (read, head) = io.read_exact_append(file, off, n as usize, head).await;
        if let Err(e) = read {
            ctx.cache
                .drop_corrupt(entry, &format!("reading the body: {e}"));
            return Err(abort(e));
        }
        conn.write_all(&head, send).await?;
        ctx.w.give_buf(head);
        return Ok(n);
    }
    let policy = &ctx.shared.send;
    if policy.maps(entry.body_len, n.max(response_len)) && conn.io.is_tcp() {
        // Over `sendfile_max`: from a mapping, unless "auto" measured sendfile cheaper
        // on this worker (`http::large_send`). A piece of a slice in a response of
        // several parts (an unaligned range over two slices) always leaves mapped and
        // is not one of the chooser's bytes: one write per piece beat two sendfiles in
        // every repetition measured, on a host where sendfile wins for whole bodies,
        // and the chooser's windows could not tell them apart (docs/results/video.md).
        let large = &ctx.w.large_send;
        if policy.adaptive && !piece {
            large.sent(n);
        }
        if !policy.adaptive || piece || large.method() == Method::Mapped {
            if let Some(sent) = send_mapped(ctx, conn, entry, file, &head, range.clone()).await {
                ctx.w.stats().large_mapped_bytes.add(n);
                ctx.w.give_buf(head);
                return sent;
            }
        }
        ctx.w.stats().large_sendfile_bytes.add(n);
    }
    // The head leaves on its own, pushed at once, before the body's sendfile (as nginx
    // does without `tcp_nopush`). Holding it with MSG_MORE to share the body's first
    // segment was measured harmful: the socket then never looks app-limited to BBR,
    // which leaves STARTUP and paces every later connection with timers (on loopback
    // without fq, 100 KiB hits fell from 62k to 20k req/s, 4x the kernel CPU per hit;
    // docs/results/hits.md).
    conn.write_all(&head, send).await?;
    ctx.w.give_buf(head);
    // After the head went out, a read error can only be signalled by cutting the
    // connection; a write error is the client's.
    // Boxed: the sendfile/pool future is large, and inline it would be copied into
    // every hit's state, small RAM hits included; a large body pays one allocation.
    match Box::pin(send_file_range(
        conn,
        io,
        file,
        off,
        n,
        ctx.shared.send.mode_for(entry.body_len),
        send,
    ))
    .await
    {
        Ok(k) => Ok(k),
        Err(e) if is_file_error(&e) => {
            // The file is shorter than its header says (truncated under us) or
            // unreadable: this response is cut, and the object dropped so that the
            // next request fetches it again.
            ctx.cache
                .drop_corrupt(entry, &format!("reading the body: {e}"));
            Err(abort(e))
        }
        Err(e) => Err(ExchangeError::Client(e)),
    }
}

/// A range larger than `aio.sendfile_max`, written with the head from a mapping of the
/// object's file (`http::mapped` says why that beats sendfile for large bodies):
/// under `off`, and under `auto` and `io_uring` when every page of the range is in the
/// page cache (`mincore`), which is when those backends send on the loop anyway. None
/// when not taken (the caller then sends by sendfile, off the loop where the data is
/// cold): mappings off (`open_file_cache = "off"`), no mapping to be had, a page not
/// cached (a mapping whose pages went is dropped), or `threads`, whose every send runs
/// on its pool. Returns the body bytes sent.
async fn send_mapped(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    entry: &HitEntry,
    file: &std::sync::Arc<std::fs::File>,
    head: &[u8],
    range: std::ops::Range<u64>,
) -> Option<Result<u64, ExchangeError>> {
    let backend = ctx.w.file_io.mode();
    if backend == edge_aio::Mode::Threads {
        return None;
    }
    let off = edge_aio::Mode::Off;
    let (at, len) = (entry.body_offset, entry.body_len);
    let map = {
        let mut maps = ctx.w.maps.borrow_mut();
        match maps.get(file, at, len) {
            Some(map) => map,
            // A new mapping only for a range whose last byte is cached (the sendfile
            // path's 1-byte probe): cold objects are never mapped, so a cold workload
            // does not churn mappings.
            None if backend != off && !ctx.w.file_io.is_cached(file, at + range.end - 1) => {
                return None
            }
            None => maps.insert(file, at, len, ctx.w.map_limits())?,
        }
    };
    let bytes = range.start as usize..range.end as usize;
    if backend != off && !map.resident(bytes.clone()).unwrap_or(false) {
        // Pages went (reclaimed, or dropped): the mapping goes too, so that it holds
        // nothing the kernel wants back; the next warm hit maps the object again.
        ctx.w.maps.borrow_mut().remove(file);
        return None;
    }
    let send = ctx.shared.timeouts.send;
    Some(match write_mapped(conn, head, &map, bytes, send).await {
        Ok(()) => Ok(range.end - range.start),
        Err(e) if is_file_fault(&e) => {
            // The file shrank under the mapping: cut this response, drop the object.
            ctx.cache
                .drop_corrupt(entry, &format!("reading the body: {e}"));
            Err(abort(e))
        }
        Err(e) => Err(ExchangeError::Client(e)),
    })
}

fn is_file_error(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::UnexpectedEof || e.raw_os_error() == Some(libc::EIO)
}

fn abort(e: io::Error) -> ExchangeError {
    ExchangeError::Aborted(format!("reading cached object: {e}"))
}
