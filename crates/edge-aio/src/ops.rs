//! The operations, typed: each builds a [`SysOp`] whose pointers point into what it
//! hands the engine to own ([`Keep`]), submits it through [`Engine::submit`] (the one
//! backend `match`), and turns the raw result back into Rust values.
//!
//! Reads append to the buffer (after its current length); the buffer is always given
//! back, with whatever was read before an error. Paths are copied into owned C strings
//! that live as long as the operation.

use crate::buf::{round_up, AlignedBuf, Buf, IoBuf};
use crate::file::{AioFile, DioAlign, DirectMode, Metadata, OpenOptions};
use crate::gather::{write_progress, Gather};
use crate::inflight::Keep;
use crate::sys::{to_result, CPath, HeapStatx, SysOp, MAX_RW};
use crate::Engine;
use bytes::Bytes;
use std::io;
use std::ops::Range;
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::path::Path;
use std::time::Instant;

impl Engine {
    /// Opens `path`. With [`OpenOptions::direct`] on a filesystem that refuses
    /// O_DIRECT (EINVAL), the file is reopened without it and
    /// [`AioFile::direct`] says [`DirectMode::Refused`].
    pub async fn open(&self, path: impl AsRef<Path>, opts: &OpenOptions) -> io::Result<AioFile> {
        let path = CPath::new(path.as_ref())?;
        let (flags, mode) = (opts.flags(), opts.mode_bits());
        let (res, path) = self.open_raw(path, flags, mode).await;
        if res == -(libc::EINVAL as i64) && opts.wants_direct() {
            self.stats.direct_refused();
            let (res, _) = self.open_raw(path, flags & !libc::O_DIRECT, mode).await;
            return to_result(res)
                .map(|fd| AioFile::from_new_raw(fd as RawFd, DirectMode::Refused));
        }
        let direct = if opts.wants_direct() {
            DirectMode::On
        } else {
            DirectMode::Off
        };
        to_result(res).map(|fd| AioFile::from_new_raw(fd as RawFd, direct))
    }

    async fn open_raw(&self, path: CPath, flags: i32, mode: u32) -> (i64, CPath) {
        let op = SysOp::Open {
            path: path.as_ptr(),
            flags,
            mode,
        };
        let (res, keep) = self.submit(op, Keep::Path(path)).await;
        self.stats.other_done(res >= 0);
        match keep {
            Keep::Path(p) => (res, p),
            _ => unreachable!("an op returns what it was given"),
        }
    }

    /// fstat: size, inode, device, mtime and direct I/O alignment of an open file.
    pub async fn stat(&self, file: &AioFile) -> io::Result<Metadata> {
        let sx = HeapStatx::new();
        let op = SysOp::Statx {
            dirfd: file.as_raw_fd(),
            path: c"".as_ptr(),
            flags: libc::AT_EMPTY_PATH | libc::AT_STATX_SYNC_AS_STAT,
            buf: sx.as_mut_ptr(),
        };
        self.statx(op, Keep::Stat(Some(file.clone()), None, sx))
            .await
    }

    /// stat by path (following symlinks).
    pub async fn stat_path(&self, path: impl AsRef<Path>) -> io::Result<Metadata> {
        let (path, sx) = (CPath::new(path.as_ref())?, HeapStatx::new());
        let op = SysOp::Statx {
            dirfd: libc::AT_FDCWD,
            path: path.as_ptr(),
            flags: libc::AT_STATX_SYNC_AS_STAT,
            buf: sx.as_mut_ptr(),
        };
        self.statx(op, Keep::Stat(None, Some(path), sx)).await
    }

    async fn statx(&self, op: SysOp, keep: Keep) -> io::Result<Metadata> {
        let (res, keep) = self.submit(op, keep).await;
        self.stats.other_done(res >= 0);
        to_result(res)?;
        match keep {
            Keep::Stat(_, _, sx) => Ok(Metadata::from_statx(&sx.get())),
            _ => unreachable!("an op returns what it was given"),
        }
    }

    /// The direct I/O alignment of `file` (statx STATX_DIOALIGN, else
    /// [`DioAlign::FALLBACK`]).
    pub async fn dio_alignment(&self, file: &AioFile) -> io::Result<DioAlign> {
        Ok(self.stat(file).await?.dio_align())
    }

