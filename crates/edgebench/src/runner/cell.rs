//! One server under test while it runs ([`Running`]), its cache fill ([`warm`]) and
//! one measured cell ([`run_cell`]): the load, what the server cost, and the checks
//! that the cell measured what the experiment expects (hits, or misses).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::options::RunOptions;
use super::results::{Cell, Probe};
use crate::cgroup::{self, MemCgroup};
use crate::error::{Error, Result};
use crate::experiment::{Expect, Plan, ServerSpec, Workload};
use crate::http;
use crate::interrupt;
use crate::load::{LoadGen, LoadSpec};
use crate::process::Spawned;
use crate::procstat;
use crate::prom;

/// A hit cell may send at most this share of its requests to the origin before the
/// runner warns that the cell did not measure hits.
const MAX_ORIGIN_SHARE: f64 = 0.01;

/// ...plus this many (in-flight refreshes, probes).
const ORIGIN_SLACK: u64 = 10;

/// Concurrent keep-alive connections that fill a server's cache before a workload.
const FILL_CONNECTIONS: usize = 4;

/// How often the fill prints its progress.
const FILL_PROGRESS: Duration = Duration::from_secs(10);

/// A started server. Fields drop in order: the process is stopped before its cgroup
/// is removed.
pub(super) struct Running {
    pub(super) spec: ServerSpec,
    pub(super) addr: SocketAddr,
    /// edgecache's admin listener (`/metrics`).
    pub(super) admin: Option<SocketAddr>,
    pub(super) proc: Spawned,
    pub(super) cgroup: Option<MemCgroup>,
    /// Why the server is no longer measured (it exited during the run).
    pub(super) gone: Option<String>,
}

pub(super) fn warn(warnings: &mut Vec<String>, msg: String) {
    eprintln!("edgebench: WARNING: {msg}");
    warnings.push(msg);
}

pub(super) fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

/// Total requests the origin has served, from its `/stats` JSON.
pub(super) fn origin_requests(origin: SocketAddr) -> Option<u64> {
    let r = http::get(origin, "/stats").ok()?;
    let v: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
    v.get("requests")?.as_u64()
}

/// Fetches every path in `paths` `passes` times over [`FILL_CONNECTIONS`] keep-alive
/// connections, printing progress for long fills. Returns (failures, first error).
fn fetch_all(
    addr: SocketAddr,
    paths: &[&str],
    passes: u32,
    label: &str,
) -> Result<(usize, Option<String>)> {
    let total = paths.len() * passes as usize;
    let next = AtomicUsize::new(0);
    let failures = AtomicUsize::new(0);
    let first_error: Mutex<Option<String>> = Mutex::new(None);
    let bytes = std::sync::atomic::AtomicU64::new(0);
    let started = Instant::now();
    let last_print = Mutex::new(Instant::now());
    let conns = FILL_CONNECTIONS.min(total.max(1));
    let interrupted = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        for _ in 0..conns {
            sc.spawn(|| {
                let mut c = http::KeepAlive::new(addr);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    if interrupt::check().is_err() {
                        interrupted.store(true, Ordering::Relaxed);
                        break;
                    }
                    let path = paths[i % paths.len()];
                    match c.get(path) {
                        Ok(f) if f.status == 200 => {
                            bytes.fetch_add(f.body_len, Ordering::Relaxed);
                        }
                        Ok(f) => {
                            failures.fetch_add(1, Ordering::Relaxed);
                            let mut fe = first_error.lock().unwrap_or_else(|e| e.into_inner());
                            fe.get_or_insert(format!("{path}: status {}", f.status));
                        }
                        Err(e) => {
                            failures.fetch_add(1, Ordering::Relaxed);
                            let mut fe = first_error.lock().unwrap_or_else(|e| e.into_inner());
                            fe.get_or_insert(e);
                        }
                    }
                    let mut lp = last_print.lock().unwrap_or_else(|e| e.into_inner());
                    if lp.elapsed() >= FILL_PROGRESS {
                        *lp = Instant::now();
                        let done = (i + 1).min(total);
                        eprintln!(
                            "edgebench:   {label}: {done}/{total} requests ({:.0}%), {:.0} MB, {:.0} s",
                            done as f64 * 100.0 / total as f64,
                            bytes.load(Ordering::Relaxed) as f64 / 1e6,
                            started.elapsed().as_secs_f64()
                        );
                    }
                }
            });
        }
    });
    if interrupted.load(Ordering::Relaxed) {
        return Err(Error::interrupted());
    }
    if total >= 1000 {
        eprintln!(
            "edgebench:   {label}: {total} requests, {:.0} MB in {:.1} s",
            bytes.load(Ordering::Relaxed) as f64 / 1e6,
            started.elapsed().as_secs_f64()
        );
    }
    Ok((
        failures.load(Ordering::Relaxed),
        first_error.into_inner().unwrap_or_else(|e| e.into_inner()),
    ))
}

