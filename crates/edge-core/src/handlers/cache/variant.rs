//! Compressed copies on the cache path: a hit never compresses.
//!
//! How it fits: on a location with `compress`, [`super::handle`] first asks the cache
//! for the stored copy in the coding this request prefers
//! ([`edge_cache::Cache::lookup_coded`]); a copy is served like any hit (sendfile, the
//! RAM tier, Range, 304 on its own `ETag`). When there is none, the request goes the
//! usual way, and wherever the identity object would be sent to a client that wants a
//! coding ([`super::deliver`]: stored objects, fills in progress) [`serve`] takes over: the first such request leads the production
//! of the copy (a collapsed fill keyed by the copy: later requests for it stream the
//! copy as it is written, none compresses again), reading the identity body (from its
//! file, the RAM tier, or the growing temp file of a miss), compressing it chunk by
//! chunk on the offload pool, and writing the copy (`edge_cache::coded`). A response
//! whose copy cannot be stored (disk full) is compressed on the fly for its client
//! only. Objects the origin encoded are decoded on the fly for a client that does not
//! accept their coding. A `Range` request for an object without its copy gets the
//! identity's range (the copy is made by the next whole request).

use super::ctx::{CacheStatus, Ctx, OwnedCtx};
use super::head::finish_head;
use super::store::{publish, Store};
use super::stream::{stream_fill, Leader};
use crate::compress::{self, Accepted, Choice, Coding, Filter, Plan};
use crate::http::conn::Conn;
use crate::http::exchange::{BodyLen, Exchange, ExchangeError};
use edge_cache::inflight::known_len;
use edge_cache::{policy, Fill, FillHead, HitBody, HitEntry, Join, ObjectMeta, WaitHead};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::SystemTime;

/// Identity bytes read and compressed at a time.
const CHUNK: usize = 64 * 1024;

/// The coding a request wants from a compressing location, when its stored copy may be
/// served: the client's best choice among the location's codings.
pub fn wanted_coding(ctx: &Ctx<'_>, ex: &Exchange) -> Option<Coding> {
    let pol = ctx.p.compress.as_ref()?;
    match Accepted::parse(ex.req.headers.get_all("accept-encoding")).choose(&pol.codings) {
        Choice::Coding(c) => Some(c),
        Choice::Identity => None,
    }
}

/// Whether `identity` (a stored object's metadata) is one whose copy in `c` this
/// location would make: what [`plan_for`] decides for a client that wants `c`.
pub fn copy_wanted(ctx: &Ctx<'_>, identity: &ObjectMeta) -> bool {
    let Some(pol) = ctx.p.compress.as_ref() else {
        return false;
    };
    let facts =
        compress::facts_of_block(identity.status, &identity.header_block, known_len(identity));
    pol.compressible(
        facts.status,
        facts.content_type,
        std::iter::empty(),
        facts.encoded,
        facts.body_len,
    ) && !facts.no_transform
}

/// What the stored object `meta` needs for this client, when that is not "send it as it
/// is": compress (make or stream its copy), or decode. None also for a copy itself, a
/// `Range` request (the identity's range is sent), and when the compression pool is
/// full (sent uncompressed, counted).
pub fn plan_for(ctx: &Ctx<'_>, ex: &Exchange, meta: &ObjectMeta) -> Option<Plan> {
    let pol = ctx.p.compress.as_ref()?;
    if meta.key.contains(edge_cache::key::CODING_MARK) {
        return None;
    }
    let accepted = Accepted::parse(ex.req.headers.get_all("accept-encoding"));
    let facts = compress::facts_of_block(meta.status, &meta.header_block, known_len(meta));
    match compress::plan(pol, &accepted, &facts) {
        Plan::AsIs { .. } => None,
        Plan::Encode(_) if ex.req.headers.contains("range") => None,
        Plan::Encode(_) if ctx.w.compress.saturated(pol) => {
            ctx.w.stats().compress_overloads.fetch_add(1, Relaxed);
            None
        }
        p => Some(p),
    }
}

/// Where the identity body comes from.
pub enum Source {
    /// A stored object (file or RAM body).
    Hit(HitEntry),
    /// A fill in progress (a miss): its temp file as it grows.
    Fill {
        fill: Arc<Fill>,
        head: Arc<FillHead>,
    },
}

