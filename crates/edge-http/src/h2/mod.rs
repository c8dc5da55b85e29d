//! HTTP/2's wire format for a server (RFC 9113), sans I/O: frame heads, HPACK
//! ([`hpack`]) and the request a decoded header list makes ([`request_head`]). The
//! connection's state machine is `edge_core::http::h2`.

pub mod hpack;
mod huffman;
mod huffman_table;

pub use hpack::is_token_byte;
pub use huffman::{decode as huffman_decode, encode as huffman_encode};

use crate::{request_from_fields, Limits, RequestHead};

pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types (RFC 9113 6).
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

// Flags.
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

// Error codes (RFC 9113 7).
pub const NO_ERROR: u32 = 0x0;
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const INTERNAL_ERROR: u32 = 0x2;
pub const FLOW_CONTROL_ERROR: u32 = 0x3;
pub const STREAM_CLOSED: u32 = 0x5;
pub const FRAME_SIZE_ERROR: u32 = 0x6;
pub const REFUSED_STREAM: u32 = 0x7;
pub const CANCEL: u32 = 0x8;
pub const COMPRESSION_ERROR: u32 = 0x9;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

// SETTINGS parameters.
pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
pub const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// The default (and smallest allowed) SETTINGS_MAX_FRAME_SIZE.
pub const DEFAULT_MAX_FRAME: usize = 16_384;
/// The largest flow-control window (RFC 9113 6.9.1).
pub const MAX_WINDOW: i64 = (1 << 31) - 1;
/// The window every stream and the connection start with.
pub const DEFAULT_WINDOW: i64 = 65_535;

/// A frame's 9-byte head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHead {
    pub len: usize,
    pub ty: u8,
    pub flags: u8,
    pub stream: u32,
}

impl FrameHead {
    pub fn parse(b: &[u8; 9]) -> FrameHead {
        FrameHead {
            len: (b[0] as usize) << 16 | (b[1] as usize) << 8 | b[2] as usize,
            ty: b[3],
            flags: b[4],
            // The reserved bit is ignored (RFC 9113 4.1).
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }
}

/// A frame head's nine bytes.
pub fn frame_head(len: usize, ty: u8, flags: u8, stream: u32) -> [u8; 9] {
    debug_assert!(len < 1 << 24);
    let s = stream.to_be_bytes();
    [
        (len >> 16) as u8,
        (len >> 8) as u8,
        len as u8,
        ty,
        flags,
        s[0],
        s[1],
        s[2],
        s[3],
    ]
}

/// Appends a frame head.
pub fn put_head(out: &mut Vec<u8>, len: usize, ty: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&frame_head(len, ty, flags, stream));
}

/// Appends a whole frame.
pub fn put_frame(out: &mut Vec<u8>, ty: u8, flags: u8, stream: u32, payload: &[u8]) {
    put_head(out, payload.len(), ty, flags, stream);
    out.extend_from_slice(payload);
}

pub fn put_rst(out: &mut Vec<u8>, stream: u32, code: u32) {
    put_frame(out, RST_STREAM, 0, stream, &code.to_be_bytes());
}

pub fn put_window_update(out: &mut Vec<u8>, stream: u32, n: u32) {
    put_frame(out, WINDOW_UPDATE, 0, stream, &n.to_be_bytes());
}

pub fn put_goaway(out: &mut Vec<u8>, last: u32, code: u32, debug: &[u8]) {
    put_head(out, 8 + debug.len(), GOAWAY, 0, 0);
    out.extend_from_slice(&last.to_be_bytes());
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(debug);
}

/// Why a request's header list makes no request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestError {
    /// Malformed (RFC 9113 8.1.1): the stream is reset with PROTOCOL_ERROR.
    Malformed(&'static str),
    /// Well-formed HTTP/2, but refused as our HTTP/1.1 parser would refuse it: answered
    /// with this status.
    Status(u16),
}

