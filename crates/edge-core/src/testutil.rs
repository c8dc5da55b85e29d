//! Helpers shared by this crate's unit tests.

use edge_http::RequestHead;

/// Parses a complete request head (`raw` ends with the blank line); panics if it is
/// not one.
pub(crate) fn parse(raw: &str) -> RequestHead {
    edge_http::parse_request(raw.as_bytes(), &edge_http::Limits::default())
        .unwrap()
        .unwrap()
        .0
}

/// `GET target HTTP/1.0` with these fields (1.0: Host optional).
pub(crate) fn req(target: &str, headers: &[(&str, &str)]) -> RequestHead {
    let mut raw = format!("GET {target} HTTP/1.0\r\n");
    for (n, v) in headers {
        raw.push_str(&format!("{n}: {v}\r\n"));
    }
    raw.push_str("\r\n");
    parse(&raw)
}
