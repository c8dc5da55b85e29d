//! The configuration: TOML whose names follow nginx where nginx has one.
//!
//! How it fits: `load`/`parse` turn a file into a validated [`Config`] before any socket
//! opens. Every error, syntactic or semantic, is a [`ConfigError`] printed as
//! `file:line: key: message`, and `edgecache` exits 2 on it. Unknown keys are errors
//! (`deny_unknown_fields` everywhere): a typo must never be silently ignored.
//! The embedded default (`default.toml`) is what `edgecache` runs with no `-c`.
//!
//! The file's tables are typed by area, each re-exported here (`config::Location`):
//! [`Config`] itself (this file), `listen.rs` (workers, accept, `[[listen]]`, TLS),
//! `logs.rs`, `pools.rs` (`[aio]`, `[compress_pool]`), `cache.rs` (`[memory_cache]`,
//! `[open_file_cache]`, `[[cache]]`), `upstream.rs`, `routing.rs` (`[[server]]`,
//! locations, `[[map]]`), `limits.rs`, `access.rs`, `geo.rs`, `secure_link.rs`. The
//! checks are `validate.rs` (with a location's `slice` and compression keys in
//! `body.rs`) and each area's own; `load.rs` reads and reports.

pub mod access;
mod body;
mod cache;
pub mod geo;
pub mod limits;
mod listen;
mod load;
pub mod logs;
pub mod memory;
mod pools;
mod routing;
pub mod secure_link;
pub mod sites;
pub mod units;
mod upstream;
pub mod validate;
mod verr;

pub use access::{AccessRuleCfg, NetList, RuleList};
pub use cache::{CacheVerify, CacheZone, MemPolicy, MemoryCache, OpenFileCache, ResolvedMemory};
pub use geo::GeoCfg;
pub use limits::{LimitConnList, LimitConnZoneCfg, LimitReqList, LimitReqZoneCfg};
pub use listen::{
    AcceptKind, Affinity, Listen, QuicRetry, RealIpCfg, Steering, TlsCertCfg, TlsCfg, Workers,
    QUIC_RETRY_THRESHOLD,
};
pub use load::{
    embedded_default, key_line, key_line_in_table, line_of, load, parse, parse_in, Source,
};
pub use logs::{AccessLog, ErrorLog, LogEscape, LogFormatCfg, LogLevel};
pub use memory::MemSize;
pub use pools::{Aio, AioMode, CompressPool, PoolPriority, QueueKind, SendfileMax, ThreadPool};
pub use routing::{
    CacheKeyArgs, Condition, Location, MapCfg, MapEntry, RangeFetch, Return, RewriteCfg,
    RewriteFlag, ServerCfg, UseStale, MAX_BURN_US,
};
pub use secure_link::SecureLinkCfg;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use toml::Spanned;
pub use units::{Dur, Size, SizeOrOff};
pub use upstream::{Balance, HealthCheckCfg, Upstream};

/// The embedded default config (see docs/contracts.md: 127.0.0.1:8080, cache under
/// ./edgecache-data/cache, proxy to the built-in demo origin on 127.0.0.1:8081).
pub const DEFAULT_CONFIG: &str = include_str!("default.toml");
/// Name shown in error messages for the embedded default.
pub const DEFAULT_CONFIG_NAME: &str = "<embedded default>";

/// `#[serde(default = "super::default_true")]` of the area files.
fn default_true() -> bool {
    true
}

