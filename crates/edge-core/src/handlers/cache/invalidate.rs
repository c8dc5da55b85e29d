//! Invalidation on unsafe methods (RFC 9111 4.4): a POST, PUT, DELETE, PATCH or unknown
//! method to a cached location is proxied uncached (`BYPASS`), and when the origin
//! answers 2xx or 3xx, every stored variant of the request's URI is removed, and so are
//! those of the URIs in `Location` and `Content-Location` when they have the same
//! origin (RFC 9111 4.4: a cache must not invalidate another origin's responses, so a
//! request cannot be used to purge someone else's objects).
//!
//! The removal happens before the response is relayed, so a client that gets the
//! answer and asks again can never be served the old response. The unlinks run on the
//! file I/O backend's pool, like a purge.

use super::ctx::{mark, CacheStatus};
use super::key::cache_key_for;
use crate::handlers::services::Services;
use crate::http::conn::Conn;
use crate::http::exchange::{Exchange, ExchangeError};
use crate::state::route::{ProxyRoute, Route};
use crate::state::Shared;
use crate::upstream::relay::{relay_response, upstream_error};
use edge_cache::purge::PurgeTarget;
use edge_http::HeaderMap;
use std::sync::Arc;

/// Proxies an unsafe request and invalidates what it changed.
pub async fn pass_unsafe(
    w: &Services,
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Arc<Shared>,
    route: &Route,
    p: &ProxyRoute,
) -> Result<(), ExchangeError> {
    mark(w, ex, CacheStatus::Bypass);
    let client = crate::handlers::context::client_of(conn, ex, shared);
    let affinity = {
        let vars = crate::handlers::context::vars(client, ex, shared);
        super::key::affinity(&p.upstream, super::key::KeySpec::of(route), &vars, None)
    };
    crate::handlers::context::upstream_fields(conn, ex, shared, route);
    let up =
        match crate::upstream::client::fetch(w.upstream(), conn, ex, &p.upstream, affinity).await {
            Ok(up) => up,
            Err(e) => return upstream_error(conn, ex, &shared.timeouts, &p.upstream, e).await,
        };
    if (200..400).contains(&up.head.status) {
        let vars = crate::handlers::context::vars(client, ex, shared);
        let keys = invalidated_keys(
            super::key::KeySpec::of(route),
            &vars,
            ex.req.host().unwrap_or(""),
            ex.req.path_and_query(),
            &up.head.headers,
        );
        let caches = p.caches.clone();
        let n = w
            .file_io
            .blocking(move || {
                keys.into_iter()
                    .map(|k| edge_cache::purge_all(&caches, &PurgeTarget::Key(k), false))
                    .sum::<usize>()
            })
            .await
            .unwrap_or(0);
        if n > 0 {
            tracing::debug!(
                "{} {} answered {}: {n} stored responses invalidated",
                ex.req.method.as_str(),
                ex.req.target,
                up.head.status
            );
        }
    }
    relay_response(
        w.upstream(),
        conn,
        ex,
        shared.timeouts.send,
        &p.upstream,
        up,
        w.compression(p.compress.as_ref()),
    )
    .await
}

/// The cache keys an unsafe request's success invalidates: its own URI's, and those of
/// `Location` and `Content-Location` when they name the same origin (a path, or an
/// `http://` URI with the request's host).
pub fn invalidated_keys(
    template: super::key::KeySpec<'_>,
    vars: &crate::vars::Ctx<'_>,
    host: &str,
    pq: &str,
    resp: &HeaderMap,
) -> Vec<String> {
    let mut keys = vec![cache_key_for(template, vars, host, pq)];
    for name in ["location", "content-location"] {
        let Some(v) = resp.get_str(name) else {
            continue;
        };
        if let Some(target) = same_origin_target(v.trim(), host, pq) {
            let k = cache_key_for(template, vars, host, &target);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    keys
}

/// The path and query of a `Location`-style URI reference when it has the request's
/// origin: an absolute `http://host[:port]/...` with the same authority, an
/// absolute path, or a relative path (resolved against the request's path). None for
/// other origins, other schemes and anything unparsable.
fn same_origin_target(v: &str, host: &str, base_pq: &str) -> Option<String> {
    if v.is_empty() || v.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return None;
    }
    let v = v.split('#').next().unwrap_or("");
    if let Some(rest) = strip_prefix_ci(v, "http://") {
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        if !rest[..end].eq_ignore_ascii_case(host) {
            return None;
        }
        let pq = &rest[end..];
        return Some(match pq.strip_prefix('?') {
            Some(_) => format!("/{pq}"),
            None if pq.is_empty() => "/".to_owned(),
            None => pq.to_owned(),
        });
    }
    if v.starts_with("//") || v.contains("://") || v.split(['/', '?']).next()?.contains(':') {
        return None; // another authority or scheme
    }
    if v.starts_with('/') {
        return Some(v.to_owned());
    }
    // A relative reference: resolve against the directory of the request's path.
    let base = base_pq.split('?').next().unwrap_or("/");
    let dir = &base[..base.rfind('/').map_or(0, |i| i + 1)];
    Some(format!("{}{v}", if dir.is_empty() { "/" } else { dir }))
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    (s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &s[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(pq: &str, headers: &[(&str, &str)]) -> Vec<String> {
        let mut h = HeaderMap::new();
        for (n, v) in headers {
            h.append((*n).to_owned(), v.as_bytes().to_vec());
        }
        let req = edge_http::parse_request(
            b"GET / HTTP/1.1\r\nHost: Ex.com\r\n\r\n",
            &edge_http::Limits::default(),
        )
        .unwrap()
        .unwrap()
        .0;
        let routed = crate::vars::Routed::default();
        let maps = crate::vars::Maps::default();
        let client = crate::vars::Client {
            peer: "127.0.0.1:1".parse().unwrap(),
            tls: false,
            server_port: 80,
        };
        let vars = crate::vars::Ctx::new(&req, client, "", &routed, &maps);
        invalidated_keys(
            super::super::key::KeySpec::default(),
            &vars,
            "Ex.com",
            pq,
            &h,
        )
    }

    #[test]
    fn own_uri_and_same_origin_locations_only() {
        assert_eq!(keys("/a?x=1", &[]), ["http://ex.com/a?x=1"]);
        assert_eq!(
            keys(
                "/a",
                &[
                    ("Location", "/b"),
                    ("Content-Location", "http://EX.com/c?d#frag")
                ]
            ),
            ["http://ex.com/a", "http://ex.com/b", "http://ex.com/c?d"]
        );
        assert_eq!(
            keys("/dir/a", &[("Location", "b/c")]),
            [
                "http://ex.com/a".replace("/a", "/dir/a"),
                "http://ex.com/dir/b/c".into()
            ]
        );
        for other in [
            "http://other.com/b",
            "https://ex.com/b",
            "//other.com/b",
            "mailto:x@ex.com",
            "http://ex.com.evil/b",
            "/b c",
        ] {
            assert_eq!(
                keys("/a", &[("Location", other)]),
                ["http://ex.com/a"],
                "{other}"
            );
        }
        assert_eq!(
            keys("/a", &[("Location", "http://ex.com")]),
            ["http://ex.com/a", "http://ex.com/"]
        );
        assert_eq!(
            keys("/a", &[("Location", "/a")]),
            ["http://ex.com/a"],
            "no duplicates"
        );
    }
}
