//! The admin listener (`[admin]`, loopback only): `GET /status` (JSON, per-worker
//! counters), `GET /metrics` (Prometheus text). Every request is checked against
//! `admin.allow` (403 otherwise). It runs on its own thread so a busy worker never
//! delays a scrape, and it never touches the data path.

use crate::metrics::{prom, prom_header, Metrics};
use crate::server::state::Shared;
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bounds on admin requests: small heads, small bodies, quick clients.
const ADMIN_HEAD_LIMIT: usize = 8 * 1024;
const ADMIN_BODY_LIMIT: u64 = 64 * 1024;
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

pub struct AdminCtx {
    pub metrics: Arc<Metrics>,
    pub shared: Arc<ArcSwap<Shared>>,
    pub accept: &'static str,
}

/// Binds (now, so errors stop startup) and serves on a background thread.
pub fn start(addr: SocketAddr, ctx: AdminCtx) -> std::io::Result<()> {
    let listener =
        crate::net::bind_listener(crate::net::ListenSpec { addr, backlog: 128 }, false, true)?;
    let ctx = Arc::new(ctx);
    std::thread::Builder::new()
        .name("admin".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!("admin: cannot build runtime: {e}");
                    return;
                }
            };
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!("admin: {e}");
                        return;
                    }
                };
                loop {
                    match listener.accept().await {
                        Ok((s, peer)) => {
                            let ctx = ctx.clone();
                            tokio::spawn(async move {
                                let _ =
                                    tokio::time::timeout(ADMIN_TIMEOUT, serve(s, peer, &ctx)).await;
                            });
                        }
                        Err(e) => {
                            tracing::error!("admin: accept() failed: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            });
        })?;
    Ok(())
}

async fn serve(
    mut s: tokio::net::TcpStream,
    peer: SocketAddr,
    ctx: &AdminCtx,
) -> std::io::Result<()> {
    let limits = edge_http::Limits {
        max_request_line: 4096,
        max_header_bytes: ADMIN_HEAD_LIMIT,
        max_headers: 64,
        max_body: Some(ADMIN_BODY_LIMIT),
    };
    let mut buf = Vec::with_capacity(1024);
    let (req, n) = loop {
        match edge_http::parse_request(&buf, &limits) {
            Ok(Some(x)) => break x,
            Ok(None) => {}
            Err(e) => return s.write_all(&edge_http::error_response(e.status())).await,
        }
        let mut tmp = [0u8; 2048];
        let k = s.read(&mut tmp).await?;
        if k == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..k]);
    };
    let shared = ctx.shared.load_full();
    if !shared.is_admin(peer.ip()) {
        return s.write_all(&edge_http::error_response(403)).await;
    }
    // Read a body if one was sent (POST /purge forms), bounded by the limit above.
    let mut body = buf[n..].to_vec();
    if let edge_http::BodyKind::Length(len) = req.body {
        while (body.len() as u64) < len {
            let mut tmp = [0u8; 4096];
            let k = s.read(&mut tmp).await?;
            if k == 0 {
                break;
            }
            body.extend_from_slice(&tmp[..k]);
        }
    }
    let (status, ctype, payload) = route(&req, ctx, &shared);
    let mut out = Vec::with_capacity(payload.len() + 256);
    edge_http::write_status_line(&mut out, status);
    edge_http::write_header(&mut out, "Date", &edge_http::http_date_now());
    edge_http::write_header(&mut out, "Server", b"edgecache");
    edge_http::write_header(&mut out, "Content-Type", ctype.as_bytes());
    edge_http::write_header(
        &mut out,
        "Content-Length",
        payload.len().to_string().as_bytes(),
    );
    edge_http::write_header(&mut out, "Connection", b"close");
    out.extend_from_slice(b"\r\n");
    if req.method != edge_http::Method::Head {
        out.extend_from_slice(&payload);
    }
    s.write_all(&out).await?;
    s.shutdown().await
}

fn route(
    req: &edge_http::RequestHead,
    ctx: &AdminCtx,
    shared: &Shared,
) -> (u16, &'static str, Vec<u8>) {
    let get = matches!(req.method, edge_http::Method::Get | edge_http::Method::Head);
    match (req.path(), get) {
        ("/status", true) => (
            200,
            "application/json",
            status_json(ctx, shared).into_bytes(),
        ),
        ("/metrics", true) => (
            200,
            "text/plain; version=0.0.4",
            metrics_text(ctx).into_bytes(),
        ),
        ("/status" | "/metrics", false) => (405, "text/plain", b"method not allowed\n".to_vec()),
        _ => (404, "text/plain", b"not found\n".to_vec()),
    }
}

