//! The cache key (`cache_key` templates, `cache_key_args`, the path's percent
//! normalization). The `cache_bypass`/`no_cache` conditions are compiled predicates
//! ([`crate::state::rules::Predicates`]).
//!
//! The key sees the request's path and query normalized ([`edge_http::normalize`]): the
//! path percent-normalized (RFC 3986 6.2.2.2) and, with `cache_key_args`, the query
//! arguments filtered and sorted. That is what the default key's path and query, and a
//! template's `$uri`, `$args`, `$is_args`, `$arg_NAME` and `$request_uri`, contribute.
//! The request forwarded upstream keeps its own target.

use crate::vars::{Ctx, Template};
use edge_http::normalize::{normalize_pq, push_normalized_pq, ArgsPolicy};

/// How a location builds its cache keys: its `cache_key` template (None: the default
/// key) and its `cache_key_args` policy (None: every argument, in order).
#[derive(Clone, Copy, Default)]
pub struct KeySpec<'a> {
    pub template: Option<&'a Template>,
    pub args: Option<&'a ArgsPolicy>,
}

impl<'a> KeySpec<'a> {
    pub fn of(route: &'a crate::state::route::Route) -> KeySpec<'a> {
        KeySpec {
            template: route.cache_key.as_ref(),
            args: route.key_args.as_ref(),
        }
    }
}

/// The key hash a `consistent_hash` upstream routes a request on: its `hash_key`
/// template, else the request's cache key (`cache_key_now`: already computed by a cached
/// location; built from the location's `cache_key` template otherwise). None for other
/// upstreams.
pub fn affinity(
    group: &crate::upstream::UpstreamGroup,
    location_key: KeySpec<'_>,
    vars: &Ctx<'_>,
    cache_key_now: Option<&str>,
) -> Option<u64> {
    if group.balance != crate::config::Balance::ConsistentHash {
        return None;
    }
    let h = match (&group.hash_key, cache_key_now) {
        (Some(t), _) => twox_hash::XxHash3_64::oneshot(t.to_string(vars).as_bytes()),
        (None, Some(k)) => twox_hash::XxHash3_64::oneshot(k.as_bytes()),
        (None, None) => twox_hash::XxHash3_64::oneshot(cache_key(location_key, vars).as_bytes()),
    };
    Some(h)
}

/// The request's cache key and its upstream affinity ([`affinity`]). The template
/// context (`vars`, made on demand) is built only when a template is rendered: the
/// default key on an upstream that does not hash (the common case) needs none.
pub fn key_and_affinity<'a>(
    route: &crate::state::route::Route,
    group: &crate::upstream::UpstreamGroup,
    req: &edge_http::RequestHead,
    vars: impl FnOnce() -> Ctx<'a>,
) -> (String, Option<u64>) {
    let spec = KeySpec::of(route);
    if spec.template.is_none() && group.balance != crate::config::Balance::ConsistentHash {
        let host = req.host().unwrap_or("");
        return (default_key(host, req.path_and_query(), spec.args), None);
    }
    let vars = vars();
    let key = cache_key(spec, &vars);
    let affinity = affinity(group, KeySpec::default(), &vars, Some(&key));
    (key, affinity)
}

/// The default key: `http://` + the host lower-cased + the path and query normalized.
/// One allocation, the host lower-cased in place, the path and query normalized into
/// the key itself.
fn default_key(host: &str, pq: &str, args: Option<&ArgsPolicy>) -> String {
    let mut k = String::with_capacity(7 + host.len() + pq.len());
    k.push_str("http://");
    let at = k.len();
    k.push_str(host);
    k[at..].make_ascii_lowercase();
    push_normalized_pq(&mut k, pq, args);
    k
}

/// The primary cache key: the location's `cache_key` template rendered, or by default
/// `http://` + the Host header lower-cased (port kept) + the path and query (the key
/// every earlier version used, so caches on disk stay valid).
pub fn cache_key(spec: KeySpec<'_>, vars: &Ctx<'_>) -> String {
    let host = vars.req.host().unwrap_or("");
    cache_key_for(spec, vars, host, vars.req.path_and_query())
}

