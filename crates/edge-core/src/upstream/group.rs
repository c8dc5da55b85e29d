//! An `[[upstream]]`: its servers, their selection (round robin, or consistent hashing
//! on a key for a tier of parent caches), nginx's passive health check (`max_fails`
//! failures within `fail_timeout` take a server out of rotation for `fail_timeout`) and
//! the state of the active health check (`health_check`, probed by `health.rs`). When
//! every server is out, the least recently failed one is tried anyway (a dead group
//! still gets a fast 502, not a hang).

use super::maglev;
use crate::config::validate::BadValue;
use crate::config::{Balance, Upstream};
use crate::prom::Prom;
use arc_swap::ArcSwapOption;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct UpstreamServer {
    pub addr: SocketAddr,
    /// The name consistent hashing uses (the configured `host:port` text).
    pub name: String,
    /// `https://` servers: the name their certificate is checked against (and SNI).
    pub tls_name: Option<rustls::pki_types::ServerName<'static>>,
    fails: AtomicU32,
    /// Milliseconds since the group's epoch until which the server is skipped (0: live).
    down_until_ms: AtomicU64,
    /// The active health check's verdict (true until a check says otherwise).
    healthy: AtomicBool,
    /// Consecutive failed or passed checks, against `fails` and `passes`.
    pub(super) check_fails: AtomicU32,
    pub(super) check_passes: AtomicU32,
}

/// `health_check` of an upstream, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    pub path: String,
    pub interval: Duration,
    pub timeout: Duration,
    pub fails: u32,
    pub passes: u32,
}

pub struct UpstreamGroup {
    pub name: String,
    pub servers: Vec<UpstreamServer>,
    pub keepalive: usize,
    pub keepalive_timeout: Duration,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub send_timeout: Duration,
    pub fail_timeout: Duration,
    pub max_fails: u32,
    pub balance: Balance,
    /// `hash_key`: the key template of consistent hashing (None: the cache key). Only
    /// built-in variables: a group outlives reloads that renumber `[[map]]`s.
    pub hash_key: Option<crate::vars::Template>,
    pub health_check: Option<HealthCheck>,
    /// The TLS client config of the group's `https://` servers.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// `Host` sent to an `https://` group: its first server's name (and port when not
    /// 443); None: the client's Host is passed through.
    pub tls_host: Option<String>,
    /// The config it was built from (a reload with the same one keeps this group, and
    /// with it the workers' pooled connections).
    config: Upstream,
    next: AtomicUsize,
    epoch: Instant,
    /// The consistent-hashing table of every configured server: a key goes to its
    /// server there while that one is usable, so a health change never moves the keys
    /// of servers that stay up.
    full: Option<maglev::Table>,
    /// The table of the servers usable when it was built: where the keys of a server
    /// that is out go.
    table: ArcSwapOption<maglev::Table>,
}

impl UpstreamGroup {
    pub fn from_config(u: &Upstream) -> Result<UpstreamGroup, BadValue> {
        let mut tls_host = None;
        let servers = u
            .servers
            .get_ref()
            .iter()
            .map(|s| {
                let target = crate::config::validate::parse_server(s)?;
                if let (Some(host), None) = (&target.tls_host, &tls_host) {
                    tls_host = Some(host.clone());
                }
                Ok(UpstreamServer {
                    addr: target.addr,
                    name: s.clone(),
                    tls_name: target.tls_name,
                    fails: AtomicU32::new(0),
                    down_until_ms: AtomicU64::new(0),
                    healthy: AtomicBool::new(true),
                    check_fails: AtomicU32::new(0),
                    check_passes: AtomicU32::new(0),
                })
            })
            .collect::<Result<Vec<_>, BadValue>>()?;
        let tls = if servers.iter().any(|s| s.tls_name.is_some()) {
            if !u.tls_verify {
                tracing::warn!(
                    "upstream \"{}\": tls_verify = false: its servers' certificates are not checked",
                    u.name.get_ref()
                );
            }
            let ca = u.tls_ca.as_ref().map(|p| p.get_ref().as_path());
            Some(crate::tls::client::client_config(ca, u.tls_verify).map_err(BadValue)?)
        } else {
            None
        };
        Ok(UpstreamGroup {
            name: u.name.get_ref().clone(),
            servers,
            keepalive: u.keepalive,
            keepalive_timeout: u.keepalive_timeout.0,
            connect_timeout: u.connect_timeout.0,
            read_timeout: u.read_timeout.0,
            send_timeout: u.send_timeout.0,
            fail_timeout: u.fail_timeout.0,
            max_fails: u.max_fails,
            balance: u.balance,
            hash_key: u
                .hash_key
                .as_ref()
                .map(|h| crate::vars::Template::compile(h.get_ref(), &Default::default()))
                .transpose()
                .map_err(|e| BadValue(format!("hash_key: {e}")))?,
            health_check: u.health_check.as_ref().map(|h| HealthCheck {
                path: h.path.clone(),
                interval: h.interval.0,
                timeout: h.timeout.0,
                fails: h.fails.max(1),
                passes: h.passes.max(1),
            }),
            tls,
            tls_host,
            config: u.clone(),
            next: AtomicUsize::new(0),
            epoch: Instant::now(),
            full: match u.balance {
                Balance::ConsistentHash => {
                    let names: Vec<String> = u.servers.get_ref().clone();
                    let all = if names.len() >= 64 {
                        u64::MAX
                    } else {
                        (1u64 << names.len()) - 1
                    };
                    maglev::Table::build(&names, all)
                }
                Balance::RoundRobin => None,
            },
            table: ArcSwapOption::empty(),
        })
    }

