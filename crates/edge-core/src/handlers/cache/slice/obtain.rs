//! Getting one slice: a stored slice that holds the wanted bytes, a fill in progress
//! that will (collapsed per slice on the slice's own inflight lock), a stored part of
//! the slice completed now ([`complete`]: only the missing bytes, with `If-Range`), or
//! only the wanted bytes fetched with `Range` (the slice is then stored partially).
//!
//! How it fits: the request flow (`super`) and prefetching
//! ([`super::prefetch`](mod@super::prefetch)) call [`obtain`] and [`take`]; a fetched
//! slice's origin-to-disk copy runs in its own task
//! ([`crate::handlers::cache::fill::pump`], or
//! [`crate::handlers::cache::partial::combine`] when completing a part) while clients
//! stream the file as it grows.

use super::got::{holds, purge_slices, slice_ctx, Got, Reference, Relayed};
use super::plan::Slicer;
use crate::handlers::cache::ctx::{Ctx, OwnedCtx};
use crate::handlers::cache::store::{publish, Store};
use crate::http::conn::Conn;
use crate::http::exchange::Exchange;
use crate::upstream::UpstreamResponse;
use edge_cache::part::{self, Need, Part};
use edge_cache::{policy, Fill, FillHead, FillState, HitEntry, Join, Lookup, ObjectMeta, WaitHead};
use edge_http::BodyKind;
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::SystemTime;

/// How many times getting one slice joins its fill again after the leader failed
/// before the head; past this it is fetched uncollapsed.
const MAX_JOINS: usize = 4;

/// Gets the bytes `want` of slice `n` (inside its span): a stored slice that holds
/// them, a fill in progress that will (collapsed per slice), a stored part of the
/// slice completed now ([`complete`]), or only `want` fetched now (the slice is then
/// stored partially). `expect` is the reference a fetched slice must agree with (None
/// for the first).
pub(super) async fn obtain(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    sl: &Slicer,
    n: u64,
    expect: Option<&Reference>,
    want: Range<u64>,
) -> Got {
    let sc = slice_ctx(ctx, sl, n);
    let timeout = ctx.p.rules.cache_lock_timeout;
    for _ in 0..MAX_JOINS {
        if let Some(e) = stored(&sc, ex, sl, n).await {
            if holds(&e.meta, &want) {
                return Got::Hit(e);
            }
        }
        match sc.cache.inflight().join(sc.key_hash) {
            Join::Leader(handle) => {
                return match stored(&sc, ex, sl, n).await {
                    Some(e) if holds(&e.meta, &want) => {
                        drop(handle); // followers join again and find it
                        Got::Hit(e)
                    }
                    Some(e) => complete(ctx, &sc, conn, ex, sl, n, e, want, handle, expect).await,
                    None => fetch(&sc, conn, ex, sl, n, want, Some(handle), expect).await,
                };
            }
            Join::Follower(f) => match f.wait_head(timeout).await {
                WaitHead::Head(head) => {
                    let same = head.meta.vary.is_empty()
                        || edge_cache::variant_key(&sc.key, &head.meta.vary, &ex.req.headers)
                            == head.meta.key;
                    if !same {
                        break;
                    }
                    if holds(&head.meta, &want) {
                        ex.cache.collapsed = true;
                        return Got::Fill {
                            fill: f,
                            head,
                            ours: false,
                        };
                    }
                    // The leader fetches other bytes of this slice: once they are
                    // stored, this request completes the slice.
                    if !fill_ends(&f, head, timeout).await {
                        break;
                    }
                }
                WaitHead::Retry => continue,
                WaitHead::Uncacheable | WaitHead::TimedOut => break,
            },
        }
    }
    fetch(&sc, conn, ex, sl, n, want, None, expect).await
}

/// Waits (at most `timeout`) until the fill `f` has stored its whole body; false when
/// it failed or took longer.
async fn fill_ends(f: &Fill, head: Arc<FillHead>, timeout: std::time::Duration) -> bool {
    let mut r = f.reader(head);
    let end = async {
        loop {
            match r.wait_available().await {
                Ok(Some(got)) => r.advance(got.end - got.start),
                Ok(None) => return true,
                Err(_) => return false,
            }
        }
    };
    tokio::time::timeout(timeout, end).await.unwrap_or(false)
}

