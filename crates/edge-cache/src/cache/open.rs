//! How a lookup reads an object's file: the [`FileOpener`] a server implements with its
//! file I/O backend (so that an open, `fstat` or header read never blocks its event
//! loop), the [`BlockingOpener`] of tests and tools, and the header read through either.
//!
//! How it fits: below the lookups (`cache/lookup.rs`), which open files only through
//! these; it knows the file format only through [`crate::storage`].

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;

use crate::key::KeyHash;
use crate::storage;

/// A file opened for reading, with what `fstat` said of it.
#[derive(Debug)]
pub struct OpenedFile {
    pub file: File,
    pub ino: u64,
    pub len: u64,
}

/// How [`Cache::lookup_with`] opens an object's file (`open(O_RDONLY)` then `fstat`)
/// and reads its header. A server implements it with its file I/O backend (a thread
/// pool, io_uring, or a non-blocking attempt first), so neither blocks its event loop.
#[allow(async_fn_in_trait)]
pub trait FileOpener {
    async fn open_stat(&self, path: &std::path::Path) -> io::Result<OpenedFile>;
    /// Exactly `len` bytes of `file` at `offset` (`UnexpectedEof` if it ends first).
    async fn read_exact_at(&self, file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// Runs `f`, which may block (file system calls, or a wait on a lock the cache's
    /// loader or a purge holds), where it cannot block the event loop: a server's
    /// thread pool. Only lookups made while the loader runs need it (the disk
    /// fallback). An error: `f` could not run (or panicked).
    async fn offload<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T>;
}

/// Reads and decodes the header of `opened` (the file of `hash`) through `opener`: two
/// reads at most, one when the header fits in the first block. Also returns the body
/// bytes that block held (a packed small object's whole body, often). Errors say why
/// the file is unusable.
pub(super) async fn read_header_with<O: FileOpener>(
    opener: &O,
    opened: &OpenedFile,
    hash: KeyHash,
) -> Result<(storage::StoredHeader, Option<bytes::Bytes>), String> {
    let first = opened.len.min(storage::BODY_ALIGN) as usize;
    let mut buf = Box::pin(opener.read_exact_at(&opened.file, 0, first))
        .await
        .map_err(|e| format!("header read: {e}"))?;
    let need = storage::header_len(&buf).map_err(|e| e.to_string())?;
    if need > buf.len() {
        let have = buf.len();
        let rest = Box::pin(opener.read_exact_at(&opened.file, have as u64, need - have))
            .await
            .map_err(|e| format!("header read: {e}"))?;
        buf.extend_from_slice(&rest);
    }
    let hdr = storage::decode_header(&buf, hash, opened.len).map_err(|e| e.to_string())?;
    // A packed small object: the block just read holds (part of) its body too.
    let start = (hdr.body_offset as usize).min(buf.len());
    let end = (hdr.body_offset.saturating_add(hdr.meta.body_len) as usize).min(buf.len());
    let head = (end > start).then(|| bytes::Bytes::from(buf).slice(start..end));
    Ok((hdr, head))
}

/// Blocking `open` + `fstat` on the calling thread (and [`FileOpener::offload`]
/// runs there too).
pub struct BlockingOpener;

impl BlockingOpener {
    pub(crate) fn open_stat_now(path: &std::path::Path) -> io::Result<OpenedFile> {
        let file = File::open(path)?;
        let md = file.metadata()?;
        Ok(OpenedFile {
            ino: md.ino(),
            len: md.len(),
            file,
        })
    }
}

impl FileOpener for BlockingOpener {
    async fn open_stat(&self, path: &std::path::Path) -> io::Result<OpenedFile> {
        Self::open_stat_now(path)
    }

    async fn read_exact_at(&self, file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        if storage::read_full_at(file, &mut buf, offset)? != len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(buf)
    }

    async fn offload<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        Ok(f())
    }
}

/// Runs a future that never waits (its opener is [`BlockingOpener`]) to completion.
pub(super) fn ready<T>(fut: impl std::future::Future<Output = T>) -> T {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => unreachable!("a blocking opener never returns Pending"),
    }
}
