//! The access log: one line per request in nginx's `combined` format followed by the
//! request time in seconds and the cache status (`-` when the location does not cache):
//!
//! `127.0.0.1 - - [21/Nov/2026:03:12:17 +0000] "GET /obj/10k/1 HTTP/1.1" 200 10240 "-" "curl/8.0" 0.001 HIT`
//!
//! Each worker appends to its own buffer and writes it to the shared file (O_APPEND, one
//! write(2) per flush, so lines from different workers never interleave) when the
//! buffer passes `buffer` bytes or every `flush` interval, as nginx's `access_log ...
//! buffer= flush=`.

use edge_http::RequestHead;
use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The shared log file, reopened on SIGUSR1.
pub struct AccessLogFile {
    path: PathBuf,
    file: Mutex<File>,
}

fn open_append(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("open() \"{}\" failed: {e}", path.display()),
            )
        })
}

impl AccessLogFile {
    pub fn open(path: &Path) -> io::Result<Arc<AccessLogFile>> {
        Ok(Arc::new(AccessLogFile {
            path: path.to_path_buf(),
            file: Mutex::new(open_append(path)?),
        }))
    }

    pub fn write(&self, buf: &[u8]) {
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = f.write_all(buf) {
            tracing::error!("write() to \"{}\" failed: {e}", self.path.display());
        }
    }

    pub fn reopen(&self) {
        match open_append(&self.path) {
            Ok(f) => *self.file.lock().unwrap_or_else(|p| p.into_inner()) = f,
            Err(e) => tracing::error!("reopening the access log: {e}"),
        }
    }
}

/// What one access-log line says about a request.
pub struct Entry<'a> {
    /// The request's client address (`Exchange::client_addr`), the first field.
    pub peer: &'a SocketAddr,
    pub req: &'a RequestHead,
    pub status: u16,
    pub body_bytes_sent: u64,
    /// Time from the request head to the end of the response.
    pub request_time: Duration,
    /// `X-Cache-Status` (None: the location does not cache).
    pub cache_status: Option<&'a str>,
}

/// A worker's buffer in front of the shared file.
pub struct AccessLogBuf {
    target: Option<Arc<AccessLogFile>>,
    buf: Vec<u8>,
    cap: usize,
    pub flush_every: Duration,
    /// Cached `$time_local` and the second it was made for.
    time: (u64, String),
}

impl AccessLogBuf {
    pub fn new(
        target: Option<Arc<AccessLogFile>>,
        cap: usize,
        flush_every: Duration,
    ) -> AccessLogBuf {
        AccessLogBuf {
            buf: Vec::with_capacity(if target.is_some() { cap } else { 0 }),
            target,
            cap,
            flush_every,
            time: (u64::MAX, String::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    pub fn log(&mut self, e: &Entry<'_>) {
        if self.target.is_none() {
            return;
        }
        let now = SystemTime::now();
        let sec = now
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if self.time.0 != sec {
            self.time = (sec, super::time::time_local(now));
        }
        let req = e.req;
        let b = &mut self.buf;
        let _ = write!(b, "{} - - [{}] \"", e.peer.ip(), self.time.1);
        escape_into(b, req.method.as_str().as_bytes());
        b.push(b' ');
        escape_into(b, req.target.as_bytes());
        b.push(b' ');
        b.extend_from_slice(req.version.as_str().as_bytes());
        let _ = write!(b, "\" {} {} \"", e.status, e.body_bytes_sent);
        escape_into(b, req.headers.get("referer").unwrap_or(b"-"));
        b.extend_from_slice(b"\" \"");
        escape_into(b, req.headers.get("user-agent").unwrap_or(b"-"));
        let rt = e.request_time;
        let _ = writeln!(
            b,
            "\" {}.{:03} {}",
            rt.as_secs(),
            rt.subsec_millis(),
            e.cache_status.unwrap_or("-")
        );
        if self.buf.len() >= self.cap {
            self.flush();
        }
    }

    pub fn flush(&mut self) {
        if let Some(t) = &self.target {
            if !self.buf.is_empty() {
                t.write(&self.buf);
                self.buf.clear();
            }
        }
    }
}

/// nginx escapes `"`, `\` and bytes outside printable ASCII as `\xHH` so a line can
/// never be split or forged by request content.
fn escape_into(out: &mut Vec<u8>, s: &[u8]) {
    for &c in s {
        if c == b'"' || c == b'\\' || !(0x20..0x7f).contains(&c) {
            let _ = write!(out, "\\x{c:02X}");
        } else {
            out.push(c);
        }
    }
}

/// Flushes the worker's buffer every `flush` interval.
pub async fn flusher(log: Rc<RefCell<AccessLogBuf>>) {
    if !log.borrow().enabled() {
        return;
    }
    let every = log.borrow().flush_every.max(Duration::from_millis(10));
    loop {
        tokio::time::sleep(every).await;
        log.borrow_mut().flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_one_line_per_request() {
        let mut out = Vec::new();
        escape_into(&mut out, b"a\"b\\c\n\x01\xff");
        assert_eq!(out, b"a\\x22b\\x5Cc\\x0A\\x01\\xFF");
    }
}