/// A fresh stored slice `n`: the whole slice or a part of it (a stale one, or one
/// that is not inside the slice, is fetched again).
async fn stored(sc: &Ctx<'_>, ex: &Exchange, sl: &Slicer, n: u64) -> Option<HitEntry> {
    match crate::handlers::cache::lookup::lookup(sc, &ex.req.headers, SystemTime::now()).await {
        Lookup::Fresh(e) if Part::of(&e.meta).is_some_and(|p| sl.within(&p, n)) => Some(e),
        _ => None,
    }
}

/// Fetches the bytes `asked` of slice `n` (inside its span) from the origin with
/// `Range`. A 206 for exactly those bytes is stored as the slice (or a part of it: its
/// copy to disk in its own task, every client streaming the file); a 200 is the whole
/// object from an origin that ignores `Range`.
#[allow(clippy::too_many_arguments)]
async fn fetch(
    sc: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    sl: &Slicer,
    n: u64,
    asked: Range<u64>,
    handle: Option<edge_cache::FillHandle>,
    expect: Option<&Reference>,
) -> Got {
    let mut extra = Vec::with_capacity(48);
    let value = format!("bytes={}-{}", asked.start, asked.end.saturating_sub(1));
    edge_http::write_header(&mut extra, "Range", value.as_bytes());
    let (up, t0, t1) = crate::handlers::cache::fill::fetch_origin(sc, conn, ex, &extra).await;
    let up = match up {
        Ok(up) => up,
        Err(e) => return Got::Failed(e), // the handle drops: followers retry
    };
    take(
        sc,
        &ex.req.headers,
        up,
        (t0, t1),
        sl,
        n,
        asked,
        handle,
        expect,
    )
    .await
}

/// Completes the stored part `e` of slice `n` for the bytes `want` it lacks, leading
/// the slice's fill with `handle`: only the missing bytes are fetched (with
/// `If-Range`), and the part and those bytes are written in order to a new object in
/// its own task ([`crate::handlers::cache::partial::combine`]) that every client streams like a fill.
/// A part without a strong validator, or one that `want` holds on both sides, is
/// replaced by a fetch of both together. An answer for another representation is a
/// mismatch (the first slice's purges every slice here; later ones are purged by
/// [`super::got::check`]).
#[allow(clippy::too_many_arguments)]
async fn complete(
    ctx: &Ctx<'_>,
    sc: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    sl: &Slicer,
    n: u64,
    e: HitEntry,
    want: Range<u64>,
    handle: edge_cache::FillHandle,
    expect: Option<&Reference>,
) -> Got {
    let Some(p) = Part::of(&e.meta) else {
        return fetch(sc, conn, ex, sl, n, want, Some(handle), expect).await;
    };
    let hull = p.start.min(want.start)..p.end.max(want.end);
    let (missing, union, if_range) = match (part::need(&p, &want, sl.size), part::if_range(&e.meta))
    {
        (Need::Combine { fetch, union }, Some(v)) => (fetch, union, v),
        _ => return fetch(sc, conn, ex, sl, n, hull, Some(handle), expect).await,
    };
    let mut extra = Vec::with_capacity(128);
    let value = part::range_request(&missing, p.total);
    edge_http::write_header(&mut extra, "Range", value.as_bytes());
    edge_http::write_header(&mut extra, "If-Range", if_range.as_bytes());
    let (up, t0, t1) = crate::handlers::cache::fill::fetch_origin(sc, conn, ex, &extra).await;
    let up = match up {
        Ok(up) => up,
        Err(e) => return Got::Failed(e),
    };
    let h = &up.head.headers;
    let status = up.head.status;
    if status == 200 || (status == 206 && !part::same_representation(&e.meta, h)) {
        // The object changed since the part was stored.
        drop(up);
        if expect.is_none() {
            ctx.w.stats().slice_mismatches.fetch_add(1, Relaxed);
            let k = purge_slices(ctx);
            tracing::warn!(
                "slice: {} changed since a part was stored; {k} purged",
                ctx.key
            );
        }
        return Got::Mismatch;
    }
    let exact = Part {
        start: missing.start,
        end: missing.end,
        total: p.total,
    };
    if status != 206 {
        return Got::Other(up);
    }
    if Part::of_response(status, h) != Some(exact) {
        let cr = h.get_str("content-range").unwrap_or("none");
        return Got::Bad(format!("slice {n}: the origin sent Content-Range {cr}"));
    }
    let union = Part {
        start: union.start,
        end: union.end,
        total: p.total,
    };
    let (meta, true) = slice_meta(sc, &ex.req.headers, &up, t0, t1, union) else {
        // No longer storable: this request's bytes alone, uncached.
        drop((up, handle));
        return fetch(sc, conn, ex, sl, n, want, None, expect).await;
    };
    let (store, fill, head, owned) = match begin_fill(sc, meta, handle).await {
        Ok(f) => f,
        Err(_) => {
            drop(up);
            return fetch(sc, conn, ex, sl, n, want, None, expect).await;
        }
    };
    tokio::task::spawn_local(async move {
        let Some(c) = owned.ctx() else {
            return;
        };
        let mut sink = crate::handlers::cache::partial::Sink::new(Some(store), Vec::new(), 0..0);
        let res =
            crate::handlers::cache::partial::combine(&c, None, &e, &p, &missing, up, &mut sink)
                .await;
        match (res, sink.store.take()) {
            (Ok(()), Some(s)) => {
                if s.finish(&c.w.file_io).await {
                    c.w.stats().partial_combined.fetch_add(1, Relaxed);
                }
            }
            // Dropped: the temp file is removed and the fill fails (its clients are cut).
            (Err(why), _) => tracing::debug!("slice: completing {}: {why}", c.key),
            (Ok(()), None) => {}
        }
    });
    Got::Fill {
        fill,
        head,
        ours: true,
    }
}

