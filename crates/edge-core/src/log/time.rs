//! Calendar formatting for logs without a date library: nginx's `$time_local` form
//! (`21/Nov/2026:03:12:17 +0000`, always UTC here) and ISO-8601 for the error log.

use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// (year, month 1-12, day) from days since 1970-01-01 (Howard Hinnant's civil algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// ((year, month 1-12, day), seconds into that day) of `t` in UTC; before 1970 reads
/// as 1970-01-01 00:00:00.
fn civil(t: SystemTime) -> ((i64, u32, u32), i64) {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    (
        civil_from_days(secs.div_euclid(86_400)),
        secs.rem_euclid(86_400),
    )
}

/// `21/Nov/2026:03:12:17 +0000`.
pub fn time_local(t: SystemTime) -> String {
    let ((y, m, d), s) = civil(t);
    format!(
        "{d:02}/{}/{y}:{:02}:{:02}:{:02} +0000",
        MONTHS[m as usize - 1],
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// `2026-11-21T03:12:17+00:00`.
pub fn time_iso8601(t: SystemTime) -> String {
    let ((y, m, d), s) = civil(t);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}+00:00",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(time_local(UNIX_EPOCH), "01/Jan/1970:00:00:00 +0000");
        // 2026-11-21T03:12:17Z
        let t = UNIX_EPOCH + std::time::Duration::from_secs(1_795_230_737);
        assert_eq!(time_local(t), "21/Nov/2026:03:12:17 +0000");
        assert_eq!(time_iso8601(t), "2026-11-21T03:12:17+00:00");
        // leap day
        let t = UNIX_EPOCH + std::time::Duration::from_secs(951_782_400);
        assert_eq!(time_local(t), "29/Feb/2000:00:00:00 +0000");
    }
}
