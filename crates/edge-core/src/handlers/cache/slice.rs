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
//!    (`obtain::complete`: only the missing bytes, with `If-Range`, combined with the stored
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
//! cut into slices as the bytes pass ([`relay::relay`]). A sliced location serves identity.
//! With `slice_prefetch = N`, a response that reads a slice to its end starts
//! background fetches of the next N slices ([`prefetch::prefetch`], bounded per worker).
//!
//! This file is the request flow (the three steps above); getting one slice is
//! [`obtain`](mod@obtain), the slice types and the consistency check are [`got`],
//! the relay is [`relay`](mod@relay), background fetches are
//! [`prefetch`](mod@prefetch) and the arithmetic is [`plan`].

mod got;
mod obtain;
pub mod plan;
mod prefetch;
mod relay;

pub use prefetch::MAX_PREFETCHES;

use super::ctx::{mark, CacheStatus, Ctx};
use crate::http::conn::Conn;
use crate::http::exchange::{BodyLen, Exchange, ExchangeError};
use edge_cache::hit::{content_type, not_modified, validators};
use edge_cache::part::Part;
use edge_cache::{key_hash, pick, policy};
use edge_http::{Boundary, MultipartLayout, RangeOutcome};
use got::{check, slice_ctx, Got, Reference, Relayed, Sent};
use obtain::obtain;
use plan::Slicer;
use prefetch::prefetch;
use relay::{relay, Cutter};
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::time::SystemTime;

/// How many times a request starts again after finding its object changed between
/// slices before it answers 502.
const MAX_ATTEMPTS: usize = 3;
/// Most slices whose presence is checked to tell HIT from MISS before the head (an
/// in-memory index probe each); a request over more slices says MISS.
const MAX_PROBES: u64 = 16 * 1024;

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
                up.release(&ctx.w.pool, &ctx.p.upstream);
                (n0, want0) = (0, sl.span(0));
                continue;
            }
            Got::Other(up) if up.head.status == 416 => {
                // An empty object has no slice: fetched whole, uncached.
                up.release(&ctx.w.pool, &ctx.p.upstream);
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
                    let piece = want != bytes && want.end - want.start < self.len;
                    let n = super::hit::send_part(&sc, conn, &e, head, local, self.len, piece);
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
