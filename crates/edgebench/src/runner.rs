//! The experiment runner: start the origin and every server under test, warm the caches,
//! run each cell (workload × server × repetition) with the load generator, and collect
//! what each cell cost the server.
//!
//! How it fits: [`run`] turns a [`Plan`] into [`Results`], which [`crate::report`]
//! writes as Markdown, SVG and JSON. Every process it starts is a
//! [`crate::process::Spawned`] owned by a local, so an error, a panic or Ctrl-C stops
//! them all on the way out. All servers run for the whole experiment (each on its own
//! loopback port and run dir, all pinned to the server CPUs); the repetitions loop
//! outside the servers loop, so cells alternate A B A B and slow drift (thermal,
//! neighbours compiling) spreads over every server instead of biasing one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bins::{self, Bins};
use crate::cgroup::{self, MemCgroup};
use crate::cpus::Placement;
use crate::error::{Context, Error, Result};
use crate::experiment::{Expect, Plan, ServerSpec, Workload};
use crate::fio::{self, FioResult};
use crate::http;
use crate::interrupt;
use crate::load::{LoadGen, LoadResult, LoadSpec};
use crate::machine::{self, Machine};
use crate::process::{SpawnSpec, Spawned};
use crate::procstat;
use crate::prom;
use crate::servers::{self, Ctx, ServerKind};

/// How long the origin may take to listen.
const ORIGIN_READY: Duration = Duration::from_secs(15);
/// A hit cell may send at most this share of its requests to the origin before the
/// runner warns that the cell did not measure hits.
const MAX_ORIGIN_SHARE: f64 = 0.01;
/// ...plus this many (in-flight refreshes, probes).
const ORIGIN_SLACK: u64 = 10;
/// Concurrent keep-alive connections that fill a server's cache before a workload.
const FILL_CONNECTIONS: usize = 4;
/// How often the fill prints its progress.
const FILL_PROGRESS: Duration = Duration::from_secs(10);

/// Which load generator `--loadgen` chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadChoice {
    Edgeload,
    Wrk,
}

/// Everything the command line decided.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub plan: Plan,
    pub bench_dir: PathBuf,
    pub placement: Placement,
    pub bins: Bins,
    pub loadgen: LoadChoice,
    /// The exact command line, for the report.
    pub command: String,
    /// Keep the run directory (configs, logs, load JSON) instead of deleting it.
    pub keep_dir: bool,
}

/// Whether a server took part.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "lowercase")]
pub enum ServerState {
    Ran,
    /// Not installed: the reason says how to install it.
    Missing(String),
    /// Installed but would not start: the reason carries its log tail.
    Failed(String),
}

#[derive(Debug, Clone, Serialize)]
pub struct ServerStatus {
    pub name: String,
    pub kind: ServerKind,
    pub state: ServerState,
    pub version: Option<String>,
}

/// What a server answered to the first path of a workload after warm-up.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    pub workload: String,
    pub server: String,
    /// `X-Cache-Status` value, None when the header was absent.
    pub cache_status: Option<String>,
    pub status: Option<u16>,
}

/// One measured cell.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub workload: String,
    pub server: String,
    /// 0-based repetition.
    pub rep: u32,
    pub load: LoadResult,
    pub server_cpu_s: f64,
    /// The kernel's share of `server_cpu_s` (stime).
    #[serde(default)]
    pub server_sys_s: f64,
    pub cpu_us_per_req: f64,
    pub rss_bytes: u64,
    /// Requests the origin saw during the cell (None if `/stats` was unreadable).
    pub origin_requests: Option<u64>,
    /// The workload's probe load, run alongside the main load.
    #[serde(default)]
    pub probe: Option<LoadResult>,
    /// The plan's `metrics` families from the server's `/metrics` (edgecache): counters
    /// as the cell's delta, gauges as the value after.
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// Bytes charged to the server's memory cgroup after the cell (page cache included).
    #[serde(default)]
    pub cgroup_bytes: Option<u64>,
}

