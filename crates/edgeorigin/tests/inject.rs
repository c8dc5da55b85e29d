//! Every injection parameter does what it says, over real HTTP. Timing checks are lower
//! bounds only (a delay of N ms takes at least N ms); nothing here asserts speed.

mod common;

use common::{obj, origin, xxh3_hex};
use edge_testkit::{get, Client};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn delay_ms_delays_the_head() {
    let (_p, addr) = origin(&[]);
    let t = Instant::now();
    let r = get(addr, "/obj/1k/1?delay_ms=300", &[]);
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(r.body, obj(1024, 1), "same object, just later");
}

#[test]
fn slow_bps_paces_the_body() {
    let (_p, addr) = origin(&[]);
    let t = Instant::now();
    let r = get(addr, "/obj/3000/1?slow_bps=6000", &[]);
    // 3000 bytes at 6000 B/s: at least ~0.5 s (the first slice goes out at once).
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(r.body, obj(3000, 1));
    assert_eq!(r.header("x-checksum").unwrap(), xxh3_hex(&r.body));
}

#[test]
fn status_overrides_the_status() {
    let (_p, addr) = origin(&[]);
    let mut c = Client::connect(addr);
    let r = c.get("/obj/1k/1?status=503", &[]);
    assert_eq!(r.status, 503);
    assert_eq!(r.body, b"503 Service Unavailable\n");
    assert_eq!(r.header("x-checksum").unwrap(), xxh3_hex(&r.body));
    let r = c.get("/txt/1k/1?status=404&max_age=60", &[]);
    assert_eq!(
        (r.status, r.header("cache-control")),
        (404, Some("max-age=60"))
    );
    let r = c.get("/obj/1k/1?status=203", &[]);
    assert_eq!(
        (r.status, r.body.len()),
        (203, 1024),
        "2xx keeps the object"
    );
    let r = c.get("/obj/1k/1?status=204", &[]);
    assert_eq!(r.status, 204);
    assert!(r.header("content-length").is_none());
    let r = c.get("/obj/1k/1?status=304", &[]);
    assert_eq!(r.status, 304);
    // Injected statuses skip conditionals and ranges.
    let r = c.get("/obj/1k/1?status=200", &["Range: bytes=0-1"]);
    assert_eq!((r.status, r.body.len()), (200, 1024));
    // Injection works on any path, even one that would be a 404.
    assert_eq!(c.get("/whatever?status=500", &[]).status, 500);
    assert_eq!(
        c.get("/obj/1k/1", &[]).status,
        200,
        "the connection is still good"
    );
}

/// Reads everything until EOF or error; returns the bytes and how it ended.
fn read_until_end(s: &mut TcpStream) -> (Vec<u8>, Option<ErrorKind>) {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (out, None),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => return (out, Some(e.kind())),
        }
    }
}

#[test]
fn reset_sends_half_the_body_then_resets() {
    let (_p, addr) = origin(&[]);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /obj/1m/1?reset=1 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let (bytes, end) = read_until_end(&mut s);
    assert_eq!(end, Some(ErrorKind::ConnectionReset), "RST, not FIN");
    let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&bytes[..head_end]);
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert!(head.contains("Content-Length: 1048576"), "{head}");
    let body = &bytes[head_end..];
    assert_eq!(body.len(), 1 << 19, "half the body arrived");
    assert_eq!(body, &obj(1 << 20, 1)[..1 << 19]);
}

#[test]
fn cache_control_parameters() {
    let (_p, addr) = origin(&["--max-age", "100"]);
    let mut c = Client::connect(addr);
    for (q, cc) in [
        ("", "max-age=100"),
        ("?max_age=0", "max-age=0"),
        ("?max_age=86400", "max-age=86400"),
        ("?no_store=1", "no-store"),
        ("?private=1", "private"),
        ("?private=1&no_store=1", "no-store"),
    ] {
        let r = c.get(&format!("/obj/1k/1{q}"), &[]);
        assert_eq!(r.header("cache-control"), Some(cc), "{q}");
    }
}

