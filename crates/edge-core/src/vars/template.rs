//! [`Template`]: a string with `$name` / `${name}` references, parsed once.

use super::ctx::Ctx;
use super::var::{Known, Var};

/// Longest template source accepted (a config value, not request data).
pub const MAX_TEMPLATE: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Lit(Box<str>),
    Var(Var),
}

/// One piece of a [`Template`], see [`Template::pieces`].
#[derive(Debug, Clone, Copy)]
pub enum Piece<'a> {
    Lit(&'a str),
    Var(&'a Var),
}

/// A compiled template: literal text and variables, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Template {
    parts: Box<[Part]>,
    /// Every part writes UTF-8 (no request header, cookie, map or binary address):
    /// [`Template::to_string`] skips the check.
    utf8: bool,
}

/// Why a template does not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateError {
    /// `$request_url`: no such variable.
    Unknown(String),
    /// `${name` without `}`, `${}`, or a source over [`MAX_TEMPLATE`].
    Syntax(String),
}

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemplateError::Unknown(n) => write!(f, "unknown variable \"${n}\""),
            TemplateError::Syntax(m) => f.write_str(m),
        }
    }
}

fn name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

impl Template {
    /// Parses `src` as nginx does: `$name` is the longest run of letters, digits and
    /// `_` (a digit right after `$` is one capture: `$12` is `$1` then `2`), `${name}`
    /// delimits it, and a `$` followed by neither is a literal `$`.
    pub fn compile(src: &str, known: &Known) -> Result<Template, TemplateError> {
        if src.len() > MAX_TEMPLATE {
            return Err(TemplateError::Syntax(format!(
                "longer than {MAX_TEMPLATE} bytes"
            )));
        }
        let mut parts = Vec::new();
        let mut lit = String::new();
        let b = src.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let Some(off) = src[i..].find('$') else {
                lit.push_str(&src[i..]);
                break;
            };
            lit.push_str(&src[i..i + off]);
            i += off + 1;
            let (name, next) = if b.get(i) == Some(&b'{') {
                let Some(end) = src[i + 1..].find('}') else {
                    return Err(TemplateError::Syntax(format!(
                        "\"${{\" without \"}}\" in {src:?}"
                    )));
                };
                let name = &src[i + 1..i + 1 + end];
                if name.is_empty() || !name.bytes().all(name_byte) {
                    return Err(TemplateError::Syntax(format!(
                        "invalid variable name {name:?} in {src:?}"
                    )));
                }
                (name, i + 2 + end)
            } else if b.get(i).is_some_and(|c| c.is_ascii_digit()) {
                (&src[i..i + 1], i + 1)
            } else {
                let n = b[i..].iter().take_while(|&&c| name_byte(c)).count();
                if n == 0 {
                    lit.push('$');
                    continue;
                }
                (&src[i..i + n], i + n)
            };
            let var =
                Var::resolve(name, known).ok_or_else(|| TemplateError::Unknown(name.into()))?;
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit).into()));
            }
            parts.push(Part::Var(var));
            i = next;
        }
        if !lit.is_empty() {
            parts.push(Part::Lit(lit.into()));
        }
        let utf8 = parts.iter().all(|p| match p {
            Part::Lit(_) => true,
            Part::Var(v) => v.writes_utf8(),
        });
        Ok(Template {
            parts: parts.into(),
            utf8,
        })
    }

    /// A template of literal text only (no `$` interpretation).
    pub fn literal(text: &str) -> Template {
        Template {
            parts: if text.is_empty() {
                Box::new([])
            } else {
                Box::new([Part::Lit(text.into())])
            },
            utf8: true,
        }
    }

    /// The text, when the template has no variables.
    pub fn as_literal(&self) -> Option<&str> {
        match &*self.parts {
            [] => Some(""),
            [Part::Lit(l)] => Some(l),
            _ => None,
        }
    }

    /// The variables it references, in order.
    pub fn vars(&self) -> impl Iterator<Item = &Var> {
        self.parts.iter().filter_map(|p| match p {
            Part::Var(v) => Some(v),
            Part::Lit(_) => None,
        })
    }

    /// Its literal parts and variables, in order (an access log escapes each variable's
    /// value as its format says).
    pub fn pieces(&self) -> impl Iterator<Item = Piece<'_>> {
        self.parts.iter().map(|p| match p {
            Part::Lit(l) => Piece::Lit(l),
            Part::Var(v) => Piece::Var(v),
        })
    }

    /// Appends the rendered bytes.
    pub fn render(&self, ctx: &Ctx<'_>, out: &mut Vec<u8>) {
        for p in self.parts.iter() {
            match p {
                Part::Lit(l) => out.extend_from_slice(l.as_bytes()),
                Part::Var(v) => v.write(ctx, out),
            }
        }
    }

    /// Appends the rendered text (bytes that are not UTF-8, such as
    /// `$binary_remote_addr`, are replaced by U+FFFD).
    pub fn render_string(&self, ctx: &Ctx<'_>, out: &mut String) {
        let mut v = std::mem::take(out).into_bytes();
        self.render(ctx, &mut v);
        *out = match String::from_utf8(v) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
    }

    /// The rendered text, in a new string (sized once for the usual case: the
    /// literals, the request target and a host).
    pub fn to_string(&self, ctx: &Ctx<'_>) -> String {
        let lits: usize = self
            .parts
            .iter()
            .map(|p| match p {
                Part::Lit(l) => l.len(),
                Part::Var(_) => 0,
            })
            .sum();
        let mut v = Vec::with_capacity(lits + ctx.request_uri.len().max(ctx.uri.len()) + 64);
        self.render(ctx, &mut v);
        if self.utf8 {
            debug_assert!(std::str::from_utf8(&v).is_ok());
            // SAFETY: every part wrote UTF-8: literals are `str`, and the variables of
            // a `utf8` template write `str` values (or ASCII) only (`Var::writes_utf8`).
            return unsafe { String::from_utf8_unchecked(v) };
        }
        match String::from_utf8(v) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}
