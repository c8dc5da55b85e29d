//! The file handle, open options and metadata.
//!
//! How it fits: [`AioFile`] is a cheap `Rc` clone of an owned fd. Every in-flight
//! operation holds a clone, so the fd stays open until the pool thread or the kernel
//! is done with it, even if the caller dropped both its future and its handle; the fd
//! is closed when the last clone goes (or by [`crate::Engine::close`], off the loop).
//! [`AioFile::shared`] wraps a `File` that others (other threads) share by `Arc`
//! instead, so one descriptor serves them all without a `dup`.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::time::{Duration, SystemTime};

/// Whether a file was opened with O_DIRECT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectMode {
    /// Not asked for: reads go through the page cache.
    Off,
    /// O_DIRECT is on: use [`crate::Engine::read_aligned`] with an [`crate::AlignedBuf`].
    On,
    /// Asked for, but the filesystem refused O_DIRECT (EINVAL, e.g. procfs, or tmpfs
    /// before Linux 6.6); the file was reopened without it.
    Refused,
}

/// An open file, shared by `Rc` (see the module doc). `!Send`: it belongs to one worker.
#[derive(Clone, Debug)]
pub struct AioFile {
    inner: Rc<Inner>,
}

#[derive(Debug)]
struct Inner {
    fd: Fd,
    direct: DirectMode,
}

/// The descriptor: owned by this handle's clones alone, or shared with others (an
/// `Arc<File>` that other threads hold too); either way it stays open while a clone
/// or an operation in flight holds it.
#[derive(Debug)]
enum Fd {
    Owned(OwnedFd),
    Shared(std::sync::Arc<File>),
}

impl Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Fd::Owned(fd) => fd.as_fd(),
            Fd::Shared(f) => f.as_fd(),
        }
    }
}

impl AioFile {
    /// Wraps an fd this handle now owns.
    pub fn from_fd(fd: OwnedFd, direct: DirectMode) -> AioFile {
        AioFile {
            inner: Rc::new(Inner {
                fd: Fd::Owned(fd),
                direct,
            }),
        }
    }

    /// Wraps `file`, which others keep sharing (no `dup`: the same descriptor). It is
    /// closed when the last of them and of this handle's clones lets go.
    pub fn shared(file: std::sync::Arc<File>) -> AioFile {
        AioFile {
            inner: Rc::new(Inner {
                fd: Fd::Shared(file),
                direct: DirectMode::Off,
            }),
        }
    }

    /// Wraps a fresh fd returned by a successful open.
    pub(crate) fn from_new_raw(fd: RawFd, direct: DirectMode) -> AioFile {
        // SAFETY: `fd` was just returned by openat and nothing else owns it.
        AioFile::from_fd(unsafe { OwnedFd::from_raw_fd(fd) }, direct)
    }

    /// Whether the fd has O_DIRECT.
    pub fn direct(&self) -> DirectMode {
        self.inner.direct
    }

    /// The fd, if this is the last handle (no other clone, no operation in flight, and
    /// for a [`AioFile::shared`] file, nobody else sharing it).
    pub fn into_fd(self) -> Result<OwnedFd, AioFile> {
        let inner = Rc::try_unwrap(self.inner).map_err(|inner| AioFile { inner })?;
        match inner.fd {
            Fd::Owned(fd) => Ok(fd),
            Fd::Shared(f) => std::sync::Arc::try_unwrap(f)
                .map(OwnedFd::from)
                .map_err(|f| AioFile {
                    inner: Rc::new(Inner {
                        fd: Fd::Shared(f),
                        direct: inner.direct,
                    }),
                }),
        }
    }
}

impl From<File> for AioFile {
    fn from(f: File) -> AioFile {
        AioFile::from_fd(f.into(), DirectMode::Off)
    }
}

impl AsRawFd for AioFile {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd.as_fd().as_raw_fd()
    }
}

impl AsFd for AioFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }
}

/// How to open a file, as `std::fs::OpenOptions` plus O_DIRECT. Every fd is opened
/// close-on-exec. The default is read-only, mode 0o644 for created files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    create: bool,
    create_new: bool,
    truncate: bool,
    append: bool,
    direct: bool,
    mode: u32,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read: true,
            write: false,
            create: false,
            create_new: false,
            truncate: false,
            append: false,
            direct: false,
            mode: 0o644,
        }
    }
}

impl OpenOptions {
    /// Read-only.
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }

    pub fn read(mut self, on: bool) -> Self {
        self.read = on;
        self
    }

    pub fn write(mut self, on: bool) -> Self {
        self.write = on;
        self
    }

    /// O_CREAT.
    pub fn create(mut self, on: bool) -> Self {
        self.create = on;
        self
    }

    /// O_CREAT | O_EXCL.
    pub fn create_new(mut self, on: bool) -> Self {
        self.create_new = on;
        self
    }

    /// O_TRUNC.
    pub fn truncate(mut self, on: bool) -> Self {
        self.truncate = on;
        self
    }

    /// O_APPEND.
    pub fn append(mut self, on: bool) -> Self {
        self.append = on;
        self
    }

    /// O_DIRECT: bypass the page cache. A filesystem that refuses it (EINVAL) gets the
    /// file reopened without it, see [`DirectMode::Refused`].
    pub fn direct(mut self, on: bool) -> Self {
        self.direct = on;
        self
    }

    /// Permission bits for a created file.
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }

    pub(crate) fn wants_direct(&self) -> bool {
        self.direct
    }

    pub(crate) fn mode_bits(&self) -> u32 {
        self.mode
    }

    /// The open(2) flags (without O_CLOEXEC, which every open adds).
    pub(crate) fn flags(&self) -> i32 {
        let mut f = match (self.read, self.write || self.append) {
            (_, false) => libc::O_RDONLY,
            (false, true) => libc::O_WRONLY,
            (true, true) => libc::O_RDWR,
        };
        if self.append {
            f |= libc::O_APPEND;
        }
        if self.create_new {
            f |= libc::O_CREAT | libc::O_EXCL;
        } else if self.create {
            f |= libc::O_CREAT;
        }
        if self.truncate {
            f |= libc::O_TRUNC;
        }
        if self.direct {
            f |= libc::O_DIRECT;
        }
        f
    }
}

