//! Request heads: [`parse_request`] and [`RequestHead`].
//!
//! How it fits: the connection loop appends socket bytes to its read buffer and calls
//! [`parse_request`] after every read. `Ok(None)` means "read more"; `Ok(Some)` gives the
//! head and where the body starts; `Err` gives the status to answer (with
//! `Connection: close`, since after a framing error the byte stream cannot be trusted).
//! httparse checks the syntax; this file adds the limits, the framing decision and the
//! smuggling defences listed in the crate README.

use crate::error::{bad, ErrorKind, ParseError};
use crate::framing::{
    classify, guess_request_line, ConnectionOptions, ContentLength, LineGuess, Special, TeVerdict,
    TransferEncoding,
};
use crate::head::{wait_or_too_large, with_header_slots};
use crate::target::{self, Form};
use crate::{BodyKind, HeaderMap, Limits, Method, Version};

/// A parsed request head.
#[derive(Debug, Clone)]
pub struct RequestHead {
    /// The method (case-sensitive; unknown tokens are `Method::Other`).
    pub method: Method,
    /// The raw request-target as received (`/a?b`, or absolute-form `http://h/a?b`).
    pub target: String,
    /// HTTP/1.0 or HTTP/1.1 (anything else was refused with 505).
    pub version: Version,
    /// Every field in wire order, names in their original case.
    pub headers: HeaderMap,
    /// Empty / Length / Chunked only (never CloseDelimited for requests).
    pub body: BodyKind,
    /// From the version and `Connection: close` / `keep-alive`.
    pub keep_alive: bool,
    /// `Expect: 100-continue` on an HTTP/1.1 request.
    pub expect_continue: bool,
}

impl RequestHead {
    /// The path without the query: origin-form as is, absolute-form reduced to its path
    /// (`/` when empty), `*` stays `*`.
    pub fn path(&self) -> &str {
        self.path_query().0
    }

    /// What follows the first `?`, if there is one.
    pub fn query(&self) -> Option<&str> {
        self.path_query().1
    }

    /// The path and what follows the first `?`, from one scan of the target (the hit
    /// path asks for both on every request).
    pub fn path_query(&self) -> (&str, Option<&str>) {
        let pq = self.path_and_query();
        match memchr::memchr(b'?', pq.as_bytes()) {
            // `?` is ASCII: both sides are on character boundaries.
            Some(i) => (&pq[..i], Some(&pq[i + 1..])),
            None => (pq, None),
        }
    }

    /// The origin-form target (absolute-form reduced to its path and query).
    pub fn path_and_query(&self) -> &str {
        target::path_and_query(&self.target)
    }

    /// The authority of an absolute-form target (RFC 9112 3.2.2: it overrides Host), else
    /// the Host header.
    pub fn host(&self) -> Option<&str> {
        match target::form(&self.target) {
            Form::Absolute => Some(target::split_absolute(&self.target).0),
            _ => self.headers.get("host").and_then(as_str),
        }
    }
}

/// `v` as text when it is UTF-8. A parsed Host is ASCII (the parser admits only
/// authority bytes), which is checked word by word, far cheaper than UTF-8 validation
/// on the short strings this sees on every request.
fn as_str(v: &[u8]) -> Option<&str> {
    if v.is_ascii() {
        // SAFETY: every ASCII byte string is valid UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(v) })
    } else {
        std::str::from_utf8(v).ok()
    }
}

const ERR_TOO_MANY_HEADERS: ParseError =
    ParseError::new(ErrorKind::HeadersTooLarge, "too many header fields");
const ERR_HEAD_TOO_LARGE: ParseError =
    ParseError::new(ErrorKind::HeadersTooLarge, "request head too large");
const ERR_LINE_TOO_LONG: ParseError =
    ParseError::new(ErrorKind::UriTooLong, "request line too long");
const ERR_VERSION: ParseError =
    ParseError::new(ErrorKind::VersionNotSupported, "unsupported HTTP version");

