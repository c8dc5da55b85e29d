//! The disk cache on the data path, end to end: the real `edgecache` in front of the
//! real `edgeorigin` (which counts its requests in `/stats`), on 127.0.0.1. Every test
//! asserts on bytes, on `X-Cache-Status`, and on how many requests reached the origin.

mod common;

use common::{
    cached_config, edgecache, files, get_text, json_number, object_files, origin, post_form, setup,
    setup_allow, timed_get, Setup, LOCAL,
};
use edge_testkit::{get, Client, Response};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn status(r: &Response) -> &str {
    r.header("x-cache-status").unwrap_or("-")
}

#[test]
fn miss_then_hit_makes_one_origin_request() {
    let s = setup("", "");
    let direct = get(s.origin_addr, "/obj/10k/1", &[]);
    let before = s.origin_count();
    let a = s.get("/obj/10k/1", &[]);
    let b = s.get("/obj/10k/1", &[]);
    assert_eq!((a.status, status(&a)), (200, "MISS"));
    assert_eq!((b.status, status(&b)), (200, "HIT"));
    assert_eq!(a.body, direct.body);
    assert_eq!(b.body, direct.body);
    assert_eq!(b.body.len(), 10 * 1024);
    assert_eq!(b.header("x-checksum"), direct.header("x-checksum"));
    assert_eq!(b.header("etag"), direct.header("etag"));
    assert_eq!(
        b.headers_all("server"),
        ["edgecache"],
        "one Server header, ours"
    );
    assert_eq!(b.headers_all("date").len(), 1);
    assert!(b.header("age").is_some(), "hits carry Age");
    assert_eq!(s.origin_count() - before, 1);

    // Keep-alive: several hits on one connection, pipelining included.
    let mut c = Client::connect(s.addr);
    c.send(b"GET /obj/10k/1 HTTP/1.1\r\nHost: test\r\n\r\nGET /obj/10k/1 HTTP/1.1\r\nHost: test\r\n\r\n");
    for _ in 0..2 {
        let r = c.read_response(false);
        assert_eq!((r.status, status(&r)), (200, "HIT"));
        assert_eq!(r.body, direct.body);
    }
    // A chunked origin response is stored whole and served with a length.
    let ch = s.get("/obj/100k/2?chunked=1", &[]);
    assert_eq!((ch.status, status(&ch)), (200, "MISS"));
    let ch2 = s.get("/obj/100k/2?chunked=1", &[]);
    assert_eq!(status(&ch2), "HIT");
    assert_eq!(ch2.header("content-length"), Some("102400"));
    assert_eq!(ch2.body, ch.body);
    assert_eq!(s.origin_count() - before, 2);
    // Counters.
    let m = get_text(s.admin, "/metrics");
    assert!(
        m.contains("edgecache_cache_requests_total{status=\"hit\"} 4"),
        "{m}"
    );
    assert!(
        m.contains("edgecache_cache_requests_total{status=\"miss\"} 2"),
        "{m}"
    );
    assert!(m.contains("edgecache_cache_entries{cache=\"c1\"} 2"), "{m}");
    // Byte hit ratio inputs: hits 10 KiB x3 + 100 KiB; origin 10 KiB + 100 KiB.
    assert!(
        m.contains("edgecache_cache_bytes_total{source=\"cache\"} 133120"),
        "{m}"
    );
    assert!(
        m.contains("edgecache_cache_bytes_total{source=\"origin\"} 112640"),
        "{m}"
    );
}

#[test]
fn no_store_private_and_set_cookie_are_not_stored() {
    let s = setup("", "");
    for q in ["no_store=1", "private=1", "set_cookie=1"] {
        let path = format!("/obj/1k/3?{q}");
        let before = s.origin_count();
        let a = s.get(&path, &[]);
        let b = s.get(&path, &[]);
        assert_eq!((a.status, status(&a)), (200, "MISS"), "{q}");
        assert_eq!((b.status, status(&b)), (200, "MISS"), "{q}");
        assert_eq!(a.body, b.body);
        assert_eq!(s.origin_count() - before, 2, "{q}: both went to the origin");
        if q == "set_cookie=1" {
            assert_eq!(
                a.header("set-cookie"),
                Some("s=1"),
                "the cookie reaches its user"
            );
        }
    }
    // A HEAD for an object that is not stored does not wait for its body.
    let h = Client::connect(s.addr).request("HEAD", "/obj/1m/3?no_store=1&slow_bps=100000", &[]);
    assert_eq!((h.status, status(&h)), (200, "MISS"));
    assert_eq!(h.header("content-length"), Some("1048576"));
    assert!(s.status_json().contains("\"entries\": 0"));
}

#[test]
fn vary_stores_variants_separately() {
    let s = setup("", "");
    let path = "/obj/1k/5?vary=X-Variant";
    let before = s.origin_count();
    let a1 = s.get(path, &["X-Variant: a"]);
    let b1 = s.get(path, &["X-Variant: b"]);
    assert_eq!(status(&a1), "MISS");
    assert_eq!(status(&b1), "MISS", "another variant is a miss");
    let a2 = s.get(path, &["X-Variant: a"]);
    let b2 = s.get(path, &["X-Variant: b"]);
    assert_eq!(status(&a2), "HIT");
    assert_eq!(status(&b2), "HIT");
    assert_eq!(a2.header("vary"), Some("X-Variant"));
    assert_eq!(a2.body, a1.body);
    assert_eq!(s.origin_count() - before, 2);
    let none = s.get(path, &[]);
    assert_eq!(status(&none), "MISS", "no header is a third variant");
}

