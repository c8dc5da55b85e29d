//! Streaming encoders and decoders behind one small interface.
//!
//! How it fits: the server feeds a response body through an [`Encoder`] chunk by chunk
//! (on the event loop, or on the offload pool: encoders are `Send`, and a job takes the
//! encoder and gives it back with the output), and through a [`Decoder`] for a client
//! that cannot take the origin's encoding. Output is appended to a caller's `Vec`, so
//! buffers are reused across chunks.
//!
//! Libraries, chosen by measurement on this machine (docs/compression.md):
//! - gzip: flate2 on zlib-rs (a Rust port of zlib-ng; as fast as zlib-ng, no C build);
//! - br: the `brotli` crate (Rust);
//! - zstd: the `zstd` crate (libzstd, built by cc).

use crate::Coding;
use std::io::{self, Write};

/// Levels per coding, already checked against each library's range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Levels {
    pub gzip: u32,
    pub brotli: u32,
    pub zstd: i32,
}

impl Default for Levels {
    /// gzip 6 and brotli 5 and zstd 3: the variants are stored and served many times,
    /// so a level past the knee of the ratio curve pays off (see docs/compression.md).
    fn default() -> Levels {
        Levels {
            gzip: 6,
            brotli: 5,
            zstd: 3,
        }
    }
}

/// The valid level ranges, for config validation.
pub const GZIP_LEVELS: std::ops::RangeInclusive<i64> = 1..=9;
pub const BROTLI_LEVELS: std::ops::RangeInclusive<i64> = 0..=11;
pub const ZSTD_LEVELS: std::ops::RangeInclusive<i64> = 1..=19;

/// A streaming compressor.
pub struct Encoder {
    inner: EncInner,
    coding: Coding,
}

enum EncInner {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
    Done,
}

/// brotli's window (lgwin): 22 bits, the library's default and what browsers expect.
const BROTLI_WINDOW: u32 = 22;
/// brotli's internal buffer.
const BROTLI_BUFFER: usize = 16 * 1024;

impl Encoder {
    pub fn new(coding: Coding, levels: &Levels) -> io::Result<Encoder> {
        let inner = match coding {
            Coding::Gzip => EncInner::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(levels.gzip.clamp(1, 9)),
            )),
            Coding::Br => EncInner::Br(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                BROTLI_BUFFER,
                levels.brotli.min(11),
                BROTLI_WINDOW,
            ))),
            Coding::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), levels.zstd)?;
                // The content size is not known while streaming; a checksum lets the
                // client detect a corrupt body.
                e.include_checksum(true)?;
                EncInner::Zstd(e)
            }
        };
        Ok(Encoder { inner, coding })
    }

    pub fn coding(&self) -> Coding {
        self.coding
    }

    /// Compresses `input`, appending whatever output the library has ready to `out`.
    pub fn write(&mut self, input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        match &mut self.inner {
            EncInner::Gzip(e) => {
                e.write_all(input)?;
                out.append(e.get_mut());
            }
            EncInner::Br(e) => {
                e.write_all(input)?;
                out.append(e.get_mut());
            }
            EncInner::Zstd(e) => {
                e.write_all(input)?;
                out.append(e.get_mut());
            }
            EncInner::Done => return Err(io::Error::other("encoder already finished")),
        }
        Ok(())
    }

    /// Ends the stream: the rest of the output and the trailer go to `out`.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        match std::mem::replace(&mut self.inner, EncInner::Done) {
            EncInner::Gzip(e) => out.append(&mut e.finish()?),
            EncInner::Br(mut e) => {
                e.flush()?;
                out.append(&mut e.into_inner());
            }
            EncInner::Zstd(e) => out.append(&mut e.finish()?),
            EncInner::Done => return Err(io::Error::other("encoder already finished")),
        }
        Ok(())
    }
}

/// A streaming decompressor with bounded output per call.
pub struct Decoder {
    inner: DecInner,
}

enum DecInner {
    Gzip(Box<flate2::write::MultiGzDecoder<Vec<u8>>>),
    Br(Box<BrotliDecoder>),
    Zstd(Box<ZstdDecoder>),
    Done,
}

/// libzstd's streaming decoder, which says when a frame is complete (its write-side
/// wrapper would not tell a truncated stream from a whole one).
struct ZstdDecoder {
    raw: zstd::stream::raw::Decoder<'static>,
    /// The last call ended exactly at the end of a frame.
    frame_done: bool,
    /// Output may be waiting in the decoder (the last call filled the buffer).
    pending: bool,
    buf: Vec<u8>,
}

