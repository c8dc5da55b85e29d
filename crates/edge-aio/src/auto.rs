//! The `auto` backend: inline when it cannot block, the thread pool otherwise.
//!
//! How it fits: a cache hit is usually in the page cache, and handing it to a pool
//! thread then costs two context switches and halves the small-hit rate (nginx `aio
//! threads`, see docs/background.md). So a read first tries `preadv2(RWF_NOWAIT)` on
//! the loop: it copies what is cached and returns EAGAIN instead of waiting for the
//! disk. A warm read therefore costs exactly one syscall, as with `aio = off`. Only on
//! EAGAIN (or a filesystem without NOWAIT support, EOPNOTSUPP) does the read, or its
//! uncached remainder, go to the pool. tmpfs and ramfs refuse RWF_NOWAIT but keep their
//! files in memory, so there a refused read runs on the loop without the flag
//! (`sys::nowait_refused_in_memory`, one `fstatfs`): a cache on tmpfs would otherwise send every
//! hit through a pool thread.
//!
//! Why the pool and not io_uring: io_uring already tries a buffered read without
//! blocking before punting it to its own workers, so `io_uring` mode has this property
//! by itself (at the cost of a ring round trip on warm reads); `auto` is the variant
//! for kernels and sandboxes without io_uring, and keeps warm reads free of any
//! hand-off at all.
//!
//! Other operations:
//! - `open` tries `openat2(RESOLVE_CACHED)` inline: it succeeds when every path
//!   component is in the dentry cache (a hot cache file) and returns EAGAIN when the
//!   lookup would touch the disk, which then goes to the pool. Opens that create or
//!   truncate always go to the pool (the kernel refuses them under RESOLVE_CACHED). The
//!   server adds an fd cache on top (as nginx's `open_file_cache`), so most hits do not
//!   open at all. RESOLVE_CACHED covers the path walk only: opening a FIFO or a device
//!   inline could still block, which is fine for cache and static files (regular
//!   files) and is why other kinds of file should use `threads` or `off`.
//! - `stat` of an open file is inline: statx on an fd reads the in-memory inode.
//! - everything else (stat by path, write, fsync, rename, unlink, close) goes to the
//!   pool: those can wait on the disk or the journal and have no non-blocking form.
//!   Except buffered writes (a fill's body writes, and its commit,
//!   [`crate::Engine::blocking_write`]: the header and a small body written into the
//!   page cache, then a rename), which run inline while the kernel is far from
//!   throttling writers and no such write has slept lately (`write_gate.rs`;
//!   `aio.inline_writes = false` turns this off).
//! - O_DIRECT reads go to the pool: RWF_NOWAIT does not make a direct read avoid
//!   waiting for the device.

use crate::inflight::Keep;
use crate::pool::PoolEngine;
use crate::sys::{self, SysOp, MAX_RW};
use crate::write_gate::WriteGate;
use std::cell::Cell;
use std::ffi::c_char;
use std::os::fd::RawFd;
use std::rc::Rc;

/// `struct open_how` (linux/openat2.h); libc's is non-exhaustive.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(AT_FDCWD, path, flags | O_CLOEXEC, RESOLVE_CACHED)`: result or `-errno`.
///
/// # Safety
/// `path` must point to a NUL-terminated string that lives across the call.
unsafe fn open_cached(path: *const c_char, flags: i32) -> i64 {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: libc::RESOLVE_CACHED,
    };
    // SAFETY: `path` is valid per the caller; `how` is a live, correctly sized
    // open_how for the whole call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path,
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    sys::ret_or_errno(r)
}

/// `preadv2(fd, [buf, len], off, flags)`: result or `-errno`.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes across the call.
unsafe fn read_flags(fd: RawFd, buf: *mut u8, len: usize, off: u64, flags: i32) -> i64 {
    let iov = libc::iovec {
        iov_base: buf.cast(),
        iov_len: len.min(MAX_RW),
    };
    // SAFETY: one iovec describing memory valid per the caller.
    let r = unsafe { libc::preadv2(fd, &iov, 1, off as i64, flags) };
    sys::ret_or_errno(r as i64)
}

/// One worker's `auto` engine: inline attempts in front of a pool engine.
#[derive(Clone)]
pub(crate) struct AutoEngine {
    pool: PoolEngine,
    /// RWF_NOWAIT reads work on this kernel (cleared on ENOSYS).
    nowait: Rc<Cell<bool>>,
    /// openat2(RESOLVE_CACHED) works on this kernel (Linux 5.12+), probed once.
    cached_open: bool,
    /// When buffered writes may run on the loop (`write_gate.rs`); None with
    /// `aio.inline_writes = false`.
    gate: Option<Rc<WriteGate>>,
}

