//! Slicing (`slice = "1m"`): a location's objects are cached as fixed-size slices, each
//! an object of its own, fetched from the origin with its own `Range` and only when a
//! request needs it.
//!
//! How it fits: [`super::handle`] sends every storable GET and HEAD of a sliced location
//! here. A slice is stored by the partial-object convention of `edge_cache::part` (206
//! and its `Content-Range`) under `edge_cache::key::slice_key` (the object's key and the
//! slice number), tagged with `edge_cache::key::slice_tag` so that a purge of the URL
//! reaches every slice. A request:
//! 1. gets the slice holding the first byte it wants ([`plan::first_want`]): a hit, a
//!    fill in progress (collapsed per slice on the slice's own inflight lock), or a
//!    fetch with `Range: bytes=a-b` whose origin-to-disk copy runs in its own task
//!    ([`super::fill::pump`]) while this client streams the file as it grows
//!    ([`super::stream::stream_range`]), like any miss. Only the bytes of the slice the
//!    request needs are fetched: a slice may be stored partially (a range inside it),
//!    served for the bytes it holds, and completed by a request that needs more
//!    ([`complete`]: only the missing bytes, with `If-Range`, combined with the stored
//!    ones by `super::partial::combine` into a new object that clients stream);
//! 2. evaluates its conditionals and `Range` against that slice's validators and
//!    complete length (304, 200, 206, multipart 206, 416), and sends the head;
//! 3. sends each wanted byte from the slice that holds it, getting slices in order: a
//!    single range's head leaves with the first stored slice's bytes, and a stored
//!    slice's part goes from a mapping when the whole response would
//!    ([`super::hit::send_part`]), so a range over two slices is not paced by TCP.
//!
//! Consistency: every slice must carry the first slice's ETag (or Last-Modified) and
//! complete length. On a disagreement every slice of the object is purged and counted
//! (`edgecache_slice_mismatches_total`); before the head the request starts again,
//! after it the connection is cut: a client never gets bytes of two versions. An
//! origin that ignores `Range` (a 200 with the whole body) is read from the start and
//! cut into slices as the bytes pass ([`relay`]). A sliced location serves identity.
//! With `slice_prefetch = N`, a response that reads a slice to its end starts
//! background fetches of the next N slices ([`prefetch`], bounded per worker).

pub mod plan;

use super::ctx::{mark, CacheStatus, Ctx, OwnedCtx};
use super::store::{publish, Store};
use crate::http::conn::Conn;
use crate::http::exchange::{BodyLen, Exchange, ExchangeError};
use crate::upstream::{UpstreamError, UpstreamResponse};
use edge_cache::hit::{content_type, not_modified, validators};
use edge_cache::part::{self, Need, Part};
use edge_cache::{
    key_hash, pick, policy, Fill, FillHead, FillState, HitEntry, Join, Lookup, ObjectMeta, WaitHead,
};
use edge_http::{BodyDecoder, BodyKind, Boundary, MultipartLayout, RangeOutcome};
use plan::Slicer;
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::SystemTime;

/// How many times a request starts again after finding its object changed between
/// slices before it answers 502.
const MAX_ATTEMPTS: usize = 3;
/// Most slices whose presence is checked to tell HIT from MISS before the head (an
/// in-memory index probe each); a request over more slices says MISS.
const MAX_PROBES: u64 = 16 * 1024;
/// How many times getting one slice joins its fill again after the leader failed
/// before the head; past this it is fetched uncollapsed.
const MAX_JOINS: usize = 4;
/// Upstream read buffer growth when relaying an origin response.
const UP_BUF: usize = 64 * 1024;

/// One slice, as this request got it.
enum Got {
    /// Stored.
    Hit(HitEntry),
    /// Being written by a fill: ours (`ours`: the fetch runs in its own task) or
    /// another request's (collapsed).
    Fill {
        fill: Arc<Fill>,
        head: Arc<FillHead>,
        ours: bool,
    },
    /// An origin response relayed as it arrives: a slice that may not be stored, or
    /// the whole body from an origin that ignores `Range` (`at..end` = the whole
    /// object; then `store` cuts it into stored slices as it passes). `meta` has its
    /// validators and headers.
    Origin(Box<Relayed>),
    /// Not a slice of an object of known length (an error status, a 200 of unknown
    /// length): relayed as it is, uncached, when it answers the first slice.
    Other(UpstreamResponse),
    /// The origin's slice disagrees with the object's first slice.
    Mismatch,
    /// The origin answered a slice with the wrong bytes.
    Bad(String),
    Failed(UpstreamError),
}

