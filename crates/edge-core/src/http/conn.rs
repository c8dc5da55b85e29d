//! A client connection: the socket plus its read buffer, with timeouts applied per
//! operation the way nginx applies them (`send_timeout` bounds each write's progress,
//! not the whole response).

use bytes::BytesMut;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Initial read buffer; grows up to the head limit while a head is incomplete. 4 KiB
/// holds nearly every request head in one read (nginx starts at 1 KiB,
/// `client_header_buffer_size`), and it is what every busy connection holds: with 16 KiB,
/// a burst of new connections left RSS 12 KiB per connection higher for good.
pub const READ_BUF: usize = 4 * 1024;

pub struct Conn {
    pub io: TcpStream,
    pub rbuf: BytesMut,
    pub peer: SocketAddr,
}

pub fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what} timed out"))
}

impl Conn {
    pub fn new(io: TcpStream, peer: SocketAddr) -> Conn {
        Conn {
            io,
            // Allocated when the first bytes are about to arrive (see the session: an
            // idle connection holds no read buffer).
            rbuf: BytesMut::new(),
            peer,
        }
    }

    /// Reads more bytes into the buffer. Ok(0) is EOF.
    pub async fn fill(&mut self, limit: Duration) -> io::Result<usize> {
        if self.rbuf.capacity() - self.rbuf.len() < 4096 {
            self.rbuf.reserve(READ_BUF);
        }
        match tokio::time::timeout(limit, self.io.read_buf(&mut self.rbuf)).await {
            Ok(r) => r,
            Err(_) => Err(timed_out("client read")),
        }
    }

    /// Reads more bytes into the buffer with no timeout (the caller bounds the wait).
    pub async fn fill_untimed(&mut self) -> io::Result<usize> {
        if self.rbuf.capacity() - self.rbuf.len() < 4096 {
            self.rbuf.reserve(READ_BUF);
        }
        self.io.read_buf(&mut self.rbuf).await
    }

    /// Writes all of `buf`; each write must make progress within `limit`.
    pub async fn write_all(&mut self, buf: &[u8], limit: Duration) -> io::Result<()> {
        write_all_timed(&mut self.io, buf, limit).await
    }
}

/// `write_all` where each write must make progress within `limit`. The first attempt
/// is a plain non-blocking write (a response usually fits the socket buffer at once):
/// no deadline is computed and no timer armed unless the socket is full.
pub async fn write_all_timed(
    io: &mut TcpStream,
    mut buf: &[u8],
    limit: Duration,
) -> io::Result<()> {
    match io.try_write(buf) {
        Ok(n) => buf = &buf[n..],
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(e),
    }
    while !buf.is_empty() {
        match tokio::time::timeout(limit, io.write(buf)).await {
            Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(Ok(n)) => buf = &buf[n..],
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(timed_out("send")),
        }
    }
    Ok(())
}

impl Conn {
    /// Writes `a` then `b` with `writev` (a head and a body from memory in one
    /// syscall); each write must make progress within `limit`.
    pub async fn write_two(
        &mut self,
        mut a: &[u8],
        mut b: &[u8],
        limit: Duration,
    ) -> io::Result<()> {
        let mut first = true;
        while !a.is_empty() {
            let iov = [io::IoSlice::new(a), io::IoSlice::new(b)];
            let r = if first {
                first = false;
                match self.io.try_write_vectored(&iov) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    r => r,
                }
            } else {
                match tokio::time::timeout(limit, self.io.write_vectored(&iov)).await {
                    Ok(r) => r,
                    Err(_) => return Err(timed_out("send")),
                }
            };
            match r? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n if n >= a.len() => {
                    b = &b[n - a.len()..];
                    a = &[];
                }
                n => a = &a[n..],
            }
        }
        if b.is_empty() {
            return Ok(());
        }
        self.write_all(b, limit).await
    }
}