impl AutoEngine {
    pub(crate) fn new(pool: PoolEngine, inline_writes: bool) -> AutoEngine {
        // "/" is always in the dentry cache: only an old kernel fails this.
        // SAFETY: a static NUL-terminated path.
        let r = unsafe { open_cached(c"/".as_ptr(), libc::O_PATH) };
        if r >= 0 {
            // SAFETY: closing the fd just opened, owned by nobody else.
            unsafe { libc::close(r as RawFd) };
        }
        AutoEngine {
            pool,
            nowait: Rc::new(Cell::new(true)),
            cached_open: r >= 0,
            gate: inline_writes.then(|| Rc::new(WriteGate::default())),
        }
    }

    pub(crate) fn pool(&self) -> &PoolEngine {
        &self.pool
    }

    /// The write gate, if there is one and it is open now.
    pub(crate) fn open_gate(&self) -> Option<&WriteGate> {
        self.gate
            .as_deref()
            .filter(|g| g.open(std::time::Instant::now()))
    }

    pub(crate) async fn submit(&self, op: SysOp, keep: Keep) -> (i64, Keep) {
        let stats = self.pool.stats();
        match op {
            SysOp::Read {
                fd,
                buf,
                len,
                off,
                direct: false,
            } if self.nowait.get() => self.read(fd, buf, len, off, keep).await,
            SysOp::Open { path, flags, .. }
                if self.cached_open && flags & (libc::O_CREAT | libc::O_TRUNC) == 0 =>
            {
                // SAFETY: `path` points into `keep` (a CPath), alive in this frame.
                let r = unsafe { open_cached(path, flags) };
                if r == -(libc::EAGAIN as i64) || r == -(libc::EINVAL as i64) {
                    // Not cached; or EINVAL (e.g. O_DIRECT refused): the pool's plain
                    // open gives the authoritative answer.
                    stats.handoff();
                    self.pool.submit(op, keep).await
                } else {
                    stats.inline_hit();
                    (r, keep)
                }
            }
            SysOp::Write { .. } | SysOp::Writev { .. } => match self.open_gate() {
                // A buffered write into the page cache, while the kernel is far from
                // throttling writers (`write_gate.rs`).
                // SAFETY: the pointers in `op` point into `keep`, alive in this frame.
                Some(gate) => (gate.run(stats, || unsafe { op.run() }), keep),
                None => {
                    stats.handoff();
                    self.pool.submit(op, keep).await
                }
            },
            SysOp::Statx { dirfd, .. } if dirfd != libc::AT_FDCWD => {
                stats.inline_hit();
                // SAFETY: the pointers in `op` point into `keep`, alive in this frame.
                (unsafe { op.run() }, keep)
            }
            _ => {
                stats.handoff();
                self.pool.submit(op, keep).await
            }
        }
    }

    /// RWF_NOWAIT first; what is not cached goes to the pool. A file in memory (tmpfs,
    /// ramfs: they refuse RWF_NOWAIT) is read on the loop, as a cached one.
    async fn read(&self, fd: RawFd, buf: *mut u8, len: usize, off: u64, keep: Keep) -> (i64, Keep) {
        let stats = self.pool.stats();
        let len = len.min(MAX_RW);
        let mut got = 0usize;
        let mut flags = libc::RWF_NOWAIT;
        let err = loop {
            // SAFETY: `buf` has room for `len` bytes (the typed layer reserved them in
            // the buffer held by `keep`, alive in this frame) and `got < len`.
            let r = unsafe {
                read_flags(
                    fd,
                    buf.wrapping_add(got),
                    len - got,
                    off + got as u64,
                    flags,
                )
            };
            if r < 0 && flags != 0 && sys::nowait_refused_in_memory(-r as i32, fd) {
                flags = 0;
                continue;
            }
            if r > 0 {
                got += r as usize;
                if got < len {
                    continue; // partly cached: try the rest, or learn it is EOF
                }
            }
            if r >= 0 {
                stats.inline_hit();
                return (got as i64, keep);
            }
            break r;
        };
        if err == -(libc::ENOSYS as i64) {
            self.nowait.set(false); // no preadv2: never try again
        }
        stats.handoff();
        let rest = SysOp::Read {
            fd,
            buf: buf.wrapping_add(got),
            len: len - got,
            off: off + got as u64,
            direct: false,
        };
        let (r, keep) = self.pool.submit(rest, keep).await;
        match (got, r) {
            (0, r) => (r, keep),
            (got, r) if r > 0 => (got as i64 + r, keep),
            // What was read inline stands; the error will recur on the next read.
            (got, _) => (got as i64, keep),
        }
    }
}
