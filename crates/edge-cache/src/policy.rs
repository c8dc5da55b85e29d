//! RFC 9111 caching policy: may a response be stored, for how long, and may a stored
//! one be served now.
//!
//! How it fits: the server calls [`storable`] when an origin response head arrives; on
//! `Ok` it builds the [`ObjectMeta`] with [`build_meta`] and writes the object, on `Err`
//! it streams the response uncached (the [`NoCacheReason`] is for logs and metrics). On
//! a lookup it uses [`is_fresh`] and [`can_serve_stale`]; after a 304 from the origin it
//! calls [`refresh_meta`]. Nothing here does I/O; every rule is a table test below.
//!
//! Precedence of freshness sources (nginx order, RFC 9111 4.2.1): `s-maxage` >
//! `max-age` > `Expires` (relative to `Date`) > the configured `cache_valid` for the
//! status > heuristic freshness (4.2.2, only for heuristically cacheable statuses that
//! carry `Last-Modified`).

use std::time::{Duration, SystemTime};

use edge_http::{parse_http_date, HeaderMap, Method};

use crate::key::parse_vary;
use crate::meta::{Freshness, ObjectMeta, BODY_LEN_UNKNOWN};

/// Largest delta-seconds value (RFC 9111 1.2.2: treat larger values as 2^31).
pub const MAX_DELTA_SECONDS: u64 = 1 << 31;
/// Cap on heuristic freshness (the RFC leaves it open; a day bounds a wild guess).
pub const MAX_HEURISTIC: Duration = Duration::from_secs(24 * 3600);
/// Statuses that are "heuristically cacheable" (RFC 9110 15.1).
pub const HEURISTIC_STATUSES: &[u16] =
    &[200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501];

/// Statuses whose caching requirements this cache implements (RFC 9110 15): the
/// heuristically cacheable ones, plus redirects cached only with explicit freshness.
/// `must-understand` stores only these.
pub const UNDERSTOOD_STATUSES: &[u16] = &[
    200, 203, 204, 300, 301, 302, 303, 307, 308, 404, 405, 410, 414, 501,
];

/// Which statuses a `cache_valid` entry applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusMatch {
    Code(u16),
    /// nginx `any`.
    Any,
}

/// Policy knobs from the location config.
#[derive(Debug, Clone)]
pub struct PolicyConfig {
    /// `cache_valid`: lifetime per status when the origin gave no explicit freshness.
    /// An exact code wins over `Any`.
    pub cache_valid: Vec<(StatusMatch, Duration)>,
    /// Store responses with `Set-Cookie` (the cookie itself is never stored).
    pub cache_set_cookie: bool,
    /// Honour client `Cache-Control: no-cache` / `no-store` / `Pragma: no-cache`
    /// (off by default, as CDNs do: clients must not be able to force origin load).
    pub honour_client_no_cache: bool,
    /// Fraction of (Date − Last-Modified) used as heuristic lifetime (RFC 9111 4.2.2).
    pub heuristic_fraction: f64,
    /// Targeted cache-control fields (RFC 9213), lowercase, most specific first: the
    /// first one present and valid replaces `Cache-Control` and `Expires` for our
    /// caching decisions. It changes nothing that is forwarded.
    pub targeted: Vec<String>,
}

/// The default `targeted_cache_control` list.
pub const DEFAULT_TARGETED: &[&str] = &["edgecache-cache-control", "cdn-cache-control"];

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            cache_valid: Vec::new(),
            cache_set_cookie: false,
            honour_client_no_cache: false,
            heuristic_fraction: 0.1,
            targeted: DEFAULT_TARGETED.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// Why a response is not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoCacheReason {
    /// Not GET or HEAD.
    Method,
    /// 1xx, 206 (but a valid single range through [`storable_part`]), 304, or an
    /// unknown class.
    Status,
    /// Client sent `no-store` (only with `honour_client_no_cache`).
    RequestNoStore,
    ResponseNoStore,
    Private,
    SetCookie,
    VaryStar,
    /// Request had `Authorization` and the response lacks `public`/`s-maxage`/
    /// `must-revalidate` (RFC 9111 3.5).
    Authorization,
    /// No explicit lifetime, no `cache_valid` for the status, no heuristic.
    NoFreshness,
    /// Lifetime is zero and there is no validator to revalidate with.
    ZeroLifetime,
}

