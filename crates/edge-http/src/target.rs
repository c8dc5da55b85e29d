//! The request-target (RFC 9112 3.2): which forms we accept and how to take them apart.
//!
//! How it fits: [`crate::parse_request`] calls [`validate`] once; the accessors on
//! [`crate::RequestHead`] call the cheap splitting functions here every time, so the head
//! stores only the raw target string and nothing can get out of sync with it.
//!
//! Accepted: origin-form (`/path?query`), absolute-form with an `http` or `https` scheme
//! (what a client sends to a proxy), and asterisk-form (`*`) for OPTIONS. Authority-form is
//! CONNECT only, which is 501 before we get here. Everything else is 400.

use crate::error::{bad, ParseError};
use crate::Method;

/// The shape of a request-target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Origin,
    Absolute,
    Asterisk,
}

/// Classifies without validating (the target was validated when parsed).
pub(crate) fn form(target: &str) -> Form {
    if target.starts_with('/') {
        Form::Origin
    } else if target == "*" {
        Form::Asterisk
    } else {
        Form::Absolute
    }
}

/// Length of the `http://` / `https://` prefix, case-insensitively, or `None`.
fn scheme_len(target: &str) -> Option<usize> {
    let b = target.as_bytes();
    if b.len() >= 7 && b[..7].eq_ignore_ascii_case(b"http://") {
        Some(7)
    } else if b.len() >= 8 && b[..8].eq_ignore_ascii_case(b"https://") {
        Some(8)
    } else {
        None
    }
}

/// Splits an absolute-form target into (authority, path-and-query).
pub(crate) fn split_absolute(target: &str) -> (&str, &str) {
    let rest = &target[scheme_len(target).unwrap_or(0)..];
    match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    }
}

/// Whether `b` may appear in a Host value or an absolute-form authority: RFC 3986
/// reg-name characters (unreserved, pct-encoded, sub-delims), `:` for the port and
/// `[`/`]` for IPv6 literals. No `@` (userinfo), `/`, `?`, `#`, whitespace or controls,
/// so a Host can never smuggle a path or a second authority into a cache key.
#[inline]
pub(crate) fn is_authority_byte(b: u8) -> bool {
    // A table: this runs for every byte of every Host.
    AUTHORITY[usize::from(b)]
}

/// [`is_authority_byte`] for every byte value, built at compile time.
static AUTHORITY: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'['
                    | b']'
            );
        b += 1;
    }
    t
};

/// Whether `t` has a byte below 0x21 (controls and space), DEL or `#`: eight bytes per
/// step with the word-at-a-time tests for "some byte is less than n" (exact for n up
/// to 128) and "some byte is zero" (of the word XORed with the byte sought). The
/// tests say whether such a byte exists, not which one.
#[inline]
fn any_forbidden(t: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    #[inline(always)]
    fn word(x: u64) -> bool {
        let below = x.wrapping_sub(ONES * 0x21) & !x;
        let del = x ^ (ONES * 0x7f);
        let hash = x ^ (ONES * u64::from(b'#'));
        let found = below | (del.wrapping_sub(ONES) & !del) | (hash.wrapping_sub(ONES) & !hash);
        found & HIGH != 0
    }
    let load = |i: usize| u64::from_le_bytes(t[i..i + 8].try_into().expect("8 bytes"));
    if t.len() < 8 {
        return t.iter().any(|&b| b < 0x21 || b == 0x7f || b == b'#');
    }
    let mut i = 0;
    while i + 8 <= t.len() {
        if word(load(i)) {
            return true;
        }
        i += 8;
    }
    // The last (overlapping) word covers the tail.
    i < t.len() && word(load(t.len() - 8))
}