/// A config error: where, which key, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.file, self.line, self.key, self.message
        )
    }
}
impl std::error::Error for ConfigError {}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admin {
    #[serde(default = "default_admin_listen")]
    pub listen: Spanned<String>,
    #[serde(default = "default_allow")]
    pub allow: Spanned<Vec<String>>,
}
fn default_admin_listen() -> Spanned<String> {
    Spanned::new(0..0, "127.0.0.1:9090".into())
}
fn default_allow() -> Spanned<Vec<String>> {
    Spanned::new(0..0, vec!["127.0.0.1/32".into(), "::1/128".into()])
}

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub workers: Workers,
    #[serde(default)]
    pub worker_cpu_affinity: Affinity,
    /// None: sized at start to the descriptor limit (`server::nofile`).
    #[serde(default)]
    pub worker_connections: Option<usize>,
    #[serde(default)]
    pub accept: AcceptKind,
    /// Accept every pending connection on each wake-up (nginx `multi_accept`), instead
    /// of one per wake-up.
    #[serde(default)]
    pub multi_accept: bool,
    #[serde(default)]
    pub reuseport_steering: Steering,
    #[serde(default = "default_shutdown_timeout")]
    pub shutdown_timeout: Dur,
    #[serde(default = "default_keepalive_timeout")]
    pub keepalive_timeout: Dur,
    #[serde(default = "default_keepalive_requests")]
    pub keepalive_requests: u64,
    #[serde(default = "default_60s")]
    pub client_header_timeout: Dur,
    #[serde(default = "default_60s")]
    pub client_body_timeout: Dur,
    #[serde(default = "default_60s")]
    pub send_timeout: Dur,
    #[serde(default = "default_client_max_body_size")]
    pub client_max_body_size: Size,
    /// Largest request head (request line plus headers), as nginx's large_client_header_buffers.
    #[serde(default = "default_client_max_header_size")]
    pub client_max_header_size: Size,
    /// Longest request line.
    #[serde(default = "default_client_max_request_line")]
    pub client_max_request_line: Size,
    #[serde(default = "default_max_headers")]
    pub client_max_headers: usize,
    #[serde(default = "default_access_log")]
    pub access_log: AccessLog,
    /// `[log_format.NAME]`: access-log formats (nginx `log_format`).
    #[serde(default)]
    pub log_format: BTreeMap<String, LogFormatCfg>,
    #[serde(default)]
    pub error_log: ErrorLog,
    /// Extension: start the built-in demo origin (edgeorigin) in-process on this address.
    #[serde(default)]
    pub demo_origin: Option<Spanned<String>>,
    /// The pid file (`edgecache -s` reads it; a binary upgrade hands it over).
    #[serde(default)]
    pub pid: Option<PathBuf>,
    /// This node's name in `Cache-Status` and in the `Via` it adds to requests it
    /// forwards (a tier of caches reads which node answered). Default `edgecache`.
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default)]
    pub listen: Vec<Listen>,
    #[serde(default)]
    pub aio: Aio,
    #[serde(default)]
    pub cache: Vec<CacheZone>,
    /// The RAM tier; absent: `size = "auto"`.
    #[serde(default)]
    pub memory_cache: MemoryCache,
    #[serde(default)]
    pub open_file_cache: OpenFileCache,
    #[serde(default)]
    pub compress_pool: CompressPool,
    #[serde(default)]
    pub upstream: Vec<Upstream>,
    /// Top-level locations: the implicit default server's.
    #[serde(default)]
    pub location: Vec<Location>,
    #[serde(default)]
    pub server: Vec<ServerCfg>,
    #[serde(default)]
    pub map: Vec<MapCfg>,
    #[serde(default)]
    pub admin: Option<Admin>,
    /// The request's client address from a trusted proxy (`docs/client-address.md`).
    #[serde(default)]
    pub real_ip: Option<Spanned<RealIpCfg>>,
    /// Request rate zones (`docs/limits.md`).
    #[serde(default)]
    pub limit_req_zone: Vec<LimitReqZoneCfg>,
    /// Connection count zones (`docs/limits.md`).
    #[serde(default)]
    pub limit_conn_zone: Vec<LimitConnZoneCfg>,
    /// `limit_req` for the servers and top-level locations that set none.
    #[serde(default)]
    pub limit_req: LimitReqList,
    /// `limit_conn` for the servers and top-level locations that set none.
    #[serde(default)]
    pub limit_conn: LimitConnList,
    /// Access rules for the servers and top-level locations that set none.
    #[serde(default)]
    pub allow: NetList,
    #[serde(default)]
    pub deny: NetList,
    #[serde(default)]
    pub access_rules: RuleList,
    /// `[[geo]]`: variables looked up by address.
    #[serde(default)]
    pub geo: Vec<GeoCfg>,
}
fn default_shutdown_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(30))
}
fn default_keepalive_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(75))
}
fn default_keepalive_requests() -> u64 {
    1000
}
fn default_60s() -> Dur {
    Dur(std::time::Duration::from_secs(60))
}
fn default_client_max_body_size() -> Size {
    Size(1 << 20)
}
fn default_client_max_header_size() -> Size {
    Size(16 * 1024)
}
fn default_client_max_request_line() -> Size {
    Size(8 * 1024)
}
fn default_max_headers() -> usize {
    100
}
fn default_access_log() -> AccessLog {
    AccessLog::Off
}

#[cfg(test)]
mod tests;
