//! Answering requests from a stored object: what a hit needs to decide 304, 206 or 416.
//!
//! How it fits: the rules themselves (RFC 9110 13 and 14) live in edge-http, shared with
//! the static file handler and the test origin; this module feeds them a stored object.
//! After a [`crate::Lookup::Fresh`] the server asks [`not_modified`] (send a 304 with the
//! header block and no body), then [`edge_http::evaluate_range`] with [`validators`]
//! (206 with one range, 206 multipart laid out by [`edge_http::MultipartLayout`] with
//! [`content_type`], 416, or the full body). Everything here works on the in-memory
//! [`ObjectMeta`]: no disk access, no header re-parsing beyond a scan of the stored block
//! for `Content-Type`.

use edge_http::{evaluate_preconditions, HeaderMap, Method, Precondition, Recipient, Validators};

use crate::meta::ObjectMeta;

/// The stored response's validators, for [`edge_http::evaluate_preconditions`] and
/// [`edge_http::evaluate_range`].
pub fn validators(meta: &ObjectMeta) -> Validators<'_> {
    Validators::new(meta.etag.as_deref(), meta.last_modified)
}

/// Should the request be answered with 304 Not Modified from this stored response? As a
/// cache evaluates it (RFC 9111 4.3.2): `If-None-Match`, or else `If-Modified-Since`,
/// against the stored validators; `If-Match` and `If-Unmodified-Since` are not a cache's
/// to evaluate. Only a stored 2xx is subject to preconditions at all (RFC 9110 13.2.1):
/// a cached 404 is sent as it is.
///
/// `If-Modified-Since` is compared with the stored `Last-Modified`, or without one with
/// the stored `Date`, or without that with the time the response arrived (RFC 9111
/// 4.3.2).
pub fn not_modified(meta: &ObjectMeta, method: &Method, req: &HeaderMap) -> bool {
    let modified = meta
        .last_modified
        .or(meta.date)
        .unwrap_or(meta.response_time);
    let v = Validators::new(meta.etag.as_deref(), Some(modified));
    (200..300).contains(&meta.status)
        && evaluate_preconditions(method, req, &v, Recipient::Cache) == Precondition::NotModified
}

/// The stored response's `Content-Type`, for the parts of a multipart/byteranges answer.
pub fn content_type(meta: &ObjectMeta) -> Option<&[u8]> {
    block_header(&meta.header_block, "content-type")
}

