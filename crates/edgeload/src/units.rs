//! Number formatting that matches wrk's report byte for byte (`635.91us`, `56.20k`,
//! `143.23MB`, `10s`).
//!
//! How it fits: [`crate::report`] prints every figure through these helpers, so that
//! scripts written against wrk's output (`awk '/Requests\/sec/ {print $2}'`, unit
//! suffix parsing) read edgeload's output unchanged. The rules mirror wrk's `units.c`:
//! step to the next unit once the amount reaches 85% of the scale, never past the
//! second-to-last unit of the table.

/// A unit ladder: `base` for the raw amount, then `units` for each step of `scale`.
struct Units {
    scale: f64,
    base: &'static str,
    units: &'static [&'static str],
}

const TIME_US: Units = Units {
    scale: 1000.0,
    base: "us",
    units: &["ms", "s"],
};
const TIME_S: Units = Units {
    scale: 60.0,
    base: "s",
    units: &["m", "h"],
};
const BINARY: Units = Units {
    scale: 1024.0,
    base: "",
    units: &["K", "M", "G", "T", "P"],
};
const METRIC: Units = Units {
    scale: 1000.0,
    base: "",
    units: &["k", "M", "G", "T", "P"],
};

fn format_units(n: f64, m: &Units, precision: usize) -> String {
    let mut amt = n;
    let mut unit = m.base;
    let threshold = m.scale * 0.85;
    // Like wrk: the last entry of the table is never reached (it is the sentinel).
    let mut i = 0;
    while i + 1 < m.units.len() && amt >= threshold {
        amt /= m.scale;
        unit = m.units[i];
        i += 1;
    }
    format!("{amt:.precision$}{unit}")
}

/// Bytes with binary prefixes: `143.23M` (the caller appends `B`).
pub fn binary(n: f64) -> String {
    format_units(n, &BINARY, 2)
}

/// Counts with metric prefixes: `56.20k`.
pub fn metric(n: f64) -> String {
    format_units(n, &METRIC, 2)
}

/// Microseconds as `635.91us`, `1.14ms`, `10.10s`, `2.00m`.
pub fn time_us(n: f64) -> String {
    if n >= 1_000_000.0 {
        format_units(n / 1_000_000.0, &TIME_S, 2)
    } else {
        format_units(n, &TIME_US, 2)
    }
}

/// Whole seconds as wrk prints the test length: `10s`, `1m`.
pub fn time_s(n: f64) -> String {
    format_units(n, &TIME_S, 0)
}

/// wrk's `print_units`: right-align `msg` in `width` columns where a unit suffix takes
/// the place of the two trailing pad spaces, so numbers line up across rows.
pub fn padded(msg: &str, width: usize) -> String {
    let b = msg.as_bytes();
    let mut pad: usize = 2;
    if b.last().is_some_and(u8::is_ascii_alphabetic) {
        pad -= 1;
    }
    if b.len() >= 2 && b[b.len() - 2].is_ascii_alphabetic() {
        pad -= 1;
    }
    let w = width - pad;
    format!("{msg:>w$}{}", &"  "[..pad])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_units_follow_wrk() {
        assert_eq!(time_us(635.91), "635.91us");
        assert_eq!(time_us(890.0), "0.89ms");
        assert_eq!(time_us(12_920.0), "12.92ms");
        assert_eq!(time_us(10_100_000.0), "10.10s");
        assert_eq!(time_us(120_000_000.0), "2.00m");
        assert_eq!(time_s(10.0), "10s");
        assert_eq!(time_s(60.0), "1m");
    }

    #[test]
    fn binary_and_metric() {
        assert_eq!(binary(143.23 * 1024.0 * 1024.0), "143.23M");
        assert_eq!(binary(512.0), "512.00");
        assert_eq!(metric(56_200.0), "56.20k");
        assert_eq!(metric(12.0), "12.00");
    }

    #[test]
    fn padding_aligns_unit_suffixes() {
        assert_eq!(padded("635.91us", 8), "635.91us");
        assert_eq!(padded("0.89ms", 10), "    0.89ms");
        assert_eq!(padded("56.20k", 8), " 56.20k ");
        assert_eq!(padded("12.00", 8), " 12.00  ");
    }
}
