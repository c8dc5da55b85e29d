//! The RAM tier: one per worker, a byte budget, three policies (S3-FIFO, W-TinyLFU,
//! LRU), no locks.
//!
//! How it fits: [`crate::Cache::lookup_local`] asks it for a body after the index said
//! which object version is current; an entry answers only for that exact version (the
//! index entry's generation, which every insert, refresh and soft purge renews), so
//! purge, refresh, replacement and Vary need no invalidation messages: a stale entry
//! simply never matches and is dropped when seen. The server offers bodies it read from disk for fresh hits
//! ([`MemTier::insert`]); the policy decides what stays.
//!
//! Why our own and not a crate: the tier sits on one worker's hit path (no `Sync`, no
//! lock, no atomic), weighs entries by bytes, and checks versions against the shared
//! index. `foyer` and `moka` are concurrent (sharded locks, atomics); `quick_cache`'s
//! unsync cache has one fixed policy. The three policies here are ~300 lines:
//! - **S3-FIFO** (Yang et al., SOSP '23): new objects enter a small FIFO (10% of the
//!   bytes); those hit again while there move to the main FIFO, the others leave and
//!   are remembered in a ghost FIFO, so that a returning object goes straight to main.
//!   Main is a CLOCK with a 2-bit frequency. One-hit wonders and scans pass through
//!   the small queue without touching the hot set. A hit only bumps a counter.
//! - **W-TinyLFU** (Einziger et al., Caffeine): a 1% LRU window, then a segmented LRU
//!   (80% protected); a window victim enters main only if a count-min sketch of
//!   recent popularity (4-bit counters, halved every 10 × width events) says it is
//!   more popular than main's victim.
//! - **LRU**: the baseline.

use super::list::{Links, Lists, NIL};
use crate::key::HashMapK;
use crate::key::KeyHash;
use bytes::Bytes;
use std::collections::VecDeque;

/// Bytes charged per entry on top of its body (slot, map slot, Arc header, ghost share).
pub const ENTRY_OVERHEAD: u64 = 128;

/// Which objects stay in RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    #[default]
    S3Fifo,
    TinyLfu,
    Lru,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::S3Fifo => "s3fifo",
            Policy::TinyLfu => "tinylfu",
            Policy::Lru => "lru",
        }
    }

    pub fn parse(s: &str) -> Option<Policy> {
        match s {
            "s3fifo" => Some(Policy::S3Fifo),
            "tinylfu" => Some(Policy::TinyLfu),
            "lru" => Some(Policy::Lru),
            _ => None,
        }
    }
}

/// One worker's share of `[memory_cache]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemConfig {
    /// Bytes this tier may hold (bodies plus [`ENTRY_OVERHEAD`] each).
    pub budget: u64,
    /// Larger bodies are never admitted.
    pub max_object: u64,
    pub policy: Policy,
}

/// Counters (plain integers: one worker owns the tier).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemStats {
    pub hits: u64,
    pub hit_bytes: u64,
    pub misses: u64,
    /// Objects taken in.
    pub admissions: u64,
    /// Objects refused: too large, or (TinyLFU) less popular than what they would evict.
    pub rejections: u64,
    /// Objects pushed out by the policy to make room.
    pub evictions: u64,
    /// Entries dropped because the index now names another version (or none).
    pub invalidations: u64,
    /// Current bytes held (bodies plus overhead) and objects.
    pub bytes: u64,
    pub objects: u64,
}

struct Obj {
    gen: u64,
    body: Bytes,
}

struct Slot {
    key: KeyHash,
    obj: Option<Obj>,
    weight: u64,
    /// S3-FIFO: 0..=3 hits since insertion or the last pass of the CLOCK hand.
    freq: u8,
    /// Which list holds it (see the queue constants).
    queue: u8,
    links: Links,
}

// List numbers: S3-FIFO uses SMALL and MAIN; TinyLFU WINDOW, PROBATION, PROTECTED;
// LRU only MAIN.
const SMALL: u8 = 0;
const WINDOW: u8 = 0;
const MAIN: u8 = 1;
const PROBATION: u8 = 1;
const PROTECTED: u8 = 2;

