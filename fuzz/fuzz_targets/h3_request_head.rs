//! Fuzzes the HTTP/3 request translation (from the `http` crate's types, which the `h3`
//! crate speaks): whatever such a request can carry (any method token, path, authority
//! and fields the `http` crate accepts, cookies split or not, with or without a body)
//! becomes a request head with the checks of our HTTP/1.1 parser, or a refusal with a
//! status; never a panic. A head has the authority as its
//! Host, no connection-specific field, and a chunked body only when there is a body.
#![no_main]

use edge_core::http::h3fields::request_head;
use edge_http::{BodyKind, Limits, Version};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Fields are separated by 0xff: method, path, authority, then name/value pairs.
    let mut parts = data.split(|&b| b == 0xff);
    let method = parts.next().unwrap_or_default();
    let path = parts.next().unwrap_or_default();
    let authority = parts.next().unwrap_or_default();
    let has_body = data.first().is_some_and(|b| b & 1 == 1);
    let Ok(method) = http::Method::from_bytes(method) else {
        return;
    };
    let uri = if authority.is_empty() {
        http::Uri::builder().path_and_query(path)
    } else {
        http::Uri::builder()
            .scheme("https")
            .authority(authority)
            .path_and_query(path)
    };
    let Ok(uri) = uri.build() else {
        return;
    };
    let mut req = http::Request::builder().method(method).uri(uri);
    while let (Some(n), Some(v)) = (parts.next(), parts.next()) {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(n),
            http::HeaderValue::from_bytes(v),
        ) {
            req = req.header(n, v);
        }
    }
    let Ok(req) = req.body(()) else {
        return;
    };
    let (parts, ()) = req.into_parts();
    let Ok((head, _len)) = request_head(&parts, has_body, &Limits::default(), None) else {
        return;
    };
    assert_eq!(head.version, Version::Http2);
    assert!(head.body != BodyKind::Chunked || has_body);
    if let Some(a) = parts.uri.authority() {
        assert_eq!(head.host(), Some(a.as_str()));
    }
    for hop in ["connection", "transfer-encoding", "te", "upgrade", "keep-alive", "expect"] {
        assert!(!head.headers.contains(hop), "{hop}");
    }
    assert!(head.headers.get_all("cookie").count() <= 1);
});
