//! `$uri` as nginx makes it ([`normalize_uri`]): the request path percent-decoded, with
//! `.` and `..` segments resolved and runs of slashes merged. Locations and rewrites
//! match this path; `$request_uri` and the request sent upstream keep the original.

use edge_http::normalize::{hex_digit, pct_escape};
use std::borrow::Cow;

/// Why a path cannot be normalized (the request is answered 400, as nginx does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UriError {
    /// `%` not followed by two hex digits.
    BadEscape,
    /// `%00` (or a raw NUL, which a parsed request never has).
    Nul,
    /// A `..` segment above the root (`/../etc`).
    AboveRoot,
}

impl std::fmt::Display for UriError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            UriError::BadEscape => "bad percent-escape in the path",
            UriError::Nul => "a NUL (%00) in the path",
            UriError::AboveRoot => "a \"..\" segment above the root",
        })
    }
}

/// Bytes kept percent-encoded in `$uri`: `%` itself (so that normalizing again decodes
/// nothing more: the function is idempotent), and control characters (so that `$uri`
/// in a header such as `Location` cannot split it). Bytes that do not form UTF-8 after
/// decoding are kept encoded too.
fn keep_encoded(b: u8) -> bool {
    b == b'%' || b < 0x20 || b == 0x7f
}

/// Whether `path` is already normal: starts with `/`, no escape, no control byte, no
/// `//`, no `.` or `..` segment. One pass, no allocation.
const ORDINARY: u8 = 0;
const SLASH: u8 = 1;
const DOT: u8 = 2;
/// `%` and control bytes: the path is not normal.
const ESCAPE: u8 = 3;
/// `?`: the path ends (for [`normal_path_len`]; [`is_normal`] never sees one in a path
/// that was split at its query).
const QUERY: u8 = 4;

/// What each byte is to [`is_normal`] (one table load per byte).
static CLASS: [u8; 256] = {
    let mut t = [ORDINARY; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = ESCAPE;
        b += 1;
    }
    t[0x7f] = ESCAPE;
    t[b'%' as usize] = ESCAPE;
    t[b'/' as usize] = SLASH;
    t[b'.' as usize] = DOT;
    t[b'?' as usize] = QUERY;
    t
};

fn is_normal(p: &[u8]) -> bool {
    normal_path_len(p) == Some(p.len())
}

/// The length of the path of `pq` (a path and query: up to the first `?`) when that
/// path is already normal (see [`is_normal`]); None when it is not. One pass over the
/// path, which is all the hit path pays for routing on `$uri`.
pub fn normal_path_len(p: &[u8]) -> Option<usize> {
    if p.first() != Some(&b'/') {
        return None;
    }
    // The segment since the last `/`: its length, and how many of its bytes are dots.
    let (mut len, mut dots) = (0usize, 0usize);
    let mut end = p.len();
    for (i, &b) in p.iter().enumerate().skip(1) {
        match CLASS[usize::from(b)] {
            ORDINARY => len += 1,
            DOT => {
                len += 1;
                dots += 1;
            }
            SLASH => {
                // `//`, `/./` or `/../`.
                if len == dots && len <= 2 {
                    return None;
                }
                (len, dots) = (0, 0);
            }
            QUERY => {
                end = i;
                break;
            }
            _ => return None,
        }
    }
    // A last segment `.` or `..` (an empty one is a trailing slash: normal).
    (!(len > 0 && len == dots && len <= 2)).then_some(end)
}

fn push_escaped(out: &mut Vec<u8>, b: u8) {
    out.extend_from_slice(&pct_escape(b));
}

