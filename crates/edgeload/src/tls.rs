//! HTTPS: HTTP/1.1 over TLS (rustls on the `ring` provider), on the same non-blocking
//! sockets and event loop as plain HTTP.
//!
//! How it fits: [`crate::cli`] builds one [`TlsClient`] per run. Its rustls
//! `ClientConfig` (ALPN `http/1.1`; the system roots, `--cacert FILE` or `--insecure`) is
//! shared by every connection of every thread, so rustls's in-memory session cache
//! resumes sessions when connections are replaced; `--tls-no-resume` turns resumption
//! off so every handshake is a full one. [`crate::conn`] calls [`handshake`] once the TCP
//! connect completed, then drives the connection through [`TlsStream`], the TLS
//! [`Transport`]: rustls's `ClientConnection` fed by hand (`read_tls`,
//! `process_new_packets`, `reader`, `writer`, `write_tls`) inside the same `AsyncFd` loop
//! that drives plain connections. Plain `http://` connections never touch this module.
//!
//! `--h3` builds its client with [`TlsClient::new_h3`] instead: TLS 1.3 only, ALPN `h3`,
//! the same certificate checks, and the verifier kept apart so that [`crate::h3`] can
//! wrap it per connection (quinn runs the handshake; a check that never ran means the
//! session was resumed).
//!
//! Reads: one `recv` of up to [`TLS_READ_BUF`] bytes into a per-connection ciphertext
//! buffer, which is then handed to rustls from memory (left to itself, rustls reads the
//! socket 4 KiB at a time), so a response costs as many read calls as in plain HTTP and
//! the "short read means drained" rule still saves the read that would say EAGAIN.
//! Unlike the plain path, rustls's buffered API copies (and allocates) per TLS record.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{Resumption, WebPkiServerVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::{
    CertificateError, ClientConfig, ClientConnection, DigitallySignedStruct, HandshakeKind,
    RootCertStore, SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::unix::AsyncFd;
use tokio::time::timeout_at;

use crate::transport::Transport;

/// Ciphertext read from the socket in one call (two full TLS records).
pub const TLS_READ_BUF: usize = 32 * 1024;

/// How the server's certificate is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verify {
    /// Against the system's roots (rustls-native-certs: the OS store, or `SSL_CERT_FILE`).
    System,
    /// Against the CA certificates of a PEM file only (`--cacert`).
    CaFile(PathBuf),
    /// Not at all (`--insecure`); handshake signatures are still checked.
    Off,
}

/// The TLS flags of a run.
#[derive(Debug, Clone)]
pub struct TlsOptions {
    pub verify: Verify,
    /// Share sessions between connections (off with `--tls-no-resume`).
    pub resume: bool,
}

/// What every TLS connection of a run shares.
#[derive(Debug, Clone)]
pub struct TlsClient {
    /// One config for the whole run: its session cache is what lets connections resume.
    pub config: Arc<ClientConfig>,
    /// The URL host: sent as SNI when it is a DNS name (an IP address sends none), and
    /// the name the certificate must match.
    pub server_name: ServerName<'static>,
    pub options: TlsOptions,
    /// `--h3` only: the certificate check `config` was built with, which [`crate::h3`]
    /// wraps per connection to see whether a handshake checked a certificate (a full
    /// handshake) or resumed a session. `None` for HTTP/1.1 over TCP.
    pub(crate) verifier: Option<Arc<dyn ServerCertVerifier>>,
}

