//! A client connection's TCP socket, registered with the worker's reactor only once it
//! has to wait.
//!
//! A short connection (one request, `Connection: close`) usually never waits: its
//! request is in the socket when it is accepted, the response fits the socket buffer,
//! and it is closed. Registering it with epoll for nothing costs two syscalls
//! (`epoll_ctl` ADD at registration and DEL when tokio drops it) and the runtime's
//! bookkeeping. So a [`Sock`] starts unregistered: reads and writes are plain
//! non-blocking syscalls, and only the first one that would block registers the socket
//! (then it is an ordinary tokio `TcpStream`). A connection closed before that is just
//! `close(2)`d, as nginx closes one (closing removes nothing from epoll that was never
//! added). A kept-alive connection registers on its first wait for the next request.

use super::sys;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

pub struct Sock {
    state: State,
    /// Kernel TLS: the kernel decrypts what we read (control records come apart, see
    /// [`sys::recv_tls`]) and encrypts what we write and `sendfile`.
    ktls: bool,
    /// kTLS: close_notify went out (on the first shutdown).
    close_notify_sent: bool,
}

enum State {
    /// Not in the reactor: every operation is tried directly.
    Raw(std::net::TcpStream),
    /// Registered: the reactor says when to try again.
    Reg(tokio::net::TcpStream),
    /// Registration failed and the socket is closed (every operation fails).
    Closed,
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "socket closed")
}

impl Sock {
    /// An accepted socket, already non-blocking, not registered yet.
    pub fn raw(s: std::net::TcpStream) -> Sock {
        Sock {
            state: State::Raw(s),
            ktls: false,
            close_notify_sent: false,
        }
    }

    /// A socket the reactor already has.
    pub fn registered(s: tokio::net::TcpStream) -> Sock {
        Sock {
            state: State::Reg(s),
            ktls: false,
            close_notify_sent: false,
        }
    }

    /// A socket whose TLS session the kernel carries (keys set with
    /// [`sys::set_tls_keys`] in both directions).
    pub fn ktls(s: tokio::net::TcpStream) -> Sock {
        Sock {
            state: State::Reg(s),
            ktls: true,
            close_notify_sent: false,
        }
    }

    /// Whether the kernel does this connection's TLS.
    pub fn is_ktls(&self) -> bool {
        self.ktls
    }

    /// Whether the reactor has this socket.
    pub fn is_registered(&self) -> bool {
        matches!(self.state, State::Reg(_))
    }

    /// The socket registered with the worker's reactor (registering it now if need be).
    pub fn register(&mut self) -> io::Result<&mut tokio::net::TcpStream> {
        if let State::Raw(_) = self.state {
            let State::Raw(s) = std::mem::replace(&mut self.state, State::Closed) else {
                unreachable!("checked above")
            };
            // A failed registration drops (closes) the socket: the state stays Closed.
            self.state = State::Reg(tokio::net::TcpStream::from_std(s)?);
        }
        match &mut self.state {
            State::Reg(t) => Ok(t),
            _ => Err(closed()),
        }
    }

    /// The tokio stream (for TLS and HTTP/2, which take one): registered now.
    pub fn into_tokio(mut self) -> io::Result<tokio::net::TcpStream> {
        self.register()?;
        match self.state {
            State::Reg(t) => Ok(t),
            _ => Err(closed()),
        }
    }

    fn fd(&self) -> io::Result<RawFd> {
        match &self.state {
            State::Raw(s) => Ok(s.as_raw_fd()),
            State::Reg(t) => Ok(t.as_raw_fd()),
            State::Closed => Err(closed()),
        }
    }

    /// A second descriptor for the same socket (a pool job owns one).
    pub fn dup(&self) -> io::Result<OwnedFd> {
        match &self.state {
            State::Raw(s) => std::os::fd::AsFd::as_fd(s).try_clone_to_owned(),
            State::Reg(t) => std::os::fd::AsFd::as_fd(t).try_clone_to_owned(),
            State::Closed => Err(closed()),
        }
    }

