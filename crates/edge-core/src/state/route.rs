//! Location matching, nginx style (see [`Router`]). Each location carries its handler,
//! templates and rewrites, compiled at config time so the hot path does no name lookups
//! and reads no serde config.

use super::caches::Caches;
use super::error::StateError;
use super::rules::CacheRules;
use crate::config::validate::BadValue;
use crate::config::{Location, RewriteFlag};
use crate::upstream::UpstreamGroup;
use crate::vars::{compile_regex, Captures, Known, Template};
use edge_cache::{Cache, PolicyConfig, StatusMatch};
use regex::Regex;
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
    /// `use_stale`, `cache_lock`, `cache_bypass`, `no_cache` and the other caching
    /// knobs, compiled.
    pub rules: CacheRules,
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
    /// A template (`return.body`).
    pub body: Template,
    /// A template (`return.location`).
    pub location: Option<Template>,
    pub content_type: String,
    /// CPU to spend before answering (`burn_us`).
    pub burn: std::time::Duration,
}

pub struct Route {
    /// The matched text, for logs and /status.
    pub pattern: String,
    pub handler: Handler,
    /// Header control (`proxy_set_header`, `proxy_hide_header`, `add_header`,
    /// `cache_status_header`), compiled.
    pub fields: super::fields::RouteFields,
    /// `cache_key`, compiled; None: the default key (`http://` + Host + path and query).
    pub cache_key: Option<Template>,
    /// `cache_key_args`: the query arguments the key uses (None: all, in order).
    pub key_args: Option<edge_http::normalize::ArgsPolicy>,
    /// `rewrite`, in order.
    pub rewrites: Vec<Rewrite>,
    /// The access log of requests served here (the location's, else its server's).
    pub log: super::logs::LogRef,
    /// `secure_link`: the signed-URL check a request passes before the handler.
    pub secure_link: Option<crate::secure_link::Verifier>,
    /// `limit_req` and `limit_conn` (the location's, else inherited).
    pub limits: crate::limit::RouteLimits,
    /// `allow`/`deny` (the location's, else its server's, else the top level's); None:
    /// everyone may come in.
    pub access: Option<crate::access::rules::AccessList<crate::vars::Var>>,
}

/// One compiled `rewrite`.
pub struct Rewrite {
    pub regex: Arc<Regex>,
    pub replacement: Template,
    pub flag: Option<RewriteFlag>,
}

/// The locations of one server, searched in nginx's order: an exact match; else the
/// longest prefix, which wins at once when it has `stop_regex` (`^~`); else the first
/// regex location (config order) that matches; else that longest prefix.
///
/// Cost: a hash lookup and a scan of the prefixes (longest first); regexes only when
/// the server has regex locations and no `^~` prefix took the request. Nothing is
/// allocated unless a regex location with capture groups matches.
#[derive(Default)]
pub struct Router {
    exact: crate::vars::NameMap<String, Arc<Route>>,
    /// Longest first; `true`: `stop_regex`.
    prefixes: Vec<(String, bool, Arc<Route>)>,
    regexes: Vec<(Arc<Regex>, Arc<Route>)>,
    /// Over `regexes`, when there are many.
    set: Option<regex::RegexSet>,
    /// `regexes` by anchored literal prefix: when it narrows a path down to a few
    /// candidates, only those run (not the `RegexSet`).
    index: Option<crate::vars::regex_index::PrefixIndex>,
}

/// Regex locations tried one by one before a `RegexSet` pays off.
const REGEX_SCAN: usize = 8;

/// What a router is built from besides the locations.
pub struct Env<'a> {
    pub upstreams: &'a HashMap<String, Arc<UpstreamGroup>>,
    pub caches: &'a Caches,
    pub known: &'a Known,
    pub logs: &'a super::logs::LogTable,
    /// The limit zones locations name.
    pub zones: &'a crate::limit::Zones,
}

fn template(src: &str, known: &Known) -> Result<Template, StateError> {
    Template::compile(src, known).map_err(|e| StateError::BadValue(BadValue(e.to_string())))
}

fn regex(src: &str, ci: bool) -> Result<Arc<Regex>, StateError> {
    compile_regex(src, ci)
        .map(Arc::new)
        .map_err(|m| StateError::BadValue(BadValue(m)))
}

