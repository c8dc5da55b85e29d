//! Encoded variants: compressed copies of a stored object, kept as objects of their own.
//!
//! How it fits: when a location compresses, the server stores the identity response as
//! usual and, the first time a client wants it in a content coding, a copy in that
//! coding under the key [`crate::key::coded_key`] (the identity's variant key, the
//! coding, and the identity body's id). That key shares the identity's primary key, so
//! every purge (URL, prefix, tag, soft) reaches the copies; it names the body, so a copy
//! can never be served for another body. [`crate::Cache::lookup_coded`] finds a copy
//! only while its identity object is stored and fresh: the identity governs freshness,
//! revalidation and expiry, and [`crate::Cache::refresh`] carries a revalidation over to
//! the copies. This module builds a copy's metadata from the identity's.

use crate::key::{coded_key, CODING_MARK};
use crate::meta::{ObjectMeta, BODY_LEN_UNKNOWN};

/// Every content coding a copy can be stored in: a purge by key looks for a copy in
/// each (the server's negotiation never picks a coding outside this list; a test in
/// edge-core checks it).
pub const CODINGS: &[&str] = &["gzip", "br", "zstd"];

/// Header lines of the identity that do not describe the encoded bytes: replaced
/// (`ETag`, `Vary`, `Content-Encoding`) or dropped (digests of the identity bytes).
const REPLACED: &[&str] = &[
    "etag",
    "vary",
    "content-encoding",
    "content-md5",
    "digest",
    "content-digest",
    "repr-digest",
];

/// The metadata of the copy of `identity` in `coding` (a content-coding token): the same
/// status, times, freshness, `Vary` names and tags; the header block with
/// `Content-Encoding`, the coding's `ETag` ([`coded_etag`]) and `Vary: Accept-Encoding`.
/// The body length is unknown until the copy is written.
pub fn coded_meta(identity: &ObjectMeta, coding: &str) -> ObjectMeta {
    let mut m = identity.clone();
    m.key = coded_key(&identity.key, coding, identity.body_id());
    m.etag = identity.etag.as_deref().map(|e| coded_etag(e, coding));
    m.header_block = coded_block(&identity.header_block, m.etag.as_deref(), coding);
    m.body_len = BODY_LEN_UNKNOWN;
    m.body_hash = 0;
    m.body_id = 0;
    m
}

/// A copy's metadata after its identity was revalidated (`identity` is the refreshed
/// metadata): [`coded_meta`] of it, with the copy's own key and body.
pub fn refreshed_coded_meta(identity: &ObjectMeta, copy: &ObjectMeta) -> Option<ObjectMeta> {
    let coding = coding_of(&copy.key)?;
    let mut m = coded_meta(identity, coding);
    m.key = copy.key.clone();
    m.body_len = copy.body_len;
    m.body_hash = copy.body_hash;
    m.body_id = copy.body_id;
    Some(m)
}

/// The coding token of a copy's key (None for any other key).
pub fn coding_of(key: &str) -> Option<&str> {
    let (_, rest) = key.rsplit_once(CODING_MARK)?;
    Some(rest.split('.').next().unwrap_or(rest))
}

/// The `ETag` of a representation in `coding`: the identity's opaque tag with a
/// `-<coding>` suffix inside the quotes (`"abc"` → `"abc-gzip"`, `W/"abc"` →
/// `W/"abc-gzip"`), so that no cache or client takes one byte sequence for the other
/// (RFC 9110 8.8.3).
pub fn coded_etag(etag: &str, coding: &str) -> String {
    let e = etag.trim();
    match e.strip_suffix('"') {
        Some(open) if !open.is_empty() => format!("{open}-{coding}\""),
        _ => format!("{e}-{coding}"),
    }
}

