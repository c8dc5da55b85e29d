//! TLS and HTTP/2 against the real binary: certificates made in the test (a CA and
//! leaves signed by it), a rustls client and the h2 crate's client, so the test needs
//! nothing but Rust. What is checked: ALPN (h2 and http/1.1), SNI choosing between two
//! certificates, a MISS then a HIT over h2 and over TLS HTTP/1.1 (big bodies too: the
//! sendfile path cannot be used over TLS), h2c with prior knowledge, resumption, the
//! counters, `-t` refusing a key that is not the certificate's, certificates reloaded
//! under load with no failed handshake, and https:// upstreams.

mod common;

use bytes::Bytes;
use common::pki::Pki;
use common::{get_text, metric_in, origin};
use rustls::pki_types::{CertificateDer, ServerName};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn client_config(ca: &Path, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    client_config_versions(ca, alpn, rustls::DEFAULT_VERSIONS)
}

fn client_config_versions(
    ca: &Path,
    alpn: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).unwrap();
    for c in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        let c: CertificateDer<'static> = c.unwrap();
        roots.add(c).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

async fn connect(
    addr: SocketAddr,
    name: &str,
    cfg: &Arc<rustls::ClientConfig>,
) -> std::io::Result<Tls> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from(name.to_string()).unwrap();
    tokio_rustls::TlsConnector::from(cfg.clone())
        .connect(name, tcp)
        .await
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A response: status, headers (lower-case names), body.
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// GET over HTTP/2 on an open connection (TLS or h2c).
async fn h2_get<T>(io: T, authority: &str, paths: &[&str]) -> Vec<Resp>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    h2_get_window(io, authority, paths, 65_535).await
}

/// [`h2_get`] with the client's stream window set to `window` bytes (a small one makes
/// the server wait for WINDOW_UPDATEs mid-body). A stall fails the test after 30 s.
async fn h2_get_window<T>(io: T, authority: &str, paths: &[&str], window: u32) -> Vec<Resp>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::time::timeout(
        Duration::from_secs(30),
        h2_get_inner(io, authority, paths, window),
    )
    .await
    .expect("HTTP/2 responses within 30 s")
}

async fn h2_get_inner<T>(io: T, authority: &str, paths: &[&str], window: u32) -> Vec<Resp>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let reqs = paths
        .iter()
        .map(|p| {
            http::Request::get(format!("https://{authority}{p}"))
                .body(())
                .unwrap()
        })
        .collect();
    h2_send(io, reqs, window).await
}

/// Sends `reqs` one after the other on one HTTP/2 connection; their responses, bodies
/// read to END_STREAM.
async fn h2_send<T>(io: T, reqs: Vec<http::Request<()>>, window: u32) -> Vec<Resp>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut client, conn) = h2::client::Builder::new()
        .initial_window_size(window)
        .handshake::<_, Bytes>(io)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut out = Vec::new();
    for req in reqs {
        client = client.ready().await.unwrap();
        let (resp, _) = client.send_request(req, true).unwrap();
        let resp = resp.await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let mut body = resp.into_body();
        let mut bytes = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk: Bytes = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            bytes.extend_from_slice(&chunk);
        }
        out.push(Resp {
            status,
            headers,
            body: bytes,
        });
    }
    out
}

async fn h1_get(io: Tls, host: &str, path: &str) -> Resp {
    h1_get_ending(io, host, path).await.0
}

/// [`h1_get`], and how the server ended the connection: Ok for close_notify, an error
/// (UnexpectedEof) for a bare FIN.
async fn h1_get_ending(mut io: Tls, host: &str, path: &str) -> (Resp, std::io::Result<usize>) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    io.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    // The server closes after the response.
    let ending = io.read_to_end(&mut raw).await;
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let mut lines = head.lines();
    let status = lines.next().unwrap()[9..12].parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let r = Resp {
        status,
        headers,
        body: raw[end..].to_vec(),
    };
    (r, ending)
}

fn xxh3(b: &[u8]) -> String {
    format!("{:016x}", twox_hash::XxHash3_64::oneshot(b))
}

