//! The one error type of the codec.
//!
//! How it fits: every parser returns [`ParseError`]; its [`ErrorKind`] maps to exactly one
//! status code ([`ParseError::status`]), which the server answers with
//! [`crate::error_response`] and `Connection: close`. The `reason` is a fixed string for
//! logs and tests; it never contains peer bytes, so it is safe to log.

use std::fmt;

/// What class of failure happened; each maps to one response status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: malformed syntax, smuggling attempts, bad Content-Length, missing or duplicate
    /// Host in HTTP/1.1, obs-fold, malformed chunked framing.
    BadRequest,
    /// 414: the request line is longer than `Limits::max_request_line`.
    UriTooLong,
    /// 431: the head is bigger than `Limits::max_header_bytes`, has more than
    /// `Limits::max_headers` fields, or chunked trailers are too large.
    HeadersTooLarge,
    /// 413: Content-Length or the decoded chunked body exceeds `max_body`.
    PayloadTooLarge,
    /// 501: an unknown transfer-coding, or CONNECT.
    NotImplemented,
    /// 505: any protocol version other than HTTP/1.0 and HTTP/1.1.
    VersionNotSupported,
    /// A malformed response from an upstream; the proxy answers 502.
    BadUpstream,
}

impl ErrorKind {
    /// The status code a server answers with for this kind of error.
    pub const fn status(self) -> u16 {
        match self {
            ErrorKind::BadRequest => 400,
            ErrorKind::UriTooLong => 414,
            ErrorKind::HeadersTooLarge => 431,
            ErrorKind::PayloadTooLarge => 413,
            ErrorKind::NotImplemented => 501,
            ErrorKind::VersionNotSupported => 505,
            ErrorKind::BadUpstream => 502,
        }
    }
}

/// A parse or framing error: what kind (decides the status) and a fixed reason for logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The class of error; decides the status code.
    pub kind: ErrorKind,
    /// A fixed, human-readable reason (never contains peer bytes).
    pub reason: &'static str,
}

impl ParseError {
    /// Builds an error; `const` so that errors can be named constants.
    pub const fn new(kind: ErrorKind, reason: &'static str) -> Self {
        ParseError { kind, reason }
    }

    /// The status code to answer with (502 for [`ErrorKind::BadUpstream`]).
    pub fn status(&self) -> u16 {
        self.kind.status()
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.reason, self.status())
    }
}

impl std::error::Error for ParseError {}

/// Shorthand used by the parsers.
pub(crate) const fn bad(reason: &'static str) -> ParseError {
    ParseError::new(ErrorKind::BadRequest, reason)
}

/// Shorthand used by the response parser.
pub(crate) const fn upstream(reason: &'static str) -> ParseError {
    ParseError::new(ErrorKind::BadUpstream, reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_status() {
        let table = [
            (ErrorKind::BadRequest, 400),
            (ErrorKind::UriTooLong, 414),
            (ErrorKind::HeadersTooLarge, 431),
            (ErrorKind::PayloadTooLarge, 413),
            (ErrorKind::NotImplemented, 501),
            (ErrorKind::VersionNotSupported, 505),
            (ErrorKind::BadUpstream, 502),
        ];
        for (kind, status) in table {
            assert_eq!(ParseError::new(kind, "x").status(), status);
        }
    }

    #[test]
    fn display_names_reason_and_status() {
        let e = bad("no host");
        assert_eq!(e.to_string(), "no host (400)");
        let boxed: Box<dyn std::error::Error> = Box::new(e);
        assert!(boxed.to_string().contains("400"));
    }
}
