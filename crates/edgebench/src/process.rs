//! Child processes the runner owns: own process group, optional CPU pinning, output to a
//! log file, and stopped (group-wide) on drop.
//!
//! How it fits: the origin, every server under test and every load run is a
//! [`Spawned`]. Each one leads its own process group, so Ctrl-C at the terminal reaches
//! edgebench only, and stopping a server also stops what it forked (nginx workers,
//! the Varnish child). Dropping a [`Spawned`] sends SIGTERM to the group, waits up to
//! [`STOP_GRACE`], then sends SIGKILL: early returns, errors and panics all clean up.

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::cpus::CpuSet;
use crate::error::{Context, Error, Result};
use crate::interrupt;

/// How long a stopped process gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(3);
/// Bytes of a log shown in error messages.
const LOG_TAIL: usize = 2000;

/// What to start.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    /// Short name for messages and the log file name (`<dir>/<name>.log`).
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Working directory; the log file goes here too.
    pub dir: PathBuf,
    pub cpus: Option<CpuSet>,
    pub env: Vec<(String, String)>,
    /// A cgroup directory the child joins before exec (see [`crate::cgroup`]).
    pub cgroup: Option<PathBuf>,
}

/// A running child that is stopped when dropped.
pub struct Spawned {
    pub name: String,
    child: Child,
    log: PathBuf,
    exited: Option<ExitStatus>,
}

impl Spawned {
    pub fn spawn(spec: &SpawnSpec) -> Result<Spawned> {
        interrupt::check()?;
        let log = spec.dir.join(format!("{}.log", spec.name));
        let out = File::create(&log).ctx(format!("creating {}", log.display()))?;
        let err = out.try_clone().ctx("dup log file")?;
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .current_dir(&spec.dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        if let Some(cpus) = &spec.cpus {
            // SAFETY: the closure makes a single sched_setaffinity syscall on a mask built
            // before fork; it allocates nothing and takes no locks (async-signal-safe).
            unsafe { cmd.pre_exec(cpus.pin_current()) };
        }
        if let Some(dir) = &spec.cgroup {
            // SAFETY: the closure only makes getpid/open/write/close syscalls on a path
            // built before fork (async-signal-safe); see cgroup::join_current.
            unsafe { cmd.pre_exec(crate::cgroup::join_current(dir)) };
        }
        let child = cmd.spawn().map_err(|e| {
            Error::runtime(format!(
                "{}: cannot start {}: {e}",
                spec.name,
                spec.program.display()
            ))
        })?;
        Ok(Spawned {
            name: spec.name.clone(),
            child,
            log,
            exited: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last [`LOG_TAIL`] bytes of what the process wrote.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(LOG_TAIL);
        String::from_utf8_lossy(&text[start..]).into_owned()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Exit status if it has exited (reaps it).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// Waits until `addr` accepts connections. Fails early if the process exits, on
    /// timeout, or on a stop signal; the error carries the log tail.
    pub fn wait_port(&mut self, addr: SocketAddr, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            interrupt::check()?;
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if let Some(st) = self.try_wait() {
                return Err(Error::runtime(format!(
                    "{} exited ({st}) before listening on {addr}; its log ({}):\n{}",
                    self.name,
                    self.log.display(),
                    self.log_tail()
                )));
            }
            if start.elapsed() > timeout {
                return Err(Error::runtime(format!(
                    "{} not listening on {addr} after {timeout:?}; its log ({}):\n{}",
                    self.name,
                    self.log.display(),
                    self.log_tail()
                )));
            }
            std::thread::sleep(interrupt::POLL);
        }
    }

    /// Waits for the process to exit on its own, up to `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let start = Instant::now();
        loop {
            interrupt::check()?;
            if let Some(st) = self.try_wait() {
                return Ok(st);
            }
            if start.elapsed() > timeout {
                return Err(Error::runtime(format!(
                    "{} still running after {timeout:?}",
                    self.name
                )));
            }
            std::thread::sleep(interrupt::POLL);
        }
    }

    /// SIGTERM to the whole group, SIGKILL after [`STOP_GRACE`]. Idempotent.
    pub fn stop(&mut self) {
        let pgid = self.child.id() as libc::pid_t;
        if self.try_wait().is_none() {
            signal_group(pgid, libc::SIGTERM);
            let start = Instant::now();
            while self.try_wait().is_none() && start.elapsed() < STOP_GRACE {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        // Stragglers: forked workers that outlived their leader, or a leader that
        // ignored SIGTERM. The group id cannot be reused while any member is alive.
        signal_group(pgid, libc::SIGKILL);
        if self.exited.is_none() {
            self.exited = self.child.wait().ok();
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.stop();
    }
}

fn signal_group(pgid: libc::pid_t, sig: libc::c_int) {
    if pgid <= 1 {
        return; // never signal "every process" (0/-1) by accident
    }
    // SAFETY: kill(2) has no memory-safety preconditions; a negative pid addresses the
    // process group we created with process_group(0), whose id is the child's pid.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dir: &Path, program: &str, args: &[&str]) -> SpawnSpec {
        SpawnSpec {
            name: "t".into(),
            program: program.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            dir: dir.to_path_buf(),
            cpus: None,
            env: vec![],
            cgroup: None,
        }
    }

    fn alive(pid: u32) -> bool {
        // A zombie still has a /proc entry; look at its state.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(s) => !s
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z'),
            Err(_) => false,
        }
    }

    #[test]
    fn output_goes_to_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Spawned::spawn(&spec(
            dir.path(),
            "sh",
            &["-c", "echo hello; echo oops >&2"],
        ))
        .unwrap();
        assert!(p.wait(Duration::from_secs(10)).unwrap().success());
        let log = p.log_tail();
        assert!(log.contains("hello") && log.contains("oops"), "{log}");
    }

    /// Dropping stops the leader and whatever it forked (the group), even when the
    /// leader ignores SIGTERM.
    #[test]
    fn drop_stops_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        let script = format!(
            "trap '' TERM; sleep 60 & echo $! > {}; wait",
            pidfile.display()
        );
        let p = Spawned::spawn(&spec(dir.path(), "sh", &["-c", &script])).unwrap();
        let leader = p.pid();
        let start = Instant::now();
        while !pidfile.exists() || std::fs::read_to_string(&pidfile).unwrap().trim().is_empty() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "grandchild never started"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let grandchild: u32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(alive(grandchild));
        drop(p);
        assert!(!alive(leader), "leader survived");
        let start = Instant::now();
        while alive(grandchild) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "grandchild {grandchild} survived"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn wait_port_reports_an_early_exit_with_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Spawned::spawn(&spec(
            dir.path(),
            "sh",
            &["-c", "echo bad config >&2; exit 2"],
        ))
        .unwrap();
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let e = p.wait_port(addr, Duration::from_secs(10)).unwrap_err();
        assert!(
            e.msg.contains("exited") && e.msg.contains("bad config"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn a_missing_program_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = Spawned::spawn(&spec(dir.path(), "/nonexistent/edgecache", &[]))
            .err()
            .unwrap();
        assert!(e.msg.contains("/nonexistent/edgecache"), "{}", e.msg);
    }
}
