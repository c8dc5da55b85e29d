//! Byte ranges (RFC 9110 14): parsing `Range` against a representation's size, and the
//! layout of `multipart/byteranges` bodies.
//!
//! How it fits: a handler that has a representation of known size first answers the
//! preconditions ([`crate::evaluate_preconditions`]), then asks
//! [`crate::evaluate_range`], which applies the method and `If-Range` rules and calls
//! [`parse_range`]. The answer is a [`RangeOutcome`]: the whole body (with the reason the
//! header was ignored), a 206 with one range (`Content-Range`) or several
//! ([`MultipartLayout`]: part heads to send before each slice of the body, and the total
//! `Content-Length`), or a 416. Everything is computed on numbers: the caller sends the
//! bytes (sendfile, pread, a generator) slice by slice.
//!
//! Parsing never allocates: at most [`MAX_RANGES`] ranges are kept, inline in a
//! [`RangeSet`]. Every number saturates instead of overflowing, and no input panics
//! (the `range` fuzz target checks this).

use std::fmt;
use std::io::Write;
use std::ops::{Deref, Range};

use crate::headers::trim_ows;

/// Most range-specs honoured in one `Range` header; with more, the header is ignored and
/// the whole representation is sent. RFC 9110 14.2 lets a server ignore "many small
/// ranges"; a request for thousands of tiny or overlapping parts is an amplification
/// attack (CVE-2011-3192). nginx's `max_ranges` plays the same role.
pub const MAX_RANGES: usize = 16;

/// One satisfiable byte range: the inclusive positions `first..=last` (RFC 9110 14.1.2),
/// never empty. Built by [`parse_range`] (then `last` is below the representation's
/// size) or by [`ByteRange::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    first: u64,
    last: u64,
}

// A byte range is never empty, so `is_empty` would always be false.
#[allow(clippy::len_without_is_empty)]
impl ByteRange {
    /// The inclusive range `first..=last`. `None` when `last < first`, or when
    /// `last == u64::MAX` (no representation is that large, and [`ByteRange::end`] must
    /// not overflow).
    pub fn new(first: u64, last: u64) -> Option<ByteRange> {
        (first <= last && last < u64::MAX).then_some(ByteRange { first, last })
    }

    /// Position of the first byte.
    pub fn first(self) -> u64 {
        self.first
    }

    /// Position of the last byte (inclusive), as in `Content-Range: bytes first-last/size`.
    pub fn last(self) -> u64 {
        self.last
    }

    /// One past the last byte (exclusive end).
    pub fn end(self) -> u64 {
        self.last + 1
    }

    /// Number of bytes, at least 1.
    pub fn len(self) -> u64 {
        self.last - self.first + 1
    }

    /// The half-open offsets `first..last + 1`.
    pub fn as_range(self) -> Range<u64> {
        self.first..self.end()
    }
}

impl From<ByteRange> for Range<u64> {
    fn from(r: ByteRange) -> Range<u64> {
        r.as_range()
    }
}

/// The satisfiable ranges of one request, in request order (at most [`MAX_RANGES`], kept
/// inline: no allocation). Dereferences to `[ByteRange]`.
#[derive(Clone, Copy)]
pub struct RangeSet {
    len: u8,
    items: [ByteRange; MAX_RANGES],
}

impl RangeSet {
    const EMPTY: RangeSet = RangeSet {
        len: 0,
        items: [ByteRange { first: 0, last: 0 }; MAX_RANGES],
    };

    /// A set holding `ranges`; `None` when there are more than [`MAX_RANGES`].
    pub fn from_ranges(ranges: &[ByteRange]) -> Option<RangeSet> {
        let mut set = RangeSet::EMPTY;
        for &r in ranges {
            if !set.push(r) {
                return None;
            }
        }
        Some(set)
    }

    /// Appends `r`; false when the set is full.
    fn push(&mut self, r: ByteRange) -> bool {
        let Some(slot) = self.items.get_mut(usize::from(self.len)) else {
            return false;
        };
        *slot = r;
        self.len += 1;
        true
    }

    /// Bytes of all ranges together (overlaps counted twice), saturating.
    pub fn total_len(&self) -> u64 {
        self.iter().fold(0u64, |t, r| t.saturating_add(r.len()))
    }
}

impl Deref for RangeSet {
    type Target = [ByteRange];
    fn deref(&self) -> &[ByteRange] {
        &self.items[..usize::from(self.len)]
    }
}

