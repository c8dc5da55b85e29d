//! A read-only mapping of part of a file, whose bytes only the kernel reads.
//!
//! How it fits: a large cache hit can leave in one `writev` from a mapping of its file
//! instead of by `sendfile(2)` (the server's `aio.sendfile_max`, see
//! `edge-core/src/http/mapped.rs` for why). The mapping is made once and kept while the
//! object is hit, so a hit costs the residency check and the write, not an `mmap`, page
//! faults and a `munmap` (whose TLB shootdown would interrupt every other worker).
//!
//! Two hazards, and what keeps them away:
//! - **A page the file no longer has** (the file was truncated under the server): a
//!   read of it from user space raises `SIGBUS`. The bytes are therefore handed out
//!   only through an `unsafe` accessor whose contract is "pass them to a syscall":
//!   when the kernel copies from such a page (in `writev`), it returns `EFAULT` (or a
//!   short count) instead of signalling.
//! - **A page not in memory**: touching it waits for the disk. [`FileMap::resident`]
//!   says, page by page (`mincore(2)`), whether the range is in the page cache; the
//!   caller writes on its event loop only when it is, and otherwise takes a path that
//!   reads off the loop.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

/// The page size mappings are aligned to.
fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// `len` bytes of a file from `offset`, mapped shared and read-only (`PROT_READ`,
/// `MAP_SHARED`): the page cache's own pages, no copy. Unmapped on drop.
#[derive(Debug)]
pub struct FileMap {
    /// Start of the mapping (page-aligned, at or before `offset`).
    base: NonNull<u8>,
    /// Bytes mapped from `base`.
    map_len: usize,
    /// Where byte 0 of the mapped range is, from `base`.
    lead: usize,
    /// Bytes of the file the caller asked for.
    len: usize,
    page: usize,
}

impl FileMap {
    /// Maps `len` bytes of `file` from `offset`. Nothing is read: pages come in when
    /// first touched (by the kernel, in a write from the mapping). Fails with `mmap`'s
    /// error (`ENOMEM` past `vm.max_map_count`, `ENODEV` for a file that cannot be
    /// mapped) or `EINVAL` for an empty range.
    pub fn new(file: &File, offset: u64, len: usize) -> io::Result<FileMap> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let page = page_size();
        let lead = (offset % page as u64) as usize;
        let start = offset - lead as u64;
        let map_len = lead
            .checked_add(len)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let start = libc::off_t::try_from(start)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: a new read-only shared mapping chosen by the kernel (no fixed
        // address, so nothing existing is replaced); `file` is open for the call and the
        // mapping holds its own reference to it afterwards.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                start,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(crate::sys::os_error("mmap"));
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap at 0"))?;
        Ok(FileMap {
            base,
            map_len,
            lead,
            len,
            page,
        })
    }

