use super::*;

#[test]
fn sequential_ids_are_shared_by_every_clone_and_wrap() {
    let ids = Ids::sequential(5);
    let other = ids.clone(); // another connection's copy
    let mut rng = SplitMix64::new(1);
    let got: Vec<u64> = (0..7)
        .map(|i| if i % 2 == 0 { &ids } else { &other }.draw(&mut rng))
        .collect();
    assert_eq!(got, [1, 2, 3, 4, 5, 1, 2]);
    assert_eq!(ids, Ids::sequential(5));
    assert_ne!(ids, Ids::Uniform(5));
}

#[test]
fn parses_http_urls() {
    let u = Url::parse("http://127.0.0.1:8080/obj/10k/1?x=1#frag").unwrap();
    assert_eq!(
        (u.host.as_str(), u.port, u.path.as_str()),
        ("127.0.0.1", 8080, "/obj/10k/1?x=1")
    );
    assert_eq!(u.authority, "127.0.0.1:8080");
    let u = Url::parse("HTTP://example.com").unwrap();
    assert_eq!((u.port, u.path.as_str()), (80, "/"));
    let u = Url::parse("http://[::1]:9000?q").unwrap();
    assert_eq!(
        (u.host.as_str(), u.port, u.path.as_str()),
        ("::1", 9000, "/?q")
    );
    assert_eq!(u.scheme, Scheme::Http);
}

#[test]
fn parses_https_urls() {
    let u = Url::parse("https://example.com/a?b=1").unwrap();
    assert_eq!(
        (
            u.scheme,
            u.host.as_str(),
            u.port,
            u.authority.as_str(),
            u.path.as_str()
        ),
        (Scheme::Https, "example.com", 443, "example.com", "/a?b=1")
    );
    assert_eq!(u.to_url_string(), "https://example.com/a?b=1");
    let u = Url::parse("HTTPS://127.0.0.1:8443").unwrap();
    assert_eq!(
        (u.scheme, u.host.as_str(), u.port, u.path.as_str()),
        (Scheme::Https, "127.0.0.1", 8443, "/")
    );
    assert_eq!(u.to_url_string(), "https://127.0.0.1:8443/");
    let u = Url::parse("https://[::1]:9443/x").unwrap();
    assert_eq!((u.host.as_str(), u.port), ("::1", 9443));
    // The plain scheme keeps its own default port.
    assert_eq!(Url::parse("http://example.com/").unwrap().port, 80);
    for (bad, why) in [
        ("https:///x", "missing host"),
        ("https://h:0/", "invalid port"),
        ("https://u@h/", "user info"),
        ("https:/h/", "must start with http:// or https://"),
    ] {
        let e = Url::parse(bad).unwrap_err().0;
        assert!(e.contains(why), "{bad}: {e}");
    }
}

#[test]
fn refuses_bad_urls_with_reasons() {
    for (bad, why) in [
        ("ftp://x/", "must start with http://"),
        ("127.0.0.1:80/", "must start with http://"),
        ("http:///x", "missing host"),
        ("http://h:0/", "invalid port"),
        ("http://h:99999/", "invalid port"),
        ("http://h:x/", "invalid port"),
        ("http://u@h/", "user info"),
        ("http://h/a b", "not allowed in the path"),
        ("http://[::1/", "unterminated"),
    ] {
        let e = Url::parse(bad).unwrap_err().0;
        assert!(e.contains(why), "{bad}: {e}");
    }
}

#[test]
fn headers_are_checked() {
    assert_eq!(check_header("X-A:  b ").unwrap(), "X-A: b");
    assert!(check_header("nocolon").is_err());
    assert!(check_header(": v").is_err());
    assert!(check_header("A B: v").is_err());
    assert!(check_header("A: v\r\nEvil: 1").is_err());
}

#[test]
fn request_bytes_are_preserialised() {
    let c = Class::new(
        "/obj/10k",
        1,
        "h:1",
        &["X-T: 1".into()],
        true,
        Some(Ids::new(3, None)),
    );
    assert_eq!(c.name, "/obj/10k/*");
    let mut rng = SplitMix64::new(1);
    let want = SplitMix64::new(1).next_u64() % 3 + 1;
    let mut out = Vec::new();
    c.write_request(&mut rng, &mut out);
    assert_eq!(
        out,
        format!("GET /obj/10k/{want} HTTP/1.1\r\nHost: h:1\r\nX-T: 1\r\nConnection: close\r\n\r\n")
            .into_bytes()
    );
    let c = Class::new("/", 1, "h", &["host: other".into()], false, None);
    out.clear();
    c.write_request(&mut rng, &mut out);
    assert_eq!(out, b"GET / HTTP/1.1\r\nhost: other\r\n\r\n");
}

/// Draws `draws` ids from `ids` and counts them (index = id).
fn histogram(ids: &Ids, n: usize, draws: u32, seed: u64) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed);
    let mut counts = vec![0u32; n + 1];
    for _ in 0..draws {
        let id = ids.draw(&mut rng) as usize;
        assert!((1..=n).contains(&id), "id {id} outside 1..={n}");
        counts[id] += 1;
    }
    counts
}

#[test]
fn uniform_ids_cover_the_range_evenly() {
    let counts = histogram(&Ids::new(10, None), 10, 100_000, 5);
    assert!(
        counts[1..].iter().all(|&c| (9_400..10_600).contains(&c)),
        "{counts:?}"
    );
}