#[test]
fn vary_varies_the_body_by_that_header() {
    let (_p, addr) = origin(&[]);
    let mut c = Client::connect(addr);
    let path = "/obj/4k/1?vary=X-Variant";
    let a = c.get(path, &["X-Variant: a"]);
    let a2 = c.get(path, &["x-variant: a"]);
    let b = c.get(path, &["X-Variant: b"]);
    let none = c.get(path, &[]);
    assert_eq!(a.header("vary"), Some("X-Variant"));
    assert_eq!(a.body, a2.body, "same value, same variant");
    assert_ne!(a.body, b.body, "another value, another variant");
    assert_ne!(a.header("etag"), b.header("etag"));
    assert_eq!(
        none.body,
        obj(4096, 1),
        "without the header: the plain object"
    );
    for r in [&a, &b, &none] {
        assert_eq!(r.header("x-checksum").unwrap(), xxh3_hex(&r.body));
    }
    assert_eq!(c.get("/obj/1k/1?vary=Bad%20Name", &[]).status, 400);
}

#[test]
fn set_cookie_tag_etag_and_lm_parameters() {
    let (_p, addr) = origin(&[]);
    let mut c = Client::connect(addr);
    let r = c.get("/obj/1k/1?set_cookie=1", &[]);
    assert_eq!(r.header("set-cookie"), Some("s=1"));
    assert!(c.get("/obj/1k/1", &[]).header("set-cookie").is_none());

    let r = c.get("/obj/1k/1?tag=a,b", &[]);
    assert_eq!(r.header("cache-tag"), Some("a,b"));
    assert_eq!(r.header("surrogate-key"), Some("a b"));
    let r = c.get("/obj/1k/1?tag=news%2Csports", &[]);
    assert_eq!(r.header("cache-tag"), Some("news,sports"));
    assert_eq!(
        c.get("/obj/1k/1?tag=a%0d%0aX-Evil:%201", &[]).status,
        400,
        "no header injection"
    );

    let r = c.get("/obj/1k/1?etag=0&lm=0", &[]);
    assert!(r.header("etag").is_none() && r.header("last-modified").is_none());
    assert_eq!(r.body.len(), 1024);
    // Without validators, conditionals cannot match, except `*`, which matches any
    // current representation (RFC 9110 13.1.2).
    assert_eq!(
        c.get("/obj/1k/1?etag=0", &["If-None-Match: \"x\""]).status,
        200
    );
    assert_eq!(c.get("/obj/1k/1?etag=0", &["If-None-Match: *"]).status, 304);
    assert_eq!(
        c.get(
            "/obj/1k/1?lm=0",
            &["If-Modified-Since: Tue, 02 Jan 2024 00:00:00 GMT"]
        )
        .status,
        200
    );
}

#[test]
fn chunked_uses_transfer_encoding() {
    let (_p, addr) = origin(&[]);
    let mut c = Client::connect(addr);
    let r = c.get("/obj/200k/2?chunked=1", &[]);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert!(r.header("content-length").is_none());
    assert_eq!(r.body, obj(200 << 10, 2));
    assert_eq!(r.header("x-checksum").unwrap(), xxh3_hex(&r.body));
    let r = c.get("/obj/0/2?chunked=1", &[]);
    assert!(r.body.is_empty());
    assert_eq!(
        c.get("/obj/1k/1", &[]).body.len(),
        1024,
        "framing intact after chunked"
    );
    // HTTP/1.0 cannot take chunked: the body is delimited by close instead.
    let mut c = Client::connect(addr);
    c.send(b"GET /obj/5000/1?chunked=1 HTTP/1.0\r\n\r\n");
    let raw = c.read_to_close();
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&raw[..head_end]);
    assert!(
        !head.contains("Transfer-Encoding") && !head.contains("Content-Length"),
        "{head}"
    );
    assert_eq!(&raw[head_end..], &obj(5000, 1)[..]);
}

#[test]
fn burn_spends_cpu() {
    let (_p, addr) = origin(&[]);
    let t = Instant::now();
    let r = get(addr, "/burn?us=50000", &[]);
    assert!(t.elapsed() >= Duration::from_millis(50));
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"burned 50000 us\n");
}

#[test]
fn bad_and_unknown_parameters() {
    let (_p, addr) = origin(&[]);
    let mut c = Client::connect(addr);
    let r = c.get("/obj/1k/1?delay_ms=soon", &[]);
    assert_eq!(r.status, 400);
    assert!(String::from_utf8_lossy(&r.body).contains("delay_ms"));
    assert_eq!(c.get("/obj/1k/1?status=99", &[]).status, 400);
    let r = c.get("/obj/1k/1?cachebuster=123&utm_source=x", &[]);
    assert_eq!((r.status, r.body.len()), (200, 1024));
}
