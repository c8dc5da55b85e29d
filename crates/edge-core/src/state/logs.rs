//! The access logs of a config, compiled once: each distinct `access_log` (path,
//! format, buffering) becomes one [`CompiledLog`] in [`LogTable::list`], which servers
//! and locations refer to by a [`LogRef`] (an `Arc` and its slot). An exchange keeps the
//! slot of the log that applies to it (`Routed::log`), so logging a request looks up a
//! vector and touches no shared reference count.
//!
//! Scope as nginx's `access_log`: a location's applies, else its server's, else the top
//! level's; `"off"` at any level turns it off there.

use super::error::StateError;
use crate::config::logs::{format_of, DEFAULT_FORMAT};
use crate::config::{AccessLog, Config};
use crate::log::access::{self, CompiledLog};
use crate::log::format::LogFormat;
use crate::vars::Known;
use std::collections::HashMap;
use std::sync::Arc;

/// The slot of "no access log".
pub const LOG_OFF: u16 = u16::MAX;

/// The access log of a server or location.
#[derive(Clone)]
pub struct LogRef {
    /// Index in [`LogTable::list`], or [`LOG_OFF`].
    pub slot: u16,
    pub log: Option<Arc<CompiledLog>>,
}

impl Default for LogRef {
    fn default() -> Self {
        LogRef {
            slot: LOG_OFF,
            log: None,
        }
    }
}

#[derive(Default)]
pub struct LogTable {
    pub list: Vec<Arc<CompiledLog>>,
    by_cfg: HashMap<AccessLog, u16>,
    /// The top-level `access_log` (requests no server took).
    pub top: LogRef,
}

impl LogTable {
    /// Compiles every `access_log` of `cfg` and opens (or reuses) its file.
    pub fn build(cfg: &Config, known: &Known) -> Result<LogTable, StateError> {
        let mut t = LogTable::default();
        let mut formats: HashMap<String, Arc<LogFormat>> = HashMap::new();
        let all = std::iter::once(&cfg.access_log)
            .chain(
                cfg.server
                    .iter()
                    .filter_map(|s| s.access_log.as_ref().map(|a| a.get_ref())),
            )
            .chain(
                cfg.location
                    .iter()
                    .chain(cfg.server.iter().flat_map(|s| &s.location))
                    .filter_map(|l| l.access_log.as_ref().map(|a| a.get_ref())),
            );
        for a in all {
            let AccessLog::File {
                path,
                format,
                buffer,
                flush,
            } = a
            else {
                continue;
            };
            if t.by_cfg.contains_key(a) {
                continue;
            }
            let name = format.as_deref().unwrap_or(DEFAULT_FORMAT);
            let format = match formats.get(name) {
                Some(f) => f.clone(),
                None => {
                    let (src, escape) = format_of(cfg, name).ok_or_else(|| {
                        StateError::AccessLog(format!("unknown log format {name:?}"))
                    })?;
                    let f = LogFormat::compile(name, src, escape, known)
                        .map_err(|e| StateError::AccessLog(format!("log_format {name:?}: {e}")))?;
                    let f = Arc::new(f);
                    formats.insert(name.to_string(), f.clone());
                    f
                }
            };
            let file = access::open(path).map_err(|e| StateError::AccessLog(e.to_string()))?;
            if t.list.len() >= LOG_OFF as usize {
                return Err(StateError::AccessLog("too many access logs".into()));
            }
            t.by_cfg.insert(a.clone(), t.list.len() as u16);
            t.list.push(Arc::new(CompiledLog {
                format,
                file,
                buffer: (*buffer).min(usize::MAX as u64) as usize,
                flush: *flush,
            }));
        }
        t.top = t.resolve(Some(&cfg.access_log), &LogRef::default());
        Ok(t)
    }

    /// The log of a scope that says `a` (None: it says nothing, `inherit` applies).
    pub fn resolve(&self, a: Option<&AccessLog>, inherit: &LogRef) -> LogRef {
        match a {
            None => inherit.clone(),
            Some(AccessLog::Off) => LogRef::default(),
            Some(a) => match self.by_cfg.get(a) {
                Some(&slot) => LogRef {
                    slot,
                    log: self.list.get(slot as usize).cloned(),
                },
                None => LogRef::default(),
            },
        }
    }

    /// The log in `slot` (None: off).
    pub fn get(&self, slot: u16) -> Option<&CompiledLog> {
        self.list.get(slot as usize).map(|l| &**l)
    }
}
