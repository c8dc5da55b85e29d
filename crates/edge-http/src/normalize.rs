//! Cache-key normalization of a request's path and query: what makes `/a%2Db?utm_source=x&a=1`
//! and `/a-b?a=1` one cached object. Pure functions on strings (no I/O, no allocation
//! when nothing changes), so the cache, purges and the fuzzer share one definition.
//!
//! - [`normalize_path`]: RFC 3986 6.2.2.2 percent-encoding normalization: an escape of an
//!   unreserved character (`A-Z a-z 0-9 - . _ ~`) is decoded, the hex digits of every
//!   other escape are upper-cased (`%2f` → `%2F`; `%2F` stays encoded: it is not `/`).
//!   A `%` not followed by two hex digits is a literal percent sign and becomes `%25`
//!   (so that decoding never makes a new escape: normalizing is idempotent).
//! - [`ArgsPolicy`]: which query arguments count (`include` or `exclude` name patterns,
//!   `*` at the start and/or the end of a pattern) and whether they are sorted by name
//!   (a stable sort: repeated names keep their order). With a policy, empty pieces
//!   (`a=1&&b=2`) are dropped. Names are compared as they appear (case-sensitive, not
//!   decoded).
//! - [`normalize_pq`]: both, on an origin-form `path?query`.
//!
//! Invariants (fuzzed by `fuzz/fuzz_targets/cache_key_normalize.rs`): normalizing twice
//! gives the same as once; the output never has more `%` than the input, and every `%`
//! in it starts an escape with upper-case hex digits; nothing panics.

use std::borrow::Cow;

/// Most patterns in an `include`/`exclude` list (a config value).
pub const MAX_ARG_PATTERNS: usize = 256;

/// The value of one hex digit, either case (percent-escapes, chunk sizes).
pub fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `b` percent-encoded, with upper-case hex digits (RFC 3986 2.1: the normal form).
pub fn pct_escape(b: u8) -> [u8; 3] {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    [b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]
}

/// RFC 3986 2.3: the characters that never need escaping.
pub fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Percent-encoding normalization of a path (see the module doc). Borrowed when the
/// path has nothing to change (no `%`, or only upper-case escapes of reserved bytes).
pub fn normalize_path(path: &str) -> Cow<'_, str> {
    let b = path.as_bytes();
    // Most paths have no `%` at all.
    let Some(first) = memchr::memchr(b'%', b) else {
        return Cow::Borrowed(path);
    };
    let mut out: Option<Vec<u8>> = None;
    let mut i = first;
    let mut copied = 0; // b[..copied] is in `out` (when it exists)
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        let hex = match (b.get(i + 1), b.get(i + 2)) {
            (Some(&h), Some(&l)) => hex_digit(h)
                .zip(hex_digit(l))
                .map(|(hv, lv)| (h, l, hv * 16 + lv)),
            _ => None,
        };
        let replacement: Option<[u8; 3]> = match hex {
            Some((_, _, c)) if is_unreserved(c) => Some([c, 0, 0]),
            Some((h, l, _)) if h.is_ascii_lowercase() || l.is_ascii_lowercase() => {
                Some([b'%', h.to_ascii_uppercase(), l.to_ascii_uppercase()])
            }
            Some(_) => None, // already normal
            // A `%` that starts no escape is a literal percent sign: `%25`.
            None => Some([b'%', b'2', b'5']),
        };
        let width = if hex.is_some() { 3 } else { 1 };
        if let Some(r) = replacement {
            let o = out.get_or_insert_with(|| Vec::with_capacity(b.len() + 8));
            o.extend_from_slice(&b[copied..i]);
            if r[1] == 0 {
                o.push(r[0]);
            } else {
                o.extend_from_slice(&r);
            }
            copied = i + width;
        }
        i += width;
    }
    match out {
        None => Cow::Borrowed(path),
        Some(mut o) => {
            o.extend_from_slice(&b[copied..]);
            // ASCII replaced ASCII at escape boundaries: still UTF-8.
            Cow::Owned(
                String::from_utf8(o)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            )
        }
    }
}

