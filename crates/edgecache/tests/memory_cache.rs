//! The worker's RAM tier (`[memory_cache]`) and open-file cache (`open_file_cache`),
//! end to end: the real `edgecache` in front of the real `edgeorigin` (or of a small
//! origin here whose body changes with every request it answers), on 127.0.0.1.
//!
//! A response served from RAM says so in `Cache-Status` (`detail=memory`). Every test
//! compares body bytes with what the origin sends for the same request, counts the
//! requests that reached the origin, and reads the tier's counters in `/metrics`.

mod common;

use common::{
    cached_config, check_config, edgecache, get_text, metric_in, origin, origin_requests,
    post_form, LOCAL,
};
use edge_testkit::{get, Client, Proc, Response};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

const POLICIES: [&str; 3] = ["s3fifo", "tinylfu", "lru"];

// ---- Helpers ----

fn status(r: &Response) -> &str {
    r.header("x-cache-status").unwrap_or("-")
}

/// Our `Cache-Status` field (an origin's would come first).
fn cache_status(r: &Response) -> String {
    r.headers_all("cache-status")
        .into_iter()
        .find(|v| v.starts_with("edgecache"))
        .unwrap_or("-")
        .to_string()
}

/// Whether the response was answered from the RAM tier.
fn from_memory(r: &Response) -> bool {
    cache_status(r).contains("detail=memory")
}

/// (status, X-Cache-Status, served from RAM).
fn outcome(r: &Response) -> (u16, &str, bool) {
    (r.status, status(r), from_memory(r))
}

/// The `[memory_cache]` table, to append after the config's last table.
fn memory_cache(policy: &str, size: &str, max_object: &str) -> String {
    format!(
        "\n[memory_cache]\nsize = \"{size}\"\nmax_object_size = \"{max_object}\"\npolicy = \"{policy}\"\n"
    )
}

/// edgecache (one worker unless `top` says otherwise) in front of an origin.
struct Edge {
    _origin: Option<Proc>,
    origin: SocketAddr,
    cache: Proc,
    addr: SocketAddr,
    admin: SocketAddr,
    dir: tempfile::TempDir,
    /// The config template (`{listen}`, `{admin}` still unreplaced), for restarts.
    config: String,
}

impl Edge {
    /// `top`: top-level keys (before the first table); `location`: keys of the cached
    /// location; `tail`: tables appended at the end (`[memory_cache]`).
    fn start(
        origin: Option<Proc>,
        origin_addr: SocketAddr,
        top: &str,
        location: &str,
        tail: &str,
    ) -> Edge {
        let dir = tempfile::tempdir().unwrap();
        let mut base = cached_config(origin_addr, &dir.path().join("cache"), "", location, LOCAL);
        if top.contains("workers") {
            base = base.replacen("workers = 1\n", "", 1);
        }
        let config = format!("{top}\n{base}{tail}");
        let (cache, addr, admin) = edgecache(&config);
        Edge {
            _origin: origin,
            origin: origin_addr,
            cache,
            addr,
            admin,
            dir,
            config,
        }
    }

    fn with_edgeorigin(top: &str, location: &str, tail: &str) -> Edge {
        let (p, addr) = origin();
        Edge::start(Some(p), addr, top, location, tail)
    }

    fn get(&self, path: &str, headers: &[&str]) -> Response {
        get(self.addr, path, headers)
    }

    /// Requests edgeorigin answered so far.
    fn origin_count(&self) -> u64 {
        origin_requests(self.origin)
    }

    /// What edgeorigin itself sends for this request.
    fn direct(&self, path: &str, headers: &[&str]) -> Response {
        let r = get(self.origin, path, headers);
        assert_eq!(r.status, 200, "direct GET {path}");
        r
    }

    fn metrics(&self) -> String {
        get_text(self.admin, "/metrics")
    }

    fn metric(&self, name: &str) -> u64 {
        let m = self.metrics();
        metric_in(&m, name).unwrap_or_else(|| panic!("no {name} in /metrics:\n{m}"))
    }

    /// Polls `/metrics` (counters are published after each lookup and once a second)
    /// until `ok` holds for `name`, for up to 3 s; returns the value.
    fn wait_metric(&self, name: &str, what: &str, ok: impl Fn(u64) -> bool) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let v = self.metric(name);
            if ok(v) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{name} = {v}, expected {what}:\n{}",
                self.metrics()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn purge_method(&self, path: &str) {
        let p = Client::connect(self.addr).request("PURGE", path, &[]);
        assert_eq!(
            (p.status, p.body.as_slice()),
            (200, &b"{\"purged\": 1}\n"[..]),
            "PURGE {path}"
        );
    }