/// The normalized form of a request path (without its query), nginx's `$uri`:
/// - `%XX` decoded, `%2F` included (it then separates segments, as in nginx); `%00`
///   and a malformed escape are errors; `%25`, control characters and bytes that do
///   not form UTF-8 stay encoded (see [`keep_encoded`]);
/// - `//` merged into `/` (nginx `merge_slashes on`);
/// - `.` segments dropped, `..` segments remove the one before (above the root: an
///   error); a path ending in `/.`, `/..` or `/` ends with `/`.
///
/// Borrowed when the path is already normal (the common case: no allocation). Always
/// starts with `/` (a `/` is put in front of a path without one), and normalizing the
/// result again gives it back unchanged.
pub fn normalize_uri(path: &str) -> Result<Cow<'_, str>, UriError> {
    let p = path.as_bytes();
    if is_normal(p) {
        return Ok(Cow::Borrowed(path));
    }
    // 1. Decode. Bytes kept encoded are written as `%XX` (ASCII) right away.
    let mut dec = Vec::with_capacity(p.len() + 1);
    if p.first() != Some(&b'/') {
        dec.push(b'/');
    }
    let mut i = 0;
    while i < p.len() {
        let b = p[i];
        if b != b'%' {
            if b == 0 {
                return Err(UriError::Nul);
            }
            if keep_encoded(b) {
                push_escaped(&mut dec, b);
            } else {
                dec.push(b);
            }
            i += 1;
            continue;
        }
        let (Some(h), Some(l)) = (
            p.get(i + 1).copied().and_then(hex_digit),
            p.get(i + 2).copied().and_then(hex_digit),
        ) else {
            return Err(UriError::BadEscape);
        };
        let v = h << 4 | l;
        if v == 0 {
            return Err(UriError::Nul);
        }
        if keep_encoded(v) {
            push_escaped(&mut dec, v);
        } else {
            dec.push(v);
        }
        i += 3;
    }
    // 2. Bytes that are not UTF-8 stay encoded (they cannot be `/` or `.`).
    let mut text = String::with_capacity(dec.len());
    for chunk in dec.utf8_chunks() {
        text.push_str(chunk.valid());
        let mut buf = Vec::with_capacity(3 * chunk.invalid().len());
        for &b in chunk.invalid() {
            push_escaped(&mut buf, b);
        }
        // Only ASCII was written.
        text.push_str(std::str::from_utf8(&buf).unwrap_or(""));
    }
    // 3. Segments: merge slashes, resolve dots.
    let mut segs: Vec<&str> = Vec::new();
    let mut trailing = false;
    for seg in text[1..].split('/') {
        trailing = matches!(seg, "" | "." | "..");
        match seg {
            "" | "." => {}
            ".." => {
                if segs.pop().is_none() {
                    return Err(UriError::AboveRoot);
                }
            }
            s => segs.push(s),
        }
    }
    let mut out = String::with_capacity(text.len());
    for s in &segs {
        out.push('/');
        out.push_str(s);
    }
    if trailing || segs.is_empty() {
        out.push('/');
    }
    Ok(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(p: &str) -> Result<String, UriError> {
        normalize_uri(p).map(|c| c.into_owned())
    }

    #[test]
    fn normal_paths_are_borrowed() {
        for p in [
            "/",
            "/a",
            "/a/b/",
            "/a.b/..c/...",
            "/é",
            "/a b",
            "/.well-known/x",
        ] {
            assert!(
                matches!(normalize_uri(p), Ok(Cow::Borrowed(_))),
                "{p} should be normal"
            );
        }
    }

    #[test]
    fn decodes_merges_and_resolves_like_nginx() {
        let cases = [
            ("/a//b/../c%2Dd", "/a/c-d"),
            ("//a///b", "/a/b"),
            ("/a/./b/.", "/a/b/"),
            ("/a/b/..", "/a/"),
            ("/a/..", "/"),
            ("/.", "/"),
            ("/a%2Fb", "/a/b"),
            ("/a%2F..%2Fb", "/b"),
            ("/a/%2e%2E/b", "/b"),
            ("/%C3%A9t%C3%A9", "/été"),
            ("/a%3Fb%23c", "/a?b#c"),
            ("/a%20b", "/a b"),
            ("a/b", "/a/b"),
            ("", "/"),
        ];
        for (input, want) in cases {
            assert_eq!(n(input).as_deref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn percent_controls_and_non_utf8_stay_encoded() {
        assert_eq!(n("/100%25").unwrap(), "/100%25");
        assert_eq!(n("/a%0D%0ASet-Cookie:x").unwrap(), "/a%0D%0ASet-Cookie:x");
        assert_eq!(n("/a%7f").unwrap(), "/a%7F");
        assert_eq!(n("/caf%E9").unwrap(), "/caf%E9");
        assert_eq!(n("/%C3/%A9").unwrap(), "/%C3/%A9");
    }

    #[test]
    fn rejects_what_nginx_rejects() {
        assert_eq!(n("/a%00b"), Err(UriError::Nul));
        assert_eq!(n("\0"), Err(UriError::Nul), "found by the fuzzer");
        assert_eq!(n("/a%2"), Err(UriError::BadEscape));
        assert_eq!(n("/a%zz"), Err(UriError::BadEscape));
        assert_eq!(n("/.."), Err(UriError::AboveRoot));
        assert_eq!(n("/a/../../b"), Err(UriError::AboveRoot));
        assert_eq!(n("/%2E%2E/etc/passwd"), Err(UriError::AboveRoot));
        assert_eq!(n("/a%2F%2E%2E%2F%2E%2E"), Err(UriError::AboveRoot));
    }

    #[test]
    fn idempotent_on_tricky_inputs() {
        for p in [
            "/a%2541",
            "/%C3%25",
            "/x/%E2%82/./..",
            "/%2F%2F",
            "/a/%2e./b",
            "/%25%32%46",
            "/..%2F",
        ] {
            if let Ok(once) = n(p) {
                assert_eq!(n(&once).as_deref(), Ok(once.as_str()), "{p}");
                assert!(once.starts_with('/'));
            }
        }
    }

    #[test]
    fn normal_path_len_stops_at_the_query() {
        assert_eq!(normal_path_len(b"/a/b?x=1"), Some(4));
        assert_eq!(normal_path_len(b"/a?/./..//%zz"), Some(2));
        assert_eq!(normal_path_len(b"/?"), Some(1));
        assert_eq!(normal_path_len(b"/"), Some(1));
        assert_eq!(normal_path_len(b"/a/..?x"), None);
        assert_eq!(normal_path_len(b"/a/.?x"), None);
        assert_eq!(normal_path_len(b"/a//b?x"), None);
        assert_eq!(normal_path_len(b"/a%41?x"), None);
        assert_eq!(normal_path_len(b"a?x"), None);
        assert_eq!(normal_path_len(b"*"), None);
    }

    #[test]
    fn is_normal_agrees_with_a_segment_by_segment_check() {
        // The one-pass check against the definition: every path over a small alphabet,
        // up to 6 bytes long.
        fn reference(p: &[u8]) -> bool {
            let Some(rest) = p.strip_prefix(b"/") else {
                return false;
            };
            if rest.iter().any(|&b| b == b'%' || b < 0x20 || b == 0x7f) {
                return false;
            }
            let segs: Vec<&[u8]> = rest.split(|&b| b == b'/').collect();
            let last = segs.len() - 1;
            segs.iter()
                .enumerate()
                .all(|(i, s)| !(*s == b"." || *s == b".." || (s.is_empty() && i < last)))
        }
        let alphabet = b"/.a%";
        let mut paths: Vec<Vec<u8>> = vec![Vec::new()];
        let mut all = Vec::new();
        for _ in 0..6 {
            let mut next = Vec::new();
            for p in &paths {
                for &c in alphabet {
                    let mut q = p.clone();
                    q.push(c);
                    next.push(q);
                }
            }
            all.extend(next.iter().cloned());
            paths = next;
        }
        for p in all {
            assert_eq!(
                is_normal(&p),
                reference(&p),
                "{:?}",
                String::from_utf8_lossy(&p)
            );
        }
    }
}