/// An origin response relayed to the client as it arrives.
struct Relayed {
    up: UpstreamResponse,
    meta: ObjectMeta,
    /// The object's bytes the body holds.
    at: u64,
    end: u64,
    total: u64,
    /// Cut into stored slices as it passes.
    store: bool,
}

impl Got {
    /// Whether a stored or filling slice holds the bytes `want` (anything else is
    /// taken as it is: it relays, or fails).
    fn holds(&self, want: &Range<u64>) -> bool {
        match self {
            Got::Hit(e) => holds(&e.meta, want),
            Got::Fill { head, .. } => holds(&head.meta, want),
            _ => true,
        }
    }

    /// The metadata and the object's complete length of a slice.
    fn meta(&self) -> Option<(&ObjectMeta, u64)> {
        match self {
            Got::Hit(e) => Some((&e.meta, Part::of(&e.meta)?.total)),
            Got::Fill { head, .. } => Some((&head.meta, Part::of(&head.meta)?.total)),
            Got::Origin(o) => Some((&o.meta, o.total)),
            _ => None,
        }
    }
}

/// What every slice of the object must agree with: the first slice's.
struct Reference {
    meta: ObjectMeta,
    total: u64,
}

impl Reference {
    /// Same complete length, and the same ETag (or, without one, Last-Modified).
    fn agrees(&self, meta: &ObjectMeta, total: u64) -> bool {
        total == self.total
            && match (&self.meta.etag, self.meta.last_modified) {
                (Some(e), _) => meta.etag.as_ref() == Some(e),
                (None, Some(lm)) => meta.etag.is_none() && meta.last_modified == Some(lm),
                (None, None) => meta.etag.is_none() && meta.last_modified.is_none(),
            }
    }
}

/// How answering from the first slice ended.
enum Sent {
    Done(Result<(), ExchangeError>),
    /// The object changed before the head was sent: every slice is purged, start again.
    Changed,
}

/// Entry for a storable GET or HEAD of a sliced location.
pub async fn handle(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
) -> Result<(), ExchangeError> {
    let sl = Slicer::new(ctx.p.rules.slice);
    if ex.body.is_some()
        && ex
            .discard_body(
                conn,
                ctx.shared.timeouts.client_body,
                ctx.shared.timeouts.send,
            )
            .await
            .is_err()
    {
        ex.keep_alive = false;
        ex.body = None;
    }
    let (mut n0, mut want0) = plan::first_want(ex.req.headers.get("range"), &sl);
    for _ in 0..MAX_ATTEMPTS {
        let first = obtain(ctx, conn, ex, &sl, n0, None, want0.clone()).await;
        match first {
            Got::Other(up) if up.head.status == 416 && want0.start > 0 => {
                // The range starts past the end: slice 0 says how long the object is.
                up.release(&ctx.w.pool, &ctx.p.upstream, false);
                (n0, want0) = (0, sl.span(0));
                continue;
            }
            Got::Other(up) if up.head.status == 416 => {
                // An empty object has no slice: fetched whole, uncached.
                up.release(&ctx.w.pool, &ctx.p.upstream, false);
                return Box::pin(super::fill::fetch_and_fill(
                    ctx,
                    conn,
                    ex,
                    None,
                    CacheStatus::Miss,
                    super::ctx::MayStore::No,
                ))
                .await;
            }
            Got::Other(up) => {
                mark(ctx.w, ex, CacheStatus::Miss);
                ex.cache.fwd_status = Some(up.head.status);
                return super::fill::pump(ctx, Some((conn, ex)), up, None, None).await;
            }
            Got::Failed(e) => {
                mark(ctx.w, ex, CacheStatus::Miss);
                return super::fill::upstream_failed(ctx, conn, ex, e).await;
            }
            Got::Bad(why) => {
                mark(ctx.w, ex, CacheStatus::Miss);
                return bad_gateway(ctx, conn, ex, &why).await;
            }
            Got::Mismatch => continue,
            first => match respond(ctx, conn, ex, &sl, n0, first).await {
                Sent::Done(r) => return r,
                Sent::Changed => continue,
            },
        }
    }
    mark(ctx.w, ex, CacheStatus::Miss);
    bad_gateway(ctx, conn, ex, "the object kept changing between slices").await
}

