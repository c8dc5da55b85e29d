//! TLS with rustls on the `ring` provider: the server side of `[[listen]] tls`
//! (certificates chosen by SNI, ALPN, resumption with rotating ticket keys), the
//! client side of `https://` upstreams, and the counters of both (`docs/tls.md`).
//!
//! Everything here is built from the config: a reload builds it again, which is how
//! certificates are re-read on SIGHUP. Handshakes already under way keep the config
//! they started with (an `Arc`), so a reload never fails one. Ticket keys and the TLS
//! 1.2 session cache are process-wide, so sessions resume across reloads and across
//! workers.

pub mod client;

use crate::prom::Prom;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

/// The crypto provider of every TLS config we build: ring's, with AES-128-GCM put
/// first in each TLS version's suite list.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    static P: OnceLock<Arc<rustls::crypto::CryptoProvider>> = OnceLock::new();
    P.get_or_init(|| {
        use rustls::crypto::ring::cipher_suite as cs;
        let mut p = rustls::crypto::ring::default_provider();
        p.cipher_suites = vec![
            cs::TLS13_AES_128_GCM_SHA256,
            cs::TLS13_AES_256_GCM_SHA384,
            cs::TLS13_CHACHA20_POLY1305_SHA256,
            cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ];
        Arc::new(p)
    })
    .clone()
}

/// A certificate chain and its key, checked to belong together, with the DNS names the
/// certificate covers.
pub struct KeyPair {
    pub key: Arc<CertifiedKey>,
    pub dns_names: Vec<String>,
}

/// Reads a PEM certificate chain and its PEM private key (PKCS#8, PKCS#1 or SEC1), and
/// checks that the key is the certificate's. The message names the file at fault.
pub fn load_key_pair(cert: &Path, key: &Path) -> Result<KeyPair, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("{}: {}", cert.display(), pem_error(e)))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {}", cert.display(), pem_error(e)))?;
    if certs.is_empty() {
        return Err(format!(
            "{}: no PEM certificate in the file",
            cert.display()
        ));
    }
    let der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("{}: {}", key.display(), pem_error(e)))?;
    let signing = provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| format!("{}: unusable private key: {e}", key.display()))?;
    let ck = CertifiedKey::new(certs, signing);
    match ck.keys_match() {
        Ok(()) => {}
        // A key type rustls cannot compare is accepted; a mismatch is not.
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(_) => {
            return Err(format!(
                "{}: the private key does not match the certificate {}",
                key.display(),
                cert.display()
            ))
        }
    }
    let dns_names = webpki::EndEntityCert::try_from(&ck.cert[0])
        .map_err(|e| format!("{}: not a valid X.509 certificate: {e:?}", cert.display()))?
        .valid_dns_names()
        .map(|n| n.to_ascii_lowercase())
        .collect();
    Ok(KeyPair {
        key: Arc::new(ck),
        dns_names,
    })
}

fn pem_error(e: rustls_pki_types::pem::Error) -> String {
    match e {
        rustls_pki_types::pem::Error::Io(e) => e.to_string(),
        rustls_pki_types::pem::Error::NoItemsFound => "no PEM item of the right kind".into(),
        other => format!("not valid PEM: {other:?}"),
    }
}

/// Picks the certificate for a ClientHello's SNI name: an exact name, then a wildcard
/// (`*.example` covers `a.example`, not `a.b.example`), then the listener's default
/// (its first certificate), so a client without SNI still completes the handshake.
#[derive(Debug)]
pub struct SniResolver {
    exact: HashMap<String, (u16, Arc<CertifiedKey>)>,
    wildcard: HashMap<String, (u16, Arc<CertifiedKey>)>,
    default: Arc<CertifiedKey>,
    /// Per certificate (config order): the names it covers, lower-case (`*.x` as is).
    names: Vec<Vec<String>>,
}

impl SniResolver {
    /// The certificate for `name` (lower-case, no trailing dot expected).
    pub fn pick(&self, name: Option<&str>) -> Arc<CertifiedKey> {
        match name.and_then(|n| self.chosen(n)) {
            Some((_, k)) => k.clone(),
            None => self.default.clone(),
        }
    }

    fn chosen(&self, name: &str) -> Option<&(u16, Arc<CertifiedKey>)> {
        let n = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(k) = self.exact.get(&n) {
            return Some(k);
        }
        let (_, parent) = n.split_once('.')?;
        self.wildcard.get(parent)
    }

    /// The index of the certificate an SNI name chose by one of its names (None when
    /// it fell back to the default), for [`Self::covers`].
    pub fn chosen_index(&self, sni: &str) -> Option<u16> {
        self.chosen(sni).map(|(i, _)| *i)
    }

    /// Whether certificate `cert` covers `host` (any case, no port, no trailing dot):
    /// one of its names, or a `*.parent` wildcard for one label (RFC 6125 6.4.3).
    pub fn covers(&self, cert: u16, host: &str) -> bool {
        let Some(names) = self.names.get(cert as usize) else {
            return true;
        };
        names.iter().any(|n| match n.strip_prefix("*.") {
            Some(parent) => host
                .split_once('.')
                .is_some_and(|(l, p)| !l.is_empty() && p.eq_ignore_ascii_case(parent)),
            None => n.eq_ignore_ascii_case(host),
        })
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.pick(hello.server_name()))
    }
}

