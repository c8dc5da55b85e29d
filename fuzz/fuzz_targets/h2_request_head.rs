//! Fuzzes the HTTP/2 request translation: whatever an HTTP/2 request can carry (any
//! method token, path, authority and fields the `http` crate accepts, cookies split or
//! not, with or without a body) becomes an HTTP/1.1 head that our parser reads as one
//! whole head, or refuses with a status; never a panic, never bytes left over that
//! could be read as a second request.
#![no_main]

use edge_core::http::h2stream::request_head;
use edge_http::{parse_request, Limits};
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
    let mut out = bytes::BytesMut::new();
    let Ok(chunked) = request_head(&parts, has_body, &mut out) else {
        return;
    };
    assert!(!chunked || has_body);
    match parse_request(&out, &Limits::default()) {
        Ok(Some((head, n))) => {
            assert_eq!(n, out.len(), "one head, nothing left over");
            if let Some(a) = parts.uri.authority() {
                assert_eq!(head.host(), Some(a.as_str()));
            }
        }
        Ok(None) => panic!("an incomplete head: {:?}", String::from_utf8_lossy(&out)),
        Err(_) => {}
    }
});
