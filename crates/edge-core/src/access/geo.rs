//! Geo tables (`[[geo]]`, nginx's `geo`): networks of both families mapped to string
//! values, looked up by longest prefix, and the `network,value` CSV they are loaded
//! from.
//!
//! Memory: values are interned (a million networks with 250 country codes hold 250
//! strings, packed in one buffer); each family is a flattened range table
//! ([`Table`], [`Ipv6Table`]: about 8 bytes per range for IPv4, 12 for IPv6 up to /64,
//! at most two ranges per network). Loading streams the
//! file line by line: nothing holds the whole text.

use super::cidr::{canonical, Cidr};
use super::ranges::{Ipv6Table, Table};
use std::collections::HashMap;
use std::io::{BufRead, Read};
use std::net::IpAddr;
use std::path::Path;

/// Most networks in one table (file or `ranges`).
pub const MAX_GEO_NETWORKS: usize = 1 << 24;
/// Longest line of a geo file, without its line break.
pub const MAX_GEO_LINE: usize = 4096;
/// Longest value.
pub const MAX_GEO_VALUE: usize = 1024;

/// Networks and their values, ready for lookups.
pub struct GeoTable {
    v4: Table<u32>,
    v6: Ipv6Table,
    /// Every distinct value, back to back; value `i` is `text[ends[i - 1]..ends[i]]`
    /// (`ends[-1]` = 0).
    text: Box<str>,
    ends: Box<[usize]>,
    /// Networks inserted (duplicates included).
    networks: usize,
}

impl std::fmt::Debug for GeoTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeoTable")
            .field("networks", &self.networks)
            .field("values", &self.ends.len())
            .field("v4", &self.v4)
            .field("v6", &self.v6)
            .finish()
    }
}

impl GeoTable {
    /// The value of the longest network that holds `ip` (an IPv4-mapped address is
    /// looked up as IPv4); None when no network does.
    #[inline]
    pub fn lookup(&self, ip: IpAddr) -> Option<&str> {
        let i = match canonical(ip) {
            IpAddr::V4(a) => self.v4.get(u32::from(a)),
            IpAddr::V6(a) => self.v6.get(u128::from(a)),
        }?;
        self.value(i as usize)
    }

    fn value(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.text.get(start..end)
    }

    /// Networks inserted, duplicates included.
    pub fn networks(&self) -> usize {
        self.networks
    }

    /// Distinct values.
    pub fn values(&self) -> usize {
        self.ends.len()
    }

    /// Approximate bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.v4.heap_bytes() + self.v6.heap_bytes() + self.text.len() + self.ends.len() * 8
    }
}

/// Collects networks, then [`GeoBuilder::build`]s the table.
#[derive(Default)]
pub struct GeoBuilder {
    v4: Vec<(u32, u8, u32)>,
    v6: Vec<(u128, u8, u32)>,
    /// Value -> its index.
    interned: HashMap<Box<str>, u32>,
}

impl GeoBuilder {
    /// Adds a network; a later equal network replaces the value of an earlier one.
    pub fn insert(&mut self, net: Cidr, value: &str) -> Result<(), String> {
        if self.len() >= MAX_GEO_NETWORKS {
            return Err(format!("more than {MAX_GEO_NETWORKS} networks"));
        }
        let v = match self.interned.get(value) {
            Some(&v) => v,
            None => {
                // Below `ranges::NONE`: at most MAX_GEO_NETWORKS values.
                let v = self.interned.len() as u32;
                self.interned.insert(value.into(), v);
                v
            }
        };
        match net.addr {
            IpAddr::V4(a) => self.v4.push((u32::from(a), net.prefix, v)),
            IpAddr::V6(a) => self.v6.push((u128::from(a), net.prefix, v)),
        }
        Ok(())
    }

    /// Networks added so far.
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn build(self) -> GeoTable {
        let networks = self.len();
        let mut values: Vec<(u32, Box<str>)> =
            self.interned.into_iter().map(|(k, v)| (v, k)).collect();
        values.sort_unstable_by_key(|(v, _)| *v);
        let mut text = String::with_capacity(values.iter().map(|(_, s)| s.len()).sum());
        let mut ends = Vec::with_capacity(values.len());
        for (_, s) in values {
            text.push_str(&s);
            ends.push(text.len());
        }
        GeoTable {
            v4: Table::build(self.v4),
            v6: Ipv6Table::build(self.v6),
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
            networks,
        }
    }
}

/// A value a geo variable may take: at most [`MAX_GEO_VALUE`] bytes, no control
/// characters (values end up in headers, keys and logs).
pub fn check_value(v: &str) -> Result<(), String> {
    if v.len() > MAX_GEO_VALUE {
        return Err(format!("a value longer than {MAX_GEO_VALUE} bytes"));
    }
    if v.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(format!("value {v:?} holds a control character"));
    }
    Ok(())
}

/// Where a geo file is wrong: its 1-based line and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvError {
    pub line: usize,
    pub message: String,
}

