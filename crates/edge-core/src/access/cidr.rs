//! Address prefixes (`10.0.0.0/8`, `2001:db8::/32`, a bare address), parsed once and
//! compared as integers.
//!
//! Conventions, shared by every user (`allow`/`deny`, `[[geo]]`, `real_ip.from`,
//! `admin.allow`):
//! - A bare address is a host prefix: `/32` for IPv4, `/128` for IPv6.
//! - Host bits set below the prefix length are accepted and masked off: `10.1.2.3/8` is
//!   `10.0.0.0/8` (nginx accepts it too, with a warning that the low bits are
//!   meaningless).
//! - An IPv4-mapped IPv6 prefix (`::ffff:10.0.0.0/104`, length 96 or more) is stored as
//!   the IPv4 prefix it names (`10.0.0.0/8`), and an IPv4-mapped client address is
//!   compared as IPv4 ([`canonical`]): a dual-stack listener's `::ffff:a.b.c.d` clients
//!   match IPv4 rules.
//! - Whitespace around the address and the length is ignored; nothing else is: no
//!   zone (`%eth0`), no brackets, no leading `+` or zeros beyond what `std` accepts.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest text [`Cidr::parse`] looks at (an IPv6 address with an IPv4 tail and a
/// length is under 50 bytes): longer input is refused before any parsing.
pub const MAX_CIDR_TEXT: usize = 64;

/// An address prefix, host bits masked off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// The network address (its host bits are zero).
    pub addr: IpAddr,
    /// 0..=32 for IPv4, 0..=128 for IPv6.
    pub prefix: u8,
}

/// Why a prefix does not parse; the message quotes the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CidrError(pub String);

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CidrError {}

impl From<CidrError> for String {
    fn from(e: CidrError) -> String {
        e.0
    }
}

/// An address as rules compare it: an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is
/// the IPv4 address; everything else is itself.
#[inline]
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// The mask of an IPv4 prefix length (0..=32).
#[inline]
pub fn mask4(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    }
}

/// The mask of an IPv6 prefix length (0..=128).
#[inline]
pub fn mask6(prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(prefix.min(128)))
    }
}

