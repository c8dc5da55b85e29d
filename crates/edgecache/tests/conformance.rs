//! HTTP caching conformance (RFC 9111, 9211, 9213, 9110), end to end: the real
//! `edgecache` in front of a scripted origin that sends exact response heads, with the
//! origin's request count checked wherever it decides the verdict.

mod common;

use common::{cached_config, edgecache, post_form, LOCAL};
use edge_testkit::{get, Client, Proc, Response};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the scripted origin answers: given the method and the path (with query), the
/// raw response bytes (head and body).
type Script = Arc<dyn Fn(&str, &str) -> Vec<u8> + Send + Sync>;

/// A real HTTP/1.1 origin on 127.0.0.1 that answers each request with `script`'s bytes
/// and counts requests per `"METHOD path"`.
struct Origin {
    addr: SocketAddr,
    seen: Arc<Mutex<HashMap<String, usize>>>,
}

impl Origin {
    fn start(script: impl Fn(&str, &str) -> Vec<u8> + Send + Sync + 'static) -> Origin {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let seen: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let script: Script = Arc::new(script);
        let s2 = seen.clone();
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let (seen, script) = (s2.clone(), script.clone());
                std::thread::spawn(move || serve(c, seen, script));
            }
        });
        Origin { addr, seen }
    }

    fn count(&self, method: &str, path: &str) -> usize {
        let k = format!("{method} {path}");
        *self.seen.lock().unwrap().get(&k).unwrap_or(&0)
    }
}

fn serve(mut c: TcpStream, seen: Arc<Mutex<HashMap<String, usize>>>, script: Script) {
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            let mut tmp = [0u8; 4096];
            match c.read(&mut tmp) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        // Request bodies: Content-Length only (the tests send no chunked bodies).
        let len = head
            .lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        while buf.len() < len {
            let mut tmp = [0u8; 4096];
            match c.read(&mut tmp) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
        buf.drain(..len);
        let mut words = head.split_whitespace();
        let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        *seen
            .lock()
            .unwrap()
            .entry(format!("{method} {path}"))
            .or_default() += 1;
        let resp = script(method, path);
        if c.write_all(&resp).is_err() {
            return;
        }
        // A response that says it closes (a close-delimited body) ends here.
        let end = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0);
        if String::from_utf8_lossy(&resp[..end])
            .to_ascii_lowercase()
            .contains("\r\nconnection: close")
        {
            return;
        }
    }
}