impl NoCacheReason {
    /// Short name for logs and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            NoCacheReason::Method => "method",
            NoCacheReason::Status => "status",
            NoCacheReason::RequestNoStore => "request_no_store",
            NoCacheReason::ResponseNoStore => "no_store",
            NoCacheReason::Private => "private",
            NoCacheReason::SetCookie => "set_cookie",
            NoCacheReason::VaryStar => "vary_star",
            NoCacheReason::Authorization => "authorization",
            NoCacheReason::NoFreshness => "no_freshness",
            NoCacheReason::ZeroLifetime => "zero_lifetime",
        }
    }
}

/// Why a stale object is considered for serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleReason {
    /// A refresh is under way (stale-while-revalidate / `use_stale updating`).
    Updating,
    /// The origin failed: error, timeout or 5xx (stale-if-error / `use_stale error`).
    Error,
}

/// Parsed `Cache-Control` directives we act on.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CacheControl {
    pub max_age: Option<Option<u64>>,
    pub s_maxage: Option<Option<u64>>,
    pub no_store: bool,
    pub no_cache: bool,
    pub private: bool,
    pub public: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    pub stale_while_revalidate: Option<u64>,
    pub stale_if_error: Option<u64>,
    /// RFC 9111 5.2.2.3: store only if the status code is understood; then `no-store`
    /// does not apply.
    pub must_understand: bool,
}

impl CacheControl {
    /// Parse every `Cache-Control` field of a message. Directive names are
    /// case-insensitive; the first occurrence of a duplicate wins; an invalid number is
    /// recorded as `Some(None)` (treated as already stale, RFC 9111 4.2.1).
    pub fn parse(h: &HeaderMap) -> CacheControl {
        let mut cc = CacheControl::default();
        for tok in h.tokens("cache-control") {
            if let Ok(tok) = std::str::from_utf8(tok) {
                cc.directive(tok);
            }
        }
        cc
    }

    /// A targeted field (RFC 9213, `CDN-Cache-Control` and the like): an RFC 8941
    /// Dictionary whose members are cache directives, parsed by `sfv` (several field
    /// lines are one value, joined with commas). None when the field is absent, is not a
    /// valid Dictionary, or gives a directive we act on a value of the wrong type
    /// (`max-age="10000"`): RFC 9213 2.1 says to ignore the whole field then. Unknown
    /// members (an extension, a Decimal, a quoted comma) are ignored; a duplicate key's
    /// last value wins (RFC 8941 4.2.2).
    pub fn parse_targeted(h: &HeaderMap, name: &str) -> Option<CacheControl> {
        let dict = sf_dictionary(h, name)?;
        let mut cc = CacheControl::default();
        for (key, entry) in &dict {
            let sfv::ListEntry::Item(item) = entry else {
                // An Inner List: no directive we act on takes one.
                if matches!(
                    key.as_str(),
                    "max-age" | "s-maxage" | "stale-while-revalidate" | "stale-if-error"
                ) {
                    return None;
                }
                continue;
            };
            let secs = || -> Option<u64> {
                let n = i64::from(item.bare_item.as_integer()?);
                // Integers have at most 15 digits: no overflow; 2^31 and above saturate.
                u64::try_from(n).ok().map(|n| n.min(MAX_DELTA_SECONDS))
            };
            // A flag directive is Boolean true when present without a value; `=?0` turns
            // it off. `no-cache` and `private` may name fields (a String or a List): we
            // treat the qualified form as the unqualified one, which is stricter.
            let flag = || item.bare_item.as_boolean().unwrap_or(true);
            match key.as_str() {
                "max-age" => cc.max_age = Some(Some(secs()?)),
                "s-maxage" => cc.s_maxage = Some(Some(secs()?)),
                "stale-while-revalidate" => cc.stale_while_revalidate = Some(secs()?),
                "stale-if-error" => cc.stale_if_error = Some(secs()?),
                "no-store" => cc.no_store = flag(),
                "no-cache" => cc.no_cache = flag(),
                "private" => cc.private = flag(),
                "public" => cc.public = flag(),
                "must-revalidate" => cc.must_revalidate = flag(),
                "proxy-revalidate" => cc.proxy_revalidate = flag(),
                "must-understand" => cc.must_understand = flag(),
                _ => {}
            }
        }
        Some(cc)
    }

