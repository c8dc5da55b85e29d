//! Sizes and durations as experiment files and the command line write them
//! ("192m", "500ms"), and durations as the plan's JSON writes them (seconds).

use std::time::Duration;

use super::MAX_CELL;

pub(super) mod opt_secs {
    pub fn serialize<S: serde::Serializer>(
        d: &Option<std::time::Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }
}

/// Parses "192m", "4k", "1g", "512" (binary suffixes k/m/g/t, case-insensitive,
/// optional "b"/"ib"). Zero is refused.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (num, shift) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 10),
        Some('m') => (&t[..t.len() - 1], 20),
        Some('g') => (&t[..t.len() - 1], 30),
        Some('t') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad size {s:?} (use 4k, 192m, 1g)"))?;
    if n == 0 {
        return Err(format!("size {s:?} must be more than zero"));
    }
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// The first path segment that reads as a size with a unit: `/obj/256k/{id}` → 262144.
pub fn guess_object_size(path: &str) -> Option<u64> {
    path.split('/')
        .filter(|seg| {
            seg.len() > 1
                && seg.as_bytes()[0].is_ascii_digit()
                && seg.ends_with(|c: char| "kKmMgG".contains(c))
        })
        .find_map(|seg| parse_size(seg).ok())
}

pub(super) mod secs {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

/// Parses "500ms", "2s", "1.5s", "3m", "1h" (a bare number means seconds).
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let t = s.trim();
    let (num, mult_ms) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3_600_000.0)
    } else {
        (t, 1000.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad duration {s:?} (use 500ms, 2s, 3m)"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("bad duration {s:?}"));
    }
    let d = Duration::from_secs_f64(v * mult_ms / 1000.0);
    if d > MAX_CELL {
        return Err(format!(
            "duration {s:?} is over the {}s limit",
            MAX_CELL.as_secs()
        ));
    }
    Ok(d)
}
