//! HTTP/3 integration tests: the real `edgeload --h3` binary against a small quinn + h3
//! server that runs in the test (certificates made by rcgen: a test CA and a leaf for
//! `127.0.0.1`, `::1` and `localhost` signed by it), over real UDP on loopback. The
//! server counts what it saw, so edgeload's figures are checked against the other side.

mod common;

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{edgeload, edgeload_json, reported_requests};
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use twox_hash::XxHash3_64;

const LIMIT: Duration = Duration::from_secs(60);

/// What the server saw.
#[derive(Default)]
struct Seen {
    connections: AtomicU64,
    requests: AtomicU64,
    /// Requests being answered now, and the most at once.
    inflight: AtomicU64,
    max_inflight: AtomicU64,
    /// SNI of each connection (None: none sent).
    sni: Mutex<Vec<Option<String>>>,
    /// `:authority` of each request.
    authorities: Mutex<Vec<String>>,
    /// Requests per path.
    paths: Mutex<HashMap<String, u64>>,
    /// Requests that carried `x-test: yes`.
    tagged: AtomicU64,
    /// Requests that carried a connection-specific header (must stay 0).
    forbidden: AtomicU64,
    /// The client address of each connection.
    peers: Mutex<Vec<SocketAddr>>,
}

/// A test CA and a server certificate signed by it.
struct Pki {
    ca_pem_path: PathBuf,
    chain: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
    _dir: tempfile::TempDir,
}

fn pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "edgeload h3 test CA");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf_params = rcgen::CertificateParams::new(vec![
        "127.0.0.1".to_string(),
        "::1".to_string(),
        "localhost".to_string(),
    ])
    .unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &ca, &ca_key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_pem_path = dir.path().join("ca.pem");
    std::fs::write(&ca_pem_path, ca.pem()).unwrap();
    Pki {
        ca_pem_path,
        chain: vec![leaf.der().clone()],
        key: PrivatePkcs8KeyDer::from(leaf_key.serialize_der()),
        _dir: dir,
    }
}

struct H3Server {
    addr: SocketAddr,
    seen: Arc<Seen>,
    pki: Pki,
}

impl H3Server {
    /// Starts a server on the first address `localhost` resolves to (where edgeload
    /// will send for `https://localhost:PORT/`).
    fn start() -> H3Server {
        H3Server::start_with_idle(None)
    }

    /// The same, closing connections idle for `idle` (quinn's default otherwise).
    fn start_with_idle(idle: Option<Duration>) -> H3Server {
        let local = ("localhost", 0)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .unwrap_or_else(|| "127.0.0.1:0".parse().unwrap());
        H3Server::start_on(local, idle)
    }

    fn start_on(bind: SocketAddr, idle: Option<Duration>) -> H3Server {
        let pki = pki();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(pki.chain.clone(), pki.key.clone_key().into())
            .unwrap();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        tls.max_early_data_size = 0;
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).unwrap();
        let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        if let Some(idle) = idle {
            let mut transport = quinn::TransportConfig::default();
            transport.max_idle_timeout(Some(idle.try_into().unwrap()));
            config.transport_config(Arc::new(transport));
        }
        let seen = Arc::new(Seen::default());
        let s = seen.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let endpoint = quinn::Endpoint::server(config, bind).expect("bind UDP");
                tx.send(endpoint.local_addr().unwrap()).unwrap();
                while let Some(incoming) = endpoint.accept().await {
                    let s = s.clone();
                    tokio::spawn(async move {
                        if let Ok(conn) = incoming.await {
                            serve(conn, s).await;
                        }
                    });
                }
            });
        });
        let addr = rx.recv().expect("server started");
        H3Server { addr, seen, pki }
    }

    /// `https://localhost:PORT{path}`.
    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.addr.port())
    }

    fn ca(&self) -> &str {
        self.pki.ca_pem_path.to_str().unwrap()
    }

    fn count(&self, c: &AtomicU64) -> u64 {
        c.load(Ordering::SeqCst)
    }
}

/// The body for a path: `/big...` 300 KB, others 1 KiB, both deterministic.
fn body_for(path: &str) -> Vec<u8> {
    let len = if path.starts_with("/big") {
        300_000
    } else {
        1024
    };
    let salt = path.len() as u32;
    (0..len as u32)
        .map(|i| (i.wrapping_mul(7).wrapping_add(salt) % 251) as u8)
        .collect()
}

