//! [`HeaderMap`]: the header fields of one message, in wire order.
//!
//! How it fits: the parsers fill one map per head; the proxy edits it (removing hop-by-hop
//! fields, adding `Via` or `X-Cache-Status`) and writes it back out with
//! [`crate::write_header`]. Names keep the case they had on the wire (some origins and
//! clients care); every lookup is ASCII case-insensitive (RFC 9110 5.1).
//!
//! Layout: all names and values live in one byte buffer, and an entry is a pair of ranges
//! into it. Parsing a head therefore costs two allocations (the buffer and the entry
//! list) however many fields it has, instead of two per field, and the buffer is filled
//! with one copy of the head's field section ([`HeaderMap::from_parsed`]); the `: ` and
//! CRLF separators stay in it as dead bytes. Removed fields leave dead bytes behind too;
//! the buffer is compacted when the dead bytes dominate.

use std::fmt;

/// Dead bytes tolerated before [`HeaderMap`] compacts its buffer (and only when they are
/// more than half of it), so a proxy that rewrites a few headers never copies.
const COMPACT_MIN_DEAD: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Entry {
    name_start: usize,
    name_len: usize,
    value_start: usize,
    value_len: usize,
}

impl Entry {
    fn name<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.name_start..self.name_start + self.name_len]
    }
    fn value<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.value_start..self.value_start + self.value_len]
    }
    /// Bytes of `buf` this entry keeps alive.
    fn live(&self) -> usize {
        self.name_len + self.value_len
    }
}

/// Header list that keeps wire order and the name's original case; lookups are
/// case-insensitive.
///
/// Names and values are stored as given: `append`/`insert` do not validate them, so
/// callers that copy peer bytes into a name must make sure they are tokens (the parsers
/// do).
#[derive(Clone, Default)]
pub struct HeaderMap {
    buf: Vec<u8>,
    entries: Vec<Entry>,
    /// Bytes in `buf` no longer referenced by any entry.
    dead: usize,
    /// A one-word filter of the names present: bit [`name_bit`] of every entry's name
    /// is set (bits of removed names may stay set). A lookup of an absent name, the
    /// common case on the hit path (conditionals, `Via`, `Range`, `Cache-Control`), is
    /// answered without a scan.
    names: u64,
    /// 1 + the index of the first `Host` entry, 0 when there is none: every request
    /// asks for its Host (server selection, the cache key), so it is found once, when
    /// the fields are added, instead of by a scan per question. Kept by every method
    /// that adds or removes entries.
    host: u32,
}

/// Whether `name` is `host` in any case.
#[inline(always)]
fn is_host(name: &[u8]) -> bool {
    // One word compare: OR-ing 0x20 maps only `H`/`h`, `O`/`o`, `S`/`s` and `T`/`t`
    // onto these four letters, so it is exactly a case-insensitive match.
    match name.try_into() {
        Ok(four) => u32::from_le_bytes(four) | 0x2020_2020 == u32::from_le_bytes(*b"host"),
        Err(_) => false,
    }
}

/// The filter bit of a field name: from its length and its first and last bytes, case
/// folded, so that the names a request usually carries fall on different bits.
#[inline]
fn name_bit(name: &[u8]) -> u64 {
    let (Some(&first), Some(&last)) = (name.first(), name.last()) else {
        return 1;
    };
    let h = name.len() as u32 * 31
        + u32::from(first.to_ascii_lowercase()) * 7
        + u32::from(last.to_ascii_lowercase());
    1u64 << (h % 64)
}

impl HeaderMap {
    /// An empty map (no allocation until the first field).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty map with room for `fields` fields totalling `bytes` bytes of names and
    /// values, so that filling it does not reallocate.
    pub fn with_capacity(fields: usize, bytes: usize) -> Self {
        HeaderMap {
            buf: Vec::with_capacity(bytes),
            entries: Vec::with_capacity(fields),
            dead: 0,
            names: 0,
            host: 0,
        }
    }

    /// Whether the filter admits `name` (false: it is certainly absent).
    #[inline]
    fn may_have(&self, name: &[u8]) -> bool {
        self.names & name_bit(name) != 0
    }