/// The identity's header block for the copy: its lines but [`REPLACED`], then
/// `Content-Encoding`, `ETag` and a `Vary` that names `Accept-Encoding` besides what
/// the identity's named.
fn coded_block(block: &[u8], etag: Option<&str>, coding: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(block.len() + 64);
    let mut vary: Vec<u8> = Vec::new();
    for line in block.split_inclusive(|&b| b == b'\n') {
        let name_end = line.iter().position(|&b| b == b':').unwrap_or(0);
        let name = &line[..name_end];
        if name.eq_ignore_ascii_case(b"vary") {
            let v = trim(&line[name_end + 1..]);
            if !v.is_empty() {
                if !vary.is_empty() {
                    vary.extend_from_slice(b", ");
                }
                vary.extend_from_slice(v);
            }
            continue;
        }
        if REPLACED
            .iter()
            .any(|r| name.eq_ignore_ascii_case(r.as_bytes()))
        {
            continue;
        }
        out.extend_from_slice(line);
    }
    out.extend_from_slice(b"Content-Encoding: ");
    out.extend_from_slice(coding.as_bytes());
    out.extend_from_slice(b"\r\n");
    if let Some(e) = etag {
        out.extend_from_slice(b"ETag: ");
        out.extend_from_slice(e.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Vary: ");
    out.extend_from_slice(&vary_with_accept_encoding(&vary));
    out.extend_from_slice(b"\r\n");
    out
}

/// A `Vary` value that names `Accept-Encoding`: `v` as it is when it does (or is `*`),
/// else `v` with it appended.
fn vary_with_accept_encoding(v: &[u8]) -> Vec<u8> {
    let names = v.split(|&b| b == b',').map(trim);
    let has = names
        .clone()
        .any(|n| n == b"*" || n.eq_ignore_ascii_case(b"accept-encoding"));
    let mut out = v.to_vec();
    if !has {
        if !out.is_empty() {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(b"Accept-Encoding");
    }
    out
}

/// The identity's header block with `Vary: Accept-Encoding` (its `Vary` lines merged
/// into one that names it), for an identity response that has compressed siblings:
/// downstream caches must not give it to clients that asked for a coding. None when the
/// block already varies on it.
pub fn with_vary_accept_encoding(block: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(block.len() + 32);
    let mut vary: Vec<u8> = Vec::new();
    for line in block.split_inclusive(|&b| b == b'\n') {
        let name_end = line.iter().position(|&b| b == b':').unwrap_or(0);
        if line[..name_end].eq_ignore_ascii_case(b"vary") {
            let v = trim(&line[name_end + 1..]);
            if !v.is_empty() {
                if !vary.is_empty() {
                    vary.extend_from_slice(b", ");
                }
                vary.extend_from_slice(v);
            }
            continue;
        }
        out.extend_from_slice(line);
    }
    let merged = vary_with_accept_encoding(&vary);
    if merged == vary {
        return None;
    }
    out.extend_from_slice(b"Vary: ");
    out.extend_from_slice(&merged);
    out.extend_from_slice(b"\r\n");
    Some(out)
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t' | b'\r' | b'\n', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t' | b'\r' | b'\n'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn identity() -> ObjectMeta {
        let mut m = ObjectMeta::new("http://h/a.html", 200, SystemTime::now());
        m.header_block = b"Date: Tue, 01 Jan 2030 00:00:00 GMT\r\nContent-Type: text/html\r\nETag: \"v1\"\r\nVary: Origin\r\nContent-MD5: xyz\r\nCache-Control: max-age=60\r\n".to_vec();
        m.etag = Some("\"v1\"".into());
        m.body_len = 5000;
        m.body_hash = 77;
        m.body_id = 0xbeef;
        m.tags = vec!["t".into()];
        m
    }

    #[test]
    fn a_copy_describes_the_encoded_bytes_and_belongs_to_its_body() {
        let id = identity();
        let m = coded_meta(&id, "gzip");
        assert_eq!(m.key, coded_key("http://h/a.html", "gzip", 0xbeef));
        assert_eq!(m.primary_key(), "http://h/a.html");
        assert_eq!(m.etag.as_deref(), Some("\"v1-gzip\""));
        assert_eq!(m.body_len, BODY_LEN_UNKNOWN);
        assert_eq!((m.body_hash, m.body_id), (0, 0));
        assert_eq!(m.tags, id.tags);
        assert_eq!(m.freshness, id.freshness);
        let block = String::from_utf8(m.header_block).unwrap();
        assert_eq!(
            block,
            "Date: Tue, 01 Jan 2030 00:00:00 GMT\r\nContent-Type: text/html\r\nCache-Control: max-age=60\r\nContent-Encoding: gzip\r\nETag: \"v1-gzip\"\r\nVary: Origin, Accept-Encoding\r\n"
        );
        assert_eq!(coding_of(&m.key), Some("gzip"));
        assert_eq!(coding_of("http://h/a.html"), None);
    }

    #[test]
    fn a_refreshed_identity_refreshes_the_copy_but_not_its_body() {
        let id = identity();
        let mut copy = coded_meta(&id, "br");
        copy.body_len = 1200;
        copy.body_hash = 5;
        copy.body_id = 9;
        let mut newer = id.clone();
        newer.header_block =
            b"Date: Wed, 02 Jan 2030 00:00:00 GMT\r\nContent-Type: text/html\r\nETag: \"v1\"\r\n"
                .to_vec();
        newer.response_time = SystemTime::now() + std::time::Duration::from_secs(5);
        let m = refreshed_coded_meta(&newer, &copy).unwrap();
        assert_eq!(m.key, copy.key);
        assert_eq!((m.body_len, m.body_hash, m.body_id), (1200, 5, 9));
        assert_eq!(m.response_time, newer.response_time);
        assert!(String::from_utf8(m.header_block)
            .unwrap()
            .starts_with("Date: Wed"));
    }

    #[test]
    fn identity_blocks_get_vary_accept_encoding_once() {
        let b = b"Content-Type: text/css\r\n";
        assert_eq!(
            with_vary_accept_encoding(b).unwrap(),
            b"Content-Type: text/css\r\nVary: Accept-Encoding\r\n"
        );
        let b2 = b"Vary: origin\r\nContent-Type: text/css\r\nVary: cookie\r\n";
        assert_eq!(
            with_vary_accept_encoding(b2).unwrap(),
            b"Content-Type: text/css\r\nVary: origin, cookie, Accept-Encoding\r\n"
        );
        assert!(with_vary_accept_encoding(b"Vary: Accept-Encoding\r\n").is_none());
        assert!(with_vary_accept_encoding(b"Vary: *\r\n").is_none());
    }

    #[test]
    fn etag_suffixes() {
        assert_eq!(coded_etag("\"abc\"", "gzip"), "\"abc-gzip\"");
        assert_eq!(coded_etag("W/\"abc\"", "br"), "W/\"abc-br\"");
        assert_eq!(coded_etag("abc", "zstd"), "abc-zstd");
    }
}