/// A TLS listener with two certificates (a.example, default; b.example) and h2, a
/// cached proxy to edgeorigin, and the admin listener.
fn tls_server(
    pki: &Pki,
    http2: bool,
    extra_listen: &str,
) -> (
    edge_testkit::Proc,
    SocketAddr,
    SocketAddr,
    edge_testkit::Proc,
    tempfile::TempDir,
) {
    let (o, oaddr) = origin();
    let (ca, ka, _) = pki.leaf("a", &["a.example", "127.0.0.1"]);
    let (cb, kb, _) = pki.leaf("b", &["b.example"]);
    let cache = tempfile::tempdir().unwrap();
    let cfg = format!(
        r#"workers = 1
worker_cpu_affinity = "off"
[[listen]]
addr = "{{listen}}"
http2 = {http2}
tls = {{ certs = [{{ cert = "{ca}", key = "{ka}" }}, {{ cert = "{cb}", key = "{kb}", names = ["b.example"] }}] }}
{extra_listen}
[[cache]]
name = "c1"
path = "{dir}"
[[upstream]]
name = "origin"
servers = ["{oaddr}"]
[[location]]
prefix = "/"
proxy = "origin"
cache = ["c1"]
[admin]
listen = "{{admin}}"
"#,
        ca = ca.display(),
        ka = ka.display(),
        cb = cb.display(),
        kb = kb.display(),
        dir = cache.path().display(),
    );
    let (p, listen, admin) = common::edgecache(&cfg);
    (p, listen, admin, o, cache)
}

#[test]
fn alpn_sni_and_hits_over_h2_and_tls_http1() {
    let pki = Pki::new();
    let (_p, addr, admin, _o, _cache) = tls_server(&pki, true, "");
    rt().block_on(async {
        // SNI picks the certificate: each name verifies against its own leaf.
        for (name, tag) in [("a.example", "a"), ("b.example", "b"), ("127.0.0.1", "a")] {
            let cfg = client_config(&pki.ca_path(), &[b"http/1.1"]);
            let tls = connect(addr, name, &cfg)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let served = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
            let pem = std::fs::read_to_string(pki.dir.path().join(format!("{tag}.pem"))).unwrap();
            let want: CertificateDer =
                rustls::pki_types::pem::PemObject::from_pem_slice(pem.as_bytes()).unwrap();
            assert_eq!(served, want.to_vec(), "{name} got the certificate of {tag}");
        }
        // b.example's certificate does not cover a.example: a client that asks for
        // a name the server has no certificate for gets the default and refuses it.
        let cfg = client_config(&pki.ca_path(), &[b"h2"]);
        assert!(
            connect(addr, "c.example", &cfg).await.is_err(),
            "no certificate for c.example"
        );

        // ALPN: h2 when offered, http/1.1 otherwise.
        let tls = connect(addr, "a.example", &cfg).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let big = "/obj/1m/7";
        let got = h2_get(tls, "a.example", &["/obj/10k/1", "/obj/10k/1", big, big]).await;
        assert_eq!(got[0].status, 200);
        assert_eq!(got[0].header("x-cache-status"), Some("MISS"));
        assert_eq!(
            got[1].header("x-cache-status"),
            Some("HIT"),
            "a HIT over h2"
        );
        for r in &got {
            assert_eq!(
                r.header("x-checksum"),
                Some(xxh3(&r.body).as_str()),
                "body bytes"
            );
            assert!(r.header("connection").is_none() && r.header("transfer-encoding").is_none());
        }
        assert_eq!(got[1].body.len(), 10 * 1024);
        assert_eq!(got[3].body.len(), 1 << 20);
        assert_eq!(got[3].header("x-cache-status"), Some("HIT"));

        // A HIT whose body leaves with its head (read with it) through a window far
        // smaller than the body: sent as the client's WINDOW_UPDATEs allow.
        let cfg = client_config(&pki.ca_path(), &[b"h2"]);
        let tls = connect(addr, "a.example", &cfg).await.unwrap();
        let got = h2_get_window(tls, "a.example", &["/obj/20k/2", "/obj/20k/2"], 1000).await;
        assert_eq!(got[1].header("x-cache-status"), Some("HIT"));
        for r in &got {
            assert_eq!(r.body.len(), 20 * 1024);
            assert_eq!(r.header("x-checksum"), Some(xxh3(&r.body).as_str()));
        }

        let cfg = client_config(&pki.ca_path(), &[b"http/1.1"]);
        let tls = connect(addr, "a.example", &cfg).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        let r = h1_get(tls, "a.example", big).await;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("x-cache-status"),
            Some("HIT"),
            "a HIT over TLS HTTP/1.1"
        );
        assert_eq!(r.body.len(), 1 << 20);
        assert_eq!(r.header("x-checksum"), Some(xxh3(&r.body).as_str()));
    });
    let m = get_text(admin, "/metrics");
    assert!(
        metric_in(&m, "edgecache_http_requests_total{version=\"2\"}").unwrap() >= 4,
        "{m}"
    );
    assert!(metric_in(&m, "edgecache_http_requests_total{version=\"1.1\"}").unwrap() >= 1);
    assert!(metric_in(&m, "edgecache_tls_handshakes_total{kind=\"full\"}").unwrap() >= 5);
    assert!(metric_in(&m, "edgecache_h2_streams_total").unwrap() >= 4);
}

