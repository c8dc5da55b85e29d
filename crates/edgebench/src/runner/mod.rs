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
//!
//! # Layout
//! - `options.rs`: [`RunOptions`].
//! - `results.rs`: [`Results`] and its cells.
//! - `cell.rs`: a running server, its fill and one measured cell.
//! - this file: [`run`], the order of it all.

mod cell;
mod options;
mod results;

pub use options::{LoadChoice, RunOptions};
pub use results::{short_metric, Cell, Probe, Results, ServerState, ServerStatus};

use cell::{origin_requests, run_cell, slug, warm, warn, Running};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::bins::{self};
use crate::cgroup::{self, MemCgroup};
use crate::error::{Context, Error, Result};
use crate::experiment::{expand_env, ServerSpec};
use crate::fio::{self};
use crate::load::LoadGen;
use crate::machine::{self, Machine};
use crate::process::{SpawnSpec, Spawned};
use crate::servers::{self, Ctx, ServerKind};

/// How long the origin may take to listen.
const ORIGIN_READY: Duration = Duration::from_secs(15);

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
            ServerKind::Edgecache => match &s.program {
                // Another build, named by the experiment: it must exist, like ours.
                Some(p) => {
                    let path = PathBuf::from(expand_env(p).map_err(|e| {
                        Error::usage(format!("server {:?}: program: {e}", s.name))
                    })?);
                    if !path.is_file() {
                        return Err(Error::runtime(format!(
                            "server {:?}: program {} not found",
                            s.name,
                            path.display()
                        )));
                    }
                    Ok(path)
                }
                None => Ok(opts.bins.ours("edgecache").map_err(Error::runtime)?),
            },
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
            program: s
                .program
                .as_ref()
                .and_then(|_| f.as_ref().ok())
                .map(|p| p.display().to_string()),
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

#[cfg(test)]
mod tests;
