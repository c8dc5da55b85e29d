//! Body verification against `X-Checksum` (xxh3-64 in hex, as `edgeorigin` sends it).
//!
//! How it fits: the response parser ([`crate::codec`]) feeds body bytes to a
//! [`BodyCheck`] as they pass through the read buffer (no copy), and turns the result
//! into a [`Verdict`] when the response completes. Only active with `--verify`.

use std::hash::Hasher as _;
use twox_hash::XxHash3_64;

/// Outcome of checking one response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// `--verify` is off.
    Skipped,
    /// The body hashed to the `X-Checksum` value.
    Ok,
    /// The body did not match, or `X-Checksum` was not valid hex.
    Mismatch,
    /// The response had no `X-Checksum` header.
    NoChecksum,
}

/// Parses an `X-Checksum` value: 1 to 16 hex digits (surrounding spaces allowed).
pub fn parse_checksum(value: &[u8]) -> Option<u64> {
    let v = value.trim_ascii();
    if v.is_empty() || v.len() > 16 {
        return None;
    }
    let s = std::str::from_utf8(v).ok()?;
    if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

/// What the header said, for the response being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    Missing,
    Invalid,
    Value(u64),
}

/// Incremental hash of one body. Each body starts a fresh hasher (`twox-hash` has no
/// reset; making one copies its 192-byte default secret into a small allocation).
pub struct BodyCheck {
    hasher: XxHash3_64,
    expected: Expected,
}

impl Default for BodyCheck {
    fn default() -> Self {
        Self::new()
    }
}

impl BodyCheck {
    pub fn new() -> Self {
        BodyCheck {
            hasher: XxHash3_64::new(),
            expected: Expected::Missing,
        }
    }

    /// Starts a new body with the header's value (`None`: header absent).
    pub fn start(&mut self, header: Option<&[u8]>) {
        self.hasher = XxHash3_64::new();
        self.expected = match header {
            None => Expected::Missing,
            Some(v) => parse_checksum(v).map_or(Expected::Invalid, Expected::Value),
        };
    }

    #[inline]
    pub fn update(&mut self, bytes: &[u8]) {
        if matches!(self.expected, Expected::Value(_)) {
            self.hasher.write(bytes);
        }
    }

    pub fn finish(&self) -> Verdict {
        match self.expected {
            Expected::Missing => Verdict::NoChecksum,
            Expected::Invalid => Verdict::Mismatch,
            Expected::Value(v) if self.hasher.finish() == v => Verdict::Ok,
            Expected::Value(_) => Verdict::Mismatch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use twox_hash::XxHash3_64;

    #[test]
    fn checksum_values() {
        assert_eq!(parse_checksum(b"00ff"), Some(255));
        assert_eq!(parse_checksum(b" DEADbeef "), Some(0xdead_beef));
        assert_eq!(parse_checksum(b"ffffffffffffffff"), Some(u64::MAX));
        assert_eq!(parse_checksum(b"1ffffffffffffffff"), None);
        assert_eq!(parse_checksum(b""), None);
        assert_eq!(parse_checksum(b"+1"), None);
        assert_eq!(parse_checksum(b"xyz"), None);
    }

    #[test]
    fn incremental_hash_matches_one_shot() {
        let body: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let hex = format!("{:016x}", XxHash3_64::oneshot(&body));
        let mut c = BodyCheck::new();
        for _ in 0..2 {
            c.start(Some(hex.as_bytes()));
            for part in body.chunks(4093) {
                c.update(part);
            }
            assert_eq!(c.finish(), Verdict::Ok);
        }
        c.start(Some(hex.as_bytes()));
        c.update(&body[1..]);
        assert_eq!(c.finish(), Verdict::Mismatch);
        c.start(Some(b"zz"));
        assert_eq!(c.finish(), Verdict::Mismatch);
        c.start(None);
        assert_eq!(c.finish(), Verdict::NoChecksum);
    }
}