/// Checks the target against the method; returns its form.
pub(crate) fn validate(method: &Method, target: &str) -> Result<Form, ParseError> {
    // httparse already refused controls, spaces and DEL, and guaranteed UTF-8; the
    // control check stays as defence in depth (one pass with the fragment check). The
    // pass goes eight bytes at a time; the byte loop only names what it found.
    if any_forbidden(target.as_bytes()) {
        for &b in target.as_bytes() {
            if b < 0x21 || b == 0x7f {
                return Err(bad("control character in request-target"));
            }
            if b == b'#' {
                return Err(bad("fragment in request-target"));
            }
        }
    }
    match form(target) {
        Form::Origin => Ok(Form::Origin),
        Form::Asterisk => {
            if *method == Method::Options {
                Ok(Form::Asterisk)
            } else {
                Err(bad("asterisk-form target is only allowed for OPTIONS"))
            }
        }
        Form::Absolute => {
            if scheme_len(target).is_none() {
                return Err(bad(
                    "request-target is not origin-form or http(s) absolute-form",
                ));
            }
            let (authority, pq) = split_absolute(target);
            if authority.is_empty() {
                return Err(bad("absolute-form target without authority"));
            }
            if authority.contains('@') {
                return Err(bad("userinfo in absolute-form target"));
            }
            if !authority.bytes().all(is_authority_byte) {
                return Err(bad("invalid character in absolute-form authority"));
            }
            if pq.starts_with('?') {
                return Err(bad("absolute-form target with a query but an empty path"));
            }
            Ok(Form::Absolute)
        }
    }
}

/// The origin-form part of a target: itself for origin/asterisk form, the path and query
/// of an absolute-form target (`/` when its path is empty).
pub(crate) fn path_and_query(target: &str) -> &str {
    match form(target) {
        Form::Origin | Form::Asterisk => target,
        Form::Absolute => match split_absolute(target).1 {
            "" => "/",
            pq => pq,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_forbidden_is_the_byte_test() {
        // Every byte value at every position of targets of every length up to 24, on a
        // background of ordinary and high (UTF-8) bytes.
        let naive = |t: &[u8]| t.iter().any(|&b| b < 0x21 || b == 0x7f || b == b'#');
        for len in 1..=24usize {
            for fill in [b'a', b'/', 0x80, 0xff, b'"', b'$', b'~'] {
                for pos in 0..len {
                    for v in 0..=255u8 {
                        let mut t = vec![fill; len];
                        t[pos] = v;
                        assert_eq!(any_forbidden(&t), naive(&t), "{t:?}");
                    }
                }
            }
        }
        assert!(!any_forbidden(b""));
        // Random words of random bytes (borrows between neighbouring bytes).
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let t: Vec<u8> = x
                .to_le_bytes()
                .iter()
                .map(|b| b.wrapping_add(0x10))
                .collect();
            let n = 1 + (x >> 61) as usize;
            assert_eq!(any_forbidden(&t[..n]), naive(&t[..n]), "{t:?}");
        }
    }

    #[test]
    fn forms() {
        assert_eq!(validate(&Method::Get, "/a?b"), Ok(Form::Origin));
        assert_eq!(validate(&Method::Options, "*"), Ok(Form::Asterisk));
        assert_eq!(validate(&Method::Get, "http://h:80/a"), Ok(Form::Absolute));
        assert_eq!(validate(&Method::Get, "HTTPS://h"), Ok(Form::Absolute));
    }

    #[test]
    fn rejects() {
        for t in [
            "*",
            "a/b",
            "ftp://h/a",
            "http:///a",
            "http://u@h/a",
            "http://h\"/a",
            "http://h?x",
            "/a#frag",
            "/a\x01",
        ] {
            let e = validate(&Method::Get, t).unwrap_err();
            assert_eq!(e.kind, crate::ErrorKind::BadRequest, "{t}");
        }
    }

    #[test]
    fn splitting() {
        assert_eq!(split_absolute("http://h:8/a?b"), ("h:8", "/a?b"));
        assert_eq!(split_absolute("http://h"), ("h", ""));
        assert_eq!(path_and_query("http://h"), "/");
        assert_eq!(path_and_query("http://h/x?y"), "/x?y");
        assert_eq!(path_and_query("/x"), "/x");
        assert_eq!(path_and_query("*"), "*");
    }
}
