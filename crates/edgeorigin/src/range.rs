//! `multipart/byteranges` bodies of generated objects (RFC 9110 14.6).
//!
//! How it fits: the response builder asks edge-http which ranges of an object a request
//! gets ([`edge_http::evaluate_range`]: GET only, `If-Range`, at most
//! [`edge_http::MAX_RANGES`], no more bytes than the object). Several ranges become a body
//! plan here: the literal part heads of an [`edge_http::MultipartLayout`] around content
//! slices, which are generated later, slice by slice.

use crate::body::Piece;
use edge_http::{ByteRange, MultipartLayout};

/// Boundary of `multipart/byteranges` bodies. Object bytes are generated, not stored, so
/// a fixed boundary is safe: the chance it appears in random bytes is ~2^-200.
pub const BOUNDARY: &str = "edgeorigin-byteranges-5f3c9a1d7e2b4806";

/// Lays out a `multipart/byteranges` body: literal part heads around content slices.
/// Returns the pieces and the total body length (for `Content-Length`).
pub fn multipart(ranges: &[ByteRange], size: u64, content_type: &str) -> (Vec<Piece>, u64) {
    let layout = MultipartLayout::new(ranges, size, Some(content_type.as_bytes()), BOUNDARY);
    let mut pieces = Vec::with_capacity(ranges.len() * 2 + 1);
    for part in layout.parts() {
        pieces.push(Piece::Lit(part.head.to_vec()));
        pieces.push(Piece::Content {
            offset: part.range.first(),
            len: part.range.len(),
        });
    }
    pieces.push(Piece::Lit(layout.tail().to_vec()));
    (pieces, layout.content_length())
}

/// Byte ranges from half-open `(start, end)` pairs, for tests.
#[cfg(test)]
pub fn half_open(pairs: &[(u64, u64)]) -> Vec<ByteRange> {
    pairs
        .iter()
        .map(|&(s, e)| ByteRange::new(s, e - 1).expect("a non-empty range"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_length_matches_pieces() {
        let ranges = half_open(&[(0, 10), (20, 25)]);
        let (pieces, total) = multipart(&ranges, 100, "application/octet-stream");
        let sum: u64 = pieces.iter().map(Piece::len).sum();
        assert_eq!(sum, total);
        assert_eq!(pieces.len(), 5);
        match &pieces[0] {
            Piece::Lit(b) => {
                let s = String::from_utf8_lossy(b);
                assert_eq!(
                    s,
                    format!(
                        "\r\n--{BOUNDARY}\r\nContent-Type: application/octet-stream\r\n\
                         Content-Range: bytes 0-9/100\r\n\r\n"
                    )
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(pieces[3], Piece::Content { offset: 20, len: 5 }));
        match &pieces[4] {
            Piece::Lit(b) => assert_eq!(b, format!("\r\n--{BOUNDARY}--\r\n").as_bytes()),
            other => panic!("{other:?}"),
        }
    }
}
