//! One variable: what `$name` refers to, resolved when the config is compiled, and how
//! its value is written for a request.

use super::ctx::{normalize_host, Ctx};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

/// A variable reference, resolved once from its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    /// `$host`: the request's host (absolute-form target, else `Host` / HTTP/2
    /// `:authority`), lower-case, without port or trailing dot; else `$server_name`.
    Host,
    /// `$scheme`: `https` on a TLS listener, else `http`.
    Scheme,
    RequestMethod,
    /// `$request_uri`: the original target's path and query (before any rewrite).
    RequestUri,
    /// `$uri`: the current path (after rewrites), without the query.
    Uri,
    /// `$args`: the current query (without `?`).
    Args,
    /// `$is_args`: `?` when `$args` is not empty.
    IsArgs,
    /// `$server_name`: the first name of the server that took the request.
    ServerName,
    /// `$server_port`: the port of the listener the connection arrived on.
    ServerPort,
    RemoteAddr,
    /// `$binary_remote_addr`: 4 or 16 raw bytes.
    BinaryRemoteAddr,
    /// `$arg_NAME`: the first query argument NAME (name case-insensitive, value raw).
    Arg(Box<str>),
    /// `$http_NAME`: request header NAME (`_` for `-`, any case); repeated fields joined
    /// with `, ` (`; ` for Cookie).
    Http(Box<str>),
    /// `$cookie_NAME`.
    Cookie(Box<str>),
    /// `$0`..`$9`: a numbered capture of the latest regex match.
    Capture(u8),
    /// `$name`: a named capture (`(?<name>...)`) of a server-name, location or rewrite
    /// regex.
    Named(Box<str>),
    /// A `[[map]]` variable, by its index in [`super::Maps`].
    Map(u16),
    /// A `[[geo]]` variable, by its index in [`super::Maps::geo`].
    Geo(u16),
    // Log-time variables: empty unless the context carries `LogFacts`.
    /// `$status`: the response status.
    Status,
    /// `$request`: the request line (`GET /a?b HTTP/1.1`).
    Request,
    TimeIso8601,
    /// `$time_local`: `01/May/2024:12:00:00 +0000`.
    TimeLocal,
    UpstreamCacheStatus,
    /// `$body_bytes_sent`: response body bytes sent.
    BodyBytesSent,
    /// `$bytes_sent`: response head and body bytes sent.
    BytesSent,
    /// `$request_length`: request head bytes and body bytes read.
    RequestLength,
    /// `$request_time`: seconds with millisecond resolution (`0.012`).
    RequestTime,
    /// `$upstream_response_time`: as `$request_time`, for the upstream exchange.
    UpstreamResponseTime,
    // Request variables the access log formats use.
    /// `$remote_user`: the user name of `Authorization: Basic` credentials.
    RemoteUser,
    /// `$server_protocol`: `HTTP/1.1` (`HTTP/2.0` on HTTP/2).
    ServerProtocol,
    /// `$limit_req_status`: what the location's `limit_req` did (nginx's values).
    LimitReqStatus,
}

/// The variable names a config defines besides the built-ins: its `[[map]]` variables
/// and the named captures of its regexes (nginx makes every named capture a variable).
///
/// It also records whether a template compiled with it reads a regex capture (`$1`,
/// `$name`): when none does, routing does not copy captures at all
/// ([`Known::reads_captures`]). So every template a request may render must be compiled
/// with the `Known` the site table is built with, before the table is built.
#[derive(Debug, Clone, Default)]
pub struct Known {
    maps: HashMap<String, u16>,
    geos: HashMap<String, u16>,
    captures: HashSet<String>,
    reads_captures: std::cell::Cell<bool>,
}

impl Known {
    /// Declares a `[[map]]` variable (name without `$`), index `i` in the maps.
    pub fn add_map(&mut self, name: &str, i: u16) {
        self.maps.insert(name.to_string(), i);
    }

    /// Declares a `[[geo]]` variable (name without `$`), index `i` in the geo tables.
    pub fn add_geo(&mut self, name: &str, i: u16) {
        self.geos.insert(name.to_string(), i);
    }

