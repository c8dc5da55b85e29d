//! Shared by the integration tests: the backend matrix, a runtime per test, a pattern
//! file, poll-once, and /proc counters.
#![allow(dead_code)]

use edge_aio::{Engine, EngineConfig, Mode, QueueKind, SharedPool};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

/// Every backend a test body runs on.
#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Off,
    ThreadsMutex,
    ThreadsLockFree,
    IoUring,
    Auto,
}

pub fn config(b: Backend) -> EngineConfig {
    let base = EngineConfig {
        threads: 4,
        max_queue: 1024,
        ring_entries: 64,
        ..EngineConfig::default()
    };
    match b {
        Backend::Off => EngineConfig {
            mode: Mode::Off,
            ..base
        },
        Backend::ThreadsMutex => EngineConfig {
            mode: Mode::Threads,
            queue: QueueKind::Mutex,
            ..base
        },
        Backend::ThreadsLockFree => EngineConfig {
            mode: Mode::Threads,
            queue: QueueKind::LockFree,
            ..base
        },
        Backend::IoUring => EngineConfig {
            mode: Mode::IoUring,
            ..base
        },
        Backend::Auto => EngineConfig {
            mode: Mode::Auto,
            ..base
        },
    }
}

/// Runs `body` on a fresh worker-like runtime (current thread + LocalSet) with an
/// engine for `cfg`. An io_uring engine that fell back (the kernel refuses io_uring
/// here) fails the test, unless `EDGECACHE_TEST_ALLOW_FALLBACK=1`, when the test is
/// not run and the run prints so; returns whether it ran.
pub fn run_cfg<F, Fut>(cfg: EngineConfig, body: F) -> bool
where
    F: FnOnce(Engine) -> Fut,
    Fut: Future<Output = ()>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    let pool = SharedPool::new(&cfg);
    let (engine, fallback) = Engine::new(&cfg, &pool).unwrap();
    if let Some(why) = fallback {
        assert_eq!(cfg.mode, Mode::IoUring);
        edge_testkit::fallback("an io_uring test did not run", &why.to_string());
        return false;
    }
    assert_eq!(engine.mode(), cfg.mode);
    local.block_on(&rt, body(engine));
    true
}

pub fn run<F, Fut>(b: Backend, body: F)
where
    F: FnOnce(Engine) -> Fut,
    Fut: Future<Output = ()>,
{
    run_cfg(config(b), body);
}

/// `len` bytes no two nearby offsets share (so a read at the wrong offset shows).
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8 ^ (i >> 8) as u8)
        .collect()
}

/// A temp dir with `data` written to `name` in it.
pub fn file_with(data: &[u8], name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, data).unwrap();
    (dir, path)
}

/// Polls `fut` once (starting its operation) and returns it, boxed, to drop later.
pub async fn start<F: Future>(fut: F) -> Pin<Box<F>> {
    let mut fut = Box::pin(fut);
    std::future::poll_fn(|cx| {
        let _ = fut.as_mut().poll(cx);
        Poll::Ready(())
    })
    .await;
    fut
}

/// Waits (bounded) until the engine has nothing in flight.
pub async fn drained(e: &Engine) {
    for _ in 0..10_000 {
        if e.stats().in_flight() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("in-flight count stuck at {}", e.stats().in_flight());
}

/// Open fds of this process.
pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// fds of this process that are io_uring instances.
pub fn ring_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy() == "anon_inode:[io_uring]")
        .count()
}

/// Threads of this process whose name starts with `aio-`.
pub fn aio_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|c| c.starts_with("aio-"))
        .count()
}

/// A FIFO whose reader blocks in open(2) until a writer comes: a way to hold a pool
/// thread busy for as long as a test needs. Dropping it (even while unwinding) opens
/// the writer side, so the blocked thread is always released.
pub struct Fifo {
    pub path: PathBuf,
    released: bool,
}

impl Fifo {
    pub fn new(dir: &Path) -> Fifo {
        let path = dir.join("fifo");
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        Fifo {
            path,
            released: false,
        }
    }

    /// Unblocks the reader's open. A non-blocking writer open succeeds only once a
    /// reader waits (ENXIO before), so retry for a while: the pool thread may have
    /// taken the job but not entered open(2) yet.
    pub fn release(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        for _ in 0..5000 {
            if self.released {
                return;
            }
            let w = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&self.path);
            self.released = w.is_ok();
            if !self.released {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        self.release();
    }
}

/// Waits (bounded) until `cond` holds.
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("timed out waiting for {what}");
}
