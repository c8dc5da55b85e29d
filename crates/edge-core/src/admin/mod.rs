//! The admin listener (`[admin]`, loopback only): `GET /status` (JSON, per-worker
//! counters and per-cache state), `GET /metrics` (Prometheus text), `POST /purge`
//! (cache purges by URL, prefix or tag). Every request is checked against
//! `admin.allow` (403 otherwise). `GET /` is the console, one HTML page over
//! `/status` and `/purge` (`console.rs`). It runs on its own thread so a busy worker never
//! delays a scrape, and it never touches the data path.

mod console;

use crate::metrics::{prom, prom_header, Metrics};
use crate::state::Shared;
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
    pub shared: Arc<crate::state::Current>,
    pub accept: &'static str,
    /// `multi_accept` and `reuseport_steering`, for `/status`.
    pub multi_accept: bool,
    pub steering: &'static str,
    /// The CPU each worker is pinned to (None: not pinned).
    pub cpus: Vec<Option<usize>>,
    /// For the I/O pool's queue depth.
    pub aio: crate::aio::AioSetup,
    /// For the compression pool's queue depth.
    pub compress: crate::compress::PoolSetup,
    /// The effective `worker_connections` (configured, or sized to the descriptor limit).
    pub worker_connections: usize,
}

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
            status_json(ctx, shared).into_bytes(),
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
    use edge_cache::purge::{parse_request, purge_all, purged_json};
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

/// Per-upstream server state for `/status`: whether each server is usable, and the
/// active health check's verdict.
fn upstreams_json(shared: &Shared) -> Vec<serde_json::Value> {
    let mut names: Vec<&String> = shared.upstreams.keys().collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let g = &shared.upstreams[n];
            serde_json::json!({
                "name": n,
                "balance": match g.balance {
                    crate::config::Balance::RoundRobin => "round_robin",
                    crate::config::Balance::ConsistentHash => "consistent_hash",
                },
                "servers": (0..g.servers.len()).map(|i| serde_json::json!({
                    "server": g.servers[i].name,
                    "up": g.usable(i),
                    "healthy": g.healthy(i),
                })).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// The RAM tier as it runs: `size` in bytes over all workers (0: off), and whether it
/// was sized by `size = "auto"`.
fn memory_json(shared: &Shared) -> serde_json::Value {
    let m = shared.local.memory;
    serde_json::json!({
        "size": m.size,
        "auto": m.auto,
        "enabled": m.size > 0,
        "max_object_size": m.max_object_size,
        "policy": m.policy.as_str(),
    })
}

/// Per-cache counters for `/status`, sorted by name.
fn caches_json(shared: &Shared) -> Vec<serde_json::Value> {
    let mut caches: Vec<_> = shared
        .caches
        .values()
        .map(|c| (c.stats(), c.verify()))
        .collect();
    caches.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    caches
        .into_iter()
        .map(|(s, verify)| {
            serde_json::json!({
                "name": s.name,
                "entries": s.entries,
                "disk_bytes": s.disk_bytes,
                "max_size": s.max_size,
                "mem_bytes": s.mem_bytes,
                "keys_zone": s.keys_zone,
                "evictions": s.evictions,
                "expired": s.expired,
                "purged": s.purged,
                "write_errors": s.write_errors,
                "corrupt": s.corrupt,
                "verify": verify.as_str(),
                "last_write_error": s.last_write_error,
                "inflight": s.inflight,
                "loader": {
                    "done": s.loader.done,
                    "scanned": s.loader.scanned,
                    "loaded": s.loader.loaded,
                    "removed": s.loader.removed,
                    "snapshot": s.loader.snapshot,
                    "unseen": s.loader.unseen,
                    "disk_fallback_hits": s.disk_fallback_hits,
                },
            })
        })
        .collect()
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
                "cpu": ctx.cpus.get(i).copied().flatten(),
                "accepted": w.accepted.load(Relaxed),
                "active": w.active.load(Relaxed),
                "parked": w.parked.load(Relaxed),
                "refused": w.refused.load(Relaxed),
                "reclaimed": w.reclaimed.load(Relaxed),
                "requests": w.requests.load(Relaxed),
                "slice_mismatches": w.slice_mismatches.load(Relaxed),
                "memory_cache": {
                    "hits": w.local.mem_hits.load(Relaxed),
                    "misses": w.local.mem_misses.load(Relaxed),
                    "bytes": w.local.mem_bytes.load(Relaxed),
                    "objects": w.local.mem_objects.load(Relaxed),
                },
                "open_files": w.local.files_open.load(Relaxed),
                "aio": m.aio.get(i).and_then(|a| a.get()).map(|(mode, a)| {
                    let s = a.snapshot();
                    serde_json::json!({
                        "mode": mode,
                        "reads": s.reads,
                        "read_bytes": s.read_bytes,
                        "in_flight": s.in_flight,
                        "inline": s.inline_hits,
                        "handoffs": s.handoffs,
                        "overflows": s.overflows,
                    })
                }),
            })
        })
        .collect();
    let v = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_s": m.started.elapsed().as_secs(),
        "config_generation": shared.generation,
        "accept": ctx.accept,
        "multi_accept": ctx.multi_accept,
        "reuseport_steering": ctx.steering,
        "worker_connections": ctx.worker_connections,
        "workers": workers,
        "totals": {
            "accepted": m.sum(|w| &w.accepted),
            "active": m.active(),
            "refused": m.sum(|w| &w.refused),
            "reclaimed": m.sum(|w| &w.reclaimed),
            "proxy_protocol_errors": m.sum(|w| &w.proxy_protocol_errors),
            "requests": m.sum(|w| &w.requests),
            "bytes_out": m.sum(|w| &w.bytes_out),
            "upstream_requests": m.sum(|w| &w.upstream_requests),
            "slice_mismatches": m.sum(|w| &w.slice_mismatches),
        },
        "memory_cache": memory_json(shared),
        "caches": caches_json(shared),
        "upstreams": upstreams_json(shared),
        "limits": limits_json(shared),
        "cache_totals": console::cache_totals_json(m),
        "top_objects": console::top_objects_json(m),
    });
    let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
    s.push('\n');
    s
}