#[test]
fn expired_object_is_revalidated_with_304() {
    // The key ignores the query, so the refreshing request can ask the origin for a
    // longer max-age (a 1 s lifetime is nearly spent on arrival: `Date` has 1 s
    // resolution).
    let s = setup("", "cache_key = \"$scheme://$host$uri\"");
    let a = s.get("/obj/4k/6?max_age=1", &[]);
    assert_eq!(status(&a), "MISS");
    std::thread::sleep(Duration::from_millis(1600));
    let before = s.origin_count();
    let b = s.get("/obj/4k/6?max_age=60", &[]);
    assert_eq!((b.status, status(&b)), (200, "REVALIDATED"));
    assert_eq!(b.body, a.body);
    assert_eq!(s.origin_count() - before, 1);
    let stats = get_text(s.origin_addr, "/stats");
    assert!(
        stats.contains("\"304\":1"),
        "the origin answered 304: {stats}"
    );
    let c = s.get("/obj/4k/6", &[]);
    assert_eq!(status(&c), "HIT", "fresh again after the 304");
    assert_eq!(c.body, a.body);
    assert_eq!(
        c.header("cache-control"),
        Some("max-age=60"),
        "304 headers merged"
    );
    // Without validators the refetch is a full response: EXPIRED.
    assert_eq!(
        status(&s.get("/obj/4k/7?max_age=1&etag=0&lm=0", &[])),
        "MISS"
    );
    std::thread::sleep(Duration::from_millis(1600));
    let e = s.get("/obj/4k/7?max_age=60&etag=0&lm=0", &[]);
    assert_eq!((e.status, status(&e)), (200, "EXPIRED"));
    assert_eq!(status(&s.get("/obj/4k/7", &[])), "HIT");
}

/// A 304 that makes the object uncacheable (`no-store`): served this once, then purged
/// (its unlink on the aio pool, like every purge).
#[test]
fn revalidation_to_no_store_purges_the_object() {
    let s = setup("", "cache_key = \"$scheme://$host$uri\"");
    let a = s.get("/obj/4k/31?max_age=1", &[]);
    assert_eq!(status(&a), "MISS");
    let file_count = || object_files(&s.dir.path().join("cache")).len();
    assert_eq!(file_count(), 1);
    std::thread::sleep(Duration::from_millis(1600));
    let b = s.get("/obj/4k/31?no_store=1", &[]);
    assert_eq!((b.status, status(&b)), (200, "REVALIDATED"));
    assert_eq!(b.body, a.body);
    assert_eq!(file_count(), 0, "the object's file is gone");
    assert!(s.status_json().contains("\"entries\": 0"));
    assert_eq!(status(&s.get("/obj/4k/31?max_age=60", &[])), "MISS");
}

#[test]
fn hundred_concurrent_misses_make_one_origin_request_and_stream() {
    let s = setup("", "");
    // 2 MiB paced at 500 kB/s: the origin cannot finish before ~4 s after the request.
    let path = "/obj/2m/11?slow_bps=500000";
    let expected = get(s.origin_addr, "/obj/2m/11", &[]).body;
    let expected_hash = {
        use std::hash::Hasher;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        h.write(&expected);
        h.finish()
    };
    let before = s.origin_count();
    let t0 = Instant::now();
    let addr = s.addr;
    let threads: Vec<_> = (0..100)
        .map(|_| std::thread::spawn(move || timed_get(addr, path, t0)))
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(
        s.origin_count() - before,
        1,
        "one origin request for 100 clients"
    );
    let mut misses = 0;
    for (line, cs, len, hash, first, _last) in &results {
        assert_eq!(line, "HTTP/1.1 200 OK");
        assert_eq!(*len, 2 << 20, "every body complete");
        assert_eq!(*hash, expected_hash, "every body identical to the origin's");
        if cs == "MISS" {
            misses += 1;
        } else {
            assert_eq!(cs, "HIT");
        }
        // The paced origin needs over 4 s after the request (sent after t0); bytes
        // before 3 s can only have come while it was still sending (streamed, not
        // after completion).
        assert!(
            *first < Duration::from_millis(3000),
            "first body byte after {first:?}: followers must stream"
        );
    }
    assert_eq!(misses, 1);
    let last_min = results.iter().map(|r| r.5).min().unwrap();
    assert!(
        last_min >= Duration::from_millis(3000),
        "paced origin: {last_min:?}"
    );
    let m = get_text(s.admin, "/metrics");
    assert!(m.contains("edgecache_cache_collapsed_total 99"), "{m}");
}

#[test]
fn restart_serves_hits_from_disk() {
    let mut s = setup("", "");
    let a = s.get("/obj/10k/12", &[]);
    assert_eq!(status(&a), "MISS");
    s.cache.signal("TERM");
    assert_eq!(s.cache.wait_exit(Duration::from_secs(10)), Some(0));
    let cfg = s.config("", "");
    let (p, addr, _admin) = edgecache(&cfg);
    s.cache = p;
    s.addr = addr;
    let before = s.origin_count();
    let b = s.get("/obj/10k/12", &[]);
    assert_eq!((b.status, status(&b)), (200, "HIT"));
    assert_eq!(b.body, a.body);
    assert_eq!(
        s.origin_count(),
        before,
        "no origin request after the restart"
    );
}

