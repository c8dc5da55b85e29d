//! Gathered writes: pieces of memory the caller already has (`Bytes`, such as slices of
//! an upstream read buffer) written at one file offset by one `pwritev(2)`, so a cache
//! fill hands its body to the kernel without first copying it into one buffer.
//!
//! How it fits: [`Gather`] owns the pieces and the `iovec` array that points into them
//! while the write is in flight (a pool thread or the ring reads both), exactly as
//! [`crate::buf`]'s buffers do for plain writes. [`write_all_vectored_at`] is the same
//! write for code already on a pool thread (a cache commit's closure).

use bytes::Bytes;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;

use crate::sys::MAX_RW;

/// At most this many `iovec`s per call (Linux's `UIO_MAXIOV`); longer lists take more
/// calls.
pub(crate) const IOV_MAX: usize = 1024;

/// The pieces of one gathered write and the `iovec`s of the part not yet written.
pub(crate) struct Gather {
    parts: Vec<Bytes>,
    /// Rebuilt by [`Gather::iovecs_from`] before each call. Its heap memory does not
    /// move while the `Gather` moves, so the pointer handed to the kernel stays valid.
    iov: Vec<libc::iovec>,
    len: usize,
}

impl Gather {
    pub(crate) fn new(parts: Vec<Bytes>) -> Gather {
        let len = parts.iter().map(Bytes::len).sum();
        Gather {
            parts,
            iov: Vec::new(),
            len,
        }
    }

    /// Total bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The `iovec`s for the bytes from `from` on (at most [`IOV_MAX`] of them and
    /// [`MAX_RW`] bytes): their address and count. Valid until the next call or until
    /// the `Gather` is dropped; only read through, never written.
    pub(crate) fn iovecs_from(&mut self, mut from: usize) -> (*const libc::iovec, usize) {
        self.iov.clear();
        let mut room = MAX_RW;
        for p in &self.parts {
            if from >= p.len() {
                from -= p.len();
                continue;
            }
            let s = &p[from..];
            from = 0;
            let n = s.len().min(room);
            self.iov.push(libc::iovec {
                iov_base: s.as_ptr() as *mut libc::c_void,
                iov_len: n,
            });
            room -= n;
            if room == 0 || self.iov.len() == IOV_MAX {
                break;
            }
        }
        (self.iov.as_ptr(), self.iov.len())
    }

    pub(crate) fn into_parts(self) -> Vec<Bytes> {
        self.parts
    }
}

/// One call's result in a loop that writes everything: the bytes it advanced, or the
/// error that ends the loop. An interrupted call advances by nothing (the loop calls
/// again); a call that wrote nothing ends it (`WriteZero`), as it would never finish.
pub(crate) fn write_progress(res: io::Result<usize>) -> io::Result<usize> {
    match res {
        Ok(0) => Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        r => r,
    }
}

/// Writes every byte of `parts`, in order, at `offset` of `file`, with as few
/// `pwritev(2)` calls as the kernel allows (a short write continues where it stopped).
/// Blocking: for a pool thread.
pub fn write_all_vectored_at<B: AsRef<[u8]>>(
    file: &impl AsRawFd,
    mut offset: u64,
    parts: &[B],
) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = parts
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| !p.is_empty())
        .map(IoSlice::new)
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let cnt = rest.len().min(IOV_MAX);
        // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix (std guarantees it);
        // the `cnt` slices are live borrows of `parts` for the whole call, and pwritev
        // only reads through them.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                rest.as_ptr().cast::<libc::iovec>(),
                cnt as libc::c_int,
                offset as libc::off_t,
            )
        };
        let res = if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        };
        let n = write_progress(res)?;
        offset += n as u64;
        IoSlice::advance_slices(&mut rest, n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn iovecs_skip_what_was_written_and_stop_at_the_cap() {
        let parts: Vec<Bytes> = (0..IOV_MAX + 10)
            .map(|i| Bytes::from(vec![i as u8; 3]))
            .collect();
        let mut g = Gather::new(parts);
        assert_eq!(g.len(), (IOV_MAX + 10) * 3);
        let (_, n) = g.iovecs_from(0);
        assert_eq!(n, IOV_MAX, "capped at UIO_MAXIOV");
        // From the middle of the second part: its last 2 bytes first.
        let (p, n) = g.iovecs_from(4);
        assert_eq!(n, IOV_MAX);
        // SAFETY: `p` points at `n` iovecs inside `g`, alive and unchanged here.
        let first = unsafe { *p };
        assert_eq!(first.iov_len, 2);
        // SAFETY: the iovec points into the second part, 2 bytes long.
        let bytes = unsafe { std::slice::from_raw_parts(first.iov_base as *const u8, 2) };
        assert_eq!(bytes, [1, 1]);
        let (_, n) = g.iovecs_from(g.len() - 1);
        assert_eq!(n, 1);
        let (_, n) = g.iovecs_from(g.len());
        assert_eq!(n, 0);
    }

    #[test]
    fn a_vectored_write_lands_every_part_in_order_past_the_iovec_cap() {
        let f = tempfile::tempfile().unwrap();
        let parts: Vec<Vec<u8>> = (0..IOV_MAX * 2 + 3)
            .map(|i| vec![(i % 251) as u8; 1 + i % 5])
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).chain([&[][..]]).collect();
        write_all_vectored_at(&f, 7, &refs).unwrap();
        let want: Vec<u8> = parts.concat();
        let mut got = vec![0u8; want.len()];
        f.read_exact_at(&mut got, 7).unwrap();
        assert_eq!(got, want);
        assert_eq!(f.metadata().unwrap().len(), 7 + want.len() as u64);
    }
}