impl ZstdDecoder {
    /// Decodes from `input` until it is used up or `out` reaches `limit`; returns the
    /// input taken.
    fn write(&mut self, input: &[u8], out: &mut Vec<u8>, limit: usize) -> io::Result<usize> {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        let mut inb = InBuffer::around(input);
        loop {
            let before = inb.pos();
            let mut ob = OutBuffer::around(&mut self.buf[..]);
            let hint = self.raw.run(&mut inb, &mut ob)?;
            let n = ob.pos();
            out.extend_from_slice(&self.buf[..n]);
            // A call that moved nothing says nothing of the frame (after a frame's end
            // the hint is the next frame's header size).
            if n > 0 || inb.pos() > before {
                self.frame_done = hint == 0;
            }
            // A full buffer may mean more output is waiting inside the decoder.
            self.pending = n == self.buf.len();
            if out.len() >= limit || (inb.pos() == input.len() && !self.pending) {
                return Ok(inb.pos());
            }
        }
    }
}

type BrotliState = brotli::BrotliState<
    brotli::enc::StandardAlloc,
    brotli::enc::StandardAlloc,
    brotli::enc::StandardAlloc,
>;

/// brotli's streaming decoder driven with a bounded output buffer (its `Write`
/// wrapper decodes everything a call brings in one go: 64 bytes can become 40 MB).
struct BrotliDecoder {
    state: BrotliState,
    done: bool,
    /// Output is waiting in the decoder (it stopped at the caller's limit).
    pending: bool,
    buf: Vec<u8>,
}

impl BrotliDecoder {
    /// Decodes from `input` until it is used up, the stream ends, or `out` reaches
    /// `limit`; returns the input taken.
    fn write(&mut self, input: &[u8], out: &mut Vec<u8>, limit: usize) -> io::Result<usize> {
        let mut avail_in = input.len();
        let mut in_off = 0;
        loop {
            let mut avail_out = self.buf.len();
            let mut out_off = 0;
            let mut total = 0;
            let r = brotli::BrotliDecompressStream(
                &mut avail_in,
                &mut in_off,
                input,
                &mut avail_out,
                &mut out_off,
                &mut self.buf,
                &mut total,
                &mut self.state,
            );
            out.extend_from_slice(&self.buf[..out_off]);
            self.pending = false;
            match r {
                brotli::BrotliResult::ResultSuccess => {
                    self.done = true;
                    if avail_in > 0 {
                        return Err(io::Error::other("data after the end of the brotli stream"));
                    }
                    return Ok(in_off);
                }
                brotli::BrotliResult::NeedsMoreInput => return Ok(in_off),
                brotli::BrotliResult::NeedsMoreOutput => {
                    self.pending = true;
                    if out.len() >= limit {
                        return Ok(in_off);
                    }
                }
                brotli::BrotliResult::ResultFailure => {
                    return Err(io::Error::other("corrupt brotli stream"))
                }
            }
        }
    }
}

/// Input fed to the gzip decoder at a time, so that one call cannot expand without
/// bound (a "zip bomb" from the origin): deflate expands at most ~1032:1, so a 256-byte
/// slice yields at most ~264 KiB. brotli and zstd can expand much further (64 bytes of
/// brotli can be 40 MB), so they are driven through their streaming APIs with a bounded
/// output buffer instead.
const GZIP_SLICE: usize = 256;

impl Decoder {
    pub fn new(coding: Coding) -> io::Result<Decoder> {
        let inner = match coding {
            Coding::Gzip => {
                DecInner::Gzip(Box::new(flate2::write::MultiGzDecoder::new(Vec::new())))
            }
            Coding::Br => DecInner::Br(Box::new(BrotliDecoder {
                state: BrotliState::new(
                    brotli::enc::StandardAlloc::default(),
                    brotli::enc::StandardAlloc::default(),
                    brotli::enc::StandardAlloc::default(),
                ),
                done: false,
                pending: false,
                buf: vec![0; 32 * 1024],
            })),
            Coding::Zstd => DecInner::Zstd(Box::new(ZstdDecoder {
                raw: zstd::stream::raw::Decoder::new()?,
                frame_done: false,
                pending: false,
                buf: vec![0; 32 * 1024],
            })),
        };
        Ok(Decoder { inner })
    }

    /// Decompresses `input`, appending to `out`; returns how much input it took. It
    /// stops early once `out` holds `limit` bytes or more, so the caller can send them
    /// first; call again with the rest of the input (an empty slice when all was taken)
    /// while [`Decoder::pending`] says output is waiting.
    pub fn write(&mut self, input: &[u8], out: &mut Vec<u8>, limit: usize) -> io::Result<usize> {
        match &mut self.inner {
            DecInner::Gzip(d) => {
                let mut taken = 0;
                for piece in input.chunks(GZIP_SLICE) {
                    d.write_all(piece)?;
                    out.append(d.get_mut());
                    taken += piece.len();
                    if out.len() >= limit {
                        break;
                    }
                }
                Ok(taken)
            }
            DecInner::Br(d) => d.write(input, out, limit),
            DecInner::Zstd(d) => d.write(input, out, limit),
            DecInner::Done => Err(io::Error::other("decoder already finished")),
        }
    }

    /// Whether decoded output is waiting for another [`Decoder::write`] call.
    pub fn pending(&self) -> bool {
        match &self.inner {
            DecInner::Br(d) => d.pending,
            DecInner::Zstd(d) => d.pending,
            DecInner::Gzip(_) | DecInner::Done => false,
        }
    }

