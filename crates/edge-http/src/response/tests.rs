//! Response parser tests: framing per RFC 9112 6.3, leniency, shotgun splits, refusals.

use super::*;
use crate::ErrorKind;

fn parse(s: &[u8], m: &Method) -> Result<Option<(ResponseHead, usize)>, ParseError> {
    parse_response(s, &Limits::default(), m)
}

fn ok(s: &[u8]) -> (ResponseHead, usize) {
    ok_for(s, &Method::Get)
}

fn ok_for(s: &[u8], m: &Method) -> (ResponseHead, usize) {
    match parse(s, m) {
        Ok(Some(r)) => r,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(s)),
    }
}

pub(crate) const VALID: &[&[u8]] = &[
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"x\"\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"HTTP/1.0 200 OK\r\nServer: old\r\n\r\nuntil close",
    b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    b"HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1  200  Fine\r\nX-Fold: a\r\n b\r\nContent-Length : 2\r\n\r\nok",
    b"\r\nHTTP/1.1 200 OK\nContent-Length: 1\n\nx",
];

#[test]
fn content_length_response() {
    let (h, n) = ok(VALID[0]);
    assert_eq!(
        (h.version, h.status, h.reason.as_str()),
        (Version::Http11, 200, "OK")
    );
    assert_eq!(h.body, BodyKind::Length(5));
    assert!(h.keep_alive);
    assert!(!h.is_interim());
    assert_eq!(&VALID[0][n..], b"hello");
    assert_eq!(h.headers.get_str("etag"), Some("\"x\""));
}

#[test]
fn framing_per_rfc9112_6_3() {
    assert_eq!(ok(VALID[1]).0.body, BodyKind::Chunked);
    let (h, _) = ok(VALID[2]);
    assert_eq!(h.body, BodyKind::CloseDelimited);
    assert!(!h.keep_alive);
    let (h, _) = ok(b"HTTP/1.1 200 OK\r\n\r\nbody");
    assert_eq!(h.body, BodyKind::CloseDelimited);
    assert!(!h.keep_alive, "close-delimited bodies end the connection");
    let (h, _) = ok(VALID[3]);
    assert_eq!(h.body, BodyKind::Empty);
    assert!(h.keep_alive);
    let (h, n) = ok(VALID[4]);
    assert!(h.is_interim());
    assert_eq!(h.body, BodyKind::Empty);
    let (h, _) = ok(&VALID[4][n..]);
    assert_eq!((h.status, h.body), (204, BodyKind::Empty));
    // HEAD: whatever the framing headers say, no body follows.
    let (h, _) = ok_for(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
        &Method::Head,
    );
    assert_eq!(h.body, BodyKind::Empty);
    assert!(h.keep_alive);
    let (h, _) = ok_for(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        &Method::Head,
    );
    assert_eq!(h.body, BodyKind::Empty);
    let (h, _) = ok_for(b"HTTP/1.1 200 OK\r\n\r\n", &Method::Head);
    assert!(
        h.keep_alive,
        "no close-delimited guess for a bodiless response"
    );
    assert_eq!(ok(VALID[5]).0.body, BodyKind::Length(0));
}