/// One certificate of a listener: chain file, key file, SNI names (empty: the
/// certificate's own DNS names).
pub type CertSpec = (PathBuf, PathBuf, Vec<String>);

/// Builds the SNI resolver of a listener's certificates (read now), the default first.
pub fn resolver(certs: &[CertSpec]) -> Result<SniResolver, String> {
    let mut exact = HashMap::new();
    let mut wildcard = HashMap::new();
    let mut default = None;
    let mut all_names = Vec::new();
    for (idx, (cert, key, names)) in certs.iter().enumerate() {
        let idx = idx as u16;
        let pair = load_key_pair(cert, key)?;
        let names = if names.is_empty() {
            pair.dns_names.clone()
        } else {
            names.iter().map(|n| n.to_ascii_lowercase()).collect()
        };
        all_names.push(
            names
                .iter()
                .map(|n| n.trim_end_matches('.').to_string())
                .collect(),
        );
        for n in names {
            let n = n.trim_end_matches('.').to_string();
            // The first certificate to claim a name keeps it.
            match n.strip_prefix("*.") {
                Some(parent) => {
                    wildcard
                        .entry(parent.to_string())
                        .or_insert_with(|| (idx, pair.key.clone()));
                }
                None => {
                    exact.entry(n).or_insert_with(|| (idx, pair.key.clone()));
                }
            }
        }
        default.get_or_insert_with(|| pair.key.clone());
    }
    let default = default.ok_or("needs `cert` and `key`, or a non-empty `certs` list")?;
    Ok(SniResolver {
        exact,
        wildcard,
        default,
        names: all_names,
    })
}

/// Ticket keys for TLS 1.3 resumption (rotated every 6 hours; the previous key is still
/// accepted), one set for the process so that any worker resumes any session, across
/// reloads too.
fn ticketer() -> Option<Arc<dyn rustls::server::ProducesTickets>> {
    static T: OnceLock<Option<Arc<dyn rustls::server::ProducesTickets>>> = OnceLock::new();
    T.get_or_init(|| match rustls::crypto::ring::Ticketer::new() {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::error!("TLS session tickets unavailable: {e}");
            None
        }
    })
    .clone()
}

/// The TLS 1.2 session-ID cache (stateful resumption), shared like the ticket keys.
fn session_cache() -> Arc<dyn rustls::server::StoresServerSessions> {
    static C: OnceLock<Arc<dyn rustls::server::StoresServerSessions>> = OnceLock::new();
    C.get_or_init(|| rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE))
        .clone()
}

/// TLS 1.2 sessions kept for resumption (~200 B each).
const SESSION_CACHE: usize = 64 * 1024;

/// ALPN protocol ids.
pub const ALPN_H2: &[u8] = b"h2";
pub const ALPN_HTTP11: &[u8] = b"http/1.1";
pub const ALPN_H3: &[u8] = b"h3";

/// The rustls server config of one TLS listener: its certificates, whether sessions
/// resume (tickets and the TLS 1.2 cache), whether ALPN offers h2. With it, the
/// certificate resolver, which also tells which names a connection's certificate
/// covers (421 for a host it does not).
pub fn server_config(
    certs: &[CertSpec],
    resumption: bool,
    http2: bool,
    ktls: bool,
) -> Result<(Arc<rustls::ServerConfig>, Arc<SniResolver>), String> {
    let resolver = Arc::new(resolver(certs)?);
    let mut sc = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(resolver.clone());
    sc.alpn_protocols = if http2 {
        vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()]
    } else {
        vec![ALPN_HTTP11.to_vec()]
    };
    // Our cipher order, not the client's: AES-128-GCM first (hardware AES, a third
    // cheaper than AES-256), then AES-256-GCM, then ChaCha20-Poly1305.
    sc.ignore_client_order = true;
    // kTLS takes the session's keys out of rustls once the handshake is done.
    sc.enable_secret_extraction = ktls;
    match (resumption, ticketer()) {
        (true, Some(t)) => {
            sc.ticketer = t;
            sc.session_storage = session_cache();
        }
        (true, None) => sc.session_storage = session_cache(),
        (false, _) => {
            sc.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
            sc.send_tls13_tickets = 0;
        }
    }
    Ok((Arc::new(sc), resolver))
}

