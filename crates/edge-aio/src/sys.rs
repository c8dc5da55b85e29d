//! The syscalls, described once and executed three ways.
//!
//! How it fits: every operation is first written down as a [`SysOp`], a plain
//! description holding raw pointers into memory that the engine owns (the caller's
//! buffer, a path, a `statx` record). The `off` backend runs it inline with
//! [`SysOp::run`], a pool thread runs the very same function, and the io_uring backend
//! turns it into an SQE (`uring.rs`). Results travel as the kernel's convention: a
//! non-negative value, or `-errno`.
//!
//! Also here: owned heap objects addressed by raw pointer ([`CPath`], [`HeapStatx`]),
//! so that moving their owner never asserts uniqueness over memory a pool thread or the
//! kernel may be writing, and the eventfd helpers.

use std::ffi::{c_char, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;

/// One syscall with its arguments. Pointers refer to memory that outlives the call: an
/// in-flight slot of the submitting engine (pool, io_uring) or the caller's frame
/// (inline).
#[derive(Clone, Copy, Debug)]
pub(crate) enum SysOp {
    /// `openat(AT_FDCWD, path, flags | O_CLOEXEC, mode)`; the result is a new fd.
    Open {
        path: *const c_char,
        flags: i32,
        mode: u32,
    },
    /// `statx(dirfd, path, flags, STATX_BASIC_STATS | STATX_DIOALIGN, buf)`.
    Statx {
        dirfd: RawFd,
        path: *const c_char,
        flags: i32,
        buf: *mut libc::statx,
    },
    /// `pread(fd, buf, len, off)`. `direct` says the fd has O_DIRECT (auto mode never
    /// tries those inline: a direct read always waits for the device).
    Read {
        fd: RawFd,
        buf: *mut u8,
        len: usize,
        off: u64,
        direct: bool,
    },
    /// `pwrite(fd, buf, len, off)`.
    Write {
        fd: RawFd,
        buf: *const u8,
        len: usize,
        off: u64,
    },
    /// `pwritev(fd, iov, cnt, off)`.
    Writev {
        fd: RawFd,
        iov: *const libc::iovec,
        cnt: usize,
        off: u64,
    },
    /// `fsync(fd)`, or `fdatasync(fd)` when `datasync`.
    Fsync { fd: RawFd, datasync: bool },
    /// `renameat(AT_FDCWD, from, AT_FDCWD, to)`.
    Rename {
        from: *const c_char,
        to: *const c_char,
    },
    /// `unlinkat(AT_FDCWD, path, 0)`.
    Unlink { path: *const c_char },
    /// `close(fd)`; the fd was released by its owner before the op was built.
    Close { fd: RawFd },
    /// A blocking closure (several syscalls that belong together, such as a cache
    /// commit); only ever run by a pool thread or inline, never put on a ring.
    Call { f: *mut (dyn FnMut() -> i64 + Send) },
}

// SAFETY: a `SysOp` is a description; its pointers are only dereferenced by `run` (or
// the kernel), whose callers guarantee the pointed-to memory stays owned by the
// submitting engine until the result has been delivered back to it. Handing the
// description to a pool thread is exactly the purpose of the type.
unsafe impl Send for SysOp {}

/// The mask asked of every statx: the basic fields plus direct I/O alignment (Linux
/// 6.1+; older kernels leave the bit clear in `stx_mask`, see `file.rs`).
pub(crate) const STATX_MASK: u32 = libc::STATX_BASIC_STATS | libc::STATX_DIOALIGN;

/// Largest single read or write, as Linux caps it (`MAX_RW_COUNT`); io_uring takes a
/// `u32` length.
pub(crate) const MAX_RW: usize = 0x7fff_f000;

impl SysOp {
    /// Whether a successful result is a new fd that must be closed if nobody takes it
    /// (the future of an `open` was dropped while the open was in flight).
    pub(crate) fn returns_fd(&self) -> bool {
        matches!(self, SysOp::Open { .. })
    }

    /// Runs the syscall on this thread, blocking. Returns the result or `-errno`.
    /// `EINTR` is retried, except for `close` (Linux has released the fd either way).
    ///
    /// # Safety
    /// Every pointer in `self` must be valid for the access the syscall makes (reads of
    /// NUL-terminated paths, writes of `len` bytes or one `statx`, reads of `cnt`
    /// `iovec`s and the memory they name) for the whole call,
    /// and no Rust reference may alias the written memory meanwhile.
    pub(crate) unsafe fn run(&self) -> i64 {
        loop {
            // SAFETY: the caller's contract above: every pointer in `self` is valid for
            // the access its syscall makes for the whole call, unaliased; `Call`'s `f`
            // points to a live closure (see `SysOp::Call`).
            let ret: i64 = unsafe {
                match *self {
                    SysOp::Open { path, flags, mode } => {
                        libc::openat(libc::AT_FDCWD, path, flags | libc::O_CLOEXEC, mode) as i64
                    }
                    SysOp::Statx {
                        dirfd,
                        path,
                        flags,
                        buf,
                    } => libc::statx(dirfd, path, flags, STATX_MASK, buf) as i64,
                    SysOp::Read {
                        fd, buf, len, off, ..
                    } => libc::pread64(fd, buf.cast(), len.min(MAX_RW), off as i64) as i64,
                    SysOp::Write { fd, buf, len, off } => {
                        libc::pwrite64(fd, buf.cast(), len.min(MAX_RW), off as i64) as i64
                    }
                    SysOp::Writev { fd, iov, cnt, off } => {
                        libc::pwritev(fd, iov, cnt as libc::c_int, off as i64) as i64
                    }
                    SysOp::Fsync { fd, datasync } => {
                        if datasync {
                            libc::fdatasync(fd) as i64
                        } else {
                            libc::fsync(fd) as i64
                        }
                    }
                    SysOp::Rename { from, to } => {
                        libc::renameat(libc::AT_FDCWD, from, libc::AT_FDCWD, to) as i64
                    }
                    SysOp::Unlink { path } => libc::unlinkat(libc::AT_FDCWD, path, 0) as i64,
                    SysOp::Close { fd } => return ret_or_errno(libc::close(fd) as i64),
                    SysOp::Call { f } => return (*f)(),
                }
            };
            let ret = ret_or_errno(ret);
            if ret != -(libc::EINTR as i64) {
                return ret;
            }
        }
    }
}

/// Maps the libc convention (`-1` and `errno`) to the kernel's (`-errno`).
pub(crate) fn ret_or_errno(ret: i64) -> i64 {
    if ret < 0 {
        -(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO) as i64)
    } else {
        ret
    }
}

