//! The PROXY protocol header (HAProxy's `proxy-protocol.txt`, versions 1 and 2): what a
//! load balancer in front of us sends first on a connection to say whose it is.
//!
//! How it fits: a listener with `proxy_protocol = true` reads the connection's first
//! bytes and hands them to [`parse`] until it returns [`Parsed::Done`]; exactly
//! `consumed` bytes belong to the header, and whatever follows is the client's TLS or
//! HTTP. The parser never looks past the header's end, so the caller may peek at the
//! socket and consume only the header. Sans-I/O: no socket, no clock.
//!
//! Strict, as the specification asks of a receiver: version 1 is one line of single
//! spaces, canonical addresses and ports and a CRLF within [`V1_MAX`] bytes; version 2
//! has its signature, version 2, a known command, family and transport, an address
//! block that fits its length, and TLVs (skipped) that fill the rest exactly. Anything
//! else is an [`Error`], and the connection must be closed: a header is never guessed
//! at, and a connection without one is not served.
//!
//! Incremental: for any input, `parse` of a prefix is either [`Parsed::Incomplete`] or
//! the same result as `parse` of the whole (the fuzz target `proxy_protocol` checks
//! it), so re-parsing a growing buffer is safe.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Longest version 1 header, CRLF included (spec 2.1: "107 bytes").
pub const V1_MAX: usize = 107;
/// Shortest version 1 header: `PROXY UNKNOWN\r\n`.
pub const V1_MIN: usize = 15;
/// The fixed part of a version 2 header: signature, version and command, family and
/// transport, and the 16-bit length of what follows.
pub const V2_FIXED: usize = 16;
/// Longest version 2 header the format can express (a 16-bit length): the caller bounds
/// it further with the `max_len` of [`parse`].
pub const V2_MAX: usize = V2_FIXED + u16::MAX as usize;
/// The version 2 signature (spec 2.2).
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

const V1_PREFIX: &[u8] = b"PROXY ";

/// A complete header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The version: 1 (text) or 2 (binary).
    pub version: u8,
    /// The relayed connection's source (the client) and destination, or None where the
    /// header carries no usable address: version 1 `UNKNOWN`, version 2 `LOCAL` (the
    /// proxy's own connection, a health check) or an `AF_UNIX` / `AF_UNSPEC` family.
    /// The receiver then uses the connection's own endpoints.
    pub addrs: Option<Addrs>,
    /// Bytes of the input that are the header; what follows is the client's.
    pub consumed: usize,
}

/// The addresses of a relayed TCP (or UDP) connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addrs {
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

/// The outcome of [`parse`] on the bytes received so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A valid beginning: read more (the header is at least one byte longer).
    Incomplete,
    Done(Header),
}

/// Why the bytes are not a PROXY header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Neither the version 1 `PROXY ` nor the version 2 signature.
    NotProxy,
    /// Longer than `max_len` (or than [`V1_MAX`] without its CRLF).
    TooLong,
    /// A malformed version 1 line: which part.
    V1(&'static str),
    /// A malformed version 2 header: which part.
    V2(&'static str),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NotProxy => f.write_str("no PROXY protocol header"),
            Error::TooLong => f.write_str("PROXY protocol header too long"),
            Error::V1(what) => write!(f, "PROXY protocol v1: bad {what}"),
            Error::V2(what) => write!(f, "PROXY protocol v2: bad {what}"),
        }
    }
}

impl std::error::Error for Error {}

/// Parses a PROXY header at the start of `buf`, of at most `max_len` bytes (a version 2
/// header may be up to [`V2_MAX`]; version 1 is bounded by [`V1_MAX`] regardless).
pub fn parse(buf: &[u8], max_len: usize) -> Result<Parsed, Error> {
    let Some(&first) = buf.first() else {
        return Ok(Parsed::Incomplete);
    };
    if first == V1_PREFIX[0] {
        parse_v1(buf, max_len)
    } else if first == V2_SIGNATURE[0] {
        parse_v2(buf, max_len)
    } else {
        Err(Error::NotProxy)
    }
}

