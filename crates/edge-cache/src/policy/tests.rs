//! Policy tables: every directive, the precedence order, Age/Date math and heuristics.

use super::*;
use edge_http::fmt_http_date;
use std::time::UNIX_EPOCH;

fn t0() -> SystemTime {
    // A whole second, so HTTP dates (1 s resolution) round-trip exactly.
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn hdrs(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in pairs {
        h.append(n.to_string(), v.as_bytes().to_vec());
    }
    h
}

fn date(offset: i64) -> String {
    let t = if offset >= 0 {
        t0() + Duration::from_secs(offset as u64)
    } else {
        t0() - Duration::from_secs((-offset) as u64)
    };
    fmt_http_date(t)
}

fn check(resp: &[(&str, &str)]) -> Result<Freshness, NoCacheReason> {
    check_with(&[], 200, resp, &PolicyConfig::default())
}

fn check_with(
    req: &[(&str, &str)],
    status: u16,
    resp: &[(&str, &str)],
    cfg: &PolicyConfig,
) -> Result<Freshness, NoCacheReason> {
    storable(
        &Method::Get,
        &hdrs(req),
        status,
        &hdrs(resp),
        cfg,
        t0(),
        t0(),
    )
}

fn lifetime(resp: &[(&str, &str)]) -> u64 {
    check(resp).expect("storable").lifetime.as_secs()
}

#[test]
fn precedence_table() {
    let d = date(0);
    let exp = date(300);
    let lm = date(-10_000);
    // (headers, expected lifetime in seconds)
    let cases: Vec<(Vec<(&str, &str)>, u64)> = vec![
        (
            vec![
                ("cache-control", "s-maxage=10, max-age=20"),
                ("expires", &exp),
            ],
            10,
        ),
        (vec![("cache-control", "max-age=20"), ("expires", &exp)], 20),
        (vec![("date", &d), ("expires", &exp)], 300),
        (vec![("expires", &exp)], 300), // Date absent: relative to response time
        (vec![("date", &d), ("last-modified", &lm)], 1000), // heuristic 10%
        (vec![("cache-control", "max-age=\"30\"")], 30),
        (vec![("Cache-Control", "MAX-AGE=40")], 40),
        (
            vec![("cache-control", "max-age=99999999999")],
            MAX_DELTA_SECONDS,
        ),
        (
            vec![
                ("cache-control", "max-age=5"),
                ("cache-control", "max-age=7"),
            ],
            5,
        ),
    ];
    for (h, want) in cases {
        assert_eq!(lifetime(&h), want, "{h:?}");
    }
}

#[test]
fn invalid_values_mean_stale() {
    // Invalid max-age or Expires: stored (validator present) with zero lifetime.
    let f = check(&[("cache-control", "max-age=abc"), ("etag", "\"a\"")]).unwrap();
    assert_eq!(f.lifetime, Duration::ZERO);
    let f = check(&[("expires", "0"), ("etag", "\"a\"")]).unwrap();
    assert_eq!(f.lifetime, Duration::ZERO);
    // ...and without a validator there is nothing worth storing.
    assert_eq!(check(&[("expires", "0")]), Err(NoCacheReason::ZeroLifetime));
    assert_eq!(
        check(&[("cache-control", "max-age=0")]),
        Err(NoCacheReason::ZeroLifetime)
    );
}

#[test]
fn refusals_table() {
    let cases: Vec<(Vec<(&str, &str)>, NoCacheReason)> = vec![
        (
            vec![("cache-control", "no-store, max-age=60")],
            NoCacheReason::ResponseNoStore,
        ),
        (
            vec![("cache-control", "private, max-age=60")],
            NoCacheReason::Private,
        ),
        (
            vec![("cache-control", "private=\"x\", max-age=60")],
            NoCacheReason::Private,
        ),
        (
            vec![("cache-control", "max-age=60"), ("set-cookie", "a=b")],
            NoCacheReason::SetCookie,
        ),
        (
            vec![("cache-control", "max-age=60"), ("vary", "Origin, *")],
            NoCacheReason::VaryStar,
        ),
        (vec![], NoCacheReason::NoFreshness),
    ];
    for (h, want) in cases {
        assert_eq!(check(&h), Err(want), "{h:?}");
    }
}

#[test]
fn methods_and_statuses() {
    let cc = hdrs(&[("cache-control", "max-age=60")]);
    let cfg = PolicyConfig::default();
    for m in [
        Method::Post,
        Method::Put,
        Method::Delete,
        Method::Other("X".into()),
    ] {
        assert_eq!(
            storable(&m, &HeaderMap::new(), 200, &cc, &cfg, t0(), t0()),
            Err(NoCacheReason::Method)
        );
    }
    assert!(storable(&Method::Head, &HeaderMap::new(), 200, &cc, &cfg, t0(), t0()).is_ok());
    for s in [100, 101, 206, 304, 600, 999] {
        assert_eq!(
            storable(&Method::Get, &HeaderMap::new(), s, &cc, &cfg, t0(), t0()),
            Err(NoCacheReason::Status),
            "status {s}"
        );
    }
    // Explicit freshness makes any other final status storable (RFC 9111 3).
    for s in [200, 301, 302, 404, 500, 503] {
        assert!(storable(&Method::Get, &HeaderMap::new(), s, &cc, &cfg, t0(), t0()).is_ok());
    }
}

#[test]
fn heuristic_only_for_heuristic_statuses() {
    let lm = date(-10_000);
    let h = [("date", date(0)), ("last-modified", lm)];
    let h: Vec<(&str, &str)> = h.iter().map(|(a, b)| (*a, b.as_str())).collect();
    let cfg = PolicyConfig::default();
    assert_eq!(
        check_with(&[], 404, &h, &cfg).unwrap().lifetime.as_secs(),
        1000
    );
    assert_eq!(
        check_with(&[], 302, &h, &cfg),
        Err(NoCacheReason::NoFreshness)
    );
    assert_eq!(
        check_with(&[], 500, &h, &cfg),
        Err(NoCacheReason::NoFreshness)
    );
    // Capped.
    let old = date(-100_000_000);
    let h2 = [("date", date(0)), ("last-modified", old)];
    let h2: Vec<(&str, &str)> = h2.iter().map(|(a, b)| (*a, b.as_str())).collect();
    assert_eq!(
        check_with(&[], 200, &h2, &cfg).unwrap().lifetime,
        MAX_HEURISTIC
    );
}

#[test]
fn cache_valid_sits_between_explicit_and_heuristic() {
    let cfg = PolicyConfig {
        cache_valid: vec![
            (StatusMatch::Any, Duration::from_secs(5)),
            (StatusMatch::Code(200), Duration::from_secs(600)),
        ],
        ..Default::default()
    };
    let lm = date(-10_000);
    let d = date(0);
    // cache_valid beats the heuristic; an exact code beats `any`.
    let f = check_with(&[], 200, &[("date", &d), ("last-modified", &lm)], &cfg).unwrap();
    assert_eq!(f.lifetime.as_secs(), 600);
    assert_eq!(
        check_with(&[], 302, &[], &cfg).unwrap().lifetime.as_secs(),
        5
    );
    // Explicit headers beat cache_valid.
    let f = check_with(&[], 200, &[("cache-control", "max-age=7")], &cfg).unwrap();
    assert_eq!(f.lifetime.as_secs(), 7);
    // ...but do not override refusals.
    assert_eq!(
        check_with(&[], 200, &[("cache-control", "no-store")], &cfg),
        Err(NoCacheReason::ResponseNoStore)
    );
}

#[test]
fn set_cookie_when_configured() {
    let cfg = PolicyConfig {
        cache_set_cookie: true,
        ..Default::default()
    };
    let resp = [("cache-control", "max-age=60"), ("set-cookie", "a=b")];
    assert!(check_with(&[], 200, &resp, &cfg).is_ok());
    // The cookie itself is never part of the stored header block.
    let h = hdrs(&resp);
    let block = header_block(&h);
    assert_eq!(block, b"cache-control: max-age=60\r\n");
}

#[test]
fn server_header_is_not_stored() {
    // A hit writes our own `Server` before the block; the origin's must not follow it.
    let h = hdrs(&[("Server", "origin/1.0"), ("content-type", "text/plain")]);
    assert_eq!(header_block(&h), b"content-type: text/plain\r\n");
}

#[test]
fn authorization_needs_explicit_permission() {
    let cfg = PolicyConfig::default();
    let auth = [("authorization", "Bearer x")];
    assert_eq!(
        check_with(&auth, 200, &[("cache-control", "max-age=60")], &cfg),
        Err(NoCacheReason::Authorization)
    );
    for ok in [
        "public, max-age=60",
        "s-maxage=60",
        "must-revalidate, max-age=60",
    ] {
        assert!(
            check_with(&auth, 200, &[("cache-control", ok)], &cfg).is_ok(),
            "{ok}"
        );
    }
}

#[test]
fn recorded_flags_and_stale_windows() {
    let f = check(&[(
        "cache-control",
        "max-age=60, no-cache, must-revalidate, stale-while-revalidate=30, stale-if-error=600",
    )])
    .unwrap();
    assert!(f.no_cache && f.must_revalidate);
    assert_eq!(f.stale_while_revalidate.as_secs(), 30);
    assert_eq!(f.stale_if_error.as_secs(), 600);
    assert!(
        check(&[("cache-control", "max-age=1, proxy-revalidate")])
            .unwrap()
            .must_revalidate
    );
}

#[test]
fn age_and_date_math() {
    let req_t = t0();
    let resp_t = t0() + Duration::from_secs(2); // 2 s response delay
                                                // Age header plus response delay.
    let h = hdrs(&[("age", "100"), ("date", &date(2))]);
    assert_eq!(initial_age(&h, req_t, resp_t).as_secs(), 102);
    // Apparent age from an old Date wins when larger.
    let h = hdrs(&[("date", &date(-500))]);
    assert_eq!(initial_age(&h, req_t, resp_t).as_secs(), 502);
    // A Date in the future never gives a negative age.
    let h = hdrs(&[("date", &date(1000))]);
    assert_eq!(initial_age(&h, req_t, resp_t).as_secs(), 2);
    // An Age that is not delta-seconds is ignored, as if absent (RFC 9111 5.1).
    let h = hdrs(&[("age", "-5")]);
    assert_eq!(initial_age(&h, req_t, req_t).as_secs(), 0);
}

fn meta_with(f: Freshness) -> ObjectMeta {
    let mut m = ObjectMeta::new("k", 200, t0());
    m.freshness = f;
    m
}

#[test]
fn freshness_and_stale_serving() {
    let m = meta_with(Freshness {
        lifetime: Duration::from_secs(60),
        initial_age: Duration::from_secs(10),
        stale_while_revalidate: Duration::from_secs(30),
        stale_if_error: Duration::from_secs(300),
        ..Default::default()
    });
    let at = |s: u64| t0() + Duration::from_secs(s);
    assert_eq!(age(&m, at(5)).as_secs(), 15);
    assert!(is_fresh(&m, at(49)));
    assert!(!is_fresh(&m, at(50)));
    assert!(can_serve_stale(&m, at(80), StaleReason::Updating));
    assert!(!can_serve_stale(&m, at(81), StaleReason::Updating));
    assert!(can_serve_stale(&m, at(350), StaleReason::Error));
    assert!(!can_serve_stale(&m, at(351), StaleReason::Error));
    assert!(can_serve_stale_with(
        &m,
        at(10_000),
        StaleReason::Error,
        true
    ));

    let mut mr = m.clone();
    mr.freshness.must_revalidate = true;
    assert!(!can_serve_stale(&mr, at(60), StaleReason::Error));
    assert!(!can_serve_stale_with(&mr, at(60), StaleReason::Error, true));

    let mut nc = m.clone();
    nc.freshness.no_cache = true;
    assert!(!is_fresh(&nc, at(0)));
    let mut sp = m.clone();
    sp.soft_purged = true;
    assert!(!is_fresh(&sp, at(0)));
    assert!(can_serve_stale(&sp, at(0), StaleReason::Updating));
}

#[test]
fn client_no_cache_is_ignored_unless_configured() {
    let on = PolicyConfig {
        honour_client_no_cache: true,
        ..Default::default()
    };
    let off = PolicyConfig::default();
    for req in [
        vec![("cache-control", "no-cache")],
        vec![("cache-control", "max-age=0")],
        vec![("pragma", "no-cache")],
    ] {
        assert!(!request_bypass(&hdrs(&req), &off));
        assert!(request_bypass(&hdrs(&req), &on), "{req:?}");
    }
    // Pragma is ignored when Cache-Control is present (RFC 9111 5.4).
    let req = hdrs(&[("pragma", "no-cache"), ("cache-control", "max-age=10")]);
    assert!(!request_bypass(&req, &on));
    let resp = [("cache-control", "max-age=60")];
    assert_eq!(
        check_with(&[("cache-control", "no-store")], 200, &resp, &on),
        Err(NoCacheReason::RequestNoStore)
    );
    assert!(check_with(&[("cache-control", "no-store")], 200, &resp, &off).is_ok());
}

#[test]
fn build_meta_filters_headers_and_reads_tags() {
    let resp = hdrs(&[
        ("Content-Type", "text/plain"),
        ("Content-Length", "5"),
        ("Connection", "keep-alive, X-Hop"),
        ("X-Hop", "1"),
        ("Date", &date(0)),
        ("Age", "3"),
        ("ETag", "\"v1\""),
        ("Vary", "Accept-Encoding"),
        ("Cache-Tag", "a, b"),
        ("Surrogate-Key", "c a"),
        ("Transfer-Encoding", "chunked"),
    ]);
    let f = Freshness::default();
    let m = build_meta("http://x/", 200, &resp, f, t0(), t0(), Some(5));
    let block = String::from_utf8(m.header_block.clone()).unwrap();
    assert_eq!(
        block,
        format!("Date: {}\r\nContent-Type: text/plain\r\nETag: \"v1\"\r\nVary: Accept-Encoding\r\nCache-Tag: a, b\r\nSurrogate-Key: c a\r\n", date(0)),
        "the origin's Date first; no Connection-listed field"
    );
    assert_eq!(m.etag.as_deref(), Some("\"v1\""));
    assert_eq!(m.date, Some(t0()));
    assert_eq!(m.vary, vec!["accept-encoding"]);
    assert_eq!(m.tags, vec!["a", "b", "c"]);
    assert_eq!(m.body_len, 5);
}

#[test]
fn refresh_merges_304_headers() {
    let resp = hdrs(&[
        ("Content-Type", "text/plain"),
        ("ETag", "\"v1\""),
        ("Cache-Control", "max-age=10"),
    ]);
    let cfg = PolicyConfig::default();
    let f = storable(
        &Method::Get,
        &HeaderMap::new(),
        200,
        &resp,
        &cfg,
        t0(),
        t0(),
    )
    .unwrap();
    let mut old = build_meta("http://x/", 200, &resp, f, t0(), t0(), Some(5));
    old.body_hash = 42;
    old.soft_purged = true;
    let later = t0() + Duration::from_secs(100);
    let r304 = hdrs(&[
        ("Cache-Control", "max-age=600"),
        ("X-New", "1"),
        ("Content-Length", "0"),
    ]);
    let m = refresh_meta(&old, &HeaderMap::new(), &r304, &cfg, later, later).unwrap();
    assert_eq!(m.freshness.lifetime.as_secs(), 600);
    assert_eq!((m.body_len, m.body_hash, m.soft_purged), (5, 42, false));
    assert!(is_fresh(&m, later + Duration::from_secs(10)));
    let block = String::from_utf8(m.header_block).unwrap();
    assert!(block.contains("Cache-Control: max-age=600\r\n"), "{block}");
    assert!(
        block.starts_with(&format!("Date: {}\r\n", fmt_http_date(t0()))),
        "the stored Date stays when the 304 has none: {block}"
    );
    assert_eq!(block.matches("Date: ").count(), 1);
    assert!(!block.contains("max-age=10\r\n"));
    assert!(block.contains("X-New: 1\r\n") && block.contains("ETag: \"v1\"\r\n"));
    // A 304 that forbids storing makes the refresh fail.
    let r304 = hdrs(&[("Cache-Control", "no-store")]);
    assert_eq!(
        refresh_meta(&old, &HeaderMap::new(), &r304, &cfg, later, later),
        Err(NoCacheReason::ResponseNoStore)
    );
}

#[test]
fn targeted_fields_replace_cache_control_and_expires() {
    let far = date(86_400);
    let life = |resp: &[(&str, &str)]| check(resp).map(|f| f.lifetime.as_secs());
    // A targeted max-age stores what Cache-Control forbids.
    assert_eq!(
        life(&[
            ("Cache-Control", "no-store"),
            ("CDN-Cache-Control", "max-age=60")
        ]),
        Ok(60)
    );
    // Its refusals win over a long Cache-Control or a future Expires.
    assert_eq!(
        life(&[
            ("Cache-Control", "max-age=600"),
            ("CDN-Cache-Control", "no-store")
        ]),
        Err(NoCacheReason::ResponseNoStore)
    );
    assert_eq!(
        life(&[
            ("Cache-Control", "max-age=600"),
            ("CDN-Cache-Control", "private")
        ]),
        Err(NoCacheReason::Private)
    );
    assert_eq!(
        life(&[
            ("Expires", &far),
            ("ETag", "\"e\""),
            ("CDN-Cache-Control", "max-age=0")
        ]),
        Ok(0)
    );
    let nc = check(&[
        ("Cache-Control", "max-age=600"),
        ("CDN-Cache-Control", "no-cache, max-age=60"),
    ])
    .unwrap();
    assert!(nc.no_cache);
    // No max-age in it: Expires is ignored too, cache_valid/heuristics decide.
    assert_eq!(
        life(&[("Expires", &far), ("CDN-Cache-Control", "stale-if-error=5")]),
        Err(NoCacheReason::NoFreshness)
    );
    // Most specific first.
    assert_eq!(
        life(&[
            ("CDN-Cache-Control", "max-age=1"),
            ("Edgecache-Cache-Control", "max-age=2"),
            ("Cache-Control", "max-age=3")
        ]),
        Ok(2)
    );
    // An invalid Dictionary is ignored (uppercase keys, a bad value, stray bytes).
    for bad in ["Max-Age=0", "max-age=", "max-age=0 junk", "no store"] {
        assert_eq!(
            life(&[("Cache-Control", "max-age=600"), ("CDN-Cache-Control", bad)]),
            Ok(600),
            "{bad}"
        );
    }
    // Parameters and quoted strings are valid members.
    assert_eq!(
        life(&[
            ("Cache-Control", "max-age=600"),
            ("CDN-Cache-Control", "max-age=7;x=1, foo=\"bar\"")
        ]),
        Ok(7)
    );
    // The list is configurable; an empty one reads Cache-Control only.
    let cfg = PolicyConfig {
        targeted: vec!["surrogate-control".into()],
        ..PolicyConfig::default()
    };
    let resp = [
        ("Cache-Control", "max-age=600"),
        ("CDN-Cache-Control", "max-age=1"),
        ("Surrogate-Control", "max-age=9"),
    ];
    assert_eq!(
        check_with(&[], 200, &resp, &cfg)
            .unwrap()
            .lifetime
            .as_secs(),
        9
    );
    let none = PolicyConfig {
        targeted: vec![],
        ..PolicyConfig::default()
    };
    assert_eq!(
        check_with(&[], 200, &resp, &none)
            .unwrap()
            .lifetime
            .as_secs(),
        600
    );
}

#[test]
fn age_is_the_first_value_of_the_first_line() {
    let age = |v: &[&str]| {
        let mut h = HeaderMap::new();
        for x in v {
            h.append("Age".to_owned(), x.as_bytes().to_vec());
        }
        initial_age(&h, t0(), t0()).as_secs()
    };
    assert_eq!(age(&[]), 0);
    assert_eq!(age(&["5"]), 5);
    assert_eq!(age(&[" 7 "]), 7);
    // Lists and repeated lines: the first value counts (cache-tests age-parse-*).
    assert_eq!(age(&["0, 7200"]), 0);
    assert_eq!(age(&["0", "7200"]), 0);
    assert_eq!(age(&["7200, 0"]), 7200);
    assert_eq!(age(&["7200", "0"]), 7200);
    // Not delta-seconds: ignored, as if no Age were sent.
    for bad in ["abc", "-7200", "7200.0", "", "7200;foo=bar", "0x10"] {
        assert_eq!(age(&[bad]), 0, "{bad:?}");
    }
    // 2^31 and above saturate.
    assert_eq!(age(&["2147483647"]), 2_147_483_647);
    assert_eq!(age(&["2147483648"]), MAX_DELTA_SECONDS);
    assert_eq!(age(&["99999999999999999999999"]), MAX_DELTA_SECONDS);
    let fresh = |a: &str| {
        let f = check(&[("Cache-Control", "max-age=3600"), ("Age", a)]).unwrap();
        is_fresh(&meta_with(f), t0())
    };
    assert!(fresh("0, 7200"));
    assert!(fresh("abc"));
    assert!(!fresh("7200, 0"));
    assert!(!fresh("2147483648"));
}

#[test]
fn targeted_fields_are_rfc8941_dictionaries() {
    let life = |v: &[&str]| {
        let mut resp = vec![("Cache-Control", "max-age=600")];
        resp.extend(v.iter().map(|x| ("CDN-Cache-Control", *x)));
        check(&resp).map(|f| f.lifetime.as_secs())
    };
    // A String, a Decimal or a Boolean where an Integer belongs: the field is ignored.
    for bad in [
        "max-age=\"10000\"",
        "max-age=1.5",
        "max-age=?1",
        "max-age=(1 2)",
        "max-age=-1",
    ] {
        assert_eq!(life(&[bad]), Ok(600), "{bad}");
    }
    // Not a Dictionary at all: ignored (cache-tests cdn-cc-invalid-sh-type-unknown).
    assert_eq!(life(&["max-age=10000, &&&&&"]), Ok(600));
    assert_eq!(life(&["max-age =100"]), Ok(600));
    // Decimals, Booleans, quoted commas and extensions elsewhere keep it valid.
    assert_eq!(
        life(&["foo=1.5, max-age=10, bar=?0, baz=\"a, b\", foobar"]),
        Ok(10)
    );
    // A duplicate key: the last one wins, across field lines too.
    assert_eq!(life(&["max-age=10, max-age=20"]), Ok(20));
    assert_eq!(life(&["max-age=10", "max-age=30"]), Ok(30));
    // Large values saturate.
    assert_eq!(life(&["max-age=99999999999"]), Ok(MAX_DELTA_SECONDS));
    // Flags: present is true, `=?0` is false.
    assert_eq!(
        check(&[
            ("Cache-Control", "max-age=600"),
            ("CDN-Cache-Control", "no-store=?0, max-age=5")
        ])
        .map(|f| f.lifetime.as_secs()),
        Ok(5)
    );
    assert_eq!(
        check(&[
            ("Cache-Control", "max-age=600"),
            ("CDN-Cache-Control", "no-store")
        ]),
        Err(NoCacheReason::ResponseNoStore)
    );
}

#[test]
fn must_understand_stores_understood_statuses_despite_no_store() {
    let cc = [("Cache-Control", "max-age=3600, no-store, must-understand")];
    assert_eq!(check(&cc).map(|f| f.lifetime.as_secs()), Ok(3600));
    let cfg = PolicyConfig::default();
    assert_eq!(
        check_with(&[], 599, &cc, &cfg).map(|f| f.lifetime.as_secs()),
        Err(NoCacheReason::Status)
    );
    // Without must-understand, no-store holds.
    assert_eq!(
        check(&[("Cache-Control", "max-age=3600, no-store")]),
        Err(NoCacheReason::ResponseNoStore)
    );
}

#[test]
fn no_cache_with_a_validator_is_stored_to_be_revalidated() {
    let f = check(&[("Cache-Control", "no-cache"), ("ETag", "\"abcd\"")]).unwrap();
    assert!(f.no_cache);
    assert!(!is_fresh(&meta_with(f), t0()), "revalidated on every use");
    let f = check(&[
        ("Cache-Control", "max-age=10000, no-cache"),
        ("ETag", "\"a\""),
    ])
    .unwrap();
    assert!(!is_fresh(&meta_with(f), t0()));
    // Nothing to revalidate with: not stored.
    assert_eq!(
        check(&[("Cache-Control", "no-cache")]),
        Err(NoCacheReason::NoFreshness)
    );
}

#[test]
fn public_makes_any_status_heuristically_cacheable() {
    let lm = date(-100_000);
    let cfg = PolicyConfig::default();
    let resp = [("Cache-Control", "public"), ("Last-Modified", lm.as_str())];
    assert!(check_with(&[], 599, &resp, &cfg).is_ok());
    let resp = [("Last-Modified", lm.as_str())];
    assert_eq!(
        check_with(&[], 599, &resp, &cfg),
        Err(NoCacheReason::NoFreshness)
    );
}

#[test]
fn a_206_is_stored_only_through_storable_part_with_one_known_range() {
    let cfg = PolicyConfig::default();
    let store = |resp: &[(&str, &str)]| {
        storable_part(
            &Method::Get,
            &HeaderMap::new(),
            &hdrs(resp),
            &cfg,
            t0(),
            t0(),
        )
    };
    let ok = [
        ("Cache-Control", "max-age=60"),
        ("Content-Range", "bytes 4-9/10"),
        ("Content-Length", "6"),
    ];
    let (f, p) = store(&ok).unwrap();
    assert_eq!(f.lifetime, Duration::from_secs(60));
    assert_eq!((p.start, p.end, p.total), (4, 10, 10));
    // The plain path never stores a 206.
    let plain = storable(
        &Method::Get,
        &HeaderMap::new(),
        206,
        &hdrs(&ok),
        &cfg,
        t0(),
        t0(),
    );
    assert_eq!(plain.unwrap_err(), NoCacheReason::Status);
    for bad in [
        [
            ("Cache-Control", "max-age=60"),
            ("Content-Range", "bytes 4-9/*"),
            ("X", "y"),
        ],
        [
            ("Cache-Control", "max-age=60"),
            ("Content-Range", "bytes 4-9/10"),
            ("Content-Length", "5"),
        ],
        [
            ("Cache-Control", "max-age=60"),
            ("Content-Range", "bytes 4-9/10"),
            ("Content-Type", "multipart/byteranges; boundary=a"),
        ],
        [
            ("Cache-Control", "max-age=60"),
            ("Content-Range", "bytes */10"),
            ("X", "y"),
        ],
    ] {
        assert_eq!(store(&bad).unwrap_err(), NoCacheReason::Status, "{bad:?}");
    }
    // The rest of the rules still apply.
    let private = [
        ("Cache-Control", "private, max-age=60"),
        ("Content-Range", "bytes 0-0/1"),
    ];
    assert_eq!(store(&private).unwrap_err(), NoCacheReason::Private);
}

#[test]
fn tag_parsing() {
    let t = parse_tags(["a, b,,a", " c"], ["d  e", "a"]);
    assert_eq!(t, vec!["a", "b", "c", "d", "e"]);
    let long = "x".repeat(MAX_TAG_LEN + 1);
    assert!(parse_tags([long.as_str()], []).is_empty());
    let many: Vec<String> = (0..200).map(|i| format!("t{i}")).collect();
    let joined = many.join(",");
    assert_eq!(parse_tags([joined.as_str()], []).len(), MAX_TAGS_PER_OBJECT);
}