/// A 200 with `headers` (CRLF-terminated lines) and `body`.
fn ok(headers: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The origin, and edgecache caching everything under `/` in front of it
/// (`location_extra` adds location keys).
struct Node {
    origin: Origin,
    _cache: Proc,
    addr: SocketAddr,
    admin: SocketAddr,
    _dir: tempfile::TempDir,
}

fn node(
    location_extra: &str,
    script: impl Fn(&str, &str) -> Vec<u8> + Send + Sync + 'static,
) -> Node {
    let origin = Origin::start(script);
    let dir = tempfile::tempdir().unwrap();
    let cfg = cached_config(
        origin.addr,
        &dir.path().join("c"),
        "",
        location_extra,
        LOCAL,
    );
    let (cache, addr, admin) = edgecache(&cfg);
    Node {
        origin,
        _cache: cache,
        addr,
        admin,
        _dir: dir,
    }
}

fn xcs(r: &Response) -> &str {
    r.header("x-cache-status").unwrap_or("-")
}

fn request(addr: SocketAddr, method: &str, path: &str, headers: &[&str]) -> Response {
    Client::connect(addr).request(method, path, headers)
}

// ---- Invalidation (RFC 9111 4.4) ----

#[test]
fn unsafe_methods_invalidate_the_uri_and_same_origin_locations() {
    let n = node("", |method, path| match (method, path) {
        ("GET", _) => ok("Cache-Control: max-age=600\r\n", path),
        ("POST", "/fail") => b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n".to_vec(),
        ("POST", _) => ok(
            "Location: /loc\r\nContent-Location: http://TEST/cl\r\n",
            "done",
        ),
        (_, _) => ok("", "changed"),
    });
    for p in ["/a", "/loc", "/cl", "/other", "/fail", "/m"] {
        assert_eq!(xcs(&get(n.addr, p, &[])), "MISS", "{p}");
        assert_eq!(xcs(&get(n.addr, p, &[])), "HIT", "{p}");
    }
    // A POST answered 200 invalidates its URI, Location and Content-Location (same
    // host); other URIs stay.
    let r = request(n.addr, "POST", "/a", &["Content-Length: 0"]);
    assert_eq!((r.status, xcs(&r)), (200, "BYPASS"));
    for p in ["/a", "/loc", "/cl"] {
        assert_eq!(xcs(&get(n.addr, p, &[])), "MISS", "{p} invalidated");
        assert_eq!(n.origin.count("GET", p), 2, "{p} refetched once");
    }
    assert_eq!(xcs(&get(n.addr, "/other", &[])), "HIT");
    // An error answer invalidates nothing.
    let r = request(n.addr, "POST", "/fail", &["Content-Length: 0"]);
    assert_eq!(r.status, 500);
    assert_eq!(
        xcs(&get(n.addr, "/fail", &[])),
        "HIT",
        "a 5xx does not invalidate"
    );
    // PUT, DELETE, PATCH and an unknown method invalidate too.
    for m in ["PUT", "DELETE", "PATCH", "M-SEARCH"] {
        assert_eq!(xcs(&get(n.addr, "/m", &[])), "HIT", "{m}: cached before");
        let r = request(n.addr, m, "/m", &["Content-Length: 0"]);
        assert_eq!(r.status, 200, "{m}");
        assert_eq!(xcs(&get(n.addr, "/m", &[])), "MISS", "{m} invalidated /m");
    }
}

#[test]
fn a_location_on_another_host_is_not_invalidated() {
    let n = node("", |method, path| match method {
        "GET" => ok("Cache-Control: max-age=600\r\n", path),
        _ => ok("Location: http://elsewhere.example/b\r\n", ""),
    });
    // An absolute-form target names the host (the test client's Host is `test`).
    let other = "http://elsewhere.example/b";
    assert_eq!(xcs(&get(n.addr, other, &[])), "MISS");
    assert_eq!(xcs(&get(n.addr, other, &[])), "HIT");
    request(n.addr, "POST", "/a", &["Content-Length: 0"]);
    assert_eq!(
        xcs(&get(n.addr, other, &[])),
        "HIT",
        "another origin's object"
    );
}

// ---- CDN-Cache-Control (RFC 9213) ----

#[test]
fn targeted_fields_override_cache_control() {
    let n = node("", |_, path| {
        let h = match path {
            // Storable only through the targeted field.
            "/store" => "Cache-Control: no-store\r\nCDN-Cache-Control: max-age=600\r\n",
            // The targeted field forbids what Cache-Control allows.
            "/zero" => "Cache-Control: max-age=600\r\nCDN-Cache-Control: max-age=0\r\n",
            "/nostore" => "Cache-Control: max-age=600\r\nCDN-Cache-Control: no-store\r\n",
            "/private" => "Cache-Control: max-age=600\r\nCDN-Cache-Control: private\r\n",
            "/nocache" => {
                "Cache-Control: max-age=600\r\nCDN-Cache-Control: no-cache\r\nETag: \"v\"\r\n"
            }
            "/expires" => {
                "Expires: Thu, 01 Jan 2099 00:00:00 GMT\r\nCDN-Cache-Control: max-age=0\r\n"
            }
            // The most specific field wins.
            "/ours" => "CDN-Cache-Control: no-store\r\nEdgecache-Cache-Control: max-age=600\r\n",
            // An invalid Dictionary is ignored: Cache-Control decides.
            "/invalid" => "Cache-Control: max-age=600\r\nCDN-Cache-Control: Max-Age=0\r\n",
            _ => "",
        };
        ok(h, "x")
    });
    let twice = |p: &str| {
        get(n.addr, p, &[]);
        let r = get(n.addr, p, &[]);
        (xcs(&r).to_owned(), n.origin.count("GET", p))
    };
    assert_eq!(twice("/store"), ("HIT".into(), 1));
    assert_eq!(twice("/ours"), ("HIT".into(), 1));
    assert_eq!(twice("/invalid"), ("HIT".into(), 1));
    for p in ["/zero", "/nostore", "/private", "/nocache", "/expires"] {
        let (st, origin) = twice(p);
        assert_ne!(st, "HIT", "{p}");
        assert_eq!(origin, 2, "{p}: the second request went to the origin");
    }
    // What is forwarded does not change.
    let r = get(n.addr, "/store", &[]);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("cdn-cache-control"), Some("max-age=600"));
}

