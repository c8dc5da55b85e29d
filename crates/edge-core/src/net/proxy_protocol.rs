//! Reading a PROXY protocol header (v1 or v2) off a new connection of a
//! `proxy_protocol = true` listener, before TLS or HTTP see a byte.
//!
//! How it fits: the worker calls [`read_header`] on the accepted socket under
//! `client_header_timeout`; the sans-I/O parser (`edge_http::proxy_protocol`) decides.
//! The header is taken off the socket and nothing more: each round peeks at what has
//! arrived, and consumes either the whole header (once the parser has it) or all that
//! was peeked (the parser says a header that long is still incomplete, so every byte of
//! it is the header's). The client's TLS or HTTP bytes stay in the socket for the
//! layer above, which reads the socket as on any listener: no leftover buffer to hand
//! on. A load balancer sends the header in its first segment, usually with the first
//! request: one `recv(MSG_PEEK)` and one `recv`.

use edge_http::proxy_protocol::{self, Header, Parsed};
use std::io;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The first peek's size: a v1 line (at most 107 bytes) or a v2 header with a few
/// hundred bytes of TLVs. A longer v2 header doubles it, up to the caller's bound.
const FIRST_PEEK: usize = 256;

/// Reads the connection's PROXY header, of at most `max_len` bytes. An error for
/// anything but a valid header (`InvalidData`, with the parser's reason), or a close
/// before its end (`UnexpectedEof`). The caller bounds the time.
pub async fn read_header(stream: &mut TcpStream, max_len: usize) -> io::Result<Header> {
    let mut buf = vec![0u8; FIRST_PEEK.min(max_len).max(1)];
    // buf[..have] is taken off the socket already.
    let mut have = 0;
    loop {
        if have == buf.len() {
            // The parser decides any header once `max_len` bytes are in, so this is
            // below the bound.
            let more = (buf.len() * 2).min(max_len);
            if more == buf.len() {
                return Err(invalid(proxy_protocol::Error::TooLong));
            }
            buf.resize(more, 0);
        }
        let n = stream.peek(&mut buf[have..]).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed before the end of the PROXY protocol header",
            ));
        }
        match proxy_protocol::parse(&buf[..have + n], max_len) {
            Ok(Parsed::Done(h)) => {
                // Peeked already: the read returns at once.
                stream.read_exact(&mut buf[have..h.consumed]).await?;
                return Ok(h);
            }
            Ok(Parsed::Incomplete) => {
                stream.read_exact(&mut buf[have..have + n]).await?;
                have += n;
            }
            Err(e) => return Err(invalid(e)),
        }
    }
}

fn invalid(e: proxy_protocol::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::rt;
    use std::io::Write;

    /// A connected pair: (server side, registered; client side, blocking std).
    async fn pair() -> (TcpStream, std::net::TcpStream) {
        let (s, c) = crate::testutil::tcp_pair().await;
        c.set_nodelay(true).unwrap();
        (s, c)
    }

    /// The header comes off the socket, split into several segments, and the bytes
    /// after it stay there for the next reader.
    #[test]
    fn takes_the_header_and_leaves_the_rest() {
        rt().block_on(async {
            for (header, src) in [
                (
                    b"PROXY TCP4 192.0.2.7 10.0.0.1 50123 443\r\n".to_vec(),
                    "192.0.2.7:50123",
                ),
                (
                    {
                        let mut h = proxy_protocol::V2_SIGNATURE.to_vec();
                        h.extend_from_slice(&[0x21, 0x11]);
                        h.extend_from_slice(&612u16.to_be_bytes());
                        h.extend_from_slice(&[192, 0, 2, 8, 10, 0, 0, 1, 0, 80, 1, 187]);
                        // A 597-byte TLV: longer than the first peek.
                        h.extend_from_slice(&[0xe0, 2, 85]);
                        h.extend_from_slice(&[b'x'; 597]);
                        h
                    },
                    "192.0.2.8:80",
                ),
            ] {
                let (mut s, mut c) = pair().await;
                let mut all = header.clone();
                all.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
                let writer = std::thread::spawn(move || {
                    for piece in all.chunks(37) {
                        c.write_all(piece).unwrap();
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    c
                });
                let h = read_header(&mut s, 4096).await.unwrap();
                assert_eq!(h.consumed, header.len());
                assert_eq!(h.addrs.unwrap().src, src.parse().unwrap());
                let _c = writer.join().unwrap();
                let mut rest = [0u8; 18];
                s.read_exact(&mut rest).await.unwrap();
                assert_eq!(&rest, b"GET / HTTP/1.1\r\n\r\n");
            }
        });
    }

    #[test]
    fn refuses_what_is_not_a_header() {
        rt().block_on(async {
            for (input, kind) in [
                (&b"GET / HTTP/1.1\r\n\r\n"[..], io::ErrorKind::InvalidData),
                (
                    b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
                    io::ErrorKind::InvalidData,
                ),
                (b"PROXY TCP4 1.2.3.4", io::ErrorKind::UnexpectedEof),
            ] {
                let (mut s, mut c) = pair().await;
                c.write_all(input).unwrap();
                c.shutdown(std::net::Shutdown::Write).unwrap();
                let e = read_header(&mut s, 4096).await.unwrap_err();
                assert_eq!(e.kind(), kind, "{:?}: {e}", String::from_utf8_lossy(input));
            }
            // Longer than the bound.
            let (mut s, mut c) = pair().await;
            let mut h = proxy_protocol::V2_SIGNATURE.to_vec();
            h.extend_from_slice(&[0x21, 0x11, 0x10, 0]);
            h.resize(16 + 4096, 0);
            c.write_all(&h).unwrap();
            let e = read_header(&mut s, 1024).await.unwrap_err();
            assert!(e.to_string().contains("too long"), "{e}");
        });
    }
}
