//! [`BodyDecoder`]: incremental body framing (Content-Length, chunked, close-delimited).
//!
//! How it fits: after a head is parsed, the connection loop (or the proxy, for upstream
//! responses) creates one decoder from the head's [`BodyKind`] and feeds it whatever bytes
//! it has. The decoder keeps its own state between calls, so a chunk-size line split
//! across two reads needs no re-buffering, and it hands back payload as sub-slices of the
//! input (no copy). It stops exactly at the end of the message, leaving pipelined bytes
//! for the next head.
//!
//! Chunked framing (RFC 9112 7.1) is strict: hex size with overflow check, size lines
//! (with extensions) bounded by [`MAX_CHUNK_LINE`], every line ended by CRLF (a bare LF is
//! refused: lenient chunk parsing is a classic smuggling vector), trailers bounded by
//! [`MAX_TRAILER_BYTES`] and discarded.

use crate::error::{ErrorKind, ParseError};
use crate::BodyKind;

/// Longest chunk-size line, extensions included (bytes before the CRLF). RFC 9112 7.1.1
/// lets a recipient limit chunk extensions; 4 KiB is generous for any real client.
pub const MAX_CHUNK_LINE: usize = 4096;

/// Most bytes of trailer fields after the last chunk (RFC 9112 7.1.2); they are discarded.
pub const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// Where a chunked decoder is within the framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunked {
    /// Reading hex digits of a chunk size (`digits` so far).
    Size {
        value: u64,
        digits: u32,
    },
    /// Whitespace after the size, before `;` or CR.
    SizeWs {
        value: u64,
    },
    /// Inside chunk extensions, until CR.
    Ext {
        value: u64,
    },
    /// CR of the size line seen; LF expected.
    SizeLf {
        value: u64,
    },
    /// Payload bytes of the current chunk still to come.
    Data {
        remaining: u64,
    },
    /// CRLF after chunk data expected.
    DataCr,
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    /// Inside a trailer line.
    Trailer,
    /// CR of a trailer line seen.
    TrailerLf,
    /// CR of the final empty line seen.
    EndLf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length { remaining: u64 },
    Chunked(Chunked),
    Close,
    Done,
}

/// What one [`BodyDecoder::decode`] call produced.
#[derive(Debug, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// Bytes of the input used (framing and payload); advance the buffer by this much.
    pub consumed: usize,
    /// Payload bytes, a sub-slice of the input (empty when only framing was consumed).
    pub data: &'a [u8],
    /// The body is complete; bytes after `consumed` belong to the next message.
    pub done: bool,
}

/// Incremental body decoder, one per message.
#[derive(Debug, Clone)]
pub struct BodyDecoder {
    state: State,
    max_body: Option<u64>,
    decoded: u64,
    /// Bytes of the current size line, or of all trailers so far.
    line_len: usize,
    /// Whose bytes these are: client (`BadRequest`) or upstream (`BadUpstream`).
    upstream: bool,
}

impl BodyDecoder {
    /// A decoder for a body framed as `kind`. `max_body`: error `PayloadTooLarge` if the
    /// decoded size exceeds it (checked as soon as a chunk size or Content-Length is
    /// known, before any of its bytes are read). Errors are client errors
    /// (`BadRequest`); use [`BodyDecoder::upstream`] for response bodies.
    pub fn new(kind: BodyKind, max_body: Option<u64>) -> Self {
        let state = match kind {
            BodyKind::Empty | BodyKind::Length(0) => State::Done,
            BodyKind::Length(n) => State::Length { remaining: n },
            BodyKind::Chunked => State::Chunked(Chunked::Size {
                value: 0,
                digits: 0,
            }),
            BodyKind::CloseDelimited => State::Close,
        };
        BodyDecoder {
            state,
            max_body,
            decoded: 0,
            line_len: 0,
            upstream: false,
        }
    }

    /// Marks the body as coming from an upstream: framing errors become `BadUpstream`
    /// (502) instead of `BadRequest` (400).
    pub fn upstream(mut self) -> Self {
        self.upstream = true;
        self
    }

    fn err(&self, reason: &'static str) -> ParseError {
        let kind = if self.upstream {
            ErrorKind::BadUpstream
        } else {
            ErrorKind::BadRequest
        };
        ParseError::new(kind, reason)
    }

    fn too_large(&self) -> ParseError {
        if self.upstream {
            ParseError::new(ErrorKind::BadUpstream, "upstream body exceeds the limit")
        } else {
            ParseError::new(ErrorKind::PayloadTooLarge, "request body exceeds the limit")
        }
    }

    /// Errors if `more` further bytes would take the body past `max_body`.
    fn check_room(&self, more: u64) -> Result<(), ParseError> {
        match self.max_body {
            Some(max) if self.decoded.saturating_add(more) > max => Err(self.too_large()),
            _ => Ok(()),
        }
    }

