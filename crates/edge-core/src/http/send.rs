//! File bodies to the client: a byte range of an open file, by `sendfile(2)` (no copy
//! through user space) or by reads through the worker's file I/O backend and writes.
//! `aio.sendfile` ([`SendMode`]) is decided once per config, the backend once per
//! worker; together they choose the path:
//!
//! | backend | `sendfile = true` | `sendfile = false` |
//! |---|---|---|
//! | `off` | sendfile on the loop | pread + write |
//! | `auto` | per 1 MiB chunk: sendfile on the loop when its last byte is in the page cache, else sendfile on a pool thread | reads (RWF_NOWAIT, the pool when cold) + write |
//! | `threads` | sendfile on a pool thread (nginx `aio threads` + `sendfile on`) | reads on the pool + write |
//! | `io_uring` | per 1 MiB chunk: sendfile on the loop when its last byte is in the page cache, else reads on the ring + write | reads on the ring + write |
//!
//! `sendfile(2)` reads the file in the calling thread, so on a cold range it would
//! stall the whole worker: only `off` (the baseline) accepts that; the others make sure
//! the range is in the page cache first (or do not use it).

use super::conn::timed_out;
use super::Conn;
use crate::aio::FileBackend;
use edge_aio::Mode;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

/// Largest sendfile() call; keeps one connection from monopolising the loop.
const SENDFILE_CHUNK: usize = 1 << 20;
/// O_DIRECT reads per call: the buffer each such response holds (bounded per
/// connection, since O_DIRECT data lives only there, not in the page cache).
const DIRECT_CHUNK: usize = 128 * 1024;
/// Read buffer when sendfile is off.
const READ_CHUNK: usize = 64 * 1024;

/// How one file body reaches the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendMode {
    /// `sendfile(2)`: the kernel copies from the page cache to the socket.
    Sendfile,
    /// Read into a buffer (through the file I/O backend), then write.
    Copy,
    /// O_DIRECT reads into aligned buffers (through the backend), then write: the page
    /// cache is bypassed (`aio.directio`).
    Direct,
}

/// `aio.sendfile`, `aio.directio` and `aio.sendfile_max`, decided once per config
/// generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendPolicy {
    pub sendfile: bool,
    /// Files at least this big are read with O_DIRECT.
    pub directio: Option<u64>,
    /// Cache-hit bodies (or ranges) larger than this that would go by sendfile are
    /// written from a mapping of the file instead ([`super::mapped`]).
    pub sendfile_max: Option<u64>,
    /// `sendfile_max = "auto"`: over `sendfile_max`, each worker writes from a mapping
    /// or sends by sendfile, whichever it measures cheaper ([`super::large_send`]).
    pub adaptive: bool,
}

impl SendPolicy {
    /// Whether `len` bytes of a file of `file_size` bytes would rather be written from
    /// a mapping than sent by sendfile (see [`super::mapped`]).
    pub fn maps(&self, file_size: u64, len: u64) -> bool {
        self.mode_for(file_size) == SendMode::Sendfile && self.sendfile_max.is_some_and(|m| len > m)
    }

    /// The path for a body from a file of `file_size` bytes.
    pub fn mode_for(&self, file_size: u64) -> SendMode {
        match self.directio {
            Some(min) if file_size >= min => SendMode::Direct,
            _ => self.streaming(),
        }
    }

    /// The path for a file still being written (a fill's followers): never O_DIRECT,
    /// whose reads would bypass pages the writer has not flushed yet.
    pub fn streaming(&self) -> SendMode {
        if self.sendfile {
            SendMode::Sendfile
        } else {
            SendMode::Copy
        }
    }
}