async fn serve(conn: quinn::Connection, seen: Arc<Seen>) {
    seen.connections.fetch_add(1, Ordering::SeqCst);
    seen.peers.lock().unwrap().push(conn.remote_address());
    let sni = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.server_name);
    seen.sni.lock().unwrap().push(sni);
    let Ok(mut h3) = h3::server::Connection::<_, Bytes>::new(h3_quinn::Connection::new(conn)).await
    else {
        return;
    };
    while let Ok(Some(resolver)) = h3.accept().await {
        let seen = seen.clone();
        tokio::spawn(async move {
            let Ok((req, mut stream)) = resolver.resolve_request().await else {
                return;
            };
            let path = req.uri().path().to_string();
            seen.requests.fetch_add(1, Ordering::SeqCst);
            let now = seen.inflight.fetch_add(1, Ordering::SeqCst) + 1;
            seen.max_inflight.fetch_max(now, Ordering::SeqCst);
            if let Some(a) = req.uri().authority() {
                seen.authorities.lock().unwrap().push(a.to_string());
            }
            *seen.paths.lock().unwrap().entry(path.clone()).or_default() += 1;
            if req.headers().get("x-test").is_some_and(|v| v == "yes") {
                seen.tagged.fetch_add(1, Ordering::SeqCst);
            }
            if ["connection", "host", "keep-alive", "transfer-encoding"]
                .iter()
                .any(|h| req.headers().contains_key(*h))
            {
                seen.forbidden.fetch_add(1, Ordering::SeqCst);
            }
            if path.starts_with("/stall") {
                // Never answers: the client's -T must fire.
                tokio::time::sleep(Duration::from_secs(30)).await;
                return;
            }
            // A little service time, so that pipelined streams overlap.
            tokio::time::sleep(Duration::from_millis(2)).await;
            let body = body_for(&path);
            let sum = if path.starts_with("/bad") {
                XxHash3_64::oneshot(b"not this body")
            } else {
                XxHash3_64::oneshot(&body)
            };
            let resp = http::Response::builder()
                .status(200)
                .header("content-length", body.len())
                .header("x-checksum", format!("{sum:016x}"))
                .body(())
                .unwrap();
            if stream.send_response(resp).await.is_ok() {
                // Several DATA frames, so the client hashes across chunks.
                let body = Bytes::from(body);
                let mut at = 0;
                while at < body.len() {
                    let end = (at + 16_384).min(body.len());
                    if stream.send_data(body.slice(at..end)).await.is_err() {
                        break;
                    }
                    at = end;
                }
                let _ = stream.finish().await;
            }
            seen.inflight.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

fn no_errors(v: &serde_json::Value) {
    for (k, n) in v["errors"].as_object().unwrap() {
        assert_eq!(n, 0, "errors.{k}: {}", v["errors"]);
    }
}

#[test]
fn h3_answers_and_verifies_every_request() {
    let srv = H3Server::start();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let r = edgeload(
        &[
            "--h3",
            "--cacert",
            srv.ca(),
            "-c",
            "2",
            "-t",
            "1",
            "--requests",
            "50",
            "--verify",
            "--json",
            json.to_str().unwrap(),
            &srv.url("/obj/1k/1"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    assert!(
        r.stdout.starts_with(&format!(
            "Running 10s test @ {}\n  1 threads and 2 connections\n  HTTP/3 (QUIC)\n",
            srv.url("/obj/1k/1")
        )),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("certificates checked against"),
        "{}",
        r.stdout
    );
    assert_eq!(reported_requests(&r.stdout), 50);
    assert!(
        r.stdout
            .contains("  Verify: 50 ok, 0 mismatched, 0 without checksum"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("  TLS handshakes: 2 (0 resumed)\n"),
        "{}",
        r.stdout
    );
    let v = common::json_of(&json);
    assert_eq!(v["protocol"], "h3");
    assert_eq!(v["requests"], 50);
    assert_eq!(v["verify"]["ok"], 50);
    assert_eq!(v["verify"]["mismatched"], 0);
    assert_eq!(v["bytes"], 50 * 1024);
    assert_eq!(v["status"]["200"], 50);
    assert_eq!(
        (&v["connections_opened"], &v["tls_handshakes"]),
        (&2.into(), &2.into())
    );
    assert_eq!(v["tls_handshake_us"]["count"], 2);
    assert_eq!(v["connect_us"]["count"], 2);
    assert_eq!(v["delay_us"]["count"], 2);
    no_errors(&v);
    assert_eq!(srv.count(&srv.seen.requests), 50);
    assert_eq!(srv.count(&srv.seen.connections), 2);
    assert_eq!(srv.count(&srv.seen.forbidden), 0);
    // A DNS host is sent as SNI (and the certificate checked for it); the URL's
    // authority is the request's :authority.
    assert!(srv
        .seen
        .sni
        .lock()
        .unwrap()
        .iter()
        .all(|s| s.as_deref() == Some("localhost")));
    let want = format!("localhost:{}", srv.addr.port());
    assert!(srv
        .seen
        .authorities
        .lock()
        .unwrap()
        .iter()
        .all(|a| *a == want));
}

#[test]
fn wrong_checksum_fails_the_run() {
    let srv = H3Server::start();
    let (r, v) = edgeload_json(
        &[
            "--h3",
            "--cacert",
            srv.ca(),
            "-c",
            "1",
            "-t",
            "1",
            "--requests",
            "10",
            "--verify",
            &srv.url("/bad/1"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("10 response bodies did not match their X-Checksum"),
        "{}",
        r.stderr
    );
    assert_eq!(v["verify"]["mismatched"], 10);
    assert_eq!(v["errors"]["verify"], 10);
    assert_eq!(v["requests"], 10);
}

/// `--pipeline 8`: eight streams in flight per connection, across a URL mix with
/// `--paths`, headers passed through, 300 KB bodies in many DATA frames, all verified.
#[test]
fn pipeline_keeps_many_streams_in_flight() {
    let srv = H3Server::start();
    let dir = tempfile::tempdir().unwrap();
    let mix = dir.path().join("mix.txt");
    std::fs::write(&mix, "3 /obj/1k\n1 /big\n").unwrap();
    let (r, v) = edgeload_json(
        &[
            "--h3",
            "-k",
            "-c",
            "2",
            "-t",
            "2",
            "--pipeline",
            "8",
            "--paths",
            "20",
            "--mix",
            mix.to_str().unwrap(),
            "-H",
            "X-Test: yes",
            "--requests",
            "400",
            "--verify",
            &format!("https://127.0.0.1:{}/", srv.addr.port()),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    no_errors(&v);
    assert_eq!(v["requests"], 400);
    assert_eq!(v["verify"]["ok"], 400);
    assert_eq!(v["connections_opened"], 2);
    assert_eq!(srv.count(&srv.seen.requests), 400);
    assert_eq!(srv.count(&srv.seen.tagged), 400);
    let max = srv.count(&srv.seen.max_inflight);
    assert!(max >= 3, "at most {max} requests at once");
    let paths = srv.seen.paths.lock().unwrap();
    let big: u64 = paths
        .iter()
        .filter(|(p, _)| p.starts_with("/big/"))
        .map(|(_, n)| n)
        .sum();
    assert!((50..150).contains(&big), "1 in 4 requests is /big: {big}");
    assert!(paths.keys().all(|p| {
        let n: u64 = p.rsplit('/').next().unwrap().parse().unwrap();
        (1..=20).contains(&n)
    }));
    // An IP literal sends no SNI.
    assert!(srv.seen.sni.lock().unwrap().iter().all(Option::is_none));
    let classes = v["classes"].as_array().unwrap();
    assert_eq!(classes.len(), 2);
    let big_bytes = classes[1]["bytes"].as_u64().unwrap();
    assert_eq!(big_bytes, big * 300_000);
}

/// `--no-keepalive`: one QUIC connection per request; the rustls session cache lets
/// the later handshakes resume unless `--tls-no-resume`.
#[test]
fn no_keepalive_opens_a_connection_per_request() {
    let srv = H3Server::start();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--h3",
            "--cacert",
            srv.ca(),
            "-c",
            "1",
            "-t",
            "1",
            "--no-keepalive",
            "--requests",
            "10",
        ];
        args.extend_from_slice(extra);
        let url = srv.url("/obj/1k/1");
        args.push(&url);
        let (r, v) = edgeload_json(&args, LIMIT);
        assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
        no_errors(&v);
        assert_eq!(v["requests"], 10);
        assert_eq!(v["tls_handshakes"], 10);
        assert_eq!(v["connections_opened"], 10);
        v
    };
    let v = run(&[]);
    assert_eq!(srv.count(&srv.seen.connections), 10);
    let resumed = v["tls_resumed"].as_u64().unwrap();
    assert_eq!(resumed, 9, "all but the first handshake resume");
    let v = run(&["--tls-no-resume"]);
    assert_eq!(v["tls_resumed"], 0);
    assert_eq!(srv.count(&srv.seen.connections), 20);
}

#[test]
fn open_loop_paces_the_streams() {
    let srv = H3Server::start();
    let (r, v) = edgeload_json(
        &[
            "--h3",
            "--cacert",
            srv.ca(),
            "-c",
            "2",
            "-t",
            "1",
            "--pipeline",
            "4",
            "-R",
            "200",
            "--requests",
            "60",
            "--ramp",
            "100",
            &srv.url("/obj/1k/1"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    no_errors(&v);
    assert_eq!(v["mode"], "open");
    assert_eq!(v["requests"], 60);
    // 60 requests at 200/s take about 0.3 s.
    let secs = v["duration_s"].as_f64().unwrap();
    assert!((0.2..5.0).contains(&secs), "{secs}");
    for block in [
        "  Connect Distribution\n",
        "  TLS Handshake Distribution\n",
        "  Delay Distribution\n",
    ] {
        assert!(r.stdout.contains(block), "missing {block:?}:\n{}", r.stdout);
    }
}

#[test]
fn untrusted_certificate_fails_cleanly() {
    let srv = H3Server::start();
    let (r, v) = edgeload_json(
        &["--h3", "-c", "1", "-t", "1", "-d", "500ms", &srv.url("/")],
        LIMIT,
    );
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(
        r.stderr.contains("QUIC handshake failed: ")
            && r.stderr.contains("invalid peer certificate")
            && r.stderr.contains("--cacert FILE"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("no request completed"), "{}", r.stderr);
    let failed = v["tls_failed"].as_u64().unwrap();
    assert!(failed >= 1, "{failed}");
    assert_eq!(v["errors"]["connect"].as_u64(), Some(failed));
    assert_eq!(v["requests"], 0);
    assert_eq!(srv.count(&srv.seen.requests), 0);
}

#[test]
fn no_server_is_a_counted_handshake_timeout() {
    // A UDP port nobody reads: bind one, note it, close it.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (r, v) = edgeload_json(
        &[
            "--h3",
            "-k",
            "-c",
            "1",
            "-t",
            "1",
            "-T",
            "200ms",
            "-d",
            "700ms",
            &format!("https://127.0.0.1:{port}/"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("QUIC handshake timed out"),
        "{}",
        r.stderr
    );
    assert!(v["errors"]["connect_timeout"].as_u64().unwrap() >= 1);
    assert_eq!(v["requests"], 0);
}

#[test]
fn request_timeouts_are_counted_and_the_connection_replaced() {
    let srv = H3Server::start();
    let (r, v) = edgeload_json(
        &[
            "--h3",
            "--cacert",
            srv.ca(),
            "-c",
            "1",
            "-t",
            "1",
            "-T",
            "200ms",
            "--requests",
            "3",
            &srv.url("/stall"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(v["errors"]["timeout"], 3);
    assert_eq!(v["requests"], 0);
    // Each timeout closes the connection; the next request opens a new one.
    assert_eq!(v["connections_opened"], 3);
    assert_eq!(srv.count(&srv.seen.requests), 3);
}

/// A server that closes idle connections: open-loop requests spaced wider than its idle
/// timeout each find the connection gone, and go out on a new one without an error.
#[test]
fn idle_closed_connections_are_replaced_without_errors() {
    let srv = H3Server::start_with_idle(Some(Duration::from_millis(100)));
    let (r, v) = edgeload_json(
        &[
            "--h3",
            "--cacert",
            srv.ca(),
            "-c",
            "1",
            "-t",
            "1",
            "-R",
            "2.5",
            "--requests",
            "4",
            &srv.url("/obj/1k/1"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    no_errors(&v);
    assert_eq!(v["requests"], 4);
    assert_eq!(v["connections_opened"], 4, "one per request");
    assert_eq!(srv.count(&srv.seen.connections), 4);
    assert_eq!(srv.count(&srv.seen.requests), 4);
}

/// `--source`: each connection's UDP socket is bound to its address, round robin.
#[test]
fn source_addresses_bind_the_udp_sockets() {
    let srv = H3Server::start_on("127.0.0.1:0".parse().unwrap(), None);
    let (r, v) = edgeload_json(
        &[
            "--h3",
            "-k",
            "-c",
            "4",
            "-t",
            "2",
            "--requests",
            "40",
            "--source",
            "127.0.0.2-127.0.0.3",
            &format!("https://127.0.0.1:{}/obj/1k/1", srv.addr.port()),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    no_errors(&v);
    assert_eq!(v["requests"], 40);
    let peers = srv.seen.peers.lock().unwrap();
    assert_eq!(peers.len(), 4);
    let mut ips: Vec<String> = peers.iter().map(|p| p.ip().to_string()).collect();
    ips.sort();
    assert_eq!(ips, ["127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"]);
    // Each connection has a 4-tuple of its own.
    let mut tuples = peers.clone();
    tuples.sort();
    tuples.dedup();
    assert_eq!(tuples.len(), 4);
}
