//! Which headers of an upstream response reach the client: the end-to-end ones. Used by
//! the relay (final responses) and the client (forwarded interim responses).

use edge_http::HeaderMap;

/// Copies end-to-end headers from an upstream response.
pub fn write_forwarded_headers(out: &mut Vec<u8>, headers: &HeaderMap) {
    let named: Vec<String> = headers
        .tokens("connection")
        .map(|t| String::from_utf8_lossy(t).to_ascii_lowercase())
        .collect();
    for (name, value) in headers.iter() {
        if edge_http::is_hop_by_hop(name)
            || name.eq_ignore_ascii_case("date")
            || name.eq_ignore_ascii_case("server")
            || name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("x-cache-status")
            || named.iter().any(|n| name.eq_ignore_ascii_case(n))
        {
            continue;
        }
        edge_http::write_header(out, name, value);
    }
}