    /// Whether `name` is already a variable (built-in, map, geo or capture).
    pub fn defines(&self, name: &str) -> bool {
        Var::resolve(name, self).is_some()
    }

    /// Whether a template compiled with this table reads a regex capture.
    pub fn reads_captures(&self) -> bool {
        self.reads_captures.get()
    }

    /// Declares the named capture groups of a regex.
    pub fn add_captures(&mut self, re: &regex::Regex) {
        for n in re.capture_names().flatten() {
            self.captures.insert(n.to_string());
        }
    }
}

impl Var {
    /// The variable called `name` (without `$`), or None when the config defines none.
    pub fn resolve(name: &str, known: &Known) -> Option<Var> {
        let v = match name {
            "host" => Var::Host,
            "scheme" => Var::Scheme,
            "request_method" => Var::RequestMethod,
            "request_uri" => Var::RequestUri,
            "uri" | "document_uri" => Var::Uri,
            "args" | "query_string" => Var::Args,
            "is_args" => Var::IsArgs,
            "server_name" => Var::ServerName,
            "server_port" => Var::ServerPort,
            "remote_addr" => Var::RemoteAddr,
            "binary_remote_addr" => Var::BinaryRemoteAddr,
            "status" => Var::Status,
            "request" => Var::Request,
            "time_iso8601" => Var::TimeIso8601,
            "upstream_cache_status" => Var::UpstreamCacheStatus,
            "time_local" => Var::TimeLocal,
            "body_bytes_sent" => Var::BodyBytesSent,
            "bytes_sent" => Var::BytesSent,
            "request_length" => Var::RequestLength,
            "request_time" => Var::RequestTime,
            "upstream_response_time" => Var::UpstreamResponseTime,
            "remote_user" => Var::RemoteUser,
            "server_protocol" => Var::ServerProtocol,
            "limit_req_status" => Var::LimitReqStatus,
            _ => {
                if let Some(i) = known.maps.get(name) {
                    return Some(Var::Map(*i));
                }
                if let Some(i) = known.geos.get(name) {
                    return Some(Var::Geo(*i));
                }
                if known.captures.contains(name) {
                    known.reads_captures.set(true);
                    return Some(Var::Named(name.into()));
                }
                if name.len() == 1 && name.as_bytes()[0].is_ascii_digit() {
                    known.reads_captures.set(true);
                    return Some(Var::Capture(name.as_bytes()[0] - b'0'));
                }
                let by_name = |prefix: &str| name.strip_prefix(prefix).filter(|n| !n.is_empty());
                if let Some(n) = by_name("arg_") {
                    return Some(Var::Arg(n.into()));
                }
                if let Some(n) = by_name("http_") {
                    return Some(Var::Http(n.replace('_', "-").to_ascii_lowercase().into()));
                }
                if let Some(n) = by_name("cookie_") {
                    return Some(Var::Cookie(n.into()));
                }
                return None;
            }
        };
        Some(v)
    }

    /// Whether [`Var::write`] always appends UTF-8: values taken from `str`s (the target,
    /// the host, captures) or ASCII; not header or cookie bytes, not the binary address,
    /// not a map (whose values may hold either).
    pub fn writes_utf8(&self) -> bool {
        !matches!(
            self,
            Var::Http(_) | Var::Cookie(_) | Var::BinaryRemoteAddr | Var::Map(_)
        )
    }

