//! Checks of `[[server]]`, locations' match keys and rewrites, `[[map]]` and every
//! template (`cache_key`, `hash_key`, `return`, rewrite replacements, map values):
//! regexes compile, wildcards are well formed, and every variable exists, so that `-t`
//! reports `file:line: key: unknown variable "$request_url"`.

use super::verr::{err, VErr};
use super::{Config, Location};
use crate::vars::{compile_regex, Known, NamePattern, Template};
use std::ops::Range;

/// Most `[[map]]`s (their index is a u16 in compiled templates).
pub const MAX_MAPS: usize = 4096;

/// Compiles a template for a check; the message of its error.
pub fn template(src: &str, known: &Known) -> Result<Template, String> {
    Template::compile(src, known).map_err(|e| e.to_string())
}

/// The variables `cfg` defines besides the built-ins (its maps and the named captures
/// of its regexes). On a validated config it never fails; the state layer calls it to
/// compile the same templates.
pub fn known(cfg: &Config) -> Known {
    collect_known(cfg).unwrap_or_default()
}

fn collect_known(cfg: &Config) -> Result<Known, VErr> {
    let mut k = Known::default();
    for s in &cfg.server {
        for n in s.names.get_ref() {
            for p in NamePattern::parse(n, true).map_err(|m| verr(&s.names, "server.names", m))? {
                if let NamePattern::Regex(r) = p {
                    k.add_captures(&r);
                }
            }
        }
    }
    for loc in cfg
        .location
        .iter()
        .chain(cfg.server.iter().flat_map(|s| &s.location))
    {
        if let Some((r, ci, key)) = location_regex(loc) {
            let re = compile_regex(r.get_ref(), ci).map_err(|m| verr(r, key, m))?;
            k.add_captures(&re);
        }
        for rw in &loc.rewrite {
            let re = compile_regex(&rw.get_ref().regex, false)
                .map_err(|m| verr(rw, "location.rewrite.regex", m))?;
            k.add_captures(&re);
        }
    }
    // Geo variables first: map templates may read them.
    super::geo::declare(cfg, &mut k)?;
    if cfg.map.len() > MAX_MAPS {
        return err(None, "map", format!("at most {MAX_MAPS} maps"));
    }
    for (i, m) in cfg.map.iter().enumerate() {
        let v = m.variable.get_ref();
        let name = v.strip_prefix('$').unwrap_or("");
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return err(
                Some(m.variable.span()),
                "map.variable",
                format!("{v:?} is not a variable name such as \"$is_bot\""),
            );
        }
        if k.defines(name) {
            return err(
                Some(m.variable.span()),
                "map.variable",
                format!("\"${name}\" is already a variable"),
            );
        }
        k.add_map(name, i as u16);
        for e in m.entries.get_ref() {
            for p in NamePattern::parse(&e.pattern, false)
                .map_err(|msg| verr(&m.entries, "map.entries.match", msg))?
            {
                if let NamePattern::Regex(r) = p {
                    k.add_captures(&r);
                }
            }
        }
    }
    Ok(k)
}

fn verr<T>(s: &toml::Spanned<T>, key: &str, message: String) -> VErr {
    VErr {
        span: Some(s.span()).filter(|s| s.end > 0),
        key: key.into(),
        message,
    }
}

/// A location's regex, whether it ignores case, and its key.
pub fn location_regex(loc: &Location) -> Option<(&toml::Spanned<String>, bool, &'static str)> {
    match (&loc.regex, &loc.iregex) {
        (Some(r), _) => Some((r, false, "location.regex")),
        (None, Some(r)) => Some((r, true, "location.iregex")),
        (None, None) => None,
    }
}