impl Source {
    fn meta(&self) -> &Arc<ObjectMeta> {
        match self {
            Source::Hit(e) => &e.meta,
            Source::Fill { head, .. } => &head.meta,
        }
    }

    fn reader(self) -> SourceReader {
        let fill = match &self {
            Source::Fill { fill, head } => Some(fill.reader(head.clone())),
            Source::Hit(_) => None,
        };
        SourceReader {
            src: self,
            pos: 0,
            fill,
        }
    }
}

/// Reads an identity body in chunks, through the worker's file I/O backend.
struct SourceReader {
    src: Source,
    pos: u64,
    fill: Option<edge_cache::inflight::FillReader>,
}

impl SourceReader {
    /// The next chunk (None at the end of the body).
    async fn next(&mut self, io: &crate::aio::FileBackend) -> Result<Option<Vec<u8>>, String> {
        let (file, at, n) = match (&self.src, self.fill.as_mut()) {
            (Source::Hit(e), _) => {
                if self.pos >= e.body_len {
                    return Ok(None);
                }
                let n = (e.body_len - self.pos).min(CHUNK as u64) as usize;
                match &e.body {
                    HitBody::Mem(b) => {
                        let s = self.pos as usize;
                        self.pos += n as u64;
                        return Ok(Some(b[s..s + n].to_vec()));
                    }
                    HitBody::File(f) => (&**f, e.body_offset + self.pos, n),
                }
            }
            (Source::Fill { head, .. }, Some(r)) => {
                let avail = match r.wait_available().await {
                    Ok(Some(a)) => a,
                    Ok(None) => return Ok(None),
                    Err(e) => return Err(e.to_string()),
                };
                let n = (avail.end - avail.start).min(CHUNK as u64) as usize;
                r.advance(n as u64);
                (&*head.file, head.body_offset + avail.start, n)
            }
            (Source::Fill { .. }, None) => return Ok(None),
        };
        let (res, buf) = io
            .read_exact_append(file, at, n, Vec::with_capacity(n))
            .await;
        res.map_err(|e| format!("reading the cached object: {e}"))?;
        if matches!(self.src, Source::Hit(_)) {
            self.pos += n as u64;
        }
        Ok(Some(buf))
    }
}

/// Sends the identity object in `src` to this client according to `plan` (from
/// [`plan_for`]); the caller has set the cache status. `extra` are header lines this
/// client gets besides the stored ones (a fill leader's `Set-Cookie`).
pub async fn serve(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    src: Source,
    plan: Plan,
    extra: &[u8],
) -> Result<(), ExchangeError> {
    let Some(pol) = ctx.p.compress.as_ref() else {
        return Err(ExchangeError::Aborted(
            "compression plan without a policy".into(),
        ));
    };
    let meta = src.meta().clone();
    if let (Plan::Encode(c), Source::Hit(_)) = (plan, &src) {
        // The copy may be stored already: the identity was just revalidated (which
        // keeps its copies), or another request finished it since our lookup.
        let copy = ctx
            .cache
            .lookup_coded(
                Some(&ctx.w.local),
                &ctx.w.file_io,
                &ctx.key,
                ctx.key_hash,
                &ex.req.headers,
                SystemTime::now(),
                c.token(),
                |identity| identity.body_id() == meta.body_id(),
            )
            .await;
        if let Some(hit) = copy {
            ctx.w.stats().compress_variant_hits.add(1);
            // The status marked stays: a copy that another request stored since our
            // lookup answers a hit as a hit (the RAM tier may take it), a revalidated
            // identity's copy as revalidated.
            let st = if ex.cache_status == Some(CacheStatus::Hit.as_str()) {
                CacheStatus::Hit
            } else {
                CacheStatus::Revalidated
            };
            return Box::pin(super::hit::send(ctx, conn, ex, hit, st)).await;
        }
    }
    match plan {
        Plan::Encode(c) if !ex.is_head() && ctx.p.rules.cache_lock => {
            produce_or_follow(ctx, conn, ex, src, c, extra).await
        }
        Plan::Encode(c) => {
            let f = if ex.is_head() {
                None
            } else {
                ctx.w.compress.encoder(pol, c, ctx.w.stats())
            };
            on_the_fly(ctx, conn, ex, src, &meta, plan, f, extra).await
        }
        Plan::Decode(c) => {
            let f = if ex.is_head() {
                None
            } else {
                ctx.w.compress.decoder(pol, c, ctx.w.stats())
            };
            on_the_fly(ctx, conn, ex, src, &meta, plan, f, extra).await
        }
        Plan::AsIs { .. } => Err(ExchangeError::Aborted("nothing to transform".into())),
    }
}

