//! Longest-prefix match without a trie: prefixes flattened into a sorted table of
//! non-overlapping ranges, then searched one of two ways.
//!
//! Flattening ([`flatten`]). Every address of the family belongs to exactly one range;
//! a range carries the value of the longest prefix that covers it (or none). A table of
//! `n` prefixes has at most `2n + 1` ranges, stored as their first addresses (sorted)
//! beside their values, and a lookup is "the last start at or below the address".
//! Building sorts the prefixes (parents before children) and sweeps them with a stack
//! of the prefixes that contain the current address: `O(n log n)`. Of two equal
//! prefixes the one given last wins.
//!
//! Searching. A plain binary search takes one cache miss per level once the table
//! outgrows the caches, so:
//! - [`RangeTable`] (small tables): a static B-tree of fences. Level 1 holds every
//!   `FANOUT`-th start, level 2 every `FANOUT`-th of level 1, and so on until a level
//!   fits in one block; a lookup scans one block per level with a branch-free count.
//! - [`DirTable`] (big tables, from [`DIR_MIN_RANGES`] ranges): DIR-16 style. The
//!   starts share some leading bits (none for a world-wide IPv4 table, `2000::/3` for
//!   IPv6); the next 16 to 22 bits (as many as give buckets of about four ranges)
//!   index a directory of buckets, each the starts under it, searched by a scan (a
//!   binary search when long). A lookup reads one directory entry, one cache line of
//!   keys (rarely two), and a value fetched while the keys are scanned. `cargo bench -p edge-core
//!   --bench geo` measures both (`docs/limits.md` has the numbers).

use std::fmt::Debug;

/// The value of a range that no prefix covers.
pub const NONE: u32 = u32::MAX;

/// Ranges from which [`Table`] uses a [`DirTable`]: its directory (256 KiB) pays off
/// only for big tables.
pub const DIR_MIN_RANGES: usize = 16 * 1024;

/// Least bits of the directory index of a [`DirTable`] (65,536 buckets, 256 KiB).
const DIR_BITS: u32 = 16;

/// Most bits of the directory index (a 4M-entry directory, 16 MiB, for tables of
/// 16M ranges and more).
const MAX_DIR_BITS: u32 = 22;

/// Ranges per bucket a [`DirTable`] aims at (the directory grows until the average is
/// at most this): a bucket of 64-bit keys then fits in one cache line or two.
const BUCKET_RANGES: usize = 4;

/// Ranges of a [`DirTable`] bucket scanned one by one before a binary search pays off.
const SCAN: usize = 32;

/// An address family as an unsigned integer.
pub trait Key: Copy + Ord + Debug + Send + Sync + 'static {
    /// Width in bits.
    const BITS: u8;
    const ZERO: Self;
    const MAX: Self;
    /// Keys per block of a [`RangeTable`]: one or two cache lines.
    const FANOUT: usize;
    /// The first address of the prefix of `self` with `len` bits.
    fn network(self, len: u8) -> Self;
    /// The last address of the prefix of `self` with `len` bits.
    fn last(self, len: u8) -> Self;
    /// `self + 1`; never called on `MAX`.
    fn succ(self) -> Self;
    /// Leading bits `self` and `other` share.
    fn common_bits(self, other: Self) -> u32;
    /// Bits `from..from + n` (counted from the top; `from + n <= BITS`, `n <= 32`).
    fn bits(self, from: u32, n: u32) -> usize;
    /// The address whose top `from` bits are `self`'s, the next `n` bits `index` and the
    /// rest zero (the first address of bucket `index`).
    fn with_bits(self, from: u32, n: u32, index: usize) -> Self;
}