/// Servers, maps and upstream `hash_key`s; returns the names templates may use.
pub(super) fn validate(cfg: &Config) -> Result<Known, VErr> {
    let known = collect_known(cfg)?;
    // For each map, the maps its templates read.
    let mut deps: Vec<Vec<u16>> = Vec::with_capacity(cfg.map.len());
    for m in &cfg.map {
        let t = |s: &toml::Spanned<String>, key: &str| {
            template(s.get_ref(), &known).map_err(|msg| verr(s, key, msg))
        };
        let mut ts = vec![t(&m.source, "map.source")?];
        if let Some(d) = &m.default {
            ts.push(t(d, "map.default")?);
        }
        for e in m.entries.get_ref() {
            ts.push(
                template(&e.value, &known)
                    .map_err(|msg| verr(&m.entries, "map.entries.value", msg))?,
            );
        }
        let mut d: Vec<u16> = ts
            .iter()
            .flat_map(|t| t.vars())
            .filter_map(|v| match v {
                crate::vars::Var::Map(j) => Some(*j),
                _ => None,
            })
            .collect();
        d.sort_unstable();
        d.dedup();
        deps.push(d);
    }
    if let Some(cycle) = map_cycle(&deps) {
        let m = &cfg.map[cycle[0] as usize];
        let path: Vec<&str> = cycle
            .iter()
            .map(|&i| cfg.map[i as usize].variable.get_ref().as_str())
            .collect();
        return err(
            Some(m.variable.span()),
            "map.variable",
            format!(
                "{} depends on itself ({}): a map's source, default and values may not read it",
                m.variable.get_ref(),
                path.join(" -> ")
            ),
        );
    }
    for u in &cfg.upstream {
        if let Some(h) = &u.hash_key {
            // Built-in variables only: the group outlives reloads that renumber maps.
            template(h.get_ref(), &Known::default()).map_err(|m| {
                verr(
                    h,
                    "upstream.hash_key",
                    format!("{m} (built-in variables only)"),
                )
            })?;
        }
    }
    let listen_addrs: Vec<&String> = cfg.listen.iter().map(|l| l.addr.get_ref()).collect();
    for s in &cfg.server {
        if s.names.get_ref().is_empty() && !*s.default.get_ref() {
            return err(
                Some(s.names.span()),
                "server.names",
                "a server needs names = [...] or default = true",
            );
        }
        if let Some(n) =
            s.names.get_ref().iter().find(|n| {
                !n.starts_with('~') && n.bytes().any(|b| b <= b' ' || b == b'/' || b == 0x7f)
            })
        {
            return err(
                Some(s.names.span()),
                "server.names",
                format!("{n:?} is not a host name"),
            );
        }
        if let Some(l) = &s.listen {
            if l.get_ref().is_empty() {
                return err(
                    Some(l.span()),
                    "server.listen",
                    "list at least one [[listen]] addr, or leave it out",
                );
            }
            if let Some(a) = l.get_ref().iter().find(|a| !listen_addrs.contains(a)) {
                return err(
                    Some(l.span()),
                    "server.listen",
                    format!("{a:?} is not the addr of a [[listen]]"),
                );
            }
        }
    }
    // nginx: one `default_server` per address. A server without `listen` is on all.
    let mut default_of: Vec<Option<usize>> = vec![None; listen_addrs.len()];
    for (si, s) in cfg.server.iter().enumerate() {
        if !*s.default.get_ref() {
            continue;
        }
        for (li, addr) in listen_addrs.iter().enumerate() {
            let here = s
                .listen
                .as_ref()
                .is_none_or(|l| l.get_ref().contains(*addr));
            if !here {
                continue;
            }
            if let Some(first) = default_of[li].filter(|&f| f != si) {
                let names = |i: usize| match cfg.server[i].names.get_ref().first() {
                    Some(n) => format!("server {n:?}"),
                    None => format!("server #{}", i + 1),
                };
                return err(
                    Some(s.default.span()).filter(|s| s.end > 0),
                    "server.default",
                    format!(
                        "{} is already the default server on {addr:?} (one default per [[listen]] addr)",
                        names(first)
                    ),
                );
            }
            default_of[li] = Some(si);
        }
    }
    Ok(known)
}

/// A cycle among maps (`deps[i]`: the maps map `i` reads), as the maps along it with
/// the first repeated at the end; None when the maps form a DAG. Iterative depth-first
/// search: linear in maps and edges, no recursion.
pub fn map_cycle(deps: &[Vec<u16>]) -> Option<Vec<u16>> {
    // 0: not visited, 1: on the current path, 2: done.
    let mut state = vec![0u8; deps.len()];
    for root in 0..deps.len() {
        if state[root] != 0 {
            continue;
        }
        // (map, next edge to follow)
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        state[root] = 1;
        while let Some(top) = stack.last_mut() {
            let (node, edge) = *top;
            top.1 += 1;
            let Some(&next) = deps[node].get(edge) else {
                state[node] = 2;
                stack.pop();
                continue;
            };
            let next = next as usize;
            match state.get(next) {
                Some(0) => {
                    state[next] = 1;
                    stack.push((next, 0));
                }
                Some(1) => {
                    let from = stack.iter().position(|&(n, _)| n == next).unwrap_or(0);
                    let mut cycle: Vec<u16> =
                        stack[from..].iter().map(|&(n, _)| n as u16).collect();
                    cycle.push(next as u16);
                    return Some(cycle);
                }
                _ => {}
            }
        }
    }
    None
}

