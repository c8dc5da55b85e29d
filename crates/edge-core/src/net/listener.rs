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
}

/// Binds a TCP listening socket. `reuseport` sets SO_REUSEPORT so several sockets (one per
/// worker) can share the address; the kernel then hashes each new connection to one of
/// them. `nonblocking` is false only for the blocking-accept strategy.
pub fn bind_listener(
    spec: ListenSpec,
    reuseport: bool,
    nonblocking: bool,
) -> io::Result<std::net::TcpListener> {
    let sock = Socket::new(
        Domain::for_address(spec.addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .map_err(|e| with_context(e, "socket()", spec.addr))?;
    sock.set_reuse_address(true)
        .map_err(|e| with_context(e, "setsockopt(SO_REUSEADDR)", spec.addr))?;
    if reuseport {
        sock.set_reuse_port(true)
            .map_err(|e| with_context(e, "setsockopt(SO_REUSEPORT)", spec.addr))?;
    }
    if spec.addr.is_ipv6() {
        let _ = sock.set_only_v6(true);
    }
    sock.set_nonblocking(nonblocking)
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
            ListenSpec {
                addr: "127.0.0.1:0".parse().unwrap(),
                backlog: 16,
            },
            true,
            true,
        )
        .unwrap();
        let addr = a.local_addr().unwrap();
        let b = bind_listener(ListenSpec { addr, backlog: 16 }, true, true).unwrap();
        assert_eq!(b.local_addr().unwrap(), addr);
    }

    #[test]
    fn without_reuseport_a_second_bind_fails_with_context() {
        let a = bind_listener(
            ListenSpec {
                addr: "127.0.0.1:0".parse().unwrap(),
                backlog: 16,
            },
            false,
            true,
        )
        .unwrap();
        let addr = a.local_addr().unwrap();
        let e = bind_listener(ListenSpec { addr, backlog: 16 }, false, true).unwrap_err();
        assert!(e.to_string().contains("bind()"), "{e}");
        assert!(e.to_string().contains(&addr.to_string()), "{e}");
    }
}