    /// SIGTERM, then the same config (same cache directory) again; waits for the loader.
    fn restart(&mut self) {
        self.cache.signal("TERM");
        assert_eq!(self.cache.wait_exit(Duration::from_secs(10)), Some(0));
        let (p, addr, admin) = edgecache(&self.config);
        self.cache = p;
        self.addr = addr;
        self.admin = admin;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !get_text(admin, "/status").contains("\"done\": true") {
            assert!(Instant::now() < deadline, "the loader never finished");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The running config file (addresses filled in), for reloads.
    fn config_path(&self) -> std::path::PathBuf {
        self.cache.dir().join("edgecache.toml")
    }

    fn cache_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("cache")
    }

    /// The server's descriptors that point into the cache directory (objects kept open,
    /// not the spare temp files its cache keeps for misses), as `/proc/<pid>/fd` shows
    /// them (a deleted file ends with ` (deleted)`).
    fn cache_fds(&self) -> Vec<String> {
        let dir = self.cache_dir().to_string_lossy().into_owned();
        let fd_dir = format!("/proc/{}/fd", self.cache.child.id());
        let mut out = Vec::new();
        for e in std::fs::read_dir(&fd_dir).unwrap().flatten() {
            if let Ok(target) = std::fs::read_link(e.path()) {
                let t = target.to_string_lossy().into_owned();
                let spare = t.contains("/spare.tmp.");
                if t.starts_with(&dir) && !spare && !std::path::Path::new(&t).is_dir() {
                    out.push(t);
                }
            }
        }
        out
    }
}

/// MISS, HIT from disk (the body is read and admitted), HIT from RAM: the usual way an
/// object enters the tier. Every body must equal `expect`.
fn fill_to_memory(e: &Edge, path: &str, headers: &[&str], expect: &[u8]) {
    let a = e.get(path, headers);
    assert_eq!(outcome(&a), (200, "MISS", false), "{path} 1st");
    assert_eq!(a.body, expect, "{path} 1st body");
    let b = e.get(path, headers);
    assert_eq!(outcome(&b), (200, "HIT", false), "{path} 2nd: from disk");
    assert_eq!(b.body, expect, "{path} 2nd body");
    let c = e.get(path, headers);
    assert_eq!(
        outcome(&c),
        (200, "HIT", true),
        "{path} 3rd: from RAM ({})",
        cache_status(&c)
    );
    assert_eq!(c.body, expect, "{path} 3rd body (RAM)");
}

/// `/status` as JSON.
fn status_json(e: &Edge) -> serde_json::Value {
    serde_json::from_str(&get_text(e.admin, "/status")).unwrap()
}

/// RAM-tier hits over every worker, as `/status` counts them.
fn status_ram_hits(e: &Edge) -> u64 {
    status_json(e)["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["memory_cache"]["hits"].as_u64().unwrap())
        .sum()
}

/// `[memory_cache] size = "off"`: a test of the disk tier's own hit path.
const RAM_OFF: &str = "\n[memory_cache]\nsize = \"off\"\n";

// ---- 0. On by default ----

/// A disk cache and no `[memory_cache]` table: the RAM tier is on (`size = "auto"`), so
/// the second hit of a 1 KiB object is answered from RAM, and `/status` shows the size
/// it resolved to (the formula of docs/config.md on this machine: `max_size` defaults
/// to 10g) and that it was automatic.
#[test]
fn a_disk_cache_alone_gets_a_ram_tier_by_default() {
    let e = Edge::with_edgeorigin("", "", "");
    assert!(!e.config.contains("memory_cache"), "{}", e.config);
    let path = "/obj/1k/21";
    let direct = e.direct(path, &[]);
    fill_to_memory(&e, path, &[], &direct.body);
    let st = status_json(&e);
    let want = edge_core::config::memory::auto_size(
        edge_core::config::memory::physical_memory(),
        10 << 30,
    );
    assert!(want >= 1 << 20, "this machine resolves auto to {want}");
    let m = &st["memory_cache"];
    assert_eq!(m["size"].as_u64(), Some(want), "{st}");
    assert_eq!(m["auto"].as_bool(), Some(true), "{st}");
    assert_eq!(m["enabled"].as_bool(), Some(true), "{st}");
    assert_eq!(m["max_object_size"].as_u64(), Some(32 << 10), "{st}");
    assert_eq!(m["policy"].as_str(), Some("s3fifo"), "{st}");
    let deadline = Instant::now() + Duration::from_secs(3);
    while status_ram_hits(&e) < 1 {
        assert!(Instant::now() < deadline, "{}", status_json(&e));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `size = "off"` (and `"0"`): no RAM tier; every hit is read from disk, and `/status`
/// says the tier is off.
#[test]
fn size_off_serves_every_hit_from_disk() {
    for off in ["off", "0"] {
        let e = Edge::with_edgeorigin("", "", &format!("\n[memory_cache]\nsize = \"{off}\"\n"));
        let path = "/obj/1k/22";
        let direct = e.direct(path, &[]);
        assert_eq!(outcome(&e.get(path, &[])), (200, "MISS", false));
        for i in 0..4 {
            let r = e.get(path, &[]);
            assert_eq!(outcome(&r), (200, "HIT", false), "size = {off:?}: hit {i}");
            assert_eq!(r.body, direct.body);
        }
        std::thread::sleep(Duration::from_millis(1100));
        let st = status_json(&e);
        let m = &st["memory_cache"];
        assert_eq!(
            (
                m["size"].as_u64(),
                m["auto"].as_bool(),
                m["enabled"].as_bool()
            ),
            (Some(0), Some(false), Some(false)),
            "{st}"
        );
        assert_eq!(status_ram_hits(&e), 0, "{st}");
        assert_eq!(e.metric("edgecache_memory_cache_hits_total"), 0);
        assert_eq!(e.metric("edgecache_memory_cache_objects"), 0);
    }
}

// ---- An origin whose body changes with every request ----

/// Answers every request with a new version of the body (`version N`, repeated to a
/// length that also changes), `Cache-Control: max-age=<max_age>` and no validators, so
/// a refetch is a full response with other bytes. A stale copy served from RAM would
/// show by its bytes.
struct Versions {
    addr: SocketAddr,
    count: Arc<AtomicU64>,
}

fn versioned_body(n: u64) -> Vec<u8> {
    let tag = format!("version {n:04};");
    tag.bytes().cycle().take(6000 + 100 * n as usize).collect()
}

impl Versions {
    fn start(max_age: u64) -> Versions {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let count = Arc::new(AtomicU64::new(0));
        let c2 = count.clone();
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let count = c2.clone();
                std::thread::spawn(move || serve_versions(c, count, max_age));
            }
        });
        Versions { addr, count }
    }

    fn count(&self) -> u64 {
        self.count.load(SeqCst)
    }
}

fn serve_versions(mut c: TcpStream, count: Arc<AtomicU64>, max_age: u64) {
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
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
        let n = count.fetch_add(1, SeqCst) + 1;
        let body = versioned_body(n);
        let mut resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nCache-Control: max-age={max_age}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        if !head.starts_with("HEAD ") {
            resp.extend_from_slice(&body);
        }
        if c.write_all(&resp).is_err() {
            return;
        }
    }
}

// ---- 1. RAM hits ----

