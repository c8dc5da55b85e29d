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
use edge_http::HeaderMap;
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

    /// The part an origin's response head carries: `Some` for a 206 with one
    /// `Content-Range` (not `multipart/byteranges`), a known complete length, and a
    /// `Content-Length`, when given, equal to the range's length.
    pub fn of_response(status: u16, headers: &HeaderMap) -> Option<Part> {
        if status != 206 || headers.get_all("content-range").count() != 1 {
            return None;
        }
        let multipart = headers.get("content-type").is_some_and(|t| {
            let t = edge_http::trim_ows(t);
            t.len() >= 10 && t[..10].eq_ignore_ascii_case(b"multipart/")
        });
        if multipart {
            return None;
        }
        let cr = edge_http::parse_content_range(headers.get("content-range")?)?;
        let (r, total) = (cr.range?, cr.complete_len?);
        let part = Part {
            start: r.first(),
            end: r.end(),
            total,
        };
        let lens = headers.get_all("content-length").collect::<Vec<_>>();
        let len_ok = match lens.as_slice() {
            [] => true,
            [v] => {
                std::str::from_utf8(v)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    == Some(part.len())
            }
            _ => false,
        };
        len_ok.then_some(part)
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

/// What a request for the representation's bytes `want` needs, given the stored part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// The part holds every byte of `want`.
    Held,
    /// Fetch `fetch` (adjacent to the part, or across a gap of at most the allowed
    /// size) and store `union`, the part and the fetched bytes together: one
    /// contiguous range that holds `want`.
    Combine {
        fetch: Range<u64>,
        union: Range<u64>,
    },
    /// Fetch `want` as a request of its own: it holds the part (the new response
    /// alone is the union), or it lies further from the part than the allowed gap
    /// (the new response replaces the part: one stored range per object).
    Replace,
}

/// The origin fetch that completes `part` for `want` (representation offsets, within
/// `part.total`): only the missing bytes, so that a part and the fetched bytes form one
/// contiguous range. `max_gap`: the most bytes neither held nor wanted that a fetch may
/// include to keep the stored range contiguous.
pub fn need(part: &Part, want: &Range<u64>, max_gap: u64) -> Need {
    if part.covers(want) || want.is_empty() {
        return Need::Held;
    }
    if want.start < part.start && want.end > part.end {
        return Need::Replace;
    }
    let gap = if want.end < part.start {
        part.start - want.end
    } else {
        want.start.saturating_sub(part.end)
    };
    if gap > max_gap {
        return Need::Replace;
    }
    if want.start < part.start {
        Need::Combine {
            fetch: want.start..part.start,
            union: want.start..part.end,
        }
    } else {
        Need::Combine {
            fetch: part.end..want.end,
            union: part.start..want.end,
        }
    }
}

/// The `Range` request value for the bytes `r` of a representation of `total` bytes:
/// open-ended (`bytes=a-`) when `r` runs to the end.
pub fn range_request(r: &Range<u64>, total: u64) -> String {
    if r.end >= total {
        format!("bytes={}-", r.start)
    } else {
        format!("bytes={}-{}", r.start, r.end - 1)
    }
}

/// A stored header block rewritten for a body holding `part` of the representation:
/// the old `Content-Range` line dropped, and the part's own added when it is not the
/// whole (a whole object is a plain 200 object, with no `Content-Range`).
pub fn block_for(block: &[u8], part: &Part) -> Vec<u8> {
    if part.is_whole() {
        let mut out = Vec::with_capacity(block.len());
        push_without_range(block, &mut out);
        out
    } else {
        block_of_part(block, part)
    }
}

/// The header block of a stored part (a 206, whole or not: a slice as large as its
/// object is still a part): `part`'s `Content-Range` line first, where [`Part::of`]
/// finds it on every lookup without scanning the rest, then `block`'s other lines.
pub fn block_of_part(block: &[u8], part: &Part) -> Vec<u8> {
    let mut out = Vec::with_capacity(block.len() + 48);
    out.extend_from_slice(b"Content-Range: ");
    out.extend_from_slice(part.content_range(&part.range()).as_bytes());
    out.extend_from_slice(b"\r\n");
    push_without_range(block, &mut out);
    out
}

