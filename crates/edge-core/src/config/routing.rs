//! What routes a request: `[[server]]`, locations (`[[location]]` and a server's own),
//! their rewrites and `return`, the cache settings a location applies, and `[[map]]`.

use super::{AccessLog, Dur, LimitConnList, LimitReqList, NetList, RuleList, SecureLinkCfg, Size};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use toml::Spanned;

/// One `rewrite` of a location (nginx `rewrite regex replacement [flag]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewriteCfg {
    pub regex: String,
    /// A template; `$1`, `$name` are the regex's captures. Starting with `http://` or
    /// `https://` it redirects. A `?` in it replaces the query (the original one is
    /// appended unless it ends with `?`).
    pub replacement: String,
    #[serde(default)]
    pub flag: Option<RewriteFlag>,
}

/// `rewrite` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RewriteFlag {
    /// Stop rewriting and search the locations again with the new URI.
    Last,
    /// Stop rewriting and serve the new URI in this location.
    Break,
    /// 302 to the new URI.
    Redirect,
    /// 301 to the new URI.
    Permanent,
}

/// `[[server]]`: a virtual server (nginx `server`), chosen by the request's host.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerCfg {
    /// Exact names, `*.example.com`, `example.*`, or `~regex` (named captures become
    /// variables).
    #[serde(default = "default_cache_list")]
    pub names: Spanned<Vec<String>>,
    /// The server for a host no server names, on the listeners it answers (one per
    /// `[[listen]]` addr, as nginx's `default_server`).
    #[serde(default = "default_not_default")]
    pub default: Spanned<bool>,
    /// The `[[listen]]` addrs it answers on; None: all.
    #[serde(default)]
    pub listen: Option<Spanned<Vec<String>>>,
    /// This server's access log; None: the top-level one.
    #[serde(default)]
    pub access_log: Option<Spanned<AccessLog>>,
    /// `add_header` for the locations that set none.
    #[serde(default)]
    pub add_header: BTreeMap<String, String>,
    // Header control defaults for the locations that do not set them (as in nginx).
    /// Request fields sent upstream (nginx `proxy_set_header`): name → template; an
    /// empty value removes the field. `Host` also sets the TLS server name.
    #[serde(default)]
    pub proxy_set_header: Option<Spanned<BTreeMap<String, String>>>,
    /// Upstream response fields not sent to clients (nginx `proxy_hide_header`).
    #[serde(default)]
    pub proxy_hide_header: Option<Spanned<Vec<String>>>,
    /// `add_header` on every status, error pages included (nginx `always`).
    #[serde(default)]
    pub add_header_always: Option<bool>,
    /// false: `X-Cache-Status` and `Cache-Status` are not sent (None: true).
    #[serde(default)]
    pub cache_status_header: Option<bool>,
    /// Signed URLs for the locations that set none (`docs/limits.md`).
    #[serde(default)]
    pub secure_link: Option<Spanned<SecureLinkCfg>>,
    /// `limit_req` for the locations that set none; None: the top level's.
    #[serde(default)]
    pub limit_req: LimitReqList,
    /// `limit_conn` for the locations that set none; None: the top level's.
    #[serde(default)]
    pub limit_conn: LimitConnList,
    /// Access rules (`config::access`) for the locations that set none.
    #[serde(default)]
    pub allow: NetList,
    #[serde(default)]
    pub deny: NetList,
    #[serde(default)]
    pub access_rules: RuleList,
    #[serde(default)]
    pub location: Vec<Location>,
}

impl ServerCfg {
    /// Copies the server's header defaults into the locations that do not set them
    /// (`proxy_set_header` and `proxy_hide_header` into proxied locations only).
    pub fn inherit(&mut self) {
        let mut locations = std::mem::take(&mut self.location);
        let f = &*self;
        for l in &mut locations {
            if l.add_header.is_empty() {
                l.add_header = f.add_header.clone();
            }
            if l.proxy.is_none() {
                // proxy_* defaults concern proxied locations only.
            } else if l.proxy_set_header.is_none() {
                l.proxy_set_header = f.proxy_set_header.clone();
            }
            if l.proxy.is_some() && l.proxy_hide_header.is_none() {
                l.proxy_hide_header = f.proxy_hide_header.clone();
            }
            l.add_header_always = l.add_header_always.or(f.add_header_always);
            l.cache_status_header = l.cache_status_header.or(f.cache_status_header);
            if l.secure_link.is_none() {
                l.secure_link = f.secure_link.clone();
            }
        }
        self.location = locations;
    }
}

fn default_not_default() -> Spanned<bool> {
    Spanned::new(0..0, false)
}

