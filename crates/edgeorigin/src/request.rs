//! Parsing one HTTP/1.x request head from a byte buffer (sans-I/O).
//!
//! How it fits: the connection loop keeps a read buffer and calls [`parse`] until it says
//! `Partial`; each `Complete` request is answered in order (that is pipelining), and each
//! `Invalid` becomes an error response followed by a close. Parsing is `httparse`; the
//! limits (head size, header count, request body size) are ours and named below. No
//! input panics: everything a client sends is treated as hostile.

/// Largest request head (request line and headers) we buffer, as nginx's
/// `large_client_header_buffers` does; beyond it the client gets 414 or 431.
pub const MAX_HEAD: usize = 16 * 1024;
/// Most header lines in one request.
pub const MAX_HEADERS: usize = 64;
/// Largest request body we read and discard (an origin of GETs has no use for bodies,
/// but a body must be consumed to keep the connection framed).
pub const MAX_DISCARD_BODY: u64 = 1 << 20;

/// Request methods the origin distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Other,
}

/// A parsed request head, borrowing the read buffer.
#[derive(Debug)]
pub struct Request<'h, 'b> {
    pub method: Method,
    /// The path, without query (absolute-form targets are reduced to their path).
    pub path: &'b str,
    /// The query string without `?` (empty when none).
    pub query: &'b str,
    /// HTTP/1.`minor`.
    pub minor: u8,
    pub headers: &'h [httparse::Header<'b>],
    /// The client allows the connection to stay open after this response.
    pub keep_alive: bool,
    /// Bytes of request body that follow the head (to be discarded).
    pub body_len: u64,
    /// Length of the head in the buffer.
    pub head_len: usize,
}

/// Why a request cannot be served; each maps to a status and a close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// Garbage: 400.
    BadRequest(&'static str),
    /// Request line longer than [`MAX_HEAD`]: 414.
    UriTooLong,
    /// Head longer than [`MAX_HEAD`] or too many headers: 431.
    HeadTooLarge,
    /// A request body larger than [`MAX_DISCARD_BODY`]: 413.
    BodyTooLarge,
    /// `Transfer-Encoding` in a request: 501.
    TransferEncoding,
    /// Not HTTP/1.0 or 1.1: 505.
    Version,
}

impl Invalid {
    pub fn status(self) -> u16 {
        match self {
            Invalid::BadRequest(_) => 400,
            Invalid::UriTooLong => 414,
            Invalid::HeadTooLarge => 431,
            Invalid::BodyTooLarge => 413,
            Invalid::TransferEncoding => 501,
            Invalid::Version => 505,
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Invalid::BadRequest(why) => why,
            Invalid::UriTooLong => "request line too long",
            Invalid::HeadTooLarge => "request head too large",
            Invalid::BodyTooLarge => "request body too large",
            Invalid::TransferEncoding => "request Transfer-Encoding not supported",
            Invalid::Version => "HTTP version not supported",
        }
    }
}

/// Result of looking at the read buffer.
#[derive(Debug)]
pub enum Parsed<'h, 'b> {
    Complete(Request<'h, 'b>),
    /// Need more bytes (the buffer holds less than [`MAX_HEAD`]).
    Partial,
    Invalid(Invalid),
}

