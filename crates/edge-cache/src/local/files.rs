//! The open-file cache: per worker, object hash → open file descriptor, like nginx's
//! `open_file_cache`. A repeated disk hit skips `openat`, `statx` and `close`.
//!
//! How it fits: [`crate::Cache::lookup_local`] asks it before opening an object's file.
//! An entry answers only if the index still names the same inode (a replaced object has
//! a new file); one the index no longer has is closed when looked up, and every entry
//! idle for `inactive` is closed by [`OpenFiles::sweep`], which the server calls once a
//! second: a purged or evicted object's disk space is released within that time even
//! if nobody asks for it again.

use super::list::{Links, Lists, NIL};
use crate::key::HashMapK;
use crate::key::KeyHash;
use std::fs::File;
use std::sync::Arc;

/// `open_file_cache` settings (per worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilesConfig {
    /// Most descriptors kept open (0 disables the cache).
    pub max: usize,
    /// Entries unused for this many sweeps (seconds) are closed.
    pub inactive_ticks: u64,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FilesStats {
    pub hits: u64,
    pub misses: u64,
    /// Descriptors closed: LRU overflow, inactivity, or a stale inode.
    pub closed: u64,
    pub open: u64,
}

struct Slot {
    key: KeyHash,
    ino: u64,
    file: Option<Arc<File>>,
    last_tick: u64,
    links: Links,
}

/// Per-worker cache of open object files (LRU, bounded by count).
pub struct OpenFiles {
    cfg: FilesConfig,
    map: HashMapK<u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    lru: Lists<1>,
    tick: u64,
    stats: FilesStats,
}

impl std::fmt::Debug for OpenFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFiles")
            .field("cfg", &self.cfg)
            .field("stats", &self.stats())
            .finish()
    }
}

impl OpenFiles {
    pub fn new(cfg: FilesConfig) -> OpenFiles {
        OpenFiles {
            cfg,
            map: HashMapK::default(),
            slots: Vec::new(),
            free: Vec::new(),
            lru: Lists::new(),
            tick: 0,
            stats: FilesStats::default(),
        }
    }

    pub fn config(&self) -> &FilesConfig {
        &self.cfg
    }

    pub fn enabled(&self) -> bool {
        self.cfg.max > 0
    }

    pub fn stats(&self) -> FilesStats {
        FilesStats {
            open: self.map.len() as u64,
            ..self.stats
        }
    }

    /// The open file of `key` if it is the inode the index names.
    pub fn get(&mut self, key: KeyHash, ino: u64) -> Option<Arc<File>> {
        if !self.enabled() {
            return None;
        }
        let Some(&i) = self.map.get(&key) else {
            self.stats.misses += 1;
            return None;
        };
        if self.slots[i as usize].ino != ino {
            self.stats.misses += 1;
            self.close(i);
            return None;
        }
        if self.lru.head(0) != i {
            self.lru.unlink(0, i, 1, &mut self.slots, |s| &mut s.links);
            self.lru
                .push_front(0, i, 1, &mut self.slots, |s| &mut s.links);
        }
        let s = &mut self.slots[i as usize];
        s.last_tick = self.tick;
        self.stats.hits += 1;
        s.file.clone()
    }

    /// Keep `file` (inode `ino`) open for `key`.
    pub fn insert(&mut self, key: KeyHash, ino: u64, file: Arc<File>) {
        if !self.enabled() {
            return;
        }
        if let Some(&i) = self.map.get(&key) {
            self.close(i);
        }
        while self.map.len() >= self.cfg.max {
            let t = self.lru.tail(0);
            self.close(t);
        }
        let slot = Slot {
            key,
            ino,
            file: Some(file),
            last_tick: self.tick,
            links: Links::default(),
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.map.insert(key, i);
        self.lru
            .push_front(0, i, 1, &mut self.slots, |s| &mut s.links);
    }

    /// Close `key`'s descriptor (the index no longer has the object).
    pub fn remove(&mut self, key: KeyHash) {
        if let Some(&i) = self.map.get(&key) {
            self.close(i);
        }
    }

    /// One clock tick (the server calls this once a second): close what was not used
    /// for `inactive_ticks`.
    pub fn sweep(&mut self) {
        self.tick += 1;
        loop {
            let t = self.lru.tail(0);
            if t == NIL || self.tick - self.slots[t as usize].last_tick < self.cfg.inactive_ticks {
                break;
            }
            self.close(t);
        }
    }

    fn close(&mut self, i: u32) {
        self.lru.unlink(0, i, 1, &mut self.slots, |s| &mut s.links);
        let key = self.slots[i as usize].key;
        self.map.remove(&key);
        // The descriptor closes when the last in-flight response using it is done.
        self.slots[i as usize].file = None;
        self.free.push(i);
        self.stats.closed += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> Arc<File> {
        Arc::new(tempfile::tempfile().unwrap())
    }

    #[test]
    fn answers_only_for_the_same_inode_and_bounds_count() {
        let mut c = OpenFiles::new(FilesConfig {
            max: 2,
            inactive_ticks: 3,
        });
        c.insert(1, 10, file());
        assert!(c.get(1, 10).is_some());
        assert!(c.get(1, 11).is_none(), "another inode: closed");
        assert!(c.get(1, 10).is_none());
        c.insert(1, 10, file());
        c.insert(2, 20, file());
        c.get(1, 10);
        c.insert(3, 30, file()); // evicts 2, the least recently used
        assert!(c.get(2, 20).is_none());
        assert!(c.get(1, 10).is_some() && c.get(3, 30).is_some());
        assert_eq!(c.stats().open, 2);
    }

    #[test]
    fn sweep_closes_idle_descriptors() {
        let mut c = OpenFiles::new(FilesConfig {
            max: 10,
            inactive_ticks: 2,
        });
        c.insert(1, 10, file());
        c.insert(2, 20, file());
        c.sweep();
        c.get(2, 20);
        c.sweep();
        assert_eq!(c.stats().open, 1, "1 idle for 2 ticks is closed");
        assert!(c.get(2, 20).is_some());
        c.sweep();
        c.sweep();
        assert_eq!(c.stats().open, 0);
    }

    #[test]
    fn disabled_keeps_nothing() {
        let mut c = OpenFiles::new(FilesConfig {
            max: 0,
            inactive_ticks: 2,
        });
        c.insert(1, 10, file());
        assert!(c.get(1, 10).is_none());
        assert_eq!(c.stats(), FilesStats::default());
    }
}
