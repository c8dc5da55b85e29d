//! Binary upgrade without a dropped connection (nginx's USR2 model), the pid file, and
//! systemd's readiness protocol.
//!
//! How it fits: on SIGUSR2 the running server ([`start`]) starts its own executable
//! again (the path it was started with, which a package upgrade has replaced) with the
//! same arguments, passing every listening socket (`EDGECACHE_INHERIT_FDS`, see
//! `net::inherit`) and the write end of a pipe (`EDGECACHE_UPGRADE_READY`). The new
//! process takes the sockets over (their accept queues included), starts its workers,
//! writes the pid file and one byte to the pipe ([`signal_ready`]). The old process,
//! polling [`Upgrade::poll`] from its signal loop, then stops as on SIGQUIT: it stops
//! accepting, drains its connections and exits, leaving the pid file to the new one. If
//! the new binary exits or says nothing within [`READY_TIMEOUT`] (a bad config, a
//! crash), the old one kills it and keeps serving; an error line says why.
//!
//! Under systemd (`Type=notify`, `NotifyAccess=all`) the unit must survive the swap: the
//! new process sends `READY=1` and `MAINPID=<its pid>` before it signals the pipe, and
//! the old one then sends only `MAINPID=<new pid>` (again, in case the first was lost)
//! and never `STOPPING=1`, which from any process of the unit would stop all of it.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The variable naming the descriptor the new process signals readiness on.
pub const READY_ENV: &str = "EDGECACHE_UPGRADE_READY";
/// How long the old process waits for the new one.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How this process was started, for starting it again.
#[derive(Clone, Debug)]
pub struct Exe {
    pub path: PathBuf,
    pub args: Vec<std::ffi::OsString>,
}

impl Exe {
    /// The executable by the path it was started with (made absolute now, so that a
    /// later change of directory does not matter), and its arguments.
    pub fn current() -> Exe {
        let mut argv = std::env::args_os();
        let arg0 = argv.next().map(PathBuf::from).unwrap_or_default();
        let path = if arg0.components().count() > 1 {
            std::env::current_dir()
                .map(|d| d.join(&arg0))
                .unwrap_or(arg0)
        } else {
            // Found through PATH: /proc/self/exe names it (even after it is replaced,
            // as "path (deleted)"; the path without the suffix is the new file).
            std::fs::read_link("/proc/self/exe")
                .map(|p| {
                    let s = p.to_string_lossy();
                    PathBuf::from(s.strip_suffix(" (deleted)").unwrap_or(&s).to_string())
                })
                .unwrap_or(arg0)
        };
        Exe {
            path,
            args: argv.collect(),
        }
    }
}

/// An upgrade in progress: the new process and the read end of its readiness pipe.
pub struct Upgrade {
    child: Child,
    ready: File,
    started: Instant,
}

/// What [`Upgrade::poll`] found.
pub enum UpgradeState {
    Waiting,
    /// The new process (this pid) serves: stop this one.
    Ready(u32),
    /// It failed: keep serving.
    Failed(String),
}

/// Starts the new binary with the listening sockets `fds`.
pub fn start(exe: &Exe, fds: &[RawFd]) -> io::Result<Upgrade> {
    let mut p = [0 as libc::c_int; 2];
    // SAFETY: `p` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both descriptors are new and owned here.
    let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
    let wfd = write_end.as_raw_fd();
    let list = fds
        .iter()
        .map(|f| f.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut keep: Vec<RawFd> = fds.to_vec();
    keep.push(wfd);
    let mut cmd = Command::new(&exe.path);
    cmd.args(&exe.args)
        .env(crate::net::inherit::INHERIT_ENV, &list)
        .env(READY_ENV, wfd.to_string());
    // SAFETY: the closure runs in the forked child before exec and only calls fcntl
    // (async-signal-safe) on descriptors that are open in the child (inherited copies
    // of ours), allocating nothing.
    unsafe {
        cmd.pre_exec(move || crate::net::inherit::keep_across_exec(&keep));
    }
    let child = cmd.spawn()?;
    drop(write_end); // the child has its copy; EOF on the pipe then means it is gone
    Ok(Upgrade {
        child,
        ready: File::from(read_end),
        started: Instant::now(),
    })
}

impl Upgrade {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Checks the new process without blocking.
    pub fn poll(&mut self) -> UpgradeState {
        let mut b = [0u8; 1];
        match self.ready.read(&mut b) {
            Ok(1) => return UpgradeState::Ready(self.child.id()),
            Ok(_) => {} // EOF: it closed the pipe without a word (exited, see below)
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return self.fail(format!("reading its readiness: {e}")),
        }
        match self.child.try_wait() {
            Ok(Some(st)) => {
                return UpgradeState::Failed(format!(
                    "the new binary exited ({st}) before it was ready"
                ))
            }
            Ok(None) => {}
            Err(e) => return self.fail(format!("waiting for it: {e}")),
        }
        if self.started.elapsed() > READY_TIMEOUT {
            return self.fail(format!("not ready within {READY_TIMEOUT:?}"));
        }
        UpgradeState::Waiting
    }

    fn fail(&mut self, why: String) -> UpgradeState {
        let _ = self.child.kill();
        let _ = self.child.wait();
        UpgradeState::Failed(why)
    }
}

/// In a process started by an upgrade: tells the old one that this one serves (once).
pub fn signal_ready() {
    let Ok(v) = std::env::var(READY_ENV) else {
        return;
    };
    // SAFETY: called once at start, before the server's threads read the environment.
    unsafe { std::env::remove_var(READY_ENV) };
    let Ok(fd) = v.parse::<RawFd>() else {
        return;
    };
    if fd <= 2 {
        return;
    }
    // SAFETY: the descriptor was passed to this process to own (the old process kept it
    // open across exec for us) and nothing else here uses it.
    let mut f = unsafe { File::from_raw_fd(fd) };
    if let Err(e) = f.write_all(b"1") {
        tracing::warn!("upgrade: could not tell the old process we are ready: {e}");
    }
}

/// Writes our pid to `path` (atomically: a temp file renamed over it).
pub fn write_pid(path: &Path) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, format!("{}\n", std::process::id()))?;
    std::fs::rename(&tmp, path)
}