/// Parses `network,value` lines, calling `entry` for each network in order. Blank lines
/// and lines starting with `#` are skipped; spaces around the network and the value are
/// ignored; a value in double quotes loses them (`10.0.0.0/8,"a, b"` is `a, b`; the
/// value is everything after the first comma). Lines end with LF or CRLF. Returns the
/// number of networks.
pub fn parse_csv<R: BufRead>(
    mut r: R,
    mut entry: impl FnMut(Cidr, &str) -> Result<(), String>,
) -> Result<usize, CsvError> {
    let mut buf = Vec::with_capacity(128);
    let mut line = 0usize;
    let mut count = 0usize;
    loop {
        buf.clear();
        let n = (&mut r)
            .take(MAX_GEO_LINE as u64 + 2)
            .read_until(b'\n', &mut buf)
            .map_err(|e| CsvError {
                line: line + 1,
                message: format!("read error: {e}"),
            })?;
        if n == 0 {
            return Ok(count);
        }
        line += 1;
        let err = |message: String| CsvError { line, message };
        let text = match buf.strip_suffix(b"\n") {
            Some(t) => t.strip_suffix(b"\r").unwrap_or(t),
            None => &buf,
        };
        if text.len() > MAX_GEO_LINE {
            return Err(err(format!("line longer than {MAX_GEO_LINE} bytes")));
        }
        let text = text.trim_ascii();
        if text.is_empty() || text[0] == b'#' {
            continue;
        }
        let text = std::str::from_utf8(text).map_err(|_| err("not UTF-8".into()))?;
        let Some((net, value)) = text.split_once(',') else {
            return Err(err(format!("expected network,value, got {text:?}")));
        };
        let net = net.trim();
        let cidr = Cidr::parse(net).map_err(|_| err(format!("bad network {net:?}")))?;
        let value = value.trim();
        let value = match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            Some(inner) => inner,
            None => value,
        };
        check_value(value).map_err(err)?;
        entry(cidr, value).map_err(err)?;
        count += 1;
    }
}

