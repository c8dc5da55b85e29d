//! Trace-driven simulation of the RAM tier's policies: the hit ratios in
//! `docs/results/tiers.md` (run `cargo run --release -p edge-cache --example tier_sim`)
//! and the tests that hold the chosen policy to LRU's ratio or better.
//!
//! The trace is what a CDN edge sees: Zipf popularity over a catalogue larger than the
//! tier, object sizes spread over a range, and a scan (every object once, as a crawler
//! or a prefetcher does) in the middle. Each request is a `get`; a miss offers the
//! object, as the server does after reading it from disk.

use super::mem::{MemConfig, MemTier, Policy};
use crate::key::KeyHash;
use bytes::Bytes;

/// A small deterministic PRNG (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf(alpha) over ranks `0..n` (0 the most popular), by inverting a CDF table.
#[derive(Debug, Clone)]
pub struct ZipfTable {
    cdf: Vec<f64>,
}

impl ZipfTable {
    pub fn new(n: usize, alpha: f64) -> ZipfTable {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|k| {
                acc += 1.0 / (k as f64).powf(alpha);
                acc
            })
            .collect();
        for c in &mut cdf {
            *c /= acc;
        }
        ZipfTable { cdf }
    }

    pub fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// One simulated workload.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    pub name: &'static str,
    /// Objects in the catalogue.
    pub objects: usize,
    pub alpha: f64,
    /// Requests before and after the scan (the ratio is measured on both).
    pub requests: usize,
    /// Scan every object once in the middle.
    pub scan: bool,
    /// Object sizes are spread uniformly (per object, fixed) over this range.
    pub min_size: usize,
    pub max_size: usize,
}

/// What a policy achieved on a workload (after a warm-up of `requests / 4`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimResult {
    pub hit_ratio: f64,
    pub byte_hit_ratio: f64,
    /// Of the 100 most popular objects, how many the tier held right after the scan
    /// (and right before it, for comparison).
    pub hot_before_scan: usize,
    pub hot_after_scan: usize,
}

fn key_of(i: usize) -> KeyHash {
    crate::key::key_hash(&format!("sim/{i}"))
}

/// Replays `w` through a tier of `budget` bytes with `policy`.
pub fn simulate(policy: Policy, budget: u64, w: &Workload) -> SimResult {
    let mut tier = MemTier::new(MemConfig {
        budget,
        max_object: w.max_size as u64,
        policy,
    });
    let keys: Vec<KeyHash> = (0..w.objects).map(key_of).collect();
    let mut rng = Rng(0x5eed ^ w.objects as u64);
    let sizes: Vec<usize> = (0..w.objects)
        .map(|_| w.min_size + (rng.next_u64() as usize) % (w.max_size - w.min_size + 1))
        .collect();
    let blob = Bytes::from(vec![0u8; w.max_size]);
    let bodies: Vec<Bytes> = {
        // Distinct lengths share few allocations: one per size actually used.
        let mut by_size: std::collections::HashMap<usize, Bytes> = std::collections::HashMap::new();
        sizes
            .iter()
            .map(|&s| by_size.entry(s).or_insert_with(|| blob.slice(..s)).clone())
            .collect()
    };
    let zipf = ZipfTable::new(w.objects, w.alpha);
    let (mut hits, mut reqs, mut hit_bytes, mut bytes) = (0u64, 0u64, 0u64, 0u64);
    let mut request = |i: usize, tier: &mut MemTier, count: bool| {
        let hit = tier.get(keys[i], 1).is_some();
        if !hit {
            tier.insert(keys[i], 1, bodies[i].clone());
        }
        if count {
            reqs += 1;
            bytes += sizes[i] as u64;
            if hit {
                hits += 1;
                hit_bytes += sizes[i] as u64;
            }
        }
    };
    let hot = |tier: &mut MemTier| {
        // Probing with `get` would count as hits: look at the stats around it instead.
        (0..100.min(w.objects))
            .filter(|&i| tier.contains(keys[i], 1))
            .count()
    };
    for _ in 0..w.requests / 4 {
        request(zipf.sample(&mut rng), &mut tier, false);
    }
    for _ in 0..w.requests {
        request(zipf.sample(&mut rng), &mut tier, true);
    }
    let hot_before_scan = hot(&mut tier);
    let mut hot_after_scan = hot_before_scan;
    if w.scan {
        for i in 0..w.objects {
            request(i, &mut tier, false);
        }
        hot_after_scan = hot(&mut tier);
        for _ in 0..w.requests {
            request(zipf.sample(&mut rng), &mut tier, true);
        }
    }
    SimResult {
        hit_ratio: hits as f64 / reqs.max(1) as f64,
        byte_hit_ratio: hit_bytes as f64 / bytes.max(1) as f64,
        hot_before_scan,
        hot_after_scan,
    }
}

/// The workloads of the report: Zipf 0.8 and 1.0 over 20,000 objects of 1–64 KiB (a
/// tier holding about 5% of the bytes), and the same with a scan in the middle.
pub fn workloads() -> Vec<Workload> {
    let base = Workload {
        name: "",
        objects: 20_000,
        alpha: 0.8,
        requests: 200_000,
        scan: false,
        min_size: 1024,
        max_size: 64 * 1024,
    };
    vec![
        Workload {
            name: "zipf 0.8",
            ..base
        },
        Workload {
            name: "zipf 1.0",
            alpha: 1.0,
            ..base
        },
        Workload {
            name: "zipf 0.8 + scan",
            scan: true,
            ..base
        },
        Workload {
            name: "zipf 1.0 + scan",
            alpha: 1.0,
            scan: true,
            ..base
        },
    ]
}

/// The tier size of the report's simulations: 5% of the catalogue's bytes.
pub fn budget_for(w: &Workload) -> u64 {
    (w.objects as u64 * (w.min_size + w.max_size) as u64 / 2) / 20
}