/// One `include`/`exclude` name pattern: exact, `prefix*`, `*suffix` or `*infix*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgPattern {
    Exact(Box<str>),
    Prefix(Box<str>),
    Suffix(Box<str>),
    Contains(Box<str>),
    /// `*`: every name.
    Any,
}

impl ArgPattern {
    /// Parses a pattern; `*` only at the start and/or the end, and not empty.
    pub fn parse(p: &str) -> Result<ArgPattern, String> {
        if p.is_empty() {
            return Err("an empty argument name pattern".into());
        }
        let lead = p.starts_with('*');
        let trail = p.len() > 1 && p.ends_with('*');
        let core = &p[usize::from(lead)..p.len() - usize::from(trail)];
        if core.contains('*') {
            return Err(format!(
                "{p:?}: '*' may only start or end a pattern (\"utm_*\", \"*_id\")"
            ));
        }
        if core
            .bytes()
            .any(|b| b == b'&' || b == b'=' || b <= b' ' || b == 0x7f)
        {
            return Err(format!("{p:?} is not a query argument name"));
        }
        Ok(match (lead, trail) {
            _ if core.is_empty() => ArgPattern::Any,
            (false, false) => ArgPattern::Exact(core.into()),
            (false, true) => ArgPattern::Prefix(core.into()),
            (true, false) => ArgPattern::Suffix(core.into()),
            (true, true) => ArgPattern::Contains(core.into()),
        })
    }

    /// Whether an argument called `name` (its bytes) matches.
    #[inline(always)]
    pub fn matches(&self, name: &[u8]) -> bool {
        match self {
            ArgPattern::Exact(s) => name == s.as_bytes(),
            ArgPattern::Prefix(s) => name.starts_with(s.as_bytes()),
            ArgPattern::Suffix(s) => name.ends_with(s.as_bytes()),
            ArgPattern::Contains(s) => memchr::memmem::find(name, s.as_bytes()).is_some(),
            ArgPattern::Any => true,
        }
    }
}

/// Which query arguments a cache key uses, and in which order (`cache_key_args`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArgsPolicy {
    /// Sort the kept arguments by name (stable).
    pub sort: bool,
    /// Keep only the arguments whose name matches one of these (None: all).
    pub include: Option<Vec<ArgPattern>>,
    /// Drop the arguments whose name matches one of these.
    pub exclude: Vec<ArgPattern>,
}

impl ArgsPolicy {
    /// Whether an argument called `name` stays in the key.
    #[inline(always)]
    pub fn keeps(&self, name: &str) -> bool {
        self.keeps_bytes(name.as_bytes())
    }

    #[inline(always)]
    fn keeps_bytes(&self, name: &[u8]) -> bool {
        if let Some(inc) = &self.include {
            if !inc.iter().any(|p| p.matches(name)) {
                return false;
            }
        }
        !self.exclude.iter().any(|p| p.matches(name))
    }

    /// The query as the key sees it: arguments filtered, then sorted when `sort`, empty
    /// pieces dropped. Borrowed when that is the query itself.
    pub fn apply<'q>(&self, query: &'q str) -> Cow<'q, str> {
        let name = |pair: &str| -> usize { pair.find('=').unwrap_or(pair.len()) };
        let mut kept: Vec<&str> = query
            .split('&')
            .filter(|p| !p.is_empty() && self.keeps(&p[..name(p)]))
            .collect();
        if self.sort {
            kept.sort_by(|a, b| a[..name(a)].cmp(&b[..name(b)]));
        }
        // Unchanged when the kept pieces are the query's own pieces in order.
        let total: usize =
            kept.iter().map(|p| p.len()).sum::<usize>() + kept.len().saturating_sub(1);
        if total == query.len() {
            let mut at = 0;
            let same = kept.iter().all(|p| {
                let ok = query.get(at..at + p.len()) == Some(*p);
                at += p.len() + 1;
                ok
            });
            if same {
                return Cow::Borrowed(query);
            }
        }
        Cow::Owned(kept.join("&"))
    }
}

