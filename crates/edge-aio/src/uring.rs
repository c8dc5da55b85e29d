//! The `io_uring` backend: one ring per worker.
//!
//! How it fits: an operation becomes an SQE whose `user_data` is its in-flight slot
//! (`inflight.rs`). SQEs are only pushed, not submitted: the first push of a loop turn
//! wakes the engine's driver task, which runs after the tasks already scheduled in that
//! turn and enters the kernel once for everything pushed meanwhile (one
//! `io_uring_enter` per turn, not per op). It then reaps the completion queue at once,
//! since buffered reads of cached pages complete inside the submit call.
//!
//! The ring has an eventfd registered (`IORING_REGISTER_EVENTFD`) that the driver waits
//! on through the worker's tokio reactor, so a completion needs no thread of ours.
//!
//! Limits: when the submission queue is full, it is submitted right away and the push
//! retried. Operations in flight are capped at the completion queue's size, so the CQ
//! cannot overflow; an op beyond the cap runs inline and counts as an overflow, the
//! same rule as the pool's full queue.
//!
//! At creation the opcodes used are probed; a kernel that refuses io_uring (ENOSYS,
//! EPERM from `io_uring_disabled` or seccomp) or lacks an opcode yields a [`Fallback`],
//! and the caller builds a pool engine instead. `EDGECACHE_URING_DISABLE=1` forces it.

use crate::inflight::{Core, Keep, Source};
use crate::stats::AioStats;
use crate::sys::{self, SysOp, MAX_RW, STATX_MASK};
use io_uring::{opcode, squeue, types, IoUring, Probe};
use std::cell::RefCell;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;

/// Setting this environment variable to `1` makes every io_uring engine fall back to
/// the thread pool (for tests, and for kernels whose io_uring misbehaves).
pub const URING_DISABLE_ENV: &str = "EDGECACHE_URING_DISABLE";

/// Why an `io_uring` engine became a `threads` engine. Log it once.
#[derive(Debug)]
pub enum Fallback {
    /// `EDGECACHE_URING_DISABLE=1`.
    DisabledByEnv,
    /// A setup call failed: ENOSYS (no io_uring), EPERM (disabled by sysctl or
    /// seccomp), ENOMEM (locked memory limit), ...
    Setup { call: &'static str, err: io::Error },
    /// The kernel's io_uring lacks an opcode we use.
    MissingOpcode(&'static str),
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fallback::DisabledByEnv => write!(f, "io_uring disabled by {URING_DISABLE_ENV}=1"),
            Fallback::Setup { call, err } => write!(f, "{call} failed: {err}"),
            Fallback::MissingOpcode(op) => write!(f, "io_uring lacks IORING_OP_{op}"),
        }?;
        write!(f, "; file I/O uses the thread pool")
    }
}

/// The opcodes this backend issues.
const NEEDED: [(u8, &str); 9] = [
    (opcode::OpenAt::CODE, "OPENAT"),
    (opcode::Statx::CODE, "STATX"),
    (opcode::Read::CODE, "READ"),
    (opcode::Write::CODE, "WRITE"),
    (opcode::Writev::CODE, "WRITEV"),
    (opcode::Fsync::CODE, "FSYNC"),
    (opcode::RenameAt::CODE, "RENAMEAT"),
    (opcode::UnlinkAt::CODE, "UNLINKAT"),
    (opcode::Close::CODE, "CLOSE"),
];

/// The notify-fd handle the reactor holds; keeps the eventfd open.
pub(crate) struct RcFd(Rc<OwnedFd>);

impl AsRawFd for RcFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A ring as an in-flight [`Source`].
pub(crate) struct UringSource {
    ring: RefCell<IoUring>,
    efd: Rc<OwnedFd>,
    cq_cap: usize,
}

impl UringSource {
    fn new(entries: u32) -> Result<UringSource, Fallback> {
        if std::env::var_os(URING_DISABLE_ENV).is_some_and(|v| v == "1") {
            return Err(Fallback::DisabledByEnv);
        }
        let setup = |call| move |err| Fallback::Setup { call, err };
        let ring = IoUring::new(entries.max(1)).map_err(setup("io_uring_setup()"))?;
        let mut probe = Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(setup("io_uring_register(PROBE)"))?;
        if let Some(&(_, name)) = NEEDED.iter().find(|(code, _)| !probe.is_supported(*code)) {
            return Err(Fallback::MissingOpcode(name));
        }
        let efd = sys::eventfd().map_err(setup("eventfd()"))?;
        ring.submitter()
            .register_eventfd(efd.as_raw_fd())
            .map_err(setup("io_uring_register(EVENTFD)"))?;
        let cq_cap = ring.params().cq_entries() as usize;
        Ok(UringSource {
            ring: RefCell::new(ring),
            efd: Rc::new(efd),
            cq_cap,
        })
    }
}

