//! Access logs through the real binary: a JSON format read back with a JSON parser
//! (MISS then HIT), per-server and per-location logs going to their own files (and two
//! servers sharing one), and `combined` compared with nginx's own line for the same
//! requests (timestamp masked).

mod common;

use common::{cached_config, check_config, edgecache, origin};
use edge_testkit::{fallback, free_addr, Proc};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Sends `raw` (a whole request, `Connection: close`) and returns the response bytes.
fn send(addr: SocketAddr, raw: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

fn get_host(addr: SocketAddr, target: &str, host: &str) -> u16 {
    let raw = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let resp = send(addr, raw.as_bytes());
    let text = String::from_utf8_lossy(&resp);
    text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The lines of `path` once it has at least `n` (waits up to 5 s).
fn lines(path: &Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let l: Vec<String> = text.lines().map(str::to_owned).collect();
        if l.len() >= n || Instant::now() > deadline {
            return l;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_json_log_parses_and_says_miss_then_hit() {
    let (_o, origin_addr) = origin();
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        r#"access_log = {{ path = "logs/json.log", format = "j", flush = "50ms" }}
{}
[log_format.j]
escape = "json"
format = '{{"addr":"$remote_addr","request":"$request","status":$status,"cache":"$upstream_cache_status","bytes":$body_bytes_sent,"sent":$bytes_sent,"rt":$request_time,"urt":"$upstream_response_time","ua":"$http_user_agent","ref":"$http_referer","user":"$remote_user","time":"$time_iso8601","proto":"$server_protocol","len":$request_length}}'
"#,
        cached_config(
            origin_addr,
            &dir.path().join("cache"),
            "",
            "",
            "\"127.0.0.1/32\""
        )
    );
    let (p, addr, _) = edgecache(&cfg);
    // A user agent with a quote, a backslash and a non-ASCII letter: escaped for JSON.
    let raw = "GET /obj/1k/77 HTTP/1.1\r\nHost: test\r\nUser-Agent: a\"b\\c \u{e9}\r\nConnection: close\r\n\r\n";
    let first = send(addr, raw.as_bytes());
    assert!(String::from_utf8_lossy(&first).contains("X-Cache-Status: MISS"));
    // The MISS's line is written when its store commits; wait for it, then the HIT.
    let log = p.dir().join("logs/json.log");
    assert_eq!(lines(&log, 1).len(), 1);
    let second = send(addr, raw.as_bytes());
    assert!(String::from_utf8_lossy(&second).contains("X-Cache-Status: HIT"));
    let l = lines(&log, 2);
    assert_eq!(l.len(), 2, "{l:?}");
    let v: Vec<serde_json::Value> = l
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    for (v, cache) in v.iter().zip(["MISS", "HIT"]) {
        assert_eq!(v["addr"], "127.0.0.1", "{v}");
        assert_eq!(v["request"], "GET /obj/1k/77 HTTP/1.1", "{v}");
        assert_eq!(v["status"], 200, "{v}");
        assert_eq!(v["cache"], cache, "{v}");
        assert_eq!(v["bytes"], 1024, "{v}");
        assert!(
            v["sent"].as_u64().unwrap() > 1024 + 50,
            "head bytes count: {v}"
        );
        assert!(v["rt"].as_f64().unwrap() < 5.0, "{v}");
        assert_eq!(v["ua"], "a\"b\\c \u{e9}", "{v}");
        assert_eq!(v["ref"], "", "no Referer: empty in JSON: {v}");
        assert_eq!(v["user"], "", "{v}");
        assert_eq!(v["proto"], "HTTP/1.1", "{v}");
        assert_eq!(v["len"], raw.len(), "{v}");
        let t = v["time"].as_str().unwrap();
        assert!(
            t.len() == 25 && t.ends_with("+00:00") && t.as_bytes()[10] == b'T',
            "{t}"
        );
    }
    // The MISS went to the origin, the HIT did not.
    assert!(!v[0]["urt"].as_str().unwrap().is_empty(), "{}", v[0]);
    assert_eq!(v[1]["urt"], "", "{}", v[1]);
}

#[test]
fn servers_and_locations_log_to_their_own_files() {
    let cfg = r#"workers = 2
worker_cpu_affinity = "off"
access_log = { path = "logs/top.log", flush = "50ms" }

[log_format.short]
format = "$host $request_uri $status"

[[listen]]
addr = "{listen}"

[[server]]
names = ["a.test"]
access_log = { path = "logs/a.log", format = "short", flush = "50ms" }
[[server.location]]
prefix = "/"
return = { status = 200, body = "a" }

[[server]]
names = ["c.test"]
access_log = { path = "logs/a.log", format = "combined", flush = "50ms" }
[[server.location]]
prefix = "/"
return = { status = 201, body = "c" }

[[server]]
names = ["b.test"]
[[server.location]]
prefix = "/"
return = { status = 200, body = "b" }
[[server.location]]
prefix = "/quiet"
access_log = "off"
return = { status = 200, body = "q" }
[[server.location]]
prefix = "/own"
access_log = { path = "logs/own.log", format = "short", flush = "50ms" }
return = { status = 200, body = "o" }
"#;
    let (p, addr, _) = edgecache(cfg);
    assert_eq!(get_host(addr, "/a1", "a.test"), 200);
    assert_eq!(get_host(addr, "/c1", "c.test"), 201);
    assert_eq!(get_host(addr, "/b1", "b.test"), 200);
    assert_eq!(get_host(addr, "/quiet/1", "b.test"), 200);
    assert_eq!(get_host(addr, "/own/1", "b.test"), 200);
    // No location at all: the server's log.
    assert_eq!(get_host(addr, "/a2", "A.TEST"), 200);
    let d = p.dir().join("logs");
    let mut a = lines(&d.join("a.log"), 3);
    a.sort();
    assert_eq!(a.len(), 3, "{a:?}");
    assert_eq!(&a[1..], ["a.test /a1 200", "a.test /a2 200"], "{a:?}");
    assert!(
        a[0].starts_with("127.0.0.1 - - [")
            && a[0].ends_with("] \"GET /c1 HTTP/1.1\" 201 1 \"-\" \"-\""),
        "c.test shares a.log, in combined: {a:?}"
    );
    let top = lines(&d.join("top.log"), 1);
    assert_eq!(top.len(), 1, "{top:?}");
    assert!(
        top[0].contains("\"GET /b1 HTTP/1.1\" 200 1 \"-\" \"-\" "),
        "{top:?}"
    );
    assert!(
        top[0].ends_with(" -"),
        "the default format ends with the cache status: {top:?}"
    );
    assert_eq!(lines(&d.join("own.log"), 1), ["b.test /own/1 200"]);
    // The quiet location wrote nowhere.
    std::thread::sleep(Duration::from_millis(200));
    for f in ["a.log", "top.log", "own.log"] {
        let t = std::fs::read_to_string(d.join(f)).unwrap();
        assert!(!t.contains("quiet"), "{f}: {t}");
    }
}

/// The nginx binary: `EDGECACHE_NGINX`, else on PATH, else the usual places.
fn nginx_bin() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("EDGECACHE_NGINX") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .map(|d| Path::new(d).join("nginx"))
        .chain(
            [
                "/usr/sbin/nginx",
                "/usr/local/sbin/nginx",
                "/usr/local/nginx/sbin/nginx",
            ]
            .map(PathBuf::from),
        )
        .find(|p| p.is_file())
}

/// `[...]` (the time) replaced, so lines taken a second apart compare.
fn mask_time(line: &str) -> String {
    match (line.find(" ["), line.find("] \"")) {
        (Some(a), Some(b)) if a < b => format!("{} [TIME{}", &line[..a], &line[b..]),
        _ => line.to_string(),
    }
}

#[test]
fn combined_is_nginx_combined() {
    let Some(nginx) = nginx_bin() else {
        fallback(
            "combined compared with nginx",
            "no nginx binary (apt-get install nginx-light, or set EDGECACHE_NGINX)",
        );
        return;
    };
    let ndir = tempfile::tempdir().unwrap();
    let d = ndir.path().display().to_string();
    let naddr = free_addr();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 64; }}\n\
         http {{\n  access_log {d}/access.log combined;\n  client_body_temp_path {d}/cbt;\n  proxy_temp_path {d}/pt;\n\
           fastcgi_temp_path {d}/ft;\n  uwsgi_temp_path {d}/ut;\n  scgi_temp_path {d}/st;\n\
           server {{\n    listen {naddr};\n    location / {{ return 200 \"ok\"; }}\n  }}\n}}\n"
    );
    std::fs::write(ndir.path().join("nginx.conf"), conf).unwrap();
    let mut ng = Proc::spawn(
        &nginx,
        &[
            "-p",
            &format!("{d}/"),
            "-e",
            &format!("{d}/error.log"),
            "-c",
            &format!("{d}/nginx.conf"),
        ],
    );
    if let Err(e) = ng.try_wait_port(naddr, Duration::from_secs(10)) {
        panic!(
            "nginx did not start: {e:?}\n{}\n{}",
            ng.stderr(),
            std::fs::read_to_string(ndir.path().join("error.log")).unwrap_or_default()
        );
    }
    let cfg = r#"workers = 1
worker_cpu_affinity = "off"
access_log = { path = "logs/access.log", format = "combined", flush = "50ms" }
[[listen]]
addr = "{listen}"
[[location]]
prefix = "/"
return = { status = 200, body = "ok" }
"#;
    let (p, addr, _) = edgecache(cfg);
    let requests: [&[u8]; 3] = [
        // Referer and User-Agent with a quote, a backslash and non-ASCII bytes.
        b"GET /p/a%20b?q=1&x=\"y\" HTTP/1.1\r\nHost: cmp.test\r\nReferer: http://ref.example/\"q\"\\z\r\nUser-Agent: Mozilla/5.0 (X11; Linux) \xc3\xa9\r\nConnection: close\r\n\r\n",
        // Basic credentials: $remote_user; no Referer or User-Agent: `-`.
        b"HEAD /x HTTP/1.1\r\nHost: cmp.test\r\nAuthorization: Basic YWxpY2U6cHc=\r\nConnection: close\r\n\r\n",
        b"GET /h10 HTTP/1.0\r\nUser-Agent: \r\n\r\n",
    ];
    for r in requests {
        let ours = send(addr, r);
        let theirs = send(naddr, r);
        assert_eq!(ours.get(..12), theirs.get(..12), "same status line");
    }
    let ours = lines(&p.dir().join("logs/access.log"), 3);
    let theirs = lines(&ndir.path().join("access.log"), 3);
    assert_eq!(ours.len(), 3, "{ours:?}");
    assert_eq!(theirs.len(), 3, "{theirs:?}");
    for (o, t) in ours.iter().zip(&theirs) {
        assert_eq!(mask_time(o), mask_time(t), "ours, then nginx's");
    }
    // What was compared (shown with --nocapture).
    println!("{}", theirs.join("\n"));
    ng.signal("QUIT");
    let _ = ng.wait_exit(Duration::from_secs(5));
}

#[test]
fn reload_opens_new_paths_and_sigusr1_reopens_every_file() {
    let cfg = |top: &str, listen: &str| {
        format!(
            r#"workers = 1
worker_cpu_affinity = "off"
access_log = {{ path = "logs/{top}", format = "combined", flush = "50ms" }}
[[listen]]
addr = "{listen}"
[[server]]
names = ["s.test"]
access_log = {{ path = "logs/s.log", format = "combined", flush = "50ms" }}
[[server.location]]
prefix = "/"
return = {{ status = 200, body = "s" }}
[[location]]
prefix = "/"
return = {{ status = 200, body = "t" }}
"#
        )
    };
    let (p, addr, _) = edgecache(&cfg("one.log", "{listen}"));
    let d = p.dir().join("logs");
    assert_eq!(get_host(addr, "/1", "other.test"), 200);
    assert_eq!(get_host(addr, "/1", "s.test"), 200);
    assert_eq!(lines(&d.join("one.log"), 1).len(), 1);
    assert_eq!(lines(&d.join("s.log"), 1).len(), 1);
    // Reload with another top-level path: opened, and used at once.
    std::fs::write(
        p.dir().join("edgecache.toml"),
        cfg("two.log", &addr.to_string()),
    )
    .unwrap();
    p.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        get_host(addr, "/2", "other.test");
        if lines(&d.join("two.log"), 0)
            .iter()
            .any(|l| l.contains("/2 "))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "reload did not open two.log: {}",
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // logrotate moves both files away; SIGUSR1 reopens both. (Lines still buffered
    // from the loop above may land in either file: only /3 is looked for.)
    std::thread::sleep(Duration::from_millis(200));
    std::fs::rename(d.join("two.log"), d.join("two.log.1")).unwrap();
    std::fs::rename(d.join("s.log"), d.join("s.log.1")).unwrap();
    p.signal("USR1");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get_host(addr, "/3", "other.test"), 200);
    assert_eq!(get_host(addr, "/3", "s.test"), 200);
    for f in ["two.log", "s.log"] {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !lines(&d.join(f), 0)
            .iter()
            .any(|l| l.contains("\"GET /3 HTTP/1.1\""))
        {
            assert!(Instant::now() < deadline, "SIGUSR1 did not reopen {f}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let old = std::fs::read_to_string(d.join(format!("{f}.1"))).unwrap();
        assert!(!old.contains("/3 "), "{f}.1: {old}");
    }
}

#[test]
fn dash_t_refuses_unknown_formats_and_variables_with_their_line() {
    let base = "[[listen]]\naddr = \"127.0.0.1:1\"\n[[location]]\nprefix = \"/\"\nreturn = { status = 200 }\n";
    let (code, err, path) = check_config(&format!(
        "{base}[[server]]\nnames = [\"a\"]\naccess_log = {{ path = \"a.log\", format = \"nope\" }}\n"
    ));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{path}:8: server.access_log: unknown log format \"nope\""
        )),
        "{err}"
    );
    let (code, err, path) = check_config(&format!(
        "{base}[log_format.x]\nformat = \"$status $request_tme\"\n"
    ));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{path}:7: log_format.format: \"x\": unknown variable \"$request_tme\""
        )),
        "{err}"
    );
    // And a good one passes.
    let (code, err, _) = check_config(&format!(
        "access_log = {{ path = \"a.log\", format = \"x\" }}\n{base}[log_format.x]\nformat = \"$status $request_time\"\nescape = \"json\"\n"
    ));
    assert_eq!(code, Some(0), "{err}");
}
