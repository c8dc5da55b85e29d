//! A worker's QUIC endpoint on a `quic = true` listener: its own UDP socket
//! ([`crate::quic::socket::WorkerUdp`]: quinn-udp's batching plus the hand-off of other
//! workers' datagrams), CIDs that name it, and the accept loop, which decides per
//! new connection: refuse (`worker_connections`, `limit_conn`, stopping), ask for a
//! Retry (`quic_retry`), or accept and serve it ([`crate::http::h3`]).

use super::service::Worker;
use crate::config::QuicRetry;
use crate::http::session::Service;
use crate::http::ConnInfo;
use crate::quic::cid::Layout;
use crate::quic::socket::{Handoff, WorkerUdp};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// One worker's socket of a QUIC listener, as bound by the main thread.
pub struct QuicSocket {
    /// The `[[listen]]` index.
    pub listen: usize,
    pub sock: std::net::UdpSocket,
    /// The listener's hand-off queues (one per worker).
    pub handoff: Arc<Handoff>,
    pub layout: Layout,
    /// `quic_gso`.
    pub gso: bool,
}

/// Runs worker `w`'s endpoint on `s` until the server stops; then it takes no new
/// connection, and its open ones finish (each counted in `active` until it closes).
pub async fn run(w: Rc<Worker>, s: QuicSocket) {
    let runtime: Arc<dyn quinn::Runtime> = Arc::new(quinn::TokioRuntime);
    let addr = s.sock.local_addr().ok();
    let inner = match runtime.wrap_udp_socket(s.sock) {
        Ok(i) => i,
        Err(e) => {
            tracing::error!("worker {}: QUIC socket {addr:?}: {e}", w.id);
            return;
        }
    };
    let metrics = w.svc.metrics.clone();
    let udp = Arc::new(WorkerUdp::new(
        inner, w.id, s.layout, s.handoff, metrics, s.gso,
    ));
    let cfg = w.config();
    let Some(proto) = cfg.quic.get(s.listen).cloned().flatten() else {
        return;
    };
    let endpoint = match quinn::Endpoint::new_with_abstract_socket(
        crate::quic::endpoint_config(s.layout, w.id),
        Some(proto.server.clone()),
        udp,
        runtime,
    ) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("worker {}: QUIC endpoint {addr:?}: {e}", w.id);
            return;
        }
    };
    drop(cfg);
    let mut generation = proto_generation(&w);
    let mut proto = proto;
    let half_open = Rc::new(Cell::new(0usize));
    loop {
        let incoming = tokio::select! {
            biased;
            _ = w.idle.wait(std::time::Duration::from_secs(86_400), true) => break,
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => break,
            },
        };
        // A reload's certificates and settings apply to the next handshakes.
        let now = proto_generation(&w);
        if now != generation {
            generation = now;
            if let Some(p) = w.config().quic.get(s.listen).cloned().flatten() {
                endpoint.set_server_config(Some(p.server.clone()));
                proto = p;
            }
        }
        admit(&w, incoming, s.listen, &proto, &half_open);
    }
    // Stopping: new handshakes are refused; the connections open get GOAWAY from
    // their own tasks and close as their streams finish.
    endpoint.set_server_config(None);
}

fn proto_generation(w: &Worker) -> u64 {
    w.config().generation
}

/// Decides what becomes of a new connection (see the module doc).
fn admit(
    w: &Rc<Worker>,
    incoming: quinn::Incoming,
    listen: usize,
    proto: &crate::quic::QuicProto,
    half_open: &Rc<Cell<usize>>,
) {
    let stats = &w.svc.stats().quic;
    let validated = incoming.remote_address_validated();
    let retry = match proto.retry {
        QuicRetry::Always => true,
        QuicRetry::Auto => half_open.get() >= crate::config::QUIC_RETRY_THRESHOLD,
        QuicRetry::Off => false,
    };
    if retry && !validated && incoming.may_retry() {
        if incoming.retry().is_ok() {
            stats.retries.fetch_add(1, Relaxed);
        }
        return;
    }
    let client = incoming.remote_address();
    if w.draining() || w.svc.stats().active.load(Relaxed) as usize >= w.max_connections {
        stats.refused.fetch_add(1, Relaxed);
        incoming.refuse();
        return;
    }
    let held = {
        let cfg = w.config();
        w.accept_limits(&cfg, client, listen)
    };
    let Some(held) = held else {
        stats.refused.fetch_add(1, Relaxed);
        incoming.refuse();
        return;
    };
    let connecting = match incoming.accept() {
        Ok(c) => c,
        Err(e) => {
            stats.handshake_errors.fetch_add(1, Relaxed);
            tracing::debug!("client {client}: QUIC: {e}");
            return;
        }
    };
    let s = w.svc.stats();
    s.accepted.fetch_add(1, Relaxed);
    s.active.fetch_add(1, Relaxed);
    half_open.set(half_open.get() + 1);
    let accepted = crate::http::h3::Accepted {
        info: ConnInfo {
            listen: listen as u16,
            tls: true,
            sni_cert: None,
        },
        held,
        early_data: proto.early_data,
        sni: Some(proto.sni.clone()),
    };
    let (w, half_open) = (w.clone(), half_open.clone());
    tokio::task::spawn_local(Box::pin(async move {
        let mut counted = HalfOpen(Some(half_open));
        crate::http::h3::serve(w.clone(), connecting, accepted, || counted.done()).await;
        counted.done();
        w.connections_closed(1);
    }));
}

/// A connection's place in the worker's half-open count, given back once its handshake
/// is over (or it ends first).
struct HalfOpen(Option<Rc<Cell<usize>>>);

impl HalfOpen {
    fn done(&mut self) {
        if let Some(c) = self.0.take() {
            c.set(c.get().saturating_sub(1));
        }
    }
}
