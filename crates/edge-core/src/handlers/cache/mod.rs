//! The cache on the data path: a proxied location with `cache = [...]` answers GET and
//! HEAD from the disk cache (`edge-cache`), and fills it from the origin.
//!
//! How it fits: [`crate::handlers::proxy::handle`] sends every request of a cached
//! location here. This module builds the cache key, applies `cache_bypass`/`no_cache`/
//! `cache_min_uses`, picks the cache by key hash and looks the key up, then hands over
//! to one file per outcome:
//! - [`hit`]: a fresh object (and stale ones served as STALE/UPDATING): 304, Range,
//!   HEAD, header block sent verbatim, body by sendfile/pread;
//! - [`fill`]: a miss: one leader fetches and writes the object (the origin-to-disk
//!   copy runs in its own task at the origin's pace);
//! - [`stream`]: every client of a fill in progress (the followers, and the leader's
//!   own client) streams the same temp file as it grows;
//! - [`revalidate`]: an expired object: conditional request, 304 → REVALIDATED, errors
//!   and 5xx → STALE when allowed, background refresh → UPDATING;
//! - [`purge`]: the `PURGE` method and the admin `POST /purge`.
//!
//! Other methods go to the origin uncached (`BYPASS`). Every response of a cached
//! location carries `X-Cache-Status` (also in the access log and `/metrics`).

pub mod fill;
pub mod hit;
pub mod purge;
pub mod revalidate;
pub mod stream;

use crate::config::Condition;
use crate::handlers::proxy::{proxy_uncached, HeadOptions};
use crate::server::conn::Conn;
use crate::server::exchange::{Exchange, ExchangeError};
use crate::server::route::{Handler, ProxyRoute, Route};
use crate::server::state::Shared;
use crate::server::worker::Worker;
use edge_cache::{key_hash, pick, policy, Cache, Join, Lookup};
use edge_http::{Method, RequestHead};
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::SystemTime;

/// How many times one request joins a fill again after its leader failed before the
/// head (each retry can make it the leader); past this it fetches uncached.
pub const MAX_JOINS: usize = 4;

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

/// The `X-Cache-Status` values (DESIGN.md "On the wire", nginx's
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
pub fn mark(w: &Worker, ex: &mut Exchange, st: CacheStatus) {
    ex.cache_status = Some(st.as_str());
    w.stats().cache_status[st.index()].fetch_add(1, Relaxed);
}

/// What every step of a cached request needs.
pub struct Ctx<'a> {
    pub w: &'a Rc<Worker>,
    pub shared: &'a Arc<Shared>,
    pub route: &'a Route,
    pub p: &'a ProxyRoute,
    /// The primary cache key (`http://host/path?query` or the location's template).
    pub key: String,
    pub cache: &'a Arc<Cache>,
}

impl Ctx<'_> {
    /// Whether `use_stale` lists this condition.
    pub fn use_stale(&self, what: crate::config::UseStale) -> bool {
        self.route.cfg.use_stale.contains(&what)
    }
}

/// A [`Ctx`] that owns its parts, for tasks that outlive the request: background
/// refreshes, and fills whose leader's client streams from the file.
pub struct OwnedCtx {
    pub w: Rc<Worker>,
    pub shared: Arc<Shared>,
    pub route: Arc<Route>,
    pub key: String,
    pub cache: Arc<Cache>,
}

impl OwnedCtx {
    /// From a request's context; `path` finds the request's route again in the same
    /// config generation (`ctx.shared`), so a reload meanwhile changes nothing.
    pub fn new(ctx: &Ctx<'_>, path: &str) -> Option<OwnedCtx> {
        Some(OwnedCtx {
            w: ctx.w.clone(),
            shared: ctx.shared.clone(),
            route: ctx.shared.router.find(path)?.clone(),
            key: ctx.key.clone(),
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
            key: self.key.clone(),
            cache: &self.cache,
        })
    }
}

