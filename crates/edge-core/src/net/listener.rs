//! Building listening sockets with socket2: the options nginx sets, and SO_REUSEPORT
//! when the strategy wants one socket per worker.

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::SocketAddr;

/// One `[[listen]]` entry, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenSpec {
    pub addr: SocketAddr,
    pub backlog: i32,
    /// `TCP_DEFER_ACCEPT` for this many seconds (0: off): a connection is accepted
    /// once its first bytes have arrived (`deferred`, as nginx's `listen ... deferred`).
    pub defer_accept_secs: u32,
}

impl ListenSpec {
    pub fn new(addr: SocketAddr, backlog: i32) -> ListenSpec {
        ListenSpec {
            addr,
            backlog,
            defer_accept_secs: 0,
        }
    }
}

/// Whether several sockets may share the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortSharing {
    /// One socket for the address.
    Exclusive,
    /// SO_REUSEPORT: one socket per worker; the kernel hashes each new connection to one.
    ReusePort,
}

/// Whether `accept(2)` on the socket blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocking {
    /// O_NONBLOCK: polled in a reactor or an epoll set (every strategy but `blocking`).
    NonBlocking,
    /// Accept threads sleep in accept(2) (the `blocking` and `mutex` strategies).
    Blocking,
}

/// Binds a TCP listening socket with the options nginx sets.
pub fn bind_listener(
    spec: ListenSpec,
    sharing: PortSharing,
    blocking: Blocking,
) -> io::Result<std::net::TcpListener> {
    let l = match super::inherit::take(spec.addr) {
        // Handed over by the previous binary (or systemd): its queue comes with it.
        Some(l) => {
            l.set_nonblocking(blocking == Blocking::NonBlocking)
                .map_err(|e| with_context(e, "fcntl(O_NONBLOCK)", spec.addr))?;
            l
        }
        None => bind_new(spec, sharing, blocking)?,
    };
    // Set (or cleared) on an inherited socket too: the new config decides.
    super::sys::set_defer_accept(&l, spec.defer_accept_secs)
        .map_err(|e| with_context(e, "setsockopt(TCP_DEFER_ACCEPT)", spec.addr))?;
    super::inherit::remember(&l);
    Ok(l)
}

fn bind_new(
    spec: ListenSpec,
    sharing: PortSharing,
    blocking: Blocking,
) -> io::Result<std::net::TcpListener> {
    let sock = Socket::new(
        Domain::for_address(spec.addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .map_err(|e| with_context(e, "socket()", spec.addr))?;
    sock.set_reuse_address(true)
        .map_err(|e| with_context(e, "setsockopt(SO_REUSEADDR)", spec.addr))?;
    if sharing == PortSharing::ReusePort {
        sock.set_reuse_port(true)
            .map_err(|e| with_context(e, "setsockopt(SO_REUSEPORT)", spec.addr))?;
    }
    if spec.addr.is_ipv6() {
        let _ = sock.set_only_v6(true);
    }
    sock.set_nonblocking(blocking == Blocking::NonBlocking)
        .map_err(|e| with_context(e, "fcntl(O_NONBLOCK)", spec.addr))?;
    sock.bind(&spec.addr.into())
        .map_err(|e| with_context(e, "bind()", spec.addr))?;
    sock.listen(spec.backlog)
        .map_err(|e| with_context(e, "listen()", spec.addr))?;
    Ok(sock.into())
}

/// nginx style: name the call, the address and the errno text.
fn with_context(e: io::Error, call: &str, addr: SocketAddr) -> io::Error {
    io::Error::new(e.kind(), format!("{call} to {addr} failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuseport_lets_two_sockets_share_an_address() {
        let a = bind_listener(
            ListenSpec::new("127.0.0.1:0".parse().unwrap(), 16),
            PortSharing::ReusePort,
            Blocking::NonBlocking,
        )
        .unwrap();
        let addr = a.local_addr().unwrap();
        let b = bind_listener(
            ListenSpec::new(addr, 16),
            PortSharing::ReusePort,
            Blocking::NonBlocking,
        )
        .unwrap();
        assert_eq!(b.local_addr().unwrap(), addr);
    }

    #[test]
    fn without_reuseport_a_second_bind_fails_with_context() {
        let a = bind_listener(
            ListenSpec::new("127.0.0.1:0".parse().unwrap(), 16),
            PortSharing::Exclusive,
            Blocking::NonBlocking,
        )
        .unwrap();
        let addr = a.local_addr().unwrap();
        let e = bind_listener(
            ListenSpec::new(addr, 16),
            PortSharing::Exclusive,
            Blocking::NonBlocking,
        )
        .unwrap_err();
        assert!(e.to_string().contains("bind()"), "{e}");
        assert!(e.to_string().contains(&addr.to_string()), "{e}");
    }
}