    fn find<'a>(&'a self, name: &'a str) -> impl DoubleEndedIterator<Item = &'a Entry> + 'a {
        let name = name.as_bytes();
        // An absent name scans nothing.
        let entries = if self.may_have(name) {
            &self.entries[..]
        } else {
            &[]
        };
        entries.iter().filter(move |e| {
            e.name_len == name.len() && e.name(&self.buf).eq_ignore_ascii_case(name)
        })
    }

    /// The first `Host` value, if any ([`HeaderMap::get`]`("host")` without a scan).
    #[inline]
    pub fn host(&self) -> Option<&[u8]> {
        let i = (self.host as usize).checked_sub(1)?;
        self.entries.get(i).map(|e| e.value(&self.buf))
    }

    /// Finds the first `Host` entry again after entries were removed or replaced.
    fn reindex_host(&mut self) {
        let buf = &self.buf;
        self.host = self
            .entries
            .iter()
            .position(|e| is_host(e.name(buf)))
            .map_or(0, |i| i as u32 + 1);
    }

    /// The first value of `name`, if any. Inlined down to the filter test, which for a
    /// constant name is one `test` of a constant: a hit asks for several absent fields.
    #[inline]
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        if !self.may_have(name.as_bytes()) {
            return None;
        }
        self.get_scan(name)
    }

    #[inline(never)]
    fn get_scan(&self, name: &str) -> Option<&[u8]> {
        self.find(name).next().map(|e| e.value(&self.buf))
    }

    /// The `n`-th value of `name` (0 is the first), compared as bytes.
    #[inline]
    pub fn get_nth(&self, name: &str, n: usize) -> Option<&[u8]> {
        if !self.may_have(name.as_bytes()) {
            return None;
        }
        self.get_nth_scan(name, n)
    }

    #[inline(never)]
    fn get_nth_scan(&self, name: &str, n: usize) -> Option<&[u8]> {
        let want = name.as_bytes();
        self.entries
            .iter()
            .filter(|e| e.name_len == want.len() && e.name(&self.buf).eq_ignore_ascii_case(want))
            .nth(n)
            .map(|e| e.value(&self.buf))
    }

    /// The first value of `name`, if it is valid UTF-8.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// Every value of `name`, in wire order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl DoubleEndedIterator<Item = &'a [u8]> + 'a {
        self.find(name).map(move |e| e.value(&self.buf))
    }

    /// Whether at least one field is called `name`.
    #[inline]
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Adds a field at the end, keeping existing fields of the same name.
    pub fn append(&mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) {
        let name = name.into();
        let value = value.into();
        self.push_raw(name.as_bytes(), &value);
    }

    /// Empties the map, keeping its allocations.
    pub(crate) fn clear(&mut self) {
        self.buf.clear();
        self.entries.clear();
        self.dead = 0;
        self.names = 0;
        self.host = 0;
    }

    /// Adds a field from borrowed bytes (no intermediate allocation). Crate-internal
    /// because a `name` that is not UTF-8 would break [`HeaderMap::iter`]'s `&str` names.
    pub(crate) fn push_raw(&mut self, name: &[u8], value: &[u8]) {
        let name_start = self.buf.len();
        self.buf.extend_from_slice(name);
        self.buf.extend_from_slice(value);
        self.entries.push(Entry {
            name_start,
            name_len: name.len(),
            value_start: name_start + name.len(),
            value_len: value.len(),
        });
        self.pushed(name);
    }

    /// The lookup aids for the entry just pushed, called `name`: its bit in the name
    /// filter, and its index when it is the first `Host`.
    #[inline(always)]
    fn pushed(&mut self, name: &[u8]) {
        self.names |= name_bit(name);
        if self.host == 0 && is_host(name) {
            self.host = self.entries.len() as u32;
        }
    }

    /// Builds the map of a parsed head with one copy: the bytes from the first field name
    /// to the end of the last value are copied as they are, and entries point into them.
    /// `buf` is the buffer httparse parsed and `fields` its result, so every name and
    /// value is a sub-slice of `buf`; should one not be (never seen), the fields are
    /// copied one by one instead.
    pub(crate) fn from_parsed(buf: &[u8], fields: &[httparse::Header<'_>]) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.refill_from_parsed(buf, fields);
        map
    }

    /// [`HeaderMap::from_parsed`] into this map, reusing its allocations (a worker
    /// recycles request heads, so a request usually allocates nothing for its fields).
    pub(crate) fn refill_from_parsed(&mut self, buf: &[u8], fields: &[httparse::Header<'_>]) {
        self.buf.clear();
        self.entries.clear();
        self.dead = 0;
        self.names = 0;
        self.host = 0;
        let base = buf.as_ptr() as usize;
        // Offset of `part` in `buf`, if it lies inside it.
        let offset = |part: &[u8]| {
            let off = (part.as_ptr() as usize).checked_sub(base)?;
            (off.checked_add(part.len())? <= buf.len()).then_some(off)
        };
        let region = match (fields.first(), fields.last()) {
            (Some(first), Some(last)) => offset(first.name.as_bytes())
                .zip(offset(last.value))
                .map(|(s, v)| (s, v + last.value.len()))
                .filter(|(s, e)| s <= e),
            _ => return,
        };
        if let Some((start, end)) = region {
            self.entries.reserve(fields.len());
            let inside = |off: Option<usize>, len: usize| {
                off.filter(|&o| o >= start && o + len <= end)
                    .map(|o| o - start)
            };
            for h in fields {
                let name = inside(offset(h.name.as_bytes()), h.name.len());
                let value = inside(offset(h.value), h.value.len());
                let (Some(name_start), Some(value_start)) = (name, value) else {
                    self.entries.clear();
                    self.host = 0;
                    break;
                };
                self.entries.push(Entry {
                    name_start,
                    name_len: h.name.len(),
                    value_start,
                    value_len: h.value.len(),
                });
                self.pushed(h.name.as_bytes());
            }
            if self.entries.len() == fields.len() {
                let live: usize = self.entries.iter().map(Entry::live).sum();
                self.buf.extend_from_slice(&buf[start..end]);
                self.dead = (end - start).saturating_sub(live);
                return;
            }
        }
        let bytes = fields.iter().map(|h| h.name.len() + h.value.len()).sum();
        self.buf.reserve(bytes);
        self.entries.reserve(fields.len());
        for h in fields {
            self.push_raw(h.name.as_bytes(), h.value);
        }
    }

    /// Mutable access to the value of field `i` (wire order), for in-place fix-ups by the
    /// parsers (obs-fold replacement in responses).
    pub(crate) fn value_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        let e = *self.entries.get(i)?;
        Some(&mut self.buf[e.value_start..e.value_start + e.value_len])
    }

    /// The value of field `i` (wire order).
    pub(crate) fn value_at(&self, i: usize) -> Option<&[u8]> {
        self.entries.get(i).map(|e| e.value(&self.buf))
    }

    /// Replaces every field called `name` with one field holding `value`. The new field
    /// goes where the first old one was (or at the end), so wire order stays stable.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) {
        let name = name.into();
        let value = value.into();
        let first = self.entries.iter().position(|e| {
            e.name_len == name.len() && e.name(&self.buf).eq_ignore_ascii_case(name.as_bytes())
        });
        match first {
            None => self.push_raw(name.as_bytes(), &value),
            Some(i) => {
                // Remove the later duplicates, then re-point the first slot.
                let mut j = i + 1;
                while j < self.entries.len() {
                    let e = self.entries[j];
                    if e.name_len == name.len()
                        && e.name(&self.buf).eq_ignore_ascii_case(name.as_bytes())
                    {
                        self.dead += e.live();
                        self.entries.remove(j);
                    } else {
                        j += 1;
                    }
                }
                let old = self.entries[i];
                self.dead += old.live();
                let name_start = self.buf.len();
                self.buf.extend_from_slice(name.as_bytes());
                self.buf.extend_from_slice(&value);
                self.entries[i] = Entry {
                    name_start,
                    name_len: name.len(),
                    value_start: name_start + name.len(),
                    value_len: value.len(),
                };
                self.maybe_compact();
                self.reindex_host();
            }
        }
    }

    /// Removes every field called `name`; returns how many were removed.
    pub fn remove(&mut self, name: &str) -> usize {
        let before = self.entries.len();
        let buf = &self.buf;
        let mut dead = 0;
        self.entries.retain(|e| {
            let hit = e.name_len == name.len() && e.name(buf).eq_ignore_ascii_case(name.as_bytes());
            if hit {
                dead += e.live();
            }
            !hit
        });
        self.dead += dead;
        let removed = before - self.entries.len();
        if removed > 0 {
            self.maybe_compact();
            self.reindex_host();
        }
        removed
    }

    /// Keeps only the fields for which `keep(name, value)` is true, in order (no
    /// allocation).
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &[u8]) -> bool) {
        let buf = &self.buf;
        let mut dead = 0;
        self.entries.retain(|e| {
            let name = std::str::from_utf8(e.name(buf)).unwrap_or("");
            let kept = keep(name, e.value(buf));
            if !kept {
                dead += e.live();
            }
            kept
        });
        if dead > 0 {
            self.dead += dead;
            self.maybe_compact();
            self.reindex_host();
        }
    }

    /// Rewrites `buf` without dead bytes once they dominate it.
    fn maybe_compact(&mut self) {
        if self.entries.is_empty() {
            self.buf.clear();
            self.dead = 0;
            return;
        }
        if self.dead < COMPACT_MIN_DEAD || self.dead * 2 < self.buf.len() {
            return;
        }
        let mut buf = Vec::with_capacity(self.buf.len() - self.dead);
        for e in &mut self.entries {
            let name_start = buf.len();
            buf.extend_from_slice(&self.buf[e.name_start..e.name_start + e.name_len]);
            let value_start = buf.len();
            buf.extend_from_slice(&self.buf[e.value_start..e.value_start + e.value_len]);
            e.name_start = name_start;
            e.value_start = value_start;
        }
        self.buf = buf;
        self.dead = 0;
    }

    /// Every field as `(name, value)`, in wire order, names in their original case.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.entries.iter().map(move |e| {
            // Names only ever come from `String`s or httparse tokens, so this never fails;
            // the fallback keeps the function total without `unsafe`.
            let name = std::str::from_utf8(e.name(&self.buf)).unwrap_or("");
            (name, e.value(&self.buf))
        })
    }

    /// Number of fields (a name that appears twice counts twice).
    /// Bytes this map holds allocated (its field storage and its index).
    pub fn capacity_bytes(&self) -> usize {
        self.buf.capacity() + self.entries.capacity() * std::mem::size_of::<Entry>()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True if a comma-separated header (e.g. Connection, Cache-Control) has the token,
    /// case-insensitively. Elements are trimmed of optional whitespace; an element such as
    /// `max-age=60` matches the token `max-age=60`, not `max-age` (use
    /// [`HeaderMap::tokens`] to look at parameters).
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.tokens(name)
            .any(|t| t.eq_ignore_ascii_case(token.as_bytes()))
    }

    /// Every non-empty element of a comma-separated header (all its fields, in order),
    /// trimmed of optional whitespace (RFC 9110 5.6.1).
    pub fn tokens<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.get_all(name).flat_map(list_elements)
    }
}

