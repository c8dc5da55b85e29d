//! Fuzzes the compression parsers and decoders: `Accept-Encoding` negotiation,
//! `Content-Encoding`, media-type patterns, `Cache-Control: no-transform`, and the three
//! decoders on arbitrary bytes (bodies from an origin are untrusted). The first byte
//! picks the decoder; the rest is split on `\n` into Accept-Encoding lines, a
//! Content-Encoding, a Content-Type and a pattern. Invariants: a chosen coding is one
//! offered and acceptable; without the field, identity; decoding arbitrary bytes never
//! panics and never returns more than its output bound in one call (plus one buffer).
#![no_main]

use edge_compress::codec::Decoder;
use edge_compress::{Accepted, Choice, Coding};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let mut fields: Vec<&[u8]> = rest.split(|&b| b == b'\n').collect();
    let pattern = fields.pop().unwrap_or_default();
    let ct = fields.pop().unwrap_or_default();
    let ce = fields.pop().unwrap_or_default();
    let a = Accepted::parse(fields.iter().copied());
    for offered in [&[Coding::Zstd, Coding::Br, Coding::Gzip][..], &[Coding::Gzip][..], &[]] {
        match a.choose(offered) {
            Choice::Coding(c) => {
                assert!(offered.contains(&c));
                assert!(a.accepts(c));
                assert!(a.present);
            }
            Choice::Identity => {}
        }
    }
    let _ = a.identity_ok();
    let _ = edge_compress::content_encoding([ce]);
    let _ = edge_compress::media_type(ct);
    let p = String::from_utf8_lossy(pattern);
    let _ = edge_compress::valid_type_pattern(&p);
    let _ = edge_compress::no_transform([ct]);

    let coding = [Coding::Gzip, Coding::Br, Coding::Zstd][pick as usize % 3];
    let mut d = Decoder::new(coding).unwrap();
    let mut out = Vec::new();
    let mut input = rest;
    let limit = 4096;
    for _ in 0..1000 {
        if input.is_empty() && !d.pending() {
            break;
        }
        out.clear();
        match d.write(input, &mut out, limit) {
            Ok(n) => {
                assert!(n <= input.len());
                // One call stops at the limit, give or take one internal buffer.
                assert!(out.len() <= limit + 300 * 1024, "{} bytes", out.len());
                input = &input[n..];
            }
            Err(_) => return,
        }
    }
    let _ = d.finish(&mut out);
});
