//! Value types of the config file: durations ("75s", "4d", "500ms", "0") and sizes
//! ("64k", "1m", "1400g"), following nginx's units.
//!
//! How it fits: these deserialize straight from TOML (strings or integers), so a bad value
//! becomes a serde error carrying the value's span, which `config::load` turns into
//! `file:line: key: message`.

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;
use std::time::Duration;

/// A duration as nginx writes it: `500ms`, `30s`, `10m`, `2h`, `4d`, `1w`, or a bare number
/// of seconds. Units may be combined (`1m30s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dur(pub Duration);

/// A byte size as nginx writes it: `512`, `64k`, `1m`, `1400g` (powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Size(pub u64);

/// Parses an nginx-style duration.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(n) = s.parse::<u64>() {
        return Ok(Duration::from_secs(n));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!(
                "invalid duration {s:?}: expected a number like \"30s\""
            ));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("duration {s:?} is too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let d = match unit {
            "ms" => Duration::from_millis(n),
            "s" | "" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86400)),
            "w" => Duration::from_secs(n.saturating_mul(7 * 86400)),
            _ => {
                return Err(format!(
                    "invalid duration {s:?}: unknown unit {unit:?} (use ms, s, m, h, d, w)"
                ))
            }
        };
        total = total
            .checked_add(d)
            .ok_or_else(|| format!("duration {s:?} is too large"))?;
    }
    Ok(total)
}

/// Parses an nginx-style size.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1 << 20),
        Some(b'g' | b'G') => (&s[..s.len() - 1], 1 << 30),
        Some(b't' | b'T') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| {
        format!("invalid size {s:?}: expected a number with an optional k, m, g or t suffix")
    })?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

struct DurVisitor;
impl Visitor<'_> for DurVisitor {
    type Value = Dur;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a duration such as \"30s\", \"10m\" or \"500ms\"")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
        parse_duration(v).map(Dur).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
        u64::try_from(v)
            .map(|s| Dur(Duration::from_secs(s)))
            .map_err(|_| E::custom("a duration cannot be negative"))
    }
}
impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DurVisitor)
    }
}

struct SizeVisitor;
impl Visitor<'_> for SizeVisitor {
    type Value = Size;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a size such as \"64k\", \"1m\" or \"10g\"")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
        parse_size(v).map(Size).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
        u64::try_from(v)
            .map(Size)
            .map_err(|_| E::custom("a size cannot be negative"))
    }
}
impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SizeVisitor)
    }
}

/// A size that may also be `"off"` (as nginx's `directio off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SizeOrOff(pub Option<u64>);

impl<'de> Deserialize<'de> for SizeOrOff {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = SizeOrOff;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as \"4m\", or \"off\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SizeOrOff, E> {
                if v == "off" {
                    return Ok(SizeOrOff(None));
                }
                parse_size(v).map(|n| SizeOrOff(Some(n))).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SizeOrOff, E> {
                u64::try_from(v)
                    .map(|n| SizeOrOff(Some(n)))
                    .map_err(|_| E::custom("a size cannot be negative"))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("75s").unwrap(), Duration::from_secs(75));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(
            parse_duration("4d").unwrap(),
            Duration::from_secs(4 * 86400)
        );
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999999999w").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64k").unwrap(), 65536);
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert_eq!(parse_size("1400g").unwrap(), 1400 << 30);
        assert_eq!(parse_size("512").unwrap(), 512);
        assert!(parse_size("1.5m").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999t").is_err());
    }
}
