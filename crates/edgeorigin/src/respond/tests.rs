use super::*;

#[test]
fn cache_control_carries_rfc5861_extensions() {
    let inj = Inject::parse("max_age=5&swr=30&sie=60").unwrap();
    assert_eq!(
        cache_control(3600, &inj, false),
        "max-age=5, stale-while-revalidate=30, stale-if-error=60"
    );
    let inj = Inject::parse("swr=7").unwrap();
    assert_eq!(
        cache_control(10, &inj, false),
        "max-age=10, stale-while-revalidate=7"
    );
    assert!(Inject::parse("swr=x").is_err());
    let inj = Inject::parse("no_store=1&swr=7").unwrap();
    assert_eq!(cache_control(10, &inj, false), "no-store", "no-store wins");
}
use crate::pick::Rng;
use crate::request::{self, Parsed, MAX_HEADERS};

fn ctx() -> Ctx {
    Ctx {
        thread: 0,
        max_age: 3600,
        picker: Picker::new(&[1024], 10, crate::ObjDist::Fixed, 1),
        date: DateCache::default(),
        stats: Arc::new(Stats::new(1)),
        bodies: BodyCache::default(),
    }
}

/// Parses `raw` and answers it; `None` when the bytes are not a complete request.
fn answer(ctx: &mut Ctx, raw: &[u8]) -> Option<Reply> {
    let mut hs = [httparse::EMPTY_HEADER; MAX_HEADERS];
    match request::parse(raw, &mut hs) {
        Parsed::Complete(req) => Some(respond(ctx, &req)),
        Parsed::Invalid(inv) => Some(invalid_reply(ctx, inv)),
        Parsed::Partial => None,
    }
}

fn head_text(r: &Reply) -> String {
    String::from_utf8(r.head.clone()).unwrap()
}

#[test]
fn validators_compare_as_the_rfc_says() {
    let tag = etag(Kind::Obj, 4096, 1);
    assert_eq!(tag, "\"o1000-1\"");
    // The rules are edge-http's; this checks what the origin feeds them.
    let v = validators(Some(&tag), true);
    assert_eq!(v.etag, Some(tag.as_bytes()));
    assert!(edge_http::if_range_matches(tag.as_bytes(), &v));
    assert!(
        !edge_http::if_range_matches(format!("W/{tag}").as_bytes(), &v),
        "strong for If-Range"
    );
    assert!(edge_http::if_range_matches(LAST_MODIFIED.as_bytes(), &v));
    let no_lm = validators(Some(&tag), false);
    assert!(!edge_http::if_range_matches(
        LAST_MODIFIED.as_bytes(),
        &no_lm
    ));
}

#[test]
fn preconditions_give_412_304_or_ranges() {
    let mut c = ctx();
    let tag = etag(Kind::Obj, 4096, 1);
    let ask = |c: &mut Ctx, fields: &str| {
        let raw = format!("GET /obj/4k/1 HTTP/1.1\r\n{fields}\r\n");
        answer(c, raw.as_bytes()).unwrap()
    };
    let r = ask(&mut c, "If-Match: \"other\"\r\n");
    assert_eq!(r.status, 412);
    assert!(head_text(&r).contains("Content-Type: text/plain"));
    let r = ask(
        &mut c,
        "If-Unmodified-Since: Sun, 31 Dec 2023 00:00:00 GMT\r\n",
    );
    assert_eq!(r.status, 412);
    let r = ask(&mut c, &format!("If-Match: {tag}\r\nRange: bytes=0-9\r\n"));
    assert_eq!((r.status, r.body.map(|b| b.len)), (206, Some(10)));
    let r = ask(&mut c, &format!("If-Match: *\r\nIf-None-Match: {tag}\r\n"));
    assert_eq!(r.status, 304);
    let r = ask(&mut c, "Range: bytes=0-99, 50-4095\r\n");
    assert_eq!(
        (r.status, r.body.map(|b| b.len)),
        (200, Some(4096)),
        "overlapping ranges larger than the object: the whole object"
    );
}

