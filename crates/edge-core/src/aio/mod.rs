//! The file I/O layer: every byte a handler takes from a file (cache hits, fills being
//! streamed to followers, static files) goes through this one narrow seam.
//!
//! How it fits: a worker picks its backend once at start from `aio.mode` and keeps it
//! in the handlers' per-worker services; handlers call [`FileBackend::read_exact_append`]
//! (a small range that leaves with the response head in one write, or one chunk of a
//! body copied to the socket by `http::send` when `aio.sendfile` is off). The enum
//! dispatch is decided at startup, never by a config branch in the hot path (STYLE.md:
//! choose a backend once, call through it). The socket side (sendfile) is not here: it
//! lives in `http::send` and `net::sys`, so this layer knows nothing of connections.
//!
//! Buffers are owned and returned ("rent" style, as monoio does): a backend may hand
//! the buffer to a pool thread or to the kernel (io_uring) while the read is in flight,
//! and a cancelled future cannot leave the kernel writing into freed memory.
//!
//! Backends today: `on_loop` (blocking `pread`/`sendfile` on the worker's loop, the
//! `aio = "off"` baseline of DESIGN.md). `threads` and `io_uring` plug in as further
//! variants; until they exist, those modes fall back to `on_loop` with one log line.

mod backend;
mod file_io;
pub mod on_loop;

pub use backend::FileBackend;
pub use file_io::FileIo;
