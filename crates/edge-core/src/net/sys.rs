//! Every raw socket syscall of the server, in one place (nginx keeps its in
//! `src/os/unix`): `sendfile(2)`, `SO_LINGER` for a reset on
//! close, and the epoll calls of the `exclusive` accept strategy. Each `unsafe` block
//! says why it is sound, and each wrapper is tested below with real sockets.
//!
//! The async helpers wait for writability in the worker's own reactor; a caller bounds
//! each call's progress with its own timeout.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// One `sendfile(2)` of at most `len` bytes of `file_fd` from `*offset` to the socket,
/// tried at once, then whenever the socket is writable. Advances `*offset`; `Ok(0)`
/// means the file ended.
pub async fn sendfile_once(
    sock: &mut super::Sock,
    file_fd: RawFd,
    offset: &mut u64,
    len: usize,
) -> io::Result<usize> {
    let mut off = *offset as libc::off_t;
    let n = sock
        .async_io(Interest::WRITABLE, |out_fd| {
            // SAFETY: `out_fd` is the socket we borrow and `file_fd` is an open file the
            // caller borrows for the call; `off` is a valid off_t the kernel reads and
            // advances; no buffer is passed.
            let n = unsafe { libc::sendfile(out_fd, file_fd, &mut off, len) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        })
        .await?;
    *offset = off as u64;
    Ok(n)
}

/// Waits until the socket can take more bytes, after another thread (a pool job) found
/// it full: tokio's cached readiness knows nothing of that write, so it is cleared
/// first, then `poll(2)` catches a buffer that drained in between (its edge-triggered
/// event may already have been consumed).
pub async fn wait_writable(sock: &TcpStream) -> io::Result<()> {
    let _ = sock.try_io(Interest::WRITABLE, || {
        Err::<(), _>(io::ErrorKind::WouldBlock.into())
    });
    let mut pfd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call; a zero timeout never blocks.
    let r = unsafe { libc::poll(&mut pfd, 1, 0) };
    if r > 0 && pfd.revents != 0 {
        // Writable, or an error or hang-up that the next send reports.
        return Ok(());
    }
    sock.writable().await
}

/// `accept4(SOCK_NONBLOCK | SOCK_CLOEXEC)`: one syscall gives the connection already
/// non-blocking (ready for the worker's reactor) and its peer address (no
/// `getpeername`, no `fcntl`s).
pub fn accept_nonblocking(
    l: &std::net::TcpListener,
) -> io::Result<(std::net::TcpStream, std::net::SocketAddr)> {
    let lfd = l.as_raw_fd();
    // SAFETY: `try_init` hands us a zeroed sockaddr storage and its length to fill;
    // accept4 writes at most that many bytes and updates the length; `lfd` is the
    // listener we borrow for the call.
    let (fd, addr) = unsafe {
        socket2::SockAddr::try_init(|storage, len| {
            let fd = libc::accept4(
                lfd,
                storage.cast(),
                len,
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            );
            if fd < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(fd)
            }
        })?
    };
    // SAFETY: accept4 returned a new descriptor that nothing else owns.
    let stream = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    let peer = addr
        .as_socket()
        .ok_or_else(|| io::Error::other("accepted a connection without an IP address"))?;
    Ok((stream, peer))
}

