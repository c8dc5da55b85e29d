//! The configuration: TOML whose names follow nginx where nginx has one.
//!
//! How it fits: `load`/`parse` turn a file into a validated [`Config`] before any socket
//! opens. Every error, syntactic or semantic, is a [`ConfigError`] printed as
//! `file:line: key: message`, and `edgecache` exits 2 on it. Unknown keys are errors
//! (`deny_unknown_fields` everywhere): a typo must never be silently ignored.
//! The embedded default (`default.toml`) is what `edgecache` runs with no `-c`.

pub mod access;
pub mod geo;
pub mod limits;
mod load;
pub mod logs;
pub mod memory;
pub mod secure_link;
pub mod sites;
pub mod units;
pub mod validate;
mod verr;

pub use access::{AccessRuleCfg, NetList, RuleList};
pub use geo::GeoCfg;
pub use limits::{LimitConnList, LimitConnZoneCfg, LimitReqList, LimitReqZoneCfg};
pub use load::{
    embedded_default, key_line, key_line_in_table, line_of, load, parse, parse_in, Source,
};
pub use logs::{LogEscape, LogFormatCfg};
pub use memory::MemSize;
pub use secure_link::SecureLinkCfg;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use toml::Spanned;
pub use units::{Dur, Size, SizeOrOff};

/// The embedded default config (see docs/contracts.md: 127.0.0.1:8080, cache under
/// ./edgecache-data/cache, proxy to the built-in demo origin on 127.0.0.1:8081).
pub const DEFAULT_CONFIG: &str = include_str!("default.toml");
/// Name shown in error messages for the embedded default.
pub const DEFAULT_CONFIG_NAME: &str = "<embedded default>";

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Workers {
    #[default]
    Auto,
    Count(usize),
}

impl<'de> Deserialize<'de> for Workers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(i64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) if (1..=1024).contains(&n) => Ok(Workers::Count(n as usize)),
            Raw::N(_) => Err(serde::de::Error::custom(
                "must be between 1 and 1024, or \"auto\"",
            )),
            Raw::S(s) if s == "auto" => Ok(Workers::Auto),
            Raw::S(s) => match s.parse::<usize>() {
                Ok(n) if (1..=1024).contains(&n) => Ok(Workers::Count(n)),
                _ => Err(serde::de::Error::custom(format!(
                    "invalid value {s:?}: expected \"auto\" or a number"
                ))),
            },
        }
    }
}

/// `worker_cpu_affinity`: `"auto"` pins worker i to the i-th online CPU, `"off"` does not
/// pin, a list pins worker i to `list[i % len]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Affinity {
    #[default]
    Auto,
    Off,
    Cpus(Vec<usize>),
}

impl<'de> Deserialize<'de> for Affinity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            S(String),
            L(Vec<usize>),
        }
        match Raw::deserialize(d)? {
            Raw::S(s) if s == "auto" => Ok(Affinity::Auto),
            Raw::S(s) if s == "off" => Ok(Affinity::Off),
            Raw::S(s) => Err(serde::de::Error::custom(format!(
                "invalid value {s:?}: expected \"auto\", \"off\" or a list of CPU numbers"
            ))),
            Raw::L(l) if l.is_empty() => Err(serde::de::Error::custom("the CPU list is empty")),
            Raw::L(l) => Ok(Affinity::Cpus(l)),
        }
    }
}

/// How workers accept connections (levers 3 and 4 of docs/background.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AcceptKind {
    /// One listening socket per worker (SO_REUSEPORT); the kernel spreads connections.
    #[default]
    Reuseport,
    /// One shared socket, every worker waits on it with EPOLLEXCLUSIVE.
    Exclusive,
    /// One shared socket; a worker accepts only while it holds the accept mutex.
    Mutex,
    /// One shared socket in every worker's epoll (thundering herd, LIFO-like wake-ups).
    Shared,
    /// One shared socket; a dedicated thread per worker blocks in accept() (FIFO wake-ups).
    Blocking,
}