/// Every way a response body is delimited reaches an HTTP/2 client as HEADERS and DATA
/// frames, with no HTTP/1 framing: a body of unknown length (compressed on a miss and
/// relayed chunked from the origin) ends with END_STREAM, HEAD and 304 carry no body,
/// multipart ranges and our own error pages carry their Content-Length, and a request
/// our limits refuse gets its status.
#[test]
fn h2_responses_of_every_framing() {
    let pki = Pki::new();
    let gzip = r#"
[[location]]
prefix = "/txt/"
proxy = "origin"
cache = ["c1"]
compress = ["gzip"]
"#;
    let (_p, addr, _admin, _o, _cache) = tls_server(&pki, true, gzip);
    rt().block_on(async {
        let cfg = client_config(&pki.ca_path(), &[b"h2"]);
        let tls = connect(addr, "a.example", &cfg).await.unwrap();
        let uri = |p: &str| format!("https://a.example{p}");
        let get = |p: &str| http::Request::get(uri(p));
        let mut many = get("/obj/1k/3");
        for i in 0..120 {
            many = many.header(format!("x-many-{i}"), "v");
        }
        let reqs = vec![
            // 0, 1: compressed on the fly (miss), then from the stored copy.
            get("/txt/8k/1").header("accept-encoding", "gzip"),
            get("/txt/8k/1").header("accept-encoding", "gzip"),
            // 2: identity, for the comparison.
            get("/txt/8k/1"),
            // 3: relayed from a chunked origin response, not stored.
            get("/obj/3k/2?chunked=1&no_store=1"),
            // 4: HEAD of a stored object.
            http::Request::head(uri("/obj/1k/3")),
            // 5: 304.
            get("/obj/1k/3"),
            // 6: two ranges: multipart/byteranges.
            get("/obj/1k/3").header("range", "bytes=0-9,20-29"),
            // 7: more fields than the request limits allow (100): refused.
            many,
            // 8: a page of our own.
            get("/obj/1k/3").header("range", "bytes=5000-6000"),
        ];
        let reqs: Vec<_> = reqs.into_iter().map(|r| r.body(()).unwrap()).collect();
        let got = h2_send(tls, reqs, 65_535).await;
        for r in &got {
            assert!(r.header("connection").is_none() && r.header("transfer-encoding").is_none());
        }
        let plain = &got[2];
        assert_eq!(plain.status, 200);
        assert_eq!(plain.body.len(), 8 * 1024);
        for (i, r) in got[..2].iter().enumerate() {
            assert_eq!(r.status, 200, "{i}");
            assert_eq!(r.header("content-encoding"), Some("gzip"), "{i}");
            let body = edge_compress::codec::decode_all(edge_compress::Coding::Gzip, &r.body)
                .unwrap_or_else(|e| panic!("{i}: {e}"));
            assert_eq!(body, plain.body, "{i}: the whole body, decoded");
        }
        let relayed = &got[3];
        assert_eq!(relayed.status, 200);
        assert_eq!(relayed.body.len(), 3 * 1024);
        assert_eq!(
            relayed.header("x-checksum"),
            Some(xxh3(&relayed.body).as_str())
        );
        let head = &got[4];
        assert_eq!(head.status, 200);
        assert_eq!(head.header("content-length"), Some("1024"));
        assert!(head.body.is_empty());
        assert_eq!(got[5].status, 200);
        let etag = got[5].header("etag").expect("an ETag").to_string();
        let multi = &got[6];
        assert_eq!(multi.status, 206);
        assert!(multi
            .header("content-type")
            .is_some_and(|t| t.starts_with("multipart/byteranges")));
        assert_eq!(
            multi.header("content-length"),
            Some(multi.body.len().to_string().as_str())
        );
        assert_eq!(got[7].status, 431);
        assert!(got[7].body.is_empty());
        let unsat = &got[8];
        assert_eq!(unsat.status, 416);
        assert_eq!(unsat.header("content-range"), Some("bytes */1024"));

        let tls = connect(addr, "a.example", &cfg).await.unwrap();
        let req = get("/obj/1k/3")
            .header("if-none-match", etag)
            .body(())
            .unwrap();
        let got = h2_send(tls, vec![req], 65_535).await;
        assert_eq!(got[0].status, 304);
        assert!(got[0].body.is_empty());
        assert_eq!(got[0].header("x-cache-status"), Some("HIT"));
    });
}