    /// One non-blocking write; `WouldBlock` when the socket buffer is full.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match &self.state {
            State::Raw(s) => retry_eintr(|| (&*s).write(buf)),
            State::Reg(t) => t.try_write(buf),
            State::Closed => Err(closed()),
        }
    }

    /// One non-blocking `writev`; `WouldBlock` when the socket buffer is full.
    pub fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match &self.state {
            State::Raw(s) => retry_eintr(|| (&*s).write_vectored(bufs)),
            State::Reg(t) => t.try_write_vectored(bufs),
            State::Closed => Err(closed()),
        }
    }

    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        match &self.state {
            State::Raw(s) => s.set_nodelay(on),
            State::Reg(t) => t.set_nodelay(on),
            State::Closed => Err(closed()),
        }
    }

    /// Runs `op` (a syscall on the socket's fd) until it does not say `WouldBlock`:
    /// at once on an unregistered socket, else (and after its first `WouldBlock`)
    /// whenever the reactor reports `interest`.
    pub async fn async_io<R>(
        &mut self,
        interest: Interest,
        mut op: impl FnMut(RawFd) -> io::Result<R>,
    ) -> io::Result<R> {
        if let State::Raw(s) = &self.state {
            match retry_eintr(|| op(s.as_raw_fd())) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return r,
            }
        }
        let t = self.register()?;
        let fd = t.as_raw_fd();
        t.async_io(interest, || op(fd)).await
    }

    /// Waits until the socket is readable (registering it).
    pub async fn readable(&mut self) -> io::Result<()> {
        self.register()?.readable().await
    }

    /// Registers `cx`'s waker for the socket's next readiness, or says it is readable
    /// now (registering it).
    pub fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.register() {
            Ok(t) => t.poll_read_ready(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// Waits until the socket can take more bytes, after another thread (a pool job)
    /// found it full (see [`sys::wait_writable`]).
    pub async fn wait_writable(&mut self) -> io::Result<()> {
        sys::wait_writable(self.register()?).await
    }

    /// Closes with RST (`SO_LINGER` 0), so a client cannot mistake a cut response for
    /// a complete one.
    pub fn close_with_reset(self) {
        match self.state {
            State::Raw(s) => sys::close_with_reset(s),
            State::Reg(t) => sys::close_with_reset(t),
            State::Closed => {}
        }
    }
}

impl Sock {
    /// A read over kTLS: application data, or EOF for the client's close_notify; any
    /// other record ends the connection with an error (an alert, or a post-handshake
    /// message such as a TLS 1.3 KeyUpdate, which this kernel path cannot take).
    fn poll_read_ktls(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let t = match self.register() {
            Ok(t) => t,
            Err(e) => return Poll::Ready(Err(e)),
        };
        let fd = t.as_raw_fd();
        loop {
            if let Err(e) = std::task::ready!(t.poll_read_ready(cx)) {
                return Poll::Ready(Err(e));
            }
            let got = t.try_io(Interest::READABLE, || {
                retry_eintr(|| sys::recv_tls(fd, buf))
            });
            return Poll::Ready(match got {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => Err(e),
                Ok(sys::TlsRead::Data) => Ok(()),
                // close_notify: the client's clean end, read as EOF.
                Ok(sys::TlsRead::Control {
                    content_type: sys::TLS_ALERT,
                    first: [_, 0],
                }) => Ok(()),
                Ok(sys::TlsRead::Control {
                    content_type,
                    first,
                }) => Err(control_record(content_type, first)),
            });
        }
    }
}

/// Why a TLS record other than application data (or close_notify) ends a connection.
fn control_record(content_type: u8, first: [u8; 2]) -> io::Error {
    match (content_type, first) {
        (sys::TLS_ALERT, [level, desc]) => io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("TLS alert {desc} (level {level}) from the client"),
        ),
        (sys::TLS_HANDSHAKE, [24, _]) => io::Error::new(
            io::ErrorKind::Unsupported,
            "TLS 1.3 KeyUpdate from the client: kernel TLS cannot take new keys here, closing",
        ),
        (t, _) => io::Error::new(
            io::ErrorKind::InvalidData,
            format!("TLS record of type {t} after the handshake"),
        ),
    }
}

fn retry_eintr<R>(mut op: impl FnMut() -> io::Result<R>) -> io::Result<R> {
    loop {
        match op() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

impl std::fmt::Debug for Sock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            State::Raw(_) => "raw",
            State::Reg(_) => "registered",
            State::Closed => "closed",
        };
        write!(f, "Sock({state}, fd {:?})", self.fd().ok())
    }
}

/// The fd, for syscalls on a live socket (`-1` once closed: the call then fails with
/// EBADF and can reach no other descriptor).
impl AsRawFd for Sock {
    fn as_raw_fd(&self) -> RawFd {
        self.fd().unwrap_or(-1)
    }
}

