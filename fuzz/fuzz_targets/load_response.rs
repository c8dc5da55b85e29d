//! Fuzzes edgeload's response reader (head, Content-Length, chunked and close-delimited
//! framing, with and without checksum verification). Servers under test can send
//! anything; the reader must return an error, never panic, and never claim to have
//! consumed more than it was given. The first byte picks verification and how the input
//! is cut across reads.
#![no_main]

use edgeload::codec::{ResponseReader, Step};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, input)) = data.split_first() else { return };
    let mut r = ResponseReader::new(ctl & 1 == 1);
    let step = 1 + (ctl >> 1) as usize;
    let mut buf: Vec<u8> = Vec::new();
    for piece in input.chunks(step) {
        buf.extend_from_slice(piece);
        loop {
            match r.advance(&buf) {
                Ok((n, s)) => {
                    assert!(n <= buf.len());
                    buf.drain(..n);
                    match s {
                        Step::Done(_) => r = ResponseReader::new(ctl & 1 == 1),
                        Step::NeedMore => break,
                    }
                    if buf.is_empty() {
                        break;
                    }
                }
                Err(_) => return,
            }
        }
    }
    let _ = r.eof();
});