/// Loads a geo file into a table. An error names the file, and the line when there is
/// one: `geo.csv:123: bad network "10.0.0.300/8"`.
pub fn load_csv(path: &Path) -> Result<GeoTable, String> {
    let f =
        std::fs::File::open(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let mut b = GeoBuilder::default();
    parse_csv(std::io::BufReader::with_capacity(1 << 16, f), |net, v| {
        b.insert(net, v)
    })
    .map_err(|e| format!("{}:{}: {}", path.display(), e.line, e.message))?;
    Ok(b.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use edge_rand::SplitMix64;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn table(csv: &str) -> Result<GeoTable, CsvError> {
        let mut b = GeoBuilder::default();
        parse_csv(csv.as_bytes(), |n, v| b.insert(n, v))?;
        Ok(b.build())
    }

    #[test]
    fn csv_lines_comments_quotes_and_line_ends() {
        let t = table(
            "# a comment\n\n  10.0.0.0/8 , internal \r\n10.1.0.0/16,\"lab, west\"\n\
             2001:db8::/32,doc\n::ffff:192.0.2.0/120,mapped\n  # indented comment\n\
             192.0.2.128/25,half\n0.0.0.0/0,\nlast.line.without.newline/0,x",
        );
        let e = t.unwrap_err();
        assert_eq!(e.line, 10);
        assert_eq!(e.message, "bad network \"last.line.without.newline/0\"");
        let t = table(
            "# a comment\n\n  10.0.0.0/8 , internal \r\n10.1.0.0/16,\"lab, west\"\n\
             2001:db8::/32,doc\n::ffff:192.0.2.0/120,mapped\n  # indented comment\n\
             192.0.2.128/25,half\n1.0.0.0/8,\n9.9.9.9,nine",
        )
        .unwrap();
        assert_eq!(t.networks(), 7);
        assert_eq!(t.lookup(ip("10.2.3.4")), Some("internal"));
        assert_eq!(t.lookup(ip("10.1.3.4")), Some("lab, west"));
        assert_eq!(t.lookup(ip("2001:db8::1")), Some("doc"));
        assert_eq!(t.lookup(ip("192.0.2.1")), Some("mapped"));
        assert_eq!(t.lookup(ip("::ffff:192.0.2.1")), Some("mapped"));
        assert_eq!(t.lookup(ip("192.0.2.200")), Some("half"));
        assert_eq!(
            t.lookup(ip("1.2.3.4")),
            Some(""),
            "an empty value is a value"
        );
        assert_eq!(t.lookup(ip("9.9.9.9")), Some("nine"));
        assert_eq!(t.lookup(ip("9.9.9.8")), None);
        assert_eq!(t.lookup(ip("::1")), None);
    }

    #[test]
    fn csv_errors_name_their_line() {
        for (csv, line, says) in [
            (
                "10.0.0.0/8,a\n10.0.0.300/8,b\n",
                2,
                "bad network \"10.0.0.300/8\"",
            ),
            ("10.0.0.0/8 a\n", 1, "expected network,value"),
            ("\n\n10.0.0.0/33,a\n", 3, "bad network \"10.0.0.0/33\""),
            ("10.0.0.0/8,a\u{1}b\n", 1, "control character"),
            ("10.0.0.0/8,a\tb\n", 1, "control character"),
            ("all,x\n", 1, "bad network"),
            (",x\n", 1, "bad network \"\""),
        ] {
            let e = table(csv).unwrap_err();
            assert_eq!(
                (e.line, e.message.contains(says)),
                (line, true),
                "{csv:?}: {e:?}"
            );
        }
        let t = table("10.0.0.0/8,\u{ff}\n").unwrap();
        assert_eq!(
            t.lookup(ip("10.0.0.1")),
            Some("\u{ff}"),
            "UTF-8 beyond ASCII is fine"
        );
        let mut bytes = b"10.0.0.0/8,a\n10.0.0.0/9,".to_vec();
        bytes.push(0xff);
        let mut b = GeoBuilder::default();
        let e = parse_csv(&bytes[..], |n, v| b.insert(n, v)).unwrap_err();
        assert_eq!((e.line, e.message.as_str()), (2, "not UTF-8"));
        let long = format!("10.0.0.0/8,{}\n", "v".repeat(MAX_GEO_LINE));
        let e = table(&long).unwrap_err();
        assert!(e.message.contains("line longer"), "{e:?}");
        let long_value = format!("10.0.0.0/8,{}\n", "v".repeat(MAX_GEO_VALUE + 1));
        assert!(table(&long_value)
            .unwrap_err()
            .message
            .contains("value longer"));
        // A line of exactly the longest length, with CRLF, is fine.
        let exact = format!("10.0.0.0/8,{}", "v".repeat(MAX_GEO_VALUE));
        let exact = format!("{exact}{}\r\n", " ".repeat(MAX_GEO_LINE - exact.len()));
        assert!(table(&exact).is_ok());
    }

    #[test]
    fn values_are_interned_and_later_duplicates_win() {
        let mut b = GeoBuilder::default();
        let codes: Vec<String> = (0..250).map(|i| format!("C{i}")).collect();
        let mut rng = SplitMix64::new(11);
        for i in 0..100_000u32 {
            let net = Cidr::new(IpAddr::V4((i << 8).into()), 24);
            b.insert(net, &codes[rng.below(250) as usize]).unwrap();
        }
        b.insert(Cidr::parse("0.0.1.0/24").unwrap(), "LAST")
            .unwrap();
        let t = b.build();
        assert_eq!(t.values(), 251);
        assert_eq!(t.networks(), 100_001);
        assert_eq!(t.lookup(ip("0.0.1.9")), Some("LAST"));
        assert!(t.text.len() < 251 * 4, "one copy of each value");
    }

    /// Random tables of both families against a scan of the networks: the longest
    /// network that holds the address, the last inserted of equal ones.
    #[test]
    fn lookups_match_a_scan_on_random_tables() {
        let mut rng = SplitMix64::new(0x6e0);
        for round in 0..40 {
            let n = [1usize, 3, 10, 50, 300][round % 5];
            let mut nets: Vec<(Cidr, String)> = Vec::new();
            let mut b = GeoBuilder::default();
            let addr = |rng: &mut SplitMix64| -> IpAddr {
                let x = rng.next_u64();
                match rng.below(3) {
                    0 => IpAddr::V4(((10u32 << 24) | (x as u32 & 0x00ff_f0ff)).into()),
                    1 => IpAddr::V6(
                        ((0x2001_0db8u128 << 96) | u128::from(x & 0xffff_0000_00ff)).into(),
                    ),
                    _ => IpAddr::V6(
                        std::net::Ipv4Addr::from((10u32 << 24) | (x as u32 & 0xff))
                            .to_ipv6_mapped(),
                    ),
                }
            };
            for _ in 0..n {
                let a = addr(&mut rng);
                let len = rng.below(if a.is_ipv4() { 33 } else { 129 }) as u8;
                let net = Cidr::new(a, len);
                let v = format!("v{}", rng.below(6));
                b.insert(net, &v).unwrap();
                nets.push((net, v));
            }
            let t = b.build();
            for _ in 0..2000 {
                let a = addr(&mut rng);
                let want = nets
                    .iter()
                    .filter(|(net, _)| net.contains(a))
                    .fold(None::<(u8, &str)>, |best, (net, v)| match best {
                        Some((l, _)) if l > net.prefix => best,
                        _ => Some((net.prefix, v.as_str())),
                    })
                    .map(|(_, v)| v);
                assert_eq!(t.lookup(a), want, "{a} in {nets:?}");
            }
        }
    }

    #[test]
    fn load_csv_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("geo.csv");
        std::fs::write(&p, "10.0.0.0/8,a\n# ok\n10.0.0.300/8,b\n").unwrap();
        let e = load_csv(&p).unwrap_err();
        assert_eq!(
            e,
            format!("{}:3: bad network \"10.0.0.300/8\"", p.display())
        );
        let e = load_csv(&dir.path().join("missing.csv")).unwrap_err();
        assert!(e.contains("missing.csv: cannot read:"), "{e}");
        std::fs::write(&p, "10.0.0.0/8,a\n").unwrap();
        assert_eq!(load_csv(&p).unwrap().lookup(ip("10.9.9.9")), Some("a"));
    }
}
