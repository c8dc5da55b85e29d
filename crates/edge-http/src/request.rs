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
            _ => self.headers.host().and_then(as_str),
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
    let parsed = parse_request_reusing(buf, limits, None)?;
    Ok(parsed.map(|(head, n)| (*head, n)))
}

/// [`parse_request`] that builds the head in `spare` (its box, target string and field
/// storage) when given one: a server recycles the heads of answered requests, so
/// parsing a request allocates nothing, and the head moves from the parser through
/// the exchange and back as a pointer, not as its 144 bytes. `spare` is consumed
/// either way.
pub fn parse_request_reusing(
    buf: &[u8],
    limits: &Limits,
    spare: Option<Box<RequestHead>>,
) -> Result<Option<(Box<RequestHead>, usize)>, ParseError> {
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
/// (Inlined into its one caller, as it was before [`FieldChecks`] was shared: called,
/// it cost an HTTP/1.1 hit 44 more instructions, callgrind.)
#[inline(always)]
fn build_head(
    buf: &[u8],
    req: &httparse::Request<'_, '_>,
    limits: &Limits,
    spare: Option<Box<RequestHead>>,
) -> Result<Box<RequestHead>, ParseError> {
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
    let mut checks = FieldChecks::default();
    for h in fields {
        checks.add(h.name, h.value)?;
    }
    let (body, conn, expect_continue) = checks.finish(version, limits)?;

    // Copied last, so a refused request costs no allocation for its fields.
    let keep_alive = conn.persistent(version);
    let expect_continue = expect_continue && version == Version::Http11;
    let mut head = recycled(
        spare,
        method,
        version,
        body,
        keep_alive,
        expect_continue,
        0,
        0,
    );
    head.target.push_str(path);
    head.headers.refill_from_parsed(buf, fields);
    Ok(head)
}

/// `spare` (or a new box) as the head of a request with these values, its target and
/// fields empty for the caller to fill (`fields` and `bytes`: the new map's capacity).
/// Every field is named here, so a recycled head keeps nothing of its last request
/// but its allocations.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn recycled(
    spare: Option<Box<RequestHead>>,
    method: Method,
    version: Version,
    body: BodyKind,
    keep_alive: bool,
    expect_continue: bool,
    fields: usize,
    bytes: usize,
) -> Box<RequestHead> {
    match spare {
        Some(mut head) => {
            let RequestHead {
                method: m,
                target,
                version: v,
                headers,
                body: b,
                keep_alive: k,
                expect_continue: e,
            } = &mut *head;
            target.clear();
            headers.clear();
            (*m, *v, *b, *k, *e) = (method, version, body, keep_alive, expect_continue);
            head
        }
        None => Box::new(RequestHead {
            method,
            target: String::new(),
            version,
            headers: HeaderMap::with_capacity(fields, bytes),
            body,
            keep_alive,
            expect_continue,
        }),
    }
}

/// The checks of a head's fields that decide its framing, shared by the HTTP/1 parser
/// and [`request_from_fields`]: one Host of authority bytes, Content-Length and
/// Transfer-Encoding that agree (or a refusal: smuggling), no underscore lookalikes
/// of the framing fields.
#[derive(Default)]
struct FieldChecks {
    hosts: u32,
    host_bad: bool,
    cl: ContentLength,
    cl_error: Option<&'static str>,
    te: TransferEncoding,
    conn: ConnectionOptions,
    expect_continue: bool,
}

impl FieldChecks {
    #[inline(always)]
    fn add(&mut self, name: &str, value: &[u8]) -> Result<(), ParseError> {
        match classify(name) {
            Special::Host => {
                self.hosts += 1;
                self.host_bad |= !value.iter().all(|&b| target::is_authority_byte(b));
            }
            Special::ContentLength => {
                if let Err(why) = self.cl.add(value) {
                    self.cl_error.get_or_insert(why);
                }
            }
            Special::TransferEncoding => self.te.add(value),
            Special::Connection => self.conn.add(value),
            Special::Expect => {
                self.expect_continue |= value.eq_ignore_ascii_case(b"100-continue");
            }
            Special::FramingLookalike => {
                return Err(bad(
                    "header name is an underscore variant of a framing header",
                ));
            }
            Special::Other => {}
        }
        Ok(())
    }

