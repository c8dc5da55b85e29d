//! Fuzzes the PROXY protocol header parser (`edge_http::proxy_protocol`). The first byte
//! picks the split size and the length bound; the rest is the connection's first bytes.
//! Invariants: no panic; a header consumes no more than the input and no more than the
//! bound (version 1: 107 bytes) and its addresses are of one family; every prefix parses
//! to Incomplete or to the whole's result; and feeding the input in pieces (re-parsing
//! the growing buffer, as the listener does) ends with the same result as one piece.
#![no_main]

use edge_http::proxy_protocol::{parse, Error, Parsed, V1_MAX, V2_MAX};
use libfuzzer_sys::fuzz_target;

/// Feeds `input` `step` bytes at a time until the parser decides (or the input ends).
fn incremental(input: &[u8], step: usize, max: usize) -> Result<Parsed, Error> {
    let mut fed = 0;
    loop {
        fed = (fed + step).min(input.len());
        let r = parse(&input[..fed], max);
        if r != Ok(Parsed::Incomplete) || fed == input.len() {
            return r;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, input)) = data.split_first() else { return };
    let step = 1 + usize::from(sel & 0x1f);
    let max = match sel >> 5 {
        0 => V2_MAX,
        1 => 16,
        2 => 28,
        3 => 107,
        _ => 536,
    };
    let whole = parse(input, max);
    if let Ok(Parsed::Done(h)) = whole {
        assert!(h.consumed <= input.len() && h.consumed <= max);
        assert!(h.version == 1 || h.version == 2);
        if h.version == 1 {
            assert!(h.consumed <= V1_MAX);
        }
        if let Some(a) = h.addrs {
            assert_eq!(a.src.is_ipv4(), a.dst.is_ipv4());
        }
        // What follows the header does not change it.
        assert_eq!(parse(&input[..h.consumed], max), whole);
    }
    for k in 0..input.len().min(600) {
        let p = parse(&input[..k], max);
        assert!(p == Ok(Parsed::Incomplete) || p == whole, "prefix {k}: {p:?} vs {whole:?}");
    }
    assert_eq!(incremental(input, step, max), whole);
});
