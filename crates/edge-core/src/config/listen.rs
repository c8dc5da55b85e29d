//! Workers and listeners: `workers`, `worker_cpu_affinity`, `accept` and
//! `reuseport_steering`, and each `[[listen]]` with its `tls` and `real_ip` tables.

use serde::Deserialize;
use std::path::PathBuf;
use toml::Spanned;

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
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listen {
    pub addr: Spanned<String>,
    #[serde(default = "default_backlog")]
    pub backlog: i32,
    /// TCP_DEFER_ACCEPT: a connection is accepted once its first bytes are in (nginx's
    /// `listen ... deferred`; on by default, as in Varnish and Traffic Server).
    #[serde(default = "super::default_true")]
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
    /// HTTP/3 over QUIC on the same address and port, UDP (`docs/http3.md`): every
    /// worker binds its own UDP socket there (SO_REUSEPORT), with the listener's
    /// certificates and ALPN `h3`. Needs `tls`.
    #[serde(default)]
    pub quic: bool,
    /// The `Alt-Svc` field of this listener's TCP responses: unset, `h3=":PORT";
    /// ma=86400` when `quic` is on (none otherwise); `"off"`: none; any other value is
    /// sent as it is (another port, a longer `ma`).
    #[serde(default)]
    pub alt_svc: Option<Spanned<String>>,
    /// When a QUIC handshake must first prove the client's address with a Retry
    /// (RFC 9000 8.1.2): `auto` once the worker's half-open handshakes pass
    /// [`QUIC_RETRY_THRESHOLD`], `always`, or `off`.
    #[serde(default)]
    pub quic_retry: QuicRetry,
    /// TLS 1.3 early data (0-RTT) over QUIC: off by default. With it, a GET or HEAD
    /// that arrives before the handshake completes is served at once and goes upstream
    /// with `Early-Data: 1` (RFC 8470: an origin may answer 425 Too Early, which the
    /// client retries); any other method is held until the handshake completes.
    #[serde(default)]
    pub early_data: bool,
    /// Segmentation offload for QUIC sends (nginx's `quic_gso`): a run of datagrams to
    /// one client leaves in one `sendmsg` with `UDP_SEGMENT`, where the kernel has it.
    /// On by default; `false` sends one datagram per call (for comparison).
    #[serde(default = "super::default_true")]
    pub quic_gso: bool,
    /// Steering in the kernel (nginx's `quic_bpf`): a classic BPF program on the
    /// listener's reuseport group delivers each datagram to the worker its connection
    /// ID names. On by default; without it (or where the kernel refuses it) datagrams
    /// that reach another worker are handed over in user space.
    #[serde(default = "super::default_true")]
    pub quic_bpf: bool,
}

/// Half-open QUIC handshakes per worker past which `quic_retry = "auto"` asks new
/// clients to prove their address first.
pub const QUIC_RETRY_THRESHOLD: usize = 256;

/// `[[listen]] quic_retry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuicRetry {
    /// Retry once half-open handshakes pass [`QUIC_RETRY_THRESHOLD`] on the worker.
    #[default]
    Auto,
    /// Every new connection proves its address first (one more round trip).
    Always,
    /// Never.
    Off,
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
    #[serde(default = "super::default_true")]
    pub session_resumption: bool,
    /// Kernel TLS after the handshake, when the kernel has it (`docs/tls.md`): hits go
    /// out by sendfile over TLS. On by default; without the kernel's `tls` module the
    /// connection stays in user space (logged once).
    #[serde(default = "super::default_true")]
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