impl Cidr {
    /// Parses `a.b.c.d[/n]` or `v6[/n]` (see the module doc for the conventions).
    pub fn parse(s: &str) -> Result<Cidr, CidrError> {
        if s.len() > MAX_CIDR_TEXT {
            return Err(CidrError(format!(
                "invalid address {:?}...: longer than {MAX_CIDR_TEXT} bytes",
                truncate(s, MAX_CIDR_TEXT)
            )));
        }
        let (ip, len) = match s.split_once('/') {
            Some((ip, len)) => (ip, Some(len)),
            None => (s, None),
        };
        let addr: IpAddr = ip
            .trim()
            .parse()
            .map_err(|_| CidrError(format!("invalid address {s:?}")))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match len {
            None => max,
            Some(l) => {
                let l = l.trim();
                // Digits only: `u8::from_str` would take a leading `+`.
                if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(CidrError(format!("invalid prefix length in {s:?}")));
                }
                l.parse::<u8>()
                    .ok()
                    .filter(|&p| p <= max)
                    .ok_or_else(|| CidrError(format!("invalid prefix length in {s:?}")))?
            }
        };
        Ok(Cidr::new(addr, prefix))
    }

    /// The prefix of `addr` with `prefix` bits (clamped to the family's width), host
    /// bits masked off; an IPv4-mapped prefix of length 96 or more becomes IPv4.
    pub fn new(addr: IpAddr, prefix: u8) -> Cidr {
        match addr {
            IpAddr::V4(a) => {
                let p = prefix.min(32);
                Cidr {
                    addr: IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask4(p))),
                    prefix: p,
                }
            }
            IpAddr::V6(a) => {
                let p = prefix.min(128);
                match a.to_ipv4_mapped() {
                    Some(v4) if p >= 96 => Cidr::new(IpAddr::V4(v4), p - 96),
                    _ => Cidr {
                        addr: IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask6(p))),
                        prefix: p,
                    },
                }
            }
        }
    }

    /// Whether `ip` (an IPv4-mapped address as IPv4) is inside this prefix.
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(a)) => u32::from(a) & mask4(self.prefix) == u32::from(net),
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                u128::from(a) & mask6(self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }

    /// The first and last address of an IPv4 prefix, as integers.
    pub fn range4(&self) -> Option<(u32, u32)> {
        match self.addr {
            IpAddr::V4(a) => {
                let start = u32::from(a);
                Some((start, start | !mask4(self.prefix)))
            }
            IpAddr::V6(_) => None,
        }
    }

    /// The first and last address of an IPv6 prefix, as integers.
    pub fn range6(&self) -> Option<(u128, u128)> {
        match self.addr {
            IpAddr::V6(a) => {
                let start = u128::from(a);
                Some((start, start | !mask6(self.prefix)))
            }
            IpAddr::V4(_) => None,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// At most `n` bytes of `s`, cut at a character boundary.
fn truncate(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v4_prefixes_bare_addresses_and_host_bits() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert_eq!((c.addr, c.prefix), (ip("10.0.0.0"), 8));
        assert!(c.contains(ip("10.255.1.2")));
        assert!(!c.contains(ip("11.0.0.0")));
        // Host bits are masked off.
        let c = Cidr::parse("10.1.2.3/8").unwrap();
        assert_eq!(c, Cidr::parse("10.0.0.0/8").unwrap());
        assert_eq!(c.to_string(), "10.0.0.0/8");
        // A bare address is /32; /32 is one address.
        let c = Cidr::parse("192.0.2.7").unwrap();
        assert_eq!(c.prefix, 32);
        assert!(c.contains(ip("192.0.2.7")));
        assert!(!c.contains(ip("192.0.2.6")));
        assert_eq!(Cidr::parse("192.0.2.7/32").unwrap(), c);
        // /0 is everything of its family, and nothing of the other.
        let all4 = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all4.contains(ip("255.255.255.255")));
        assert!(all4.contains(ip("0.0.0.0")));
        assert!(!all4.contains(ip("::1")));
        assert_eq!(all4.range4(), Some((0, u32::MAX)));
        assert_eq!(Cidr::parse("1.2.3.4/0").unwrap(), all4);
        // Whitespace around the parts.
        assert_eq!(
            Cidr::parse(" 10.0.0.0 / 8 ").unwrap(),
            Cidr::parse("10.0.0.0/8").unwrap()
        );
    }

    #[test]
    fn v6_prefixes() {
        let c = Cidr::parse("2001:db8::/32").unwrap();
        assert!(c.contains(ip("2001:db8:ffff::1")));
        assert!(!c.contains(ip("2001:db9::")));
        assert!(!c.contains(ip("10.0.0.1")));
        let host = Cidr::parse("::1").unwrap();
        assert_eq!(host.prefix, 128);
        assert!(host.contains(ip("::1")));
        assert!(!host.contains(ip("::2")));
        assert_eq!(Cidr::parse("::1/128").unwrap(), host);
        let all6 = Cidr::parse("::/0").unwrap();
        assert!(all6.contains(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")));
        assert!(!all6.contains(ip("1.2.3.4")), "IPv4 is not in ::/0");
        assert_eq!(all6.range6(), Some((0, u128::MAX)));
        assert_eq!(
            Cidr::parse("2001:db8:1:2:3:4:5:6/48").unwrap().to_string(),
            "2001:db8:1::/48"
        );
        assert_eq!(
            Cidr::parse("2001:db8::/64").unwrap().range6(),
            Some((
                0x2001_0db8_0000_0000_0000_0000_0000_0000,
                0x2001_0db8_0000_0000_ffff_ffff_ffff_ffff
            ))
        );
    }

    #[test]
    fn mapped_addresses_are_ipv4() {
        // A mapped client matches IPv4 prefixes.
        let c = Cidr::parse("127.0.0.0/8").unwrap();
        assert!(c.contains(ip("::ffff:127.0.0.1")));
        assert!(!c.contains(ip("::ffff:128.0.0.1")));
        // A mapped prefix is stored as IPv4.
        let m = Cidr::parse("::ffff:10.0.0.0/104").unwrap();
        assert_eq!(m, Cidr::parse("10.0.0.0/8").unwrap());
        assert!(m.contains(ip("10.9.9.9")));
        assert!(m.contains(ip("::ffff:10.9.9.9")));
        assert_eq!(
            Cidr::parse("::ffff:192.0.2.1").unwrap(),
            Cidr::parse("192.0.2.1/32").unwrap()
        );
        // Shorter than /96 it spans more than the mapped block: it stays IPv6.
        let wide = Cidr::parse("::ffff:0:0/95").unwrap();
        assert!(wide.addr.is_ipv6());
        assert_eq!(canonical(ip("::ffff:1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical(ip("::1")), ip("::1"));
    }

    #[test]
    fn bad_input_is_refused_with_its_text() {
        for (s, says) in [
            ("", "invalid address"),
            ("10.0.0", "invalid address"),
            ("10.0.0.300/8", "invalid address"),
            ("10.0.0.0/33", "invalid prefix length"),
            ("::/129", "invalid prefix length"),
            ("10.0.0.0/", "invalid prefix length"),
            ("10.0.0.0/+8", "invalid prefix length"),
            ("10.0.0.0/-1", "invalid prefix length"),
            ("10.0.0.0/0008", "invalid prefix length"),
            ("10.0.0.0/8/8", "invalid prefix length"),
            ("all", "invalid address"),
            ("[::1]", "invalid address"),
            ("fe80::1%eth0", "invalid address"),
            ("1.2.3.4:80", "invalid address"),
            ("é/8", "invalid address"),
        ] {
            let e = Cidr::parse(s).unwrap_err();
            assert!(e.0.contains(says), "{s:?}: {e}");
            assert!(e.0.contains(&format!("{s:?}")), "{s:?}: {e}");
        }
        let long = "1".repeat(1000);
        assert!(Cidr::parse(&long).unwrap_err().0.contains("longer than"));
        let long_utf8 = "é".repeat(100);
        assert!(Cidr::parse(&long_utf8).is_err());
    }
}
