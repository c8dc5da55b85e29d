//! How bytes move over an established load connection: the [`Transport`] trait that
//! [`crate::conn`]'s request loop is generic over, and its plain-TCP form [`Plain`]
//! ([`crate::tls::TlsStream`] is the other).
//!
//! How it fits: its own module so that `conn` (which records into `stats`) and `tls`
//! (whose handshake errors `stats` counts) both depend on it and not on each other.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use tokio::io::unix::AsyncFd;
use tokio::time::timeout_at;

/// How bytes move over an established connection: [`Plain`] TCP, or TLS on top of it
/// ([`crate::tls::TlsStream`]).
pub(crate) trait Transport {
    /// Response bytes already wait in user space: read them without waiting for the
    /// socket (TLS: decrypted or undecrypted bytes left over from the last read).
    fn buffered(&self) -> bool;
    /// Non-blocking read of response bytes into `out` (never empty); `Ok(0)`: the peer
    /// closed. `WouldBlock` comes from the socket.
    fn read(&mut self, sock: &TcpStream, out: &mut [u8]) -> io::Result<usize>;
    /// After a read of `n` bytes into `space`: the socket was found empty and nothing is
    /// buffered, so readiness can be cleared without the read that would say EAGAIN.
    fn drained(&self, n: usize, space: usize) -> bool;
    /// Whether [`Transport::discard`] works: the bytes on the socket are the response's
    /// own (plain TCP), not records to decrypt.
    fn can_discard(&self) -> bool {
        false
    }
    /// Non-blocking: drops up to `max` bytes of the stream unread; `Ok(0)`: the peer
    /// closed. Only where [`Transport::can_discard`].
    fn discard(&mut self, _sock: &TcpStream, _max: usize) -> io::Result<usize> {
        Err(io::ErrorKind::Unsupported.into())
    }
    /// Writes all of `buf`, waiting for writability at most until `deadline`.
    async fn write_all(
        &mut self,
        fd: &AsyncFd<TcpStream>,
        buf: &[u8],
        deadline: Instant,
    ) -> io::Result<()>;
}

/// Plain HTTP: the socket itself.
pub(crate) struct Plain;

impl Transport for Plain {
    #[inline]
    fn buffered(&self) -> bool {
        false
    }

    #[inline]
    fn read(&mut self, mut sock: &TcpStream, out: &mut [u8]) -> io::Result<usize> {
        sock.read(out)
    }

    #[inline]
    fn drained(&self, n: usize, space: usize) -> bool {
        // A short read drained the socket (tokio's own TcpStream does the same).
        n < space
    }

    fn can_discard(&self) -> bool {
        true
    }

    /// `recv(MSG_TRUNC)` on TCP: the kernel frees up to `max` queued bytes without
    /// copying them anywhere (tcp(7)).
    fn discard(&mut self, sock: &TcpStream, max: usize) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        // SAFETY: a TCP socket the caller keeps open. With MSG_TRUNC, TCP writes nothing
        // to the buffer; it is null, so a kernel that did would fail with EFAULT
        // instead of writing to memory.
        let r = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                std::ptr::null_mut(),
                max,
                libc::MSG_TRUNC | libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    #[inline]
    async fn write_all(
        &mut self,
        fd: &AsyncFd<TcpStream>,
        buf: &[u8],
        deadline: Instant,
    ) -> io::Result<()> {
        write_all(fd, buf, deadline).await
    }
}

/// Writes all of `buf`, waiting for writability at most until `deadline`.
pub(crate) async fn write_all(
    fd: &AsyncFd<TcpStream>,
    buf: &[u8],
    deadline: Instant,
) -> io::Result<()> {
    let mut off = 0;
    // Fast path: a request almost always fits the socket buffer in one call.
    match fd.get_ref().write(buf) {
        Ok(n) => off = n,
        Err(e)
            if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
        Err(e) => return Err(e),
    }
    while off < buf.len() {
        let mut guard = match timeout_at(deadline.into(), fd.writable()).await {
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
            Ok(g) => g?,
        };
        match guard.try_io(|s| s.get_ref().write(&buf[off..])) {
            Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(Ok(n)) => off += n,
            Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => {}
        }
    }
    Ok(())
}