macro_rules! key {
    ($t:ty, $fanout:expr) => {
        impl Key for $t {
            const BITS: u8 = <$t>::BITS as u8;
            const ZERO: $t = 0;
            const MAX: $t = <$t>::MAX;
            const FANOUT: usize = $fanout;
            #[inline]
            fn network(self, len: u8) -> $t {
                let len = u32::from(len).min(<$t>::BITS);
                // `checked_shl`: a shift by the full width (len 0) is no mask at all.
                self & <$t>::MAX.checked_shl(<$t>::BITS - len).unwrap_or(0)
            }
            #[inline]
            fn last(self, len: u8) -> $t {
                let len = u32::from(len).min(<$t>::BITS);
                self | !<$t>::MAX.checked_shl(<$t>::BITS - len).unwrap_or(0)
            }
            #[inline]
            fn succ(self) -> $t {
                self + 1
            }
            #[inline]
            fn common_bits(self, other: $t) -> u32 {
                (self ^ other).leading_zeros()
            }
            #[inline]
            fn bits(self, from: u32, n: u32) -> usize {
                // `checked_shl`: a shift by the full width is zero, not a panic.
                let top = self.checked_shl(from).unwrap_or(0);
                top.checked_shr(<$t>::BITS - n).unwrap_or(0) as usize
            }
            #[inline]
            fn with_bits(self, from: u32, n: u32, index: usize) -> $t {
                let keep = !(<$t>::MAX.checked_shr(from).unwrap_or(0));
                let low = (index as $t)
                    .checked_shl(<$t>::BITS - from - n)
                    .unwrap_or(0);
                (self & keep) | low
            }
        }
    };
}

key!(u32, 16);
key!(u64, 16);
key!(u128, 8);

/// Asks the CPU to fetch the cache line of `x` now. A hint: results do not depend on it.
#[inline(always)]
fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and has no effect on memory; `x` is a valid
    // reference anyway.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (x as *const T).cast::<i8>(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// A vector of room for `cap` items whose memory the kernel is asked to back with
/// transparent huge pages (`MADV_HUGEPAGE`, before any page is touched). A lookup in a
/// big table touches a random page of each array: with 4 KiB pages that is a TLB miss
/// and a page walk per array, with 2 MiB pages the whole table needs a few dozen TLB
/// entries. Only for arrays of several huge pages; a hint, results do not depend on it.
fn huge_vec<T>(cap: usize) -> Vec<T> {
    const HUGE: usize = 2 << 20;
    let v = Vec::with_capacity(cap);
    let bytes = cap * std::mem::size_of::<T>();
    if bytes >= 4 * HUGE {
        let at = v.as_ptr() as usize;
        let first = at.next_multiple_of(HUGE);
        let end = (at + bytes) & !(HUGE - 1);
        if end > first {
            // SAFETY: `first..end` lies inside the allocation `v` owns (page-aligned,
            // rounded inward), and MADV_HUGEPAGE only changes how the kernel backs those
            // pages, never their contents; an error (THP off) is ignored.
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
        }
    }
    v
}

/// The ranges being built: starts and values, adjacent ranges of equal value merged.
struct Out<K> {
    starts: Vec<K>,
    vals: Vec<u32>,
}

impl<K: Key> Out<K> {
    /// From `start` on, the value is `val`.
    fn emit(&mut self, start: K, val: u32) {
        let n = self.starts.len();
        if self.starts[n - 1] == start {
            self.vals[n - 1] = val;
            if n >= 2 && self.vals[n - 2] == val {
                self.starts.pop();
                self.vals.pop();
            }
        } else if self.vals[n - 1] != val {
            self.starts.push(start);
            self.vals.push(val);
        }
    }
}

/// Prefixes flattened into ranges: (first addresses, sorted, the first zero; values,
/// [`NONE`] where no prefix covers). The input is (address, prefix length, value):
/// host bits of the address are ignored, lengths are clamped to the width, of two equal
/// prefixes the later one wins, and no value may be [`NONE`].
pub fn flatten<K: Key>(prefixes: Vec<(K, u8, u32)>) -> (Vec<K>, Vec<u32>) {
    // (first, last, value)
    let mut p: Vec<(K, K, u32)> = prefixes
        .into_iter()
        .map(|(a, len, v)| {
            let len = len.min(K::BITS);
            (a.network(len), a.last(len), v)
        })
        .collect();
    // Parents (same first address, larger last) before children; stable, so equal
    // prefixes stay in input order and the last of each run is kept below.
    p.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut out = Out {
        starts: Vec::with_capacity(p.len() * 2 + 1),
        vals: Vec::with_capacity(p.len() * 2 + 1),
    };
    out.starts.push(K::ZERO);
    out.vals.push(NONE);
    // The prefixes that contain the current address, innermost last: (last, value).
    let mut stack: Vec<(K, u32)> = Vec::with_capacity(usize::from(K::BITS) + 1);
    let mut i = 0;
    while i < p.len() {
        // The last of a run of equal prefixes.
        let mut j = i;
        while j + 1 < p.len() && p[j + 1].0 == p[i].0 && p[j + 1].1 == p[i].1 {
            j += 1;
        }
        let (first, last, val) = p[j];
        i = j + 1;
        while let Some(&(end, _)) = stack.last() {
            if end >= first {
                break;
            }
            stack.pop();
            // `end < first <= MAX`: the successor exists.
            out.emit(end.succ(), stack.last().map_or(NONE, |t| t.1));
        }
        out.emit(first, val);
        stack.push((last, val));
    }
    while let Some((end, _)) = stack.pop() {
        if end < K::MAX {
            out.emit(end.succ(), stack.last().map_or(NONE, |t| t.1));
        }
    }
    out.starts.shrink_to_fit();
    out.vals.shrink_to_fit();
    (out.starts, out.vals)
}