    /// Appends the variable's value for this request (nothing when it has none).
    pub fn write(&self, ctx: &Ctx<'_>, out: &mut Vec<u8>) {
        match self {
            Var::Host => match ctx.req.host().map(normalize_host).filter(|h| !h.is_empty()) {
                Some(h) => {
                    let at = out.len();
                    out.extend_from_slice(h.as_bytes());
                    out[at..].make_ascii_lowercase();
                }
                None => out.extend_from_slice(ctx.server_name.as_bytes()),
            },
            Var::Scheme => out.extend_from_slice(if ctx.client.tls { b"https" } else { b"http" }),
            Var::RequestMethod => out.extend_from_slice(ctx.req.method.as_str().as_bytes()),
            Var::RequestUri => out.extend_from_slice(ctx.request_uri.as_bytes()),
            Var::Uri => out.extend_from_slice(ctx.uri.as_bytes()),
            Var::Args => out.extend_from_slice(ctx.args.unwrap_or("").as_bytes()),
            Var::IsArgs => {
                if ctx.args.is_some_and(|a| !a.is_empty()) {
                    out.push(b'?');
                }
            }
            Var::ServerName => out.extend_from_slice(ctx.server_name.as_bytes()),
            Var::ServerPort => edge_http::write_decimal(out, u64::from(ctx.client.server_port)),
            Var::RemoteAddr => {
                use std::io::Write;
                let _ = write!(out, "{}", client_ip(ctx));
            }
            Var::BinaryRemoteAddr => match client_ip(ctx) {
                IpAddr::V4(a) => out.extend_from_slice(&a.octets()),
                IpAddr::V6(a) => out.extend_from_slice(&a.octets()),
            },
            Var::Arg(name) => {
                if let Some(v) = arg(ctx.args.unwrap_or(""), name) {
                    out.extend_from_slice(v.as_bytes());
                }
            }
            Var::Http(name) => {
                let sep: &[u8] = if &**name == "cookie" { b"; " } else { b", " };
                for (i, v) in ctx.req.headers.get_all(name).enumerate() {
                    if i > 0 {
                        out.extend_from_slice(sep);
                    }
                    out.extend_from_slice(v);
                }
            }
            Var::Cookie(name) => {
                if let Some(v) = cookie(&ctx.req.headers, name) {
                    out.extend_from_slice(v);
                }
            }
            Var::Capture(n) => {
                if let Some(v) = ctx.caps.numbered(*n as usize) {
                    out.extend_from_slice(v.as_bytes());
                }
            }
            Var::Named(name) => {
                if let Some(v) = ctx.caps.named(name) {
                    out.extend_from_slice(v.as_bytes());
                }
            }
            Var::Map(i) => ctx.maps.write(*i as usize, ctx, out),
            Var::Geo(i) => ctx.maps.write_geo(*i as usize, ctx, out),
            Var::Status => {
                if let Some(l) = ctx.log {
                    edge_http::write_decimal(out, u64::from(l.status));
                }
            }
            Var::Request => {
                // The request line as it came: a rewrite changed the target, not this.
                let t = &ctx.req.target;
                let pq_len = ctx.req.path_and_query().len();
                let origin = t.get(..t.len().saturating_sub(pq_len)).unwrap_or("");
                out.extend_from_slice(ctx.req.method.as_str().as_bytes());
                out.push(b' ');
                out.extend_from_slice(origin.as_bytes());
                out.extend_from_slice(ctx.request_uri.as_bytes());
                out.push(b' ');
                out.extend_from_slice(ctx.req.version.as_str().as_bytes());
            }
            Var::TimeIso8601 => {
                if let Some(l) = ctx.log {
                    out.extend_from_slice(l.time_iso8601.as_bytes());
                }
            }
            Var::TimeLocal => {
                if let Some(l) = ctx.log {
                    out.extend_from_slice(l.time_local.as_bytes());
                }
            }
            Var::UpstreamCacheStatus => {
                if let Some(s) = ctx.log.and_then(|l| l.cache_status) {
                    out.extend_from_slice(s.as_bytes());
                }
            }
            Var::BodyBytesSent => {
                if let Some(l) = ctx.log {
                    edge_http::write_decimal(out, l.body_bytes_sent);
                }
            }
            Var::BytesSent => {
                if let Some(l) = ctx.log {
                    edge_http::write_decimal(out, l.bytes_sent);
                }
            }
            Var::RequestLength => {
                if let Some(l) = ctx.log {
                    edge_http::write_decimal(out, l.request_length);
                }
            }
            Var::RequestTime => {
                if let Some(l) = ctx.log {
                    write_seconds(out, l.request_time);
                }
            }
            Var::UpstreamResponseTime => {
                if let Some(t) = ctx.log.and_then(|l| l.upstream_response_time) {
                    write_seconds(out, t);
                }
            }
            Var::RemoteUser => {
                let mut buf = [0u8; MAX_BASIC];
                if let Some(u) = basic_user(&ctx.req.headers, &mut buf) {
                    out.extend_from_slice(u);
                }
            }
            Var::ServerProtocol => out.extend_from_slice(ctx.req.version.as_str().as_bytes()),
            Var::LimitReqStatus => {
                if let Some(s) = ctx.limit_req_status {
                    out.extend_from_slice(s.as_bytes());
                }
            }
        }
    }

