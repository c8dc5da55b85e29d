//! The admin listener (`[admin]`, loopback only): `GET /status` (JSON, per-worker
//! counters and per-cache state), `GET /metrics` (Prometheus text), `POST /purge`
//! (cache purges by URL, prefix or tag). Every request is checked against
//! `admin.allow` (403 otherwise). `GET /` is the console, one HTML page over
//! `/status` and `/purge` (`console.rs`). It runs on its own thread so a busy worker never
//! delays a scrape, and it never touches the data path.
//!
//! How it fits: this file binds, reads each request (bounded), checks `admin.allow`
//! and routes: `/status` to `status.rs`, `/` to `console.rs`, `/metrics` to the
//! counter groups, each of which writes its own families through [`crate::prom`]
//! (`metrics_text`), and `/purge` to `edge_cache::purge`. [`AdminCtx`]
//! (`ctx.rs`) is what the server hands the listener at start.

mod console;
mod ctx;
mod status;

pub use ctx::AdminCtx;

use crate::prom::Prom;
use crate::state::Shared;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bounds on admin requests: small heads, small bodies, quick clients.
const ADMIN_HEAD_LIMIT: usize = 8 * 1024;
const ADMIN_BODY_LIMIT: u64 = 64 * 1024;
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds the admin listener. The server does it before its data listeners, so that
/// whoever sees the data port open can already ask `/status`.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    crate::net::bind_listener(
        crate::net::ListenSpec::new(addr, 128),
        crate::net::PortSharing::Exclusive,
        crate::net::Blocking::NonBlocking,
    )
}

/// Serves on `listener` (from [`bind`]) on a background thread.
pub fn start(listener: std::net::TcpListener, ctx: AdminCtx) -> std::io::Result<()> {
    let ctx = Arc::new(ctx);
    std::thread::Builder::new()
        .name("admin".into())
        .spawn(move || {
            let Some(rt) = crate::rt::thread_runtime("admin") else {
                return;
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
    let (status, ctype, payload) = route(&req, &body, ctx, &shared);
    let mut out = Vec::with_capacity(payload.len() + 256);
    edge_http::write_status_line(&mut out, status);
    edge_http::write_header(&mut out, "Date", &edge_http::http_date_now());
    edge_http::write_header(&mut out, "Server", b"edgecache");
    edge_http::write_header(&mut out, "Content-Type", ctype.as_bytes());
    edge_http::write_header_u64(&mut out, "Content-Length", payload.len() as u64);
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
    body: &[u8],
    ctx: &AdminCtx,
    shared: &Shared,
) -> (u16, &'static str, Vec<u8>) {
    let get = matches!(req.method, edge_http::Method::Get | edge_http::Method::Head);
    if req.path() == "/purge" {
        if req.method != edge_http::Method::Post {
            return (
                405,
                "text/plain",
                b"method not allowed: use POST\n".to_vec(),
            );
        }
        return purge(req, body, shared);
    }
    match (req.path(), get) {
        ("/status", true) => (
            200,
            "application/json",
            status::status_json(ctx, shared).into_bytes(),
        ),
        ("/metrics", true) => (
            200,
            "text/plain; version=0.0.4",
            metrics_text(ctx, shared).into_bytes(),
        ),
        ("/", true) => (200, "text/html; charset=utf-8", console::PAGE.to_vec()),
        ("/" | "/status" | "/metrics", false) => {
            (405, "text/plain", b"method not allowed\n".to_vec())
        }
        _ => (404, "text/plain", b"not found\n".to_vec()),
    }
}

/// `POST /purge` with `url=`, `prefix=` or `tag=` (and `soft=1`) in the form body or the
/// query, over every cache. Runs here, on the admin thread: unlinks never block a worker.
fn purge(
    req: &edge_http::RequestHead,
    body: &[u8],
    shared: &Shared,
) -> (u16, &'static str, Vec<u8>) {
    use crate::purge::{parse_request, purged_json};
    use edge_cache::purge_all;
    // A `url=` path without `host=` purges that path on every host (the admin
    // request's own Host names the admin listener, not a site).
    match parse_request(req.query(), body, None) {
        Ok((target, soft)) => {
            let target = normalize_target(target, &shared.sites);
            let n = purge_all(shared.caches.values(), &target, soft);
            tracing::info!("admin purge {target:?} (soft: {soft}): {n} objects");
            let status = if n > 0 { 200 } else { 404 };
            (status, "application/json", purged_json(n).into_bytes())
        }
        Err(msg) => (400, "text/plain", format!("{msg}\n").into_bytes()),
    }
}

/// A `url=` purge names the key its URL is cached under: the path percent-normalized
/// and the query filtered and sorted by the `cache_key_args` of the location the URL
/// reaches (the server by its host, the default server for a path without `host=`),
/// as for the requests that stored it. Keys of other forms (a custom `cache_key`'s)
/// are left as they are.
fn normalize_target(
    target: edge_cache::purge::PurgeTarget,
    sites: &crate::state::sites::Sites,
) -> edge_cache::purge::PurgeTarget {
    use edge_cache::purge::PurgeTarget;
    use edge_http::normalize::normalize_pq;
    let args_of = |host: Option<&str>, pq: &str| {
        let path = pq.split('?').next().unwrap_or(pq);
        sites
            .location_of(host, &edge_http::normalize::normalize_path(path))
            .and_then(|r| r.key_args.clone())
    };
    match target {
        PurgeTarget::Key(k) => {
            let Some(rest) = k.strip_prefix("http://") else {
                return PurgeTarget::Key(k);
            };
            let at = rest.find(['/', '?']).unwrap_or(rest.len());
            let (host, pq) = rest.split_at(at);
            if !pq.starts_with('/') {
                return PurgeTarget::Key(k);
            }
            let args = args_of(Some(host), pq);
            let pq = normalize_pq(pq, args.as_ref());
            PurgeTarget::Key(format!("http://{host}{pq}"))
        }
        PurgeTarget::Path(pq) => {
            let args = args_of(None, &pq);
            PurgeTarget::Path(normalize_pq(&pq, args.as_ref()).into_owned())
        }
        other => other,
    }
}

/// `GET /metrics`: every counter group writes its own families (next to where the
/// counters are defined), in turn.
fn metrics_text(ctx: &AdminCtx, shared: &Shared) -> String {
    let mut p = Prom::new();
    ctx.metrics.write_prom(&mut p);
    ctx.compress.write_prom(&mut p);
    crate::upstream::UpstreamGroup::write_prom(&shared.upstreams, &mut p);
    crate::state::caches::write_prom(&shared.caches, &mut p);
    shared.limit_zones.write_prom(&mut p);
    ctx.aio.write_prom(&ctx.metrics.aio, &mut p);
    p.finish()
}