/// Flattened ranges searched through fence levels: see the module doc.
#[derive(Clone)]
pub struct RangeTable<K> {
    /// First address of each range, sorted; `starts[0]` is zero. Padded with `MAX` to a
    /// whole number of blocks (the padding is never a result: see [`RangeTable::get`]).
    starts: Box<[K]>,
    /// How many of `starts` are ranges (the rest is padding).
    len: usize,
    /// The value of each range ([`NONE`]: no prefix covers it).
    vals: Box<[u32]>,
    /// Fence levels, the one over `starts` first: `levels[0][i] == starts[i * FANOUT]`,
    /// `levels[j][i] == levels[j - 1][i * FANOUT]`; the last has at most one block.
    /// Padded like `starts`.
    levels: Vec<Box<[K]>>,
}

impl<K: Key> Debug for RangeTable<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeTable")
            .field("ranges", &self.len)
            .field("levels", &self.levels.len())
            .finish()
    }
}

impl<K: Key> Default for RangeTable<K> {
    fn default() -> Self {
        RangeTable::build(Vec::new())
    }
}

/// `v` padded with `K::MAX` to a multiple of `K::FANOUT` (at least one block).
fn padded<K: Key>(mut v: Vec<K>) -> Box<[K]> {
    let blocks = v.len().div_ceil(K::FANOUT).max(1);
    v.resize(blocks * K::FANOUT, K::MAX);
    v.into_boxed_slice()
}

/// In the block of `level` at `base` (`FANOUT` keys, the first one <= k): the index of
/// the last key <= k.
#[inline]
fn last_at_or_below<K: Key>(level: &[K], base: usize, k: K) -> usize {
    let block = &level[base..base + K::FANOUT];
    // A block may span two cache lines: ask for the second with the first.
    prefetch(&block[K::FANOUT - 1]);
    // Keys <= k, branch-free (the compiler vectorizes it); at least one.
    let n: usize = block.iter().map(|&x| usize::from(x <= k)).sum();
    base + n - 1
}

impl<K: Key> RangeTable<K> {
    /// The table of `prefixes`, see [`flatten`].
    pub fn build(prefixes: Vec<(K, u8, u32)>) -> RangeTable<K> {
        let (starts, vals) = flatten(prefixes);
        RangeTable::from_ranges(starts, vals)
    }

    /// The table of ranges [`flatten`] made.
    fn from_ranges(starts: Vec<K>, vals: Vec<u32>) -> RangeTable<K> {
        let len = starts.len();
        let mut levels: Vec<Box<[K]>> = Vec::new();
        let mut below_len = len;
        while below_len > K::FANOUT {
            let below: &[K] = levels.last().map_or(&starts[..], |l| &l[..]);
            let level: Vec<K> = below[..below_len]
                .iter()
                .step_by(K::FANOUT)
                .copied()
                .collect();
            below_len = level.len();
            levels.push(padded(level));
        }
        RangeTable {
            starts: padded(starts),
            len,
            vals: vals.into_boxed_slice(),
            levels,
        }
    }

    /// The value of the range that holds `k`, None when no prefix covers it.
    #[inline]
    pub fn get(&self, k: K) -> Option<u32> {
        let v = self.vals[self.index(k)];
        (v != NONE).then_some(v)
    }

