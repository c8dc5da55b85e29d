//! Reads from a file the caller only borrows (`&std::fs::File`), for callers whose files
//! come from elsewhere (the cache index hands out `File`s) and who cannot give the
//! engine an owned handle.
//!
//! Whatever runs inline needs no ownership: `off` reads with `pread(2)` and `auto` with
//! `preadv2(RWF_NOWAIT)` on the borrowed fd, so a warm read costs exactly one syscall.
//! Only a read that must leave the loop (every read under `threads` and `io_uring`,
//! and the uncached remainder under `auto`) duplicates the fd into an [`AioFile`] the
//! in-flight op owns: if the caller's future is dropped and its `File` closed, the fd
//! number may be reused at once, and a pool thread or the kernel must never read from
//! whatever file then holds it. The `dup(2)` costs one syscall on a path that is about
//! to wait for a thread or the disk anyway.

use crate::sys::{self, MAX_RW};
use crate::{AioFile, Engine, Mode};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Instant;

/// `pread` (or `preadv2` with `flags`) of `len` bytes into `buf[start..]`.
fn read_inline(file: &File, buf: &mut [u8], off: u64, flags: i32) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len().min(MAX_RW),
    };
    // SAFETY: `file` is open for the call (borrowed); one iovec describing `buf`, a
    // live, writable slice of exactly `iov_len` bytes or more.
    let r = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, off as i64, flags) };
    sys::to_result(sys::ret_or_errno(r as i64))
}

/// `RWF_NOWAIT` refused (EOPNOTSUPP) by a file that lives in memory (tmpfs, ramfs),
/// whose reads never wait for a device: read it on the loop, as a cached one.
fn refused_in_memory(e: &io::Error, file: &File) -> bool {
    e.raw_os_error()
        .is_some_and(|errno| sys::nowait_refused_in_memory(errno, file.as_raw_fd()))
}

impl Engine {
    /// Whether the byte at `offset` of `file` is in the page cache: a one-byte
    /// `preadv2(RWF_NOWAIT)`. The server asks this of the last byte of a range before
    /// `sendfile(2)`ing it on the loop (pages are cached and evicted mostly in file
    /// order, so a cached last page says the range is very likely cached); a range that
    /// is not goes through [`Engine::read_exact_at_file`] instead. False on kernels
    /// without RWF_NOWAIT; true for a file in memory (tmpfs, ramfs).
    pub fn is_cached(&self, file: &File, offset: u64) -> bool {
        let mut b = [0u8; 1];
        match read_inline(file, &mut b, offset, libc::RWF_NOWAIT) {
            Ok(n) => n == 1,
            // tmpfs and ramfs refuse RWF_NOWAIT; their pages are memory.
            Err(e) => refused_in_memory(&e, file),
        }
    }

