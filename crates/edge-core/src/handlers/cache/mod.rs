//! The cache on the data path: a proxied location with `cache = [...]` answers GET and
//! HEAD from the disk cache (`edge-cache`), and fills it from the origin.
//!
//! How it fits: the router ([`crate::handlers::dispatch`]) sends every request of a cached
//! location here. This module builds the cache key, applies `cache_bypass`/`no_cache`/
//! `cache_min_uses`, picks the cache by key hash and looks the key up, then hands over
//! to one file per outcome:
//! - [`hit`]: a fresh object (and stale ones served as STALE/UPDATING): 304, Range,
//!   HEAD, body by sendfile/pread; its heads (header block sent verbatim) come from
//!   [`head`], which the miss paths ([`stream`], [`partial`], [`slice`], [`variant`])
//!   share;
//! - [`fill`]: a miss: one leader fetches and writes the object (the origin-to-disk
//!   copy runs in its own task at the origin's pace);
//! - [`stream`]: every client of a fill in progress (the followers, and the leader's
//!   own client) streams the same temp file as it grows;
//! - [`revalidate`]: an expired object: conditional request, 304 → REVALIDATED, errors
//!   and 5xx → STALE when allowed, background refresh → UPDATING;
//! - [`variant`]: compressed copies (made once from the identity object, then served as
//!   hits) and on-the-fly transforms, entered through [`deliver`], which every path
//!   that answers from the cache goes through; [`store`]: writing an object while
//!   its clients stream it (misses and copies);
//! - [`slice`]: a location with `slice = "1m"` caches objects as fixed-size slices,
//!   each fetched with its own `Range` and served from the slices a request covers;
//! - [`partial`]: stored partial objects (an origin's 206; a fresh lookup of one goes
//!   there instead of [`deliver`]): ranges inside them served, missing bytes fetched and
//!   combined; and misses that forward the client's `Range` (`range_fetch = "forward"`);
//! - [`purge`]: the `PURGE` method and the admin `POST /purge`;
//! - [`invalidate`]: unsafe methods (POST, PUT, DELETE, PATCH, unknown ones) go to the
//!   origin, and a 2xx/3xx answer invalidates what is stored for the URI (RFC 9111 4.4).
//!
//! OPTIONS and TRACE go to the origin uncached (`BYPASS`). Every response of a cached
//! location carries `X-Cache-Status` (also in the access log and `/metrics`).

pub mod ctx;
pub mod deliver;
pub mod fill;
pub mod head;
pub mod hit;
pub mod invalidate;
pub mod key;
pub mod lookup;
pub mod partial;
pub mod purge;
pub mod revalidate;
pub mod slice;
pub mod store;
pub mod stream;
pub mod variant;

use crate::handlers::services::Services;
use crate::http::conn::Conn;
use crate::http::exchange::{Exchange, ExchangeError};
use crate::state::route::{ProxyRoute, Route};
use crate::state::Shared;
use ctx::{mark, CacheStatus, Ctx, MayStore};
use edge_cache::{key_hash, pick, policy, Join, Lookup};
use edge_http::Method;
use lookup::lookup;
pub use lookup::verified;
use std::rc::Rc;
use std::sync::Arc;
use std::time::SystemTime;

/// How many times one request joins a fill again after its leader failed before the
/// head (each retry can make it the leader); past this it fetches uncached.
pub const MAX_JOINS: usize = 4;

