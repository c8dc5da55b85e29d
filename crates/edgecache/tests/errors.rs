//! Bad input gets a clear 4xx/5xx with `Connection: close`, and the connection closes.

mod common;
use common::*;
use edge_testkit::Client;
use std::net::SocketAddr;

fn server() -> (edge_testkit::Proc, SocketAddr) {
    let (up, _) = recording_upstream();
    let (p, addr, _) = edgecache(&proxy_config(
        up,
        "client_header_timeout = \"1s\"\nclient_max_body_size = \"1k\"\nclient_max_request_line = \"1k\"\nclient_max_header_size = \"4k\"",
        "",
    ));
    (p, addr)
}

/// Sends `raw` and expects `status`, `Connection: close`, then EOF.
fn expect_status(addr: SocketAddr, raw: &[u8], status: u16) {
    let mut c = Client::connect(addr);
    c.send(raw);
    let r = c.read_response(false);
    assert_eq!(
        r.status,
        status,
        "for {:?}",
        String::from_utf8_lossy(&raw[..raw.len().min(80)])
    );
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.is_closed(), "connection must close after {status}");
}

#[test]
fn every_error_status() {
    let (_p, addr) = server();
    expect_status(addr, b"GARBAGE\r\n\r\n", 400);
    expect_status(addr, b"GET / HTTP/1.1\r\n\r\n", 400); // no Host
    expect_status(
        addr,
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        400,
    );
    expect_status(
        addr,
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        400,
    );
    expect_status(
        addr,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\n",
        413,
    );
    let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(2000));
    expect_status(addr, long.as_bytes(), 414);
    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "b".repeat(5000)
    );
    expect_status(addr, big.as_bytes(), 431);
    expect_status(
        addr,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        501,
    );
    expect_status(
        addr,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
        400,
    );
    expect_status(addr, b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505);
    expect_status(addr, b"GET / HTTP/1.1\r\nHost: a\r\n", 408); // head never finishes
}

#[test]
fn chunked_body_over_the_limit_is_413() {
    let (_p, addr) = server();
    let mut raw = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..4 {
        raw.extend_from_slice(b"200\r\n");
        raw.extend_from_slice(&[b'x'; 0x200]);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    expect_status(addr, &raw, 413);
}

#[test]
fn a_smuggled_second_request_is_never_served() {
    let (_p, addr) = server();
    // CL.TE: a front end that honours Content-Length would see one request; we refuse.
    let mut c = Client::connect(addr);
    c.send(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 30\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: a\r\n\r\n");
    let raw = c.read_to_close();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert_eq!(
        text.matches("HTTP/1.1").count(),
        1,
        "exactly one response: {text}"
    );
}

#[test]
fn idle_keepalive_connection_closes_silently_after_keepalive_timeout() {
    let (up, _) = recording_upstream();
    let (_p, addr, _) = edgecache(&proxy_config(up, "keepalive_timeout = \"1s\"", ""));
    let mut c = Client::connect(addr);
    assert_eq!(c.get("/x", &[]).status, 200);
    c.set_read_timeout(std::time::Duration::from_secs(5));
    let start = std::time::Instant::now();
    assert!(
        c.read_to_close().is_empty(),
        "no 408 for an idle keep-alive connection"
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(4));
}

#[test]
fn keepalive_requests_limit_closes_after_the_nth_response() {
    let (up, _) = recording_upstream();
    let (_p, addr, _) = edgecache(&proxy_config(up, "keepalive_requests = 2", ""));
    let mut c = Client::connect(addr);
    assert!(c.get("/1", &[]).header("connection").is_none());
    assert_eq!(c.get("/2", &[]).header("connection"), Some("close"));
    assert!(c.is_closed());
}

#[test]
fn a_head_trickled_byte_by_byte_is_served_and_an_endless_line_gets_414() {
    let (_p, addr) = server();
    let mut c = Client::connect(addr);
    for b in b"GET /trickle HTTP/1.1\r\nHost: a\r\n\r\n" {
        c.send(&[*b]);
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(c.read_response(false).status, 200);

    // A request line longer than client_max_request_line (1k here) that never ends.
    let mut c = Client::connect(addr);
    c.send(b"GET /");
    for _ in 0..12 {
        c.send(&[b'a'; 100]);
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let r = c.read_response(false);
    assert_eq!(r.status, 414);
    assert!(c.is_closed());
}

#[test]
fn keepalive_timeout_zero_closes_after_each_response() {
    let (up, _) = recording_upstream();
    let (_p, addr, _) = edgecache(&proxy_config(up, "keepalive_timeout = \"0\"", ""));
    let mut c = Client::connect(addr);
    assert_eq!(c.get("/1", &[]).header("connection"), Some("close"));
    assert!(c.is_closed());
}

#[test]
fn worker_connections_limit_pauses_accepting_and_resumes() {
    let (up, _) = recording_upstream();
    let (_p, addr, _) = edgecache(&proxy_config(up, "worker_connections = 2", ""));
    let mut a = Client::connect(addr);
    let mut b = Client::connect(addr);
    assert_eq!(a.get("/a", &[]).status, 200);
    assert_eq!(b.get("/b", &[]).status, 200);
    // A third connection completes its TCP handshake (the kernel's backlog) but is not
    // accepted while two are open: its request gets no answer.
    let mut c = Client::connect(addr);
    c.send(b"GET /c HTTP/1.1\r\nHost: t\r\n\r\n");
    c.set_read_timeout(std::time::Duration::from_millis(500));
    let mut probe = [0u8; 1];
    let r = std::io::Read::read(&mut c.stream, &mut probe);
    assert!(
        matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut),
        "the third connection was served past worker_connections: {r:?}"
    );
    // One closes: the waiting connection is accepted and answered.
    drop(a);
    c.set_read_timeout(std::time::Duration::from_secs(10));
    assert_eq!(c.read_response(false).status, 200);
    assert_eq!(
        b.get("/b2", &[]).status,
        200,
        "the open connections kept working"
    );
}