/// Most rewrites in one location.
pub const MAX_REWRITES: usize = 64;

/// A location's match keys, rewrites and templates; returns the span its errors point
/// at.
pub(super) fn validate_location(loc: &Location, known: &Known) -> Result<Range<usize>, VErr> {
    let matches: Vec<(&toml::Spanned<String>, &str)> = [
        (loc.exact.as_ref(), "location.exact"),
        (loc.prefix.as_ref(), "location.prefix"),
        (loc.regex.as_ref(), "location.regex"),
        (loc.iregex.as_ref(), "location.iregex"),
    ]
    .into_iter()
    .filter_map(|(m, k)| m.map(|m| (m, k)))
    .collect();
    let (m, key) = match matches.as_slice() {
        [one] => *one,
        [] => {
            let s = loc.proxy.as_ref().map(|p| p.span());
            return err(
                s,
                "location",
                "a location needs one of exact, prefix, regex or iregex",
            );
        }
        [(_, _), (second, _), ..] => {
            return err(
                Some(second.span()),
                "location",
                "set one of exact, prefix, regex or iregex, not several",
            )
        }
    };
    let span = m.span();
    if (key == "location.exact" || key == "location.prefix") && !m.get_ref().starts_with('/') {
        return err(Some(span), key, "must start with '/'");
    }
    if loc.stop_regex && loc.prefix.is_none() {
        return err(
            Some(span),
            "location.stop_regex",
            "applies to prefix locations only",
        );
    }
    if let Some((r, ci, key)) = location_regex(loc) {
        compile_regex(r.get_ref(), ci).map_err(|msg| verr(r, key, msg))?;
    }
    if loc.rewrite.len() > MAX_REWRITES {
        return err(
            Some(span),
            "location.rewrite",
            format!("at most {MAX_REWRITES} rewrites"),
        );
    }
    for rw in &loc.rewrite {
        let r = rw.get_ref();
        compile_regex(&r.regex, false).map_err(|m| verr(rw, "location.rewrite.regex", m))?;
        template(&r.replacement, known).map_err(|m| verr(rw, "location.rewrite.replacement", m))?;
        if r.replacement.is_empty() {
            return err(
                Some(rw.span()),
                "location.rewrite.replacement",
                "must not be empty",
            );
        }
    }
    if let Some(k) = &loc.cache_key {
        template(k.get_ref(), known).map_err(|m| verr(k, "location.cache_key", m))?;
    }
    validate_fields(loc, known, &span)?;
    if let Some(r) = &loc.ret {
        let ret = r.get_ref();
        template(&ret.body, known).map_err(|m| verr(r, "location.return.body", m))?;
        if let Some(l) = &ret.location {
            template(l, known).map_err(|m| verr(r, "location.return.location", m))?;
        }
    }
    Ok(span)
}