/// `[[map]]`: a variable whose value depends on another (nginx `map`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapCfg {
    /// A template, e.g. `"$http_user_agent"`.
    pub source: Spanned<String>,
    /// The variable it defines, `"$is_bot"`.
    pub variable: Spanned<String>,
    /// A template; the empty string when absent.
    #[serde(default)]
    pub default: Option<Spanned<String>>,
    #[serde(default = "default_map_entries")]
    pub entries: Spanned<Vec<MapEntry>>,
}
fn default_map_entries() -> Spanned<Vec<MapEntry>> {
    Spanned::new(0..0, Vec::new())
}

/// One `[[map]] entries` item.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapEntry {
    /// Exact (any case), `*.wildcard`, `wildcard.*`, `~regex`, `~*iregex`.
    #[serde(rename = "match")]
    pub pattern: String,
    /// A template.
    pub value: String,
}

/// `return = { status = 200, body = "" }` (nginx `return`). 301/302/303/307/308 take
/// `location` (or a body that is the URL, as nginx does).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Return {
    pub status: u16,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub location: Option<String>,
    #[serde(default)]
    pub content_type: Option<String>,
    /// CPU time spent before answering, in microseconds: a synthetic CPU-heavy handler
    /// for the accept experiments (no origin needed). At most 1 s.
    #[serde(default)]
    pub burn_us: u64,
}

/// Most CPU a `return` may burn per request (`burn_us`).
pub const MAX_BURN_US: u64 = 1_000_000;

/// A condition for `cache_bypass` / `no_cache`: a request header or cookie being present.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    #[serde(default)]
    pub header: Option<String>,
    #[serde(default)]
    pub cookie: Option<String>,
    #[serde(default)]
    pub arg: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UseStale {
    Error,
    Timeout,
    Updating,
    #[serde(rename = "http_500")]
    Http500,
    #[serde(rename = "http_502")]
    Http502,
    #[serde(rename = "http_503")]
    Http503,
    #[serde(rename = "http_504")]
    Http504,
    #[serde(rename = "http_5xx")]
    Http5xx,
}

