//! Response heads from upstreams: [`parse_response`] and [`ResponseHead`].
//!
//! How it fits: the proxy writes a request to an upstream connection, then feeds what it
//! reads to [`parse_response`] until it gets a head. Interim 1xx heads come back like any
//! other; the proxy skips them and parses again from `buf[n]`. Any error is
//! [`crate::ErrorKind::BadUpstream`], which the proxy answers with 502 and never caches.
//!
//! Lenient where RFC 9112 allows a recipient to be (whitespace before a colon is removed,
//! obs-fold is replaced with spaces, several spaces after the status code are fine, an
//! unknown reason phrase is fine); strict about framing, because a wrong body length
//! desynchronises the pooled upstream connection.

use crate::error::{upstream, ParseError};
use crate::framing::{
    classify, ConnectionOptions, ContentLength, Special, TeVerdict, TransferEncoding,
};
use crate::head::{wait_or_too_large, with_header_slots};
use crate::{BodyKind, HeaderMap, Limits, Method, Version};

/// A parsed response head.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    /// HTTP/1.0 or HTTP/1.1 (anything else is `BadUpstream`).
    pub version: Version,
    /// The status code, 100..=999.
    pub status: u16,
    /// The reason phrase; empty when absent or not ASCII.
    pub reason: String,
    /// Every field in wire order; obs-folds already replaced by spaces.
    pub headers: HeaderMap,
    /// Framing per RFC 9112 6.3 given the request method: HEAD, 1xx, 204 and 304 are
    /// `Empty`; then chunked; then Content-Length; otherwise `CloseDelimited`.
    pub body: BodyKind,
    /// Whether the upstream connection may be reused after this response.
    pub keep_alive: bool,
}

impl ResponseHead {
    /// A 1xx interim response (100 Continue, 103 Early Hints); the final one follows.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status)
    }
}

const ERR_HEAD_TOO_LARGE: ParseError = upstream("upstream response head too large");

/// Parses a response head (used on upstream responses). `request_method` decides framing
/// for HEAD. 1xx interim responses are returned like any other (the caller skips them).
///
/// `limits.max_header_bytes` and `limits.max_headers` bound the head; `max_body` and
/// `max_request_line` do not apply to responses.
pub fn parse_response(
    buf: &[u8],
    limits: &Limits,
    request_method: &Method,
) -> Result<Option<(ResponseHead, usize)>, ParseError> {
    with_header_slots(limits.max_headers, |slots| {
        let mut res = httparse::Response::new(&mut []);
        let status = httparse::ParserConfig::default()
            .allow_spaces_after_header_name_in_responses(true)
            .allow_obsolete_multiline_headers_in_responses(true)
            .allow_multiple_spaces_in_response_status_delimiters(true)
            .parse_response_with_uninit_headers(&mut res, buf, slots);
        let n = match status {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                return wait_or_too_large(buf, limits, ERR_HEAD_TOO_LARGE)
            }
            Err(e) => return Err(refusal(e)),
        };
        if n > limits.max_header_bytes {
            return Err(ERR_HEAD_TOO_LARGE);
        }
        build_head(buf, &res, request_method).map(|head| Some((head, n)))
    })
}

/// Every httparse error on a response is a bad upstream; the reason says which.
fn refusal(e: httparse::Error) -> ParseError {
    upstream(match e {
        httparse::Error::TooManyHeaders => "too many header fields in upstream response",
        httparse::Error::Version => "upstream HTTP version is not 1.0 or 1.1",
        httparse::Error::Status => "malformed upstream status line",
        httparse::Error::HeaderName => "invalid header name in upstream response",
        httparse::Error::HeaderValue => "invalid header value in upstream response",
        httparse::Error::NewLine => "invalid line ending in upstream response",
        httparse::Error::Token => "malformed upstream response",
    })
}

fn build_head(
    buf: &[u8],
    res: &httparse::Response<'_, '_>,
    method: &Method,
) -> Result<ResponseHead, ParseError> {
    let (Some(minor), Some(status)) = (res.version, res.code) else {
        return Err(upstream("incomplete upstream status line"));
    };
    if status < 100 {
        return Err(upstream("upstream status code below 100"));
    }
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };

    let fields = &*res.headers;
    let mut headers = HeaderMap::from_parsed(buf, fields);
    let mut cl = ContentLength::default();
    let mut cl_error = None;
    let mut te = TransferEncoding::default();
    let mut conn = ConnectionOptions::default();
    for (i, h) in fields.iter().enumerate() {
        if memchr::memchr2(b'\r', b'\n', h.value).is_some() {
            // obs-fold (RFC 9112 5.2): a proxy replaces each fold with spaces.
            if let Some(v) = headers.value_mut(i) {
                for b in v.iter_mut().filter(|b| **b == b'\r' || **b == b'\n') {
                    *b = b' ';
                }
            }
        }
        // Read back from the map, so framing is decided on the value we forward.
        let value = headers.value_at(i).unwrap_or_default();
        match classify(h.name) {
            Special::ContentLength => {
                if let Err(why) = cl.add(value) {
                    cl_error.get_or_insert(why);
                }
            }
            Special::TransferEncoding => te.add(value),
            Special::Connection => conn.add(value),
            _ => {}
        }
    }

    // RFC 9112 6.3 rule 4: when chunked is not the final coding, the body runs until
    // the upstream closes. The field is hop-by-hop, so it is not relayed; what the
    // client gets is the coded bytes as they came, delimited by our own framing.
    let mut until_close = false;
    if te.seen {
        match te.verdict() {
            TeVerdict::Chunked => {}
            TeVerdict::FinalNotChunked => until_close = true,
            TeVerdict::Empty => return Err(upstream("empty Transfer-Encoding from upstream")),
            _ => return Err(upstream("unsupported transfer-coding from upstream")),
        }
    } else if let Some(why) = cl_error {
        return Err(upstream(why));
    }

    let mut keep_alive = conn.persistent(version);
    // RFC 9112 6.3 rule 3: TE overrides CL, but the connection must not be reused
    // (the message may be a smuggling attempt); 6.1: TE in an HTTP/1.0 message is faulty
    // framing, so close after it.
    if te.seen && (cl.value.is_some() || cl_error.is_some() || version == Version::Http10) {
        keep_alive = false;
    }
    let bodiless = *method == Method::Head || status < 200 || status == 204 || status == 304;
    let body = if bodiless {
        BodyKind::Empty
    } else if until_close {
        keep_alive = false;
        BodyKind::CloseDelimited
    } else if te.seen {
        BodyKind::Chunked
    } else if let Some(len) = cl.value {
        BodyKind::Length(len)
    } else {
        // RFC 9112 6.3 rule 8: the body ends when the upstream closes.
        keep_alive = false;
        BodyKind::CloseDelimited
    };

    Ok(ResponseHead {
        version,
        status,
        reason: res.reason.unwrap_or("").to_owned(),
        headers,
        body,
        keep_alive,
    })
}

#[cfg(test)]
pub(crate) mod tests;
