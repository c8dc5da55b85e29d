//! `--source`: the local addresses client sockets are bound to before they connect, so
//! one machine can play many clients (a per-address rate limit sees one client per
//! address; `127.0.0.0/8` is all loopback on Linux, so `127.0.0.2-127.0.0.254` needs no
//! set-up).
//!
//! How it fits: [`parse`] turns the flag into a [`Sources`] list when the command line is
//! validated ([`crate::cli`]); [`Sources::check_bindable`] makes sure each address is
//! local before any connection starts; [`crate::conn`] asks [`Sources::pick`] for the
//! address of every socket it opens and binds it with [`bind`].
//!
//! Which socket gets which address: socket number `s` (0 for the first, 1 for the first
//! reconnect, ...) of connection `g` (0-based, over all threads) of a run with `C`
//! connections binds address `(g + s·C) mod N`. So the first sockets of the connections
//! take the addresses in order, round robin; with `C` a multiple of `N` every connection
//! keeps its address for the whole run (`-c 50` over 50 addresses: one client per
//! address, each at `R / 50` with `-R R`); otherwise reconnects (`--no-keepalive`) walk
//! every connection over all `N` addresses in turn.
//!
//! Ephemeral ports: a socket bound to an address with port 0 normally takes its port at
//! `bind()`, from the range every destination shares. [`bind`] sets
//! `IP_BIND_ADDRESS_NO_PORT` first, so the port is chosen at `connect()` for the full
//! four-tuple instead: each source address then has the whole ephemeral range towards
//! each server, and N addresses give N times the concurrent connections (and TIME_WAIT
//! sockets) that one address allows.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use socket2::Socket;

/// Most addresses a `--source` list may hold (a /16 of IPv4).
pub const MAX_SOURCES: usize = 65_536;
/// Longest `--source` value accepted.
pub const MAX_SPEC_LEN: usize = 64 * 1024;

/// The parsed `--source` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources {
    /// The flag as given (for the report and the JSON).
    pub spec: String,
    /// The addresses, in the order given (ranges expanded), duplicates kept.
    pub addrs: Vec<IpAddr>,
}

/// Parses `A`, `A-B` (IPv4, inclusive, `A <= B`) and comma lists of them (IPv4 or IPv6
/// single addresses; one family throughout).
pub fn parse(spec: &str) -> Result<Sources, String> {
    if spec.len() > MAX_SPEC_LEN {
        return Err(format!("--source: longer than {MAX_SPEC_LEN} bytes"));
    }
    let mut addrs: Vec<IpAddr> = Vec::new();
    for item in spec.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!(
                "--source {spec:?}: empty item (use A, A-B or A,B,...)"
            ));
        }
        if let Some((a, b)) = item.split_once('-') {
            let a = parse_v4(a.trim(), item)?;
            let b = parse_v4(b.trim(), item)?;
            let (lo, hi) = (u32::from(a), u32::from(b));
            if lo > hi {
                return Err(format!(
                    "--source {item}: the range runs backwards (first address > last)"
                ));
            }
            let n = (hi - lo) as usize + 1;
            if addrs.len() + n > MAX_SOURCES {
                return Err(format!("--source: more than {MAX_SOURCES} addresses"));
            }
            addrs.extend((lo..=hi).map(|v| IpAddr::V4(Ipv4Addr::from(v))));
        } else {
            let ip: IpAddr = item.parse().map_err(|_| {
                format!("--source {item}: not an IP address (use A, A-B or A,B,...)")
            })?;
            if addrs.len() + 1 > MAX_SOURCES {
                return Err(format!("--source: more than {MAX_SOURCES} addresses"));
            }
            addrs.push(ip);
        }
    }
    if let Some(first) = addrs.first() {
        if addrs.iter().any(|a| a.is_ipv4() != first.is_ipv4()) {
            return Err(format!(
                "--source {spec:?}: mixes IPv4 and IPv6 addresses; use one family"
            ));
        }
    }
    if addrs.iter().any(|a| a.is_unspecified() || a.is_multicast()) {
        return Err(format!(
            "--source {spec:?}: unspecified and multicast addresses cannot be bound"
        ));
    }
    Ok(Sources {
        spec: spec.to_string(),
        addrs,
    })
}

fn parse_v4(s: &str, item: &str) -> Result<Ipv4Addr, String> {
    s.parse().map_err(|_| {
        format!("--source {item}: a range is two IPv4 addresses A-B (IPv6: list single addresses)")
    })
}

impl Sources {
    /// How many addresses.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// True when the addresses are IPv4.
    pub fn is_ipv4(&self) -> bool {
        self.addrs.first().is_some_and(IpAddr::is_ipv4)
    }

    /// The address for socket number `socket` of connection `conn` in a run of
    /// `connections` connections: `(conn + socket·connections) mod N`.
    #[inline]
    pub fn pick(&self, conn: usize, socket: u64, connections: usize) -> IpAddr {
        let n = self.addrs.len() as u64;
        let i = (conn as u64 % n + (socket % n) * (connections as u64 % n)) % n;
        self.addrs[i as usize]
    }

