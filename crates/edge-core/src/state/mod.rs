//! The compiled configuration that workers read on every request: routes with their
//! handlers resolved ([`route`]), the open cache zones ([`caches`]), upstream groups,
//! limits and timeouts. Built once from a validated [`Config`] and swapped whole on
//! SIGHUP ([`Current`]: an `ArcSwap` and its generation), so a reload never leaves a
//! request half-old, half-new.
//!
//! This is data: it names no handler code. The handlers read it; the server builds it.

pub mod caches;
mod current;
mod error;
pub mod fields;
pub mod logs;
pub mod route;
pub mod rules;
pub mod sites;

pub use current::Current;
pub use error::StateError;

use crate::config::validate::Cidr;
use crate::config::Config;
use crate::http::client_addr::{RealIp, RealIpSource};
use crate::http::send::SendPolicy;
use crate::http::Timeouts;
use crate::upstream::UpstreamGroup;
use caches::Caches;
use edge_http::Limits;
use sites::Sites;
use std::collections::HashMap;
use std::sync::Arc;

pub struct Shared {
    /// Servers, their locations and the `[[map]]`s.
    pub sites: Sites,
    /// The access logs, compiled (servers and routes refer to them by slot).
    pub logs: logs::LogTable,
    /// Every open cache zone by name (shared with the admin listener for purges).
    pub caches: Caches,
    pub upstreams: HashMap<String, Arc<UpstreamGroup>>,
    pub limits: Limits,
    pub timeouts: Timeouts,
    pub keepalive_requests: u64,
    pub admin_allow: Vec<Cidr>,
    /// `aio.sendfile`, decided once per config generation.
    pub send: SendPolicy,
    /// Config generation (1 at start, +1 per reload), shown in /status.
    pub generation: u64,
    /// `[memory_cache]` and `open_file_cache`, for all workers together.
    pub local: LocalSettings,
    /// Per `[[listen]]`, in config order: TLS (certificates read by this build) and
    /// HTTP/2.
    pub listeners: Vec<crate::tls::ListenerProto>,
    /// Per `[[listen]]`: the `Alt-Svc` value of its TCP responses (`alt_svc`).
    pub alt_svc: Vec<Option<bytes::Bytes>>,
    /// Per `[[listen]]`: its QUIC side (`quic = true`), built with its TLS config.
    pub quic: Vec<Option<Arc<crate::quic::QuicProto>>>,
    /// `real_ip` (`docs/client-address.md`).
    pub real_ip: Option<RealIp>,
    /// The `[[limit_req_zone]]`s and `[[limit_conn_zone]]`s (kept across reloads while
    /// unchanged: `docs/limits.md`).
    pub limit_zones: crate::limit::Zones,
    /// Per `[[listen]]`: the `limit_conn`s counted when a connection is accepted.
    pub accept_limits: Vec<Vec<crate::limit::ConnRule>>,
}

/// What each worker keeps of the cache for itself (`edge_cache::local`): the RAM tier
/// (its total size is shared out between the workers) and the open-file cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalSettings {
    /// Total bytes, largest object, policy; `None` when the tier is off.
    pub mem: Option<(u64, u64, edge_cache::local::Policy)>,
    /// `[memory_cache]` as resolved (`size = "auto"` made bytes), for `/status`.
    pub memory: crate::config::ResolvedMemory,
    pub files: edge_cache::local::FilesConfig,
}

impl LocalSettings {
    pub fn from_config(cfg: &Config) -> LocalSettings {
        use crate::config::MemPolicy;
        use edge_cache::local::Policy;
        let memory = cfg.memory_cache.resolve(&cfg.cache);
        if memory.auto && memory.size == 0 && !cfg.cache.is_empty() {
            tracing::warn!(
                "memory_cache.size = \"auto\": physical memory is unknown or under 16 MiB ({} bytes read); no RAM tier",
                crate::config::memory::physical_memory()
            );
        }
        LocalSettings {
            mem: (memory.size > 0).then(|| {
                let p = match memory.policy {
                    MemPolicy::S3fifo => Policy::S3Fifo,
                    MemPolicy::Tinylfu => Policy::TinyLfu,
                    MemPolicy::Lru => Policy::Lru,
                };
                (memory.size, memory.max_object_size, p)
            }),
            memory,
            files: edge_cache::local::FilesConfig {
                max: cfg.open_file_cache.max,
                inactive_ticks: cfg.open_file_cache.inactive.as_secs().max(1),
            },
        }
    }

    /// One worker's `Local`, out of `workers`.
    pub fn build(&self, workers: usize) -> edge_cache::local::Local {
        let mem = self
            .mem
            .map(|(size, max_object, policy)| edge_cache::local::MemConfig {
                budget: size / workers.max(1) as u64,
                max_object,
                policy,
            });
        edge_cache::local::Local::new(mem, self.files)
    }
}