#[test]
fn third_request_is_served_from_ram_with_every_policy() {
    for policy in POLICIES {
        let e = Edge::with_edgeorigin("", "", &memory_cache(policy, "64m", "1m"));
        let path = "/obj/100k/1";
        let direct = e.direct(path, &[]);
        assert_eq!(direct.body.len(), 102400);
        let small = e.direct("/obj/1k/1", &[]);
        let before = e.origin_count();
        fill_to_memory(&e, path, &[], &direct.body);
        assert_eq!(e.origin_count() - before, 1, "{policy}: one origin request");
        let mut memory_responses = 1;

        // Headers of a RAM hit: the stored ones, the right length, ours.
        let c = e.get(path, &[]);
        assert_eq!(outcome(&c), (200, "HIT", true), "{policy}");
        memory_responses += 1;
        assert_eq!(c.body, direct.body);
        assert_eq!(c.header("content-length"), Some("102400"));
        assert_eq!(c.header("x-checksum"), direct.header("x-checksum"));
        assert_eq!(c.header("etag"), direct.header("etag"));
        assert_eq!(c.headers_all("server"), ["edgecache"]);
        assert!(c.header("age").is_some());
        assert!(
            cache_status(&c).starts_with("edgecache; hit;"),
            "{}",
            cache_status(&c)
        );

        // One keep-alive connection: a range, a HEAD, then a full GET (which parses
        // only if the HEAD sent no body), all from RAM.
        let mut k = Client::connect(e.addr);
        let r = k.get(path, &["Range: bytes=10-99"]);
        assert_eq!(outcome(&r), (206, "HIT", true), "{policy}: range from RAM");
        memory_responses += 1;
        assert_eq!(r.header("content-range"), Some("bytes 10-99/102400"));
        assert_eq!(r.header("content-length"), Some("90"));
        assert_eq!(r.body, direct.body[10..100]);
        let h = k.request("HEAD", path, &[]);
        assert_eq!(outcome(&h), (200, "HIT", true), "{policy}: HEAD from RAM");
        memory_responses += 1;
        assert_eq!(h.header("content-length"), Some("102400"));
        assert!(h.body.is_empty());
        let g = k.get(path, &[]);
        assert_eq!(outcome(&g), (200, "HIT", true), "{policy}: GET after HEAD");
        memory_responses += 1;
        assert_eq!(
            g.body, direct.body,
            "{policy}: the HEAD left no body behind"
        );
        // Suffix and several ranges from RAM.
        let s = k.get(path, &["Range: bytes=-500"]);
        assert_eq!(outcome(&s), (206, "HIT", true));
        memory_responses += 1;
        assert_eq!(
            s.header("content-range"),
            Some("bytes 101900-102399/102400")
        );
        assert_eq!(s.body, direct.body[102400 - 500..]);
        let m = k.get(path, &["Range: bytes=0-9,50000-50009"]);
        assert_eq!(outcome(&m), (206, "HIT", true));
        memory_responses += 1;
        let find = |needle: &[u8]| m.body.windows(needle.len()).any(|w| w == needle);
        assert!(find(&direct.body[0..10]) && find(&direct.body[50000..50010]));
        let text = String::from_utf8_lossy(&m.body);
        assert!(
            text.contains("Content-Range: bytes 50000-50009/102400"),
            "{text}"
        );
        // A conditional request for the RAM copy: 304, no body.
        let etag = direct.header("etag").unwrap();
        let nm = k.get(path, &[&format!("If-None-Match: {etag}")]);
        assert_eq!((nm.status, status(&nm)), (304, "HIT"));
        assert!(nm.body.is_empty());
        drop(k);

        // The raw bytes of a HEAD from RAM: the head and nothing after it.
        let mut raw = Client::connect(e.addr);
        raw.send(
            format!("HEAD {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        let bytes = raw.read_to_close();
        let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
        assert!(head.contains("detail=memory"), "{head}");
        assert!(head.contains("Content-Length: 102400"), "{head}");
        assert_eq!(bytes.len(), end, "{policy}: a HEAD from RAM sends no body");
        memory_responses += 1;

        // A small body (sent with its head in one write) from RAM too.
        fill_to_memory(&e, "/obj/1k/1", &[], &small.body);
        memory_responses += 1;
        assert_eq!(
            e.origin_count() - before,
            2,
            "{policy}: one request per object"
        );

        e.wait_metric(
            "edgecache_memory_cache_hits_total",
            "every RAM answer",
            |v| v >= memory_responses,
        );
        e.wait_metric("edgecache_memory_cache_admissions_total", ">= 2", |v| {
            v >= 2
        });
        e.wait_metric("edgecache_memory_cache_objects", "2", |v| v == 2);
        e.wait_metric(
            "edgecache_memory_cache_bytes",
            "at least both bodies",
            |v| (102400 + 1024..=64 << 20).contains(&v),
        );
        let hit_bytes = e.metric("edgecache_memory_cache_hit_bytes_total");
        assert!(hit_bytes >= 102400, "{policy}: hit bytes {hit_bytes}");
    }
}

#[test]
fn a_range_or_head_as_the_first_hit_still_serves_the_right_bytes() {
    let e = Edge::with_edgeorigin("", "", &memory_cache("s3fifo", "16m", "1m"));
    let path = "/obj/100k/14";
    let direct = e.direct(path, &[]);
    assert_eq!(status(&e.get(path, &[])), "MISS");
    // A HEAD does not read the body: it is not taken into RAM.
    let h = Client::connect(e.addr).request("HEAD", path, &[]);
    assert_eq!(outcome(&h), (200, "HIT", false));
    assert_eq!(h.header("content-length"), Some("102400"));
    // The first GET hit is a range: the whole body is read and admitted, and the range
    // is cut from what was read.
    let r = e.get(path, &["Range: bytes=70000-70999"]);
    assert_eq!(outcome(&r), (206, "HIT", false));
    assert_eq!(r.header("content-range"), Some("bytes 70000-70999/102400"));
    assert_eq!(r.body, direct.body[70000..71000]);
    let r = e.get(path, &["Range: bytes=0-0"]);
    assert_eq!(outcome(&r), (206, "HIT", true));
    assert_eq!(r.body, direct.body[0..1]);
    let f = e.get(path, &[]);
    assert_eq!(outcome(&f), (200, "HIT", true));
    assert_eq!(f.body, direct.body);
    let u = e.get(path, &["Range: bytes=200000-"]);
    assert_eq!(
        (u.status, u.header("content-range")),
        (416, Some("bytes */102400"))
    );
}

#[test]
fn two_zones_with_the_same_key_keep_their_own_ram_copies() {
    // Both locations key objects by `$host` only: the same key in two zones. The
    // worker's RAM tier (shared by the zones) must keep them apart.
    let v = Versions::start(600);
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
servers = ["{origin}"]
[[location]]
prefix = "/x/"
proxy = "origin"
cache = ["d1"]
cache_key = "$host"
[[location]]
prefix = "/y/"
proxy = "origin"
cache = ["d2"]
cache_key = "$host"
[admin]
listen = "{{admin}}"
{mem}"#,
        d1 = dir.path().join("d1").display(),
        d2 = dir.path().join("d2").display(),
        origin = v.addr,
        mem = memory_cache("s3fifo", "16m", "1m"),
    );
    let (_p, addr, _admin) = edgecache(&cfg);
    let x = get(addr, "/x/1", &[]);
    assert_eq!((status(&x), &x.body), ("MISS", &versioned_body(1)));
    let y = get(addr, "/y/1", &[]);
    assert_eq!((status(&y), &y.body), ("MISS", &versioned_body(2)));
    for i in 0..4 {
        let x = get(addr, "/x/1", &[]);
        let y = get(addr, "/y/1", &[]);
        assert_eq!(status(&x), "HIT");
        assert_eq!(status(&y), "HIT");
        assert_eq!(x.body, versioned_body(1), "round {i}: zone d1's object");
        assert_eq!(y.body, versioned_body(2), "round {i}: zone d2's object");
        if i >= 1 {
            assert!(
                from_memory(&x) && from_memory(&y),
                "round {i}: both from RAM"
            );
        }
    }
    assert_eq!(v.count(), 2);
}

#[test]
fn concurrent_mixed_traffic_is_always_answered_with_the_right_bytes() {
    // Two workers, RAM hits, disk hits, too-large objects, fills and purges at once.
    let e = Edge::with_edgeorigin("workers = 2", "", &memory_cache("s3fifo", "2m", "256k"));
    let sizes = ["1k", "30k", "100k", "200k", "300k"];
    let paths: Vec<String> = (0..20)
        .map(|i| format!("/obj/{}/{}", sizes[i % sizes.len()], 900 + i))
        .collect();
    let direct: Arc<Vec<Vec<u8>>> = Arc::new(paths.iter().map(|p| e.direct(p, &[]).body).collect());
    let paths = Arc::new(paths);
    let (addr, admin) = (e.addr, e.admin);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let purger = {
        let (paths, stop) = (paths.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(SeqCst) {
                let p = &paths[(n * 7) % paths.len()];
                let form = format!("url=http://test{p}");
                let r = post_form(admin, "/purge", &form);
                assert!(r.status == 200 || r.status == 404, "purge: {}", r.status);
                n += 1;
                std::thread::sleep(Duration::from_millis(30));
            }
            n
        })
    };
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (paths, direct) = (paths.clone(), direct.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut memory = 0;
                for k in 0..60 {
                    let i = (t * 13 + k * 7) % paths.len();
                    let r = if k % 5 == 4 {
                        c.get(&paths[i], &["Range: bytes=100-199"])
                    } else {
                        c.get(&paths[i], &[])
                    };
                    if k % 5 == 4 {
                        assert_eq!(r.status, 206, "{}", paths[i]);
                        assert!(r.body == direct[i][100..200], "{}: range bytes", paths[i]);
                    } else {
                        assert_eq!(r.status, 200, "{}", paths[i]);
                        assert!(r.body == direct[i], "{} ({}): bytes", paths[i], status(&r));
                    }
                    if from_memory(&r) {
                        memory += 1;
                        assert_eq!(status(&r), "HIT");
                        assert!(
                            !paths[i].contains("/300k/"),
                            "{}: over max_object_size, from RAM",
                            paths[i]
                        );
                    }
                }
                memory
            })
        })
        .collect();
    let memory: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    stop.store(true, SeqCst);
    let purges = purger.join().unwrap();
    assert!(purges > 0);
    assert!(memory > 0, "no RAM hits at all in 480 requests");
    // The server is still whole (no worker died on the way).
    let r = e.get(&paths[0], &[]);
    assert_eq!((r.status, &r.body), (200, &direct[0]));
    let bytes = e.metric("edgecache_memory_cache_bytes");
    assert!(bytes <= 2 << 20, "{bytes}");
}

