//! Request parser tests: valid heads, shotgun splits, and the table of refusals.

use super::*;
use crate::ErrorKind::*;

fn parse(s: &[u8]) -> Result<Option<(RequestHead, usize)>, ParseError> {
    parse_request(s, &Limits::default())
}

fn ok(s: &[u8]) -> (RequestHead, usize) {
    match parse(s) {
        Ok(Some(r)) => r,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(s)),
    }
}

fn kind(s: &[u8]) -> ErrorKind {
    kind_with(s, &Limits::default())
}

fn kind_with(s: &[u8], limits: &Limits) -> ErrorKind {
    match parse_request(s, limits) {
        Err(e) => e.kind,
        other => panic!(
            "{:?}: expected an error, got {other:?}",
            String::from_utf8_lossy(s)
        ),
    }
}

/// Requests that must parse, used by the shotgun test as well.
pub(crate) const VALID: &[&[u8]] = &[
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /obj/10k/1?x=1&y HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nUser-Agent: t\r\n\r\n",
    b"HEAD /a HTTP/1.0\r\n\r\n",
    b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
    b"PUT /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"\r\n\r\nGET /after-empty-lines HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET /bare-lf HTTP/1.1\nHost: h\n\n",
    b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET http://Example.com:81/p?q HTTP/1.1\r\nHost: ignored\r\n\r\n",
    b"PURGE /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
    b"BREW /pot HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
    b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\nX-Obs: caf\xc3\xa9 \x80\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\nContent-Length: 3\r\n\r\nabc",
];

#[test]
fn simple_get() {
    let req = b"GET /a/b?c=d HTTP/1.1\r\nHost: example.com\r\nX-Y: z\r\n\r\nNEXT";
    let (h, n) = ok(req);
    assert_eq!(&req[n..], b"NEXT");
    assert_eq!(h.method, Method::Get);
    assert_eq!(h.target, "/a/b?c=d");
    assert_eq!(h.path(), "/a/b");
    assert_eq!(h.query(), Some("c=d"));
    assert_eq!(h.path_and_query(), "/a/b?c=d");
    assert_eq!(h.host(), Some("example.com"));
    assert_eq!(h.version, Version::Http11);
    assert_eq!(h.body, BodyKind::Empty);
    assert!(h.keep_alive);
    assert!(!h.expect_continue);
    assert_eq!(h.headers.len(), 2);
    assert_eq!(h.headers.get_str("x-y"), Some("z"));
}

#[test]
fn framing_and_persistence() {
    let (h, n) = ok(VALID[3]);
    assert_eq!(h.body, BodyKind::Length(5));
    assert_eq!(&VALID[3][n..], b"hello");
    let (h, _) = ok(VALID[4]);
    assert_eq!(h.body, BodyKind::Chunked);
    let (h, _) = ok(VALID[2]);
    assert_eq!(
        (h.method.clone(), h.version, h.keep_alive),
        (Method::Head, Version::Http10, false)
    );
    assert_eq!(h.host(), None);
    let (h, _) = ok(VALID[11]);
    assert!(h.keep_alive, "1.0 with keep-alive");
    assert_eq!(h.headers.get("x-obs"), Some(&b"caf\xc3\xa9 \x80"[..]));
    let (h, _) = ok(VALID[9]);
    assert_eq!(h.method, Method::Purge);
    assert!(!h.keep_alive);
    let (h, _) = ok(VALID[10]);
    assert_eq!(h.method, Method::Other("BREW".into()));
    assert!(h.expect_continue);
    assert_eq!(h.body, BodyKind::Length(0));
    let (h, _) = ok(VALID[12]);
    assert_eq!(
        h.body,
        BodyKind::Length(3),
        "identical Content-Length values fold"
    );
}

