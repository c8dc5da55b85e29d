//! HTTP dates (RFC 9110 5.6.7): the per-thread cached `Date` value and parse/format
//! helpers for Last-Modified, If-Modified-Since and Expires.
//!
//! How it fits: every response carries `Date`, so [`http_date_now`] sits on the hot path.
//! Each thread (one per worker) keeps the formatted value of the current second and only
//! re-formats when the second changes; a call costs one `clock_gettime` (vDSO) and a
//! 29-byte copy.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
const IMF_FIXDATE_LEN: usize = 29;

thread_local! {
    /// (unix second, formatted date) of the last refresh; second `u64::MAX` = never.
    static CACHED: Cell<(u64, [u8; IMF_FIXDATE_LEN])> =
        const { Cell::new((u64::MAX, [0; IMF_FIXDATE_LEN])) };
}

/// IMF-fixdate of now, cached per thread and refreshed at most once a second (29 bytes).
/// Used for the Date header on every response.
pub fn http_date_now() -> [u8; IMF_FIXDATE_LEN] {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with(|c| {
        let (at, bytes) = c.get();
        if at == secs {
            return bytes;
        }
        let fresh = format_fixdate(now);
        c.set((secs, fresh));
        fresh
    })
}

/// Formats `t` as an IMF-fixdate into a fixed array.
fn format_fixdate(t: SystemTime) -> [u8; IMF_FIXDATE_LEN] {
    let s = httpdate::fmt_http_date(t);
    let mut out = [b' '; IMF_FIXDATE_LEN];
    let n = s.len().min(IMF_FIXDATE_LEN);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}

/// Parses an HTTP date in any of the three formats RFC 9110 5.6.7 requires recipients to
/// accept (IMF-fixdate, RFC 850, asctime). `None` when invalid.
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(s.trim()).ok()
}

/// Formats a time as an IMF-fixdate (seconds precision).
pub fn fmt_http_date(t: SystemTime) -> String {
    httpdate::fmt_http_date(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn now_is_a_fresh_fixdate() {
        let a = http_date_now();
        let s = std::str::from_utf8(&a).unwrap();
        assert!(s.ends_with(" GMT"), "{s}");
        let parsed = parse_http_date(s).unwrap();
        let diff = SystemTime::now()
            .duration_since(parsed)
            .unwrap_or_else(|e| e.duration());
        assert!(diff < Duration::from_secs(5), "{diff:?}");
        // Cached value is returned again within the same second (or refreshed after it).
        let b = http_date_now();
        let pb = parse_http_date(std::str::from_utf8(&b).unwrap()).unwrap();
        assert!(pb >= parsed);
    }

    #[test]
    fn formats_and_parses() {
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(fmt_http_date(t), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&format_fixdate(t), b"Sun, 06 Nov 1994 08:49:37 GMT");
        for s in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_http_date(s), Some(t), "{s}");
        }
        assert_eq!(parse_http_date("yesterday"), None);
        assert_eq!(parse_http_date(""), None);
    }
}