fn parse_v1(buf: &[u8], max_len: usize) -> Result<Parsed, Error> {
    let limit = V1_MAX.min(max_len);
    let n = V1_PREFIX.len().min(buf.len());
    if buf[..n] != V1_PREFIX[..n] {
        return Err(Error::NotProxy);
    }
    let window = &buf[..buf.len().min(limit)];
    let Some(lf) = memchr::memchr(b'\n', window) else {
        return if buf.len() >= limit {
            Err(Error::TooLong)
        } else {
            Ok(Parsed::Incomplete)
        };
    };
    // The CR before the LF, and nothing before the line's end but printable ASCII.
    let line = match window[..lf].strip_suffix(b"\r") {
        Some(l) if l.len() >= V1_PREFIX.len() => &l[V1_PREFIX.len()..],
        _ => return Err(Error::V1("line end")),
    };
    if line.iter().any(|&b| !(0x20..0x7f).contains(&b)) {
        return Err(Error::V1("character"));
    }
    let consumed = lf + 1;
    let mut fields = line.split(|&b| b == b' ');
    let proto = fields.next().unwrap_or_default();
    let v6 = match proto {
        // "the receiver must ignore anything presented before the CRLF is found"
        b"UNKNOWN" => {
            return Ok(Parsed::Done(Header {
                version: 1,
                addrs: None,
                consumed,
            }))
        }
        b"TCP4" => false,
        b"TCP6" => true,
        _ => return Err(Error::V1("protocol")),
    };
    let (Some(src), Some(dst), Some(sport), Some(dport), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Err(Error::V1("field count"));
    };
    let src = v1_addr(src, v6).ok_or(Error::V1("source address"))?;
    let dst = v1_addr(dst, v6).ok_or(Error::V1("destination address"))?;
    let sport = v1_port(sport).ok_or(Error::V1("source port"))?;
    let dport = v1_port(dport).ok_or(Error::V1("destination port"))?;
    Ok(Parsed::Done(Header {
        version: 1,
        addrs: Some(Addrs {
            src: SocketAddr::new(src, sport),
            dst: SocketAddr::new(dst, dport),
        }),
        consumed,
    }))
}

/// An address of the family the protocol names: dotted quad for TCP4 (Rust's parser
/// takes no leading zeros, no shortened forms), RFC 4291 text for TCP6 (no zone).
fn v1_addr(s: &[u8], v6: bool) -> Option<IpAddr> {
    let s = std::str::from_utf8(s).ok()?;
    if v6 {
        s.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
    } else {
        s.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
    }
}

/// A port: 1 to 5 digits, no leading zero (spec 2.1), at most 65535.
fn v1_port(s: &[u8]) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || (s.len() > 1 && s[0] == b'0') {
        return None;
    }
    let mut n: u32 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u32::from(b - b'0');
    }
    u16::try_from(n).ok()
}

const CMD_LOCAL: u8 = 0x0;
const CMD_PROXY: u8 = 0x1;
const AF_UNSPEC: u8 = 0x0;
const AF_INET: u8 = 0x1;
const AF_INET6: u8 = 0x2;
const AF_UNIX: u8 = 0x3;
const TRANSPORT_UNSPEC: u8 = 0x0;
const TRANSPORT_STREAM: u8 = 0x1;
const TRANSPORT_DGRAM: u8 = 0x2;
/// Address block sizes by family (spec 2.2).
const INET_LEN: usize = 12;
const INET6_LEN: usize = 36;
const UNIX_LEN: usize = 216;

