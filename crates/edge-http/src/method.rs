//! Request methods and protocol versions.
//!
//! How it fits: the request parser turns httparse's method token into a [`Method`] without
//! allocating for the standard methods; the cache and router match on the enum.

/// The HTTP protocol version of a message. The HTTP/1 parser builds only 1.0 and 1.1
/// (anything else is rejected with 505); `Http2` marks a request that arrived on an
/// HTTP/2 stream, `Http3` one that arrived on an HTTP/3 request stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: close after each message unless `Connection: keep-alive`.
    Http10,
    /// HTTP/1.1: persistent unless `Connection: close`.
    Http11,
    /// HTTP/2 (one stream): framed by the stream, never by `Connection`.
    Http2,
    /// HTTP/3 (one request stream over QUIC): framed by the stream, like HTTP/2.
    Http3,
}

impl Version {
    /// The protocol token, e.g. `"HTTP/1.1"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
            Version::Http2 => "HTTP/2.0",
            Version::Http3 => "HTTP/3.0",
        }
    }
}

/// A request method. Methods are case-sensitive (RFC 9110 9.1): `get` is `Other("get")`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`.
    Get,
    /// `HEAD`.
    Head,
    /// `POST`.
    Post,
    /// `PUT`.
    Put,
    /// `DELETE`.
    Delete,
    /// `OPTIONS`.
    Options,
    /// `PATCH`.
    Patch,
    /// `TRACE`.
    Trace,
    /// `CONNECT` (refused with 501 by the parser: edgecache does not tunnel).
    Connect,
    /// Cache purge (nginx / Varnish convention), answered only for `admin.allow`.
    Purge,
    /// Any other token; the parser guarantees it is a valid RFC 9110 token.
    Other(String),
}

impl Method {
    /// Maps a method token to the enum; allocates only for unknown methods.
    pub fn from_token(token: &str) -> Method {
        match token {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "PATCH" => Method::Patch,
            "TRACE" => Method::Trace,
            "CONNECT" => Method::Connect,
            "PURGE" => Method::Purge,
            other => Method::Other(other.to_owned()),
        }
    }

    /// The method token as sent on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Patch => "PATCH",
            Method::Trace => "TRACE",
            Method::Connect => "CONNECT",
            Method::Purge => "PURGE",
            Method::Other(s) => s,
        }
    }

    /// Safe methods (RFC 9110 9.2.1): GET, HEAD, OPTIONS, TRACE.
    pub fn is_safe(&self) -> bool {
        matches!(
            self,
            Method::Get | Method::Head | Method::Options | Method::Trace
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_known_method() {
        for m in [
            "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT", "PURGE",
        ] {
            let parsed = Method::from_token(m);
            assert!(!matches!(parsed, Method::Other(_)), "{m}");
            assert_eq!(parsed.as_str(), m);
        }
    }

    #[test]
    fn methods_are_case_sensitive() {
        assert_eq!(Method::from_token("get"), Method::Other("get".into()));
        assert_eq!(Method::from_token("BREW").as_str(), "BREW");
    }

    #[test]
    fn safe_methods() {
        assert!(Method::Get.is_safe());
        assert!(Method::Head.is_safe());
        assert!(Method::Options.is_safe());
        assert!(Method::Trace.is_safe());
        assert!(!Method::Post.is_safe());
        assert!(!Method::Purge.is_safe());
        assert!(!Method::Other("GET2".into()).is_safe());
    }

    #[test]
    fn version_tokens() {
        assert_eq!(Version::Http10.as_str(), "HTTP/1.0");
        assert_eq!(Version::Http11.as_str(), "HTTP/1.1");
    }
}
