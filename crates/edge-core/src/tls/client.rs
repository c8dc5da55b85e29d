//! The client side: rustls configs for `https://` upstream servers.
//!
//! Verification is against the system's roots (read once, from the OS store), or
//! against the CA file of `tls_ca`. `tls_verify = false` turns verification off (the
//! handshake's signatures are still checked); it is logged as a warning when the
//! upstream is built.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// The system's trust anchors, read once.
fn system_roots() -> Arc<RootCertStore> {
    static R: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    R.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::warn!("system TLS roots: {e}");
        }
        let mut store = RootCertStore::empty();
        let (added, ignored) = store.add_parsable_certificates(found.certs);
        if added == 0 {
            tracing::warn!(
                "no usable system TLS root certificates ({ignored} unparsable): \
                 https upstreams need tls_ca"
            );
        }
        Arc::new(store)
    })
    .clone()
}

/// Reads a PEM bundle of CA certificates.
pub fn load_ca(path: &Path) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    let iter =
        CertificateDer::pem_file_iter(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for c in iter {
        let c = c.map_err(|e| format!("{}: {e}", path.display()))?;
        store
            .add(c)
            .map_err(|e| format!("{}: not a usable CA certificate: {e}", path.display()))?;
    }
    if store.is_empty() {
        return Err(format!(
            "{}: no PEM certificate in the file",
            path.display()
        ));
    }
    Ok(store)
}

/// The rustls client config of an upstream group.
pub fn client_config(ca: Option<&Path>, verify: bool) -> Result<Arc<rustls::ClientConfig>, String> {
    let builder = rustls::ClientConfig::builder_with_provider(super::provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?;
    let mut cfg = if !verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(super::provider())))
            .with_no_client_auth()
    } else {
        let roots = match ca {
            Some(p) => Arc::new(load_ca(p)?),
            None => system_roots(),
        };
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    cfg.alpn_protocols = vec![super::ALPN_HTTP11.to_vec()];
    Ok(Arc::new(cfg))
}

/// `tls_verify = false`: any certificate is accepted; the handshake signatures are
/// still verified, so the peer must hold the key of the certificate it sent.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
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
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
