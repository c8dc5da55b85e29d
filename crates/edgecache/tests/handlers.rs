//! The non-proxy handlers (static, return, empty_gif), routing, and the admin listener.

mod common;
use common::*;
use edge_testkit::{get, Client};

fn config(root: &std::path::Path, admin_allow: &str) -> String {
    format!(
        r#"workers = 2
[[listen]]
addr = "{{listen}}"

[[location]]
prefix = "/files/"
static = "{root}"

[[location]]
prefix = "/"
return = {{ status = 200, body = "fallback" }}

[[location]]
exact = "/empty.gif"
empty_gif = true
add_header = {{ "Cache-Control" = "no-store" }}

[[location]]
prefix = "/moved"
return = {{ status = 301, location = "https://example.test/new" }}

[admin]
listen = "{{admin}}"
allow = [{admin_allow}]
"#,
        root = root.parent().unwrap().display()
    )
}

fn setup(
    admin_allow: &str,
) -> (
    edge_testkit::Proc,
    std::net::SocketAddr,
    std::net::SocketAddr,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir_all(files.join("sub")).unwrap();
    std::fs::write(files.join("a.txt"), b"0123456789abcdefghij").unwrap();
    std::fs::write(files.join("sub/index.html"), b"<h1>index</h1>").unwrap();
    std::fs::write(files.join("big.bin"), payload(3 << 20)).unwrap();
    let (p, addr, admin) = edgecache(&config(&files, admin_allow));
    (p, addr, admin, dir)
}

#[test]
fn static_files_with_types_validators_ranges_and_304() {
    let (_p, addr, _, _dir) = setup("\"127.0.0.1/32\"");
    let mut c = Client::connect(addr);
    let r = c.get("/files/a.txt", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"0123456789abcdefghij");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    let etag = r.header("etag").unwrap().to_string();
    let lm = r.header("last-modified").unwrap().to_string();
    assert_eq!(
        c.get("/files/a.txt", &[&format!("If-None-Match: {etag}")])
            .status,
        304
    );
    assert_eq!(
        c.get("/files/a.txt", &[&format!("If-Modified-Since: {lm}")])
            .status,
        304
    );

    let r = c.get("/files/a.txt", &["Range: bytes=2-5"]);
    assert_eq!(r.status, 206);
    assert_eq!(r.body, b"2345");
    assert_eq!(r.header("content-range"), Some("bytes 2-5/20"));
    let r = c.get("/files/a.txt", &["Range: bytes=-3"]);
    assert_eq!(r.body, b"hij");
    let r = c.get("/files/a.txt", &["Range: bytes=50-"]);
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */20"));
    let r = c.get("/files/a.txt", &["Range: bytes=0-1,10-11"]);
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap();
    assert!(ct.starts_with("multipart/byteranges; boundary="));
    let text = String::from_utf8_lossy(&r.body);
    assert!(
        text.contains("Content-Range: bytes 0-1/20\r\n\r\n01\r\n"),
        "{text}"
    );
    assert!(
        text.contains("Content-Range: bytes 10-11/20\r\n\r\nab\r\n"),
        "{text}"
    );
    let r = c.get("/files/a.txt", &["Range: bytes=0-1", "If-Range: \"stale\""]);
    assert_eq!(r.status, 200, "If-Range mismatch serves the whole file");

    // Large file through sendfile, intact.
    let r = c.get("/files/big.bin", &[]);
    assert!(r.body == payload(3 << 20));
    let r = c.get("/files/big.bin", &["Range: bytes=1000000-1000099"]);
    assert!(r.body[..] == payload(3 << 20)[1_000_000..1_000_100]);

    assert_eq!(c.get("/files/sub", &[]).status, 301);
    assert_eq!(c.get("/files/sub/", &[]).body, b"<h1>index</h1>");
    assert_eq!(c.get("/files/nope", &[]).status, 404);
    assert_eq!(
        c.get("/files/../files/a.txt", &[]).body,
        b"0123456789abcdefghij"
    );
    assert_eq!(c.get("/files/%2e%2e/%2e%2e/etc/passwd", &[]).status, 400);
    assert_eq!(c.request("DELETE", "/files/a.txt", &[]).status, 405);
}

#[test]
fn return_empty_gif_redirect_and_routing() {
    let (_p, addr, _, _dir) = setup("\"127.0.0.1/32\"");
    let r = get(addr, "/anything", &[]);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"fallback"[..]));
    let r = get(addr, "/empty.gif", &[]);
    assert_eq!(r.header("content-type"), Some("image/gif"));
    assert_eq!(r.body.len(), 43);
    assert!(r.body.starts_with(b"GIF89a"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let r = get(addr, "/empty.gif?x=1", &[]);
    assert_eq!(r.body.len(), 43, "exact match ignores the query");
    let r = get(addr, "/moved/x", &[]);
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://example.test/new"));
}

#[test]
fn admin_status_and_metrics_count_requests() {
    let (_p, addr, admin, _dir) = setup("\"127.0.0.1/32\"");
    for i in 0..5 {
        assert_eq!(get(addr, &format!("/x{i}"), &[]).status, 200);
    }
    let _ = get(addr, "/files/missing", &[]);
    // Counters are updated after the response is written (the log phase), by whichever
    // of the two workers served it: poll until every request is counted.
    let mut text = String::new();
    for _ in 0..500 {
        text = String::from_utf8_lossy(&get(admin, "/metrics", &[]).body).into_owned();
        if text.contains("edgecache_requests_total{class=\"4xx\"} 1")
            && text.contains("edgecache_requests_total{class=\"2xx\"} 5")
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let s = get(admin, "/status", &[]);
    assert_eq!(s.status, 200);
    let v: serde_json_lite::Value = serde_json_lite::parse(&s.body);
    assert_eq!(v.workers, 2);
    assert_eq!(v.requests, 6, "{}", String::from_utf8_lossy(&s.body));
    assert!(
        text.contains("edgecache_requests_total{class=\"2xx\"} 5"),
        "{text}"
    );
    assert!(
        text.contains("edgecache_requests_total{class=\"4xx\"} 1"),
        "{text}"
    );
    assert!(text.contains("# TYPE edgecache_connections_active gauge"));
    assert_eq!(get(admin, "/nope", &[]).status, 404);
}

#[test]
fn admin_refuses_addresses_outside_the_allow_list() {
    let dir = tempfile::tempdir().unwrap();
    // Its own `[aio]` (the default): /status is shut to the test too, so the
    // EDGECACHE_TEST_AIO matrix could not check the backend, which this does not test.
    let cfg = config(dir.path(), "\"10.0.0.0/8\"") + "\n[aio]\nmode = \"auto\"\n";
    let (_p, _addr, admin) = edgecache(&cfg);
    for path in ["/metrics", "/status"] {
        assert_eq!(get(admin, path, &[]).status, 403, "{path}");
    }
}

/// Just enough JSON reading for /status without another dependency.
mod serde_json_lite {
    pub struct Value {
        pub workers: usize,
        pub requests: u64,
    }
    pub fn parse(body: &[u8]) -> Value {
        let s = String::from_utf8_lossy(body);
        let workers = s.matches("\"id\":").count();
        let totals = &s[s.find("\"totals\"").expect("totals")..];
        let req = totals.split("\"requests\":").nth(1).expect("requests");
        let requests = req
            .trim()
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap();
        Value { workers, requests }
    }
}