/// What a stat returns: the fields a cache needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metadata {
    pub size: u64,
    pub ino: u64,
    /// `makedev(major, minor)` of the containing device.
    pub dev: u64,
    pub mtime: SystemTime,
    /// File type and permission bits (`st_mode`).
    pub mode: u32,
    /// Preferred I/O size.
    pub blksize: u32,
    /// Direct I/O alignment, when the kernel reports it (statx STATX_DIOALIGN, Linux
    /// 6.1+) and the file supports direct I/O.
    pub dio: Option<DioAlign>,
}

/// Alignment that O_DIRECT asks of a file's reads: the buffer address (`mem`) and the
/// file offset and length (`offset`), in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DioAlign {
    pub mem: u32,
    pub offset: u32,
}

impl DioAlign {
    /// Used when the kernel does not report the alignment. Getting the logical block
    /// size of the device below a file would need `ioctl(BLKSSZGET)` on a device node
    /// we may not be allowed to open; 4096 is a multiple of every common logical block
    /// size (512 and 4096), so it is always accepted, at the cost of reading up to
    /// 3.5 KiB more than needed on 512-byte devices.
    pub const FALLBACK: DioAlign = DioAlign {
        mem: 4096,
        offset: 4096,
    };

    /// One alignment that satisfies both constraints: use it for
    /// [`crate::AlignedBuf::new`] and for offsets and lengths.
    pub fn granule(&self) -> usize {
        self.mem.max(self.offset).max(1).next_power_of_two() as usize
    }
}

impl Metadata {
    pub(crate) fn from_statx(s: &libc::statx) -> Metadata {
        let dio = (s.stx_mask & libc::STATX_DIOALIGN != 0
            && s.stx_dio_offset_align != 0
            && s.stx_dio_mem_align != 0)
            .then_some(DioAlign {
                mem: s.stx_dio_mem_align,
                offset: s.stx_dio_offset_align,
            });
        let mtime = if s.stx_mtime.tv_sec >= 0 {
            SystemTime::UNIX_EPOCH + Duration::new(s.stx_mtime.tv_sec as u64, s.stx_mtime.tv_nsec)
        } else {
            SystemTime::UNIX_EPOCH - Duration::from_secs(s.stx_mtime.tv_sec.unsigned_abs())
        };
        Metadata {
            size: s.stx_size,
            ino: s.stx_ino,
            dev: libc::makedev(s.stx_dev_major, s.stx_dev_minor),
            mtime,
            mode: s.stx_mode as u32,
            blksize: s.stx_blksize,
            dio,
        }
    }

    /// The direct I/O alignment, or [`DioAlign::FALLBACK`] when not reported.
    pub fn dio_align(&self) -> DioAlign {
        self.dio.unwrap_or(DioAlign::FALLBACK)
    }

    pub fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }

    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        assert_eq!(OpenOptions::new().flags(), libc::O_RDONLY);
        let w = OpenOptions::new().read(false).write(true).create(true);
        assert_eq!(w.flags(), libc::O_WRONLY | libc::O_CREAT);
        let rw = OpenOptions::new().write(true).truncate(true).direct(true);
        assert_eq!(rw.flags(), libc::O_RDWR | libc::O_TRUNC | libc::O_DIRECT);
        let x = OpenOptions::new().write(true).create(true).create_new(true);
        assert_eq!(x.flags(), libc::O_RDWR | libc::O_CREAT | libc::O_EXCL);
        assert_eq!(
            OpenOptions::new().append(true).flags(),
            libc::O_RDWR | libc::O_APPEND
        );
    }

    #[test]
    fn granule_covers_both() {
        let d = DioAlign {
            mem: 4,
            offset: 512,
        };
        assert_eq!(d.granule(), 512);
        assert_eq!(DioAlign::FALLBACK.granule(), 4096);
    }

    #[test]
    fn into_fd_only_when_last() {
        let f = AioFile::from(tempfile::tempfile().unwrap());
        let g = f.clone();
        let f = f.into_fd().unwrap_err();
        drop(g);
        assert!(f.into_fd().is_ok());
    }

    #[test]
    fn a_shared_file_is_the_same_descriptor_and_stays_open_while_shared() {
        use std::os::unix::fs::FileExt;
        let file = std::sync::Arc::new(tempfile::tempfile().unwrap());
        let f = AioFile::shared(file.clone());
        assert_eq!(f.as_raw_fd(), file.as_raw_fd(), "no dup");
        // Someone else still shares it: not ours to close.
        let f = f.into_fd().unwrap_err();
        file.write_all_at(b"x", 0).unwrap();
        let raw = file.as_raw_fd();
        drop(file);
        let fd = f.into_fd().expect("the last holder");
        assert_eq!(fd.as_raw_fd(), raw);
    }
}