/// A listening socket registered with the current runtime's reactor for readability:
/// the worker waits on it there, and accepts with [`accept_nonblocking`] (tokio's own
/// listener would register every accepted connection).
pub fn reactor_listener(
    l: std::net::TcpListener,
) -> io::Result<tokio::io::unix::AsyncFd<std::net::TcpListener>> {
    l.set_nonblocking(true)?;
    // SAFETY: the AsyncFd owns `l`, whose descriptor stays open and the same until the
    // AsyncFd is dropped (a std TcpListener never changes its fd).
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(l, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

/// Whether a listening socket has a connection waiting (`poll`, zero timeout).
pub fn has_pending(l: &std::net::TcpListener) -> bool {
    let mut pfd = libc::pollfd {
        fd: l.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call; a zero timeout never blocks.
    unsafe { libc::poll(&mut pfd, 1, 0) > 0 && pfd.revents & libc::POLLIN != 0 }
}

/// `setsockopt(2)` with an option value given as its bytes (a `c_int`'s native-endian
/// bytes, a name, a kernel struct laid out as the kernel wants it).
fn setsockopt(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &[u8]) -> io::Result<()> {
    // SAFETY: `fd` is a socket the caller borrows; `value` is live for the call and we
    // pass its exact length (the kernel checks it against what the option takes).
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `SO_INCOMING_CPU` on a listening socket of a reuseport group: since Linux 6.2 the
/// kernel hands a connection to the group's socket whose value is the CPU that
/// received it (else it falls back to the hash).
pub fn set_incoming_cpu(l: &std::net::TcpListener, cpu: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(cpu).map_err(|_| io::Error::other("CPU number too large"))?;
    setsockopt(
        l.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_INCOMING_CPU,
        &v.to_ne_bytes(),
    )
}

/// `TCP_ULP` "tls": the kernel's TLS layer on an established connection (kTLS). Until
/// keys are given ([`set_tls_keys`]) the socket still carries plain bytes. ENOENT: the
/// kernel has no `tls` module.
pub fn set_tcp_ulp_tls(fd: RawFd) -> io::Result<()> {
    setsockopt(fd, libc::SOL_TCP, libc::TCP_ULP, b"tls")
}

/// Which way a kTLS key is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsDir {
    /// `TLS_TX`: what we write is encrypted with it.
    Tx = 1,
    /// `TLS_RX`: what we read is decrypted with it.
    Rx = 2,
}

/// `SOL_TLS`, `TLS_TX` or `TLS_RX`: hands the kernel a `tls12_crypto_info_*` struct
/// (`info`, exactly as the kernel lays it out) after [`set_tcp_ulp_tls`].
pub fn set_tls_keys(fd: RawFd, dir: TlsDir, info: &[u8]) -> io::Result<()> {
    setsockopt(fd, libc::SOL_TLS, dir as libc::c_int, info)
}

/// Room for one cmsghdr and its 1-byte payload, 8-byte aligned (the TLS record type
/// kTLS takes and gives).
type Cmsg1 = [u64; 4];

/// A `msghdr` over one iovec and the first `control_len` bytes of `control`. It holds
/// raw pointers to both: they must outlive its use.
fn msghdr(iov: &mut libc::iovec, control: &mut Cmsg1, control_len: usize) -> libc::msghdr {
    // SAFETY: an all-zero msghdr is a valid empty one; we fill in the pointers below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control_len.min(std::mem::size_of::<Cmsg1>()) as _;
    msg
}

/// `TLS_SET_RECORD_TYPE`: the control message that makes kTLS send a record of
/// another content type than application data.
const TLS_SET_RECORD_TYPE: libc::c_int = 1;

/// Sends one TLS record of `content_type` with `payload` through kTLS (the kernel
/// encrypts it with the session's keys): a close_notify alert before a connection ends.
pub fn send_tls_record(fd: RawFd, content_type: u8, payload: &[u8]) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let mut control = Cmsg1::default();
    // SAFETY: CMSG_SPACE is arithmetic on a constant length.
    let msg = msghdr(&mut iov, &mut control, unsafe { libc::CMSG_SPACE(1) }
        as usize);
    // SAFETY: `control` is 32 bytes, 8-byte aligned, and CMSG_SPACE(1) (24 on 64-bit
    // Linux) fits in it, so CMSG_FIRSTHDR is a valid header inside it and CMSG_DATA
    // has room for the one byte written.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_TLS;
        (*c).cmsg_type = TLS_SET_RECORD_TYPE;
        (*c).cmsg_len = libc::CMSG_LEN(1) as _;
        *libc::CMSG_DATA(c) = content_type;
    }
    // SAFETY: `msg` points at one iovec over `payload` (read only by the kernel, of its
    // length) and at `control` (of the length given); all live for the call.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// TLS record content types (RFC 8446 5.1).
pub const TLS_ALERT: u8 = 21;
pub const TLS_HANDSHAKE: u8 = 22;
pub const TLS_APPLICATION_DATA: u8 = 23;

/// `TLS_GET_RECORD_TYPE`: the control message kTLS attaches to what `recvmsg` returns.
const TLS_GET_RECORD_TYPE: libc::c_int = 2;

/// What one `recvmsg` on a kTLS socket returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsRead {
    /// Application data, now in `buf` (none: the peer closed the TCP connection).
    Data,
    /// A record of another type: an alert (its level and description), or a
    /// post-handshake message. Nothing was added to `buf`.
    Control { content_type: u8, first: [u8; 2] },
}

/// One `recvmsg(2)` on a socket with kTLS receive keys: application data goes into the
/// unfilled part of `buf`; a control record (which the kernel returns on its own, with
/// its type in a control message) is reported instead. Without room for that control
/// message the kernel would fail such a record with EIO.
pub fn recv_tls(fd: RawFd, buf: &mut tokio::io::ReadBuf<'_>) -> io::Result<TlsRead> {
    // SAFETY: we only let the kernel write into the unfilled part, never de-initialize
    // anything.
    let dst = unsafe { buf.unfilled_mut() };
    let mut iov = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let mut control = Cmsg1::default();
    let mut msg = msghdr(&mut iov, &mut control, std::mem::size_of::<Cmsg1>());
    // SAFETY: `msg` points at one iovec over `dst` (writable, of its length) and at
    // `control` (writable, of the length given); all live for the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    let mut content_type = TLS_APPLICATION_DATA;
    // SAFETY: the CMSG_* helpers walk the control buffer the kernel filled in, within
    // `msg.msg_controllen`; CMSG_DATA of a TLS_GET_RECORD_TYPE message is one byte.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_TLS && (*c).cmsg_type == TLS_GET_RECORD_TYPE {
                content_type = *libc::CMSG_DATA(c);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if content_type == TLS_APPLICATION_DATA {
        // SAFETY: recvmsg wrote (initialized) exactly `n` bytes at the start of the
        // unfilled part.
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        return Ok(TlsRead::Data);
    }
    if n < 2 {
        // An alert is two bytes, a handshake message's type and length more: a shorter
        // control record (or a read buffer too small for it) must not pass for a
        // close_notify.
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a TLS record of type {content_type} with {n} byte(s) read"),
        ));
    }
    let mut first = [0u8; 2];
    for (i, b) in first.iter_mut().enumerate() {
        // SAFETY: recvmsg initialized the first `n` (>= 2) bytes of `dst`.
        *b = unsafe { dst[i].assume_init() };
    }
    Ok(TlsRead::Control {
        content_type,
        first,
    })
}