    /// Decodes from `input`. `data` is a sub-slice of `input` holding payload bytes
    /// (possibly empty when only framing was consumed). The caller advances its buffer by
    /// `consumed` and calls again while `consumed > 0 && !done`.
    pub fn decode<'a>(&mut self, input: &'a [u8]) -> Result<Decoded<'a>, ParseError> {
        let mut pos = 0;
        loop {
            match self.state {
                State::Done => {
                    return Ok(Decoded {
                        consumed: pos,
                        data: &[],
                        done: true,
                    });
                }
                State::Length { remaining } => {
                    self.check_room(remaining)?;
                    let n = take(remaining, input.len() - pos);
                    let data = &input[pos..pos + n];
                    self.decoded += n as u64;
                    let left = remaining - n as u64;
                    self.state = if left == 0 {
                        State::Done
                    } else {
                        State::Length { remaining: left }
                    };
                    return Ok(Decoded {
                        consumed: pos + n,
                        data,
                        done: left == 0,
                    });
                }
                State::Close => {
                    let data = &input[pos..];
                    self.check_room(data.len() as u64)?;
                    self.decoded += data.len() as u64;
                    return Ok(Decoded {
                        consumed: input.len(),
                        data,
                        done: false,
                    });
                }
                State::Chunked(Chunked::Data { remaining }) => {
                    let n = take(remaining, input.len() - pos);
                    let data = &input[pos..pos + n];
                    self.decoded += n as u64;
                    let left = remaining - n as u64;
                    self.state = State::Chunked(if left == 0 {
                        Chunked::DataCr
                    } else {
                        Chunked::Data { remaining: left }
                    });
                    if n > 0 {
                        return Ok(Decoded {
                            consumed: pos + n,
                            data,
                            done: false,
                        });
                    }
                    if pos == input.len() {
                        return Ok(Decoded {
                            consumed: pos,
                            data: &[],
                            done: false,
                        });
                    }
                }
                State::Chunked(c) => {
                    let Some(&b) = input.get(pos) else {
                        return Ok(Decoded {
                            consumed: pos,
                            data: &[],
                            done: false,
                        });
                    };
                    pos += 1;
                    let next = self.step(c, b)?;
                    self.state = next;
                }
            }
        }
    }

    /// One framing byte of chunked encoding.
    fn step(&mut self, c: Chunked, b: u8) -> Result<State, ParseError> {
        use Chunked::*;
        let in_size_line = matches!(c, Size { .. } | SizeWs { .. } | Ext { .. });
        if in_size_line {
            self.line_len += 1;
            if self.line_len > MAX_CHUNK_LINE {
                return Err(self.err("chunk size line too long"));
            }
        }
        let in_trailers = matches!(c, TrailerStart | Trailer | TrailerLf | EndLf);
        if in_trailers {
            self.line_len += 1;
            if self.line_len > MAX_TRAILER_BYTES {
                return Err(if self.upstream {
                    self.err("upstream trailers too large")
                } else {
                    ParseError::new(ErrorKind::HeadersTooLarge, "chunked trailers too large")
                });
            }
        }
        let next = match c {
            Size { value, digits } => match crate::normalize::hex_digit(b) {
                Some(d) => {
                    if value > u64::MAX >> 4 {
                        return Err(self.err("chunk size overflows"));
                    }
                    Size {
                        value: (value << 4) | u64::from(d),
                        digits: digits + 1,
                    }
                }
                None if digits == 0 => return Err(self.err("chunk size is not hex")),
                None => match b {
                    b' ' | b'\t' => SizeWs { value },
                    b';' => Ext { value },
                    b'\r' => SizeLf { value },
                    _ => return Err(self.err("invalid byte after chunk size")),
                },
            },
            SizeWs { value } => match b {
                b' ' | b'\t' => SizeWs { value },
                b';' => Ext { value },
                b'\r' => SizeLf { value },
                _ => return Err(self.err("invalid byte after chunk size")),
            },
            Ext { value } => match b {
                b'\r' => SizeLf { value },
                b'\t' => Ext { value },
                0..=0x1f | 0x7f => return Err(self.err("control character in chunk extension")),
                _ => Ext { value },
            },
            SizeLf { value } => {
                if b != b'\n' {
                    return Err(self.err("chunk size line not ended by CRLF"));
                }
                self.line_len = 0;
                if value == 0 {
                    TrailerStart
                } else {
                    self.check_room(value)?;
                    Data { remaining: value }
                }
            }
            // `decode` hands payload out itself and never steps through it.
            Data { .. } => return Err(self.err("internal: chunk data reached the framing step")),
            DataCr => match b {
                b'\r' => DataLf,
                _ => return Err(self.err("chunk data not followed by CRLF")),
            },
            DataLf => match b {
                b'\n' => Size {
                    value: 0,
                    digits: 0,
                },
                _ => return Err(self.err("chunk data not followed by CRLF")),
            },
            TrailerStart => match b {
                b'\r' => EndLf,
                b'\n' => return Err(self.err("bare LF in chunked trailers")),
                _ => Trailer,
            },
            Trailer => match b {
                b'\r' => TrailerLf,
                b'\n' => return Err(self.err("bare LF in chunked trailers")),
                _ => Trailer,
            },
            TrailerLf => match b {
                b'\n' => TrailerStart,
                _ => return Err(self.err("trailer line not ended by CRLF")),
            },
            EndLf => match b {
                b'\n' => return Ok(State::Done),
                _ => return Err(self.err("chunked body not ended by CRLF")),
            },
        };
        Ok(State::Chunked(next))
    }

    /// Whether the body runs until the peer closes (no length, not chunked).
    pub fn is_close_delimited(&self) -> bool {
        self.state == State::Close
    }

    /// Whether the whole body has been decoded.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The peer closed. CloseDelimited: completes the body. Anything else unfinished:
    /// `Err` (truncated).
    pub fn on_eof(&mut self) -> Result<(), ParseError> {
        match self.state {
            State::Done => Ok(()),
            State::Close => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err(self.err("body truncated: peer closed before its end")),
        }
    }

    /// Payload bytes decoded so far.
    pub fn decoded_len(&self) -> u64 {
        self.decoded
    }
}

/// `min(remaining, available)` without truncating casts.
fn take(remaining: u64, available: usize) -> usize {
    usize::try_from(remaining).map_or(available, |r| r.min(available))
}

#[cfg(test)]
pub(crate) mod tests;
