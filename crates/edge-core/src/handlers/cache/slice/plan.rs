//! Slice arithmetic: which slices hold which bytes, the origin `Range` of a slice, the
//! slice a request looks at first, and whether a stored or fetched part is exactly the
//! slice it should be. Pure functions, tested at every boundary.

use edge_cache::part::Part;
use std::ops::{Range, RangeInclusive};

/// An object cut in slices of `size` bytes: slice `n` holds bytes
/// `n * size .. (n + 1) * size` (the last one fewer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slicer {
    pub size: u64,
}

impl Slicer {
    /// `size` is at least 64 KiB (config validation), never 0.
    pub fn new(size: u64) -> Slicer {
        Slicer { size: size.max(1) }
    }

    /// The slice holding byte `off`.
    pub fn of(&self, off: u64) -> u64 {
        off / self.size
    }

    /// The bytes of slice `n` in an object of `total` bytes (empty past the end).
    pub fn bytes(&self, n: u64, total: u64) -> Range<u64> {
        let start = n.saturating_mul(self.size).min(total);
        start..start.saturating_add(self.size).min(total)
    }

    /// The slices holding the bytes of the non-empty range `r`.
    pub fn covering(&self, r: &Range<u64>) -> RangeInclusive<u64> {
        self.of(r.start)..=self.of(r.end.saturating_sub(1).max(r.start))
    }

    /// The `Range` value that asks the origin for slice `n` (the origin clips the
    /// last slice to the object's end).
    pub fn range_value(&self, n: u64) -> String {
        let start = n.saturating_mul(self.size);
        format!("bytes={}-{}", start, start.saturating_add(self.size - 1))
    }

    /// Whether `part` is exactly slice `n` of its object: it starts at the slice's
    /// first byte and ends at the slice's end (or the object's).
    pub fn is_slice(&self, part: &Part, n: u64) -> bool {
        let want = self.bytes(n, part.total);
        !want.is_empty() && part.range() == want
    }
}

/// The slice a request looks at first: the one holding the first byte of its first
/// `bytes=first-` range, else slice 0 (no `Range`, a suffix range, anything else). Its
/// answer gives the object's length and validators, against which the request's
/// `Range` is then evaluated.
pub fn first_slice(range: Option<&[u8]>, s: &Slicer) -> u64 {
    let Some(v) = range else {
        return 0;
    };
    let v = v.trim_ascii();
    let Some(rest) = v
        .get(..6)
        .filter(|p| p.eq_ignore_ascii_case(b"bytes="))
        .map(|_| &v[6..])
    else {
        return 0;
    };
    let rest = rest.trim_ascii_start();
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return 0;
    }
    std::str::from_utf8(&rest[..digits])
        .ok()
        .and_then(|d| d.parse::<u64>().ok())
        .map_or(0, |first| s.of(first))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 64 * 1024;

    fn part(start: u64, end: u64, total: u64) -> Part {
        Part { start, end, total }
    }

    #[test]
    fn bytes_of_each_slice_and_the_last_one_short() {
        let s = Slicer::new(K);
        assert_eq!(s.bytes(0, 10 * K), 0..K);
        assert_eq!(s.bytes(9, 10 * K), 9 * K..10 * K);
        assert_eq!(s.bytes(10, 10 * K), 10 * K..10 * K, "past the end: empty");
        // A last slice of 1 byte.
        assert_eq!(s.bytes(10, 10 * K + 1), 10 * K..10 * K + 1);
        assert_eq!(s.bytes(u64::MAX, 5), 5..5, "never overflows");
        // 100 GiB in 1 MiB slices.
        let m = Slicer::new(1 << 20);
        let total = 100u64 << 30;
        assert_eq!(m.bytes(102_399, total), total - (1 << 20)..total);
    }

    #[test]
    fn ranges_map_to_the_slices_that_hold_them() {
        let s = Slicer::new(K);
        assert_eq!(s.covering(&(0..1)), 0..=0, "first byte");
        assert_eq!(s.covering(&(K - 1..K)), 0..=0, "last byte of slice 0");
        assert_eq!(s.covering(&(K..K + 1)), 1..=1, "first byte of slice 1");
        assert_eq!(s.covering(&(K - 1..2 * K + 1)), 0..=2, "across 3 slices");
        assert_eq!(s.covering(&(0..10 * K)), 0..=9, "the whole object");
        assert_eq!(s.of(10 * K), 10);
    }

    #[test]
    fn origin_ranges_name_whole_slices() {
        let s = Slicer::new(K);
        assert_eq!(s.range_value(0), "bytes=0-65535");
        assert_eq!(s.range_value(2), "bytes=131072-196607");
        assert!(!s.range_value(u64::MAX).is_empty(), "saturates");
    }

    #[test]
    fn only_exact_slices_are_slices() {
        let s = Slicer::new(K);
        assert!(s.is_slice(&part(0, K, 10 * K), 0));
        assert!(s.is_slice(&part(K, 2 * K, 10 * K), 1));
        assert!(
            s.is_slice(&part(9 * K, 9 * K + 1, 9 * K + 1), 9),
            "1-byte last slice"
        );
        assert!(!s.is_slice(&part(0, K, 10 * K), 1), "another slice");
        assert!(!s.is_slice(&part(0, K - 1, 10 * K), 0), "short");
        assert!(!s.is_slice(&part(1, K, 10 * K), 0), "late start");
        assert!(!s.is_slice(&part(0, 2 * K, 10 * K), 0), "too long");
        assert!(!s.is_slice(&part(K, 2 * K, 2 * K), 2), "past the end");
    }

    #[test]
    fn the_first_slice_is_where_the_first_range_starts() {
        let s = Slicer::new(K);
        let f = |v: &str| first_slice(Some(v.as_bytes()), &s);
        assert_eq!(first_slice(None, &s), 0);
        assert_eq!(f("bytes=0-"), 0);
        assert_eq!(f("bytes=65535-65536"), 0);
        assert_eq!(f("bytes=65536-"), 1);
        assert_eq!(f("BYTES= 131072-1,0-5"), 2);
        assert_eq!(f("bytes=-500"), 0, "suffix: the length comes first");
        assert_eq!(f("items=65536-"), 0);
        assert_eq!(f("bytes=99999999999999999999999-"), 0, "too long");
        assert_eq!(f("bytes"), 0);
        assert_eq!(f(""), 0);
    }
}