/// `block`'s lines but `Content-Range`, appended to `out`.
fn push_without_range(block: &[u8], out: &mut Vec<u8>) {
    for line in block.split_inclusive(|&b| b == b'\n') {
        let name = &line[..line.iter().position(|&b| b == b':').unwrap_or(0)];
        if !name.eq_ignore_ascii_case(b"content-range") {
            out.extend_from_slice(line);
        }
    }
}

/// Whether an origin response (`new`) is the same representation as the stored part
/// `old`, so that their bytes may be combined (RFC 9111 3.4: the same strong
/// validator): equal strong ETags, or, when neither has an ETag, the same
/// `Last-Modified` (sent as `If-Range`, which an origin honours only for a strong
/// date, RFC 9110 13.1.5). No validator: never combined.
pub fn same_representation(old: &ObjectMeta, new: &HeaderMap) -> bool {
    match (old.etag.as_deref(), new.get("etag")) {
        (Some(a), Some(b)) => {
            let (a, b) = (a.as_bytes(), edge_http::trim_ows(b));
            !a.starts_with(b"W/") && a.starts_with(b"\"") && a == b
        }
        (None, None) => {
            let lm = new
                .get_str("last-modified")
                .and_then(|v| edge_http::parse_http_date(v.trim()));
            lm.is_some() && lm == old.last_modified
        }
        _ => false,
    }
}