/// kTLS (`tls.ktls`, on by default): after the handshake the kernel carries the
/// session, so HITs over TLS HTTP/1.1 go out by sendfile. Checked: whole bodies (1 KiB
/// to 1 MiB, MISS then HIT) over new connections, three requests on one kept-alive
/// connection (two pipelined: the second may arrive decrypted by rustls with the
/// handshake, or later through the kernel), and h2; every connection is accounted for
/// in `edgecache_tls_ktls_total`. A kernel with the `tls` module (or
/// `EDGECACHE_TEST_KTLS=1`, which demands one) puts them all on `kernel`; one without
/// puts them on `user` (served by rustls) and the server says so once in its log.
#[test]
fn ktls_carries_hits_or_falls_back_with_one_log_line() {
    let pki = Pki::new();
    let (p, addr, admin, _o, _cache) = tls_server(&pki, true, "");
    let conns = rt().block_on(async {
        let mut conns = 0u64;
        let h1 = client_config(&pki.ca_path(), &[b"http/1.1"]);
        // TLS 1.2 too (its AES-GCM nonces are the kernel's own once it sends).
        let tls12 =
            client_config_versions(&pki.ca_path(), &[b"http/1.1"], &[&rustls::version::TLS12]);
        let tls13 = Some(rustls::ProtocolVersion::TLSv1_3);
        let v12 = Some(rustls::ProtocolVersion::TLSv1_2);
        for (cfg, version, path) in [
            (&h1, tls13, "/obj/100k/3"),
            (&h1, tls13, "/obj/100k/3"),
            (&h1, tls13, "/obj/1k/4"),
            (&h1, tls13, "/obj/1k/4"),
            (&h1, tls13, "/obj/1m/5"),
            (&h1, tls13, "/obj/1m/5"),
            (&tls12, v12, "/obj/1k/4"),
            (&tls12, v12, "/obj/100k/3"),
            (&tls12, v12, "/obj/1m/5"),
        ] {
            let tls = connect(addr, "a.example", cfg).await.unwrap();
            assert_eq!(tls.get_ref().1.protocol_version(), version, "{path}");
            conns += 1;
            let (r, ending) = h1_get_ending(tls, "a.example", path).await;
            assert_eq!(r.status, 200, "{version:?} {path}");
            assert_eq!(
                r.header("x-checksum"),
                Some(xxh3(&r.body).as_str()),
                "{version:?} {path}"
            );
            // The session ends with close_notify, from the kernel as from rustls.
            assert!(ending.is_ok(), "{version:?} {path}: {ending:?}");
        }
        let mut tls = connect(addr, "a.example", &h1).await.unwrap();
        conns += 1;
        let req = b"GET /obj/100k/3 HTTP/1.1\r\nHost: a.example\r\n\r\n";
        tls.write_all(req).await.unwrap();
        assert_eq!(read_responses(&mut tls, 1).await, vec![200]);
        tls.write_all(&[&req[..], &req[..]].concat()).await.unwrap();
        assert_eq!(read_responses(&mut tls, 2).await, vec![200, 200]);
        tls.shutdown().await.unwrap();
        let h2 = client_config(&pki.ca_path(), &[b"h2"]);
        let tls = connect(addr, "a.example", &h2).await.unwrap();
        conns += 1;
        let got = h2_get(tls, "a.example", &["/obj/100k/3", "/obj/1k/4", "/obj/1m/5"]).await;
        for r in &got {
            assert_eq!(r.status, 200);
            assert_eq!(r.header("x-cache-status"), Some("HIT"));
            assert_eq!(r.header("x-checksum"), Some(xxh3(&r.body).as_str()));
        }
        conns
    });
    let m = get_text(admin, "/metrics");
    let count = |r: &str| metric_in(&m, &format!("edgecache_tls_ktls_total{{result=\"{r}\"}}"));
    let (kernel, user, failed) = (
        count("kernel").unwrap(),
        count("user").unwrap(),
        count("failed").unwrap(),
    );
    assert_eq!(failed, 0, "{m}");
    assert_eq!(kernel + user, conns, "every connection once: {m}");
    let ulp = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp").unwrap_or_default();
    let demanded = std::env::var("EDGECACHE_TEST_KTLS").is_ok_and(|v| v == "1");
    if demanded || ulp.split_whitespace().any(|u| u == "tls") {
        assert_eq!(
            kernel, conns,
            "this kernel has kTLS (tcp_available_ulp: {ulp:?})"
        );
    }
    let said = p.stderr().matches("kTLS is not available").count();
    assert_eq!(
        said,
        usize::from(user > 0),
        "one log line when it falls back: {}",
        p.stderr()
    );
}