/// Entry from the proxy handler for a location with caches.
pub async fn handle(
    w: &Rc<Worker>,
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Arc<Shared>,
    route: &Route,
    p: &ProxyRoute,
) -> Result<(), ExchangeError> {
    let loc = &route.cfg;
    if ex.req.method == Method::Purge {
        return purge::handle_method(w, conn, ex, shared, route, p).await;
    }
    let cacheable_method = matches!(ex.req.method, Method::Get | Method::Head);
    if !cacheable_method
        || conditions_match(&loc.cache_bypass, &ex.req)
        || policy::request_bypass(&ex.req.headers, &p.policy)
    {
        mark(w, ex, CacheStatus::Bypass);
        return proxy_uncached(w, conn, ex, shared, route, p).await;
    }
    let key = cache_key(loc.cache_key.as_deref(), &ex.req);
    let primary = key_hash(&key);
    let cache = pick(&p.caches, primary);
    let ctx = Ctx {
        w,
        shared,
        route,
        p,
        key,
        cache,
    };
    // Whether a miss may be stored: `no_cache` conditions forbid it, and so does
    // `cache_min_uses` until the key was requested often enough (counted on misses).
    let no_store = conditions_match(&loc.no_cache, &ex.req);
    let mut alone_store = false;
    for _ in 0..MAX_JOINS {
        let now = SystemTime::now();
        let first = cache.lookup(&ctx.key, &ex.req.headers, now);
        if let Lookup::Fresh(hit) = first {
            return hit::serve(&ctx, conn, ex, hit, CacheStatus::Hit).await;
        }
        let store = !no_store && min_uses_reached(&ctx, &first, primary);
        if !store {
            return match first {
                Lookup::Stale(entry) => {
                    revalidate::revalidate(&ctx, conn, ex, None, entry, false).await
                }
                _ => fill::fetch_and_fill(&ctx, conn, ex, None, CacheStatus::Miss, false).await,
            };
        }
        if !loc.cache_lock {
            return match first {
                Lookup::Stale(entry) => {
                    revalidate::revalidate(&ctx, conn, ex, None, entry, true).await
                }
                _ => fill::fetch_and_fill(&ctx, conn, ex, None, CacheStatus::Miss, true).await,
            };
        }
        match cache.inflight().join(primary) {
            Join::Leader(handle) => {
                // A fill may have completed between the lookup and the join.
                let again = match first {
                    Lookup::Miss => cache.lookup(&ctx.key, &ex.req.headers, SystemTime::now()),
                    other => other,
                };
                return match again {
                    Lookup::Fresh(hit) => {
                        drop(handle); // followers join again and find the object
                        hit::serve(&ctx, conn, ex, hit, CacheStatus::Hit).await
                    }
                    Lookup::Stale(entry) => {
                        revalidate::revalidate(&ctx, conn, ex, Some(handle), entry, true).await
                    }
                    Lookup::Miss => {
                        fill::fetch_and_fill(&ctx, conn, ex, Some(handle), CacheStatus::Miss, true)
                            .await
                    }
                };
            }
            Join::Follower(f) => {
                if let Lookup::Stale(entry) = first {
                    // Someone is already refreshing this object.
                    if revalidate::may_serve_updating(&ctx, &entry.meta, now) {
                        return hit::serve(&ctx, conn, ex, entry, CacheStatus::Updating).await;
                    }
                }
                match stream::follow(&ctx, conn, ex, &f).await {
                    stream::Followed::Done(r) => return r,
                    stream::Followed::Retry => continue,
                    stream::Followed::Alone { store } => {
                        alone_store = store;
                        break;
                    }
                }
            }
        }
    }
    // The fill could not be followed (not storable, timed out, another Vary variant) or
    // kept failing: fetch this response on our own.
    fill::fetch_and_fill(&ctx, conn, ex, None, CacheStatus::Miss, alone_store).await
}

/// `cache_min_uses`: store only once a key was requested this many times (stale
/// entries were stored before, so they always qualify).
fn min_uses_reached(ctx: &Ctx<'_>, first: &Lookup, primary: edge_cache::KeyHash) -> bool {
    let min = ctx.route.cfg.cache_min_uses;
    if min <= 1 || matches!(first, Lookup::Stale(_)) {
        return true;
    }
    ctx.cache.note_use(primary) >= min
}

/// The primary cache key. Without a template: `http://{host}{path?query}` with the host
/// lower-cased. A template may use nginx's names `$scheme`, `$host`, `$request_uri`
/// (path and query), `$uri` (path) and `$args` (query); anything else is literal.
pub fn cache_key(template: Option<&str>, req: &RequestHead) -> String {
    let host = req.host().unwrap_or("").to_ascii_lowercase();
    let Some(t) = template else {
        let pq = req.path_and_query();
        let mut k = String::with_capacity(7 + host.len() + pq.len());
        k.push_str("http://");
        k.push_str(&host);
        k.push_str(pq);
        return k;
    };
    let mut out = String::with_capacity(t.len() + 64);
    let mut rest = t;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let n = after
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        let value = match &after[..n] {
            "scheme" => Some("http"),
            "host" => Some(host.as_str()),
            "request_uri" => Some(req.path_and_query()),
            "uri" => Some(req.path()),
            "args" => Some(req.query().unwrap_or("")),
            _ => None,
        };
        match value {
            Some(v) => out.push_str(v),
            None => {
                out.push('$');
                out.push_str(&after[..n]);
            }
        }
        rest = &after[n..];
    }
    out.push_str(rest);
    out
}

/// Whether any `cache_bypass`/`no_cache` condition holds. Like nginx's variables, a
/// header, cookie or query argument counts when present with a value that is neither
/// empty nor `0`.
pub fn conditions_match(conds: &[Condition], req: &RequestHead) -> bool {
    conds.iter().any(|c| condition_holds(c, req))
}

