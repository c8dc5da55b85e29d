//! The file I/O layer: every byte a handler takes from a file (cache hits, fills being
//! streamed to followers, static files) goes through this one narrow seam.
//!
//! How it fits: a worker picks its backend once at start from `aio.mode` and keeps it
//! in `Worker::file_io`; handlers call [`FileBackend::read_exact_append`] (a small range
//! that leaves with the response head in one write) or [`FileBackend::send_range`] (a
//! range to the socket, by sendfile(2) when `aio.sendfile` is on). The enum dispatch is
//! decided at startup, never by a config branch in the hot path (STYLE.md: choose a
//! backend once, call through it).
//!
//! Buffers are owned and returned ("rent" style, as monoio does): a backend may hand
//! the buffer to a pool thread or to the kernel (io_uring) while the read is in flight,
//! and a cancelled future cannot leave the kernel writing into freed memory.
//!
//! Backends today: `on_loop` (blocking `pread`/`sendfile` on the worker's loop, the
//! `aio = "off"` baseline of DESIGN.md). `threads` and `io_uring` plug in as further
//! variants; until they exist, those modes fall back to `on_loop` with one log line.

pub mod on_loop;

use crate::config::{Aio, AioMode};
use crate::server::conn::Conn;
use std::fs::File;
use std::io;
use std::time::Duration;

/// A file I/O backend: the two operations every handler needs.
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

    /// Sends `len` bytes of `file` from `offset` to the client. `UnexpectedEof` means the
    /// file was shorter than expected; other errors are the socket's. Returns bytes sent.
    async fn send_range(
        &self,
        conn: &mut Conn,
        file: &File,
        offset: u64,
        len: u64,
        use_sendfile: bool,
        send_timeout: Duration,
    ) -> io::Result<u64>;
}

/// The backend a worker uses, chosen once.
pub enum FileBackend {
    OnLoop(on_loop::OnLoop),
}

impl FileBackend {
    /// The backend for `aio.mode`. Modes whose backend is not built yet fall back to
    /// reading on the loop, saying so once per process.
    pub fn from_config(aio: &Aio) -> FileBackend {
        if aio.mode != AioMode::Off {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!(
                    "aio.mode = {:?}: that backend is not in this build yet; file reads run on the event loop (aio = off)",
                    aio.mode
                )
            });
        }
        FileBackend::OnLoop(on_loop::OnLoop)
    }

    pub fn name(&self) -> &'static str {
        match self {
            FileBackend::OnLoop(_) => "off",
        }
    }

    pub async fn read_exact_append(
        &self,
        file: &File,
        offset: u64,
        len: usize,
        buf: Vec<u8>,
    ) -> (io::Result<()>, Vec<u8>) {
        match self {
            FileBackend::OnLoop(b) => b.read_exact_append(file, offset, len, buf).await,
        }
    }

    pub async fn send_range(
        &self,
        conn: &mut Conn,
        file: &File,
        offset: u64,
        len: u64,
        use_sendfile: bool,
        send_timeout: Duration,
    ) -> io::Result<u64> {
        match self {
            FileBackend::OnLoop(b) => {
                b.send_range(conn, file, offset, len, use_sendfile, send_timeout)
                    .await
            }
        }
    }
}
