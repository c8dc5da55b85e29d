//! Objects over real HTTP: exact sizes, deterministic bytes across requests and
//! processes, checksums, validators, conditional requests, ranges, pipelining, errors,
//! `/obj/rand` and `/stats`.

mod common;

use common::{multipart_parts, obj, origin, xxh3_hex};
use edge_testkit::{get, Client};

#[test]
fn exact_sizes_for_every_size_syntax() {
    let (_p, addr) = origin(&[]);
    for (text, n) in [
        ("0", 0usize),
        ("1", 1),
        ("1000", 1000),
        ("4k", 4096),
        ("10k", 10240),
        ("100k", 102400),
        ("1m", 1 << 20),
        ("1048583", (1 << 20) + 7),
    ] {
        for kind in ["obj", "txt"] {
            let r = get(addr, &format!("/{kind}/{text}/1"), &[]);
            assert_eq!(r.status, 200, "{kind}/{text}");
            assert_eq!(r.body.len(), n, "{kind}/{text}");
            assert_eq!(r.header("content-length"), Some(n.to_string().as_str()));
        }
    }
}

#[test]
fn identical_bytes_across_requests_and_processes() {
    let (_a, addr_a) = origin(&[]);
    let (_b, addr_b) = origin(&["--max-age", "5"]);
    let mut ca = Client::connect(addr_a);
    for path in ["/obj/100k/42", "/txt/100k/42", "/obj/12345/7"] {
        let first = ca.get(path, &[]);
        let again = ca.get(path, &[]);
        let other = get(addr_b, path, &[]);
        assert_eq!(
            first.body, again.body,
            "{path}: same process, same connection"
        );
        assert_eq!(first.body, other.body, "{path}: another process");
        assert_eq!(first.header("etag"), other.header("etag"));
        assert_eq!(first.header("x-checksum"), other.header("x-checksum"));
    }
    // And the library produces the same bytes as the server.
    assert_eq!(get(addr_a, "/obj/100k/42", &[]).body, obj(100 << 10, 42));
}

#[test]
fn different_ids_sizes_and_kinds_differ() {
    let (_p, addr) = origin(&[]);
    let a = get(addr, "/obj/10k/1", &[]);
    let b = get(addr, "/obj/10k/2", &[]);
    let c = get(addr, "/txt/10k/1", &[]);
    let d = get(addr, "/obj/20k/1", &[]);
    assert_ne!(a.body, b.body);
    assert_ne!(a.body, c.body);
    assert_ne!(
        a.body[..],
        d.body[..10240],
        "a size is not a prefix of a bigger size"
    );
    assert_ne!(a.header("etag"), b.header("etag"));
    assert_ne!(a.header("etag"), c.header("etag"));
    // Non-numeric ids are objects too (hashed), distinct from each other.
    let x = get(addr, "/obj/1k/logo.png", &[]);
    let y = get(addr, "/obj/1k/logo.gif", &[]);
    assert_eq!((x.status, x.body.len()), (200, 1024));
    assert_ne!(x.body, y.body);
}

#[test]
fn x_checksum_matches_the_body() {
    let (_p, addr) = origin(&[]);
    for path in [
        "/obj/0/1",
        "/obj/1/1",
        "/obj/4k/9",
        "/obj/1m/3",
        "/txt/1k/1",
        "/txt/300001/2",
    ] {
        let r = get(addr, path, &[]);
        let ck = r.header("x-checksum").expect("X-Checksum");
        assert_eq!(ck.len(), 16);
        assert!(
            ck.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{ck}"
        );
        assert_eq!(ck, xxh3_hex(&r.body), "{path}");
    }
    assert_eq!(
        get(addr, "/obj/4k/9", &[]).header("x-checksum").unwrap(),
        format!("{:016x}", edgeorigin::checksum(4096, 9))
    );
}

#[test]
fn headers_of_an_object() {
    let (_p, addr) = origin(&["--max-age", "120"]);
    let r = get(addr, "/obj/4k/1", &[]);
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(r.header("cache-control"), Some("max-age=120"));
    assert_eq!(
        r.header("last-modified"),
        Some("Mon, 01 Jan 2024 00:00:00 GMT")
    );
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert!(r.header("date").is_some_and(|d| d.ends_with("GMT")));
    let etag = r.header("etag").unwrap();
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && !etag.starts_with("W/"),
        "strong: {etag}"
    );
    let t = get(addr, "/txt/4k/1", &[]);
    assert_eq!(t.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(t.body.is_ascii());
}

