//! HTTPS integration tests: the real `edgeload` binary against a small TLS server that
//! runs in the test (tokio-rustls, certificates made by rcgen: a test CA and a leaf for
//! `127.0.0.1`, `::1` and `localhost` signed by it), on real sockets on loopback.
//! Handshake kinds are checked on both sides: edgeload's counts must match what the
//! server saw.

mod common;

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{edgeload, edgeload_json, json_of, reported_requests, TestServer};
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use rustls::HandshakeKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use twox_hash::XxHash3_64;

const LIMIT: Duration = Duration::from_secs(30);

/// How the TLS server ends its responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Keep-alive: many requests per connection.
    KeepAlive,
    /// `Connection: close` on every response, then close_notify and close: every
    /// request needs a new connection (and a new handshake).
    CloseEach,
}

/// What the server saw.
#[derive(Default)]
struct Seen {
    /// Handshakes completed, and how many of them resumed a session.
    handshakes: AtomicU64,
    resumed: AtomicU64,
    /// Handshakes the server saw fail (for instance an alert from edgeload).
    failed: AtomicU64,
    requests: AtomicU64,
    /// SNI of each handshake (None: no SNI sent).
    sni: Mutex<Vec<Option<String>>>,
    /// ALPN protocol agreed on each handshake.
    alpn: Mutex<Vec<Option<Vec<u8>>>>,
    paths: Mutex<HashMap<String, u64>>,
}

/// A test CA and a server certificate signed by it.
struct Pki {
    /// The CA certificate as PEM, written for `--cacert`.
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
        .push(rcgen::DnType::CommonName, "edgeload test CA");
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

struct TlsServer {
    addr: SocketAddr,
    seen: Arc<Seen>,
    pki: Pki,
}

impl TlsServer {
    /// Starts a server on 127.0.0.1.
    fn start(mode: Mode) -> TlsServer {
        TlsServer::start_on("127.0.0.1:0".parse().unwrap(), mode)
    }

    fn start_on(bind: SocketAddr, mode: Mode) -> TlsServer {
        let pki = pki();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(pki.chain.clone(), pki.key.clone_key().into())
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = std::net::TcpListener::bind(bind).expect("bind");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let s = seen.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let _ = tcp.set_nodelay(true);
                    let (acceptor, s) = (acceptor.clone(), s.clone());
                    tokio::spawn(async move {
                        match acceptor.accept(tcp).await {
                            Ok(tls) => serve(tls, mode, &s).await,
                            Err(_) => {
                                s.failed.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    });
                }
            });
        });
        TlsServer { addr, seen, pki }
    }

    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    fn ca(&self) -> &str {
        self.pki.ca_pem_path.to_str().unwrap()
    }

    fn count(&self, c: &AtomicU64) -> u64 {
        c.load(Ordering::SeqCst)
    }
}

/// The body for a path: `/big...` paths get 300 KB (many TLS records, more than the
/// client's read buffer), others a few hundred bytes.
fn body_for(path: &str) -> Vec<u8> {
    if path.starts_with("/big") {
        (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect()
    } else {
        common::body_for(path)
    }
}

async fn serve(
    mut tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    mode: Mode,
    seen: &Seen,
) {
    {
        let conn = tls.get_ref().1;
        seen.handshakes.fetch_add(1, Ordering::SeqCst);
        if conn.handshake_kind() == Some(HandshakeKind::Resumed) {
            seen.resumed.fetch_add(1, Ordering::SeqCst);
        }
        seen.sni
            .lock()
            .unwrap()
            .push(conn.server_name().map(str::to_string));
        seen.alpn
            .lock()
            .unwrap()
            .push(conn.alpn_protocol().map(<[u8]>::to_vec));
    }
    let mut buf = Vec::new();
    let mut tmp = vec![0u8; 16384];
    loop {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            let n = match req.parse(&buf) {
                Ok(httparse::Status::Complete(n)) => n,
                Ok(httparse::Status::Partial) => break,
                Err(_) => return,
            };
            let path = req.path.unwrap_or("").to_string();
            buf.drain(..n);
            seen.requests.fetch_add(1, Ordering::SeqCst);
            *seen.paths.lock().unwrap().entry(path.clone()).or_default() += 1;
            let body = body_for(&path);
            let close = if mode == Mode::CloseEach {
                "Connection: close\r\n"
            } else {
                ""
            };
            let mut out = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Checksum: {:016x}\r\n{close}\r\n",
                body.len(),
                XxHash3_64::oneshot(&body)
            )
            .into_bytes();
            out.extend_from_slice(&body);
            if tls.write_all(&out).await.is_err() {
                return;
            }
            if mode == Mode::CloseEach {
                // close_notify, then the TCP close.
                let _ = tls.shutdown().await;
                return;
            }
        }
        match tls.read(&mut tmp).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
}

