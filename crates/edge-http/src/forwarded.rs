//! The client address a trusted proxy passed on in a request field such as
//! `X-Forwarded-For` (nginx's realip module: `set_real_ip_from`, `real_ip_header`,
//! `real_ip_recursive`).
//!
//! How it fits: the server calls [`real_client`] once per request with the connection's
//! client address, the field's values and which addresses it trusts; the answer is the
//! request's client address (`$remote_addr`). Sans-I/O, bounded by the field's length
//! (which the request head's limit bounds), no allocation.

use std::net::{IpAddr, Ipv6Addr};

/// The client address the field's list names, walking it as nginx does: nothing unless
/// `peer` (who sent us the request) is trusted; then the list's last address (the one
/// the trusted peer added). With `recursive`, while that address is trusted too, the one
/// before it, and so on: the first untrusted address from the right, or the leftmost if
/// all are trusted. An entry that is not an address ends the walk with the last good one
/// (None when it is the rightmost: the field is ignored).
///
/// `values` are the field's lines in order (several lines are one comma-separated list,
/// RFC 9110 5.3). An entry is an IPv4 or IPv6 address, optionally with a port
/// (`192.0.2.1:80`, `[2001:db8::1]:80`); spaces and empty entries are skipped.
pub fn real_client<'a, I>(
    peer: IpAddr,
    values: I,
    trusted: impl Fn(IpAddr) -> bool,
    recursive: bool,
) -> Option<IpAddr>
where
    I: DoubleEndedIterator<Item = &'a [u8]>,
{
    if !trusted(peer) {
        return None;
    }
    let mut found = None;
    for value in values.rev() {
        for entry in value.rsplit(|&b| b == b',') {
            let entry = crate::trim_ows(entry);
            if entry.is_empty() {
                continue;
            }
            let Some(ip) = parse_entry(entry) else {
                return found;
            };
            found = Some(ip);
            if !recursive || !trusted(ip) {
                return found;
            }
        }
    }
    found
}

/// Longest entry looked at: `[` an IPv6 address with an embedded IPv4 `]:65535`.
const MAX_ENTRY: usize = 64;

/// `1.2.3.4`, `1.2.3.4:80`, `::1`, `[::1]`, `[::1]:80` (no zone, no host name).
fn parse_entry(s: &[u8]) -> Option<IpAddr> {
    if s.len() > MAX_ENTRY {
        return None;
    }
    let s = std::str::from_utf8(s).ok()?;
    if let Some(rest) = s.strip_prefix('[') {
        let (ip, tail) = rest.split_once(']')?;
        if !(tail.is_empty() || port(tail.strip_prefix(':')?)) {
            return None;
        }
        return ip.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    let (ip, p) = s.rsplit_once(':')?;
    if !port(p) {
        return None;
    }
    ip.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

fn port(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 5
        && s.bytes().all(|b| b.is_ascii_digit())
        && s.parse::<u16>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Trusts 10.0.0.0/8 and ::1.
    fn trusted(a: IpAddr) -> bool {
        match a {
            IpAddr::V4(v4) => v4.octets()[0] == 10,
            IpAddr::V6(v6) => v6 == Ipv6Addr::LOCALHOST,
        }
    }

    fn walk(peer: &str, values: &[&str], recursive: bool) -> Option<IpAddr> {
        real_client(
            ip(peer),
            values.iter().map(|v| v.as_bytes()),
            trusted,
            recursive,
        )
    }

    #[test]
    fn only_from_a_trusted_peer() {
        assert_eq!(walk("192.0.2.1", &["198.51.100.7"], true), None);
        assert_eq!(walk("192.0.2.1", &["198.51.100.7"], false), None);
        assert_eq!(
            walk("10.1.2.3", &["198.51.100.7"], false),
            Some(ip("198.51.100.7"))
        );
        assert_eq!(walk("::1", &["2001:db8::7"], true), Some(ip("2001:db8::7")));
        assert_eq!(walk("10.1.2.3", &[], true), None);
        assert_eq!(walk("10.1.2.3", &["", " , "], true), None);
    }

    #[test]
    fn recursive_walks_from_the_right_past_trusted_proxies() {
        // client, then two proxies of ours: the client; a forged entry left of the
        // first untrusted one is never reached.
        let xff = ["1.1.1.1, 198.51.100.7, 10.0.0.2", "10.0.0.3"];
        assert_eq!(walk("10.0.0.9", &xff, true), Some(ip("198.51.100.7")));
        // Not recursive: the last entry, trusted or not.
        assert_eq!(walk("10.0.0.9", &xff, false), Some(ip("10.0.0.3")));
        // All trusted: the leftmost.
        assert_eq!(
            walk("10.0.0.9", &["10.0.0.1,10.0.0.2"], true),
            Some(ip("10.0.0.1"))
        );
    }

    #[test]
    fn garbage_ends_the_walk_with_the_last_good_address() {
        assert_eq!(walk("10.0.0.9", &["unknown"], true), None);
        assert_eq!(walk("10.0.0.9", &["1.2.3.4, bogus"], true), None);
        assert_eq!(
            walk("10.0.0.9", &["bogus, 10.0.0.5"], true),
            Some(ip("10.0.0.5"))
        );
        assert_eq!(
            walk("10.0.0.9", &["1.2.3.4, 10.0.0.5 10.0.0.6"], true),
            None,
            "two addresses without a comma are one bad entry"
        );
        assert_eq!(walk("10.0.0.9", &[&"9".repeat(10_000)], true), None);
    }

    #[test]
    fn entries_with_ports_and_brackets() {
        let cases = [
            ("192.0.2.1:8080", Some("192.0.2.1")),
            ("[2001:db8::1]:443", Some("2001:db8::1")),
            ("[2001:db8::1]", Some("2001:db8::1")),
            ("2001:db8::1", Some("2001:db8::1")),
            ("::ffff:192.0.2.1", Some("::ffff:192.0.2.1")),
            ("192.0.2.1:", None),
            ("192.0.2.1:99999", None),
            ("192.0.2.1:+80", None),
            ("[192.0.2.1]", None),
            ("[::1]x", None),
            ("fe80::1%eth0", None),
            ("example.com", None),
            ("192.0.2.01", None),
        ];
        for (entry, want) in cases {
            assert_eq!(walk("10.0.0.9", &[entry], false), want.map(ip), "{entry:?}");
        }
    }
}
