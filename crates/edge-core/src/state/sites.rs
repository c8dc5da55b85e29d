//! The site table: `[[server]]`s chosen by host on each listener (nginx `server_name`
//! order: exact, longest `*.lead`, longest `trail.*`, then regexes in config order),
//! each with its [`Router`] of locations; the rewrite pass (`rewrite`, with `last`
//! searching the locations again, at most [`MAX_URI_CHANGES`] times); and the
//! `[[map]]`s templates read.
//!
//! Top-level `[[location]]`s form the implicit default server (index 0, no names, on
//! every listener), so a config without `[[server]]` routes as it always did.
//!
//! Cost: a listener with a single server (the common case) looks at no host at all;
//! otherwise the host is lower-cased into a stack buffer and looked up in a hash map
//! (then wildcards and regexes only when the exact lookup misses). Routing allocates
//! only when a regex with capture groups matches or a rewrite applies.

use super::error::StateError;
use super::route::{Env, Handler, Route, Router};
use crate::config::validate::BadValue;
use crate::config::{Config, RewriteFlag};
use crate::vars::{
    normalize_uri, Captures, Client, Ctx, Map, Maps, NamePattern, NameTable, Routed,
};
use edge_http::RequestHead;
use std::borrow::Cow;
use std::sync::Arc;

/// URI changes (`last`, or rewrites without a flag) before the request fails with 500
/// (nginx's `NGX_HTTP_MAX_URI_CHANGES`: a rewrite cycle).
pub const MAX_URI_CHANGES: usize = 10;

/// Longest URI a rewrite may produce.
pub const MAX_REWRITTEN_URI: usize = 16 * 1024;

/// Longest host name looked up (DNS allows 253); longer ones get the default server.
const MAX_HOST: usize = 255;

pub struct Server {
    /// The first name (`$server_name`, nginx's: a regex as written, `.x` as `x`); empty
    /// for the implicit server.
    pub name: String,
    pub router: Router,
    /// The access log of its requests that no location took (its `access_log`, else the
    /// top level's).
    pub log: super::logs::LogRef,
}

/// The servers answering on one `[[listen]]`.
#[derive(Default)]
struct OnListener {
    names: NameTable<u16>,
    /// Index of the server for an unknown host (None: no server on this listener).
    default: Option<u16>,
}

pub struct Sites {
    pub servers: Vec<Server>,
    /// Some template reads a regex capture (`Known::reads_captures`); else matches
    /// keep none (no copy of the subject per request).
    captures: bool,
    /// By `[[listen]]` index.
    listeners: Vec<OnListener>,
    pub maps: Maps,
}

/// Where routing sent a request.
pub enum Routing<'a> {
    /// Serve it with this route; `Some(uri)`: a rewrite changed the path and query.
    Route(&'a Arc<Route>, Option<String>),
    /// A rewrite redirects (301 or 302) to this location.
    Redirect(u16, String),
    /// No location matches.
    NotFound,
    /// A rewrite cycle (more than [`MAX_URI_CHANGES`] changes).
    Cycle,
    /// The path does not normalize ([`normalize_uri`]: `%00`, a bad escape, `..` above
    /// the root): 400.
    BadRequest,
}

impl Sites {
    pub fn build(cfg: &Config, env: &Env<'_>) -> Result<Sites, StateError> {
        let bad = |m: String| StateError::BadValue(BadValue(m));
        let mut maps = Maps::default();
        for m in &cfg.map {
            let mut table = NameTable::default();
            let mut values = Vec::new();
            for (i, e) in m.entries.get_ref().iter().enumerate() {
                for p in NamePattern::parse(&e.pattern, false).map_err(bad)? {
                    table.insert(p, i as u16);
                }
                values.push(template(&e.value, env)?);
            }
            table.finish();
            maps.list.push(Map {
                source: template(m.source.get_ref(), env)?,
                table,
                values,
                default: match &m.default {
                    Some(d) => template(d.get_ref(), env)?,
                    None => crate::vars::Template::default(),
                },
            });
        }
        for g in &cfg.geo {
            let t0 = std::time::Instant::now();
            let table = g.table().map_err(bad)?;
            tracing::info!(
                "geo ${}: {} networks, {} values, {} KiB ({:?})",
                g.name(),
                table.networks(),
                table.values(),
                table.heap_bytes() / 1024,
                t0.elapsed()
            );
            maps.geo.push(crate::vars::Geo {
                source: crate::config::geo::source(g, env.known).map_err(bad)?,
                table,
                default: g
                    .default
                    .as_ref()
                    .map_or("", |d| d.get_ref().as_str())
                    .into(),
            });
        }
        let mut servers = Vec::new();
        let mut listeners: Vec<OnListener> =
            cfg.listen.iter().map(|_| OnListener::default()).collect();
        let implicit = !cfg.location.is_empty() || cfg.server.is_empty();
        if implicit {
            let log = env.logs.top.clone();
            servers.push(Server {
                name: String::new(),
                router: Router::build(&cfg.location, env, &log)?,
                log,
            });
            for l in &mut listeners {
                l.default = Some(0);
            }
        }
        for s in &cfg.server {
            let i = servers.len() as u16;
            let names = s.names.get_ref();
            let log = env
                .logs
                .resolve(s.access_log.as_ref().map(|a| a.get_ref()), &env.logs.top);
            servers.push(Server {
                name: names.first().map(|n| server_name(n)).unwrap_or_default(),
                router: Router::build(&s.location, env, &log)?,
                log,
            });
            for (li, l) in cfg.listen.iter().enumerate() {
                let here = match &s.listen {
                    Some(addrs) => addrs.get_ref().contains(l.addr.get_ref()),
                    None => true,
                };
                if !here {
                    continue;
                }
                let on = &mut listeners[li];
                for n in names {
                    for p in NamePattern::parse(n, true).map_err(bad)? {
                        on.names.insert(p, i);
                    }
                }
                // `default = true` takes over; else the first server here.
                if *s.default.get_ref() || on.default.is_none() {
                    on.default = Some(i);
                }
            }
        }
        for l in &mut listeners {
            // `select` looks names up lower-cased.
            l.names.finish_lowered();
        }
        Ok(Sites {
            servers,
            captures: env.known.reads_captures(),
            listeners,
            maps,
        })
    }

