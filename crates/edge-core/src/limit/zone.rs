//! The zones: a table of keys ([`super::table`]), what the zone was configured with,
//! and its counters; and [`Zones`], every zone of a config generation, which a reload
//! builds from the previous one so that an unchanged zone keeps its table (a reload
//! does not reset anyone's limit).

use super::gcra::{Gcra, Verdict};
use super::key::Key;
use super::table::{ConnRefusal, ConnTable, ReqTable};
use crate::config::limits::{parse_rate, Rate};
use crate::config::Config;
use crate::prom::Prom;
use crate::vars::Known;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Counter blocks per zone: a worker counts in block `id % STRIPES`, so workers do not
/// share a cache line (up to this many workers).
pub const STRIPES: usize = 64;

#[repr(align(64))]
#[derive(Default)]
struct Stripe([AtomicU64; 8]);

/// Counters of a zone, one 64-byte block per worker: counting is one relaxed add on a
/// line no other worker writes.
pub struct Counters(Box<[Stripe]>);

impl Default for Counters {
    fn default() -> Self {
        Counters((0..STRIPES).map(|_| Stripe::default()).collect())
    }
}

impl Counters {
    #[inline]
    pub fn add(&self, worker: usize, which: usize) {
        self.0[worker % STRIPES].0[which % 8].fetch_add(1, Relaxed);
    }

    #[inline]
    pub fn sub(&self, worker: usize, which: usize) {
        self.0[worker % STRIPES].0[which % 8].fetch_sub(1, Relaxed);
    }

    /// The sum over workers (wrapping: a gauge added on one worker and taken off on
    /// another still sums right).
    pub fn sum(&self, which: usize) -> u64 {
        self.0
            .iter()
            .fold(0u64, |t, s| t.wrapping_add(s.0[which % 8].load(Relaxed)))
    }
}

/// Bytes a zone's `size` keeps for its counters and bookkeeping; the table gets the
/// rest.
pub const OVERHEAD: u64 = (STRIPES as u64) * 64 + 1024;

/// What a request got from a `limit_req` zone: the `result` label of
/// `edgecache_limit_req_total`, and the value of `$limit_req_status` (upper case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReqResult {
    Passed = 0,
    Delayed = 1,
    Rejected = 2,
    DelayedDryRun = 3,
    RejectedDryRun = 4,
}

impl ReqResult {
    pub const ALL: [ReqResult; 5] = [
        ReqResult::Passed,
        ReqResult::Delayed,
        ReqResult::Rejected,
        ReqResult::DelayedDryRun,
        ReqResult::RejectedDryRun,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            ReqResult::Passed => "passed",
            ReqResult::Delayed => "delayed",
            ReqResult::Rejected => "rejected",
            ReqResult::DelayedDryRun => "delayed_dry_run",
            ReqResult::RejectedDryRun => "rejected_dry_run",
        }
    }

    /// `$limit_req_status`, as nginx spells it.
    pub fn status(self) -> &'static str {
        match self {
            ReqResult::Passed => "PASSED",
            ReqResult::Delayed => "DELAYED",
            ReqResult::Rejected => "REJECTED",
            ReqResult::DelayedDryRun => "DELAYED_DRY_RUN",
            ReqResult::RejectedDryRun => "REJECTED_DRY_RUN",
        }
    }
}

/// Counter indices of a rate zone besides the [`ReqResult`]s.
const EVICTIONS: usize = 5;
const KEYS: usize = 6;

