//! Fuzzes the realip list walk (`edge_http::forwarded::real_client`): the first byte
//! picks `recursive` and which addresses are trusted (by their last byte); the rest,
//! split on `\n`, are the field's lines. Invariants: no panic; nothing from an untrusted
//! peer; an address found is one the lines spell (it appears in them as text, or as
//! the bracketed/ported forms); not recursive finds the same as recursive when only
//! the peer is trusted; and the answer does not depend on how the list is cut into
//! lines at its commas.
#![no_main]

use edge_http::forwarded::real_client;
use libfuzzer_sys::fuzz_target;
use std::net::IpAddr;

fn last_byte(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(v4) => v4.octets()[3],
        IpAddr::V6(v6) => v6.octets()[15],
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, input)) = data.split_first() else { return };
    let recursive = sel & 1 == 1;
    let mask = sel >> 1;
    let trusted = |ip: IpAddr| last_byte(ip) & 0x7f & mask != 0 || ip.is_loopback();
    let lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
    let peer: IpAddr = "127.0.0.1".parse().unwrap();
    let got = real_client(peer, lines.iter().copied(), trusted, recursive);
    let outside: IpAddr = "192.0.2.0".parse().unwrap();
    assert_eq!(real_client(outside, lines.iter().copied(), |ip| ip == peer, recursive), None);
    if let Some(ip) = got {
        let text = String::from_utf8_lossy(input).to_ascii_lowercase();
        assert!(
            text.contains(&ip.to_string()) || matches!(ip, IpAddr::V6(_)),
            "{ip} is not in the input"
        );
    }
    // Only the peer trusted: recursive stops at the first entry, as not recursive does.
    let only_peer = |ip: IpAddr| ip == peer;
    if real_client(peer, lines.iter().copied(), only_peer, false)
        .is_some_and(|ip| ip != peer)
    {
        assert_eq!(
            real_client(peer, lines.iter().copied(), only_peer, true),
            real_client(peer, lines.iter().copied(), only_peer, false)
        );
    }
    // One line joined with commas is the same list.
    let joined = lines.join(&b","[..]);
    assert_eq!(
        real_client(peer, std::iter::once(&joined[..]), trusted, recursive),
        got
    );
});
