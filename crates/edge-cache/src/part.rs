//! Partial objects: a stored response that holds one byte range of its representation
//! (a 206 from the origin, and each slice of a `slice`d location).
//!
//! How it fits: the convention every writer and reader of partial content shares, so
//! that the two producers (partial responses stored as they come, issue 28.2, and the
//! fixed-size slices of `slice = "1m"`, 28.1) cannot disagree about where bytes belong:
//! - `meta.status` is **206**; nothing else in the cache has that status (a full
//!   response is never stored as 206), so a lookup can tell a part from a whole object
//!   by the status alone;
//! - the header block keeps the origin's `Content-Range: bytes first-last/complete`
//!   line, with a known complete length; the body is exactly those bytes;
//! - a client is never sent the stored block verbatim: the server writes its own
//!   status line, `Content-Range` and `Content-Length` (see [`Part::of`] and the
//!   server's `copy_block_without`).
//!
//! The metadata format is unchanged: older files never hold a 206, and the line rides
//! in the block the index already keeps in memory, so [`Part::of`] reads no disk.

use crate::hit::block_header;
use crate::meta::{ObjectMeta, BODY_LEN_UNKNOWN};
use std::ops::Range;

/// Where a stored partial body sits in its representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Offset of the body's first byte in the representation.
    pub start: u64,
    /// One past the body's last byte.
    pub end: u64,
    /// The representation's complete length.
    pub total: u64,
}

impl Part {
    /// The part a stored object holds: `Some` for a 206 whose block has a valid
    /// `Content-Range` with a known complete length, and whose body length (once
    /// known) equals the range's. `None` for whole objects and for anything
    /// inconsistent (such an object must be treated as a miss, never served).
    pub fn of(meta: &ObjectMeta) -> Option<Part> {
        if meta.status != 206 {
            return None;
        }
        let cr =
            edge_http::parse_content_range(block_header(&meta.header_block, "content-range")?)?;
        let (r, total) = (cr.range?, cr.complete_len?);
        let part = Part {
            start: r.first(),
            end: r.end(),
            total,
        };
        (meta.body_len == BODY_LEN_UNKNOWN || meta.body_len == part.len()).then_some(part)
    }

    /// Bytes held.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Never true: a `Content-Range` range holds at least one byte.
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// The representation's offsets held.
    pub fn range(&self) -> Range<u64> {
        self.start..self.end
    }

    /// Whether every byte of `r` (representation offsets) is held.
    pub fn covers(&self, r: &Range<u64>) -> bool {
        self.start <= r.start && r.end <= self.end
    }

    /// Whether the part is in fact the whole representation.
    pub fn is_whole(&self) -> bool {
        self.start == 0 && self.end == self.total
    }

    /// The `Content-Range` value of the bytes `r` of this representation.
    pub fn content_range(&self, r: &Range<u64>) -> String {
        format!("bytes {}-{}/{}", r.start, r.end - 1, self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(status: u16, block: &str, body_len: u64) -> ObjectMeta {
        let mut m = ObjectMeta::new("k", status, std::time::SystemTime::now());
        m.header_block = block.as_bytes().to_vec();
        m.body_len = body_len;
        m
    }

    #[test]
    fn a_stored_206_names_its_range() {
        let m = meta(
            206,
            "Content-Type: a/b\r\nContent-Range: bytes 4-9/10\r\n",
            6,
        );
        let p = Part::of(&m).unwrap();
        assert_eq!((p.start, p.end, p.total, p.len()), (4, 10, 10, 6));
        assert!(p.covers(&(5..10)) && !p.covers(&(3..6)) && !p.is_whole());
        assert_eq!(p.content_range(&(5..10)), "bytes 5-9/10");
        // Still being written: the length is not known yet.
        assert_eq!(
            Part::of(&meta(
                206,
                "content-range: bytes 0-9/10\r\n",
                BODY_LEN_UNKNOWN
            ))
            .map(|p| p.is_whole()),
            Some(true)
        );
    }

    #[test]
    fn anything_inconsistent_is_not_a_part() {
        for (status, block, len) in [
            (200, "Content-Range: bytes 4-9/10\r\n", 6),
            (206, "Content-Type: a/b\r\n", 6),
            (206, "Content-Range: bytes 4-9/*\r\n", 6),
            (206, "Content-Range: bytes */10\r\n", 0),
            (206, "Content-Range: bytes 4-9/10\r\n", 5),
            (206, "Content-Range: bytes 4-10/10\r\n", 7),
        ] {
            assert_eq!(
                Part::of(&meta(status, block, len)),
                None,
                "{status} {block:?} {len}"
            );
        }
    }
}