    /// Applies one `name[=value]` directive.
    fn directive(&mut self, tok: &str) {
        let (name, arg) = match tok.split_once('=') {
            Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
            None => (tok.trim(), None),
        };
        let secs = || arg.and_then(parse_delta);
        match name.to_ascii_lowercase().as_str() {
            "max-age" if self.max_age.is_none() => self.max_age = Some(secs()),
            "s-maxage" if self.s_maxage.is_none() => self.s_maxage = Some(secs()),
            "no-store" => self.no_store = true,
            "no-cache" => self.no_cache = true,
            "private" => self.private = true,
            "public" => self.public = true,
            "must-revalidate" => self.must_revalidate = true,
            "proxy-revalidate" => self.proxy_revalidate = true,
            "must-understand" => self.must_understand = true,
            "stale-while-revalidate" if self.stale_while_revalidate.is_none() => {
                self.stale_while_revalidate = secs()
            }
            "stale-if-error" if self.stale_if_error.is_none() => self.stale_if_error = secs(),
            _ => {}
        }
    }

    /// The directives that govern this cache for a response: the first field of
    /// `cfg.targeted` that is present and valid, else `Cache-Control`. The flag says
    /// whether a targeted field was used (then `Expires` is ignored too).
    pub fn effective(resp: &HeaderMap, cfg: &PolicyConfig) -> (CacheControl, bool) {
        for name in &cfg.targeted {
            if let Some(cc) = CacheControl::parse_targeted(resp, name) {
                return (cc, true);
            }
        }
        (CacheControl::parse(resp), false)
    }
}

/// The RFC 8941 Dictionary of a structured field: its lines joined with commas (RFC
/// 8941 4.2), parsed by `sfv`. None when the field is absent or invalid.
pub fn sf_dictionary(h: &HeaderMap, name: &str) -> Option<sfv::Dictionary> {
    let mut lines = h.get_all(name);
    let first = lines.next()?;
    let mut joined;
    let value: &[u8] = match lines.next() {
        None => first,
        Some(second) => {
            joined = Vec::with_capacity(first.len() + second.len() + 2);
            joined.extend_from_slice(first);
            for l in std::iter::once(second).chain(lines) {
                joined.extend_from_slice(b", ");
                joined.extend_from_slice(l);
            }
            &joined
        }
    };
    sfv::Parser::new(value).parse::<sfv::Dictionary>().ok()
}

/// RFC 9111 1.2.1 delta-seconds: digits only, saturating at [`MAX_DELTA_SECONDS`].
fn parse_delta(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut v: u64 = 0;
    for b in s.bytes() {
        v = v.saturating_mul(10).saturating_add(u64::from(b - b'0'));
        if v >= MAX_DELTA_SECONDS {
            return Some(MAX_DELTA_SECONDS);
        }
    }
    Some(v)
}

fn header_time(h: &HeaderMap, name: &str) -> Option<SystemTime> {
    h.get_str(name).and_then(|v| parse_http_date(v.trim()))
}

fn since(a: SystemTime, b: SystemTime) -> Duration {
    a.duration_since(b).unwrap_or(Duration::ZERO)
}

