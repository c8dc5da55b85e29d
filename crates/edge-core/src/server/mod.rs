//! Server lifecycle: bind, start workers, wait for signals, reload, stop gracefully.
//!
//! Order matters: the error log opens, signals are registered, and every socket is bound
//! *before* any worker runs, so startup either fails early with one clear message or
//! comes up whole. Stops are nginx's two kinds: SIGQUIT is graceful (stop accepting, let
//! in-flight requests finish, bounded by `shutdown_timeout`); SIGTERM/SIGINT are fast
//! (stop accepting, give in-flight requests [`FAST_LINGER`], then close what is left).
//! Either way idle keep-alive connections close at once and the process exits 0. A
//! SIGTERM during a graceful stop makes it a fast one. SIGHUP re-reads the file and swaps
//! the compiled config atomically; a bad file is logged and the old config stays, and
//! each key that only a restart applies is logged with its `file:line` ([`reload`]).
//! SIGUSR1 reopens logs; SIGUSR2 hands the sockets to a new binary (`upgrade`), after
//! which this process stops gracefully and tells systemd only the new MAINPID.

mod idle_queue;
pub mod nofile;
mod parking;
pub mod reload;
pub mod upgrade;
pub mod worker;

use crate::config::validate::BadValue;
use crate::config::{self, Config, Workers};
use crate::metrics::Metrics;
use crate::net::{strategy_for, ListenSpec};
use crate::state::{caches, Current, Shared, StateError};
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

/// How long a fast stop (SIGTERM/SIGINT) lets requests already in flight run on: one
/// that ends within it is answered whole (with `Connection: close`); what is left then is
/// closed. Short, so `kill` and Ctrl-C act at once, yet long enough for the usual
/// sub-second response that was already on its way.
pub const FAST_LINGER: Duration = Duration::from_secs(1);

/// After the stop's deadline the workers are told to close what is left; how long they
/// may take to do it before the process exits anyway.
const ABORT_WAIT: Duration = Duration::from_secs(2);