/// The `If-Range` value that guards a completion fetch for `old`: its strong ETag, or
/// its `Last-Modified` date; `None` when it has neither (the origin's answer then
/// never combines, see [`same_representation`]).
pub fn if_range(old: &ObjectMeta) -> Option<String> {
    match old.etag.as_deref() {
        Some(e) if e.starts_with('"') => Some(e.to_owned()),
        Some(_) => None,
        None => old.last_modified.map(edge_http::fmt_http_date),
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

    fn part(start: u64, end: u64, total: u64) -> Part {
        Part { start, end, total }
    }

    #[test]
    fn missing_bytes_are_fetched_next_to_the_part() {
        let p = part(4, 10, 10);
        assert_eq!(need(&p, &(4..10), 0), Need::Held);
        assert_eq!(need(&p, &(6..9), 0), Need::Held);
        assert_eq!(need(&p, &(9..10), 0), Need::Held);
        // The whole object: only the head is missing.
        assert_eq!(
            need(&p, &(0..10), 0),
            Need::Combine {
                fetch: 0..4,
                union: 0..10
            }
        );
        // Overlapping on the left, adjacent on the left.
        assert_eq!(
            need(&p, &(2..6), 0),
            Need::Combine {
                fetch: 2..4,
                union: 2..10
            }
        );
        assert_eq!(
            need(&p, &(0..4), 0),
            Need::Combine {
                fetch: 0..4,
                union: 0..10
            }
        );
        // cache-tests partial-store-partial-complete: 0-4 held, the whole wanted.
        let head = part(0, 5, 10);
        assert_eq!(
            need(&head, &(0..10), 0),
            Need::Combine {
                fetch: 5..10,
                union: 0..10
            }
        );
        assert_eq!(range_request(&(5..10), 10), "bytes=5-");
        assert_eq!(range_request(&(0..4), 10), "bytes=0-3");
        // The last byte alone.
        assert_eq!(
            need(&part(0, 9, 10), &(9..10), 0),
            Need::Combine {
                fetch: 9..10,
                union: 0..10
            }
        );
    }

    #[test]
    fn a_gap_is_fetched_only_up_to_the_limit() {
        let p = part(100, 200, 1000);
        // 50 bytes between the part and the wanted range.
        assert_eq!(need(&p, &(250..300), 10), Need::Replace);
        assert_eq!(
            need(&p, &(250..300), 50),
            Need::Combine {
                fetch: 200..300,
                union: 100..300
            }
        );
        assert_eq!(need(&p, &(0..50), 49), Need::Replace);
        assert_eq!(
            need(&p, &(0..50), 50),
            Need::Combine {
                fetch: 0..100,
                union: 0..200
            }
        );
        // A range around the part: fetched whole, it alone is the union.
        assert_eq!(need(&p, &(50..250), u64::MAX), Need::Replace);
        assert_eq!(need(&p, &(0..1000), u64::MAX), Need::Replace);
    }

    #[test]
    fn the_union_always_holds_the_part_and_the_wanted_bytes() {
        // Every part and wanted range of a 12-byte object: a Combine's fetch is
        // disjoint from the part, and fetch + part is exactly the union.
        let total = 12;
        for (s, e) in (0..total).flat_map(|s| (s + 1..=total).map(move |e| (s, e))) {
            let p = part(s, e, total);
            for (a, b) in (0..total).flat_map(|a| (a + 1..=total).map(move |b| (a, b))) {
                let want = a..b;
                match need(&p, &want, 3) {
                    Need::Held => assert!(p.covers(&want)),
                    Need::Replace => assert!(!p.covers(&want)),
                    Need::Combine { fetch, union } => {
                        assert!(
                            fetch.end <= p.start || fetch.start >= p.end,
                            "{p:?} {want:?}"
                        );
                        assert!(union.start <= want.start && want.end <= union.end);
                        assert!(union.start <= p.start && p.end <= union.end);
                        assert_eq!(fetch.end - fetch.start + p.len(), union.end - union.start);
                        assert!(union.end <= total && !fetch.is_empty());
                    }
                }
            }
        }
    }

    #[test]
    fn a_response_names_its_part_only_when_consistent() {
        let h = |lines: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (n, v) in lines {
                m.append(n.to_string(), v.as_bytes().to_vec());
            }
            m
        };
        let ok = h(&[("Content-Range", "bytes 4-9/10"), ("Content-Length", "6")]);
        assert_eq!(Part::of_response(206, &ok), Some(part(4, 10, 10)));
        assert_eq!(Part::of_response(200, &ok), None);
        for bad in [
            h(&[("Content-Range", "bytes 4-9/*")]),
            h(&[("Content-Range", "bytes 4-9/10"), ("Content-Length", "5")]),
            h(&[
                ("Content-Range", "bytes 4-9/10"),
                ("Content-Range", "bytes 4-9/10"),
            ]),
            h(&[
                ("Content-Range", "bytes 4-9/10"),
                ("Content-Type", "multipart/byteranges; boundary=x"),
            ]),
            h(&[("Content-Type", "text/plain")]),
        ] {
            assert_eq!(Part::of_response(206, &bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_block_carries_the_range_it_holds() {
        let block = b"Date: x\r\nContent-Range: bytes 4-9/10\r\nETag: \"a\"\r\n";
        assert_eq!(
            block_for(block, &part(0, 10, 10)),
            b"Date: x\r\nETag: \"a\"\r\n"
        );
        let two = block_for(block, &part(2, 10, 10));
        assert_eq!(
            two,
            b"Content-Range: bytes 2-9/10\r\nDate: x\r\nETag: \"a\"\r\n"
        );
        // A part as large as its object keeps its Content-Range (a slice of a small
        // object): still a part.
        assert_eq!(
            block_of_part(block, &part(0, 10, 10)),
            b"Content-Range: bytes 0-9/10\r\nDate: x\r\nETag: \"a\"\r\n"
        );
        // Found on the first line; and so is one stored before, at the end.
        let mut m = ObjectMeta::new("k", 206, std::time::SystemTime::now());
        m.header_block = two;
        assert_eq!(Part::of(&m), Some(part(2, 10, 10)));
        m.header_block = b"Date: x\r\nContent-Range: bytes 2-9/10\r\n".to_vec();
        assert_eq!(Part::of(&m), Some(part(2, 10, 10)));
    }

    #[test]
    fn only_a_strong_validator_combines() {
        let mut old = meta(206, "Content-Range: bytes 0-4/10\r\n", 5);
        let mut new = HeaderMap::new();
        assert!(!same_representation(&old, &new), "no validator");
        assert_eq!(if_range(&old), None);
        old.etag = Some("\"a\"".into());
        new.append("ETag", b"\"a\"".to_vec());
        assert!(same_representation(&old, &new));
        assert_eq!(if_range(&old).as_deref(), Some("\"a\""));
        let mut other = HeaderMap::new();
        other.append("ETag", b"\"b\"".to_vec());
        assert!(!same_representation(&old, &other));
        old.etag = Some("W/\"a\"".into());
        let mut weak = HeaderMap::new();
        weak.append("ETag", b"W/\"a\"".to_vec());
        assert!(!same_representation(&old, &weak));
        assert_eq!(if_range(&old), None);
        // Last-Modified when neither has an ETag.
        old.etag = None;
        let lm = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        old.last_modified = Some(lm);
        let mut dated = HeaderMap::new();
        dated.append("Last-Modified", edge_http::fmt_http_date(lm).into_bytes());
        assert!(same_representation(&old, &dated));
        assert!(if_range(&old).is_some());
    }
}