/// The kernel convention back to Rust: `-errno` becomes an `io::Error`.
pub(crate) fn to_result(res: i64) -> io::Result<usize> {
    if res < 0 {
        Err(io::Error::from_raw_os_error((-res) as i32))
    } else {
        Ok(res as usize)
    }
}

/// Whether `fd`'s file lives in memory (tmpfs, ramfs): its reads never wait for a
/// device (only for swap), so they may run on the loop although such filesystems
/// refuse `RWF_NOWAIT` (EOPNOTSUPP). One `fstatfs(2)`; false when that fails.
fn memory_backed(fd: RawFd) -> bool {
    // SAFETY: `statfs` is plain data, for which all-zero bytes are a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: writes one `statfs` into a live local; `fd` is the caller's open fd.
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return false;
    }
    matches!(st.f_type as i64, TMPFS_MAGIC | RAMFS_MAGIC)
}

/// Whether a read of `fd` that `RWF_NOWAIT` refused with `errno` may run on the loop
/// without the flag: the refusal is EOPNOTSUPP (no NOWAIT support) and the file is
/// in memory ([`memory_backed`]).
pub(crate) fn nowait_refused_in_memory(errno: i32, fd: RawFd) -> bool {
    errno == libc::EOPNOTSUPP && memory_backed(fd)
}

/// `f_type` of tmpfs and of ramfs (linux/magic.h).
const TMPFS_MAGIC: i64 = 0x0102_1994;
const RAMFS_MAGIC: i64 = 0x8584_58f6;

/// An owned NUL-terminated path, addressed by raw pointer (see the module doc).
pub(crate) struct CPath(NonNull<c_char>);

impl CPath {
    /// Copies `path`; a path with an interior NUL is `InvalidInput`.
    pub(crate) fn new(path: &Path) -> io::Result<CPath> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
        // `into_raw` never returns null.
        Ok(CPath(
            NonNull::new(c.into_raw()).expect("CString::into_raw"),
        ))
    }

    pub(crate) fn as_ptr(&self) -> *const c_char {
        self.0.as_ptr()
    }
}

impl Drop for CPath {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `CString::into_raw` in `new` and is given back
        // exactly once, here.
        drop(unsafe { CString::from_raw(self.0.as_ptr()) });
    }
}

/// An owned `statx` record on the heap, addressed by raw pointer (see the module doc).
pub(crate) struct HeapStatx(NonNull<libc::statx>);

impl HeapStatx {
    pub(crate) fn new() -> HeapStatx {
        // SAFETY: `statx` is plain integers, for which all-zero bytes are a valid value.
        let zero: libc::statx = unsafe { std::mem::zeroed() };
        HeapStatx(NonNull::from(Box::leak(Box::new(zero))))
    }

    pub(crate) fn as_mut_ptr(&self) -> *mut libc::statx {
        self.0.as_ptr()
    }