/// Leads the production of the copy in `c` (storing it while this client streams it),
/// or follows a production already under way.
async fn produce_or_follow(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    src: Source,
    c: Coding,
    extra: &[u8],
) -> Result<(), ExchangeError> {
    let identity = src.meta().clone();
    let copy = edge_cache::coded::coded_meta(&identity, c.token());
    let hash = edge_cache::key_hash(&copy.key);
    match ctx.cache.inflight().join(hash) {
        Join::Leader(handle) => {
            let writer = ctx.w.file_io.begin_write(ctx.cache, copy).await;
            let filter = match ctx.p.compress.as_ref() {
                Some(pol) => ctx.w.compress.encoder(pol, c, ctx.w.stats()),
                None => None,
            };
            let (Some(writer), Some(filter)) = (writer, filter) else {
                // No room on disk (or the pool filled up meanwhile): this client gets
                // its compression on the fly; followers fetch alone.
                handle.uncacheable();
                let pol = ctx.p.compress.as_ref();
                let f = pol.and_then(|p| ctx.w.compress.encoder(p, c, ctx.w.stats()));
                return on_the_fly(ctx, conn, ex, src, &identity, Plan::Encode(c), f, extra).await;
            };
            let Some(store) = publish(Some(writer), Some(handle)) else {
                let pol = ctx.p.compress.as_ref();
                let f = pol.and_then(|p| ctx.w.compress.encoder(p, c, ctx.w.stats()));
                return on_the_fly(ctx, conn, ex, src, &identity, Plan::Encode(c), f, extra).await;
            };
            let fill = store.handle.as_ref().map(|h| h.fill().clone());
            let head = match fill.as_ref().map(|f| f.state()) {
                Some(edge_cache::FillState::Streaming { head, .. }) => head,
                _ => return Err(ExchangeError::Aborted("compressed copy: no head".into())),
            };
            let (Some(fill), Some(owned)) = (fill, OwnedCtx::new(ctx)) else {
                return Err(ExchangeError::Aborted("compressed copy: no route".into()));
            };
            let from_origin = matches!(src, Source::Fill { .. });
            tokio::task::spawn_local(produce(owned, src, filter, store));
            // The leader's client streams the copy as it is written, like its followers.
            let leader = Leader {
                extra: extra.to_vec(),
                relay: None,
                from_origin,
            };
            stream_fill(ctx, conn, ex, &fill, head, Some(leader)).await
        }
        Join::Follower(f) => match f.wait_head(ctx.p.rules.cache_lock_timeout).await {
            WaitHead::Head(head) => {
                ex.cache.collapsed = true;
                stream_fill(ctx, conn, ex, &f, head, None).await
            }
            WaitHead::Retry | WaitHead::Uncacheable | WaitHead::TimedOut => {
                let pol = ctx.p.compress.as_ref();
                let f = pol.and_then(|p| ctx.w.compress.encoder(p, c, ctx.w.stats()));
                on_the_fly(ctx, conn, ex, src, &identity, Plan::Encode(c), f, extra).await
            }
        },
    }
}

/// The production task: the identity body through the encoder into the copy's file
/// (each write tells the copy's readers); committed at the end. Any failure fails the
/// copy's fill (its readers are cut) and stores nothing.
async fn produce(owned: OwnedCtx, src: Source, mut filter: Filter, mut store: Store) {
    let Some(ctx) = owned.ctx() else {
        return;
    };
    let io = &ctx.w.file_io;
    let mut reader = src.reader();
    let mut out = Vec::new();
    loop {
        match reader.next(io).await {
            Ok(Some(chunk)) => {
                out.clear();
                if filter.push(&chunk, &mut out).await.is_err() {
                    return;
                }
                if !out.is_empty() && !store.write(io, &out).await {
                    return;
                }
            }
            Ok(None) => break,
            Err(why) => {
                tracing::debug!("compressed copy of {} abandoned: {why}", ctx.key);
                return;
            }
        }
    }
    out.clear();
    if filter.finish(&mut out).await.is_err() || !store.write(io, &out).await {
        return;
    }
    filter.account(ctx.w.stats());
    if store.finish(io).await {
        ctx.w.stats().compress_variants_stored.fetch_add(1, Relaxed);
    }
}

