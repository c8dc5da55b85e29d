//! The response heads of stored objects, for hits and for misses streamed as they are
//! stored: the whole object, one range (206 with `Content-Range`), several
//! (multipart/byteranges), none (416), 304; each ended with `Age`, the cache status
//! and the body's length through [`finish_head`] (the protocol's encoder frames it).
//!
//! How it fits: [`super::hit`] writes its heads here; [`super::stream`],
//! [`super::partial`], [`super::slice`] and [`super::variant`] use the same writers, so
//! a miss and a hit of one object carry the same fields.

use crate::http::exchange::{BodyLen, Exchange, Framing};
use crate::http::respond::bodiless;
use edge_cache::ObjectMeta;
use edge_http::MultipartLayout;

/// Header lines of the stored block that a multipart or 416 answer must not repeat
/// (they describe the whole representation, not what this response carries).
const REPLACED_ON_PARTS: &[&str] = &["content-type", "content-range"];

/// The head of a whole stored object of `len` bytes: the stored headers and its
/// Content-Length (none for a bodiless status). (Inlined into the hit path, its one
/// caller, as when it was written there.)
#[inline(always)]
pub fn write_full_head(
    ex: &mut Exchange,
    meta: &ObjectMeta,
    len: u64,
    age: u64,
    out: &mut Vec<u8>,
) {
    ex.begin_stored_head(out, meta.status);
    out.extend_from_slice(&meta.header_block);
    let body = if bodiless(meta.status) {
        BodyLen::None
    } else {
        edge_http::write_header_u64(out, "Content-Length", len);
        BodyLen::Known(len)
    };
    finish_head(ex, age, out, body);
}

/// The head of a single-range 206: the stored headers, Content-Range and Content-Length.
pub fn write_partial_head(
    ex: &mut Exchange,
    out: &mut Vec<u8>,
    meta: &ObjectMeta,
    r: &std::ops::Range<u64>,
    len: u64,
) {
    ex.begin_stored_head(out, 206);
    out.extend_from_slice(&meta.header_block);
    let cr = format!("bytes {}-{}/{len}", r.start, r.end - 1);
    edge_http::write_header(out, "Content-Range", cr.as_bytes());
    edge_http::write_header_u64(out, "Content-Length", r.end - r.start);
}

/// The head of a multipart/byteranges 206: the stored headers but those describing the
/// whole representation, then the multipart type and length.
pub fn write_multipart_head(
    ex: &mut Exchange,
    meta: &ObjectMeta,
    layout: &MultipartLayout,
    age: u64,
    out: &mut Vec<u8>,
) {
    ex.begin_stored_head(out, 206);
    copy_block_without(&meta.header_block, REPLACED_ON_PARTS, out);
    let total = layout.content_length();
    edge_http::write_header(out, "Content-Type", layout.content_type());
    edge_http::write_header_u64(out, "Content-Length", total);
    finish_head(ex, age, out, BodyLen::Known(total));
}

/// `Age`, the location's `add_header`s, `X-Cache-Status` and the end of the head, for
/// a body delimited as `body` says.
pub fn finish_head(ex: &mut Exchange, age: u64, out: &mut Vec<u8>, body: BodyLen) -> Framing {
    edge_http::write_header_u64(out, "Age", age);
    ex.write_cache_status(out);
    ex.end_head(out, body)
}

/// A 304 from the cache: the stored headers (validators, Cache-Control...) and no body.
pub fn write_not_modified(ex: &mut Exchange, meta: &ObjectMeta, age: u64, out: &mut Vec<u8>) {
    ex.begin_stored_head(out, 304);
    out.extend_from_slice(&meta.header_block);
    finish_head(ex, age, out, BodyLen::None);
}

/// A 416 for a body of `len` bytes: `Content-Range: bytes */len`, no body.
pub fn write_unsatisfiable(
    ex: &mut Exchange,
    meta: &ObjectMeta,
    len: u64,
    age: u64,
    out: &mut Vec<u8>,
) {
    ex.begin_stored_head(out, 416);
    copy_block_without(&meta.header_block, REPLACED_ON_PARTS, out);
    let cr = format!("bytes */{len}");
    edge_http::write_header(out, "Content-Range", cr.as_bytes());
    edge_http::write_header(out, "Content-Length", b"0");
    finish_head(ex, age, out, BodyLen::Known(0));
}

/// Copies a stored header block without the lines named in `skip` (lowercase).
pub fn copy_block_without(block: &[u8], skip: &[&str], out: &mut Vec<u8>) {
    for line in block.split_inclusive(|&b| b == b'\n') {
        let name_end = line.iter().position(|&b| b == b':').unwrap_or(0);
        let name = &line[..name_end];
        if skip.iter().any(|s| name.eq_ignore_ascii_case(s.as_bytes())) {
            continue;
        }
        out.extend_from_slice(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_copy_drops_only_named_lines() {
        let block = b"Content-Type: text/plain\r\nETag: \"x\"\r\ncontent-range: bytes 0-1/2\r\nX-A: content-type\r\n";
        let mut out = Vec::new();
        copy_block_without(block, REPLACED_ON_PARTS, &mut out);
        assert_eq!(out, b"ETag: \"x\"\r\nX-A: content-type\r\n");
    }
}
