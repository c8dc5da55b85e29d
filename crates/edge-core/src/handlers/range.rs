//! `Range` (RFC 9110 14) and conditional requests (RFC 9110 13), shared by the static
//! handler and cache hits.

use edge_http::HeaderMap;
use std::time::SystemTime;

/// At most this many ranges in one request; more is answered with the whole body (a
/// defence against requests that ask for thousands of tiny or overlapping parts).
pub const MAX_RANGES: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeSpec {
    /// Serve the whole representation (no Range, an unparseable one, or one we ignore).
    Full,
    /// Inclusive (first, last) byte positions, in request order.
    Partial(Vec<(u64, u64)>),
    /// 416.
    Unsatisfiable,
}

/// Parses a `Range` header value against a representation of `size` bytes.
pub fn parse_range(value: &str, size: u64) -> RangeSpec {
    let Some(spec) = value.trim().strip_prefix("bytes=").or_else(|| {
        let v = value.trim();
        (v.len() > 6 && v[..6].eq_ignore_ascii_case("bytes=")).then(|| &v[6..])
    }) else {
        return RangeSpec::Full; // other units are ignored (RFC 9110 14.2)
    };
    let mut out = Vec::new();
    let mut total: u64 = 0;
    for part in spec.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let Some((a, b)) = part.split_once('-') else {
            return RangeSpec::Full;
        };
        let (a, b) = (a.trim(), b.trim());
        let r = if a.is_empty() {
            // suffix: last n bytes
            let Ok(n) = b.parse::<u64>() else {
                return RangeSpec::Full;
            };
            if n == 0 || size == 0 {
                continue;
            }
            (size.saturating_sub(n), size - 1)
        } else {
            let Ok(first) = a.parse::<u64>() else {
                return RangeSpec::Full;
            };
            let last = if b.is_empty() {
                size.saturating_sub(1)
            } else {
                match b.parse::<u64>() {
                    Ok(l) if l >= first => l.min(size.saturating_sub(1)),
                    _ => return RangeSpec::Full,
                }
            };
            if first >= size {
                continue; // unsatisfiable part
            }
            (first, last)
        };
        total = total.saturating_add(r.1 - r.0 + 1);
        out.push(r);
        if out.len() > MAX_RANGES {
            return RangeSpec::Full;
        }
    }
    if out.is_empty() {
        return RangeSpec::Unsatisfiable;
    }
    if out.len() > 1 && total > size {
        return RangeSpec::Full; // overlapping ranges that add up to more than the whole
    }
    RangeSpec::Partial(out)
}

/// Weak comparison of entity tags (RFC 9110 8.8.3.2): `W/"x"` matches `"x"`.
fn etag_matches_weak(list: &str, etag: &str) -> bool {
    let strip = |t: &str| t.trim().trim_start_matches("W/").to_string();
    let e = strip(etag);
    list.split(',').any(|t| t.trim() == "*" || strip(t) == e)
}

/// True when the request's validators say the client's copy is current: answer 304.
pub fn not_modified(
    req: &HeaderMap,
    etag: Option<&str>,
    last_modified: Option<SystemTime>,
) -> bool {
    if let Some(inm) = req.get_str("if-none-match") {
        return etag.is_some_and(|e| etag_matches_weak(inm, e)) || inm.trim() == "*";
    }
    if let (Some(ims), Some(lm)) = (req.get_str("if-modified-since"), last_modified) {
        if let Some(ims) = edge_http::parse_http_date(ims) {
            return unix_secs(lm) <= unix_secs(ims); // HTTP dates have 1 s resolution
        }
    }
    false
}