/// The request of a decoded header list (RFC 9113 8.3): its pseudo-header fields give
/// the method, the target and the authority; its fields are checked as HTTP/2 requires
/// (lowercase tokens, no connection-specific field, values without NUL, CR, LF or
/// surrounding whitespace) and then as our HTTP/1.1 parser checks a head
/// ([`request_from_fields`]). Also returns the request's size as HTTP/1.1 lines (for
/// `$request_length`).
pub fn request_head(
    list: &hpack::HeaderList,
    has_body: bool,
    limits: &Limits,
    spare: Option<Box<RequestHead>>,
) -> Result<(Box<RequestHead>, usize), RequestError> {
    use RequestError::Malformed;
    let (mut method, mut path, mut authority, mut scheme) = (None, None, None, None);
    let mut regular = 0usize;
    for (i, (name, value)) in list.iter().enumerate() {
        if name.first() == Some(&b':') {
            if i != regular {
                return Err(Malformed("pseudo-header after a field"));
            }
            regular += 1;
            let slot = match name {
                b":method" => &mut method,
                b":path" => &mut path,
                b":authority" => &mut authority,
                b":scheme" => &mut scheme,
                _ => return Err(Malformed("unknown pseudo-header")),
            };
            if slot.is_some() {
                return Err(Malformed("repeated pseudo-header"));
            }
            *slot =
                Some(std::str::from_utf8(value).map_err(|_| Malformed("pseudo-header not text"))?);
            continue;
        }
        check_field(name, value)?;
    }
    let method = method.ok_or(Malformed("no :method"))?;
    if method.is_empty() || !method.bytes().all(is_token_byte) {
        return Err(Malformed("bad :method"));
    }
    if method == "CONNECT" {
        // Not a forward proxy.
        return Err(RequestError::Status(405));
    }
    let path = path.ok_or(Malformed("no :path"))?;
    if scheme.is_none() {
        return Err(Malformed("no :scheme"));
    }
    // `:path` is origin-form, or `*` for OPTIONS (RFC 9113 8.3.1).
    if !(path.starts_with('/') || (path == "*" && method == "OPTIONS")) {
        return Err(if path.is_empty() {
            Malformed("empty :path")
        } else {
            RequestError::Status(400)
        });
    }
    if let Some(a) = authority {
        if a.is_empty() || !a.bytes().all(|b| b > 0x20 && b < 0x7f) {
            return Err(RequestError::Status(400));
        }
    }
    let fields = || {
        list.iter().skip(regular).map(|(n, v)| {
            // Checked above: tokens are ASCII.
            (std::str::from_utf8(n).unwrap_or(""), v)
        })
    };
    let head = request_from_fields(method, path, authority, fields, has_body, limits, spare)
        .map_err(|e| RequestError::Status(e.status()))?;
    let len = method.len()
        + path.len()
        + 13
        + authority.map_or(0, |a| a.len() + 8)
        + fields().map(|(n, v)| n.len() + v.len() + 4).sum::<usize>();
    Ok((head, len))
}