impl AcceptKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            AcceptKind::Reuseport => "reuseport",
            AcceptKind::Exclusive => "exclusive",
            AcceptKind::Mutex => "mutex",
            AcceptKind::Shared => "shared",
            AcceptKind::Blocking => "blocking",
        }
    }
}

/// `access_log = "off"`, `access_log = "path"` or
/// `access_log = { path, format, buffer, flush }` (top level, in a `[[server]]` or in a
/// location; the nearest one applies, as nginx's `access_log`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AccessLog {
    Off,
    File {
        path: PathBuf,
        /// A `[log_format.NAME]`, `combined` or `edgecache`; None: `edgecache`.
        format: Option<String>,
        buffer: u64,
        flush: std::time::Duration,
    },
}

impl<'de> Deserialize<'de> for AccessLog {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            path: PathBuf,
            #[serde(default)]
            format: Option<String>,
            #[serde(default = "default_log_buffer")]
            buffer: Size,
            #[serde(default = "default_log_flush")]
            flush: Dur,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            S(String),
            T(Table),
        }
        match Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "expected \"off\", a path, or { path = \"...\", format = \"combined\", buffer = \"64k\", flush = \"1s\" }",
            )
        })? {
            Raw::S(s) if s == "off" => Ok(AccessLog::Off),
            Raw::S(s) => Ok(AccessLog::File {
                path: PathBuf::from(s),
                format: None,
                buffer: default_log_buffer().0,
                flush: default_log_flush().0,
            }),
            Raw::T(t) => Ok(AccessLog::File {
                path: t.path,
                format: t.format,
                buffer: t.buffer.0,
                flush: t.flush.0,
            }),
        }
    }
}

