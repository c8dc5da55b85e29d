//! Reverse-proxy behaviour of the real `edgecache` binary in front of real upstreams on
//! 127.0.0.1: keep-alive, pipelining, bodies in both directions, HEAD, header rules,
//! upstream failures.

mod common;
use common::*;
use edge_testkit::{get, Client};
use std::time::Duration;

#[test]
fn keepalive_serves_several_requests_on_one_connection() {
    let (_o, oaddr) = origin();
    let (_e, addr, _) = edgecache(&proxy_config(oaddr, "", ""));
    let mut c = Client::connect(addr);
    for (i, size) in [(1, 1024usize), (2, 10240), (3, 100)].iter() {
        let r = c.get(&format!("/obj/{size}/{i}"), &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), *size);
        assert!(
            r.header("connection").is_none(),
            "keep-alive is the HTTP/1.1 default"
        );
        let direct = get(oaddr, &format!("/obj/{size}/{i}"), &[]);
        assert_eq!(r.body, direct.body, "bytes differ from the origin's");
        assert_eq!(r.header("x-checksum"), direct.header("x-checksum"));
        assert_eq!(r.header("server"), Some("edgecache"));
        assert!(r.header("date").is_some());
    }
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (_o, oaddr) = origin();
    let (_e, addr, _) = edgecache(&proxy_config(oaddr, "", ""));
    let mut c = Client::connect(addr);
    c.send(b"GET /obj/3000/1 HTTP/1.1\r\nHost: a\r\n\r\nGET /obj/1000/2 HTTP/1.1\r\nHost: a\r\n\r\nHEAD /obj/2000/3 HTTP/1.1\r\nHost: a\r\n\r\nGET /obj/10/4 HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(c.read_response(false).body.len(), 3000);
    assert_eq!(c.read_response(false).body.len(), 1000);
    let h = c.read_response(true);
    assert_eq!(h.header("content-length"), Some("2000"));
    assert_eq!(c.read_response(false).body.len(), 10);
}

#[test]
fn head_has_length_but_no_body() {
    let (_o, oaddr) = origin();
    let (_e, addr, _) = edgecache(&proxy_config(oaddr, "", ""));
    let mut c = Client::connect(addr);
    let r = c.request("HEAD", "/obj/10k/1", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("10240"));
    assert!(r.body.is_empty());
    // The connection is still in sync: the next response is the right one.
    let r = c.get("/obj/5/1", &[]);
    assert_eq!(r.body.len(), 5);
}