impl AsyncRead for Sock {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.ktls {
            return this.poll_read_ktls(cx, buf);
        }
        if let State::Raw(s) = &this.state {
            let fd = s.as_raw_fd();
            match retry_eintr(|| sys::recv_into(fd, buf)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return Poll::Ready(r),
            }
        }
        match this.register() {
            Ok(t) => Pin::new(t).poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for Sock {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let State::Raw(s) = &this.state {
            match retry_eintr(|| (&*s).write(buf)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return Poll::Ready(r),
            }
        }
        match this.register() {
            Ok(t) => Pin::new(t).poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let State::Raw(s) = &this.state {
            match retry_eintr(|| (&*s).write_vectored(bufs)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return Poll::Ready(r),
            }
        }
        match this.register() {
            Ok(t) => Pin::new(t).poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.ktls && !std::mem::replace(&mut this.close_notify_sent, true) {
            // The TLS session ends with close_notify (rustls sends one in user space),
            // so that the client can tell the end of a response that runs until the
            // close from a cut one. Best effort: with the socket buffer full there is
            // no room for it, and the connection ends anyway.
            if let Ok(fd) = this.fd() {
                let _ = retry_eintr(|| sys::send_tls_record(fd, sys::TLS_ALERT, &[1, 0]));
            }
        }
        match &mut this.state {
            State::Raw(s) => Poll::Ready(s.shutdown(std::net::Shutdown::Write)),
            State::Reg(t) => Pin::new(t).poll_shutdown(cx),
            State::Closed => Poll::Ready(Err(closed())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::rt;
    use std::io::Read as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// (server side, unregistered; client side, blocking std).
    fn pair() -> (Sock, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = sys::accept_nonblocking(&l).unwrap();
        (Sock::raw(s), c)
    }

    /// A request already in the socket is read and answered without the socket ever
    /// being registered.
    #[test]
    fn a_request_already_there_is_served_unregistered() {
        rt().block_on(async {
            let (mut s, mut c) = pair();
            c.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
            // Wait until the bytes are there (loopback: at once, but be sure).
            let mut probe = [0u8; 1];
            let fd = s.as_raw_fd();
            for _ in 0..100 {
                // SAFETY: a valid 1-byte buffer; MSG_PEEK leaves the data in place.
                let n = unsafe { libc::recv(fd, probe.as_mut_ptr().cast(), 1, libc::MSG_PEEK) };
                if n == 1 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            let mut buf = bytes::BytesMut::with_capacity(64);
            let n = s.read_buf(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\n\r\n");
            assert!(
                !s.is_registered(),
                "a read that did not wait registers nothing"
            );
            assert_eq!(s.try_write(b"ok").unwrap(), 2);
            s.write_all(b"!").await.unwrap();
            assert!(!s.is_registered());
            drop(s);
            let mut got = Vec::new();
            c.read_to_end(&mut got).unwrap();
            assert_eq!(got, b"ok!");
        });
    }

    /// A read with nothing there registers the socket and completes when the bytes
    /// come; a write to a full buffer waits for room the same way.
    #[test]
    fn a_read_that_must_wait_registers_and_completes() {
        rt().block_on(async {
            let (mut s, mut c) = pair();
            let client = std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                c.write_all(b"late").unwrap();
                // Drain what the server writes below, then see its EOF.
                let mut got = Vec::new();
                c.read_to_end(&mut got).unwrap();
                got.len()
            });
            let mut buf = [0u8; 16];
            let n = s.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"late");
            assert!(s.is_registered());
            // 8 MiB overflows any socket buffer: the writes must wait for the client.
            let big = vec![7u8; 8 << 20];
            s.write_all(&big).await.unwrap();
            drop(s);
            assert_eq!(client.join().unwrap(), 8 << 20);
        });
    }

    /// A full buffer on an unregistered socket: the write registers and waits.
    #[test]
    fn a_write_that_must_wait_registers() {
        rt().block_on(async {
            let (mut s, mut c) = pair();
            // More than both sockets' buffers can take (loopback grows them to several
            // MiB), with a reader that starts late: the writes must wait.
            let big = vec![1u8; 32 << 20];
            let client = std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(200));
                let mut got = Vec::new();
                c.read_to_end(&mut got).unwrap();
                got.len()
            });
            s.write_all(&big).await.unwrap();
            assert!(s.is_registered(), "a 32 MiB write had to wait");
            drop(s);
            assert_eq!(client.join().unwrap(), 32 << 20);
        });
    }

    #[test]
    fn async_io_runs_at_once_then_through_the_reactor() {
        rt().block_on(async {
            let (mut s, mut c) = pair();
            let mut calls = 0;
            let n = s
                .async_io(Interest::WRITABLE, |fd| {
                    calls += 1;
                    // SAFETY: a valid 3-byte buffer for send(2) on the socket's fd.
                    let n = unsafe { libc::send(fd, b"abc".as_ptr().cast(), 3, 0) };
                    if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(n as usize)
                    }
                })
                .await
                .unwrap();
            assert_eq!((n, calls), (3, 1));
            assert!(!s.is_registered());
            let mut got = [0u8; 3];
            c.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"abc");
            // Readiness wait: registers.
            c.write_all(b"x").unwrap();
            s.readable().await.unwrap();
            assert!(s.is_registered());
        });
    }

    #[test]
    fn close_with_reset_sends_rst_unregistered() {
        let (s, mut c) = pair();
        s.close_with_reset();
        let mut buf = [0u8; 1];
        let e = c.read(&mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset);
    }
}