impl PartialEq for RangeSet {
    /// Equal when the ranges are (slots past the length do not count).
    fn eq(&self, other: &RangeSet) -> bool {
        **self == **other
    }
}

impl Eq for RangeSet {}

impl fmt::Debug for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|r| r.first..=r.last))
            .finish()
    }
}

/// Why a request's `Range` was not applied and the whole representation is sent (a 200,
/// always a valid answer to a Range request, RFC 9110 14.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeIgnored {
    /// No `Range` header.
    Absent,
    /// The response would not be a 200: only a 200 becomes a 206 (RFC 9110 14.2). Never
    /// returned by this crate, which does not know the status; for callers that decide
    /// it themselves (a cached 404 is sent whole).
    NotOk,
    /// Range handling is defined for GET only (RFC 9110 14.2): HEAD and the rest ignore it.
    NotGet,
    /// `If-Range` did not match the representation (RFC 9110 13.1.5).
    IfRangeMismatch,
    /// A range unit other than `bytes` (RFC 9110 14.1: units are case-insensitive).
    UnknownUnit,
    /// Not a valid `ranges-specifier`: bad syntax, `last-pos < first-pos`, no range-spec
    /// at all, not ASCII, or the field repeated (RFC 9110 14.2: MAY be ignored).
    Invalid,
    /// More than [`MAX_RANGES`] range-specs.
    TooManyRanges,
    /// The ranges add up to more than the whole representation (they overlap): sending
    /// the whole once is cheaper and defuses amplification (RFC 9110 14.2).
    ExceedsRepresentation,
    /// The representation is empty: a suffix range is satisfiable (RFC 9110 14.1.1) but
    /// there is no byte to put in a 206, so the (empty) whole is sent.
    EmptyRepresentation,
}

/// What to send for a request that may carry `Range`.
// `Partial` is 264 bytes on purpose: the ranges stay inline so that answering a Range
// request allocates nothing; the value is built once per request and returned in place.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeOutcome {
    /// 200 with the whole representation.
    Full(RangeIgnored),
    /// 206: one range (`Content-Range`) or several (`multipart/byteranges`, see
    /// [`MultipartLayout`]), in request order.
    Partial(RangeSet),
    /// 416 with `Content-Range: bytes */<size>`: a valid header with no satisfiable range.
    Unsatisfiable,
}

/// Resolves a `Range` field value against a representation of `size` bytes (RFC 9110
/// 14.1, 14.2). Lenient where the list rule allows (OWS around `=` and commas, empty list
/// elements, any case in `bytes`), strict inside a range-spec (`1*DIGIT "-" [1*DIGIT]` or
/// `"-" 1*DIGIT`). Positions too large for a u64 saturate: a huge first-pos is beyond any
/// size (unsatisfiable), a huge last-pos or suffix-length means "to the end".
pub fn parse_range(value: &[u8], size: u64) -> RangeOutcome {
    use RangeOutcome::{Full, Partial, Unsatisfiable};
    let value = trim_ows(value);
    let Some(eq) = value.iter().position(|&b| b == b'=') else {
        return Full(RangeIgnored::Invalid);
    };
    let unit = trim_ows(&value[..eq]);
    if unit.is_empty() || !unit.iter().all(|&b| is_tchar(b)) {
        return Full(RangeIgnored::Invalid);
    }
    if !unit.eq_ignore_ascii_case(b"bytes") {
        return Full(RangeIgnored::UnknownUnit);
    }
    let mut set = RangeSet::EMPTY;
    let mut specs = 0usize;
    let mut satisfiable = false;
    let elements = value[eq + 1..]
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|s| !s.is_empty());
    for spec in elements {
        specs += 1;
        if specs > MAX_RANGES {
            return Full(RangeIgnored::TooManyRanges);
        }
        let Some(dash) = spec.iter().position(|&b| b == b'-') else {
            return Full(RangeIgnored::Invalid);
        };
        let (first, last) = (&spec[..dash], &spec[dash + 1..]);
        let range = if first.is_empty() {
            // suffix-range: the last `n` bytes, or all of them when fewer.
            let Some(n) = digits(last) else {
                return Full(RangeIgnored::Invalid);
            };
            if n == 0 {
                continue; // a zero suffix-length is unsatisfiable (RFC 9110 14.1.1)
            }
            satisfiable = true;
            if size == 0 {
                continue;
            }
            ByteRange {
                first: size - n.min(size),
                last: size - 1,
            }
        } else {
            let Some(first) = digits(first) else {
                return Full(RangeIgnored::Invalid);
            };
            let last = if last.is_empty() {
                u64::MAX
            } else {
                match digits(last) {
                    Some(l) if l >= first => l,
                    _ => return Full(RangeIgnored::Invalid),
                }
            };
            if first >= size {
                continue; // unsatisfiable range-spec; others may still be served
            }
            satisfiable = true;
            ByteRange {
                first,
                last: last.min(size - 1),
            }
        };
        // Cannot fail: at most MAX_RANGES specs get here.
        set.push(range);
    }
    if specs == 0 {
        return Full(RangeIgnored::Invalid);
    }
    if !satisfiable {
        return Unsatisfiable;
    }
    if set.is_empty() {
        return Full(RangeIgnored::EmptyRepresentation);
    }
    let total = set.iter().try_fold(0u64, |t, r| t.checked_add(r.len()));
    if !matches!(total, Some(t) if t <= size) {
        return Full(RangeIgnored::ExceedsRepresentation);
    }
    Partial(set)
}