/// The cache fill: fetches every path of the workload (and of its probe and its
/// `before` load) `warm_passes` times (the workload's, else the experiment's; 0: no
/// fill), then probes the first one for a HIT.
pub(super) fn warm(
    plan: &Plan,
    w: &Workload,
    r: &Running,
    warnings: &mut Vec<String>,
) -> Result<Probe> {
    let mut paths: Vec<&str> = w.paths.iter().map(|(p, _)| p.as_str()).collect();
    if let Some(pr) = &w.probe {
        paths.extend(pr.paths.iter().map(|(p, _)| p.as_str()));
    }
    if let Some(b) = &w.before {
        paths.extend(b.paths.iter().map(|(p, _)| p.as_str()));
    }
    let label = format!("fill {} · {}", w.name, r.spec.name);
    if paths.len() * w.warm_passes as usize >= 1000 {
        eprintln!(
            "edgebench: {label}: {} paths × {} pass(es)",
            paths.len(),
            w.warm_passes
        );
    }
    let (failures, first_error) = if w.warm_passes == 0 {
        (0, None)
    } else {
        fetch_all(r.addr, &paths, w.warm_passes, &label)?
    };
    if failures > 0 {
        warn(
            warnings,
            format!(
                "{} · {}: {failures} warm-up requests failed (first: {})",
                w.name,
                r.spec.name,
                first_error.unwrap_or_default()
            ),
        );
    }
    let first = &w.paths[0].0;
    let probe = match http::get(r.addr, first) {
        Ok(rep) => Probe {
            workload: w.name.clone(),
            server: r.spec.name.clone(),
            cache_status: rep.header("x-cache-status").map(str::to_string),
            status: Some(rep.status),
        },
        Err(e) => {
            warn(
                warnings,
                format!("{} · {}: probe of {first} failed: {e}", w.name, r.spec.name),
            );
            Probe {
                workload: w.name.clone(),
                server: r.spec.name.clone(),
                cache_status: None,
                status: None,
            }
        }
    };
    if plan.expect == Expect::Hit {
        match probe.cache_status.as_deref() {
            Some("HIT") => {}
            Some(other) => warn(
                warnings,
                format!("{} · {}: {first} answered X-Cache-Status: {other} after warm-up, not HIT", w.name, r.spec.name),
            ),
            None => warn(
                warnings,
                format!(
                    "{} · {}: no X-Cache-Status on {first} after warm-up; this row may measure the proxy path rather than cache hits",
                    w.name, r.spec.name
                ),
            ),
        }
    }
    Ok(probe)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run_cell(
    opts: &RunOptions,
    loadgen: &LoadGen,
    dir: &Path,
    w: &Workload,
    r: &mut Running,
    rep: u32,
    origin: SocketAddr,
    warnings: &mut Vec<String>,
) -> Result<Cell> {
    let tag = format!("{}-{}-{rep}", slug(&w.name), slug(&r.spec.name));
    let spec = |duration: Duration| LoadSpec {
        target: r.addr,
        groups: &w.groups,
        paths: &w.paths,
        connections: w.connections,
        threads: w.threads,
        duration,
        keepalive: w.keepalive,
        rate: w.rate,
        headers: &w.headers,
        cpus: Some(opts.placement.client.clone()),
        timeout: w.timeout.as_deref(),
        requests: w.requests,
        histogram: w.latency_detail,
    };
    if !opts.plan.warmup.is_zero() {
        loadgen.run(&spec(opts.plan.warmup), dir, &format!("{tag}-warmup"))?;
    }
    // The workload's `before` load (a scan, say): thrown away, right before the cell.
    if let Some(b) = &w.before {
        let before = LoadSpec {
            target: r.addr,
            groups: &b.groups,
            paths: &b.paths,
            connections: b.connections,
            threads: b.threads,
            duration: b.duration,
            keepalive: true,
            rate: None,
            headers: &w.headers,
            cpus: Some(opts.placement.client.clone()),
            timeout: w.timeout.as_deref(),
            requests: b.requests,
            histogram: false,
        };
        let done = loadgen.run(&before, dir, &format!("{tag}-before"))?;
        if done.errors > 0 {
            warn(
                warnings,
                format!(
                    "{} · {} · rep {}: before load: {} errors {:?}",
                    w.name,
                    r.spec.name,
                    rep + 1,
                    done.errors,
                    done.error_detail
                ),
            );
        }
    }
    if let Some(st) = r.proc.try_wait() {
        return Err(Error::runtime(format!(
            "{} exited ({st}) during the run; its log:\n{}",
            r.spec.name,
            r.proc.log_tail()
        )));
    }
    if opts.plan.drop_caches {
        cgroup::drop_caches()?;
    }
    // The probe's objects are hot by construction: fetched right before the cell.
    if let Some(pr) = &w.probe {
        let paths: Vec<&str> = pr.paths.iter().map(|(p, _)| p.as_str()).collect();
        let (failures, first) = fetch_all(r.addr, &paths, pr.warm_passes, "probe warm")?;
        if failures > 0 {
            warn(
                warnings,
                format!(
                    "{} · {} · rep {}: {failures} probe warm-up requests failed (first: {})",
                    w.name,
                    r.spec.name,
                    rep + 1,
                    first.unwrap_or_default()
                ),
            );
        }
    }
    let probe_spec = w.probe.as_ref().map(|pr| LoadSpec {
        target: r.addr,
        groups: &pr.groups,
        paths: &pr.paths,
        connections: pr.connections,
        threads: pr.threads,
        duration: w.duration,
        keepalive: true,
        rate: pr.rate,
        headers: &w.headers,
        cpus: Some(opts.placement.client.clone()),
        timeout: w.timeout.as_deref(),
        requests: None,
        histogram: false,
    });
    let scrape = |admin: Option<SocketAddr>| -> Option<BTreeMap<String, prom::Sample>> {
        if opts.plan.metrics.is_empty() {
            return None;
        }
        let rep = http::get(admin?, "/metrics").ok()?;
        (rep.status == 200)
            .then(|| prom::parse(&String::from_utf8_lossy(&rep.body), &opts.plan.metrics))
    };
    let metrics_before = scrape(r.admin);
    let pid = r.proc.pid();
    let origin_before = origin_requests(origin);
    let cpu_before = procstat::cpu_time(pid);
    let sys_before = procstat::sys_time(pid);
    let main = loadgen.start(&spec(w.duration), dir, &tag)?;
    let probe_run = match &probe_spec {
        Some(ps) => Some(loadgen.start(ps, dir, &format!("{tag}-probe"))?),
        None => None,
    };
    let load = main.finish()?;
    let probe = probe_run.map(|p| p.finish()).transpose()?;
    // A server that died during the cell measured nothing worth keeping.
    if let Some(st) = r.proc.try_wait() {
        return Err(Error::runtime(format!(
            "{} exited ({st}) during the cell",
            r.spec.name
        )));
    }
    let cpu = procstat::cpu_time(pid).saturating_sub(cpu_before);
    let sys = procstat::sys_time(pid).saturating_sub(sys_before);
    let rss_bytes = procstat::rss_bytes(pid);
    let origin_after = origin_requests(origin);
    let metrics = match (metrics_before, scrape(r.admin)) {
        (Some(b), Some(a)) => prom::deltas(&b, &a),
        _ => {
            if !opts.plan.metrics.is_empty() && r.admin.is_some() {
                warn(
                    warnings,
                    format!(
                        "{} · {} · rep {}: /metrics unreadable on the admin listener",
                        w.name,
                        r.spec.name,
                        rep + 1
                    ),
                );
            }
            BTreeMap::new()
        }
    };
    let cgroup_bytes = r.cgroup.as_ref().and_then(MemCgroup::usage);
    let origin_requests = match (origin_before, origin_after) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    if load.requests == 0 {
        warn(
            warnings,
            format!(
                "{} · {} · rep {}: no requests completed",
                w.name,
                r.spec.name,
                rep + 1
            ),
        );
    }
    if load.errors > 0 {
        warn(
            warnings,
            format!(
                "{} · {} · rep {}: {} errors {:?}",
                w.name,
                r.spec.name,
                rep + 1,
                load.errors,
                load.error_detail
            ),
        );
    }
    if opts.plan.expect == Expect::Hit {
        if let Some(o) = origin_requests {
            if o > ORIGIN_SLACK + (load.requests as f64 * MAX_ORIGIN_SHARE) as u64 {
                warn(
                    warnings,
                    format!(
                        "{} · {} · rep {}: the origin served {o} of {} requests: this cell did not measure cache hits",
                        w.name,
                        r.spec.name,
                        rep + 1,
                        load.requests
                    ),
                );
            }
        }
    }
    if let (Expect::Miss, Some(o)) = (opts.plan.expect, origin_requests) {
        if o + ORIGIN_SLACK < (load.requests as f64 * (1.0 - MAX_ORIGIN_SHARE)) as u64 {
            warn(
                warnings,
                format!(
                    "{} · {} · rep {}: the origin served only {o} of {} requests: this cell did not measure misses",
                    w.name,
                    r.spec.name,
                    rep + 1,
                    load.requests
                ),
            );
        }
    }
    if let Some(p) = &probe {
        if p.errors > 0 {
            warn(
                warnings,
                format!(
                    "{} · {} · rep {}: probe: {} errors {:?}",
                    w.name,
                    r.spec.name,
                    rep + 1,
                    p.errors,
                    p.error_detail
                ),
            );
        }
    }
    // The server served the probe's requests too.
    let served = load.requests + probe.as_ref().map_or(0, |p| p.requests);
    let cpu_us_per_req = if served > 0 {
        cpu.as_secs_f64() * 1e6 / served as f64
    } else {
        0.0
    };
    Ok(Cell {
        workload: w.name.clone(),
        server: r.spec.name.clone(),
        rep,
        load,
        server_cpu_s: cpu.as_secs_f64(),
        server_sys_s: sys.as_secs_f64(),
        cpu_us_per_req,
        rss_bytes,
        origin_requests,
        probe,
        metrics,
        cgroup_bytes,
    })
}
