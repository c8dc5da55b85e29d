//! Log settings: `access_log` (off, a path, or a table) and `error_log`,
//! `[log_format.NAME]` (nginx `log_format`), the built-in formats, and the checks of
//! every `access_log` (top level, `[[server]]`, location): its format exists, its
//! template compiles (an unknown variable is a `file:line` error).

use super::verr::{err, VErr};
use super::{Config, Dur, Size};
use crate::vars::Known;
use serde::Deserialize;
use std::path::PathBuf;
use toml::Spanned;

/// `[log_format.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogFormatCfg {
    /// A template: `$remote_addr [$time_local] "$request" $status`.
    pub format: Spanned<String>,
    #[serde(default)]
    pub escape: LogEscape,
}

/// How variables' values are escaped in a log line (nginx `log_format escape=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogEscape {
    /// `"`, `\` and bytes outside printable ASCII as `\xHH`; no value: `-`.
    #[default]
    Default,
    /// JSON string rules; no value: nothing.
    Json,
    /// As they are; no value: nothing.
    None,
}

/// nginx's `combined`, byte for byte.
pub const COMBINED: &str = "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"";

/// The format of an `access_log` that names none: `combined`, then the request time and
/// the cache status (`-` when the location does not cache).
pub const EDGECACHE: &str = "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" $request_time $upstream_cache_status";

/// The built-in formats: name, template (both with `escape = "default"`).
pub const BUILTIN_FORMATS: [(&str, &str); 2] = [("combined", COMBINED), ("edgecache", EDGECACHE)];

/// The format an `access_log` without `format` uses.
pub const DEFAULT_FORMAT: &str = "edgecache";

/// Most `[log_format.NAME]` tables.
pub const MAX_FORMATS: usize = 256;

/// Largest `access_log` buffer.
pub const MAX_LOG_BUFFER: u64 = 64 << 20;

/// The format called `name`: (template, escape), built-in or defined.
pub fn format_of<'a>(cfg: &'a Config, name: &str) -> Option<(&'a str, LogEscape)> {
    if let Some(f) = cfg.log_format.get(name) {
        return Some((f.format.get_ref(), f.escape));
    }
    BUILTIN_FORMATS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| (*t, LogEscape::Default))
}

/// `[log_format.*]` and every `access_log`.
pub(super) fn validate(cfg: &Config, known: &Known) -> Result<(), VErr> {
    if cfg.log_format.len() > MAX_FORMATS {
        return err(None, "log_format", format!("at most {MAX_FORMATS} formats"));
    }
    for (name, f) in &cfg.log_format {
        let span = Some(f.format.span());
        if BUILTIN_FORMATS.iter().any(|(n, _)| n == name) {
            return err(
                span,
                "log_format",
                format!("{name:?} is a built-in format; pick another name"),
            );
        }
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return err(
                span,
                "log_format",
                format!("{name:?}: a format name is letters, digits, '_' or '-'"),
            );
        }
        super::sites::template(f.format.get_ref(), known).map_err(|m| VErr {
            span: span.filter(|s| s.end > 0),
            key: "log_format.format".into(),
            message: format!("{name:?}: {m}"),
        })?;
    }
    check(cfg, &cfg.access_log, None, "access_log")?;
    for s in &cfg.server {
        if let Some(a) = &s.access_log {
            check(cfg, a.get_ref(), Some(a.span()), "server.access_log")?;
        }
    }
    for loc in cfg
        .location
        .iter()
        .chain(cfg.server.iter().flat_map(|s| &s.location))
    {
        if let Some(a) = &loc.access_log {
            check(cfg, a.get_ref(), Some(a.span()), "location.access_log")?;
        }
    }
    Ok(())
}

fn check(
    cfg: &Config,
    a: &AccessLog,
    span: Option<std::ops::Range<usize>>,
    key: &str,
) -> Result<(), VErr> {
    let AccessLog::File {
        path,
        format,
        buffer,
        ..
    } = a
    else {
        return Ok(());
    };
    if path.as_os_str().is_empty() {
        return err(span, key, "path must not be empty");
    }
    if *buffer > MAX_LOG_BUFFER {
        return err(span, key, format!("buffer: at most {MAX_LOG_BUFFER} bytes"));
    }
    let name = format.as_deref().unwrap_or(DEFAULT_FORMAT);
    if format_of(cfg, name).is_none() {
        return err(
            span,
            key,
            format!(
                "unknown log format {name:?} (define [log_format.{name}], or use \"combined\")"
            ),
        );
    }
    Ok(())
}

/// `access_log = "off"`, `access_log = "path"` or
/// `access_log = { path, format, buffer, flush }` (top level, in a `[[server]]` or in a
/// location; the nearest one applies, as nginx's `access_log`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AccessLog {
    Off,
    File {
        path: PathBuf,
        /// A `[log_format.NAME]`, `combined` or `edgecache`; None: `edgecache`.
        format: Option<String>,
        buffer: u64,
        flush: std::time::Duration,
    },
}

impl<'de> Deserialize<'de> for AccessLog {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            path: PathBuf,
            #[serde(default)]
            format: Option<String>,
            #[serde(default = "default_log_buffer")]
            buffer: Size,
            #[serde(default = "default_log_flush")]
            flush: Dur,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            S(String),
            T(Table),
        }
        match Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "expected \"off\", a path, or { path = \"...\", format = \"combined\", buffer = \"64k\", flush = \"1s\" }",
            )
        })? {
            Raw::S(s) if s == "off" => Ok(AccessLog::Off),
            Raw::S(s) => Ok(AccessLog::File {
                path: PathBuf::from(s),
                format: None,
                buffer: default_log_buffer().0,
                flush: default_log_flush().0,
            }),
            Raw::T(t) => Ok(AccessLog::File {
                path: t.path,
                format: t.format,
                buffer: t.buffer.0,
                flush: t.flush.0,
            }),
        }
    }
}

fn default_log_buffer() -> Size {
    Size(64 * 1024)
}
fn default_log_flush() -> Dur {
    Dur(std::time::Duration::from_secs(1))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Debug,
    Info,
    #[default]
    Warn,
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorLog {
    /// `"stderr"` or a file path.
    #[serde(default = "default_error_log_path")]
    pub path: PathBuf,
    #[serde(default)]
    pub level: LogLevel,
}
fn default_error_log_path() -> PathBuf {
    PathBuf::from("stderr")
}
impl Default for ErrorLog {
    fn default() -> Self {
        ErrorLog {
            path: default_error_log_path(),
            level: LogLevel::Warn,
        }
    }
}