fn default_log_buffer() -> Size {
    Size(64 * 1024)
}
fn default_log_flush() -> Dur {
    Dur(std::time::Duration::from_secs(1))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Debug,
    Info,
    #[default]
    Warn,
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorLog {
    /// `"stderr"` or a file path.
    #[serde(default = "default_error_log_path")]
    pub path: PathBuf,
    #[serde(default)]
    pub level: LogLevel,
}
fn default_error_log_path() -> PathBuf {
    PathBuf::from("stderr")
}
impl Default for ErrorLog {
    fn default() -> Self {
        ErrorLog {
            path: default_error_log_path(),
            level: LogLevel::Warn,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listen {
    pub addr: Spanned<String>,
    #[serde(default = "default_backlog")]
    pub backlog: i32,
    /// TCP_DEFER_ACCEPT: a connection is accepted once its first bytes are in (nginx's
    /// `listen ... deferred`; on by default, as in Varnish and Traffic Server).
    #[serde(default = "default_true")]
    pub deferred: bool,
    /// TLS termination on this address (`docs/tls.md`); certificates are read again on
    /// every reload.
    #[serde(default)]
    pub tls: Option<Spanned<TlsCfg>>,
    /// HTTP/2: offered by ALPN next to http/1.1 on a TLS listener; on a plain listener,
    /// h2c with prior knowledge (a connection that opens with the HTTP/2 preface).
    #[serde(default)]
    pub http2: bool,
    /// The PROXY protocol (v1 or v2, `docs/client-address.md`): every connection opens
    /// with a header from the load balancer in front, read before TLS or HTTP; its source
    /// address is the connection's client address. A connection without a valid header
    /// is closed. nginx's `listen ... proxy_protocol`.
    #[serde(default)]
    pub proxy_protocol: bool,
}

/// `real_ip`: the client address a trusted proxy passes on (nginx's realip module:
/// `set_real_ip_from`, `real_ip_header`, `real_ip_recursive`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RealIpCfg {
    /// Trusted proxies: addresses or CIDR prefixes.
    pub from: Vec<String>,
    /// The request field that carries the address (`X-Forwarded-For`, `X-Real-IP`, ...),
    /// or `proxy_protocol`: the PROXY header's source, taken only from a peer in `from`.
    #[serde(default = "default_real_ip_header")]
    pub header: String,
    /// Walk the field's list from the right past trusted addresses (otherwise: its last).
    #[serde(default)]
    pub recursive: bool,
}
fn default_real_ip_header() -> String {
    "X-Real-IP".into()
}

/// `[[listen]] tls`: one certificate (`cert` and `key`), or several chosen by SNI
/// (`certs`). The first certificate is the default for clients that send no name or a
/// name no certificate covers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsCfg {
    #[serde(default)]
    pub cert: Option<PathBuf>,
    #[serde(default)]
    pub key: Option<PathBuf>,
    #[serde(default)]
    pub certs: Vec<TlsCertCfg>,
    /// TLS 1.3 session tickets and the TLS 1.2 session cache (resumption): on by
    /// default; ticket keys rotate every 6 hours and survive reloads.
    #[serde(default = "default_true")]
    pub session_resumption: bool,
    /// Kernel TLS after the handshake, when the kernel has it (`docs/tls.md`): hits go
    /// out by sendfile over TLS. On by default; without the kernel's `tls` module the
    /// connection stays in user space (logged once).
    #[serde(default = "default_true")]
    pub ktls: bool,
}

/// One certificate of `tls.certs`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsCertCfg {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The SNI names it answers (`a.example`, `*.example`); empty: the DNS names of the
    /// certificate's subjectAltName.
    #[serde(default)]
    pub names: Vec<String>,
}

impl TlsCfg {
    /// Every (cert, key, names) of the listener, the default first.
    pub fn all(&self) -> Vec<(PathBuf, PathBuf, Vec<String>)> {
        let mut v = Vec::new();
        if let (Some(c), Some(k)) = (&self.cert, &self.key) {
            v.push((c.clone(), k.clone(), Vec::new()));
        }
        for c in &self.certs {
            v.push((c.cert.clone(), c.key.clone(), c.names.clone()));
        }
        v
    }
}
fn default_backlog() -> i32 {
    65535
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AioMode {
    Off,
    Threads,
    #[serde(rename = "io_uring")]
    IoUring,
    /// RWF_NOWAIT reads on the loop, the pool only when the data is not cached.
    #[default]
    Auto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueKind {
    #[default]
    Mutex,
    Lockfree,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThreadPool {
    #[serde(default = "default_pool_threads")]
    pub threads: usize,
    #[serde(default = "default_max_queue")]
    pub max_queue: usize,
    #[serde(default)]
    pub queue: QueueKind,
}
fn default_pool_threads() -> usize {
    32
}
fn default_max_queue() -> usize {
    65536
}
impl Default for ThreadPool {
    fn default() -> Self {
        ThreadPool {
            threads: default_pool_threads(),
            max_queue: default_max_queue(),
            queue: QueueKind::Mutex,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Aio {
    #[serde(default)]
    pub mode: AioMode,
    #[serde(default = "default_directio")]
    pub directio: SizeOrOff,
    #[serde(default = "default_true")]
    pub sendfile: bool,
    /// The largest cache-hit body (or range) sent by sendfile; larger ones are written
    /// from a mapping of the file in one write (`http/mapped.rs`). `"off"`: always
    /// sendfile.
    #[serde(default = "default_sendfile_max")]
    pub sendfile_max: SizeOrOff,
    #[serde(default)]
    pub thread_pool: ThreadPool,
}
fn default_directio() -> SizeOrOff {
    SizeOrOff(Some(4 << 20))
}
fn default_sendfile_max() -> SizeOrOff {
    SizeOrOff(Some(448 << 10))
}
fn default_true() -> bool {
    true
}
impl Default for Aio {
    fn default() -> Self {
        Aio {
            mode: AioMode::Auto,
            directio: default_directio(),
            sendfile: true,
            sendfile_max: default_sendfile_max(),
            thread_pool: ThreadPool::default(),
        }
    }
}

/// `[compress_pool]`: the threads that compress for every worker when a location has
/// `compress_offload` (the default), and the bound on waiting work.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompressPool {
    /// None: one per CPU.
    #[serde(default)]
    pub threads: Option<usize>,
    /// Jobs waiting for a thread, over all workers; past it a response that has not
    /// started compressing goes out uncompressed (and a started one compresses its next
    /// chunk inline): work never queues without bound.
    #[serde(default = "default_compress_queue")]
    pub max_queue: usize,
    /// CPUs the threads are pinned to, round robin (None: not pinned): cores kept for
    /// compression, away from the workers' event loops (the accelerator model).
    #[serde(default)]
    pub cpus: Option<Vec<usize>>,
    /// `"idle"` (default): the threads run in the `SCHED_IDLE` class, so a worker that
    /// wakes on a CPU where one compresses takes the CPU at once; `"normal"`: they
    /// compete with the workers as equals.
    #[serde(default)]
    pub priority: PoolPriority,
}

/// `[compress_pool] priority`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolPriority {
    #[default]
    Idle,
    Normal,
}
fn default_compress_queue() -> usize {
    1024
}

impl Default for CompressPool {
    fn default() -> Self {
        CompressPool {
            threads: None,
            max_queue: default_compress_queue(),
            cpus: None,
            priority: PoolPriority::Idle,
        }
    }
}

/// `[memory_cache]`: the RAM tier over the disk caches (one share per worker). On by
/// default (`size = "auto"`), also when the table is absent.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryCache {
    /// Bytes of RAM for bodies, over all workers (each worker gets `size / workers`):
    /// `"auto"` (default; [`memory::auto_size`]), `"off"`/`"0"`, or a size.
    #[serde(default)]
    pub size: MemSize,
    /// Larger bodies stay on disk. The default is where sending from memory stops
    /// beating `sendfile` from the page cache (`hit::INLINE_BODY`; see
    /// docs/results/tiers.md).
    #[serde(default = "default_mem_max_object")]
    pub max_object_size: Size,
    #[serde(default)]
    pub policy: MemPolicy,
}
fn default_mem_max_object() -> Size {
    Size(32 << 10)
}

impl Default for MemoryCache {
    fn default() -> Self {
        MemoryCache {
            size: MemSize::Auto,
            max_object_size: default_mem_max_object(),
            policy: MemPolicy::default(),
        }
    }
}

/// The RAM tier as it runs: `size` resolved against this machine and the disk caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedMemory {
    /// Bytes over all workers; 0: no RAM tier.
    pub size: u64,
    /// `max_object_size`, capped at `size` when `size` was `"auto"`.
    pub max_object_size: u64,
    pub policy: MemPolicy,
    /// `size = "auto"` (or no `[memory_cache]` table).
    pub auto: bool,
}

impl MemoryCache {
    /// Resolves `size` for `caches`, reading this machine's memory only for `"auto"`.
    pub fn resolve(&self, caches: &[CacheZone]) -> ResolvedMemory {
        let disk_total = caches
            .iter()
            .fold(0u64, |t, c| t.saturating_add(c.max_size.0));
        self.resolve_with(memory::physical_memory, disk_total)
    }

    /// [`resolve`](Self::resolve) with the machine's memory supplied (for tests).
    pub fn resolve_with(&self, memory: impl FnOnce() -> u64, disk_total: u64) -> ResolvedMemory {
        let (size, auto) = match self.size {
            MemSize::Off => (0, false),
            MemSize::Bytes(n) => (n, false),
            MemSize::Auto if disk_total == 0 => (0, true),
            MemSize::Auto => (memory::auto_size(memory(), disk_total), true),
        };
        ResolvedMemory {
            size,
            max_object_size: if auto {
                self.max_object_size.0.min(size)
            } else {
                self.max_object_size.0
            },
            policy: self.policy,
            auto,
        }
    }
}

/// `[memory_cache] policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemPolicy {
    /// S3-FIFO (SOSP '23): small FIFO, main CLOCK, ghost queue.
    #[default]
    S3fifo,
    /// W-TinyLFU: 1% window, segmented LRU, count-min admission.
    Tinylfu,
    Lru,
}

impl MemPolicy {
    /// The config spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            MemPolicy::S3fifo => "s3fifo",
            MemPolicy::Tinylfu => "tinylfu",
            MemPolicy::Lru => "lru",
        }
    }
}

