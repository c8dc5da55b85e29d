//! The `off` backend: file reads on the worker's own loop, as nginx does without
//! `aio`. This is the baseline the `threads` and `io_uring` backends are measured
//! against.

use super::file_io::FileIo;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

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