/// Everything a report needs.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub plan: Plan,
    pub machine: Machine,
    pub command: String,
    pub date: String,
    pub cpus: String,
    pub loadgen: String,
    pub servers: Vec<ServerStatus>,
    pub probes: Vec<Probe>,
    pub cells: Vec<Cell>,
    /// Disk ceilings, one per workload, for plans with `[fio]`.
    #[serde(default)]
    pub fio: Vec<FioResult>,
    pub warnings: Vec<String>,
    /// Requests the origin served over the whole run (warm-up included), from `/stats`.
    pub origin_total_requests: Option<u64>,
    pub elapsed_s: f64,
}

impl Results {
    /// Names of the servers that ran, in plan order.
    pub fn ran(&self) -> Vec<&ServerStatus> {
        self.servers
            .iter()
            .filter(|s| matches!(s.state, ServerState::Ran))
            .collect()
    }
    pub fn cells_for<'a>(
        &'a self,
        workload: &'a str,
        server: &'a str,
    ) -> impl Iterator<Item = &'a Cell> + 'a {
        self.cells
            .iter()
            .filter(move |c| c.workload == workload && c.server == server)
    }
    pub fn probe(&self, workload: &str, server: &str) -> Option<&Probe> {
        self.probes
            .iter()
            .find(|p| p.workload == workload && p.server == server)
    }
    pub fn fio_for(&self, workload: &str) -> Option<&FioResult> {
        self.fio.iter().find(|f| f.workload == workload)
    }
}

/// A started server. Fields drop in order: the process is stopped before its cgroup
/// is removed.
struct Running {
    spec: ServerSpec,
    addr: SocketAddr,
    /// edgecache's admin listener (`/metrics`).
    admin: Option<SocketAddr>,
    proc: Spawned,
    cgroup: Option<MemCgroup>,
    /// Why the server is no longer measured (it exited during the run).
    gone: Option<String>,
}

fn warn(warnings: &mut Vec<String>, msg: String) {
    eprintln!("edgebench: WARNING: {msg}");
    warnings.push(msg);
}

fn free_port() -> Result<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .ctx("finding a free port")
}

fn make_dir(p: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(p).ctx(format!("creating {}", p.display()))?;
    // World-readable: nginx workers and the varnish child may run as another user.
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
        .ctx(format!("chmod {}", p.display()))
}