impl TlsClient {
    /// Builds the shared client config for `host`. Errors are usage errors (bad host,
    /// unreadable `--cacert`); a system without roots only gets a warning on stderr (every
    /// handshake will then fail, and be counted, unless `--cacert` or `--insecure`).
    pub fn new(host: &str, options: TlsOptions) -> Result<TlsClient, String> {
        let server_name = ServerName::try_from(host.to_string()).map_err(|_| {
            format!("host '{host}' is neither a DNS name nor an IP address usable for TLS")
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?;
        let mut config = match &options.verify {
            Verify::Off => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(
                    provider.signature_verification_algorithms,
                )))
                .with_no_client_auth(),
            Verify::System => builder
                .with_root_certificates(system_roots())
                .with_no_client_auth(),
            Verify::CaFile(path) => builder
                .with_root_certificates(ca_file(path)?)
                .with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        if !options.resume {
            config.resumption = Resumption::disabled();
        }
        Ok(TlsClient {
            config: Arc::new(config),
            server_name,
            options,
            verifier: None,
        })
    }

    /// The client for `--h3`: TLS 1.3 only (QUIC has no other), ALPN `h3`, the same
    /// certificate checks and resumption setting as [`TlsClient::new`].
    pub fn new_h3(host: &str, options: TlsOptions) -> Result<TlsClient, String> {
        let server_name = ServerName::try_from(host.to_string()).map_err(|_| {
            format!("host '{host}' is neither a DNS name nor an IP address usable for TLS")
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match &options.verify {
            Verify::Off => Arc::new(AcceptAnyCertificate(
                provider.signature_verification_algorithms,
            )),
            Verify::System => webpki_verifier(system_roots(), &provider),
            Verify::CaFile(path) => webpki_verifier(ca_file(path)?, &provider),
        };
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| format!("TLS setup: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier.clone())
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h3".to_vec()];
        if !options.resume {
            config.resumption = Resumption::disabled();
        }
        Ok(TlsClient {
            config: Arc::new(config),
            server_name,
            options,
            verifier: Some(verifier),
        })
    }

    /// The message for a failed handshake, with a hint when it is about trust.
    fn failure(&self, detail: &str) -> String {
        format!("TLS handshake failed: {detail}{}", self.hint(detail))
    }

    /// What to try when a handshake failed with `detail` (empty when nothing to say).
    pub(crate) fn hint(&self, detail: &str) -> &'static str {
        if detail.contains("corrupt message") {
            " (does the server speak TLS on this port?)"
        } else if !detail.contains("certificate") {
            ""
        } else {
            match self.options.verify {
                Verify::Off => "",
                Verify::System => {
                    " (a self-signed certificate or a private CA? pass the CA with --cacert FILE, \
                     or skip verification with --insecure)"
                }
                Verify::CaFile(_) if detail.contains("CaUsedAsEndEntity") => {
                    " (the server's certificate is itself a CA certificate, as `openssl req \
                     -x509` makes by default, and cannot also be its own server certificate: \
                     sign a server certificate with that CA, or use --insecure)"
                }
                Verify::CaFile(_) => {
                    " (is the server's certificate signed by a CA of --cacert, for this \
                     host name? --insecure skips the check)"
                }
            }
        }
    }
}

/// The WebPKI check against `roots`. An empty store (a system without CA certificates,
/// already warned about) cannot build one: every certificate is then refused as of an
/// unknown issuer, as `with_root_certificates` does for HTTP/1.1.
fn webpki_verifier(
    roots: RootCertStore,
    provider: &Arc<CryptoProvider>,
) -> Arc<dyn ServerCertVerifier> {
    match WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build() {
        Ok(v) => v,
        Err(_) => Arc::new(NoTrustedRoots(provider.signature_verification_algorithms)),
    }
}

/// No trust roots at all: every certificate is from an unknown issuer.
#[derive(Debug)]
struct NoTrustedRoots(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for NoTrustedRoots {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Err(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer,
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// The system's trust roots; warns when there are none.
fn system_roots() -> RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _unparsable) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or(String::new(), |e| format!(" ({e})"));
        eprintln!(
            "edgeload: warning: no system CA certificates found{why}; certificate checks will \
             fail (use --cacert FILE or --insecure)"
        );
    }
    roots
}

/// The CA certificates of a PEM file (`--cacert`).
fn ca_file(path: &Path) -> Result<RootCertStore, String> {
    let at = |m: String| format!("--cacert {}: {m}", path.display());
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| at(e.to_string()))? {
        let cert = cert.map_err(|e| at(e.to_string()))?;
        roots
            .add(cert)
            .map_err(|e| at(format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(at("no PEM certificate in the file".into()));
    }
    Ok(roots)
}

/// `--insecure`: any certificate is accepted, but the handshake signatures are still
/// verified with the provider's algorithms (so the peer holds the certificate's key and
/// the handshake costs what a verified one costs, minus the chain check).
#[derive(Debug)]
struct AcceptAnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// Why a handshake did not complete.
#[derive(Debug)]
pub enum HandshakeError {
    /// Not done within `--timeout` (counted as `connect_timeout`).
    Timeout,
    /// Refused, reset, closed or a TLS error (counted as `connect`); the message says
    /// which.
    Failed(String),
}

/// One TLS connection over a connected non-blocking socket.
pub struct TlsStream {
    conn: ClientConnection,
    /// Ciphertext read from the socket that rustls has not taken yet:
    /// `inbuf[in_start..in_end]`.
    inbuf: Box<[u8]>,
    in_start: usize,
    in_end: usize,
    /// Decrypted bytes rustls holds that were not read yet.
    plaintext: usize,
    /// The last socket read was short, so the socket was empty then.
    short: bool,
}

/// Runs the TLS handshake on a connected socket, bounded by `deadline`.
pub async fn handshake(
    fd: &AsyncFd<TcpStream>,
    client: &TlsClient,
    deadline: Instant,
) -> Result<TlsStream, HandshakeError> {
    let conn = ClientConnection::new(client.config.clone(), client.server_name.clone())
        .map_err(|e| HandshakeError::Failed(client.failure(&e.to_string())))?;
    let mut s = TlsStream {
        conn,
        inbuf: vec![0u8; TLS_READ_BUF].into_boxed_slice(),
        in_start: 0,
        in_end: 0,
        plaintext: 0,
        short: false,
    };
    match s.run_handshake(fd, deadline).await {
        Ok(()) => Ok(s),
        Err(HandshakeError::Failed(m)) => {
            // Best effort: tell the server why (rustls queued an alert).
            let _ = s.conn.write_tls(&mut fd.get_ref());
            Err(HandshakeError::Failed(client.failure(&m)))
        }
        Err(e) => Err(e),
    }
}

impl TlsStream {
    /// A resumed session (rather than a full handshake).
    pub fn resumed(&self) -> bool {
        self.conn.handshake_kind() == Some(HandshakeKind::Resumed)
    }

    async fn run_handshake(
        &mut self,
        fd: &AsyncFd<TcpStream>,
        deadline: Instant,
    ) -> Result<(), HandshakeError> {
        let io_failed = |e: io::Error| {
            if e.kind() == io::ErrorKind::TimedOut {
                HandshakeError::Timeout
            } else {
                HandshakeError::Failed(e.to_string())
            }
        };
        loop {
            self.flush(fd, deadline).await.map_err(io_failed)?;
            if !self.conn.is_handshaking() {
                return Ok(());
            }
            if self.in_start < self.in_end {
                self.feed().map_err(io_failed)?;
                continue;
            }
            let mut guard = match timeout_at(deadline.into(), fd.readable()).await {
                Err(_) => return Err(HandshakeError::Timeout),
                Ok(g) => g.map_err(io_failed)?,
            };
            let inbuf = &mut self.inbuf;
            match guard.try_io(|s| s.get_ref().read(inbuf)) {
                Err(_would_block) => {}
                Ok(Ok(0)) => {
                    return Err(HandshakeError::Failed(
                        "the server closed the connection during the handshake".into(),
                    ))
                }
                Ok(Ok(n)) => (self.in_start, self.in_end) = (0, n),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(io_failed(e)),
            }
        }
    }

    /// Gives rustls (part of) the buffered ciphertext and processes it.
    fn feed(&mut self) -> io::Result<()> {
        let n = self
            .conn
            .read_tls(&mut &self.inbuf[self.in_start..self.in_end])?;
        if n == 0 {
            // rustls takes nothing after the peer's close_notify.
            self.in_start = self.in_end;
            return Ok(());
        }
        self.in_start += n;
        let state = self
            .conn
            .process_new_packets()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.plaintext = state.plaintext_bytes_to_read();
        Ok(())
    }

    /// Writes what rustls has queued (records, alerts), waiting for writability at most
    /// until `deadline`.
    async fn flush(&mut self, fd: &AsyncFd<TcpStream>, deadline: Instant) -> io::Result<()> {
        while self.conn.wants_write() {
            // Fast path: the socket buffer almost always has room.
            match self.conn.write_tls(&mut fd.get_ref()) {
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            let mut guard = match timeout_at(deadline.into(), fd.writable()).await {
                Err(_) => return Err(io::ErrorKind::TimedOut.into()),
                Ok(g) => g?,
            };
            let conn = &mut self.conn;
            match guard.try_io(|s| conn.write_tls(&mut s.get_ref())) {
                Ok(Ok(_)) | Err(_) => {}
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Transport for TlsStream {
    #[inline]
    fn buffered(&self) -> bool {
        self.plaintext > 0 || self.in_start < self.in_end
    }

    fn read(&mut self, sock: &TcpStream, out: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(out) {
                Ok(n) => {
                    // n == 0: the server's close_notify.
                    self.plaintext = self.plaintext.saturating_sub(n);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // A TCP close without close_notify: an end of stream, as in plain HTTP
                // (the codec decides whether a response was cut short).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            if self.in_start < self.in_end {
                self.feed()?;
                if self.conn.wants_write() {
                    // A post-handshake reply (key update) or an alert; what the socket
                    // does not take now goes out with the next request.
                    let _ = self.conn.write_tls(&mut &*sock);
                }
                continue;
            }
            let mut s = sock;
            let n = s.read(&mut self.inbuf)?;
            self.short = n < self.inbuf.len();
            (self.in_start, self.in_end) = (0, n);
            if n == 0 {
                // Tell rustls about the EOF; its reader then says which kind it was.
                self.conn.read_tls(&mut io::empty())?;
            }
        }
    }

    #[inline]
    fn drained(&self, _n: usize, _space: usize) -> bool {
        self.short && !self.buffered()
    }

    async fn write_all(
        &mut self,
        fd: &AsyncFd<TcpStream>,
        buf: &[u8],
        deadline: Instant,
    ) -> io::Result<()> {
        let mut off = 0;
        loop {
            // rustls encrypts into its own send buffer (bounded: it may take a part).
            while off < buf.len() {
                match self.conn.writer().write(&buf[off..])? {
                    0 => break,
                    n => off += n,
                }
            }
            self.flush(fd, deadline).await?;
            if off == buf.len() {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_follow_the_host() {
        let opts = || TlsOptions {
            verify: Verify::Off,
            resume: true,
        };
        let c = TlsClient::new("example.com", opts()).unwrap();
        assert!(matches!(c.server_name, ServerName::DnsName(_)));
        assert_eq!(c.config.alpn_protocols, vec![b"http/1.1".to_vec()]);
        // An IP literal is an IP name: rustls sends no SNI for it.
        for ip in ["127.0.0.1", "::1"] {
            let c = TlsClient::new(ip, opts()).unwrap();
            assert!(
                matches!(c.server_name, ServerName::IpAddress(_)),
                "{ip}: {:?}",
                c.server_name
            );
        }
        assert!(TlsClient::new("bad_host!", opts())
            .unwrap_err()
            .contains("neither a DNS name nor an IP address"));
    }

    #[test]
    fn resumption_can_be_turned_off() {
        let on = TlsClient::new(
            "h",
            TlsOptions {
                verify: Verify::Off,
                resume: true,
            },
        )
        .unwrap();
        let off = TlsClient::new(
            "h",
            TlsOptions {
                verify: Verify::Off,
                resume: false,
            },
        )
        .unwrap();
        // Only the shared store can tell: a disabled one never hands a session back, an
        // enabled one is the default in-memory cache.
        let dbg = |c: &TlsClient| format!("{:?}", c.config.resumption);
        assert!(
            dbg(&off).contains("NoClientSessionStorage"),
            "{}",
            dbg(&off)
        );
        assert!(!dbg(&on).contains("NoClientSessionStorage"), "{}", dbg(&on));
    }

    #[test]
    fn failures_carry_a_hint() {
        let client = |verify| {
            TlsClient::new(
                "h",
                TlsOptions {
                    verify,
                    resume: true,
                },
            )
            .unwrap()
        };
        let bad_cert = "invalid peer certificate: UnknownIssuer";
        let m = client(Verify::System).failure(bad_cert);
        assert!(
            m.starts_with("TLS handshake failed: invalid peer certificate: UnknownIssuer (")
                && m.contains("--cacert FILE")
                && m.contains("--insecure"),
            "{m}"
        );
        let m = client(Verify::Off).failure("received corrupt message of type InvalidContentType");
        assert!(
            m.ends_with("(does the server speak TLS on this port?)"),
            "{m}"
        );
        let m = client(Verify::Off).failure("Connection reset by peer (os error 104)");
        assert_eq!(
            m,
            "TLS handshake failed: Connection reset by peer (os error 104)"
        );
    }

    #[test]
    fn cacert_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        for (path, want) in [
            (empty.clone(), "no PEM certificate"),
            (dir.path().join("missing.pem"), "missing.pem"),
        ] {
            let e = TlsClient::new(
                "h",
                TlsOptions {
                    verify: Verify::CaFile(path.clone()),
                    resume: true,
                },
            )
            .unwrap_err();
            assert!(e.starts_with("--cacert ") && e.contains(want), "{e}");
        }
    }
}
