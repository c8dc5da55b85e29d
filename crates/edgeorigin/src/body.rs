//! Response bodies as plans, not bytes: literal pieces and slices of generated content.
//!
//! How it fits: the response builder describes a body as [`Body`] (for a plain 200 one
//! content slice; for a multipart 206 part heads around slices; for errors a short
//! literal). The connection loop asks [`Body::produce`] for the next bytes at a position
//! and frames them ([`Framing`]), so no body is ever held in memory whole and pacing or
//! a mid-body reset is just "stop asking at position N".

use crate::body_cache::Cached;
use crate::content::{self, Kind};

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
#[derive(Debug, Clone)]
pub struct Body {
    pub kind: Kind,
    pub size: u64,
    pub id: u64,
    pub pieces: Vec<Piece>,
    /// Sum of the pieces' lengths.
    pub len: u64,
    /// The whole object, already generated (from the thread's body cache): content
    /// pieces are copied (or sent) from it instead of generated again.
    pub cached: Option<Cached>,
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

    /// Attaches the already generated whole object (see [`crate::body_cache`]); one of
    /// the wrong size is refused, not trusted.
    pub fn with_cached(mut self, cached: Option<Cached>) -> Body {
        self.cached = cached.filter(|c| c.len() == self.size);
        self
    }

    /// The body as one contiguous stretch of the cached object, when it is exactly that
    /// (a plain 200 or a single range): the connection sends it without generating or
    /// staging it.
    pub fn direct(&self) -> Option<Direct<'_>> {
        let (Some(cached), [Piece::Content { offset, len }]) =
            (&self.cached, self.pieces.as_slice())
        else {
            return None;
        };
        match cached {
            Cached::Bytes(b) => b
                .get(*offset as usize..(*offset + *len) as usize)
                .map(Direct::Bytes),
            Cached::File(f, _) => Some(Direct::File(f, *offset, *len)),
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
                Piece::Content { offset, .. } if self.copy_cached(offset + within, n, out) => {}
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

/// A body that can be sent as it is, from the cache.
#[derive(Debug)]
pub enum Direct<'a> {
    Bytes(&'a [u8]),
    /// `(file, offset, len)`: sent with `sendfile(2)`.
    File(&'a std::fs::File, u64, u64),
}

impl Body {
    /// Appends `n` bytes of the object at `offset` from the cache; false (nothing
    /// appended) when there is no cache or reading it failed, so the caller generates.
    fn copy_cached(&self, offset: u64, n: usize, out: &mut Vec<u8>) -> bool {
        match &self.cached {
            Some(Cached::Bytes(b)) => match b.get(offset as usize..offset as usize + n) {
                Some(bytes) => {
                    out.extend_from_slice(bytes);
                    true
                }
                None => false,
            },
            Some(Cached::File(f, _)) => {
                use std::os::unix::fs::FileExt;
                let at = out.len();
                grow_zeroed(out, n);
                if f.read_exact_at(&mut out[at..], offset).is_ok() {
                    true
                } else {
                    out.truncate(at);
                    false
                }
            }
            None => false,
        }
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
        let (pieces, _) = crate::range::multipart(
            &crate::range::half_open(&[(0, 100), (5000, 5003), (9000, 10000)]),
            10000,
            "x/y",
        );
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
        let file = crate::body_cache::memfd(&whole).expect("memfd");
        for cached in [
            Cached::Bytes(std::rc::Rc::new(whole.clone())),
            Cached::File(std::rc::Rc::new(file), 10000),
        ] {
            let ranges = crate::range::half_open(&[(0, 10), (9000, 10000)]);
            let (pieces, _) = crate::range::multipart(&ranges, 10000, "t/h");
            for body in [
                Body::object(Kind::Txt, 10000, 6),
                Body::slice(Kind::Txt, 10000, 6, 77, 5000),
                Body::pieces(Kind::Txt, 10000, 6, pieces),
            ] {
                let with = body.clone().with_cached(Some(cached.clone()));
                assert!(with.cached.is_some());
                let (mut a, mut b) = (Vec::new(), Vec::new());
                body.produce(0, usize::MAX, &mut a);
                with.produce(0, usize::MAX, &mut b);
                assert_eq!(a, b);
                match with.direct() {
                    Some(Direct::Bytes(d)) => assert_eq!(d, &a[..]),
                    Some(Direct::File(f, off, len)) => {
                        use std::os::unix::fs::FileExt;
                        let mut d = vec![0u8; len as usize];
                        f.read_exact_at(&mut d, off).unwrap();
                        assert_eq!(d, a);
                    }
                    None => assert_eq!(with.pieces.len(), 5, "only multipart is not direct"),
                }
            }
            // A cache entry of the wrong size is refused, not trusted.
            assert!(Body::object(Kind::Txt, 9999, 6)
                .with_cached(Some(cached))
                .cached
                .is_none());
        }
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