    /// Whether a variable that wrote nothing has a value at all (an empty header, an
    /// argument without a value) rather than none (nginx's "not found", which an access
    /// log writes as `-`). Only asked after an empty write, so it costs nothing usually.
    pub fn is_found(&self, ctx: &Ctx<'_>) -> bool {
        match self {
            Var::Http(name) => ctx.req.headers.get(name).is_some(),
            Var::Cookie(name) => cookie(&ctx.req.headers, name).is_some(),
            Var::Arg(name) => arg(ctx.args.unwrap_or(""), name).is_some(),
            Var::Map(_) | Var::Geo(_) => true,
            _ => false,
        }
    }
}

/// `12.345`: seconds with milliseconds, as nginx writes `$request_time`.
fn write_seconds(out: &mut Vec<u8>, t: std::time::Duration) {
    edge_http::write_decimal(out, t.as_secs());
    let ms = t.subsec_millis();
    out.extend_from_slice(&[
        b'.',
        b'0' + (ms / 100) as u8,
        b'0' + (ms / 10 % 10) as u8,
        b'0' + (ms % 10) as u8,
    ]);
}

/// Longest `Authorization: Basic` credentials decoded for `$remote_user`.
const MAX_BASIC: usize = 512;

/// The user of `Authorization: Basic <base64(user:password)>`, decoded into `buf`
/// (None: no such header, not Basic, bad base64, or longer than [`MAX_BASIC`]).
fn basic_user<'b>(
    headers: &edge_http::HeaderMap,
    buf: &'b mut [u8; MAX_BASIC],
) -> Option<&'b [u8]> {
    let v = headers.get("authorization")?.trim_ascii();
    let (scheme, rest) = v.split_at(v.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let rest = rest.trim_ascii();
    let mut n = 0;
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in rest {
        let d = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            _ => return None,
        };
        acc = ((acc << 6) | u32::from(d)) & 0xFFFF;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            *buf.get_mut(n)? = (acc >> bits) as u8;
            n += 1;
        }
    }
    let dec = &buf[..n];
    let user = dec
        .iter()
        .position(|&b| b == b':')
        .map_or(dec, |i| &dec[..i]);
    Some(user)
}

/// The client's address, an IPv4-mapped IPv6 one as IPv4 (a dual-stack listener).
fn client_ip(ctx: &Ctx<'_>) -> IpAddr {
    match ctx.client.peer.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// The raw value of the first query argument called `name` (any case), as nginx's
/// `$arg_NAME`; an argument without `=` has the empty value.
pub(super) fn arg<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    // Bytes, not `str::split`: this runs per request for every `$arg_` of a cache key.
    let q = query.as_bytes();
    let name = name.as_bytes();
    let mut start = 0;
    while start < q.len() {
        let end = q[start..]
            .iter()
            .position(|&b| b == b'&')
            .map_or(q.len(), |i| start + i);
        let pair = &q[start..end];
        let klen = pair.iter().position(|&b| b == b'=').unwrap_or(pair.len());
        if klen == name.len() && pair[..klen].eq_ignore_ascii_case(name) {
            // '&' and '=' are ASCII: these are char boundaries.
            return query.get((start + klen + 1).min(end)..end);
        }
        start = end + 1;
    }
    None
}

/// The value of cookie `name` (any case) over every `Cookie` field.
fn cookie<'h>(headers: &'h edge_http::HeaderMap, name: &str) -> Option<&'h [u8]> {
    headers.get_all("cookie").find_map(|line| {
        line.split(|&b| b == b';').find_map(|pair| {
            let eq = pair.iter().position(|&b| b == b'=')?;
            let k = pair[..eq].trim_ascii();
            k.eq_ignore_ascii_case(name.as_bytes())
                .then(|| pair[eq + 1..].trim_ascii())
        })
    })
}
