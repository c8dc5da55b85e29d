//! Response bodies as plans, not bytes: literal pieces and slices of generated content.
//!
//! How it fits: the response builder describes a body as [`Body`] (for a plain 200 one
//! content slice; for a multipart 206 part heads around slices; for errors a short
//! literal). The connection loop asks [`Body::produce`] for the next bytes at a position
//! and frames them ([`Framing`]), so no body is ever held in memory whole and pacing or
//! a mid-body reset is just "stop asking at position N".

use crate::content::{self, Kind};
use std::rc::Rc;

/// One stretch of a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Bytes given as they are (part heads, short error bodies, JSON).
    Lit(Vec<u8>),
    /// `len` bytes of the object's content starting at `offset`.
    Content { offset: u64, len: u64 },
}

impl Piece {
    pub fn len(&self) -> u64 {
        match self {
            Piece::Lit(b) => b.len() as u64,
            Piece::Content { len, .. } => *len,
        }
    }
}

/// How the body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length`.
    Length,
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Neither: the body ends when the connection closes (HTTP/1.0 clients asking for
    /// `chunked=1`).
    Close,
}

/// A whole response body: which object the content pieces come from, and the pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    pub kind: Kind,
    pub size: u64,
    pub id: u64,
    pub pieces: Vec<Piece>,
    /// Sum of the pieces' lengths.
    pub len: u64,
    /// The whole object, already generated (from the thread's body cache): content
    /// pieces are copied from it instead of generated again.
    pub cached: Option<Rc<Vec<u8>>>,
}

impl Body {
    /// The whole object.
    pub fn object(kind: Kind, size: u64, id: u64) -> Body {
        Body {
            kind,
            size,
            id,
            pieces: vec![Piece::Content {
                offset: 0,
                len: size,
            }],
            len: size,
            cached: None,
        }
    }

    /// A slice `[start, end)` of the object.
    pub fn slice(kind: Kind, size: u64, id: u64, start: u64, end: u64) -> Body {
        let len = end - start;
        Body {
            kind,
            size,
            id,
            pieces: vec![Piece::Content { offset: start, len }],
            len,
            cached: None,
        }
    }

    /// Literal pieces of one object (a multipart body).
    pub fn pieces(kind: Kind, size: u64, id: u64, pieces: Vec<Piece>) -> Body {
        let len = pieces.iter().map(Piece::len).sum();
        Body {
            kind,
            size,
            id,
            pieces,
            len,
            cached: None,
        }
    }

    /// A literal body (error text, JSON).
    pub fn literal(bytes: Vec<u8>) -> Body {
        let len = bytes.len() as u64;
        Body {
            kind: Kind::Obj,
            size: 0,
            id: 0,
            pieces: vec![Piece::Lit(bytes)],
            len,
            cached: None,
        }
    }

    /// Attaches the already generated whole object (see [`crate::body_cache`]).
    pub fn with_cached(mut self, bytes: Option<Rc<Vec<u8>>>) -> Body {
        self.cached = bytes.filter(|b| b.len() as u64 == self.size);
        self
    }

    /// The body as one contiguous slice of the cached object, when it is exactly that
    /// (a plain 200 or a single range): the connection writes it without copying.
    pub fn direct_slice(&self) -> Option<&[u8]> {
        match (&self.cached, self.pieces.as_slice()) {
            (Some(bytes), [Piece::Content { offset, len }]) => {
                bytes.get(*offset as usize..(*offset + *len) as usize)
            }
            _ => None,
        }
    }

