//! The operations a file I/O backend provides.

use std::fs::File;
use std::io;

/// A file I/O backend: the operations every handler needs.
///
/// Futures run on one worker's single-threaded runtime, so no `Send` bound is asked of
/// them (hence the allowed lint).
#[allow(async_fn_in_trait)]
pub trait FileIo {
    /// Reads exactly `len` bytes of `file` at `offset`, appended to `buf`; returns the
    /// buffer in every case. A file shorter than asked is `UnexpectedEof`.
    async fn read_exact_append(
        &self,
        file: &File,
        offset: u64,
        len: usize,
        buf: Vec<u8>,
    ) -> (io::Result<()>, Vec<u8>);
}