#[test]
fn the_targeted_list_is_configurable() {
    let n = node(
        r#"targeted_cache_control = ["surrogate-control"]"#,
        |_, _| {
            ok(
            "Cache-Control: max-age=600\r\nCDN-Cache-Control: no-store\r\nSurrogate-Control: max-age=0\r\n",
            "x",
        )
        },
    );
    get(n.addr, "/s", &[]);
    get(n.addr, "/s", &[]);
    assert_eq!(
        n.origin.count("GET", "/s"),
        2,
        "Surrogate-Control max-age=0 decides; CDN-Cache-Control is not on the list"
    );
}

// ---- Cache-Status (RFC 9211) ----

#[test]
fn cache_status_reports_each_outcome_and_appends_to_the_origins() {
    let n = node("", |method, path| match (method, path) {
        ("GET", "/parent") => ok(
            "Cache-Control: max-age=600\r\nCache-Status: parent; fwd=uri-miss; stored\r\n",
            "p",
        ),
        ("GET", "/nostore") => ok("Cache-Control: no-store\r\n", "n"),
        (_, _) => ok("Cache-Control: max-age=600\r\n", "x"),
    });
    let r = get(n.addr, "/a", &[]);
    assert_eq!(
        r.header("cache-status"),
        Some("edgecache; fwd=uri-miss; fwd-status=200; ttl=600; stored")
    );
    assert_eq!(xcs(&r), "MISS", "X-Cache-Status is kept");
    let r = get(n.addr, "/a", &[]);
    let cs = r.header("cache-status").unwrap();
    assert!(
        cs == "edgecache; hit; ttl=600" || cs == "edgecache; hit; ttl=599",
        "{cs}"
    );
    let r = get(n.addr, "/nostore", &[]);
    assert_eq!(
        r.header("cache-status"),
        Some("edgecache; fwd=uri-miss; fwd-status=200")
    );
    let r = request(n.addr, "POST", "/a", &["Content-Length: 0"]);
    assert_eq!(
        r.header("cache-status"),
        Some("edgecache; fwd=bypass; fwd-status=200")
    );
    // The origin's entry first, ours appended: read from the origin to the client.
    get(n.addr, "/parent", &[]);
    let r = get(n.addr, "/parent", &[]);
    let all = r.headers_all("cache-status");
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[0], "parent; fwd=uri-miss; stored");
    assert!(
        all[1] == "edgecache; hit; ttl=600" || all[1] == "edgecache; hit; ttl=599",
        "{all:?}"
    );
}

#[test]
fn cache_status_after_revalidation() {
    let n = node("", |_, path| match path {
        "/r" => ok("Cache-Control: max-age=0\r\nETag: \"e\"\r\n", "r"),
        _ => ok("", ""),
    });
    get(n.addr, "/r", &[]);
    // The origin answers 200 again (it does not do conditionals): fwd=stale, stored.
    let r = get(n.addr, "/r", &[]);
    assert_eq!(xcs(&r), "EXPIRED");
    assert_eq!(
        r.header("cache-status"),
        Some("edgecache; fwd=stale; fwd-status=200; ttl=0; stored")
    );
}

#[test]
fn no_cache_with_a_validator_is_stored_and_revalidated_on_use() {
    let n = node("", |_, path| match path {
        "/nc" => ok("Cache-Control: no-cache\r\nETag: \"abcd\"\r\n", "nc"),
        _ => ok("Cache-Control: no-cache\r\n", "none"),
    });
    assert_eq!(xcs(&get(n.addr, "/nc", &[])), "MISS");
    // Stored (else this would be a MISS again), but never served without the origin.
    let r = get(n.addr, "/nc", &[]);
    assert_eq!(xcs(&r), "EXPIRED");
    assert_eq!(n.origin.count("GET", "/nc"), 2);
    // Without a validator there is nothing to revalidate: not stored.
    get(n.addr, "/none", &[]);
    assert_eq!(xcs(&get(n.addr, "/none", &[])), "MISS");
}

#[test]
fn accept_language_variants_ignore_order_case_and_space() {
    let n = node("", |_, _| {
        ok(
            "Cache-Control: max-age=600\r\nVary: Accept-Language\r\n",
            "v",
        )
    });
    assert_eq!(
        xcs(&get(n.addr, "/l", &["Accept-Language: en, de"])),
        "MISS"
    );
    for same in ["de, en", "eN, De", " en ,   de", "de;q=1.0, en"] {
        let r = get(n.addr, "/l", &[&format!("Accept-Language: {same}")]);
        assert_eq!(xcs(&r), "HIT", "{same:?}");
    }
    let r = get(n.addr, "/l", &["Accept-Language: en, de;q=0.5"]);
    assert_eq!(xcs(&r), "MISS", "other preferences are another variant");
    assert_eq!(n.origin.count("GET", "/l"), 2);
}