/// `If-Range`: true when the range may be applied (validator matches, strongly).
pub fn if_range_ok(req: &HeaderMap, etag: Option<&str>, last_modified: Option<SystemTime>) -> bool {
    let Some(v) = req.get_str("if-range") else {
        return true;
    };
    let v = v.trim();
    if v.starts_with('"') {
        return etag.is_some_and(|e| e == v); // strong comparison only
    }
    match (edge_http::parse_http_date(v), last_modified) {
        (Some(d), Some(lm)) => unix_secs(lm) == unix_secs(d),
        _ => false,
    }
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The multipart/byteranges framing around each part, and the total body length.
pub struct Multipart {
    pub boundary: String,
    /// For each range: the part header that precedes its bytes.
    pub part_heads: Vec<String>,
    pub tail: String,
    pub content_length: u64,
}

impl Multipart {
    pub fn new(ranges: &[(u64, u64)], size: u64, content_type: &str, seed: u64) -> Multipart {
        let boundary = format!("{seed:020}");
        let part_heads: Vec<String> = ranges
            .iter()
            .map(|(a, b)| {
                format!("\r\n--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: bytes {a}-{b}/{size}\r\n\r\n")
            })
            .collect();
        let tail = format!("\r\n--{boundary}--\r\n");
        let content_length = part_heads.iter().map(|h| h.len() as u64).sum::<u64>()
            + ranges.iter().map(|(a, b)| b - a + 1).sum::<u64>()
            + tail.len() as u64;
        Multipart {
            boundary,
            part_heads,
            tail,
            content_length,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(
            parse_range("bytes=0-9", 100),
            RangeSpec::Partial(vec![(0, 9)])
        );
        assert_eq!(
            parse_range("bytes=90-", 100),
            RangeSpec::Partial(vec![(90, 99)])
        );
        assert_eq!(
            parse_range("bytes=-10", 100),
            RangeSpec::Partial(vec![(90, 99)])
        );
        assert_eq!(
            parse_range("bytes=-1000", 100),
            RangeSpec::Partial(vec![(0, 99)])
        );
        assert_eq!(
            parse_range("bytes=50-1000", 100),
            RangeSpec::Partial(vec![(50, 99)])
        );
        assert_eq!(
            parse_range("bytes=0-0,-1", 100),
            RangeSpec::Partial(vec![(0, 0), (99, 99)])
        );
        assert_eq!(parse_range("bytes=100-", 100), RangeSpec::Unsatisfiable);
        assert_eq!(parse_range("bytes=5-1", 100), RangeSpec::Full);
        assert_eq!(parse_range("items=0-1", 100), RangeSpec::Full);
        assert_eq!(parse_range("bytes=abc", 100), RangeSpec::Full);
        assert_eq!(
            parse_range("bytes=0-99,0-99", 100),
            RangeSpec::Full,
            "overlap beyond size"
        );
        let many = format!(
            "bytes={}",
            (0..20)
                .map(|i| format!("{i}-{i}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(parse_range(&many, 100), RangeSpec::Full);
        assert_eq!(parse_range("bytes=-0", 100), RangeSpec::Unsatisfiable);
        assert_eq!(parse_range("bytes=0-", 0), RangeSpec::Unsatisfiable);
    }

    #[test]
    fn conditionals() {
        let mut h = HeaderMap::new();
        h.append("If-None-Match", "\"a\", W/\"b\"");
        assert!(not_modified(&h, Some("\"b\""), None));
        assert!(!not_modified(&h, Some("\"c\""), None));
        let lm = edge_http::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let mut h = HeaderMap::new();
        h.append("If-Modified-Since", "Sun, 06 Nov 1994 08:49:37 GMT");
        assert!(not_modified(&h, None, Some(lm)));
        assert!(!not_modified(
            &h,
            None,
            Some(lm + std::time::Duration::from_secs(1))
        ));
        assert!(
            not_modified(&h, None, Some(lm + std::time::Duration::from_millis(300))),
            "sub-second mtime"
        );
        let mut h = HeaderMap::new();
        h.append("If-Range", "\"x\"");
        assert!(if_range_ok(&h, Some("\"x\""), None));
        assert!(!if_range_ok(&h, Some("W/\"x\""), None));
    }

    #[test]
    fn multipart_length_adds_up() {
        let m = Multipart::new(&[(0, 9), (20, 29)], 100, "text/plain", 42);
        let expect: u64 =
            m.part_heads.iter().map(|h| h.len() as u64).sum::<u64>() + 20 + m.tail.len() as u64;
        assert_eq!(m.content_length, expect);
        assert!(m.tail.contains(&m.boundary));
    }
}
