//! Fuzzes `BodyDecoder` for every framing. The first byte picks the framing and the split
//! size, so the fuzzer also explores how input is cut across reads; whatever the cuts, the
//! decoded payload must be the same as when the input is fed in one piece.
#![no_main]

use edge_http::{BodyDecoder, BodyKind};
use libfuzzer_sys::fuzz_target;

fn run(kind: BodyKind, input: &[u8], step: usize) -> Result<(Vec<u8>, usize, bool), ()> {
    let mut dec = BodyDecoder::new(kind, Some(1 << 16));
    let mut out = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut used = 0;
    loop {
        loop {
            let d = dec.decode(&buf).map_err(|_| ())?;
            assert!(d.consumed <= buf.len() && d.data.len() <= d.consumed);
            out.extend_from_slice(d.data);
            let (c, done) = (d.consumed, d.done);
            buf.drain(..c);
            used += c;
            if done {
                return Ok((out, used, true));
            }
            if c == 0 {
                break;
            }
        }
        if fed == input.len() {
            return Ok((out, used, false));
        }
        let n = step.min(input.len() - fed);
        buf.extend_from_slice(&input[fed..fed + n]);
        fed += n;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, input)) = data.split_first() else { return };
    let kind = match sel % 3 {
        0 => BodyKind::Chunked,
        1 => BodyKind::Length(u64::from(sel)),
        _ => BodyKind::CloseDelimited,
    };
    let step = 1 + usize::from(sel >> 2);
    let whole = run(kind, input, usize::MAX);
    let split = run(kind, input, step);
    assert_eq!(whole, split, "decoding must not depend on how input is split");
});