fn route_for(
    loc: &Location,
    env: &Env<'_>,
    server_log: &super::logs::LogRef,
) -> Result<(Route, bool), StateError> {
    let handler = if let Some(p) = &loc.proxy {
        let upstream = env
            .upstreams
            .get(p.get_ref())
            .ok_or_else(|| StateError::UnknownUpstream(p.get_ref().clone()))?
            .clone();
        let caches = loc
            .cache
            .get_ref()
            .iter()
            .map(|n| {
                env.caches
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
            rules: CacheRules::compile(loc),
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
            body: template(&ret.body, env.known)?,
            location: ret
                .location
                .as_deref()
                .map(|l| template(l, env.known))
                .transpose()?,
            content_type: ret
                .content_type
                .clone()
                .unwrap_or_else(|| "text/plain".into()),
            burn: std::time::Duration::from_micros(ret.burn_us),
        })
    } else {
        Handler::EmptyGif
    };
    let pattern = [&loc.exact, &loc.prefix, &loc.regex, &loc.iregex]
        .into_iter()
        .flatten()
        .next()
        .ok_or(StateError::LocationWithoutMatch)?
        .get_ref()
        .clone();
    let rewrites = loc
        .rewrite
        .iter()
        .map(|r| {
            let r = r.get_ref();
            Ok(Rewrite {
                regex: regex(&r.regex, false)?,
                replacement: template(&r.replacement, env.known)?,
                flag: r.flag,
            })
        })
        .collect::<Result<Vec<_>, StateError>>()?;
    let secure_link = secure_link_for(loc, env.known)?;
    let mut key_args = loc
        .cache_key_args
        .as_ref()
        .map(|a| crate::config::sites::args_policy(a.get_ref()))
        .transpose()
        .map_err(|m| StateError::BadValue(BadValue(m)))?;
    if let Some(v) = &secure_link {
        // Every signature of one object is one cache object.
        key_args = Some(v.key_args(key_args));
    }
    let route = Route {
        pattern,
        handler,
        fields: super::fields::RouteFields::compile(loc, env.known)?,
        key_args,
        cache_key: loc
            .cache_key
            .as_ref()
            .map(|k| template(k.get_ref(), env.known))
            .transpose()?,
        rewrites,
        log: env
            .logs
            .resolve(loc.access_log.as_ref().map(|a| a.get_ref()), server_log),
        secure_link,
        limits: crate::limit::RouteLimits::compile(&loc.limit_req, &loc.limit_conn, env.zones)
            .map_err(|m| StateError::BadValue(BadValue(m)))?,
        access: crate::config::access::compile(loc, env.known)
            .map_err(|e| StateError::BadValue(BadValue(format!("{}: {}", e.key, e.message))))?,
    };
    Ok((route, loc.exact.is_some()))
}

/// A location's `secure_link`, compiled: HMAC keys from the secrets the config load
/// read, and the `include` templates.
fn secure_link_for(
    loc: &Location,
    known: &Known,
) -> Result<Option<crate::secure_link::Verifier>, StateError> {
    let Some(sl) = &loc.secure_link else {
        return Ok(None);
    };
    let sl = sl.get_ref();
    if sl.secrets.0.is_empty() {
        return Err(StateError::BadValue(BadValue(
            "secure_link: the secret files were not read".into(),
        )));
    }
    let include = crate::config::secure_link::include_templates(sl, known)
        .map_err(|m| StateError::BadValue(BadValue(m)))?;
    Ok(Some(crate::secure_link::Verifier::new(
        &sl.secrets.0,
        sl.expires_arg.get_ref(),
        sl.signature_arg.get_ref(),
        include,
    )))
}

impl Router {
    /// The router of one server's locations; `server_log` applies to those that name
    /// no `access_log`.
    pub fn build(
        locations: &[Location],
        env: &Env<'_>,
        server_log: &super::logs::LogRef,
    ) -> Result<Router, StateError> {
        let mut r = Router::default();
        let mut prefixes = Vec::new();
        let mut set_patterns = Vec::new();
        for loc in locations {
            let (route, exact) = route_for(loc, env, server_log)?;
            let route = Arc::new(route);
            let pattern = route.pattern.clone();
            if exact {
                r.exact.entry(pattern).or_insert(route);
            } else if let Some((re, ci, _)) = crate::config::sites::location_regex(loc) {
                r.regexes.push((regex(re.get_ref(), ci)?, route));
                prefixes.push(crate::vars::regex_index::anchored_prefix(re.get_ref(), ci));
                // The set matches as the regex does: `iregex` case-insensitively.
                set_patterns.push(if ci {
                    format!("(?i){}", re.get_ref())
                } else {
                    re.get_ref().clone()
                });
            } else if !r.prefixes.iter().any(|(p, _, _)| *p == pattern) {
                r.prefixes.push((pattern, loc.stop_regex, route));
            }
        }
        r.prefixes.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        if r.regexes.len() > REGEX_SCAN {
            r.set = regex::RegexSet::new(&set_patterns).ok();
            r.index = crate::vars::regex_index::PrefixIndex::build(&prefixes);
        }
        Ok(r)
    }

    /// The route for a request path (without query), regex captures ignored.
    pub fn find(&self, path: &str) -> Option<&Arc<Route>> {
        self.find_with(path, None)
    }