/// The RAM tier and open-file cache families of `/metrics` (sums over workers).
fn local_metrics(o: &mut String, m: &Metrics) {
    use crate::metrics::LocalStats;
    type Get = fn(&LocalStats) -> &std::sync::atomic::AtomicU64;
    let families: [(&str, &str, &str, Get); 13] = [
        ("edgecache_memory_cache_hits_total", "counter", "Fresh hits answered from a worker's RAM tier.", |l| &l.mem_hits),
        ("edgecache_memory_cache_hit_bytes_total", "counter", "Body bytes of the objects answered from RAM.", |l| &l.mem_hit_bytes),
        ("edgecache_memory_cache_misses_total", "counter", "Fresh lookups the RAM tier could not answer.", |l| &l.mem_misses),
        ("edgecache_memory_cache_admissions_total", "counter", "Objects taken into the RAM tier.", |l| &l.mem_admissions),
        ("edgecache_memory_cache_rejections_total", "counter", "Objects refused by the RAM tier (too large, or less popular than what they would evict).", |l| &l.mem_rejections),
        ("edgecache_memory_cache_evictions_total", "counter", "Objects evicted from the RAM tier by its policy.", |l| &l.mem_evictions),
        ("edgecache_memory_cache_invalidations_total", "counter", "RAM entries dropped because the index names another version (purge, refresh, replacement).", |l| &l.mem_invalidations),
        ("edgecache_memory_cache_bytes", "gauge", "Bytes held by the RAM tier (bodies plus per-entry overhead).", |l| &l.mem_bytes),
        ("edgecache_memory_cache_objects", "gauge", "Objects held by the RAM tier.", |l| &l.mem_objects),
        ("edgecache_open_file_cache_hits_total", "counter", "Disk hits that found their file already open.", |l| &l.files_hits),
        ("edgecache_open_file_cache_misses_total", "counter", "Disk hits that had to open their file.", |l| &l.files_misses),
        ("edgecache_open_file_cache_closed_total", "counter", "Cached descriptors closed (LRU, inactive, stale inode).", |l| &l.files_closed),
        ("edgecache_open_file_cache_open", "gauge", "Descriptors held open by the open-file cache.", |l| &l.files_open),
    ];
    for (name, kind, help, get) in families {
        prom_header(o, name, kind, help);
        prom(o, name, "", m.sum(|w| get(&w.local)));
    }
}