/// Answers from the first slice `got` (slice `n0`): conditionals, the head, then every
/// wanted byte slice by slice.
async fn respond(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    sl: &Slicer,
    n0: u64,
    got: Got,
) -> Sent {
    let Some((meta, total)) = got.meta() else {
        return Sent::Done(Err(ExchangeError::Aborted("slice without a length".into())));
    };
    let reference = Reference {
        meta: meta.clone(),
        total,
    };
    let meta = &reference.meta;
    let now = SystemTime::now();
    let age = policy::age(meta, now).as_secs();
    ex.cache.ttl = Some(policy::ttl_secs(meta, now));
    let send = ctx.shared.timeouts.send;
    let first_hit = matches!(got, Got::Hit(_));
    // Not fetched by this request: it may be older than the origin's object.
    let first_old = !matches!(got, Got::Fill { ours: true, .. } | Got::Origin(_));
    let mut ready: Vec<(u64, Got)> = vec![(n0, got)];
    if not_modified(meta, &ex.req.method, &ex.req.headers) {
        mark(ctx.w, ex, status_of(ctx, sl, first_hit, &[]));
        let mut out = Vec::with_capacity(256 + meta.header_block.len());
        ex.begin_stored_head(&mut out, 304);
        super::head::copy_block_without(&meta.header_block, &["content-range"], &mut out);
        super::head::finish_head(ex, age, &mut out, BodyLen::None);
        return Sent::Done(conn.write_all(&out, send).await.map_err(Into::into));
    }
    let outcome =
        edge_http::evaluate_range(&ex.req.method, &ex.req.headers, &validators(meta), total);
    let ranges: Vec<Range<u64>> = match &outcome {
        RangeOutcome::Full(_) => std::iter::once(0..total).collect(),
        RangeOutcome::Partial(r) => r.iter().map(|r| r.as_range()).collect(),
        RangeOutcome::Unsatisfiable => Vec::new(),
    };
    // A first slice stored (or being stored) before this request may be older than the
    // origin's object: when the next slice must come from the origin, it is checked
    // before the head, so that a changed object is fetched again instead of cutting
    // the response.
    if first_old && !ex.is_head() {
        if let Some(n1) = second_slice(sl, &ranges, n0) {
            if !present(ctx, sl, n1) {
                let span = sl.span(n1);
                let want = span.start.max(ranges[0].start)..span.end.min(ranges[0].end);
                let next = obtain(ctx, conn, ex, sl, n1, Some(&reference), want).await;
                if let Some(changed) = check(ctx, &reference, &next) {
                    return changed;
                }
                ready.push((n1, next));
            }
        }
    }
    let st = status_of(ctx, sl, first_hit, &ranges);
    mark(ctx.w, ex, st);
    let mut out = Vec::with_capacity(512 + meta.header_block.len());
    let mut layout = None;
    match &outcome {
        RangeOutcome::Full(_) => {
            ex.begin_stored_head(&mut out, 200);
            super::head::copy_block_without(&meta.header_block, &["content-range"], &mut out);
            edge_http::write_header_u64(&mut out, "Content-Length", total);
            super::head::finish_head(ex, age, &mut out, BodyLen::Known(total));
        }
        RangeOutcome::Partial(r) if r.len() == 1 => {
            let r = &ranges[0];
            ex.begin_stored_head(&mut out, 206);
            super::head::copy_block_without(&meta.header_block, &["content-range"], &mut out);
            let cr = format!("bytes {}-{}/{total}", r.start, r.end - 1);
            edge_http::write_header(&mut out, "Content-Range", cr.as_bytes());
            edge_http::write_header_u64(&mut out, "Content-Length", r.end - r.start);
            super::head::finish_head(ex, age, &mut out, BodyLen::Known(r.end - r.start));
        }
        RangeOutcome::Partial(r) => {
            let boundary = Boundary::from_seed(ctx.key_hash as u64);
            let l = MultipartLayout::new(r, total, content_type(meta), boundary.as_str());
            super::head::write_multipart_head(ex, meta, &l, age, &mut out);
            layout = Some(l);
        }
        RangeOutcome::Unsatisfiable => {
            super::head::write_unsatisfiable(ex, meta, total, age, &mut out);
            return Sent::Done(conn.write_all(&out, send).await.map_err(Into::into));
        }
    }
    if ex.is_head() {
        return Sent::Done(conn.write_all(&out, send).await.map_err(Into::into));
    }
    if layout.is_some() {
        if let Err(e) = conn.write_all(&out, send).await {
            return Sent::Done(Err(e.into()));
        }
        out.clear();
    }
    let mut body = Body {
        sl,
        reference: &reference,
        ready,
        head: out,
        len: if layout.is_some() {
            0
        } else {
            ranges[0].end - ranges[0].start
        },
        sent: 0,
        from_origin: 0,
    };
    let result = match &layout {
        None => body.range(ctx, conn, ex, ranges[0].clone()).await,
        Some(l) => body.parts(ctx, conn, ex, l).await,
    };
    ex.body_bytes_sent = body.sent;
    let stats = ctx.w.stats();
    stats
        .cache_bytes_origin
        .fetch_add(body.from_origin, Relaxed);
    stats
        .cache_bytes_hit
        .add(body.sent.saturating_sub(body.from_origin));
    Sent::Done(result)
}

