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
//! Zipf uses rejection-inversion sampling (Hörmann and Derflinger, 1996): O(1) time and
//! memory for any `count`, no table.

use crate::ObjDist;

/// Zipf exponent (s). 1.0 is the classic web-object popularity law.
pub const ZIPF_EXPONENT: f64 = 1.0;

/// A small, fast, seedable RNG (splitmix64). Not for secrets; for picking objects.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by multiply-high (no modulo bias worth measuring).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Zipf sampler over ranks `1..=n` with exponent `s` (rejection-inversion).
#[derive(Debug, Clone)]
pub struct Zipf {
    n: f64,
    s: f64,
    h_x1: f64,
    h_n: f64,
    cut: f64,
}

/// `(e^x - 1) / x`, continuous at 0.
fn expm1_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x / 2.0 * (1.0 + x / 3.0)
    }
}

/// `ln(1 + x) / x`, continuous at 0.
fn ln1p_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x / 3.0)
    }
}

impl Zipf {
    pub fn new(n: u64, s: f64) -> Zipf {
        let n = n.max(1) as f64;
        let mut z = Zipf {
            n,
            s,
            h_x1: 0.0,
            h_n: 0.0,
            cut: 0.0,
        };
        z.h_x1 = z.h_integral(1.5) - 1.0;
        z.h_n = z.h_integral(n + 0.5);
        z.cut = 2.0 - z.h_integral_inv(z.h_integral(2.5) - z.h(2.0));
        z
    }

    /// The density, `x^-s`.
    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    /// An antiderivative of `h`.
    fn h_integral(&self, x: f64) -> f64 {
        let lx = x.ln();
        expm1_over_x((1.0 - self.s) * lx) * lx
    }

    fn h_integral_inv(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (ln1p_over_x(t) * x).exp()
    }

    /// A rank in `1..=n`.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_n + rng.unit() * (self.h_x1 - self.h_n);
            let x = self.h_integral_inv(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.cut || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }
}

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
    fn zipf_edge_cases() {
        let mut rng = Rng::new(9);
        let one = Zipf::new(1, 1.0);
        assert!((0..100).all(|_| one.sample(&mut rng) == 1));
        let other = Zipf::new(u64::MAX, 0.8);
        for _ in 0..1000 {
            assert!(other.sample(&mut rng) >= 1);
        }
    }
}