// ---- 2. Purge ----

#[test]
fn purged_object_is_never_answered_from_ram() {
    let e = Edge::with_edgeorigin("", "", &memory_cache("s3fifo", "16m", "1m"));
    let path = "/obj/10k/2";
    let direct = e.direct(path, &[]);
    fill_to_memory(&e, path, &[], &direct.body);

    // The PURGE method.
    e.purge_method(path);
    let before = e.origin_count();
    let a = e.get(path, &[]);
    assert_eq!(
        outcome(&a),
        (200, "MISS", false),
        "after PURGE: {}",
        cache_status(&a)
    );
    assert_eq!(a.body, direct.body);
    assert_eq!(
        e.origin_count() - before,
        1,
        "the purged object was fetched again"
    );
    // The RAM copy was of the purged version: the refetched one starts on disk.
    let b = e.get(path, &[]);
    assert_eq!(
        outcome(&b),
        (200, "HIT", false),
        "first hit of the new version"
    );
    let c = e.get(path, &[]);
    assert_eq!(outcome(&c), (200, "HIT", true));
    assert_eq!(c.body, direct.body);
    e.wait_metric("edgecache_memory_cache_invalidations_total", ">= 1", |v| {
        v >= 1
    });

    // The admin API.
    let r = post_form(e.admin, "/purge", "url=http%3A%2F%2Ftest%2Fobj%2F10k%2F2");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"{\"purged\": 1}\n"[..])
    );
    let before = e.origin_count();
    let a = e.get(path, &[]);
    assert_eq!(outcome(&a), (200, "MISS", false), "after admin purge");
    assert_eq!(a.body, direct.body);
    assert_eq!(e.origin_count() - before, 1);

    // Purge by tag, with a keep-alive connection that had the RAM copy just before.
    let tagged = "/obj/8k/2?tag=red";
    let tdirect = e.direct(tagged, &[]);
    fill_to_memory(&e, tagged, &[], &tdirect.body);
    let mut k = Client::connect(e.addr);
    assert_eq!(outcome(&k.get(tagged, &[])), (200, "HIT", true));
    let r = post_form(e.admin, "/purge", "tag=red");
    assert_eq!(r.body, b"{\"purged\": 1}\n");
    let before = e.origin_count();
    let t = k.get(tagged, &[]);
    assert_eq!(outcome(&t), (200, "MISS", false), "after purge by tag");
    assert_eq!(t.body, tdirect.body);
    assert_eq!(e.origin_count() - before, 1);
}

#[test]
fn after_purge_ram_serves_the_new_version_not_the_old() {
    let v = Versions::start(600);
    let e = Edge::start(None, v.addr, "", "", &memory_cache("s3fifo", "16m", "1m"));
    let path = "/v/2";
    fill_to_memory(&e, path, &[], &versioned_body(1));
    assert_eq!(v.count(), 1);
    e.purge_method(path);
    let a = e.get(path, &[]);
    assert_eq!(outcome(&a), (200, "MISS", false));
    assert_eq!(a.body, versioned_body(2), "the origin's new version");
    assert_eq!(v.count(), 2);
    for i in 0..4 {
        let r = e.get(path, &[]);
        assert_eq!(status(&r), "HIT");
        assert_eq!(
            String::from_utf8_lossy(&r.body[..13]),
            "version 0002;",
            "request {i} after the purge (RAM: {})",
            from_memory(&r)
        );
        assert_eq!(r.body, versioned_body(2));
        assert_eq!(
            r.header("content-length").unwrap(),
            versioned_body(2).len().to_string()
        );
    }
    assert!(
        from_memory(&e.get(path, &[])),
        "the new version reached RAM"
    );
    assert_eq!(v.count(), 2);
}

