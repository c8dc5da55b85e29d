//! Fuzzes the address-prefix parser (`edge_core::access::cidr::Cidr::parse`), the geo
//! file parser (`edge_core::access::geo::parse_csv`), the geo table built from what it
//! parsed, and allow/deny lists. Invariants: no panic; a parsed prefix has no host bits,
//! contains its first and last address, and its text parses back to itself; an error
//! names a line of the input; every network the parser hands over came from a line
//! that is not blank or a comment; the table's longest-prefix lookups and a compiled
//! list's first-match checks agree with plain scans of the networks, at every
//! network's edges and at addresses taken from the input.
#![no_main]

use edge_core::access::cidr::{canonical, Cidr};
use edge_core::access::geo::{parse_csv, GeoBuilder};
use edge_core::access::rules::{AccessList, Action, Matcher, Rule};
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Networks checked against the scans (the scans are quadratic).
const MAX_CHECKED: usize = 200;

fn check_prefix(c: &Cidr) {
    let again = Cidr::parse(&c.to_string()).expect("a prefix's text parses");
    assert_eq!(again, *c);
    assert!(c.contains(c.addr));
    match c.addr {
        IpAddr::V4(a) => {
            let (first, last) = c.range4().unwrap();
            assert_eq!(first, u32::from(a), "host bits masked");
            assert!(c.contains(IpAddr::V4(Ipv4Addr::from(last))));
            assert!(c.contains(IpAddr::V6(Ipv4Addr::from(last).to_ipv6_mapped())));
            assert!(c.prefix <= 32);
        }
        IpAddr::V6(a) => {
            let (first, last) = c.range6().unwrap();
            assert_eq!(first, u128::from(a), "host bits masked");
            assert!(c.contains(IpAddr::V6(Ipv6Addr::from(last))));
            assert!(c.prefix <= 128);
            // A mapped prefix of length 96 or more is stored as IPv4.
            assert!(a.to_ipv4_mapped().is_none() || c.prefix < 96);
        }
    }
}

/// Addresses at and around a network's edges.
fn edges(c: &Cidr, out: &mut Vec<IpAddr>) {
    match c.addr {
        IpAddr::V4(_) => {
            let (first, last) = c.range4().unwrap();
            for a in [first.wrapping_sub(1), first, last, last.wrapping_add(1)] {
                out.push(IpAddr::V4(Ipv4Addr::from(a)));
            }
        }
        IpAddr::V6(_) => {
            let (first, last) = c.range6().unwrap();
            for a in [first.wrapping_sub(1), first, last, last.wrapping_add(1)] {
                out.push(IpAddr::V6(Ipv6Addr::from(a)));
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // Every line alone as a prefix.
    for line in data.split(|&b| b == b'\n').take(64) {
        if let Ok(s) = std::str::from_utf8(line) {
            if let Ok(c) = Cidr::parse(s) {
                check_prefix(&c);
            }
        }
    }

    // The whole input as a geo file.
    let lines = data.split(|&b| b == b'\n').count();
    let mut nets: Vec<(Cidr, String)> = Vec::new();
    let result = parse_csv(data, |c, v| {
        check_prefix(&c);
        assert!(!v.bytes().any(|b| b < 0x20 || b == 0x7f));
        nets.push((c, v.to_string()));
        Ok(())
    });
    match &result {
        Ok(n) => assert_eq!(*n, nets.len()),
        Err(e) => assert!(e.line >= 1 && e.line <= lines, "{e:?} of {lines} lines"),
    }
    nets.truncate(MAX_CHECKED);
    let mut b = GeoBuilder::default();
    for (c, v) in &nets {
        b.insert(*c, v).unwrap();
    }
    let table = b.build();

    // Probes: every network's edges, and addresses spelled by the input's bytes.
    let mut probes = Vec::new();
    for (c, _) in &nets {
        edges(c, &mut probes);
    }
    for chunk in data.chunks(16).take(32) {
        let mut v6 = [0u8; 16];
        v6[..chunk.len()].copy_from_slice(chunk);
        probes.push(IpAddr::V6(Ipv6Addr::from(v6)));
        let mut v4 = [0u8; 4];
        let n = chunk.len().min(4);
        v4[..n].copy_from_slice(&chunk[..n]);
        probes.push(IpAddr::V4(Ipv4Addr::from(v4)));
        probes.push(IpAddr::V6(Ipv4Addr::from(v4).to_ipv6_mapped()));
    }

    // Lists: each network a rule, its action from its value; the last rule `all`
    // when the input says so.
    let mut rules: Vec<Rule<()>> = nets
        .iter()
        .map(|(c, v)| Rule {
            action: if v.len() % 2 == 0 { Action::Allow } else { Action::Deny },
            matcher: Matcher::Net(*c),
        })
        .collect();
    if data.first().is_some_and(|b| b & 1 == 1) {
        rules.push(Rule {
            action: Action::Deny,
            matcher: Matcher::All,
        });
    }
    let list = AccessList::new(rules.clone());

    for ip in probes {
        // Longest prefix; of equal ones the last given.
        let mut best: Option<(u8, &str)> = None;
        for (c, v) in &nets {
            if c.contains(ip) && best.is_none_or(|(len, _)| c.prefix >= len) {
                best = Some((c.prefix, v));
            }
        }
        assert_eq!(table.lookup(ip), best.map(|(_, v)| v), "{ip}");
        assert_eq!(table.lookup(canonical(ip)), table.lookup(ip));
        let want = rules
            .iter()
            .find(|r| match &r.matcher {
                Matcher::All => true,
                Matcher::Net(c) => c.contains(ip),
                Matcher::Var(_) => false,
            })
            .map_or(Action::Allow, |r| r.action);
        assert_eq!(list.check(ip, |_| false), want, "{ip}");
    }
});