/// The cache families of `/metrics`.
fn cache_metrics(o: &mut String, m: &Metrics, shared: &Shared) {
    use crate::metrics::CACHE_STATUSES;
    prom_header(
        o,
        "edgecache_cache_requests_total",
        "counter",
        "Responses of cached locations, by X-Cache-Status.",
    );
    for (i, st) in CACHE_STATUSES.iter().enumerate() {
        prom(
            o,
            "edgecache_cache_requests_total",
            &format!("status=\"{st}\""),
            m.sum(|w| &w.cache_status[i]),
        );
    }
    prom_header(
        o,
        "edgecache_cache_bytes_total",
        "counter",
        "Body bytes of cached locations, by source (byte hit ratio = cache / (cache + origin)).",
    );
    prom(
        o,
        "edgecache_cache_bytes_total",
        "source=\"cache\"",
        m.sum(|w| &w.cache_bytes_hit),
    );
    prom(
        o,
        "edgecache_cache_bytes_total",
        "source=\"origin\"",
        m.sum(|w| &w.cache_bytes_origin),
    );
    prom_header(
        o,
        "edgecache_slice_mismatches_total",
        "counter",
        "Sliced objects whose slices disagreed (ETag, Last-Modified or length): every slice purged, never served mixed.",
    );
    prom(
        o,
        "edgecache_slice_mismatches_total",
        "",
        m.sum(|w| &w.slice_mismatches),
    );
    prom_header(
        o,
        "edgecache_cache_partial_total",
        "counter",
        "Stored partial objects completed from the origin, by result.",
    );
    prom(
        o,
        "edgecache_cache_partial_total",
        "result=\"combined\"",
        m.sum(|w| &w.partial_combined),
    );
    prom(
        o,
        "edgecache_cache_partial_total",
        "result=\"not_combined\"",
        m.sum(|w| &w.partial_not_combined),
    );
    let mut caches: Vec<_> = shared.caches.values().collect();
    caches.sort_by(|a, b| a.name().cmp(b.name()));
    let stats: Vec<_> = caches.iter().map(|c| c.stats()).collect();
    type Family = (
        &'static str,
        &'static str,
        &'static str,
        fn(&edge_cache::CacheStats) -> u64,
    );
    let families: [Family; 9] = [
        (
            "edgecache_cache_entries",
            "gauge",
            "Objects in the index.",
            |s| s.entries,
        ),
        (
            "edgecache_cache_disk_bytes",
            "gauge",
            "Disk bytes used by indexed objects.",
            |s| s.disk_bytes,
        ),
        (
            "edgecache_cache_evictions_total",
            "counter",
            "Objects evicted for max_size, min_free or keys_zone.",
            |s| s.evictions,
        ),
        (
            "edgecache_cache_loader_done",
            "gauge",
            "1 once the start-up loader has finished.",
            |s| u64::from(s.loader.done),
        ),
        (
            "edgecache_cache_loader_loaded",
            "gauge",
            "Objects indexed by the start-up loader.",
            |s| s.loader.loaded,
        ),
        (
            "edgecache_cache_loader_snapshot",
            "gauge",
            "Objects restored from the index snapshot of the last clean shutdown.",
            |s| s.loader.snapshot,
        ),
        (
            "edgecache_cache_disk_fallback_hits_total",
            "counter",
            "Hits found on disk by hash before the start-up loader had indexed them.",
            |s| s.disk_fallback_hits,
        ),
        (
            "edgecache_cache_write_errors_total",
            "counter",
            "Failed object writes (ENOSPC, EIO...); those responses were served uncached.",
            |s| s.write_errors,
        ),
        (
            "edgecache_cache_corrupt_total",
            "counter",
            "Objects dropped as corrupt (body checksum mismatch with cache_verify, or a file shorter than its header).",
            |s| s.corrupt,
        ),
    ];
    for (name, kind, help, get) in families {
        prom_header(o, name, kind, help);
        for s in &stats {
            prom(o, name, &format!("cache=\"{}\"", s.name), get(s));
        }
    }
    prom_header(
        o,
        "edgecache_cache_collapsed_total",
        "counter",
        "Requests that followed another request's origin fetch instead of making their own.",
    );
    let collapsed: u64 = caches.iter().map(|c| c.inflight().collapsed()).sum();
    prom(o, "edgecache_cache_collapsed_total", "", collapsed);
}

