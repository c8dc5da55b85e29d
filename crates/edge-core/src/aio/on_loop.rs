//! The `off` backend: file reads on the worker's own loop, as nginx does without
//! `aio`. Bodies go to the client by sendfile(2) when enabled (no copy through user
//! space), else by pread into one reused buffer and write. This is the baseline the
//! `threads` and `io_uring` backends are measured against.

use super::FileIo;
use crate::server::conn::{timed_out, Conn};
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

/// Reads and sends on the worker's loop.
pub struct OnLoop;

impl FileIo for OnLoop {
    async fn read_exact_append(
        &self,
        file: &File,
        offset: u64,
        len: usize,
        mut buf: Vec<u8>,
    ) -> (io::Result<()>, Vec<u8>) {
        let start = buf.len();
        buf.resize(start + len, 0);
        let mut got = 0;
        while got < len {
            match file.read_at(&mut buf[start + got..], offset + got as u64) {
                Ok(0) => {
                    buf.truncate(start + got);
                    return (
                        Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "file shorter than expected",
                        )),
                        buf,
                    );
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    buf.truncate(start + got);
                    return (Err(e), buf);
                }
            }
        }
        (Ok(()), buf)
    }

    async fn send_range(
        &self,
        conn: &mut Conn,
        file: &File,
        offset: u64,
        len: u64,
        use_sendfile: bool,
        send_timeout: Duration,
    ) -> io::Result<u64> {
        send_file_range(conn, file, offset, len, use_sendfile, send_timeout).await
    }
}

/// Sends `len` bytes of `file` from `offset`. Returns bytes sent.
async fn send_file_range(
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn read_exact_append_appends_and_reports_short_files() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"0123456789").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (r, buf) = rt.block_on(OnLoop.read_exact_append(&f, 2, 5, b"head:".to_vec()));
        r.unwrap();
        assert_eq!(buf, b"head:23456");
        let (r, buf) = rt.block_on(OnLoop.read_exact_append(&f, 8, 5, b"x".to_vec()));
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(
            buf, b"x89",
            "the bytes read are kept, the rest is not padded"
        );
    }
}