/// RFC 9110 5.1: a field name is a token.
fn is_field_name(n: &str) -> bool {
    !n.is_empty()
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Fields that frame or route the message: ours to write, never configurable.
fn is_framing(n: &str) -> bool {
    edge_http::is_hop_by_hop(n) || n.eq_ignore_ascii_case("content-length")
}

/// Most fields in one `proxy_set_header`, `add_header` or `proxy_hide_header`.
pub const MAX_FIELDS: usize = 256;

/// `proxy_set_header`, `proxy_hide_header`, `add_header` and `cache_key_args`.
fn validate_fields(loc: &Location, known: &Known, span: &Range<usize>) -> Result<(), VErr> {
    let proxied = loc.proxy.is_some();
    if let Some(set) = &loc.proxy_set_header {
        let key = "location.proxy_set_header";
        if !proxied {
            return err(Some(set.span()), key, "applies to proxied locations only");
        }
        if set.get_ref().len() > MAX_FIELDS {
            return err(
                Some(set.span()),
                key,
                format!("at most {MAX_FIELDS} fields"),
            );
        }
        let mut seen = std::collections::HashSet::new();
        for (n, v) in set.get_ref() {
            if !is_field_name(n) {
                return err(Some(set.span()), key, format!("{n:?} is not a field name"));
            }
            if !seen.insert(n.to_ascii_lowercase()) {
                return err(Some(set.span()), key, format!("{n:?} is set twice"));
            }
            if is_framing(n) || n.eq_ignore_ascii_case("via") {
                return err(
                    Some(set.span()),
                    key,
                    format!("{n:?} is written by edgecache itself (framing, hop-by-hop or loop detection)"),
                );
            }
            if n.eq_ignore_ascii_case("host") && v.is_empty() {
                return err(
                    Some(set.span()),
                    key,
                    "Host cannot be removed (HTTP/1.1 requires it)",
                );
            }
            check_value(v, known).map_err(|m| verr(set, key, format!("{n}: {m}")))?;
        }
    }
    if let Some(hide) = &loc.proxy_hide_header {
        let key = "location.proxy_hide_header";
        if !proxied {
            return err(Some(hide.span()), key, "applies to proxied locations only");
        }
        if hide.get_ref().len() > MAX_FIELDS {
            return err(
                Some(hide.span()),
                key,
                format!("at most {MAX_FIELDS} fields"),
            );
        }
        for n in hide.get_ref() {
            if !is_field_name(n) {
                return err(Some(hide.span()), key, format!("{n:?} is not a field name"));
            }
            if is_framing(n) || n.eq_ignore_ascii_case("date") || n.eq_ignore_ascii_case("server") {
                return err(
                    Some(hide.span()),
                    key,
                    format!("{n:?} is written by edgecache itself and cannot be hidden"),
                );
            }
        }
    }
    let key = "location.add_header";
    let at = || Some(span.clone());
    if loc.add_header.len() > MAX_FIELDS {
        return err(at(), key, format!("at most {MAX_FIELDS} fields"));
    }
    let mut seen = std::collections::HashSet::new();
    for (n, v) in &loc.add_header {
        if !is_field_name(n) {
            return err(at(), key, format!("{n:?} is not a field name"));
        }
        if !seen.insert(n.to_ascii_lowercase()) {
            return err(at(), key, format!("{n:?} is set twice"));
        }
        if is_framing(n) {
            return err(at(), key, format!("{n:?} is written by edgecache itself"));
        }
        check_value(v, known).map_err(|m| VErr {
            span: at(),
            key: key.into(),
            message: format!("{n}: {m}"),
        })?;
    }
    if let Some(a) = &loc.cache_key_args {
        let key = "location.cache_key_args";
        if !proxied {
            return err(Some(a.span()), key, "applies to proxied locations only");
        }
        args_policy(a.get_ref()).map_err(|m| verr(a, key, m))?;
    }
    Ok(())
}

/// A field value template: it compiles and has no line break.
fn check_value(v: &str, known: &Known) -> Result<(), String> {
    if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err("a field value cannot contain CR, LF or NUL".into());
    }
    template(v, known).map(|_| ())
}

/// `cache_key_args`, compiled: `include` and `exclude` are mutually exclusive, patterns
/// have `*` only at their ends.
pub fn args_policy(a: &super::CacheKeyArgs) -> Result<edge_http::normalize::ArgsPolicy, String> {
    use edge_http::normalize::{ArgPattern, ArgsPolicy, MAX_ARG_PATTERNS};
    let parse = |l: &[String], which: &str| -> Result<Vec<ArgPattern>, String> {
        if l.len() > MAX_ARG_PATTERNS {
            return Err(format!("{which}: at most {MAX_ARG_PATTERNS} patterns"));
        }
        l.iter()
            .map(|p| ArgPattern::parse(p).map_err(|m| format!("{which}: {m}")))
            .collect()
    };
    match (&a.include, &a.exclude) {
        (Some(_), Some(_)) => Err("set include or exclude, not both".into()),
        (Some(i), None) => Ok(ArgsPolicy {
            sort: a.sort,
            include: Some(parse(i, "include")?),
            exclude: Vec::new(),
        }),
        (None, e) => Ok(ArgsPolicy {
            sort: a.sort,
            include: None,
            exclude: parse(e.as_deref().unwrap_or(&[]), "exclude")?,
        }),
    }
}
