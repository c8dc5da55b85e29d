//! Object sizes as people write them: `4k`, `10k`, `1m`, `16m`, `1g`, or plain bytes.
//!
//! How it fits: the URL (`/obj/<size>/<id>`), the `--sizes` flag and the library's
//! [`crate::Options::sizes`] all go through [`parse_size`], so `/obj/1m/7` means the same
//! object everywhere. Suffixes are binary (k = 1024), as in nginx's size syntax.

/// The longest size string we look at; anything longer is not a size (a u64 has at most
/// 20 digits, plus a suffix).
const MAX_SIZE_TEXT: usize = 24;

/// Parses `4k` (4096), `1m` (1 MiB), `16m`, `1g`, `1t`, or plain bytes `1000`.
///
/// Suffixes are case-insensitive and may be followed by `b` or `ib` (`4kb`, `4KiB`).
/// Returns `None` for anything else, including empty strings, signs, fractions and values
/// that overflow `u64`.
pub fn parse_size(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > MAX_SIZE_TEXT {
        return None;
    }
    let digits_end = s
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    if digits_end == 0 {
        return None;
    }
    let n: u64 = s[..digits_end].parse().ok()?;
    let suffix = s[digits_end..].to_ascii_lowercase();
    let unit_text = suffix
        .strip_suffix("ib")
        .or_else(|| suffix.strip_suffix('b'))
        .unwrap_or(&suffix);
    let shift = match unit_text {
        "" if suffix.is_empty() || suffix == "b" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// Formats a size the short way when it is an exact multiple (`1048576` -> `1m`), for
/// logs and reports; [`parse_size`] reads it back.
pub fn format_size(n: u64) -> String {
    for (shift, unit) in [(40, "t"), (30, "g"), (20, "m"), (10, "k")] {
        if n != 0 && n.trailing_zeros() >= shift {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes_and_plain_bytes() {
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("10k"), Some(10240));
        assert_eq!(parse_size("100K"), Some(102400));
        assert_eq!(parse_size("1m"), Some(1 << 20));
        assert_eq!(parse_size("16m"), Some(16 << 20));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("2t"), Some(2 << 40));
        assert_eq!(parse_size("1000"), Some(1000));
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("4kb"), Some(4096));
        assert_eq!(parse_size("4KiB"), Some(4096));
        assert_eq!(parse_size("12b"), Some(12));
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for bad in [
            "",
            "k",
            "-1",
            "+1",
            "1.5m",
            "1x",
            "1kk",
            "1 k",
            " 1",
            "m1",
            "1ib",
            "99999999999999999999",
            "18446744073709551615k",
            "1234567890123456789012345",
        ] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
        assert_eq!(parse_size("18446744073709551615"), Some(u64::MAX));
    }

    #[test]
    fn format_round_trips() {
        for n in [
            0,
            1,
            1000,
            1024,
            4096,
            10240,
            1 << 20,
            3 << 30,
            1 << 40,
            1025,
        ] {
            assert_eq!(parse_size(&format_size(n)), Some(n), "{n}");
        }
        assert_eq!(format_size(1 << 20), "1m");
        assert_eq!(format_size(1000), "1000");
    }
}