/// Issue 29: after a crash (no index snapshot) and with a loader that has not reached
/// the objects yet, hits are found by the disk fallback, whose file calls and loader
/// gate go through the aio pool (`aio.mode = "threads"`), not the worker's loop.
#[test]
fn restart_before_the_loader_finishes_serves_hits_through_the_pool() {
    let mut s = setup("", "");
    let paths = ["/obj/10k/21", "/obj/1k/22", "/obj/100k/23"];
    let first: Vec<_> = paths.iter().map(|p| s.get(p, &[])).collect();
    assert!(first.iter().all(|r| status(r) == "MISS"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while json_number(&s.status_json().replace(' ', ""), "entries") != Some(3) {
        assert!(Instant::now() < deadline, "three objects stored");
        std::thread::sleep(Duration::from_millis(20));
    }
    s.cache.signal("KILL"); // no index snapshot: only the loader or the fallback finds them
    s.cache.wait_exit(Duration::from_secs(10));
    let slow = "loader_files = 1\nloader_sleep = \"1h\"";
    let cfg = format!("{}\n[aio]\nmode = \"threads\"\n", s.config(slow, ""));
    let (p, addr, admin) = edgecache(&cfg);
    (s.cache, s.addr, s.admin) = (p, addr, admin);
    let before = s.origin_count();
    for (path, a) in paths.iter().zip(&first) {
        let b = s.get(path, &[]);
        assert_eq!((b.status, status(&b)), (200, "HIT"), "{path}");
        assert_eq!(b.body, a.body, "{path}");
    }
    assert_eq!(
        s.origin_count(),
        before,
        "no origin request after the restart"
    );
    let st = s.status_json().replace(' ', "");
    assert!(
        st.contains("\"done\":false"),
        "the loader is still asleep: {st}"
    );
    let fallback = json_number(&st, "disk_fallback_hits").unwrap();
    assert!(
        fallback >= 2,
        "at most one object loaded, the rest fell back: {st}"
    );
    let m = get_text(s.admin, "/metrics");
    assert!(
        m.contains(&format!(
            "edgecache_cache_disk_fallback_hits_total{{cache=\"c1\"}} {fallback}"
        )),
        "{m}"
    );
}

#[test]
fn stale_served_on_origin_500_and_when_origin_is_down() {
    let mut s = setup(
        "",
        "cache_key = \"$scheme://$host$uri\"\nuse_stale = [\"error\", \"timeout\", \"http_5xx\"]",
    );
    let a = s.get("/obj/3k/13?max_age=1", &[]);
    assert_eq!(status(&a), "MISS");
    std::thread::sleep(Duration::from_millis(1600));
    // Same key (the template ignores the query); the origin now answers 500.
    let b = s.get("/obj/3k/13?max_age=1&status=500", &[]);
    assert_eq!((b.status, status(&b)), (200, "STALE"));
    assert_eq!(b.body, a.body);
    s.origin.signal("KILL");
    s.origin.wait_exit(Duration::from_secs(5));
    let c = s.get("/obj/3k/13", &[]);
    assert_eq!((c.status, status(&c)), (200, "STALE"), "origin down");
    assert_eq!(c.body, a.body);
    // Nothing stale to fall back on: the error is the client's.
    let d = s.get("/obj/3k/14", &[]);
    assert_eq!((d.status, status(&d)), (502, "MISS"));
    assert!(s.cache.stderr().contains("serving stale"));
}

#[test]
fn stale_is_not_served_without_use_stale() {
    let s = setup("", "cache_key = \"$scheme://$host$uri\"");
    assert_eq!(status(&s.get("/obj/3k/15?max_age=1", &[])), "MISS");
    std::thread::sleep(Duration::from_millis(1600));
    let b = s.get("/obj/3k/15?max_age=1&status=500", &[]);
    assert_eq!(b.status, 500, "the origin's 500 passes through");
    assert_eq!(status(&b), "EXPIRED");
}

#[test]
fn range_conditional_and_head_on_hits() {
    let s = setup("", "");
    let full = s.get("/obj/100k/16", &[]).body;
    // A HEAD miss fills the object (fetched with GET) and sends no body.
    let h = Client::connect(s.addr).request("HEAD", "/obj/64k/17", &[]);
    assert_eq!((h.status, status(&h)), (200, "MISS"));
    assert_eq!(h.header("content-length"), Some("65536"));
    let g = s.get("/obj/64k/17", &[]);
    assert_eq!((status(&g), g.body.len()), ("HIT", 65536));
    let h2 = Client::connect(s.addr).request("HEAD", "/obj/100k/16", &[]);
    assert_eq!((h2.status, status(&h2)), (200, "HIT"));
    assert_eq!(h2.header("content-length"), Some("102400"));
    assert!(h2.body.is_empty());

    let r = s.get("/obj/100k/16", &["Range: bytes=100-199"]);
    assert_eq!((r.status, status(&r)), (206, "HIT"));
    assert_eq!(r.header("content-range"), Some("bytes 100-199/102400"));
    assert_eq!(r.body, full[100..200]);
    let r = s.get("/obj/100k/16", &["Range: bytes=-50000"]);
    assert_eq!(r.status, 206);
    assert_eq!(
        r.body,
        full[102400 - 50000..],
        "a large range goes by sendfile"
    );

    let m = s.get("/obj/100k/16", &["Range: bytes=0-9,1000-1009"]);
    assert_eq!(m.status, 206);
    let ct = m.header("content-type").unwrap().to_string();
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .expect(&ct);
    let body = m.body.clone();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("Content-Range: bytes 0-9/102400"));
    assert!(text.contains("Content-Range: bytes 1000-1009/102400"));
    assert!(text.ends_with(&format!("\r\n--{boundary}--\r\n")));
    let find = |needle: &[u8]| body.windows(needle.len()).any(|w| w == needle);
    assert!(find(&full[0..10]) && find(&full[1000..1010]));

    let u = s.get("/obj/100k/16", &["Range: bytes=200000-"]);
    assert_eq!(u.status, 416);
    assert_eq!(u.header("content-range"), Some("bytes */102400"));

    let etag = s
        .get("/obj/100k/16", &[])
        .header("etag")
        .unwrap()
        .to_string();
    let nm = s.get("/obj/100k/16", &[&format!("If-None-Match: {etag}")]);
    assert_eq!((nm.status, status(&nm)), (304, "HIT"));
    assert!(nm.body.is_empty());
    assert_eq!(nm.header("etag"), Some(etag.as_str()));
    let other = s.get("/obj/100k/16", &["If-None-Match: \"nope\""]);
    assert_eq!((other.status, other.body.len()), (200, 102400));
    // If-Range with a different validator: the whole object.
    let ir = s.get("/obj/100k/16", &["Range: bytes=0-9", "If-Range: \"old\""]);
    assert_eq!((ir.status, ir.body.len()), (200, 102400));
    let ir = s.get(
        "/obj/100k/16",
        &["Range: bytes=0-9", &format!("If-Range: {etag}")],
    );
    assert_eq!((ir.status, ir.body.len()), (206, 10));
}

#[test]
fn purge_method_needs_an_allowed_address() {
    let s = setup("", "");
    assert_eq!(status(&s.get("/obj/1k/20", &[])), "MISS");
    assert_eq!(status(&s.get("/obj/1k/20", &[])), "HIT");
    let p = Client::connect(s.addr).request("PURGE", "/obj/1k/20", &[]);
    assert_eq!(p.status, 200);
    assert_eq!(p.body, b"{\"purged\": 1}\n");
    let again = Client::connect(s.addr).request("PURGE", "/obj/1k/20", &[]);
    assert_eq!(again.status, 404);
    assert_eq!(again.body, b"{\"purged\": 0}\n");
    assert_eq!(status(&s.get("/obj/1k/20", &[])), "MISS");

    // This node shuts loopback out of the admin listener too, so the EDGECACHE_TEST_AIO
    // matrix could not read its backend from /status: it runs with its own `[aio]`
    // (the default), which a purge's permission does not depend on.
    // (The location's keys end where a table starts: `[aio]` follows them.)
    let denied = setup_allow("", "[aio]\nmode = \"auto\"", "\"10.0.0.0/8\"");
    assert_eq!(status(&denied.get("/obj/1k/20", &[])), "MISS");
    let p = Client::connect(denied.addr).request("PURGE", "/obj/1k/20", &[]);
    assert_eq!(p.status, 403);
    assert_eq!(
        status(&denied.get("/obj/1k/20", &[])),
        "HIT",
        "still cached"
    );
}

#[test]
fn admin_purge_by_url_prefix_and_tag() {
    let s = setup("", "");
    for p in [
        "/obj/1k/21",
        "/obj/1k/22",
        "/obj/2k/21",
        "/obj/1k/23?tag=red,blue",
        "/obj/1k/24?tag=blue",
    ] {
        assert_eq!(status(&s.get(p, &[])), "MISS", "{p}");
    }
    let r = post_form(s.admin, "/purge", "url=http%3A%2F%2Ftest%2Fobj%2F1k%2F21");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"{\"purged\": 1}\n"[..])
    );
    assert_eq!(status(&s.get("/obj/1k/21", &[])), "MISS");

    let r = post_form(s.admin, "/purge", "prefix=http://test/obj/1k/");
    assert_eq!(r.status, 200);
    // 1k/21 (just refetched), 1k/22, and the two tagged 1k objects.
    assert_eq!(r.body, b"{\"purged\": 4}\n");
    assert_eq!(status(&s.get("/obj/1k/22", &[])), "MISS");
    assert_eq!(
        status(&s.get("/obj/2k/21", &[])),
        "HIT",
        "outside the prefix"
    );

    for p in ["/obj/1k/23?tag=red,blue", "/obj/1k/24?tag=blue"] {
        assert_eq!(status(&s.get(p, &[])), "MISS");
    }
    let r = post_form(s.admin, "/purge", "tag=blue");
    assert_eq!(r.body, b"{\"purged\": 2}\n");
    assert_eq!(status(&s.get("/obj/1k/23?tag=red,blue", &[])), "MISS");
    let r = post_form(s.admin, "/purge", "tag=green");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (404, &b"{\"purged\": 0}\n"[..])
    );
    let bad = post_form(s.admin, "/purge", "nothing=1");
    assert_eq!(bad.status, 400);
    let get_purge = get(s.admin, "/purge?tag=red", &[]);
    assert_eq!(get_purge.status, 405);
}

