//! Property-style robustness tests: random and mutated bytes thrown at every parser.
//!
//! The `fuzz/` cargo-fuzz targets do the same with coverage guidance; these run on every
//! `cargo test` with a fixed-seed PRNG, so they are deterministic and need no nightly.
//! They assert no panic and the invariants the server relies on (a head never claims
//! more bytes than it was given; a decoder never hands out bytes it was not given).

use crate::body::tests::feed;
use crate::testutil::Rng;
use crate::{parse_request, parse_response, BodyDecoder, BodyKind, Limits, Method};

const ITERATIONS: usize = 20_000;

/// Bytes that matter to HTTP framing, to make random inputs interesting.
const ALPHABET: &[u8] = b"\r\n :;,\t0123456789abcdefABCDEF/?#HTTP/1.1 GET chunked Content-Length Transfer-Encoding Host\x00\x7f\xff";

fn seeds() -> Vec<&'static [u8]> {
    let mut v: Vec<&'static [u8]> = Vec::new();
    v.extend_from_slice(crate::request::tests::VALID);
    v.extend_from_slice(crate::response::tests::VALID);
    v.push(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\n");
    v
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let pick = |rng: &mut Rng| {
            if rng.below(2) == 0 {
                ALPHABET[rng.below(ALPHABET.len())]
            } else {
                rng.next_u64() as u8
            }
        };
        match rng.below(5) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] = pick(rng);
            }
            1 => {
                let i = rng.below(out.len() + 1);
                let b = pick(rng);
                out.insert(i, b);
            }
            2 if !out.is_empty() => {
                let i = rng.below(out.len());
                out.remove(i);
            }
            3 if !out.is_empty() => {
                let i = rng.below(out.len());
                let j = (i + rng.below(16)).min(out.len());
                let dup: Vec<u8> = out[i..j].to_vec();
                let k = rng.below(out.len() + 1);
                out.splice(k..k, dup);
            }
            _ => {
                let n = rng.below(out.len() + 1);
                out.truncate(n);
            }
        }
    }
    out
}

fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    let len = rng.below(200);
    (0..len)
        .map(|_| {
            if rng.below(4) == 0 {
                rng.next_u64() as u8
            } else {
                ALPHABET[rng.below(ALPHABET.len())]
            }
        })
        .collect()
}

fn inputs(seed: u64) -> impl Iterator<Item = Vec<u8>> {
    let mut rng = Rng::new(seed);
    let seeds = seeds();
    (0..ITERATIONS).map(move |i| {
        if i % 4 == 0 {
            random_bytes(&mut rng)
        } else {
            let s = seeds[rng.below(seeds.len())];
            mutate(&mut rng, s)
        }
    })
}

#[test]
fn request_parser_never_panics_and_keeps_invariants() {
    let small = Limits {
        max_request_line: 24,
        max_header_bytes: 64,
        max_headers: 3,
        max_body: Some(4),
    };
    for input in inputs(1) {
        for limits in [Limits::default(), small] {
            if let Ok(Some((head, n))) = parse_request(&input, &limits) {
                assert!(n <= input.len());
                assert!(n <= limits.max_header_bytes);
                assert_ne!(head.body, BodyKind::CloseDelimited);
                // The head alone parses to the same length.
                let again = parse_request(&input[..n], &limits).unwrap().unwrap();
                assert_eq!(again.1, n);
                // Accessors are total.
                let _ = (
                    head.path(),
                    head.query(),
                    head.host(),
                    head.path_and_query(),
                );
            }
        }
    }
}

#[test]
fn response_parser_never_panics() {
    for input in inputs(2) {
        for m in [Method::Get, Method::Head] {
            if let Ok(Some((_, n))) = parse_response(&input, &Limits::default(), &m) {
                assert!(n <= input.len());
            }
        }
    }
}

#[test]
fn body_decoder_never_panics_and_stays_in_bounds() {
    let mut rng = Rng::new(3);
    for input in inputs(3) {
        for kind in [
            BodyKind::Chunked,
            BodyKind::Length(17),
            BodyKind::CloseDelimited,
        ] {
            let mut dec = BodyDecoder::new(kind, Some(64));
            // `feed` asserts the bounds; whatever the input, it ends in Ok or Err.
            if feed(&mut dec, &input, || 1 + rng.below(8)).is_ok() {
                let _ = dec.on_eof();
            }
        }
    }
}

/// Bytes that matter to `Range`, `If-Range` and entity-tag lists.
const RANGE_ALPHABET: &[u8] = b"bytesBYTES=-,, \t0123456789\"W/*";

fn range_value(rng: &mut Rng) -> Vec<u8> {
    let mut v = match rng.below(3) {
        0 => b"bytes=".to_vec(),
        1 => Vec::new(),
        _ => b"BYTES = ".to_vec(),
    };
    for _ in 0..rng.below(48) {
        v.push(match rng.below(16) {
            0 => rng.next_u64() as u8,
            _ => RANGE_ALPHABET[rng.below(RANGE_ALPHABET.len())],
        });
    }
    v
}

fn any_size(rng: &mut Rng) -> u64 {
    match rng.below(4) {
        0 => rng.below(4) as u64,
        1 => rng.below(100) as u64,
        2 => u64::MAX - rng.below(3) as u64,
        _ => rng.next_u64(),
    }
}

#[test]
fn range_parser_never_panics_and_stays_in_bounds() {
    use crate::{
        evaluate_preconditions, evaluate_range, parse_range, HeaderMap, MultipartLayout,
        RangeOutcome, Recipient, Validators, MAX_RANGES,
    };
    let mut rng = Rng::new(4);
    for _ in 0..ITERATIONS {
        let value = range_value(&mut rng);
        let size = any_size(&mut rng);
        let outcome = parse_range(&value, size);
        if let RangeOutcome::Partial(set) = outcome {
            assert!(!set.is_empty() && set.len() <= MAX_RANGES);
            for r in set.iter() {
                assert!(r.first() <= r.last() && r.last() < size, "{r:?} of {size}");
            }
            assert!(set.total_len() <= size);
            let m = MultipartLayout::new(&set, size, Some(b"a/b"), "x");
            let sum = m
                .parts()
                .map(|p| (p.head.len() as u64).saturating_add(p.range.len()))
                .fold(m.tail().len() as u64, u64::saturating_add);
            assert_eq!(m.content_length(), sum);
        }
        // The same bytes as validators and conditionals: total, and Range only on GET.
        let mut h = HeaderMap::new();
        h.append("Range", value.clone());
        h.append("If-Range", range_value(&mut rng));
        h.append("If-None-Match", range_value(&mut rng));
        h.append("If-Match", range_value(&mut rng));
        let etag = range_value(&mut rng);
        let v = Validators {
            etag: Some(&etag),
            last_modified: None,
        };
        let _ = evaluate_preconditions(&Method::Get, &h, &v, Recipient::OriginServer);
        let got = evaluate_range(&Method::Get, &h, &v, size);
        if let RangeOutcome::Partial(set) = got {
            assert_eq!(got, outcome);
            assert!(set.iter().all(|r| r.last() < size));
        }
    }
}
