//! A cache's life: [`Cache::open`] (the zone, its snapshot, its loader and manager
//! threads), its configuration and reloads, its counters, and [`Cache::shutdown`] and
//! the snapshot written after it.
//!
//! How it fits: the server opens one cache per `[[cache]]` at start, applies a reload's
//! limits and `cache_verify` here, reads [`Cache::stats`] for `/metrics` and `/status`,
//! and at exit shuts the cache down and writes its index snapshot.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::Cache;
use crate::inflight::Inflight;
use crate::key::KeyHash;
use crate::sync::lock;
use crate::uses::UseCounter;
use crate::zone::Zone;
use crate::{CacheConfig, CacheStats, Limits, Verify};

impl Cache {
    /// Create the directory, start the loader and the manager threads, and return at
    /// once: lookups work immediately (objects not yet loaded are found on disk).
    pub fn open(cfg: CacheConfig) -> io::Result<Arc<Cache>> {
        let seed = twox_hash::XxHash3_64::oneshot(cfg.name.as_bytes());
        let zone = Arc::new(Zone::open(cfg)?);
        zone.restore_snapshot();
        let loader = crate::loader::spawn(&zone)?;
        let manager = crate::manager::spawn(&zone)?;
        Ok(Arc::new(Cache {
            zone,
            seq: AtomicU64::new(0),
            seed,
            inflight: Inflight::new(),
            uses: UseCounter::default(),
            spares: Default::default(),
            threads: Mutex::new(vec![loader, manager]),
        }))
    }

    /// The config the cache was opened with: its name, path and levels hold for the
    /// life of the cache; its limits are those of the start ([`Cache::limits`] has the
    /// values in force).
    pub fn config(&self) -> &CacheConfig {
        self.zone.config()
    }

    /// The size limits and background pacing in force.
    pub fn limits(&self) -> Limits {
        self.zone.limits()
    }

    /// A reload's size limits and pacing: they apply from the manager's next pass,
    /// which starts now (a smaller `max_size` is evicted down to in bounded batches of
    /// `manager_files`/`manager_threshold`), and from the loader's next batch.
    pub fn set_limits(&self, l: Limits) {
        self.zone.set_limits(l);
    }

    pub fn name(&self) -> &str {
        self.zone.name()
    }

    /// The collapse lock for misses in this cache.
    pub fn inflight(&self) -> &Inflight {
        &self.inflight
    }

    /// `cache_min_uses`: count a request for a key that missed; returns how many
    /// times it was requested (store the response once this reaches the minimum).
    pub fn note_use(&self, hash: KeyHash) -> u32 {
        self.uses.note(hash)
    }

    /// Where the object with this hash lives on disk.
    pub fn path_for(&self, hash: KeyHash) -> PathBuf {
        self.zone.path_for(hash)
    }

    /// When bodies are checked (`cache_verify`).
    pub fn verify(&self) -> Verify {
        self.zone.verify()
    }

    /// A reload's `cache_verify` (the loader's part applies at the next start).
    pub fn set_verify(&self, v: Verify) {
        self.zone.set_verify(v);
    }

    /// Writes the index snapshot that the next [`Cache::open`] of this directory starts
    /// from. Call after [`Cache::shutdown`], once nothing writes to the cache any more
    /// (the server does, when every worker has stopped). Returns the objects written.
    pub fn write_snapshot(&self) -> io::Result<usize> {
        self.zone.write_snapshot()
    }

    /// Counters for metrics and status pages.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            inflight: self.inflight.len() as u64,
            ..self.zone.stats()
        }
    }

    /// Stop the loader and manager threads and wait for them (bounded by one batch).
    /// Lookups and writes keep working; nothing is evicted afterwards.
    pub fn shutdown(&self) {
        self.zone.stop();
        self.drop_spares();
        let threads: Vec<JoinHandle<()>> = lock(&self.threads).drain(..).collect();
        let me = std::thread::current().id();
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }

    /// Wait until the loader has finished (tests, tools and orderly startups).
    pub fn wait_loaded(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while self.zone.loading() {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        true
    }
}
