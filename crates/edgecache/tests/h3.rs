//! HTTP/3 against the real binary (`[[listen]] quic = true`): a quinn + h3 client in
//! the test, and Debian's `gtlsclient` (ngtcp2), a client we did not write, for
//! interoperability. What is checked: GET, HEAD and Range over h3 for a miss, a hit and
//! a collapsed miss, bodies against edgeorigin's checksum (a large one too), a stream
//! cancelled mid-body leaving nothing behind, `Alt-Svc` on the TCP side, Retry, 0-RTT
//! refused by default and taken for GET with `early_data = true` (`Early-Data: 1`
//! upstream), a client that changes its address mid-download with 2 workers (the
//! datagrams reach the worker that owns the connection), `-t` refusing quic without
//! TLS, and the counters.

mod common;

use bytes::Buf;
use common::pki::Pki;
use common::{check_config, get_text, metric_in, origin, origin_requests};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A cached proxy in front of `upstream`, HTTP/3 on the TLS listener.
fn h3_config(
    pki: &Pki,
    upstream: SocketAddr,
    workers: usize,
    listen_extra: &str,
    cache_dir: &Path,
) -> String {
    let (cert, key, _) = pki.leaf("site", &["localhost", "a.example"]);
    format!(
        r#"workers = {workers}
worker_cpu_affinity = "off"

[[listen]]
addr = "{{listen}}"
tls = {{ cert = "{cert}", key = "{key}" }}
http2 = true
quic = true
{listen_extra}

[[cache]]
name = "c1"
path = "{dir}"

[[upstream]]
name = "origin"
servers = ["{upstream}"]

[[location]]
prefix = "/"
proxy = "origin"
cache = ["c1"]

[admin]
listen = "{{admin}}"
"#,
        cert = cert.display(),
        key = key.display(),
        dir = cache_dir.display(),
    )
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The client's TLS: our CA, ALPN h3, resumption and early data as rustls does them.
fn client_tls(ca: &Path) -> quinn::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).unwrap();
    for c in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        let c: rustls::pki_types::CertificateDer<'static> = c.unwrap();
        roots.add(c).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h3".to_vec()];
    cfg.enable_early_data = true;
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(cfg).unwrap();
    quinn::ClientConfig::new(Arc::new(quic))
}

fn client_endpoint(ca: &Path) -> quinn::Endpoint {
    let mut e = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    e.set_default_client_config(client_tls(ca));
    e
}

type Send = h3::client::SendRequest<h3_quinn::OpenStreams, bytes::Bytes>;