/// The SQE for an op. Pointers are copied as they are (see `push`'s SAFETY note).
fn sqe(op: &SysOp) -> squeue::Entry {
    let cwd = types::Fd(libc::AT_FDCWD);
    match *op {
        SysOp::Open { path, flags, mode } => opcode::OpenAt::new(cwd, path)
            .flags(flags | libc::O_CLOEXEC)
            .mode(mode)
            .build(),
        SysOp::Statx {
            dirfd,
            path,
            flags,
            buf,
        } => opcode::Statx::new(types::Fd(dirfd), path, buf.cast())
            .flags(flags)
            .mask(STATX_MASK)
            .build(),
        SysOp::Read {
            fd, buf, len, off, ..
        } => opcode::Read::new(types::Fd(fd), buf, len.min(MAX_RW) as u32)
            .offset(off)
            .build(),
        SysOp::Write { fd, buf, len, off } => {
            opcode::Write::new(types::Fd(fd), buf, len.min(MAX_RW) as u32)
                .offset(off)
                .build()
        }
        SysOp::Writev { fd, iov, cnt, off } => opcode::Writev::new(types::Fd(fd), iov, cnt as u32)
            .offset(off)
            .build(),
        SysOp::Fsync { fd, datasync } => {
            let flags = if datasync {
                types::FsyncFlags::DATASYNC
            } else {
                types::FsyncFlags::empty()
            };
            opcode::Fsync::new(types::Fd(fd)).flags(flags).build()
        }
        SysOp::Rename { from, to } => opcode::RenameAt::new(cwd, from, cwd, to).build(),
        SysOp::Unlink { path } => opcode::UnlinkAt::new(cwd, path).build(),
        SysOp::Close { fd } => opcode::Close::new(types::Fd(fd)).build(),
        // The engine sends closures to its pool, never to the ring; a no-op keeps
        // this total.
        SysOp::Call { .. } => opcode::Nop::new().build(),
    }
}

impl Source for UringSource {
    type Notify = RcFd;

    const REAP_AFTER_FLUSH: bool = true;

    fn notify(&self) -> RcFd {
        RcFd(self.efd.clone())
    }

    fn push(&self, token: usize, op: &SysOp, outstanding: usize) -> Result<bool, ()> {
        if outstanding >= self.cq_cap {
            return Err(());
        }
        let entry = sqe(op).user_data(token as u64);
        let mut ring = self.ring.borrow_mut();
        let was_empty = ring.submission().is_empty();
        loop {
            // SAFETY: every pointer in the entry (buffer, path, statx record) points
            // into memory owned by the op's in-flight slot, which is freed only after
            // this entry's CQE has been reaped; the engine waits for all CQEs before
            // the slab or the ring is dropped. Fds are kept open by the slot's file
            // handle the same way.
            if unsafe { ring.submission().push(&entry) }.is_ok() {
                return Ok(was_empty);
            }
            // The SQ is full: hand it to the kernel now and retry.
            match ring.submit() {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(_) => return Err(()),
            }
        }
    }

    fn flush(&self) -> bool {
        let mut ring = self.ring.borrow_mut();
        loop {
            if ring.submission().is_empty() {
                return false;
            }
            match ring.submit() {
                Ok(_) => return !ring.submission().is_empty(),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                // EAGAIN / EBUSY: reap completions first, retry next turn.
                Err(_) => return true,
            }
        }
    }

    fn reap(&self, reset: bool, out: &mut Vec<(usize, i64)>) {
        if reset {
            sys::eventfd_reset(&*self.efd);
        }
        let mut ring = self.ring.borrow_mut();
        out.extend(
            ring.completion()
                .map(|cqe| (cqe.user_data() as usize, cqe.result() as i64)),
        );
    }

    fn wait(&self) {
        // Submits anything still queued and waits for one completion; EINTR returns
        // early and the caller loops.
        let _ = self.ring.borrow().submit_and_wait(1);
    }
}

/// One worker's `io_uring` engine.
#[derive(Clone)]
pub(crate) struct UringEngine {
    core: Rc<Core<UringSource>>,
}

impl UringEngine {
    pub(crate) fn new(entries: u32, stats: std::sync::Arc<AioStats>) -> Result<Self, Fallback> {
        Ok(UringEngine {
            core: Rc::new(Core::new(UringSource::new(entries)?, stats)),
        })
    }

    pub(crate) async fn submit(&self, op: SysOp, keep: Keep) -> (i64, Keep) {
        self.core.submit(op, keep).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_reasons_read_well() {
        let s = Fallback::MissingOpcode("RENAMEAT").to_string();
        assert_eq!(
            s,
            "io_uring lacks IORING_OP_RENAMEAT; file I/O uses the thread pool"
        );
        let e = Fallback::Setup {
            call: "io_uring_setup()",
            err: io::Error::from_raw_os_error(libc::EPERM),
        };
        assert!(e.to_string().starts_with("io_uring_setup() failed: "));
    }

    /// Pushing more SQEs than the ring holds submits and retries instead of failing,
    /// and the CQE of each carries its token back.
    #[test]
    fn sq_full_submits_and_retries() {
        let src = match UringSource::new(2) {
            Ok(s) => s,
            Err(f) => {
                edge_testkit::fallback("sq_full_submits_and_retries did not run", &f.to_string());
                return;
            }
        };
        // Two SQ slots, four CQ slots: pushes 3 and 4 find the SQ full.
        for token in 0..4 {
            let op = SysOp::Fsync {
                fd: -1,
                datasync: true,
            };
            assert!(src.push(token, &op, token).is_ok());
        }
        src.flush();
        let mut got = Vec::new();
        while got.len() < 4 {
            src.wait();
            src.reap(true, &mut got);
        }
        got.sort();
        let tokens: Vec<usize> = got.iter().map(|p| p.0).collect();
        assert_eq!(tokens, vec![0, 1, 2, 3]);
        assert!(got.iter().all(|&(_, r)| r == -(libc::EBADF as i64)));
        let op = SysOp::Close { fd: -1 };
        assert!(
            src.push(9, &op, src.cq_cap).is_err(),
            "capped at the CQ size"
        );
    }
}