fn status_json(ctx: &AdminCtx, shared: &Shared) -> String {
    let m = &ctx.metrics;
    let workers: Vec<serde_json::Value> = m
        .workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            serde_json::json!({
                "id": i,
                "accepted": w.accepted.load(Relaxed),
                "active": w.active.load(Relaxed),
                "requests": w.requests.load(Relaxed),
            })
        })
        .collect();
    let v = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_s": m.started.elapsed().as_secs(),
        "config_generation": shared.generation,
        "accept": ctx.accept,
        "workers": workers,
        "totals": {
            "accepted": m.sum(|w| &w.accepted),
            "active": m.active(),
            "requests": m.sum(|w| &w.requests),
            "bytes_out": m.sum(|w| &w.bytes_out),
            "upstream_requests": m.sum(|w| &w.upstream_requests),
        },
    });
    let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
    s.push('\n');
    s
}

fn metrics_text(ctx: &AdminCtx) -> String {
    let m = &ctx.metrics;
    let mut o = String::with_capacity(4096);
    prom_header(
        &mut o,
        "edgecache_requests_total",
        "counter",
        "Requests answered, by status class.",
    );
    for (i, class) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().enumerate() {
        prom(
            &mut o,
            "edgecache_requests_total",
            &format!("class=\"{class}\""),
            m.sum(|w| &w.status[i]),
        );
    }
    prom_header(
        &mut o,
        "edgecache_worker_requests_total",
        "counter",
        "Requests read, by worker.",
    );
    for (i, w) in m.workers.iter().enumerate() {
        prom(
            &mut o,
            "edgecache_worker_requests_total",
            &format!("worker=\"{i}\""),
            w.requests.load(Relaxed),
        );
    }
    prom_header(
        &mut o,
        "edgecache_connections_accepted_total",
        "counter",
        "Client connections accepted.",
    );
    prom(
        &mut o,
        "edgecache_connections_accepted_total",
        "",
        m.sum(|w| &w.accepted),
    );
    prom_header(
        &mut o,
        "edgecache_connections_active",
        "gauge",
        "Client connections open now.",
    );
    prom(&mut o, "edgecache_connections_active", "", m.active());
    prom_header(
        &mut o,
        "edgecache_bytes_sent_total",
        "counter",
        "Response body bytes sent to clients.",
    );
    prom(
        &mut o,
        "edgecache_bytes_sent_total",
        "",
        m.sum(|w| &w.bytes_out),
    );
    prom_header(
        &mut o,
        "edgecache_bytes_received_total",
        "counter",
        "Bytes read from clients.",
    );
    prom(
        &mut o,
        "edgecache_bytes_received_total",
        "",
        m.sum(|w| &w.bytes_in),
    );
    prom_header(
        &mut o,
        "edgecache_bad_requests_total",
        "counter",
        "Requests rejected by the HTTP parser.",
    );
    prom(
        &mut o,
        "edgecache_bad_requests_total",
        "",
        m.sum(|w| &w.bad_requests),
    );
    prom_header(
        &mut o,
        "edgecache_upstream_requests_total",
        "counter",
        "Requests sent to upstreams.",
    );
    prom(
        &mut o,
        "edgecache_upstream_requests_total",
        "",
        m.sum(|w| &w.upstream_requests),
    );
    prom_header(
        &mut o,
        "edgecache_upstream_reused_total",
        "counter",
        "Upstream requests on a reused keep-alive connection.",
    );
    prom(
        &mut o,
        "edgecache_upstream_reused_total",
        "",
        m.sum(|w| &w.upstream_reused),
    );
    prom_header(
        &mut o,
        "edgecache_upstream_errors_total",
        "counter",
        "Upstream failures, by kind.",
    );
    prom(
        &mut o,
        "edgecache_upstream_errors_total",
        "kind=\"connect\"",
        m.sum(|w| &w.upstream_connect_errors),
    );
    prom(
        &mut o,
        "edgecache_upstream_errors_total",
        "kind=\"timeout\"",
        m.sum(|w| &w.upstream_timeouts),
    );
    prom(
        &mut o,
        "edgecache_upstream_errors_total",
        "kind=\"bad_response\"",
        m.sum(|w| &w.upstream_bad_responses),
    );
    o
}
