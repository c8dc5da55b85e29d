//! Name matching in nginx's order (`server_name`, `map ... hostnames`): an exact name,
//! then the longest leading wildcard (`*.example.com`), then the longest trailing
//! wildcard (`www.example.*`), then regexes (`~...`) in config order.

use super::ctx::Captures;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// xxh3 as a `Hasher` for short string keys (host names, paths): one xxh3 call per
/// `write`, several times cheaper than SipHash for a 20-byte name. The tables hold
/// names from the config only, so no flooding resistance is needed.
#[derive(Default)]
pub struct Xxh3Hasher(u64);

impl Hasher for Xxh3Hasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = twox_hash::XxHash3_64::oneshot_with_seed(self.0, bytes);
    }
    fn write_u8(&mut self, n: u8) {
        // `str`'s terminator: mixed in without another xxh3 call.
        self.0 = (self.0 ^ n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A `HashMap` keyed by names from the config, hashed with [`Xxh3Hasher`].
pub type NameMap<K, V> = HashMap<K, V, BuildHasherDefault<Xxh3Hasher>>;

/// Compiled-program size limit of one regex from the config (bounded memory per
/// pattern; the regex crate's matching is linear in the subject).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// At most this many regexes are tried one by one; past it a `RegexSet` finds the
/// first that matches in one pass.
const REGEX_SCAN: usize = 8;

/// Compiles a regex from the config, bounded in size.
pub fn compile_regex(pattern: &str, case_insensitive: bool) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| match e {
            regex::Error::Syntax(m) => format!("invalid regex {pattern:?}: {m}"),
            other => format!("invalid regex {pattern:?}: {other}"),
        })
}

/// One pattern of a name table.
#[derive(Debug, Clone)]
pub enum NamePattern {
    Exact(String),
    /// `*.example.com` (stored as `.example.com`); `.example.com` also matches the bare
    /// name.
    Lead(String),
    /// `www.example.*` (stored as `www.example.`).
    Trail(String),
    Regex(regex::Regex),
}

impl NamePattern {
    /// Parses a name: `~re` (case-sensitive), `~*re` (case-insensitive), `*.x`, `.x`,
    /// `x.*`, else exact. `regex_ci` makes plain `~` case-insensitive too (server names
    /// are compared in lower case anyway). Names other than regexes are lower-cased.
    pub fn parse(s: &str, regex_ci: bool) -> Result<Vec<NamePattern>, String> {
        if let Some(re) = s.strip_prefix("~*") {
            return Ok(vec![NamePattern::Regex(compile_regex(re, true)?)]);
        }
        if let Some(re) = s.strip_prefix('~') {
            return Ok(vec![NamePattern::Regex(compile_regex(re, regex_ci)?)]);
        }
        let s = s.to_ascii_lowercase();
        let s = s
            .strip_suffix('.')
            .filter(|_| !s.ends_with(".*"))
            .unwrap_or(&s)
            .to_string();
        if s.is_empty() {
            return Ok(vec![NamePattern::Exact(s)]);
        }
        if let Some(rest) = s.strip_prefix("*.") {
            if rest.is_empty() || rest.contains('*') {
                return Err(format!("invalid wildcard name {s:?}"));
            }
            return Ok(vec![NamePattern::Lead(format!(".{rest}"))]);
        }
        if let Some(rest) = s.strip_prefix('.') {
            if rest.is_empty() || rest.contains('*') {
                return Err(format!("invalid wildcard name {s:?}"));
            }
            return Ok(vec![
                NamePattern::Lead(s.clone()),
                NamePattern::Exact(rest.to_string()),
            ]);
        }
        if let Some(rest) = s.strip_suffix(".*") {
            if rest.is_empty() || rest.contains('*') {
                return Err(format!("invalid wildcard name {s:?}"));
            }
            return Ok(vec![NamePattern::Trail(format!("{rest}."))]);
        }
        if s.contains('*') {
            return Err(format!(
                "invalid wildcard name {s:?}: a '*' only as \"*.name\" or \"name.*\""
            ));
        }
        Ok(vec![NamePattern::Exact(s)])
    }
}

/// Names to values, matched in nginx's order. The first pattern to claim a name keeps
/// it. Lookups take the name already lower-cased (exact and wildcards) and allocate
/// nothing unless a regex with capture groups matches.
#[derive(Debug, Clone)]
pub struct NameTable<T> {
    exact: NameMap<Box<str>, T>,
    lead: NameMap<Box<str>, T>,
    trail: NameMap<Box<str>, T>,
    regex: Vec<(std::sync::Arc<regex::Regex>, T)>,
    set: Option<regex::RegexSet>,
    /// `regex` by anchored literal prefix, for a table whose lookups are lower-cased
    /// (server names): only the regexes whose prefix starts the name run.
    index: Option<super::regex_index::PrefixIndex>,
}