/// The body of a response: the slices got before the head (`ready`), then the others
/// as they are needed.
struct Body<'a> {
    sl: &'a Slicer,
    reference: &'a Reference,
    ready: Vec<(u64, Got)>,
    /// The head of a single-range (or full) response, not sent yet: it leaves with the
    /// first stored slice's bytes (one `writev`), or on its own before anything else.
    head: Vec<u8>,
    /// The body length of a single-range response: a stored slice's part of it leaves
    /// from a mapping when the whole would ([`super::hit::send_part`]).
    len: u64,
    sent: u64,
    /// Of `sent`, the bytes relayed from the origin.
    from_origin: u64,
}

impl Body<'_> {
    /// A multipart/byteranges body: each part's head, then its bytes.
    async fn parts(
        &mut self,
        ctx: &Ctx<'_>,
        conn: &mut Conn,
        ex: &mut Exchange,
        layout: &MultipartLayout,
    ) -> Result<(), ExchangeError> {
        let send = ctx.shared.timeouts.send;
        for part in layout.parts() {
            conn.write_all(part.head, send).await?;
            self.sent += part.head.len() as u64;
            self.range(ctx, conn, ex, part.range.as_range()).await?;
        }
        conn.write_all(layout.tail(), send).await?;
        self.sent += layout.tail().len() as u64;
        Ok(())
    }

    /// Sends the bytes `r` of the object, slice by slice.
    async fn range(
        &mut self,
        ctx: &Ctx<'_>,
        conn: &mut Conn,
        ex: &mut Exchange,
        r: Range<u64>,
    ) -> Result<(), ExchangeError> {
        let total = self.reference.total;
        let mut pos = r.start;
        while pos < r.end {
            let n = self.sl.of(pos);
            let bytes = self.sl.bytes(n, total);
            let want = pos..r.end.min(bytes.end);
            let got = match self.take_ready(n, &want) {
                Some(g) => g,
                None => {
                    self.flush_head(ctx, conn).await?;
                    let reference = Some(self.reference);
                    obtain(ctx, conn, ex, self.sl, n, reference, want.clone()).await
                }
            };
            if check(ctx, self.reference, &got).is_some() {
                return Err(ExchangeError::Aborted(
                    "the object changed between slices: connection cut".into(),
                ));
            }
            if want.end == bytes.end && ctx.p.rules.slice_prefetch > 0 {
                // Read to the slice's end: the next ones are likely wanted next.
                prefetch(ctx, conn, ex, self.sl, self.reference, n + 1);
            }
            // Body offsets: a stored slice's body starts at its part's first byte.
            let first = got
                .meta()
                .and_then(|(m, _)| Part::of(m))
                .map_or(0, |p| p.start);
            let local = want.start.saturating_sub(first)..want.end.saturating_sub(first);
            match got {
                Got::Hit(mut e) => {
                    let sc = slice_ctx(ctx, self.sl, n);
                    if sc.cache.memory_wants(&ctx.w.local, &e) {
                        Box::pin(super::hit::admit_to_memory(&sc, &mut e)).await?;
                    }
                    let head = std::mem::take(&mut self.head);
                    let n = super::hit::send_part(&sc, conn, &e, head, local, self.len);
                    self.sent += Box::pin(n).await?;
                }
                Got::Fill { fill, head, .. } => {
                    self.flush_head(ctx, conn).await?;
                    let (res, n) =
                        super::stream::stream_range(ctx, conn, &fill, &head, local).await;
                    self.sent += n;
                    res?;
                }
                Got::Origin(o) => {
                    let Relayed {
                        up,
                        meta,
                        at,
                        end,
                        store,
                        ..
                    } = *o;
                    self.flush_head(ctx, conn).await?;
                    // A relay sends the rest of the range its response holds.
                    let want = pos..r.end.min(end);
                    let stores = store.then(|| Cutter::new(*self.sl, total, meta, &want));
                    let (res, n) = relay(ctx, conn, ex, up, at, want.clone(), stores).await;
                    self.sent += n;
                    self.from_origin += n;
                    res?;
                    pos = want.end;
                    continue;
                }
                Got::Other(_) | Got::Mismatch | Got::Bad(_) | Got::Failed(_) => {
                    return Err(ExchangeError::Aborted(
                        "a slice could not be fetched: connection cut".into(),
                    ))
                }
            }
            pos = want.end;
        }
        // An empty body (a full response of a 0-byte object): the head alone.
        self.flush_head(ctx, conn).await
    }

    /// Sends the head if it has not left yet.
    async fn flush_head(&mut self, ctx: &Ctx<'_>, conn: &mut Conn) -> Result<(), ExchangeError> {
        if self.head.is_empty() {
            return Ok(());
        }
        let head = std::mem::take(&mut self.head);
        conn.write_all(&head, ctx.shared.timeouts.send).await?;
        ctx.w.give_buf(head);
        Ok(())
    }

    /// A slice got before the head, when it holds the bytes `want` of slice `n`: the
    /// slice (whole, or a part that holds them), or an origin stream that has not
    /// passed their first byte yet.
    fn take_ready(&mut self, n: u64, want: &Range<u64>) -> Option<Got> {
        let pos = want.start;
        let i = self.ready.iter().position(|(m, g)| match g {
            Got::Origin(o) => o.at <= pos && pos < o.end,
            g => *m == n && g.holds(want),
        })?;
        Some(self.ready.swap_remove(i).1)
    }
}