#[test]
fn sessions_resume_and_are_counted() {
    let pki = Pki::new();
    let (_p, addr, admin, _o, _cache) = tls_server(&pki, false, "");
    rt().block_on(async {
        // One client config: rustls keeps the server's tickets and offers one next time.
        let cfg = client_config(&pki.ca_path(), &[b"http/1.1"]);
        let first = connect(addr, "a.example", &cfg).await.unwrap();
        assert_eq!(
            first.get_ref().1.alpn_protocol(),
            Some(&b"http/1.1"[..]),
            "no h2 offered"
        );
        let r = h1_get(first, "a.example", "/obj/1k/1").await;
        assert_eq!(r.status, 200);
        let second = connect(addr, "a.example", &cfg).await.unwrap();
        assert_eq!(
            second.get_ref().1.handshake_kind(),
            Some(rustls::HandshakeKind::Resumed)
        );
        let r = h1_get(second, "a.example", "/obj/1k/1").await;
        assert_eq!(r.header("x-cache-status"), Some("HIT"));
    });
    let m = get_text(admin, "/metrics");
    assert_eq!(
        metric_in(&m, "edgecache_tls_handshakes_total{kind=\"resumed\"}"),
        Some(1),
        "{m}"
    );
    assert!(metric_in(&m, "edgecache_tls_handshakes_total{kind=\"full\"}").unwrap() >= 1);
}

#[test]
fn h2c_prior_knowledge_and_http1_share_a_plain_listener() {
    let (_o, oaddr) = origin();
    let cfg = format!(
        r#"workers = 1
worker_cpu_affinity = "off"
[[listen]]
addr = "{{listen}}"
http2 = true
[[upstream]]
name = "origin"
servers = ["{oaddr}"]
[[location]]
prefix = "/"
proxy = "origin"
"#
    );
    let (_p, addr, _) = common::edgecache(&cfg);
    rt().block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let got = h2_get(tcp, "x", &["/obj/100k/3", "/obj/0/1"]).await;
        assert_eq!(got[0].status, 200);
        assert_eq!(got[0].body.len(), 100 * 1024);
        assert_eq!(
            got[0].header("x-checksum"),
            Some(xxh3(&got[0].body).as_str())
        );
        assert_eq!(got[1].body.len(), 0);
    });
    // A small client window: the server sends as WINDOW_UPDATEs allow.
    rt().block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let got = h2_get_window(tcp, "x", &["/obj/300k/4", "/obj/100k/3"], 1000).await;
        for (r, len) in got.iter().zip([300 * 1024, 100 * 1024]) {
            assert_eq!(r.body.len(), len);
            assert_eq!(r.header("x-checksum"), Some(xxh3(&r.body).as_str()));
        }
    });
    let r = edge_testkit::get(addr, "/obj/1k/1", &[]);
    assert_eq!(r.status, 200, "HTTP/1.1 on the same listener");
    assert_eq!(r.body.len(), 1024);
}

/// A POST over h2c without content-length reaches the origin as a chunked body, in
/// pieces, and its echo (chunked by the origin) comes back whole as DATA frames; with a
/// content-length the body goes as it is.
#[test]
fn h2_request_bodies_reach_the_origin() {
    let (up, seen) = common::recording_upstream();
    let cfg = format!(
        r#"workers = 1
worker_cpu_affinity = "off"
[[listen]]
addr = "{{listen}}"
http2 = true
[[upstream]]
name = "origin"
servers = ["{up}"]
[[location]]
prefix = "/"
proxy = "origin"
"#
    );
    let (_p, addr, _) = common::edgecache(&cfg);
    let pieces: Vec<Vec<u8>> = (0..3u8).map(|i| vec![b'a' + i; 20_000]).collect();
    let whole: Vec<u8> = pieces.concat();
    rt().block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        for with_length in [false, true] {
            let mut req = http::Request::post("http://x/upload").header("x-reply-chunked", "1");
            if with_length {
                req = req.header("content-length", whole.len().to_string());
            }
            client = client.ready().await.unwrap();
            let (resp, mut body) = client.send_request(req.body(()).unwrap(), false).unwrap();
            for (i, p) in pieces.iter().enumerate() {
                body.reserve_capacity(p.len());
                body.send_data(Bytes::from(p.clone()), i == pieces.len() - 1)
                    .unwrap();
            }
            let resp = tokio::time::timeout(Duration::from_secs(30), resp)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(resp.status(), 200);
            let mut rbody = resp.into_body();
            let mut got = Vec::new();
            while let Some(c) = rbody.data().await {
                let c = c.unwrap();
                let _ = rbody.flow_control().release_capacity(c.len());
                got.extend_from_slice(&c);
            }
            assert_eq!(got.len(), whole.len(), "with_length {with_length}");
            assert!(got == whole, "the echo is the body sent");
        }
    });
    let s = seen.lock().unwrap();
    assert_eq!(s.bodies.len(), 2);
    assert!(s.bodies.iter().all(|b| *b == whole));
    let first = s.heads[0].to_ascii_lowercase();
    assert!(first.contains("transfer-encoding: chunked"), "{first}");
    let second = s.heads[1].to_ascii_lowercase();
    assert!(second.contains("content-length: 60000"), "{second}");
}