#[test]
fn expect_continue_only_in_http11() {
    let (h, _) = ok(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n");
    assert!(!h.expect_continue);
    let (h, _) = ok(b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\n\r\n");
    assert!(h.expect_continue);
}

#[test]
fn target_forms() {
    let (h, _) = ok(VALID[8]);
    assert_eq!(h.target, "http://Example.com:81/p?q");
    assert_eq!(
        h.host(),
        Some("Example.com:81"),
        "absolute-form authority wins over Host"
    );
    assert_eq!(h.path(), "/p");
    assert_eq!(h.query(), Some("q"));
    assert_eq!(h.path_and_query(), "/p?q");
    let (h, _) = ok(b"GET http://h HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!((h.path(), h.query(), h.path_and_query()), ("/", None, "/"));
    let (h, _) = ok(VALID[7]);
    assert_eq!((h.path(), h.query()), ("*", None));
    let (h, _) = ok(b"GET /a?b?c HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!((h.path(), h.query()), ("/a", Some("b?c")));
    let (h, _) = ok(b"GET /\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(h.path(), "/\u{e9}");
}

#[test]
fn leading_empty_lines_are_skipped_and_counted() {
    let (h, n) = ok(VALID[5]);
    assert_eq!(h.path(), "/after-empty-lines");
    assert_eq!(n, VALID[5].len());
    assert_eq!(parse(b"\r\n\r\n").unwrap().map(|r| r.1), None);
}

#[test]
fn bare_lf_is_accepted() {
    let (h, n) = ok(VALID[6]);
    assert_eq!(h.headers.get_str("host"), Some("h"));
    assert_eq!(n, VALID[6].len());
}

#[test]
fn pipelined_requests_parse_one_at_a_time() {
    let two = b"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n";
    let (h1, n1) = ok(two);
    assert_eq!(h1.path(), "/1");
    let (h2, n2) = ok(&two[n1..]);
    assert_eq!(h2.path(), "/2");
    assert_eq!(n1 + n2, two.len());
}

/// Every valid request, cut at every byte offset: `None` until the head is complete,
/// then the same head as parsing it whole.
#[test]
fn shotgun_every_split() {
    for req in VALID {
        let (whole, n) = ok(req);
        for cut in 0..n {
            match parse(&req[..cut]) {
                Ok(None) => {}
                other => panic!("{:?} cut at {cut}: {other:?}", String::from_utf8_lossy(req)),
            }
        }
        for cut in n..=req.len() {
            let (h, m) = ok(&req[..cut]);
            assert_eq!(m, n);
            assert_eq!(h.method, whole.method);
            assert_eq!(h.target, whole.target);
            assert_eq!(h.headers, whole.headers);
            assert_eq!(h.body, whole.body);
            assert_eq!(h.keep_alive, whole.keep_alive);
        }
    }
}

/// Invalid requests and the exact error kind each must produce.
#[test]
fn refusals_table() {
    let table: &[(&[u8], ErrorKind)] = &[
        // Smuggling: CL with TE, conflicting or malformed CL, TE in 1.0, bad codings.
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: x\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 6\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1 0\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x10\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: \r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", NotImplemented),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity, chunked\r\n\r\n", NotImplemented),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: x-custom\r\nTransfer-Encoding: chunked\r\n\r\n", NotImplemented),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent_Length: 5\r\n\r\n", BadRequest),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer_Encoding: chunked\r\nContent-Length: 1\r\n\r\n", BadRequest),
        // Header syntax: whitespace before colon, obs-fold, controls, bad names.
        (b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length : 5\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\nHost : h\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n  folded\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n\tfolded\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\n Host: h\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x00b\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x7fb\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x01b\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\rb\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX(A): 1\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\nHost: h\r\n: empty\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n", BadRequest),
        // Targets.
        (b"GET /a\x00 HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest),
        (b"GET /a\x7f HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest),
        (b"GET /a\xff HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest),
        (b"GET /a#f HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest),
        (b"GET * HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest),
        (b"GET a HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest),
        (b"GET ftp://h/ HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest),
        (b"GET http://u:p@h/ HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest),
        (b"GET http:/// HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest),
        (b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest),
        (b"GET / x HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest),
        (b"G(T / HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest),
        (b"/ HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest),
        // Host.
        (b"GET / HTTP/1.1\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", BadRequest),
        // Versions.
        (b"GET / HTTP/2.0\r\nHost: h\r\n\r\n", VersionNotSupported),
        (b"GET / HTTP/1.2\r\nHost: h\r\n\r\n", VersionNotSupported),
        (b"GET / HTTP/0.9\r\n\r\n", VersionNotSupported),
        (b"GET / HTTP/3\r\n\r\n", VersionNotSupported),
        (b"GET /\r\n", VersionNotSupported),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", VersionNotSupported),
        (b"GET / HTTP/1.1 \r\nHost: h\r\n\r\n", BadRequest),
        (b"GET / http/1.1\r\nHost: h\r\n\r\n", BadRequest),
        (b"GET / HTTP/1.x\r\nHost: h\r\n\r\n", BadRequest),
        (b"GET / FOO\r\nHost: h\r\n\r\n", BadRequest),
        // Methods.
        (b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n", NotImplemented),
        // Limits.
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1048577\r\n\r\n", PayloadTooLarge),
        // Line endings.
        (b"GET / HTTP/1.1\rHost: h\r\n\r\n", BadRequest),
        (b"\rGET / HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest),
    ];
    for (req, want) in table {
        assert_eq!(kind(req), *want, "{:?}", String::from_utf8_lossy(req));
    }
}

#[test]
fn body_limit_boundary() {
    let (h, _) = ok(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1048576\r\n\r\n");
    assert_eq!(h.body, BodyKind::Length(1 << 20));
    let unlimited = Limits {
        max_body: None,
        ..Limits::default()
    };
    let r = parse_request(
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 18446744073709551615\r\n\r\n",
        &unlimited,
    );
    assert_eq!(r.unwrap().unwrap().0.body, BodyKind::Length(u64::MAX));
}

#[test]
fn request_line_limit_applies_before_completion() {
    let limits = Limits {
        max_request_line: 32,
        ..Limits::default()
    };
    // Exactly at the limit: fine.
    let line = format!("GET /{} HTTP/1.1", "a".repeat(32 - 14));
    assert_eq!(line.len(), 32);
    let req = format!("{line}\r\nHost: h\r\n\r\n");
    assert!(parse_request(req.as_bytes(), &limits).unwrap().is_some());
    // Unfinished and already too long: 414 without waiting for the line end.
    let long = format!("GET /{}", "a".repeat(40));
    assert_eq!(kind_with(long.as_bytes(), &limits), UriTooLong);
    // Unfinished, at the limit plus a pending CR: still waiting.
    let pending = format!("{line}\r");
    assert!(matches!(
        parse_request(pending.as_bytes(), &limits),
        Ok(None)
    ));
    // Complete and too long.
    let req = format!("GET /{} HTTP/1.1\r\nHost: h\r\n\r\n", "a".repeat(40));
    assert_eq!(kind_with(req.as_bytes(), &limits), UriTooLong);
    // Default: 8192.
    let req = format!("GET /{} HTTP/1.1\r\nHost: h\r\n\r\n", "a".repeat(9000));
    assert_eq!(kind(req.as_bytes()), UriTooLong);
}

#[test]
fn head_size_limit_applies_before_completion() {
    let limits = Limits {
        max_header_bytes: 64,
        ..Limits::default()
    };
    let mut req = b"GET / HTTP/1.1\r\nHost: h\r\nX-Pad: ".to_vec();
    req.extend(std::iter::repeat_n(b'p', 40));
    assert_eq!(kind_with(&req, &limits), HeadersTooLarge);
    req.extend_from_slice(b"\r\n\r\n");
    assert_eq!(kind_with(&req, &limits), HeadersTooLarge);
    // Endless empty lines are bounded too.
    assert_eq!(kind_with(&[b'\n'; 65], &limits), HeadersTooLarge);
    // Exactly at the limit is fine.
    let exact = b"GET / HTTP/1.1\r\nHost: h\r\nX: 01234567890123456789012345678901\r\n\r\n";
    assert_eq!(exact.len(), 64);
    assert!(parse_request(exact, &limits).unwrap().is_some());
    // Body bytes after a small head do not count.
    let mut with_body = exact.to_vec();
    with_body.extend_from_slice(&[b'b'; 100]);
    assert!(parse_request(&with_body, &limits).unwrap().is_some());
}

#[test]
fn header_count_limit() {
    let build = |n: usize| {
        let mut r = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
        for i in 1..n {
            r.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        r.extend_from_slice(b"\r\n");
        r
    };
    assert_eq!(ok(&build(100)).0.headers.len(), 100);
    assert_eq!(kind(&build(101)), HeadersTooLarge);
    // Incomplete but already over the count.
    let mut partial = build(101);
    partial.truncate(partial.len() - 2);
    assert_eq!(kind(&partial), HeadersTooLarge);
    // More slots than the stack array holds.
    let many = Limits {
        max_headers: 300,
        max_header_bytes: 1 << 20,
        ..Limits::default()
    };
    assert_eq!(
        parse_request(&build(300), &many)
            .unwrap()
            .unwrap()
            .0
            .headers
            .len(),
        300
    );
    assert_eq!(kind_with(&build(301), &many), HeadersTooLarge);
}

#[test]
fn incomplete_version_waits_then_505() {
    for cut in ["GET / H", "GET / HTTP/", "GET / HTTP/2", "GET / HTTP/2."] {
        assert_eq!(
            parse(cut.as_bytes()).map(|r| r.is_none()),
            Ok(true),
            "{cut}"
        );
    }
    assert_eq!(kind(b"GET / HTTP/2.0"), VersionNotSupported);
    assert_eq!(kind(b"GET / XTTP/"), BadRequest);
}

#[test]
fn optional_whitespace_around_values_is_not_part_of_them() {
    let (h, _) =
        ok(b"GET / HTTP/1.1\r\nHost: \t h:80 \t \r\nContent-Length:\t 7 \r\nX:  a b  \r\n\r\n");
    assert_eq!(h.headers.get_str("host"), Some("h:80"));
    assert_eq!(h.host(), Some("h:80"));
    assert_eq!(h.body, BodyKind::Length(7));
    assert_eq!(h.headers.get_str("x"), Some("a b"));
    let (h, _) = ok(b"GET / HTTP/1.1\r\nHost: h\r\nX-Empty:\r\nY: \r\n\r\n");
    assert_eq!(h.headers.get("x-empty"), Some(&b""[..]));
    assert_eq!(h.headers.get("y"), Some(&b""[..]));
}

#[test]
fn host_is_text_ascii_or_utf8() {
    // The ASCII fast path and the UTF-8 fallback (a head built by hand, as the HTTP/2
    // path builds them, need not be ASCII); bytes that are not UTF-8 give None.
    let (r, _) = ok(b"GET / HTTP/1.1\r\nHost: Example.COM:8080\r\n\r\n");
    assert_eq!(r.host(), Some("Example.COM:8080"));
    assert_eq!(as_str(b"caf\xc3\xa9"), Some("caf\u{e9}"));
    assert_eq!(as_str(b"caf\xe9"), None);
    assert_eq!(as_str(b""), Some(""));
}

fn from_fields(
    method: &str,
    target: &str,
    authority: Option<&str>,
    fields: &[(&str, &[u8])],
    has_body: bool,
    limits: &Limits,
) -> Result<RequestHead, ParseError> {
    request_from_fields(
        method,
        target,
        authority,
        || fields.iter().copied(),
        has_body,
        limits,
        None,
    )
    .map(|head| *head)
}

#[test]
fn fields_become_a_head_as_rfc_9113_says() {
    let fields: &[(&str, &[u8])] = &[
        ("host", b"other.example"),
        ("cookie", b"a=1"),
        ("accept", b"*/*"),
        ("te", b"trailers"),
        ("connection", b"close"),
        ("expect", b"100-continue"),
        ("cookie", b"b=2"),
    ];
    let limits = Limits::default();
    let h = from_fields("GET", "/x?y=1", Some("a.example"), fields, false, &limits).unwrap();
    assert_eq!(h.method, Method::Get);
    assert_eq!(h.version, Version::Http2);
    assert_eq!(h.path_query(), ("/x", Some("y=1")));
    assert_eq!(h.host(), Some("a.example"), ":authority wins over host");
    let got: Vec<_> = h.headers.iter().collect();
    let want: Vec<(&str, &[u8])> = vec![
        ("Host", b"a.example"),
        ("accept", b"*/*"),
        ("cookie", b"a=1; b=2"),
    ];
    assert_eq!(got, want);
    assert_eq!(h.body, BodyKind::Empty);
    assert!(h.keep_alive && !h.expect_continue);
    // No :authority: the host field is the Host; with neither, refused as in HTTP/1.1.
    let h = from_fields("GET", "/", None, &[("host", b"h.example")], false, &limits).unwrap();
    assert_eq!(h.host(), Some("h.example"));
    assert_eq!(
        from_fields("GET", "/", None, &[], false, &limits)
            .unwrap_err()
            .kind,
        BadRequest
    );
    // A body: chunked without a length, as it is with one, refused over the limit.
    let h = from_fields("POST", "/up", Some("a"), &[], true, &limits).unwrap();
    assert_eq!(h.body, BodyKind::Chunked);
    let cl: &[(&str, &[u8])] = &[("content-length", b"3")];
    let h = from_fields("POST", "/up", Some("a"), cl, true, &limits).unwrap();
    assert_eq!(h.body, BodyKind::Length(3));
    let small = Limits {
        max_body: Some(2),
        ..Limits::default()
    };
    let e = from_fields("POST", "/up", Some("a"), cl, true, &small).unwrap_err();
    assert_eq!(e.kind, PayloadTooLarge);
}

#[test]
fn fields_get_the_parsers_refusals() {
    let limits = Limits::default();
    let refused = |m: &str, t: &str, a: Option<&str>, f: &[(&str, &[u8])], l: &Limits| {
        from_fields(m, t, a, f, false, l).unwrap_err().kind
    };
    let a = Some("a.example");
    assert_eq!(
        refused("GET", "/", a, &[("content_length", b"1")], &limits),
        BadRequest
    );
    let two_lengths: &[(&str, &[u8])] = &[("content-length", b"1"), ("content-length", b"2")];
    assert_eq!(refused("GET", "/", a, two_lengths, &limits), BadRequest);
    assert_eq!(refused("GET", "/", Some("a b"), &[], &limits), BadRequest);
    assert_eq!(refused("GET", "/a\x01", a, &[], &limits), BadRequest);
    assert_eq!(refused("CONNECT", "/", a, &[], &limits), NotImplemented);
    let long = format!("/{}", "x".repeat(limits.max_request_line));
    assert_eq!(refused("GET", &long, a, &[], &limits), UriTooLong);
    let names: Vec<String> = (0..=limits.max_headers).map(|i| format!("x-{i}")).collect();
    let many: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"v"[..])).collect();
    assert_eq!(refused("GET", "/", a, &many, &limits), HeadersTooLarge);
    let big = vec![b'v'; limits.max_header_bytes];
    assert_eq!(
        refused("GET", "/", a, &[("x-big", &big)], &limits),
        HeadersTooLarge
    );
    // Crumbs count towards the size as the one joined field would.
    let crumb = vec![b'c'; limits.max_header_bytes / 2];
    let crumbs: &[(&str, &[u8])] = &[("cookie", &crumb), ("cookie", &crumb)];
    assert_eq!(refused("GET", "/", a, crumbs, &limits), HeadersTooLarge);
}

#[test]
fn a_reused_head_is_the_fresh_parse_in_the_same_box() {
    // Every field of the spare is rewritten: method, target, version, framing,
    // connection options, fields (Host included), whatever the earlier request held.
    let limits = Limits::default();
    let first = b"POST /a/long/first/target?x=1 HTTP/1.1\r\nHost: one\r\nContent-Length: 3\r\nExpect: 100-continue\r\nX-A: 1\r\n\r\n";
    let second = b"GET /b HTTP/1.0\r\nhost: two:8080\r\n\r\n";
    let (head, _) = parse_request_reusing(first, &limits, None)
        .unwrap()
        .unwrap();
    let at = &*head as *const RequestHead;
    let (reused, n) = parse_request_reusing(second, &limits, Some(head))
        .unwrap()
        .unwrap();
    assert_eq!(
        &*reused as *const RequestHead, at,
        "the spare's box is reused"
    );
    let (fresh, m) = parse_request(second, &limits).unwrap().unwrap();
    assert_eq!(format!("{:?}", *reused), format!("{fresh:?}"));
    assert_eq!(n, m);
    assert_eq!(reused.host(), Some("two:8080"));
    // And over HTTP/2's fields.
    let h2 = request_from_fields(
        "GET",
        "/c",
        Some("three"),
        || [("accept", &b"*/*"[..])].into_iter(),
        false,
        &limits,
        Some(reused),
    )
    .unwrap();
    assert_eq!(&*h2 as *const RequestHead, at);
    assert_eq!(h2.host(), Some("three"));
    assert_eq!(h2.target, "/c");
    assert_eq!(h2.headers.len(), 2);
    assert!(!h2.expect_continue);
}