    /// Binds a throw-away socket to each distinct address, so that an address this host
    /// does not have is one clear error before the run instead of a connect error per
    /// request. At most [`MAX_SOURCES`] binds, each without a port (nothing is held).
    pub fn check_bindable(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::with_capacity(self.addrs.len());
        for &ip in &self.addrs {
            if !seen.insert(ip) {
                continue;
            }
            let sock = Socket::new(
                socket2::Domain::for_address(SocketAddr::new(ip, 0)),
                socket2::Type::STREAM,
                Some(socket2::Protocol::TCP),
            )
            .map_err(|e| format!("--source: cannot open a socket: {e}"))?;
            bind(&sock, ip).map_err(|e| {
                let hint = if ip.is_loopback() {
                    ""
                } else {
                    " (not an address of this host? 127.0.0.0/8 is all loopback on Linux)"
                };
                format!("--source {ip}: cannot bind: {e}{hint}")
            })?;
        }
        Ok(())
    }
}

/// Binds `sock` (not yet connected) to `ip`, port chosen later by `connect()`
/// (`IP_BIND_ADDRESS_NO_PORT`, Linux 4.2+; where it is missing the kernel picks the port
/// at bind time, as without the option).
pub fn bind(sock: &Socket, ip: IpAddr) -> std::io::Result<()> {
    set_bind_address_no_port(sock);
    sock.bind(&SocketAddr::new(ip, 0).into())
}

#[cfg(target_os = "linux")]
fn set_bind_address_no_port(sock: &Socket) {
    use std::os::fd::AsRawFd;
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from `&one`, a valid, live
    // c_int for the whole call; the descriptor is the socket `sock` owns and keeps open.
    // A failure (an old kernel) only leaves the port to be chosen at bind time.
    let _ = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

#[cfg(not(target_os = "linux"))]
fn set_bind_address_no_port(_sock: &Socket) {}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_singles_and_lists() {
        let s = parse("127.0.0.2-127.0.0.254").unwrap();
        assert_eq!(s.len(), 253);
        assert_eq!(s.addrs[0], v4("127.0.0.2"));
        assert_eq!(s.addrs[252], v4("127.0.0.254"));
        assert!(s.is_ipv4());
        let s = parse("127.0.0.9").unwrap();
        assert_eq!(s.addrs, vec![v4("127.0.0.9")]);
        let s = parse("127.0.0.2, 127.0.0.5-127.0.0.6,127.0.0.3").unwrap();
        assert_eq!(
            s.addrs,
            ["127.0.0.2", "127.0.0.5", "127.0.0.6", "127.0.0.3"].map(v4)
        );
        // Ranges cross octet boundaries.
        let s = parse("10.0.0.255-10.0.1.1").unwrap();
        assert_eq!(s.addrs, ["10.0.0.255", "10.0.1.0", "10.0.1.1"].map(v4));
        let s = parse("::1,fd00::2").unwrap();
        assert_eq!(s.len(), 2);
        assert!(!s.is_ipv4());
        assert_eq!(s.spec, "::1,fd00::2");
    }

    #[test]
    fn bad_specs_are_refused_with_the_reason() {
        let cases = [
            ("", "empty item"),
            ("127.0.0.1,", "empty item"),
            ("127.0.0.300", "not an IP address"),
            ("localhost", "not an IP address"),
            ("127.0.0.9-127.0.0.2", "backwards"),
            ("127.0.0.1-x", "two IPv4 addresses"),
            ("::1-::5", "two IPv4 addresses"),
            ("127.0.0.1,::1", "mixes IPv4 and IPv6"),
            ("0.0.0.0", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("10.0.0.0-10.255.255.255", "more than 65536"),
        ];
        for (spec, want) in cases {
            let e = parse(spec).unwrap_err();
            assert!(e.contains(want), "{spec:?}: {e}");
        }
        // Exactly the bound is fine.
        assert_eq!(parse("10.0.0.0-10.0.255.255").unwrap().len(), MAX_SOURCES);
        assert!(parse(&"1".repeat(MAX_SPEC_LEN + 1))
            .unwrap_err()
            .contains("longer"));
    }

    #[test]
    fn round_robin_over_connections_then_reconnects() {
        let s = parse("127.0.0.2-127.0.0.5").unwrap(); // N = 4
        let idx = |ip: IpAddr| s.addrs.iter().position(|a| *a == ip).unwrap();
        // First sockets: connection g takes address g mod N.
        let first: Vec<_> = (0..6).map(|g| idx(s.pick(g, 0, 6))).collect();
        assert_eq!(first, vec![0, 1, 2, 3, 0, 1]);
        // C a multiple of N: every connection keeps its address.
        for g in 0..8 {
            for sock in 0..5 {
                assert_eq!(idx(s.pick(g, sock, 8)), g % 4);
            }
        }
        // One connection reconnecting (--no-keepalive -c 1) walks over every address.
        let walk: Vec<_> = (0..8).map(|k| idx(s.pick(0, k, 1))).collect();
        assert_eq!(walk, vec![0, 1, 2, 3, 0, 1, 2, 3]);
        // C = 3, N = 4: sockets of all connections in lockstep cover the addresses evenly.
        let mut count = [0u32; 4];
        for k in 0..4 {
            for g in 0..3 {
                count[idx(s.pick(g, k, 3))] += 1;
            }
        }
        assert_eq!(count, [3, 3, 3, 3]);
        // Huge socket numbers do not overflow.
        let _ = s.pick(usize::MAX, u64::MAX, usize::MAX);
    }

    #[test]
    fn loopback_addresses_bind_and_foreign_ones_do_not() {
        parse("127.0.0.2-127.0.0.4")
            .unwrap()
            .check_bindable()
            .unwrap();
        // TEST-NET-1 (RFC 5737) is never configured on a test machine.
        let e = parse("192.0.2.1").unwrap().check_bindable().unwrap_err();
        assert!(e.contains("--source 192.0.2.1: cannot bind"), "{e}");
    }
}