/// Index of the request line's first byte, skipping the empty lines a client may send
/// before it (RFC 9112 2.2). `None` when `buf` is nothing but line ends so far.
fn request_line_start(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b != b'\r' && b != b'\n')
}

/// 414 when the request line is (or, unfinished, already is) longer than the limit.
fn check_request_line(buf: &[u8], start: usize, limits: &Limits) -> Result<(), ParseError> {
    // Only the first max+2 bytes matter (the line plus CRLF), so the scan is bounded.
    let window_end = buf.len().min(
        start
            .saturating_add(limits.max_request_line)
            .saturating_add(2),
    );
    let window = &buf[start..window_end];
    let len = match memchr::memchr(b'\n', window) {
        Some(i) => window[..i].strip_suffix(b"\r").map_or(i, <[u8]>::len),
        None => window.strip_suffix(b"\r").map_or(window.len(), <[u8]>::len),
    };
    if len > limits.max_request_line {
        Err(ERR_LINE_TOO_LONG)
    } else {
        Ok(())
    }
}

/// Parses one request head from the start of `buf`.
///
/// `Ok(None)`: incomplete, read more (but if `buf` already exceeds a limit, that is an
/// `Err`, not `None`). `Ok(Some((head, n)))`: the head used the first `n` bytes; the body
/// (if any) starts at `buf[n]`. Leading empty lines before the request line are skipped
/// (RFC 9112 2.2) and count towards `max_header_bytes`.
pub fn parse_request(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<(RequestHead, usize)>, ParseError> {
    parse_request_reusing(buf, limits, None)
}

/// [`parse_request`] that builds the head in `spare`'s allocations (its target string
/// and field storage) when given one: a server recycles the heads of answered requests,
/// so parsing a request allocates nothing. `spare` is consumed either way.
pub fn parse_request_reusing(
    buf: &[u8],
    limits: &Limits,
    spare: Option<RequestHead>,
) -> Result<Option<(RequestHead, usize)>, ParseError> {
    let Some(start) = request_line_start(buf) else {
        return wait_or_too_large(buf, limits, ERR_HEAD_TOO_LARGE);
    };
    check_request_line(buf, start, limits)?;
    with_header_slots(limits.max_headers, |slots| {
        let mut req = httparse::Request::new(&mut []);
        let status = httparse::ParserConfig::default()
            .parse_request_with_uninit_headers(&mut req, buf, slots);
        let n = match status {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                return wait_or_too_large(buf, limits, ERR_HEAD_TOO_LARGE)
            }
            Err(e) => return refusal(e, buf, limits),
        };
        if n > limits.max_header_bytes {
            return Err(ERR_HEAD_TOO_LARGE);
        }
        build_head(buf, &req, limits, spare).map(|head| Some((head, n)))
    })
}

/// Maps an httparse error to ours. httparse only knows HTTP/1.0 and 1.1, so a `Version`
/// or `Token` error gets a second look to tell a version we do not speak (505), a version
/// still arriving (wait), and garbage (400).
fn refusal<T>(e: httparse::Error, buf: &[u8], limits: &Limits) -> Result<Option<T>, ParseError> {
    match e {
        httparse::Error::TooManyHeaders => Err(ERR_TOO_MANY_HEADERS),
        httparse::Error::Version | httparse::Error::Token => match guess_request_line(buf) {
            LineGuess::UnsupportedVersion => Err(ERR_VERSION),
            LineGuess::Incomplete => wait_or_too_large(buf, limits, ERR_HEAD_TOO_LARGE),
            LineGuess::Malformed if e == httparse::Error::Version => {
                Err(bad("malformed HTTP version"))
            }
            LineGuess::Malformed => Err(bad("malformed request line")),
        },
        httparse::Error::HeaderName => Err(bad(
            "invalid header name (whitespace before colon, obs-fold or bad token)",
        )),
        httparse::Error::HeaderValue => Err(bad("invalid character in header value")),
        httparse::Error::NewLine => Err(bad("invalid line ending")),
        httparse::Error::Status => Err(bad("malformed request line")),
    }
}