    /// Reads up to `len` bytes at `offset`, appended to `buf`. `Ok(0)` is end of file;
    /// a shorter count is possible (call again, or use [`Engine::read_exact_at`]).
    /// On an O_DIRECT file the buffer address, offset and length must be aligned
    /// (else EINVAL): use [`Engine::read_aligned`].
    pub async fn read_at<B: IoBuf>(
        &self,
        file: &AioFile,
        offset: u64,
        len: usize,
        buf: B,
    ) -> (io::Result<usize>, B) {
        let start = Instant::now();
        let mut buf = buf.into_buf();
        let len = len.min(MAX_RW);
        let op = SysOp::Read {
            fd: file.as_raw_fd(),
            buf: buf.read_target(len),
            len,
            off: offset,
            direct: file.direct() == DirectMode::On,
        };
        let (res, keep) = self.submit(op, Keep::Buf(file.clone(), buf)).await;
        let Keep::Buf(_, mut buf) = keep else {
            unreachable!("an op returns what it was given")
        };
        let res = to_result(res);
        if let Ok(n) = res {
            // SAFETY: the read completed and put `n <= len` bytes at the target that
            // `read_target(len)` reserved.
            unsafe { buf.commit(n.min(len)) };
        }
        self.stats.read_done(&res, start.elapsed());
        (res, B::from_buf(buf))
    }