fn parse_v2(buf: &[u8], max_len: usize) -> Result<Parsed, Error> {
    let n = V2_SIGNATURE.len().min(buf.len());
    if buf[..n] != V2_SIGNATURE[..n] {
        return Err(Error::NotProxy);
    }
    // Each fixed byte is judged as soon as it is in, so that a prefix's error is the
    // whole's.
    if let Some(&ver_cmd) = buf.get(12) {
        if ver_cmd >> 4 != 2 {
            return Err(Error::V2("version"));
        }
        if !matches!(ver_cmd & 0xf, CMD_LOCAL | CMD_PROXY) {
            return Err(Error::V2("command"));
        }
    }
    if let Some(&fam) = buf.get(13) {
        if fam >> 4 > AF_UNIX {
            return Err(Error::V2("address family"));
        }
        if fam & 0xf > TRANSPORT_DGRAM {
            return Err(Error::V2("transport protocol"));
        }
    }
    let (Some(&hi), Some(&lo)) = (buf.get(14), buf.get(15)) else {
        return Ok(Parsed::Incomplete);
    };
    let len = usize::from(u16::from_be_bytes([hi, lo]));
    let total = V2_FIXED + len;
    if total > max_len {
        return Err(Error::TooLong);
    }
    if buf.len() < total {
        return Ok(Parsed::Incomplete);
    }
    let body = &buf[V2_FIXED..total];
    let (cmd, fam, transport) = (buf[12] & 0xf, buf[13] >> 4, buf[13] & 0xf);
    let header = |addrs| {
        Ok(Parsed::Done(Header {
            version: 2,
            addrs,
            consumed: total,
        }))
    };
    // LOCAL: the proxy's own connection; the receiver "must ignore the address
    // information" (and so whatever the block holds).
    if cmd == CMD_LOCAL {
        return header(None);
    }
    let need = match fam {
        AF_INET => INET_LEN,
        AF_INET6 => INET6_LEN,
        AF_UNIX => UNIX_LEN,
        _ => 0,
    };
    if body.len() < need {
        return Err(Error::V2("address length"));
    }
    if fam == AF_UNSPEC {
        // Unknown protocol: no address block to find TLVs after.
        return header(None);
    }
    skip_tlvs(&body[need..])?;
    if fam == AF_UNIX || transport == TRANSPORT_UNSPEC {
        return header(None);
    }
    debug_assert!(matches!(transport, TRANSPORT_STREAM | TRANSPORT_DGRAM));
    let addrs = if fam == AF_INET {
        let ip = |o: usize| IpAddr::from([body[o], body[o + 1], body[o + 2], body[o + 3]]);
        let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
        Addrs {
            src: SocketAddr::new(ip(0), port(8)),
            dst: SocketAddr::new(ip(4), port(10)),
        }
    } else {
        let ip = |o: usize| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&body[o..o + 16]);
            IpAddr::from(a)
        };
        let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
        Addrs {
            src: SocketAddr::new(ip(0), port(32)),
            dst: SocketAddr::new(ip(16), port(34)),
        }
    };
    header(Some(addrs))
}

