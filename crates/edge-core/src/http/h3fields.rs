//! The HTTP/3 stream's request and response fields in the `http` crate's types, which
//! the `h3` crate speaks: a request head from a stream's `http::request::Parts`
//! ([`request_head`]), checked as our HTTP/1.1 parser checks a head, and a response
//! head's field lines as an `http::HeaderMap` ([`response_fields`]). (HTTP/2 has its
//! own HPACK codec and needs neither: `edge_http::h2`.)

use bytes::Bytes;
use edge_http::h2::hpack::{field_kind, FieldKind};
use std::cell::RefCell;
use std::io;

/// Most fields of a response head.
const MAX_RESPONSE_HEADERS: usize = 64;

fn broken(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, format!("HTTP/3 stream: {e}"))
}

/// The request head of a stream, checked as our HTTP/1.1 parser checks one
/// ([`edge_http::request_from_fields`]), and its size as HTTP/1.1 lines (for
/// `$request_length`). Err: the status to answer with.
pub fn request_head(
    parts: &http::request::Parts,
    has_body: bool,
    limits: &edge_http::Limits,
    spare: Option<Box<edge_http::RequestHead>>,
) -> Result<(Box<edge_http::RequestHead>, usize), u16> {
    let Some(path) = parts.uri.path_and_query() else {
        // CONNECT (no :path): not a proxy.
        return Err(405);
    };
    // RFC 9113 8.3.1: `:path` is origin-form, or `*` for OPTIONS. Anything else (an
    // absolute URI would name a host other than `:authority`) is malformed.
    let p = path.as_str();
    if !(p.starts_with('/') || (p == "*" && parts.method == http::Method::OPTIONS)) {
        return Err(400);
    }
    let authority = parts.uri.authority().map(|a| a.as_str());
    let fields = || {
        parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes()))
    };
    let head = edge_http::request_from_fields(
        parts.method.as_str(),
        p,
        authority,
        fields,
        has_body,
        limits,
        spare,
    )
    .map_err(|e| e.status())?;
    let len = parts.method.as_str().len()
        + p.len()
        + 13
        + authority.map_or(0, |a| a.len() + 8)
        + fields().map(|(n, v)| n.len() + v.len() + 4).sum::<usize>();
    Ok((head, len))
}

/// The fields HEADERS carries for a response head's field lines `block`: valid names
/// only, connection-specific fields dropped (HTTP/3 frames the body itself), values
/// slices of `block`. `memo` is the connection's memo of field names. At most
/// [`MAX_RESPONSE_HEADERS`] lines (the fuzz target `h3_response_head` drives it).
pub fn response_fields(block: &Bytes, memo: &NameMemo) -> io::Result<http::HeaderMap> {
    let mut fields = http::HeaderMap::with_capacity(16);
    let mut memo = memo.cursor();
    let mut lines = edge_http::FieldLines::new(block, MAX_RESPONSE_HEADERS);
    for (name, value) in lines.by_ref() {
        // A name that is not a valid field name is left out, as over HTTP/1.1.
        let Some(Name::Field(name, churns)) = memo.lookup(name) else {
            continue;
        };
        let Ok(mut v) = http::HeaderValue::from_maybe_shared(block.slice_ref(value)) else {
            continue;
        };
        if churns {
            v.set_sensitive(true);
        }
        fields.append(name, v);
    }
    if lines.overflowed() {
        return Err(broken("response head has too many fields"));
    }
    Ok(fields)
}

/// What a response field name is to HTTP/3.
#[derive(Clone)]
enum Name {
    /// Connection-specific (framing included): not sent.
    Hop,
    /// Sent; `true` when its values churn (never indexed: see
    /// [`edge_http::h2::hpack::field_kind`]).
    Field(http::HeaderName, bool),
}

impl Name {
    fn of(raw: &[u8]) -> Option<Name> {
        let name = http::HeaderName::from_bytes(raw).ok()?;
        // One classification for HTTP/2 and HTTP/3 (the name is lowercase here).
        Some(match field_kind(name.as_str().as_bytes()) {
            FieldKind::Hop => Name::Hop,
            kind => Name::Field(name, kind == FieldKind::Churning),
        })
    }
}

/// Field names of one connection's responses, as written (case and all), with what
/// they are: the responses of a connection repeat the same names in the same order,
/// so each is validated, lowercased and classified once, not once per response.
#[derive(Default)]
pub struct NameMemo {
    seen: RefCell<Vec<(Box<[u8]>, Name)>>,
}

/// Names remembered per connection (past it, new names are classified every time),
/// and the longest remembered (an origin's odd long names are not kept: at most 4 KiB
/// per connection).
const MEMO_NAMES: usize = 64;
const MEMO_NAME_LEN: usize = 64;

impl NameMemo {
    fn cursor(&self) -> MemoCursor<'_> {
        MemoCursor {
            memo: self,
            next: 0,
        }
    }
}

/// Looks names up in a [`NameMemo`], trying first the one after the last found.
struct MemoCursor<'a> {
    memo: &'a NameMemo,
    next: usize,
}

