//! Answering requests from a stored object: conditional requests (304), `Range`
//! (single and multiple ranges, `If-Range`) and multipart/byteranges framing.
//!
//! How it fits: after a [`crate::Lookup::Fresh`] the server asks [`not_modified`]
//! (send a 304 with the header block and no body), then [`evaluate_range`] (send 206
//! with one range, 206 multipart with [`multipart_layout`], 416, or the full body).
//! Everything here works on the in-memory [`ObjectMeta`]: no disk access, no header
//! re-parsing beyond a scan of the stored block for `Content-Type`.

use std::ops::Range;

use edge_http::{parse_http_date, HeaderMap};

use crate::meta::ObjectMeta;

/// Most ranges honoured in one request; more (or overlapping ones) are answered with the
/// full body, which bounds the work a hostile `Range` header can cause (CVE-2011-3192).
pub const MAX_RANGES: usize = 16;

/// Weak comparison of two entity tags (RFC 9110 8.8.3.2): `W/` prefixes are ignored.
fn weak_eq(a: &str, b: &str) -> bool {
    a.trim().trim_start_matches("W/") == b.trim().trim_start_matches("W/")
}

/// Strong comparison: both must be strong and equal.
fn strong_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim(), b.trim());
    !a.starts_with("W/") && !b.starts_with("W/") && a == b
}

/// Should a GET/HEAD be answered with 304 Not Modified from the cache (RFC 9110 13.2.2:
/// `If-None-Match` first; `If-Modified-Since` only without it)?
pub fn not_modified(meta: &ObjectMeta, req: &HeaderMap) -> bool {
    if req.contains("if-none-match") {
        let Some(etag) = meta.etag.as_deref() else {
            return false;
        };
        return req.tokens("if-none-match").any(|t| {
            let t = String::from_utf8_lossy(t);
            t == "*" || weak_eq(&t, etag)
        });
    }
    match (
        req.get_str("if-modified-since")
            .and_then(|v| parse_http_date(v.trim())),
        meta.last_modified,
    ) {
        (Some(since), Some(lm)) => lm <= since,
        _ => false,
    }
}

/// What to send for a `Range` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeOutcome {
    /// No (usable) Range, or `If-Range` did not match: 200 with the full body.
    Full,
    /// 206: one range (Content-Range) or several (multipart/byteranges). Ranges are
    /// half-open byte offsets into the body, in request order.
    Partial(Vec<Range<u64>>),
    /// 416 with `Content-Range: bytes */<len>`.
    Unsatisfiable,
}

/// Evaluate `Range` and `If-Range` against a stored body of `len` bytes (RFC 9110 14).
pub fn evaluate_range(meta: &ObjectMeta, req: &HeaderMap, len: u64) -> RangeOutcome {
    let Some(spec) = req.get_str("range") else {
        return RangeOutcome::Full;
    };
    if let Some(cond) = req.get_str("if-range") {
        let cond = cond.trim();
        let ok = if cond.starts_with('"') || cond.starts_with("W/") {
            meta.etag.as_deref().is_some_and(|e| strong_eq(cond, e))
        } else {
            // A date validator matches only an exact Last-Modified.
            matches!((parse_http_date(cond), meta.last_modified), (Some(d), Some(lm)) if d == lm)
        };
        if !ok {
            return RangeOutcome::Full;
        }
    }
    let Some(list) = spec.trim().strip_prefix("bytes=") else {
        return RangeOutcome::Full; // unknown unit: ignore
    };
    let mut out: Vec<Range<u64>> = Vec::new();
    let mut any = false;
    for part in list.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        any = true;
        let Some((a, b)) = part.split_once('-') else {
            return RangeOutcome::Full; // invalid syntax: ignore the header
        };
        let (a, b) = (a.trim(), b.trim());
        let r = if a.is_empty() {
            // Suffix range: the last n bytes.
            let Some(n) = parse_u64(b) else {
                return RangeOutcome::Full;
            };
            if n == 0 {
                continue;
            }
            len.saturating_sub(n)..len
        } else {
            let Some(first) = parse_u64(a) else {
                return RangeOutcome::Full;
            };
            let last = if b.is_empty() {
                len.saturating_sub(1)
            } else {
                match parse_u64(b) {
                    Some(l) if l >= first => l.min(len.saturating_sub(1)),
                    _ => return RangeOutcome::Full,
                }
            };
            if first >= len {
                continue; // unsatisfiable part
            }
            first..last + 1
        };
        if r.is_empty() {
            continue;
        }
        out.push(r);
        if out.len() > MAX_RANGES {
            return RangeOutcome::Full;
        }
    }
    if !any {
        return RangeOutcome::Full;
    }
    if out.is_empty() {
        return RangeOutcome::Unsatisfiable;
    }
    // Overlapping ranges are a known amplification trick: serve the whole body.
    let mut sorted = out.clone();
    sorted.sort_by_key(|r| r.start);
    if sorted.windows(2).any(|w| w[1].start < w[0].end) {
        return RangeOutcome::Full;
    }
    RangeOutcome::Partial(out)
}

fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
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

/// One part of a multipart/byteranges body: the part head to send, then the body bytes
/// in `range`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub head: Vec<u8>,
    pub range: Range<u64>,
}

