//! `cache_min_uses`: count requests for keys that are not stored yet.
//!
//! How it fits: with `cache_min_uses = N` the server stores a response only once its key
//! was requested N times (one-hit wonders never cost a disk write). On a miss it calls
//! [`crate::Cache::note_use`] and stores only when the returned count reaches N. The
//! counters live in a sharded map with a hard size bound: a full shard is cleared,
//! which under heavy churn only delays storing a key (counts restart), never breaks it.

use std::sync::Mutex;

use crate::key::HashMapK;
use crate::key::KeyHash;
use crate::sync::lock;

const SHARDS: usize = 64;
/// Keys tracked per shard before the shard is cleared (64 × 4096 ≈ 262k keys, ~8 MiB).
pub const MAX_TRACKED_PER_SHARD: usize = 4096;

/// Request counters for keys not stored yet.
#[derive(Debug)]
pub struct UseCounter {
    shards: Box<[Mutex<HashMapK<u32>>]>,
}

impl Default for UseCounter {
    fn default() -> Self {
        UseCounter {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMapK::default()))
                .collect(),
        }
    }
}

impl UseCounter {
    /// Count one request for `hash`; returns the count including this one.
    pub fn note(&self, hash: KeyHash) -> u32 {
        let mut s = lock(&self.shards[(hash as usize) & (SHARDS - 1)]);
        if s.len() >= MAX_TRACKED_PER_SHARD && !s.contains_key(&hash) {
            s.clear();
        }
        let c = s.entry(hash).or_insert(0);
        *c = c.saturating_add(1);
        *c
    }

    /// Forget a key (after it was stored).
    pub fn forget(&self, hash: KeyHash) {
        lock(&self.shards[(hash as usize) & (SHARDS - 1)]).remove(&hash);
    }

    /// Keys currently tracked.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_stays_bounded() {
        let u = UseCounter::default();
        assert_eq!(u.note(5), 1);
        assert_eq!(u.note(5), 2);
        u.forget(5);
        assert_eq!(u.note(5), 1);
        // Fill one shard past its bound: it never grows beyond it.
        for i in 0..(MAX_TRACKED_PER_SHARD as u128 * 3) {
            u.note(i * SHARDS as u128);
        }
        assert!(u.len() <= MAX_TRACKED_PER_SHARD + 1);
    }
}