impl<T> Default for NameTable<T> {
    fn default() -> Self {
        NameTable {
            exact: NameMap::default(),
            lead: NameMap::default(),
            trail: NameMap::default(),
            regex: Vec::new(),
            set: None,
            index: None,
        }
    }
}

impl<T: Clone> NameTable<T> {
    pub fn insert(&mut self, p: NamePattern, v: T) {
        match p {
            NamePattern::Exact(n) => {
                self.exact.entry(n.into()).or_insert(v);
            }
            NamePattern::Lead(n) => {
                self.lead.entry(n.into()).or_insert(v);
            }
            NamePattern::Trail(n) => {
                self.trail.entry(n.into()).or_insert(v);
            }
            NamePattern::Regex(r) => {
                self.regex.push((std::sync::Arc::new(r), v));
                self.set = None;
                self.index = None;
            }
        }
    }

    /// Call once all patterns are in: builds the `RegexSet` when there are many.
    pub fn finish(&mut self) {
        self.build_set(false);
    }

    fn build_set(&mut self, case_insensitive: bool) {
        if self.regex.len() > REGEX_SCAN {
            // The patterns compiled one by one; together they may pass the size limit,
            // then the table scans them one by one.
            self.set = regex::RegexSetBuilder::new(self.regex.iter().map(|(r, _)| r.as_str()))
                .case_insensitive(case_insensitive)
                .size_limit(REGEX_SIZE_LIMIT * 8)
                .build()
                .ok();
        }
    }

    /// [`Self::finish`] for a table of server names: looked up ASCII-lower-cased, its
    /// regexes all case-insensitive (`NamePattern::parse(_, true)`), in the `RegexSet`
    /// too, as one by one; also indexes the regexes by their anchored literal prefix.
    pub fn finish_lowered(&mut self) {
        self.build_set(true);
        if self.regex.len() > REGEX_SCAN {
            let prefixes: Vec<_> = self
                .regex
                .iter()
                .map(|(r, _)| super::regex_index::anchored_prefix_lowered(r.as_str(), true))
                .collect();
            self.index = super::regex_index::PrefixIndex::build(&prefixes);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty()
            && self.lead.is_empty()
            && self.trail.is_empty()
            && self.regex.is_empty()
    }

    /// The value for `name` (lower-case), with the regex's captures kept in `caps`
    /// (`server = true`: as the server's; else as the latest) when a regex with groups
    /// matched.
    pub fn find(&self, name: &str, caps: Option<(&mut Captures, bool)>) -> Option<&T> {
        if let Some(v) = self.find_exact_or_wildcard(name) {
            return Some(v);
        }
        self.find_regex(name, caps)
    }

    /// The exact and wildcard steps of [`Self::find`] alone.
    pub fn find_exact_or_wildcard(&self, name: &str) -> Option<&T> {
        if let Some(v) = self.exact.get(name) {
            return Some(v);
        }
        // The dots found on bytes ('.' is ASCII: a char boundary), not `str` searches.
        let b = name.as_bytes();
        if !self.lead.is_empty() {
            // `a.b.example.com`: `.b.example.com`, `.example.com`, `.com`: longest first.
            let dots = b.iter().enumerate().skip(1).filter(|(_, &c)| c == b'.');
            for (i, _) in dots {
                if let Some(v) = self.lead.get(&name[i..]) {
                    return Some(v);
                }
            }
        }
        if !self.trail.is_empty() {
            // `www.example.org`: `www.example.`, `www.`: longest first.
            let before_last = b.len().saturating_sub(1);
            let dots = b.iter().enumerate().take(before_last).rev();
            for (i, _) in dots.filter(|(_, &c)| c == b'.') {
                if let Some(v) = self.trail.get(&name[..=i]) {
                    return Some(v);
                }
            }
        }
        None
    }

    pub(super) fn find_regex(&self, name: &str, caps: Option<(&mut Captures, bool)>) -> Option<&T> {
        let mut buf = [0; super::regex_index::MAX_CANDIDATES];
        let few = self
            .index
            .as_ref()
            .and_then(|ix| ix.candidates(name.as_bytes(), &mut buf));
        let first = match (few, &self.set) {
            // A regex outside the candidates cannot match: its prefix does not start
            // the name.
            (Some(few), _) => few
                .iter()
                .map(|&i| i as usize)
                .find(|&i| self.regex[i].0.is_match(name))?,
            (None, Some(set)) => set.matches(name).iter().next()?,
            (None, None) => self.regex.iter().position(|(r, _)| r.is_match(name))?,
        };
        let (re, v) = &self.regex[first];
        if let Some((caps, server)) = caps {
            if re.captures_len() > 1 {
                if let Some(c) = re.captures(name) {
                    if server {
                        caps.set_server(re, name, &c);
                    } else {
                        caps.set_latest(re, name, &c);
                    }
                }
            }
        }
        Some(v)
    }
}
