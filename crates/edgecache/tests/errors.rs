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

/// Whether the server closed `c` (EOF or reset) without answering.
fn refused(c: &mut Client) -> bool {
    c.set_read_timeout(std::time::Duration::from_secs(5));
    let mut probe = [0u8; 64];
    match std::io::Read::read(&mut c.stream, &mut probe) {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(n) => panic!(
            "answered past worker_connections: {:?}",
            String::from_utf8_lossy(&probe[..n])
        ),
    }
}

/// Polls /status until `key` (a worker total) reaches `want`.
fn wait_status(admin: SocketAddr, key: &str, want: u64) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let st = get_text(admin, "/status");
        let totals = &st[st.find("\"totals\"").unwrap_or(0)..];
        if json_number(totals, key).is_some_and(|v| v >= want) {
            return st;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{key} never reached {want}: {st}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// 10% more busy connections than `worker_connections`: the excess is closed at once
/// (not left hanging in the backlog), counted in /status, and the server goes on
/// answering the connections it holds and new ones once they are gone.
#[test]
fn connections_past_worker_connections_are_refused_cleanly() {
    let (up, _) = recording_upstream();
    let cfg = proxy_config(up, "worker_connections = 100", "");
    let (_p, addr, admin) = edgecache(&cfg);
    // Busy: each has sent part of a request head (never idle, never reclaimable).
    let mut held: Vec<Client> = (0..100)
        .map(|i| {
            let mut c = Client::connect(addr);
            c.send(format!("GET /held/{i} HTTP/1.1\r\n").as_bytes());
            c
        })
        .collect();
    wait_status(admin, "active", 100);
    for _ in 0..10 {
        let mut extra = Client::connect(addr);
        extra.send(b"GET /extra HTTP/1.1\r\nHost: t\r\n\r\n");
        assert!(refused(&mut extra), "closed at once");
    }
    let st = wait_status(admin, "refused", 10);
    let totals = &st[st.find("\"totals\"").unwrap()..];
    assert_eq!(json_number(totals, "refused"), Some(10), "{st}");
    // The held connections are all still served.
    for c in held.iter_mut() {
        c.send(b"Host: t\r\n\r\n");
        assert_eq!(c.read_response(false).status, 200);
    }
    drop(held);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let st = get_text(admin, "/status");
        let totals = &st[st.find("\"totals\"").unwrap()..];
        if json_number(totals, "active") == Some(0) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "held connections never closed: {st}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Room again (their sockets closed): a new connection is served.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut c = Client::connect(addr);
        c.send(b"GET /after HTTP/1.1\r\nHost: t\r\n\r\n");
        let mut buf = [0u8; 12];
        c.set_read_timeout(std::time::Duration::from_secs(5));
        if let Ok(12) = std::io::Read::read(&mut c.stream, &mut buf) {
            assert_eq!(&buf, b"HTTP/1.1 200");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never served again");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// At `worker_connections`, idle keep-alive connections make room for new ones (the
/// longest idle closed first, counted as `reclaimed`), as nginx reuses them; busy
/// connections are never closed for room.
#[test]
fn idle_connections_make_room_at_worker_connections() {
    let (up, _) = recording_upstream();
    let (_p, addr, admin) = edgecache(&proxy_config(up, "worker_connections = 2", ""));
    let mut a = Client::connect(addr);
    assert_eq!(a.get("/a", &[]).status, 200);
    // `b` is busy: half a request head.
    let mut b = Client::connect(addr);
    b.send(b"GET /b HTTP/1.1\r\n");
    // `a` parks once idle past its grace.
    wait_status(admin, "active", 2);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !get_text(admin, "/status").contains("\"parked\": 1") {
        assert!(std::time::Instant::now() < deadline, "a never parked");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A third connection is served: `a` (idle) was closed to make room.
    let mut c = Client::connect(addr);
    assert_eq!(c.get("/c", &[]).status, 200);
    assert!(a.is_closed(), "the idle connection made room");
    let st = wait_status(admin, "reclaimed", 1);
    let totals = &st[st.find("\"totals\"").unwrap()..];
    assert_eq!(json_number(totals, "refused"), Some(0), "{st}");
    // The busy one was kept.
    b.send(b"Host: t\r\n\r\n");
    assert_eq!(b.read_response(false).status, 200);
}

/// Hostile heads at the default limits: a 1 MB request line gets 414 and a flood of
/// header lines 431, each with a close, and the server goes on serving.
#[test]
fn a_megabyte_request_line_and_a_header_flood_get_414_and_431() {
    let (up, _) = recording_upstream();
    let (_p, addr, _) = edgecache(&proxy_config(up, "", ""));
    let send_raw = |raw: Vec<u8>| -> Vec<u8> {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        // The server answers and closes before taking all of it: a write may fail.
        let _ = std::io::Write::write_all(&mut s, &raw);
        let mut out = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut out);
        out
    };
    let mut line = b"GET /".to_vec();
    line.extend(std::iter::repeat_n(b'a', 1 << 20));
    line.extend_from_slice(b" HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = send_raw(line);
    assert!(
        r.starts_with(b"HTTP/1.1 414"),
        "{:?}",
        String::from_utf8_lossy(&r[..r.len().min(100)])
    );
    let mut flood = b"GET / HTTP/1.1\r\nHost: t\r\n".to_vec();
    for i in 0..10_000 {
        flood.extend_from_slice(format!("X-F{i}: v\r\n").as_bytes());
    }
    flood.extend_from_slice(b"\r\n");
    let r = send_raw(flood);
    assert!(
        r.starts_with(b"HTTP/1.1 431"),
        "{:?}",
        String::from_utf8_lossy(&r[..r.len().min(100)])
    );
    assert_eq!(Client::connect(addr).get("/ok", &[]).status, 200);
}
