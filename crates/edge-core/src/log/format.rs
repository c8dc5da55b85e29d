//! Access-log formats (nginx `log_format`): a template of variables compiled once, and
//! how each variable's value is escaped in the line.
//!
//! - `escape = "default"` (nginx's default): `"`, `\` and bytes outside printable ASCII
//!   become `\xHH`; a variable with no value is written as `-`.
//! - `escape = "json"`: JSON string rules (`\"`, `\\`, `\n`, `\u0001`...); a variable with
//!   no value is written as nothing. Bytes that are not UTF-8 become `\u00HH` (nginx
//!   copies them as they are, which no JSON parser takes).
//! - `escape = "none"`: values as they are; no value is nothing.
//!
//! Literal text of the format is copied as it is. Cost per line: the variables the format
//! names, each written once into the line buffer, then scanned for bytes to escape
//! (escaping moves the value only when it has some).

use crate::config::LogEscape;
use crate::vars::{Ctx, Known, Piece, Template, TemplateError, Var};

/// A compiled `log_format`.
#[derive(Debug)]
pub struct LogFormat {
    pub name: String,
    template: Template,
    escape: LogEscape,
    /// The format reads `$time_local` / `$time_iso8601` (the clock is read only then).
    pub needs_time_local: bool,
    pub needs_time_iso8601: bool,
}

impl LogFormat {
    pub fn compile(
        name: &str,
        src: &str,
        escape: LogEscape,
        known: &Known,
    ) -> Result<LogFormat, TemplateError> {
        let template = Template::compile(src, known)?;
        let uses = |v: Var| template.vars().any(|x| *x == v);
        Ok(LogFormat {
            name: name.to_string(),
            needs_time_local: uses(Var::TimeLocal),
            needs_time_iso8601: uses(Var::TimeIso8601),
            template,
            escape,
        })
    }

    /// Appends one line (with its `\n`) for the request `ctx` describes; `ctx.log` holds
    /// the log-time facts.
    pub fn render(&self, ctx: &Ctx<'_>, out: &mut Vec<u8>) {
        for p in self.template.pieces() {
            match p {
                Piece::Lit(l) => out.extend_from_slice(l.as_bytes()),
                Piece::Var(v) => {
                    let start = out.len();
                    v.write(ctx, out);
                    if out.len() == start {
                        if self.escape == LogEscape::Default && !v.is_found(ctx) {
                            out.push(b'-');
                        }
                        continue;
                    }
                    match self.escape {
                        LogEscape::Default => escape_default_in_place(out, start),
                        LogEscape::Json => escape_json_in_place(out, start),
                        LogEscape::None => {}
                    }
                }
            }
        }
        out.push(b'\n');
    }
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";
const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";

fn default_escapes(c: u8) -> bool {
    c == b'"' || c == b'\\' || !(0x20..0x7f).contains(&c)
}

/// nginx's `escape=default` on `out[start..]`.
fn escape_default_in_place(out: &mut Vec<u8>, start: usize) {
    let Some(first) = out[start..].iter().position(|&c| default_escapes(c)) else {
        return;
    };
    let tail = out.split_off(start + first);
    escape_default(&tail, out);
}

/// Appends `s` with `"`, `\` and bytes outside `0x20..0x7f` as `\xHH`, so that request
/// content can never split a line or forge one.
pub fn escape_default(s: &[u8], out: &mut Vec<u8>) {
    for &c in s {
        if default_escapes(c) {
            out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX_UPPER[(c >> 4) as usize],
                HEX_UPPER[(c & 15) as usize],
            ]);
        } else {
            out.push(c);
        }
    }
}

fn escape_json_in_place(out: &mut Vec<u8>, start: usize) {
    let clean = out[start..]
        .iter()
        .all(|&c| c >= 0x20 && c != b'"' && c != b'\\' && c < 0x80);
    if clean {
        return;
    }
    let tail = out.split_off(start);
    escape_json(&tail, out);
}

/// Appends `s` as the inside of a JSON string.
pub fn escape_json(s: &[u8], out: &mut Vec<u8>) {
    for chunk in s.utf8_chunks() {
        for &c in chunk.valid().as_bytes() {
            match c {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                0x08 => out.extend_from_slice(b"\\b"),
                0x0c => out.extend_from_slice(b"\\f"),
                c if c < 0x20 => u00(c, out),
                c => out.push(c),
            }
        }
        for &c in chunk.invalid() {
            u00(c, out);
        }
    }
}

fn u00(c: u8, out: &mut Vec<u8>) {
    out.extend_from_slice(&[
        b'\\',
        b'u',
        b'0',
        b'0',
        HEX_LOWER[(c >> 4) as usize],
        HEX_LOWER[(c & 15) as usize],
    ]);
}

#[cfg(test)]
mod tests;
