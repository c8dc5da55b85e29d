//! Shared helpers for edgeorigin's integration tests: start the real binary on a free
//! loopback port, checksum bodies independently, split multipart bodies.
#![allow(dead_code)] // each test binary uses a different subset

use edge_testkit::{bin, free_addr, start_listening, Proc};
use std::net::SocketAddr;
use std::time::Duration;

/// Starts `edgeorigin --listen <free addr> <args>` and waits until it accepts.
pub fn origin(args: &[&str]) -> (Proc, SocketAddr) {
    start_listening(|| {
        let addr = free_addr();
        let listen = addr.to_string();
        let mut all = vec!["--listen", listen.as_str()];
        all.extend_from_slice(args);
        let mut p = Proc::spawn(&bin("edgeorigin"), &all);
        p.try_wait_port(addr, Duration::from_secs(10))?;
        Ok((p, addr))
    })
}

/// xxh3-64 of `b` as the origin writes it (16 lowercase hex digits).
pub fn xxh3_hex(b: &[u8]) -> String {
    format!("{:016x}", twox_hash::XxHash3_64::oneshot(b))
}

/// The parts of a `multipart/byteranges` body: `(Content-Range value, data)`.
pub fn multipart_parts(body: &[u8], boundary: &str) -> Vec<(String, Vec<u8>)> {
    let delim = format!("\r\n--{boundary}");
    let mut parts = Vec::new();
    let mut rest = body;
    // Each part starts with CRLF--boundary CRLF; the end is CRLF--boundary--.
    loop {
        let at = find(rest, delim.as_bytes()).expect("boundary");
        rest = &rest[at + delim.len()..];
        if rest.starts_with(b"--") {
            return parts;
        }
        assert!(rest.starts_with(b"\r\n"), "CRLF after boundary");
        rest = &rest[2..];
        let head_end = find(rest, b"\r\n\r\n").expect("part head end");
        let head = String::from_utf8_lossy(&rest[..head_end]).to_string();
        rest = &rest[head_end + 4..];
        let data_end = find(rest, delim.as_bytes()).expect("next boundary");
        let range = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: "))
            .expect("Content-Range in part")
            .to_string();
        parts.push((range, rest[..data_end].to_vec()));
        rest = &rest[data_end..];
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The expected bytes of `/obj/<size>/<id>` (from the library, the same definition).
pub fn obj(size: u64, id: u64) -> Vec<u8> {
    let mut v = vec![0u8; size as usize];
    edgeorigin::object_bytes(size, id, 0, &mut v);
    v
}
