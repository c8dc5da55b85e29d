//! Small handlers: `return` (nginx's `return code [text|URL]`) and `empty_gif`.

use crate::http::respond::{error_page, respond};
use crate::http::{Conn, Exchange, ExchangeError};
use crate::state::route::ReturnRoute;
use crate::state::Shared;

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

/// Spends `d` of CPU on this thread, on purpose: `return.burn_us` is the CPU-heavy
/// handler of the accept experiments (seed 004's loop, docs/background.md lever 4), so
/// it blocks its worker exactly as real CPU work would.
pub fn burn(d: std::time::Duration) {
    let end = std::time::Instant::now() + d;
    let mut x = 0u64;
    while std::time::Instant::now() < end {
        for i in 0..64u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    std::hint::black_box(x);
}

pub async fn handle_return(
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Shared,
    r: &ReturnRoute,
) -> Result<(), ExchangeError> {
    if !r.burn.is_zero() {
        burn(r.burn);
    }
    let mut extra = Vec::new();
    let client = super::context::client_of(conn, ex, shared);
    let vars = super::context::vars(client, ex, shared);
    // A body without variables is sent as it is (no copy).
    let mut rendered = Vec::new();
    let body: &[u8] = match r.body.as_literal() {
        Some(b) => b.as_bytes(),
        None => {
            r.body.render(&vars, &mut rendered);
            &rendered
        }
    };
    if matches!(r.status, 301 | 302 | 303 | 307 | 308) {
        let mut target = Vec::new();
        match &r.location {
            Some(l) => l.render(&vars, &mut target),
            None => target.extend_from_slice(body),
        }
        // A header value holds no line breaks, whatever a variable held.
        target.retain(|&b| b != b'\r' && b != b'\n' && b != 0);
        edge_http::write_header(&mut extra, "Location", &target);
        let page = error_page(r.status);
        return respond(
            conn,
            ex,
            &shared.timeouts,
            r.status,
            "text/html",
            &page,
            &extra,
        )
        .await;
    }
    respond(
        conn,
        ex,
        &shared.timeouts,
        r.status,
        &r.content_type,
        body,
        &extra,
    )
    .await
}

pub async fn handle_empty_gif(
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Shared,
) -> Result<(), ExchangeError> {
    if !ex.req.method.is_safe() {
        let extra = b"Allow: GET, HEAD\r\n".to_vec();
        let page = error_page(405);
        return respond(conn, ex, &shared.timeouts, 405, "text/html", &page, &extra).await;
    }
    let extra = b"Last-Modified: Mon, 28 Sep 1970 06:00:00 GMT\r\n".to_vec();
    respond(
        conn,
        ex,
        &shared.timeouts,
        200,
        "image/gif",
        &EMPTY_GIF,
        &extra,
    )
    .await
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
}
