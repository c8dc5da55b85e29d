//! Reading a config: the file or the embedded default, TOML parsing into the
//! [`Config`](super::Config) types, semantic validation, and errors as
//! `file:line: key: message`.

use super::{validate, Config, ConfigError, DEFAULT_CONFIG, DEFAULT_CONFIG_NAME};
use std::path::Path;

/// Where the config came from, for messages and for resolving relative paths.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub text: String,
}

/// Reads and validates a config file.
pub fn load(path: &Path) -> Result<(Config, Source), ConfigError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: name.clone(),
        line: 0,
        key: "file".into(),
        message: format!("cannot read: {e}"),
    })?;
    let cfg = parse(&name, &text)?;
    Ok((cfg, Source { name, text }))
}

/// The embedded default config.
pub fn embedded_default() -> (Config, Source) {
    let cfg =
        parse(DEFAULT_CONFIG_NAME, DEFAULT_CONFIG).expect("the embedded default config is valid");
    (
        cfg,
        Source {
            name: DEFAULT_CONFIG_NAME.into(),
            text: DEFAULT_CONFIG.into(),
        },
    )
}

/// Parses and validates config text. `name` is used in error messages, and names the
/// file: relative `secure_link.secret_file`s and `[[geo]]` files are under its
/// directory (the working directory for a bare name).
pub fn parse(name: &str, text: &str) -> Result<Config, ConfigError> {
    parse_in(name, text, Path::new(name).parent())
}

/// [`parse`], with relative secret and geo files under `dir` (None or empty: the
/// working directory).
pub fn parse_in(name: &str, text: &str, dir: Option<&Path>) -> Result<Config, ConfigError> {
    let mut cfg: Config = toml::from_str(text).map_err(|e| from_toml_error(name, text, &e))?;
    for s in &mut cfg.server {
        s.inherit();
    }
    super::limits::inherit(&mut cfg);
    super::access::inherit(&mut cfg);
    let located = |e: super::verr::VErr| ConfigError {
        file: name.into(),
        line: match e.span {
            Some(span) => line_of(text, span.start),
            None => find_key_line(text, &e.key),
        },
        key: e.key,
        message: e.message,
    };
    validate::validate(&cfg).map_err(located)?;
    // One rule for every file a config names besides itself.
    let dir = dir.filter(|d| !d.as_os_str().is_empty());
    super::secure_link::load_secrets(&mut cfg, dir).map_err(located)?;
    super::geo::load(&cfg, dir.unwrap_or(Path::new(""))).map_err(located)?;
    Ok(cfg)
}

/// Line of `key` (dotted): for `table.key`, the `key =` under `[table]`, or the line of
/// an inline `table = { ... }`; otherwise the first `key =` (last dotted part). 1 when
/// absent (a default).
fn find_key_line(text: &str, key: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let last = key.rsplit('.').next().unwrap_or(key);
    if let Some((table, _)) = key.rsplit_once('.') {
        let header = format!("[{table}]");
        let first = table.split('.').next().unwrap_or(table);
        for (i, l) in lines.iter().enumerate() {
            if l.trim() == header {
                let under = lines[i + 1..]
                    .iter()
                    .take_while(|l| !l.trim_start().starts_with('['))
                    .position(|l| line_key(l).as_deref() == Some(last));
                return under.map_or(i + 1, |j| i + 2 + j);
            }
            let inline = !l.trim_start().starts_with('[') && l.contains('{');
            if inline && !table.contains('.') && line_key(l).as_deref() == Some(first) {
                return i + 1; // an inline table
            }
        }
    }
    lines
        .iter()
        .position(|l| line_key(l).as_deref() == Some(last))
        .map(|i| i + 1)
        .unwrap_or(1)
}

