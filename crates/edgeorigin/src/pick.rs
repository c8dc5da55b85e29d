//! What `/obj/rand` serves: an object drawn from `--sizes` × `--count` by `--obj-dist`.
//!
//! How it fits: each serving thread owns a [`Picker`] (its own RNG, no locks). The
//! distributions model the report's object generators:
//! - `fixed`: every object has the first size in `--sizes` (one origin per size, as the
//!   report ran one generator for 10 KiB, one for 100 KiB, one for 1 MiB); ids uniform.
//! - `uniform`: size uniform over `--sizes`, id uniform over `0..count`.
//! - `zipf`: id drawn with Zipf popularity (exponent [`ZIPF_EXPONENT`], id 0 the most
//!   popular), and each id keeps one size (`sizes[id % len]`), like a real catalogue.
//!
//! Zipf uses rejection-inversion sampling (Hörmann and Derflinger, 1996; the sampler is
//! `edge_rand::Zipf`): O(1) time and memory for any `count`, no table.

use crate::ObjDist;

/// Zipf exponent (s). 1.0 is the classic web-object popularity law.
pub const ZIPF_EXPONENT: f64 = 1.0;

/// The per-thread RNG and the Zipf sampler live in `edge-rand`, shared with edgeload's
/// `--zipf`, so both sides of a benchmark draw ids from the same law.
pub use edge_rand::{SplitMix64 as Rng, Zipf};

/// One thread's `/obj/rand` picker.
#[derive(Debug, Clone)]
pub struct Picker {
    sizes: Vec<u64>,
    count: u64,
    dist: ObjDist,
    rng: Rng,
    zipf: Zipf,
}

impl Picker {
    /// `sizes` empty means one size of 1 KiB; `count` 0 means 1.
    pub fn new(sizes: &[u64], count: u64, dist: ObjDist, seed: u64) -> Picker {
        let sizes = if sizes.is_empty() {
            vec![1024]
        } else {
            sizes.to_vec()
        };
        let count = count.max(1);
        Picker {
            sizes,
            count,
            dist,
            rng: Rng::new(seed),
            zipf: Zipf::new(count, ZIPF_EXPONENT),
        }
    }

    /// The next `(size, id)`.
    pub fn pick(&mut self) -> (u64, u64) {
        match self.dist {
            ObjDist::Fixed => (self.sizes[0], self.rng.below(self.count)),
            ObjDist::Uniform => {
                let s = self.sizes[self.rng.below(self.sizes.len() as u64) as usize];
                (s, self.rng.below(self.count))
            }
            ObjDist::Zipf => {
                let id = self.zipf.sample(&mut self.rng) - 1;
                (self.sizes[(id % self.sizes.len() as u64) as usize], id)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_uses_the_first_size_and_all_ids() {
        let mut p = Picker::new(&[10240, 1 << 20], 10, ObjDist::Fixed, 1);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            let (s, id) = p.pick();
            assert_eq!(s, 10240);
            seen[id as usize] = true;
        }
        assert!(seen.iter().all(|&b| b));
    }

    #[test]
    fn uniform_covers_every_size_evenly() {
        let sizes = [1, 2, 3, 4];
        let mut p = Picker::new(&sizes, 100, ObjDist::Uniform, 2);
        let mut counts = [0u32; 4];
        for _ in 0..40_000 {
            let (s, id) = p.pick();
            assert!(id < 100);
            counts[(s - 1) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn zipf_matches_the_law() {
        // s = 1, n = 1000: P(rank 1) = 1 / H_1000 ≈ 0.1336, P(rank 2) = half of that.
        let mut p = Picker::new(&[7, 8], 1000, ObjDist::Zipf, 3);
        let mut counts = vec![0u32; 1000];
        let draws = 200_000;
        for _ in 0..draws {
            let (s, id) = p.pick();
            assert!(id < 1000);
            assert_eq!(s, [7, 8][(id % 2) as usize], "an id keeps its size");
            counts[id as usize] += 1;
        }
        let p0 = counts[0] as f64 / draws as f64;
        let p1 = counts[1] as f64 / draws as f64;
        assert!((0.125..0.142).contains(&p0), "p0 = {p0}");
        assert!((0.45..0.55).contains(&(p1 / p0)), "p1/p0 = {}", p1 / p0);
        assert!(
            counts[999] > 0 || counts[998] > 0 || counts[997] > 0,
            "the tail is reachable"
        );
    }

    #[test]
    fn zipf_with_one_id_always_picks_it() {
        let mut p = Picker::new(&[5], 1, ObjDist::Zipf, 9);
        assert!((0..100).all(|_| p.pick() == (5, 0)));
    }
}
