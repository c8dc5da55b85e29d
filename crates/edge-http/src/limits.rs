//! Size limits applied while parsing, each a named default.
//!
//! How it fits: the server builds one [`Limits`] from its config at startup
//! (`client_max_body_size` becomes `max_body`) and passes it to every parse call. Each
//! limit is checked even while the head is still incomplete, so a peer can never make
//! the server buffer more than the limit while waiting for a line end.

/// Longest request line, in bytes (without the CRLF). RFC 9112 section 3 says a server
/// that receives a request-target longer than it wishes to parse MUST respond 414 (URI
/// Too Long), and recommends supporting request-lines of at least 8000 octets.
pub const DEFAULT_MAX_REQUEST_LINE: usize = 8192;

/// Largest whole head (request line, fields, final CRLF), in bytes. RFC 9110 section 5.4
/// lets a server reject larger field sections, and RFC 6585 section 5 defines 431
/// (Request Header Fields Too Large) for it. 16 KiB is twice nginx's default
/// `large_client_header_buffers` line size.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 16 * 1024;

/// Most header fields in one head; more is 431 (RFC 6585 section 5, RFC 9110 5.4). The
/// same bound as hyper's default.
pub const DEFAULT_MAX_HEADERS: usize = 100;

/// Largest request body (nginx's `client_max_body_size` default is 1 MiB). A larger
/// Content-Length is answered 413 (Content Too Large, RFC 9110 section 15.5.14).
pub const DEFAULT_MAX_BODY: u64 = 1024 * 1024;

/// The limits one parse call enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest request line (without CRLF); longer is 414.
    pub max_request_line: usize,
    /// Largest whole head; larger is 431 (request) or `BadUpstream` (response).
    pub max_header_bytes: usize,
    /// Most header fields; more is 431 (request) or `BadUpstream` (response).
    pub max_headers: usize,
    /// Largest request body; `None` is unlimited. A larger Content-Length is 413.
    /// Not applied to responses by [`crate::parse_response`] (caching large objects is
    /// the point); pass a bound to [`crate::BodyDecoder::new`] to limit them.
    pub max_body: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: DEFAULT_MAX_REQUEST_LINE,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_headers: DEFAULT_MAX_HEADERS,
            max_body: Some(DEFAULT_MAX_BODY),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_values() {
        let l = Limits::default();
        assert_eq!(l.max_request_line, 8192);
        assert_eq!(l.max_header_bytes, 16384);
        assert_eq!(l.max_headers, 100);
        assert_eq!(l.max_body, Some(1 << 20));
    }
}