#[test]
fn zipf_ids_follow_the_law() {
    // P(id) = id^-α / H(N, α): id 1 is 2^α times as popular as id 2.
    for alpha in [0.8, 1.0, 1.5] {
        let n = 20_000;
        let draws = 400_000;
        let counts = histogram(&Ids::new(n as u64, Some(alpha)), n, draws, 11);
        let h: f64 = (1..=n).map(|i| (i as f64).powf(-alpha)).sum();
        let p1 = counts[1] as f64 / draws as f64;
        assert!(
            (p1 * h - 1.0).abs() < 0.03,
            "α {alpha}: P(1) = {p1}, law {}",
            1.0 / h
        );
        let ratio = counts[1] as f64 / counts[2] as f64;
        let want = 2f64.powf(alpha);
        assert!(
            (ratio / want - 1.0).abs() < 0.06,
            "α {alpha}: count(1)/count(2) = {ratio}, law {want}"
        );
        assert!(
            counts[1] > counts[2] && counts[2] > counts[10] && counts[10] > counts[1000],
            "popularity falls with the id"
        );
        assert!(
            counts[n / 2..].iter().any(|&c| c > 0),
            "the tail is reachable"
        );
    }
}

#[test]
fn zipf_class_writes_popular_ids() {
    let c = Class::new("/o/", 1, "h", &[], false, Some(Ids::new(1000, Some(1.2))));
    assert_eq!(c.name, "/o/*");
    let mut rng = SplitMix64::new(3);
    let mut out = Vec::new();
    let mut ones = 0;
    for _ in 0..1000 {
        out.clear();
        c.write_request(&mut rng, &mut out);
        let line = std::str::from_utf8(&out).unwrap().lines().next().unwrap();
        let id: u64 = line
            .strip_prefix("GET /o/")
            .and_then(|r| r.strip_suffix(" HTTP/1.1"))
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=1000).contains(&id));
        ones += (id == 1) as u32;
    }
    // P(1) ≈ 0.22 for α 1.2 over 1000 ids.
    assert!((150..300).contains(&ones), "{ones}");
}

#[test]
fn seek_parses_and_bounds() {
    assert_eq!(
        Seek::parse("2g, 4m,1m").unwrap(),
        Seek {
            span: 2 << 30,
            read: 4 << 20,
            step: 1 << 20
        }
    );
    assert_eq!(Seek::parse("10,10,1").unwrap().span, 10);
    for (bad, why) in [
        ("1m,4m", "expected SPAN,READ,STEP"),
        ("1m,4m,1m,1", "expected SPAN,READ,STEP"),
        ("x,4m,1m", "'x' is not a size"),
        ("8m,4m,-1", "'-1' is not a size"),
        ("1m,4m,1m", "STEP <= READ <= SPAN"),
        ("8m,1m,4m", "STEP <= READ <= SPAN"),
        ("8m,4m,0", "STEP <= READ <= SPAN"),
    ] {
        let e = Seek::parse(bad).unwrap_err();
        assert!(e.starts_with(&format!("--seek {bad}: ")), "{e}");
        assert!(e.contains(why), "{bad}: {e}");
    }
}

#[test]
fn seeks_read_consecutive_ranges_then_seek_again() {
    let seek = Seek::parse("64m,4m,1m").unwrap();
    let classes = [Class::new(
        "/v",
        1,
        "h",
        &[],
        false,
        Some(Ids::new(10, None)),
    )];
    let mut rng = SplitMix64::new(7);
    let mut st = SeekState::default();
    let mut starts = std::collections::HashSet::new();
    for _ in 0..50 {
        let (c, id, first, last) = st.next(&seek, &classes, |_| 0, &mut rng);
        assert!(c == 0 && (1..=10).contains(&id) && first <= (60 << 20));
        assert_eq!(last, first + (1 << 20) - 1);
        starts.insert(first);
        for k in 1..4u64 {
            let r = st.next(&seek, &classes, |_| 0, &mut rng);
            assert_eq!(r, (0, id, first + (k << 20), first + ((k + 1) << 20) - 1));
        }
    }
    assert!(starts.len() > 45, "offsets are drawn anew per seek");
    // A read that is not a multiple of the step ends on a short range; a read as long
    // as the span always starts at 0.
    let seek = Seek::parse("5000,5000,2000").unwrap();
    let mut st = SeekState::default();
    let got: Vec<_> = (0..4)
        .map(|_| st.next(&seek, &classes, |_| 0, &mut rng))
        .map(|(_, _, a, b)| (a, b))
        .collect();
    assert_eq!(got, [(0, 1999), (2000, 3999), (4000, 4999), (0, 1999)]);
}

#[test]
fn range_requests_carry_the_range_before_the_blank_line() {
    let c = Class::new(
        "/obj/2g",
        1,
        "h:1",
        &["X-T: 1".into()],
        false,
        Some(Ids::new(3, None)),
    );
    let mut out = Vec::new();
    c.write_range_request(7, 1048576, 2097151, &mut out);
    assert_eq!(
        out,
        b"GET /obj/2g/7 HTTP/1.1\r\nHost: h:1\r\nX-T: 1\r\nRange: bytes=1048576-2097151\r\n\r\n"
    );
    let c = Class::new("/one", 1, "h", &[], true, None);
    out.clear();
    c.write_range_request(7, 0, 0, &mut out);
    assert_eq!(
        out,
        b"GET /one HTTP/1.1\r\nHost: h\r\nConnection: close\r\nRange: bytes=0-0\r\n\r\n"
    );
}

#[test]
fn decimal_digits() {
    for n in [0u64, 7, 10, 1234567890, u64::MAX] {
        let mut v = Vec::new();
        push_decimal(n, &mut v);
        assert_eq!(v, n.to_string().into_bytes());
    }
}