/// The per-worker RAM tier. Not `Sync`: one worker owns it.
pub struct MemTier {
    cfg: MemConfig,
    map: HashMapK<u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    lists: Lists<3>,
    used: u64,
    ghost: Ghost,
    sketch: Sketch,
    stats: MemStats,
}

impl std::fmt::Debug for MemTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemTier")
            .field("cfg", &self.cfg)
            .field("stats", &self.stats())
            .finish()
    }
}

impl MemTier {
    pub fn new(cfg: MemConfig) -> MemTier {
        // Sketch width: about one counter per object that fits, assuming 8 KiB objects.
        let width = if cfg.policy == Policy::TinyLfu {
            (cfg.budget / 8192).clamp(1024, 1 << 22).next_power_of_two() as usize
        } else {
            0
        };
        MemTier {
            cfg,
            map: HashMapK::default(),
            slots: Vec::new(),
            free: Vec::new(),
            lists: Lists::new(),
            used: 0,
            ghost: Ghost::default(),
            sketch: Sketch::new(width),
            stats: MemStats::default(),
        }
    }

    pub fn config(&self) -> &MemConfig {
        &self.cfg
    }

    pub fn stats(&self) -> MemStats {
        MemStats {
            bytes: self.used,
            objects: self.map.len() as u64,
            ..self.stats
        }
    }

    fn weight_of(len: usize) -> u64 {
        len as u64 + ENTRY_OVERHEAD
    }

    /// Whether a body of `len` bytes may be offered at all (the server reads a body
    /// from disk for [`MemTier::insert`] only when this says yes).
    pub fn admissible(&self, len: u64) -> bool {
        len <= self.cfg.max_object && Self::weight_of(len as usize) <= self.cfg.budget
    }

    /// The body of `key` if the tier holds exactly this version (`gen`, the index
    /// entry's generation). A held older version is dropped.
    pub fn get(&mut self, key: KeyHash, gen: u64) -> Option<Bytes> {
        let Some(&i) = self.map.get(&key) else {
            self.stats.misses += 1;
            if self.cfg.policy == Policy::TinyLfu {
                self.sketch.increment(key);
            }
            return None;
        };
        let current = self.slots[i as usize]
            .obj
            .as_ref()
            .is_some_and(|o| o.gen == gen);
        if !current {
            self.stats.invalidations += 1;
            self.stats.misses += 1;
            self.remove_slot(i);
            return None;
        }
        self.on_hit(i);
        let body = self.slots[i as usize]
            .obj
            .as_ref()
            .expect("mapped slot")
            .body
            .clone();
        self.stats.hits += 1;
        self.stats.hit_bytes += body.len() as u64;
        Some(body)
    }

    /// Whether this version of `key` is held (no counting, no policy update).
    pub fn contains(&self, key: KeyHash, gen: u64) -> bool {
        self.map.get(&key).is_some_and(|&i| {
            self.slots[i as usize]
                .obj
                .as_ref()
                .is_some_and(|o| o.gen == gen)
        })
    }

    /// Drop `key` (the index no longer has it).
    pub fn remove(&mut self, key: KeyHash) {
        if let Some(&i) = self.map.get(&key) {
            self.stats.invalidations += 1;
            self.remove_slot(i);
        }
    }