/// The `Age` value of a response (RFC 9111 5.1): the first value of the first field
/// line (`Age: 0, 7200` and the lines `0` then `7200` are both 0). A value that is not
/// delta-seconds (non-numeric, negative, decimal) is ignored, as if no `Age` were sent;
/// values of 2^31 and above saturate at [`MAX_DELTA_SECONDS`].
pub fn age_header(resp: &HeaderMap) -> Option<u64> {
    let first = resp.get_all("age").next()?;
    let first = first.split(|&b| b == b',').next().unwrap_or(first);
    parse_delta(std::str::from_utf8(first).ok()?.trim_matches([' ', '\t']))
}

/// RFC 9111 4.2.3: the corrected initial age of a response.
pub fn initial_age(
    resp: &HeaderMap,
    request_time: SystemTime,
    response_time: SystemTime,
) -> Duration {
    let date = header_time(resp, "date").unwrap_or(response_time);
    let apparent_age = since(response_time, date);
    let age_value = Duration::from_secs(age_header(resp).unwrap_or(0));
    let response_delay = since(response_time, request_time);
    let corrected_age_value = age_value + response_delay;
    apparent_age.max(corrected_age_value)
}

/// Decide whether a response may be stored and, if so, how fresh it is.
pub fn storable(
    method: &Method,
    req: &HeaderMap,
    status: u16,
    resp: &HeaderMap,
    cfg: &PolicyConfig,
    request_time: SystemTime,
    response_time: SystemTime,
) -> Result<Freshness, NoCacheReason> {
    if status == 206 {
        return Err(NoCacheReason::Status);
    }
    storable_status(method, req, status, resp, cfg, request_time, response_time)
}

/// [`storable`] for a 206 from the origin, stored as a partial object
/// ([`crate::part`]): only a single range (`Content-Range: bytes a-b/total`, a known
/// complete length, not `multipart/byteranges`) whose `Content-Length`, when given,
/// is the range's length. Only the paths that asked the origin for a range call this.
pub fn storable_part(
    method: &Method,
    req: &HeaderMap,
    resp: &HeaderMap,
    cfg: &PolicyConfig,
    request_time: SystemTime,
    response_time: SystemTime,
) -> Result<(Freshness, crate::part::Part), NoCacheReason> {
    let part = crate::part::Part::of_response(206, resp).ok_or(NoCacheReason::Status)?;
    let fresh = storable_status(method, req, 206, resp, cfg, request_time, response_time)?;
    Ok((fresh, part))
}

