//! Header control and cache-key normalization through the real binary (issue 26, items
//! 5 and 6): `proxy_set_header` (checked on the raw heads a recording upstream saw, on
//! the proxy and the cache-fill paths), `proxy_hide_header` on misses and hits,
//! `add_header` with variables and `add_header_always`, `cache_status_header = false`,
//! `cache_key_args` and the path's percent normalization (counted as origin fetches),
//! and purges by `url=` that find the normalized key. The SNI that follows a Host
//! override is in tests/tls.rs (it needs the test CA there).

mod common;

use common::{edgecache, origin, post_form, recording_upstream, Seen};
use edge_testkit::{get, Client};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// edgecache in front of the recording upstream: `/p/` proxied, `/c/` and `/n/` cached
/// (`/n/` with `cache_status_header = false`), each with `extra_*` keys.
fn config(rec: SocketAddr, dir: &std::path::Path, proxy_extra: &str, cache_extra: &str) -> String {
    format!(
        r#"workers = 1
worker_cpu_affinity = "off"
[[listen]]
addr = "{{listen}}"
[[cache]]
name = "c1"
path = "{dir}"
[[upstream]]
name = "rec"
servers = ["{rec}"]
[[location]]
prefix = "/p/"
proxy = "rec"
{proxy_extra}
[[location]]
prefix = "/c/"
proxy = "rec"
cache = ["c1"]
cache_valid = {{ "200" = "10m" }}
{cache_extra}
[[location]]
prefix = "/n/"
proxy = "rec"
cache = ["c1"]
cache_valid = {{ "200" = "10m" }}
cache_status_header = false
[[location]]
prefix = "/"
proxy = "rec"
cache = ["c1"]
cache_valid = {{ "200" = "10m" }}
[admin]
listen = "{{admin}}"
allow = ["127.0.0.1/32"]
"#,
        dir = dir.display()
    )
}

fn heads(seen: &Arc<Mutex<Seen>>) -> Vec<String> {
    seen.lock().unwrap().heads.clone()
}

/// The values of field `name` in a raw request head.
fn fields(head: &str, name: &str) -> Vec<String> {
    head.lines()
        .filter_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
        .collect()
}

#[test]
fn proxy_set_header_sets_and_removes_fields_at_the_origin() {
    let (rec, seen) = recording_upstream();
    let dir = tempfile::tempdir().unwrap();
    let set = r#"proxy_set_header = { Host = "bucket.s3.example", "X-Real-IP" = "$remote_addr", Cookie = "", "X-Orig" = "$host$request_uri", "X-Forwarded-For" = "$remote_addr" }"#;
    let (_p, addr, _) = edgecache(&config(rec, &dir.path().join("c"), set, set));
    let client_fields = [
        "Cookie: session=secret",
        "X-Real-IP: 10.9.9.9",
        "X-Forwarded-For: 10.1.1.1",
        "X-Kept: yes",
    ];
    for path in ["/p/a?q=1", "/c/b?q=2"] {
        let r = get(addr, path, &client_fields);
        assert_eq!(r.status, 200, "{path}");
    }
    let h = heads(&seen);
    assert_eq!(h.len(), 2, "{h:?}");
    for (head, path) in h.iter().zip(["/p/a?q=1", "/c/b?q=2"]) {
        assert!(
            head.starts_with(&format!("GET {path} HTTP/1.1\r\n")),
            "{head}"
        );
        assert_eq!(fields(head, "host"), ["bucket.s3.example"], "{head}");
        assert_eq!(fields(head, "x-real-ip"), ["127.0.0.1"], "{head}");
        assert_eq!(fields(head, "x-forwarded-for"), ["127.0.0.1"], "{head}");
        assert!(fields(head, "cookie").is_empty(), "Cookie removed: {head}");
        assert_eq!(fields(head, "x-orig"), [format!("test{path}")], "{head}");
        assert_eq!(fields(head, "x-kept"), ["yes"], "{head}");
    }
    // A location without proxy_set_header forwards the client's fields.
    get(addr, "/other", &client_fields);
    let plain = heads(&seen).pop().unwrap();
    assert_eq!(fields(&plain, "host"), ["test"], "{plain}");
    assert_eq!(fields(&plain, "cookie"), ["session=secret"], "{plain}");
    assert_eq!(
        fields(&plain, "x-forwarded-for"),
        ["10.1.1.1, 127.0.0.1"],
        "{plain}"
    );
}

