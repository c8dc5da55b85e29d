//! QUIC for HTTP/3 (`[[listen]] quic = true`, `docs/http3.md`): quinn on our rustls.
//!
//! - [`cid`]: the connection IDs we issue name the worker that owns the connection,
//!   and the steering decision reads them from a datagram.
//! - [`steer`]: the same decision made by the kernel, a classic BPF program on the
//!   listener's reuseport group (`quic_bpf`), so migrated clients reach their worker
//!   directly.
//! - [`socket`]: each worker's UDP socket as quinn sees it: recvmmsg, GRO and GSO by
//!   quinn-udp, and the hand-off of datagrams that belong to another worker (a client
//!   whose address changed lands wherever the kernel's 4-tuple hash puts it) before
//!   quinn sees them.
//! - here: the keys every worker shares (stateless resets and Retry tokens made by one
//!   worker are valid at all), and the QUIC server config of a listener (built with
//!   the TLS one on every reload). The counters are `metrics::QuicStats`.
//!
//! The HTTP/3 connections themselves are served in [`crate::http::h3`]; each worker's
//! endpoint and its accept loop (Retry, `limit_conn`) in `server::worker`.

pub mod cid;
pub mod socket;
pub mod steer;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Request streams a client may have open at once on one connection (as HTTP/2's
/// `MAX_CONCURRENT_STREAMS`).
pub const MAX_STREAMS: u32 = 128;
/// Unidirectional streams a client may open: HTTP/3 needs three (control, QPACK
/// encoder and decoder); the rest is room for reserved (grease) streams.
const MAX_UNI_STREAMS: u32 = 16;
/// Flow-control windows we grant the client for request bodies.
const STREAM_WINDOW: u32 = 256 * 1024;
const CONN_WINDOW: u32 = 1024 * 1024;
/// Response bytes quinn holds per connection beyond what the client acknowledged.
const SEND_WINDOW: u64 = 4 * 1024 * 1024;
/// Handshakes not yet accepted by a worker (quinn's `max_incoming`), and the bytes
/// they may buffer: a flood of Initials is bounded before any handshake state exists.
const MAX_INCOMING: usize = 4096;
const INCOMING_BUFFER: u64 = 64 * 1024;
const INCOMING_BUFFER_TOTAL: u64 = 16 * 1024 * 1024;
/// How long a Retry token stays valid.
const RETRY_TOKEN_LIFETIME: Duration = Duration::from_secs(15);

/// The keys every worker's endpoint shares, made once per process: the stateless-reset
/// key (a reset one worker sends for a connection of another is valid) and the key that
/// seals Retry and NEW_TOKEN tokens (a token one worker minted is accepted by all).
struct Keys {
    reset: Arc<ring::hmac::Key>,
    token: Arc<ring::hkdf::Prk>,
    /// Tags the CIDs the workers issue, so the process knows its own ([`cid`]).
    cid: Arc<ring::hmac::Key>,
}

fn keys() -> &'static Keys {
    static K: OnceLock<Keys> = OnceLock::new();
    K.get_or_init(|| {
        use ring::rand::SecureRandom;
        let rng = ring::rand::SystemRandom::new();
        let mut reset = [0u8; 64];
        let mut token = [0u8; 64];
        let mut cid = [0u8; 32];
        // The system's random source; a failure here leaves no secure way to serve.
        rng.fill(&mut reset)
            .expect("random bytes for the QUIC reset key");
        rng.fill(&mut token)
            .expect("random bytes for the QUIC token key");
        rng.fill(&mut cid)
            .expect("random bytes for the QUIC CID tag key");
        Keys {
            reset: Arc::new(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &reset)),
            token: Arc::new(ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &[]).extract(&token)),
            cid: Arc::new(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &cid)),
        }
    })
}

/// The endpoint config of worker `worker` of `workers`: our connection IDs (which name
/// the worker) and the shared reset key.
pub fn endpoint_config(layout: cid::Layout, worker: usize) -> quinn::EndpointConfig {
    let mut c = quinn::EndpointConfig::new(keys().reset.clone());
    let tag = keys().cid.clone();
    c.cid_generator(move || Box::new(cid::WorkerCids::new(layout, worker, tag.clone())));
    c
}

/// `[[listen]] quic_retry`, `early_data` and the QUIC server config of one listener,
/// built with its TLS config on every reload.
pub struct QuicProto {
    pub server: quinn::ServerConfig,
    /// The listener's certificates (which names the SNI-chosen one covers).
    pub sni: Arc<crate::tls::SniResolver>,
    pub retry: crate::config::QuicRetry,
    pub early_data: bool,
}

impl QuicProto {
    /// The QUIC side of a TLS listener: `tls` is its rustls config for QUIC
    /// ([`crate::tls::quic_server_config`]: TLS 1.3, ALPN `h3`, 0-RTT only with
    /// `early_data`) and `sni` its certificates; our transport limits, `idle` as the
    /// idle timeout.
    pub fn build(
        tls: Arc<rustls::ServerConfig>,
        sni: Arc<crate::tls::SniResolver>,
        retry: crate::config::QuicRetry,
        early_data: bool,
        idle: Duration,
    ) -> Result<QuicProto, String> {
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
            .map_err(|e| format!("QUIC: {e}"))?;
        let mut server = quinn::ServerConfig::new(Arc::new(crypto), keys().token.clone());
        let mut t = quinn::TransportConfig::default();
        t.max_concurrent_bidi_streams(MAX_STREAMS.into())
            .max_concurrent_uni_streams(MAX_UNI_STREAMS.into())
            .stream_receive_window(STREAM_WINDOW.into())
            .receive_window(CONN_WINDOW.into())
            .send_window(SEND_WINDOW)
            .max_idle_timeout(Some(
                quinn::IdleTimeout::try_from(
                    idle.clamp(Duration::from_secs(1), Duration::from_secs(600)),
                )
                .map_err(|e| format!("QUIC idle timeout: {e}"))?,
            ));
        server
            .transport_config(Arc::new(t))
            .retry_token_lifetime(RETRY_TOKEN_LIFETIME)
            .migration(true)
            .max_incoming(MAX_INCOMING)
            .incoming_buffer_size(INCOMING_BUFFER)
            .incoming_buffer_size_total(INCOMING_BUFFER_TOTAL);
        Ok(QuicProto {
            server,
            sni,
            retry,
            early_data,
        })
    }
}

/// The `Alt-Svc` value of a listener's TCP responses (`[[listen]] alt_svc`): None when
/// it sends none.
pub fn alt_svc(listen: &crate::config::Listen, port: u16) -> Option<bytes::Bytes> {
    match l_alt(listen) {
        Some("off") => None,
        Some(v) => Some(bytes::Bytes::copy_from_slice(v.as_bytes())),
        None if listen.quic => Some(format!("h3=\":{port}\"; ma=86400").into()),
        None => None,
    }
}

fn l_alt(listen: &crate::config::Listen) -> Option<&str> {
    listen.alt_svc.as_ref().map(|a| a.get_ref().as_str())
}