    /// Offer a body read from disk for the version `gen` of `key`. The policy decides
    /// whether it stays; the byte budget holds when this returns.
    pub fn insert(&mut self, key: KeyHash, gen: u64, body: Bytes) {
        if !self.admissible(body.len() as u64) {
            self.stats.rejections += 1;
            return;
        }
        if let Some(&i) = self.map.get(&key) {
            self.remove_slot(i);
        }
        let weight = Self::weight_of(body.len());
        let queue = match self.cfg.policy {
            Policy::S3Fifo if self.ghost.take(key) => MAIN,
            Policy::S3Fifo => SMALL,
            Policy::TinyLfu => WINDOW,
            Policy::Lru => MAIN,
        };
        let slot = Slot {
            key,
            obj: Some(Obj { gen, body }),
            weight,
            freq: 0,
            queue,
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
        self.push_front(queue, i);
        self.stats.admissions += 1;
        match self.cfg.policy {
            Policy::S3Fifo => self.s3_make_room(),
            Policy::TinyLfu => self.tlfu_make_room(),
            Policy::Lru => {
                while self.used > self.cfg.budget {
                    let t = self.lists.tail(MAIN);
                    self.evict(t);
                }
            }
        }
        debug_assert!(self.used <= self.cfg.budget);
    }

    fn on_hit(&mut self, i: u32) {
        match self.cfg.policy {
            Policy::S3Fifo => {
                let s = &mut self.slots[i as usize];
                s.freq = (s.freq + 1).min(3);
            }
            Policy::Lru => self.move_front(MAIN, i),
            Policy::TinyLfu => {
                let key = self.slots[i as usize].key;
                self.sketch.increment(key);
                match self.slots[i as usize].queue {
                    WINDOW => self.move_front(WINDOW, i),
                    PROBATION => {
                        self.unlink(i);
                        self.push_front(PROTECTED, i);
                        let cap = self.main_capacity() / 5 * 4;
                        while self.lists.bytes(PROTECTED) > cap {
                            let t = self.lists.tail(PROTECTED);
                            self.unlink(t);
                            self.push_front(PROBATION, t);
                        }
                    }
                    _ => self.move_front(PROTECTED, i),
                }
            }
        }
    }

    // ---- S3-FIFO ----

    fn s3_make_room(&mut self) {
        let small_target = self.cfg.budget / 10;
        while self.used > self.cfg.budget {
            if self.lists.bytes(SMALL) > small_target || self.lists.len(MAIN) == 0 {
                let t = self.lists.tail(SMALL);
                if self.slots[t as usize].freq > 0 {
                    // Hit while in the small queue: worth keeping.
                    self.unlink(t);
                    self.slots[t as usize].freq = 0;
                    self.push_front(MAIN, t);
                } else {
                    let key = self.slots[t as usize].key;
                    self.evict(t);
                    self.ghost.remember(key, self.map.len().max(256));
                }
            } else {
                let t = self.lists.tail(MAIN);
                let s = &mut self.slots[t as usize];
                if s.freq > 0 {
                    s.freq -= 1; // the CLOCK hand passes: reinserted
                    self.move_front(MAIN, t);
                } else {
                    self.evict(t);
                }
            }
        }
    }

    // ---- W-TinyLFU ----

    fn main_capacity(&self) -> u64 {
        self.cfg.budget - self.window_target().min(self.cfg.budget)
    }

    fn window_target(&self) -> u64 {
        (self.cfg.budget / 100).max(1)
    }

    fn tlfu_make_room(&mut self) {
        // The window keeps its 1%; what leaves it competes for a place in main.
        while self.lists.bytes(WINDOW) > self.window_target() && self.lists.len(WINDOW) > 1 {
            let c = self.lists.tail(WINDOW);
            self.unlink(c);
            self.push_front(PROBATION, c);
            self.tlfu_admit(c);
        }
        // Still over (the window's one large object, or main full): evict from main,
        // then the window.
        while self.used > self.cfg.budget {
            let v = self
                .main_victim()
                .unwrap_or_else(|| self.lists.tail(WINDOW));
            self.evict(v);
        }
    }

    /// `c` just entered probation: make room in main, or send `c` away if it is less
    /// popular than the victims it would displace.
    fn tlfu_admit(&mut self, c: u32) {
        let cap = self.main_capacity();
        let ckey = self.slots[c as usize].key;
        let cfreq = self.sketch.estimate(ckey);
        while self.lists.bytes(PROBATION) + self.lists.bytes(PROTECTED) > cap {
            let Some(v) = self.main_victim_except(c) else {
                break;
            };
            let vfreq = self.sketch.estimate(self.slots[v as usize].key);
            if cfreq > vfreq {
                self.evict(v);
            } else {
                self.stats.rejections += 1;
                self.remove_slot(c);
                return;
            }
        }
    }

    fn main_victim(&self) -> Option<u32> {
        [PROBATION, PROTECTED]
            .into_iter()
            .map(|q| self.lists.tail(q))
            .find(|&t| t != NIL)
    }

    fn main_victim_except(&self, c: u32) -> Option<u32> {
        for q in [PROBATION, PROTECTED] {
            let mut t = self.lists.tail(q);
            while t != NIL {
                if t != c {
                    return Some(t);
                }
                t = self.slots[t as usize].links.prev;
            }
        }
        None
    }

    // ---- slots and lists ----

    fn push_front(&mut self, q: u8, i: u32) {
        let w = self.slots[i as usize].weight;
        self.slots[i as usize].queue = q;
        self.lists
            .push_front(q, i, w, &mut self.slots, |s| &mut s.links);
        self.used += w;
    }

    fn unlink(&mut self, i: u32) {
        let q = self.slots[i as usize].queue;
        let w = self.slots[i as usize].weight;
        self.lists
            .unlink(q, i, w, &mut self.slots, |s| &mut s.links);
        self.used -= w;
    }

    fn move_front(&mut self, q: u8, i: u32) {
        if self.lists.head(q) != i {
            self.unlink(i);
            self.push_front(q, i);
        }
    }

    fn evict(&mut self, i: u32) {
        self.stats.evictions += 1;
        self.remove_slot(i);
    }

    fn remove_slot(&mut self, i: u32) {
        self.unlink(i);
        let key = self.slots[i as usize].key;
        self.map.remove(&key);
        self.slots[i as usize].obj = None;
        self.free.push(i);
    }
}

/// S3-FIFO's ghost queue: keys recently evicted from the small queue (no bodies).
#[derive(Default)]
struct Ghost {
    fifo: VecDeque<(KeyHash, u64)>,
    live: HashMapK<u64>,
    seq: u64,
}

impl Ghost {
    fn remember(&mut self, key: KeyHash, cap: usize) {
        self.seq += 1;
        self.live.insert(key, self.seq);
        self.fifo.push_back((key, self.seq));
        while self.fifo.len() > cap {
            if let Some((k, s)) = self.fifo.pop_front() {
                if self.live.get(&k) == Some(&s) {
                    self.live.remove(&k);
                }
            }
        }
    }