/// `open_file_cache = { max = 1000, inactive = "20s" }` or `"off"`: descriptors of
/// cached objects kept open per worker (nginx `open_file_cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileCache {
    /// Per worker; 0 when off.
    pub max: usize,
    pub inactive: std::time::Duration,
}

impl Default for OpenFileCache {
    fn default() -> Self {
        OpenFileCache {
            max: 1000,
            inactive: std::time::Duration::from_secs(20),
        }
    }
}

impl<'de> Deserialize<'de> for OpenFileCache {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            #[serde(default = "default_ofc_max")]
            max: usize,
            #[serde(default = "default_ofc_inactive")]
            inactive: Dur,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            S(String),
            T(Table),
        }
        match Raw::deserialize(d)? {
            Raw::S(s) if s == "off" => Ok(OpenFileCache {
                max: 0,
                inactive: std::time::Duration::from_secs(20),
            }),
            Raw::S(s) => Err(serde::de::Error::custom(format!(
                "invalid value {s:?}: expected \"off\" or {{ max = N, inactive = \"20s\" }}"
            ))),
            Raw::T(t) => Ok(OpenFileCache {
                max: t.max,
                inactive: t.inactive.0,
            }),
        }
    }
}
fn default_ofc_max() -> usize {
    1000
}
fn default_ofc_inactive() -> Dur {
    Dur(std::time::Duration::from_secs(20))
}