    /// The index of the range that holds `k`: the last start at or below it.
    #[inline]
    fn index(&self, k: K) -> usize {
        if k == K::MAX {
            // The padding equals MAX too: the last real range is the answer.
            return self.len - 1;
        }
        let f = K::FANOUT;
        // At every level, `i` is the last index whose key is <= k. The top level is one
        // block; below, the answer lies in the block under the fence found above it
        // (fence i is key i * f of the level below, fence i + 1 is above k).
        let mut i = 0usize;
        for level in self.levels.iter().rev() {
            i = last_at_or_below(level, i * f, k);
        }
        // The values of the bottom block are fetched while its keys are scanned (the
        // two cache misses of a big table overlap instead of following each other).
        if let Some(v) = self.vals.get(i * f) {
            prefetch(v);
        }
        last_at_or_below(&self.starts, i * f, k)
    }

    /// Ranges in the table (adjacent ranges of equal value are one).
    pub fn ranges(&self) -> usize {
        self.len
    }

    /// Bytes of the table's arrays.
    pub fn heap_bytes(&self) -> usize {
        let k = std::mem::size_of::<K>();
        self.starts.len() * k
            + self.vals.len() * 4
            + self.levels.iter().map(|l| l.len() * k).sum::<usize>()
    }
}

/// Flattened ranges searched through a directory: see the module doc.
#[derive(Clone)]
pub struct DirTable<K> {
    /// Leading bits every start but the first (zero) shares; the directory indexes the
    /// `dir_bits` bits after them.
    shared: u32,
    /// Bits of the directory index: from [`DIR_BITS`] up to [`MAX_DIR_BITS`], so that a
    /// bucket holds about [`BUCKET_RANGES`] ranges.
    dir_bits: u32,
    /// An address with those bits (the first non-zero start).
    region: K,
    /// `dir[b]..dir[b + 1]`: bucket `b` in `keys` and `vals`.
    dir: Box<[u32]>,
    /// The starts inside each bucket.
    keys: Box<[K]>,
    /// Per bucket: the value of the range that holds its first address, then one per
    /// key (bucket `b` starts at `dir[b] + b`).
    vals: Box<[u32]>,
    /// Values of an address below the region (range 0) and above it (the last range).
    below: u32,
    above: u32,
}

impl<K: Key> Debug for DirTable<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirTable")
            .field("shared_bits", &self.shared)
            .field("dir_bits", &self.dir_bits)
            .field("entries", &self.keys.len())
            .finish()
    }
}

impl<K: Key> DirTable<K> {
    /// The directory form of flattened ranges (`starts[0]` is zero).
    fn from_ranges(starts: &[K], vals: &[u32]) -> DirTable<K> {
        // Enough buckets for a few ranges each: one or two cache lines of keys per
        // lookup, whatever the table's size.
        let dir_bits = (DIR_BITS..=MAX_DIR_BITS)
            .find(|&d| starts.len() >> d <= BUCKET_RANGES)
            .unwrap_or(MAX_DIR_BITS);
        DirTable::with_dir_bits(starts, vals, dir_bits)
    }

    /// [`DirTable::from_ranges`] with a directory of `dir_bits` bits (at most 32 and
    /// the key's width).
    fn with_dir_bits(starts: &[K], vals: &[u32], dir_bits: u32) -> DirTable<K> {
        let bits = u32::from(K::BITS);
        let dir_bits = dir_bits.min(bits).min(32);
        let (shared, region) = match starts {
            [_, first, .., last] => (first.common_bits(*last).min(bits - dir_bits), *first),
            [_, only] => (bits - dir_bits, *only),
            _ => (0, K::ZERO),
        };
        let buckets = 1usize << dir_bits;
        let mut dir = huge_vec(buckets + 1);
        let mut keys = huge_vec(starts.len());
        let mut out = huge_vec(starts.len() + buckets);
        // `r`: the range that holds the current bucket's first address.
        let mut r = 0usize;
        for b in 0..buckets {
            let base = region.with_bits(shared, dir_bits, b);
            while r + 1 < starts.len() && starts[r + 1] <= base {
                r += 1;
            }
            dir.push(keys.len() as u32);
            out.push(vals[r]);
            while r + 1 < starts.len()
                && starts[r + 1].common_bits(region) >= shared
                && starts[r + 1].bits(shared, dir_bits) == b
            {
                r += 1;
                keys.push(starts[r]);
                out.push(vals[r]);
            }
        }
        dir.push(keys.len() as u32);
        DirTable {
            shared,
            dir_bits,
            region,
            dir: dir.into_boxed_slice(),
            keys: keys.into_boxed_slice(),
            vals: out.into_boxed_slice(),
            below: vals[0],
            above: vals[vals.len() - 1],
        }
    }

