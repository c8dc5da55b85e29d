//! Slice arithmetic: which slices hold which bytes, the origin `Range` of a slice (or
//! of the part of it a request needs), the slice and bytes a request looks at first,
//! and whether a stored or fetched part is the slice (or the part of it) it should be.
//! Pure functions, tested at every boundary.

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

    /// The bytes slice `n` would hold in an object of unknown length (`n * size ..
    /// (n + 1) * size`, saturating).
    pub fn span(&self, n: u64) -> Range<u64> {
        let start = n.saturating_mul(self.size);
        start..start.saturating_add(self.size)
    }

    /// Whether `part` is stored as slice `n`: a non-empty range inside the slice's
    /// bytes (the whole slice, or the part of it requests have needed so far).
    pub fn within(&self, part: &Part, n: u64) -> bool {
        let b = self.bytes(n, part.total);
        !part.is_empty() && b.start <= part.start && part.end <= b.end
    }

    /// Whether `part` is the origin's answer to a request for `asked` (inside the span
    /// of slice `n`): it starts at `asked`'s first byte and ends at its end, or at the
    /// object's end when that comes first.
    pub fn answers(&self, part: &Part, asked: &Range<u64>, n: u64) -> bool {
        self.within(part, n) && part.start == asked.start && part.end == asked.end.min(part.total)
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
    first_want(range, s).0
}

/// The slice a request looks at first ([`first_slice`]) and the bytes of it the
/// request is expected to need: from the first range's first byte to its last (`bytes=
/// first-last`) or to the slice's end; the whole slice without a `bytes=first-` range.
/// Only what is fetched depends on it: the response is evaluated on the slice's answer.
pub fn first_want(range: Option<&[u8]>, s: &Slicer) -> (u64, Range<u64>) {
    let whole = (0, s.span(0));
    let Some((first, last)) = range.and_then(first_range) else {
        return whole;
    };
    let n = s.of(first);
    let span = s.span(n);
    let end = last.map_or(span.end, |l| {
        l.saturating_add(1).clamp(first.saturating_add(1), span.end)
    });
    if end <= first {
        return whole; // at the end of the offsets: nothing to trim to
    }
    (n, first..end)
}

/// The first range of a `Range` value: its first byte, and its last when given;
/// `None` unless it is `bytes=first-[last]`.
fn first_range(v: &[u8]) -> Option<(u64, Option<u64>)> {
    let v = v.trim_ascii();
    let rest = &v[v
        .get(..6)
        .filter(|p| p.eq_ignore_ascii_case(b"bytes="))
        .map(|_| 6)?..];
    let (first, rest) = number(rest.trim_ascii_start())?;
    let rest = rest
        .trim_ascii_start()
        .strip_prefix(b"-")?
        .trim_ascii_start();
    let last = number(rest)
        .filter(|(_, tail)| tail.trim_ascii_start().first().is_none_or(|&b| b == b','))
        .map(|(l, _)| l);
    Some((first, last))
}

/// A decimal number at the start of `v` (at most 19 digits) and what follows it.
fn number(v: &[u8]) -> Option<(u64, &[u8])> {
    let digits = v.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    let n = std::str::from_utf8(&v[..digits]).ok()?.parse().ok()?;
    Some((n, &v[digits..]))
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

    #[test]
    fn the_first_want_is_the_first_range_within_its_slice() {
        let s = Slicer::new(K);
        let f = |v: &str| first_want(Some(v.as_bytes()), &s);
        assert_eq!(first_want(None, &s), (0, 0..K), "no Range: slice 0");
        assert_eq!(f("bytes=10-19"), (0, 10..20));
        assert_eq!(f("bytes=10-"), (0, 10..K), "to the slice's end");
        assert_eq!(
            f("bytes=65535-65536"),
            (0, K - 1..K),
            "clipped to the slice"
        );
        assert_eq!(f("bytes=70000-70000, 5-6"), (1, 70000..70001));
        assert_eq!(f("bytes= 5 - 9"), (0, 5..10), "spaces");
        assert_eq!(f("bytes=9-5"), (0, 9..10), "last before first: one byte");
        assert_eq!(f("bytes=9-x"), (0, 9..K), "bad last: to the slice's end");
        assert_eq!(f("bytes=-500"), (0, 0..K), "suffix");
        assert_eq!(f("bytes=99999999999999999999999-"), (0, 0..K));
        assert_eq!(f("bytes=18446744073709551615-"), (0, 0..K));
    }

    #[test]
    fn partial_slices_and_trimmed_answers() {
        let s = Slicer::new(K);
        assert_eq!(s.span(1), K..2 * K);
        assert!(s.within(&part(10, 20, 10 * K), 0));
        assert!(s.within(&part(K + 1, 2 * K, 10 * K), 1));
        assert!(!s.within(&part(K - 1, K + 1, 10 * K), 0), "across slices");
        assert!(!s.within(&part(K - 1, K + 1, 10 * K), 1), "across slices");
        assert!(!s.within(&part(5, 5, 10 * K), 0), "empty");
        assert!(s.answers(&part(10, 20, 10 * K), &(10..20), 0));
        assert!(
            s.answers(&part(K + 5, K + 9, K + 9), &(K + 5..2 * K), 1),
            "clipped at the end"
        );
        assert!(!s.answers(&part(10, 19, 10 * K), &(10..20), 0), "short");
        assert!(!s.answers(&part(11, 20, 10 * K), &(10..20), 0), "late");
    }
}