/// The layout of a multipart/byteranges response (RFC 9110 14.6): parts, the closing
/// delimiter, and the total body length for `Content-Length`. The response's
/// `Content-Type` is `multipart/byteranges; boundary=<boundary>`.
pub fn multipart_layout(
    meta: &ObjectMeta,
    ranges: &[Range<u64>],
    len: u64,
    boundary: &str,
) -> (Vec<Part>, Vec<u8>, u64) {
    let ctype = block_header(&meta.header_block, "content-type");
    let mut total = 0u64;
    let parts: Vec<Part> = ranges
        .iter()
        .map(|r| {
            let mut head = Vec::with_capacity(96);
            head.extend_from_slice(b"\r\n--");
            head.extend_from_slice(boundary.as_bytes());
            head.extend_from_slice(b"\r\n");
            if let Some(ct) = ctype {
                head.extend_from_slice(b"Content-Type: ");
                head.extend_from_slice(ct);
                head.extend_from_slice(b"\r\n");
            }
            head.extend_from_slice(
                format!(
                    "Content-Range: bytes {}-{}/{len}\r\n\r\n",
                    r.start,
                    r.end - 1
                )
                .as_bytes(),
            );
            total += head.len() as u64 + (r.end - r.start);
            Part {
                head,
                range: r.clone(),
            }
        })
        .collect();
    let tail = format!("\r\n--{boundary}--\r\n").into_bytes();
    total += tail.len() as u64;
    (parts, tail, total)
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // one-range Vecs are the point of the tables
mod tests {
    use super::*;
    use edge_http::fmt_http_date;
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

    #[test]
    fn conditional_requests() {
        let m = meta();
        let lm = m.last_modified.unwrap();
        let cases: Vec<(Vec<(&str, String)>, bool)> = vec![
            (vec![("if-none-match", "\"abc\"".into())], true),
            (vec![("if-none-match", "W/\"abc\"".into())], true),
            (vec![("if-none-match", "\"x\", \"abc\"".into())], true),
            (vec![("if-none-match", "*".into())], true),
            (vec![("if-none-match", "\"x\"".into())], false),
            (vec![("if-modified-since", fmt_http_date(lm))], true),
            (
                vec![(
                    "if-modified-since",
                    fmt_http_date(lm - Duration::from_secs(1)),
                )],
                false,
            ),
            (vec![("if-modified-since", "garbage".into())], false),
            // If-None-Match wins over If-Modified-Since.
            (
                vec![
                    ("if-none-match", "\"x\"".into()),
                    ("if-modified-since", fmt_http_date(lm)),
                ],
                false,
            ),
            (vec![], false),
        ];
        for (h, want) in cases {
            let h: Vec<(&str, &str)> = h.iter().map(|(a, b)| (*a, b.as_str())).collect();
            assert_eq!(not_modified(&m, &req(&h)), want, "{h:?}");
        }
    }

    #[test]
    fn range_table() {
        let m = meta();
        use RangeOutcome::*;
        let cases: Vec<(&str, RangeOutcome)> = vec![
            ("bytes=0-9", Partial(vec![0..10])),
            ("bytes=90-", Partial(vec![90..100])),
            ("bytes=-10", Partial(vec![90..100])),
            ("bytes=-1000", Partial(vec![0..100])),
            ("bytes=95-200", Partial(vec![95..100])),
            ("bytes=0-0, 10-19", Partial(vec![0..1, 10..20])),
            ("bytes=100-", Unsatisfiable),
            ("bytes=100-200, 300-", Unsatisfiable),
            ("bytes=100-200, 5-6", Partial(vec![5..7])),
            ("bytes=5-4", Full),
            ("bytes=a-b", Full),
            ("items=0-1", Full),
            ("bytes=", Full),
            ("bytes=0-10, 5-20", Full), // overlap
            ("bytes=99999999999999999999999-", Full),
        ];
        for (spec, want) in cases {
            assert_eq!(
                evaluate_range(&m, &req(&[("range", spec)]), 100),
                want,
                "{spec}"
            );
        }
        let many: Vec<String> = (0..20).map(|i| format!("{}-{}", i * 2, i * 2)).collect();
        let spec = format!("bytes={}", many.join(","));
        assert_eq!(evaluate_range(&m, &req(&[("range", &spec)]), 100), Full);
        assert_eq!(evaluate_range(&m, &req(&[]), 100), Full);
    }

    #[test]
    fn if_range() {
        let m = meta();
        let lm = fmt_http_date(m.last_modified.unwrap());
        let r =
            |ir: &str| evaluate_range(&m, &req(&[("range", "bytes=0-1"), ("if-range", ir)]), 10);
        assert_eq!(r("\"abc\""), RangeOutcome::Partial(vec![0..2]));
        assert_eq!(
            r("W/\"abc\""),
            RangeOutcome::Full,
            "weak tags never match If-Range"
        );
        assert_eq!(r("\"old\""), RangeOutcome::Full);
        assert_eq!(r(&lm), RangeOutcome::Partial(vec![0..2]));
        assert_eq!(r("Thu, 01 Jan 1970 00:00:00 GMT"), RangeOutcome::Full);
    }

    #[test]
    fn multipart_layout_lengths_add_up() {
        let m = meta();
        let (parts, tail, total) = multipart_layout(&m, &[0..1, 10..20], 100, "B0UND");
        assert_eq!(parts.len(), 2);
        let head = String::from_utf8(parts[1].head.clone()).unwrap();
        assert_eq!(
            head,
            "\r\n--B0UND\r\nContent-Type: text/plain\r\nContent-Range: bytes 10-19/100\r\n\r\n"
        );
        assert_eq!(tail, b"\r\n--B0UND--\r\n");
        let sum: u64 = parts
            .iter()
            .map(|p| p.head.len() as u64 + p.range.end - p.range.start)
            .sum::<u64>()
            + tail.len() as u64;
        assert_eq!(total, sum);
        assert_eq!(block_header(&m.header_block, "etag"), Some(&b"\"abc\""[..]));
        assert_eq!(block_header(&m.header_block, "x"), None);
    }
}