/// An idle HTTPS keep-alive connection is parked (its task and read buffer given back,
/// /status counts it) and serves its next request when it comes; two requests
/// pipelined in one TLS record are both answered (the second waits inside rustls, so
/// that connection is not parked between them).
#[test]
fn idle_tls_connections_are_parked_and_resume() {
    let pki = Pki::new();
    let (_p, addr, admin, _o, _cache) = tls_server(&pki, false, "");
    rt().block_on(async {
        let cfg = client_config(&pki.ca_path(), &[b"http/1.1"]);
        let mut tls = connect(addr, "a.example", &cfg).await.unwrap();
        let req = b"GET /obj/1k/1 HTTP/1.1\r\nHost: a.example\r\n\r\n";
        tls.write_all(req).await.unwrap();
        assert_eq!(read_responses(&mut tls, 1).await, vec![200]);
        // Idle: parked after the grace period; /status is refreshed once a second.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let status = get_text(admin, "/status");
            if common::json_number(&status, "parked").is_some_and(|n| n >= 1) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never parked: {status}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Resumed by its next request, then two pipelined in one write.
        tls.write_all(req).await.unwrap();
        assert_eq!(read_responses(&mut tls, 1).await, vec![200]);
        let two = [&req[..], &req[..]].concat();
        tls.write_all(&two).await.unwrap();
        assert_eq!(read_responses(&mut tls, 2).await, vec![200, 200]);
    });
}

/// Reads `n` whole responses (framed by Content-Length) from a kept-alive connection;
/// their statuses.
async fn read_responses(tls: &mut Tls, n: usize) -> Vec<u16> {
    let mut got: Vec<u8> = Vec::new();
    let mut statuses = Vec::new();
    let mut buf = vec![0u8; 65536];
    while statuses.len() < n {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                statuses.push(head[9..12].parse().unwrap());
                got.drain(..end + 4 + len);
                continue;
            }
        }
        let r = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf)).await;
        let k = r.expect("a response within 10 s").unwrap();
        assert!(k > 0, "closed");
        got.extend_from_slice(&buf[..k]);
    }
    statuses
}

#[test]
fn config_test_refuses_a_key_that_is_not_the_certificates() {
    let pki = Pki::new();
    let (ca, _, _) = pki.leaf("a", &["a.example"]);
    let (_, kb, _) = pki.leaf("b", &["b.example"]);
    let text = format!(
        "[[listen]]\naddr = \"127.0.0.1:1\"\ntls = {{ cert = \"{}\", key = \"{}\" }}\n",
        ca.display(),
        kb.display()
    );
    let (code, err, path) = common::check_config(&text);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(&format!("{path}:3: listen.tls:")), "{err}");
    assert!(err.contains("does not match the certificate"), "{err}");
    // A missing file names it.
    let text = text.replace("b.key", "missing.key");
    let (code, err, _) = common::check_config(&text);
    assert_eq!(code, Some(2));
    assert!(err.contains("missing.key"), "{err}");
    // cert without key.
    let text = "[[listen]]\naddr = \"127.0.0.1:1\"\ntls = { cert = \"x.pem\" }\n";
    let (code, err, _) = common::check_config(text);
    assert_eq!(code, Some(2));
    assert!(err.contains("`cert` and `key` go together"), "{err}");
}