/// Line of `key = ` in the table holding byte `anchor` (a `[[cache]]` by the span of
/// its `name`, a `[[listen]]` by its `addr`); with `anchor` None, among the top-level
/// keys. A key the table leaves out (its default) gives the table's header line (1 at
/// the top level).
pub fn key_line_in_table(text: &str, anchor: Option<usize>, key: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let is_header = |l: &&str| l.trim_start().starts_with('[');
    let start = match anchor {
        Some(at) => {
            let at = line_of(text, at).saturating_sub(1);
            match lines[..(at + 1).min(lines.len())]
                .iter()
                .rposition(is_header)
            {
                Some(h) => h,
                None => return key_line_in_table(text, None, key),
            }
        }
        None => 0,
    };
    let body_from = if anchor.is_some() { start + 1 } else { 0 };
    let end = lines[body_from.min(lines.len())..]
        .iter()
        .position(is_header)
        .map_or(lines.len(), |i| body_from + i);
    lines[body_from.min(end)..end]
        .iter()
        .position(|l| line_key(l).as_deref() == Some(key))
        .map_or(if anchor.is_some() { start + 1 } else { 1 }, |i| {
            body_from + i + 1
        })
}

/// Line of a dotted `table.key` (`aio.mode`; `aio.thread_pool` finds its own
/// `[aio.thread_pool]` header too): see [`key_line_in_table`] for tables of tables.
pub fn key_line(text: &str, key: &str) -> usize {
    let header = format!("[{key}]");
    if let Some(i) = text.lines().position(|l| l.trim() == header) {
        return i + 1;
    }
    if !key.contains('.') {
        return key_line_in_table(text, None, key);
    }
    find_key_line(text, key)
}

/// 1-based line number of a byte offset.
pub fn line_of(text: &str, offset: usize) -> usize {
    let offset = offset.min(text.len());
    text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Turns a toml/serde error into `file:line: key: message`. The key is the dotted name
/// of the table plus the `key =` on the error's line, which is what an operator looks for.
fn from_toml_error(name: &str, text: &str, e: &toml::de::Error) -> ConfigError {
    let span = e.span().unwrap_or(0..0);
    let line = if text.is_empty() {
        1
    } else {
        line_of(text, span.start)
    };
    let mut message = e.message().trim().to_string();
    let line_text = text.lines().nth(line.saturating_sub(1)).unwrap_or("");
    let header = line_text.trim_start().starts_with('[');
    // The key on the error's line: none on a table header, whose table is the key.
    let line_k = line_key(line_text).filter(|_| !header);
    let mut key = line_k.clone().unwrap_or_default();
    // A field the error names (unknown, or missing): under the line's key when it is
    // an inline table's (`limit_req = [{ foo = 1 }]` is `limit_req.foo`).
    let named = ["unknown field `", "missing field `"]
        .iter()
        .find_map(|p| message.strip_prefix(p))
        .and_then(|rest| rest.find('`').map(|end| rest[..end].to_string()));
    if let Some(field) = named {
        key = match &line_k {
            Some(k) if *k != field => format!("{k}.{field}"),
            _ => field,
        };
        if message.starts_with("unknown field") {
            message = format!("unknown key; {}", message);
        }
    }
    if let Some(table) = table_at(text, line) {
        key = if key.is_empty() {
            table
        } else {
            format!("{table}.{key}")
        };
    }
    if key.is_empty() {
        key = "config".into();
    }
    ConfigError {
        file: name.into(),
        line,
        key,
        message,
    }
}

/// `name` in a `name = value` line.
fn line_key(line: &str) -> Option<String> {
    let l = line.trim();
    if l.starts_with('[') {
        return Some(l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    }
    let eq = l.find('=')?;
    Some(l[..eq].trim().trim_matches('"').to_string())
}

/// The `[table]`/`[[table]]` header in force at `line`.
fn table_at(text: &str, line: usize) -> Option<String> {
    text.lines()
        .take(line)
        .collect::<Vec<_>>()
        .iter()
        .rev()
        .find(|l| l.trim_start().starts_with('['))
        .map(|l| {
            l.trim()
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string()
        })
}
