use super::*;
use edge_rand::SplitMix64;

/// The longest prefix that covers `k` (the last given of equal ones), by a scan.
fn brute<K: Key>(prefixes: &[(K, u8, u32)], k: K) -> Option<u32> {
    let mut best: Option<(u8, u32)> = None;
    for &(a, len, v) in prefixes {
        let len = len.min(K::BITS);
        if k.network(len) == a.network(len) && best.is_none_or(|(l, _)| len >= l) {
            best = Some((len, v));
        }
    }
    best.map(|(_, v)| v)
}

#[test]
fn empty_and_whole_space() {
    let t: RangeTable<u32> = RangeTable::build(Vec::new());
    assert_eq!(t.get(0), None);
    assert_eq!(t.get(u32::MAX), None);
    assert_eq!(t.ranges(), 1);
    let t = RangeTable::build(vec![(0u32, 0, 7)]);
    assert_eq!(t.get(0), Some(7));
    assert_eq!(t.get(u32::MAX), Some(7));
    let t = RangeTable::build(vec![(u128::MAX, 128, 1), (0u128, 0, 2)]);
    assert_eq!(t.get(u128::MAX), Some(1));
    assert_eq!(t.get(u128::MAX - 1), Some(2));
    assert_eq!(t.get(0), Some(2));
}

#[test]
fn nested_prefixes_and_duplicates() {
    let ip = |a: u8, b: u8, c: u8, d: u8| u32::from_be_bytes([a, b, c, d]);
    let t = RangeTable::build(vec![
        (ip(10, 0, 0, 0), 8, 1),
        (ip(10, 1, 0, 0), 16, 2),
        (ip(10, 1, 2, 0), 24, 3),
        (ip(10, 1, 2, 3), 32, 4),
        (ip(10, 1, 0, 0), 16, 5), // later: wins over the /16 above
        (ip(10, 255, 255, 255), 32, 6),
        (ip(192, 168, 0, 0), 16, 1), // same value as 10/8: its own range
    ]);
    assert_eq!(t.get(ip(9, 255, 255, 255)), None);
    assert_eq!(t.get(ip(10, 0, 0, 0)), Some(1));
    assert_eq!(t.get(ip(10, 1, 0, 0)), Some(5));
    assert_eq!(t.get(ip(10, 1, 2, 2)), Some(3));
    assert_eq!(t.get(ip(10, 1, 2, 3)), Some(4));
    assert_eq!(t.get(ip(10, 1, 2, 4)), Some(3));
    assert_eq!(t.get(ip(10, 1, 3, 0)), Some(5));
    assert_eq!(t.get(ip(10, 2, 0, 0)), Some(1));
    assert_eq!(t.get(ip(10, 255, 255, 254)), Some(1));
    assert_eq!(t.get(ip(10, 255, 255, 255)), Some(6));
    assert_eq!(t.get(ip(11, 0, 0, 0)), None);
    assert_eq!(t.get(ip(192, 168, 7, 7)), Some(1));
    assert_eq!(t.get(u32::MAX), None);
}

#[test]
fn adjacent_equal_values_merge() {
    // 10.0.0.0/9 and 10.128.0.0/9 with one value are 10/8: three ranges.
    let t = RangeTable::build(vec![(0x0a00_0000u32, 9, 1), (0x0a80_0000, 9, 1)]);
    assert_eq!(t.ranges(), 3);
}

/// Random prefixes of random lengths (keys from `key`, clustered so that they nest
/// and collide) and the addresses to probe: random ones, and every prefix's first
/// and last address and the one after it.
fn random_case<K: Key>(
    rng: &mut SplitMix64,
    n: usize,
    key: &impl Fn(&mut SplitMix64) -> K,
) -> (Vec<(K, u8, u32)>, Vec<K>) {
    let mut prefixes = Vec::with_capacity(n);
    for _ in 0..n {
        let len = rng.below(u64::from(K::BITS) + 1) as u8;
        let v = rng.below(8) as u32;
        prefixes.push((key(rng), len, v));
    }
    let mut probes: Vec<K> = (0..300).map(|_| key(rng)).collect();
    for &(a, len, _) in &prefixes {
        let (first, last) = (a.network(len), a.last(len));
        probes.extend([first, last]);
        if last < K::MAX {
            probes.push(last.succ());
        }
    }
    probes.extend([K::ZERO, K::MAX]);
    (prefixes, probes)
}

const SIZES: [usize; 7] = [0, 1, 2, 5, 17, 100, 700];

/// Random tables against the scan.
fn random_tables<K: Key>(rng: &mut SplitMix64, key: impl Fn(&mut SplitMix64) -> K) {
    for round in 0..40 {
        let (prefixes, probes) = random_case(rng, SIZES[round % SIZES.len()], &key);
        let t = RangeTable::build(prefixes.clone());
        for k in probes {
            assert_eq!(t.get(k), brute(&prefixes, k), "{k:?} in {prefixes:?}");
        }
    }
}

fn v4_key(r: &mut SplitMix64) -> u32 {
    // Addresses from a few /8s so that prefixes nest and collide.
    let top = [10u32, 11, 192, 255][r.below(4) as usize] << 24;
    let low = r.next_u64() as u32 & 0x00ff_ffff;
    top | if r.below(2) == 0 {
        low & 0x00ff_0f0f
    } else {
        low
    }
}