// ---- Stored fields ----

#[test]
fn hits_keep_the_stored_date_and_drop_connection_listed_fields() {
    let n = node("", |_, path| {
        match path {
        "/d" => ok(
            // Years old, and fresh for 60 years more.
            "Date: Mon, 01 Jan 2024 00:00:00 GMT\r\nCache-Control: max-age=2000000000\r\nConnection: x-hop, keep-alive\r\nX-Hop: secret\r\nX-Keep: 1\r\n",
            "d",
        ),
        _ => ok("Cache-Control: max-age=600\r\n", "n"),
    }
    });
    let first = get(n.addr, "/d", &[]);
    assert_eq!(
        first.header("date"),
        Some("Mon, 01 Jan 2024 00:00:00 GMT"),
        "forwarded"
    );
    assert_eq!(
        first.header("x-hop"),
        None,
        "a Connection-listed field is hop-by-hop"
    );
    std::thread::sleep(Duration::from_millis(1100));
    let hit = get(n.addr, "/d", &[]);
    assert_eq!(xcs(&hit), "HIT");
    assert_eq!(
        hit.header("date"),
        Some("Mon, 01 Jan 2024 00:00:00 GMT"),
        "the stored Date"
    );
    assert_eq!(hit.headers_all("date").len(), 1);
    assert_eq!(hit.header("x-hop"), None, "not stored");
    assert_eq!(hit.header("x-keep"), Some("1"));
    // The origin's Date is 2024: the response is years old, and Age is corrected.
    let age: u64 = hit.header("age").unwrap().parse().unwrap();
    assert!(age > 3600 * 24 * 300, "Age {age}");
    // No Date from the origin: the one we added on arrival, kept on hits.
    let a = get(n.addr, "/nodate", &[]);
    std::thread::sleep(Duration::from_millis(1100));
    let b = get(n.addr, "/nodate", &[]);
    assert_eq!(xcs(&b), "HIT");
    assert!(a.header("date").is_some());
    assert_eq!(
        a.header("date"),
        b.header("date"),
        "the stored Date, not now"
    );
}

// ---- Age ----

#[test]
fn age_is_the_first_value_and_an_invalid_one_is_ignored() {
    // RFC 9111 5.1 and the cache-tests age-parse-* cases.
    let n = node("", |_, path| {
        let age = match path {
            "/prefix" => "Age: 0, 7200\r\n",
            "/prefix-twoline" => "Age: 0\r\nAge: 7200\r\n",
            "/bad" => "Age: x\r\n",
            "/negative" => "Age: -7200\r\n",
            "/float" => "Age: 7200.0\r\n",
            "/suffix" => "Age: 7200, 0\r\n",
            "/suffix-twoline" => "Age: 7200\r\nAge: 0\r\n",
            "/large" => "Age: 2147483648\r\n",
            _ => "Age: 5\r\n",
        };
        ok(&format!("Cache-Control: max-age=3600\r\n{age}"), "a")
    });
    for p in ["/prefix", "/prefix-twoline", "/bad", "/negative", "/float"] {
        get(n.addr, p, &[]);
        let r = get(n.addr, p, &[]);
        assert_eq!(xcs(&r), "HIT", "{p}");
        assert_eq!(n.origin.count("GET", p), 1, "{p}: served fresh");
    }
    for p in ["/suffix", "/suffix-twoline", "/large"] {
        get(n.addr, p, &[]);
        let r = get(n.addr, p, &[]);
        assert_ne!(xcs(&r), "HIT", "{p}");
        assert_eq!(n.origin.count("GET", p), 2, "{p}: stale at once");
    }
    get(n.addr, "/ok", &[]);
    let r = get(n.addr, "/ok", &[]);
    assert_eq!(xcs(&r), "HIT");
    let age: u64 = r.header("age").unwrap().parse().unwrap();
    assert!((5..10).contains(&age), "a valid Age counts: {age}");
}

// ---- Transfer codings (RFC 9112 6.3) ----

