//! Framing rules shared by the request and response parsers (RFC 9112 sections 6 and 7).
//!
//! How it fits: the parsers feed each `Content-Length`, `Transfer-Encoding` and
//! `Connection` field they meet into the accumulators here while copying the head, then
//! ask for a verdict. Keeping the rules in one place means requests and responses can
//! only differ where the RFC says they do (a request with an unusable framing is refused;
//! a response falls back to close-delimited or is refused as a bad upstream).

use crate::headers::{list_elements, trim_ows};

/// Folds every Content-Length field (and comma-separated list element) into one value.
/// RFC 9112 6.3 rule 5: differing values are unrecoverable; identical ones (a list such as
/// `42, 42`) may be folded to one.
#[derive(Debug, Default)]
pub(crate) struct ContentLength {
    pub value: Option<u64>,
}

impl ContentLength {
    /// Adds one field; `Err` names why it is invalid.
    pub fn add(&mut self, field: &[u8]) -> Result<(), &'static str> {
        for elem in field.split(|&b| b == b',') {
            let v = parse_decimal(trim_ows(elem))?;
            match self.value {
                None => self.value = Some(v),
                Some(old) if old == v => {}
                Some(_) => return Err("conflicting Content-Length values"),
            }
        }
        Ok(())
    }
}

/// Parses `1*DIGIT` (RFC 9110 8.6): no sign, no spaces, no hex, no overflow.
pub(crate) fn parse_decimal(s: &[u8]) -> Result<u64, &'static str> {
    if s.is_empty() {
        return Err("empty Content-Length");
    }
    let mut v: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return Err("Content-Length is not a decimal number");
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or("Content-Length overflows")?;
    }
    Ok(v)
}

/// What the Transfer-Encoding fields (all of them, as one list) say.
#[derive(Debug, Default)]
pub(crate) struct TransferEncoding {
    /// At least one Transfer-Encoding field was present (even an empty one).
    pub seen: bool,
    codings: u32,
    chunked: u32,
    last_is_chunked: bool,
    unknown: bool,
}

/// The verdict on a Transfer-Encoding list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TeVerdict {
    /// Exactly one `chunked`, and it is last: the only framing we decode.
    Chunked,
    /// The field is present but lists no coding.
    Empty,
    /// The final coding is not chunked (a request cannot be framed at all).
    FinalNotChunked,
    /// `chunked` appears more than once (RFC 9112 7: a sender MUST NOT do this).
    ChunkedTwice,
    /// A coding other than chunked (gzip, deflate, compress, the obsolete identity...).
    Unknown,
}

impl TransferEncoding {
    /// Adds one field's codings, in order.
    pub fn add(&mut self, field: &[u8]) {
        self.seen = true;
        for coding in list_elements(field) {
            self.codings += 1;
            let is_chunked = coding.eq_ignore_ascii_case(b"chunked");
            if is_chunked {
                self.chunked += 1;
            } else {
                self.unknown = true;
            }
            self.last_is_chunked = is_chunked;
        }
    }

    /// The verdict, most fundamental problem first.
    pub fn verdict(&self) -> TeVerdict {
        if self.codings == 0 {
            TeVerdict::Empty
        } else if !self.last_is_chunked {
            TeVerdict::FinalNotChunked
        } else if self.chunked > 1 {
            TeVerdict::ChunkedTwice
        } else if self.unknown {
            TeVerdict::Unknown
        } else {
            TeVerdict::Chunked
        }
    }
}

/// The `Connection` options that decide persistence (RFC 9112 9.3).
#[derive(Debug, Default)]
pub(crate) struct ConnectionOptions {
    pub close: bool,
    pub keep_alive: bool,
}

impl ConnectionOptions {
    pub fn add(&mut self, field: &[u8]) {
        // Fast path: a lone option, as browsers send it.
        if field.eq_ignore_ascii_case(b"keep-alive") {
            self.keep_alive = true;
            return;
        }
        if field.eq_ignore_ascii_case(b"close") {
            self.close = true;
            return;
        }
        for opt in list_elements(field) {
            if opt.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if opt.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            }
        }
    }

    /// HTTP/1.1 persists unless `close`; HTTP/1.0 only with `keep-alive` (and no `close`).
    pub fn persistent(&self, version: crate::Version) -> bool {
        match version {
            crate::Version::Http11 | crate::Version::Http2 | crate::Version::Http3 => !self.close,
            crate::Version::Http10 => self.keep_alive && !self.close,
        }
    }
}

