//! Purge requests: the parameters of the admin listener's `POST /purge` form (and
//! query), and the `{"purged": N}` answer it and the data port's `PURGE` method give.
//!
//! How it fits: the server's side of a purge. [`parse_request`] turns a request into an
//! [`edge_cache::purge::PurgeTarget`] (400 on anything malformed, every value bounded
//! by [`MAX_PURGE_ARG`]); the admin listener (`admin/mod.rs`) normalizes it for the
//! location it reaches and applies it with [`edge_cache::purge_all`] off the event
//! loop, as the `PURGE` handler (`handlers/cache/purge.rs`) does with its cache key.

use edge_cache::purge::PurgeTarget;

/// Longest `url=`/`prefix=`/`tag=` value accepted in a purge request.
pub const MAX_PURGE_ARG: usize = 8 * 1024;

/// `{"purged": N}` plus a newline.
pub fn purged_json(n: usize) -> String {
    format!("{{\"purged\": {n}}}\n")
}

/// A purge request that cannot be carried out; the message is for a 400 answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadPurge(pub String);

impl std::fmt::Display for BadPurge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for BadPurge {
    fn from(s: String) -> Self {
        BadPurge(s)
    }
}

impl From<&str> for BadPurge {
    fn from(s: &str) -> Self {
        BadPurge(s.to_owned())
    }
}

/// Parses purge parameters (`url=`, `prefix=`, `tag=`, `host=`, `soft=`) from a query
/// string and/or an `application/x-www-form-urlencoded` body. A `url=` that is a path
/// (`/a/b`) is completed with `host=` or, failing that, `default_host` (a configured
/// site); with neither it matches that path on every host. Returns the target and
/// whether the purge is soft.
pub fn parse_request(
    query: Option<&str>,
    body: &[u8],
    default_host: Option<&str>,
) -> Result<(PurgeTarget, bool), BadPurge> {
    let body = std::str::from_utf8(body).map_err(|_| BadPurge::from("form body is not UTF-8"))?;
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
            return Err(BadPurge(format!("{k}: longer than {MAX_PURGE_ARG} bytes")));
        }
        match k {
            "url" => url = Some(v),
            "prefix" => prefix = Some(v),
            "tag" => tag = Some(v),
            "host" => host = Some(v),
            "soft" => soft = matches!(v.as_str(), "1" | "true" | "yes" | "on"),
            _ => return Err(BadPurge(format!("unknown parameter {k:?}"))),
        }
    }
    let target = match (url, prefix, tag) {
        (Some(u), None, None) if u.starts_with('/') => match host.as_deref().or(default_host) {
            Some(h) => PurgeTarget::Key(format!("http://{}{u}", h.to_ascii_lowercase())),
            None => PurgeTarget::Path(u),
        },
        (Some(u), None, None) => PurgeTarget::Key(normalise_url(&u)),
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

fn normalise_url(u: &str) -> String {
    if u.starts_with("http://") || u.starts_with("https://") {
        return lower_host(u);
    }
    u.to_string() // a custom cache_key template's key, as is
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_parameters() {
        let p = |q: Option<&str>, b: &str| parse_request(q, b.as_bytes(), Some("Admin:9090"));
        assert_eq!(
            p(None, "url=http%3A%2F%2FEx.com%2Fa%3Fb%3D1").unwrap(),
            (PurgeTarget::Key("http://ex.com/a?b=1".into()), false)
        );
        assert_eq!(
            p(Some("url=/a/b&host=h"), "").unwrap(),
            (PurgeTarget::Key("http://h/a/b".into()), false)
        );
        assert_eq!(
            p(Some("url=/a"), "").unwrap().0,
            PurgeTarget::Key("http://admin:9090/a".into()),
            "a configured default host completes a path"
        );
        assert_eq!(
            parse_request(Some("url=/a?b"), b"", None).unwrap().0,
            PurgeTarget::Path("/a?b".into()),
            "a path alone: every host"
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
        let long = format!("tag={}", "x".repeat(MAX_PURGE_ARG + 1));
        assert!(p(None, &long).is_err());
    }

    #[test]
    fn purge_json() {
        assert_eq!(purged_json(3), "{\"purged\": 3}\n");
    }
}