/// Requests by HTTP version, TLS handshakes and HTTP/2 counters.
fn protocol_metrics(o: &mut String, m: &crate::metrics::Metrics) {
    use crate::metrics::{H2_ERRORS, HTTP_VERSIONS};
    prom_header(
        o,
        "edgecache_http_requests_total",
        "counter",
        "Client requests by HTTP version.",
    );
    for (i, v) in HTTP_VERSIONS.iter().enumerate() {
        let n = m.sum(|w| &w.http_versions[i]);
        prom(
            o,
            "edgecache_http_requests_total",
            &format!("version=\"{v}\""),
            n,
        );
    }
    prom_header(
        o,
        "edgecache_tls_handshakes_total",
        "counter",
        "TLS handshakes completed: full, or resumed (session ticket or cache).",
    );
    let full = m.sum(|w| &w.tls.handshakes_full);
    let resumed = m.sum(|w| &w.tls.handshakes_resumed);
    prom(o, "edgecache_tls_handshakes_total", "kind=\"full\"", full);
    prom(
        o,
        "edgecache_tls_handshakes_total",
        "kind=\"resumed\"",
        resumed,
    );
    prom_header(
        o,
        "edgecache_tls_handshake_errors_total",
        "counter",
        "TLS handshakes that failed, by kind.",
    );
    for (i, k) in crate::tls::HANDSHAKE_ERRORS.iter().enumerate() {
        let n = m.sum(|w| &w.tls.handshake_errors[i]);
        prom(
            o,
            "edgecache_tls_handshake_errors_total",
            &format!("kind=\"{k}\""),
            n,
        );
    }
    prom_header(
        o,
        "edgecache_tls_ktls_total",
        "counter",
        "Connections of tls.ktls listeners after the handshake: the kernel took the session (kernel), it stayed in user space (user: no kTLS in this kernel, or a cipher it lacks), or the kernel refused the keys and the connection was closed (failed).",
    );
    for (i, k) in crate::tls::KTLS_RESULTS.iter().enumerate() {
        let n = m.sum(|w| &w.tls.ktls[i]);
        prom(o, "edgecache_tls_ktls_total", &format!("result=\"{k}\""), n);
    }
    for (name, help, f) in [
        (
            "edgecache_h2_connections_total",
            "HTTP/2 connections.",
            (|w| &w.h2.connections) as fn(&crate::metrics::WorkerStats) -> &std::sync::atomic::AtomicU64,
        ),
        ("edgecache_h2_streams_total", "HTTP/2 streams (requests).", |w| &w.h2.streams),
        (
            "edgecache_h2_client_resets_total",
            "HTTP/2 streams the client reset before their response was complete.",
            |w| &w.h2.client_resets,
        ),
        (
            "edgecache_h2_rapid_reset_goaways_total",
            "HTTP/2 connections closed for resetting streams faster than they are answered (CVE-2023-44487).",
            |w| &w.h2.rapid_reset_goaways,
        ),
    ] {
        prom_header(o, name, "counter", help);
        prom(o, name, "", m.sum(f));
    }
    prom_header(
        o,
        "edgecache_h2_connection_errors_total",
        "counter",
        "HTTP/2 connections ended by an error, by HTTP/2 error code.",
    );
    for (i, r) in H2_ERRORS.iter().enumerate() {
        let n = m.sum(|w| &w.h2.errors[i]);
        prom(
            o,
            "edgecache_h2_connection_errors_total",
            &format!("reason=\"{r}\""),
            n,
        );
    }
}

