//! Sending a byte range of a file to the client: sendfile(2) when enabled (no copy through
//! user space), else pread into one reused buffer and write.
//!
//! Today's file reads happen on the worker's loop (the `aio = "off"` baseline of
//! DESIGN.md); the aio backends plug in below this function.

use super::conn::{timed_out, Conn};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::time::Duration;
use tokio::io::Interest;

/// Largest sendfile() call; keeps one connection from monopolising the loop.
const SENDFILE_CHUNK: usize = 1 << 20;
/// Read buffer when sendfile is off.
const READ_CHUNK: usize = 64 * 1024;

/// Sends `len` bytes of `file` from `offset`. Returns bytes sent.
pub async fn send_file_range(
    conn: &mut Conn,
    file: &File,
    offset: u64,
    len: u64,
    use_sendfile: bool,
    send_timeout: Duration,
) -> io::Result<u64> {
    if use_sendfile {
        return sendfile_range(conn, file, offset, len, send_timeout).await;
    }
    let mut buf = vec![0u8; READ_CHUNK.min(len as usize).max(1)];
    let mut sent = 0u64;
    while sent < len {
        let want = ((len - sent) as usize).min(buf.len());
        let n = file.read_at(&mut buf[..want], offset + sent)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "file shorter than expected",
            ));
        }
        conn.write_all(&buf[..n], send_timeout).await?;
        sent += n as u64;
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
    let out_fd = conn.io.as_raw_fd();
    let in_fd = file.as_raw_fd();
    let mut off = offset as libc::off_t;
    let end = offset + len;
    while (off as u64) < end {
        let want = ((end - off as u64) as usize).min(SENDFILE_CHUNK);
        let fut = conn.io.async_io(Interest::WRITABLE, || {
            // SAFETY: both fds are open for the duration of the call (we hold the socket
            // and the File); `off` is a valid off_t the kernel reads and advances.
            let n = unsafe { libc::sendfile(out_fd, in_fd, &mut off, want) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        });
        match tokio::time::timeout(send_timeout, fut).await {
            Ok(Ok(0)) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shorter than expected",
                ))
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(timed_out("send")),
        }
    }
    Ok(len)
}
