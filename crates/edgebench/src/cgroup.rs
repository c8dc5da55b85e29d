//! Cold-disk plumbing: per-server cgroup v1 memory limits and dropping the page cache.
//!
//! How it fits: an experiment with `memory_limit = "192m"` runs every server in its own
//! memory cgroup (`/sys/fs/cgroup/memory/edgebench-<pid>-<server>/`), so the page cache
//! a server may fill is bounded and a working set larger than the limit is read from
//! disk. The child joins its cgroup between fork and exec ([`MemCgroup::join_current`],
//! next to the CPU pinning), so the server, its threads and whatever it forks (nginx
//! workers) are inside before it serves. The cgroup is removed when the [`MemCgroup`]
//! is dropped, after the processes in it were stopped. `drop_caches = true` calls
//! [`drop_caches`] before each measured cell. Both need root: [`preflight`] refuses
//! before anything starts.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Context, Error, Result};

/// Where the cgroup v1 memory controller is mounted on most distributions.
pub const MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";
/// How long removal waits for the last process of a cgroup to go.
const REMOVE_WAIT: Duration = Duration::from_secs(5);

/// Refuses, as a usage error (exit 2), an experiment this process cannot run:
/// `drop_caches` or `memory_limit` without root, `memory_limit` without a cgroup v1
/// memory controller at `memory_root`.
pub fn preflight(
    name: &str,
    drop_caches: bool,
    memory_limit: Option<u64>,
    euid: u32,
    memory_root: &Path,
) -> Result<()> {
    let needs: Vec<&str> = [
        drop_caches.then_some("drop_caches = true (echo 3 > /proc/sys/vm/drop_caches)"),
        memory_limit
            .is_some()
            .then_some("memory_limit (a memory cgroup per server)"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !needs.is_empty() && euid != 0 {
        return Err(Error::usage(format!(
            "experiment {name:?} needs root for {}; run it as root (sudo target/release/edgebench {name}) \
             on a machine you may disturb",
            needs.join(" and ")
        )));
    }
    if memory_limit.is_some() && !memory_root.join("memory.limit_in_bytes").is_file() {
        return Err(Error::usage(format!(
            "experiment {name:?} sets memory_limit, but there is no cgroup v1 memory controller at {} \
             (no memory.limit_in_bytes there); mount one (mount -t cgroup -o memory cgroup {}) or drop memory_limit",
            memory_root.display(),
            memory_root.display()
        )));
    }
    Ok(())
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches`: clean page cache, dentries and inodes.
pub fn drop_caches() -> Result<()> {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").ctx("echo 3 > /proc/sys/vm/drop_caches")
}

/// One server's memory cgroup; removed on drop.
#[derive(Debug)]
pub struct MemCgroup {
    dir: PathBuf,
    removed: bool,
}

impl MemCgroup {
    /// Creates `<root>/<name>` with `memory.limit_in_bytes = limit`.
    pub fn create(root: &Path, name: &str, limit: u64) -> Result<MemCgroup> {
        let dir = root.join(name);
        std::fs::create_dir(&dir).ctx(format!("creating cgroup {}", dir.display()))?;
        let cg = MemCgroup {
            dir,
            removed: false,
        };
        std::fs::write(cg.dir.join("memory.limit_in_bytes"), limit.to_string()).ctx(format!(
            "setting {}/memory.limit_in_bytes",
            cg.dir.display()
        ))?;
        Ok(cg)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// See [`join_current`].
    pub fn join_current(&self) -> impl Fn() -> std::io::Result<()> + Send + Sync + 'static {
        join_current(&self.dir)
    }

    fn read_u64(&self, file: &str) -> Option<u64> {
        std::fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Bytes charged now (`memory.usage_in_bytes`: RSS plus page cache).
    pub fn usage(&self) -> Option<u64> {
        self.read_u64("memory.usage_in_bytes")
    }

    /// Processes the cgroup's OOM killer killed (`oom_kill` in `memory.oom_control`;
    /// None on kernels that do not count them).
    pub fn oom_kills(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.dir.join("memory.oom_control")).ok()?;
        parse_oom_kills(&text)
    }

    /// Pids still in the cgroup.
    fn procs(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Removes the cgroup once its processes are gone (waits up to [`REMOVE_WAIT`]);
    /// a cgroup that will not go is reported, not fatal. Idempotent.
    pub fn remove(&mut self) {
        if self.removed {
            return;
        }
        let start = Instant::now();
        loop {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) if start.elapsed() > REMOVE_WAIT => {
                    eprintln!(
                        "edgebench: WARNING: could not remove cgroup {} ({e}; pids left: {:?})",
                        self.dir.display(),
                        self.procs()
                    );
                    break;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        self.removed = true;
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A closure for `CommandExt::pre_exec` that moves the calling (child) process into the
/// cgroup `dir` by writing its own pid to `cgroup.procs`. The path is built before fork;
/// the closure makes only getpid/open/write/close syscalls (async-signal-safe).
pub fn join_current(dir: &Path) -> impl Fn() -> std::io::Result<()> + Send + Sync + 'static {
    let path = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes()).unwrap_or_default();
    move || {
        // SAFETY: getpid has no preconditions; `path` is a valid NUL-terminated string
        // owned by the closure; `buf` outlives the write.
        unsafe {
            let mut buf = [0u8; 24];
            let n = format_u32(libc::getpid() as u32, &mut buf);
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let rc = libc::write(fd, buf.as_ptr().cast(), n);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if rc != n as isize {
                return Err(err);
            }
        }
        Ok(())
    }
}

/// Writes `n` in decimal into `buf` without allocating; returns the length.
fn format_u32(mut n: u32, buf: &mut [u8; 24]) -> usize {
    let mut tmp = [0u8; 10];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let len = tmp.len() - i;
    buf[..len].copy_from_slice(&tmp[i..]);
    buf[len] = b'\n';
    len + 1
}

fn parse_oom_kills(oom_control: &str) -> Option<u64> {
    oom_control
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
}

/// This process's effective uid.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_format_without_allocating() {
        let mut b = [0u8; 24];
        let n = format_u32(0, &mut b);
        assert_eq!(&b[..n], b"0\n");
        let n = format_u32(4_294_967_295, &mut b);
        assert_eq!(&b[..n], b"4294967295\n");
    }

    #[test]
    fn oom_kills_are_read_from_oom_control() {
        let text = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(parse_oom_kills(text), Some(2));
        assert_eq!(parse_oom_kills("oom_kill_disable 0\n"), None);
    }

    #[test]
    fn preflight_refuses_without_root_or_cgroups() {
        let fake = tempfile::tempdir().unwrap();
        // Nothing asked: fine for anyone.
        preflight("x", false, None, 1000, fake.path()).unwrap();
        let e = preflight("aio", true, None, 1000, fake.path()).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.msg.contains("root") && e.msg.contains("drop_caches"),
            "{}",
            e.msg
        );
        let e = preflight("aio", false, Some(1 << 27), 1000, fake.path()).unwrap_err();
        assert!(e.msg.contains("memory_limit"), "{}", e.msg);
        // Root but no memory controller there.
        let e = preflight("aio", false, Some(1 << 27), 0, fake.path()).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.msg.contains("cgroup v1 memory controller"), "{}", e.msg);
        std::fs::write(fake.path().join("memory.limit_in_bytes"), "0").unwrap();
        preflight("aio", true, Some(1 << 27), 0, fake.path()).unwrap();
    }

    #[test]
    fn create_writes_the_limit() {
        let fake = tempfile::tempdir().unwrap();
        let cg = MemCgroup::create(fake.path(), "edgebench-1-x", 192 << 20).unwrap();
        assert_eq!(
            std::fs::read_to_string(cg.dir().join("memory.limit_in_bytes")).unwrap(),
            (192u64 << 20).to_string()
        );
        assert!(
            MemCgroup::create(fake.path(), "edgebench-1-x", 1).is_err(),
            "exists"
        );
        std::mem::forget(cg); // a plain directory with files: rmdir would only warn
    }

    /// On a machine with the controller and root: a child really lands in the cgroup,
    /// and the cgroup goes away after it exits.
    #[test]
    fn a_child_joins_the_cgroup_before_exec() {
        let root = Path::new(MEMORY_ROOT);
        if euid() != 0 || !root.join("memory.limit_in_bytes").is_file() {
            eprintln!("skipped: needs root and {MEMORY_ROOT}");
            return;
        }
        use std::os::unix::process::CommandExt;
        let name = format!("edgebench-test-{}", std::process::id());
        let cg = MemCgroup::create(root, &name, 64 << 20).unwrap();
        let mut cmd = std::process::Command::new("cat");
        cmd.arg("/proc/self/cgroup");
        // SAFETY: join_current only makes async-signal-safe syscalls.
        unsafe { cmd.pre_exec(cg.join_current()) };
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.lines()
                .any(|l| l.contains(":memory:") && l.ends_with(&format!("/{name}"))),
            "{text}"
        );
        let dir = cg.dir().to_path_buf();
        drop(cg);
        assert!(!dir.exists(), "cgroup removed");
    }
}