fn metrics_text(ctx: &AdminCtx, shared: &Shared) -> String {
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
        "edgecache_upstream_server_up",
        "gauge",
        "1 when the server gets requests (healthy and not taken out by failures).",
    );
    let mut names: Vec<&String> = shared.upstreams.keys().collect();
    names.sort();
    for n in names {
        let g = &shared.upstreams[n];
        for i in 0..g.servers.len() {
            prom(
                &mut o,
                "edgecache_upstream_server_up",
                &format!("upstream=\"{n}\",server=\"{}\"", g.servers[i].name),
                u64::from(g.usable(i)),
            );
        }
    }
    prom_header(
        &mut o,
        "edgecache_loops_total",
        "counter",
        "Requests refused with 508: they had already passed through this node (Via).",
    );
    prom(&mut o, "edgecache_loops_total", "", m.sum(|w| &w.loops));
    prom_header(
        &mut o,
        "edgecache_access_denied_total",
        "counter",
        "Requests refused with 403 by allow/deny rules.",
    );
    prom(
        &mut o,
        "edgecache_access_denied_total",
        "",
        m.sum(|w| &w.access_denied),
    );
    prom_header(
        &mut o,
        "edgecache_connections_refused_total",
        "counter",
        "New connections closed at once: worker_connections open and none idle.",
    );
    prom(
        &mut o,
        "edgecache_connections_refused_total",
        "",
        m.sum(|w| &w.refused),
    );
    prom_header(
        &mut o,
        "edgecache_proxy_protocol_errors_total",
        "counter",
        "Connections of proxy_protocol listeners closed without a valid PROXY header.",
    );
    prom(
        &mut o,
        "edgecache_proxy_protocol_errors_total",
        "",
        m.sum(|w| &w.proxy_protocol_errors),
    );
    prom_header(
        &mut o,
        "edgecache_connections_reclaimed_total",
        "counter",
        "Idle keep-alive connections closed to make room at worker_connections.",
    );
    prom(
        &mut o,
        "edgecache_connections_reclaimed_total",
        "",
        m.sum(|w| &w.reclaimed),
    );
    prom_header(
        &mut o,
        "edgecache_worker_connections_accepted_total",
        "counter",
        "Client connections accepted, by worker (how the accept strategy spreads them).",
    );
    for (i, w) in m.workers.iter().enumerate() {
        prom(
            &mut o,
            "edgecache_worker_connections_accepted_total",
            &format!("worker=\"{i}\""),
            w.accepted.load(Relaxed),
        );
    }
    prom_header(
        &mut o,
        "edgecache_connections_active",
        "gauge",
        "Client connections open now.",
    );
    prom(&mut o, "edgecache_connections_active", "", m.active());
    protocol_metrics(&mut o, m);
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
    cache_metrics(&mut o, m, shared);
    limit_metrics(&mut o, shared);
    local_metrics(&mut o, m);
    aio_metrics(&mut o, m, ctx.aio.queue_depth());
    compress_metrics(&mut o, m, &ctx.compress);
    o
}

/// The `limit_req` and `limit_conn` families of `/metrics`, per zone (summed over
/// workers). Zone names hold no quote or backslash (`-t` checks), so they go into
/// labels as they are.
fn limit_metrics(o: &mut String, shared: &Shared) {
    use crate::limit::zone::conn_counter;
    use crate::limit::ReqResult;
    let zones = &shared.limit_zones;
    if !zones.req.is_empty() {
        prom_header(
            o,
            "edgecache_limit_req_total",
            "counter",
            "Requests to locations with limit_req, by zone and result ($limit_req_status).",
        );
        for (z, _) in &zones.req {
            for r in ReqResult::ALL {
                prom(
                    o,
                    "edgecache_limit_req_total",
                    &format!("zone=\"{}\",result=\"{}\"", z.name, r.label()),
                    z.total(r),
                );
            }
        }
        prom_header(
            o,
            "edgecache_limit_req_keys",
            "gauge",
            "Keys a limit_req zone holds (at most its slots).",
        );
        for (z, _) in &zones.req {
            let zone = format!("zone=\"{}\"", z.name);
            prom(
                o,
                "edgecache_limit_req_keys",
                &zone,
                z.keys().min(z.slots() as u64),
            );
        }
        prom_header(
            o,
            "edgecache_limit_req_evictions_total",
            "counter",
            "Keys a limit_req zone dropped for new ones (the least recently seen), being full.",
        );
        for (z, _) in &zones.req {
            let zone = format!("zone=\"{}\"", z.name);
            prom(
                o,
                "edgecache_limit_req_evictions_total",
                &zone,
                z.evictions(),
            );
        }
    }
    if !zones.conn.is_empty() {
        prom_header(
            o,
            "edgecache_limit_conn_total",
            "counter",
            "Connections counted by limit_conn, by zone and result (rejected: over max; full: the zone's table held no room for a new key).",
        );
        for (z, _) in &zones.conn {
            for (label, which) in [
                ("passed", conn_counter::PASSED),
                ("rejected", conn_counter::REJECTED),
                ("full", conn_counter::FULL),
            ] {
                prom(
                    o,
                    "edgecache_limit_conn_total",
                    &format!("zone=\"{}\",result=\"{label}\"", z.name),
                    z.total(which),
                );
            }
        }
        prom_header(
            o,
            "edgecache_limit_conn_active",
            "gauge",
            "Connections a limit_conn zone counts now.",
        );
        for (z, _) in &zones.conn {
            let zone = format!("zone=\"{}\"", z.name);
            prom(
                o,
                "edgecache_limit_conn_active",
                &zone,
                z.total(conn_counter::ACTIVE),
            );
        }
    }
}