    /// Appends up to `max` body bytes starting at body position `pos` to `out` and
    /// returns how many it appended (0 only at the end or when `max` is 0).
    pub fn produce(&self, pos: u64, max: usize, out: &mut Vec<u8>) -> usize {
        let mut written = 0usize;
        let mut piece_start = 0u64;
        let mut pos = pos;
        for piece in &self.pieces {
            let plen = piece.len();
            if written == max {
                break;
            }
            if pos >= piece_start + plen {
                piece_start += plen;
                continue;
            }
            let within = pos - piece_start;
            let n = (plen - within).min((max - written) as u64) as usize;
            match piece {
                Piece::Lit(b) => out.extend_from_slice(&b[within as usize..within as usize + n]),
                Piece::Content { offset, .. } if self.cached.is_some() => {
                    let from = (offset + within) as usize;
                    let bytes = self
                        .cached
                        .as_deref()
                        .map_or(&[][..], |v| &v[from..from + n]);
                    out.extend_from_slice(bytes);
                }
                Piece::Content { offset, .. } => {
                    let at = out.len();
                    grow_zeroed(out, n);
                    content::fill(
                        self.kind,
                        self.size,
                        self.id,
                        offset + within,
                        &mut out[at..],
                    );
                }
            }
            written += n;
            pos += n as u64;
            piece_start += plen;
        }
        written
    }
}

/// Zeroes that [`grow_zeroed`] copies from.
static ZEROS: [u8; content::CHUNK] = [0; content::CHUNK];

/// Appends `n` zero bytes to `out` (to be overwritten by the generator). Copying from a
/// static compiles to `memcpy` even in unoptimised builds, where `Vec::resize` is a
/// byte-by-byte loop that made debug-build tests ten times slower.
fn grow_zeroed(out: &mut Vec<u8>, mut n: usize) {
    out.reserve(n);
    while n > 0 {
        let k = n.min(ZEROS.len());
        out.extend_from_slice(&ZEROS[..k]);
        n -= k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn produce_in_any_step_equals_the_whole() {
        let (pieces, _) =
            crate::range::multipart(&[(0, 100), (5000, 5003), (9000, 10000)], 10000, "x/y");
        let body = Body::pieces(Kind::Obj, 10000, 4, pieces);
        let mut whole = Vec::new();
        assert_eq!(body.produce(0, usize::MAX, &mut whole) as u64, body.len);
        for step in [1usize, 7, 64, 1000, 65536] {
            let mut out = Vec::new();
            let mut pos = 0u64;
            loop {
                let n = body.produce(pos, step, &mut out);
                if n == 0 {
                    break;
                }
                pos += n as u64;
            }
            assert_eq!(out, whole, "step {step}");
        }
        let mut obj = vec![0u8; 3];
        content::fill(Kind::Obj, 10000, 4, 5000, &mut obj);
        let needle = whole.windows(3).position(|w| w == obj.as_slice());
        assert!(
            needle.is_some(),
            "the 5000-5002 slice is in the multipart body"
        );
    }

    #[test]
    fn cached_bodies_produce_the_same_bytes() {
        let mut whole = vec![0u8; 10000];
        content::fill(Kind::Txt, 10000, 6, 0, &mut whole);
        let cached = Some(Rc::new(whole.clone()));
        let (pieces, _) = crate::range::multipart(&[(0, 10), (9000, 10000)], 10000, "t/h");
        for body in [
            Body::object(Kind::Txt, 10000, 6),
            Body::slice(Kind::Txt, 10000, 6, 77, 5000),
            Body::pieces(Kind::Txt, 10000, 6, pieces),
        ] {
            let with = body.clone().with_cached(cached.clone());
            let (mut a, mut b) = (Vec::new(), Vec::new());
            body.produce(0, usize::MAX, &mut a);
            with.produce(0, usize::MAX, &mut b);
            assert_eq!(a, b);
            if let Some(d) = with.direct_slice() {
                assert_eq!(d, &a[..]);
            }
        }
        assert_eq!(
            Body::object(Kind::Txt, 10000, 6)
                .with_cached(cached.clone())
                .direct_slice(),
            Some(&whole[..])
        );
        // A cache entry of the wrong size is refused, not trusted.
        assert!(Body::object(Kind::Txt, 9999, 6)
            .with_cached(cached)
            .cached
            .is_none());
    }

    #[test]
    fn produce_past_the_end_is_zero() {
        let b = Body::literal(b"abc".to_vec());
        let mut out = Vec::new();
        assert_eq!(b.produce(3, 10, &mut out), 0);
        assert_eq!(b.produce(99, 10, &mut out), 0);
        assert_eq!(b.produce(1, 0, &mut out), 0);
        assert_eq!(b.produce(1, 10, &mut out), 2);
        assert_eq!(out, b"bc");
    }
}