#[test]
fn a_final_coding_other_than_chunked_is_read_until_close() {
    let n = node("", |_, path| {
        match path {
        "/gz" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nConnection: close\r\nCache-Control: max-age=60\r\n\r\ncoded-bytes-as-sent".to_vec(),
        _ => ok("", "plain"),
    }
    });
    let r = get(n.addr, "/gz", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"coded-bytes-as-sent");
    assert!(
        r.header("transfer-encoding")
            .is_none_or(|v| v.eq_ignore_ascii_case("chunked")),
        "the coding is not relayed"
    );
    // The upstream connection was not reused: the next request still works.
    let r = get(n.addr, "/plain", &[]);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"plain"[..]));
    // Requests keep the smuggling defence: an unknown coding gets 501, a final coding
    // other than chunked 400 (RFC 9112 6.3 rule 4 for requests).
    let r = request(n.addr, "POST", "/gz", &["Transfer-Encoding: gzip, chunked"]);
    assert_eq!(r.status, 501);
    let r = request(n.addr, "POST", "/gz", &["Transfer-Encoding: gzip"]);
    assert_eq!(r.status, 400);
}

// ---- Interim responses ----

#[test]
fn interim_responses_are_forwarded_not_stored() {
    let n = node("", |_, _| {
        let mut v = b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n".to_vec();
        v.extend_from_slice(&ok("Cache-Control: max-age=600\r\n", "body"));
        v
    });
    for (path, version) in [("/e", "1.1"), ("/e", "1.1"), ("/p", "1.0")] {
        let mut c = TcpStream::connect(n.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(
            format!("GET {path} HTTP/{version}\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut raw = Vec::new();
        let _ = c.read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw);
        let first_hit = n.origin.count("GET", path) == 1 && text.contains("X-Cache-Status: HIT");
        if version == "1.0" {
            assert!(
                text.starts_with("HTTP/1.1 200"),
                "no 1xx for HTTP/1.0: {text}"
            );
        } else if first_hit {
            assert!(
                text.starts_with("HTTP/1.1 200"),
                "a hit: nothing interim is stored: {text}"
            );
        } else {
            assert!(
                text.starts_with(
                    "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200"
                ),
                "{text}"
            );
        }
        assert!(text.ends_with("body"), "{text}");
    }
    assert_eq!(
        n.origin.count("GET", "/e"),
        1,
        "the second request was a hit"
    );
}

// ---- Ranges on a miss ----

#[test]
fn several_ranges_on_a_miss_get_a_multipart_206() {
    let body: String = (0..2000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let b2 = body.clone();
    let n = node("", move |_, _| {
        ok(
            "Cache-Control: max-age=600\r\nContent-Type: text/plain\r\n",
            &b2,
        )
    });
    let r = get(n.addr, "/mr", &["Range: bytes=0-9,1990-1999"]);
    assert_eq!((r.status, xcs(&r)), (206, "MISS"));
    let ct = r.header("content-type").unwrap().to_owned();
    assert!(ct.starts_with("multipart/byteranges; boundary="), "{ct}");
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert!(text.contains("Content-Range: bytes 0-9/2000"), "{text}");
    assert!(
        text.contains(&body[0..10]) && text.contains(&body[1990..2000]),
        "{text}"
    );
    assert_eq!(
        r.body.len(),
        r.header("content-length")
            .unwrap()
            .parse::<usize>()
            .unwrap()
    );
    // The same request as a hit gives the same bytes.
    let hit = get(n.addr, "/mr", &["Range: bytes=0-9,1990-1999"]);
    assert_eq!((hit.status, xcs(&hit)), (206, "HIT"));
    assert_eq!(hit.body, r.body);
}

// ---- Purge by path alone ----

#[test]
fn a_path_purge_matches_every_host() {
    let n = node("", |_, path| ok("Cache-Control: max-age=600\r\n", path));
    // Absolute-form targets name the hosts (the test client's Host is `test`).
    for h in ["http://one.example", "http://two.example"] {
        get(n.addr, &format!("{h}/p?x=1"), &[]);
        assert_eq!(xcs(&get(n.addr, &format!("{h}/p?x=1"), &[])), "HIT");
        get(n.addr, &format!("{h}/q"), &[]);
    }
    let r = post_form(n.admin, "/purge", "url=%2Fp%3Fx%3D1");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("\"purged\": 2"));
    for h in ["http://one.example", "http://two.example"] {
        assert_eq!(xcs(&get(n.addr, &format!("{h}/p?x=1"), &[])), "MISS", "{h}");
        assert_eq!(
            xcs(&get(n.addr, &format!("{h}/q"), &[])),
            "HIT",
            "{h}: another path stays"
        );
    }
    // With host=, one host only.
    let r = post_form(n.admin, "/purge", "url=/q&host=one.example");
    assert!(String::from_utf8_lossy(&r.body).contains("\"purged\": 1"));
}
