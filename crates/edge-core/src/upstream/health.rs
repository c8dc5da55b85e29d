//! Active health checks (`[[upstream]] health_check`): a `GET <path>` to every server
//! each `interval`; a 2xx or 3xx status line within `timeout` passes. `fails`
//! consecutive failures take a server out of every worker's rotation (consistent
//! hashing then moves its keys to the others), `passes` consecutive passes bring it
//! back (and its keys return).
//!
//! How it fits: the server runs [`run`] on a thread of its own, over the current config
//! (so a reload's groups are checked from then on); the verdict lives in the group
//! (`UpstreamGroup::healthy`), which request routing reads with one atomic load.

use super::group::{HealthCheck, UpstreamGroup};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One probe: connect, send the request, read the status line. Ok(status) when a
/// status line arrived in time.
pub async fn probe(
    addr: SocketAddr,
    host: &str,
    tls: Option<(
        &Arc<rustls::ClientConfig>,
        &rustls::pki_types::ServerName<'static>,
    )>,
    path: &str,
    timeout: Duration,
) -> Result<u16, String> {
    let work = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut s = match tls {
            Some((cfg, name)) => super::UpstreamIo::Tls(Box::new(
                tokio_rustls::TlsConnector::from(cfg.clone())
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| format!("TLS handshake: {e}"))?,
            )),
            None => super::UpstreamIo::Tcp(tcp),
        };
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: edgecache-health-check\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
        s.flush().await.map_err(|e| format!("send: {e}"))?;
        let mut buf = Vec::with_capacity(64);
        while !buf.contains(&b'\n') && buf.len() < 256 {
            let mut chunk = [0u8; 128];
            let n = s.read(&mut chunk).await.map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let line = String::from_utf8_lossy(&buf);
        let status = line
            .strip_prefix("HTTP/1.")
            .and_then(|r| r.get(2..5))
            .and_then(|c| c.parse::<u16>().ok())
            .ok_or_else(|| format!("no status line ({:?})", line.lines().next().unwrap_or("")))?;
        Ok(status)
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
}

/// Counts one probe's result for server `idx`; returns the new verdict when it changed.
pub fn record(group: &UpstreamGroup, idx: usize, ok: bool, hc: &HealthCheck) -> Option<bool> {
    use std::sync::atomic::Ordering::Relaxed;
    let s = &group.servers[idx];
    if ok {
        s.check_fails.store(0, Relaxed);
        let passes = s.check_passes.fetch_add(1, Relaxed) + 1;
        if !group.healthy(idx) && passes >= hc.passes {
            group.set_healthy(idx, true);
            return Some(true);
        }
    } else {
        s.check_passes.store(0, Relaxed);
        let fails = s.check_fails.fetch_add(1, Relaxed) + 1;
        if group.healthy(idx) && fails >= hc.fails {
            group.set_healthy(idx, false);
            return Some(false);
        }
    }
    None
}

/// Checks the groups `groups()` returns (called every 100 ms: the current config's
/// groups) until `stop()` says so. Each server is probed every `interval` of its group.
pub async fn run(groups: impl Fn() -> Vec<Arc<UpstreamGroup>>, stop: impl Fn() -> bool) {
    let mut due: HashMap<(String, SocketAddr), Instant> = HashMap::new();
    while !stop() {
        let now = Instant::now();
        for g in groups() {
            let Some(hc) = g.health_check.clone() else {
                continue;
            };
            for idx in 0..g.servers.len() {
                let key = (g.name.clone(), g.servers[idx].addr);
                if due.get(&key).is_some_and(|&t| t > now) {
                    continue;
                }
                due.insert(key, now + hc.interval);
                let (g, hc) = (g.clone(), hc.clone());
                tokio::task::spawn_local(async move {
                    let s = &g.servers[idx];
                    let tls = g.tls.as_ref().zip(s.tls_name.as_ref());
                    let host = g.tls_host.as_deref().unwrap_or(&s.name);
                    let res = probe(s.addr, host, tls, &hc.path, hc.timeout).await;
                    let ok = matches!(res, Ok(200..=399));
                    if let Some(up) = record(&g, idx, ok, &hc) {
                        if up {
                            tracing::warn!(
                                "upstream \"{}\": server {} is up again ({} checks passed)",
                                g.name,
                                s.name,
                                hc.passes
                            );
                        } else {
                            let why = match res {
                                Ok(st) => format!("status {st}"),
                                Err(e) => e,
                            };
                            tracing::warn!("upstream \"{}\": server {} is down ({} checks failed, last: {why})", g.name, s.name, hc.fails);
                        }
                    }
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