#[test]
fn soft_purge_revalidates_instead_of_hitting() {
    let s = setup("", "");
    let a = s.get("/obj/1k/25", &[]);
    assert_eq!(status(&a), "MISS");
    let r = post_form(s.admin, "/purge", "url=http://test/obj/1k/25&soft=1");
    assert_eq!(r.body, b"{\"purged\": 1}\n");
    let before = s.origin_count();
    let b = s.get("/obj/1k/25", &[]);
    assert_eq!((b.status, status(&b)), (200, "REVALIDATED"));
    assert_eq!(b.body, a.body);
    assert_eq!(s.origin_count() - before, 1);
    assert_eq!(status(&s.get("/obj/1k/25", &[])), "HIT");
}

#[test]
fn soft_purge_with_background_update_serves_updating() {
    let s = setup(
        "",
        "use_stale = [\"updating\", \"error\"]\nbackground_update = true",
    );
    let a = s.get("/obj/1k/26?tag=t", &[]);
    assert_eq!(status(&a), "MISS");
    let before = s.origin_count();
    let r = post_form(s.admin, "/purge", "tag=t&soft=1");
    assert_eq!(r.body, b"{\"purged\": 1}\n");
    let b = s.get("/obj/1k/26?tag=t", &[]);
    assert_eq!((b.status, status(&b)), (200, "UPDATING"));
    assert_eq!(b.body, a.body);
    // The background refresh (one origin request) makes it fresh again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let c = s.get("/obj/1k/26?tag=t", &[]);
        if status(&c) == "HIT" {
            break;
        }
        assert!(Instant::now() < deadline, "never refreshed: {}", status(&c));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(s.origin_count() - before, 1);
}

#[test]
fn kill_9_during_a_slow_fill_never_leaves_a_truncated_object() {
    let mut s = setup("", "");
    let addr = s.addr;
    // 50 MiB at 50 MB/s: about a second; the kill lands in the middle.
    let fetch = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.write_all(b"GET /obj/50m/27?slow_bps=50000000 HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        let mut n = 0usize;
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(k) = c.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k;
        }
        n
    });
    std::thread::sleep(Duration::from_millis(400));
    s.cache.signal("KILL");
    let got = fetch.join().unwrap();
    assert!(
        got < 50 << 20,
        "the kill cut the first response ({got} bytes)"
    );
    let killed = s.cache.pid();
    let cfg = s.config("", "");
    let (p, addr, admin) = edgecache(&cfg);
    s.cache = p;
    s.addr = addr;
    // The same key (the query is part of it).
    let mut c = Client::connect(addr);
    c.set_read_timeout(Duration::from_secs(30));
    let r = c.get("/obj/50m/27?slow_bps=50000000", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 50 << 20, "never a truncated body");
    assert_eq!(status(&r), "MISS", "the killed fill was never servable");
    // The killed process's temp files (its fill's, and its spares) are gone once the
    // loader ran: the temp files left are the new process's spares.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !get_text(admin, "/status").contains("\"done\": true") {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    let spare = format!("/spare.tmp.{}-", s.cache.pid());
    let tmps: Vec<_> = files(&s.dir.path().join("cache"))
        .into_iter()
        .filter(|(p, _)| p.contains(".tmp.") && !p.contains(&spare))
        .collect();
    assert!(tmps.is_empty(), "killed pid {killed}: {tmps:?}");
}