#[test]
fn head_has_the_headers_and_no_body() {
    let (_p, addr) = origin(&[]);
    let mut c = Client::connect(addr);
    let h = c.request("HEAD", "/obj/10k/5", &[]);
    let g = c.get("/obj/10k/5", &[]);
    assert_eq!(h.status, 200);
    assert!(h.body.is_empty());
    for name in [
        "content-length",
        "etag",
        "x-checksum",
        "last-modified",
        "cache-control",
    ] {
        assert_eq!(h.header(name), g.header(name), "{name}");
    }
    assert_eq!(
        g.body.len(),
        10240,
        "the connection stayed framed after HEAD"
    );
}

#[test]
fn conditional_requests_give_304() {
    let (_p, addr) = origin(&[]);
    let mut c = Client::connect(addr);
    let full = c.get("/obj/4k/1", &[]);
    let etag = full.header("etag").unwrap().to_string();

    let r = c.get("/obj/4k/1", &[&format!("If-None-Match: {etag}")]);
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty() && r.header("content-length").is_none());
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    assert_eq!(r.header("cache-control"), Some("max-age=3600"));

    assert_eq!(
        c.get("/obj/4k/1", &[&format!("If-None-Match: \"x\", W/{etag}")])
            .status,
        304
    );
    assert_eq!(c.get("/obj/4k/1", &["If-None-Match: *"]).status, 304);
    assert_eq!(
        c.get("/obj/4k/1", &["If-None-Match: \"other\""]).status,
        200
    );
    assert_eq!(
        c.get("/obj/4k/2", &[&format!("If-None-Match: {etag}")])
            .status,
        200,
        "another id"
    );

    assert_eq!(
        c.get(
            "/obj/4k/1",
            &["If-Modified-Since: Mon, 01 Jan 2024 00:00:00 GMT"]
        )
        .status,
        304
    );
    assert_eq!(
        c.get(
            "/obj/4k/1",
            &["If-Modified-Since: Tue, 02 Jan 2024 00:00:00 GMT"]
        )
        .status,
        304
    );
    assert_eq!(
        c.get(
            "/obj/4k/1",
            &["If-Modified-Since: Sun, 31 Dec 2023 23:59:59 GMT"]
        )
        .status,
        200
    );
    assert_eq!(
        c.get("/obj/4k/1", &["If-Modified-Since: garbage"]).status,
        200
    );
    // If-None-Match wins over If-Modified-Since (RFC 9110 §13.2.2).
    let r = c.get(
        "/obj/4k/1",
        &[
            "If-None-Match: \"other\"",
            "If-Modified-Since: Tue, 02 Jan 2024 00:00:00 GMT",
        ],
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 4096);
    let h = c.request("HEAD", "/obj/4k/1", &[&format!("If-None-Match: {etag}")]);
    assert_eq!(h.status, 304);
}

#[test]
fn single_ranges_give_206_with_the_right_slice() {
    let (_p, addr) = origin(&[]);
    let whole = obj(10000, 3);
    let mut c = Client::connect(addr);
    for (range, start, end) in [
        ("bytes=0-0", 0usize, 1usize),
        ("bytes=0-99", 0, 100),
        ("bytes=9990-", 9990, 10000),
        ("bytes=-10", 9990, 10000),
        ("bytes=5000-99999", 5000, 10000),
        ("bytes=1234-5677", 1234, 5678),
    ] {
        let r = c.get("/obj/10000/3", &[&format!("Range: {range}")]);
        assert_eq!(r.status, 206, "{range}");
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes {start}-{}/10000", end - 1).as_str())
        );
        assert_eq!(
            r.header("content-length"),
            Some((end - start).to_string().as_str())
        );
        assert_eq!(r.body, &whole[start..end], "{range}");
    }
    // Text ranges too.
    let t = c.get("/txt/10000/3", &[]);
    let r = c.get("/txt/10000/3", &["Range: bytes=77-160"]);
    assert_eq!(r.body, &t.body[77..161]);
}

#[test]
fn multiple_ranges_give_multipart() {
    let (_p, addr) = origin(&[]);
    let whole = obj(10000, 4);
    let r = get(addr, "/obj/10000/4", &["Range: bytes=0-9, 100-199, -5"]);
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap();
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .expect(ct);
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );
    let parts = multipart_parts(&r.body, boundary);
    assert_eq!(parts.len(), 3);
    assert_eq!(
        parts[0],
        ("bytes 0-9/10000".to_string(), whole[0..10].to_vec())
    );
    assert_eq!(
        parts[1],
        ("bytes 100-199/10000".to_string(), whole[100..200].to_vec())
    );
    assert_eq!(
        parts[2],
        ("bytes 9995-9999/10000".to_string(), whole[9995..].to_vec())
    );
}