fn v6_key(r: &mut SplitMix64) -> u128 {
    let top = [0x2001_0db8u128, 0x2a00_0000, 0xffff_ffff][r.below(3) as usize] << 96;
    let low = (u128::from(r.next_u64()) << 32 | u128::from(r.next_u64())) & !(0xffff << 112);
    top | if r.below(2) == 0 {
        low & (0xff0f << 64)
    } else {
        low
    }
}

#[test]
fn random_v4_tables_match_a_scan() {
    random_tables::<u32>(&mut SplitMix64::new(0x5eed_0004), v4_key);
}

#[test]
fn random_v6_tables_match_a_scan() {
    random_tables::<u128>(&mut SplitMix64::new(0x5eed_0006), v6_key);
}

/// The directory form, forced on small tables too.
fn random_directories<K: Key>(rng: &mut SplitMix64, key: impl Fn(&mut SplitMix64) -> K) {
    for round in 0..30 {
        let (prefixes, probes) = random_case(rng, SIZES[round % SIZES.len()], &key);
        let (starts, vals) = flatten(prefixes.clone());
        let t = DirTable::from_ranges(&starts, &vals);
        // Every directory width a big table may get (small tables get 16 bits).
        let wide = DirTable::with_dir_bits(&starts, &vals, 17 + round as u32 % 6);
        for k in probes {
            let want = brute(&prefixes, k);
            assert_eq!(t.get(k), want, "{k:?} in {prefixes:?} ({t:?})");
            assert_eq!(wide.get(k), want, "{k:?} in {prefixes:?} ({wide:?})");
        }
    }
}

#[test]
fn random_directories_match_a_scan() {
    random_directories::<u32>(&mut SplitMix64::new(0x5eed_0d16), v4_key);
    random_directories::<u128>(&mut SplitMix64::new(0x5eed_0d17), v6_key);
    // All under one /32, probed inside and outside it: the shared leading bits.
    random_directories::<u64>(&mut SplitMix64::new(0x5eed_0d18), |r| {
        let x = r.next_u64();
        match r.below(4) {
            0 => x,
            _ => (0x2001_0db8 << 32) | (x & 0x0000_0000_ffff_ff0f),
        }
    });
    let one = DirTable::from_ranges(&[0u32, 0x0a00_0000, 0x0b00_0000], &[NONE, 1, NONE]);
    assert_eq!(one.shared, 7);
    assert_eq!(one.get(0x0a12_3456), Some(1));
    assert_eq!((one.get(0x09ff_ffff), one.get(0x0b00_0000)), (None, None));
    assert_eq!((one.get(0), one.get(u32::MAX)), (None, None));
}

#[test]
fn huge_vec_is_an_ordinary_vector() {
    for cap in [0usize, 1, 1000, 3 << 20, 9 << 20] {
        let mut v: Vec<u32> = huge_vec(cap);
        assert!(v.capacity() >= cap && v.is_empty());
        v.extend((0..cap as u32).rev());
        assert!(v.iter().rev().enumerate().all(|(i, &x)| x == i as u32));
    }
}

#[test]
fn the_directory_grows_with_the_table() {
    for (n, want) in [(1usize << 16, 16), (400_000, 17), (2_100_000, 19)] {
        let starts: Vec<u64> = (0..n as u64).map(|i| i << 40).collect();
        let vals: Vec<u32> = (0..n as u32).collect();
        let t = DirTable::from_ranges(&starts, &vals);
        assert_eq!(t.dir_bits, want, "{n} ranges");
        let last = (n as u64 - 1) << 40;
        assert_eq!(t.get(last + 5), Some(n as u32 - 1));
        assert_eq!(t.get((n as u64 / 2) << 40), Some(n as u32 / 2));
    }
}

#[test]
fn random_v6_narrow_and_wide_tables_match_a_scan() {
    let mut rng = SplitMix64::new(0x5eed_0664);
    for round in 0..30 {
        let (mut prefixes, probes) = random_case(&mut rng, SIZES[round % SIZES.len()], &v6_key);
        if round % 2 == 0 {
            // At most /64: keyed by the top 64 bits.
            for p in &mut prefixes {
                p.1 = p.1.min(64);
            }
        }
        let t = Ipv6Table::build(prefixes.clone());
        let narrow = prefixes.iter().all(|p| p.1 <= 64);
        assert_eq!(matches!(t, Ipv6Table::Narrow(_)), narrow);
        for k in probes {
            assert_eq!(t.get(k), brute(&prefixes, k), "{k:#x} in {prefixes:?}");
        }
    }
}

#[test]
fn large_table_levels() {
    // Enough ranges for several fence levels; every range's first and last address.
    let mut rng = SplitMix64::new(7);
    let prefixes: Vec<(u32, u8, u32)> = (0..50_000)
        .map(|_| {
            (
                rng.next_u64() as u32,
                16 + rng.below(17) as u8,
                rng.below(250) as u32,
            )
        })
        .collect();
    let t = RangeTable::build(prefixes.clone());
    assert!(t.levels.len() >= 3, "{t:?}");
    let big = Table::build(prefixes.clone());
    assert!(matches!(big, Table::Dir(_)), "{big:?}");
    for &(a, len, _) in prefixes.iter().take(300) {
        for k in [a.network(len), a.last(len)] {
            let want = brute(&prefixes, k);
            assert_eq!((t.get(k), big.get(k)), (want, want));
        }
    }
}
