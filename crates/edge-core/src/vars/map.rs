//! `[[map]]` variables (nginx `map`): a source template's value looked up in a table of
//! exact names, wildcards and regexes; the entry's value (a template) or the default.

use super::ctx::{Ctx, MapValues};
use super::names::NameTable;
use super::template::Template;

/// Nested map evaluations allowed (a map's source or value naming another map).
const MAX_DEPTH: u8 = 8;

/// One compiled `[[map]]`.
#[derive(Debug, Clone)]
pub struct Map {
    pub source: Template,
    /// Entry index by pattern. Exact and wildcard entries compare in lower case.
    pub table: NameTable<u16>,
    pub values: Vec<Template>,
    pub default: Template,
}

/// Every `[[map]]` of the config, by [`super::Var::Map`] index, and every `[[geo]]`,
/// by [`super::Var::Geo`] index.
#[derive(Debug, Clone, Default)]
pub struct Maps {
    pub list: Vec<Map>,
    pub geo: Vec<super::Geo>,
}

impl Maps {
    /// `[[geo]]` `i`'s value for this request, without copying it.
    #[inline]
    pub fn geo_value(&self, i: usize, ctx: &Ctx<'_>) -> Option<&str> {
        self.geo.get(i).map(|g| g.value(ctx))
    }
}

impl MapValues for Maps {
    fn write(&self, i: usize, ctx: &Ctx<'_>, out: &mut Vec<u8>) {
        let Some(m) = self.list.get(i) else { return };
        if ctx.depth >= MAX_DEPTH {
            return;
        }
        let inner = Ctx {
            depth: ctx.depth + 1,
            ..*ctx
        };
        let mut src = String::new();
        m.source.render_string(&inner, &mut src);
        // Exact and wildcard patterns are stored lower-case; regexes see the value as
        // it is, so `~` stays case-sensitive.
        let found = match m.table.find_exact_or_wildcard(&src.to_ascii_lowercase()) {
            Some(v) => Some(v),
            None => m.table.find_regex(&src, None),
        };
        match found.and_then(|&v| m.values.get(v as usize)) {
            Some(t) => t.render(&inner, out),
            None => m.default.render(&inner, out),
        }
    }

    fn write_geo(&self, i: usize, ctx: &Ctx<'_>, out: &mut Vec<u8>) {
        if let Some(v) = self.geo_value(i, ctx) {
            out.extend_from_slice(v.as_bytes());
        }
    }
}