impl Shared {
    /// Compiles a validated config. `previous` keeps upstream failure state across reloads
    /// for groups whose servers did not change.
    pub fn build(
        cfg: &Config,
        generation: u64,
        previous: Option<&Shared>,
        caches: Caches,
    ) -> Result<Shared, StateError> {
        let mut upstreams = HashMap::new();
        for u in &cfg.upstream {
            let group = match previous.and_then(|p| p.upstreams.get(u.name.get_ref())) {
                // Unchanged: the same group (and the workers' pooled connections).
                Some(old) if old.same_config(u) => old.clone(),
                Some(old) => {
                    let g = UpstreamGroup::from_config(u)?;
                    g.carry_state(old);
                    Arc::new(g)
                }
                None => Arc::new(UpstreamGroup::from_config(u)?),
            };
            upstreams.insert(u.name.get_ref().clone(), group);
        }
        let known = crate::config::sites::known(cfg);
        let logs = logs::LogTable::build(cfg, &known)?;
        // Before the sites: the zones' keys are templates of this generation.
        let limit_zones = crate::limit::Zones::build(cfg, &known, previous.map(|p| &p.limit_zones))
            .map_err(|m| StateError::BadValue(crate::config::validate::BadValue(m)))?;
        let accept_limits = crate::limit::accept_rules(cfg, &limit_zones)
            .map_err(|m| StateError::BadValue(crate::config::validate::BadValue(m)))?;
        let sites = Sites::build(
            cfg,
            &route::Env {
                upstreams: &upstreams,
                caches: &caches,
                known: &known,
                logs: &logs,
                zones: &limit_zones,
            },
        )?;
        let listeners = cfg
            .listen
            .iter()
            .map(|l| {
                let (tls, sni) = match &l.tls {
                    Some(t) => {
                        let (sc, sni) = crate::tls::server_config(
                            &t.get_ref().all(),
                            t.get_ref().session_resumption,
                            l.http2,
                            t.get_ref().ktls,
                        )
                        .map_err(|m| {
                            StateError::Tls(format!("listen {}: tls: {m}", l.addr.get_ref()))
                        })?;
                        (Some(sc), Some(sni))
                    }
                    None => (None, None),
                };
                Ok(crate::tls::ListenerProto {
                    addr: crate::config::validate::parse_addr(l.addr.get_ref())?,
                    tls,
                    sni,
                    http2: l.http2,
                    deferred: l.deferred,
                    ktls: l.tls.as_ref().is_some_and(|t| t.get_ref().ktls),
                    proxy_protocol: l.proxy_protocol,
                })
            })
            .collect::<Result<Vec<_>, StateError>>()?;
        let quic = cfg
            .listen
            .iter()
            .zip(&listeners)
            .map(|(l, p)| match (&p.sni, &l.tls) {
                (Some(sni), Some(t)) if l.quic => {
                    let resumption = t.get_ref().session_resumption;
                    crate::tls::quic_server_config(sni.clone(), resumption, l.early_data)
                        .and_then(|tls| {
                            crate::quic::QuicProto::build(
                                tls,
                                sni.clone(),
                                l.quic_retry,
                                l.early_data,
                                cfg.keepalive_timeout.0,
                            )
                        })
                        .map(|q| Some(Arc::new(q)))
                        .map_err(|m| {
                            StateError::Tls(format!("listen {}: quic: {m}", l.addr.get_ref()))
                        })
                }
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>, StateError>>()?;
        let admin_allow = match &cfg.admin {
            Some(a) => a
                .allow
                .get_ref()
                .iter()
                .map(|c| Cidr::parse(c))
                .collect::<Result<_, _>>()?,
            None => vec![Cidr::parse("127.0.0.1/32")?, Cidr::parse("::1/128")?],
        };
        let real_ip = match &cfg.real_ip {
            Some(r) => {
                let r = r.get_ref();
                Some(RealIp {
                    from: r
                        .from
                        .iter()
                        .map(|c| Cidr::parse(c))
                        .collect::<Result<_, _>>()?,
                    source: if r.header == "proxy_protocol" {
                        RealIpSource::ProxyProtocol
                    } else {
                        RealIpSource::Header(r.header.clone())
                    },
                    recursive: r.recursive,
                })
            }
            None => None,
        };
        Ok(Shared {
            sites,
            logs,
            caches,
            upstreams,
            limits: Limits {
                max_request_line: cfg.client_max_request_line.0 as usize,
                max_header_bytes: cfg.client_max_header_size.0 as usize,
                max_headers: cfg.client_max_headers,
                max_body: Some(cfg.client_max_body_size.0).filter(|&n| n > 0),
            },
            timeouts: Timeouts {
                client_header: cfg.client_header_timeout.0,
                client_body: cfg.client_body_timeout.0,
                send: cfg.send_timeout.0,
                keepalive: cfg.keepalive_timeout.0,
            },
            keepalive_requests: cfg.keepalive_requests,
            admin_allow,
            send: SendPolicy {
                sendfile: cfg.aio.sendfile,
                directio: cfg.aio.directio.0,
                sendfile_max: cfg.aio.sendfile_max.size,
                adaptive: cfg.aio.sendfile_max.adaptive,
            },
            generation,
            local: LocalSettings::from_config(cfg),
            alt_svc: cfg
                .listen
                .iter()
                .zip(&listeners)
                .map(|(l, p)| crate::quic::alt_svc(l, p.addr.port()))
                .collect(),
            listeners,
            quic,
            real_ip,
            limit_zones,
            accept_limits,
        })
    }

    /// The `[[listen]]` index of a listening socket's address (0 if none matches).
    pub fn listen_index(&self, addr: std::net::SocketAddr) -> usize {
        self.listeners
            .iter()
            .position(|l| l.addr == addr)
            .unwrap_or(0)
    }

    pub fn is_admin(&self, ip: std::net::IpAddr) -> bool {
        self.admin_allow.iter().any(|c| c.contains(ip))
    }
}
