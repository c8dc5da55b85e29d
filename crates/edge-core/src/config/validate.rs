//! Semantic checks that serde cannot do: references between sections, addresses,
//! exclusive choices. Each error carries the span of the offending value when known.

use super::*;
use std::net::{SocketAddr, ToSocketAddrs};
use std::ops::Range;

use super::body::{validate_compress, validate_slice};
pub use super::body::{SLICE_MAX, SLICE_MIN, SLICE_PREFETCH_MAX};
pub(super) use super::verr::{err, VErr};

/// A value that does not parse (an address, an `allow` prefix, `levels`): the config
/// layer's error for its value parsers, which the layers above also call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadValue(pub String);

impl std::fmt::Display for BadValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadValue {}

impl From<BadValue> for String {
    fn from(b: BadValue) -> String {
        b.0
    }
}

/// Parses `ip:port`, or resolves `host:port` (only at config time, never at runtime).
pub fn parse_addr(s: &str) -> Result<SocketAddr, BadValue> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    match s.to_socket_addrs() {
        Ok(mut it) => it
            .next()
            .ok_or_else(|| BadValue(format!("{s:?} resolves to no address"))),
        Err(_) => Err(BadValue(format!(
            "invalid address {s:?}: expected IP:PORT such as \"127.0.0.1:8080\""
        ))),
    }
}

/// A configured server: `host:port` (plain) or `https://host[:port]`.
pub struct ServerTarget {
    pub addr: SocketAddr,
    pub tls_name: Option<rustls::pki_types::ServerName<'static>>,
    /// `Host` for an https server: the host, with the port when it is not 443.
    pub tls_host: Option<String>,
}

/// Parses one `servers` entry (names are resolved now, as nginx does at start).
pub fn parse_server(s: &str) -> Result<ServerTarget, BadValue> {
    let lower = s.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("https://") {
        let hostport = rest.trim_end_matches('/');
        if hostport.is_empty() || hostport.contains('/') {
            return Err(BadValue(format!(
                "invalid server {s:?}: expected https://host[:port] (no path)"
            )));
        }
        // [v6]:port, host:port, or a host alone (port 443).
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && !p.contains(']') => match p.parse::<u16>() {
                Ok(port) => (h, port),
                Err(_) => return Err(BadValue(format!("invalid port in {s:?}"))),
            },
            _ => (hostport, 443),
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addr = crate::config::validate::parse_addr(&if bare.contains(':') {
            format!("[{bare}]:{port}")
        } else {
            format!("{bare}:{port}")
        })?;
        let name = rustls::pki_types::ServerName::try_from(bare.to_string())
            .map_err(|_| BadValue(format!("invalid server name in {s:?}")))?;
        let host_header = if port == 443 {
            host.to_string()
        } else {
            format!("{host}:{port}")
        };
        return Ok(ServerTarget {
            addr,
            tls_name: Some(name),
            tls_host: Some(host_header),
        });
    }
    let plain = lower
        .strip_prefix("http://")
        .map(|r| &s[7..7 + r.len()])
        .unwrap_or(s);
    Ok(ServerTarget {
        addr: crate::config::validate::parse_addr(plain.trim_end_matches('/'))?,
        tls_name: None,
        tls_host: None,
    })
}

/// A parsed `allow` entry: an address prefix (`crate::access::cidr`).
pub use crate::access::cidr::Cidr;

impl From<crate::access::cidr::CidrError> for BadValue {
    fn from(e: crate::access::cidr::CidrError) -> BadValue {
        BadValue(e.0)
    }
}

/// Parses `levels = "1:2"`: up to three levels of one or two hex characters.
pub fn parse_levels(s: &str) -> Result<Vec<u8>, BadValue> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.is_empty() || parts.len() > 3 {
        return Err(BadValue(format!(
            "invalid levels {s:?}: expected 1 to 3 levels like \"1:2\""
        )));
    }
    parts
        .iter()
        .map(|p| match *p {
            "1" => Ok(1),
            "2" => Ok(2),
            _ => Err(BadValue(format!(
                "invalid levels {s:?}: each level is 1 or 2"
            ))),
        })
        .collect()
}

