//! Random numbers for the benchmark kit: a tiny seedable PRNG ([`SplitMix64`]) and a
//! Zipf sampler over ranks `1..=n` ([`Zipf`]).
//!
//! How it fits: edgeorigin's `/obj/rand` (`--obj-dist zipf`) and edgeload's `--zipf`
//! draw object ids with the same sampler, so "Zipf(α) over N ids" means the same thing
//! on both sides of a benchmark. Each thread (edgeorigin) or connection (edgeload) owns
//! its own [`SplitMix64`]; a [`Zipf`] is immutable after [`Zipf::new`] and can be shared
//! read-only, so sampling takes no lock and allocates nothing.
//!
//! Zipf uses rejection-inversion sampling (Hörmann and Derflinger, 1996, "Rejection-
//! inversion to generate variates from monotone discrete distributions"): O(1) expected
//! time and O(1) memory for any `n`, no table. Not for secrets; for picking objects.

/// SplitMix64: small, fast, seedable, statistically fine for picking URLs and objects.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by multiply-high (no modulo bias worth measuring).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Zipf sampler over ranks `1..=n` with exponent `s`: P(k) ∝ k^-s, rank 1 the most
/// popular (rejection-inversion).
#[derive(Debug, Clone, PartialEq)]
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
    /// Ranks `1..=n` (`n` 0 means 1) with exponent `s` (> 0; `s` = 1 is the classic
    /// web-object popularity law).
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

    /// The exponent.
    pub fn exponent(&self) -> f64 {
        self.s
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
    #[inline]
    pub fn sample(&self, rng: &mut SplitMix64) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// P(rank k) for Zipf(s) over 1..=n, by summing the law.
    fn law(n: u64, s: f64, k: u64) -> f64 {
        let h: f64 = (1..=n).map(|i| (i as f64).powf(-s)).sum();
        (k as f64).powf(-s) / h
    }

    #[test]
    fn splitmix_is_the_reference_sequence() {
        // The reference SplitMix64 output for seed 0.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        let mut r = SplitMix64::new(7);
        assert!((0..1000).all(|_| r.below(10) < 10));
        assert!((0..1000).all(|_| (0.0..1.0).contains(&r.unit())));
    }

    #[test]
    fn frequencies_follow_the_law_for_several_exponents() {
        for (s, seed) in [(0.6, 1), (0.8, 2), (1.0, 3), (1.2, 4), (2.0, 5)] {
            let n = 500;
            let z = Zipf::new(n, s);
            let mut rng = SplitMix64::new(seed);
            let draws = 200_000;
            let mut counts = vec![0u32; n as usize + 1];
            for _ in 0..draws {
                let k = z.sample(&mut rng);
                assert!((1..=n).contains(&k));
                counts[k as usize] += 1;
            }
            for k in [1, 2, 3, 10] {
                let want = law(n, s, k);
                let got = counts[k as usize] as f64 / draws as f64;
                // 5 standard deviations of a binomial share, plus 1% relative.
                let tol = 5.0 * (want * (1.0 - want) / draws as f64).sqrt() + want * 0.01;
                assert!(
                    (got - want).abs() <= tol,
                    "s {s} rank {k}: got {got}, want {want} ± {tol}"
                );
            }
            // The id 1 : id 2 ratio is 2^s.
            let ratio = counts[1] as f64 / counts[2] as f64;
            let want = 2f64.powf(s);
            assert!(
                (ratio / want - 1.0).abs() < 0.05,
                "s {s}: p1/p2 {ratio}, want {want}"
            );
        }
    }

    #[test]
    fn edge_cases() {
        let mut rng = SplitMix64::new(9);
        let one = Zipf::new(1, 1.0);
        assert!((0..100).all(|_| one.sample(&mut rng) == 1));
        let zero = Zipf::new(0, 0.8);
        assert!((0..100).all(|_| zero.sample(&mut rng) == 1));
        let other = Zipf::new(u64::MAX, 0.8);
        for _ in 0..1000 {
            assert!(other.sample(&mut rng) >= 1);
        }
        let steep = Zipf::new(1 << 40, 3.0);
        assert!((0..1000).all(|_| (1..=1 << 40).contains(&steep.sample(&mut rng))));
        let flat = Zipf::new(10, 1e-6);
        let mut seen = [false; 11];
        for _ in 0..1000 {
            seen[flat.sample(&mut rng) as usize] = true;
        }
        assert!(
            seen[1..].iter().all(|&b| b),
            "near-uniform reaches every rank"
        );
        assert_eq!(Zipf::new(10, 0.8).exponent(), 0.8);
    }
}
