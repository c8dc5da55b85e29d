//! The error log: tracing's formatter writing to stderr or to a file that SIGUSR1
//! reopens. The level comes from `error_log.level`; `EDGECACHE_LOG` (a tracing filter
//! such as `debug` or `edge_core=debug`) overrides it for debugging.

use crate::config::{ErrorLog, LogLevel};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

enum Target {
    Stderr,
    File(File),
}

/// Handle to reopen the error log file.
#[derive(Clone)]
pub struct ErrorLogHandle {
    path: Option<PathBuf>,
    target: Arc<Mutex<Target>>,
}

impl ErrorLogHandle {
    pub fn reopen(&self) {
        if let Some(p) = &self.path {
            match open(p) {
                Ok(f) => *self.target.lock().unwrap_or_else(|e| e.into_inner()) = Target::File(f),
                Err(e) => tracing::error!("reopening the error log: {e}"),
            }
        }
    }
}

fn open(p: &std::path::Path) -> io::Result<File> {
    if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
        .map_err(|e| io::Error::new(e.kind(), format!("open() \"{}\" failed: {e}", p.display())))
}

struct Writer(Arc<Mutex<Target>>);

impl Write for Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut *self.0.lock().unwrap_or_else(|e| e.into_inner()) {
            Target::Stderr => io::stderr().write(buf),
            Target::File(f) => f.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Installs the global subscriber. Called once, before any socket opens.
pub fn init(cfg: &ErrorLog) -> io::Result<ErrorLogHandle> {
    let (path, target) = if cfg.path.as_os_str() == "stderr" {
        (None, Target::Stderr)
    } else {
        (Some(cfg.path.clone()), Target::File(open(&cfg.path)?))
    };
    let target = Arc::new(Mutex::new(target));
    let level = match cfg.level {
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
    };
    let filter = std::env::var("EDGECACHE_LOG").unwrap_or_else(|_| level.to_string());
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let t = target.clone();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_thread_names(true)
        .with_ansi(false)
        .with_writer(move || Writer(t.clone()))
        .try_init();
    Ok(ErrorLogHandle { path, target })
}