    /// Sends up to `len` bytes of `file` from `offset` to the socket `sock` with
    /// `sendfile(2)`, on the pool: the disk wait of a cold range happens on a pool
    /// thread (as nginx's `aio threads` with `sendfile on` does) and the send stays
    /// zero-copy. `sock` must be non-blocking: the job sends until `len` bytes are out or
    /// the socket buffer is full, and returns the bytes sent; `WouldBlock` when it could
    /// send nothing (wait for writability, then call again). `Ok(0)` means the file
    /// ended. `first`: the response's first send (see `sys::sendfile_until_full`, which
    /// primes the kernel's readahead). Both descriptors are owned by the job (`Arc`s of handles the caller
    /// duplicated once per response), so a dropped future can never make a pool thread
    /// write to a reused fd. Under `off` the job runs inline.
    pub async fn sendfile(
        &self,
        sock: std::sync::Arc<std::os::fd::OwnedFd>,
        file: std::sync::Arc<File>,
        offset: u64,
        len: usize,
        first: bool,
    ) -> io::Result<usize> {
        let t0 = Instant::now();
        let r = self
            .blocking(move || sys::sendfile_until_full(&sock, &file, offset, len, first))
            .await?;
        self.stats.handoff();
        // A full socket is not a failed read: it counts as a read of nothing.
        let counted = match &r {
            Ok(n) => Ok(*n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(io::Error::from(e.kind())),
        };
        self.stats.read_done(&counted, t0.elapsed());
        r
    }

    /// Reads exactly `len` bytes of `file` at `offset`, appended to `buf`; returns the
    /// buffer in every case. A file that ends first is `UnexpectedEof` (the bytes read so
    /// far stay appended). See the module doc for which part runs where.
    pub async fn read_exact_at_file(
        &self,
        file: &File,
        offset: u64,
        len: usize,
        mut buf: Vec<u8>,
    ) -> (io::Result<()>, Vec<u8>) {
        let start = buf.len();
        let inline_flags = match self.mode() {
            Mode::Off => Some(0),
            Mode::Auto => Some(libc::RWF_NOWAIT),
            Mode::Threads | Mode::IoUring => None,
        };
        let mut got = 0usize;
        if let Some(mut flags) = inline_flags {
            let nowait = flags != 0;
            let t0 = Instant::now();
            buf.resize(start + len, 0);
            let res = loop {
                if got == len {
                    break Ok(());
                }
                match read_inline(file, &mut buf[start + got..], offset + got as u64, flags) {
                    Ok(0) => {
                        break Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "file shorter than expected",
                        ))
                    }
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if flags != 0 && refused_in_memory(&e, file) => flags = 0,
                    Err(e) => break Err(e),
                }
            };
            buf.truncate(start + got);
            let would_block = matches!(&res, Err(e) if flags != 0
                && (e.raw_os_error() == Some(libc::EAGAIN)
                    || e.raw_os_error() == Some(libc::EOPNOTSUPP)
                    || e.raw_os_error() == Some(libc::ENOSYS)));
            if !would_block {
                let counted = res
                    .as_ref()
                    .map(|_| got)
                    .map_err(|e| io::Error::from(e.kind()));
                self.stats.read_done(&counted, t0.elapsed());
                if nowait {
                    self.stats.inline_hit();
                }
                return (res, buf);
            }
            self.stats.handoff();
        }
        // Leave the loop with an fd the op owns.
        let owned = match file.try_clone() {
            Ok(f) => AioFile::from(f),
            Err(e) => return (Err(e), buf),
        };
        // Under `auto` this tries RWF_NOWAIT once more (the page may have arrived) and
        // hands off what is still uncached.
        let (res, buf) = self
            .read_exact_at(&owned, offset + got as u64, len - got, buf)
            .await;
        // The duplicate is closed when the last op holding it completes.
        drop(owned);
        (res, buf)
    }
}

/// An engine for the tests below: 2 pool threads, a queue of 8, a ring of 8.
#[cfg(test)]
fn test_engine(mode: Mode, queue: crate::QueueKind) -> Engine {
    let cfg = crate::EngineConfig {
        mode,
        threads: 2,
        max_queue: 8,
        queue,
        ring_entries: 8,
        inline_writes: true,
    };
    Engine::new(&cfg, &crate::SharedPool::new(&cfg)).unwrap().0
}

#[cfg(test)]
mod tests {
    use crate::{Mode, QueueKind};
    use std::io::Write;

    #[test]
    fn every_mode_reads_a_borrowed_file() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let (rt, local) = crate::test_runtime();
        for mode in [Mode::Off, Mode::Threads, Mode::IoUring, Mode::Auto] {
            let engine = super::test_engine(mode, QueueKind::Mutex);
            local.block_on(&rt, async {
                let (r, buf) = engine
                    .read_exact_at_file(&f, 1000, 150_000, b"head".to_vec())
                    .await;
                r.unwrap();
                assert_eq!(&buf[..4], b"head");
                assert_eq!(&buf[4..], &data[1000..151_000], "{mode:?}");
                let (r, buf) = engine.read_exact_at_file(&f, 199_990, 20, Vec::new()).await;
                assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
                assert_eq!(buf, &data[199_990..], "{mode:?}: the bytes read are kept");
                assert!(engine.is_cached(&f, 0), "a file just written is cached");
                assert!(!engine.is_cached(&f, 10_000_000), "past the end");
            });
            assert!(engine.stats().snapshot().reads >= 1, "{mode:?}");
        }
    }
}

