//! `Range: bytes=...` (RFC 9110 §14): which slices of an object a request wants.
//!
//! How it fits: the response builder calls [`parse`] with the header value and the object
//! size; `Full` means "ignore the header and send 200" (missing, unparsable, not bytes,
//! too many ranges), `Ranges` becomes one 206 with `Content-Range` or a
//! `multipart/byteranges` body laid out by [`multipart`], and `Unsatisfiable` becomes 416.
//! Everything is computed on numbers; the bytes are generated later, slice by slice.

use crate::body::Piece;

/// More ranges than this and the header is ignored (full 200), as nginx's `max_ranges`
/// does: a request for thousands of tiny ranges is an amplification attack.
pub const MAX_RANGES: usize = 16;
/// Boundary of `multipart/byteranges` bodies. Object bytes are generated, not stored, so
/// a fixed boundary is safe: the chance it appears in random bytes is ~2^-200.
pub const BOUNDARY: &str = "edgeorigin-byteranges-5f3c9a1d7e2b4806";

/// What a `Range` header asks for, resolved against the object size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranges {
    /// Serve the whole object (no header, or one we ignore).
    Full,
    /// Satisfiable ranges, each `(start, end_exclusive)`, in request order.
    Some(Vec<(u64, u64)>),
    /// Syntactically valid, but no range overlaps the object: 416.
    Unsatisfiable,
}

/// Resolves a `Range` header value against an object of `size` bytes.
pub fn parse(value: &str, size: u64) -> Ranges {
    let value = value.trim();
    let Some((unit, specs)) = value.split_once('=') else {
        return Ranges::Full;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return Ranges::Full;
    }
    let mut out = Vec::new();
    let mut seen = 0usize;
    for spec in specs.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        seen += 1;
        if seen > MAX_RANGES {
            return Ranges::Full;
        }
        let Some((first, last)) = spec.split_once('-') else {
            return Ranges::Full;
        };
        let (first, last) = (first.trim(), last.trim());
        let num = |s: &str| -> Option<u64> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                None
            } else {
                s.parse().ok()
            }
        };
        if first.is_empty() {
            // Suffix range: the last N bytes.
            let Some(n) = num(last) else {
                return Ranges::Full;
            };
            if n > 0 && size > 0 {
                out.push((size - n.min(size), size));
            }
            continue;
        }
        let Some(start) = num(first) else {
            return Ranges::Full;
        };
        let end_incl = if last.is_empty() {
            u64::MAX
        } else {
            match num(last) {
                Some(l) if l >= start => l,
                _ => return Ranges::Full, // "5-2" or garbage: the header is invalid
            }
        };
        if start < size {
            out.push((start, end_incl.min(size - 1) + 1));
        }
    }
    if seen == 0 {
        Ranges::Full
    } else if out.is_empty() {
        Ranges::Unsatisfiable
    } else {
        Ranges::Some(out)
    }
}

/// Lays out a `multipart/byteranges` body: literal part heads around content slices.
/// Returns the pieces and the total body length (for `Content-Length`).
pub fn multipart(ranges: &[(u64, u64)], size: u64, content_type: &str) -> (Vec<Piece>, u64) {
    let mut pieces = Vec::with_capacity(ranges.len() * 2 + 1);
    let mut total = 0u64;
    for &(s, e) in ranges {
        let head = format!(
            "\r\n--{BOUNDARY}\r\nContent-Type: {content_type}\r\nContent-Range: bytes {s}-{}/{size}\r\n\r\n",
            e - 1
        );
        total += head.len() as u64 + (e - s);
        pieces.push(Piece::Lit(head.into_bytes()));
        pieces.push(Piece::Content {
            offset: s,
            len: e - s,
        });
    }
    let tail = format!("\r\n--{BOUNDARY}--\r\n");
    total += tail.len() as u64;
    pieces.push(Piece::Lit(tail.into_bytes()));
    (pieces, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_ranges() {
        assert_eq!(parse("bytes=0-99", 1000), Ranges::Some(vec![(0, 100)]));
        assert_eq!(parse("bytes=990-", 1000), Ranges::Some(vec![(990, 1000)]));
        assert_eq!(parse("bytes=-10", 1000), Ranges::Some(vec![(990, 1000)]));
        assert_eq!(parse("bytes=-5000", 1000), Ranges::Some(vec![(0, 1000)]));
        assert_eq!(
            parse("bytes=900-5000", 1000),
            Ranges::Some(vec![(900, 1000)])
        );
        assert_eq!(parse("BYTES = 1-1", 1000), Ranges::Some(vec![(1, 2)]));
    }

    #[test]
    fn multiple_and_unsatisfiable() {
        assert_eq!(
            parse("bytes=0-0, -1 ,5-9", 10),
            Ranges::Some(vec![(0, 1), (9, 10), (5, 10)])
        );
        assert_eq!(parse("bytes=1000-", 1000), Ranges::Unsatisfiable);
        assert_eq!(parse("bytes=-0", 1000), Ranges::Unsatisfiable);
        assert_eq!(parse("bytes=0-", 0), Ranges::Unsatisfiable);
        assert_eq!(parse("bytes=2000-3000, 5000-", 1000), Ranges::Unsatisfiable);
        assert_eq!(
            parse("bytes=2000-3000, 5-6", 1000),
            Ranges::Some(vec![(5, 7)])
        );
    }

    #[test]
    fn invalid_headers_are_ignored() {
        for v in [
            "",
            "bytes",
            "items=0-1",
            "bytes=",
            "bytes=5-2",
            "bytes=a-b",
            "bytes=1",
            "bytes=-",
            "bytes=+1-2",
            "bytes=1-2-3",
            "bytes=99999999999999999999999-",
        ] {
            assert_eq!(parse(v, 1000), Ranges::Full, "{v:?}");
        }
        let many = format!("bytes={}", vec!["0-0"; MAX_RANGES + 1].join(","));
        assert_eq!(parse(&many, 1000), Ranges::Full);
        let ok = format!("bytes={}", vec!["0-0"; MAX_RANGES].join(","));
        assert!(matches!(parse(&ok, 1000), Ranges::Some(v) if v.len() == MAX_RANGES));
    }

    #[test]
    fn multipart_length_matches_pieces() {
        let (pieces, total) = multipart(&[(0, 10), (20, 25)], 100, "application/octet-stream");
        let sum: u64 = pieces.iter().map(Piece::len).sum();
        assert_eq!(sum, total);
        match &pieces[0] {
            Piece::Lit(b) => {
                let s = String::from_utf8_lossy(b);
                assert!(s.contains("Content-Range: bytes 0-9/100"), "{s}");
            }
            other => panic!("{other:?}"),
        }
    }
}