    /// Whether `key` was recently evicted (and forget it).
    fn take(&mut self, key: KeyHash) -> bool {
        self.live.remove(&key).is_some()
    }
}

/// Count-min sketch with 4 rows of saturating 4-bit counters (kept in bytes), halved
/// every `10 × width` increments so that popularity ages.
struct Sketch {
    rows: Vec<u8>,
    mask: usize,
    width: usize,
    events: usize,
}

impl Sketch {
    fn new(width: usize) -> Sketch {
        Sketch {
            rows: vec![0; width * 4],
            mask: width.saturating_sub(1),
            width,
            events: 0,
        }
    }

    fn slots(&self, key: KeyHash) -> [usize; 4] {
        // Keys are xxh3-128 hashes: four independent 32-bit slices.
        let w = self.width;
        std::array::from_fn(|r| r * w + ((key >> (32 * r)) as u32 as usize & self.mask))
    }

    fn increment(&mut self, key: KeyHash) {
        if self.width == 0 {
            return;
        }
        for s in self.slots(key) {
            if self.rows[s] < 15 {
                self.rows[s] += 1;
            }
        }
        self.events += 1;
        if self.events >= 10 * self.width {
            self.events = 0;
            for c in &mut self.rows {
                *c >>= 1;
            }
        }
    }

    fn estimate(&self, key: KeyHash) -> u8 {
        if self.width == 0 {
            return 0;
        }
        self.slots(key)
            .into_iter()
            .map(|s| self.rows[s])
            .min()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