fn no_errors(v: &serde_json::Value) {
    for (k, n) in v["errors"].as_object().unwrap() {
        assert_eq!(n, 0, "errors.{k}: {}", v["errors"]);
    }
}

#[test]
fn https_keepalive_answers_every_request_over_one_handshake_per_connection() {
    let srv = TlsServer::start(Mode::KeepAlive);
    let dir = tempfile::tempdir().unwrap();
    let mix = dir.path().join("mix.txt");
    // Small bodies and 300 KB ones (many records per response), all verified.
    std::fs::write(&mix, format!("3 /small\n1 {}\n", srv.url("/big"))).unwrap();
    let (r, v) = edgeload_json(
        &[
            "-t",
            "2",
            "-c",
            "4",
            "--requests",
            "400",
            "--insecure",
            "--verify",
            "--mix",
            mix.to_str().unwrap(),
            &srv.url("/"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .starts_with(&format!("Running 10s test @ {}\n", srv.url("/"))),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("  TLS: certificates not checked (--insecure), session resumption on\n"),
        "{}",
        r.stdout
    );
    assert_eq!(reported_requests(&r.stdout), 400);
    assert!(
        r.stdout
            .contains("  Verify: 400 ok, 0 mismatched, 0 without checksum"),
        "{}",
        r.stdout
    );
    // Connections opened together do full handshakes, but one started a little later
    // (the other thread) may already resume a session of the first ones: the client
    // config and its session cache are shared by every thread.
    let resumed = srv.count(&srv.seen.resumed);
    assert!(
        r.stdout
            .contains(&format!("  TLS handshakes: 4 ({resumed} resumed)\n")),
        "server saw {resumed} resumed\n{}",
        r.stdout
    );
    assert!(!r.stdout.contains("Socket errors"), "{}", r.stdout);
    assert_eq!(srv.count(&srv.seen.requests), 400);
    assert_eq!(srv.count(&srv.seen.handshakes), 4);
    let big = srv.seen.paths.lock().unwrap().get("/big").copied().unwrap();
    assert!((50..150).contains(&big), "1 in 4 requests is /big: {big}");
    // An IP literal sends no SNI; ALPN agrees on http/1.1.
    assert!(srv.seen.sni.lock().unwrap().iter().all(Option::is_none));
    assert!(srv
        .seen
        .alpn
        .lock()
        .unwrap()
        .iter()
        .all(|a| a.as_deref() == Some(b"http/1.1")));
    assert_eq!(v["requests"], 400);
    assert_eq!(v["url"], srv.url("/"));
    assert_eq!(
        (
            &v["connections_opened"],
            &v["tls_handshakes"],
            &v["tls_resumed"]
        ),
        (&4.into(), &4.into(), &resumed.into())
    );
    assert_eq!(v["tls_failed"], 0);
    assert_eq!(v["tls_handshake_us"]["count"], 4);
    assert_eq!(v["connect_us"]["count"], 4);
    no_errors(&v);
}

/// Connection: close on every response makes edgeload reconnect for every request:
/// with one shared client config the reconnects resume; with --tls-no-resume none does.
#[test]
fn reconnects_resume_sessions_unless_tls_no_resume() {
    let srv = TlsServer::start(Mode::CloseEach);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "-t",
            "1",
            "-c",
            "2",
            "--requests",
            "40",
            "-k",
            "--json",
            json.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let url = srv.url("/r");
        args.push(&url);
        let r = edgeload(&args, LIMIT);
        assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
        assert_eq!(reported_requests(&r.stdout), 40, "{}", r.stdout);
        assert!(!r.stdout.contains("Socket errors"), "{}", r.stdout);
        (r, json_of(&json))
    };

    let (r, v) = run(&[]);
    no_errors(&v);
    assert_eq!(v["tls_handshakes"], 40, "one connection per request");
    assert_eq!(srv.count(&srv.seen.handshakes), 40);
    let resumed = v["tls_resumed"].as_u64().unwrap();
    // Only the first two connections (opened together, before any session existed)
    // need a full handshake.
    assert!(resumed >= 38, "{resumed} of 40 resumed\n{}", r.stdout);
    assert_eq!(srv.count(&srv.seen.resumed), resumed, "both sides agree");
    assert!(
        r.stdout
            .contains(&format!("  TLS handshakes: 40 ({resumed} resumed)\n")),
        "{}",
        r.stdout
    );

    let (r, v) = run(&["--tls-no-resume"]);
    no_errors(&v);
    assert_eq!(
        (&v["tls_handshakes"], &v["tls_resumed"]),
        (&40.into(), &0.into())
    );
    assert_eq!(srv.count(&srv.seen.handshakes), 80);
    assert_eq!(srv.count(&srv.seen.resumed), resumed, "no new resumption");
    assert!(r.stdout.contains("session resumption off"), "{}", r.stdout);
    assert!(
        r.stdout.contains("  TLS handshakes: 40 (0 resumed)\n"),
        "{}",
        r.stdout
    );
}

#[test]
fn untrusted_certificate_fails_cleanly_and_cacert_trusts_it() {
    let srv = TlsServer::start(Mode::KeepAlive);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    // Neither --insecure nor --cacert: the test CA is in no system store.
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "2",
            "-d",
            "500ms",
            "--json",
            json.to_str().unwrap(),
            &srv.url("/"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(
        r.stdout.contains("  Socket errors: connect "),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("  TLS handshakes: 0 (0 resumed), "),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr
            .contains("TLS handshake failed: invalid peer certificate"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("--cacert FILE"), "{}", r.stderr);
    assert!(r.stderr.contains("no request completed"), "{}", r.stderr);
    let v = json_of(&json);
    let failed = v["tls_failed"].as_u64().unwrap();
    assert!(failed >= 2, "{failed}");
    assert_eq!(v["errors"]["connect"].as_u64(), Some(failed));
    assert_eq!(
        (&v["requests"], &v["tls_handshakes"]),
        (&0.into(), &0.into())
    );
    assert_eq!(srv.count(&srv.seen.handshakes), 0);
    assert_eq!(srv.count(&srv.seen.requests), 0);

    // Trusting the test CA: the same server works, certificate and IP checked.
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "2",
            "--requests",
            "50",
            "--cacert",
            srv.ca(),
            &srv.url("/"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(reported_requests(&r.stdout), 50);
    assert!(
        r.stdout.contains("  TLS handshakes: 2 (0 resumed)\n"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("certificates checked against"),
        "{}",
        r.stdout
    );
    assert!(r.stderr.is_empty(), "{}", r.stderr);
}

#[test]
fn https_to_a_plain_http_server_is_a_counted_handshake_failure() {
    let plain = TestServer::start(common::Framing::Length, None);
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "1",
            "-d",
            "300ms",
            "-k",
            &format!("https://{}/", plain.addr),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("  Socket errors: connect "),
        "{}",
        r.stdout
    );
    assert!(r.stderr.contains("TLS handshake failed: "), "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert_eq!(plain.requests(), 0, "no plain request was sent");
}

/// A DNS host is sent as SNI and checked against the certificate.
#[test]
fn dns_host_is_sent_as_sni() {
    // Bind where edgeload will connect: the first address `localhost` resolves to.
    let Some(local) = ("localhost", 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
    else {
        eprintln!("SKIPPED: localhost does not resolve");
        return;
    };
    let srv = TlsServer::start_on(local, Mode::KeepAlive);
    let url = format!("https://localhost:{}/sni", srv.addr.port());
    let r = edgeload(
        &[
            "-t",
            "1",
            "-c",
            "1",
            "--requests",
            "5",
            "--cacert",
            srv.ca(),
            &url,
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(reported_requests(&r.stdout), 5);
    assert_eq!(
        *srv.seen.sni.lock().unwrap(),
        vec![Some("localhost".to_string())]
    );
}

#[test]
fn ramp_reports_the_tls_handshake_distribution() {
    let srv = TlsServer::start(Mode::KeepAlive);
    let (r, v) = edgeload_json(
        &[
            "-t",
            "2",
            "-c",
            "6",
            "--ramp",
            "100",
            "-d",
            "500ms",
            "-k",
            &srv.url("/"),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    for block in [
        "  Connect Distribution\n",
        "  TLS Handshake Distribution\n",
        "  Delay Distribution\n",
        "  TLS handshakes: 6 (",
    ] {
        assert!(r.stdout.contains(block), "missing {block:?}:\n{}", r.stdout);
    }
    assert_eq!(v["tls_handshake_us"]["count"], 6);
    // Connections opened 10 ms apart may resume the sessions of the earlier ones (the
    // config, and its session cache, is shared by both threads), but not the first.
    assert!(v["tls_resumed"].as_u64().unwrap() <= 5);
    assert_eq!(
        v["tls_resumed"].as_u64(),
        Some(srv.count(&srv.seen.resumed))
    );
    assert_eq!(v["connect_us"]["count"], 6);
    // A handshake is a round trip plus key exchange and signature checks: more than the
    // loopback TCP connect, and never zero.
    assert!(v["tls_handshake_us"]["p50"].as_u64().unwrap() > 0);
    no_errors(&v);
}
