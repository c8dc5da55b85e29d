//! File bodies to the client: a byte range of an open file, by `sendfile(2)` (no copy
//! through user space) or by reads through the worker's file I/O backend and writes.
//! Which one is decided once from `aio.sendfile` ([`SendMode`]), not per call.

use super::conn::timed_out;
use super::Conn;
use crate::aio::FileBackend;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Largest sendfile() call; keeps one connection from monopolising the loop.
const SENDFILE_CHUNK: usize = 1 << 20;
/// Read buffer when sendfile is off.
const READ_CHUNK: usize = 64 * 1024;

/// How file bodies reach the socket (`aio.sendfile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendMode {
    /// `sendfile(2)`: the kernel copies from the page cache to the socket.
    Sendfile,
    /// Read into a buffer (through the file I/O backend), then write.
    Copy,
}

impl SendMode {
    pub fn from_config(sendfile: bool) -> SendMode {
        if sendfile {
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
    match mode {
        SendMode::Sendfile => sendfile_range(conn, file, offset, len, send_timeout).await,
        SendMode::Copy => copy_range(conn, files, file, offset, len, send_timeout).await,
    }
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
    let mut buf = Vec::with_capacity(READ_CHUNK.min(len as usize).max(1));
    let mut sent = 0u64;
    while sent < len {
        let want = ((len - sent) as usize).min(READ_CHUNK);
        buf.clear();
        let (r, b) = files
            .read_exact_append(file, offset + sent, want, buf)
            .await;
        buf = b;
        r?;
        conn.write_all(&buf, send_timeout).await?;
        sent += want as u64;
    }
    Ok(sent)
}

async fn sendfile_range(
    conn: &mut Conn,
    file: &File,
    offset: u64,
    len: u64,
    send_timeout: Duration,
) -> io::Result<u64> {
    let in_fd = file.as_raw_fd();
    let mut off = offset;
    let end = offset + len;
    while off < end {
        let want = ((end - off) as usize).min(SENDFILE_CHUNK);
        let step = crate::net::sys::sendfile_once(&conn.io, in_fd, &mut off, want);
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
            let files = FileBackend::OnLoop(crate::aio::on_loop::OnLoop);
            for mode in [SendMode::Sendfile, SendMode::Copy] {
                let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
                let (s, peer) = l.accept().await.unwrap();
                let mut conn = Conn::new(s, peer);
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
            }
        });
    }
}