#[test]
fn heads_are_well_formed_and_framed() {
    let mut c = ctx();
    let r = answer(&mut c, b"GET /obj/4k/1 HTTP/1.1\r\n\r\n").unwrap();
    let h = head_text(&r);
    assert!(
        h.starts_with("HTTP/1.1 200 OK\r\n") && h.ends_with("\r\n\r\n"),
        "{h}"
    );
    assert!(
        h.contains("Content-Length: 4096\r\n") && !h.contains("Connection:"),
        "{h}"
    );
    assert_eq!(
        (r.framing, r.close, r.body.map(|b| b.len)),
        (Framing::Length, false, Some(4096))
    );

    let r = answer(&mut c, b"HEAD /txt/4k/1?chunked=1 HTTP/1.1\r\n\r\n").unwrap();
    assert!(head_text(&r).contains("Transfer-Encoding: chunked\r\n"));
    assert!(r.body.is_none(), "HEAD has no body");

    let r = answer(&mut c, b"GET /obj/4k/1?chunked=1 HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(
        (r.framing, r.close),
        (Framing::Close, true),
        "HTTP/1.0 cannot take chunked"
    );
    assert!(!head_text(&r).contains("Content-Length"));

    let r = answer(
        &mut c,
        b"GET /obj/4k/1 HTTP/1.1\r\nIf-None-Match: \"o1000-1\"\r\n\r\n",
    )
    .unwrap();
    assert_eq!(r.status, 304);
    assert!(r.body.is_none() && !head_text(&r).contains("Content-Length"));

    let r = answer(
        &mut c,
        b"GET /obj/4k/1?reset=1&slow_bps=9&delay_ms=7 HTTP/1.1\r\n\r\n",
    )
    .unwrap();
    assert!(r.reset && r.close && head_text(&r).contains("Connection: close"));
    assert_eq!((r.slow_bps, r.delay), (Some(9), Duration::from_millis(7)));

    let r = answer(&mut c, b"GET /stats HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(r.class, None, "/stats is not counted");
    let r = answer(&mut c, b"garbage\r\n\r\n").unwrap();
    assert_eq!((r.status, r.close), (400, true));
}

#[test]
fn random_and_mutated_requests_never_panic() {
    // A stable-toolchain stand-in for a fuzzer: random bytes, and valid requests with
    // random bytes overwritten, inserted or cut, through parse and respond.
    let seeds: [&[u8]; 4] = [
        b"GET /obj/4k/1?delay_ms=0&status=206&tag=a,b&vary=X-V HTTP/1.1\r\nX-V: 1\r\nRange: bytes=0-9,-5\r\n\r\n",
        b"HEAD /txt/1m/2?chunked=1&max_age=5 HTTP/1.0\r\nIf-None-Match: *\r\n\r\n",
        b"GET /obj/10k/3 HTTP/1.1\r\nIf-Range: \"o2800-3\"\r\nRange: bytes=100-\r\nIf-Modified-Since: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n",
        b"POST /stats/reset HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    ];
    let mut c = ctx();
    let mut rng = Rng::new(7);
    for round in 0..20_000u32 {
        let mut raw = seeds[(round % 4) as usize].to_vec();
        match rng.below(4) {
            0 => {
                let n = rng.below(200) as usize;
                raw = (0..n).map(|_| rng.next_u64() as u8).collect();
            }
            1 => {
                for _ in 0..=rng.below(4) {
                    let i = rng.below(raw.len() as u64) as usize;
                    raw[i] = rng.next_u64() as u8;
                }
            }
            2 => {
                let i = rng.below(raw.len() as u64) as usize;
                let pick = b"-,=&%;\"*0123456789kmgt/ \r\n";
                raw.insert(i, pick[rng.below(pick.len() as u64) as usize]);
            }
            _ => raw.truncate(rng.below(raw.len() as u64) as usize),
        }
        if let Some(r) = answer(&mut c, &raw) {
            assert!(r.head.ends_with(b"\r\n\r\n"));
            assert!((200..=599).contains(&r.status));
        }
    }
}
