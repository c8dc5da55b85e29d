//! Body decoder tests: every framing fed whole, one byte at a time and in random splits,
//! plus the table of malformed chunked bodies.

use super::*;
use crate::testutil::Rng;

/// Feeds `input` in pieces chosen by `next_len`, like a connection loop would: append to
/// a buffer, decode while progress is made. Returns (payload, bytes consumed, done).
/// Asserts the decoder never claims bytes it was not given.
pub(crate) fn feed(
    dec: &mut BodyDecoder,
    input: &[u8],
    mut next_len: impl FnMut() -> usize,
) -> Result<(Vec<u8>, usize, bool), ParseError> {
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut consumed_total = 0;
    let mut out = Vec::new();
    loop {
        loop {
            let d = dec.decode(&buf)?;
            assert!(d.consumed <= buf.len() && d.data.len() <= d.consumed);
            out.extend_from_slice(d.data);
            let (consumed, done) = (d.consumed, d.done);
            buf.drain(..consumed);
            consumed_total += consumed;
            if done {
                return Ok((out, consumed_total, true));
            }
            if consumed == 0 {
                break;
            }
        }
        if fed == input.len() {
            return Ok((out, consumed_total, false));
        }
        let n = next_len().clamp(1, input.len() - fed);
        buf.extend_from_slice(&input[fed..fed + n]);
        fed += n;
    }
}

/// (framing, wire bytes, expected payload, bytes of the wire that belong to the body).
fn cases() -> Vec<(BodyKind, Vec<u8>, Vec<u8>, usize)> {
    let chunked = b"5\r\nhello\r\n6;name=val;x\r\n world\r\n0\r\n\r\n".to_vec();
    let chunked_len = chunked.len();
    let with_trailers = b"3\r\nabc\r\n0\r\nX-Sum: 1\r\nY: 2\r\n\r\n".to_vec();
    let twl = with_trailers.len();
    let upper = b"A\r\n0123456789\r\n00\r\n\r\n".to_vec();
    let ul = upper.len();
    let mut pipelined = chunked.clone();
    pipelined.extend_from_slice(b"GET / HTTP/1.1\r\n");
    vec![
        (
            BodyKind::Length(5),
            b"helloNEXT".to_vec(),
            b"hello".to_vec(),
            5,
        ),
        (
            BodyKind::Chunked,
            chunked,
            b"hello world".to_vec(),
            chunked_len,
        ),
        (
            BodyKind::Chunked,
            pipelined,
            b"hello world".to_vec(),
            chunked_len,
        ),
        (BodyKind::Chunked, with_trailers, b"abc".to_vec(), twl),
        (BodyKind::Chunked, upper, b"0123456789".to_vec(), ul),
        (BodyKind::Chunked, b"0\r\n\r\n".to_vec(), vec![], 5),
        (
            BodyKind::Chunked,
            b"1 \t;ext\r\nZ\r\n0\r\n\r\n".to_vec(),
            b"Z".to_vec(),
            17,
        ),
    ]
}

#[test]
fn whole_one_byte_and_random_splits_agree() {
    let mut rng = Rng::new(7);
    for (kind, wire, payload, body_len) in cases() {
        for mode in 0..3 {
            let mut dec = BodyDecoder::new(kind, None);
            let (out, consumed, done) = match mode {
                0 => feed(&mut dec, &wire, || usize::MAX),
                1 => feed(&mut dec, &wire, || 1),
                _ => feed(&mut dec, &wire, || 1 + rng.below(7)),
            }
            .unwrap();
            assert!(done, "{kind:?} mode {mode}");
            assert_eq!(out, payload, "{kind:?} mode {mode}");
            assert_eq!(
                consumed, body_len,
                "{kind:?} mode {mode}: stops at the message end"
            );
            assert_eq!(dec.decoded_len(), payload.len() as u64);
            assert!(dec.is_done());
            assert!(dec.on_eof().is_ok());
        }
    }
}

#[test]
fn data_is_a_subslice_without_copy() {
    let wire = b"5\r\nhello\r\n0\r\n\r\n";
    let mut dec = BodyDecoder::new(BodyKind::Chunked, None);
    let d = dec.decode(wire).unwrap();
    assert_eq!(d.data, b"hello");
    assert_eq!(d.data.as_ptr(), wire[3..].as_ptr());
    assert_eq!((d.consumed, d.done), (8, false));
    let d = dec.decode(&wire[8..]).unwrap();
    assert_eq!((d.consumed, d.data, d.done), (7, &b""[..], true));
}

#[test]
fn empty_and_zero_length_are_done_at_once() {
    for kind in [BodyKind::Empty, BodyKind::Length(0)] {
        let mut dec = BodyDecoder::new(kind, Some(0));
        assert!(dec.is_done());
        let d = dec.decode(b"GET").unwrap();
        assert_eq!((d.consumed, d.data, d.done), (0, &b""[..], true));
    }
}

#[test]
fn close_delimited_ends_at_eof() {
    let mut dec = BodyDecoder::new(BodyKind::CloseDelimited, None);
    let d = dec.decode(b"abc").unwrap();
    assert_eq!((d.consumed, d.data, d.done), (3, &b"abc"[..], false));
    assert!(!dec.is_done());
    dec.on_eof().unwrap();
    assert!(dec.is_done());
    assert_eq!(dec.decoded_len(), 3);
}

#[test]
fn truncation_is_an_error() {
    let mut dec = BodyDecoder::new(BodyKind::Length(10), None);
    dec.decode(b"abc").unwrap();
    assert_eq!(dec.on_eof().unwrap_err().kind, ErrorKind::BadRequest);
    let mut dec = BodyDecoder::new(BodyKind::Chunked, None).upstream();
    dec.decode(b"5\r\nab").unwrap();
    assert_eq!(dec.on_eof().unwrap_err().kind, ErrorKind::BadUpstream);
}