/// A `Content-Range` field of a byte range response (RFC 9110 14.4): what part of the
/// representation a 206 carries (or, for `bytes */N` on a 416, only the size).
///
/// Used where edgecache is the *client* of a range response: the origin's 206 to a slice
/// or partial fetch, and a stored partial object's own field. Checked strictly: a cache
/// that mis-reads where bytes belong serves them at the wrong offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentRange {
    /// The bytes carried (`None` for the unsatisfied form `bytes */N`).
    pub range: Option<ByteRange>,
    /// The representation's whole length (`None` for `/*`, "unknown").
    pub complete_len: Option<u64>,
}

/// Parses a `Content-Range` value: `bytes first-last/complete`, `bytes first-last/*` or
/// `bytes */complete` (RFC 9110 14.4), the unit case-insensitive. `None` for anything
/// else: another unit, a missing part, `last < first`, `last >= complete`, a number that
/// does not fit in a u64, or `*/*`. Never panics (the `range` fuzz target feeds it).
pub fn parse_content_range(value: &[u8]) -> Option<ContentRange> {
    let value = trim_ows(value);
    let sp = value.iter().position(|&b| b == b' ')?;
    if !value[..sp].eq_ignore_ascii_case(b"bytes") {
        return None;
    }
    let rest = &value[sp + 1..];
    let slash = rest.iter().position(|&b| b == b'/')?;
    let (resp, complete) = (&rest[..slash], &rest[slash + 1..]);
    let complete_len = match complete {
        b"*" => None,
        c => Some(exact_digits(c)?),
    };
    if resp == b"*" {
        return complete_len.map(|n| ContentRange {
            range: None,
            complete_len: Some(n),
        });
    }
    let dash = resp.iter().position(|&b| b == b'-')?;
    let first = exact_digits(&resp[..dash])?;
    let last = exact_digits(&resp[dash + 1..])?;
    let range = ByteRange::new(first, last)?;
    if complete_len.is_some_and(|n| last >= n) {
        return None;
    }
    Some(ContentRange {
        range: Some(range),
        complete_len,
    })
}

/// `1*DIGIT` as a u64; `None` when empty, not all digits, or too large (unlike
/// [`digits`], which saturates: a position the peer claims must be taken exactly).
fn exact_digits(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    s.iter().try_fold(0u64, |n, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// `1*DIGIT` as a u64, saturating at `u64::MAX`; `None` for anything else (empty, a
/// sign, spaces, other characters).
fn digits(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit()
            .then(|| n.saturating_mul(10).saturating_add(u64::from(b - b'0')))
    })
}

/// RFC 9110 5.6.2 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Length of a [`Boundary`].
pub const BOUNDARY_LEN: usize = 32;

/// A `multipart/byteranges` boundary: 32 lowercase hex digits derived from a seed, so
/// the same seed always gives the same boundary (reproducible responses and tests) while
/// different seeds give unrelated ones. It must not occur in the parts' bytes (RFC 2046
/// 5.1.1); 128 bits make that a 2^-128 event for any body not built to contain it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Boundary([u8; BOUNDARY_LEN]);