/// The identity body through `filter` straight to this client, nothing stored: the
/// head of the transformed representation, then the body chunked (or until the close
/// for HTTP/1.0). Without a filter (a HEAD, or no room on the pool for an encoding)
/// the head and body are those of the plan when there is a filter, else the
/// identity's.
#[allow(clippy::too_many_arguments)]
async fn on_the_fly(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    src: Source,
    meta: &ObjectMeta,
    plan: Plan,
    mut filter: Option<Filter>,
    extra: &[u8],
) -> Result<(), ExchangeError> {
    let send = ctx.shared.timeouts.send;
    // An encoding without a filter (no room on the pool): sent as it is, with Vary.
    let plan = match (&plan, &filter) {
        (Plan::Encode(_), None) if !ex.is_head() => Plan::AsIs { vary: true },
        _ => plan,
    };
    let now = SystemTime::now();
    let age = policy::age(meta, now).as_secs();
    ex.cache.ttl = Some(policy::ttl_secs(meta, now));
    let mut out = Vec::with_capacity(512 + meta.header_block.len());
    ex.begin_stored_head(&mut out, meta.status);
    out.extend_from_slice(&compress::transform_block(&meta.header_block, plan));
    let transformed = !matches!(plan, Plan::AsIs { .. });
    let len = match known_len(meta) {
        _ if transformed => BodyLen::Unknown,
        Some(n) => {
            edge_http::write_header_u64(&mut out, "Content-Length", n);
            BodyLen::Known(n)
        }
        None => BodyLen::Unknown,
    };
    out.extend_from_slice(extra);
    let framing = finish_head(ex, age, &mut out, len);
    conn.write_all(&out, send).await?;
    if ex.is_head() {
        return Ok(());
    }
    let io = &ctx.w.file_io;
    let mut reader = src.reader();
    let mut coded = Vec::new();
    let mut sent = 0u64;
    loop {
        let chunk = match reader.next(io).await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(why) => return Err(ExchangeError::Aborted(why)),
        };
        out.clear();
        match filter.as_mut() {
            Some(f) => {
                coded.clear();
                f.push(&chunk, &mut coded)
                    .await
                    .map_err(|e| ExchangeError::Aborted(format!("response body transform: {e}")))?;
                framing.frame(&mut out, &coded);
                sent += coded.len() as u64;
            }
            None => {
                framing.frame(&mut out, &chunk);
                sent += chunk.len() as u64;
            }
        }
        if !out.is_empty() {
            conn.write_all(&out, send).await?;
        }
    }
    out.clear();
    if let Some(f) = filter.as_mut() {
        coded.clear();
        f.finish(&mut coded)
            .await
            .map_err(|e| ExchangeError::Aborted(format!("response body transform: {e}")))?;
        framing.frame(&mut out, &coded);
        sent += coded.len() as u64;
        f.account(ctx.w.stats());
    }
    framing.finish(&mut out);
    if !out.is_empty() {
        conn.write_all(&out, send).await?;
    }
    ex.body_bytes_sent = sent;
    ctx.w.stats().cache_bytes_hit.add(sent);
    Ok(())
}

#[cfg(test)]
mod tests {
    /// A purge by key finds an object's copies by trying each coding the cache knows
    /// (`edge_cache::coded::CODINGS`): every coding the server can store must be there.
    #[test]
    fn every_stored_coding_is_one_a_purge_looks_for() {
        for c in edge_compress::Coding::ALL {
            assert!(
                edge_cache::coded::CODINGS.contains(&c.token()),
                "{} missing from edge_cache::coded::CODINGS",
                c.token()
            );
        }
    }
}
