//! The state every load thread reads: the config, the URL picker, the schedule's start
//! and the `--requests` budget.
//!
//! How it fits: [`crate::run`] builds it once; [`crate::worker`] hands it to each thread
//! and [`crate::conn`] reads it per request. Its own module so that `conn` does not
//! depend on the `worker` that spawns it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::cli::Config;
use crate::mix::Picker;

/// Read-only state shared by every thread, plus the `--requests` counter.
pub struct Shared {
    pub cfg: Config,
    pub picker: Picker,
    /// Test start: ramp and open-loop schedules count from here.
    pub start: Instant,
    pub deadline: Instant,
    /// Seed for the per-connection URL pickers.
    pub seed: u64,
    issued: AtomicU64,
}

impl Shared {
    pub fn new(cfg: Config, start: Instant) -> Shared {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x5eed, |d| d.as_nanos() as u64);
        Shared {
            picker: Picker::new(&cfg.classes),
            deadline: start + cfg.duration,
            start,
            seed,
            cfg,
            issued: AtomicU64::new(0),
        }
    }

    /// Takes one request from the `--requests` budget (always true without one).
    #[inline]
    pub fn take_ticket(&self) -> bool {
        match self.cfg.requests {
            None => true,
            Some(n) => self.issued.fetch_add(1, Ordering::Relaxed) < n,
        }
    }
}