/// Parses the request head at the start of `buf`, using `headers` as scratch.
pub fn parse<'h, 'b>(buf: &'b [u8], headers: &'h mut [httparse::Header<'b>]) -> Parsed<'h, 'b> {
    let mut req = httparse::Request::new(headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() < MAX_HEAD {
                return Parsed::Partial;
            }
            let line_done = memchr_crlf(&buf[..MAX_HEAD]);
            return Parsed::Invalid(if line_done {
                Invalid::HeadTooLarge
            } else {
                Invalid::UriTooLong
            });
        }
        Err(httparse::Error::TooManyHeaders) => return Parsed::Invalid(Invalid::HeadTooLarge),
        Err(httparse::Error::Version) => return Parsed::Invalid(Invalid::Version),
        Err(_) => return Parsed::Invalid(Invalid::BadRequest("malformed request")),
    };
    if head_len > MAX_HEAD {
        return Parsed::Invalid(Invalid::HeadTooLarge);
    }
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Parsed::Invalid(Invalid::BadRequest("malformed request"));
    };
    let method = match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        _ => Method::Other,
    };
    let headers: &'h [httparse::Header<'b>] = req.headers;

    let mut body_len: Option<u64> = None;
    let mut close = false;
    let mut keep = false;
    for h in headers {
        if h.name.eq_ignore_ascii_case("content-length") {
            let Some(n) = parse_decimal(h.value) else {
                return Parsed::Invalid(Invalid::BadRequest("bad Content-Length"));
            };
            if body_len.is_some_and(|prev| prev != n) {
                return Parsed::Invalid(Invalid::BadRequest("conflicting Content-Length"));
            }
            body_len = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Parsed::Invalid(Invalid::TransferEncoding);
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let t = token.trim_ascii();
                close |= t.eq_ignore_ascii_case(b"close");
                keep |= t.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    let body_len = body_len.unwrap_or(0);
    if body_len > MAX_DISCARD_BODY {
        return Parsed::Invalid(Invalid::BodyTooLarge);
    }
    let keep_alive = !close && (minor == 1 || keep);

    let target = strip_absolute_form(target);
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Parsed::Complete(Request {
        method,
        path,
        query,
        minor,
        headers,
        keep_alive,
        body_len,
        head_len,
    })
}

/// `http://host:port/p?q` -> `/p?q`; origin-form targets are returned as they are.
fn strip_absolute_form(target: &str) -> &str {
    for scheme in ["http://", "https://"] {
        if target.len() > scheme.len() && target[..scheme.len()].eq_ignore_ascii_case(scheme) {
            let rest = &target[scheme.len()..];
            return rest.find('/').map_or("/", |i| &rest[i..]);
        }
    }
    target
}

fn memchr_crlf(b: &[u8]) -> bool {
    b.windows(2).any(|w| w == b"\r\n")
}

/// A decimal header value (`Content-Length`), digits only, no overflow.
fn parse_decimal(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with<R>(buf: &[u8], f: impl FnOnce(Parsed) -> R) -> R {
        let mut hs = [httparse::EMPTY_HEADER; MAX_HEADERS];
        f(parse(buf, &mut hs))
    }

    #[test]
    fn parses_a_simple_get() {
        with(
            b"GET /obj/4k/1?delay_ms=5 HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\n\r\nGET",
            |p| {
                let Parsed::Complete(r) = p else {
                    panic!("{p:?}")
                };
                assert_eq!(r.method, Method::Get);
                assert_eq!(r.path, "/obj/4k/1");
                assert_eq!(r.query, "delay_ms=5");
                let range = edge_http::RequestFields::field(r.headers, "RANGE", 0);
                assert_eq!(range, Some(&b"bytes=0-1"[..]));
                assert!(r.keep_alive);
                assert_eq!(r.head_len, 64);
            },
        );
    }

    #[test]
    fn every_split_point_is_partial_until_complete() {
        let req = b"HEAD http://example.com:81/txt/1m/2 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
        for cut in 0..req.len() {
            with(&req[..cut], |p| {
                assert!(matches!(p, Parsed::Partial), "cut {cut}: {p:?}")
            });
        }
        with(req, |p| {
            let Parsed::Complete(r) = p else {
                panic!("{p:?}")
            };
            assert_eq!(r.method, Method::Head);
            assert_eq!(r.path, "/txt/1m/2");
            assert_eq!(r.minor, 0);
            assert!(r.keep_alive);
        });
    }

    #[test]
    fn keep_alive_rules() {
        for (req, keep) in [
            (&b"GET / HTTP/1.1\r\n\r\n"[..], true),
            (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false),
            (b"GET / HTTP/1.1\r\nConnection: foo, Close\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
        ] {
            with(req, |p| {
                let Parsed::Complete(r) = p else {
                    panic!("{p:?}")
                };
                assert_eq!(r.keep_alive, keep, "{:?}", String::from_utf8_lossy(req));
            });
        }
    }

    #[test]
    fn invalid_requests_map_to_statuses() {
        let long_line = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_HEAD));
        let long_head = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(MAX_HEAD));
        let many: String = (0..=MAX_HEADERS).map(|i| format!("H{i}: v\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        for (req, status) in [
            (b"\x00\x01garbage\r\n\r\n".to_vec(), 400),
            (b"GET / HTTP/1.1\r\nBad Header\r\n\r\n".to_vec(), 400),
            (b"GET / HTTP/2.0\r\n\r\n".to_vec(), 505),
            (
                b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n".to_vec(),
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n".to_vec(),
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n".to_vec(),
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n".to_vec(),
                413,
            ),
            (
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
                501,
            ),
            (long_line.into_bytes(), 414),
            (long_head.into_bytes(), 431),
            (many.into_bytes(), 431),
        ] {
            with(&req, |p| match p {
                Parsed::Invalid(e) => assert_eq!(e.status(), status, "{:?}", e),
                other => panic!(
                    "{other:?} for {:?}",
                    String::from_utf8_lossy(&req[..40.min(req.len())])
                ),
            });
        }
    }

    #[test]
    fn body_length_is_reported() {
        with(
            b"POST /stats/reset HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
            |p| {
                let Parsed::Complete(r) = p else {
                    panic!("{p:?}")
                };
                assert_eq!((r.method, r.body_len), (Method::Post, 5));
            },
        );
    }
}