/// An HTTP/3 connection to `addr` (SNI `localhost`); its driver runs in the background.
async fn h3_connect(e: &quinn::Endpoint, addr: SocketAddr) -> (quinn::Connection, Send) {
    let conn = tokio::time::timeout(
        Duration::from_secs(10),
        e.connect(addr, "localhost").unwrap(),
    )
    .await
    .expect("QUIC handshake within 10 s")
    .expect("QUIC handshake");
    let (driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
        .await
        .unwrap();
    tokio::spawn(drive(driver));
    (conn, send)
}

async fn drive(mut driver: h3::client::Connection<h3_quinn::Connection, bytes::Bytes>) {
    let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
}

/// A response: status, headers (lower-case names), body.
#[derive(Debug)]
struct Resp {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body matches edgeorigin's `X-Checksum` (xxh3-64, hex).
    fn checks_out(&self) -> bool {
        let want = self.header("x-checksum").expect("X-Checksum");
        format!("{:016x}", twox_hash::XxHash3_64::oneshot(&self.body)) == want
    }
}

/// One request on `send`, its body read to the end.
async fn request(send: &mut Send, method: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    let mut b = http::Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"));
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    let mut s = send.send_request(b.body(()).unwrap()).await.unwrap();
    s.finish().await.unwrap();
    let resp = s.recv_response().await.unwrap();
    let mut body = Vec::new();
    while let Some(mut chunk) = s.recv_data().await.unwrap() {
        while chunk.has_remaining() {
            let c = chunk.chunk();
            body.extend_from_slice(c);
            let n = c.len();
            chunk.advance(n);
        }
    }
    Resp {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        body,
    }
}

async fn get(send: &mut Send, path: &str) -> Resp {
    tokio::time::timeout(Duration::from_secs(30), request(send, "GET", path, &[]))
        .await
        .expect("a response within 30 s")
}

fn metrics(admin: SocketAddr) -> String {
    get_text(admin, "/metrics")
}

/// The sum of a counter family's samples whose labels contain `label` ("" for all).
fn metric_sum(text: &str, name: &str, label: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| {
            let rest = &l[name.len()..];
            (rest.starts_with(' ') || rest.starts_with('{')) && l.contains(label)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn get_head_and_range_over_h3_for_a_miss_a_hit_and_a_large_body() {
    let pki = Pki::new();
    let (_o, up) = origin();
    let cache = tempfile::tempdir().unwrap();
    let (_p, listen, admin) = common::edgecache(&h3_config(&pki, up, 1, "", cache.path()));
    rt().block_on(async {
        let e = client_endpoint(&pki.ca_path());
        let (_c, mut send) = h3_connect(&e, listen).await;
        let miss = get(&mut send, "/obj/10k/1").await;
        assert_eq!(miss.status, 200);
        assert_eq!(miss.body.len(), 10 * 1024);
        assert!(miss.checks_out());
        assert_eq!(miss.header("x-cache-status"), Some("MISS"));
        let hit = get(&mut send, "/obj/10k/1").await;
        assert_eq!(hit.header("x-cache-status"), Some("HIT"));
        assert_eq!(hit.body, miss.body);
        assert_eq!(hit.header("content-length"), Some("10240"));
        // No connection-specific field crosses into HTTP/3 (RFC 9114 4.2).
        for f in ["connection", "keep-alive", "transfer-encoding"] {
            assert!(hit.headers.get(f).is_none(), "{f} in {:?}", hit.headers);
        }
        // HEAD: the head of the hit, no body.
        let head = request(&mut send, "HEAD", "/obj/10k/1", &[]).await;
        assert_eq!(head.status, 200);
        assert_eq!(head.header("content-length"), Some("10240"));
        assert!(head.body.is_empty());
        // Range of a hit.
        let part = request(
            &mut send,
            "GET",
            "/obj/10k/1",
            &[("range", "bytes=100-199")],
        )
        .await;
        assert_eq!(part.status, 206);
        assert_eq!(part.header("content-range"), Some("bytes 100-199/10240"));
        assert_eq!(part.body, miss.body[100..200]);
        // A large body, as a miss (streamed from the origin) and as a hit (from disk).
        for want in ["MISS", "HIT"] {
            let big = get(&mut send, "/obj/4m/2").await;
            assert_eq!(big.status, 200);
            assert_eq!(big.body.len(), 4 << 20);
            assert!(big.checks_out(), "{want}: body does not match its checksum");
            assert_eq!(big.header("x-cache-status"), Some(want));
        }
        // An object the origin does not have.
        assert_eq!(get(&mut send, "/nope").await.status, 404);
    });
    let m = metrics(admin);
    assert!(metric_sum(&m, "edgecache_h3_streams_total", "") >= 7, "{m}");
    assert_eq!(
        metric_sum(&m, "edgecache_http_requests_total", "version=\"3\""),
        7
    );
    assert!(metric_sum(&m, "edgecache_quic_handshakes_total", "result=\"ok\"") >= 1);
}

#[test]
fn a_collapsed_miss_over_h3_is_one_origin_fetch() {
    let pki = Pki::new();
    let (_o, up) = origin();
    let cache = tempfile::tempdir().unwrap();
    let (_p, listen, _admin) = common::edgecache(&h3_config(&pki, up, 1, "", cache.path()));
    let before = origin_requests(up);
    let bodies = rt().block_on(async {
        let e = client_endpoint(&pki.ca_path());
        let (_c, send) = h3_connect(&e, listen).await;
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let mut s = send.clone();
            tasks.push(tokio::spawn(async move {
                get(&mut s, "/obj/100k/7?delay_ms=300").await
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    for b in &bodies {
        assert_eq!(b.status, 200);
        assert!(b.checks_out());
    }
    assert_eq!(
        origin_requests(up) - before,
        1,
        "8 concurrent misses, one fetch"
    );
}

#[test]
fn a_stream_cancelled_mid_body_leaves_nothing_behind() {
    let pki = Pki::new();
    let (_o, up) = origin();
    let cache = tempfile::tempdir().unwrap();
    let (_p, listen, admin) = common::edgecache(&h3_config(&pki, up, 1, "", cache.path()));
    rt().block_on(async {
        let e = client_endpoint(&pki.ca_path());
        let (conn, mut send) = h3_connect(&e, listen).await;
        // Cached first, then cancelled mid-body as a hit, and a miss cancelled too.
        assert!(get(&mut send, "/obj/8m/3").await.checks_out());
        for path in ["/obj/8m/3", "/obj/8m/4"] {
            let req = http::Request::get(format!("https://localhost{path}"))
                .body(())
                .unwrap();
            let mut s = send.send_request(req).await.unwrap();
            s.finish().await.unwrap();
            let resp = s.recv_response().await.unwrap();
            assert_eq!(resp.status(), 200);
            let _ = s.recv_data().await.unwrap();
            s.stop_sending(h3::error::Code::H3_REQUEST_CANCELLED);
            drop(s);
        }
        // The connection still serves.
        let again = get(&mut send, "/obj/10k/9").await;
        assert!(again.checks_out());
        conn.close(0u32.into(), b"done");
        e.wait_idle().await;
    });
    // Nothing is left open: the connection's count goes back to 0.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let st = get_text(admin, "/status");
        let active = common::json_number(&st, "active").unwrap_or(u64::MAX);
        if active == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "connections still active: {st}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The miss cancelled mid-body was still stored whole (the fill goes on): a hit.
    rt().block_on(async {
        let e = client_endpoint(&pki.ca_path());
        let (_c, mut send) = h3_connect(&e, listen).await;
        let r = get(&mut send, "/obj/8m/4").await;
        assert!(r.checks_out());
    });
}

#[test]
fn tcp_responses_advertise_h3_with_alt_svc() {
    let pki = Pki::new();
    let (_o, up) = origin();
    let cache = tempfile::tempdir().unwrap();
    let cfg = h3_config(&pki, up, 1, "", cache.path());
    // A second, plain listener with its own alt_svc value.
    let cfg = cfg.replacen(
        "[[cache]]",
        "[[listen]]\naddr = \"127.0.0.1:0\"\nalt_svc = 'h3=\":443\"; ma=3600'\n\n[[cache]]",
        1,
    );
    let (_p, listen, _admin) = common::edgecache(&cfg);
    let r = rt().block_on(async {
        let tls = tls_client(&pki.ca_path());
        let tcp = tokio::net::TcpStream::connect(listen).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut s = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.write_all(b"GET /obj/1k/1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    });
    let want = format!("alt-svc: h3=\":{}\"; ma=86400\r\n", listen.port());
    assert!(r.to_ascii_lowercase().contains(&want), "{r}");
}

fn tls_client(ca: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).unwrap();
    for c in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        let c: rustls::pki_types::CertificateDer<'static> = c.unwrap();
        roots.add(c).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

#[test]
fn quic_retry_always_validates_the_address_first() {
    let pki = Pki::new();
    let (_o, up) = origin();
    let cache = tempfile::tempdir().unwrap();
    let cfg = h3_config(&pki, up, 1, "quic_retry = \"always\"", cache.path());
    let (_p, listen, admin) = common::edgecache(&cfg);
    rt().block_on(async {
        let e = client_endpoint(&pki.ca_path());
        let (_c, mut send) = h3_connect(&e, listen).await;
        assert!(get(&mut send, "/obj/1k/1").await.checks_out());
    });
    let m = metrics(admin);
    assert!(
        metric_in(&m, "edgecache_quic_retries_total").unwrap_or(0) >= 1,
        "{m}"
    );
}

/// Connects once for a session ticket, then again trying 0-RTT; whether the second
/// connection could send early data, and the response to a GET sent in it.
async fn zero_rtt(e: &quinn::Endpoint, addr: SocketAddr) -> (bool, Option<Resp>) {
    {
        let (c, mut send) = h3_connect(e, addr).await;
        assert_eq!(get(&mut send, "/obj/1k/5").await.status, 200);
        // The ticket arrives after the handshake; give it a moment.
        tokio::time::sleep(Duration::from_millis(200)).await;
        c.close(0u32.into(), b"");
    }
    let connecting = e.connect(addr, "localhost").unwrap();
    match connecting.into_0rtt() {
        Err(connecting) => {
            let _ = connecting.await;
            (false, None)
        }
        Ok((conn, _accepted)) => {
            let (driver, mut send) = h3::client::new(h3_quinn::Connection::new(conn))
                .await
                .unwrap();
            tokio::spawn(drive(driver));
            let r = get(&mut send, "/obj/1k/6").await;
            (true, Some(r))
        }
    }
}

#[test]
fn early_data_is_refused_by_default() {
    let pki = Pki::new();
    let (_o, up) = origin();
    let cache = tempfile::tempdir().unwrap();
    let (_p, listen, admin) = common::edgecache(&h3_config(&pki, up, 1, "", cache.path()));
    let (sent_early, _) = rt().block_on(async {
        let e = client_endpoint(&pki.ca_path());
        zero_rtt(&e, listen).await
    });
    assert!(
        !sent_early,
        "the server's tickets must not allow early data"
    );
    let m = metrics(admin);
    assert_eq!(
        metric_sum(&m, "edgecache_quic_early_data_total", "served"),
        0
    );
}

#[test]
fn early_data_serves_a_get_and_says_so_upstream() {
    let pki = Pki::new();
    let (up, seen) = common::recording_upstream();
    let cache = tempfile::tempdir().unwrap();
    let cfg = h3_config(&pki, up, 1, "early_data = true", cache.path());
    let (_p, listen, admin) = common::edgecache(&cfg);
    let (sent_early, resp) = rt().block_on(async {
        let e = client_endpoint(&pki.ca_path());
        zero_rtt(&e, listen).await
    });
    assert!(sent_early, "a resumed client may send early data");
    assert_eq!(resp.expect("a response").status, 200);
    let heads = seen.lock().unwrap().heads.clone();
    let early = heads
        .iter()
        .find(|h| h.contains("/obj/1k/6"))
        .expect("the early request reached the origin");
    assert!(
        early.to_ascii_lowercase().contains("early-data: 1"),
        "{early}"
    );
    let first = heads.iter().find(|h| h.contains("/obj/1k/5")).unwrap();
    assert!(
        !first.to_ascii_lowercase().contains("early-data"),
        "{first}"
    );
    let m = metrics(admin);
    assert_eq!(
        metric_sum(&m, "edgecache_quic_early_data_total", "served"),
        1,
        "{m}"
    );
}

/// Downloads /obj/2m/1 over one connection `rounds` times, moving the client to a new
/// local port in the middle of each download (quinn's `Endpoint::rebind`, as a NAT
/// rebinding does), each body checked; stops early once `done(metrics)` says so.
async fn download_while_rebinding(
    pki: &Pki,
    listen: SocketAddr,
    admin: SocketAddr,
    rounds: usize,
    done: impl Fn(&str) -> bool,
) -> bool {
    let e = client_endpoint(&pki.ca_path());
    let (conn, mut send) = h3_connect(&e, listen).await;
    assert!(get(&mut send, "/obj/2m/1").await.checks_out());
    for round in 0..rounds {
        let req = http::Request::get("https://localhost/obj/2m/1")
            .body(())
            .unwrap();
        let mut s = send.send_request(req).await.unwrap();
        s.finish().await.unwrap();
        let resp = s.recv_response().await.unwrap();
        assert_eq!(resp.status(), 200);
        let want = resp.headers()["x-checksum"].to_str().unwrap().to_string();
        let mut body = Vec::new();
        let mut rebound = false;
        while let Some(mut chunk) = s.recv_data().await.unwrap() {
            while chunk.has_remaining() {
                let c = chunk.chunk();
                body.extend_from_slice(c);
                let n = c.len();
                chunk.advance(n);
            }
            if !rebound && body.len() > 256 * 1024 {
                let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                e.rebind(sock).unwrap();
                rebound = true;
            }
        }
        assert_eq!(body.len(), 2 << 20, "round {round}");
        assert_eq!(
            format!("{:016x}", twox_hash::XxHash3_64::oneshot(&body)),
            want
        );
        assert!(
            conn.close_reason().is_none(),
            "round {round}: the connection was lost"
        );
        if done(&metrics(admin)) {
            return true;
        }
    }
    false
}

#[test]
fn a_client_that_changes_address_is_handed_to_its_worker_in_user_space() {
    let pki = Pki::new();
    let (_o, up) = origin();
    let cache = tempfile::tempdir().unwrap();
    let cfg = h3_config(&pki, up, 2, "quic_bpf = false", cache.path());
    let (_p, listen, admin) = common::edgecache(&cfg);
    // The kernel hashes the new 4-tuple: about half the time it is another worker's
    // socket. Rebind until the hand-off has carried datagrams (bounded): the test fails
    // if they were merely lost (the download would not complete on its connection).
    let handed = rt().block_on(download_while_rebinding(&pki, listen, admin, 24, |m| {
        metric_sum(m, "edgecache_quic_handoff_packets_total", "forwarded") > 0
    }));
    assert!(handed, "24 rebindings never reached the other worker");
    let m = metrics(admin);
    assert_eq!(
        metric_sum(&m, "edgecache_quic_handoff_packets_total", "dropped"),
        0
    );
    assert_eq!(metric_in(&m, "edgecache_quic_steering_bpf"), Some(0), "{m}");
}

#[test]
fn a_client_that_changes_address_is_steered_to_its_worker_by_the_kernel() {
    let pki = Pki::new();
    let (_o, up) = origin();
    let cache = tempfile::tempdir().unwrap();
    let (_p, listen, admin) = common::edgecache(&h3_config(&pki, up, 2, "", cache.path()));
    assert_eq!(
        metric_in(&metrics(admin), "edgecache_quic_steering_bpf"),
        Some(1)
    );
    // 12 rebindings: without steering, each lands on the other worker half the time
    // (all 12 on the owner: 1 in 4096). Every download completes on its connection, and
    // nothing needed the user-space hand-off: the kernel delivered every datagram to
    // the worker its CID names.
    rt().block_on(download_while_rebinding(&pki, listen, admin, 12, |_| false));
    let m = metrics(admin);
    assert_eq!(
        metric_sum(&m, "edgecache_quic_handoff_packets_total", ""),
        0,
        "{m}"
    );
}

/// Debian's ngtcp2 client (`ngtcp2-client`, which `.ci/run` installs).
fn gtlsclient() -> &'static str {
    let Some(client) = ["gtlsclient", "/usr/bin/gtlsclient"]
        .into_iter()
        .find(|c| std::process::Command::new(c).arg("--help").output().is_ok())
    else {
        panic!("gtlsclient (Debian's ngtcp2-client) is needed: apt-get install ngtcp2-client");
    };
    client
}

/// Runs gtlsclient against `listen` for `paths`, saving bodies in `out`; `extra` flags.
/// Returns what it printed (for a failure's message).
fn gtlsclient_get(listen: SocketAddr, paths: &[&str], out: &Path, extra: &[&str]) -> String {
    let urls: Vec<String> = paths
        .iter()
        .map(|p| format!("https://localhost:{}{p}", listen.port()))
        .collect();
    let r = std::process::Command::new(gtlsclient())
        .args(["--exit-on-all-streams-close", "-q", "--timeout=10s"])
        .arg(format!("--download={}", out.display()))
        .args(extra)
        .args(["127.0.0.1", &listen.port().to_string()])
        .args(&urls)
        .output()
        .unwrap();
    let printed = format!(
        "{}\n{}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(r.status.success(), "gtlsclient failed: {printed}");
    printed
}

#[test]
fn gtlsclient_moves_to_a_new_address_mid_download_with_2_workers() {
    let pki = Pki::new();
    let (_o, up) = origin();
    let direct = edge_testkit::get(up, "/obj/8m/5", &[]);
    for steering in ["quic_bpf = false", ""] {
        let cache = tempfile::tempdir().unwrap();
        let cfg = h3_config(&pki, up, 2, steering, cache.path());
        let (p, listen, admin) = common::edgecache(&cfg);
        // Cached first: the downloads below are hits (docs/http3.md: one run of this
        // test had a short body when the move came during the miss; not reproduced).
        gtlsclient_get(
            listen,
            &["/obj/8m/5"],
            tempfile::tempdir().unwrap().path(),
            &[],
        );
        // A client we did not write moves to a new local address 50 ms into an 8 MiB
        // download (validating the new path, as a phone moving from Wi-Fi does); the
        // kernel hashes the new 4-tuple to either worker. The connection goes on.
        for round in 0..3 {
            let out = tempfile::tempdir().unwrap();
            let printed = gtlsclient_get(
                listen,
                &["/obj/8m/5"],
                out.path(),
                &["--change-local-addr=50ms"],
            );
            let got = std::fs::read(out.path().join("5")).unwrap();
            if got != direct.body {
                let log = p.stderr();
                let from = (log.len().saturating_sub(6000)..log.len())
                    .find(|&i| log.is_char_boundary(i))
                    .unwrap_or(0);
                let m = metrics(admin);
                let quic: Vec<&str> = m
                    .lines()
                    .filter(|l| l.starts_with("edgecache_quic") || l.starts_with("edgecache_h3"))
                    .collect();
                panic!(
                    "{steering:?} round {round}: {} bytes received, the first difference at \
                     {:?}\ngtlsclient printed:\n{printed}\nserver metrics:\n{}\nserver log \
                     (its end):\n{}",
                    got.len(),
                    got.iter().zip(&direct.body).position(|(a, b)| a != b),
                    quic.join("\n"),
                    &log[from..]
                );
            }
        }
    }
}

#[test]
fn gtlsclient_fetches_a_hit_byte_exact() {
    let pki = Pki::new();
    let (_o, up) = origin();
    let cache = tempfile::tempdir().unwrap();
    let (_p, listen, _admin) = common::edgecache(&h3_config(&pki, up, 1, "", cache.path()));
    let out = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        gtlsclient_get(listen, &["/obj/100k/3"], out.path(), &[]);
    }
    let got = std::fs::read(out.path().join("3")).unwrap();
    let direct = edge_testkit::get(up, "/obj/100k/3", &[]);
    assert_eq!(got.len(), 100 * 1024);
    assert_eq!(
        got, direct.body,
        "gtlsclient's body is the origin's, byte for byte"
    );
}

#[test]
fn quic_needs_tls_and_its_keys_need_quic() {
    let (code, err, _) = check_config(
        "[[listen]]\naddr = \"127.0.0.1:8443\"\nquic = true\n\n[[location]]\nprefix = \"/\"\nreturn = { status = 200 }\n",
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("listen.quic: HTTP/3 needs TLS"), "{err}");
    let (code, err, _) = check_config(
        "[[listen]]\naddr = \"127.0.0.1:8443\"\nearly_data = true\n\n[[location]]\nprefix = \"/\"\nreturn = { status = 200 }\n",
    );
    assert_eq!(code, Some(2));
    assert!(
        err.contains("listen.early_data: needs quic = true"),
        "{err}"
    );
    let (code, err, _) = check_config(
        "[[listen]]\naddr = \"127.0.0.1:8443\"\nquic_retry = \"sometimes\"\n\n[[location]]\nprefix = \"/\"\nreturn = { status = 200 }\n",
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("quic_retry"), "{err}");
}

#[test]
fn a_graceful_stop_answers_the_requests_in_flight_over_h3() {
    let pki = Pki::new();
    let (_o, up) = origin();
    let cache = tempfile::tempdir().unwrap();
    let (mut p, listen, _admin) = common::edgecache(&h3_config(&pki, up, 1, "", cache.path()));
    let resps = rt().block_on(async {
        let e = client_endpoint(&pki.ca_path());
        let (_c, send) = h3_connect(&e, listen).await;
        let mut tasks = Vec::new();
        for i in 0..3 {
            let mut s = send.clone();
            tasks.push(tokio::spawn(async move {
                get(&mut s, &format!("/obj/10k/{i}?delay_ms=400")).await
            }));
        }
        // The requests are at the origin when the stop comes.
        tokio::time::sleep(Duration::from_millis(150)).await;
        p.signal("QUIT");
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    for r in &resps {
        assert_eq!(r.status, 200);
        assert!(r.checks_out());
    }
    assert_eq!(p.wait_exit(Duration::from_secs(10)), Some(0));
}