#[test]
fn hidden_fields_added_fields_and_cache_status_on_miss_and_hit() {
    let (rec, seen) = recording_upstream();
    let dir = tempfile::tempdir().unwrap();
    let extra = r#"proxy_hide_header = ["X-Upstream"]
add_header = { "X-Where" = "$host$uri", "X-Cache" = "$upstream_cache_status", "X-Fixed" = "1" }"#;
    let (_p, addr, _) = edgecache(&config(rec, &dir.path().join("c"), extra, extra));
    // The recording upstream sends X-Upstream; a location without proxy_hide_header
    // shows it (so the checks below can fail).
    let plain = get(addr, "/plain", &[]);
    assert_eq!(plain.header("x-upstream"), Some("rec"));
    assert_eq!(plain.header("x-where"), None);
    for (i, want) in ["MISS", "HIT"].into_iter().enumerate() {
        let r = get(addr, "/c/obj", &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-cache-status"), Some(want), "request {i}");
        assert_eq!(r.header("x-upstream"), None, "hidden on a {want}");
        assert_eq!(r.header("x-where"), Some("test/c/obj"), "{want}");
        assert_eq!(r.header("x-cache"), Some(want), "$upstream_cache_status");
        assert_eq!(r.header("x-fixed"), Some("1"));
        assert!(r.header("cache-status").is_some());
    }
    // Proxied (uncached): hidden too, and the literal add_header is there.
    let p = get(addr, "/p/x", &[]);
    assert_eq!(p.header("x-upstream"), None);
    assert_eq!(p.header("x-where"), Some("test/p/x"));
    // cache_status_header = false: neither field, on a miss nor on a hit.
    for want in ["MISS", "HIT"] {
        let r = get(addr, "/n/obj", &[]);
        assert_eq!(r.status, 200, "{want}");
        assert_eq!(r.header("x-cache-status"), None, "{want}: {:?}", r.headers);
        assert_eq!(r.header("cache-status"), None, "{want}: {:?}", r.headers);
    }
    // One fetch per cached object: the hits were hits.
    let h = heads(&seen);
    assert_eq!(h.iter().filter(|x| x.starts_with("GET /n/obj ")).count(), 1);
    assert_eq!(h.iter().filter(|x| x.starts_with("GET /c/obj ")).count(), 1);
}

#[test]
fn add_header_on_errors_only_with_always() {
    let (_o, oaddr) = origin();
    let cfg = format!(
        r#"workers = 1
worker_cpu_affinity = "off"
[[listen]]
addr = "{{listen}}"
[[upstream]]
name = "o"
servers = ["{oaddr}"]
[[upstream]]
name = "dead"
servers = ["127.0.0.1:1"]
[[location]]
prefix = "/always/dead"
proxy = "dead"
add_header = {{ "X-Added" = "$status" }}
add_header_always = true
[[location]]
prefix = "/always/"
proxy = "o"
add_header = {{ "X-Added" = "$status" }}
add_header_always = true
[[location]]
prefix = "/"
proxy = "o"
add_header = {{ "X-Added" = "$status" }}
"#
    );
    let (_p, addr, _) = edgecache(&cfg);
    let ok = get(addr, "/obj/1k/1", &[]);
    assert_eq!((ok.status, ok.header("x-added")), (200, Some("200")));
    let nf = get(addr, "/obj/1k/1?status=404", &[]);
    assert_eq!((nf.status, nf.header("x-added")), (404, None));
    let nf = get(addr, "/always/obj/1k/1?status=404", &[]);
    assert_eq!((nf.status, nf.header("x-added")), (404, Some("404")));
    // An error page of our own (the upstream is down): with always only.
    let bad = get(addr, "/always/dead", &[]);
    assert_eq!((bad.status, bad.header("x-added")), (502, Some("502")));
}

#[test]
fn equivalent_urls_are_one_origin_fetch() {
    let (rec, seen) = recording_upstream();
    let dir = tempfile::tempdir().unwrap();
    let args = r#"cache_key_args = { sort = true, exclude = ["utm_*", "fbclid"] }"#;
    let (_p, addr, _) = edgecache(&config(rec, &dir.path().join("c"), "", args));
    let pairs = [
        ("/c/q?utm_source=x&a=1", "/c/q?a=1"),
        ("/c/s?b=2&a=1", "/c/s?a=1&b=2"),
        ("/c/a%2Db", "/c/a-b"),
        ("/c/m%2db?fbclid=1&z=1&y=2&y=1", "/c/m-b?y=2&y=1&z=1"),
    ];
    for (first, second) in pairs {
        let a = get(addr, first, &[]);
        assert_eq!(a.header("x-cache-status"), Some("MISS"), "{first}");
        let b = get(addr, second, &[]);
        assert_eq!(
            b.header("x-cache-status"),
            Some("HIT"),
            "{second} after {first}"
        );
    }
    // Different values and a different order of repeated names are other objects.
    let other = get(addr, "/c/m-b?y=1&y=2&z=1", &[]);
    assert_eq!(other.header("x-cache-status"), Some("MISS"));
    // The default location sorts nothing: another order is another object.
    get(addr, "/d?b=2&a=1", &[]);
    let d = get(addr, "/d?a=1&b=2", &[]);
    assert_eq!(d.header("x-cache-status"), Some("MISS"));
    // ...but its path is percent-normalized too.
    let d2 = get(addr, "/%64?b=2&a=1", &[]);
    assert_eq!(d2.header("x-cache-status"), Some("HIT"));
    // The origin saw each first request as the client sent it (the query untouched).
    let h = heads(&seen);
    let lines: Vec<&str> = h.iter().map(|x| x.lines().next().unwrap()).collect();
    assert_eq!(
        lines,
        [
            "GET /c/q?utm_source=x&a=1 HTTP/1.1",
            "GET /c/s?b=2&a=1 HTTP/1.1",
            "GET /c/a%2Db HTTP/1.1",
            "GET /c/m%2db?fbclid=1&z=1&y=2&y=1 HTTP/1.1",
            "GET /c/m-b?y=1&y=2&z=1 HTTP/1.1",
            "GET /d?b=2&a=1 HTTP/1.1",
            "GET /d?a=1&b=2 HTTP/1.1",
        ]
    );
}

#[test]
fn purge_by_url_finds_the_normalized_key() {
    let (rec, seen) = recording_upstream();
    let dir = tempfile::tempdir().unwrap();
    let args = r#"cache_key_args = { sort = true, exclude = ["utm_*"] }"#;
    let (_p, addr, admin) = edgecache(&config(rec, &dir.path().join("c"), "", args));
    // A response is committed to the cache index just after its last byte went out:
    // a purge right after may come first, so it is retried briefly (a wrong key never
    // matches, however long it is retried).
    let purge = |form: &str| {
        for _ in 0..100 {
            let r = post_form(admin, "/purge", form);
            if r.status != 404 {
                return r;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        post_form(admin, "/purge", form)
    };
    let fetches = |p: &str| {
        heads(&seen)
            .iter()
            .filter(|h| h.starts_with(&format!("GET {p}")))
            .count()
    };
    // Admin POST /purge: url=/c/a%2db?b=2&a=1 (form-encoded) on host "test".
    get(addr, "/c/a-b?a=1&b=2", &[]);
    assert_eq!(
        get(addr, "/c/a-b?a=1&b=2", &[]).header("x-cache-status"),
        Some("HIT")
    );
    let r = purge("url=%2Fc%2Fa%252db%3Fb%3D2%26utm_x%3D1%26a%3D1&host=test");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        String::from_utf8_lossy(&r.body).contains("\"purged\": 1"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let after = get(addr, "/c/a-b?a=1&b=2", &[]);
    assert_eq!(after.header("x-cache-status"), Some("MISS"), "purged");
    assert_eq!(fetches("/c/a-b?"), 2);
    let hit = || {
        get(addr, "/c/a-b?a=1&b=2", &[])
            .header("x-cache-status")
            .map(String::from)
    };
    assert_eq!(hit().as_deref(), Some("HIT"), "stored again");
    // An absolute url= is normalized the same way.
    let r = purge("url=http%3A%2F%2Ftest%2Fc%2Fa%252Db%3Fb%3D2%26a%3D1");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        get(addr, "/c/a-b?a=1&b=2", &[]).header("x-cache-status"),
        Some("MISS")
    );
    assert_eq!(hit().as_deref(), Some("HIT"), "stored again");
    // The PURGE method computes the request's own (normalized) key.
    let mut p = Client::connect(addr).request("PURGE", "/c/a%2db?b=2&a=1", &[]);
    for _ in 0..100 {
        if p.status != 404 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        p = Client::connect(addr).request("PURGE", "/c/a%2db?b=2&a=1", &[]);
    }
    assert_eq!(p.status, 200, "{}", String::from_utf8_lossy(&p.body));
    assert_eq!(
        get(addr, "/c/a-b?a=1&b=2", &[]).header("x-cache-status"),
        Some("MISS")
    );
}

#[test]
fn bad_header_config_is_rejected_by_t() {
    let (rec, _seen) = recording_upstream();
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            r#"cache_key_args = { include = ["a"], exclude = ["b"] }"#,
            "location.cache_key_args: set include or exclude, not both",
        ),
        (
            r#"cache_key_args = { exclude = ["a*b"] }"#,
            "'*' may only start or end a pattern",
        ),
        (
            r#"proxy_set_header = { "Content-Length" = "1" }"#,
            "location.proxy_set_header",
        ),
        (
            r#"proxy_set_header = { Host = "" }"#,
            "Host cannot be removed",
        ),
        (
            r#"proxy_set_header = { "X-A" = "$nosuch" }"#,
            "unknown variable \"$nosuch\"",
        ),
        (
            r#"proxy_hide_header = ["Content-Length"]"#,
            "location.proxy_hide_header",
        ),
        (
            r#"add_header = { "X-A" = "$nosuch" }"#,
            "location.add_header: X-A: unknown variable",
        ),
        (
            r#"add_header = { "Bad Name" = "1" }"#,
            "is not a field name",
        ),
    ];
    for (extra, want) in cases {
        let cfg = config(rec, &dir.path().join("c"), "", extra)
            .replace("{listen}", "127.0.0.1:1")
            .replace("{admin}", "127.0.0.1:2");
        let (code, err, _path) = common::check_config(&cfg);
        assert_eq!(code, Some(2), "{extra}: {err}");
        assert!(err.contains(want), "{extra}: {err}");
        // file:line: the line of the offending location's key or its match.
        assert!(err.contains(".toml:"), "{err}");
    }
}