    /// The input ended: flushes the rest, and fails if the stream was cut short.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        match std::mem::replace(&mut self.inner, DecInner::Done) {
            DecInner::Gzip(d) => out.append(&mut d.finish()?),
            DecInner::Br(d) => {
                if !d.done {
                    return Err(io::Error::other("truncated brotli stream"));
                }
            }
            DecInner::Zstd(d) => {
                if !d.frame_done {
                    return Err(io::Error::other("truncated zstd stream"));
                }
            }
            DecInner::Done => return Err(io::Error::other("decoder already finished")),
        }
        Ok(())
    }
}

/// Compresses a whole buffer (tests and benchmarks).
pub fn encode_all(coding: Coding, levels: &Levels, data: &[u8]) -> io::Result<Vec<u8>> {
    let mut e = Encoder::new(coding, levels)?;
    let mut out = Vec::new();
    for chunk in data.chunks(64 * 1024) {
        e.write(chunk, &mut out)?;
    }
    e.finish(&mut out)?;
    Ok(out)
}

/// Decompresses a whole buffer (tests and tools).
pub fn decode_all(coding: Coding, data: &[u8]) -> io::Result<Vec<u8>> {
    let mut d = Decoder::new(coding)?;
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() || d.pending() {
        let n = d.write(rest, &mut out, usize::MAX)?;
        rest = &rest[n..];
    }
    d.finish(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn text(n: usize) -> Vec<u8> {
        let words = [
            "cache ", "edge ", "origin ", "hit ", "miss ", "gzip\n", "<p>",
        ];
        let mut out = Vec::with_capacity(n);
        let mut i = 7u64;
        while out.len() < n {
            i = i
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            out.extend_from_slice(words[(i >> 33) as usize % words.len()].as_bytes());
        }
        out.truncate(n);
        out
    }

    #[test]
    fn every_coding_round_trips_in_small_and_large_chunks() {
        let data = text(300_000);
        for c in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            for chunk in [1usize, 1000, 65536] {
                let mut e = Encoder::new(c, &Levels::default()).unwrap();
                let mut z = Vec::new();
                for part in data.chunks(chunk) {
                    e.write(part, &mut z).unwrap();
                }
                e.finish(&mut z).unwrap();
                assert!(z.len() < data.len() / 2, "{c:?} compresses text");
                assert_eq!(decode_all(c, &z).unwrap(), data, "{c:?} chunk {chunk}");
            }
        }
    }

    #[test]
    fn standard_decoders_read_our_output() {
        let data = text(100_000);
        let gz = encode_all(Coding::Gzip, &Levels::default(), &data).unwrap();
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, data);
        assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip magic");
        let zs = encode_all(Coding::Zstd, &Levels::default(), &data).unwrap();
        assert_eq!(zstd::decode_all(&zs[..]).unwrap(), data);
        let br = encode_all(Coding::Br, &Levels::default(), &data).unwrap();
        let mut back = Vec::new();
        brotli::Decompressor::new(&br[..], 4096)
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, data);
    }

    #[test]
    fn an_empty_body_encodes_to_a_valid_stream() {
        for c in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            let z = encode_all(c, &Levels::default(), b"").unwrap();
            assert!(!z.is_empty(), "{c:?}: a header at least");
            assert_eq!(decode_all(c, &z).unwrap(), b"", "{c:?}");
        }
    }

    #[test]
    fn decoder_output_is_bounded_per_call() {
        // 64 MiB of zeros compress to ~64 KiB of gzip.
        let zeros = vec![0u8; 64 << 20];
        for c in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            let z = encode_all(
                c,
                &Levels {
                    gzip: 9,
                    brotli: 5,
                    zstd: 3,
                },
                &zeros,
            )
            .unwrap();
            let mut d = Decoder::new(c).unwrap();
            let mut out = Vec::new();
            let mut rest = &z[..];
            let mut total = 0usize;
            let mut biggest = 0usize;
            while !rest.is_empty() || d.pending() {
                let n = d.write(rest, &mut out, 256 * 1024).unwrap();
                rest = &rest[n..];
                biggest = biggest.max(out.len());
                total += out.len();
                out.clear();
            }
            d.finish(&mut out).unwrap();
            total += out.len();
            assert_eq!(total, zeros.len(), "{c:?}");
            assert!(biggest < 16 << 20, "{c:?}: {biggest} bytes out of one call");
        }
    }

    #[test]
    fn corrupt_or_truncated_input_is_an_error_not_a_panic() {
        let data = text(50_000);
        for c in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            let z = encode_all(c, &Levels::default(), &data).unwrap();
            let cut = &z[..z.len() / 2];
            assert!(decode_all(c, cut).is_err(), "{c:?} truncated");
            let mut bad = z.clone();
            for b in bad.iter_mut().skip(20).step_by(7) {
                *b ^= 0x5a;
            }
            let _ = decode_all(c, &bad); // an error or garbage, never a panic
        }
    }
}