/// Sends `len` bytes of `file` from `offset` to the client. `UnexpectedEof` means the
/// file was shorter than expected; other errors are the socket's or the file's. Each
/// write must make progress within `send_timeout`. Returns the bytes sent.
pub async fn send_file_range(
    conn: &mut Conn,
    files: &FileBackend,
    file: &File,
    offset: u64,
    len: u64,
    mode: SendMode,
    send_timeout: Duration,
) -> io::Result<u64> {
    // sendfile needs the bytes to reach the client as they are: over TLS in user space
    // or HTTP/2 the body is read (through the backend) and written.
    let mode = match (mode, conn.io.is_tcp()) {
        (SendMode::Sendfile, false) => SendMode::Copy,
        (m, _) => m,
    };
    match (mode, files.mode()) {
        (SendMode::Direct, _) => match files.open_direct(file).await {
            Some(direct) => direct_range(conn, files, &direct, offset, len, send_timeout).await,
            // O_DIRECT refused by the filesystem (tmpfs, ...): the page cache it is.
            None => copy_range(conn, files, file, offset, len, send_timeout).await,
        },
        (SendMode::Sendfile, Mode::Off) => {
            sendfile_range(conn, file, offset, len, send_timeout).await
        }
        (SendMode::Sendfile, backend @ (Mode::Auto | Mode::Threads | Mode::IoUring)) => {
            let mut pooled = None;
            let mut sent = 0u64;
            while sent < len {
                let n = (len - sent).min(SENDFILE_CHUNK as u64);
                let off = offset + sent;
                // `auto` and `io_uring`: a chunk whose last byte is cached is sent on
                // the loop (zero-copy, the warm-hit path). A cold chunk goes through
                // the ring under `io_uring` (reads + write), and is sent by a pool
                // thread under `threads` and `auto`, where the disk wait belongs.
                let probe = matches!(backend, Mode::Auto | Mode::IoUring);
                if probe && files.is_cached(file, off + n - 1) {
                    sendfile_range(conn, file, off, n, send_timeout).await?;
                } else if backend == Mode::IoUring {
                    copy_range(conn, files, file, off, n, send_timeout).await?;
                } else {
                    if pooled.is_none() {
                        pooled = Some(Pooled::new(conn, file)?);
                    }
                    let p = pooled.as_ref().expect("just set");
                    pool_sendfile_range(conn, files, p, off, n, send_timeout).await?;
                }
                sent += n;
            }
            Ok(len)
        }
        _ => copy_range(conn, files, file, offset, len, send_timeout).await,
    }
}

/// sendfile asked of a connection that is not plain TCP (`send_file_range` never does).
fn not_tcp() -> io::Error {
    io::Error::other("sendfile on a connection that is not plain TCP")
}

fn short_file() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "file shorter than expected")
}

async fn copy_range(
    conn: &mut Conn,
    files: &FileBackend,
    file: &File,
    offset: u64,
    len: u64,
    send_timeout: Duration,
) -> io::Result<u64> {
    let mut buf = Vec::with_capacity(READ_CHUNK.min(len as usize).max(1) + 1);
    let mut sent = 0u64;
    // The first read starts one byte early (dropped), for the kernel's readahead: see
    // `edge_aio::Engine::sendfile`'s `first` (a fresh file's first read past page 0
    // looks random and is read a page at a time).
    let mut lead = usize::from(offset > 0);
    while sent < len {
        let want = ((len - sent) as usize).min(READ_CHUNK);
        buf.clear();
        let at = offset + sent - lead as u64;
        let (r, b) = files.read_exact_append(file, at, want + lead, buf).await;
        buf = b;
        r?;
        conn.write_all(&buf[lead..], send_timeout).await?;
        sent += want as u64;
        lead = 0;
    }
    Ok(sent)
}

/// O_DIRECT reads of up to 128 KiB (aligned as the file needs) and writes.
async fn direct_range(
    conn: &mut Conn,
    files: &FileBackend,
    direct: &crate::aio::DirectFile,
    offset: u64,
    len: u64,
    send_timeout: Duration,
) -> io::Result<u64> {
    let mut buf = direct.buffer(DIRECT_CHUNK);
    let mut sent = 0u64;
    while sent < len {
        let want = ((len - sent) as usize).min(DIRECT_CHUNK);
        let (r, b) = files.read_direct(direct, offset + sent, want, buf).await;
        buf = b;
        let window = r?;
        if window.is_empty() {
            return Err(short_file());
        }
        conn.write_all(&buf[window.clone()], send_timeout).await?;
        sent += window.len() as u64;
    }
    Ok(sent)
}