/// The origin's answer `up` to the request for the bytes `asked` of slice `n`, sent
/// at `times.0` and answered at `times.1`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn take(
    sc: &Ctx<'_>,
    req: &edge_http::HeaderMap,
    up: UpstreamResponse,
    (t0, t1): (SystemTime, SystemTime),
    sl: &Slicer,
    n: u64,
    asked: Range<u64>,
    handle: Option<edge_cache::FillHandle>,
    expect: Option<&Reference>,
) -> Got {
    let disagrees = |meta: &ObjectMeta, total| expect.is_some_and(|r| !r.agrees(meta, total));
    match (up.head.status, up.head.body) {
        (206, _) => {
            let part = up
                .head
                .headers
                .get("content-range")
                .and_then(edge_http::parse_content_range)
                .and_then(|cr| {
                    let r = cr.range?;
                    Some(Part {
                        start: r.first(),
                        end: r.end(),
                        total: cr.complete_len?,
                    })
                });
            let Some(part) = part.filter(|p| sl.answers(p, &asked, n)) else {
                let cr = up.head.headers.get_str("content-range").unwrap_or("none");
                return Got::Bad(format!("slice {n}: the origin sent Content-Range {cr}"));
            };
            // A chunked or close-delimited 206 is as good: its length is checked as it
            // arrives (a stored slice must be exactly its range; a client gets no more
            // than it asked for, and a short body is an error).
            if matches!(up.head.body, BodyKind::Length(l) if l != part.len()) {
                return Got::Bad(format!("slice {n}: a 206 whose length is not its range's"));
            }
            let meta = slice_meta(sc, req, &up, t0, t1, part);
            if disagrees(&meta.0, part.total) {
                return Got::Mismatch;
            }
            match (meta, handle) {
                ((meta, true), Some(h)) => lead(sc, up, meta, h, part).await,
                ((meta, _), h) => {
                    if let Some(h) = h {
                        h.uncacheable();
                    }
                    Got::Origin(Box::new(Relayed {
                        up,
                        meta,
                        at: part.start,
                        end: part.end,
                        total: part.total,
                        store: false,
                    }))
                }
            }
        }
        (200, BodyKind::Length(total)) if total > 0 => {
            // The origin ignores Range: this slice's followers fetch on their own.
            if let Some(h) = handle {
                h.uncacheable();
            }
            let part = Part {
                start: 0,
                end: total,
                total,
            };
            let (meta, store) = slice_meta(sc, req, &up, t0, t1, part);
            if disagrees(&meta, total) {
                return Got::Mismatch;
            }
            Got::Origin(Box::new(Relayed {
                up,
                meta,
                at: 0,
                end: total,
                total,
                store,
            }))
        }
        _ => {
            if let Some(h) = handle {
                h.uncacheable();
            }
            Got::Other(up)
        }
    }
}