#[test]
fn te_and_cl_together_mean_chunked_and_no_reuse() {
    let (h, _) = ok(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(h.body, BodyKind::Chunked);
    assert!(!h.keep_alive);
    let (h, _) = ok(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: zz\r\n\r\n");
    assert_eq!(h.body, BodyKind::Chunked);
    assert!(!h.keep_alive);
    let (h, _) =
        ok(b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(h.body, BodyKind::Chunked);
    assert!(!h.keep_alive, "TE in HTTP/1.0 is faulty framing");
}

#[test]
fn persistence() {
    let (h, _) = ok(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    assert!(!h.keep_alive);
    let (h, _) = ok(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n");
    assert!(h.keep_alive);
    let (h, _) = ok(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
    assert!(!h.keep_alive);
}

#[test]
fn lenient_where_allowed() {
    let (h, n) = ok(VALID[6]);
    assert_eq!((h.status, h.reason.as_str()), (200, "Fine"));
    assert_eq!(
        h.headers.get("x-fold"),
        Some(&b"a   b"[..]),
        "obs-fold replaced by spaces"
    );
    assert_eq!(
        h.body,
        BodyKind::Length(2),
        "whitespace before colon removed"
    );
    assert_eq!(
        h.headers.iter().nth(1).map(|(n, _)| n),
        Some("Content-Length")
    );
    assert_eq!(&VALID[6][n..], b"ok");
    let (h, _) = ok(VALID[7]);
    assert_eq!(h.body, BodyKind::Length(1));
    let (h, _) = ok(b"HTTP/1.1 200 \xe9t\xe9\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(h.reason, "", "non-ASCII reason dropped");
    let (h, _) = ok(b"HTTP/1.1 299 Whatever\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(h.status, 299);
}

#[test]
fn folded_framing_headers_are_read_after_the_fix_up() {
    let (h, _) =
        ok(b"HTTP/1.1 200 OK\r\nConnection: keep-alive,\r\n close\r\nContent-Length: 0\r\n\r\n");
    assert!(!h.keep_alive);
}

#[test]
fn shotgun_every_split() {
    for res in VALID {
        let (whole, n) = ok(res);
        for cut in 0..n {
            match parse(&res[..cut], &Method::Get) {
                Ok(None) => {}
                other => panic!("{:?} cut at {cut}: {other:?}", String::from_utf8_lossy(res)),
            }
        }
        let (h, m) = ok(&res[..n]);
        assert_eq!(m, n);
        assert_eq!(
            (h.status, h.body, h.keep_alive),
            (whole.status, whole.body, whole.keep_alive)
        );
        assert_eq!(h.headers, whole.headers);
    }
}

#[test]
fn final_coding_not_chunked_reads_until_close() {
    // RFC 9112 6.3 rule 4, even with a Content-Length beside it, and never reused.
    for res in [
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\nContent-Length: 3\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: x-custom\r\nConnection: keep-alive\r\n\r\n",
    ] {
        let (h, _) = parse(res, &Method::Get)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(res)))
            .expect("complete");
        assert_eq!(
            h.body,
            BodyKind::CloseDelimited,
            "{:?}",
            String::from_utf8_lossy(res)
        );
        assert!(!h.keep_alive);
    }
    // A HEAD or a 304 still has no body.
    let h = parse(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        &Method::Head,
    )
    .unwrap()
    .unwrap();
    assert_eq!(h.0.body, BodyKind::Empty);
}

#[test]
fn refusals_are_bad_upstream() {
    let table: &[&[u8]] = &[
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5 5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: \r\n\r\n",
        b"HTTP/2.0 200 OK\r\n\r\n",
        b"HTTP/1.2 200 OK\r\n\r\n",
        b"ICY 200 OK\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"HTTP/1.1 099 Low\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Name: v\r\n\r\n",
        b"HTTP/1.1 200 OK\rX: y\r\n\r\n",
    ];
    for res in table {
        let e = parse(res, &Method::Get).expect_err(&String::from_utf8_lossy(res));
        assert_eq!(
            e.kind,
            ErrorKind::BadUpstream,
            "{:?}",
            String::from_utf8_lossy(res)
        );
        assert_eq!(e.status(), 502);
    }
}

#[test]
fn limits() {
    let small = Limits {
        max_header_bytes: 40,
        max_headers: 2,
        ..Limits::default()
    };
    let big = b"HTTP/1.1 200 OK\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let e = parse_response(big, &small, &Method::Get).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadUpstream);
    let many = b"HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
    let roomy = Limits {
        max_headers: 2,
        ..Limits::default()
    };
    assert_eq!(
        parse_response(many, &roomy, &Method::Get).unwrap_err().kind,
        ErrorKind::BadUpstream
    );
    // max_body does not apply to responses.
    let tiny_body = Limits {
        max_body: Some(1),
        ..Limits::default()
    };
    let r = parse_response(
        b"HTTP/1.1 200 OK\r\nContent-Length: 999999\r\n\r\n",
        &tiny_body,
        &Method::Get,
    );
    assert_eq!(r.unwrap().unwrap().0.body, BodyKind::Length(999_999));
}