/// The `limit_req` and `limit_conn` zones in `/status`.
fn limits_json(shared: &Shared) -> serde_json::Value {
    use crate::limit::zone::conn_counter;
    use crate::limit::ReqResult;
    let z = &shared.limit_zones;
    serde_json::json!({
        "req": z.req.iter().map(|(z, _)| serde_json::json!({
            "name": z.name,
            "rate": z.rate.to_string(),
            "size": z.size,
            "slots": z.slots(),
            "keys": z.keys().min(z.slots() as u64),
            "evictions": z.evictions(),
            "passed": z.total(ReqResult::Passed),
            "delayed": z.total(ReqResult::Delayed),
            "rejected": z.total(ReqResult::Rejected),
            "delayed_dry_run": z.total(ReqResult::DelayedDryRun),
            "rejected_dry_run": z.total(ReqResult::RejectedDryRun),
        })).collect::<Vec<_>>(),
        "conn": z.conn.iter().map(|(z, _)| serde_json::json!({
            "name": z.name,
            "size": z.size,
            "slots": z.slots(),
            "active": z.total(conn_counter::ACTIVE),
            "passed": z.total(conn_counter::PASSED),
            "rejected": z.total(conn_counter::REJECTED),
            "full": z.total(conn_counter::FULL),
        })).collect::<Vec<_>>(),
    })
}