#[test]
fn soft_purge_revalidates_instead_of_answering_from_ram() {
    let e = Edge::with_edgeorigin("", "", &memory_cache("s3fifo", "16m", "1m"));
    let path = "/obj/10k/3";
    let direct = e.direct(path, &[]);
    fill_to_memory(&e, path, &[], &direct.body);
    let r = post_form(e.admin, "/purge", "url=http://test/obj/10k/3&soft=1");
    assert_eq!(r.body, b"{\"purged\": 1}\n");
    let before = e.origin_count();
    let a = e.get(path, &[]);
    assert_eq!(
        outcome(&a),
        (200, "REVALIDATED", false),
        "soft-purged: revalidated with the origin ({})",
        cache_status(&a)
    );
    assert_eq!(a.body, direct.body);
    assert_eq!(e.origin_count() - before, 1);
    let b = e.get(path, &[]);
    // The body did not change (304): from disk or RAM, either is right.
    assert_eq!((b.status, status(&b)), (200, "HIT"));
    assert_eq!(b.body, direct.body);
    let c = e.get(path, &[]);
    assert_eq!(outcome(&c), (200, "HIT", true));
    assert_eq!(c.body, direct.body);
    assert_eq!(e.origin_count() - before, 1);

    // Without validators the soft-purged object is refetched whole (EXPIRED), and
    // what RAM serves afterwards is the new version.
    let v = Versions::start(600);
    let e = Edge::start(None, v.addr, "", "", &memory_cache("s3fifo", "16m", "1m"));
    fill_to_memory(&e, "/v/3", &[], &versioned_body(1));
    let r = post_form(e.admin, "/purge", "url=http://test/v/3&soft=1");
    assert_eq!(r.body, b"{\"purged\": 1}\n");
    let a = e.get("/v/3", &[]);
    assert_eq!(outcome(&a), (200, "EXPIRED", false));
    assert_eq!(a.body, versioned_body(2));
    assert_eq!(v.count(), 2);
    let b = e.get("/v/3", &[]);
    assert_eq!(outcome(&b), (200, "HIT", false));
    assert_eq!(b.body, versioned_body(2));
    let c = e.get("/v/3", &[]);
    assert_eq!(outcome(&c), (200, "HIT", true));
    assert_eq!(c.body, versioned_body(2), "RAM has the new version");
}

// ---- 3. Expiry ----

#[test]
fn expired_object_in_ram_is_revalidated_or_refetched() {
    // The key ignores the query, so the refreshing request can ask edgeorigin for a
    // longer max-age on the same object. max-age=2 and `Date` of 1 s resolution: the
    // object is fresh for at least 1 s (its three requests take milliseconds) and
    // certainly stale 2.6 s after it was fetched.
    let e = Edge::with_edgeorigin(
        "",
        "cache_key = \"$scheme://$host$uri\"",
        &memory_cache("s3fifo", "16m", "1m"),
    );
    let v = Versions::start(2);
    let ev = Edge::start(None, v.addr, "", "", &memory_cache("lru", "16m", "1m"));
    let t0 = Instant::now();
    let with_etag = e.direct("/obj/4k/4", &[]);
    let without = e.direct("/obj/4k/5?etag=0&lm=0", &[]);
    assert!(without.header("etag").is_none() && without.header("last-modified").is_none());
    fill_to_memory(&e, "/obj/4k/4?max_age=2", &[], &with_etag.body);
    fill_to_memory(&e, "/obj/4k/5?max_age=2&etag=0&lm=0", &[], &without.body);
    fill_to_memory(&ev, "/v/4", &[], &versioned_body(1));
    std::thread::sleep(Duration::from_millis(2600).saturating_sub(t0.elapsed()));

    // With validators: a 304 (REVALIDATED), then the refreshed headers, from disk and
    // then from RAM.
    let before = e.origin_count();
    let a = e.get("/obj/4k/4?max_age=60", &[]);
    assert_eq!(
        outcome(&a),
        (200, "REVALIDATED", false),
        "expired: never fresh from RAM ({})",
        cache_status(&a)
    );
    assert_eq!(a.body, with_etag.body);
    assert_eq!(e.origin_count() - before, 1, "the origin was asked");
    let b = e.get("/obj/4k/4", &[]);
    assert_eq!((b.status, status(&b)), (200, "HIT"));
    assert_eq!(b.body, with_etag.body);
    assert_eq!(b.header("cache-control"), Some("max-age=60"));
    let c = e.get("/obj/4k/4", &[]);
    assert_eq!(outcome(&c), (200, "HIT", true));
    assert_eq!(c.body, with_etag.body);
    assert_eq!(
        c.header("cache-control"),
        Some("max-age=60"),
        "a RAM hit carries the refreshed headers"
    );

    // Without validators: a full refetch (EXPIRED).
    let before = e.origin_count();
    let x = e.get("/obj/4k/5?max_age=60&etag=0&lm=0", &[]);
    assert_eq!(outcome(&x), (200, "EXPIRED", false), "{}", cache_status(&x));
    assert_eq!(x.body, without.body);
    assert_eq!(e.origin_count() - before, 1);
    assert_eq!(outcome(&e.get("/obj/4k/5", &[])), (200, "HIT", false));
    assert_eq!(outcome(&e.get("/obj/4k/5", &[])), (200, "HIT", true));

    // The origin now has another body: the refetch brings it, and RAM never again
    // answers with the old one.
    let n = ev.get("/v/4", &[]);
    assert_eq!(outcome(&n), (200, "EXPIRED", false));
    assert_eq!(n.body, versioned_body(2));
    assert_eq!(v.count(), 2);
    for i in 0..3 {
        let r = ev.get("/v/4", &[]);
        assert_eq!(status(&r), "HIT");
        assert_eq!(r.body, versioned_body(2), "hit {i} after the refetch");
    }
    assert!(from_memory(&ev.get("/v/4", &[])));
    assert_eq!(v.count(), 2);
}

// ---- 4. Vary ----

#[test]
fn each_vary_variant_is_served_from_ram_with_its_own_bytes() {
    for policy in POLICIES {
        let e = Edge::with_edgeorigin("", "", &memory_cache(policy, "16m", "1m"));
        let path = "/obj/20k/6?vary=Accept-Encoding";
        let gz = ["Accept-Encoding: gzip"];
        let br = ["Accept-Encoding: br"];
        let dgz = e.direct(path, &gz);
        let dbr = e.direct(path, &br);
        let dnone = e.direct(path, &[]);
        assert_ne!(dgz.body, dbr.body, "edgeorigin varies the bytes");
        assert_ne!(dgz.body, dnone.body);
        let before = e.origin_count();
        // Interleaved, so that each variant's RAM entry exists while the other is asked.
        let order: [(&[&str], &Response, (&str, bool)); 8] = [
            (&gz, &dgz, ("MISS", false)),
            (&br, &dbr, ("MISS", false)),
            (&gz, &dgz, ("HIT", false)),
            (&br, &dbr, ("HIT", false)),
            (&gz, &dgz, ("HIT", true)),
            (&br, &dbr, ("HIT", true)),
            (&gz, &dgz, ("HIT", true)),
            (&br, &dbr, ("HIT", true)),
        ];
        for (i, (h, d, (st, mem))) in order.into_iter().enumerate() {
            let r = e.get(path, h);
            assert_eq!(outcome(&r), (200, st, mem), "{policy}: request {i} {h:?}");
            assert_eq!(r.body, d.body, "{policy}: request {i} {h:?}: its own bytes");
            assert_eq!(r.header("etag"), d.header("etag"));
            assert_eq!(r.header("x-checksum"), d.header("x-checksum"));
            assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        }
        // No header is a third variant: never the RAM copy of another.
        let n = e.get(path, &[]);
        assert_eq!(outcome(&n), (200, "MISS", false), "{policy}");
        assert_eq!(n.body, dnone.body);
        let n = e.get(path, &[]);
        assert_eq!(outcome(&n), (200, "HIT", false));
        let n = e.get(path, &[]);
        assert_eq!(outcome(&n), (200, "HIT", true));
        assert_eq!(n.body, dnone.body);
        assert_eq!(
            e.origin_count() - before,
            3,
            "{policy}: one request per variant"
        );
        let r = e.get(path, &gz);
        assert_eq!((outcome(&r), &r.body), ((200, "HIT", true), &dgz.body));
        e.wait_metric("edgecache_memory_cache_objects", "3", |v| v == 3);
    }
}