fn truthy(v: &str) -> bool {
    let v = v.trim();
    !v.is_empty() && v != "0"
}

fn condition_holds(c: &Condition, req: &RequestHead) -> bool {
    if let Some(h) = &c.header {
        if req
            .headers
            .get_all(h)
            .any(|v| truthy(&String::from_utf8_lossy(v)))
        {
            return true;
        }
    }
    if let Some(name) = &c.cookie {
        let found = req.headers.get_all("cookie").any(|v| {
            String::from_utf8_lossy(v).split(';').any(|pair| {
                let (k, val) = pair.split_once('=').unwrap_or((pair, ""));
                k.trim() == name && truthy(val)
            })
        });
        if found {
            return true;
        }
    }
    if let Some(name) = &c.arg {
        if let Some(q) = req.query() {
            if q.split('&').any(|pair| {
                let (k, val) = pair.split_once('=').unwrap_or((pair, ""));
                k == name && truthy(val)
            }) {
                return true;
            }
        }
    }
    false
}

/// The request head of a cache fill or revalidation: always GET (a HEAD miss fills the
/// whole object), without the client's validators and ranges, plus `extra` lines.
pub fn fill_head(
    ctx: &Ctx<'_>,
    req: &RequestHead,
    peer: std::net::IpAddr,
    extra: &[u8],
) -> Vec<u8> {
    crate::handlers::proxy::request_head(
        req,
        peer,
        &ctx.p.upstream,
        &HeadOptions {
            method: Some("GET"),
            strip: FILL_STRIP,
            extra,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(target: &str, headers: &[(&str, &str)]) -> RequestHead {
        let mut raw = format!("GET {target} HTTP/1.0\r\n"); // 1.0: Host optional
        for (n, v) in headers {
            raw.push_str(&format!("{n}: {v}\r\n"));
        }
        raw.push_str("\r\n");
        edge_http::parse_request(raw.as_bytes(), &edge_http::Limits::default())
            .unwrap()
            .unwrap()
            .0
    }

    #[test]
    fn default_key_is_scheme_host_uri_with_lowercase_host() {
        let r = req("/a/b?x=1", &[("Host", "Example.COM:8080")]);
        assert_eq!(cache_key(None, &r), "http://example.com:8080/a/b?x=1");
        let no_host = req("/p", &[]);
        assert_eq!(cache_key(None, &no_host), "http:///p");
    }

    #[test]
    fn key_templates_use_nginx_names() {
        let r = req("/a/b?x=1&y=2", &[("Host", "h")]);
        assert_eq!(cache_key(Some("$scheme://$host$uri"), &r), "http://h/a/b");
        assert_eq!(cache_key(Some("$host$request_uri"), &r), "h/a/b?x=1&y=2");
        assert_eq!(
            cache_key(Some("$uri|$args|$nope|$"), &r),
            "/a/b|x=1&y=2|$nope|$"
        );
        let bare = req("/a", &[("Host", "h")]);
        assert_eq!(cache_key(Some("k:$args:"), &bare), "k::");
    }

    #[test]
    fn conditions_need_a_nonempty_nonzero_value() {
        let hdr = Condition {
            header: Some("X-Bypass".into()),
            cookie: None,
            arg: None,
        };
        let cookie = Condition {
            header: None,
            cookie: Some("nocache".into()),
            arg: None,
        };
        let arg = Condition {
            header: None,
            cookie: None,
            arg: Some("fresh".into()),
        };
        let all = [hdr.clone(), cookie.clone(), arg.clone()];
        assert!(!conditions_match(&all, &req("/", &[])));
        assert!(conditions_match(
            std::slice::from_ref(&hdr),
            &req("/", &[("X-Bypass", "1")])
        ));
        assert!(!conditions_match(
            std::slice::from_ref(&hdr),
            &req("/", &[("X-Bypass", "0")])
        ));
        assert!(!conditions_match(
            std::slice::from_ref(&hdr),
            &req("/", &[("X-Bypass", "")])
        ));
        assert!(conditions_match(
            std::slice::from_ref(&cookie),
            &req("/", &[("Cookie", "a=b; nocache=yes")])
        ));
        assert!(!conditions_match(
            std::slice::from_ref(&cookie),
            &req("/", &[("Cookie", "xnocache=1; nocache=0")])
        ));
        assert!(!conditions_match(
            &[cookie],
            &req("/", &[("Cookie", "nocachex=1")])
        ));
        assert!(conditions_match(
            std::slice::from_ref(&arg),
            &req("/p?a=1&fresh=1", &[])
        ));
        assert!(!conditions_match(
            std::slice::from_ref(&arg),
            &req("/p?fresh=0", &[])
        ));
        assert!(!conditions_match(
            std::slice::from_ref(&arg),
            &req("/p?freshness=1", &[])
        ));
    }

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