/// Removes the pid file if it still names this process (a successor may own it now).
pub fn remove_pid(path: &Path) {
    if read_pid(path).is_ok_and(|p| p == std::process::id() as i32) {
        let _ = std::fs::remove_file(path);
    }
}

/// The pid a pid file names.
pub fn read_pid(path: &Path) -> io::Result<i32> {
    let text = std::fs::read_to_string(path)?;
    text.trim()
        .parse::<i32>()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a pid: {text:?}", path.display()),
            )
        })
}

/// `edgecache -s NAME`: the signal for each name (nginx's names, plus `upgrade`).
pub fn signal_named(name: &str) -> Option<libc::c_int> {
    Some(match name {
        "reload" => libc::SIGHUP,
        "stop" => libc::SIGTERM,
        "quit" => libc::SIGQUIT,
        "reopen" => libc::SIGUSR1,
        "upgrade" => libc::SIGUSR2,
        _ => return None,
    })
}

/// Sends `sig` to the process the pid file names; returns its pid.
pub fn signal_running(pid_file: &Path, sig: libc::c_int) -> Result<i32, String> {
    let pid = read_pid(pid_file)
        .map_err(|e| format!("cannot read the pid file {}: {e}", pid_file.display()))?;
    // SAFETY: kill(2) takes plain integers.
    if unsafe { libc::kill(pid, sig) } != 0 {
        let e = io::Error::last_os_error();
        return Err(format!("kill({pid}) from {}: {e}", pid_file.display()));
    }
    Ok(pid)
}

/// systemd's readiness protocol (`Type=notify`): sends `state` (`READY=1`,
/// `RELOADING=1`, `STOPPING=1`, `MAINPID=N`...) to `$NOTIFY_SOCKET` when it is set.
pub fn sd_notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let p = path.to_string_lossy();
    let res = if let Some(name) = p.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
            .and_then(|a| sock.send_to_addr(state.as_bytes(), &a))
    } else {
        sock.send_to(state.as_bytes(), &*p)
    };
    if let Err(e) = res {
        tracing::debug!("sd_notify({state:?}): {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_files_are_written_read_and_removed_only_by_their_owner() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run").join("edgecache.pid");
        write_pid(&p).unwrap();
        assert_eq!(read_pid(&p).unwrap(), std::process::id() as i32);
        std::fs::write(&p, "1\n").unwrap(); // a successor's
        remove_pid(&p);
        assert!(p.exists(), "not ours: kept");
        write_pid(&p).unwrap();
        remove_pid(&p);
        assert!(!p.exists());
        std::fs::write(&p, "garbage").unwrap();
        assert!(read_pid(&p).is_err());
    }

    #[test]
    fn sd_notify_reaches_the_socket() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("notify");
        let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        // SAFETY: this test alone uses NOTIFY_SOCKET (no other test reads it).
        unsafe { std::env::set_var("NOTIFY_SOCKET", &path) };
        sd_notify("READY=1");
        // SAFETY: as above.
        unsafe { std::env::remove_var("NOTIFY_SOCKET") };
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }

    #[test]
    fn a_new_process_that_exits_at_once_is_a_failed_upgrade() {
        let exe = Exe {
            path: PathBuf::from("/bin/false"),
            args: Vec::new(),
        };
        let mut u = start(&exe, &[]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match u.poll() {
                UpgradeState::Failed(why) => {
                    assert!(why.contains("exited"), "{why}");
                    break;
                }
                UpgradeState::Ready(_) => panic!("false is never ready"),
                UpgradeState::Waiting => {
                    assert!(Instant::now() < deadline);
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}