    /// The value of the range that holds `k`, None when no prefix covers it.
    #[inline]
    pub fn get(&self, k: K) -> Option<u32> {
        let v = if k.common_bits(self.region) < self.shared {
            // Outside the region: before every start but zero, or after all of them.
            if k < self.region {
                self.below
            } else {
                self.above
            }
        } else {
            let b = k.bits(self.shared, self.dir_bits);
            let (lo, hi) = (self.dir[b] as usize, self.dir[b + 1] as usize);
            // Bucket `b`'s values start at `lo + b`: each bucket before it has one more
            // value than keys (the range that holds its first address). They are
            // fetched while the keys are searched.
            prefetch(&self.vals[lo + b]);
            let bucket = &self.keys[lo..hi];
            // Starts inside the bucket at or below k.
            let n = if bucket.len() <= SCAN {
                bucket.iter().map(|&x| usize::from(x <= k)).sum()
            } else {
                bucket.partition_point(|&x| x <= k)
            };
            self.vals[lo + b + n]
        };
        (v != NONE).then_some(v)
    }

    /// Bytes of the table's arrays.
    pub fn heap_bytes(&self) -> usize {
        self.dir.len() * 4 + self.keys.len() * std::mem::size_of::<K>() + self.vals.len() * 4
    }
}

/// Flattened ranges, searched the way that suits their number (see the module doc).
#[derive(Clone)]
pub enum Table<K> {
    Tree(RangeTable<K>),
    Dir(DirTable<K>),
}

impl<K: Key> Debug for Table<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Table::Tree(t) => t.fmt(f),
            Table::Dir(t) => t.fmt(f),
        }
    }
}

impl<K: Key> Default for Table<K> {
    fn default() -> Self {
        Table::Tree(RangeTable::default())
    }
}

impl<K: Key> Table<K> {
    /// The table of `prefixes`, see [`flatten`].
    pub fn build(prefixes: Vec<(K, u8, u32)>) -> Table<K> {
        let (starts, vals) = flatten(prefixes);
        if starts.len() < DIR_MIN_RANGES {
            Table::Tree(RangeTable::from_ranges(starts, vals))
        } else {
            Table::Dir(DirTable::from_ranges(&starts, &vals))
        }
    }

    /// The value of the range that holds `k`, None when no prefix covers it.
    #[inline]
    pub fn get(&self, k: K) -> Option<u32> {
        match self {
            Table::Tree(t) => t.get(k),
            Table::Dir(t) => t.get(k),
        }
    }

    /// Bytes of the table's arrays.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Table::Tree(t) => t.heap_bytes(),
            Table::Dir(t) => t.heap_bytes(),
        }
    }
}

/// An IPv6 table: keyed by the top 64 bits when no prefix is longer than /64 (the
/// usual geo table: half the memory and cheaper compares), by all 128 otherwise.
#[derive(Clone, Debug)]
pub enum Ipv6Table {
    Narrow(Table<u64>),
    Wide(Table<u128>),
}

impl Default for Ipv6Table {
    fn default() -> Self {
        Ipv6Table::Narrow(Table::default())
    }
}

impl Ipv6Table {
    /// The table of `prefixes`, see [`flatten`].
    pub fn build(prefixes: Vec<(u128, u8, u32)>) -> Ipv6Table {
        if prefixes.iter().all(|&(_, len, _)| len <= 64) {
            Ipv6Table::Narrow(Table::build(
                prefixes
                    .into_iter()
                    .map(|(a, len, v)| ((a >> 64) as u64, len, v))
                    .collect(),
            ))
        } else {
            Ipv6Table::Wide(Table::build(prefixes))
        }
    }

    #[inline]
    pub fn get(&self, k: u128) -> Option<u32> {
        match self {
            Ipv6Table::Narrow(t) => t.get((k >> 64) as u64),
            Ipv6Table::Wide(t) => t.get(k),
        }
    }

    pub fn heap_bytes(&self) -> usize {
        match self {
            Ipv6Table::Narrow(t) => t.heap_bytes(),
            Ipv6Table::Wide(t) => t.heap_bytes(),
        }
    }
}

#[cfg(test)]
mod tests;