/// The metadata of a slice holding `part` of the origin's response `up` (a 206 for
/// the slice, or a whole 200), and whether it may be stored: the object's own policy
/// applies (as a 200), the stored status is 206 with the slice's `Content-Range`, and
/// the slice carries the object's slice tag.
fn slice_meta(
    sc: &Ctx<'_>,
    req: &edge_http::HeaderMap,
    up: &UpstreamResponse,
    t0: SystemTime,
    t1: SystemTime,
    part: Part,
) -> (ObjectMeta, bool) {
    let h = &up.head;
    let fresh = policy::storable(
        &edge_http::Method::Get,
        req,
        200,
        &h.headers,
        &sc.p.policy,
        t0,
        t1,
    );
    let store = fresh.is_ok();
    let fresh = fresh.unwrap_or_default();
    let mut meta = policy::build_meta(&sc.key, 206, &h.headers, fresh, t0, t1, Some(part.len()));
    meta.header_block = edge_cache::part::block_of_part(&meta.header_block, &part);
    meta.key = edge_cache::variant_key(&sc.key, &meta.vary, req);
    meta.tags
        .push(edge_cache::key::slice_tag(object_key(&sc.key)));
    (meta, store)
}

/// The object's key of a slice's key (what precedes the slice mark).
fn object_key(slice_key: &str) -> &str {
    slice_key
        .rsplit_once(edge_cache::key::SLICE_MARK)
        .map_or(slice_key, |(k, _)| k)
}

/// Leads the fill of one slice: the object writer, the head for the followers, and the
/// origin-to-disk copy in its own task; this client streams the file like the others.
async fn lead(
    sc: &Ctx<'_>,
    up: UpstreamResponse,
    meta: ObjectMeta,
    handle: edge_cache::FillHandle,
    part: Part,
) -> Got {
    let (store, fill, head, owned) = match begin_fill(sc, meta, handle).await {
        Ok(f) => f,
        Err(Some(meta)) => {
            // Not writable (counted by the cache): this client gets the origin's bytes.
            return Got::Origin(Box::new(Relayed {
                up,
                meta,
                at: part.start,
                end: part.end,
                total: part.total,
                store: false,
            }));
        }
        Err(None) => return Got::Bad("slice fill without a head".into()),
    };
    tokio::task::spawn_local(async move {
        if let Some(c) = owned.ctx() {
            let _ = crate::handlers::cache::fill::pump(&c, None, up, Some(store), None).await;
        }
    });
    Got::Fill {
        fill,
        head,
        ours: true,
    }
}

/// Opens the object writer of a slice fill led by `handle` and publishes its head:
/// the store, the fill and its head for the clients, and the context for the task
/// that writes it. `Err(Some(meta))`: not writable (relay uncached); `Err(None)`: no
/// fill to follow.
async fn begin_fill(
    sc: &Ctx<'_>,
    meta: ObjectMeta,
    handle: edge_cache::FillHandle,
) -> Result<(Store, Arc<Fill>, Arc<FillHead>, OwnedCtx), Option<ObjectMeta>> {
    let writer = sc.w.file_io.begin_write(sc.cache, meta.clone()).await;
    let meta = match writer {
        Some(_) => meta,
        None => ObjectMeta::new(sc.key.clone(), 206, SystemTime::now()),
    };
    let Some(store) = publish(writer, Some(handle)).map(Store::streamed) else {
        return Err(Some(meta));
    };
    let fill = store.handle.as_ref().map(|h| h.fill().clone());
    let head = match fill.as_ref().map(|f| f.state()) {
        Some(FillState::Streaming { head, .. }) => head,
        _ => return Err(None),
    };
    match (fill, OwnedCtx::new(sc)) {
        (Some(fill), Some(owned)) => Ok((store, fill, head, owned)),
        _ => Err(None),
    }
}