    /// The route for a request path; a matching regex location's captures go to `caps`
    /// (as the latest match).
    pub fn find_with(&self, path: &str, caps: Option<&mut Captures>) -> Option<&Arc<Route>> {
        if let Some(r) = self.exact.get(path) {
            return Some(r);
        }
        let prefix = self
            .prefixes
            .iter()
            .find(|(p, _, _)| path.starts_with(p.as_str()));
        if let Some((_, true, r)) = prefix {
            return Some(r);
        }
        if !self.regexes.is_empty() {
            let mut buf = [0; crate::vars::regex_index::MAX_CANDIDATES];
            let few = self
                .index
                .as_ref()
                .and_then(|ix| ix.candidates(path.as_bytes(), &mut buf));
            let first = match (few, &self.set) {
                // A regex outside the candidates cannot match: its prefix does not
                // start the path.
                (Some(few), _) => few
                    .iter()
                    .map(|&i| i as usize)
                    .find(|&i| self.regexes[i].0.is_match(path)),
                (None, Some(set)) => set.matches(path).iter().next(),
                (None, None) => self.regexes.iter().position(|(re, _)| re.is_match(path)),
            };
            if let Some(i) = first {
                let (re, route) = &self.regexes[i];
                if let Some(caps) = caps {
                    if re.captures_len() > 1 {
                        if let Some(c) = re.captures(path) {
                            caps.set_latest(re, path, &c);
                        }
                    }
                }
                return Some(route);
            }
        }
        prefix.map(|(_, _, r)| r)
    }

    pub fn routes(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.exact
            .values()
            .chain(self.prefixes.iter().map(|(_, _, r)| r))
            .chain(self.regexes.iter().map(|(_, r)| r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn router(text: &str) -> Router {
        let cfg = crate::config::parse("t", text).unwrap();
        let known = crate::config::sites::known(&cfg);
        let env = Env {
            upstreams: &HashMap::new(),
            logs: &crate::state::logs::LogTable::default(),
            caches: &HashMap::new(),
            known: &known,
            zones: &Default::default(),
        };
        Router::build(&cfg.location, &env, &Default::default()).unwrap()
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
            Handler::Return(ret) => ret.body.as_literal().unwrap().to_string(),
            Handler::EmptyGif => "gif".into(),
            _ => unreachable!(),
        };
        assert_eq!(body("/a/b"), "gif");
        assert_eq!(body("/a/bc"), "ab");
        assert_eq!(body("/a/x"), "a");
        assert_eq!(body("/zzz"), "root");
    }

    #[test]
    fn many_regexes_match_in_config_order_with_the_prefix_index() {
        // More than REGEX_SCAN regexes: the prefix index (or the RegexSet) decides; the
        // answer must be the first matching regex in config order, as a plain scan.
        let pats = [
            ("regex", "^/a/b"),
            ("regex", "^/a/"),
            ("iregex", "^/CI/"),
            ("regex", r"\.jpg$"),
            ("regex", "^/a/b/c"),
            ("regex", "^/(x|y)/"),
            ("regex", "^/a|^/q"),
            ("regex", "(?m)^/m"),
            ("regex", "^/ab?c"),
            ("regex", "^/obj/(?<size>[0-9]+k)/"),
            ("regex", "^/a/b/c/d"),
            ("regex", "^/"),
            // Enough prefixes of `/ci/x` that it takes the RegexSet: `iregex` still
            // matches case-insensitively there.
            ("regex", "^/c"),
            ("regex", "^/ci/"),
            ("regex", "^/ci/x"),
        ];
        let mut text = String::from("[[listen]]\naddr = \"127.0.0.1:1\"\n");
        for (i, (kind, p)) in pats.iter().enumerate() {
            text.push_str(&format!(
                "[[location]]\n{kind} = '{p}'\nreturn = {{ status = 200, body = \"{i}\" }}\n"
            ));
        }
        let r = router(&text);
        assert!(r.index.is_some());
        let res: Vec<Regex> = pats
            .iter()
            .map(|(k, p)| compile_regex(p, *k == "iregex").unwrap())
            .collect();
        for path in [
            "/a/b/c/d",
            "/a/b",
            "/a/x",
            "/ci/x",
            "/Ci/x",
            "/p.jpg",
            "/a/b/c.jpg",
            "/x/1",
            "/q",
            "/m",
            "/ac",
            "/abc",
            "/obj/1k/1",
            "/obj/x/",
            "/",
            "",
            "/zz",
            "/ci/x",
        ] {
            let want = res.iter().position(|re| re.is_match(path));
            let got = r.find(path).map(|route| match &route.handler {
                Handler::Return(ret) => ret.body.as_literal().unwrap().parse::<usize>().unwrap(),
                _ => unreachable!(),
            });
            assert_eq!(got, want, "{path}");
        }
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