/// The rules of [`storable`] once the status is one that may be stored at all.
fn storable_status(
    method: &Method,
    req: &HeaderMap,
    status: u16,
    resp: &HeaderMap,
    cfg: &PolicyConfig,
    request_time: SystemTime,
    response_time: SystemTime,
) -> Result<Freshness, NoCacheReason> {
    if !matches!(method, Method::Get | Method::Head) {
        return Err(NoCacheReason::Method);
    }
    if !(200..600).contains(&status) || status == 304 {
        return Err(NoCacheReason::Status);
    }
    if cfg.honour_client_no_cache && CacheControl::parse(req).no_store {
        return Err(NoCacheReason::RequestNoStore);
    }
    let (cc, targeted) = CacheControl::effective(resp, cfg);
    if cc.must_understand {
        // RFC 9111 5.2.2.3: a cache that understands the status may store it despite
        // `no-store`; one it does not understand is never stored.
        if !UNDERSTOOD_STATUSES.contains(&status) {
            return Err(NoCacheReason::Status);
        }
    } else if cc.no_store {
        return Err(NoCacheReason::ResponseNoStore);
    }
    if cc.private {
        return Err(NoCacheReason::Private);
    }
    if resp.contains("set-cookie") && !cfg.cache_set_cookie {
        return Err(NoCacheReason::SetCookie);
    }
    let vary: Vec<&str> = resp
        .get_all("vary")
        .filter_map(|v| std::str::from_utf8(v).ok())
        .collect();
    if parse_vary(vary).is_none() {
        return Err(NoCacheReason::VaryStar);
    }
    if req.contains("authorization") && !(cc.public || cc.s_maxage.is_some() || cc.must_revalidate)
    {
        return Err(NoCacheReason::Authorization);
    }

    let date = header_time(resp, "date").unwrap_or(response_time);
    let explicit: Option<Duration> = if let Some(s) = cc.s_maxage {
        Some(Duration::from_secs(s.unwrap_or(0)))
    } else if let Some(m) = cc.max_age {
        Some(Duration::from_secs(m.unwrap_or(0)))
    } else if targeted {
        None // a targeted field replaces Expires as well (RFC 9213 2.1)
    } else {
        // An invalid Expires (e.g. "0") means "already expired" (RFC 9111 5.3).
        resp.get_str("expires")
            .map(|v| parse_http_date(v.trim()).map_or(Duration::ZERO, |e| since(e, date)))
    };
    let configured = || {
        cfg.cache_valid
            .iter()
            .find(|(m, _)| *m == StatusMatch::Code(status))
            .or_else(|| cfg.cache_valid.iter().find(|(m, _)| *m == StatusMatch::Any))
            .map(|(_, d)| *d)
    };
    let heuristic = || {
        // `public` makes any final status heuristically cacheable (RFC 9111 4.2.2).
        if !HEURISTIC_STATUSES.contains(&status) && !cc.public {
            return None;
        }
        let lm = header_time(resp, "last-modified")?;
        let age = since(date, lm);
        Some(
            age.mul_f64(cfg.heuristic_fraction.clamp(0.0, 1.0))
                .min(MAX_HEURISTIC),
        )
    };
    let has_validator = resp.contains("etag") || resp.contains("last-modified");
    // `no-cache` with a validator and no lifetime: stored, and revalidated on every use
    // (RFC 9111 5.2.2.4), which costs the origin a 304 instead of a full body.
    let revalidate_only = || (cc.no_cache && has_validator).then_some(Duration::ZERO);
    let lifetime = explicit
        .or_else(configured)
        .or_else(heuristic)
        .or_else(revalidate_only)
        .ok_or(NoCacheReason::NoFreshness)?;
    if lifetime.is_zero() && !has_validator {
        return Err(NoCacheReason::ZeroLifetime);
    }
    Ok(Freshness {
        lifetime,
        initial_age: initial_age(resp, request_time, response_time),
        stale_while_revalidate: Duration::from_secs(cc.stale_while_revalidate.unwrap_or(0)),
        stale_if_error: Duration::from_secs(cc.stale_if_error.unwrap_or(0)),
        must_revalidate: cc.must_revalidate || cc.proxy_revalidate,
        no_cache: cc.no_cache,
    })
}

/// Should this request skip the cache (lookup and store)? Only when the config honours
/// client `no-cache`: `Cache-Control: no-cache`/`no-store`/`max-age=0` or
/// `Pragma: no-cache` (RFC 9111 5.4, for HTTP/1.0 clients).
pub fn request_bypass(req: &HeaderMap, cfg: &PolicyConfig) -> bool {
    if !cfg.honour_client_no_cache {
        return false;
    }
    let cc = CacheControl::parse(req);
    cc.no_cache
        || cc.no_store
        || cc.max_age == Some(Some(0))
        || (!req.contains("cache-control") && req.has_token("pragma", "no-cache"))
}

/// Current age of a stored response (RFC 9111 4.2.3): corrected initial age plus the
/// time it has been resident.
pub fn age(meta: &ObjectMeta, now: SystemTime) -> Duration {
    meta.freshness.initial_age + since(now, meta.response_time)
}

/// Freshness left, in whole seconds (negative once stale): `Cache-Status`'s `ttl`.
pub fn ttl_secs(meta: &ObjectMeta, now: SystemTime) -> i64 {
    ttl_secs_at(meta, age(meta, now).as_secs())
}

/// [`ttl_secs`] for an age already known (whole seconds), as a hit that also sends
/// `Age` has it.
pub fn ttl_secs_at(meta: &ObjectMeta, age_secs: u64) -> i64 {
    let lifetime = meta.freshness.lifetime.as_secs() as i64;
    lifetime.saturating_sub(age_secs.min(i64::MAX as u64) as i64)
}