#[test]
fn body_limit() {
    // Content-Length over the limit: refused before any byte is handed out.
    let mut dec = BodyDecoder::new(BodyKind::Length(11), Some(10));
    assert_eq!(
        dec.decode(b"a").unwrap_err().kind,
        ErrorKind::PayloadTooLarge
    );
    // Chunked: refused as soon as a chunk size would cross the limit.
    let mut dec = BodyDecoder::new(BodyKind::Chunked, Some(10));
    let (out, _, done) = feed(&mut dec, b"5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n", || 1).unwrap();
    assert!(done);
    assert_eq!(out, b"helloworld");
    let mut dec = BodyDecoder::new(BodyKind::Chunked, Some(10));
    let err = feed(&mut dec, b"5\r\nhello\r\n6\r\n", || 1).unwrap_err();
    assert_eq!(err.kind, ErrorKind::PayloadTooLarge);
    // Close-delimited.
    let mut dec = BodyDecoder::new(BodyKind::CloseDelimited, Some(2));
    assert_eq!(
        dec.decode(b"abc").unwrap_err().kind,
        ErrorKind::PayloadTooLarge
    );
    // Upstream bodies over the caller's bound are a bad upstream, not a 413.
    let mut dec = BodyDecoder::new(BodyKind::CloseDelimited, Some(2)).upstream();
    assert_eq!(dec.decode(b"abc").unwrap_err().kind, ErrorKind::BadUpstream);
}

#[test]
fn malformed_chunked_table() {
    let long_ext = format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(MAX_CHUNK_LINE));
    let long_zeros = format!("{}1\r\nx\r\n0\r\n\r\n", "0".repeat(MAX_CHUNK_LINE));
    let big_trailer = format!("0\r\nX: {}\r\n\r\n", "t".repeat(MAX_TRAILER_BYTES));
    let table: Vec<(&[u8], ErrorKind)> = vec![
        (b"\r\n", ErrorKind::BadRequest),
        (b"g\r\n", ErrorKind::BadRequest),
        (b"-1\r\n", ErrorKind::BadRequest),
        (b"+1\r\n", ErrorKind::BadRequest),
        (b"0x5\r\nhello\r\n0\r\n\r\n", ErrorKind::BadRequest),
        (b"5\nhello\r\n0\r\n\r\n", ErrorKind::BadRequest),
        (b"5\r\rhello", ErrorKind::BadRequest),
        (b"5\r\nhelloX\r\n", ErrorKind::BadRequest),
        (b"5\r\nhello\rX", ErrorKind::BadRequest),
        (b"5\r\nhello\n0\r\n\r\n", ErrorKind::BadRequest),
        (b"5 x\r\n", ErrorKind::BadRequest),
        (b"5;a\x00b\r\n", ErrorKind::BadRequest),
        (b"5;a\nb\r\n", ErrorKind::BadRequest),
        (b"10000000000000000\r\n", ErrorKind::BadRequest),
        (b"ffffffffffffffff0\r\n", ErrorKind::BadRequest),
        (b"0\r\n\n", ErrorKind::BadRequest),
        (b"0\r\nX: y\n\r\n", ErrorKind::BadRequest),
        (b"0\r\nX: y\rZ", ErrorKind::BadRequest),
        (b"0\r\n\rX", ErrorKind::BadRequest),
        (long_ext.as_bytes(), ErrorKind::BadRequest),
        (long_zeros.as_bytes(), ErrorKind::BadRequest),
        (big_trailer.as_bytes(), ErrorKind::HeadersTooLarge),
    ];
    for (wire, want) in &table {
        for split in [usize::MAX, 1] {
            let mut dec = BodyDecoder::new(BodyKind::Chunked, None);
            let got = feed(&mut dec, wire, || split);
            assert_eq!(
                got.map_err(|e| e.kind),
                Err(*want),
                "{:?} split {split}",
                String::from_utf8_lossy(wire)
            );
            let mut up = BodyDecoder::new(BodyKind::Chunked, None).upstream();
            assert_eq!(
                feed(&mut up, wire, || split).map_err(|e| e.kind),
                Err(ErrorKind::BadUpstream)
            );
        }
    }
}

#[test]
fn biggest_chunk_size_does_not_overflow() {
    let mut dec = BodyDecoder::new(BodyKind::Chunked, None);
    let d = dec.decode(b"ffffffffffffffff\r\nab").unwrap();
    assert_eq!(d.data, b"ab");
    assert_eq!(dec.decoded_len(), 2);
    let mut dec = BodyDecoder::new(BodyKind::Chunked, None);
    dec.decode(b"0000000000000000000000001\r\n").unwrap();
}

#[test]
fn random_chunked_bodies_round_trip() {
    let mut rng = Rng::new(99);
    for _ in 0..200 {
        let mut payload = Vec::new();
        let mut wire = Vec::new();
        for _ in 0..rng.below(6) {
            let len = 1 + rng.below(300);
            let chunk: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            crate::write_chunk_header(&mut wire, len);
            wire.extend_from_slice(&chunk);
            wire.extend_from_slice(b"\r\n");
            payload.extend_from_slice(&chunk);
        }
        wire.extend_from_slice(crate::LAST_CHUNK);
        let mut dec = BodyDecoder::new(BodyKind::Chunked, None);
        let (out, consumed, done) = feed(&mut dec, &wire, || 1 + rng.below(40)).unwrap();
        assert!(done);
        assert_eq!(out, payload);
        assert_eq!(consumed, wire.len());
    }
}