    /// Whether choosing a server on listener `listen` looks at the host (more than one
    /// server answers there).
    pub fn looks_up(&self, listen: usize) -> bool {
        self.listeners
            .get(listen)
            .is_some_and(|on| !on.names.is_empty())
    }

    /// The server for a request's host on listener `listen`; a regex name's captures go
    /// to `caps`. None when no server answers on the listener.
    pub fn select(&self, listen: usize, host: Option<&str>, caps: &mut Captures) -> Option<u16> {
        let on = self.listeners.get(listen)?;
        if on.names.is_empty() {
            return on.default;
        }
        let Some(host) = host.map(crate::vars::normalize_host) else {
            return on.default;
        };
        if host.len() > MAX_HOST {
            return on.default;
        }
        // Most names fit the small buffer (less to clear per request).
        let mut small = [0u8; 64];
        let mut big;
        let buf: &mut [u8] = if host.len() <= small.len() {
            &mut small
        } else {
            big = [0u8; MAX_HOST];
            &mut big
        };
        let lower = &mut buf[..host.len()];
        // Copied and lower-cased in one pass.
        for (d, &c) in lower.iter_mut().zip(host.as_bytes()) {
            *d = c.to_ascii_lowercase();
        }
        // SAFETY: a copy of a `str` with ASCII letters lower-cased is still UTF-8
        // (ASCII bytes are never part of a multi-byte sequence).
        let lower = unsafe { std::str::from_utf8_unchecked(lower) };
        on.names
            .find(lower, self.captures.then_some((caps, true)))
            .copied()
            .or(on.default)
    }

    /// The location a URL's host and path reach, without rewrites: the server is the
    /// first that a listener picks for `host` (None: the default), the location the
    /// one its router finds for `path`. Purges use it to apply the location's
    /// `cache_key_args` to a `url=`.
    pub fn location_of(&self, host: Option<&str>, path: &str) -> Option<&Arc<Route>> {
        let mut caps = Captures::default();
        let server = (0..self.listeners.len()).find_map(|l| self.select(l, host, &mut caps))?;
        self.servers.get(server as usize)?.router.find(path)
    }

    /// Finds the route of a request on `server`, running the locations' rewrites.
    /// Locations and rewrites match the normalized path ([`normalize_uri`]: nginx's
    /// `$uri`), which is left in `routed.uri` when it differs from the final target's
    /// path; `routed.caps` collects the captures; templates see `client` and this
    /// table's maps.
    pub fn route<'s>(
        &'s self,
        server: u16,
        req: &RequestHead,
        client: Client,
        routed: &mut Routed,
    ) -> Routing<'s> {
        let Some(srv) = self.servers.get(server as usize) else {
            return Routing::NotFound;
        };
        let mut current: Option<String> = None;
        let mut changes = 0;
        'search: loop {
            let pq = current.as_deref().unwrap_or_else(|| req.path_and_query());
            let Ok((path, _)) = normal_path(pq) else {
                return Routing::BadRequest;
            };
            let caps = self.captures.then_some(&mut routed.caps);
            let Some(route) = srv.router.find_with(&path, caps) else {
                return Routing::NotFound;
            };
            routed.uri = owned(path);
            if route.rewrites.is_empty() {
                return Routing::Route(route, current);
            }
            let mut changed = false;
            let mut last = false;
            for rw in &route.rewrites {
                let pq = current.as_deref().unwrap_or_else(|| req.path_and_query());
                let Ok((path, args)) = normal_path(pq) else {
                    return Routing::BadRequest;
                };
                let Some(c) = rw.regex.captures(&path) else {
                    // nginx empties `$1`.. when a rewrite's regex does not match.
                    routed.caps.clear_numbered();
                    continue;
                };
                if self.captures && rw.regex.captures_len() > 1 {
                    routed.caps.set_latest(&rw.regex, &path, &c);
                }
                let ctx =
                    Ctx::new(req, client, &srv.name, routed, &self.maps).with_path(&path, args);
                let mut repl = Vec::new();
                rw.replacement.render(&ctx, &mut repl);
                let target = rewritten(&repl, args);
                if target.len() > MAX_REWRITTEN_URI {
                    return Routing::Cycle;
                }
                let absolute =
                    starts_with_ci(&target, "http://") || starts_with_ci(&target, "https://");
                match rw.flag {
                    Some(RewriteFlag::Permanent) => return Routing::Redirect(301, target),
                    Some(RewriteFlag::Redirect) => return Routing::Redirect(302, target),
                    _ if absolute => return Routing::Redirect(302, target),
                    _ => {}
                }
                let target = if target.starts_with('/') {
                    target
                } else {
                    format!("/{target}")
                };
                current = Some(target);
                changed = true;
                match rw.flag {
                    Some(RewriteFlag::Break) => {
                        let Ok(uri) = uri_of(current.as_deref()) else {
                            return Routing::BadRequest;
                        };
                        routed.uri = uri;
                        return Routing::Route(route, current);
                    }
                    Some(RewriteFlag::Last) => {
                        last = true;
                        break;
                    }
                    _ => {}
                }
            }
            // A `return` follows the rewrites (nginx runs a location's `rewrite`s and
            // `return` in order): it answers here, with the rewritten URI. Only a
            // location without one searches again for a changed URI.
            if !changed {
                return Routing::Route(route, current);
            }
            if !last && matches!(route.handler, Handler::Return(_)) {
                let Ok(uri) = uri_of(current.as_deref()) else {
                    return Routing::BadRequest;
                };
                routed.uri = uri;
                return Routing::Route(route, current);
            }
            changes += 1;
            if changes > MAX_URI_CHANGES {
                return Routing::Cycle;
            }
            continue 'search;
        }
    }
}

