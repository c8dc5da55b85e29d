//! `--h3` requests: the checks made at start-up ([`check_headers`], [`check_classes`])
//! and the conversion of a class's HTTP/1.1 request head into an `http::Request`
//! ([`to_request`]), and the QUIC client's TLS config ([`quic_client_config`]). Its own
//! module so that [`crate::cli`] can check a command line without depending on the
//! connection loop of [`crate::h3`].

use crate::target::Class;
use crate::tls::TlsClient;
use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Uri};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Most header lines a class's request head holds: the `-H` lines, `Host`,
/// `Connection` and `Range`, with room to spare.
const MAX_REQUEST_HEADERS: usize = crate::target::MAX_HEADERS + 8;

/// HTTP/1.1 header fields about the connection, which HTTP/3 forbids (RFC 9114 §4.2).
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// Refuses `-H` headers that HTTP/3 forbids: the connection-specific ones, and `TE`
/// other than `trailers`. `headers` are already checked `Name: value` lines.
pub fn check_headers(headers: &[String]) -> Result<(), String> {
    for h in headers {
        let (name, value) = h.split_once(':').unwrap_or((h.as_str(), ""));
        let name = name.trim();
        if CONNECTION_SPECIFIC
            .iter()
            .any(|c| name.eq_ignore_ascii_case(c))
        {
            return Err(format!(
                "-H '{h}': connection-specific header fields are not allowed in HTTP/3 (--h3)"
            ));
        }
        if name.eq_ignore_ascii_case("te") && !value.trim().eq_ignore_ascii_case("trailers") {
            return Err(format!(
                "-H '{h}': HTTP/3 allows TE only as 'TE: trailers' (--h3)"
            ));
        }
    }
    Ok(())
}

/// Converts one request of each class, so that a request HTTP/3 cannot carry is a
/// usage error before the run rather than an error per request. Writes with a fixed
/// path number (no `--sequential` id is used up) and a `Range` line, which every
/// request of the class has in common with it but the number.
pub fn check_classes(classes: &[Class], authority: &str) -> Result<(), String> {
    let mut head = Vec::new();
    for c in classes {
        head.clear();
        c.write_range_request(1, 0, 0, &mut head);
        to_request(&head, authority)
            .map_err(|e| format!("{}: cannot be sent over HTTP/3: {e}", c.name))?;
    }
    Ok(())
}

/// Turns an HTTP/1.1 request head (as a [`Class`] writes it) into the same request for
/// HTTP/3: the method, `https://AUTHORITY/path` (AUTHORITY from the `Host` line, else
/// `default_authority`), and the other header fields except the connection-specific
/// ones.
pub fn to_request(head: &[u8], default_authority: &str) -> Result<Request<()>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_REQUEST_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("incomplete request head".into()),
        Err(e) => return Err(format!("invalid request head: {e}")),
    }
    let (Some(method), Some(path)) = (req.method, req.path) else {
        return Err("request head without a method or path".into());
    };
    let method =
        Method::from_bytes(method.as_bytes()).map_err(|_| format!("invalid method '{method}'"))?;
    let mut authority = default_authority;
    let mut out = Request::builder().method(method);
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("host") {
            authority = std::str::from_utf8(h.value)
                .map_err(|_| "Host is not valid UTF-8".to_string())?
                .trim();
            continue;
        }
        if CONNECTION_SPECIFIC
            .iter()
            .any(|c| h.name.eq_ignore_ascii_case(c))
        {
            continue;
        }
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| format!("invalid header name '{}'", h.name))?;
        let value = HeaderValue::from_bytes(h.value)
            .map_err(|_| format!("invalid value of header '{}'", h.name))?;
        out = out.header(name, value);
    }
    let uri = Uri::builder()
        .scheme("https")
        .authority(authority)
        .path_and_query(path)
        .build()
        .map_err(|e| format!("invalid URI https://{authority}{path}: {e}"))?;
    out.uri(uri)
        .body(())
        .map_err(|e| format!("invalid request: {e}"))
}

/// Sessions an edgeload connection keeps for its next handshakes (a server sends a
/// few tickets per handshake; each is used once).
const SESSIONS_PER_CONNECTION: usize = 4;

/// The quinn client config of one edgeload connection, for all its QUIC connections:
/// `tls`'s rustls config with its own session cache (unless `--tls-no-resume`) and its
/// certificate check wrapped to set `checked` when it runs. One handshake at a time
/// uses it, so `checked` tells whether that one checked a certificate.
pub fn quic_client_config(
    tls: &TlsClient,
    checked: Arc<AtomicBool>,
) -> Result<quinn::ClientConfig, String> {
    let mut config = (*tls.config).clone();
    if tls.options.resume {
        config.resumption = Resumption::in_memory_sessions(SESSIONS_PER_CONNECTION);
    }
    if let Some(inner) = &tls.verifier {
        config
            .dangerous()
            .set_certificate_verifier(Arc::new(Watched {
                inner: inner.clone(),
                checked,
            }));
    }
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(config)
        .map_err(|e| format!("QUIC TLS setup: {e}"))?;
    Ok(quinn::ClientConfig::new(Arc::new(crypto)))
}

/// A certificate check that notes it ran: a full handshake checks the server's
/// certificate, a resumed one does not.
#[derive(Debug)]
struct Watched {
    inner: Arc<dyn ServerCertVerifier>,
    checked: Arc<AtomicBool>,
}

impl ServerCertVerifier for Watched {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.checked.store(true, Ordering::Relaxed);
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        self.inner.requires_raw_public_keys()
    }

    fn root_hint_subjects(&self) -> Option<&[DistinguishedName]> {
        self.inner.root_hint_subjects()
    }
}