/// Why the signal loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// SIGTERM/SIGINT: in-flight requests get [`FAST_LINGER`].
    Fast,
    /// SIGQUIT: in-flight requests finish, bounded by `shutdown_timeout`.
    Graceful,
    /// A new binary serves: drain as [`Stop::Graceful`], and leave systemd to it.
    HandedOver,
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
    let nofile::Sizing {
        worker_connections, ..
    } = nofile::worker_connections(workers, cfg.worker_connections, cfg.open_file_cache.max);
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

    // Signals first: a TERM or QUIT that arrives during startup must be a stop, not death.
    let signal_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(err("runtime"))?;
    let mut sigs = signal_rt
        .block_on(async {
            Ok::<_, std::io::Error>((
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
                signal(SignalKind::quit())?,
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
    // HTTP/3: one UDP socket per worker on each `quic` listener's address.
    let layout = crate::quic::cid::Layout::new(workers);
    let mut quic_socks: Vec<Vec<worker::quic::QuicSocket>> =
        (0..workers).map(|_| Vec::new()).collect();
    for (listen, (l, spec)) in cfg.listen.iter().zip(&listens).enumerate() {
        if !l.quic {
            continue;
        }
        let socks = crate::quic::socket::bind_workers(spec.addr, workers)
            .map_err(err("listen (quic, UDP)"))?;
        let steering = if !l.quic_bpf {
            "user"
        } else {
            match socks.first().map(|s| crate::quic::steer::attach(s, layout)) {
                Some(Ok(())) => "bpf",
                Some(Err(e)) => {
                    tracing::warn!(
                        "listen {}: quic_bpf: the kernel refused the steering program ({e}); datagrams of migrated clients are handed between workers in user space",
                        spec.addr
                    );
                    "user"
                }
                None => "user",
            }
        };
        crate::metrics::QuicStats::set_steering(steering == "bpf");
        tracing::info!(
            "listen {}: HTTP/3 (QUIC) on UDP, {workers} worker socket(s), steering: {steering}",
            spec.addr
        );
        let handoff = crate::quic::socket::Handoff::new(workers);
        for (id, sock) in socks.into_iter().enumerate() {
            quic_socks[id].push(worker::quic::QuicSocket {
                listen,
                sock,
                handoff: handoff.clone(),
                layout,
                gso: l.quic_gso,
            });
        }
    }
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
    let shared = Arc::new(Current::new(Shared::build(&cfg, 1, None, caches)?));
    let metrics = Arc::new(Metrics::new(workers));
    let aio = crate::aio::AioSetup::from_config(&cfg.aio);
    let compress = crate::compress::PoolSetup::from_config(&cfg.compress_pool);
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
                worker_connections,
            },
        )
        .map_err(err("admin listen"))?;
    }

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (abort_tx, abort_rx) = tokio::sync::watch::channel(false);
    let mut threads = Vec::with_capacity(workers);
    let mut quic_socks = quic_socks.into_iter();
    for (id, acceptor) in acceptors.into_iter().enumerate() {
        let spec = worker::WorkerSpec {
            id,
            cpu: cpus[id],
            acceptor,
            shared: shared.clone(),
            metrics: metrics.clone(),
            shutdown: stop_rx.clone(),
            abort: abort_rx.clone(),
            max_connections: worker_connections,
            multi_accept: cfg.multi_accept,
            aio: aio.clone(),
            compress: compress.clone(),
            quic: quic_socks.next().unwrap_or_default(),
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
    // systemd first (READY=1 and our MAINPID, before the old process hears from us and
    // hands the unit over), then the old process of a binary upgrade, which stops now.
    upgrade::sd_notify(&format!("READY=1\nMAINPID={}", std::process::id()));
    upgrade::signal_ready();

    let mut generation = 1;
    // The config in force: the start-up file, then each reload's as far as it applied.
    let mut running = cfg.clone();
    let mut upgrading: Option<upgrade::Upgrade> = None;
    let stop = signal_rt.block_on(async {
        let (term, int, quit, hup, usr1, usr2) = &mut sigs;
        loop {
            let tick = async {
                match upgrading {
                    Some(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = term.recv() => break Stop::Fast,
                _ = int.recv() => break Stop::Fast,
                _ = quit.recv() => break Stop::Graceful,
                _ = hup.recv() => {
                    upgrade::sd_notify("RELOADING=1");
                    reload(&config_path, &mut running, &shared, &mut generation);
                    upgrade::sd_notify("READY=1");
                }
                _ = usr1.recv() => {
                    log.reopen();
                    crate::log::access::reopen_all();
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
                            // The unit is the new process's now: no STOPPING=1 (with
                            // NotifyAccess=all systemd would stop the whole unit).
                            upgrade::sd_notify(&format!("MAINPID={pid}"));
                            break Stop::HandedOver;
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
    if stop != Stop::HandedOver {
        upgrade::sd_notify("STOPPING=1");
    }

    health_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = stop_tx.send(true);
    let linger = match stop {
        Stop::Fast => {
            tracing::info!(
                "fast shutdown: no new connections; in-flight requests get {FAST_LINGER:?}"
            );
            FAST_LINGER.min(running.shutdown_timeout.0)
        }
        Stop::Graceful | Stop::HandedOver => {
            tracing::info!("graceful shutdown: no new connections; waiting for in-flight requests (up to shutdown_timeout)");
            running.shutdown_timeout.0
        }
    };
    let finished =
        |threads: &[std::thread::JoinHandle<()>]| threads.iter().all(|t| t.is_finished());
    signal_rt.block_on(async {
        let (term, int, ..) = &mut sigs;
        let mut deadline = tokio::time::Instant::now() + linger;
        let mut fast = stop == Stop::Fast;
        while !finished(&threads) && tokio::time::Instant::now() < deadline {
            let (t, i) = (term.recv(), int.recv());
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                _ = t, if !fast => fast = true,
                _ = i, if !fast => fast = true,
            }
            if fast && deadline > tokio::time::Instant::now() + FAST_LINGER {
                tracing::info!("fast shutdown: in-flight requests get {FAST_LINGER:?}");
                deadline = tokio::time::Instant::now() + FAST_LINGER;
            }
        }
    });
    let left = metrics.active();
    if !finished(&threads) {
        // Past the deadline: the workers close what is left (their tasks are dropped,
        // so the clients see the connection close) and flush their logs.
        if left > 0 {
            tracing::warn!(
                "{left} connection(s) still open at the end of the shutdown; closing them"
            );
        }
        let _ = abort_tx.send(true);
        let until = Instant::now() + ABORT_WAIT;
        while !finished(&threads) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // The index snapshot needs a cache nobody writes to any more: only when every
    // worker stopped (a fill still running would be missing from it).
    let quiet = finished(&threads);
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
    shared: Arc<Current>,
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

/// SIGHUP: re-read and swap. `running` is the config in force; keys that need a restart
/// keep their running value in it, with one warning each ([`reload::plan`]).
fn reload(
    path: &Option<PathBuf>,
    running: &mut Config,
    shared: &Arc<Current>,
    generation: &mut u64,
) {
    let Some(path) = path else {
        tracing::warn!("SIGHUP: running on the embedded default config; nothing to reload");
        return;
    };
    let (new, src) = match config::load(path) {
        Ok(loaded) => loaded,
        Err(e) => {
            tracing::error!("reload failed, keeping the running config: {e}");
            return;
        }
    };
    let plan = reload::plan(running, &new, &src);
    let old = shared.load_full();
    let caches = match caches::open_caches(&new, Some(&old.caches)) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("reload failed, keeping the running config: {e}");
            return;
        }
    };
    // The state is built from the effective config: restart-only keys (a listener's
    // addr) as they run, and `[[listen]]` in the running order (connections carry the
    // index of the listener that accepted them).
    match Shared::build(&plan.effective, *generation + 1, Some(&old), caches) {
        Ok(s) => {
            *generation += 1;
            // Before the swap, so that whoever sees the new generation (/status) sees
            // its cache limits and its log lines too. TLS and HTTP/2 settings of a
            // listener apply with the swap (they live in the swapped state).
            caches::apply_live(&new, &s.caches);
            for e in &plan.restart {
                tracing::warn!("reload: {e}");
            }
            for a in &plan.applied {
                tracing::info!("reload: {a}");
            }
            shared.store(Arc::new(s));
            *running = plan.effective;
            tracing::info!("configuration reloaded (generation {generation})");
        }
        Err(e) => tracing::error!("reload failed, keeping the running config: {e}"),
    }
}
