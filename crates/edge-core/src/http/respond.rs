//! Complete small responses every handler sends: error pages (nginx's), and a status
//! with a Content-Length body written in one write after the request body was consumed.

use super::{Conn, Exchange, ExchangeError, Timeouts};

/// A status with no body by definition (RFC 9110 6.4.1).
pub fn bodiless(status: u16) -> bool {
    status < 200 || status == 204 || status == 304
}

/// A small HTML error page, like nginx's.
pub fn error_page(status: u16) -> Vec<u8> {
    let reason = edge_http::reason_phrase(status);
    format!(
        "<html>\r\n<head><title>{status} {reason}</title></head>\r\n<body>\r\n<center><h1>{status} {reason}</h1></center>\r\n<hr><center>edgecache</center>\r\n</body>\r\n</html>\r\n"
    )
    .into_bytes()
}

/// Consumes the request body (if any), then sends a complete response. If the body
/// cannot be consumed (too large: 413, broken: 400) that error is sent instead and the
/// connection closes.
pub async fn respond(
    conn: &mut Conn,
    ex: &mut Exchange,
    t: &Timeouts,
    status: u16,
    content_type: &str,
    body: &[u8],
    extra_headers: &[u8],
) -> Result<(), ExchangeError> {
    if let Err(code) = ex.discard_body(conn, t.client_body, t.send).await {
        ex.keep_alive = false;
        ex.body = None;
        let page = error_page(code);
        return write_response(conn, ex, t, code, "text/html", &page, b"").await;
    }
    write_response(conn, ex, t, status, content_type, body, extra_headers).await
}

/// Writes a complete response with a Content-Length body (none for HEAD or bodiless
/// statuses) in one write.
pub async fn write_response(
    conn: &mut Conn,
    ex: &mut Exchange,
    t: &Timeouts,
    status: u16,
    content_type: &str,
    body: &[u8],
    extra_headers: &[u8],
) -> Result<(), ExchangeError> {
    let mut out = Vec::with_capacity(256 + body.len());
    ex.begin_head(&mut out, status);
    let no_body = bodiless(status);
    if !no_body {
        edge_http::write_header(&mut out, "Content-Type", content_type.as_bytes());
        edge_http::write_header_u64(&mut out, "Content-Length", body.len() as u64);
    }
    out.extend_from_slice(extra_headers);
    let len = if no_body {
        super::exchange::BodyLen::None
    } else {
        super::exchange::BodyLen::Known(body.len() as u64)
    };
    ex.end_head(&mut out, len);
    if !no_body && !ex.is_head() {
        out.extend_from_slice(body);
        ex.body_bytes_sent = body.len() as u64;
    }
    conn.write_all(&out, t.send).await?;
    Ok(())
}

/// The error page of a 4xx or 5xx status, built once per process: the pages answered
/// most (404s, and the 429s of `limit_req` to a client over its rate) are not
/// formatted again for each request.
pub fn error_page_shared(status: u16) -> Option<&'static [u8]> {
    static PAGES: std::sync::OnceLock<Box<[Box<[u8]>]>> = std::sync::OnceLock::new();
    let i = usize::from(status.checked_sub(400)?);
    PAGES
        .get_or_init(|| {
            (400..600)
                .map(|s| error_page(s).into_boxed_slice())
                .collect()
        })
        .get(i)
        .map(|p| &**p)
}

/// An error page for `status`, after consuming the request body.
pub async fn finish_without_body(
    conn: &mut Conn,
    ex: &mut Exchange,
    t: &Timeouts,
    status: u16,
) -> Result<(), ExchangeError> {
    match error_page_shared(status) {
        Some(page) => respond(conn, ex, t, status, "text/html", page, b"").await,
        None => {
            let page = error_page(status);
            respond(conn, ex, t, status, "text/html", &page, b"").await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_pages_name_the_status() {
        let p = String::from_utf8(error_page(404)).unwrap();
        assert!(p.contains("404 Not Found"));
    }

    #[test]
    fn shared_pages_are_the_same_pages() {
        for s in [400, 404, 429, 503, 599] {
            assert_eq!(error_page_shared(s), Some(&error_page(s)[..]));
        }
        for s in [0, 200, 399, 600, u16::MAX] {
            assert_eq!(error_page_shared(s), None);
        }
    }
}
