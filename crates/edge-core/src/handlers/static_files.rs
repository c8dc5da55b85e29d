//! `static = "/var/www"`: files under a root, with Content-Type, Last-Modified, ETag,
//! Range (single and multipart) and 304, like nginx's static module.
//!
//! The request path is percent-decoded and normalised segment by segment; a `..` that
//! would climb above the root is a 400, and NUL bytes are refused, so no request can
//! name a file outside the root. Symlinks inside the root are followed (as nginx's
//! default `disable_symlinks off`).

use crate::http::conn::Conn;
use crate::http::exchange::{BodyLen, Exchange, ExchangeError};
use crate::http::respond::{error_page, finish_without_body, respond};
use crate::http::send::send_file_range;
use crate::state::Shared;
use edge_http::{Boundary, MultipartLayout, Precondition, RangeOutcome, Recipient, Validators};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Percent-decodes and normalises `path` under `root`. None: refused (400).
pub fn resolve(root: &Path, path: &str) -> Option<PathBuf> {
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let s = std::str::from_utf8(hex).ok()?;
            decoded.push(u8::from_str_radix(s, 16).ok()?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    if decoded.contains(&0) {
        return None;
    }
    let decoded = String::from_utf8(decoded).ok()?;
    let mut parts: Vec<&str> = Vec::new();
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    let mut p = root.to_path_buf();
    for s in parts {
        p.push(s);
    }
    Some(p)
}

/// Content-Type by extension (the common web types; the rest is octet-stream).
pub fn content_type(path: &Path) -> &'static str {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    match ext.as_str() {
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "js" | "mjs" => "application/javascript",
        "json" => "application/json",
        "txt" => "text/plain",
        "xml" => "text/xml",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "avif" => "image/avif",
        "ico" => "image/x-icon",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        "m3u8" => "application/vnd.apple.mpegurl",
        "ts" => "video/mp2t",
        "mpd" => "application/dash+xml",
        "m4s" => "video/iso.segment",
        "mp3" => "audio/mpeg",
        "pdf" => "application/pdf",
        "wasm" => "application/wasm",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        _ => "application/octet-stream",
    }
}

/// nginx-style strong ETag: hex mtime seconds and size.
pub fn etag_for(mtime: SystemTime, size: u64) -> String {
    let secs = mtime
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("\"{secs:x}-{size:x}\"")
}