/// The framing-relevant header names, recognised by length first so that ordinary fields
/// cost one length comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    Host,
    ContentLength,
    TransferEncoding,
    Connection,
    Expect,
    /// `Content_Length` or `Transfer_Encoding`: harmless to us, but a CGI-style upstream
    /// that maps `_` and `-` to the same variable would see a second framing header
    /// (nginx drops such names by default). Requests carrying one are refused.
    FramingLookalike,
    Other,
}

/// `name` equals `framing` if every `_` in it were a `-` (and it has at least one `_`).
fn underscore_variant(name: &[u8], framing: &[u8]) -> bool {
    name.contains(&b'_')
        && name.len() == framing.len()
        && name
            .iter()
            .zip(framing)
            .all(|(&a, &b)| a.eq_ignore_ascii_case(&b) || (a == b'_' && b == b'-'))
}

pub(crate) fn classify(name: &str) -> Special {
    let n = name.as_bytes();
    // Length and first letter rule out almost every ordinary field in two comparisons.
    let first = n.first().map_or(0, u8::to_ascii_lowercase);
    match (n.len(), first) {
        (4, b'h') if n.eq_ignore_ascii_case(b"host") => Special::Host,
        (6, b'e') if n.eq_ignore_ascii_case(b"expect") => Special::Expect,
        (10, b'c') if n.eq_ignore_ascii_case(b"connection") => Special::Connection,
        (14, b'c') if n.eq_ignore_ascii_case(b"content-length") => Special::ContentLength,
        (17, b't') if n.eq_ignore_ascii_case(b"transfer-encoding") => Special::TransferEncoding,
        (14, b'c') if underscore_variant(n, b"content-length") => Special::FramingLookalike,
        (17, b't') if underscore_variant(n, b"transfer-encoding") => Special::FramingLookalike,
        _ => Special::Other,
    }
}

/// What the first line of a head that httparse refused looks like, for telling "wrong
/// version" (505) from "garbage" (400), since httparse only knows HTTP/1.0 and 1.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineGuess {
    /// The line is not finished and its last token may still become a version.
    Incomplete,
    /// A well-formed line with an HTTP version we do not speak (or HTTP/0.9's two-token
    /// form `GET /path`).
    UnsupportedVersion,
    /// Anything else.
    Malformed,
}

/// `HTTP/` 1*DIGIT [ "." 1*DIGIT ]; with `partial`, also any prefix of that.
fn looks_like_version(tok: &[u8], partial: bool) -> bool {
    const PREFIX: &[u8] = b"HTTP/";
    if tok.len() < PREFIX.len() {
        return partial && PREFIX.starts_with(tok);
    }
    if !tok.starts_with(PREFIX) {
        return false;
    }
    let rest = &tok[PREFIX.len()..];
    let mut parts = rest.splitn(2, |&b| b == b'.');
    let major = parts.next().unwrap_or(b"");
    let minor = parts.next();
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    match minor {
        None => (partial && major.iter().all(u8::is_ascii_digit)) || digits(major),
        Some(m) => digits(major) && (digits(m) || (partial && m.is_empty())),
    }
}