pub(super) fn validate(cfg: &Config) -> Result<(), VErr> {
    if cfg.listen.is_empty() {
        return err(
            None,
            "listen",
            "at least one [[listen]] with an addr is required",
        );
    }
    let mut seen: Vec<SocketAddr> = Vec::with_capacity(cfg.listen.len());
    for l in &cfg.listen {
        match parse_addr(l.addr.get_ref()) {
            Err(m) => return err(Some(l.addr.span()), "listen.addr", m),
            // One [[listen]] per address: servers and reloads identify listeners by it.
            Ok(a) if seen.contains(&a) => {
                return err(
                    Some(l.addr.span()),
                    "listen.addr",
                    format!("{:?} is listed twice", l.addr.get_ref()),
                )
            }
            Ok(a) => seen.push(a),
        }
        if l.backlog <= 0 {
            return err(Some(l.addr.span()), "listen.backlog", "must be positive");
        }
        if let Some(t) = &l.tls {
            let span = Some(t.span());
            let cfg = t.get_ref();
            if cfg.cert.is_some() != cfg.key.is_some() {
                return err(span, "listen.tls", "`cert` and `key` go together");
            }
            if cfg.cert.is_none() && cfg.certs.is_empty() {
                return err(span, "listen.tls", "needs `cert` and `key`, or `certs`");
            }
            // Read now, so a missing file or a key that is not the certificate's is a
            // config error (`-t`), not a failed start or reload.
            for (cert, key, names) in cfg.all() {
                if let Err(m) = crate::tls::load_key_pair(&cert, &key) {
                    return err(span, "listen.tls", m);
                }
                if let Some(n) = names
                    .iter()
                    .find(|n| n.is_empty() || n.contains(['/', ' ']))
                {
                    return err(
                        span,
                        "listen.tls.certs.names",
                        format!("{n:?} is not a host name"),
                    );
                }
            }
        }
    }
    for l in &cfg.listen {
        let span = Some(l.addr.span());
        if l.quic && l.tls.is_none() {
            return err(
                span,
                "listen.quic",
                "HTTP/3 needs TLS: add `tls` to this [[listen]]",
            );
        }
        if l.early_data && !l.quic {
            return err(span, "listen.early_data", "needs quic = true");
        }
        if !l.quic_gso && !l.quic {
            return err(span, "listen.quic_gso", "needs quic = true");
        }
        if !l.quic_bpf && !l.quic {
            return err(span, "listen.quic_bpf", "needs quic = true");
        }
        if l.quic_retry != super::listen::QuicRetry::Auto && !l.quic {
            return err(span, "listen.quic_retry", "needs quic = true");
        }
        if let Some(a) = &l.alt_svc {
            let v = a.get_ref();
            if v.is_empty()
                || v.len() > 1024
                || v.bytes().any(|b| b.is_ascii_control() || !b.is_ascii())
            {
                return err(
                    Some(a.span()),
                    "listen.alt_svc",
                    "\"off\", or a field value of printable ASCII (at most 1024 bytes)",
                );
            }
        }
    }
    if cfg.worker_connections == Some(0) {
        return err(None, "worker_connections", "must be at least 1");
    }
    if cfg.keepalive_requests == 0 {
        return err(None, "keepalive_requests", "must be at least 1");
    }
    if cfg.client_max_header_size.0 < 1024 {
        return err(None, "client_max_header_size", "must be at least 1k");
    }
    if cfg.client_max_request_line.0 < 256
        || cfg.client_max_request_line.0 > cfg.client_max_header_size.0
    {
        return err(
            None,
            "client_max_request_line",
            "must be between 256 and client_max_header_size",
        );
    }
    if cfg.aio.thread_pool.threads == 0 || cfg.aio.thread_pool.threads > 4096 {
        return err(
            None,
            "aio.thread_pool.threads",
            "must be between 1 and 4096",
        );
    }
    if cfg.aio.thread_pool.max_queue == 0 {
        return err(None, "aio.thread_pool.max_queue", "must be at least 1");
    }
    let m = &cfg.memory_cache;
    if m.max_object_size.0 == 0 {
        return err(None, "memory_cache.max_object_size", "must be at least 1");
    }
    if let super::MemSize::Bytes(size) = m.size {
        if size < super::memory::MIN_SIZE {
            return err(
                None,
                "memory_cache.size",
                "must be at least 1m (or \"auto\", or \"off\")",
            );
        }
        if m.max_object_size.0 > size {
            return err(
                None,
                "memory_cache.max_object_size",
                "must be between 1 and memory_cache.size",
            );
        }
        if cfg.cache.is_empty() {
            return err(
                None,
                "memory_cache",
                "the RAM tier holds objects of the [[cache]] zones: define one (or size = \"auto\", which is off without one)",
            );
        }
    }
    if cfg.open_file_cache.max > 1_000_000 {
        return err(None, "open_file_cache.max", "must be at most 1000000");
    }
    if cfg.open_file_cache.max > 0 && cfg.open_file_cache.inactive.as_secs() == 0 {
        return err(None, "open_file_cache.inactive", "must be at least 1s");
    }
    if let Some(d) = &cfg.demo_origin {
        if let Err(m) = parse_addr(d.get_ref()) {
            return err(Some(d.span()), "demo_origin", m);
        }
    }

    if cfg.reuseport_steering == super::Steering::Cpu {
        if cfg.accept != super::AcceptKind::Reuseport {
            return err(
                None,
                "reuseport_steering",
                "\"cpu\" steers between reuseport sockets: it needs accept = \"reuseport\"",
            );
        }
        if cfg.worker_cpu_affinity == super::Affinity::Off {
            return err(
                None,
                "reuseport_steering",
                "\"cpu\" sends a connection to the worker pinned to the CPU that received it: it needs worker_cpu_affinity (not \"off\")",
            );
        }
    }
    let mut cache_names = Vec::new();
    for c in &cfg.cache {
        let name = c.name.get_ref();
        if name.is_empty() {
            return err(Some(c.name.span()), "cache.name", "must not be empty");
        }
        if cache_names.contains(name) {
            return err(
                Some(c.name.span()),
                "cache.name",
                format!("duplicate cache name {name:?}"),
            );
        }
        cache_names.push(name.clone());
        if let Err(m) = parse_levels(c.levels.get_ref()) {
            return err(Some(c.levels.span()), "cache.levels", m);
        }
        if c.path.as_os_str().is_empty() {
            return err(Some(c.name.span()), "cache.path", "must not be empty");
        }
        if c.keys_zone.0 < 64 * 1024 {
            return err(
                Some(c.name.span()),
                "cache.keys_zone",
                "must be at least 64k",
            );
        }
    }

    let mut upstream_names = Vec::new();
    for u in &cfg.upstream {
        let name = u.name.get_ref();
        if upstream_names.contains(name) {
            return err(
                Some(u.name.span()),
                "upstream.name",
                format!("duplicate upstream name {name:?}"),
            );
        }
        upstream_names.push(name.clone());
        if u.servers.get_ref().is_empty() {
            return err(
                Some(u.servers.span()),
                "upstream.servers",
                "at least one server is required",
            );
        }
        let mut https = false;
        for s in u.servers.get_ref() {
            match parse_server(s) {
                Ok(t) => https |= t.tls_name.is_some(),
                Err(m) => return err(Some(u.servers.span()), "upstream.servers", m),
            }
        }
        if let Some(ca) = &u.tls_ca {
            if !https {
                return err(
                    Some(ca.span()),
                    "upstream.tls_ca",
                    "set, but no server of this upstream is https://",
                );
            }
            if let Err(m) = crate::tls::client::load_ca(ca.get_ref()) {
                return err(Some(ca.span()), "upstream.tls_ca", m);
            }
        }
        if !u.tls_verify && !https {
            return err(
                Some(u.name.span()),
                "upstream.tls_verify",
                "set, but no server of this upstream is https://",
            );
        }
        if u.max_fails == 0 {
            return err(
                Some(u.name.span()),
                "upstream.max_fails",
                "must be at least 1",
            );
        }
        if u.balance == Balance::ConsistentHash && u.servers.get_ref().len() > 64 {
            return err(
                Some(u.servers.span()),
                "upstream.balance",
                "consistent_hash takes at most 64 servers",
            );
        }
        if u.hash_key.is_some() && u.balance != Balance::ConsistentHash {
            return err(
                Some(u.name.span()),
                "upstream.hash_key",
                "has no effect without balance = \"consistent_hash\"",
            );
        }
        if let Some(h) = &u.health_check {
            let bad = if !h.path.starts_with('/') || h.path.bytes().any(|b| b <= b' ' || b == 0x7f)
            {
                Some((
                    "upstream.health_check",
                    "path must start with '/' and hold no spaces or control characters",
                ))
            } else if h.interval.0 < std::time::Duration::from_millis(100) {
                Some(("upstream.health_check", "interval must be at least 100ms"))
            } else if h.timeout.0.is_zero() || h.timeout.0 > h.interval.0 {
                Some((
                    "upstream.health_check",
                    "timeout must be above 0 and at most the interval",
                ))
            } else if h.fails == 0 || h.passes == 0 {
                Some((
                    "upstream.health_check",
                    "fails and passes must be at least 1",
                ))
            } else {
                None
            };
            if let Some((key, m)) = bad {
                return err(Some(u.name.span()), key, m);
            }
        }
    }
    if let Some(n) = &cfg.node_name {
        let ok = !n.is_empty()
            && n.len() <= 64
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
        if !ok {
            return err(
                None,
                "node_name",
                "1 to 64 letters, digits, '-', '.' or '_' (a token for Cache-Status and Via)",
            );
        }
    }

    let known = super::sites::validate(cfg)?;
    super::secure_link::validate(cfg, &known)?;
    super::logs::validate(cfg, &known)?;
    super::limits::validate(cfg, &known)?;
    super::geo::validate(cfg, &known)?;
    super::access::validate(cfg, &known)?;
    let all_locations = cfg
        .location
        .iter()
        .chain(cfg.server.iter().flat_map(|s| &s.location));
    for loc in all_locations {
        let span = super::sites::validate_location(loc, &known)?;
        let handlers = [
            loc.proxy.is_some(),
            loc.static_root.is_some(),
            loc.ret.is_some(),
            loc.empty_gif.is_some(),
        ];
        match handlers.iter().filter(|h| **h).count() {
            1 => {}
            0 => {
                return err(
                    Some(span),
                    "location",
                    "needs one handler: proxy, static, return or empty_gif",
                )
            }
            _ => {
                return err(
                    Some(span),
                    "location",
                    "has more than one handler (proxy, static, return, empty_gif)",
                )
            }
        }
        if let Some(p) = &loc.proxy {
            if !upstream_names.contains(p.get_ref()) {
                return err(
                    Some(p.span()),
                    "location.proxy",
                    format!("no [[upstream]] named {:?}", p.get_ref()),
                );
            }
        }
        if let Some(g) = &loc.empty_gif {
            if !g.get_ref() {
                return err(
                    Some(g.span()),
                    "location.empty_gif",
                    "set empty_gif = true or remove it",
                );
            }
        }
        if let Some(r) = &loc.ret {
            let st = r.get_ref().status;
            if !(100..=599).contains(&st) {
                return err(
                    Some(r.span()),
                    "location.return",
                    format!("status {st} is not between 100 and 599"),
                );
            }
            if r.get_ref().burn_us > super::MAX_BURN_US {
                return err(
                    Some(r.span()),
                    "location.return.burn_us",
                    format!("at most {} (1 s of CPU per request)", super::MAX_BURN_US),
                );
            }
        }
        if !loc.cache.get_ref().is_empty() && loc.proxy.is_none() {
            return err(
                Some(loc.cache.span()),
                "location.cache",
                "caching needs a proxy handler",
            );
        }
        for c in loc.cache.get_ref() {
            if !cache_names.contains(c) {
                return err(
                    Some(loc.cache.span()),
                    "location.cache",
                    format!("no [[cache]] named {c:?}"),
                );
            }
        }
        for k in loc.cache_valid.keys() {
            let ok = k == "any"
                || (k.len() == 3 && k.parse::<u16>().is_ok_and(|n| (100..=599).contains(&n)));
            if !ok {
                return err(
                    Some(span),
                    "location.cache_valid",
                    format!("{k:?} is not a status code or \"any\""),
                );
            }
        }
        for f in loc.targeted_cache_control.iter().flatten() {
            let token = !f.is_empty()
                && f.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                return err(
                    Some(span),
                    "location.targeted_cache_control",
                    format!("{f:?} is not a header field name"),
                );
            }
            if f.eq_ignore_ascii_case("cache-control") {
                return err(
                    Some(span),
                    "location.targeted_cache_control",
                    "Cache-Control is always read; list only targeted fields (CDN-Cache-Control, Surrogate-Control, ...)",
                );
            }
        }
        validate_compress(loc, span.clone())?;
        validate_slice(loc)?;
        for cond in loc.cache_bypass.iter().chain(&loc.no_cache) {
            if cond.header.is_none() && cond.cookie.is_none() && cond.arg.is_none() {
                return err(
                    Some(span),
                    "location.cache_bypass",
                    "a condition needs header, cookie or arg",
                );
            }
        }
    }

    if cfg.compress_pool.threads == Some(0) || cfg.compress_pool.threads.is_some_and(|t| t > 1024) {
        return err(None, "compress_pool.threads", "must be between 1 and 1024");
    }
    if cfg.compress_pool.max_queue == 0 {
        return err(None, "compress_pool.max_queue", "must be at least 1");
    }
    if let Some(cpus) = &cfg.compress_pool.cpus {
        let online = crate::affinity::online_cpus();
        if cpus.is_empty() {
            return err(
                None,
                "compress_pool.cpus",
                "list at least one CPU, or leave it out",
            );
        }
        if let Some(c) = cpus.iter().find(|c| !online.contains(c)) {
            return err(
                None,
                "compress_pool.cpus",
                format!("CPU {c} is not online (online: {online:?})"),
            );
        }
    }

    if let Some(r) = &cfg.real_ip {
        validate_real_ip(cfg, r.get_ref(), r.span())?;
    }
    if let Some(a) = &cfg.admin {
        match parse_addr(a.listen.get_ref()) {
            Ok(addr) if !addr.ip().is_loopback() => {
                return err(
                    Some(a.listen.span()),
                    "admin.listen",
                    "the admin listener must bind a loopback address",
                );
            }
            Ok(_) => {}
            Err(m) => return err(Some(a.listen.span()), "admin.listen", m),
        }
        for c in a.allow.get_ref() {
            if let Err(m) = Cidr::parse(c) {
                return err(Some(a.allow.span()), "admin.allow", m);
            }
        }
    }
    Ok(())
}

/// `real_ip`: trusted prefixes that parse, a field name (or `proxy_protocol` with a
/// listener that reads PROXY headers).
fn validate_real_ip(
    cfg: &Config,
    r: &crate::config::RealIpCfg,
    span: Range<usize>,
) -> Result<(), VErr> {
    if r.from.is_empty() {
        return err(
            Some(span),
            "real_ip.from",
            "needs at least one trusted address or prefix",
        );
    }
    for c in &r.from {
        if let Err(m) = Cidr::parse(c) {
            return err(Some(span), "real_ip.from", m);
        }
    }
    if r.header == "proxy_protocol" {
        if !cfg.listen.iter().any(|l| l.proxy_protocol) {
            return err(
                Some(span),
                "real_ip.header",
                "\"proxy_protocol\" needs a [[listen]] with proxy_protocol = true",
            );
        }
    } else if r.header.is_empty() || !r.header.bytes().all(is_tchar) {
        return err(
            Some(span),
            "real_ip.header",
            format!("{:?} is not a field name", r.header),
        );
    }
    Ok(())
}

/// RFC 9110 5.6.2 `tchar`, the characters of a field name.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