/// The rustls config of a listener's QUIC side (`quic = true`): the same certificates
/// (`resolver`) and ticket keys as its TCP side, TLS 1.3 only (QUIC has no other),
/// ALPN `h3`; early data (0-RTT) only with `early_data` (quinn takes 0 or unlimited).
pub fn quic_server_config(
    resolver: Arc<SniResolver>,
    resumption: bool,
    early_data: bool,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let mut sc = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    sc.alpn_protocols = vec![ALPN_H3.to_vec()];
    sc.ignore_client_order = true;
    match (resumption, early_data, ticketer()) {
        (false, ..) => sc.send_tls13_tickets = 0,
        // Early data needs stateful resumption: each ticket is taken from the
        // process-wide session cache once, so a replayed ClientHello finds nothing
        // and its early data is rejected (RFC 8446 8.1, single-use tickets).
        (true, true, _) => {
            sc.session_storage = session_cache();
            sc.max_early_data_size = u32::MAX;
        }
        (true, false, Some(t)) => sc.ticketer = t,
        (true, false, None) => sc.session_storage = session_cache(),
    }
    Ok(Arc::new(sc))
}

/// A listener's protocol setup for the current config generation.
#[derive(Clone)]
pub struct ListenerProto {
    /// Its address, as configured (inherited or extra sockets are matched by it).
    pub addr: std::net::SocketAddr,
    /// TLS termination, when the listener has `tls`.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Its certificates' names (with `tls`).
    pub sni: Option<Arc<SniResolver>>,
    /// `http2 = true`.
    pub http2: bool,
    /// `deferred = true`: connections arrive with their first bytes in.
    pub deferred: bool,
    /// `tls.ktls = true`: the session goes to the kernel after the handshake.
    pub ktls: bool,
    /// `proxy_protocol = true`: connections open with a PROXY header.
    pub proxy_protocol: bool,
}

/// Why a handshake failed, for `edgecache_tls_handshake_errors_total{kind}`.
pub const HANDSHAKE_ERRORS: [&str; 6] = [
    "timeout",
    "eof",
    "protocol",
    "no_shared_cipher",
    "alert",
    "other",
];

/// The [`HANDSHAKE_ERRORS`] index of a failed handshake's error.
pub fn handshake_error_kind(e: &std::io::Error) -> usize {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::TimedOut => return 0,
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => return 1,
        _ => {}
    }
    let Some(inner) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return 5;
    };
    match inner {
        rustls::Error::InvalidMessage(_)
        | rustls::Error::InappropriateMessage { .. }
        | rustls::Error::InappropriateHandshakeMessage { .. }
        | rustls::Error::PeerMisbehaved(_)
        | rustls::Error::DecryptError => 2,
        rustls::Error::PeerIncompatible(_) => 3,
        rustls::Error::AlertReceived(_) => 4,
        _ => 5,
    }
}

/// TLS counters of one worker (summed by the admin listener).
#[derive(Default)]
pub struct TlsStats {
    pub handshakes_full: AtomicU64,
    pub handshakes_resumed: AtomicU64,
    pub handshake_errors: [AtomicU64; HANDSHAKE_ERRORS.len()],
    /// Connections of `tls.ktls` listeners by [`KTLS_RESULTS`].
    pub ktls: [AtomicU64; KTLS_RESULTS.len()],
}

/// What became of a `tls.ktls` connection after its handshake, for
/// `edgecache_tls_ktls_total{result}`: the kernel took it, it stayed in user space
/// (no kTLS in this kernel, or a cipher it lacks), or the kernel refused the keys
/// after they had left rustls (the connection was closed).
pub const KTLS_RESULTS: [&str; 3] = ["kernel", "user", "failed"];

impl TlsStats {
    /// Counts a completed handshake.
    pub fn handshake_done(&self, resumed: bool) {
        if resumed {
            self.handshakes_resumed.fetch_add(1, Relaxed);
        } else {
            self.handshakes_full.fetch_add(1, Relaxed);
        }
    }

    /// The TLS families of `/metrics`, summed over `all` (one block per worker).
    pub fn write_prom<'a>(all: impl Iterator<Item = &'a TlsStats> + Clone, p: &mut Prom) {
        // The one place a TLS counter is read.
        let sum = |f: &dyn Fn(&TlsStats) -> &AtomicU64| -> u64 {
            all.clone().map(|t| f(t).load(Relaxed)).sum()
        };
        p.counter(
            "edgecache_tls_handshakes_total",
            "TLS handshakes completed: full, or resumed (session ticket or cache).",
        )
        .labelled(&[("kind", &"full")], sum(&|t| &t.handshakes_full))
        .labelled(&[("kind", &"resumed")], sum(&|t| &t.handshakes_resumed));
        let mut f = p.counter(
            "edgecache_tls_handshake_errors_total",
            "TLS handshakes that failed, by kind.",
        );
        for (i, k) in HANDSHAKE_ERRORS.iter().enumerate() {
            f.labelled(&[("kind", k)], sum(&|t| &t.handshake_errors[i]));
        }
        let mut f = p.counter(
            "edgecache_tls_ktls_total",
            "Connections of tls.ktls listeners after the handshake: the kernel took the session (kernel), it stayed in user space (user: no kTLS in this kernel, or a cipher it lacks), or the kernel refused the keys and the connection was closed (failed).",
        );
        for (i, k) in KTLS_RESULTS.iter().enumerate() {
            f.labelled(&[("result", k)], sum(&|t| &t.ktls[i]));
        }
    }
}

#[cfg(test)]
mod tests;