/// Nanoseconds since this process's limit clock started (monotonic, the same for
/// every worker).
pub fn clock(at: Instant) -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(at.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

/// A `[[limit_req_zone]]`.
pub struct ReqZone {
    pub name: String,
    /// The key as written (with the rate and size, what decides whether a reload keeps
    /// the zone).
    pub key_src: String,
    pub rate: Rate,
    pub size: u64,
    /// Nanoseconds per request at `rate`.
    pub interval: u64,
    table: ReqTable,
    counters: Counters,
}

impl ReqZone {
    /// None when the table's memory cannot be had.
    pub fn new(name: &str, key_src: &str, rate: Rate, size: u64) -> Option<ReqZone> {
        Some(ReqZone {
            name: name.into(),
            key_src: key_src.into(),
            rate,
            size,
            interval: rate.interval_ns(),
            table: ReqTable::new(size.saturating_sub(OVERHEAD))?,
            counters: Counters::default(),
        })
    }

    /// Takes a request for `key` at `now` (see [`clock`]): the state is updated when
    /// it passes or is delayed. A table that keeps losing races lets the request pass.
    #[inline]
    pub fn take(&self, key: u64, now: u64, g: &Gcra, worker: usize) -> Verdict {
        let (v, taken) = self.table.take(key, |tat| {
            let (v, next) = g.decide(tat, now);
            (v, (!matches!(v, Verdict::Reject(_))).then_some(next))
        });
        if taken.new_key {
            self.counters.add(worker, KEYS);
        }
        if taken.evicted {
            self.counters.add(worker, EVICTIONS);
        }
        v.unwrap_or(Verdict::Pass)
    }

    /// Gives back one request of `key` (taken, then refused by another zone).
    pub fn give_back(&self, key: u64) {
        self.table.give_back(key, self.interval);
    }

    #[inline]
    pub fn count(&self, worker: usize, r: ReqResult) {
        self.counters.add(worker, r as usize);
    }

    /// Requests by result, summed over workers.
    pub fn total(&self, r: ReqResult) -> u64 {
        self.counters.sum(r as usize)
    }

    /// Keys that took a slot never used before (the table's fill; it never shrinks).
    pub fn keys(&self) -> u64 {
        self.counters.sum(KEYS)
    }

    /// Keys that took the slot of another (the table was full).
    pub fn evictions(&self) -> u64 {
        self.counters.sum(EVICTIONS)
    }

    /// Keys the table holds at most.
    pub fn slots(&self) -> usize {
        self.table.slots()
    }

    /// Bytes the zone takes at most: its table and its counters (within `size`).
    pub fn memory(&self) -> u64 {
        self.table.bytes() + OVERHEAD
    }

    pub fn table(&self) -> &ReqTable {
        &self.table
    }
}

/// Counter indices of a connection zone.
pub mod conn_counter {
    /// Connections counted.
    pub const PASSED: usize = 0;
    /// Refused: the key had `max` connections.
    pub const REJECTED: usize = 1;
    /// Refused: the table was full of keys with connections.
    pub const FULL: usize = 2;
    /// Connections counted now (a gauge).
    pub const ACTIVE: usize = 3;
}

/// A `[[limit_conn_zone]]`.
pub struct ConnZone {
    pub name: String,
    pub key_src: String,
    pub size: u64,
    table: ConnTable,
    counters: Counters,
}

/// One connection counted in a zone: given back when dropped (when its connection
/// closes, or moves on to another key).
pub struct ConnGuard {
    zone: Arc<ConnZone>,
    slot: usize,
    key: u64,
    worker: usize,
}

impl ConnGuard {
    pub fn zone(&self) -> &Arc<ConnZone> {
        &self.zone
    }

    pub fn key(&self) -> u64 {
        self.key
    }

    /// Connections its key holds now, this one included.
    pub fn count(&self) -> u64 {
        self.zone.table.count(self.slot)
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.zone.table.release(self.slot);
        self.zone.counters.sub(self.worker, conn_counter::ACTIVE);
    }
}

impl ConnZone {
    pub fn new(name: &str, key_src: &str, size: u64) -> Option<ConnZone> {
        Some(ConnZone {
            name: name.into(),
            key_src: key_src.into(),
            size,
            table: ConnTable::new(size.saturating_sub(OVERHEAD))?,
            counters: Counters::default(),
        })
    }

    /// Counts a connection for `key` if it has fewer than `max`; the guard gives it
    /// back. Refusals are counted.
    pub fn acquire(
        self: &Arc<Self>,
        key: u64,
        max: u64,
        worker: usize,
    ) -> Result<ConnGuard, ConnRefusal> {
        match self.table.acquire(key, max) {
            Ok(slot) => {
                self.counters.add(worker, conn_counter::PASSED);
                self.counters.add(worker, conn_counter::ACTIVE);
                Ok(ConnGuard {
                    zone: self.clone(),
                    slot,
                    key,
                    worker,
                })
            }
            Err(r) => {
                self.refused(worker, r);
                Err(r)
            }
        }
    }

    /// Counts a refusal.
    pub fn refused(&self, worker: usize, r: ConnRefusal) {
        self.counters.add(
            worker,
            match r {
                ConnRefusal::Over => conn_counter::REJECTED,
                ConnRefusal::Full => conn_counter::FULL,
            },
        );
    }

    /// A counter ([`conn_counter`]) summed over workers.
    pub fn total(&self, which: usize) -> u64 {
        self.counters.sum(which)
    }

    pub fn slots(&self) -> usize {
        self.table.slots()
    }

    pub fn memory(&self) -> u64 {
        self.table.bytes() + OVERHEAD
    }

    pub fn table(&self) -> &ConnTable {
        &self.table
    }
}

/// Every zone of a config generation, with its key compiled for this generation's
/// variables.
#[derive(Default)]
pub struct Zones {
    pub req: Vec<(Arc<ReqZone>, Key)>,
    pub conn: Vec<(Arc<ConnZone>, Key)>,
}

impl Zones {
    /// The zones of `cfg` (validated). A zone of `previous` with the same name, key,
    /// rate and size is kept, its table and counters with it; any other is new (and
    /// empty).
    pub fn build(cfg: &Config, known: &Known, previous: Option<&Zones>) -> Result<Zones, String> {
        clock(Instant::now());
        let nomem = |name: &str, size: u64| {
            format!("limit zone {name:?}: cannot allocate {size} bytes for its table")
        };
        let mut zones = Zones::default();
        for z in &cfg.limit_req_zone {
            let (name, key_src, size) = (z.name.get_ref(), z.key.get_ref(), z.size.get_ref().0);
            let rate = parse_rate(z.rate.get_ref())
                .map_err(|m| format!("limit_req_zone {name:?}: {m}"))?;
            let kept = previous
                .and_then(|p| p.req.iter().find(|(o, _)| o.name == *name))
                .filter(|(o, _)| o.key_src == *key_src && o.rate == rate && o.size == size)
                .map(|(o, _)| o.clone());
            let zone = match kept {
                Some(z) => z,
                None => Arc::new(
                    ReqZone::new(name, key_src, rate, size).ok_or_else(|| nomem(name, size))?,
                ),
            };
            let key = Key::compile(key_src, known)
                .map_err(|m| format!("limit_req_zone {name:?}: {m}"))?;
            zones.req.push((zone, key));
        }
        for z in &cfg.limit_conn_zone {
            let (name, key_src, size) = (z.name.get_ref(), z.key.get_ref(), z.size.get_ref().0);
            let kept = previous
                .and_then(|p| p.conn.iter().find(|(o, _)| o.name == *name))
                .filter(|(o, _)| o.key_src == *key_src && o.size == size)
                .map(|(o, _)| o.clone());
            let zone = match kept {
                Some(z) => z,
                None => {
                    Arc::new(ConnZone::new(name, key_src, size).ok_or_else(|| nomem(name, size))?)
                }
            };
            let key = Key::compile(key_src, known)
                .map_err(|m| format!("limit_conn_zone {name:?}: {m}"))?;
            zones.conn.push((zone, key));
        }
        Ok(zones)
    }

    pub fn req_zone(&self, name: &str) -> Option<&(Arc<ReqZone>, Key)> {
        self.req.iter().find(|(z, _)| z.name == name)
    }

    pub fn conn_zone(&self, name: &str) -> Option<&(Arc<ConnZone>, Key)> {
        self.conn.iter().find(|(z, _)| z.name == name)
    }

    /// The `limit_req` and `limit_conn` families of `/metrics`, per zone (summed over
    /// workers); a kind of zone the config has none of has no families.
    pub fn write_prom(&self, p: &mut Prom) {
        if !self.req.is_empty() {
            let mut f = p.counter(
                "edgecache_limit_req_total",
                "Requests to locations with limit_req, by zone and result ($limit_req_status).",
            );
            for (z, _) in &self.req {
                for r in ReqResult::ALL {
                    f.labelled(&[("zone", &z.name), ("result", &r.label())], z.total(r));
                }
            }
            let mut f = p.gauge(
                "edgecache_limit_req_keys",
                "Keys a limit_req zone holds (at most its slots).",
            );
            for (z, _) in &self.req {
                f.labelled(&[("zone", &z.name)], z.keys().min(z.slots() as u64));
            }
            let mut f = p.counter(
                "edgecache_limit_req_evictions_total",
                "Keys a limit_req zone dropped for new ones (the least recently seen), being full.",
            );
            for (z, _) in &self.req {
                f.labelled(&[("zone", &z.name)], z.evictions());
            }
        }
        if !self.conn.is_empty() {
            let mut f = p.counter(
                "edgecache_limit_conn_total",
                "Connections counted by limit_conn, by zone and result (rejected: over max; full: the zone's table held no room for a new key).",
            );
            for (z, _) in &self.conn {
                for (label, which) in [
                    ("passed", conn_counter::PASSED),
                    ("rejected", conn_counter::REJECTED),
                    ("full", conn_counter::FULL),
                ] {
                    f.labelled(&[("zone", &z.name), ("result", &label)], z.total(which));
                }
            }
            let mut f = p.gauge(
                "edgecache_limit_conn_active",
                "Connections a limit_conn zone counts now.",
            );
            for (z, _) in &self.conn {
                f.labelled(&[("zone", &z.name)], z.total(conn_counter::ACTIVE));
            }
        }
    }
}