/// `range_fetch`: what a cache miss asks the origin for when the client sent one
/// `Range` (docs/cache.md, "Partial content").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RangeFetch {
    /// The whole object (nginx's default): stored whole, the client gets its range.
    #[default]
    Whole,
    /// The client's range (`Range`, and its `If-Range`): the origin's 206 is stored as
    /// a partial object, reused for ranges inside it and completed on demand.
    Forward,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Location {
    #[serde(default)]
    pub prefix: Option<Spanned<String>>,
    #[serde(default)]
    pub exact: Option<Spanned<String>>,
    /// A case-sensitive regex on the path (nginx `location ~`).
    #[serde(default)]
    pub regex: Option<Spanned<String>>,
    /// A case-insensitive regex on the path (nginx `location ~*`).
    #[serde(default)]
    pub iregex: Option<Spanned<String>>,
    /// With `prefix`: when it is the longest matching prefix, regex locations are not
    /// tried (nginx `location ^~`).
    #[serde(default)]
    pub stop_regex: bool,
    /// `rewrite = [{ regex, replacement, flag }]`, applied in order (nginx `rewrite`).
    #[serde(default)]
    pub rewrite: Vec<Spanned<RewriteCfg>>,
    // Handlers: exactly one.
    #[serde(default)]
    pub proxy: Option<Spanned<String>>,
    #[serde(default, rename = "static")]
    pub static_root: Option<Spanned<PathBuf>>,
    #[serde(default, rename = "return")]
    pub ret: Option<Spanned<Return>>,
    #[serde(default)]
    pub empty_gif: Option<Spanned<bool>>,
    /// Static handler: file served for a directory (nginx `index`).
    #[serde(default = "default_index")]
    pub index: String,
    // Caching (proxy only).
    #[serde(default = "default_cache_list")]
    pub cache: Spanned<Vec<String>>,
    /// A template (`$scheme://$host$request_uri`); None: `http://` + Host + path and query.
    #[serde(default)]
    pub cache_key: Option<Spanned<String>>,
    #[serde(default)]
    pub cache_valid: BTreeMap<String, Dur>,
    #[serde(default)]
    pub cache_min_uses: u32,
    #[serde(default)]
    pub cache_bypass: Vec<Condition>,
    #[serde(default)]
    pub no_cache: Vec<Condition>,
    #[serde(default)]
    pub use_stale: Vec<UseStale>,
    #[serde(default)]
    pub background_update: bool,
    #[serde(default = "default_cache_lock")]
    pub cache_lock: bool,
    #[serde(default = "default_cache_lock_timeout")]
    pub cache_lock_timeout: Dur,
    /// `slice = "1m"`: the object is cached as fixed-size slices, each fetched from
    /// the origin with its own `Range` (docs/cache.md "Slicing"). None: whole objects.
    #[serde(default)]
    pub slice: Option<Spanned<Size>>,
    /// With `slice`: how many slices past a sequential reader's position are fetched
    /// in the background (docs/cache.md "Slicing").
    #[serde(default)]
    pub slice_prefetch: Option<Spanned<u32>>,
    #[serde(default)]
    pub range_fetch: RangeFetch,
    #[serde(default)]
    pub cache_set_cookie: bool,
    #[serde(default)]
    pub cache_honour_no_cache: bool,
    #[serde(default)]
    pub cache_revalidate: Option<bool>,
    /// Targeted cache-control fields (RFC 9213), most specific first; None: the default
    /// `["edgecache-cache-control", "cdn-cache-control"]`.
    #[serde(default)]
    pub targeted_cache_control: Option<Vec<String>>,
    // Compression (docs/compression.md). `compress` lists the codings offered, in the
    // server's order of preference; the other keys need it.
    #[serde(default)]
    pub compress: Vec<String>,
    /// Compress on the offload pool (`[compress_pool]`), never on the event loop; None:
    /// true. `false` compresses inline, for comparison.
    #[serde(default)]
    pub compress_offload: Option<bool>,
    /// Media-type patterns worth compressing (`text/*`, `application/*+json`); None:
    /// `edge_compress::DEFAULT_TYPES`.
    #[serde(default)]
    pub compress_types: Option<Vec<String>>,
    /// Shorter bodies are sent as they are; None: 1k.
    #[serde(default)]
    pub compress_min_length: Option<Size>,
    #[serde(default)]
    pub gzip_level: Option<i64>,
    #[serde(default)]
    pub brotli_level: Option<i64>,
    #[serde(default)]
    pub zstd_level: Option<i64>,
    /// Extra response headers (nginx `add_header`): templates, on 200, 201, 204, 206,
    /// 301, 302, 303, 304, 307 and 308 responses (every response with
    /// `add_header_always`). Empty: the server's (`[[server]] add_header`).
    #[serde(default)]
    pub add_header: BTreeMap<String, String>,
    /// This location's access log; None: its server's.
    #[serde(default)]
    pub access_log: Option<Spanned<AccessLog>>,
    /// Request fields sent upstream (nginx `proxy_set_header`): name → template; an
    /// empty value removes the field. `Host` also sets the TLS server name.
    #[serde(default)]
    pub proxy_set_header: Option<Spanned<BTreeMap<String, String>>>,
    /// Upstream response fields not sent to clients (nginx `proxy_hide_header`).
    #[serde(default)]
    pub proxy_hide_header: Option<Spanned<Vec<String>>>,
    /// `add_header` on every status, error pages included (nginx `always`).
    #[serde(default)]
    pub add_header_always: Option<bool>,
    /// false: `X-Cache-Status` and `Cache-Status` are not sent (None: true).
    #[serde(default)]
    pub cache_status_header: Option<bool>,
    /// Which query arguments the cache key uses, and whether they are sorted.
    #[serde(default)]
    pub cache_key_args: Option<Spanned<CacheKeyArgs>>,
    /// Signed URLs (`docs/limits.md`): a request needs a valid, unexpired signature.
    #[serde(default)]
    pub secure_link: Option<Spanned<SecureLinkCfg>>,
    /// Request rate limits (`[{ zone, burst, nodelay, delay, status, dry_run, hold }]`);
    /// None: its server's (`docs/limits.md`).
    #[serde(default)]
    pub limit_req: LimitReqList,
    /// Connection limits (`{ zone, max, status }` or a list); None: its server's.
    #[serde(default)]
    pub limit_conn: LimitConnList,
    /// Access rules (nginx `allow`/`deny`, `config::access`): networks allowed, then
    /// networks denied; the first match decides, 403 for a deny. None: the server's.
    #[serde(default)]
    pub allow: NetList,
    #[serde(default)]
    pub deny: NetList,
    /// The ordered form: `[{ allow = "..." }, { deny = "..." }]` (not with allow/deny).
    #[serde(default)]
    pub access_rules: RuleList,
}

/// `cache_key_args = { sort = true, exclude = ["utm_*"] }` (or `include = [...]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheKeyArgs {
    #[serde(default)]
    pub sort: bool,
    #[serde(default)]
    pub include: Option<Vec<String>>,
    #[serde(default)]
    pub exclude: Option<Vec<String>>,
}
fn default_cache_list() -> Spanned<Vec<String>> {
    Spanned::new(0..0, Vec::new())
}
fn default_index() -> String {
    "index.html".into()
}
fn default_cache_lock() -> bool {
    true
}
fn default_cache_lock_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(5))
}