#[test]
fn eviction_keeps_disk_use_under_max_size() {
    let s = setup("max_size = \"256k\"", "");
    for i in 0..40 {
        let r = s.get(&format!("/obj/20k/{}", 100 + i), &[]);
        assert_eq!((r.status, r.body.len()), (200, 20 * 1024));
    }
    let max = 256 * 1024;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = s.status_json();
        let disk = json_number(&st.replace(' ', ""), "disk_bytes").unwrap();
        let on_disk: u64 = files(&s.dir.path().join("cache")).iter().map(|f| f.1).sum();
        if disk <= max && on_disk <= max {
            let ev = json_number(&st.replace(' ', ""), "evictions").unwrap();
            assert!(ev >= 20, "evicted {ev}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "disk {disk} / files {on_disk} over {max}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The most recent object survived.
    assert_eq!(status(&s.get("/obj/20k/139", &[])), "HIT");
}

#[test]
fn cache_bypass_header_goes_to_the_origin() {
    let s = setup("", "cache_bypass = [{ header = \"X-Bypass\" }]");
    assert_eq!(status(&s.get("/obj/1k/30", &[])), "MISS");
    let before = s.origin_count();
    let b = s.get("/obj/1k/30", &["X-Bypass: 1"]);
    assert_eq!((b.status, status(&b)), (200, "BYPASS"));
    assert_eq!(s.origin_count() - before, 1);
    assert_eq!(status(&s.get("/obj/1k/30", &["X-Bypass: 0"])), "HIT");
    // Other methods are never cached.
    let mut c = Client::connect(s.addr);
    c.send(b"POST /obj/1k/30 HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\n\r\nhi");
    let p = c.read_response(false);
    assert_eq!(status(&p), "BYPASS");
}

#[test]
fn write_failures_still_serve_complete_responses() {
    let s = {
        let (origin, origin_addr) = origin();
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        std::fs::create_dir_all(&cache).unwrap();
        // Every first-level directory name is taken by a plain file, so creating an
        // object fails with ENOTDIR (chmod would not stop root).
        for c in "0123456789abcdef".chars() {
            std::fs::write(cache.join(c.to_string()), b"x").unwrap();
        }
        let cfg = cached_config(origin_addr, &cache, "", "", LOCAL);
        let (p, addr, admin) = edgecache(&cfg);
        Setup {
            origin,
            origin_addr,
            cache: p,
            addr,
            admin,
            dir,
        }
    };
    let direct = get(s.origin_addr, "/obj/100k/31", &[]).body;
    for _ in 0..3 {
        let r = s.get("/obj/100k/31", &[]);
        assert_eq!((r.status, status(&r)), (200, "MISS"));
        assert_eq!(r.body, direct);
    }
    // Concurrent requests: followers are told to fetch on their own.
    let addr = s.addr;
    let ts: Vec<_> = (0..5)
        .map(|_| std::thread::spawn(move || get(addr, "/obj/100k/31?slow_bps=1000000", &[])))
        .collect();
    for t in ts {
        let r = t.join().unwrap();
        assert_eq!((r.status, r.body.len()), (200, 100 * 1024));
    }
    let st = s.status_json().replace(' ', "");
    assert!(json_number(&st, "write_errors").unwrap() >= 4, "{st}");
}

#[test]
fn leader_failing_mid_body_aborts_followers_and_stores_nothing() {
    let s = setup("", "cache_key = \"$scheme://$host$uri\"");
    // The origin sends half of the body, then resets; the followers' heads promised the
    // full length, so their connections must be cut, never completed short.
    let path = "/obj/1m/40?reset=1&slow_bps=2000000";
    let t0 = Instant::now();
    let addr = s.addr;
    let ts: Vec<_> = (0..5)
        .map(|_| std::thread::spawn(move || timed_get(addr, path, t0)))
        .collect();
    for t in ts {
        let (line, _cs, len, ..) = t.join().unwrap();
        assert_eq!(line, "HTTP/1.1 200 OK");
        assert!(
            len < 1 << 20,
            "a cut body must not look complete ({len} bytes)"
        );
    }
    let r = s.get("/obj/1m/40", &[]);
    assert_eq!((r.status, status(&r)), (200, "MISS"), "nothing was stored");
    assert_eq!(r.body.len(), 1 << 20);
    assert_eq!(status(&s.get("/obj/1m/40", &[])), "HIT");
}

#[test]
fn followers_complete_when_the_leaders_client_goes_away() {
    let s = setup("", "");
    let path = "/obj/1m/41?slow_bps=2000000";
    let before = s.origin_count();
    // The leader's client reads the head and a little body, then hangs up.
    let mut leader = TcpStream::connect(s.addr).unwrap();
    write!(leader, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut buf = [0u8; 4096];
    assert!(leader.read(&mut buf).unwrap() > 0);
    let addr = s.addr;
    let follower = std::thread::spawn(move || timed_get(addr, path, Instant::now()));
    std::thread::sleep(Duration::from_millis(100));
    drop(leader);
    let (line, cs, len, ..) = follower.join().unwrap();
    assert_eq!(
        (line.as_str(), cs.as_str(), len),
        ("HTTP/1.1 200 OK", "HIT", 1 << 20)
    );
    let r = s.get(path, &[]);
    assert_eq!(status(&r), "HIT", "the fill completed and was stored");
    assert_eq!(r.body.len(), 1 << 20);
    assert_eq!(s.origin_count() - before, 1);
}

#[test]
fn cache_lock_timeout_bounds_the_wait() {
    let s = setup("", "cache_lock_timeout = \"300ms\"");
    let path = "/obj/8k/42?delay_ms=1500";
    let before = s.origin_count();
    let addr = s.addr;
    let leader = std::thread::spawn(move || get(addr, path, &[]));
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    let follower = get(addr, path, &[]);
    // The follower gave up waiting after 300 ms and fetched on its own (the origin
    // still takes 1.5 s for it).
    assert_eq!((follower.status, status(&follower)), (200, "MISS"));
    assert_eq!(follower.body.len(), 8192);
    assert!(t.elapsed() >= Duration::from_millis(1500));
    let l = leader.join().unwrap();
    assert_eq!((l.status, status(&l)), (200, "MISS"));
    assert_eq!(l.body, follower.body);
    assert_eq!(s.origin_count() - before, 2);
    assert_eq!(status(&s.get(path, &[])), "HIT");
}

#[test]
fn min_uses_and_no_cache_conditions() {
    let s = setup(
        "",
        "cache_min_uses = 2\nno_cache = [{ cookie = \"nocache\" }]",
    );
    let before = s.origin_count();
    assert_eq!(status(&s.get("/obj/1k/43", &[])), "MISS");
    assert_eq!(
        status(&s.get("/obj/1k/43", &[])),
        "MISS",
        "stored only from the 2nd use"
    );
    assert_eq!(status(&s.get("/obj/1k/43", &[])), "HIT");
    assert_eq!(s.origin_count() - before, 2);
    // no_cache: never stored from these requests, but hits are still served to them.
    for _ in 0..3 {
        let r = s.get("/obj/1k/44", &["Cookie: nocache=1"]);
        assert_eq!((r.status, status(&r)), (200, "MISS"));
    }
    assert_eq!(status(&s.get("/obj/1k/43", &["Cookie: nocache=1"])), "HIT");
    assert!(s.status_json().contains("\"entries\": 1"));
}

#[test]
fn several_caches_share_the_objects_by_key_hash() {
    let (_origin, origin_addr) = origin();
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        r#"workers = 1
worker_cpu_affinity = "off"
[[listen]]
addr = "{{listen}}"
[[cache]]
name = "d1"
path = "{d1}"
[[cache]]
name = "d2"
path = "{d2}"
[[upstream]]
name = "origin"
servers = ["{origin_addr}"]
[[location]]
prefix = "/"
proxy = "origin"
cache = ["d1", "d2"]
[admin]
listen = "{{admin}}"
"#,
        d1 = dir.path().join("d1").display(),
        d2 = dir.path().join("d2").display()
    );
    let (_p, addr, admin) = edgecache(&cfg);
    for i in 0..24 {
        assert_eq!(
            status(&get(addr, &format!("/obj/1k/{}", 200 + i), &[])),
            "MISS"
        );
    }
    for i in 0..24 {
        assert_eq!(
            status(&get(addr, &format!("/obj/1k/{}", 200 + i), &[])),
            "HIT"
        );
    }
    let m = get_text(admin, "/metrics");
    let entries = |c: &str| {
        let pat = format!("edgecache_cache_entries{{cache=\"{c}\"}} ");
        let at = m.find(&pat).unwrap() + pat.len();
        m[at..].lines().next().unwrap().parse::<u64>().unwrap()
    };
    let (a, b) = (entries("d1"), entries("d2"));
    assert_eq!(a + b, 24);
    assert!(a > 0 && b > 0, "both disks used: {a} + {b}");
}

#[test]
fn ranged_followers_stream_their_range_from_the_fill() {
    let s = setup("", "");
    let path = "/obj/1m/45?slow_bps=2000000";
    let full = get(s.origin_addr, "/obj/1m/45", &[]).body;
    let before = s.origin_count();
    let addr = s.addr;
    let leader = std::thread::spawn(move || get(addr, path, &[]));
    std::thread::sleep(Duration::from_millis(150));
    let ranges = [
        (0u64, 99u64),
        (1000, 1999),
        (500_000, 600_000),
        (1_048_000, 1_048_575),
    ];
    let ts: Vec<_> = ranges
        .iter()
        .map(|&(a, b)| {
            std::thread::spawn(move || get(addr, path, &[&format!("Range: bytes={a}-{b}")]))
        })
        .collect();
    let bad = std::thread::spawn(move || get(addr, path, &["Range: bytes=2000000-"]));
    for (t, (a, b)) in ts.into_iter().zip(ranges) {
        let r = t.join().unwrap();
        assert_eq!((r.status, status(&r)), (206, "HIT"));
        assert_eq!(
            r.header("content-range").unwrap(),
            format!("bytes {a}-{b}/1048576")
        );
        assert_eq!(r.body, full[a as usize..=b as usize]);
    }
    let u = bad.join().unwrap();
    assert_eq!(
        (u.status, u.header("content-range")),
        (416, Some("bytes */1048576"))
    );
    let l = leader.join().unwrap();
    assert_eq!((l.status, status(&l)), (200, "MISS"));
    assert_eq!(l.body, full);
    assert_eq!(s.origin_count() - before, 1);
}

#[test]
fn use_stale_updating_serves_others_while_one_request_revalidates() {
    let s = setup(
        "",
        "cache_key = \"$scheme://$host$uri\"\nuse_stale = [\"updating\"]",
    );
    let a = s.get("/obj/2k/46?max_age=1", &[]);
    assert_eq!(status(&a), "MISS");
    std::thread::sleep(Duration::from_millis(1600));
    // The first request after expiry revalidates, slowly; meanwhile others get the
    // stale object at once instead of waiting for it.
    let addr = s.addr;
    let slow = std::thread::spawn(move || get(addr, "/obj/2k/46?max_age=60&delay_ms=1500", &[]));
    std::thread::sleep(Duration::from_millis(200));
    let b = s.get("/obj/2k/46", &[]);
    assert!(
        !slow.is_finished(),
        "answered while the refresh was still pending"
    );
    assert_eq!((b.status, status(&b)), (200, "UPDATING"));
    assert_eq!(b.body, a.body);
    let r = slow.join().unwrap();
    assert_eq!((r.status, status(&r)), (200, "REVALIDATED"));
    let c = s.get("/obj/2k/46", &[]);
    assert_eq!(status(&c), "HIT", "fresh for 60 s after the 304");
}

#[test]
fn the_leaders_client_gets_the_origins_bytes_and_the_object_is_stored_by_its_last_byte() {
    // The leader's client is fed from the fill task (no read back from the file); the
    // chunk that ends the body waits for the commit, so a PURGE sent the moment the
    // response is complete finds the object (as it would after a follower's).
    let s = setup("", "");
    for (size, n) in [("1k", 5), ("100k", 5), ("3m", 3)] {
        for id in 0..n {
            let path = format!("/obj/{size}/{}", 60 + id);
            let full = get(s.origin_addr, &path, &[]).body;
            let r = s.get(&path, &[]);
            assert_eq!((r.status, status(&r)), (200, "MISS"), "{path}");
            assert_eq!(r.body.len(), full.len(), "{path}");
            assert!(
                r.body == full,
                "{path}: the leader's bytes differ from the origin's"
            );
            let p = Client::connect(s.addr).request("PURGE", &path, &[]);
            assert_eq!(
                (p.status, p.body.as_slice()),
                (200, &b"{\"purged\": 1}\n"[..]),
                "{path}: stored before the client had its last byte"
            );
        }
    }
}

#[test]
fn range_on_a_miss_gets_its_range_while_the_whole_object_is_stored() {
    let s = setup("", "");
    let full = get(s.origin_addr, "/obj/1m/47", &[]).body;
    let before = s.origin_count();
    let r = s.get("/obj/1m/47", &["Range: bytes=700000-700099"]);
    assert_eq!((r.status, status(&r)), (206, "MISS"));
    assert_eq!(
        r.header("content-range"),
        Some("bytes 700000-700099/1048576")
    );
    assert_eq!(r.body, full[700000..700100]);
    let h = s.get("/obj/1m/47", &[]);
    assert_eq!(
        (h.status, status(&h)),
        (200, "HIT"),
        "the whole object was stored"
    );
    assert_eq!(h.body, full);
    let u = s.get("/obj/1k/47", &["Range: bytes=5000-"]);
    assert_eq!((u.status, status(&u)), (416, "MISS"));
    assert_eq!(u.header("content-range"), Some("bytes */1024"));
    assert_eq!(status(&s.get("/obj/1k/47", &[])), "HIT");
    // Several ranges on a miss: a multipart/byteranges 206 (conformance.rs has more).
    let m = s.get("/obj/2k/47", &["Range: bytes=0-1,5-6"]);
    assert_eq!(m.status, 206);
    assert!(m
        .header("content-type")
        .is_some_and(|t| t.starts_with("multipart/byteranges")));
    assert_eq!(s.origin_count() - before, 3);
}

#[test]
fn a_client_that_does_not_read_never_slows_the_fill() {
    let s = setup("", "");
    // 32 MiB, far more than loopback socket buffers hold, at 64 MB/s.
    let path = "/obj/32m/48?slow_bps=64000000";
    let before = s.origin_count();
    let mut leader = TcpStream::connect(s.addr).unwrap();
    leader
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(leader, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // The leader's client reads nothing; a follower still gets everything at the
    // origin's pace (before, it was held to the leader's client: send_timeout, 60 s).
    let (line, cs, len, ..) = timed_get(s.addr, path, Instant::now());
    assert_eq!(
        (line.as_str(), cs.as_str(), len),
        ("HTTP/1.1 200 OK", "HIT", 32 << 20)
    );
    let h = s.get(path, &[]);
    assert_eq!((status(&h), h.body.len()), ("HIT", 32 << 20), "stored");
    // Only now does the leader's client read: its whole response is there.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let head_end = loop {
        let n = leader.read(&mut buf).unwrap();
        assert!(n > 0, "leader response cut");
        got.extend_from_slice(&buf[..n]);
        if let Some(p) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&got[..head_end]).into_owned();
    assert!(head.contains("X-Cache-Status: MISS"), "{head}");
    let mut body = got.len() - head_end;
    while body < 32 << 20 {
        let n = leader.read(&mut buf).unwrap();
        assert!(n > 0, "leader body cut at {body}");
        body += n;
    }
    assert_eq!(body, 32 << 20);
    assert_eq!(s.origin_count() - before, 1);
}

#[test]
fn a_disk_write_error_mid_body_still_completes_the_leaders_response() {
    // RLIMIT_FSIZE of 1 MiB (SIGXFSZ ignored, which exec keeps): writing an object past
    // 1 MiB fails with EFBIG in the middle of its body.
    let (_origin, origin_addr) = origin();
    let dir = tempfile::tempdir().unwrap();
    let cfg = cached_config(origin_addr, &dir.path().join("cache"), "", "", LOCAL);
    let listen = edge_testkit::free_addr();
    let admin = edge_testkit::free_addr();
    let cfg = cfg
        .replace("{listen}", &listen.to_string())
        .replace("{admin}", &admin.to_string());
    let cfg_path = dir.path().join("edgecache.toml");
    std::fs::write(&cfg_path, cfg).unwrap();
    let script = format!(
        "trap '' XFSZ; ulimit -f 1024; exec {} -c {}",
        edge_testkit::bin("edgecache").display(),
        cfg_path.display()
    );
    let mut p = edge_testkit::Proc::spawn(std::path::Path::new("/usr/bin/bash"), &["-c", &script]);
    p.wait_port(listen, common::START);
    let full = get(origin_addr, "/obj/4m/49", &[]).body;
    // 2 MB/s: the write fails after ~0.5 s, well after the follower joined.
    let path = "/obj/4m/49?slow_bps=2000000";
    let t0 = Instant::now();
    let leader = std::thread::spawn(move || timed_get(listen, path, t0));
    std::thread::sleep(Duration::from_millis(100));
    let follower = std::thread::spawn(move || timed_get(listen, path, t0));
    let (line, cs, len, hash, ..) = leader.join().unwrap();
    assert_eq!((line.as_str(), cs.as_str()), ("HTTP/1.1 200 OK", "MISS"));
    assert_eq!(len, 4 << 20, "the leader's client gets everything");
    let expect = {
        use std::hash::Hasher;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        h.write(&full);
        h.finish()
    };
    assert_eq!(hash, expect);
    let (fline, fcs, flen, ..) = follower.join().unwrap();
    assert_eq!((fline.as_str(), fcs.as_str()), ("HTTP/1.1 200 OK", "HIT"));
    assert!(
        flen < 4 << 20,
        "a follower is cut, never completed short ({flen})"
    );
    let st = get_text(admin, "/status").replace(' ', "");
    assert!(json_number(&st, "write_errors").unwrap() >= 1, "{st}");
    assert_eq!(json_number(&st, "entries"), Some(0));
    // Small objects still work under the limit.
    assert_eq!(status(&get(listen, "/obj/10k/49", &[])), "MISS");
    assert_eq!(status(&get(listen, "/obj/10k/49", &[])), "HIT");
}

#[test]
fn without_cache_lock_each_miss_fetches_and_ranges_still_apply() {
    let s = setup("", "cache_lock = false");
    let full = get(s.origin_addr, "/obj/100k/50", &[]).body;
    let r = s.get("/obj/100k/50", &["Range: bytes=10-19"]);
    assert_eq!((r.status, status(&r)), (206, "MISS"));
    assert_eq!(r.body, full[10..20]);
    // The client had its 10 bytes before the rest of the object reached the disk (the
    // store runs on at the origin's pace, through the file I/O backend): without the
    // lock, a request meanwhile is a MISS of its own. Once stored, it is a HIT.
    let deadline = Instant::now() + Duration::from_secs(10);
    let h = loop {
        let h = s.get("/obj/100k/50", &[]);
        if status(&h) == "HIT" || Instant::now() > deadline {
            break h;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!((h.status, status(&h), h.body.len()), (200, "HIT", 102400));
    assert_eq!(h.body, full);
}

#[test]
fn an_http10_follower_of_a_chunked_fill_gets_a_close_delimited_body() {
    let s = setup("", "");
    let path = "/obj/256k/51?chunked=1&slow_bps=1000000";
    let full = get(s.origin_addr, "/obj/256k/51", &[]).body;
    let addr = s.addr;
    let leader = std::thread::spawn(move || get(addr, path, &[]));
    std::thread::sleep(Duration::from_millis(100));
    let mut c = Client::connect(s.addr);
    c.send(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes());
    let raw = c.read_to_close();
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    assert!(head.contains("x-cache-status: hit"), "{head}");
    assert!(
        !head.contains("transfer-encoding"),
        "no chunked framing for 1.0: {head}"
    );
    assert!(head.contains("connection: close"), "{head}");
    assert_eq!(&raw[end..], &full[..], "the body ends at the close");
    let l = leader.join().unwrap();
    assert_eq!(l.header("transfer-encoding"), Some("chunked"));
    assert_eq!(l.body, full);
}

#[test]
fn the_access_log_records_the_cache_status() {
    let (_o, origin_addr) = origin();
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        "access_log = {{ path = \"logs/access.log\", buffer = \"64k\", flush = \"100ms\" }}\n{}",
        cached_config(origin_addr, &dir.path().join("cache"), "", "", LOCAL)
    );
    let (p, addr, _) = edgecache(&cfg);
    assert_eq!(status(&get(addr, "/obj/1k/52", &[])), "MISS");
    assert_eq!(status(&get(addr, "/obj/1k/52", &[])), "HIT");
    let log = p.dir().join("logs/access.log");
    let mut lines = Vec::new();
    for _ in 0..100 {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        lines = text.lines().map(str::to_owned).collect();
        if lines.len() >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(lines.len(), 2, "{lines:?}");
    // A line is written when its exchange ends: a MISS whose store commits after the
    // client had every byte may log after the HIT that followed it.
    let mut statuses: Vec<&str> = lines.iter().filter_map(|l| l.rsplit(' ').next()).collect();
    statuses.sort();
    assert_eq!(statuses, ["HIT", "MISS"], "{lines:?}");
    assert!(lines
        .iter()
        .all(|l| l.contains("\"GET /obj/1k/52 HTTP/1.1\" 200 1024")));
}

#[test]
fn origin_stale_while_revalidate_serves_updating_and_refreshes_once() {
    // No use_stale in the config: the origin's stale-while-revalidate is permission
    // enough (RFC 5861). The key template ignores the query, so the refresh below can
    // ask the origin for a longer max-age on the same object.
    let s = setup("", "cache_key = \"$scheme://$host$uri\"");
    let a = s.get("/obj/2k/41?max_age=1&swr=30", &[]);
    assert_eq!(status(&a), "MISS");
    std::thread::sleep(Duration::from_millis(1600));
    let before = s.origin_count();
    let b = s.get("/obj/2k/41?max_age=60&swr=30", &[]);
    assert_eq!(
        (b.status, status(&b)),
        (200, "UPDATING"),
        "stale at once, refreshed behind"
    );
    assert_eq!(b.body, a.body);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let c = s.get("/obj/2k/41", &[]);
        if status(&c) == "HIT" {
            assert_eq!(c.body, a.body);
            break;
        }
        assert!(Instant::now() < deadline, "never refreshed: {}", status(&c));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(s.origin_count() - before, 1, "one background refresh");
}

#[test]
fn origin_stale_if_error_serves_stale_without_use_stale() {
    let s = setup("", "cache_key = \"$scheme://$host$uri\"");
    let a = s.get("/obj/2k/42?max_age=1&sie=60", &[]);
    assert_eq!(status(&a), "MISS");
    std::thread::sleep(Duration::from_millis(1600));
    // The refetch gets a 500: the object's stale-if-error window allows serving it stale.
    let b = s.get("/obj/2k/42?max_age=1&sie=60&status=500", &[]);
    assert_eq!((b.status, status(&b)), (200, "STALE"));
    assert_eq!(b.body, a.body);
}