/// `TCP_DEFER_ACCEPT` on a listening socket: accept(2) returns a connection only once
/// data has arrived on it (or after about `secs`, when the kernel hands it over
/// anyway); 0 turns it off.
pub fn set_defer_accept(l: &std::net::TcpListener, secs: u32) -> io::Result<()> {
    let v = libc::c_int::try_from(secs).unwrap_or(libc::c_int::MAX);
    setsockopt(
        l.as_raw_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_DEFER_ACCEPT,
        &v.to_ne_bytes(),
    )
}

/// Closes with RST (`SO_LINGER` 0), so a client cannot mistake a cut response for a
/// complete one.
pub fn close_with_reset<S: std::os::fd::AsFd>(sock: S) {
    let _ = socket2::SockRef::from(&sock).set_linger(Some(std::time::Duration::ZERO));
    drop(sock);
}

/// One `recv(2)` into the unfilled part of `buf` (no zeroing of the buffer first);
/// `WouldBlock` when nothing is there.
pub fn recv_into(fd: RawFd, buf: &mut tokio::io::ReadBuf<'_>) -> io::Result<()> {
    // SAFETY: we only let the kernel write into the unfilled part, never de-initialize
    // anything.
    let dst = unsafe { buf.unfilled_mut() };
    // SAFETY: `dst` is writable memory of `dst.len()` bytes for the call; `fd` is a
    // socket the caller borrows.
    let n = unsafe { libc::recv(fd, dst.as_mut_ptr().cast(), dst.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: recv wrote (initialized) exactly `n` bytes at the start of the unfilled
    // part.
    unsafe { buf.assume_init(n) };
    buf.advance(n);
    Ok(())
}

/// A private epoll instance (the `exclusive` accept strategy's waiting room).
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 has no pointer arguments; a non-negative result is a new
        // fd that nothing else owns, so OwnedFd may take it.
        let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("epoll_create1() failed: {e}"),
            ));
        }
        // SAFETY: see above: `raw` is a fresh fd owned by no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Epoll { fd })
    }

    /// Registers `fd` for readability with `EPOLLEXCLUSIVE` (one waiter is woken per
    /// event, not all), tagged with `token`.
    pub fn add_exclusive(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
            u64: token,
        };
        // SAFETY: both fds are open (we own `self.fd`; the caller's `fd` is borrowed
        // for the call); `ev` is a valid epoll_event the kernel only reads.
        if unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("epoll_ctl(EPOLLEXCLUSIVE) failed: {e}"),
            ));
        }
        Ok(())
    }

    /// Blocks until at least one registered fd is ready; returns their tokens.
    pub fn wait(&self) -> io::Result<Vec<u64>> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 8];
        // SAFETY: `events` is a writable array of 8 epoll_event and we pass its length.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                -1,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(events[..n as usize].iter().map(|e| e.u64).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{rt, tcp_pair as pair};
    use std::io::{Read, Write};

    #[test]
    fn sendfile_sends_the_range_and_reports_eof() {
        rt().block_on(async {
            let mut f = tempfile::tempfile().unwrap();
            f.write_all(b"0123456789").unwrap();
            let (s, mut c) = pair().await;
            let mut s = super::super::Sock::registered(s);
            let mut off = 2;
            let n = sendfile_once(&mut s, f.as_raw_fd(), &mut off, 5)
                .await
                .unwrap();
            assert_eq!((n, off), (5, 7));
            let mut got = [0u8; 5];
            c.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"23456");
            let mut off = 10;
            assert_eq!(
                sendfile_once(&mut s, f.as_raw_fd(), &mut off, 5)
                    .await
                    .unwrap(),
                0
            );
        });
    }

    #[test]
    fn reactor_listener_wakes_for_a_connection() {
        rt().block_on(async {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let l = reactor_listener(l).unwrap();
            let c = std::net::TcpStream::connect(addr).unwrap();
            let mut g = l.readable().await.unwrap();
            let (s, peer) = g
                .try_io(|l| accept_nonblocking(l.get_ref()))
                .unwrap()
                .unwrap();
            assert_eq!(peer, c.local_addr().unwrap());
            assert_eq!(s.peer_addr().unwrap(), peer);
            // The queue is empty: EAGAIN, reported as "would block" (readiness cleared).
            assert!(g.try_io(|l| accept_nonblocking(l.get_ref())).is_err());
        });
    }

    /// A deferred listener does not report a connection that has sent nothing; it
    /// does once the first bytes arrive.
    #[test]
    fn defer_accept_waits_for_the_first_bytes() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        set_defer_accept(&l, 5).unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!has_pending(&l), "accepted before any byte arrived");
        c.write_all(b"GET").unwrap();
        let mut ok = false;
        for _ in 0..100 {
            if has_pending(&l) {
                ok = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(ok, "the connection with data was never reported");
        set_defer_accept(&l, 0).unwrap();
    }

    /// Without kTLS keys a socket's recvmsg carries no record type: everything reads as
    /// application data. `TCP_ULP "tls"` is either taken (a kernel with the module; the
    /// socket still carries plain bytes until keys are set) or refused with ENOENT.
    /// Keys themselves need a real handshake: `tests/tls.rs` checks them end to end
    /// under a kernel with the module (EDGECACHE_TEST_KTLS=1).
    #[test]
    fn recv_tls_reads_plain_data_and_tls_ulp_is_taken_or_refused() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = accept_nonblocking(&l).unwrap();
        match set_tcp_ulp_tls(s.as_raw_fd()) {
            Ok(()) => {}
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}"),
        }
        c.write_all(b"plain").unwrap();
        s.set_nonblocking(false).unwrap();
        let mut mem = [std::mem::MaybeUninit::<u8>::uninit(); 16];
        let mut buf = tokio::io::ReadBuf::uninit(&mut mem);
        assert_eq!(recv_tls(s.as_raw_fd(), &mut buf).unwrap(), TlsRead::Data);
        assert_eq!(buf.filled(), b"plain");
        assert!(
            set_tls_keys(s.as_raw_fd(), TlsDir::Tx, &[0u8; 3]).is_err(),
            "a bad struct"
        );
    }

    #[test]
    fn recv_into_fills_only_what_arrived() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = accept_nonblocking(&l).unwrap();
        let mut mem = [std::mem::MaybeUninit::<u8>::uninit(); 16];
        let mut buf = tokio::io::ReadBuf::uninit(&mut mem);
        let e = recv_into(s.as_raw_fd(), &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        c.write_all(b"hello").unwrap();
        s.set_nonblocking(false).unwrap();
        recv_into(s.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(buf.filled(), b"hello");
        assert_eq!(buf.remaining(), 11);
        drop(c);
        recv_into(s.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(buf.filled(), b"hello", "EOF adds nothing");
    }

    #[test]
    fn close_with_reset_sends_rst() {
        rt().block_on(async {
            let (s, mut c) = pair().await;
            close_with_reset(s);
            let mut buf = [0u8; 1];
            let e = c.read(&mut buf).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::ConnectionReset);
        });
    }

    #[test]
    fn epoll_reports_the_ready_token() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ep = Epoll::new().unwrap();
        ep.add_exclusive(l.as_raw_fd(), 7).unwrap();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert_eq!(ep.wait().unwrap(), vec![7]);
        assert!(ep.add_exclusive(-1, 0).is_err());
    }
}
