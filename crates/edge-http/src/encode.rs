//! Encoding helpers: status lines, header lines, chunk headers, hop-by-hop handling and
//! ready-made error responses.
//!
//! How it fits: the server serialises every response head into a caller-owned `Vec<u8>`
//! with these functions (no `format!`, no allocation beyond growing that vector), and the
//! proxy strips hop-by-hop fields before forwarding a head in either direction.

use crate::date::http_date_now;
use crate::{HeaderMap, Method};

/// The final chunk and the empty trailer section of a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The fields of a block of `Name: value\r\n` lines (a stored head, or the fields of a
/// head being written): each line's name and its value with the surrounding whitespace
/// trimmed. It stops at the end of the block or at an empty line; a line without a
/// colon is skipped. Bounded: at most `max` lines are looked at, and
/// [`FieldLines::overflowed`] says when more were left (the caller refuses the block).
/// Lines may end in a bare LF (what the line after it starts with is all that counts).
pub struct FieldLines<'a> {
    rest: &'a [u8],
    left: usize,
    overflowed: bool,
}

impl<'a> FieldLines<'a> {
    pub fn new(block: &'a [u8], max: usize) -> FieldLines<'a> {
        FieldLines {
            rest: block,
            left: max,
            overflowed: false,
        }
    }

    /// Whether the block had more than `max` lines (those past it were not yielded).
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }
}

impl<'a> Iterator for FieldLines<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.rest.is_empty() {
                return None;
            }
            let (line, rest) = match memchr::memchr(b'\n', self.rest) {
                Some(i) => (&self.rest[..i], &self.rest[i + 1..]),
                None => (self.rest, &b""[..]),
            };
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                self.rest = b"";
                return None;
            }
            if self.left == 0 {
                self.overflowed = true;
                self.rest = b"";
                return None;
            }
            self.left -= 1;
            self.rest = rest;
            if let Some(colon) = memchr::memchr(b':', line) {
                return Some((&line[..colon], crate::trim_ows(&line[colon + 1..])));
            }
        }
    }
}

/// The canonical reason phrase of a status (RFC 9110 section 15), `""` when unknown.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        507 => "Insufficient Storage",
        508 => "Loop Detected",
        511 => "Network Authentication Required",
        _ => "",
    }
}

/// Appends the decimal digits of `n` (no allocation).
pub fn write_decimal(out: &mut Vec<u8>, mut n: u64) {
    // Two digits per division (a table of "00".."99"), written from the end of a stack
    // buffer: half the divisions of the digit-by-digit loop, no allocation.
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    while n >= 100 {
        let p = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        tmp[i..i + 2].copy_from_slice(&PAIRS[p..p + 2]);
    }
    if n >= 10 {
        let p = n as usize * 2;
        i -= 2;
        tmp[i..i + 2].copy_from_slice(&PAIRS[p..p + 2]);
    } else {
        i -= 1;
        tmp[i] = b'0' + n as u8;
    }
    out.extend_from_slice(&tmp[i..]);
}

