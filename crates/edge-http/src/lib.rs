//! edge-http: the sans-I/O HTTP/1.1 codec of edgecache.
//!
//! How it fits: the server's connection loop reads bytes from a socket into a buffer and
//! hands the buffer to [`parse_request`]; an HTTP/2 stream's request, which arrives as
//! fields, becomes the same [`RequestHead`] through [`request_from_fields`] with the
//! same checks; the proxy hands upstream bytes to [`parse_response`]. Stored and
//! written field blocks (`Name: value` lines) are walked with [`FieldLines`]. Bodies go through one [`BodyDecoder`] per message. Responses are
//! written with the encoding helpers ([`write_status_line`], [`write_header`],
//! [`write_chunk_header`], [`error_response`]). Nothing in this crate touches a socket,
//! a file or a clock other than [`http_date_now`], so every rule is tested on byte
//! slices.
//!
//! Range and conditional requests (RFC 9110 13 and 14) are decided here too, for every
//! handler that serves a representation: [`evaluate_preconditions`] (304 / 412),
//! [`evaluate_range`] and [`parse_range`] (200 / 206 / 416), and [`MultipartLayout`] for
//! several ranges.
//!
//! Request-line and header *syntax* is parsed by `httparse`. Framing (Content-Length,
//! chunked, close-delimited), limits and request-smuggling defences are ours; they
//! follow RFC 9112 (HTTP/1.1 message syntax) and RFC 9110 (HTTP semantics). See the
//! crate README for the table of what is rejected with which status.

mod body;
mod conditional;
mod date;
mod encode;
mod error;
pub mod forwarded;
mod framing;
pub mod h2;
mod head;
mod headers;
mod limits;
mod method;
pub mod normalize;
pub mod proxy_protocol;
mod range;
mod request;
mod response;
mod target;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod testutil;

pub use body::{BodyDecoder, Decoded, MAX_CHUNK_LINE, MAX_TRAILER_BYTES};
pub use conditional::{
    evaluate_preconditions, evaluate_range, if_range_matches, Precondition, Recipient,
    RequestFields, Validators,
};
pub use date::{fmt_http_date, http_date_now, parse_http_date};
pub use encode::{
    error_response, is_hop_by_hop, reason_phrase, strip_hop_by_hop, write_chunk_header,
    write_decimal, write_header, write_header_u64, write_request_line, write_status_line,
    FieldLines, LAST_CHUNK,
};
pub use error::{ErrorKind, ParseError};
pub use headers::{trim_ows, HeaderMap};
pub use limits::{
    Limits, DEFAULT_MAX_BODY, DEFAULT_MAX_HEADERS, DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_REQUEST_LINE,
};
pub use method::{Method, Version};
pub use range::{
    parse_content_range, parse_range, Boundary, ByteRange, ContentRange, MultipartLayout,
    MultipartPart, RangeIgnored, RangeOutcome, RangeSet, BOUNDARY_LEN, MAX_RANGES,
};
pub use request::{parse_request, parse_request_reusing, request_from_fields, RequestHead};
pub use response::{parse_response, ResponseHead};

/// How a message body is delimited (RFC 9112 section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body at all (no framing headers on a request; HEAD, 1xx, 204 and 304 responses).
    Empty,
    /// Exactly this many bytes follow the head (`Content-Length`). `Length(0)` is kept
    /// distinct from `Empty` so that a proxy can tell that the header was present.
    Length(u64),
    /// `Transfer-Encoding: chunked`; decode with [`BodyDecoder`].
    Chunked,
    /// The body runs until the peer closes (responses only, RFC 9112 6.3 rule 8).
    CloseDelimited,
}