/// Entry from the router for a proxied location with caches.
///
/// The branches that wait on the origin (misses, revalidations, collapsed followers,
/// purges, unsafe methods, bypasses) are boxed: their futures are large (~12 KiB of
/// state), and unboxed they would make every connection's session future that big
/// (16 KiB measured: allocated and copied at each accept, and held by idle
/// connections). Boxed, a session is ~4 KiB and only the request that goes to the
/// origin pays an allocation, next to a network round trip.
pub async fn handle(
    w: &Rc<Services>,
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Arc<Shared>,
    route: &Arc<Route>,
    p: &ProxyRoute,
) -> Result<(), ExchangeError> {
    let rules = &p.rules;
    if ex.req.method == Method::Purge {
        return Box::pin(purge::handle_method(w, conn, ex, shared, route, p)).await;
    }
    if !is_safe(&ex.req.method) {
        return Box::pin(invalidate::pass_unsafe(w, conn, ex, shared, route, p)).await;
    }
    let client = crate::handlers::context::client_of(conn, ex, shared);
    let cacheable_method = matches!(ex.req.method, Method::Get | Method::Head);
    if !cacheable_method
        || rules.cache_bypass.any(&ex.req)
        || policy::request_bypass(&ex.req.headers, &p.policy)
    {
        mark(w, ex, CacheStatus::Bypass);
        let vars = crate::handlers::context::vars(client, ex, shared);
        let affinity = key::affinity(&p.upstream, key::KeySpec::of(route), &vars, None);
        crate::handlers::context::upstream_fields(conn, ex, shared, route);
        return Box::pin(crate::upstream::relay::proxy_pass(
            w.upstream(),
            conn,
            ex,
            &shared.timeouts,
            &p.upstream,
            w.compression(p.compress.as_ref()),
            affinity,
        ))
        .await;
    }
    // The key and the upstream affinity (a hash of the key or of `hash_key`, only for
    // a consistent-hash group), from one template context when they need one.
    let (key, affinity) = key::key_and_affinity(route, &p.upstream, &ex.req, || {
        crate::handlers::context::vars(client, ex, shared)
    });
    let primary = key_hash(&key);
    let cache = pick(&p.caches, primary);
    let ctx = Ctx {
        w,
        shared,
        route,
        p,
        affinity,
        key,
        key_hash: primary,
        cache,
    };
    // Whether a miss may be stored: `no_cache` conditions forbid it, and so does
    // `cache_min_uses` until the key was requested often enough (counted on misses).
    if let Some(c) = variant::wanted_coding(&ctx, ex) {
        // The stored copy in the client's coding, when its object is fresh.
        let found = cache
            .lookup_coded(
                Some(&w.local),
                &w.file_io,
                &ctx.key,
                primary,
                &ex.req.headers,
                SystemTime::now(),
                c.token(),
                |identity| variant::copy_wanted(&ctx, identity),
            )
            .await;
        w.publish_local();
        if let Some(hit) = found {
            if let Some(hit) = verified(&ctx, hit).await {
                let hits = &w.stats().compress_variant_hits;
                hits.add(1);
                return hit::serve(&ctx, conn, ex, hit, CacheStatus::Hit).await;
            }
        }
    }
    let no_store = rules.no_cache.any(&ex.req);
    if rules.slice != 0 && !no_store && min_uses_reached(&ctx, &Lookup::Miss, primary) {
        return Box::pin(slice::handle(&ctx, conn, ex)).await;
    }
    let mut alone_store = MayStore::No;
    for _ in 0..MAX_JOINS {
        let now = SystemTime::now();
        let first = lookup(&ctx, &ex.req.headers, now).await;
        if let Lookup::Fresh(hit) = first {
            if hit.meta.status == 206 {
                return Box::pin(partial::serve(&ctx, conn, ex, hit)).await;
            }
            return deliver::stored(&ctx, conn, ex, hit, CacheStatus::Hit).await;
        }
        let store = !no_store && min_uses_reached(&ctx, &first, primary);
        if matches!(first, Lookup::Miss) && partial::forwards(&ctx, ex) {
            // The client's range alone, not collapsed: another request's range may not
            // hold this one's bytes.
            let may = if store { MayStore::Yes } else { MayStore::No };
            return Box::pin(partial::forward_miss(&ctx, conn, ex, may)).await;
        }
        if !store || !rules.cache_lock {
            // Not stored, or no collapsing: this request goes to the origin on its own.
            let may = if store { MayStore::Yes } else { MayStore::No };
            return fetch_alone(&ctx, conn, ex, first, may).await;
        }
        match cache.inflight().join(primary) {
            Join::Leader(handle) => {
                // A fill may have completed between the lookup and the join.
                let again = match first {
                    Lookup::Miss => lookup(&ctx, &ex.req.headers, SystemTime::now()).await,
                    other => other,
                };
                return match again {
                    Lookup::Fresh(hit) => {
                        drop(handle); // followers join again and find the object
                        if hit.meta.status == 206 {
                            return Box::pin(partial::serve(&ctx, conn, ex, hit)).await;
                        }
                        deliver::stored(&ctx, conn, ex, hit, CacheStatus::Hit).await
                    }
                    Lookup::Stale(entry) => {
                        Box::pin(revalidate::revalidate(
                            &ctx,
                            conn,
                            ex,
                            Some(handle),
                            entry,
                            MayStore::Yes,
                        ))
                        .await
                    }
                    Lookup::Miss => {
                        Box::pin(fill::fetch_and_fill(
                            &ctx,
                            conn,
                            ex,
                            Some(handle),
                            CacheStatus::Miss,
                            MayStore::Yes,
                        ))
                        .await
                    }
                };
            }
            Join::Follower(f) => {
                if let Lookup::Stale(entry) = first {
                    // Someone is already refreshing this object.
                    if revalidate::may_serve_updating(&ctx, &entry.meta, now) {
                        return deliver::stored(&ctx, conn, ex, entry, CacheStatus::Updating).await;
                    }
                }
                match Box::pin(deliver::follow(&ctx, conn, ex, &f)).await {
                    deliver::Followed::Done(r) => return r,
                    deliver::Followed::Retry => continue,
                    deliver::Followed::Alone { store } => {
                        alone_store = store;
                        break;
                    }
                }
            }
        }
    }
    // The fill could not be followed (not storable, timed out, another Vary variant) or
    // kept failing: fetch this response on our own.
    Box::pin(fill::fetch_and_fill(
        &ctx,
        conn,
        ex,
        None,
        CacheStatus::Miss,
        alone_store,
    ))
    .await
}

/// A miss or a stale object fetched by this request alone (no collapsing).
async fn fetch_alone(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    first: Lookup,
    may: MayStore,
) -> Result<(), ExchangeError> {
    match first {
        Lookup::Stale(entry) => {
            Box::pin(revalidate::revalidate(ctx, conn, ex, None, entry, may)).await
        }
        _ => {
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

/// RFC 9110 9.2.1: GET, HEAD, OPTIONS and TRACE are safe; every other method (POST,
/// PUT, DELETE, PATCH, unknown ones) may change the resource.
fn is_safe(m: &Method) -> bool {
    matches!(
        m,
        Method::Get | Method::Head | Method::Options | Method::Trace
    )
}

/// `cache_min_uses`: store only once a key was requested this many times (stale
/// entries were stored before, so they always qualify).
fn min_uses_reached(ctx: &Ctx<'_>, first: &Lookup, primary: edge_cache::KeyHash) -> bool {
    let min = ctx.p.rules.cache_min_uses;
    if min <= 1 || matches!(first, Lookup::Stale(_)) {
        return true;
    }
    ctx.cache.note_use(primary) >= min
}