/// [`cache_key`] for a URI given by its host and its path and query (`pq`, origin
/// form): the key a GET of that URI would be cached under.
pub fn cache_key_for(spec: KeySpec<'_>, vars: &Ctx<'_>, host: &str, pq: &str) -> String {
    let Some(t) = spec.template else {
        return default_key(host, pq, spec.args);
    };
    let pq = normalize_pq(pq, spec.args);
    let pq = &*pq;
    let mut ctx = vars.with_uri(pq);
    let request_uri = normalize_pq(vars.request_uri, spec.args);
    ctx.request_uri = &request_uri;
    t.to_string(&ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Condition;
    use crate::testutil::req;
    use edge_http::RequestHead;

    fn matches(conds: &[Condition], r: &RequestHead) -> bool {
        crate::state::rules::Predicates::compile(conds).any(r)
    }

    fn key(template: Option<&str>, r: &RequestHead) -> String {
        key_with(template, None, r)
    }

    fn key_with(template: Option<&str>, args: Option<&ArgsPolicy>, r: &RequestHead) -> String {
        let known = crate::vars::Known::default();
        let t = template.map(|t| Template::compile(t, &known).unwrap());
        let routed = crate::vars::Routed::default();
        let maps = crate::vars::Maps::default();
        let client = crate::vars::Client {
            peer: "10.0.0.1:1234".parse().unwrap(),
            tls: false,
            server_port: 80,
        };
        let vars = Ctx::new(r, client, "", &routed, &maps);
        let spec = KeySpec {
            template: t.as_ref(),
            args,
        };
        cache_key(spec, &vars)
    }

    #[test]
    fn keys_see_the_normalized_path_and_args() {
        use edge_http::normalize::ArgPattern;
        let policy = ArgsPolicy {
            sort: true,
            include: None,
            exclude: vec![ArgPattern::parse("utm_*").unwrap()],
        };
        let p = Some(&policy);
        let h = [("Host", "h")];
        let a = req("/a%2db?utm_source=x&b=2&a=1", &h);
        let b = req("/a-b?a=1&b=2", &h);
        assert_eq!(key_with(None, p, &a), "http://h/a-b?a=1&b=2");
        assert_eq!(key_with(None, p, &a), key_with(None, p, &b));
        // Without a policy only the path is normalized.
        assert_eq!(key(None, &a), "http://h/a-b?utm_source=x&b=2&a=1");
        let t = Some("$host|$uri|$is_args|$args|$arg_utm_source|$request_uri");
        assert_eq!(key_with(t, p, &a), "h|/a-b|?|a=1&b=2||/a-b?a=1&b=2");
        let only_utm = req("/x?utm_a=1", &h);
        assert_eq!(key_with(None, p, &only_utm), "http://h/x");
        assert_eq!(key_with(t, p, &only_utm), "h|/x||||/x");
        assert_eq!(key_with(None, p, &req("/a%2Fb", &h)), "http://h/a%2Fb");
    }

    #[test]
    fn default_key_is_scheme_host_uri_with_lowercase_host() {
        let r = req("/a/b?x=1", &[("Host", "Example.COM:8080")]);
        assert_eq!(key(None, &r), "http://example.com:8080/a/b?x=1");
        let no_host = req("/p", &[]);
        assert_eq!(key(None, &no_host), "http:///p");
    }

    #[test]
    fn key_templates_use_nginx_names() {
        let r = req("/a/b?x=1&y=2", &[("Host", "H:81")]);
        assert_eq!(key(Some("$scheme://$host$uri"), &r), "http://h/a/b");
        assert_eq!(key(Some("$host$request_uri"), &r), "h/a/b?x=1&y=2");
        assert_eq!(key(Some("$uri|$args|$"), &r), "/a/b|x=1&y=2|$");
        assert_eq!(key(Some("$arg_y:$remote_addr"), &r), "2:10.0.0.1");
        let bare = req("/a", &[("Host", "h")]);
        assert_eq!(key(Some("k:$args:$is_args"), &bare), "k::");
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
        assert!(!matches(&all, &req("/", &[])));
        assert!(matches(
            std::slice::from_ref(&hdr),
            &req("/", &[("X-Bypass", "1")])
        ));
        assert!(!matches(
            std::slice::from_ref(&hdr),
            &req("/", &[("X-Bypass", "0")])
        ));
        assert!(!matches(
            std::slice::from_ref(&hdr),
            &req("/", &[("X-Bypass", "")])
        ));
        assert!(matches(
            std::slice::from_ref(&cookie),
            &req("/", &[("Cookie", "a=b; nocache=yes")])
        ));
        assert!(!matches(
            std::slice::from_ref(&cookie),
            &req("/", &[("Cookie", "xnocache=1; nocache=0")])
        ));
        assert!(!matches(&[cookie], &req("/", &[("Cookie", "nocachex=1")])));
        assert!(matches(
            std::slice::from_ref(&arg),
            &req("/p?a=1&fresh=1", &[])
        ));
        assert!(!matches(
            std::slice::from_ref(&arg),
            &req("/p?fresh=0", &[])
        ));
        assert!(!matches(
            std::slice::from_ref(&arg),
            &req("/p?freshness=1", &[])
        ));
    }
}
