//! The version-neutral response head, as handlers end it: how its body is delimited
//! ([`BodyLen`], the handler's choice), how the body's bytes are framed on the wire
//! ([`Framing`], the HTTP/1 encoder's choice, in [`super::Exchange::end_head`]), and
//! where an HTTP/2 stream takes the head from ([`HeadSlot`]).
//!
//! How it fits: handlers write a head's fields as `Name: value\r\n` lines and end it
//! through [`super::Exchange::end_head`]; HTTP/1.x writes the lines with its status line
//! and `Connection` as they are, HTTP/2 ([`super::h2stream`]) turns them into HEADERS.
//! Nothing here depends on a connection, so both encoders use it.

use bytes::Bytes;
use std::cell::RefCell;

/// How a response body is delimited: the handler's choice, which each protocol's
/// encoder turns into its own framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLen {
    /// No body follows (a bodiless status, or a head that carries no body).
    None,
    /// Exactly this many bytes follow (none for HEAD); the handler wrote
    /// `Content-Length` among the fields.
    Known(u64),
    /// Unknown until the end: chunked to an HTTP/1.1 client, until the close to an
    /// HTTP/1.0 one, DATA frames until END_STREAM on HTTP/2.
    Unknown,
}

/// How body bytes of a response are framed on the wire, as its protocol's encoder chose
/// ([`super::Exchange::end_head`]): HTTP/1.1 chunks for a body of unknown length, nothing
/// otherwise (HTTP/2 frames body bytes itself). Handlers pass their bytes through it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Framing {
    chunked: bool,
}

impl Framing {
    /// HTTP/1.1 chunks.
    pub(super) fn chunked() -> Framing {
        Framing { chunked: true }
    }

    /// Whether pieces are wrapped (chunks): a handler that sends a piece in several
    /// writes (a file range by sendfile) sends [`Self::open`] and [`Self::close`]
    /// around it.
    pub fn wraps(self) -> bool {
        self.chunked
    }

    /// Appends `data`, framed, to `out`.
    pub fn frame(self, out: &mut Vec<u8>, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.open(out, data.len());
        out.extend_from_slice(data);
        self.close(out);
    }

    /// What goes before a piece of `n` bytes.
    pub fn open(self, out: &mut Vec<u8>, n: usize) {
        if self.chunked {
            edge_http::write_chunk_header(out, n);
        }
    }

    /// What goes after a piece.
    pub fn close(self, out: &mut Vec<u8>) {
        if self.chunked {
            out.extend_from_slice(b"\r\n");
        }
    }

    /// What ends the body (the last chunk).
    pub fn finish(self, out: &mut Vec<u8>) {
        if self.chunked {
            out.extend_from_slice(edge_http::LAST_CHUNK);
        }
    }
}

/// A request body arriving in the DATA frames of one HTTP/2 or HTTP/3 stream, as the
/// session's body decoder reads it: the bytes as they are, or as HTTP/1.1 chunks when
/// the head gave no length (the decoder then reads it as chunked, and the last chunk
/// comes when the stream's body ends).
pub(super) struct BodyIn {
    /// Framed bytes not yet read.
    pending: Bytes,
    /// Presented as chunks, and the last chunk not yet queued.
    chunked: bool,
}

impl BodyIn {
    pub(super) fn new(chunked: bool) -> BodyIn {
        BodyIn {
            pending: Bytes::new(),
            chunked,
        }
    }

    /// Copies pending bytes into `buf`; false when none are pending.
    pub(super) fn read_into(&mut self, buf: &mut tokio::io::ReadBuf<'_>) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        let n = self.pending.len().min(buf.remaining());
        buf.put_slice(&self.pending.split_to(n));
        true
    }

    /// Takes a frame's bytes (none pending).
    pub(super) fn push(&mut self, data: Bytes) {
        self.pending = if self.chunked {
            let mut b = Vec::with_capacity(data.len() + 20);
            edge_http::write_chunk_header(&mut b, data.len());
            b.extend_from_slice(&data);
            b.extend_from_slice(b"\r\n");
            Bytes::from(b)
        } else {
            data
        };
    }

    /// The stream's body has ended: queues the last chunk when chunked; whether there
    /// is more to read.
    pub(super) fn end(&mut self) -> bool {
        if !self.chunked {
            return false;
        }
        self.chunked = false;
        self.pending = Bytes::from_static(b"0\r\n\r\n");
        true
    }
}

/// The response head an exchange ended ([`super::Exchange::end_head`]), waiting for its
/// stream to send it as HEADERS: the HTTP/2 side of the version-neutral head. The
/// stream sends it before the first body bytes written, or when the response is
/// flushed or ended.
#[derive(Default)]
pub struct HeadSlot {
    pending: RefCell<Option<PendingHead>>,
}

pub(super) struct PendingHead {
    pub(super) status: u16,
    /// The head's `Name: value\r\n` field lines (HEADERS' values are slices of it).
    pub(super) fields: Bytes,
    pub(super) body: BodyLen,
    /// The request was HEAD: the head carries no body whatever its length.
    pub(super) head: bool,
}

impl HeadSlot {
    /// Takes a response head: `fields` are its field lines, `body` how its body is
    /// delimited.
    pub fn put(&self, status: u16, fields: &[u8], body: BodyLen, head: bool) {
        *self.pending.borrow_mut() = Some(PendingHead {
            status,
            fields: Bytes::copy_from_slice(fields),
            body,
            head,
        });
    }

    /// The head waiting to be sent, if any.
    pub(super) fn take(&self) -> Option<PendingHead> {
        self.pending.borrow_mut().take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_wraps_pieces_only_when_chunked() {
        let mut out = Vec::new();
        let plain = Framing::default();
        plain.frame(&mut out, b"abc");
        plain.frame(&mut out, b"");
        plain.finish(&mut out);
        assert_eq!(out, b"abc");
        assert!(!plain.wraps());
        let mut out = Vec::new();
        let chunked = Framing::chunked();
        chunked.frame(&mut out, b"abc");
        chunked.frame(&mut out, b"");
        chunked.open(&mut out, 16);
        chunked.close(&mut out);
        chunked.finish(&mut out);
        assert_eq!(out, b"3\r\nabc\r\n10\r\n\r\n0\r\n\r\n");
        assert!(chunked.wraps());
    }

    #[test]
    fn a_slot_holds_one_head_until_taken() {
        let slot = HeadSlot::default();
        assert!(slot.take().is_none());
        slot.put(200, b"A: 1\r\n", BodyLen::Known(3), false);
        let p = slot.take().unwrap();
        assert_eq!(
            (p.status, &p.fields[..], p.body, p.head),
            (200, &b"A: 1\r\n"[..], BodyLen::Known(3), false)
        );
        assert!(slot.take().is_none());
    }
}