fn slug(s: &str) -> String {
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
fn origin_requests(origin: SocketAddr) -> Option<u64> {
    let r = http::get(origin, "/stats").ok()?;
    let v: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
    v.get("requests")?.as_u64()
}

/// A server of the plan with its program, or why it is missing.
type Found = (ServerSpec, std::result::Result<PathBuf, String>);

/// Finds every program; missing peers are reported, a missing edgecache/origin/load is an error.
fn resolve(opts: &RunOptions) -> Result<(PathBuf, LoadGen, Vec<Found>)> {
    let origin = opts.bins.ours("edgeorigin").map_err(Error::runtime)?;
    let loadgen = match opts.loadgen {
        LoadChoice::Edgeload => {
            LoadGen::Edgeload(opts.bins.ours("edgeload").map_err(Error::runtime)?)
        }
        LoadChoice::Wrk => LoadGen::Wrk(bins::system("wrk").ok_or_else(|| {
            Error::runtime("wrk not found (apt-get install wrk, or bench/peers/install.sh)")
        })?),
    };
    let mut servers = Vec::new();
    for s in &opts.plan.servers {
        let found = match s.kind {
            ServerKind::Edgecache => Ok(opts.bins.ours("edgecache").map_err(Error::runtime)?),
            k => bins::system(k.program()).ok_or_else(|| {
                format!(
                    "{} not installed ({} not found on PATH or in /usr/sbin); install it with `sudo bench/peers/install.sh` (apt-get install {})",
                    k.name(),
                    k.program(),
                    k.package().unwrap_or("?")
                )
            }),
        };
        servers.push((s.clone(), found));
    }
    Ok((origin, loadgen, servers))
}

/// Runs the whole experiment.
pub fn run(opts: &RunOptions) -> Result<Results> {
    let started = Instant::now();
    let plan = &opts.plan;
    let mut warnings = Vec::new();
    cgroup::preflight(
        &plan.name,
        plan.drop_caches,
        plan.memory_limit,
        cgroup::euid(),
        Path::new(cgroup::MEMORY_ROOT),
    )?;
    let (origin_bin, loadgen, found) = resolve(opts)?;
    let fio_bin = match &plan.fio {
        Some(_) => {
            let b = bins::system("fio");
            if b.is_none() {
                warn(
                    &mut warnings,
                    "fio is not installed (apt-get install fio, or bench/peers/install.sh): no disk ceiling in this report".into(),
                );
            }
            b
        }
        None => None,
    };

    let mut statuses: Vec<ServerStatus> = Vec::new();
    for (s, f) in &found {
        let (state, version) = match f {
            Ok(p) => (ServerState::Ran, servers::version(s.kind, p)),
            Err(why) => (ServerState::Missing(why.clone()), None),
        };
        if let ServerState::Missing(why) = &state {
            eprintln!("edgebench: peer {:?} skipped: {why}", s.name);
        }
        statuses.push(ServerStatus {
            name: s.name.clone(),
            kind: s.kind,
            state,
            version,
        });
    }

    let run_dir = tempfile::Builder::new()
        .prefix("edgebench-")
        .tempdir()
        .ctx("creating the run directory")?;
    make_dir(run_dir.path())?;
    eprintln!(
        "edgebench: {} — run dir {}",
        plan.title,
        run_dir.path().display()
    );

    // Origin.
    let origin_addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let origin_dir = run_dir.path().join("origin");
    make_dir(&origin_dir)?;
    let mut origin_args = vec!["--listen".to_string(), origin_addr.to_string()];
    origin_args.extend(plan.origin_args.iter().cloned());
    let mut origin = Spawned::spawn(&SpawnSpec {
        name: "edgeorigin".into(),
        program: origin_bin,
        args: origin_args,
        dir: origin_dir,
        cpus: Some(opts.placement.origin.clone()),
        env: vec![],
        cgroup: None,
    })?;
    origin.wait_port(origin_addr, ORIGIN_READY)?;
    if origin_requests(origin_addr).is_none() {
        warn(&mut warnings, format!("edgeorigin at {origin_addr} gave no readable /stats: origin request counts are not reported"));
    }

    // Servers under test.
    let mut running: Vec<Running> = Vec::new();
    for ((spec, found), status) in found.iter().zip(statuses.iter_mut()) {
        let Ok(program) = found else { continue };
        let dir = run_dir.path().join(slug(&spec.name));
        make_dir(&dir)?;
        let port = free_port()?;
        let admin_port = free_port()?;
        let ctx = Ctx {
            bench_dir: &opts.bench_dir,
            dir: &dir,
            port,
            admin_port,
            origin: origin_addr,
        };
        let mut cg = None;
        let started = servers::prepare(spec, &ctx).and_then(|launch| {
            if let Some(limit) = plan.memory_limit {
                let name = format!("edgebench-{}-{}", std::process::id(), slug(&spec.name));
                cg = Some(MemCgroup::create(
                    Path::new(cgroup::MEMORY_ROOT),
                    &name,
                    limit,
                )?);
            }
            let mut p = Spawned::spawn(&SpawnSpec {
                name: slug(&spec.name),
                program: program.clone(),
                args: launch.args,
                dir: dir.clone(),
                cpus: Some(opts.placement.server.clone()),
                env: launch.env,
                cgroup: cg.as_ref().map(|c| c.dir().to_path_buf()),
            })?;
            p.wait_port(
                SocketAddr::from(([127, 0, 0, 1], port)),
                launch.ready_timeout,
            )?;
            Ok(p)
        });
        match started {
            Ok(p) => {
                eprintln!(
                    "edgebench: {} listening on 127.0.0.1:{port} (pid {}){}",
                    spec.name,
                    p.pid(),
                    cg.as_ref()
                        .map(|c| format!(", memory cgroup {}", c.dir().display()))
                        .unwrap_or_default()
                );
                running.push(Running {
                    spec: spec.clone(),
                    addr: SocketAddr::from(([127, 0, 0, 1], port)),
                    admin: (spec.kind == ServerKind::Edgecache)
                        .then(|| SocketAddr::from(([127, 0, 0, 1], admin_port))),
                    proc: p,
                    cgroup: cg,
                    gone: None,
                });
            }
            Err(e) if e.kind == crate::error::ErrorKind::Interrupted => return Err(e),
            Err(e) if spec.kind == ServerKind::Edgecache => return Err(e),
            Err(e) => {
                warn(
                    &mut warnings,
                    format!(
                        "{} failed to start and is left out: {}",
                        spec.name,
                        first_lines(&e.msg, 6)
                    ),
                );
                status.state = ServerState::Failed(first_lines(&e.msg, 12));
            }
        }
    }

    let total_cells = plan.workloads.len() * plan.repetitions as usize * running.len();
    let mut probes = Vec::new();
    let mut cells = Vec::new();
    let mut fio_results = Vec::new();
    let load_dir = run_dir.path().join("load");
    make_dir(&load_dir)?;
    for w in &plan.workloads {
        for r in running.iter().filter(|r| r.gone.is_none()) {
            probes.push(warm(plan, w, r, &mut warnings)?);
        }
        if let (Some(fp), Some(bin)) = (&plan.fio, &fio_bin) {
            match w.object_size {
                None => warn(
                    &mut warnings,
                    format!(
                        "{}: no object size (set object_size) for fio's block size: no disk ceiling",
                        w.name
                    ),
                ),
                Some(bs) => {
                    if plan.drop_caches {
                        cgroup::drop_caches()?;
                    }
                    let job = fio::FioJob {
                        plan: fp,
                        file: &fio::file_in(run_dir.path()),
                        bs,
                        iodepth: w.connections,
                        runtime: fp.runtime.unwrap_or(w.duration),
                    };
                    eprintln!(
                        "edgebench: {}: fio randread bs {bs} iodepth {} ({}, {:?})",
                        w.name, w.connections, fp.ioengine, job.runtime
                    );
                    match fio::run(
                        bin,
                        &job,
                        &w.name,
                        &load_dir,
                        &slug(&w.name),
                        Some(opts.placement.server.clone()),
                    ) {
                        Ok(f) => {
                            eprintln!(
                                "edgebench: {}: disk ceiling {:.1} MB/s ({:.0} IOPS, {})",
                                w.name, f.mb_per_s, f.iops, f.ioengine
                            );
                            fio_results.push(f);
                        }
                        Err(e) if e.kind == crate::error::ErrorKind::Interrupted => return Err(e),
                        Err(e) => warn(
                            &mut warnings,
                            format!("{}: fio failed, no disk ceiling: {}", w.name, e.msg),
                        ),
                    }
                }
            }
        }
        for rep in 0..plan.repetitions {
            for r in running.iter_mut().filter(|r| r.gone.is_none()) {
                let cell = match run_cell(
                    opts,
                    &loadgen,
                    &load_dir,
                    w,
                    r,
                    rep,
                    origin_addr,
                    &mut warnings,
                ) {
                    Ok(c) => c,
                    Err(e) if e.kind == crate::error::ErrorKind::Interrupted => return Err(e),
                    Err(e) => match r.proc.try_wait() {
                        // A server that died is reported and left out from here on; the
                        // others go on, and the report says what happened.
                        Some(st) => {
                            let oom = r
                                .cgroup
                                .as_ref()
                                .and_then(MemCgroup::oom_kills)
                                .filter(|&n| n > 0)
                                .map(|n| {
                                    format!(
                                        "; its memory cgroup's OOM killer fired {n} time(s) (memory_limit {} MiB)",
                                        plan.memory_limit.unwrap_or(0) >> 20
                                    )
                                })
                                .unwrap_or_default();
                            let why = format!(
                                "{} exited ({st}) in workload {} rep {}{oom}; it is left out of the remaining cells. Log tail: {}",
                                r.spec.name,
                                w.name,
                                rep + 1,
                                first_lines(r.proc.log_tail().trim(), 4)
                            );
                            warn(&mut warnings, why.clone());
                            r.gone = Some(why);
                            continue;
                        }
                        None => return Err(e),
                    },
                };
                let hot = cell
                    .probe
                    .as_ref()
                    .map(|p| {
                        format!(
                            ", hot p99 {} µs",
                            p.pct("p99").map_or("-".into(), |v| format!("{v:.0}"))
                        )
                    })
                    .unwrap_or_default();
                eprintln!(
                    "edgebench: [{}/{}] {} · {} · rep {}/{}: {:.0} req/s, {:.1} MB/s, p50 {} µs, p99 {} µs, {:.1} µs CPU/req, {} errors{hot}",
                    cells.len() + 1,
                    total_cells,
                    w.name,
                    r.spec.name,
                    rep + 1,
                    plan.repetitions,
                    cell.load.rps,
                    cell.load.mb_per_s(),
                    cell.load.pct("p50").map_or("-".into(), |v| format!("{v:.0}")),
                    cell.load.pct("p99").map_or("-".into(), |v| format!("{v:.0}")),
                    cell.cpu_us_per_req,
                    cell.load.errors
                );
                if !cell.metrics.is_empty() {
                    let m: Vec<String> = cell
                        .metrics
                        .iter()
                        .map(|(k, v)| format!("{}={v}", short_metric(k, &plan.metrics)))
                        .collect();
                    eprintln!("edgebench:     metrics: {}", m.join(" "));
                }
                cells.push(cell);
            }
        }
    }
    let origin_total_requests = origin_requests(origin_addr);
    // Stop in reverse start order: servers, then the origin.
    while let Some(mut r) = running.pop() {
        r.proc.stop();
    }
    origin.stop();
    if opts.keep_dir {
        let kept = run_dir.keep();
        eprintln!("edgebench: run dir kept at {}", kept.display());
    }

    Ok(Results {
        plan: plan.clone(),
        machine: Machine::describe(),
        command: opts.command.clone(),
        date: machine::now_utc(),
        cpus: format!(
            "server {} · client {} · origin {}",
            opts.placement.server, opts.placement.client, opts.placement.origin
        ),
        loadgen: format!("{} ({})", loadgen.name(), loadgen.program().display()),
        servers: statuses,
        probes,
        cells,
        fio: fio_results,
        warnings,
        origin_total_requests,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

fn first_lines(s: &str, n: usize) -> String {
    s.lines().take(n).collect::<Vec<_>>().join("\n")
}

/// Shortens a metric name for logs and tables: the longest matching plan prefix goes.
pub fn short_metric<'a>(name: &'a str, prefixes: &[String]) -> &'a str {
    // One series asked for by its labels: the labels name the column.
    if let (Some(open), true) = (name.find('{'), prefixes.iter().any(|p| p == name)) {
        return name[open + 1..].trim_end_matches('}');
    }
    prefixes
        .iter()
        .filter(|p| name.starts_with(p.as_str()) && name.len() > p.len())
        .max_by_key(|p| p.len())
        .map_or(name, |p| &name[p.len()..])
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
fn warm(plan: &Plan, w: &Workload, r: &Running, warnings: &mut Vec<String>) -> Result<Probe> {
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
fn run_cell(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_lose_the_longest_prefix() {
        let p = vec!["edgecache_".to_string(), "edgecache_aio_".to_string()];
        assert_eq!(short_metric("edgecache_aio_reads_total", &p), "reads_total");
        assert_eq!(
            short_metric("edgecache_requests_total", &p),
            "requests_total"
        );
        assert_eq!(short_metric("other", &p), "other");
    }

    #[test]
    fn slugs_are_path_safe() {
        assert_eq!(slug("nginx aio threads"), "nginx-aio-threads");
        assert_eq!(slug("../x"), "---x");
    }
}
