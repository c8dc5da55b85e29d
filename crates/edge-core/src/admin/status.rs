//! `GET /status`: the node as JSON (per-worker counters, totals, the RAM tier, the
//! cache zones, upstream health, the limit zones) for scripts and the console.
//!
//! How it fits: `mod.rs` routes `/status` here; the console's two extra fields
//! (`cache_totals`, `top_objects`) come from `console.rs`.

use super::console;
use super::ctx::AdminCtx;
use crate::state::Shared;
use std::sync::atomic::Ordering::Relaxed;

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

pub(super) fn status_json(ctx: &AdminCtx, shared: &Shared) -> String {
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
                "large_hits": {
                    "mapped_bytes": w.large_mapped_bytes.load(Relaxed),
                    "sendfile_bytes": w.large_sendfile_bytes.load(Relaxed),
                    "choice": crate::http::large_send::choice_name(
                        w.large_send_choice.load(Relaxed)
                    ),
                    "mapped_ns_per_mib": w.large_send_mapped_ns_per_mib.load(Relaxed),
                    "sendfile_ns_per_mib": w.large_send_sendfile_ns_per_mib.load(Relaxed),
                },
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
                        "inline_writes": s.inline_writes,
                        "write_sleeps": s.write_sleeps,
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