#[test]
fn certificates_reload_under_load_with_no_failed_handshake() {
    let pki = Pki::new();
    let (p, addr, _admin, _o, _cache) = tls_server(&pki, true, "");
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut load = Vec::new();
    for _ in 0..2 {
        let (stop, ok, failed, ca) = (stop.clone(), ok.clone(), failed.clone(), pki.ca_path());
        load.push(std::thread::spawn(move || {
            rt().block_on(async {
                while !stop.load(Ordering::Relaxed) {
                    // A fresh config each time: full handshakes, the costly kind.
                    let cfg = client_config(&ca, &[b"http/1.1"]);
                    match connect(addr, "a.example", &cfg).await {
                        Ok(t) => {
                            let r = h1_get(t, "a.example", "/obj/1k/1").await;
                            assert_eq!(r.status, 200);
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            eprintln!("handshake failed: {e}");
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        }));
    }
    let mut last = Vec::new();
    for round in 0..4 {
        std::thread::sleep(Duration::from_millis(300));
        let (_, _, der) = pki.leaf("a", &["a.example", "127.0.0.1"]);
        last = der;
        p.signal("HUP");
        eprintln!("reload {round}");
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "failed handshakes during reloads"
    );
    assert!(
        ok.load(Ordering::Relaxed) >= 20,
        "load ran: {}",
        ok.load(Ordering::Relaxed)
    );
    // The last certificate is the one served now.
    rt().block_on(async {
        let cfg = client_config(&pki.ca_path(), &[b"http/1.1"]);
        let t = connect(addr, "a.example", &cfg).await.unwrap();
        assert_eq!(t.get_ref().1.peer_certificates().unwrap()[0].to_vec(), last);
    });
}

#[test]
fn https_upstreams_verify_and_send_sni_and_host() {
    let pki = Pki::new();
    // The origin side: edgecache terminating TLS for "localhost", in front of a
    // recording upstream that sees the Host the proxy sent.
    let (rec, seen) = common::recording_upstream();
    let (c, k, _) = pki.leaf("origin", &["localhost"]);
    let origin_cfg = format!(
        r#"workers = 1
worker_cpu_affinity = "off"
[[listen]]
addr = "{{listen}}"
tls = {{ cert = "{}", key = "{}" }}
[[upstream]]
name = "rec"
servers = ["{rec}"]
[[location]]
prefix = "/"
proxy = "rec"
[admin]
listen = "{{admin}}"
"#,
        c.display(),
        k.display()
    );
    let (_po, tls_origin, origin_admin) = common::edgecache(&origin_cfg);
    let edge = |extra: &str| {
        format!(
            r#"workers = 1
worker_cpu_affinity = "off"
[[listen]]
addr = "{{listen}}"
[[upstream]]
name = "o"
servers = ["https://localhost:{}"]
{extra}
[[location]]
prefix = "/"
proxy = "o"
"#,
            tls_origin.port()
        )
    };
    let (_pe, eaddr, _) =
        common::edgecache(&edge(&format!("tls_ca = \"{}\"", pki.ca_path().display())));
    for _ in 0..3 {
        let r = edge_testkit::get(eaddr, "/hello", &[]);
        assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    }
    // Kept alive in the worker's pool: three requests, one TLS handshake.
    let m = get_text(origin_admin, "/metrics");
    assert_eq!(
        metric_in(&m, "edgecache_tls_handshakes_total{kind=\"full\"}"),
        Some(1),
        "{m}"
    );
    {
        let s = seen.lock().unwrap();
        let head = s.heads[0].to_ascii_lowercase();
        assert!(
            head.contains(&format!("host: localhost:{}\r\n", tls_origin.port())),
            "Host is the upstream's name: {head}"
        );
    }
    // The system roots do not know our CA: 502, and with tls_verify = false it works.
    let (_pe2, e2, _) = common::edgecache(&edge(""));
    assert_eq!(edge_testkit::get(e2, "/hello", &[]).status, 502);
    let (pe3, e3, _) = common::edgecache(&edge("tls_verify = false"));
    assert_eq!(edge_testkit::get(e3, "/hello", &[]).status, 200);
    let _ = pe3;
}

/// A `proxy_protocol` listener with TLS: the PROXY header comes before the
/// ClientHello (v1 and v2, HTTP/1.1 and h2 by ALPN); a TLS client that sends no
/// header gets no handshake.
#[test]
fn proxy_protocol_comes_before_the_tls_handshake() {
    let pki = Pki::new();
    let (_p, addr, admin, _o, _cache) = tls_server(&pki, true, "proxy_protocol = true");
    let mut v2 = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    v2.extend_from_slice(&[203, 0, 113, 7, 127, 0, 0, 1, 0x9c, 0x40, 0x01, 0xbb]);
    let headers: [&[u8]; 2] = [b"PROXY TCP4 203.0.113.7 127.0.0.1 40000 443\r\n", &v2];
    rt().block_on(async {
        for header in headers {
            for alpn in [&b"http/1.1"[..], b"h2"] {
                let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                tcp.write_all(header).await.unwrap();
                let cfg = client_config(&pki.ca_path(), &[alpn]);
                let name = ServerName::try_from("a.example").unwrap();
                let tls = tokio_rustls::TlsConnector::from(cfg)
                    .connect(name, tcp)
                    .await
                    .unwrap();
                let r = if alpn == b"h2" {
                    h2_get(tls, "a.example", &["/obj/1k/77"]).await.remove(0)
                } else {
                    h1_get(tls, "a.example", "/obj/1k/77").await
                };
                assert_eq!(r.status, 200);
                assert_eq!(r.body.len(), 1024);
            }
        }
        let cfg = client_config(&pki.ca_path(), &[b"http/1.1"]);
        assert!(
            connect(addr, "a.example", &cfg).await.is_err(),
            "a handshake without a PROXY header first"
        );
    });
    let errors = metric_in(
        &get_text(admin, "/metrics"),
        "edgecache_proxy_protocol_errors_total",
    );
    assert!(errors.is_some_and(|n| n >= 1), "{errors:?}");
}

/// `proxy_set_header Host` on an `https://` upstream: the Host sent and the TLS server
/// name both follow it. The origin (edgecache terminating TLS) has two certificates and
/// picks by SNI: `localhost`'s first (what a request without the override gets), and
/// one for `bucket.s3.example`. With the override, our client must have sent that SNI:
/// it verifies the certificate against `bucket.s3.example`, which only the second one
/// covers (the first would fail verification: 502), and the origin answers 421 to a
/// Host its SNI certificate does not cover. Pooled connections are kept per name: the
/// location without the override still gets `localhost`.
#[test]
fn proxy_set_header_host_sets_the_tls_server_name() {
    let pki = Pki::new();
    let (rec, seen) = common::recording_upstream();
    let (c1, k1, _) = pki.leaf("origin-local", &["localhost"]);
    let (c2, k2, _) = pki.leaf("origin-bucket", &["bucket.s3.example"]);
    let origin_cfg = format!(
        r#"workers = 1
worker_cpu_affinity = "off"
[[listen]]
addr = "{{listen}}"
tls = {{ certs = [{{ cert = "{}", key = "{}" }}, {{ cert = "{}", key = "{}", names = ["bucket.s3.example"] }}] }}
[[upstream]]
name = "rec"
servers = ["{rec}"]
[[location]]
prefix = "/"
proxy = "rec"
"#,
        c1.display(),
        k1.display(),
        c2.display(),
        k2.display()
    );
    let (_po, tls_origin, _) = common::edgecache(&origin_cfg);
    let edge = format!(
        r#"workers = 1
worker_cpu_affinity = "off"
[[listen]]
addr = "{{listen}}"
[[upstream]]
name = "o"
servers = ["https://localhost:{port}"]
tls_ca = "{ca}"
[[location]]
prefix = "/bucket/"
proxy = "o"
proxy_set_header = {{ Host = "bucket.s3.example" }}
[[location]]
prefix = "/"
proxy = "o"
"#,
        port = tls_origin.port(),
        ca = pki.ca_path().display()
    );
    let (_pe, eaddr, _) = common::edgecache(&edge);
    for path in ["/bucket/a", "/plain", "/bucket/b", "/plain2"] {
        let r = edge_testkit::get(eaddr, path, &[]);
        assert_eq!(
            r.status,
            200,
            "{path}: {:?}",
            String::from_utf8_lossy(&r.body)
        );
    }
    let s = seen.lock().unwrap();
    let hosts: Vec<String> = s
        .heads
        .iter()
        .map(|h| {
            let l = h.to_ascii_lowercase();
            let path = l.split(' ').nth(1).unwrap_or("").to_string();
            let host = l
                .lines()
                .find_map(|x| x.strip_prefix("host: "))
                .unwrap_or("")
                .to_string();
            format!("{path} {host}")
        })
        .collect();
    let port = tls_origin.port();
    assert_eq!(
        hosts,
        [
            "/bucket/a bucket.s3.example".to_string(),
            format!("/plain localhost:{port}"),
            "/bucket/b bucket.s3.example".to_string(),
            format!("/plain2 localhost:{port}"),
        ],
        "the Host the origin saw"
    );
}