/// Most background slice fetches (`slice_prefetch`) in flight on one worker.
pub const MAX_PREFETCHES: usize = 16;

thread_local! {
    /// Background slice fetches in flight on this worker thread.
    static PREFETCHING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts one background fetch for as long as it lives.
struct Prefetching;

impl Prefetching {
    fn start() -> Option<Prefetching> {
        PREFETCHING.with(|c| {
            (c.get() < MAX_PREFETCHES).then(|| {
                c.set(c.get() + 1);
                Prefetching
            })
        })
    }
}

impl Drop for Prefetching {
    fn drop(&mut self) {
        PREFETCHING.with(|c| c.set(c.get().saturating_sub(1)));
    }
}

/// `slice_prefetch = N`: starts background fetches of slices `from .. from + N` that
/// are neither stored nor being fetched, each led on its slice's inflight lock (so a
/// client that asks for it meanwhile follows it) and stored like any slice; one that
/// disagrees with the reference is not stored. At most [`MAX_PREFETCHES`] per worker.
fn prefetch(
    ctx: &Ctx<'_>,
    conn: &Conn,
    ex: &mut Exchange,
    sl: &Slicer,
    reference: &Reference,
    from: u64,
) {
    let n = u64::from(ctx.p.rules.slice_prefetch);
    for m in from..from.saturating_add(n) {
        if sl.bytes(m, reference.total).is_empty() {
            return;
        }
        let sc = slice_ctx(ctx, sl, m);
        if sc.cache.index_probe(sc.key_hash) {
            continue;
        }
        let Some(count) = Prefetching::start() else {
            return;
        };
        let Join::Leader(handle) = sc.cache.inflight().join(sc.key_hash) else {
            continue; // someone fetches it already
        };
        crate::handlers::context::upstream_fields(conn, ex, ctx.shared, ctx.route);
        let fields = ex.upstream_fields.clone();
        let mut extra = Vec::with_capacity(48);
        edge_http::write_header(&mut extra, "Range", sl.range_value(m).as_bytes());
        let asked = sl.span(m);
        let head = super::ctx::fill_head(
            &sc,
            &ex.req,
            ex.client_addr().ip(),
            &extra,
            fields.as_deref(),
        );
        let host = fields.as_ref().and_then(|f| f.host.clone());
        let Some(owned) = OwnedCtx::new(&sc) else {
            return;
        };
        let req = ex.req.headers.clone();
        let expect = Reference {
            meta: reference.meta.clone(),
            total: reference.total,
        };
        let sl = *sl;
        tokio::task::spawn_local(async move {
            let _count = count;
            let Some(c) = owned.ctx() else {
                return;
            };
            let t0 = SystemTime::now();
            let up = crate::upstream::fetch_with(
                c.w.upstream(),
                None,
                &c.p.upstream,
                &head,
                &edge_http::Method::Get,
                c.affinity(),
                host.as_deref(),
            )
            .await;
            if let Ok(up) = up {
                let times = (t0, SystemTime::now());
                // A stored slice's copy runs in its own task; anything else is dropped.
                let (handle, expect) = (Some(handle), Some(&expect));
                let _ = take(&c, &req, up, times, &sl, m, asked, handle, expect).await;
            }
        });
    }
}

/// Checks a slice against the reference: on a disagreement every slice of the object
/// is purged, the mismatch counted, and `Some(Changed)` returned.
fn check(ctx: &Ctx<'_>, reference: &Reference, got: &Got) -> Option<Sent> {
    let agrees = match got {
        Got::Mismatch => false,
        g => g.meta().is_none_or(|(m, t)| reference.agrees(m, t)),
    };
    if agrees {
        return None;
    }
    ctx.w.stats().slice_mismatches.fetch_add(1, Relaxed);
    let n = purge_slices(ctx);
    tracing::warn!(
        "slice: {} changed between slices (ETag, Last-Modified or length); {n} slices purged",
        ctx.key
    );
    Some(Sent::Changed)
}

/// Purges every slice of this request's object from every cache of the location.
fn purge_slices(ctx: &Ctx<'_>) -> usize {
    let target = edge_cache::purge::PurgeTarget::Key(ctx.key.clone());
    edge_cache::purge_all(&ctx.p.caches, &target, false)
}

/// The slice after `n0` that the first range needs, if any.
fn second_slice(sl: &Slicer, ranges: &[Range<u64>], n0: u64) -> Option<u64> {
    let r = ranges.first()?;
    let slices = sl.covering(r);
    let next = n0.max(*slices.start()) + 1;
    (next <= *slices.end() && next > n0).then_some(next)
}

/// Whether slice `n` is in the index (an in-memory probe; it may still be stale).
fn present(ctx: &Ctx<'_>, sl: &Slicer, n: u64) -> bool {
    let h = key_hash(&edge_cache::key::slice_key(&ctx.key, sl.size, n));
    pick(&ctx.p.caches, h).index_probe(h)
}

/// HIT when the first slice was a hit and every other wanted slice is stored (checked
/// for up to [`MAX_PROBES`] slices), MISS otherwise.
fn status_of(ctx: &Ctx<'_>, sl: &Slicer, first_hit: bool, ranges: &[Range<u64>]) -> CacheStatus {
    if !first_hit {
        return CacheStatus::Miss;
    }
    let mut probes = 0u64;
    for r in ranges.iter().filter(|r| !r.is_empty()) {
        for n in sl.covering(r) {
            probes += 1;
            if probes > MAX_PROBES || !present(ctx, sl, n) {
                return CacheStatus::Miss;
            }
        }
    }
    CacheStatus::Hit
}

/// The request context of slice `n`: its key, hash and cache (slices spread over the
/// location's caches by their own hash); fetches keep the object's upstream affinity.
fn slice_ctx<'a>(ctx: &Ctx<'a>, sl: &Slicer, n: u64) -> Ctx<'a> {
    let key = edge_cache::key::slice_key(&ctx.key, sl.size, n);
    let hash = key_hash(&key);
    Ctx {
        w: ctx.w,
        shared: ctx.shared,
        route: ctx.route,
        p: ctx.p,
        affinity: ctx.affinity,
        cache: pick(&ctx.p.caches, hash),
        key,
        key_hash: hash,
    }
}

