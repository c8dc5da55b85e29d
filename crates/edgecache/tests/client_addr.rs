//! The client address against the real binary: a `proxy_protocol = true` listener takes
//! PROXY v1 and v2 headers written raw by the test, and the origin (the recording
//! upstream) and the access log see the address they name; connections without a valid
//! header get no response; `real_ip` takes an `X-Forwarded-For` address only from a
//! trusted peer, walking the list as nginx does; PURGE is checked against the
//! request's client address; `-t` names a bad `real_ip.from` with its line.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const ACCESS_LOG: &str =
    "access_log = { path = \"logs/access.log\", buffer = \"64k\", flush = \"100ms\" }";

/// A PROXY v2 header (PROXY command, TCP) from `src` to `dst`, with one TLV.
fn v2(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let mut body = Vec::new();
    let fam = match (src, dst) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            body.extend_from_slice(&s.ip().octets());
            body.extend_from_slice(&d.ip().octets());
            0x11
        }
        (SocketAddr::V6(s), SocketAddr::V6(d)) => {
            body.extend_from_slice(&s.ip().octets());
            body.extend_from_slice(&d.ip().octets());
            0x21
        }
        _ => panic!("one family"),
    };
    body.extend_from_slice(&src.port().to_be_bytes());
    body.extend_from_slice(&dst.port().to_be_bytes());
    // PP2_TYPE_AUTHORITY "x": skipped.
    body.extend_from_slice(&[0x02, 0, 1, b'x']);
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x21, fam]);
    h.extend_from_slice(&(body.len() as u16).to_be_bytes());
    h.extend_from_slice(&body);
    h
}

/// A v2 LOCAL header (the balancer's own health check).
fn v2_local() -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x20, 0x00, 0, 0]);
    h
}

/// Writes `pieces` (with a pause between them, so they arrive as separate segments)
/// and reads until the server closes: everything it sent.
fn exchange(addr: SocketAddr, pieces: &[&[u8]]) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for (i, p) in pieces.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(30));
        }
        c.write_all(p).unwrap();
    }
    let mut got = Vec::new();
    // A reset (the server closing with our bytes unread) counts as the end too.
    let _ = c.read_to_end(&mut got);
    got
}

fn request(path: &str, extra: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n").into_bytes()
}

/// The `X-Forwarded-For` value of the upstream request for `path`.
fn forwarded_for(seen: &std::sync::Mutex<Seen>, path: &str) -> String {
    let s = seen.lock().unwrap();
    let head = s
        .heads
        .iter()
        .find(|h| h.starts_with(&format!("GET {path} ")))
        .unwrap_or_else(|| panic!("{path} did not reach the upstream: {:?}", s.heads));
    common::head_field(head, "x-forwarded-for").unwrap_or_default()
}