    /// Reads exactly `len` bytes at `offset`, appended to `buf`. A file that ends first
    /// is `UnexpectedEof` (the bytes read so far stay appended).
    pub async fn read_exact_at<B: IoBuf>(
        &self,
        file: &AioFile,
        offset: u64,
        len: usize,
        mut buf: B,
    ) -> (io::Result<()>, B) {
        let mut got = 0;
        while got < len {
            let (res, b) = self
                .read_at(file, offset + got as u64, len - got, buf)
                .await;
            buf = b;
            match res {
                Ok(0) => {
                    let e =
                        io::Error::new(io::ErrorKind::UnexpectedEof, "file shorter than expected");
                    return (Err(e), buf);
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return (Err(e), buf),
            }
        }
        (Ok(()), buf)
    }

    /// Reads `len` bytes at `offset` the way O_DIRECT needs: the range is widened to
    /// multiples of `buf.align()` (allocate `buf` with [`DioAlign::granule`]), read into
    /// `buf` from its start (it is cleared first), and the requested bytes are returned
    /// as a window into it, shortened at end of file. Works on any file; on an O_DIRECT
    /// one it bypasses the page cache.
    pub async fn read_aligned(
        &self,
        file: &AioFile,
        offset: u64,
        len: usize,
        mut buf: AlignedBuf,
    ) -> (io::Result<Range<usize>>, AlignedBuf) {
        let a = buf.align();
        let start = offset & !(a as u64 - 1);
        let lead = (offset - start) as usize;
        let want = round_up(lead + len, a);
        buf.clear();
        let mut got = 0;
        while got < want {
            let (res, b) = self
                .read_at(file, start + got as u64, want - got, buf)
                .await;
            buf = b;
            match res {
                Ok(0) => break,
                Ok(n) => {
                    got += n;
                    if n % a != 0 {
                        break; // an unaligned short read only happens at end of file
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return (Err(e), buf),
            }
        }
        let end = (lead + len).min(got);
        (Ok(lead.min(end)..end), buf)
    }

    /// Writes the whole of `buf` at `offset` in one syscall; returns how much was
    /// written (possibly less). See [`Engine::write_all_at`].
    pub async fn write_at<B: IoBuf>(
        &self,
        file: &AioFile,
        offset: u64,
        buf: B,
    ) -> (io::Result<usize>, B) {
        let (res, buf) = self.write_from(file, offset, buf.into_buf(), 0).await;
        (res, B::from_buf(buf))
    }

    /// Writes all of `buf` at `offset`.
    pub async fn write_all_at<B: IoBuf>(
        &self,
        file: &AioFile,
        offset: u64,
        buf: B,
    ) -> (io::Result<()>, B) {
        let mut buf = buf.into_buf();
        let mut done = 0;
        while done < buf.len() {
            let (res, b) = self.write_from(file, offset + done as u64, buf, done).await;
            buf = b;
            match write_progress(res) {
                Ok(n) => done += n,
                Err(e) => return (Err(e), B::from_buf(buf)),
            }
        }
        (Ok(()), B::from_buf(buf))
    }

    /// Writes `buf[from..]` at `offset`.
    async fn write_from(
        &self,
        file: &AioFile,
        offset: u64,
        buf: Buf,
        from: usize,
    ) -> (io::Result<usize>, Buf) {
        let (ptr, len) = buf.write_source(from);
        let op = SysOp::Write {
            fd: file.as_raw_fd(),
            buf: ptr,
            len,
            off: offset,
        };
        let (res, keep) = self.submit(op, Keep::Buf(file.clone(), buf)).await;
        let Keep::Buf(_, buf) = keep else {
            unreachable!("an op returns what it was given")
        };
        let res = to_result(res);
        self.stats.write_done(&res);
        (res, buf)
    }

    /// Writes every byte of `parts`, in order, at `offset`, by `pwritev(2)` (one call
    /// unless it is short or there are more than 1,024 parts), without copying them into
    /// one buffer: a cache fill writes the slices of its upstream read buffer as they
    /// are. Returns the parts in every case.
    pub async fn write_all_gathered_at(
        &self,
        file: &AioFile,
        offset: u64,
        parts: Vec<Bytes>,
    ) -> (io::Result<()>, Vec<Bytes>) {
        let mut g = Gather::new(parts);
        let mut done = 0;
        while done < g.len() {
            let (iov, cnt) = g.iovecs_from(done);
            let op = SysOp::Writev {
                fd: file.as_raw_fd(),
                iov,
                cnt,
                off: offset + done as u64,
            };
            let (res, keep) = self.submit(op, Keep::Gather(file.clone(), g)).await;
            let Keep::Gather(_, back) = keep else {
                unreachable!("an op returns what it was given")
            };
            g = back;
            let res = to_result(res);
            self.stats.write_done(&res);
            match write_progress(res) {
                Ok(n) => done += n,
                Err(e) => return (Err(e), g.into_parts()),
            }
        }
        (Ok(()), g.into_parts())
    }

    /// fsync(2): data and metadata reach the disk.
    pub async fn fsync(&self, file: &AioFile) -> io::Result<()> {
        self.sync(file, false).await
    }

    /// fdatasync(2): data (and the size) reach the disk.
    pub async fn fdatasync(&self, file: &AioFile) -> io::Result<()> {
        self.sync(file, true).await
    }

    async fn sync(&self, file: &AioFile, datasync: bool) -> io::Result<()> {
        let op = SysOp::Fsync {
            fd: file.as_raw_fd(),
            datasync,
        };
        self.unit(op, Keep::File(file.clone())).await
    }

    /// rename(2) (replaces `to` atomically).
    pub async fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
        let (from, to) = (CPath::new(from.as_ref())?, CPath::new(to.as_ref())?);
        let op = SysOp::Rename {
            from: from.as_ptr(),
            to: to.as_ptr(),
        };
        self.unit(op, Keep::Paths(from, to)).await
    }

    /// unlink(2).
    pub async fn unlink(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let path = CPath::new(path.as_ref())?;
        let op = SysOp::Unlink {
            path: path.as_ptr(),
        };
        self.unit(op, Keep::Path(path)).await
    }

    /// Closes `file` through the engine (off the loop for `threads`/`io_uring`/`auto`),
    /// if this is its last handle. If clones remain (or an operation still holds it),
    /// this only drops this handle and the fd closes with the last one.
    pub async fn close(&self, file: AioFile) -> io::Result<()> {
        match file.into_fd() {
            Ok(fd) => {
                // The raw fd is submitted in this same poll: no await in between.
                let op = SysOp::Close {
                    fd: fd.into_raw_fd(),
                };
                self.unit(op, Keep::None).await
            }
            Err(shared) => {
                drop(shared);
                Ok(())
            }
        }
    }

    async fn unit(&self, op: SysOp, keep: Keep) -> io::Result<()> {
        let (res, _) = self.submit(op, keep).await;
        self.stats.other_done(res >= 0);
        to_result(res).map(drop)
    }
}