/// A `[[cache]]` zone: one directory (one disk) with its own index budget.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheZone {
    pub name: Spanned<String>,
    pub path: PathBuf,
    #[serde(default = "default_levels")]
    pub levels: Spanned<String>,
    #[serde(default = "default_max_size")]
    pub max_size: Size,
    #[serde(default)]
    pub min_free: Size,
    #[serde(default = "default_inactive")]
    pub inactive: Dur,
    #[serde(default = "default_keys_zone")]
    pub keys_zone: Size,
    #[serde(default = "default_loader_files")]
    pub loader_files: usize,
    #[serde(default = "default_loader_sleep")]
    pub loader_sleep: Dur,
    #[serde(default = "default_manager_files")]
    pub manager_files: usize,
    #[serde(default = "default_manager_threshold")]
    pub manager_threshold: Dur,
    /// Pause between manager passes while work is left (nginx `manager_sleep`).
    #[serde(default = "default_manager_sleep")]
    pub manager_sleep: Dur,
    /// When stored bodies are checked against their checksum: `"off"` (default),
    /// `"load"` (by the loader after a start), `"always"` (also on every disk hit).
    #[serde(default, alias = "verify")]
    pub cache_verify: CacheVerify,
}

/// `[[cache]] cache_verify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheVerify {
    #[default]
    Off,
    Load,
    Always,
}