/// Appends `HTTP/1.1 {status} {reason}\r\n`. Unknown statuses get an empty reason (the
/// space after the code stays, as RFC 9112 4 requires).
pub fn write_status_line(out: &mut Vec<u8>, status: u16) {
    if status == 200 {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    out.extend_from_slice(b"HTTP/1.1 ");
    write_decimal(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason_phrase(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends `name: value\r\n`. The caller guarantees that `name` is a token and `value`
/// holds no CR or LF (values from our parsers never do).
pub fn write_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.reserve(name.len() + value.len() + 4);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends `{name}: {value}\r\n` with a decimal value, formatted on the stack.
pub fn write_header_u64(out: &mut Vec<u8>, name: &str, value: u64) {
    out.reserve(name.len() + 24);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    write_decimal(out, value);
    out.extend_from_slice(b"\r\n");
}

/// Appends `{len:x}\r\n`, the header of one chunk; the caller writes the data, then
/// `\r\n`. Hex digits come from a stack buffer, not `format!`.
pub fn write_chunk_header(out: &mut Vec<u8>, len: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut tmp = [0u8; 2 * std::mem::size_of::<usize>()];
    let mut i = tmp.len();
    let mut n = len;
    loop {
        i -= 1;
        tmp[i] = HEX[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
    out.extend_from_slice(b"\r\n");
}

/// RFC 9110 7.6.1 hop-by-hop fields: Connection, Keep-Alive, Proxy-Connection, TE,
/// Trailer, Transfer-Encoding, Upgrade, Proxy-Authenticate, Proxy-Authorization.
pub fn is_hop_by_hop(name: &str) -> bool {
    const HOP: [&str; 9] = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "proxy-authenticate",
        "proxy-authorization",
    ];
    HOP.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// Fields a `Connection` option may never remove: a peer naming them would make the proxy
/// drop the target host or the body length of the message it forwards.
const NEVER_CONNECTION_OPTION: [&str; 2] = ["host", "content-length"];

/// Removes hop-by-hop headers AND every header named in the Connection header's tokens
/// (RFC 9110 7.6.1), except Host and Content-Length, which a hostile `Connection: host`
/// must not strip. Allocation-free unless Connection names extra fields.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Options that only name fields which are hop-by-hop anyway (or no field) need no list.
    let named: Vec<String> = headers
        .tokens("connection")
        .filter(|t| !t.eq_ignore_ascii_case(b"close") && !t.eq_ignore_ascii_case(b"keep-alive"))
        .filter_map(|t| std::str::from_utf8(t).ok())
        .filter(|t| {
            !NEVER_CONNECTION_OPTION
                .iter()
                .any(|n| n.eq_ignore_ascii_case(t))
        })
        .map(str::to_owned)
        .collect();
    headers.retain(|name, _| {
        !is_hop_by_hop(name) && !named.iter().any(|n| n.eq_ignore_ascii_case(name))
    });
}

/// Appends `{method} {target} HTTP/1.1\r\n`, the request line sent upstream. `target`
/// should be an origin-form target such as [`crate::RequestHead::path_and_query`].
pub fn write_request_line(out: &mut Vec<u8>, method: &Method, target: &str) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// A complete error response: status line, Date, `Server: edgecache`,
/// `Content-Type: text/html`, Content-Length, `Connection: close` and a small HTML body.
pub fn error_response(status: u16) -> Vec<u8> {
    let reason = reason_phrase(status);
    let mut title = Vec::with_capacity(40);
    write_decimal(&mut title, u64::from(status));
    if !reason.is_empty() {
        title.push(b' ');
        title.extend_from_slice(reason.as_bytes());
    }
    let mut body = Vec::with_capacity(160);
    body.extend_from_slice(b"<html>\r\n<head><title>");
    body.extend_from_slice(&title);
    body.extend_from_slice(b"</title></head>\r\n<body>\r\n<center><h1>");
    body.extend_from_slice(&title);
    body.extend_from_slice(
        b"</h1></center>\r\n<hr><center>edgecache</center>\r\n</body>\r\n</html>\r\n",
    );

    let mut out = Vec::with_capacity(200 + body.len());
    write_status_line(&mut out, status);
    write_header(&mut out, "Date", &http_date_now());
    write_header(&mut out, "Server", b"edgecache");
    write_header(&mut out, "Content-Type", b"text/html");
    out.extend_from_slice(b"Content-Length: ");
    write_decimal(&mut out, body.len() as u64);
    out.extend_from_slice(b"\r\n");
    write_header(&mut out, "Connection", b"close");
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_request, parse_response, BodyKind, Limits};

    #[test]
    fn field_lines_walk_a_block_within_their_bound() {
        let block = b"A: 1\r\nno colon\r\nB:  two \r\nC:\nD: x\r\n\r\nE: after";
        let f: Vec<_> = FieldLines::new(block, 16).collect();
        let want: Vec<(&[u8], &[u8])> =
            vec![(b"A", b"1"), (b"B", b"two"), (b"C", b""), (b"D", b"x")];
        assert_eq!(f, want);
        let mut it = FieldLines::new(block, 2);
        assert_eq!(
            it.by_ref().count(),
            1,
            "the colon-less line counts towards the bound"
        );
        assert!(it.overflowed());
        let mut it = FieldLines::new(b"A: 1\r\n", 1);
        assert_eq!(it.by_ref().count(), 1);
        assert!(!it.overflowed());
        assert_eq!(FieldLines::new(b"", 4).count(), 0);
    }

    #[test]
    fn status_lines() {
        let mut out = Vec::new();
        write_status_line(&mut out, 200);
        write_status_line(&mut out, 599);
        assert_eq!(out, b"HTTP/1.1 200 OK\r\nHTTP/1.1 599 \r\n");
    }

    #[test]
    fn header_lines() {
        let mut out = Vec::new();
        write_header(&mut out, "X-Cache-Status", b"HIT");
        assert_eq!(out, b"X-Cache-Status: HIT\r\n");
    }

    #[test]
    fn chunk_headers_match_format() {
        for len in [0usize, 1, 9, 10, 15, 16, 255, 4096, 0xdead_beef, usize::MAX] {
            let mut out = Vec::new();
            write_chunk_header(&mut out, len);
            assert_eq!(out, format!("{len:x}\r\n").into_bytes());
        }
        assert_eq!(LAST_CHUNK, b"0\r\n\r\n");
    }

    #[test]
    fn decimal() {
        let edges = [
            0u64,
            7,
            9,
            10,
            11,
            99,
            100,
            101,
            999,
            1000,
            12345,
            u64::MAX - 1,
            u64::MAX,
        ];
        let powers = (0..20).flat_map(|e| {
            let p = 10u64.pow(e);
            [p - 1, p, p + 1]
        });
        for n in edges
            .into_iter()
            .chain(powers)
            .chain((0..5000).map(|i| i * 7919))
        {
            let mut out = b"x".to_vec();
            write_decimal(&mut out, n);
            assert_eq!(out[1..], *n.to_string().as_bytes(), "{n}");
        }
        let mut out = Vec::new();
        write_header_u64(&mut out, "Content-Length", 1024);
        assert_eq!(out, b"Content-Length: 1024\r\n");
    }

    #[test]
    fn reasons() {
        assert_eq!(reason_phrase(404), "Not Found");
        assert_eq!(reason_phrase(431), "Request Header Fields Too Large");
        assert_eq!(reason_phrase(999), "");
    }

    #[test]
    fn hop_by_hop_names() {
        for n in [
            "Connection",
            "keep-alive",
            "TE",
            "Transfer-Encoding",
            "Proxy-Authorization",
        ] {
            assert!(is_hop_by_hop(n), "{n}");
        }
        for n in ["Host", "Content-Length", "Cache-Control", "Trailers"] {
            assert!(!is_hop_by_hop(n), "{n}");
        }
    }

    #[test]
    fn strip_removes_hop_by_hop_and_connection_options() {
        let mut h = HeaderMap::new();
        h.append("Host", "a");
        h.append("Connection", "keep-alive, X-Secret, host, Content-Length");
        h.append("X-Secret", "1");
        h.append("x-secret", "2");
        h.append("Keep-Alive", "timeout=5");
        h.append("Transfer-Encoding", "chunked");
        h.append("Content-Length", "3");
        h.append("Upgrade", "websocket");
        h.append("Cache-Control", "max-age=1");
        strip_hop_by_hop(&mut h);
        let names: Vec<&str> = h.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["Host", "Content-Length", "Cache-Control"]);
    }

    #[test]
    fn request_lines_parse_back() {
        let mut out = Vec::new();
        write_request_line(&mut out, &Method::Other("BREW".into()), "/pot?x=1");
        write_header(&mut out, "Host", b"h");
        out.extend_from_slice(b"\r\n");
        assert_eq!(out, b"BREW /pot?x=1 HTTP/1.1\r\nHost: h\r\n\r\n");
        let (head, _) = parse_request(&out, &Limits::default()).unwrap().unwrap();
        assert_eq!(head.method.as_str(), "BREW");
        assert_eq!(head.path_and_query(), "/pot?x=1");
    }

    #[test]
    fn strip_without_connection_options() {
        let mut h = HeaderMap::new();
        h.append("Connection", "close");
        h.append("TE", "trailers");
        h.append("Keep-Alive", "timeout=5");
        h.append("Accept", "*/*");
        strip_hop_by_hop(&mut h);
        assert_eq!(h.iter().collect::<Vec<_>>(), vec![("Accept", &b"*/*"[..])]);
    }

    #[test]
    fn error_responses_parse_back() {
        for status in [400u16, 408, 413, 414, 431, 501, 502, 504, 505] {
            let bytes = error_response(status);
            let (head, n) = parse_response(&bytes, &Limits::default(), &Method::Get)
                .unwrap()
                .unwrap();
            assert_eq!(head.status, status);
            assert_eq!(head.reason, reason_phrase(status));
            assert!(!head.keep_alive);
            assert_eq!(head.headers.get_str("server"), Some("edgecache"));
            assert_eq!(head.headers.get_str("content-type"), Some("text/html"));
            assert_eq!(head.headers.get("date").map(<[u8]>::len), Some(29));
            let BodyKind::Length(len) = head.body else {
                panic!("{:?}", head.body)
            };
            assert_eq!(len as usize, bytes.len() - n);
            let body = std::str::from_utf8(&bytes[n..]).unwrap();
            assert!(
                body.contains(&format!("{status} {}", reason_phrase(status))),
                "{body}"
            );
        }
    }
}