    /// Whether a reload may keep this group as it is (same config).
    pub fn same_config(&self, u: &Upstream) -> bool {
        self.config == *u
    }

    /// A reload changed the group: carries the health of servers that stay (by address)
    /// over from `old`, so a server known down stays down.
    pub fn carry_state(&self, old: &UpstreamGroup) {
        for s in &self.servers {
            if let Some(o) = old.servers.iter().find(|o| o.addr == s.addr) {
                s.healthy.store(o.healthy.load(Relaxed), Relaxed);
                s.check_fails.store(o.check_fails.load(Relaxed), Relaxed);
                s.check_passes.store(o.check_passes.load(Relaxed), Relaxed);
            }
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Whether server `idx` may get requests (healthy, and not taken out by failures).
    pub fn usable(&self, idx: usize) -> bool {
        let s = &self.servers[idx];
        s.healthy.load(Relaxed) && s.down_until_ms.load(Relaxed) <= self.now_ms()
    }

    /// The `edgecache_upstream_server_up` family of `/metrics`: every server of
    /// `groups`, by group name.
    pub fn write_prom(groups: &HashMap<String, Arc<UpstreamGroup>>, p: &mut Prom) {
        let mut f = p.gauge(
            "edgecache_upstream_server_up",
            "1 when the server gets requests (healthy and not taken out by failures).",
        );
        let mut names: Vec<&String> = groups.keys().collect();
        names.sort();
        for n in names {
            let g = &groups[n];
            for (i, s) in g.servers.iter().enumerate() {
                f.labelled(
                    &[("upstream", n), ("server", &s.name)],
                    u64::from(g.usable(i)),
                );
            }
        }
    }

    /// The active check's verdict of server `idx`.
    pub fn healthy(&self, idx: usize) -> bool {
        self.servers[idx].healthy.load(Relaxed)
    }

    pub(super) fn set_healthy(&self, idx: usize, up: bool) {
        self.servers[idx].healthy.store(up, Relaxed);
    }

    /// The server for a request: `affinity` is its key hash (used by consistent
    /// hashing), `tried` the servers this request already failed on (bit i: server i).
    pub fn pick(&self, affinity: Option<u64>, tried: u64) -> usize {
        let n = self.servers.len();
        let live: u64 = (0..n.min(64))
            .filter(|&i| tried & (1 << i) == 0 && self.usable(i))
            .fold(0, |m, i| m | (1 << i));
        if live == 0 {
            // Nothing usable: the one that comes back first, preferring untried ones.
            return (0..n)
                .min_by_key(|&i| {
                    let s = &self.servers[i];
                    (
                        (i < 64 && tried & (1 << i) != 0) as u8,
                        !s.healthy.load(Relaxed) as u8,
                        s.down_until_ms.load(Relaxed),
                    )
                })
                .unwrap_or(0);
        }
        if let (Balance::ConsistentHash, Some(key)) = (self.balance, affinity) {
            if let Some(i) = self.full.as_ref().map(|t| t.lookup(key)) {
                if live & (1 << i) != 0 {
                    return i;
                }
            }
            // Its server is out (or tried): the keys of that server spread over the
            // ones that are usable.
            if let Some(i) = self.hashed(live, key) {
                return i;
            }
        }
        let start = self.next.fetch_add(1, Relaxed);
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| i < 64 && live & (1 << i) != 0)
            .unwrap_or(start % n)
    }

    /// Consistent hashing over the servers in `live`: the table for that set (built
    /// once per change of the set, shared by every worker).
    fn hashed(&self, live: u64, key: u64) -> Option<usize> {
        let cur = self.table.load();
        if let Some(t) = cur.as_ref().filter(|t| t.members == live) {
            return Some(t.lookup(key));
        }
        let names: Vec<String> = self.servers.iter().map(|s| s.name.clone()).collect();
        let t = Arc::new(maglev::Table::build(&names, live)?);
        let i = t.lookup(key);
        self.table.store(Some(t));
        Some(i)
    }

    /// Records a failure (connect error, timeout, broken response) of server `idx`.
    pub fn mark_failed(&self, idx: usize) {
        let s = &self.servers[idx];
        let fails = s.fails.fetch_add(1, Relaxed) + 1;
        if fails >= self.max_fails {
            s.down_until_ms.store(
                self.now_ms() + self.fail_timeout.as_millis() as u64,
                Relaxed,
            );
            s.fails.store(0, Relaxed);
        }
    }

    /// Records a success: the failure count starts again.
    pub fn mark_ok(&self, idx: usize) {
        let s = &self.servers[idx];
        if s.fails.load(Relaxed) != 0 {
            s.fails.store(0, Relaxed);
        }
    }

    pub fn is_down(&self, idx: usize) -> bool {
        !self.usable(idx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(servers: &[&str], max_fails: u32) -> UpstreamGroup {
        let text = format!(
            "[[listen]]\naddr = \"127.0.0.1:1\"\n[[upstream]]\nname = \"u\"\nservers = {:?}\nmax_fails = {max_fails}\nfail_timeout = \"1h\"\n",
            servers
        );
        let cfg = crate::config::parse("t", &text).unwrap();
        UpstreamGroup::from_config(&cfg.upstream[0]).unwrap()
    }

    #[test]
    fn round_robin_skips_failed_servers() {
        let g = group(&["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"], 1);
        let picks: Vec<usize> = (0..6).map(|_| g.pick(None, 0)).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
        g.mark_failed(1);
        assert!(g.is_down(1));
        let picks: Vec<usize> = (0..4).map(|_| g.pick(None, 0)).collect();
        assert!(!picks.contains(&1), "{picks:?}");
    }

    #[test]
    fn max_fails_counts_before_marking_down() {
        let g = group(&["127.0.0.1:1", "127.0.0.1:2"], 2);
        g.mark_failed(0);
        assert!(!g.is_down(0));
        g.mark_ok(0);
        g.mark_failed(0);
        assert!(!g.is_down(0), "a success in between resets the count");
        g.mark_failed(0);
        assert!(g.is_down(0));
    }

    #[test]
    fn all_down_still_picks_one() {
        let g = group(&["127.0.0.1:1", "127.0.0.1:2"], 1);
        g.mark_failed(0);
        g.mark_failed(1);
        let p = g.pick(None, 0);
        assert!(p < 2);
    }

    fn hashed_group(servers: &[&str]) -> UpstreamGroup {
        let text = format!(
            "[[listen]]\naddr = \"127.0.0.1:1\"\n[[upstream]]\nname = \"u\"\nservers = {:?}\nbalance = \"consistent_hash\"\nfail_timeout = \"1h\"\n",
            servers
        );
        let cfg = crate::config::parse("t", &text).unwrap();
        UpstreamGroup::from_config(&cfg.upstream[0]).unwrap()
    }

    #[test]
    fn consistent_hashing_is_stable_and_moves_only_a_failed_servers_keys() {
        let g = hashed_group(&["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]);
        let keys: Vec<u64> = (0..3000u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        let before: Vec<usize> = keys.iter().map(|&k| g.pick(Some(k), 0)).collect();
        assert_eq!(
            before,
            keys.iter().map(|&k| g.pick(Some(k), 0)).collect::<Vec<_>>()
        );
        for s in 0..3 {
            let share = before.iter().filter(|&&p| p == s).count();
            assert!((800..1200).contains(&share), "server {s}: {share}");
        }
        g.set_healthy(1, false);
        for (k, &b) in keys.iter().zip(&before) {
            let now = g.pick(Some(*k), 0);
            assert_ne!(now, 1);
            if b != 1 {
                assert_eq!(now, b, "a key of a healthy server stays");
            }
        }
        g.set_healthy(1, true);
        let back: Vec<usize> = keys.iter().map(|&k| g.pick(Some(k), 0)).collect();
        assert_eq!(back, before, "keys return when it recovers");
        // A retry skips the server already tried.
        let k = keys[0];
        let first = g.pick(Some(k), 0);
        assert_ne!(g.pick(Some(k), 1 << first), first);
    }

    #[test]
    fn unhealthy_servers_are_skipped_by_round_robin() {
        let g = group(&["127.0.0.1:1", "127.0.0.1:2"], 1);
        g.set_healthy(0, false);
        assert!((0..4).all(|_| g.pick(None, 0) == 1));
        g.set_healthy(1, false);
        assert!(g.pick(None, 0) < 2, "none usable: still one");
    }
}