/// The access log's line for `path`, once it is flushed.
fn log_line(p: &edge_testkit::Proc, path: &str) -> String {
    let log = p.dir().join("logs/access.log");
    for _ in 0..100 {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(l) = text.lines().find(|l| l.contains(&format!("GET {path} "))) {
            return l.to_string();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no access log line for {path}");
}

fn metric(admin: SocketAddr, name: &str) -> u64 {
    metric_in(&get_text(admin, "/metrics"), name).unwrap_or(0)
}

fn ok(resp: &[u8]) -> bool {
    resp.starts_with(b"HTTP/1.1 200 ") && resp.windows(16).any(|w| w == b"X-Upstream: rec\r")
}

#[test]
fn proxy_protocol_v1_and_v2_name_the_client() {
    let (up, seen) = recording_upstream();
    let cfg = proxy_config(up, ACCESS_LOG, "").replace(
        "addr = \"{listen}\"",
        "addr = \"{listen}\"\nproxy_protocol = true",
    );
    let (p, addr, _) = edgecache(&cfg);
    let dst = addr.to_string();

    // v1, header and request in one segment.
    let v1 = format!(
        "PROXY TCP4 203.0.113.7 {} 41000 {}\r\n",
        addr.ip(),
        addr.port()
    );
    let r = exchange(addr, &[&[v1.as_bytes(), &request("/v1", "")].concat()]);
    assert!(ok(&r), "{}", String::from_utf8_lossy(&r));
    assert_eq!(forwarded_for(&seen, "/v1"), "203.0.113.7");
    assert!(log_line(&p, "/v1").starts_with("203.0.113.7 - - ["));

    // v1 split inside the header, then the request later.
    let v1 = "PROXY TCP6 2001:db8::9 ::1 41000 443\r\n";
    let r = exchange(
        addr,
        &[
            &v1.as_bytes()[..9],
            &v1.as_bytes()[9..],
            &request("/v1split", ""),
        ],
    );
    assert!(ok(&r), "{}", String::from_utf8_lossy(&r));
    assert_eq!(forwarded_for(&seen, "/v1split"), "2001:db8::9");

    // v2 (IPv4, IPv6), with a TLV, split after the signature; the client's own
    // X-Forwarded-For is kept and the proxied address appended.
    let h = v2("198.51.100.20:5555".parse().unwrap(), dst.parse().unwrap());
    let r = exchange(addr, &[&h[..12], &[&h[12..], &request("/v2", "")].concat()]);
    assert!(ok(&r), "{}", String::from_utf8_lossy(&r));
    assert_eq!(forwarded_for(&seen, "/v2"), "198.51.100.20");
    assert!(log_line(&p, "/v2").starts_with("198.51.100.20 - - ["));
    let h = v2(
        "[2001:db8::20]:5555".parse().unwrap(),
        "[2001:db8::1]:443".parse().unwrap(),
    );
    let r = exchange(
        addr,
        &[&[&h[..], &request("/v2six", "X-Forwarded-For: 192.0.2.1\r\n")].concat()],
    );
    assert!(ok(&r), "{}", String::from_utf8_lossy(&r));
    assert_eq!(forwarded_for(&seen, "/v2six"), "192.0.2.1, 2001:db8::20");
    assert!(log_line(&p, "/v2six").starts_with("2001:db8::20 - - ["));

    // No address (v2 LOCAL, v1 UNKNOWN): the TCP peer.
    let r = exchange(addr, &[&[&v2_local()[..], &request("/local", "")].concat()]);
    assert!(ok(&r), "{}", String::from_utf8_lossy(&r));
    assert_eq!(forwarded_for(&seen, "/local"), "127.0.0.1");
    let r = exchange(
        addr,
        &[&[&b"PROXY UNKNOWN\r\n"[..], &request("/unknown", "")].concat()],
    );
    assert!(ok(&r), "{}", String::from_utf8_lossy(&r));
    assert_eq!(forwarded_for(&seen, "/unknown"), "127.0.0.1");
}

#[test]
fn connections_without_a_valid_header_get_no_response() {
    let (up, seen) = recording_upstream();
    // Not deferred: the start-up probe's connection (no bytes) is accepted at once, and
    // counted, before the test's own.
    let cfg = proxy_config(up, "client_header_timeout = \"1s\"", "").replace(
        "addr = \"{listen}\"",
        "addr = \"{listen}\"\nproxy_protocol = true\ndeferred = false",
    );
    let (_p, addr, admin) = edgecache(&cfg);
    let mut before = 0;
    for _ in 0..100 {
        before = metric(admin, "edgecache_proxy_protocol_errors_total");
        if before >= 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(before, 1, "the start-up probe sent no header");
    let cases: [&[u8]; 5] = [
        // No header: the request itself.
        &request("/none", ""),
        // Malformed v1: a double space, a bad address, no CR.
        b"PROXY TCP4  192.0.2.1 192.0.2.2 1 2\r\nGET /a HTTP/1.1\r\nHost: t\r\n\r\n",
        b"PROXY TCP4 192.0.2.300 192.0.2.2 1 2\r\nGET /b HTTP/1.1\r\nHost: t\r\n\r\n",
        b"PROXY TCP4 192.0.2.1 192.0.2.2 1 2\nGET /c HTTP/1.1\r\nHost: t\r\n\r\n",
        // v2 with version 1 in its version nibble.
        b"\r\n\r\n\0\r\nQUIT\n\x11\x11\x00\x0c\xc0\x00\x02\x01\xc0\x00\x02\x02\x00\x01\x00\x02",
    ];
    for input in cases {
        let r = exchange(addr, &[input]);
        assert!(
            r.is_empty(),
            "{:?} got {:?}",
            String::from_utf8_lossy(input),
            String::from_utf8_lossy(&r)
        );
    }
    // Half a header, then nothing: closed at client_header_timeout.
    let t0 = std::time::Instant::now();
    let r = exchange(addr, &[b"PROXY TCP4 192.0.2.1 "]);
    assert!(r.is_empty());
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert!(
        seen.lock().unwrap().heads.is_empty(),
        "nothing went upstream"
    );
    let mut counted = 0;
    for _ in 0..50 {
        counted = metric(admin, "edgecache_proxy_protocol_errors_total") - before;
        if counted >= 6 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(counted, 6, "every refused connection counted");
}

/// `real_ip = { from, header = "X-Forwarded-For", recursive }` with the test's own
/// address (127.0.0.1) trusted or not.
fn real_ip_server(
    real_ip: &str,
) -> (
    edge_testkit::Proc,
    SocketAddr,
    std::sync::Arc<std::sync::Mutex<Seen>>,
) {
    let (up, seen) = recording_upstream();
    let cfg = proxy_config(up, &format!("real_ip = {real_ip}\n{ACCESS_LOG}"), "");
    let (p, addr, _) = edgecache(&cfg);
    (p, addr, seen)
}

#[test]
fn real_ip_takes_x_forwarded_for_from_trusted_peers_only() {
    let xff = "X-Forwarded-For: 192.0.2.66, 198.51.100.1, 10.1.1.1\r\n";
    // Trusted peer, recursive: past 10.1.1.1 (trusted) to 198.51.100.1.
    let (p, addr, seen) = real_ip_server(
        r#"{ from = ["127.0.0.1", "10.0.0.0/8"], header = "X-Forwarded-For", recursive = true }"#,
    );
    assert!(ok(&exchange(addr, &[&request("/rec", xff)])));
    assert_eq!(
        forwarded_for(&seen, "/rec"),
        "192.0.2.66, 198.51.100.1, 10.1.1.1, 198.51.100.1"
    );
    assert!(log_line(&p, "/rec").starts_with("198.51.100.1 - - ["));
    // No field: the peer.
    assert!(ok(&exchange(addr, &[&request("/nofield", "")])));
    assert_eq!(forwarded_for(&seen, "/nofield"), "127.0.0.1");
    drop(p);

    // Not recursive: the last address, trusted or not.
    let (p, addr, seen) = real_ip_server(
        r#"{ from = ["127.0.0.0/8", "10.0.0.0/8"], header = "x-forwarded-for", recursive = false }"#,
    );
    assert!(ok(&exchange(addr, &[&request("/last", xff)])));
    assert!(log_line(&p, "/last").starts_with("10.1.1.1 - - ["));
    assert_eq!(
        forwarded_for(&seen, "/last"),
        "192.0.2.66, 198.51.100.1, 10.1.1.1, 10.1.1.1"
    );
    drop(p);

    // An untrusted peer: the field is only passed on.
    let (p, addr, seen) = real_ip_server(
        r#"{ from = ["10.0.0.0/8"], header = "X-Forwarded-For", recursive = true }"#,
    );
    assert!(ok(&exchange(addr, &[&request("/untrusted", xff)])));
    assert!(log_line(&p, "/untrusted").starts_with("127.0.0.1 - - ["));
    assert_eq!(
        forwarded_for(&seen, "/untrusted"),
        "192.0.2.66, 198.51.100.1, 10.1.1.1, 127.0.0.1"
    );
    drop(p);

    // Another field (X-Real-IP, the default).
    let (p, addr, _seen) = real_ip_server(r#"{ from = ["127.0.0.1"] }"#);
    assert!(ok(&exchange(
        addr,
        &[&request("/xri", "X-Real-IP: 2001:db8::5\r\n")]
    )));
    assert!(log_line(&p, "/xri").starts_with("2001:db8::5 - - ["));
}

/// `real_ip.header = "proxy_protocol"`: the PROXY source only from a trusted peer.
#[test]
fn real_ip_proxy_protocol_trusts_only_its_from() {
    for (from, want) in [("127.0.0.1", "203.0.113.7"), ("10.0.0.0/8", "127.0.0.1")] {
        let (up, seen) = recording_upstream();
        let cfg = proxy_config(
            up,
            &format!("real_ip = {{ from = [\"{from}\"], header = \"proxy_protocol\" }}"),
            "",
        )
        .replace(
            "addr = \"{listen}\"",
            "addr = \"{listen}\"\nproxy_protocol = true",
        );
        let (_p, addr, _) = edgecache(&cfg);
        let v1 = b"PROXY TCP4 203.0.113.7 127.0.0.1 41000 80\r\n";
        let r = exchange(addr, &[&[&v1[..], &request("/pp", "")].concat()]);
        assert!(ok(&r), "{}", String::from_utf8_lossy(&r));
        assert_eq!(forwarded_for(&seen, "/pp"), want, "from = {from}");
    }
}

/// PURGE's allow-list checks the request's client: a trusted proxy forwarding for an
/// outside client is refused, though the proxy itself (127.0.0.1) is allowed.
#[test]
fn purge_checks_the_request_client() {
    let (_o, oaddr) = origin();
    let dir = tempfile::tempdir().unwrap();
    let cfg = cached_config(oaddr, &dir.path().join("cache"), "", "", LOCAL);
    let cfg =
        format!("real_ip = {{ from = [\"127.0.0.1\"], header = \"X-Forwarded-For\" }}\n{cfg}");
    let (_p, addr, _) = edgecache(&cfg);
    assert_eq!(edge_testkit::get(addr, "/obj/1k/9", &[]).status, 200);
    let mut c = edge_testkit::Client::connect(addr);
    let r = c.request("PURGE", "/obj/1k/9", &["X-Forwarded-For: 198.51.100.1"]);
    assert_eq!(r.status, 403, "an outside client behind the proxy");
    let mut c = edge_testkit::Client::connect(addr);
    let r = c.request("PURGE", "/obj/1k/9", &[]);
    assert_eq!(r.status, 200, "the loopback client itself");
}

#[test]
fn config_test_names_bad_real_ip_values_with_their_line() {
    let text =
        "workers = 1\nreal_ip = { from = [\"10.0.0.0/40\"] }\n[[listen]]\naddr = \"127.0.0.1:1\"\n";
    let (code, stderr, path) = check_config(text);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{path}:2: real_ip.from: invalid prefix length")),
        "{stderr}"
    );
    let text = "workers = 1\nreal_ip = { from = [\"::1\"], header = \"proxy_protocol\" }\n[[listen]]\naddr = \"127.0.0.1:1\"\n";
    let (code, stderr, path) = check_config(text);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{path}:2: real_ip.header:")),
        "{stderr}"
    );
}