/// May the object be served without contacting the origin? False for soft-purged and
/// `no-cache` objects (they must be revalidated first).
pub fn is_fresh(meta: &ObjectMeta, now: SystemTime) -> bool {
    !meta.soft_purged && !meta.freshness.no_cache && meta.freshness.lifetime > age(meta, now)
}

/// How long past its freshness lifetime the object is (zero while fresh).
pub fn staleness(meta: &ObjectMeta, now: SystemTime) -> Duration {
    age(meta, now).saturating_sub(meta.freshness.lifetime)
}

/// May a stale object be served, per its own directives (`stale-while-revalidate`,
/// `stale-if-error`)? Never with `must-revalidate`/`proxy-revalidate`.
pub fn can_serve_stale(meta: &ObjectMeta, now: SystemTime, reason: StaleReason) -> bool {
    if meta.freshness.must_revalidate {
        return false;
    }
    let window = match reason {
        StaleReason::Updating => meta.freshness.stale_while_revalidate,
        StaleReason::Error => meta.freshness.stale_if_error,
    };
    !window.is_zero() && staleness(meta, now) <= window
}

/// [`can_serve_stale`], or the location's `use_stale` allows it for this reason (nginx
/// `proxy_cache_use_stale`: any staleness, but still never with `must-revalidate`).
pub fn can_serve_stale_with(
    meta: &ObjectMeta,
    now: SystemTime,
    reason: StaleReason,
    config_allows: bool,
) -> bool {
    (config_allows && !meta.freshness.must_revalidate) || can_serve_stale(meta, now, reason)
}

/// Response headers never stored in the header block: per-hop, per-response or
/// per-user fields the server regenerates (lowercase). `server` is ours: a hit writes
/// `Server: edgecache` before the block, as the proxy path does, so keeping the origin's
/// would send two. `date` is stored, but as the one line [`build_meta`] writes first
/// (the origin's valid `Date`, or the time the response arrived).
pub const UNSTORED_HEADERS: &[&str] = &[
    "date",
    "server",
    "age",
    "content-length",
    "transfer-encoding",
    "set-cookie",
    "connection",
    "keep-alive",
    "proxy-connection",
    "x-cache-status",
];

/// Should a response header be kept in the stored header block?
pub fn stored_header(name: &str) -> bool {
    !edge_http::is_hop_by_hop(name)
        && !UNSTORED_HEADERS
            .iter()
            .any(|u| u.eq_ignore_ascii_case(name))
}

/// Serialise the storable headers as `Name: value\r\n` lines (sent verbatim on hits).
/// Fields the response's `Connection` header names are hop-by-hop too (RFC 9110 7.6.1).
pub fn header_block(resp: &HeaderMap) -> Vec<u8> {
    let named: Vec<&[u8]> = resp.tokens("connection").collect();
    let mut out = Vec::with_capacity(256);
    for (name, value) in resp.iter() {
        if stored_header(name)
            && !named
                .iter()
                .any(|n| n.eq_ignore_ascii_case(name.as_bytes()))
        {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
    }
    out
}

/// The `Date` line of a stored response: the origin's when it is a valid date, else
/// `fallback` (when the response arrived: RFC 9110 6.6.1, a recipient with a clock adds
/// one). A hit sends it as stored; `Age` says how old the response is.
pub fn date_line(date: Option<SystemTime>, fallback: SystemTime) -> Vec<u8> {
    let mut l = Vec::with_capacity(37);
    l.extend_from_slice(b"Date: ");
    l.extend_from_slice(edge_http::fmt_http_date(date.unwrap_or(fallback)).as_bytes());
    l.extend_from_slice(b"\r\n");
    l
}

/// Build the metadata for a storable response. `key` is the PRIMARY key:
/// [`crate::Cache::begin_write`] turns it into the variant key. `body_len` is the
/// `Content-Length` when known.
pub fn build_meta(
    key: &str,
    status: u16,
    resp: &HeaderMap,
    freshness: Freshness,
    request_time: SystemTime,
    response_time: SystemTime,
    body_len: Option<u64>,
) -> ObjectMeta {
    let strs = |name: &'static str| -> Vec<&str> {
        resp.get_all(name)
            .filter_map(|v| std::str::from_utf8(v).ok())
            .collect()
    };
    let mut m = ObjectMeta::new(key, status, response_time);
    m.date = header_time(resp, "date");
    m.header_block = date_line(m.date, response_time);
    m.header_block.extend_from_slice(&header_block(resp));
    m.etag = resp.get_str("etag").map(|s| s.trim().to_owned());
    m.last_modified = header_time(resp, "last-modified");
    m.request_time = request_time;
    m.response_time = response_time;
    m.freshness = freshness;
    m.vary = parse_vary(strs("vary")).unwrap_or_default();
    m.tags = parse_tags(strs("cache-tag"), strs("surrogate-key"));
    m.body_len = body_len.unwrap_or(BODY_LEN_UNKNOWN);
    m
}