/// The socket and the file of one response, duplicated once for the pool's sendfile
/// jobs: a job owns its descriptors, so a response cut short (its future dropped, its
/// socket closed and the fd number reused) can never make a pool thread send to a
/// stranger.
struct Pooled {
    sock: Arc<OwnedFd>,
    file: Arc<File>,
    /// No job has read this file yet (see `edge_aio::Engine::sendfile`'s `first`).
    first: std::cell::Cell<bool>,
}

impl Pooled {
    fn new(conn: &mut Conn, file: &File) -> io::Result<Pooled> {
        let sock = conn.io.tcp().ok_or_else(not_tcp)?;
        Ok(Pooled {
            sock: Arc::new(sock.dup()?),
            file: Arc::new(file.try_clone()?),
            first: std::cell::Cell::new(true),
        })
    }
}

/// `sendfile(2)` run by pool threads (nginx's `aio threads` with `sendfile on`): a job
/// sends until the socket buffer is full; the loop then waits for writability and
/// hands the rest over again.
async fn pool_sendfile_range(
    conn: &mut Conn,
    files: &FileBackend,
    p: &Pooled,
    offset: u64,
    len: u64,
    send_timeout: Duration,
) -> io::Result<u64> {
    let end = offset + len;
    let mut off = offset;
    while off < end {
        let want = ((end - off) as usize).min(SENDFILE_CHUNK);
        match files
            .sendfile(
                p.sock.clone(),
                p.file.clone(),
                off,
                want,
                p.first.replace(false),
            )
            .await
        {
            Ok(0) => return Err(short_file()),
            Ok(n) => off += n as u64,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let sock = conn.io.tcp().ok_or_else(not_tcp)?;
                match tokio::time::timeout(send_timeout, sock.wait_writable()).await {
                    Ok(r) => r?,
                    Err(_) => return Err(timed_out("send")),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(len)
}

async fn sendfile_range(
    conn: &mut Conn,
    file: &File,
    offset: u64,
    len: u64,
    send_timeout: Duration,
) -> io::Result<u64> {
    let in_fd = file.as_raw_fd();
    let sock = conn.io.tcp().ok_or_else(not_tcp)?;
    let mut off = offset;
    let end = offset + len;
    while off < end {
        let want = ((end - off) as usize).min(SENDFILE_CHUNK);
        let step = crate::net::sys::sendfile_once(sock, in_fd, &mut off, want);
        match tokio::time::timeout(send_timeout, step).await {
            Ok(Ok(0)) => return Err(short_file()),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(timed_out("send")),
        }
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aio::AioSetup;
    use crate::config::{Aio, AioMode};
    use std::io::{Read, Write};

    #[test]
    fn both_modes_send_the_range_and_report_short_files() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut f = tempfile::tempfile().unwrap();
            f.write_all(b"0123456789").unwrap();
            let local = tokio::task::LocalSet::new();
            let setups: Vec<_> = [
                AioMode::Off,
                AioMode::Threads,
                AioMode::IoUring,
                AioMode::Auto,
            ]
            .into_iter()
            .map(|mode| {
                AioSetup::from_config(&Aio {
                    mode,
                    ..Aio::default()
                })
            })
            .collect();
            for (setup, mode) in setups.iter().flat_map(|s| {
                [
                    (s, SendMode::Sendfile),
                    (s, SendMode::Copy),
                    (s, SendMode::Direct),
                ]
            }) {
                local
                    .run_until(async {
                        let files = FileBackend::for_worker(setup);
                        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
                        let (s, peer) = l.accept().await.unwrap();
                        let mut conn =
                            Conn::new(crate::net::Sock::registered(s), peer, Default::default());
                        let t = Duration::from_secs(5);
                        let n = send_file_range(&mut conn, &files, &f, 3, 4, mode, t)
                            .await
                            .unwrap();
                        assert_eq!(n, 4);
                        let e = send_file_range(&mut conn, &files, &f, 8, 5, mode, t)
                            .await
                            .unwrap_err();
                        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{mode:?}");
                        drop(conn);
                        let mut got = Vec::new();
                        c.read_to_end(&mut got).unwrap();
                        // The short read may have sent its first bytes before finding the end.
                        assert!(got.starts_with(b"3456"), "{mode:?}: {got:?}");
                    })
                    .await;
            }
        });
    }
}