impl MemoCursor<'_> {
    fn lookup(&mut self, raw: &[u8]) -> Option<Name> {
        let mut seen = self.memo.seen.borrow_mut();
        let hit = match seen.get(self.next) {
            Some((n, _)) if **n == *raw => Some(self.next),
            _ => seen.iter().position(|(n, _)| **n == *raw),
        };
        if let Some(i) = hit {
            self.next = i + 1;
            return Some(seen[i].1.clone());
        }
        let name = Name::of(raw)?;
        if seen.len() < MEMO_NAMES && raw.len() <= MEMO_NAME_LEN {
            seen.push((raw.into(), name.clone()));
            self.next = seen.len();
        }
        Some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head_of(req: http::Request<()>, has_body: bool) -> Result<edge_http::RequestHead, u16> {
        let (parts, ()) = req.into_parts();
        request_head(&parts, has_body, &edge_http::Limits::default(), None).map(|(h, _)| *h)
    }

    fn fields(block: &str, memo: &NameMemo) -> io::Result<http::HeaderMap> {
        response_fields(&Bytes::copy_from_slice(block.as_bytes()), memo)
    }

    #[test]
    fn field_lines_become_header_maps() {
        let memo = NameMemo::default();
        let block = "Server: edgecache\r\nETag: \"x\"\r\nConnection: keep-alive\r\n\
                    Keep-Alive: timeout=5\r\nX-Cache-Status: HIT\r\nContent-Length:  1024 \r\n\
                    Transfer-Encoding: chunked\r\nBad Name: dropped\r\nno colon\r\n\
                    set-cookie: a\r\nSet-Cookie: b\r\n";
        // Twice: the second time every name comes from the memo, same result.
        for _ in 0..2 {
            let f = fields(block, &memo).unwrap();
            assert_eq!(f["server"], "edgecache");
            assert_eq!(f["content-length"], "1024");
            assert_eq!(f["x-cache-status"], "HIT");
            assert!(f["etag"].is_sensitive() && !f["server"].is_sensitive());
            for hop in ["connection", "keep-alive", "transfer-encoding"] {
                assert!(!f.contains_key(hop), "{hop}");
            }
            let cookies: Vec<_> = f.get_all("set-cookie").iter().collect();
            assert_eq!(cookies, ["a", "b"]);
            assert_eq!(f.len(), 6, "{f:?}");
        }
        // Names in another order, and new ones, on the same connection.
        let f = fields("X-Other: 1\r\nServer: e\r\n", &memo).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f["x-other"], "1");
        assert!(fields("", &memo).unwrap().is_empty());
    }

    #[test]
    fn too_many_fields_are_an_error_and_the_memo_stays_bounded() {
        let memo = NameMemo::default();
        let many: String = (0..=MAX_RESPONSE_HEADERS)
            .map(|i| format!("x-{i}: v\r\n"))
            .collect();
        assert!(fields(&many, &memo).is_err());
        assert!(memo.seen.borrow().len() <= MEMO_NAMES);
        let memo = NameMemo::default();
        let long = "x".repeat(MEMO_NAME_LEN + 1);
        let f = fields(&format!("{long}: v\r\nServer: e\r\n"), &memo).unwrap();
        assert_eq!(f[long.as_str()], "v");
        let seen: Vec<_> = memo.seen.borrow().iter().map(|(n, _)| n.len()).collect();
        assert_eq!(seen, [6], "only Server is remembered");
    }

    #[test]
    fn request_heads_follow_rfc_9113() {
        let req = http::Request::builder()
            .method("GET")
            .uri("https://a.example/x?y=1")
            .header("host", "other.example")
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .header("te", "trailers")
            .header("accept", "*/*")
            .body(())
            .unwrap();
        let h = head_of(req, false).unwrap();
        assert_eq!(h.target, "/x?y=1");
        assert_eq!(h.host(), Some("a.example"));
        assert_eq!(h.version, edge_http::Version::Http2);
        assert_eq!(h.headers.get("cookie"), Some(&b"a=1; b=2"[..]));
        assert!(!h.headers.contains("te"));
        // A body without content-length is presented chunked; with one, as it is.
        let req = http::Request::builder()
            .method("POST")
            .uri("https://a.example/up")
            .body(())
            .unwrap();
        assert_eq!(
            head_of(req, true).unwrap().body,
            edge_http::BodyKind::Chunked
        );
        let req = http::Request::builder()
            .method("POST")
            .uri("https://a.example/up")
            .header("content-length", "3")
            .body(())
            .unwrap();
        assert_eq!(
            head_of(req, true).unwrap().body,
            edge_http::BodyKind::Length(3)
        );
    }

    #[test]
    fn a_path_that_is_not_origin_form_is_refused() {
        // (The `http` crate itself refuses an absolute URI as a path; `*` it takes.)
        let uri = http::Uri::builder().path_and_query("*").build().unwrap();
        let get = http::Request::builder().method("GET").uri(uri.clone());
        let get = get.header("host", "a.example");
        assert_eq!(head_of(get.body(()).unwrap(), false).err(), Some(400));
        let options = http::Request::builder().method("OPTIONS").uri(uri);
        let options = options.header("host", "a.example");
        let h = head_of(options.body(()).unwrap(), false).unwrap();
        assert_eq!(
            (h.method, h.target.as_str()),
            (edge_http::Method::Options, "*")
        );
    }

    #[test]
    fn connect_is_refused() {
        let req = http::Request::builder()
            .method("CONNECT")
            .uri("a.example:443")
            .body(())
            .unwrap();
        assert_eq!(head_of(req, false).err(), Some(405));
    }
}