/// Turns httparse's borrowed view into an owned head, deciding framing on the way.
fn build_head(
    buf: &[u8],
    req: &httparse::Request<'_, '_>,
    limits: &Limits,
    spare: Option<RequestHead>,
) -> Result<RequestHead, ParseError> {
    let (Some(method), Some(path), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(bad("incomplete request line"));
    };
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let method = Method::from_token(method);
    if method == Method::Connect {
        return Err(ParseError::new(
            ErrorKind::NotImplemented,
            "CONNECT is not supported",
        ));
    }
    target::validate(&method, path)?;

    let fields = &*req.headers;
    let mut hosts = 0u32;
    let mut host_ok = true;
    let mut cl = ContentLength::default();
    let mut cl_error = None;
    let mut te = TransferEncoding::default();
    let mut conn = ConnectionOptions::default();
    let mut expect_continue = false;

    for h in fields {
        match classify(h.name) {
            Special::Host => {
                hosts += 1;
                host_ok &= h.value.iter().all(|&b| target::is_authority_byte(b));
            }
            Special::ContentLength => {
                if let Err(why) = cl.add(h.value) {
                    cl_error.get_or_insert(why);
                }
            }
            Special::TransferEncoding => te.add(h.value),
            Special::Connection => conn.add(h.value),
            Special::Expect => {
                expect_continue |= h.value.eq_ignore_ascii_case(b"100-continue");
            }
            Special::FramingLookalike => {
                return Err(bad(
                    "header name is an underscore variant of a framing header",
                ));
            }
            Special::Other => {}
        }
    }

    if hosts > 1 {
        return Err(bad("more than one Host header"));
    }
    if hosts == 0 && version == Version::Http11 {
        return Err(bad("HTTP/1.1 request without Host"));
    }
    if !host_ok {
        return Err(bad("invalid Host header"));
    }

    let body = if te.seen {
        // RFC 9112 6.1: TE in HTTP/1.0 is faulty framing; TE with CL is a smuggling
        // attempt (6.3 rule 3 lets a server reject it, and we do).
        if version == Version::Http10 {
            return Err(bad("Transfer-Encoding in an HTTP/1.0 request"));
        }
        if cl.value.is_some() || cl_error.is_some() {
            return Err(bad("both Transfer-Encoding and Content-Length"));
        }
        match te.verdict() {
            TeVerdict::Chunked => BodyKind::Chunked,
            TeVerdict::Empty => return Err(bad("empty Transfer-Encoding")),
            TeVerdict::FinalNotChunked => return Err(bad("final transfer-coding is not chunked")),
            TeVerdict::ChunkedTwice => return Err(bad("chunked applied more than once")),
            TeVerdict::Unknown => {
                return Err(ParseError::new(
                    ErrorKind::NotImplemented,
                    "unsupported transfer-coding",
                ))
            }
        }
    } else if let Some(why) = cl_error {
        return Err(bad(why));
    } else if let Some(len) = cl.value {
        if limits.max_body.is_some_and(|max| len > max) {
            return Err(ParseError::new(
                ErrorKind::PayloadTooLarge,
                "Content-Length exceeds the body limit",
            ));
        }
        BodyKind::Length(len)
    } else {
        BodyKind::Empty
    };

    // Copied last, so a refused request costs no allocation for its fields.
    let (target, headers) = match spare {
        Some(RequestHead {
            mut target,
            mut headers,
            ..
        }) => {
            target.clear();
            target.push_str(path);
            headers.refill_from_parsed(buf, fields);
            (target, headers)
        }
        None => (path.to_owned(), HeaderMap::from_parsed(buf, fields)),
    };
    Ok(RequestHead {
        method,
        target,
        version,
        keep_alive: conn.persistent(version),
        expect_continue: expect_continue && version == Version::Http11,
        headers,
        body,
    })
}

#[cfg(test)]
pub(crate) mod tests;
