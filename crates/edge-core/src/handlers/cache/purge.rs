//! Purging: the `PURGE` method on a cached location and the admin `POST /purge`.
//!
//! How it fits: `PURGE <path>` on the data path removes every stored variant of the key
//! the same request would be cached under, for clients in `admin.allow` only (403
//! otherwise). The admin listener's `POST /purge` takes `url=`, `prefix=` or `tag=` and
//! `soft=1` (mark stale instead of deleting) as a form body or query string, and applies
//! them to every cache; it runs on the admin thread, so unlinks never block a worker.
//! Prefix and tag purges walk the in-memory purge indexes, never the disk. Both answer
//! `{"purged": N}`, 200 when something matched, 404 when nothing did.

use super::cache_key;
use crate::handlers::simple::respond;
use crate::server::conn::Conn;
use crate::server::exchange::{Exchange, ExchangeError};
use crate::server::route::{ProxyRoute, Route};
use crate::server::state::Shared;
use crate::server::worker::Worker;
use std::rc::Rc;
use std::sync::Arc;

/// Longest `url=`/`prefix=`/`tag=` value accepted by the admin purge.
pub const MAX_PURGE_ARG: usize = 8 * 1024;

/// `PURGE <path>` on a cached location.
pub async fn handle_method(
    _w: &Rc<Worker>,
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Arc<Shared>,
    route: &Route,
    p: &ProxyRoute,
) -> Result<(), ExchangeError> {
    if !shared.is_admin(conn.peer.ip()) {
        let page = crate::handlers::simple::error_page(403);
        return respond(
            conn,
            ex,
            shared,
            403,
            "text/html",
            &page,
            &route.add_headers,
        )
        .await;
    }
    let key = cache_key(route.cfg.cache_key.as_deref(), &ex.req);
    let n: usize = p.caches.iter().map(|c| c.purge_key(&key, false)).sum();
    tracing::info!("PURGE {key} from {}: {n} objects", conn.peer.ip());
    let body = purged_json(n);
    let status = if n > 0 { 200 } else { 404 };
    respond(
        conn,
        ex,
        shared,
        status,
        "application/json",
        body.as_bytes(),
        &route.add_headers,
    )
    .await
}

/// `{"purged": N}` plus a newline.
pub fn purged_json(n: usize) -> String {
    format!("{{\"purged\": {n}}}\n")
}

/// A parsed admin purge request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PurgeTarget {
    /// A cache key (`http://host/path?query`); all its variants.
    Url(String),
    /// Every key starting with this.
    Prefix(String),
    /// Every object carrying this `Cache-Tag`/`Surrogate-Key`.
    Tag(String),
}

/// Parses the admin purge parameters from a query string and/or form body. A `url=`
/// that is a path (`/a/b`) is completed with `host=` or, failing that, `default_host`
/// (the admin request's `Host`). Errors are messages for a 400.
pub fn parse_admin(
    query: Option<&str>,
    body: &[u8],
    default_host: Option<&str>,
) -> Result<(PurgeTarget, bool), String> {
    let body = std::str::from_utf8(body).map_err(|_| "form body is not UTF-8".to_string())?;
    let mut url = None;
    let mut prefix = None;
    let mut tag = None;
    let mut host = None;
    let mut soft = false;
    for pair in query.unwrap_or("").split('&').chain(body.trim().split('&')) {
        if pair.is_empty() {
            continue;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = form_decode(v).ok_or_else(|| format!("{k}: invalid percent-encoding"))?;
        if v.len() > MAX_PURGE_ARG {
            return Err(format!("{k}: longer than {MAX_PURGE_ARG} bytes"));
        }
        match k {
            "url" => url = Some(v),
            "prefix" => prefix = Some(v),
            "tag" => tag = Some(v),
            "host" => host = Some(v),
            "soft" => soft = matches!(v.as_str(), "1" | "true" | "yes" | "on"),
            _ => return Err(format!("unknown parameter {k:?}")),
        }
    }
    let target = match (url, prefix, tag) {
        (Some(u), None, None) => {
            PurgeTarget::Url(normalise_url(&u, host.as_deref().or(default_host))?)
        }
        (None, Some(p), None) if !p.is_empty() => PurgeTarget::Prefix(lower_host(&p)),
        (None, None, Some(t)) if !t.is_empty() => PurgeTarget::Tag(t),
        (None, None, None) => return Err("one of url=, prefix=, tag= is required".into()),
        _ => return Err("exactly one non-empty url=, prefix= or tag= is allowed".into()),
    };
    Ok((target, soft))
}

/// Lower-cases the host of an `http://host/...` key (keys are built that way).
fn lower_host(u: &str) -> String {
    for scheme in ["http://", "https://"] {
        if let Some(rest) = u.strip_prefix(scheme) {
            let end = rest.find('/').unwrap_or(rest.len());
            return format!(
                "http://{}{}",
                rest[..end].to_ascii_lowercase(),
                &rest[end..]
            );
        }
    }
    u.to_string()
}

fn normalise_url(u: &str, host: Option<&str>) -> Result<String, String> {
    if u.starts_with("http://") || u.starts_with("https://") {
        return Ok(lower_host(u));
    }
    if u.starts_with('/') {
        let host = host.ok_or("url= is a path: give host= too")?;
        return Ok(format!("http://{}{u}", host.to_ascii_lowercase()));
    }
    Ok(u.to_string()) // a custom cache_key template's key, as is
}

/// `application/x-www-form-urlencoded` value decoding (`+` is a space).
fn form_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// Applies an admin purge to every cache; returns the objects affected.
pub fn purge_all(
    caches: &crate::server::caches::Caches,
    target: &PurgeTarget,
    soft: bool,
) -> usize {
    caches
        .values()
        .map(|c| match target {
            PurgeTarget::Url(k) => c.purge_key(k, soft),
            PurgeTarget::Prefix(p) => c.purge_prefix(p, soft),
            PurgeTarget::Tag(t) => c.purge_tag(t, soft),
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_parameters() {
        let p = |q: Option<&str>, b: &str| parse_admin(q, b.as_bytes(), Some("Admin:9090"));
        assert_eq!(
            p(None, "url=http%3A%2F%2FEx.com%2Fa%3Fb%3D1").unwrap(),
            (PurgeTarget::Url("http://ex.com/a?b=1".into()), false)
        );
        assert_eq!(
            p(Some("url=/a/b&host=h"), "").unwrap(),
            (PurgeTarget::Url("http://h/a/b".into()), false)
        );
        assert_eq!(
            p(Some("url=/a"), "").unwrap().0,
            PurgeTarget::Url("http://admin:9090/a".into())
        );
        assert_eq!(
            p(None, "prefix=http://H/img/&soft=1\n").unwrap(),
            (PurgeTarget::Prefix("http://h/img/".into()), true)
        );
        assert_eq!(
            p(Some("tag=a+b"), "").unwrap().0,
            PurgeTarget::Tag("a b".into())
        );
        assert!(p(None, "").is_err());
        assert!(p(None, "url=x&tag=y").is_err());
        assert!(p(None, "tag=").is_err());
        assert!(p(None, "bogus=1").is_err());
        assert!(p(None, "tag=%zz").is_err());
        assert!(p(None, "tag=%4").is_err());
        assert!(parse_admin(Some("url=/a"), b"", None).is_err());
        let long = format!("tag={}", "x".repeat(MAX_PURGE_ARG + 1));
        assert!(p(None, &long).is_err());
    }

    #[test]
    fn purge_json() {
        assert_eq!(purged_json(3), "{\"purged\": 3}\n");
    }
}