    /// The body's framing, the connection options and whether `Expect: 100-continue`
    /// came, or the refusal.
    #[inline(always)]
    fn finish(
        self,
        version: Version,
        limits: &Limits,
    ) -> Result<(BodyKind, ConnectionOptions, bool), ParseError> {
        if self.hosts > 1 {
            return Err(bad("more than one Host header"));
        }
        if self.hosts == 0 && version != Version::Http10 {
            return Err(bad("HTTP/1.1 request without Host"));
        }
        if self.host_bad {
            return Err(bad("invalid Host header"));
        }
        let (cl, cl_error, te) = (self.cl, self.cl_error, self.te);
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
                TeVerdict::FinalNotChunked => {
                    return Err(bad("final transfer-coding is not chunked"))
                }
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
        Ok((body, self.conn, self.expect_continue))
    }
}

/// Field names that are connection-specific: HTTP/2 forbids them in a request (RFC 9113
/// 8.2.2), and they say nothing once the request is not an HTTP/1.1 byte stream; `te`
/// and `expect` (100-continue is HTTP/1.1's) included.
fn connection_specific(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "upgrade"
            | "te"
            | "expect"
    )
}

/// A request that arrives as fields, not bytes (an HTTP/2 stream: its pseudo-headers
/// give `method`, the origin-form `target` and the `authority`; `fields` are its
/// lowercase, already HPACK-decoded fields, walked once per call of the function),
/// checked as [`parse_request`] checks a head:
/// the same limits (`max_request_line` for the target, `max_headers` and
/// `max_header_bytes` for the fields, counted as their HTTP/1.1 lines would be), the
/// same Host, Content-Length and lookalike checks. The authority is the Host (a `host`
/// field beside it is dropped, RFC 9113 8.3.1); connection-specific fields are dropped;
/// `cookie` crumbs are joined into one field (RFC 9113 8.2.3). A body with no
/// Content-Length (`has_body`) is [`BodyKind::Chunked`]: the stream presents its DATA
/// frames as chunks. The head's version is [`Version::Http2`].
pub fn request_from_fields<'a, I: Iterator<Item = (&'a str, &'a [u8])>>(
    method: &str,
    target: &str,
    authority: Option<&str>,
    fields: impl Fn() -> I,
    has_body: bool,
    limits: &Limits,
    spare: Option<Box<RequestHead>>,
) -> Result<Box<RequestHead>, ParseError> {
    if target.len() > limits.max_request_line {
        return Err(ERR_LINE_TOO_LONG);
    }
    let method = Method::from_token(method);
    if method == Method::Connect {
        return Err(ParseError::new(
            ErrorKind::NotImplemented,
            "CONNECT is not supported",
        ));
    }
    target::validate(&method, target)?;
    let mut checks = FieldChecks::default();
    // What the head would take as HTTP/1.1: the request line, and a line per field.
    let mut bytes = method.as_str().len() + target.len() + 12;
    let mut count = 0usize;
    let mut cookie_bytes = 0usize;
    if let Some(a) = authority {
        checks.add("host", a.as_bytes())?;
        bytes += a.len() + 8;
        count += 1;
    }
    for (name, value) in fields() {
        if connection_specific(name) || (name == "host" && authority.is_some()) {
            continue;
        }
        if name == "cookie" {
            cookie_bytes += value.len() + 2;
            continue;
        }
        checks.add(name, value)?;
        bytes += name.len() + value.len() + 4;
        count += 1;
        if count > limits.max_headers {
            return Err(ERR_TOO_MANY_HEADERS);
        }
    }
    if cookie_bytes > 0 {
        bytes += cookie_bytes + 6;
        count += 1;
    }
    if count > limits.max_headers {
        return Err(ERR_TOO_MANY_HEADERS);
    }
    if bytes > limits.max_header_bytes {
        return Err(ERR_HEAD_TOO_LARGE);
    }
    let (mut body, _, _) = checks.finish(Version::Http2, limits)?;
    if has_body && body == BodyKind::Empty {
        body = BodyKind::Chunked;
    }
    let mut head = recycled(
        spare,
        method,
        Version::Http2,
        body,
        true,
        false,
        count,
        bytes,
    );
    head.target.push_str(target);
    let headers = &mut head.headers;
    if let Some(a) = authority {
        headers.push_raw(b"Host", a.as_bytes());
    }
    for (name, value) in fields() {
        if connection_specific(name) || name == "cookie" || (name == "host" && authority.is_some())
        {
            continue;
        }
        headers.push_raw(name.as_bytes(), value);
    }
    if cookie_bytes > 0 {
        let mut joined = Vec::with_capacity(cookie_bytes);
        for (_, v) in fields().filter(|(n, _)| *n == "cookie") {
            if !joined.is_empty() {
                joined.extend_from_slice(b"; ");
            }
            joined.extend_from_slice(v);
        }
        headers.push_raw(b"cookie", &joined);
    }
    Ok(head)
}

#[cfg(test)]
pub(crate) mod tests;