#[cfg(test)]
mod blocking_tests {
    use crate::{Engine, Mode, QueueKind};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn engines() -> Vec<(Mode, Engine)> {
        [Mode::Off, Mode::Threads, Mode::IoUring, Mode::Auto]
            .into_iter()
            .map(|mode| (mode, super::test_engine(mode, QueueKind::LockFree)))
            .collect()
    }

    #[test]
    fn blocking_jobs_run_off_the_loop_return_values_and_survive_panics() {
        let (rt, local) = crate::test_runtime();
        for (mode, e) in engines() {
            local.block_on(&rt, async {
                let me = std::thread::current().id();
                let (v, ran_on) = e
                    .blocking(move || (21 * 2, std::thread::current().id()))
                    .await
                    .unwrap();
                assert_eq!(v, 42);
                assert_eq!(ran_on == me, mode == Mode::Off, "{mode:?}: where it ran");
                let err = e.blocking(|| panic!("boom")).await.unwrap_err();
                assert!(err.to_string().contains("panicked"), "{mode:?}");
                // A dropped future: the job still runs once, nothing leaks.
                let n = Arc::new(AtomicUsize::new(0));
                let n2 = n.clone();
                let fut = e.blocking(move || {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    n2.fetch_add(1, Ordering::SeqCst);
                });
                let _ = tokio::time::timeout(std::time::Duration::from_millis(1), fut).await;
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                assert_eq!(n.load(Ordering::SeqCst), 1, "{mode:?}");
                assert_eq!(e.stats().in_flight(), 0, "{mode:?}");
            });
        }
    }
}

#[cfg(test)]
mod sendfile_tests {
    use crate::{Mode, QueueKind};
    use std::io::{Read, Write};
    use std::os::fd::OwnedFd;
    use std::sync::Arc;

    /// A pool sendfile fills a non-blocking socket, says `WouldBlock` when it is full,
    /// resumes where it stopped, and `Ok(0)` at the end of the file; the peer reads
    /// exactly the file's bytes.
    #[test]
    fn sendfile_jobs_send_the_file_and_stop_at_a_full_socket() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&data).unwrap();
        let f = Arc::new(f);
        let (rt, local) = crate::test_runtime();
        for mode in [Mode::Off, Mode::Threads, Mode::IoUring, Mode::Auto] {
            let engine = super::test_engine(mode, QueueKind::Mutex);
            let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
            a.set_nonblocking(true).unwrap();
            let sock = Arc::new(OwnedFd::from(a));
            let mut got = Vec::new();
            local.block_on(&rt, async {
                // From byte 5: the first job primes readahead with a read before it.
                let (mut off, mut saw_full) = (5usize, false);
                while off < data.len() {
                    let first = off == 5;
                    match engine
                        .sendfile(sock.clone(), f.clone(), off as u64, data.len() - off, first)
                        .await
                    {
                        Ok(n) => {
                            assert!(n > 0, "{mode:?}: progress before the end");
                            off += n;
                        }
                        Err(e) => {
                            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{mode:?}");
                            saw_full = true;
                            let mut buf = vec![0u8; 1 << 20];
                            let n = b.read(&mut buf).unwrap();
                            got.extend_from_slice(&buf[..n]);
                        }
                    }
                }
                assert!(saw_full, "{mode:?}: 3 MB cannot fit a socket buffer");
                let end = engine
                    .sendfile(sock.clone(), f.clone(), off as u64, 10, false)
                    .await;
                assert_eq!(end.unwrap(), 0, "{mode:?}: end of file");
            });
            drop(sock);
            b.read_to_end(&mut got).unwrap();
            assert!(got == data[5..], "{mode:?}: the peer got the file's bytes");
            assert!(engine.stats().snapshot().reads >= 1, "{mode:?}");
        }
    }
}