/// The compression families of `/metrics` (sums over workers; the pool's queue).
fn compress_metrics(o: &mut String, m: &Metrics, pool: &crate::compress::PoolSetup) {
    use edge_compress::Coding;
    type ByCoding = fn(&crate::metrics::WorkerStats) -> &[std::sync::atomic::AtomicU64; 3];
    let by_coding: [(&str, &str, ByCoding); 2] = [
        (
            "edgecache_compress_responses_total",
            "Responses compressed (on the fly, or while storing a compressed copy), by coding.",
            |w| &w.compress_responses,
        ),
        (
            "edgecache_decompress_responses_total",
            "Responses decoded for clients that do not accept the origin's coding, by coding.",
            |w| &w.decompress_responses,
        ),
    ];
    for (name, help, get) in by_coding {
        prom_header(o, name, "counter", help);
        for c in Coding::ALL {
            prom(
                o,
                name,
                &format!("coding=\"{}\"", c.token()),
                m.sum(|w| &get(w)[c.index()]),
            );
        }
    }
    type Get = fn(&crate::metrics::WorkerStats) -> &(dyn crate::metrics::Read + 'static);
    let families: [(&str, &str, Get); 6] = [
        (
            "edgecache_compress_bytes_in_total",
            "Bytes given to compressors.",
            |w| &w.compress_bytes_in,
        ),
        (
            "edgecache_compress_bytes_out_total",
            "Bytes compressors produced.",
            |w| &w.compress_bytes_out,
        ),
        (
            "edgecache_compress_overloads_total",
            "Responses sent uncompressed because the compression pool's queue was full.",
            |w| &w.compress_overloads,
        ),
        (
            "edgecache_compress_variant_hits_total",
            "Hits answered with a stored compressed copy (no compression work).",
            |w| &w.compress_variant_hits,
        ),
        (
            "edgecache_compress_variants_stored_total",
            "Compressed copies stored in the cache.",
            |w| &w.compress_variants_stored,
        ),
        (
            "edgecache_compress_cpu_nanoseconds_total",
            "Thread CPU time spent compressing and decoding.",
            |w| &w.compress_cpu_ns,
        ),
    ];
    for (name, help, get) in families {
        prom_header(o, name, "counter", help);
        prom(o, name, "", m.sum(get));
    }
    prom_header(
        o,
        "edgecache_compress_queue_depth",
        "gauge",
        "Compression jobs waiting for a pool thread (all workers).",
    );
    prom(
        o,
        "edgecache_compress_queue_depth",
        "",
        pool.queue_depth() as u64,
    );
}

/// The file I/O families of `/metrics`: per worker, its backend's counters and a
/// read-latency histogram; the pool's queue depth.
fn aio_metrics(o: &mut String, m: &Metrics, queue_depth: usize) {
    let per_worker: Vec<(usize, &'static str, edge_aio::StatsSnapshot)> = m
        .aio
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.get().map(|(mode, s)| (i, *mode, s.snapshot())))
        .collect();
    type Family = (
        &'static str,
        &'static str,
        &'static str,
        fn(&edge_aio::StatsSnapshot) -> u64,
    );
    let families: [Family; 9] = [
        (
            "edgecache_aio_reads_total",
            "counter",
            "File reads completed, by worker and backend.",
            |s| s.reads,
        ),
        (
            "edgecache_aio_read_bytes_total",
            "counter",
            "Bytes read from files.",
            |s| s.read_bytes,
        ),
        (
            "edgecache_aio_writes_total",
            "counter",
            "File writes completed.",
            |s| s.writes,
        ),
        (
            "edgecache_aio_errors_total",
            "counter",
            "File operations that failed.",
            |s| s.errors,
        ),
        (
            "edgecache_aio_in_flight",
            "gauge",
            "Operations handed to the pool or the ring and not completed yet.",
            |s| s.in_flight,
        ),
        (
            "edgecache_aio_inline_total",
            "counter",
            "auto: operations served on the loop without blocking (RWF_NOWAIT).",
            |s| s.inline_hits,
        ),
        (
            "edgecache_aio_handoffs_total",
            "counter",
            "Operations sent to the thread pool because they would block.",
            |s| s.handoffs,
        ),
        (
            "edgecache_aio_overflows_total",
            "counter",
            "Operations run on the loop because the pool queue or the ring was full.",
            |s| s.overflows,
        ),
        (
            "edgecache_aio_fallbacks_total",
            "counter",
            "io_uring asked for but unavailable: the worker uses the thread pool.",
            |s| s.uring_fallbacks,
        ),
    ];
    for (name, kind, help, get) in families {
        prom_header(o, name, kind, help);
        for (i, mode, s) in &per_worker {
            prom(
                o,
                name,
                &format!("worker=\"{i}\",backend=\"{mode}\""),
                get(s),
            );
        }
    }
    prom_header(
        o,
        "edgecache_aio_queue_depth",
        "gauge",
        "Jobs waiting in the I/O thread pool's queue (all workers).",
    );
    prom(o, "edgecache_aio_queue_depth", "", queue_depth as u64);
    prom_header(
        o,
        "edgecache_aio_read_seconds",
        "histogram",
        "File read latency (inline reads included).",
    );
    let mut total = edge_aio::StatsSnapshot::default();
    for (_, _, s) in &per_worker {
        total.add(s);
    }
    let mut cumulative = 0u64;
    for (i, n) in total.read_latency_us.iter().enumerate() {
        cumulative += n;
        if i + 1 == total.read_latency_us.len() {
            break;
        }
        // Bucket i holds reads under 2^i µs.
        let le = (1u64 << i) as f64 / 1e6;
        prom(
            o,
            "edgecache_aio_read_seconds_bucket",
            &format!("le=\"{le}\""),
            cumulative,
        );
    }
    prom(
        o,
        "edgecache_aio_read_seconds_bucket",
        "le=\"+Inf\"",
        cumulative,
    );
    prom(o, "edgecache_aio_read_seconds_count", "", cumulative);
}