impl CacheVerify {
    pub fn to_cache(self) -> edge_cache::Verify {
        match self {
            CacheVerify::Off => edge_cache::Verify::Off,
            CacheVerify::Load => edge_cache::Verify::Load,
            CacheVerify::Always => edge_cache::Verify::Always,
        }
    }
}
fn default_levels() -> Spanned<String> {
    Spanned::new(0..0, "1:2".to_string())
}
fn default_max_size() -> Size {
    Size(10 << 30)
}
fn default_inactive() -> Dur {
    Dur(std::time::Duration::from_secs(600))
}
fn default_keys_zone() -> Size {
    Size(64 << 20)
}
fn default_loader_files() -> usize {
    100
}
fn default_loader_sleep() -> Dur {
    Dur(std::time::Duration::from_millis(50))
}
fn default_manager_files() -> usize {
    100
}
fn default_manager_threshold() -> Dur {
    Dur(std::time::Duration::from_millis(200))
}
fn default_manager_sleep() -> Dur {
    Dur(std::time::Duration::from_millis(50))
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    pub name: Spanned<String>,
    pub servers: Spanned<Vec<String>>,
    /// Idle keep-alive connections kept per worker (0 disables reuse).
    #[serde(default = "default_upstream_keepalive")]
    pub keepalive: usize,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Dur,
    #[serde(default = "default_read_timeout")]
    pub read_timeout: Dur,
    #[serde(default = "default_read_timeout")]
    pub send_timeout: Dur,
    /// A server that failed is skipped for this long (nginx `fail_timeout`).
    #[serde(default = "default_fail_timeout")]
    pub fail_timeout: Dur,
    /// Failures within `fail_timeout` before a server is skipped (nginx `max_fails`).
    #[serde(default = "default_max_fails")]
    pub max_fails: u32,
    /// How long an idle pooled connection is kept.
    #[serde(default = "default_keepalive_timeout_up")]
    pub keepalive_timeout: Dur,
    /// `round_robin` (default) or `consistent_hash` (a tier of parent caches: each key
    /// always goes to the same server while it is up; Maglev hashing).
    #[serde(default)]
    pub balance: Balance,
    /// The key consistent hashing uses, a `cache_key`-style template (`$host$uri`);
    /// None: the request's cache key (the location's `cache_key`, or the default).
    #[serde(default)]
    pub hash_key: Option<Spanned<String>>,
    /// Active health checks: each server is probed every `interval`; `fails`
    /// consecutive failures take it out, `passes` consecutive successes bring it back.
    #[serde(default)]
    pub health_check: Option<HealthCheckCfg>,
    /// CA certificates (PEM) that `https://` servers are verified against, instead of
    /// the system's roots.
    #[serde(default)]
    pub tls_ca: Option<Spanned<PathBuf>>,
    /// Verify `https://` servers' certificates (on by default; off is logged as a
    /// warning).
    #[serde(default = "default_true")]
    pub tls_verify: bool,
}

/// `[[upstream]] balance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    #[default]
    RoundRobin,
    ConsistentHash,
}

/// `[[upstream]] health_check = { path = "/health", interval = "2s", fails = 3, passes = 2 }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckCfg {
    pub path: String,
    #[serde(default = "default_hc_interval")]
    pub interval: Dur,
    /// A probe that has no status line within this is a failure.
    #[serde(default = "default_hc_timeout")]
    pub timeout: Dur,
    #[serde(default = "default_hc_fails")]
    pub fails: u32,
    #[serde(default = "default_hc_passes")]
    pub passes: u32,
}
fn default_hc_interval() -> Dur {
    Dur(std::time::Duration::from_secs(2))
}
fn default_hc_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(1))
}
fn default_hc_fails() -> u32 {
    3
}
fn default_hc_passes() -> u32 {
    2
}
fn default_upstream_keepalive() -> usize {
    64
}
fn default_connect_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(2))
}
fn default_read_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(30))
}
fn default_fail_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(10))
}
fn default_max_fails() -> u32 {
    1
}
fn default_keepalive_timeout_up() -> Dur {
    Dur(std::time::Duration::from_secs(60))
}

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

/// `reuseport_steering`: how the kernel picks a worker's socket under `accept = "reuseport"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Steering {
    /// By the hash of the connection's addresses (the kernel's default).
    #[default]
    Off,
    /// To the worker pinned to the CPU that received the connection (SO_INCOMING_CPU on
    /// each worker's socket; Linux 6.2+ picks by it within the reuseport group).
    Cpu,
}

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
    /// Request rate limits (`[{ zone, burst, nodelay, delay, status, dry_run }]`);
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