#[test]
fn unsatisfiable_and_ignored_ranges() {
    let (_p, addr) = origin(&[]);
    let mut c = Client::connect(addr);
    let r = c.get("/obj/1000/1", &["Range: bytes=1000-"]);
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */1000"));
    for ignored in ["bytes=5-2", "items=0-1", "bytes=x-y"] {
        let r = c.get("/obj/1000/1", &[&format!("Range: {ignored}")]);
        assert_eq!((r.status, r.body.len()), (200, 1000), "{ignored}");
    }
    // If-Range: a matching ETag applies the range, a stale one sends the whole object.
    let etag = c
        .get("/obj/1000/1", &[])
        .header("etag")
        .unwrap()
        .to_string();
    let r = c.get(
        "/obj/1000/1",
        &["Range: bytes=0-9", &format!("If-Range: {etag}")],
    );
    assert_eq!(r.status, 206);
    let r = c.get("/obj/1000/1", &["Range: bytes=0-9", "If-Range: \"stale\""]);
    assert_eq!((r.status, r.body.len()), (200, 1000));
    // HEAD ignores Range (range handling is defined for GET only).
    let h = c.request("HEAD", "/obj/1000/1", &["Range: bytes=0-9"]);
    assert_eq!(h.status, 200);
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (_p, addr) = origin(&[]);
    let mut c = Client::connect(addr);
    c.send(
        b"GET /obj/1k/1 HTTP/1.1\r\nHost: t\r\n\r\nHEAD /obj/2k/2 HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /txt/3k/3 HTTP/1.1\r\nHost: t\r\n\r\nGET /nope HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    let a = c.read_response(false);
    let b = c.read_response(true);
    let t = c.read_response(false);
    let n = c.read_response(false);
    assert_eq!((a.status, a.body.len()), (200, 1024));
    assert_eq!((b.status, b.header("content-length")), (200, Some("2048")));
    assert_eq!((t.status, t.body.len()), (200, 3072));
    assert_eq!(n.status, 404);
    assert_eq!(c.get("/obj/1k/1", &[]).body, a.body);
}

#[test]
fn bad_requests_are_answered_and_closed() {
    let (_p, addr) = origin(&[]);
    let mut c = Client::connect(addr);
    c.send(b"\x16\x03\x01 not http at all\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 400);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.is_closed());

    let mut c = Client::connect(addr);
    let huge = format!(
        "GET /obj/1k/1 HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    c.send(huge.as_bytes());
    assert_eq!(c.read_response(false).status, 431);
    assert!(c.is_closed());

    let mut c = Client::connect(addr);
    assert_eq!(c.get("/obj/1x/1", &[]).status, 400, "bad size");
    assert_eq!(c.get("/obj/2t/1", &[]).status, 400, "above the size limit");
    assert_eq!(c.get("/obj/1k", &[]).status, 404);
    assert_eq!(c.get("/elsewhere", &[]).status, 404);
    let r = c.request("DELETE", "/obj/1k/1", &[]);
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD")));
    assert_eq!(
        c.get("/obj/1k/1", &[]).status,
        200,
        "still open after 4xx answers"
    );

    // HTTP/1.0 without keep-alive closes; with it, stays open.
    let mut c = Client::connect(addr);
    c.send(b"GET /obj/1k/1 HTTP/1.0\r\n\r\n");
    assert_eq!(c.read_response(false).header("connection"), Some("close"));
    assert!(c.is_closed());
    let mut c = Client::connect(addr);
    c.send(b"GET /obj/1k/1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(
        c.read_response(false).header("connection"),
        Some("keep-alive")
    );
    assert_eq!(c.get("/obj/1k/1", &[]).status, 200);
}

#[test]
fn request_bodies_are_skipped_and_framing_kept() {
    let (_p, addr) = origin(&[]);
    let mut c = Client::connect(addr);
    c.send(
        b"POST /obj/1k/1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /obj/1k/2 HTTP/1.1\r\n\r\n",
    );
    assert_eq!(c.read_response(false).status, 405);
    let r = c.read_response(false);
    assert_eq!((r.status, r.body.len()), (200, 1024));
}

#[test]
fn obj_rand_picks_by_distribution() {
    let (_p, addr) = origin(&["--sizes", "2k,3k", "--count", "5", "--obj-dist", "uniform"]);
    let mut c = Client::connect(addr);
    let mut sizes = std::collections::BTreeSet::new();
    for _ in 0..60 {
        let r = c.get("/obj/rand", &[]);
        let size: u64 = r.header("x-obj-size").unwrap().parse().unwrap();
        let id: u64 = r.header("x-obj-id").unwrap().parse().unwrap();
        assert!(id < 5);
        assert_eq!(r.body, obj(size, id), "the body is that object");
        assert_eq!(r.header("x-checksum").unwrap(), xxh3_hex(&r.body));
        sizes.insert(size);
    }
    assert_eq!(sizes.into_iter().collect::<Vec<_>>(), vec![2048, 3072]);
    // One URL, a different object each time: not cacheable unless the request says so.
    assert_eq!(
        c.get("/obj/rand", &[]).header("cache-control"),
        Some("no-store")
    );
    assert_eq!(
        c.get("/obj/rand?max_age=9", &[]).header("cache-control"),
        Some("max-age=9")
    );

    let (_q, addr) = origin(&["--sizes", "2k,3k", "--count", "5", "--obj-dist", "fixed"]);
    for _ in 0..10 {
        assert_eq!(
            get(addr, "/obj/rand", &[]).header("x-obj-size"),
            Some("2048")
        );
    }
    let (_z, addr) = origin(&["--sizes", "1k", "--count", "1000", "--obj-dist", "zipf"]);
    let mut c = Client::connect(addr);
    let low = (0..200)
        .filter(|_| {
            c.get("/obj/rand", &[])
                .header("x-obj-id")
                .unwrap()
                .parse::<u64>()
                .unwrap()
                < 10
        })
        .count();
    // Zipf(1) over 1000 ids puts ~39% of draws on ids 0..10 (uniform: 1%).
    assert!(low > 40, "{low} of 200 draws on the 10 most popular ids");
}

#[test]
fn stats_count_requests_and_bytes_per_class() {
    let (_p, addr) = origin(&[]);
    let mut c = Client::connect(addr);
    c.get("/obj/1k/1", &[]);
    c.get("/obj/2k/1", &[]);
    c.get("/txt/1k/1", &[]);
    c.get("/nope", &[]);
    c.request("HEAD", "/obj/1k/1", &[]);
    let s = c.get("/stats", &[]);
    assert_eq!(s.header("content-type"), Some("application/json"));
    let json = String::from_utf8(s.body).unwrap();
    assert!(json.starts_with("{\"requests\":5,\"bytes\":"), "{json}");
    assert!(
        json.contains("\"obj\":{\"requests\":3,\"bytes\":3072}"),
        "{json}"
    );
    assert!(
        json.contains("\"txt\":{\"requests\":1,\"bytes\":1024}"),
        "{json}"
    );
    assert!(
        json.contains("\"by_status\":{\"200\":4,\"404\":1}"),
        "{json}"
    );
    // /stats itself is not counted; ?reset=1 answers, then zeroes.
    let again = String::from_utf8(c.get("/stats?reset=1", &[]).body).unwrap();
    assert!(again.starts_with("{\"requests\":5,"), "{again}");
    let zero = String::from_utf8(c.get("/stats", &[]).body).unwrap();
    assert!(zero.starts_with("{\"requests\":0,\"bytes\":0,"), "{zero}");
    c.get("/obj/1k/1", &[]);
    let r = c.request("POST", "/stats/reset", &["Content-Length: 0"]);
    assert_eq!(r.status, 200);
    assert!(String::from_utf8(r.body)
        .unwrap()
        .starts_with("{\"requests\":1,"));
    assert!(String::from_utf8(c.get("/stats", &[]).body)
        .unwrap()
        .starts_with("{\"requests\":0,"));
}

#[test]
fn repeated_big_objects_stay_identical() {
    // The first request generates, the second moves the object into a memfd, later ones
    // are sent with sendfile: the bytes must not change along the way.
    let (_p, addr) = origin(&[]);
    let expect = obj(300 << 10, 5);
    let mut c = Client::connect(addr);
    for round in 0..4 {
        let r = c.get("/obj/300k/5", &[]);
        assert_eq!(r.body, expect, "round {round}");
        let r = c.get("/obj/300k/5", &["Range: bytes=100000-100099"]);
        assert_eq!(r.body, &expect[100_000..100_100], "range, round {round}");
        let r = c.get("/obj/300k/5?chunked=1", &[]);
        assert_eq!(r.body, expect, "chunked, round {round}");
    }
    // Pipelined behind a small reply, the sendfile path keeps order and framing.
    c.send(b"GET /obj/1k/1 HTTP/1.1\r\n\r\nGET /obj/300k/5 HTTP/1.1\r\n\r\nGET /obj/2k/1 HTTP/1.1\r\n\r\n");
    assert_eq!(c.read_response(false).body, obj(1024, 1));
    assert_eq!(c.read_response(false).body, expect);
    assert_eq!(c.read_response(false).body, obj(2048, 1));
}