// ---- 5. Restart ----

#[test]
fn ram_is_empty_after_a_restart_but_the_disk_cache_is_not() {
    let mut e = Edge::with_edgeorigin("", "", &memory_cache("s3fifo", "16m", "1m"));
    let path = "/obj/50k/7";
    let direct = e.direct(path, &[]);
    fill_to_memory(&e, path, &[], &direct.body);
    e.restart();
    assert_eq!(e.metric("edgecache_memory_cache_objects"), 0);
    assert_eq!(e.metric("edgecache_memory_cache_hits_total"), 0);
    let before = e.origin_count();
    let a = e.get(path, &[]);
    assert_eq!(
        outcome(&a),
        (200, "HIT", false),
        "from disk after the restart ({})",
        cache_status(&a)
    );
    assert_eq!(a.body, direct.body);
    let b = e.get(path, &[]);
    assert_eq!(outcome(&b), (200, "HIT", true), "then from RAM");
    assert_eq!(b.body, direct.body);
    assert_eq!(
        e.origin_count(),
        before,
        "no origin request after the restart"
    );
    e.wait_metric("edgecache_memory_cache_objects", "1", |v| v == 1);
}

#[test]
fn a_clean_restart_starts_from_the_index_snapshot_and_a_crash_from_the_files() {
    let mut e = Edge::with_edgeorigin("", "", "");
    let paths: Vec<String> = (0..20).map(|i| format!("/obj/2k/{}", 900 + i)).collect();
    let bodies: Vec<Vec<u8>> = paths.iter().map(|p| e.direct(p, &[]).body).collect();
    for p in &paths {
        assert_eq!(status(&e.get(p, &[])), "MISS");
    }
    e.restart();
    let snap = e.cache_dir().join("index.snapshot");
    assert!(!snap.exists(), "read once, then deleted");
    let st = get_text(e.admin, "/status");
    assert!(st.contains("\"snapshot\": 20"), "{st}");
    assert!(st.contains("\"unseen\": 0"), "{st}");
    let m = e.metrics();
    assert!(
        m.contains("edgecache_cache_loader_snapshot{cache=\"c1\"} 20"),
        "{m}"
    );
    let before = e.origin_count();
    for (p, b) in paths.iter().zip(&bodies) {
        let r = e.get(p, &[]);
        assert_eq!(status(&r), "HIT", "{p} after a clean restart");
        assert!(r.body == *b, "{p}: body");
    }
    // A crash writes no snapshot: the loader reads the files instead.
    e.cache.signal("KILL");
    let _ = e.cache.wait_exit(Duration::from_secs(10));
    assert!(!snap.exists());
    let (p, addr, admin) = edgecache(&e.config);
    (e.cache, e.addr, e.admin) = (p, addr, admin);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !get_text(e.admin, "/status").contains("\"done\": true") {
        assert!(Instant::now() < deadline, "the loader never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = get_text(e.admin, "/status");
    assert!(st.contains("\"snapshot\": 0"), "{st}");
    assert!(st.contains("\"loaded\": 20"), "{st}");
    for (p, b) in paths.iter().zip(&bodies) {
        let r = e.get(p, &[]);
        assert_eq!(status(&r), "HIT", "{p} after a crash");
        assert!(r.body == *b, "{p}: body");
    }
    assert_eq!(
        e.origin_count(),
        before,
        "no origin request after either restart"
    );
}

// ---- 6. The byte budget ----

#[test]
fn the_byte_budget_holds_under_a_fill_storm() {
    const N: usize = 60;
    const BUDGET: u64 = 1 << 20;
    for policy in POLICIES {
        // Two workers: each has half of `size`; the gauges are their sums.
        let e = Edge::with_edgeorigin("workers = 2", "", &memory_cache(policy, "1m", "256k"));
        let paths: Vec<String> = (0..N).map(|i| format!("/obj/100k/{}", 600 + i)).collect();
        let direct: Arc<Vec<Vec<u8>>> =
            Arc::new(paths.iter().map(|p| e.direct(p, &[]).body).collect());
        let paths = Arc::new(paths);
        let before = e.origin_count();
        let addr = e.addr;
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (paths, direct) = (paths.clone(), direct.clone());
                std::thread::spawn(move || {
                    for i in (t..N).step_by(4) {
                        let a = get(addr, &paths[i], &[]);
                        assert_eq!((a.status, status(&a)), (200, "MISS"), "{}", paths[i]);
                        assert!(a.body == direct[i], "{}: MISS body", paths[i]);
                        let b = get(addr, &paths[i], &[]);
                        assert_eq!((b.status, status(&b)), (200, "HIT"), "{}", paths[i]);
                        assert!(b.body == direct[i], "{}: HIT body", paths[i]);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(e.origin_count() - before, N as u64, "{policy}");

        // The most recent object is in RAM (of whichever worker answers: three tries
        // reach a worker that took it in).
        let last = N - 1;
        let mut any_memory = false;
        for _ in 0..3 {
            let r = e.get(&paths[last], &[]);
            assert_eq!(status(&r), "HIT");
            assert!(r.body == direct[last], "{policy}: body of the last object");
            any_memory |= from_memory(&r);
        }
        assert!(
            any_memory,
            "{policy}: the last object was never answered from RAM"
        );

        // Every object once more, in reverse: correct bytes wherever they come from.
        for i in (0..N).rev() {
            let r = e.get(&paths[i], &[]);
            assert_eq!(status(&r), "HIT", "{policy} {}", paths[i]);
            assert!(
                r.body == direct[i],
                "{policy} {}: third pass body",
                paths[i]
            );
        }

        // Sample the gauges across two publishing ticks.
        for _ in 0..6 {
            let m = e.metrics();
            let bytes = metric_in(&m, "edgecache_memory_cache_bytes").unwrap();
            let objects = metric_in(&m, "edgecache_memory_cache_objects").unwrap();
            assert!(
                bytes <= BUDGET,
                "{policy}: {bytes} bytes held, budget {BUDGET}\n{m}"
            );
            assert!(
                objects >= 1 && bytes >= objects * 102400,
                "{policy}: {objects} objects in {bytes} bytes"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        let m = e.metrics();
        let evictions = metric_in(&m, "edgecache_memory_cache_evictions_total").unwrap();
        let rejections = metric_in(&m, "edgecache_memory_cache_rejections_total").unwrap();
        let admissions = metric_in(&m, "edgecache_memory_cache_admissions_total").unwrap();
        assert!(admissions >= 10, "{policy}: admissions {admissions}\n{m}");
        if policy == "tinylfu" {
            // A scan: TinyLFU may refuse newcomers instead of evicting.
            assert!(evictions + rejections > 0, "{policy}\n{m}");
        } else {
            assert!(
                evictions > 0,
                "{policy}: 6 MB through 1 MB without evictions?\n{m}"
            );
        }
    }
}

// ---- 7. Too large ----

#[test]
fn objects_over_max_object_size_stay_on_disk() {
    let e = Edge::with_edgeorigin("", "", &memory_cache("s3fifo", "1m", "256k"));
    let big = "/obj/262145/8"; // max_object_size + 1
    let direct = e.direct(big, &[]);
    let before = e.origin_count();
    let a = e.get(big, &[]);
    assert_eq!(outcome(&a), (200, "MISS", false));
    assert_eq!(a.body, direct.body);
    let mut k = Client::connect(e.addr);
    for i in 0..4 {
        let r = k.get(big, &[]);
        assert_eq!(
            outcome(&r),
            (200, "HIT", false),
            "hit {i} of a too-large object"
        );
        assert_eq!(r.body, direct.body);
    }
    let r = k.get(big, &["Range: bytes=10-99"]);
    assert_eq!(outcome(&r), (206, "HIT", false));
    assert_eq!(r.body, direct.body[10..100]);
    assert_eq!(e.origin_count() - before, 1);
    e.wait_metric("edgecache_memory_cache_objects", "0", |v| v == 0);
    assert_eq!(e.metric("edgecache_memory_cache_admissions_total"), 0);
    assert_eq!(e.metric("edgecache_memory_cache_bytes"), 0);
    // Still nothing after a publishing tick.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(e.metric("edgecache_memory_cache_objects"), 0);

    // Exactly max_object_size is admitted; on the same keep-alive connection a RAM
    // hit and then a disk hit: the second must not say `detail=memory`.
    let edge = "/obj/262144/8";
    let dedge = e.direct(edge, &[]);
    fill_to_memory(&e, edge, &[], &dedge.body);
    let m = k.get(edge, &[]);
    assert_eq!(outcome(&m), (200, "HIT", true));
    assert_eq!(m.body, dedge.body);
    let d = k.get(big, &[]);
    assert_eq!(outcome(&d), (200, "HIT", false), "{}", cache_status(&d));
    assert_eq!(d.body, direct.body);
    e.wait_metric("edgecache_memory_cache_objects", "1", |v| v == 1);
}

// ---- 8. The open-file cache ----

#[test]
fn open_file_cache_keeps_descriptors_of_repeated_hits() {
    // The disk tier's hit path: the RAM tier (on by default) would answer the repeats.
    let e = Edge::with_edgeorigin("", "", RAM_OFF);
    let path = "/obj/10k/9";
    let direct = e.direct(path, &[]);
    assert_eq!(status(&e.get(path, &[])), "MISS");
    for i in 0..5 {
        let r = e.get(path, &[]);
        assert_eq!(outcome(&r), (200, "HIT", false), "hit {i}");
        assert_eq!(r.body, direct.body);
    }
    // The first hit opened the file; the next four found it open.
    e.wait_metric("edgecache_open_file_cache_hits_total", ">= 4", |v| v >= 4);
    e.wait_metric("edgecache_open_file_cache_open", ">= 1", |v| v >= 1);
    assert_eq!(e.cache_fds().len(), 1, "{:?}", e.cache_fds());
    // With the RAM tier off it reports nothing.
    assert_eq!(e.metric("edgecache_memory_cache_hits_total"), 0);

    let off = Edge::with_edgeorigin("open_file_cache = \"off\"", "", RAM_OFF);
    assert_eq!(status(&off.get(path, &[])), "MISS");
    for _ in 0..5 {
        let r = off.get(path, &[]);
        assert_eq!(outcome(&r), (200, "HIT", false));
        assert_eq!(r.body, direct.body);
    }
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(off.metric("edgecache_open_file_cache_hits_total"), 0);
    assert_eq!(off.metric("edgecache_open_file_cache_open"), 0);
    assert!(off.cache_fds().is_empty(), "{:?}", off.cache_fds());
}

#[test]
fn open_file_cache_is_bounded_and_releases_purged_files() {
    let e = Edge::with_edgeorigin(
        "open_file_cache = { max = 2, inactive = \"3s\" }",
        "",
        RAM_OFF,
    );
    let paths = ["/obj/10k/10", "/obj/10k/11", "/obj/10k/12"];
    for p in paths {
        let direct = e.direct(p, &[]);
        assert_eq!(status(&e.get(p, &[])), "MISS");
        let r = e.get(p, &[]);
        assert_eq!(outcome(&r), (200, "HIT", false));
        assert_eq!(r.body, direct.body);
    }
    // Three files opened, at most two kept.
    e.wait_metric("edgecache_open_file_cache_closed_total", ">= 1", |v| v >= 1);
    assert_eq!(e.metric("edgecache_open_file_cache_open"), 2);
    assert_eq!(e.cache_fds().len(), 2, "{:?}", e.cache_fds());

    // The last object: a hit from the open file, then PURGE. Its descriptor is still
    // held right after (nobody asked for it since)...
    let last = paths[2];
    let hits = e.metric("edgecache_open_file_cache_hits_total");
    assert_eq!(status(&e.get(last, &[])), "HIT");
    e.wait_metric("edgecache_open_file_cache_hits_total", "one more", |v| {
        v > hits
    });
    e.purge_method(last);
    assert!(e.metric("edgecache_open_file_cache_open") >= 1);
    // ... and closed within `inactive`: the purged file's space is released.
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        let open = e.metric("edgecache_open_file_cache_open");
        let fds = e.cache_fds();
        if open == 0 && fds.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after `inactive`: open gauge {open}, descriptors into the cache {fds:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(e.metric("edgecache_open_file_cache_closed_total") >= 3);
    // The purged object is fetched again, the others are still hits.
    assert_eq!(status(&e.get(last, &[])), "MISS");
    assert_eq!(status(&e.get(paths[0], &[])), "HIT");
}

// ---- Reload ----

#[test]
fn a_reload_to_size_off_stops_ram_answers_and_empties_the_gauges() {
    let e = Edge::with_edgeorigin("", "", &memory_cache("s3fifo", "16m", "1m"));
    let path = "/obj/10k/13";
    let direct = e.direct(path, &[]);
    fill_to_memory(&e, path, &[], &direct.body);
    e.wait_metric("edgecache_memory_cache_objects", "1", |v| v == 1);

    let running = std::fs::read_to_string(e.config_path()).unwrap();
    let at = running.find("\n[memory_cache]").expect("the table");
    let without_table = &running[..at];
    std::fs::write(e.config_path(), format!("{without_table}{RAM_OFF}")).unwrap();
    e.cache.signal("HUP");
    // Applied by each worker within a second.
    let deadline = Instant::now() + Duration::from_secs(4);
    loop {
        let r = e.get(path, &[]);
        assert_eq!(status(&r), "HIT");
        assert_eq!(r.body, direct.body);
        if !from_memory(&r) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still answered from RAM after the reload"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for _ in 0..3 {
        let r = e.get(path, &[]);
        assert_eq!(outcome(&r), (200, "HIT", false), "no RAM tier any more");
    }
    std::thread::sleep(Duration::from_millis(1100));
    let m = e.metrics();
    assert_eq!(
        (
            metric_in(&m, "edgecache_memory_cache_objects"),
            metric_in(&m, "edgecache_memory_cache_bytes")
        ),
        (Some(0), Some(0)),
        "nothing is held in RAM any more, the gauges must say so:\n{m}"
    );

    // And back, by removing the table (the default, `size = "auto"`): the tier starts
    // empty and fills again.
    std::fs::write(e.config_path(), without_table).unwrap();
    e.cache.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(4);
    loop {
        let r = e.get(path, &[]);
        assert_eq!(r.body, direct.body);
        if from_memory(&r) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "RAM tier not back after the reload"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let st = status_json(&e);
    assert_eq!(st["memory_cache"]["auto"].as_bool(), Some(true), "{st}");
}

// ---- 9. Config errors ----

const BASE: &str = "workers = 1\n[[listen]]\naddr = \"127.0.0.1:1\"\n[[cache]]\nname = \"c1\"\npath = \"/tmp/edgecache-test-unused\"\n";

#[test]
fn bad_memory_and_open_file_cache_settings_are_config_errors() {
    let good = check_config(&format!(
        "{BASE}[memory_cache]\nsize = \"4m\"\npolicy = \"tinylfu\"\n"
    ));
    assert_eq!(good.0, Some(0), "{}", good.1);
    for size in ["\"auto\"", "\"off\"", "\"0\"", "0", "\"1m\"", "4194304"] {
        let good = check_config(&format!("{BASE}[memory_cache]\nsize = {size}\n"));
        assert_eq!(good.0, Some(0), "size = {size}: {}", good.1);
    }
    // "auto" and "off" need no disk cache (auto is then off).
    let no_cache = "workers = 1\n[[listen]]\naddr = \"127.0.0.1:1\"\n[memory_cache]\n";
    for size in ["\"auto\"", "\"off\""] {
        let good = check_config(&format!("{no_cache}size = {size}\n"));
        assert_eq!(good.0, Some(0), "size = {size}: {}", good.1);
    }
    let good = check_config(&format!("open_file_cache = \"off\"\n{BASE}"));
    assert_eq!(good.0, Some(0), "{}", good.1);
    let good = check_config(&format!(
        "open_file_cache = {{ max = 10, inactive = \"1s\" }}\n{BASE}"
    ));
    assert_eq!(good.0, Some(0), "{}", good.1);

    // (config, line, key, words of the message). BASE has 6 lines.
    let cases: [(String, usize, &str, &str); 9] = [
        (
            format!("{BASE}[memory_cache]\nsize = \"lots\"\n"),
            8,
            "memory_cache.size",
            "\"auto\", \"off\"",
        ),
        (
            format!("{BASE}[memory_cache]\nsize = \"on\"\n"),
            8,
            "memory_cache.size",
            "\"on\"",
        ),
        (
            format!("{BASE}[memory_cache]\nsize = -1\n"),
            8,
            "memory_cache.size",
            "negative",
        ),
        (
            format!("{BASE}[memory_cache]\npolicy = \"lru\"\nsize = \"1.5g\"\n"),
            9,
            "memory_cache.size",
            "\"1.5g\"",
        ),
        (
            format!("{BASE}[memory_cache]\nsize = \"1m\"\nmax_object_size = \"2m\"\n"),
            9,
            "memory_cache.max_object_size",
            "memory_cache.size",
        ),
        (
            format!("{BASE}[memory_cache]\nsize = \"4m\"\npolicy = \"bogus\"\n"),
            9,
            "memory_cache.policy",
            "bogus",
        ),
        (
            format!("{BASE}[memory_cache]\nsize = \"1k\"\n"),
            8,
            "memory_cache.size",
            "1m",
        ),
        (
            format!("open_file_cache = \"on\"\n{BASE}"),
            1,
            "open_file_cache",
            "\"off\"",
        ),
        (
            "workers = 1\n[[listen]]\naddr = \"127.0.0.1:1\"\n[memory_cache]\nsize = \"4m\"\n"
                .to_string(),
            4,
            "memory_cache",
            "[[cache]]",
        ),
    ];
    for (text, line, key, words) in cases {
        let (code, err, path) = check_config(&text);
        assert_eq!(code, Some(2), "{text}\n{err}");
        let want = format!("{path}:{line}: {key}: ");
        assert!(err.contains(&want), "want {want:?}, got {err:?}");
        assert!(err.contains(words), "want {words:?} in {err:?}");
    }
}

#[test]
fn open_file_cache_errors_name_the_line_of_open_file_cache() {
    // `inactive` inside the inline table: the error's line is the open_file_cache line
    // (2), not the line of another table's `inactive` (the cache zone's, 8).
    let text = "workers = 1\nopen_file_cache = { max = 10, inactive = \"0s\" }\n[[listen]]\naddr = \"127.0.0.1:1\"\n[[cache]]\nname = \"c1\"\npath = \"/tmp/edgecache-test-unused\"\ninactive = \"1h\"\n";
    let (code, err, path) = check_config(text);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("{path}:2: open_file_cache.inactive: ")),
        "{err}"
    );
    let text =
        "workers = 1\nopen_file_cache = { max = 2000000 }\n[[listen]]\naddr = \"127.0.0.1:1\"\n";
    let (code, err, path) = check_config(text);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("{path}:2: open_file_cache.max: ")),
        "{err}"
    );
}