impl ArgsPolicy {
    /// Appends the kept arguments of `query` joined by `&` (what [`Self::apply`]
    /// returns) to `out`, without allocating for up to 8 kept arguments.
    pub fn push_kept(&self, query: &str, out: &mut String) {
        const STACK: usize = 8;
        let b = query.as_bytes();
        if b.len() > u32::MAX as usize {
            out.push_str(&self.apply(query));
            return;
        }
        // A kept piece: its start, its end and the end of its name, in `query`.
        let mut kept = [(0u32, 0u32, 0u32); STACK];
        let mut n = 0;
        let mut s = 0;
        // Plain byte loops and byte comparisons: queries are short, and this runs on
        // every hit of a location with `cache_key_args`.
        while s <= b.len() {
            let mut e = s;
            while e < b.len() && b[e] != b'&' {
                e += 1;
            }
            if e > s {
                let mut ne = s;
                while ne < e && b[ne] != b'=' {
                    ne += 1;
                }
                if self.keeps_bytes(&b[s..ne]) {
                    if n == STACK {
                        // Many arguments: the allocating path.
                        out.push_str(&self.apply(query));
                        return;
                    }
                    kept[n] = (s as u32, e as u32, ne as u32);
                    n += 1;
                }
            }
            s = e + 1;
        }
        let kept = &mut kept[..n];
        if self.sort {
            // Insertion sort by name: stable, and few arguments.
            let name = |p: (u32, u32, u32)| &b[p.0 as usize..p.2 as usize];
            for i in 1..kept.len() {
                let mut j = i;
                while j > 0 && name(kept[j - 1]) > name(kept[j]) {
                    kept.swap(j - 1, j);
                    j -= 1;
                }
            }
        }
        for (i, &(s, e, _)) in kept.iter().enumerate() {
            if i > 0 {
                out.push('&');
            }
            // '&' and '=' are ASCII: the ends are char boundaries.
            out.push_str(&query[s as usize..e as usize]);
        }
    }
}

/// Appends [`normalize_pq`] of `pq` to `out` (no allocation unless the path has an
/// escape to rewrite).
pub fn push_normalized_pq(out: &mut String, pq: &str, args: Option<&ArgsPolicy>) {
    // One search finds the query and tells whether the path has an escape at all (the
    // common case: none, and the path is copied as it is).
    let b = pq.as_bytes();
    let (path, query, escaped) = match memchr::memchr2(b'?', b'%', b) {
        Some(i) if b[i] == b'%' => match memchr::memchr(b'?', &b[i..]) {
            Some(q) => (&pq[..i + q], Some(&pq[i + q + 1..]), true),
            None => (pq, None, true),
        },
        // '?' and '%' are ASCII: char boundaries.
        Some(i) => (&pq[..i], Some(&pq[i + 1..]), false),
        None => (pq, None, false),
    };
    if escaped {
        out.push_str(&normalize_path(path));
    } else {
        out.push_str(path);
    }
    match (query, args) {
        (Some(q), Some(a)) => {
            let at = out.len();
            out.push('?');
            a.push_kept(q, out);
            if out.len() == at + 1 {
                out.truncate(at); // a query left empty loses its `?`
            }
        }
        (Some(q), None) => {
            out.push('?');
            out.push_str(q);
        }
        (None, _) => {}
    }
}