pub async fn handle(
    w: &crate::handlers::services::Services,
    conn: &mut Conn,
    ex: &mut Exchange,
    shared: &Shared,
    root: &Path,
    index: &str,
) -> Result<(), ExchangeError> {
    if !matches!(
        ex.req.method,
        edge_http::Method::Get | edge_http::Method::Head
    ) {
        let extra = b"Allow: GET, HEAD\r\n".to_vec();
        return respond(
            conn,
            ex,
            &shared.timeouts,
            405,
            "text/html",
            &error_page(405),
            &extra,
        )
        .await;
    }
    let Some(mut path) = resolve(root, ex.req.path()) else {
        return finish_without_body(conn, ex, &shared.timeouts, 400).await;
    };
    let mut meta = match w.file_io.stat_path(&path).await {
        Ok(m) => m,
        Err(e) => return finish_without_body(conn, ex, &shared.timeouts, io_status(&e)).await,
    };
    if meta.is_dir() {
        if !ex.req.path().ends_with('/') {
            let loc = format!("{}/", ex.req.path());
            let extra = format!("Location: {loc}\r\n").into_bytes();
            return respond(
                conn,
                ex,
                &shared.timeouts,
                301,
                "text/html",
                &error_page(301),
                &extra,
            )
            .await;
        }
        path.push(index);
        meta = match w.file_io.stat_path(&path).await {
            Ok(m) if m.is_file() => m,
            Ok(_) => return finish_without_body(conn, ex, &shared.timeouts, 403).await,
            Err(e) => return finish_without_body(conn, ex, &shared.timeouts, io_status(&e)).await,
        };
    }
    let file = match w.file_io.open_read(&path).await {
        Ok(f) => f,
        Err(e) => return finish_without_body(conn, ex, &shared.timeouts, io_status(&e)).await,
    };
    if let Err(code) = ex
        .discard_body(conn, shared.timeouts.client_body, shared.timeouts.send)
        .await
    {
        ex.keep_alive = false;
        return crate::http::respond::write_response(
            conn,
            ex,
            &shared.timeouts,
            code,
            "text/html",
            &error_page(code),
            b"",
        )
        .await;
    }
    let size = meta.size;
    let mtime = Some(meta.mtime);
    let etag = mtime.map(|m| etag_for(m, size));
    let ctype = content_type(&path);

    let mut validators = Vec::new();
    if let Some(m) = mtime {
        edge_http::write_header(
            &mut validators,
            "Last-Modified",
            edge_http::fmt_http_date(m).as_bytes(),
        );
    }
    if let Some(e) = &etag {
        edge_http::write_header(&mut validators, "ETag", e.as_bytes());
    }

    let v = Validators::new(etag.as_deref(), mtime);
    let pre = edge_http::evaluate_preconditions(
        &ex.req.method,
        &ex.req.headers,
        &v,
        Recipient::OriginServer,
    );
    match pre {
        Precondition::Proceed => {}
        Precondition::NotModified => {
            return crate::http::respond::write_response(
                conn,
                ex,
                &shared.timeouts,
                304,
                ctype,
                b"",
                &validators,
            )
            .await;
        }
        Precondition::Failed => {
            return crate::http::respond::write_response(
                conn,
                ex,
                &shared.timeouts,
                412,
                "text/html",
                &error_page(412),
                &validators,
            )
            .await;
        }
    }

    let range = edge_http::evaluate_range(&ex.req.method, &ex.req.headers, &v, size);
    let mut head = Vec::with_capacity(512);
    let head_only = ex.is_head();
    match range {
        RangeOutcome::Unsatisfiable => {
            let mut extra = format!("Content-Range: bytes */{size}\r\n").into_bytes();
            extra.extend_from_slice(&validators);
            crate::http::respond::write_response(
                conn,
                ex,
                &shared.timeouts,
                416,
                "text/html",
                &error_page(416),
                &extra,
            )
            .await
        }
        RangeOutcome::Full(_) => {
            ex.begin_head(&mut head, 200);
            edge_http::write_header(&mut head, "Content-Type", ctype.as_bytes());
            edge_http::write_header_u64(&mut head, "Content-Length", size);
            edge_http::write_header(&mut head, "Accept-Ranges", b"bytes");
            head.extend_from_slice(&validators);
            ex.end_head(&mut head, BodyLen::Known(size));
            conn.write_all(&head, shared.timeouts.send).await?;
            if !head_only && size > 0 {
                ex.body_bytes_sent = send_file_range(
                    conn,
                    &w.file_io,
                    &file,
                    0,
                    size,
                    shared.send.mode_for(size),
                    shared.timeouts.send,
                )
                .await?;
            }
            Ok(())
        }
        RangeOutcome::Partial(ranges) if ranges.len() == 1 => {
            let (a, b) = (ranges[0].first(), ranges[0].last());
            ex.begin_head(&mut head, 206);
            edge_http::write_header(&mut head, "Content-Type", ctype.as_bytes());
            edge_http::write_header_u64(&mut head, "Content-Length", b - a + 1);
            edge_http::write_header(
                &mut head,
                "Content-Range",
                format!("bytes {a}-{b}/{size}").as_bytes(),
            );
            head.extend_from_slice(&validators);
            ex.end_head(&mut head, BodyLen::Known(b - a + 1));
            conn.write_all(&head, shared.timeouts.send).await?;
            if !head_only {
                ex.body_bytes_sent = send_file_range(
                    conn,
                    &w.file_io,
                    &file,
                    a,
                    b - a + 1,
                    shared.send.mode_for(size),
                    shared.timeouts.send,
                )
                .await?;
            }
            Ok(())
        }
        RangeOutcome::Partial(ranges) => {
            let seed = ex.started.elapsed().as_nanos() as u64 ^ size;
            let boundary = Boundary::from_seed(seed);
            let mp = MultipartLayout::new(&ranges, size, Some(ctype.as_bytes()), boundary.as_str());
            ex.begin_head(&mut head, 206);
            edge_http::write_header(&mut head, "Content-Type", mp.content_type());
            edge_http::write_header_u64(&mut head, "Content-Length", mp.content_length());
            head.extend_from_slice(&validators);
            ex.end_head(&mut head, BodyLen::Known(mp.content_length()));
            conn.write_all(&head, shared.timeouts.send).await?;
            if head_only {
                return Ok(());
            }
            for part in mp.parts() {
                conn.write_all(part.head, shared.timeouts.send).await?;
                send_file_range(
                    conn,
                    &w.file_io,
                    &file,
                    part.range.first(),
                    part.range.len(),
                    shared.send.mode_for(size),
                    shared.timeouts.send,
                )
                .await?;
            }
            conn.write_all(mp.tail(), shared.timeouts.send).await?;
            ex.body_bytes_sent = mp.content_length();
            Ok(())
        }
    }
}

fn io_status(e: &std::io::Error) -> u16 {
    match e.kind() {
        std::io::ErrorKind::NotFound => 404,
        std::io::ErrorKind::PermissionDenied => 403,
        _ if e.raw_os_error() == Some(libc::ENOTDIR)
            || e.raw_os_error() == Some(libc::ENAMETOOLONG) =>
        {
            404
        }
        _ => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_stays_under_root() {
        let root = Path::new("/srv");
        assert_eq!(
            resolve(root, "/a/b.txt").unwrap(),
            PathBuf::from("/srv/a/b.txt")
        );
        assert_eq!(resolve(root, "/a/../b").unwrap(), PathBuf::from("/srv/b"));
        assert_eq!(resolve(root, "/a%20b").unwrap(), PathBuf::from("/srv/a b"));
        assert_eq!(resolve(root, "/./a//b").unwrap(), PathBuf::from("/srv/a/b"));
        assert!(resolve(root, "/../etc/passwd").is_none());
        assert!(resolve(root, "/a/%2e%2e/%2e%2e/etc").is_none());
        assert!(resolve(root, "/a%00b").is_none());
        assert!(resolve(root, "/a%zz").is_none());
        assert!(resolve(root, "/a%2").is_none());
    }

    #[test]
    fn types_and_etags() {
        assert_eq!(content_type(Path::new("a/b.HTML")), "text/html");
        assert_eq!(content_type(Path::new("x")), "application/octet-stream");
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(0x1234);
        assert_eq!(etag_for(t, 0x10), "\"1234-10\"");
    }
}
