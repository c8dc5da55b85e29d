//! Location matching, nginx style: an exact match wins; otherwise the longest matching
//! prefix. Each location carries its handler, resolved at config time so the hot path
//! does no name lookups.

use super::caches::Caches;
use super::error::StateError;
use crate::config::{Config, Location};
use crate::upstream::UpstreamGroup;
use edge_cache::{Cache, PolicyConfig, StatusMatch};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// What serves a location.
pub enum Handler {
    Proxy(ProxyRoute),
    Static { root: PathBuf, index: String },
    Return(ReturnRoute),
    EmptyGif,
}

pub struct ProxyRoute {
    pub upstream: Arc<UpstreamGroup>,
    /// The caches in use (empty: not cached); objects are spread over them by key hash.
    pub caches: Vec<Arc<Cache>>,
    /// RFC 9111 policy knobs of this location.
    pub policy: PolicyConfig,
    /// Response compression (`compress`); None when the location does not compress.
    pub compress: Option<edge_compress::Policy>,
}

/// The location's `cache_valid`, `cache_set_cookie`, `cache_honour_no_cache` and
/// `targeted_cache_control`.
fn policy_for(loc: &Location) -> PolicyConfig {
    let mut cache_valid: Vec<(StatusMatch, std::time::Duration)> = loc
        .cache_valid
        .iter()
        .map(|(k, v)| {
            let m = if k == "any" {
                StatusMatch::Any
            } else {
                StatusMatch::Code(k.parse().unwrap_or(0))
            };
            (m, v.0)
        })
        .collect();
    // Exact codes first, `any` last (the policy also prefers exact codes).
    cache_valid.sort_by_key(|(m, _)| matches!(m, StatusMatch::Any));
    PolicyConfig {
        cache_valid,
        cache_set_cookie: loc.cache_set_cookie,
        honour_client_no_cache: loc.cache_honour_no_cache,
        targeted: match &loc.targeted_cache_control {
            Some(list) => list.iter().map(|f| f.to_ascii_lowercase()).collect(),
            None => PolicyConfig::default().targeted,
        },
        ..PolicyConfig::default()
    }
}

pub struct ReturnRoute {
    pub status: u16,
    pub body: Vec<u8>,
    pub location: Option<String>,
    pub content_type: String,
    /// CPU to spend before answering (`burn_us`).
    pub burn: std::time::Duration,
}

pub struct Route {
    /// The matched text, for logs and /status.
    pub pattern: String,
    pub handler: Handler,
    /// Extra headers (`add_header`), pre-serialised as `Name: value\r\n` lines.
    pub add_headers: Vec<u8>,
    /// The location's config, for handler options added later (caching, compression).
    pub cfg: Location,
}

#[derive(Default)]
pub struct Router {
    exact: HashMap<String, Arc<Route>>,
    /// Longest first.
    prefixes: Vec<(String, Arc<Route>)>,
}

impl Router {
    pub fn build(
        cfg: &Config,
        upstreams: &HashMap<String, Arc<UpstreamGroup>>,
        caches: &Caches,
    ) -> Result<Router, StateError> {
        let mut r = Router::default();
        for loc in &cfg.location {
            let handler = if let Some(p) = &loc.proxy {
                let upstream = upstreams
                    .get(p.get_ref())
                    .ok_or_else(|| StateError::UnknownUpstream(p.get_ref().clone()))?
                    .clone();
                let caches = loc
                    .cache
                    .get_ref()
                    .iter()
                    .map(|n| {
                        caches
                            .get(n)
                            .cloned()
                            .ok_or_else(|| StateError::CacheNotOpen(n.clone()))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Handler::Proxy(ProxyRoute {
                    upstream,
                    caches,
                    policy: policy_for(loc),
                    compress: crate::compress::policy_for(loc),
                })
            } else if let Some(root) = &loc.static_root {
                Handler::Static {
                    root: root.get_ref().clone(),
                    index: loc.index.clone(),
                }
            } else if let Some(ret) = &loc.ret {
                let ret = ret.get_ref();
                Handler::Return(ReturnRoute {
                    status: ret.status,
                    body: ret.body.clone().into_bytes(),
                    location: ret.location.clone(),
                    content_type: ret
                        .content_type
                        .clone()
                        .unwrap_or_else(|| "text/plain".into()),
                    burn: std::time::Duration::from_micros(ret.burn_us),
                })
            } else {
                Handler::EmptyGif
            };
            let mut add_headers = Vec::new();
            for (k, v) in &loc.add_header {
                edge_http::write_header(&mut add_headers, k, v.as_bytes());
            }
            let (pattern, exact) = match (&loc.exact, &loc.prefix) {
                (Some(e), _) => (e.get_ref().clone(), true),
                (None, Some(p)) => (p.get_ref().clone(), false),
                (None, None) => return Err(StateError::LocationWithoutMatch),
            };
            let route = Arc::new(Route {
                pattern: pattern.clone(),
                handler,
                add_headers,
                cfg: loc.clone(),
            });
            if exact {
                r.exact.entry(pattern).or_insert(route);
            } else if !r.prefixes.iter().any(|(p, _)| *p == pattern) {
                r.prefixes.push((pattern, route));
            }
        }
        r.prefixes.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        Ok(r)
    }

    /// The route for a request path (without query).
    pub fn find(&self, path: &str) -> Option<&Arc<Route>> {
        if let Some(r) = self.exact.get(path) {
            return Some(r);
        }
        self.prefixes
            .iter()
            .find(|(p, _)| path.starts_with(p.as_str()))
            .map(|(_, r)| r)
    }

    pub fn routes(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.exact
            .values()
            .chain(self.prefixes.iter().map(|(_, r)| r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(text: &str) -> Router {
        let cfg = crate::config::parse("t", text).unwrap();
        Router::build(&cfg, &HashMap::new(), &HashMap::new()).unwrap()
    }

    #[test]
    fn exact_beats_prefix_and_longest_prefix_wins() {
        let r = router(
            r#"
[[listen]]
addr = "127.0.0.1:1"
[[location]]
prefix = "/"
return = { status = 200, body = "root" }
[[location]]
prefix = "/a/b"
return = { status = 200, body = "ab" }
[[location]]
prefix = "/a"
return = { status = 200, body = "a" }
[[location]]
exact = "/a/b"
empty_gif = true
"#,
        );
        let body = |p: &str| match &r.find(p).unwrap().handler {
            Handler::Return(ret) => String::from_utf8(ret.body.clone()).unwrap(),
            Handler::EmptyGif => "gif".into(),
            _ => unreachable!(),
        };
        assert_eq!(body("/a/b"), "gif");
        assert_eq!(body("/a/bc"), "ab");
        assert_eq!(body("/a/x"), "a");
        assert_eq!(body("/zzz"), "root");
    }

    #[test]
    fn no_match_is_none() {
        let r = router(
            "[[listen]]\naddr = \"127.0.0.1:1\"\n[[location]]\nprefix = \"/x\"\nempty_gif = true\n",
        );
        assert!(r.find("/y").is_none());
        assert!(r.find("/x1").is_some());
    }
}