/// Splits a list-valued field on commas, trims OWS and skips empty elements (RFC 9110
/// 5.6.1 requires recipients to accept empty elements).
pub(crate) fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|t| !t.is_empty())
}

/// Trims optional whitespace (SP / HTAB) at both ends.
pub fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

impl PartialEq for HeaderMap {
    /// Equal when the same fields appear in the same order with the same bytes (name case
    /// included), whatever the internal buffer layout.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for HeaderMap {}

impl fmt::Debug for HeaderMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|(n, v)| (n, String::from_utf8_lossy(v))))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (n, v) in pairs {
            m.append(*n, *v);
        }
        m
    }

    #[test]
    fn the_name_filter_never_hides_a_field() {
        // Every mutation keeps each present name findable, in any case; absent names
        // stay absent.
        let names = [
            "Host",
            "via",
            "If-None-Match",
            "cache-control",
            "Range",
            "X-Y",
            "a",
            "A-B-C",
            "If-Modified-Since",
            "Accept-Encoding",
            "Cookie",
            "pragma",
        ];
        let mut m = HeaderMap::new();
        let check = |m: &HeaderMap, present: &[&str]| {
            for n in names {
                let want = present.iter().any(|p| p.eq_ignore_ascii_case(n));
                assert_eq!(m.contains(n), want, "{n}");
                assert_eq!(m.contains(&n.to_ascii_uppercase()), want, "{n}");
                assert_eq!(m.get_nth(&n.to_ascii_lowercase(), 0).is_some(), want, "{n}");
            }
            // The remembered Host is the first Host field's value, whatever happened.
            let scanned = m.iter().find(|(n, _)| n.eq_ignore_ascii_case("host"));
            assert_eq!(m.host(), scanned.map(|(_, v)| v));
        };
        check(&m, &[]);
        m.append("HOST", "h");
        m.append("via", "1.1 x");
        check(&m, &["host", "via"]);
        m.insert("range", "bytes=0-1");
        m.insert("Via", "2");
        check(&m, &["host", "via", "range"]);
        m.remove("via");
        check(&m, &["host", "range"]);
        m.append("x-y", "1");
        m.append("Host", "second");
        m.insert("HOST", "third");
        check(&m, &["host", "range", "x-y"]);
        m.remove("range");
        check(&m, &["host", "x-y"]);
        m.insert("a", "1");
        m.append("host", "dup");
        m.retain(|n, _| n != "x-y");
        check(&m, &["host", "a"]);
        m.retain(|n, _| !n.eq_ignore_ascii_case("host"));
        check(&m, &["a"]);
        m.retain(|_, _| false);
        check(&m, &[]);
        let mut req = [httparse::EMPTY_HEADER; 4];
        let wire = b"GET / HTTP/1.1\r\nIf-None-Match: \"x\"\r\nCookie: a=b\r\n\r\n";
        let mut parsed = httparse::Request::new(&mut req);
        parsed.parse(wire).unwrap();
        m.refill_from_parsed(wire, parsed.headers);
        check(&m, &["if-none-match", "cookie"]);
        let wire = b"GET / HTTP/1.1\r\nCookie: a=b\r\nhOsT: h:1\r\nHost: x\r\n\r\n";
        let mut parsed = httparse::Request::new(&mut req);
        parsed.parse(wire).unwrap();
        m.refill_from_parsed(wire, parsed.headers);
        check(&m, &["cookie", "host"]);
        assert_eq!(m.host(), Some(&b"h:1"[..]));
        m.clear();
        check(&m, &[]);
    }

    #[test]
    fn is_host_is_a_case_insensitive_match() {
        for pos in 0..4 {
            for v in 0..=255u8 {
                let mut name = *b"HoSt";
                name[pos] = v;
                assert_eq!(
                    is_host(&name),
                    name.eq_ignore_ascii_case(b"host"),
                    "{name:?}"
                );
            }
        }
        for other in [&b"hos"[..], b"hostx", b"", b"h\0st"] {
            assert!(!is_host(other));
        }
    }

    #[test]
    fn lookups_are_case_insensitive_and_keep_case() {
        let m = map(&[("Content-Type", "text/plain"), ("X-A", "1"), ("x-a", "2")]);
        assert_eq!(m.get("content-type"), Some(&b"text/plain"[..]));
        assert_eq!(m.get_str("CONTENT-TYPE"), Some("text/plain"));
        assert_eq!(m.get_all("X-a").collect::<Vec<_>>(), vec![b"1", b"2"]);
        assert!(m.contains("x-A"));
        assert!(!m.contains("x-b"));
        let names: Vec<&str> = m.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["Content-Type", "X-A", "x-a"]);
        assert_eq!(m.len(), 3);
        assert!(!m.is_empty());
    }

    #[test]
    fn get_str_rejects_invalid_utf8() {
        let mut m = HeaderMap::new();
        m.append("X", vec![0xff, 0xfe]);
        assert_eq!(m.get("x"), Some(&[0xff, 0xfe][..]));
        assert_eq!(m.get_str("x"), None);
    }

    #[test]
    fn insert_replaces_all_in_place_of_the_first() {
        let mut m = map(&[("A", "1"), ("B", "2"), ("a", "3"), ("C", "4")]);
        m.insert("A", "new");
        let got: Vec<(&str, &[u8])> = m.iter().collect();
        assert_eq!(got, vec![("A", &b"new"[..]), ("B", b"2"), ("C", b"4")]);
        m.insert("D", "5");
        assert_eq!(m.iter().last(), Some(("D", &b"5"[..])));
    }

    #[test]
    fn remove_counts_and_empties() {
        let mut m = map(&[("A", "1"), ("B", "2"), ("a", "3")]);
        assert_eq!(m.remove("a"), 2);
        assert_eq!(m.remove("a"), 0);
        assert_eq!(m.len(), 1);
        assert_eq!(m.remove("b"), 1);
        assert!(m.is_empty());
        assert_eq!(m, HeaderMap::new());
    }

    #[test]
    fn compaction_keeps_contents() {
        let mut m = HeaderMap::new();
        let big = vec![b'x'; 3000];
        for i in 0..50 {
            m.insert("Big", big.clone());
            m.append(format!("K{i}"), format!("v{i}"));
        }
        assert!(m.buf.len() < 50 * 3000, "buffer was compacted");
        assert_eq!(m.get("big"), Some(&big[..]));
        assert_eq!(m.get_str("k49"), Some("v49"));
        assert_eq!(m.len(), 51);
    }

    #[test]
    fn equality_ignores_layout() {
        let mut a = map(&[("A", "1"), ("B", "2")]);
        a.insert("A", "1");
        let b = map(&[("A", "1"), ("B", "2")]);
        assert_eq!(a, b);
        assert_ne!(a, map(&[("B", "2"), ("A", "1")]));
        assert_ne!(a, map(&[("a", "1"), ("B", "2")]));
    }

    #[test]
    fn has_token_splits_and_trims() {
        let m = map(&[
            ("Connection", " keep-alive ,Upgrade"),
            ("connection", "\tCLOSE\t, ,"),
            ("Cache-Control", "max-age=60, no-cache"),
        ]);
        assert!(m.has_token("connection", "close"));
        assert!(m.has_token("connection", "upgrade"));
        assert!(m.has_token("CONNECTION", "Keep-Alive"));
        assert!(!m.has_token("connection", "keep"));
        assert!(m.has_token("cache-control", "no-cache"));
        assert!(!m.has_token("cache-control", "max-age"));
        assert!(!m.has_token("missing", "x"));
        assert_eq!(m.tokens("connection").count(), 3);
    }

    #[test]
    fn from_parsed_copies_the_field_section_once() {
        let buf = b"GET / HTTP/1.1\r\nHost: h\r\nX-A:  1 \r\nEmpty:\r\n\r\n";
        let mut slots = [httparse::EMPTY_HEADER; 8];
        let mut req = httparse::Request::new(&mut slots);
        req.parse(buf).unwrap();
        let m = HeaderMap::from_parsed(buf, req.headers);
        let got: Vec<(&str, &[u8])> = m.iter().collect();
        assert_eq!(
            got,
            vec![("Host", &b"h"[..]), ("X-A", b"1"), ("Empty", b"")]
        );
        // One copy from "Host" to the end of the last value, separators included.
        assert_eq!(m.buf, b"Host: h\r\nX-A:  1 \r\nEmpty:");
        assert_eq!(m.dead, m.buf.len() - 14);
        // Editing still works on a bulk-built map.
        let mut m2 = m.clone();
        m2.insert("x-a", "2");
        assert_eq!(m2.get_str("X-A"), Some("2"));
        assert_eq!(m, HeaderMap::from_parsed(buf, req.headers));
    }

    #[test]
    fn from_parsed_falls_back_when_fields_are_elsewhere() {
        let fields = [
            httparse::Header {
                name: "A",
                value: b"1",
            },
            httparse::Header {
                name: "B",
                value: b"2",
            },
        ];
        let m = HeaderMap::from_parsed(b"unrelated", &fields);
        let got: Vec<(&str, &[u8])> = m.iter().collect();
        assert_eq!(got, vec![("A", &b"1"[..]), ("B", b"2")]);
        assert_eq!(m.buf, b"A1B2");
        assert!(HeaderMap::from_parsed(b"x", &[]).is_empty());
    }

    #[test]
    fn retain_filters_in_order() {
        let mut m = map(&[("A", "1"), ("B", "2"), ("a", "3"), ("C", "x")]);
        m.retain(|n, v| !n.eq_ignore_ascii_case("a") && v != b"x");
        let got: Vec<(&str, &[u8])> = m.iter().collect();
        assert_eq!(got, vec![("B", &b"2"[..])]);
        m.retain(|_, _| false);
        assert!(m.is_empty());
    }

    #[test]
    fn debug_is_readable() {
        let m = map(&[("A", "1")]);
        assert_eq!(format!("{m:?}"), r#"[("A", "1")]"#);
    }
}
