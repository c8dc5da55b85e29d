//! QUIC and HTTP/3 counters (`[[listen]] quic = true`, docs/http3.md).

use crate::prom::Prom;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// QUIC and HTTP/3 counters of one worker (summed by the admin listener).
#[derive(Default)]
pub struct QuicStats {
    /// Handshakes completed.
    pub handshakes: AtomicU64,
    /// Handshakes that failed or timed out.
    pub handshake_errors: AtomicU64,
    /// Retry packets sent (address validation, `quic_retry`).
    pub retries: AtomicU64,
    /// New connections refused (`limit_conn`, `worker_connections`, draining).
    pub refused: AtomicU64,
    /// Requests that came as early data (0-RTT) and were served at once (GET, HEAD).
    pub early_data_served: AtomicU64,
    /// Requests that came as early data and were held until the handshake completed
    /// (not GET or HEAD: they could be replayed).
    pub early_data_held: AtomicU64,
    /// HTTP/3 request streams.
    pub streams: AtomicU64,
    /// Connections that ended on an error (a protocol error by the client, a timeout).
    pub connection_errors: AtomicU64,
    /// Datagrams steered to the worker that owns their connection: forwarded, or
    /// dropped because its queue was full.
    pub handoff_forwarded: AtomicU64,
    pub handoff_dropped: AtomicU64,
}

/// Whether the kernel steers datagrams to their worker (`quic_bpf`, a program
/// attached), process-wide: 1 when every `quic` listener has it.
static STEERING_BPF: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(2);

impl QuicStats {
    /// Notes a `quic` listener's steering: in the kernel (`bpf`) or in user space.
    pub fn set_steering(bpf: bool) {
        let v = u8::from(bpf);
        // 2: no listener yet; a listener without bpf makes it 0 for good.
        let _ = STEERING_BPF.fetch_update(Relaxed, Relaxed, |old| {
            Some(if old == 2 { v } else { old & v })
        });
    }

    /// The QUIC families of `/metrics`, summed over `all` (one block per worker).
    pub fn write_prom<'a>(all: impl Iterator<Item = &'a QuicStats> + Clone, p: &mut Prom) {
        let sum = |f: &dyn Fn(&QuicStats) -> &AtomicU64| -> u64 {
            all.clone().map(|t| f(t).load(Relaxed)).sum()
        };
        p.counter(
            "edgecache_quic_handshakes_total",
            "QUIC handshakes: completed (ok) or failed and timed out (error).",
        )
        .labelled(&[("result", &"ok")], sum(&|t| &t.handshakes))
        .labelled(&[("result", &"error")], sum(&|t| &t.handshake_errors));
        p.counter(
            "edgecache_quic_retries_total",
            "QUIC Retry packets sent to validate a client's address (quic_retry).",
        )
        .value(sum(&|t| &t.retries));
        p.counter(
            "edgecache_quic_refused_total",
            "New QUIC connections refused (limit_conn, worker_connections, stopping).",
        )
        .value(sum(&|t| &t.refused));
        p.counter(
            "edgecache_quic_early_data_total",
            "Requests that came as 0-RTT early data: served at once (GET, HEAD, sent upstream with Early-Data: 1) or held until the handshake completed (other methods).",
        )
        .labelled(&[("result", &"served")], sum(&|t| &t.early_data_served))
        .labelled(&[("result", &"held")], sum(&|t| &t.early_data_held));
        if let v @ (0 | 1) = STEERING_BPF.load(Relaxed) {
            p.gauge(
                "edgecache_quic_steering_bpf",
                "1 when the kernel delivers each QUIC datagram to the worker its connection ID names (quic_bpf), 0 when datagrams that reach another worker are handed over in user space.",
            )
            .value(u64::from(v));
        }
        p.counter("edgecache_h3_streams_total", "HTTP/3 request streams.")
            .value(sum(&|t| &t.streams));
        p.counter(
            "edgecache_quic_connection_errors_total",
            "QUIC connections that ended on an error (protocol error, idle timeout, reset).",
        )
        .value(sum(&|t| &t.connection_errors));
        p.counter(
            "edgecache_quic_handoff_packets_total",
            "Datagrams that reached a worker other than their connection's and were handed to it (forwarded) or dropped (its queue was full).",
        )
        .labelled(&[("result", &"forwarded")], sum(&|t| &t.handoff_forwarded))
        .labelled(&[("result", &"dropped")], sum(&|t| &t.handoff_dropped));
    }
}
