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
    let s = s.trim();
    httpdate::parse_http_date(s).ok().or_else(|| lenient(s))
}

const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
const LONG_WEEKDAYS: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];
const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

/// The three HTTP-date formats (RFC 9110 5.6.7) as `httpdate` reads them, but with the
/// names in any case and the weekday not checked against the date: recipients SHOULD
/// accept obsolete and sloppy dates. Every other rule holds: a `UTC` zone, a two-digit
/// year in an IMF-fixdate, a missing comma or doubled spaces stay invalid.
fn lenient(s: &str) -> Option<SystemTime> {
    if s.len() > 64 || !s.is_ascii() {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let l = lower.as_str();
    let month = |m: &str| MONTHS.iter().position(|x| *x == m).map(|i| i as u32 + 1);
    let num = |d: &str| -> Option<u32> {
        (!d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())).then(|| d.parse().ok())?
    };
    let time = |t: &str| -> Option<(u32, u32, u32)> {
        let b = t.as_bytes();
        if b.len() != 8 || b[2] != b':' || b[5] != b':' {
            return None;
        }
        Some((num(&t[0..2])?, num(&t[3..5])?, num(&t[6..8])?))
    };
    let (y, mo, d, hms) = if let Some((wd, rest)) = l.split_once(", ") {
        if WEEKDAYS.contains(&wd) {
            // IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
            let p: Vec<&str> = rest.split(' ').collect();
            if p.len() != 5 || p[0].len() != 2 || p[2].len() != 4 || p[4] != "gmt" {
                return None;
            }
            (num(p[2])?, month(p[1])?, num(p[0])?, time(p[3])?)
        } else if LONG_WEEKDAYS.contains(&wd) {
            // RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT`; a two-digit year more than 50
            // years ahead is in the past (RFC 9110 5.6.7).
            let p: Vec<&str> = rest.split(' ').collect();
            let dp: Vec<&str> = p.first()?.split('-').collect();
            if p.len() != 3
                || p[2] != "gmt"
                || dp.len() != 3
                || dp[0].len() != 2
                || dp[2].len() != 2
            {
                return None;
            }
            let yy = num(dp[2])?;
            let now_year = 1970
                + (SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs() / 31_556_952)
                    as u32;
            let mut y = now_year / 100 * 100 + yy;
            if y > now_year + 50 {
                y -= 100;
            }
            (y, month(dp[1])?, num(dp[0])?, time(p[1])?)
        } else {
            return None;
        }
    } else {
        // asctime: `Sun Nov  6 08:49:37 1994`.
        let b = l.as_bytes();
        if b.len() != 24 || b[3] != b' ' || b[7] != b' ' || b[10] != b' ' || b[19] != b' ' {
            return None;
        }
        if !WEEKDAYS.contains(&&l[0..3]) {
            return None;
        }
        let day = l[8..10].trim_start_matches(' ');
        (
            num(&l[20..24])?,
            month(&l[4..7])?,
            num(day)?,
            time(&l[11..19])?,
        )
    };
    let (h, mi, sec) = hms;
    if !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 || !(1970..=9999).contains(&y) {
        return None;
    }
    let days = days_from_civil(y, mo, d)?;
    let secs = days * 86_400 + u64::from(h * 3600 + mi * 60 + sec.min(59));
    Some(UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (None for a day the month lacks).
fn days_from_civil(y: u32, m: u32, d: u32) -> Option<u64> {
    let leap = (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
    let len = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if d > len[(m - 1) as usize] {
        return None;
    }
    let (y, m) = (i64::from(y), i64::from(m));
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    u64::try_from(era * 146_097 + doe - 719_468).ok()
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
    fn obsolete_and_wrong_case_dates_parse() {
        let want = parse_http_date("Thu, 18 Aug 2050 02:01:18 GMT").unwrap();
        for ok in [
            "THU, 18 Aug 2050 02:01:18 GMT",
            "Thu, 18 AUG 2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 02:01:18 gMT",
            "Thursday, 18-Aug-50 02:01:18 GMT",
            "Thu Aug 18 02:01:18 2050",
        ] {
            assert_eq!(parse_http_date(ok), Some(want), "{ok}");
        }
        // The weekday is not checked (8 Aug 2050 is a Monday).
        assert_eq!(
            parse_http_date("Thu Aug  8 02:01:18 2050"),
            parse_http_date("Mon, 08 Aug 2050 02:01:18 GMT")
        );
        assert_eq!(
            parse_http_date("MON, 29 FEB 2044 00:00:00 gmt"),
            Some(UNIX_EPOCH + Duration::from_secs(2_340_316_800))
        );
        for bad in [
            "Thu, 18 Aug 2050 02:01:18 UTC",
            "Thu, 18 Aug 2050 02:01:18 AEST",
            "Thu, 18 Aug 50 02:01:18 GMT",
            "Thu 18 Aug 2050 02:01:18 GMT",
            "Thu, 18  Aug  2050 02:01:18 GMT",
            "Thu, 18-Aug-2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 02.01.18 GMT",
            "Thu, 18 Aug 2050 2:01:18 GMT",
            "0",
            "",
            "thu, 31 Feb 2050 02:01:18 gmt",
            "thu, 18 aug 2050 24:01:18 gmt",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad}");
        }
    }

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
