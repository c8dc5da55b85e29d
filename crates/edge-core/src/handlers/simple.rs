//! Small handlers: `return` (nginx's `return code [text|URL]`), `empty_gif`, and the
//! error pages every other handler uses.

use crate::server::conn::Conn;
use crate::server::exchange::{Exchange, ExchangeError};
use crate::server::route::{ReturnRoute, Route};
use crate::server::state::Shared;

/// A transparent 1x1 GIF89a, 43 bytes (what nginx's empty_gif serves).
pub const EMPTY_GIF: [u8; 43] = [
    b'G', b'I', b'F', b'8', b'9', b'a', // signature and version
    0x01, 0x00, 0x01, 0x00, // logical screen 1x1
    0x80, 0x01, 0x00, // global colour table of 2 entries, background #1, no aspect ratio
    0x00, 0x00, 0x00, 0xff, 0xff, 0xff, // colours: black, white
    0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x01,
    0x00, // graphic control: colour #1 is transparent
    0x2c, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, // image descriptor 1x1 at 0,0
    0x02, 0x02, 0x4c, 0x01, 0x00, // LZW min code size 2, one 2-byte block: clear, 1, end
    0x3b, // trailer
];

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
    shared: &Shared,
    status: u16,
    content_type: &str,
    body: &[u8],
    extra_headers: &[u8],
) -> Result<(), ExchangeError> {
    if let Err(code) = ex
        .discard_body(conn, shared.timeouts.client_body, shared.timeouts.send)
        .await
    {
        ex.keep_alive = false;
        ex.body = None;
        let page = error_page(code);
        return write_response(conn, ex, shared, code, "text/html", &page, b"").await;
    }
    write_response(conn, ex, shared, status, content_type, body, extra_headers).await
}

/// Writes a complete response with a Content-Length body (none for HEAD or bodiless
/// statuses) in one write.
pub async fn write_response(
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Shared,
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
        edge_http::write_header(
            &mut out,
            "Content-Length",
            body.len().to_string().as_bytes(),
        );
    }
    out.extend_from_slice(extra_headers);
    ex.end_head(&mut out);
    if !no_body && !ex.is_head() {
        out.extend_from_slice(body);
        ex.body_bytes_sent = body.len() as u64;
    }
    conn.write_all(&out, shared.timeouts.send).await?;
    Ok(())
}

/// An error page for `status`, after consuming the request body.
pub async fn finish_without_body(
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Shared,
    status: u16,
) -> Result<(), ExchangeError> {
    let page = error_page(status);
    respond(conn, ex, shared, status, "text/html", &page, b"").await
}

pub async fn handle_return(
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Shared,
    route: &Route,
    r: &ReturnRoute,
) -> Result<(), ExchangeError> {
    let mut extra = route.add_headers.clone();
    if matches!(r.status, 301 | 302 | 303 | 307 | 308) {
        let target = r
            .location
            .clone()
            .unwrap_or_else(|| String::from_utf8_lossy(&r.body).into_owned());
        edge_http::write_header(&mut extra, "Location", target.as_bytes());
        let page = error_page(r.status);
        return respond(conn, ex, shared, r.status, "text/html", &page, &extra).await;
    }
    respond(conn, ex, shared, r.status, &r.content_type, &r.body, &extra).await
}

pub async fn handle_empty_gif(
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Shared,
    route: &Route,
) -> Result<(), ExchangeError> {
    if !ex.req.method.is_safe() {
        let mut extra = b"Allow: GET, HEAD\r\n".to_vec();
        extra.extend_from_slice(&route.add_headers);
        let page = error_page(405);
        return respond(conn, ex, shared, 405, "text/html", &page, &extra).await;
    }
    let mut extra = b"Last-Modified: Mon, 28 Sep 1970 06:00:00 GMT\r\n".to_vec();
    extra.extend_from_slice(&route.add_headers);
    respond(conn, ex, shared, 200, "image/gif", &EMPTY_GIF, &extra).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_gif_is_a_gif_of_43_bytes() {
        assert_eq!(EMPTY_GIF.len(), 43);
        assert_eq!(&EMPTY_GIF[..6], b"GIF89a");
        assert_eq!(EMPTY_GIF[42], 0x3b, "GIF trailer");
    }

    #[test]
    fn error_pages_name_the_status() {
        let p = String::from_utf8(error_page(404)).unwrap();
        assert!(p.contains("404 Not Found"));
    }
}