impl Boundary {
    /// The boundary for `seed` (two rounds of splitmix64, in hex).
    pub fn from_seed(seed: u64) -> Boundary {
        let a = splitmix64(seed);
        let b = splitmix64(a);
        let mut out = [0u8; BOUNDARY_LEN];
        for (i, slot) in out.iter_mut().enumerate() {
            let word = if i < 16 { a } else { b };
            let nibble = (word >> (60 - 4 * (i % 16))) & 0xf;
            *slot = b"0123456789abcdef"[nibble as usize];
        }
        Boundary(out)
    }

    /// The boundary as text (always ASCII hex).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for Boundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Boundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Boundary({})", self.as_str())
    }
}

/// splitmix64 (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One part of a `multipart/byteranges` body: send `head`, then the representation's
/// bytes in `range`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultipartPart<'a> {
    pub head: &'a [u8],
    pub range: ByteRange,
}

/// The layout of a `multipart/byteranges` response (RFC 9110 14.6): the response's
/// `Content-Type`, a head per part (delimiter, the part's `Content-Type` when known, its
/// `Content-Range`), the closing delimiter, and the total `Content-Length`. The body is
/// `head₁ bytes₁ head₂ bytes₂ … tail`; the caller sends the bytes from wherever they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipartLayout {
    /// The response Content-Type value, every part head, then the tail, back to back.
    text: Vec<u8>,
    /// End of the Content-Type value in `text`.
    content_type_end: usize,
    /// Per part: end of its head in `text`, and its range.
    parts: Vec<(usize, ByteRange)>,
    content_length: u64,
}

impl MultipartLayout {
    /// Lays out `ranges` (in this order) of a representation of `size` bytes whose media
    /// type is `content_type` (omitted from the parts when `None`), delimited by
    /// `boundary` (1 to 70 characters that do not occur in the bytes, RFC 2046 5.1.1).
    pub fn new(
        ranges: &[ByteRange],
        size: u64,
        content_type: Option<&[u8]>,
        boundary: &str,
    ) -> MultipartLayout {
        let per_part = 64 + boundary.len() + content_type.map_or(0, |c| c.len() + 16);
        let mut text = Vec::with_capacity(48 + boundary.len() + ranges.len() * per_part);
        text.extend_from_slice(b"multipart/byteranges; boundary=");
        text.extend_from_slice(boundary.as_bytes());
        let content_type_end = text.len();
        let mut parts = Vec::with_capacity(ranges.len());
        let mut content_length = 0u64;
        for &r in ranges {
            let start = text.len();
            text.extend_from_slice(b"\r\n--");
            text.extend_from_slice(boundary.as_bytes());
            text.extend_from_slice(b"\r\n");
            if let Some(ct) = content_type {
                text.extend_from_slice(b"Content-Type: ");
                text.extend_from_slice(ct);
                text.extend_from_slice(b"\r\n");
            }
            // Writing to a Vec cannot fail.
            let _ = write!(
                text,
                "Content-Range: bytes {}-{}/{size}\r\n\r\n",
                r.first, r.last
            );
            parts.push((text.len(), r));
            content_length = content_length
                .saturating_add((text.len() - start) as u64)
                .saturating_add(r.len());
        }
        let tail_start = text.len();
        text.extend_from_slice(b"\r\n--");
        text.extend_from_slice(boundary.as_bytes());
        text.extend_from_slice(b"--\r\n");
        content_length = content_length.saturating_add((text.len() - tail_start) as u64);
        MultipartLayout {
            text,
            content_type_end,
            parts,
            content_length,
        }
    }

    /// The response's `Content-Type` value: `multipart/byteranges; boundary=<boundary>`.
    pub fn content_type(&self) -> &[u8] {
        &self.text[..self.content_type_end]
    }

    /// The parts, in order: each head, and the range of bytes that follows it.
    pub fn parts(&self) -> impl ExactSizeIterator<Item = MultipartPart<'_>> + '_ {
        (0..self.parts.len()).map(move |i| {
            let start = match i {
                0 => self.content_type_end,
                _ => self.parts[i - 1].0,
            };
            let (end, range) = self.parts[i];
            MultipartPart {
                head: &self.text[start..end],
                range,
            }
        })
    }

    /// The closing delimiter, sent after the last part's bytes.
    pub fn tail(&self) -> &[u8] {
        let start = self.parts.last().map_or(self.content_type_end, |p| p.0);
        &self.text[start..]
    }

    /// The body's length: every head, every range and the tail (saturating).
    pub fn content_length(&self) -> u64 {
        self.content_length
    }
}

#[cfg(test)]
pub(crate) mod tests;
