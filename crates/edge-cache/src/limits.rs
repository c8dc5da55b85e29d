//! [`Limits`]: the settings of a cache that a reload changes while it runs.
//!
//! How it fits: a [`crate::Cache`] is opened once and kept across reloads (its index,
//! loader and manager must not be rebuilt on every SIGHUP). Its size limits and the
//! pacing of its background threads are read from here, not from the
//! [`crate::CacheConfig`] it was opened with: the manager takes one copy per pass, the
//! loader one per batch, and a writer checks the size budget after each commit.
//! [`crate::Cache::set_limits`] stores new values and wakes the manager, so a smaller
//! `max_size` is evicted down to at once. Each value is its own atomic: a reader may see
//! one field new and another old for the length of one pass, which is harmless (every
//! field is a budget on its own).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::CacheConfig;

/// The live-changeable part of a [`CacheConfig`] (same names, same meaning).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_size: u64,
    pub min_free: u64,
    pub inactive: Duration,
    pub keys_zone: u64,
    pub loader_files: usize,
    pub loader_sleep: Duration,
    pub manager_files: usize,
    pub manager_threshold: Duration,
    pub manager_sleep: Duration,
}

impl Limits {
    /// The limits `cfg` asks for.
    pub fn of(cfg: &CacheConfig) -> Limits {
        Limits {
            max_size: cfg.max_size,
            min_free: cfg.min_free,
            inactive: cfg.inactive,
            keys_zone: cfg.keys_zone,
            loader_files: cfg.loader_files,
            loader_sleep: cfg.loader_sleep,
            manager_files: cfg.manager_files,
            manager_threshold: cfg.manager_threshold,
            manager_sleep: cfg.manager_sleep,
        }
    }
}

/// Durations are kept as nanoseconds (saturating: 584 years is "never").
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// [`Limits`] in atomics, shared by the workers, the manager and the loader.
#[derive(Debug)]
pub(crate) struct LiveLimits {
    max_size: AtomicU64,
    min_free: AtomicU64,
    inactive: AtomicU64,
    keys_zone: AtomicU64,
    loader_files: AtomicUsize,
    loader_sleep: AtomicU64,
    manager_files: AtomicUsize,
    manager_threshold: AtomicU64,
    manager_sleep: AtomicU64,
}

impl LiveLimits {
    pub(crate) fn new(l: &Limits) -> LiveLimits {
        let live = LiveLimits {
            max_size: AtomicU64::new(0),
            min_free: AtomicU64::new(0),
            inactive: AtomicU64::new(0),
            keys_zone: AtomicU64::new(0),
            loader_files: AtomicUsize::new(0),
            loader_sleep: AtomicU64::new(0),
            manager_files: AtomicUsize::new(0),
            manager_threshold: AtomicU64::new(0),
            manager_sleep: AtomicU64::new(0),
        };
        live.store(l);
        live
    }

    pub(crate) fn store(&self, l: &Limits) {
        let r = Ordering::Relaxed;
        self.max_size.store(l.max_size, r);
        self.min_free.store(l.min_free, r);
        self.inactive.store(nanos(l.inactive), r);
        self.keys_zone.store(l.keys_zone, r);
        self.loader_files.store(l.loader_files, r);
        self.loader_sleep.store(nanos(l.loader_sleep), r);
        self.manager_files.store(l.manager_files, r);
        self.manager_threshold.store(nanos(l.manager_threshold), r);
        self.manager_sleep.store(nanos(l.manager_sleep), r);
    }

    pub(crate) fn load(&self) -> Limits {
        let r = Ordering::Relaxed;
        Limits {
            max_size: self.max_size.load(r),
            min_free: self.min_free.load(r),
            inactive: Duration::from_nanos(self.inactive.load(r)),
            keys_zone: self.keys_zone.load(r),
            loader_files: self.loader_files.load(r),
            loader_sleep: Duration::from_nanos(self.loader_sleep.load(r)),
            manager_files: self.manager_files.load(r),
            manager_threshold: Duration::from_nanos(self.manager_threshold.load(r)),
            manager_sleep: Duration::from_nanos(self.manager_sleep.load(r)),
        }
    }

    /// The two budgets a writer checks after each commit (without copying the rest).
    pub(crate) fn max_size(&self) -> u64 {
        self.max_size.load(Ordering::Relaxed)
    }

    pub(crate) fn keys_zone(&self) -> u64 {
        self.keys_zone.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_and_loads_every_field() {
        let a = Limits::of(&CacheConfig::default());
        let live = LiveLimits::new(&a);
        assert_eq!(live.load(), a);
        let b = Limits {
            max_size: 3 << 20,
            min_free: 7,
            inactive: Duration::from_secs(4 * 86400),
            keys_zone: 1 << 20,
            loader_files: 9,
            loader_sleep: Duration::from_millis(3),
            manager_files: 11,
            manager_threshold: Duration::from_millis(13),
            manager_sleep: Duration::from_millis(17),
        };
        live.store(&b);
        assert_eq!(live.load(), b);
        assert_eq!((live.max_size(), live.keys_zone()), (3 << 20, 1 << 20));
    }

    #[test]
    fn huge_durations_saturate() {
        let l = Limits {
            inactive: Duration::MAX,
            ..Limits::of(&CacheConfig::default())
        };
        let got = LiveLimits::new(&l).load().inactive;
        assert_eq!(got, Duration::from_nanos(u64::MAX));
    }
}
