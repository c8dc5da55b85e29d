//! A worker's front of the shared index: what it last learned about its hot objects,
//! answered without a lock.
//!
//! How it fits: the index is shared by every worker; a lookup there takes the shard's
//! mutex and moves the entry in its LRU list, so two workers hitting one hot object
//! write the same cache lines on every request. The front remembers, per worker, the
//! index's answer for an object without `Vary` (its metadata, file and generation)
//! with the version of the object's stripe at the time ([`crate::index::Index::version`]).
//! A hit here is one load of that version (a line only writers touch) and a lookup in
//! a worker-local map. The metadata is the worker's own copy, so even its reference
//! count is never shared. The accesses it answers are reported to the index once per
//! second ([`crate::Cache::flush_touches`]), which keeps LRU and `inactive` working
//! without a write per hit.
//!
//! It also remembers, per primary key, the index's answer to "which `Vary` names were
//! stored" ([`crate::index::Index::vary_of`], none included) at the version of the
//! primary's stripe: every lookup of a `Vary` object and every compressed-copy lookup
//! asks that first, and the index answers it under a mutex all workers share. A change
//! to the primary's record (a new `Vary`, a variant stored or removed, a purge) bumps
//! that stripe, so a remembered answer is used only while it still holds.

use crate::key::HashMapK;
use crate::key::KeyHash;
use crate::meta::ObjectMeta;
use std::sync::Arc;

/// Entries a worker's front keeps by default (each holds a copy of an object's
/// metadata, a few hundred bytes).
pub const FRONT_ENTRIES: usize = 8192;

/// What the front remembers of one object.
#[derive(Debug, Clone)]
pub struct FrontEntry {
    pub(crate) version: u64,
    /// The cache zone's seed (the worker's front serves every zone).
    pub(crate) seed: u64,
    pub(crate) hash: KeyHash,
    pub(crate) meta: Arc<ObjectMeta>,
    pub(crate) body_offset: u64,
    pub(crate) ino: u64,
    pub(crate) gen: u64,
    pub(crate) touched: bool,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrontStats {
    pub hits: u64,
    pub misses: u64,
    pub entries: u64,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Front {
    map: HashMapK<FrontEntry>,
    /// Per primary key (local key): the stripe version and the `Vary` names then.
    varies: HashMapK<(u64, Option<Box<[String]>>)>,
    max: usize,
    stats: FrontStats,
}

impl Front {
    pub fn new(max: usize) -> Front {
        Front {
            map: HashMapK::default(),
            varies: HashMapK::default(),
            max,
            stats: FrontStats::default(),
        }
    }

    pub fn stats(&self) -> FrontStats {
        FrontStats {
            entries: self.map.len() as u64,
            ..self.stats
        }
    }

    /// The remembered answer for `lk` if its stripe is still at `version` and it is
    /// the object of `key` (hash collisions).
    pub(crate) fn get(&mut self, lk: KeyHash, key: &str, version: u64) -> Option<&FrontEntry> {
        let valid = match self.map.get(&lk) {
            Some(e) => e.version == version && e.meta.key == key,
            None => {
                self.stats.misses += 1;
                return None;
            }
        };
        if !valid {
            self.map.remove(&lk);
            self.stats.misses += 1;
            return None;
        }
        self.stats.hits += 1;
        let e = self.map.get_mut(&lk)?;
        e.touched = true;
        Some(e)
    }

    pub(crate) fn insert(&mut self, lk: KeyHash, e: FrontEntry) {
        if self.max == 0 {
            return;
        }
        if self.map.len() >= self.max && !self.map.contains_key(&lk) {
            // Full: forget one entry (the map's first; keys are hashes, so this is an
            // arbitrary one). A forgotten object is looked up in the index again.
            if let Some(&k) = self.map.keys().next() {
                self.map.remove(&k);
            }
        }
        self.map.insert(lk, e);
    }

    /// The `Vary` names of primary `lk` remembered at stripe `version` (`Some(None)`:
    /// none stored); None when not remembered or remembered at another version.
    pub(crate) fn vary(&self, lk: KeyHash, version: u64) -> Option<Option<&[String]>> {
        match self.varies.get(&lk) {
            Some((v, names)) if *v == version => Some(names.as_deref()),
            _ => None,
        }
    }

    /// Remembers the `Vary` names the index gave for primary `lk` (the worker's own
    /// copy, so not even a reference count is shared), read after its stripe's
    /// `version` was (a change in between leaves a newer answer under the older
    /// version: looked up again next time, never trusted too long).
    pub(crate) fn remember_vary(
        &mut self,
        lk: KeyHash,
        version: u64,
        names: Option<Box<[String]>>,
    ) {
        if self.max == 0 {
            return;
        }
        if self.varies.len() >= self.max && !self.varies.contains_key(&lk) {
            // Full: forget an arbitrary one, as `insert` does.
            if let Some(&k) = self.varies.keys().next() {
                self.varies.remove(&k);
            }
        }
        self.varies.insert(lk, (version, names));
    }

    pub(crate) fn remove(&mut self, lk: KeyHash) {
        self.map.remove(&lk);
    }

    /// The hashes of zone `seed`'s objects answered since the last call.
    pub(crate) fn take_touched(&mut self, seed: u64) -> Vec<KeyHash> {
        let mut out = Vec::new();
        for e in self.map.values_mut() {
            if e.touched && e.seed == seed {
                e.touched = false;
                out.push(e.hash);
            }
        }
        out
    }
}