    /// A copy of the record. Call only once the statx that fills it has completed.
    pub(crate) fn get(&self) -> libc::statx {
        // SAFETY: the pointer is a live, aligned Box allocation; the op that wrote it
        // has completed (its result was delivered), so nothing writes it concurrently.
        unsafe { *self.0.as_ptr() }
    }
}

impl Drop for HeapStatx {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `Box::leak` in `new` and is freed once, here.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// A non-blocking, close-on-exec eventfd.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with no pointer arguments.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(os_error("eventfd()"));
    }
    // SAFETY: `fd` was just returned by eventfd() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd's counter, waking its reader.
pub(crate) fn eventfd_signal(fd: &impl AsRawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local; the fd is kept open by the caller.
    // The only failure (EAGAIN at a counter near u64::MAX) leaves it readable anyway.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Resets an eventfd's counter (non-blocking read; EAGAIN when already zero).
pub(crate) fn eventfd_reset(fd: &impl AsRawFd) {
    let mut n: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live local; the fd is kept open by the caller.
    unsafe { libc::read(fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
}

/// Blocks until `fd` is readable (used only when an engine is dropped with operations
/// still in flight and must wait for them).
pub(crate) fn wait_readable(fd: &impl AsRawFd) {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; EINTR just returns early and the caller loops.
    unsafe { libc::poll(&mut pfd, 1, -1) };
}

/// The last OS error, with the call's name in front ("eventfd() failed: ...").
pub(crate) fn os_error(call: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{call} failed: {e}"))
}

/// `sendfile(2)` from `file` at `offset` to the non-blocking socket `sock` until `len`
/// bytes are sent, the file ends or the socket buffer is full. Returns the bytes sent;
/// `WouldBlock` only when none could be.
///
/// `prime`, for the first send of a response that starts past the file's first byte
/// (a cache object's body follows its header): one byte is read just before `offset`
/// first. A fresh open file's first read at a page other than 0 looks random to the
/// kernel, which then reads it in single pages (`page_cache_ra_unbounded`); after the
/// one-byte read the send is sequential and gets the large-folio readahead that nginx
/// gets from reading the header first. Measured with perf on a cold 256 KiB cell:
/// readahead cost per request roughly halves.
pub(crate) fn sendfile_until_full(
    sock: &std::os::fd::OwnedFd,
    file: &std::fs::File,
    offset: u64,
    len: usize,
    prime: bool,
) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    if prime && offset > 0 {
        let mut b = 0u8;
        // SAFETY: `file` is owned by the caller; one live byte to read into.
        let _ = unsafe {
            libc::pread64(
                file.as_raw_fd(),
                (&mut b as *mut u8).cast(),
                1,
                offset as i64 - 1,
            )
        };
    }
    let mut off = offset as libc::off_t;
    let mut sent = 0usize;
    while sent < len {
        let want = (len - sent).min(MAX_RW);
        // SAFETY: both fds are owned by the caller for the whole call; `off` is a valid
        // off_t the kernel reads and advances; no user buffer is passed.
        let n = unsafe { libc::sendfile(sock.as_raw_fd(), file.as_raw_fd(), &mut off, want) };
        match n {
            0 => break,
            n if n > 0 => sent += n as usize,
            _ => {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock if sent > 0 => break,
                    _ => return Err(e),
                }
            }
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_is_negated() {
        let p = CPath::new(Path::new("/definitely/not/here")).unwrap();
        let op = SysOp::Unlink { path: p.as_ptr() };
        // SAFETY: `p` lives across the call.
        assert_eq!(unsafe { op.run() }, -(libc::ENOENT as i64));
        assert!(to_result(-(libc::ENOENT as i64)).is_err());
        assert_eq!(to_result(7).unwrap(), 7);
    }

    #[test]
    fn nul_in_path_is_invalid_input() {
        let e = CPath::new(Path::new("a\0b")).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn eventfd_signal_and_reset() {
        let fd = eventfd().unwrap();
        eventfd_signal(&fd);
        eventfd_signal(&fd);
        wait_readable(&fd); // returns at once: the counter is 2
        eventfd_reset(&fd);
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into a live local.
        let r = unsafe { libc::read(fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
        assert_eq!(r, -1, "counter was reset");
    }

    #[test]
    fn heap_statx_round_trip() {
        let s = HeapStatx::new();
        let dot = CPath::new(Path::new(".")).unwrap();
        let op = SysOp::Statx {
            dirfd: libc::AT_FDCWD,
            path: dot.as_ptr(),
            flags: 0,
            buf: s.as_mut_ptr(),
        };
        // SAFETY: `s` and `dot` live across the call.
        assert_eq!(unsafe { op.run() }, 0);
        assert_eq!(
            s.get().stx_mode as u32 & libc::S_IFMT,
            libc::S_IFDIR,
            "'.' is a directory"
        );
    }
}