/// Classifies the first line of `buf` (leading empty lines skipped) after httparse said
/// `Version` or `Token`.
pub(crate) fn guess_request_line(buf: &[u8]) -> LineGuess {
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let rest = &buf[start..];
    let (line, complete) = match memchr::memchr(b'\n', rest) {
        Some(i) => (rest[..i].strip_suffix(b"\r").unwrap_or(&rest[..i]), true),
        None => (rest, false),
    };
    let mut parts = line.split(|&b| b == b' ');
    let (m, t, v, extra) = (parts.next(), parts.next(), parts.next(), parts.next());
    let token = |s: &[u8]| !s.is_empty() && s.iter().all(|&b| b.is_ascii_graphic());
    match (m, t, v, extra) {
        (Some(m), Some(t), Some(v), None) if token(m) && token(t) => {
            if looks_like_version(v, !complete) && v != b"HTTP/1.0" && v != b"HTTP/1.1" {
                if complete || looks_like_version(v, false) && v.len() >= 8 {
                    LineGuess::UnsupportedVersion
                } else {
                    LineGuess::Incomplete
                }
            } else {
                LineGuess::Malformed
            }
        }
        (Some(m), Some(t), None, None) if complete && token(m) && t.starts_with(b"/") => {
            LineGuess::UnsupportedVersion
        }
        _ => LineGuess::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_folding() {
        let mut cl = ContentLength::default();
        cl.add(b"42").unwrap();
        cl.add(b"42, 42").unwrap();
        assert_eq!(cl.value, Some(42));
        assert!(cl.add(b"43").is_err());
        for bad in [
            &b""[..],
            b"+1",
            b"-1",
            b"1 2",
            b"0x10",
            b"1,",
            b"18446744073709551616",
        ] {
            assert!(ContentLength::default().add(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_decimal(b"18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_decimal(b"007"), Ok(7));
    }

    #[test]
    fn transfer_encoding_verdicts() {
        let v = |fields: &[&str]| {
            let mut te = TransferEncoding::default();
            for f in fields {
                te.add(f.as_bytes());
            }
            te.verdict()
        };
        assert_eq!(v(&["chunked"]), TeVerdict::Chunked);
        assert_eq!(v(&["CHUNKED"]), TeVerdict::Chunked);
        assert_eq!(v(&["", "chunked"]), TeVerdict::Chunked);
        assert_eq!(v(&[""]), TeVerdict::Empty);
        assert_eq!(v(&[" , "]), TeVerdict::Empty);
        assert_eq!(v(&["chunked, gzip"]), TeVerdict::FinalNotChunked);
        assert_eq!(v(&["gzip"]), TeVerdict::FinalNotChunked);
        assert_eq!(v(&["chunked", "chunked"]), TeVerdict::ChunkedTwice);
        assert_eq!(v(&["gzip, chunked"]), TeVerdict::Unknown);
        assert_eq!(v(&["identity", "chunked"]), TeVerdict::Unknown);
        assert_eq!(v(&["xchunked"]), TeVerdict::FinalNotChunked);
    }

    #[test]
    fn connection_persistence() {
        use crate::Version::*;
        let opts = |f: &str| {
            let mut c = ConnectionOptions::default();
            c.add(f.as_bytes());
            c
        };
        assert!(opts("").persistent(Http11));
        assert!(!opts("close").persistent(Http11));
        assert!(!opts("").persistent(Http10));
        assert!(opts("Keep-Alive").persistent(Http10));
        assert!(!opts("keep-alive, close").persistent(Http10));
    }

    #[test]
    fn classification() {
        assert_eq!(classify("HOST"), Special::Host);
        assert_eq!(classify("content-Length"), Special::ContentLength);
        assert_eq!(classify("Transfer-Encoding"), Special::TransferEncoding);
        assert_eq!(classify("Content_Length"), Special::FramingLookalike);
        assert_eq!(classify("transfer_encoding"), Special::FramingLookalike);
        assert_eq!(classify("Content_Lengthx"), Special::Other);
        assert_eq!(classify("Content-Lengtx"), Special::Other);
        assert_eq!(classify("X-Forwarded_For"), Special::Other);
    }

    #[test]
    fn version_guesses() {
        use LineGuess::*;
        let g = |s: &str| guess_request_line(s.as_bytes());
        assert_eq!(g("GET / HTTP/2.0\r\n"), UnsupportedVersion);
        assert_eq!(g("GET / HTTP/1.2\r\n"), UnsupportedVersion);
        assert_eq!(g("GET / HTTP/0.9\r\n"), UnsupportedVersion);
        assert_eq!(g("\r\nGET / HTTP/3\n"), UnsupportedVersion);
        assert_eq!(g("GET /\r\n"), UnsupportedVersion);
        assert_eq!(g("GET / HTTP/2.0"), UnsupportedVersion);
        assert_eq!(g("GET / HTTP/2"), Incomplete);
        assert_eq!(g("GET / HTTP/2."), Incomplete);
        assert_eq!(g("GET / HT"), Incomplete);
        assert_eq!(g("GET / FTP/1.1\r\n"), Malformed);
        assert_eq!(g("GET / HTTP/1.1\r\n"), Malformed);
        assert_eq!(g("GET / HTTP/x\r\n"), Malformed);
        assert_eq!(g("GET a\r\n"), Malformed);
        assert_eq!(g("GET / / HTTP/2.0\r\n"), Malformed);
    }
}
