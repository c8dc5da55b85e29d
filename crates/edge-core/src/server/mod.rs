//! Server lifecycle: bind, start workers, wait for signals, reload, stop gracefully.
//!
//! Order matters: the error log opens, signals are registered, and every socket is bound
//! *before* any worker runs, so startup either fails early with one clear message or
//! comes up whole. SIGTERM/SIGINT stop accepting, let in-flight requests finish (idle
//! keep-alive connections close at once), and exit 0 once no connection is left or
//! `shutdown_timeout` has passed. SIGHUP re-reads the file and swaps the compiled config
//! atomically; a bad file is logged and the old config stays. SIGUSR1 reopens logs.

mod idle_queue;
mod parking;
pub mod upgrade;
pub mod worker;

use crate::config::validate::BadValue;
use crate::config::{self, AccessLog, Config, Workers};
use crate::log::access::{AccessLogBuf, AccessLogFile};
use crate::metrics::Metrics;
use crate::net::{strategy_for, ListenSpec};
use crate::state::{caches, Shared, StateError};
use arc_swap::ArcSwap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, SignalKind};

/// A startup or runtime failure (exit code 1).
#[derive(Debug)]
pub enum RunError {
    /// A system call or resource failed; `context` names it (nginx style).
    Io {
        context: &'static str,
        source: std::io::Error,
    },
    /// The config compiles to no runnable state (a cache that cannot open, ...).
    State(StateError),
    /// A value that does not parse (validation normally catches it first).
    BadValue(BadValue),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Io { context, source } => write!(f, "{context}: {source}"),
            RunError::State(e) => write!(f, "{e}"),
            RunError::BadValue(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RunError {}

impl From<StateError> for RunError {
    fn from(e: StateError) -> Self {
        RunError::State(e)
    }
}

impl From<BadValue> for RunError {
    fn from(e: BadValue) -> Self {
        RunError::BadValue(e)
    }
}

/// The CPU for worker `i` under the configured affinity.
fn cpu_for_worker(aff: &config::Affinity, i: usize) -> Option<usize> {
    match aff {
        config::Affinity::Off => None,
        config::Affinity::Auto => {
            let cpus = crate::affinity::allowed_cpus();
            (!cpus.is_empty()).then(|| cpus[i % cpus.len()])
        }
        config::Affinity::Cpus(list) => Some(list[i % list.len()]),
    }
}

/// Descriptors the process may need: two per connection (a client and an upstream or a
/// cache file), plus the listeners, the cache and the logs.
fn fds_needed(workers: usize, worker_connections: usize) -> u64 {
    (workers as u64)
        .saturating_mul(worker_connections as u64)
        .saturating_mul(2)
        .saturating_add(1024)
}

/// Raises the soft descriptor limit to what `worker_connections` needs (up to the hard
/// limit, as nginx's `worker_rlimit_nofile`), so that a full worker refuses connections
/// itself instead of failing `accept` with EMFILE; warns when the hard limit is lower.
fn raise_nofile(workers: usize, worker_connections: usize) {
    let want = fds_needed(workers, worker_connections);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return;
    }
    if lim.rlim_cur >= want {
        return;
    }
    let target = want.min(lim.rlim_max);
    if target > lim.rlim_cur {
        let new = libc::rlimit {
            rlim_cur: target,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `new` is a valid rlimit; the soft limit stays within the hard one.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } != 0 {
            return;
        }
    }
    if target < want {
        tracing::warn!(
            "descriptor limit {target} is below the {want} that {workers} worker(s) of {worker_connections} worker_connections may need (raise the hard limit, e.g. LimitNOFILE=): accept() may fail with EMFILE before worker_connections is reached"
        );
    }
}

fn err(context: &'static str) -> impl FnOnce(std::io::Error) -> RunError {
    move |source| RunError::Io { context, source }
}

/// Runs the server until a stop signal. `config_path` is re-read on SIGHUP (None: the
/// embedded default, which cannot change).
pub fn run(cfg: Config, config_path: Option<PathBuf>) -> Result<(), RunError> {
    let log = crate::log::error::init(&cfg.error_log).map_err(err("error_log"))?;
    // Before any thread exists: sockets handed over by a previous binary or systemd.
    for line in crate::net::inherit::load_from_env() {
        tracing::info!("{line}");
    }
    crate::net::inherit::enable_remember();
    let exe = upgrade::Exe::current();
    {
        let name = cfg
            .node_name
            .as_deref()
            .unwrap_or(crate::http::node::DEFAULT_NAME);
        let listens: Vec<&str> = cfg
            .listen
            .iter()
            .map(|l| l.addr.get_ref().as_str())
            .collect();
        let seed = format!("{}|{}", crate::http::node::hostname(), listens.join(","));
        crate::http::node::set(name, &seed);
    }
    let workers = match cfg.workers {
        Workers::Auto => crate::affinity::num_cpus(),
        Workers::Count(n) => n,
    };
    raise_nofile(workers, cfg.worker_connections);
    let strategy = strategy_for(cfg.accept);
    let listens: Vec<ListenSpec> = cfg
        .listen
        .iter()
        .map(|l| {
            config::validate::parse_addr(l.addr.get_ref())
                .map(|addr| ListenSpec {
                    addr,
                    backlog: l.backlog,
                    // As nginx's `deferred`: held back for up to client_header_timeout.
                    defer_accept_secs: if l.deferred {
                        cfg.client_header_timeout.0.as_secs().clamp(1, 3600) as u32
                    } else {
                        0
                    },
                })
                .map_err(RunError::from)
        })
        .collect::<Result<_, _>>()?;

    // Signals first: a TERM that arrives during startup must be a graceful stop, not death.
    let signal_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(err("runtime"))?;
    let mut sigs = signal_rt
        .block_on(async {
            Ok::<_, std::io::Error>((
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
                signal(SignalKind::hangup())?,
                signal(SignalKind::user_defined1())?,
                signal(SignalKind::user_defined2())?,
            ))
        })
        .map_err(err("signals"))?;

    let cpus: Vec<Option<usize>> = (0..workers)
        .map(|id| cpu_for_worker(&cfg.worker_cpu_affinity, id))
        .collect();
    let plan = crate::net::AcceptPlan {
        workers,
        multi_accept: cfg.multi_accept,
        incoming_cpu: match cfg.reuseport_steering {
            config::Steering::Cpu => cpus.clone(),
            config::Steering::Off => Vec::new(),
        },
    };
    let admin_listener = match &cfg.admin {
        Some(a) => {
            let addr = config::validate::parse_addr(a.listen.get_ref())?;
            Some(crate::admin::bind(addr).map_err(err("admin listen"))?)
        }
        None => None,
    };
    let mut acceptors = strategy.prepare(&listens, &plan).map_err(err("listen"))?;
    adopt_leftovers(&mut acceptors);
    let demo_origin = match &cfg.demo_origin {
        Some(a) => {
            let addr = config::validate::parse_addr(a.get_ref())?;
            let opts = edgeorigin::Options {
                listen: addr,
                ..Default::default()
            };
            Some(edgeorigin::start(opts).map_err(err("demo origin"))?)
        }
        None => None,
    };
    let caches = caches::open_caches(&cfg, None)?;
    let shared = Arc::new(ArcSwap::from_pointee(Shared::build(&cfg, 1, None, caches)?));
    let metrics = Arc::new(Metrics::new(workers));
    let aio = crate::aio::AioSetup::from_config(&cfg.aio);
    let compress = crate::compress::PoolSetup::from_config(&cfg.compress_pool);
    let (access_file, log_buffer, log_flush) = match &cfg.access_log {
        AccessLog::Off => (None, 0, Duration::from_secs(1)),
        AccessLog::File {
            path,
            buffer,
            flush,
        } => (
            Some(AccessLogFile::open(path).map_err(err("access_log"))?),
            *buffer as usize,
            *flush,
        ),
    };
    if let Some(listener) = admin_listener {
        crate::admin::start(
            listener,
            crate::admin::AdminCtx {
                metrics: metrics.clone(),
                shared: shared.clone(),
                accept: strategy.name(),
                multi_accept: cfg.multi_accept,
                steering: match cfg.reuseport_steering {
                    config::Steering::Off => "off",
                    config::Steering::Cpu => "cpu",
                },
                cpus: cpus.clone(),
                aio: aio.clone(),
                compress: compress.clone(),
            },
        )
        .map_err(err("admin listen"))?;
    }

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut threads = Vec::with_capacity(workers);
    for (id, acceptor) in acceptors.into_iter().enumerate() {
        let spec = worker::WorkerSpec {
            id,
            cpu: cpus[id],
            acceptor,
            shared: shared.clone(),
            metrics: metrics.clone(),
            access_log: AccessLogBuf::new(access_file.clone(), log_buffer, log_flush),
            shutdown: stop_rx.clone(),
            max_connections: cfg.worker_connections,
            multi_accept: cfg.multi_accept,
            aio: aio.clone(),
            compress: compress.clone(),
        };
        threads.push(worker::spawn(spec).map_err(err("pthread_create()"))?);
    }
    tracing::info!(
        "edgecache {} started: {workers} worker(s), accept={}, listening on {}",
        env!("CARGO_PKG_VERSION"),
        strategy.name(),
        listens
            .iter()
            .map(|l| l.addr.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );

    let health_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    spawn_health_checks(shared.clone(), health_stop.clone()).map_err(err("pthread_create()"))?;
    if let Some(p) = &cfg.pid {
        if let Err(e) = upgrade::write_pid(p) {
            tracing::error!("pid file {}: {e}", p.display());
        }
    }
    // Started by a binary upgrade: the old process may stop now.
    upgrade::signal_ready();
    upgrade::sd_notify(&format!("READY=1\nMAINPID={}", std::process::id()));

    let mut generation = 1;
    let mut upgrading: Option<upgrade::Upgrade> = None;
    signal_rt.block_on(async {
        let (term, int, hup, usr1, usr2) = &mut sigs;
        loop {
            let tick = async {
                match upgrading {
                    Some(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = hup.recv() => {
                    upgrade::sd_notify("RELOADING=1");
                    reload(&config_path, &cfg, &shared, &mut generation);
                    upgrade::sd_notify("READY=1");
                }
                _ = usr1.recv() => {
                    log.reopen();
                    if let Some(f) = &access_file { f.reopen(); }
                    tracing::info!("logs reopened");
                }
                _ = usr2.recv() => {
                    if upgrading.is_some() {
                        tracing::warn!("SIGUSR2: an upgrade is already under way");
                        continue;
                    }
                    match upgrade::start(&exe, &crate::net::inherit::passable()) {
                        Ok(u) => {
                            tracing::info!("upgrade: started {} (pid {}) with the listening sockets", exe.path.display(), u.pid());
                            upgrading = Some(u);
                        }
                        Err(e) => tracing::error!("upgrade: cannot start {}: {e}; this binary keeps serving", exe.path.display()),
                    }
                }
                _ = tick => {
                    let state = match upgrading.as_mut() {
                        Some(u) => u.poll(),
                        None => continue,
                    };
                    match state {
                        upgrade::UpgradeState::Waiting => {}
                        upgrade::UpgradeState::Ready(pid) => {
                            tracing::info!("upgrade: the new binary (pid {pid}) serves; this one drains its connections and exits");
                            break;
                        }
                        upgrade::UpgradeState::Failed(why) => {
                            tracing::error!("upgrade failed: {why}; this binary keeps serving");
                            upgrading = None;
                        }
                    }
                }
            }
        }
    });
    upgrade::sd_notify("STOPPING=1");

    health_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    tracing::info!("shutting down: no new connections; waiting for in-flight requests");
    let _ = stop_tx.send(true);
    let deadline = Instant::now() + cfg.shutdown_timeout.0;
    while threads.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let left = metrics.active();
    if left > 0 {
        tracing::warn!(
            "shutdown_timeout passed with {left} connection(s) still open; closing them"
        );
    }
    // The index snapshot needs a cache nobody writes to any more: only when every
    // worker stopped (a fill still running would be missing from it).
    let quiet = threads.iter().all(|t| t.is_finished());
    for c in shared.load().caches.values() {
        c.shutdown();
        if !quiet {
            tracing::warn!(cache = %c.name(), "no index snapshot: workers still running");
            continue;
        }
        let t0 = Instant::now();
        match c.write_snapshot() {
            Ok(n) => {
                tracing::info!(cache = %c.name(), "index snapshot: {n} objects written in {:?}", t0.elapsed())
            }
            Err(e) => tracing::warn!(cache = %c.name(), "index snapshot not written: {e}"),
        }
    }
    if let Some(o) = demo_origin {
        o.shutdown();
    }
    if let Some(p) = &cfg.pid {
        upgrade::remove_pid(p);
    }
    Ok(())
}

/// The thread that runs the active health checks of the current config's upstreams.
fn spawn_health_checks(
    shared: Arc<ArcSwap<Shared>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("health".into())
        .spawn(move || {
            let Some(rt) = crate::rt::thread_runtime("health checks") else {
                return;
            };
            let local = tokio::task::LocalSet::new();
            local.block_on(
                &rt,
                crate::upstream::health::run(
                    || shared.load().upstreams.values().cloned().collect(),
                    || stop.load(std::sync::atomic::Ordering::Relaxed),
                ),
            );
        })
        .map(drop)
}

/// Sockets a previous binary handed over that no worker took (it had more workers):
/// given to this one's workers too with `reuseport` (their queued connections are then
/// served, not lost); closed with a warning otherwise.
fn adopt_leftovers(acceptors: &mut [crate::net::WorkerAcceptor]) {
    let rest = crate::net::inherit::rest();
    if rest.is_empty() {
        return;
    }
    let mut i = 0;
    for (addr, l) in rest {
        let n = acceptors.len().max(1);
        match acceptors.get_mut(i % n) {
            Some(crate::net::WorkerAcceptor::Sockets(v)) => {
                if l.set_nonblocking(true).is_ok() {
                    v.push(l);
                    i += 1;
                    continue;
                }
                tracing::warn!("inherited socket {addr}: cannot make it non-blocking; closed");
            }
            _ => tracing::warn!(
                "inherited socket {addr} not used by this accept strategy; closed (its queued connections are reset)"
            ),
        }
    }
}

/// SIGHUP: re-read and swap. Listener, worker and log changes need a restart.
fn reload(
    path: &Option<PathBuf>,
    running: &Config,
    shared: &Arc<ArcSwap<Shared>>,
    generation: &mut u64,
) {
    let Some(path) = path else {
        tracing::warn!("SIGHUP: running on the embedded default config; nothing to reload");
        return;
    };
    let new = match config::load(path) {
        Ok((c, _)) => c,
        Err(e) => {
            tracing::error!("reload failed, keeping the running config: {e}");
            return;
        }
    };
    let old = shared.load_full();
    let caches = match caches::open_caches(&new, Some(&old.caches)) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("reload failed, keeping the running config: {e}");
            return;
        }
    };
    match Shared::build(&new, *generation + 1, Some(&old), caches) {
        Ok(s) => {
            *generation += 1;
            shared.store(Arc::new(s));
            // TLS and HTTP/2 settings of a listener apply at once (they live in the
            // swapped state); its address and backlog need a restart.
            let addrs = |c: &Config| -> Vec<(String, i32, bool)> {
                c.listen
                    .iter()
                    .map(|l| (l.addr.get_ref().clone(), l.backlog, l.deferred))
                    .collect()
            };
            if addrs(&new) != addrs(running)
                || new.workers != running.workers
                || new.accept != running.accept
            {
                tracing::warn!(
                    "reload: listen addresses, backlog and deferred, workers and accept changes take effect after a restart"
                );
            }
            if new.compress_pool != running.compress_pool {
                tracing::warn!("reload: [compress_pool] changes take effect after a restart");
            }
            if new.node_name != running.node_name || new.pid != running.pid {
                tracing::warn!("reload: node_name and pid changes take effect after a restart");
            }
            tracing::info!("configuration reloaded (generation {generation})");
        }
        Err(e) => tracing::error!("reload failed, keeping the running config: {e}"),
    }
}
