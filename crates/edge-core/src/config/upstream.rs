//! `[[upstream]]`: servers, balancing, timeouts, keep-alive and `health_check`.

use super::Dur;
use serde::Deserialize;
use std::path::PathBuf;
use toml::Spanned;

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
    #[serde(default = "super::default_true")]
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