/// Normalizes an origin-form `path?query` for a cache key: the path as
/// [`normalize_path`], the query through `args` (None: the query as it is, `?` kept).
/// With a policy, a query left empty loses its `?`.
pub fn normalize_pq<'a>(pq: &'a str, args: Option<&ArgsPolicy>) -> Cow<'a, str> {
    let (path, query) = match pq.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (pq, None),
    };
    let np = normalize_path(path);
    let nq = match (query, args) {
        (Some(q), Some(a)) => Some(a.apply(q)),
        (Some(q), None) => Some(Cow::Borrowed(q)),
        (None, _) => None,
    };
    let empty_dropped = args.is_some() && nq.as_deref() == Some("");
    let unchanged = matches!(np, Cow::Borrowed(_))
        && !empty_dropped
        && nq.as_ref().is_none_or(|q| matches!(q, Cow::Borrowed(_)));
    if unchanged {
        return Cow::Borrowed(pq);
    }
    let mut s = String::with_capacity(pq.len());
    s.push_str(&np);
    if let Some(q) = nq.filter(|_| !empty_dropped) {
        s.push('?');
        s.push_str(&q);
    }
    Cow::Owned(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(sort: bool, include: Option<&[&str]>, exclude: &[&str]) -> ArgsPolicy {
        let p = |l: &[&str]| l.iter().map(|s| ArgPattern::parse(s).unwrap()).collect();
        ArgsPolicy {
            sort,
            include: include.map(p),
            exclude: p(exclude),
        }
    }

    #[test]
    fn push_normalized_pq_is_normalize_pq() {
        let many: String = (0..40).map(|i| format!("k{}=v&", 40 - i)).collect();
        let policies = [
            None,
            Some(policy(false, None, &[])),
            Some(policy(true, None, &["utm_*"])),
            Some(policy(true, Some(&["a", "b"]), &[])),
            Some(policy(false, Some(&["k1*"]), &[])),
        ];
        for pq in [
            "/a",
            "/a?",
            "/a?&&",
            "/a%2db?b=2&a=1&utm_source=x",
            "/x?utm_a=1",
            "/p?b&a=1&&c=",
            "?",
            "",
            "/a?b=1?c=2",
            &format!("/m?{many}"),
        ] {
            for p in &policies {
                let mut out = String::from("k:");
                push_normalized_pq(&mut out, pq, p.as_ref());
                assert_eq!(
                    out,
                    format!("k:{}", normalize_pq(pq, p.as_ref())),
                    "{pq} {p:?}"
                );
            }
        }
    }

    #[test]
    fn unreserved_escapes_are_decoded_others_uppercased() {
        assert_eq!(normalize_path("/a%2Db"), "/a-b");
        assert_eq!(normalize_path("/a%2db"), "/a-b");
        assert_eq!(normalize_path("/%41%7a%30%2E%5f%7E"), "/Az0._~");
        assert_eq!(normalize_path("/a%2fb"), "/a%2Fb");
        assert_eq!(normalize_path("/a%2Fb"), "/a%2Fb");
        assert_eq!(normalize_path("/%e2%82%ac"), "/%E2%82%AC");
        assert_eq!(normalize_path("/%25%32%44"), "/%252D"); // %25 is '%': stays encoded
        assert_eq!(normalize_path("/%20x"), "/%20x");
    }

    #[test]
    fn stray_percent_signs_are_escaped() {
        for p in ["/%", "/%2", "/%zz", "/a%g1", "/%%41", "/%%341"] {
            let n = normalize_path(p);
            assert_eq!(normalize_path(&n), n, "{p}");
        }
        assert_eq!(normalize_path("/%"), "/%25");
        assert_eq!(normalize_path("/%2"), "/%252");
        assert_eq!(normalize_path("/%zz"), "/%25zz");
        assert_eq!(normalize_path("/%%41"), "/%25A");
        // Decoding `%34` to `4` must not make `%41` out of a stray `%`.
        assert_eq!(normalize_path("/%%341"), "/%2541");
    }

    #[test]
    fn nothing_to_change_borrows() {
        assert!(matches!(normalize_path("/plain/path"), Cow::Borrowed(_)));
        assert!(matches!(normalize_path("/a%2Fb%20"), Cow::Borrowed(_)));
        assert!(matches!(normalize_pq("/a?b=1&a=2", None), Cow::Borrowed(_)));
        let p = policy(true, None, &[]);
        assert!(matches!(
            normalize_pq("/a?a=1&b=2", Some(&p)),
            Cow::Borrowed(_)
        ));
        assert!(matches!(normalize_pq("/a", Some(&p)), Cow::Borrowed(_)));
    }

    #[test]
    fn args_are_filtered_and_sorted_stably() {
        let p = policy(true, None, &["utm_*", "fbclid"]);
        assert_eq!(p.apply("utm_source=x&a=1"), "a=1");
        assert_eq!(p.apply("b=2&a=1"), "a=1&b=2");
        assert_eq!(p.apply("b=2&a=1&fbclid=z&a=0&utm_medium=m"), "a=1&a=0&b=2");
        assert_eq!(p.apply("a&&b=&"), "a&b=");
        assert_eq!(p.apply("utm_x=1"), "");
        let unsorted = policy(false, None, &["*_id", "*sess*"]);
        assert_eq!(unsorted.apply("z=1&user_id=3&a=2&mysession=1"), "z=1&a=2");
        let inc = policy(false, Some(&["v", "page*"]), &[]);
        assert_eq!(inc.apply("x=1&page=2&v=3&pages=4"), "page=2&v=3&pages=4");
    }

    #[test]
    fn pq_drops_an_emptied_query_only_under_a_policy() {
        let p = policy(true, None, &["utm_*"]);
        assert_eq!(normalize_pq("/a%2Db?utm_source=x", Some(&p)), "/a-b");
        assert_eq!(normalize_pq("/a?", Some(&p)), "/a");
        assert_eq!(normalize_pq("/a?", None), "/a?");
        assert_eq!(normalize_pq("/a%2db?b=2&a=1", Some(&p)), "/a-b?a=1&b=2");
        assert_eq!(normalize_pq("/a%2db?b=2&a=1", None), "/a-b?b=2&a=1");
        // The query's escapes are not touched (only the path's).
        assert_eq!(normalize_pq("/a?x=%2d", None), "/a?x=%2d");
    }

    #[test]
    fn patterns_parse() {
        assert_eq!(
            ArgPattern::parse("utm_*"),
            Ok(ArgPattern::Prefix("utm_".into()))
        );
        assert_eq!(
            ArgPattern::parse("*_id"),
            Ok(ArgPattern::Suffix("_id".into()))
        );
        assert_eq!(
            ArgPattern::parse("*x*"),
            Ok(ArgPattern::Contains("x".into()))
        );
        assert_eq!(ArgPattern::parse("*"), Ok(ArgPattern::Any));
        assert_eq!(ArgPattern::parse("**"), Ok(ArgPattern::Any));
        assert!(ArgPattern::parse("a*b").is_err());
        assert!(ArgPattern::parse("").is_err());
        assert!(ArgPattern::parse("a=b").is_err());
    }

    /// Every short string over a small alphabet: idempotent, escapes upper-case, no
    /// new `%`.
    #[test]
    fn exhaustive_small_inputs_are_idempotent() {
        let alphabet = [b'%', b'2', b'd', b'D', b'f', b'4', b'1', b'g', b'5', b'3'];
        let mut buf = Vec::new();
        for len in 0..=5u32 {
            let n = alphabet.len().pow(len);
            for mut k in 0..n {
                buf.clear();
                buf.push(b'/');
                for _ in 0..len {
                    buf.push(alphabet[k % alphabet.len()]);
                    k /= alphabet.len();
                }
                let s = std::str::from_utf8(&buf).unwrap();
                check_invariants(s);
            }
        }
    }

    fn check_invariants(s: &str) {
        let once = normalize_path(s);
        let twice = normalize_path(&once);
        assert_eq!(once, twice, "{s:?}");
        assert!(
            once.bytes().filter(|&b| b == b'%').count() <= s.bytes().filter(|&b| b == b'%').count()
        );
        let b = once.as_bytes();
        for i in 0..b.len() {
            if b[i] == b'%' {
                let ok = |j: usize| {
                    b.get(j)
                        .is_some_and(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(c))
                };
                assert!(ok(i + 1) && ok(i + 2), "{s:?} -> {once:?}");
            }
        }
    }
}
