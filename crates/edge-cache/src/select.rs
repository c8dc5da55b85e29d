//! Several caches per location: pick the cache for an object by its key hash.
//!
//! How it fits: a location with `cache = ["nvme0", "nvme1", ...]` spreads objects over
//! several [`Cache`]s (one per disk). The server calls [`pick`] with the primary key's
//! hash before the lookup and before a write, so both land on the same cache.
//!
//! Rendezvous (highest random weight) hashing: each cache scores
//! `xxh3(hash, seed = xxh3(cache name))` and the highest score wins. Adding or removing
//! one cache out of n moves only about 1/n of the objects, and the choice depends on
//! cache *names*, not their order in the config.

use std::sync::Arc;

use crate::cache::Cache;
use crate::key::KeyHash;

fn score(seed: u64, hash: KeyHash) -> u64 {
    twox_hash::XxHash3_64::oneshot_with_seed(seed, &hash.to_le_bytes())
}

/// Index of the winning seed for `hash` (None for an empty list).
pub fn pick_index(seeds: impl IntoIterator<Item = u64>, hash: KeyHash) -> Option<usize> {
    seeds
        .into_iter()
        .enumerate()
        .max_by_key(|&(_, s)| score(s, hash))
        .map(|(i, _)| i)
}

/// The cache for an object, or None when `caches` is empty.
pub fn try_pick(caches: &[Arc<Cache>], hash: KeyHash) -> Option<&Arc<Cache>> {
    pick_index(caches.iter().map(|c| c.seed()), hash).map(|i| &caches[i])
}

/// The cache for an object. Panics on an empty list: config validation guarantees a
/// cached location has at least one cache (use [`try_pick`] otherwise).
pub fn pick(caches: &[Arc<Cache>], hash: KeyHash) -> &Arc<Cache> {
    try_pick(caches, hash).expect("pick: a cached location has at least one cache")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::key_hash;

    fn seeds(names: &[&str]) -> Vec<u64> {
        names
            .iter()
            .map(|n| twox_hash::XxHash3_64::oneshot(n.as_bytes()))
            .collect()
    }

    #[test]
    fn spreads_evenly_and_moves_little_when_one_is_added() {
        let four = seeds(&["d0", "d1", "d2", "d3"]);
        let five = seeds(&["d0", "d1", "d2", "d3", "d4"]);
        let mut counts = [0usize; 4];
        let mut moved = 0;
        let n = 20_000;
        for i in 0..n {
            let h = key_hash(&format!("http://x/{i}"));
            let a = pick_index(four.iter().copied(), h).unwrap();
            counts[a] += 1;
            let b = pick_index(five.iter().copied(), h).unwrap();
            if b != a {
                assert_eq!(b, 4, "objects only move to the new cache");
                moved += 1;
            }
        }
        for c in counts {
            assert!((4000..6000).contains(&c), "uneven spread {counts:?}");
        }
        // About 1/5 of the objects move.
        assert!((3000..5000).contains(&moved), "moved {moved}");
        assert_eq!(pick_index(Vec::<u64>::new(), 1), None);
    }

    #[test]
    fn order_of_caches_does_not_matter() {
        let a = seeds(&["x", "y", "z"]);
        let b = seeds(&["z", "x", "y"]);
        for i in 0..1000u128 {
            let h = key_hash(&i.to_string());
            assert_eq!(
                a[pick_index(a.iter().copied(), h).unwrap()],
                b[pick_index(b.iter().copied(), h).unwrap()]
            );
        }
    }
}