/// Walks the TLVs after the address block (type, 16-bit length, value): they must fill
/// it exactly. Their content is not used (nor a CRC32C checked); the walk is bounded by
/// the block, which `max_len` bounds.
fn skip_tlvs(mut rest: &[u8]) -> Result<(), Error> {
    while !rest.is_empty() {
        if rest.len() < 3 {
            return Err(Error::V2("TLV"));
        }
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]]));
        rest = rest.get(3 + len..).ok_or(Error::V2("TLV length"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 536;

    fn done(buf: &[u8]) -> Header {
        match parse(buf, MAX) {
            Ok(Parsed::Done(h)) => h,
            r => panic!("{:?}: {r:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// Every proper prefix is Incomplete, and the whole is `want` (the shotgun test).
    fn every_prefix(buf: &[u8], want: Result<Parsed, Error>) {
        assert_eq!(parse(buf, MAX), want, "{:?}", String::from_utf8_lossy(buf));
        for k in 0..buf.len() {
            let p = parse(&buf[..k], MAX);
            assert!(
                p == Ok(Parsed::Incomplete) || p == want,
                "prefix {k} of {:?}: {p:?}",
                String::from_utf8_lossy(buf)
            );
        }
    }

    #[test]
    fn v1_tcp4_spec_example() {
        let line = b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n";
        let mut buf = line.to_vec();
        buf.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let h = done(&buf);
        assert_eq!(h.consumed, line.len());
        assert_eq!(h.version, 1);
        assert_eq!(
            h.addrs,
            Some(Addrs {
                src: sa("255.255.255.255:65535"),
                dst: sa("255.255.255.255:65535")
            })
        );
        for k in 0..line.len() {
            assert_eq!(parse(&buf[..k], MAX), Ok(Parsed::Incomplete), "prefix {k}");
        }
    }

    #[test]
    fn v1_tcp6_and_unknown() {
        let h = done(b"PROXY TCP6 2001:db8::1 ::1 56324 443\r\nrest");
        assert_eq!(
            h.addrs,
            Some(Addrs {
                src: sa("[2001:db8::1]:56324"),
                dst: sa("[::1]:443")
            })
        );
        assert_eq!(h.consumed, 38);
        let h = done(b"PROXY UNKNOWN\r\n");
        assert_eq!((h.addrs, h.consumed), (None, V1_MIN));
        // Anything up to the CRLF is ignored after UNKNOWN.
        let h = done(b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n");
        assert_eq!(h.addrs, None);
    }

    #[test]
    fn v1_longest_line_fits_and_one_more_byte_does_not() {
        // The spec's worst case: UNKNOWN with two 39-character addresses and 5-digit
        // ports; TCP6 with the same is 3 bytes shorter.
        let a = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
        let line = format!("PROXY UNKNOWN {a} {a} 65535 65535\r\n");
        assert_eq!(line.len(), V1_MAX);
        every_prefix(line.as_bytes(), done(line.as_bytes()).into());
        let line = format!("PROXY TCP6 {a} {a} 65535 65535\r\n");
        let h = done(line.as_bytes());
        assert_eq!(h.addrs.unwrap().src.port(), 65535);
        every_prefix(line.as_bytes(), h.into());
        let unknown = format!("PROXY UNKNOWN {}\r\n", "x".repeat(V1_MAX - 15));
        assert_eq!(unknown.len(), V1_MAX + 1);
        every_prefix(unknown.as_bytes(), Err(Error::TooLong));
        // A line that never ends.
        assert_eq!(parse(&[b'P'; 200][..], MAX), Err(Error::NotProxy));
        let open = format!("PROXY UNKNOWN {}", "x".repeat(200));
        assert_eq!(parse(open.as_bytes(), MAX), Err(Error::TooLong));
    }

    impl From<Header> for Result<Parsed, Error> {
        fn from(h: Header) -> Self {
            Ok(Parsed::Done(h))
        }
    }

    #[test]
    fn v1_strictness() {
        let bad: &[(&[u8], Error)] = &[
            (b"GET / HTTP/1.1\r\n\r\n", Error::NotProxy),
            (
                b"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
                Error::V1("protocol"),
            ),
            (b"proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n", Error::NotProxy),
            (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", Error::V1("protocol")),
            (
                b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n",
                Error::V1("field count"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n",
                Error::V1("field count"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
                Error::V1("field count"),
            ),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", Error::V1("line end")),
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\r\n",
                Error::V1("character"),
            ),
            (
                b"PROXY TCP4 1.2.3.4\t5.6.7.8 1 2\r\n",
                Error::V1("character"),
            ),
            (
                b"PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n",
                Error::V1("source address"),
            ),
            (
                b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n",
                Error::V1("source address"),
            ),
            (
                b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
                Error::V1("source address"),
            ),
            (
                b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
                Error::V1("source address"),
            ),
            (
                b"PROXY TCP6 ::1 fe80::1%eth0 1 2\r\n",
                Error::V1("destination address"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
                Error::V1("source port"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",
                Error::V1("source port"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n",
                Error::V1("source port"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 1 -2\r\n",
                Error::V1("destination port"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 1 \r\n",
                Error::V1("destination port"),
            ),
            (b"PROXY \r\n", Error::V1("protocol")),
            (b"PROXY\r\n", Error::NotProxy),
        ];
        for (input, want) in bad {
            every_prefix(input, Err(*want));
        }
        // Port 0 is a valid (if odd) port; "0" has no leading zero.
        let h = done(b"PROXY TCP4 1.2.3.4 5.6.7.8 0 80\r\n");
        assert_eq!(h.addrs.unwrap().src.port(), 0);
    }

    fn v2(cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut b = V2_SIGNATURE.to_vec();
        b.push(0x20 | cmd);
        b.push(fam);
        b.extend_from_slice(&(body.len() as u16).to_be_bytes());
        b.extend_from_slice(body);
        b
    }

    fn inet_body() -> Vec<u8> {
        let mut body = vec![192, 0, 2, 7, 10, 0, 0, 1];
        body.extend_from_slice(&50123u16.to_be_bytes());
        body.extend_from_slice(&443u16.to_be_bytes());
        body
    }

    #[test]
    fn v2_inet_and_inet6_with_tlvs() {
        let mut body = inet_body();
        // PP2_TYPE_ALPN "h2" and PP2_TYPE_NOOP of 0 bytes.
        body.extend_from_slice(&[0x01, 0, 2, b'h', b'2', 0x04, 0, 0]);
        let buf = v2(CMD_PROXY, 0x11, &body);
        let want = Header {
            version: 2,
            addrs: Some(Addrs {
                src: sa("192.0.2.7:50123"),
                dst: sa("10.0.0.1:443"),
            }),
            consumed: buf.len(),
        };
        every_prefix(&buf, want.into());
        let mut more = buf.clone();
        more.extend_from_slice(b"\x16\x03\x01");
        assert_eq!(parse(&more, MAX), want.into());

        let mut body6 = Vec::new();
        body6.extend_from_slice(&"2001:db8::7".parse::<Ipv6Addr>().unwrap().octets());
        body6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        body6.extend_from_slice(&1u16.to_be_bytes());
        body6.extend_from_slice(&2u16.to_be_bytes());
        let buf = v2(CMD_PROXY, 0x21, &body6);
        let h = done(&buf);
        assert_eq!(h.addrs.unwrap().src, sa("[2001:db8::7]:1"));
        assert_eq!(h.addrs.unwrap().dst, sa("[::1]:2"));
        // DGRAM is accepted too.
        assert!(done(&v2(CMD_PROXY, 0x22, &body6)).addrs.is_some());
    }

    #[test]
    fn v2_without_an_address() {
        // LOCAL (a health check): whatever the block holds is ignored.
        let h = done(&v2(CMD_LOCAL, 0x11, &inet_body()));
        assert_eq!(h.addrs, None);
        assert_eq!(done(&v2(CMD_LOCAL, 0x00, &[])).addrs, None);
        assert_eq!(done(&v2(CMD_LOCAL, 0x00, b"junk")).addrs, None);
        // PROXY over AF_UNSPEC, AF_UNIX, or an unspecified transport.
        assert_eq!(done(&v2(CMD_PROXY, 0x00, &[])).addrs, None);
        assert_eq!(done(&v2(CMD_PROXY, 0x31, &[0; UNIX_LEN])).addrs, None);
        assert_eq!(done(&v2(CMD_PROXY, 0x10, &inet_body())).addrs, None);
    }

    #[test]
    fn v2_strictness() {
        let body = inet_body();
        let mut cases: Vec<(Vec<u8>, Error)> = vec![
            (v2(0x2, 0x11, &body), Error::V2("command")),
            (v2(0xf, 0x11, &body), Error::V2("command")),
            (v2(CMD_PROXY, 0x41, &body), Error::V2("address family")),
            (v2(CMD_PROXY, 0x13, &body), Error::V2("transport protocol")),
            (
                v2(CMD_PROXY, 0x11, &body[..11]),
                Error::V2("address length"),
            ),
            (v2(CMD_PROXY, 0x21, &body), Error::V2("address length")),
            (v2(CMD_PROXY, 0x31, &body), Error::V2("address length")),
            (
                v2(CMD_PROXY, 0x11, &[&body[..], &[1, 0]].concat()),
                Error::V2("TLV"),
            ),
            (
                v2(CMD_PROXY, 0x11, &[&body[..], &[1, 0, 3, b'x']].concat()),
                Error::V2("TLV length"),
            ),
            (
                v2(CMD_PROXY, 0x11, &[0u8; MAX - V2_FIXED + 1]),
                Error::TooLong,
            ),
        ];
        let mut v1 = v2(CMD_PROXY, 0x11, &body);
        v1[12] = 0x11; // version 1 in a binary header
        cases.push((v1, Error::V2("version")));
        let mut sig = v2(CMD_PROXY, 0x11, &body);
        sig[11] = b'\r';
        cases.push((sig, Error::NotProxy));
        for (input, want) in &cases {
            every_prefix(input, Err(*want));
        }
        // The length field's own bound, whatever the caller allows.
        let big = v2(CMD_PROXY, 0x11, &body);
        assert_eq!(parse(&big, V2_FIXED + 11), Err(Error::TooLong));
        assert_eq!(parse(&big, V2_FIXED + 12), Ok(Parsed::Done(done(&big))));
    }

    #[test]
    fn garbage_is_never_a_header_and_never_panics() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut buf = Vec::new();
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 120) as usize;
            buf.clear();
            // Random bytes after either signature, or none, to reach every branch.
            match x % 3 {
                0 => buf.extend_from_slice(b"PROXY TCP4 "),
                1 => buf.extend_from_slice(&V2_SIGNATURE),
                _ => {}
            }
            let mut y = x;
            for _ in 0..len {
                y = y
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                buf.push((y >> 56) as u8);
            }
            let whole = parse(&buf, MAX);
            if let Ok(Parsed::Done(h)) = whole {
                assert!(h.consumed <= buf.len());
            }
            for k in 0..buf.len() {
                let p = parse(&buf[..k], MAX);
                assert!(p == Ok(Parsed::Incomplete) || p == whole);
            }
        }
    }
}
