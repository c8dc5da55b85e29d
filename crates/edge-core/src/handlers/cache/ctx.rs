//! What every step of a cached request shares: the request's context ([`Ctx`], and
//! [`OwnedCtx`] for tasks that outlive it), the `X-Cache-Status` values and the request
//! head of a fill.

use crate::handlers::services::Services;
use crate::http::exchange::Exchange;
use crate::state::route::{Handler, ProxyRoute, Route};
use crate::state::Shared;
use crate::upstream::HeadOptions;
use edge_cache::Cache;
use edge_http::RequestHead;
use std::rc::Rc;
use std::sync::Arc;

/// Request headers never forwarded on a cache fill: the client's validators and
/// ranges concern the client's copy, while a fill needs the whole current object
/// (nginx strips them the same way).
pub const FILL_STRIP: &[&str] = &[
    "range",
    "if-range",
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
];

/// Whether the response a fetch brings may be stored (`no_cache` conditions and
/// `cache_min_uses` may forbid it; the response's own headers decide after that).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MayStore {
    Yes,
    No,
}

/// The `X-Cache-Status` values (docs/contracts.md "On the wire", nginx's
/// `$upstream_cache_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    Hit,
    Miss,
    /// Was stale; refetched with a full response.
    Expired,
    /// Served stale because the origin failed (error, timeout, 5xx).
    Stale,
    /// Served stale while one background fetch refreshes it.
    Updating,
    /// The origin answered the revalidation with 304.
    Revalidated,
    /// Not looked up: `cache_bypass`, honoured client `no-cache`, or a method other than
    /// GET/HEAD.
    Bypass,
}

impl CacheStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "HIT",
            CacheStatus::Miss => "MISS",
            CacheStatus::Expired => "EXPIRED",
            CacheStatus::Stale => "STALE",
            CacheStatus::Updating => "UPDATING",
            CacheStatus::Revalidated => "REVALIDATED",
            CacheStatus::Bypass => "BYPASS",
        }
    }

    /// Index into [`crate::metrics::WorkerStats::cache_status`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Records the status of this response: the header, the access log and the counter.
pub fn mark(w: &Services, ex: &mut Exchange, st: CacheStatus) {
    ex.cache_status = Some(st.as_str());
    w.stats().cache_status[st.index()].add(1);
}

/// What every step of a cached request needs.
pub struct Ctx<'a> {
    pub w: &'a Rc<Services>,
    pub shared: &'a Arc<Shared>,
    pub route: &'a Arc<Route>,
    pub p: &'a ProxyRoute,
    /// The key hash a `consistent_hash` upstream routes this request's fetches on (the
    /// upstream's `hash_key`, else the cache key), computed with the request.
    pub affinity: Option<u64>,
    /// The primary cache key (`http://host/path?query` or the location's template).
    pub key: String,
    /// Its hash, computed once per request.
    pub key_hash: edge_cache::KeyHash,
    pub cache: &'a Arc<Cache>,
}

impl Ctx<'_> {
    /// The key hash a `consistent_hash` upstream routes this request's fetches on: the
    /// cache key (or the upstream's `hash_key`).
    pub fn affinity(&self) -> Option<u64> {
        self.affinity
    }

    /// Whether `use_stale` lists this condition.
    pub fn use_stale(&self, what: crate::config::UseStale) -> bool {
        self.p.rules.use_stale.contains(what)
    }
}

/// A [`Ctx`] that owns its parts, for tasks that outlive the request: background
/// refreshes, and fills whose leader's client streams from the file.
pub struct OwnedCtx {
    pub w: Rc<Services>,
    pub shared: Arc<Shared>,
    pub route: Arc<Route>,
    pub affinity: Option<u64>,
    pub key: String,
    pub key_hash: edge_cache::KeyHash,
    pub cache: Arc<Cache>,
}

impl OwnedCtx {
    /// From a request's context (its route and config generation, so a reload
    /// meanwhile changes nothing).
    pub fn new(ctx: &Ctx<'_>) -> Option<OwnedCtx> {
        Some(OwnedCtx {
            w: ctx.w.clone(),
            shared: ctx.shared.clone(),
            route: ctx.route.clone(),
            affinity: ctx.affinity,
            key: ctx.key.clone(),
            key_hash: ctx.key_hash,
            cache: ctx.cache.clone(),
        })
    }

    /// Borrow it as a [`Ctx`] (None if the route is not a proxy, which `new` rules out
    /// for a route found from a proxied request).
    pub fn ctx(&self) -> Option<Ctx<'_>> {
        let Handler::Proxy(p) = &self.route.handler else {
            return None;
        };
        Some(Ctx {
            w: &self.w,
            shared: &self.shared,
            route: &self.route,
            p,
            affinity: self.affinity,
            key: self.key.clone(),
            key_hash: self.key_hash,
            cache: &self.cache,
        })
    }
}

/// The request head of a cache fill or revalidation: always GET (a HEAD miss fills the
/// whole object), without the client's validators and ranges, plus `extra` lines and
/// the location's `proxy_set_header` (`fields`).
pub fn fill_head(
    ctx: &Ctx<'_>,
    req: &RequestHead,
    peer: std::net::IpAddr,
    extra: &[u8],
    fields: Option<&crate::http::fields::UpstreamFields>,
) -> Vec<u8> {
    crate::upstream::client::request_head(
        req,
        peer,
        &ctx.p.upstream,
        &HeadOptions {
            method: Some("GET"),
            strip: FILL_STRIP,
            extra,
            fields,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_index_the_metric_labels() {
        use crate::metrics::CACHE_STATUSES;
        for st in [
            CacheStatus::Hit,
            CacheStatus::Miss,
            CacheStatus::Expired,
            CacheStatus::Stale,
            CacheStatus::Updating,
            CacheStatus::Revalidated,
            CacheStatus::Bypass,
        ] {
            assert_eq!(CACHE_STATUSES[st.index()], st.as_str().to_ascii_lowercase());
        }
    }
}
