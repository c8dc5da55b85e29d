//! The access logs: one line per request, in the format its `access_log` names (see
//! [`super::format`]; by default nginx's `combined` followed by the request time in
//! seconds and the cache status, `-` when the location does not cache):
//!
//! `127.0.0.1 - - [21/Nov/2026:03:12:17 +0000] "GET /obj/10k/1 HTTP/1.1" 200 10240 "-" "curl/8.0" 0.001 HIT`
//!
//! How it fits: the state layer compiles each distinct `access_log` of the config once
//! into a [`CompiledLog`] (its format and its file) that servers and locations hold; a
//! file is opened once per path and shared by every log that writes to it ([`open`]),
//! across reloads too, and SIGUSR1 reopens them all ([`reopen_all`]). Each worker
//! appends lines to its own buffer per file ([`LogBuffers`]) and writes a buffer to the
//! file (O_APPEND, one write(2) per flush, so lines from different workers never
//! interleave) when it passes `buffer` bytes or every `flush` interval, as nginx's
//! `access_log ... buffer= flush=`.

use super::format::LogFormat;
use crate::vars::{Ctx, LogFacts};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

/// A log file, shared by every log and worker that writes to its path.
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

/// The files open now, by path (weak: a file closes when no config uses it and no
/// worker holds a line for it).
static OPEN: Mutex<Vec<Weak<AccessLogFile>>> = Mutex::new(Vec::new());

/// The file at `path`: the one already open, else opened now (appending, directories
/// created).
pub fn open(path: &Path) -> io::Result<Arc<AccessLogFile>> {
    let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    open.retain(|w| w.strong_count() > 0);
    if let Some(f) = open
        .iter()
        .filter_map(Weak::upgrade)
        .find(|f| f.path == path)
    {
        return Ok(f);
    }
    let f = Arc::new(AccessLogFile {
        path: path.to_path_buf(),
        file: Mutex::new(open_append(path)?),
    });
    open.push(Arc::downgrade(&f));
    Ok(f)
}

/// SIGUSR1: reopens every access log file (logrotate moved them away first).
pub fn reopen_all() {
    let files: Vec<Arc<AccessLogFile>> = OPEN
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for f in files {
        f.reopen();
    }
}

impl AccessLogFile {
    pub fn path(&self) -> &Path {
        &self.path
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

/// One `access_log`, compiled: its format, its file, and how its lines are buffered.
pub struct CompiledLog {
    pub format: Arc<LogFormat>,
    pub file: Arc<AccessLogFile>,
    /// Bytes a worker gathers before it writes (0: every line at once).
    pub buffer: usize,
    pub flush: Duration,
}

/// A worker's lines not yet written to one file.
struct Pending {
    file: Arc<AccessLogFile>,
    buf: Vec<u8>,
    flush: Duration,
    since: Instant,
    /// Flusher passes since a line was last added: an entry idle for [`IDLE_PASSES`]
    /// is dropped (releasing the file of a config that is gone).
    idle: u32,
}

/// The times a format may print, made once per second.
struct Clock {
    sec: u64,
    local: String,
    iso8601: String,
}

/// A worker's access-log buffers, one per file it has lines for.
pub struct LogBuffers {
    pending: Vec<Pending>,
    clock: Clock,
}

impl Default for LogBuffers {
    fn default() -> Self {
        LogBuffers {
            pending: Vec::new(),
            clock: Clock {
                sec: u64::MAX,
                local: String::new(),
                iso8601: String::new(),
            },
        }
    }
}

impl LogBuffers {
    /// Appends the line of one request to `log`: `ctx` is the request's variables,
    /// `facts` what happened (its times are filled here, when the format prints them).
    pub fn log(&mut self, log: &CompiledLog, ctx: &Ctx<'_>, facts: LogFacts<'_>) {
        let fmt = &log.format;
        if fmt.needs_time_local || fmt.needs_time_iso8601 {
            let now = SystemTime::now();
            let sec = now
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            if self.clock.sec != sec {
                self.clock = Clock {
                    sec,
                    local: super::time::time_local(now),
                    iso8601: super::time::time_iso8601(now),
                };
            }
        }
        let facts = LogFacts {
            time_local: &self.clock.local,
            time_iso8601: &self.clock.iso8601,
            ..facts
        };
        let mut ctx = *ctx;
        ctx.log = Some(&facts);
        let i = match self
            .pending
            .iter()
            .position(|p| Arc::ptr_eq(&p.file, &log.file))
        {
            Some(i) => i,
            None => {
                self.pending.push(Pending {
                    file: log.file.clone(),
                    buf: Vec::with_capacity(log.buffer.min(64 * 1024) + 512),
                    flush: log.flush,
                    since: Instant::now(),
                    idle: 0,
                });
                self.pending.len() - 1
            }
        };
        let p = &mut self.pending[i];
        p.idle = 0;
        p.flush = p.flush.min(log.flush);
        if p.buf.is_empty() {
            p.since = Instant::now();
        }
        fmt.render(&ctx, &mut p.buf);
        if p.buf.len() >= log.buffer {
            p.file.write(&p.buf);
            p.buf.clear();
        }
    }

    /// Writes the buffers whose `flush` time has come (all of them with `all`), and
    /// forgets files no line went to for [`IDLE_PASSES`] calls.
    pub fn flush(&mut self, all: bool) {
        let now = Instant::now();
        for p in &mut self.pending {
            if !p.buf.is_empty() && (all || now.duration_since(p.since) >= p.flush) {
                p.file.write(&p.buf);
                p.buf.clear();
            }
        }
        self.pending.retain_mut(|p| {
            p.idle += 1;
            p.idle < IDLE_PASSES || !p.buf.is_empty()
        });
    }

    /// How long until the flusher should look again.
    pub fn next_tick(&self) -> Duration {
        self.pending
            .iter()
            .map(|p| p.flush)
            .min()
            .unwrap_or(IDLE_TICK)
            .clamp(Duration::from_millis(10), IDLE_TICK)
    }
}

/// Flusher passes after which a file no line went to is forgotten by the worker.
const IDLE_PASSES: u32 = 50;

/// How often a worker's flusher looks at its buffers when it has none due sooner.
const IDLE_TICK: Duration = Duration::from_millis(100);

/// Flushes a worker's buffers every `flush` interval.
pub async fn flusher(log: std::rc::Rc<std::cell::RefCell<LogBuffers>>) {
    loop {
        let every = log.borrow().next_tick();
        tokio::time::sleep(every).await;
        log.borrow_mut().flush(false);
    }
}
