//! An `[[upstream]]`: its servers, round-robin selection, and nginx's passive health
//! check: `max_fails` failures within `fail_timeout` take a server out of rotation for
//! `fail_timeout`; when every server is out, the least recently failed one is tried
//! anyway (a dead group still gets a fast 502, not a hang).

use crate::config::validate::BadValue;
use crate::config::Upstream;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

pub struct UpstreamServer {
    pub addr: SocketAddr,
    fails: AtomicU32,
    /// Milliseconds since the group's epoch until which the server is skipped (0: live).
    down_until_ms: AtomicU64,
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
    next: AtomicUsize,
    epoch: Instant,
}

impl UpstreamGroup {
    pub fn from_config(u: &Upstream) -> Result<UpstreamGroup, BadValue> {
        let servers = u
            .servers
            .get_ref()
            .iter()
            .map(|s| {
                crate::config::validate::parse_addr(s).map(|addr| UpstreamServer {
                    addr,
                    fails: AtomicU32::new(0),
                    down_until_ms: AtomicU64::new(0),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
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
            next: AtomicUsize::new(0),
            epoch: Instant::now(),
        })
    }

    pub fn same_servers(&self, other: &UpstreamGroup) -> bool {
        self.servers.len() == other.servers.len()
            && self
                .servers
                .iter()
                .zip(&other.servers)
                .all(|(a, b)| a.addr == b.addr)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Index of the next server to try, skipping those marked down.
    pub fn pick(&self) -> usize {
        let n = self.servers.len();
        let start = self.next.fetch_add(1, Relaxed);
        let now = self.now_ms();
        for i in 0..n {
            let idx = (start + i) % n;
            if self.servers[idx].down_until_ms.load(Relaxed) <= now {
                return idx;
            }
        }
        // All down: the one that comes back first.
        (0..n)
            .min_by_key(|&i| self.servers[i].down_until_ms.load(Relaxed))
            .unwrap_or(0)
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
        self.servers[idx].down_until_ms.load(Relaxed) > self.now_ms()
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
        let picks: Vec<usize> = (0..6).map(|_| g.pick()).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
        g.mark_failed(1);
        assert!(g.is_down(1));
        let picks: Vec<usize> = (0..4).map(|_| g.pick()).collect();
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
        let p = g.pick();
        assert!(p < 2);
    }
}