/// The metadata after a 304 from the origin (RFC 9111 4.3.4): headers in the 304
/// replace the stored ones of the same name; freshness is recomputed from the merged
/// headers. `Err` means the refreshed response may no longer be stored (the server
/// should purge the object). Body fields and the key are kept.
pub fn refresh_meta(
    old: &ObjectMeta,
    req: &HeaderMap,
    resp304: &HeaderMap,
    cfg: &PolicyConfig,
    request_time: SystemTime,
    response_time: SystemTime,
) -> Result<ObjectMeta, NoCacheReason> {
    let mut merged = parse_header_block(&old.header_block);
    for (name, _) in resp304.iter() {
        merged.remove(name);
    }
    for (name, value) in resp304.iter() {
        if !name.eq_ignore_ascii_case("content-length") {
            merged.append(name, value);
        }
    }
    let freshness = storable(
        &Method::Get,
        req,
        old.status,
        &merged,
        cfg,
        request_time,
        response_time,
    )?;
    let mut m = build_meta(
        old.primary_key(),
        old.status,
        &merged,
        freshness,
        request_time,
        response_time,
        Some(old.body_len),
    );
    m.key = old.key.clone();
    m.vary = old.vary.clone();
    m.body_hash = old.body_hash;
    m.body_id = old.body_id;
    m.soft_purged = false;
    Ok(m)
}

/// Parse a stored header block back into a map (revalidation only; hits never do
/// this). Lines without a colon are skipped.
pub fn parse_header_block(block: &[u8]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for line in block.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let Ok(name) = std::str::from_utf8(&line[..colon]) else {
            continue;
        };
        let value = &line[colon + 1..];
        let start = value
            .iter()
            .position(|&b| b != b' ' && b != b'\t')
            .unwrap_or(value.len());
        h.append(name.to_owned(), value[start..].to_vec());
    }
    h
}

/// Most tags taken from one response (`Cache-Tag` plus `Surrogate-Key`).
pub const MAX_TAGS_PER_OBJECT: usize = 64;
/// Longest tag kept (longer ones are dropped: they are never purged by a sane client).
pub const MAX_TAG_LEN: usize = 256;

/// Tags from a response's `Cache-Tag` (comma separated) and `Surrogate-Key` (space
/// separated) header values, deduplicated and bounded.
pub fn parse_tags<'a>(
    cache_tag: impl IntoIterator<Item = &'a str>,
    surrogate_key: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |t: &str| {
        let t = t.trim();
        if !t.is_empty()
            && t.len() <= MAX_TAG_LEN
            && out.len() < MAX_TAGS_PER_OBJECT
            && !out.iter().any(|o| o == t)
        {
            out.push(t.to_owned());
        }
    };
    for v in cache_tag {
        v.split(',').for_each(&mut push);
    }
    for v in surrogate_key {
        v.split_ascii_whitespace().for_each(&mut push);
    }
    out
}

#[cfg(test)]
mod tests;