/// A regular request field as RFC 9113 8.2 allows it.
fn check_field(name: &[u8], value: &[u8]) -> Result<(), RequestError> {
    use RequestError::Malformed;
    if name.is_empty()
        || !name
            .iter()
            .all(|&b| is_token_byte(b) && !b.is_ascii_uppercase())
    {
        return Err(Malformed("field name not a lowercase token"));
    }
    if matches!(
        name,
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade"
    ) {
        return Err(Malformed("connection-specific field"));
    }
    if name == b"te" && value != b"trailers" {
        return Err(Malformed("te other than trailers"));
    }
    if !value
        .iter()
        .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
    {
        return Err(Malformed("field value with a control character"));
    }
    if matches!(value.first(), Some(b' ' | b'\t')) || matches!(value.last(), Some(b' ' | b'\t')) {
        return Err(Malformed("field value with surrounding whitespace"));
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::hpack::{put_int, put_str, Decoder, HeaderList};
    use super::*;
    use crate::{BodyKind, Method, Version};

    /// Bytes from hex digits (spaces ignored), as RFC 7541's examples print them.
    pub fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn list(fields: &[(&str, &str)]) -> HeaderList {
        let mut b = Vec::new();
        for (n, v) in fields {
            b.push(0x00);
            put_str(&mut b, n.as_bytes());
            put_str(&mut b, v.as_bytes());
        }
        let mut l = HeaderList::default();
        Decoder::new(4096).decode(&b, &mut l, 1 << 20).unwrap();
        l
    }

    fn head(fields: &[(&str, &str)], has_body: bool) -> Result<RequestHead, RequestError> {
        request_head(&list(fields), has_body, &Limits::default(), None).map(|(h, _)| *h)
    }

    const GET: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a.example"),
        (":path", "/x?y=1"),
    ];

    #[test]
    fn request_heads_follow_rfc_9113() {
        let mut f = GET.to_vec();
        f.extend([
            ("host", "other.example"),
            ("cookie", "a=1"),
            ("cookie", "b=2"),
            ("te", "trailers"),
            ("accept", "*/*"),
        ]);
        let h = head(&f, false).unwrap();
        assert_eq!(h.target, "/x?y=1");
        assert_eq!(h.host(), Some("a.example"));
        assert_eq!(h.version, Version::Http2);
        assert_eq!(h.headers.get("cookie"), Some(&b"a=1; b=2"[..]));
        assert!(!h.headers.contains("te"));
        let post = [
            (":method", "POST"),
            (":scheme", "https"),
            (":authority", "a.example"),
            (":path", "/up"),
        ];
        assert_eq!(head(&post, true).unwrap().body, BodyKind::Chunked);
        let mut f = post.to_vec();
        f.push(("content-length", "3"));
        assert_eq!(head(&f, true).unwrap().body, BodyKind::Length(3));
        // No :authority: the host field is the Host.
        let f = [
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            ("host", "h.example"),
        ];
        assert_eq!(head(&f, false).unwrap().host(), Some("h.example"));
        let f = [
            (":method", "OPTIONS"),
            (":scheme", "http"),
            (":path", "*"),
            ("host", "h"),
        ];
        let h = head(&f, false).unwrap();
        assert_eq!((h.method, h.target.as_str()), (Method::Options, "*"));
    }

    #[test]
    fn malformed_requests_are_refused() {
        let m = |f: &[(&str, &str)]| match head(f, false) {
            Err(RequestError::Malformed(_)) => {}
            other => panic!("{f:?}: {:?}", other.map(|h| h.target)),
        };
        let with = |extra: (&'static str, &'static str)| {
            let mut f = GET.to_vec();
            f.push(extra);
            f
        };
        m(&with(("Accept", "x")));
        m(&with(("connection", "close")));
        m(&with(("transfer-encoding", "chunked")));
        m(&with(("te", "gzip")));
        m(&with(("x", "a\r\nb")));
        m(&with(("x", " padded")));
        m(&with(("x", "nul\0")));
        m(&with((":path", "/again")));
        m(&with((":status", "200")));
        m(&[
            ("accept", "x"),
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
        ]);
        m(&[(":method", "GET"), (":scheme", "https")]);
        m(&[(":method", "GET"), (":path", "/")]);
        m(&[(":scheme", "https"), (":path", "/")]);
        m(&[(":method", "GET"), (":scheme", "https"), (":path", "")]);
        let status = |f: &[(&str, &str)]| match head(f, false) {
            Err(RequestError::Status(s)) => s,
            other => panic!("{f:?}: {:?}", other.map(|h| h.target)),
        };
        assert_eq!(
            status(&[(":method", "CONNECT"), (":authority", "a:443")]),
            405
        );
        assert_eq!(
            status(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "x"),
                ("host", "a")
            ]),
            400
        );
        assert_eq!(
            status(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "*"),
                ("host", "a")
            ]),
            400
        );
        // No Host at all: our parser's 400.
        assert_eq!(
            status(&[(":method", "GET"), (":scheme", "https"), (":path", "/")]),
            400
        );
    }

    #[test]
    fn frame_heads_round_trip() {
        let mut out = Vec::new();
        put_head(&mut out, 0x12345, HEADERS, END_HEADERS, 7);
        let h = FrameHead::parse(out[..9].try_into().unwrap());
        assert_eq!(
            h,
            FrameHead {
                len: 0x12345,
                ty: HEADERS,
                flags: END_HEADERS,
                stream: 7
            }
        );
        let mut b = Vec::new();
        put_int(&mut b, 5, 0x20, 0);
        assert_eq!(b, [0x20]);
    }
}