#[test]
fn chunked_request_body_is_forwarded_intact_and_chunked_response_comes_back() {
    let (up, seen) = recording_upstream();
    let (_e, addr, _) = edgecache(&proxy_config(up, "client_max_body_size = \"4m\"", ""));
    let body = payload(300_000);
    let mut req = b"POST /upload HTTP/1.1\r\nHost: example.test\r\nTransfer-Encoding: chunked\r\nX-Reply-Chunked: 1\r\n\r\n".to_vec();
    // Odd chunk sizes, one with an extension.
    let mut off = 0;
    for (i, n) in [1usize, 7, 4096, 65536, 12345].iter().cycle().enumerate() {
        if off >= body.len() {
            break;
        }
        let end = (off + n).min(body.len());
        if i == 2 {
            req.extend_from_slice(format!("{:x};ext=1\r\n", end - off).as_bytes());
        } else {
            req.extend_from_slice(format!("{:x}\r\n", end - off).as_bytes());
        }
        req.extend_from_slice(&body[off..end]);
        req.extend_from_slice(b"\r\n");
        off = end;
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let mut c = Client::connect(addr);
    c.send(&req);
    let r = c.read_response(false);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.body.len(), body.len());
    assert!(r.body == body, "echoed body differs");
    let s = seen.lock().unwrap();
    assert_eq!(s.bodies[0], body, "upstream got a different body");
    assert!(s.heads[0]
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked"));
    // Keep-alive survives a chunked exchange.
    drop(s);
    let r = c.get("/again", &[]);
    assert_eq!(r.status, 200);
}

#[test]
fn content_length_body_with_expect_continue() {
    let (up, seen) = recording_upstream();
    let (_e, addr, _) = edgecache(&proxy_config(up, "", ""));
    let body = payload(50_000);
    let mut c = Client::connect(addr);
    c.send(
        format!(
            "PUT /x HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    let interim = c.read_response(false);
    assert_eq!(interim.status, 100);
    c.send(&body);
    let r = c.read_response(false);
    assert_eq!(r.status, 200);
    assert!(r.body == body);
    assert_eq!(seen.lock().unwrap().bodies[0], body);
}

#[test]
fn hop_by_hop_headers_are_removed_and_forwarding_headers_added() {
    let (up, seen) = recording_upstream();
    let (_e, addr, _) = edgecache(&proxy_config(up, "", ""));
    let mut c = Client::connect(addr);
    let r = c.get(
        "/h?q=1",
        &[
            "Connection: keep-alive, X-Secret",
            "X-Secret: s",
            "Keep-Alive: timeout=5",
            "TE: trailers",
            "X-Forwarded-For: 10.0.0.1",
            "X-Custom: kept",
        ],
    );
    assert_eq!(r.status, 200);
    assert!(
        r.header("keep-alive").is_none(),
        "upstream's Keep-Alive must not reach the client"
    );
    assert_eq!(r.header("x-upstream"), Some("rec"));
    let head = seen.lock().unwrap().heads[0].to_ascii_lowercase();
    assert!(head.starts_with("get /h?q=1 http/1.1\r\n"), "{head}");
    assert!(
        head.contains("\r\nhost: test\r\n"),
        "Host passes through: {head}"
    );
    assert!(head.contains("\r\nx-custom: kept\r\n"));
    assert!(
        head.contains("\r\nx-forwarded-for: 10.0.0.1, 127.0.0.1\r\n"),
        "{head}"
    );
    for gone in [
        "x-secret",
        "keep-alive:",
        "\r\nte:",
        "connection: keep-alive, x-secret",
    ] {
        assert!(!head.contains(gone), "{gone} was forwarded: {head}");
    }
}

#[test]
fn upstream_down_is_502_and_logged() {
    let dead = edge_testkit::free_addr(); // nothing listens here
    let (e, addr, _) = edgecache(&proxy_config(dead, "", ""));
    let r = get(addr, "/obj/1k/1", &[]);
    assert_eq!(r.status, 502);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        e.stderr().contains("connect() failed"),
        "stderr: {}",
        e.stderr()
    );
}

#[test]
fn upstream_slow_is_504() {
    let (_o, oaddr) = origin();
    let (e, addr, _) = edgecache(&proxy_config(oaddr, "", "read_timeout = \"1s\""));
    let r = get(addr, "/obj/1k/1?delay_ms=3000", &[]);
    assert_eq!(r.status, 504);
    std::thread::sleep(Duration::from_millis(100));
    assert!(e.stderr().contains("timed out"), "stderr: {}", e.stderr());
    // A fast request right after still works.
    assert_eq!(get(addr, "/obj/1k/2", &[]).status, 200);
}

#[test]
fn upstream_chunked_response_reaches_http10_client_close_delimited() {
    let (_o, oaddr) = origin();
    let (_e, addr, _) = edgecache(&proxy_config(oaddr, "", ""));
    let mut c = Client::connect(addr);
    c.send(b"GET /obj/20000/7?chunked=1 HTTP/1.0\r\nHost: a\r\n\r\n");
    let raw = c.read_to_close();
    let text = String::from_utf8_lossy(&raw);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..40.min(text.len())]
    );
    assert!(
        !text.to_ascii_lowercase().contains("transfer-encoding"),
        "no chunked to a 1.0 client"
    );
    let body_start = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let direct = get(oaddr, "/obj/20000/7", &[]);
    assert!(raw[body_start..] == direct.body[..]);
}

#[test]
fn upstream_reset_mid_body_cuts_the_client_connection() {
    let (_o, oaddr) = origin();
    let (_e, addr, _) = edgecache(&proxy_config(oaddr, "", ""));
    let mut c = Client::connect(addr);
    c.send(b"GET /obj/1m/1?reset=1 HTTP/1.1\r\nHost: a\r\n\r\n");
    let raw = c.read_to_close();
    let text = String::from_utf8_lossy(&raw[..20.min(raw.len())]).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        raw.len() < 1024 * 1024,
        "the client must not receive a complete-looking response"
    );
}

/// An origin that answers as if keeping the connection alive, then closes it while idle:
/// every pooled reuse meets a dead connection, and must be retried on a fresh one.
fn origin_closing_idle_connections() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let conns = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c2 = conns.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            c2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut tmp) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                }
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                std::thread::sleep(Duration::from_millis(50));
                // dropped: closed while the proxy holds it as idle
            });
        }
    });
    (addr, conns)
}

#[test]
fn a_pooled_connection_closed_by_the_origin_is_retried_on_a_fresh_one() {
    let (up, conns) = origin_closing_idle_connections();
    let (_e, addr, _) = edgecache(&proxy_config(up, "", ""));
    let mut c = Client::connect(addr);
    for i in 0..5 {
        let r = c.get(&format!("/k{i}"), &[]);
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"ok"[..]),
            "request {i}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Each request after the first found its pooled connection dead and used a new one.
    assert!(conns.load(std::sync::atomic::Ordering::SeqCst) >= 5);
    // A POST (not idempotent) is never replayed: its pooled connection is probed before
    // use, so the dead one is skipped and the POST goes out once, on a new connection.
    let r = c.request("POST", "/p", &["Content-Length: 0"]);
    assert_eq!(r.status, 200);
}