/// Gets the bytes `want` of slice `n` (inside its span): a stored slice that holds
/// them, a fill in progress that will (collapsed per slice), a stored part of the
/// slice completed now ([`complete`]), or only `want` fetched now (the slice is then
/// stored partially). `expect` is the reference a fetched slice must agree with (None
/// for the first).
async fn obtain(
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

/// Whether the slice (or fill) with metadata `meta` holds every byte of `want`.
fn holds(meta: &ObjectMeta, want: &Range<u64>) -> bool {
    Part::of(meta).is_some_and(|p| p.covers(want))
}

/// A fresh stored slice `n`: the whole slice or a part of it (a stale one, or one
/// that is not inside the slice, is fetched again).
async fn stored(sc: &Ctx<'_>, ex: &Exchange, sl: &Slicer, n: u64) -> Option<HitEntry> {
    match super::lookup::lookup(sc, &ex.req.headers, SystemTime::now()).await {
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
    let (up, t0, t1) = super::fill::fetch_origin(sc, conn, ex, &extra).await;
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
/// its own task ([`super::partial::combine`]) that every client streams like a fill.
/// A part without a strong validator, or one that `want` holds on both sides, is
/// replaced by a fetch of both together. An answer for another representation is a
/// mismatch (the first slice's purges every slice here; later ones are purged by
/// [`check`]).
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
    let (up, t0, t1) = super::fill::fetch_origin(sc, conn, ex, &extra).await;
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
        let mut sink = super::partial::Sink::new(Some(store), Vec::new(), 0..0);
        let res = super::partial::combine(&c, None, &e, &p, &missing, up, &mut sink).await;
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
async fn take(
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
            if !matches!(up.head.body, BodyKind::Length(l) if l == part.len()) {
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
    let mut block = Vec::with_capacity(meta.header_block.len() + 48);
    super::head::copy_block_without(&meta.header_block, &["content-range"], &mut block);
    edge_http::write_header(
        &mut block,
        "Content-Range",
        part.content_range(&part.range()).as_bytes(),
    );
    meta.header_block = block;
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
            let _ = super::fill::pump(&c, None, up, Some(store), None).await;
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
    let cache = sc.cache.clone();
    let writer =
        sc.w.file_io
            .blocking(move || cache.begin_write_keyed(meta.clone()).map(|w| (w, meta)))
            .await;
    let (writer, meta) = match writer {
        Ok(Ok((w, m))) => (Some(w), m),
        _ => (
            None,
            ObjectMeta::new(sc.key.clone(), 206, SystemTime::now()),
        ),
    };
    let Some(store) = publish(writer, Some(handle)) else {
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

/// Cuts an origin's whole body into stored slices as it passes (an origin that
/// ignores `Range`): each slice from its first byte to its last, written like a fill.
struct Cutter {
    sl: Slicer,
    total: u64,
    /// The whole response's slice metadata (its `Content-Range` is replaced per slice).
    meta: ObjectMeta,
    /// The slice being written and its store.
    open: Option<(u64, Store)>,
    /// No slice starting at or past this offset is stored (the end of the slice that
    /// holds the client's last byte: the relay stops there).
    until: u64,
}

impl Cutter {
    fn new(sl: Slicer, total: u64, meta: ObjectMeta, want: &Range<u64>) -> Cutter {
        let last = sl.of(want.end.saturating_sub(1).max(want.start));
        Cutter {
            sl,
            total,
            meta,
            open: None,
            until: sl.bytes(last, total).end,
        }
    }

    /// Stores `data`, the body bytes at object offset `at`.
    async fn write(&mut self, ctx: &Ctx<'_>, mut at: u64, mut data: &[u8]) {
        while !data.is_empty() {
            let n = self.sl.of(at);
            let bytes = self.sl.bytes(n, self.total);
            if self.open.as_ref().is_none_or(|(m, _)| *m != n) {
                self.open = None; // a slice not written from its start is dropped
                if at == bytes.start && at < self.until {
                    self.open = self.begin(ctx, n, &bytes).await.map(|s| (n, s));
                }
            }
            let k = ((bytes.end - at) as usize).min(data.len());
            if let Some((_, s)) = self.open.as_mut() {
                if !s.write(&ctx.w.file_io, &data[..k]).await {
                    self.open = None;
                }
            }
            at += k as u64;
            data = &data[k..];
            if at == bytes.end {
                if let Some((_, s)) = self.open.take() {
                    s.finish(&ctx.w.file_io).await;
                }
            }
        }
    }

    /// Opens the writer of slice `n`.
    async fn begin(&self, ctx: &Ctx<'_>, n: u64, bytes: &Range<u64>) -> Option<Store> {
        let sc = slice_ctx(ctx, &self.sl, n);
        if sc.cache.index_probe(sc.key_hash) {
            return None; // stored already
        }
        let part = Part {
            start: bytes.start,
            end: bytes.end,
            total: self.total,
        };
        let mut meta = self.meta.clone();
        let mut block = Vec::with_capacity(meta.header_block.len());
        super::head::copy_block_without(&meta.header_block, &["content-range"], &mut block);
        let cr = part.content_range(&part.range());
        edge_http::write_header(&mut block, "Content-Range", cr.as_bytes());
        meta.header_block = block;
        meta.body_len = part.len();
        meta.key = match meta.key.split_once('\0') {
            Some((_, values)) => format!("{}\0{values}", sc.key),
            None => sc.key.clone(),
        };
        let cache = sc.cache.clone();
        let w = ctx
            .w
            .file_io
            .blocking(move || cache.begin_write_keyed(meta))
            .await
            .ok()?
            .ok()?;
        publish(Some(w), None)
    }

    /// Whether a slice is being written (the relay reads on to its end).
    fn writing(&self) -> bool {
        self.open.is_some()
    }
}

/// Relays an origin response whose body starts at object offset `at`: the bytes of
/// `want` go to the client as they arrive, and with `cut` every whole slice that
/// passes is stored. Reads until `want` is sent and the slice being stored is
/// complete (a client gone meanwhile still completes that slice). Returns the bytes
/// sent.
async fn relay(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    mut up: UpstreamResponse,
    at: u64,
    want: Range<u64>,
    mut cut: Option<Cutter>,
) -> (Result<(), ExchangeError>, u64) {
    let group = &ctx.p.upstream;
    let send = ctx.shared.timeouts.send;
    ex.cache.fwd_status = Some(up.head.status);
    let mut dec = BodyDecoder::new(up.head.body, None).upstream();
    let mut pos = at;
    let mut sent = 0u64;
    let mut client: Option<std::io::Error> = None;
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
                if let Some(c) = cut.as_mut() {
                    c.write(ctx, pos, d.data).await;
                }
                let end = pos + d.data.len() as u64;
                let (lo, hi) = (pos.max(want.start), end.min(want.end));
                if client.is_none() && lo < hi {
                    let part = &d.data[(lo - pos) as usize..(hi - pos) as usize];
                    match conn.write_all(part, send).await {
                        Ok(()) => sent += part.len() as u64,
                        Err(e) => client = Some(e),
                    }
                }
                pos = end;
            }
            let n = d.consumed;
            bytes::Buf::advance(&mut up.buf, n);
            if n == 0 {
                break;
            }
        }
        if let Some(b) = bad {
            break Err(b);
        }
        let storing = cut.as_ref().is_some_and(Cutter::writing);
        if dec.is_done() || (!storing && (client.is_some() || pos >= want.end)) {
            break Ok(());
        }
        match up.read_more(group, UP_BUF, ctx.w.stats()).await {
            Ok(0) => break Err("upstream closed before the body ended".into()),
            Ok(_) => {}
            Err(why) => break Err(why),
        }
    };
    let done = dec.is_done();
    up.release(&ctx.w.pool, group, done);
    let r = match (client, result) {
        (Some(e), _) => Err(ExchangeError::Client(e)),
        (None, Err(why)) => Err(ExchangeError::Aborted(why)),
        (None, Ok(())) if pos < want.end => {
            Err(ExchangeError::Aborted("upstream body ended early".into()))
        }
        (None, Ok(())) => Ok(()),
    };
    (r, sent)
}

/// A 502 before any byte of the body was sent.
async fn bad_gateway(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    why: &str,
) -> Result<(), ExchangeError> {
    tracing::error!(
        "upstream \"{}\": {why} while proxying \"{} {}\"",
        ctx.p.upstream.name,
        ex.req.method.as_str(),
        ex.req.target
    );
    let page = crate::http::respond::error_page(502);
    let extra = crate::upstream::relay::error_headers(ex);
    crate::http::respond::respond(
        conn,
        ex,
        &ctx.shared.timeouts,
        502,
        "text/html",
        &page,
        &extra,
    )
    .await
}