    /// Bytes of the file mapped (the `len` asked for).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: an empty mapping cannot be made.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether every page holding bytes `range` (relative to the mapped offset) is in
    /// the page cache, by `mincore(2)`: exact per page, and it never starts a read.
    /// Pages of a file that this process neither owns nor may write are reported only
    /// while mapped in its page tables (the kernel's rule since 5.0), which errs towards
    /// "not resident". It is no size check: after a truncation, pages past the new end
    /// may still be reported (a large folio the cut did not split), and a copy from them
    /// fails with `EFAULT`. A range outside the mapping is `EINVAL`.
    pub fn resident(&self, range: Range<usize>) -> io::Result<bool> {
        if range.start > range.end || range.end > self.len {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        if range.is_empty() {
            return Ok(true);
        }
        let first = (self.lead + range.start) / self.page;
        let end = (self.lead + range.end).div_ceil(self.page);
        // mincore fills one byte per page: ask in batches of at most this many pages.
        const BATCH: usize = 512;
        let mut vec = [0u8; BATCH];
        let mut at = first;
        while at < end {
            let n = (end - at).min(BATCH);
            // SAFETY: `at..at + n` pages lie inside the mapping (`end` is at most
            // `map_len` rounded up to a page, which the kernel mapped whole); `vec`
            // has room for `n` bytes.
            let r = unsafe {
                libc::mincore(
                    self.base.as_ptr().add(at * self.page).cast(),
                    n * self.page,
                    vec.as_mut_ptr(),
                )
            };
            if r != 0 {
                return Err(crate::sys::os_error("mincore"));
            }
            if vec[..n].iter().any(|b| b & 1 == 0) {
                return Ok(false);
            }
            at += n;
        }
        Ok(true)
    }

    /// Bytes `range` (relative to the mapped offset) of the mapping.
    ///
    /// # Safety
    /// The slice may be passed to syscalls that copy from it (`write`, `writev`,
    /// `send`) and to nothing else: no code in this process may read it. If the file
    /// shrank after the mapping was made, a page past its new end cannot be read: the
    /// kernel then fails the copy with `EFAULT` (or returns a short count), but a read
    /// in user space would raise `SIGBUS` and kill the process. The slice must not
    /// outlive `self` (the borrow ensures it).
    pub unsafe fn kernel_bytes(&self, range: Range<usize>) -> &[u8] {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "range outside the mapping"
        );
        // SAFETY: inside the live mapping of `len` bytes from `base + lead` (checked
        // above); the caller promises only the kernel reads it.
        unsafe {
            std::slice::from_raw_parts(
                self.base.as_ptr().add(self.lead + range.start),
                range.end - range.start,
            )
        }
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no slice of it outlives
        // `self` (`kernel_bytes` borrows it).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::FileExt;

    fn file_of(len: usize) -> (File, Vec<u8>) {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        f.write_all(&data).unwrap();
        (f, data)
    }

    /// Writes `bytes` (from a mapping) into a socket pair and reads them back.
    fn through_socket(bytes: &[u8]) -> (io::Result<usize>, Vec<u8>) {
        let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let r = a.write(bytes);
        drop(a);
        b.set_nonblocking(false).unwrap();
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        (r, got)
    }

    #[test]
    fn maps_an_unaligned_range_and_the_kernel_copies_it() {
        let (f, data) = file_of(3 * 4096 + 100);
        let m = FileMap::new(&f, 4096 + 10, 2 * 4096).unwrap();
        assert_eq!(m.len(), 2 * 4096);
        // SAFETY: only the kernel reads the slice (write(2) into a socket).
        let (r, got) = through_socket(unsafe { m.kernel_bytes(5..1005) });
        assert_eq!(r.unwrap(), 1000);
        assert_eq!(got, data[4096 + 15..4096 + 1015]);
    }

    #[test]
    fn written_pages_are_resident_and_ranges_are_checked() {
        let (f, _) = file_of(64 * 1024);
        let m = FileMap::new(&f, 4096, 60 * 1024).unwrap();
        // Just written: in the page cache (or the file's own pages on tmpfs).
        assert!(m.resident(0..60 * 1024).unwrap());
        assert!(m.resident(100..100).unwrap());
        assert!(m.resident(0..60 * 1024 + 1).is_err());
        assert!(FileMap::new(&f, 0, 0).is_err());
    }

    #[test]
    fn pages_past_a_truncation_fail_the_copy_without_a_signal() {
        let (f, data) = file_of(4 * 4096);
        let m = FileMap::new(&f, 0, 4 * 4096).unwrap();
        f.set_len(4096).unwrap();
        // (mincore is no size check: a large folio cut by the truncation may still
        // hold the pages past the end; the copy below is what must not go wrong.)
        assert!(m.resident(0..4096).unwrap());
        // SAFETY: only the kernel reads the slice; a page past the end must make the
        // copy fail (EFAULT or a short count), never raise SIGBUS.
        let (r, got) = through_socket(unsafe { m.kernel_bytes(0..4 * 4096) });
        match r {
            Ok(n) => assert!(n <= 4096, "copied {n} bytes past the end"),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EFAULT)),
        }
        assert_eq!(got, data[..got.len()]);
        // SAFETY: as above, a range wholly past the end.
        let (r, _) = through_socket(unsafe { m.kernel_bytes(2 * 4096..3 * 4096) });
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EFAULT));
    }

    #[test]
    fn later_writes_to_the_file_show_through() {
        let (f, _) = file_of(8192);
        let m = FileMap::new(&f, 0, 8192).unwrap();
        f.write_all_at(b"hello", 4000).unwrap();
        // SAFETY: only the kernel reads the slice.
        let (_, got) = through_socket(unsafe { m.kernel_bytes(4000..4005) });
        assert_eq!(got, b"hello");
    }
}