/// The value of a header in a stored header block (first occurrence, trimmed).
pub fn block_header<'a>(block: &'a [u8], name: &str) -> Option<&'a [u8]> {
    for line in block.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        if line[..colon].eq_ignore_ascii_case(name.as_bytes()) {
            let v = &line[colon + 1..];
            let start = v
                .iter()
                .position(|&b| b != b' ' && b != b'\t')
                .unwrap_or(v.len());
            return Some(&v[start..]);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use edge_http::{
        evaluate_preconditions, evaluate_range, fmt_http_date, ByteRange, HeaderMap, Method,
        MultipartLayout, Precondition, RangeOutcome, Recipient,
    };
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    fn meta() -> ObjectMeta {
        let mut m = ObjectMeta::new("k", 200, SystemTime::now());
        m.etag = Some("\"abc\"".into());
        m.last_modified = Some(UNIX_EPOCH + Duration::from_secs(1_600_000_000));
        m.header_block = b"Content-Type: text/plain\r\nETag: \"abc\"\r\n".to_vec();
        m
    }

    fn req(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(n.to_string(), v.as_bytes().to_vec());
        }
        h
    }

    /// The rules are edge-http's (tested there); this checks that a stored object's
    /// validators reach them.
    #[test]
    fn stored_validators_drive_304_and_if_range() {
        let m = meta();
        let v = validators(&m);
        let lm = fmt_http_date(m.last_modified.unwrap());
        let pre = |h: &[(&str, &str)]| {
            evaluate_preconditions(&Method::Get, &req(h), &v, Recipient::Cache)
        };
        assert_eq!(
            pre(&[("if-none-match", "W/\"abc\"")]),
            Precondition::NotModified
        );
        assert_eq!(
            pre(&[("if-modified-since", &lm)]),
            Precondition::NotModified
        );
        assert_eq!(pre(&[("if-none-match", "\"x\"")]), Precondition::Proceed);
        assert_eq!(pre(&[("if-match", "\"x\"")]), Precondition::Proceed);
        let range = |ir: &str| {
            evaluate_range(
                &Method::Get,
                &req(&[("range", "bytes=0-1"), ("if-range", ir)]),
                &v,
                10,
            )
        };
        assert!(matches!(range("\"abc\""), RangeOutcome::Partial(_)));
        assert!(matches!(range(&lm), RangeOutcome::Partial(_)));
        assert!(matches!(range("\"old\""), RangeOutcome::Full(_)));
        let none = ObjectMeta::new("k", 200, SystemTime::now());
        assert_eq!(validators(&none), Validators::default());
    }

    #[test]
    fn if_modified_since_falls_back_to_date_then_arrival() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut m = ObjectMeta::new("k", 200, t + Duration::from_secs(100));
        m.date = Some(t);
        let ims = |m: &ObjectMeta, at: SystemTime| {
            not_modified(
                m,
                &Method::Get,
                &req(&[("if-modified-since", &fmt_http_date(at))]),
            )
        };
        // No Last-Modified: the stored Date decides.
        assert!(ims(&m, t));
        assert!(!ims(&m, t - Duration::from_secs(1)));
        // No Date either: when the response arrived.
        m.date = None;
        assert!(!ims(&m, t));
        assert!(ims(&m, t + Duration::from_secs(100)));
        // If-Range still needs a real Last-Modified.
        assert_eq!(validators(&m).last_modified, None);
    }

    #[test]
    fn not_modified_applies_to_stored_2xx_only() {
        let mut m = meta();
        let get = |m: &ObjectMeta, h: &[(&str, &str)]| not_modified(m, &Method::Get, &req(h));
        assert!(get(&m, &[("if-none-match", "\"abc\"")]));
        assert!(get(&m, &[("if-none-match", "*")]));
        assert!(!get(&m, &[("if-none-match", "\"x\"")]));
        assert!(!get(&m, &[]));
        assert!(not_modified(
            &m,
            &Method::Head,
            &req(&[("if-none-match", "*")])
        ));
        m.status = 404;
        assert!(!get(&m, &[("if-none-match", "*")]));
        assert!(!get(&m, &[("if-none-match", "\"abc\"")]));
        m.status = 203;
        assert!(get(&m, &[("if-none-match", "\"abc\"")]));
    }

    #[test]
    fn multipart_parts_carry_the_stored_content_type() {
        let m = meta();
        let ranges = [
            ByteRange::new(0, 0).unwrap(),
            ByteRange::new(10, 19).unwrap(),
        ];
        let layout = MultipartLayout::new(&ranges, 100, content_type(&m), "B0UND");
        let head = layout.parts().nth(1).unwrap().head;
        assert_eq!(
            head,
            b"\r\n--B0UND\r\nContent-Type: text/plain\r\nContent-Range: bytes 10-19/100\r\n\r\n"
        );
        let mut bare = meta();
        bare.header_block = b"ETag: \"abc\"\r\n".to_vec();
        assert_eq!(content_type(&bare), None);
    }

    #[test]
    fn block_header_finds_the_first_field() {
        let m = meta();
        assert_eq!(block_header(&m.header_block, "etag"), Some(&b"\"abc\""[..]));
        assert_eq!(
            block_header(&m.header_block, "CONTENT-TYPE"),
            Some(&b"text/plain"[..])
        );
        assert_eq!(block_header(&m.header_block, "x"), None);
        assert_eq!(block_header(b"A:\t v\nA: w\r\n", "a"), Some(&b"v"[..]));
        assert_eq!(block_header(b"no colon\r\n", "no colon"), None);
    }
}