/// The normalized path (`$uri`) and the query of a path and query. A target that is not
/// a path (`*`) is left as it is.
fn normal_path(pq: &str) -> Result<(Cow<'_, str>, Option<&str>), crate::vars::UriError> {
    // The common case in one pass: a normal path, ended by the query or the target's end.
    if let Some(end) = crate::vars::normal_path_len(pq.as_bytes()) {
        // `?` is ASCII: a char boundary.
        let args = (end < pq.len()).then(|| &pq[end + 1..]);
        return Ok((Cow::Borrowed(&pq[..end]), args));
    }
    let (path, args) = match memchr::memchr(b'?', pq.as_bytes()) {
        // '?' is ASCII: a char boundary.
        Some(i) => (&pq[..i], Some(&pq[i + 1..])),
        None => (pq, None),
    };
    if !path.starts_with('/') {
        return Ok((Cow::Borrowed(path), args));
    }
    Ok((normalize_uri(path)?, args))
}

/// What `Routed::uri` keeps: the normalized path when it is not the target's own.
fn owned(path: Cow<'_, str>) -> Option<Box<str>> {
    match path {
        Cow::Borrowed(_) => None,
        Cow::Owned(s) => Some(s.into_boxed_str()),
    }
}

/// `Routed::uri` for a rewritten target.
fn uri_of(pq: Option<&str>) -> Result<Option<Box<str>>, crate::vars::UriError> {
    let (path, _) = normal_path(pq.unwrap_or_default())?;
    Ok(owned(path))
}

/// `$server_name` of a server whose first name is `first`, as nginx has it: the name
/// as written, lower-cased unless it is a regex, without the leading dot of `.name`.
fn server_name(first: &str) -> String {
    if first.starts_with('~') {
        return first.to_string();
    }
    let n = first.to_ascii_lowercase();
    match n.strip_prefix('.') {
        Some(rest) => rest.to_string(),
        None => n,
    }
}

fn template(src: &str, env: &Env<'_>) -> Result<crate::vars::Template, StateError> {
    crate::vars::Template::compile(src, env.known)
        .map_err(|e| StateError::BadValue(BadValue(e.to_string())))
}

fn starts_with_ci(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len() && s.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// A rewrite's result with nginx's query rules: a replacement with `?` sets the query,
/// and the request's query (`args`) follows it after `&`, unless the replacement ends
/// with `?`. Bytes that may not appear in a request target (controls, space, non-ASCII)
/// are percent-encoded, so a variable's value cannot break the upstream request line.
fn rewritten(repl: &[u8], args: Option<&str>) -> String {
    let (repl, drop_args) = match repl.strip_suffix(b"?") {
        Some(r) => (r, true),
        None => (repl, false),
    };
    let mut out = String::with_capacity(repl.len() + args.map_or(0, |a| a.len() + 1));
    for &b in repl {
        if b <= b' ' || b >= 0x7f || b == b'"' || b == b'<' || b == b'>' || b == b'\\' {
            out.extend(edge_http::normalize::pct_escape(b).map(char::from));
        } else {
            out.push(char::from(b));
        }
    }
    if let Some(a) = args.filter(|a| !a.is_empty() && !drop_args) {
        out.push(if out.contains('?') { '&' } else { '?' });
        out.push_str(a);
    }
    out
}

#[cfg(test)]
mod tests;
