//! Large cache hits: bodies (or ranges) over `aio.sendfile_max` leave with the head in
//! one write from a mapping of the object's file instead of by sendfile
//! (`crates/edge-core/src/http/mapped.rs`). The real `edgecache` in front of the real
//! `edgeorigin`: every answer byte for byte the origin's (whole, ranged across the
//! write chunks, suffix, multipart, If-Range, HEAD) on one keep-alive connection; the
//! mapping made only where it should be (not under `threads`, not with
//! `sendfile_max = "off"`), dropped after `open_file_cache.inactive`; a cold object
//! read off the loop before it is written from a mapping; and a file truncated under
//! the server cuts the response and is fetched again, never served whole and wrong.
//!
//! The first test follows the `EDGECACHE_TEST_AIO` backend matrix of `./test`.

mod common;

use common::{cached_config, edgecache, get_text, object_files, origin, LOCAL};
use edge_testkit::{get, Client, Proc, Response};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

struct Node {
    _origin: Proc,
    origin: SocketAddr,
    cache: Proc,
    addr: SocketAddr,
    admin: SocketAddr,
    dir: tempfile::TempDir,
    base_config: String,
}

impl Node {
    /// `top` adds top-level keys, `tables` tables (an `[aio]` table takes the test out
    /// of the backend matrix). No RAM tier: these hits read the disk tier.
    fn start(top: &str, tables: &str) -> Node {
        Node::start_with(top, "", tables)
    }

    /// [`Node::start`] with `location` keys (`slice = "1m"`) in its location.
    fn start_with(top: &str, location: &str, tables: &str) -> Node {
        let (o, origin_addr) = origin();
        let dir = tempfile::tempdir().unwrap();
        let base = cached_config(origin_addr, &dir.path().join("cache"), "", location, LOCAL);
        let cfg = format!("{top}\n{base}\n[memory_cache]\nsize = \"off\"\n{tables}\n");
        let (cache, addr, admin) = edgecache(&cfg);
        Node {
            _origin: o,
            origin: origin_addr,
            cache,
            addr,
            admin,
            dir,
            base_config: base,
        }
    }

    /// Reloads the server with the base config and these `tables`.
    fn reload(&self, tables: &str) {
        let cfg = format!(
            "{}\n[memory_cache]\nsize = \"off\"\n{tables}\n",
            self.base_config
        );
        common::reload(&self.cache, self.addr, self.admin, &cfg);
    }

    fn cache_dir(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// The object files the server has mapped now (`/proc/PID/maps`).
    fn mapped(&self) -> Vec<String> {
        let dir = self.cache_dir().to_string_lossy().into_owned();
        std::fs::read_to_string(format!("/proc/{}/maps", self.cache.child.id()))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .filter(|p| p.starts_with(&dir))
            .map(str::to_string)
            .collect()
    }

    /// The worker's file I/O backend, from `/status`.
    fn backend(&self) -> String {
        let v: serde_json::Value = serde_json::from_str(&get_text(self.admin, "/status")).unwrap();
        v["workers"][0]["aio"]["mode"].as_str().unwrap().to_string()
    }

    /// The object file of `path`'s only stored object (the test stores one at a time).
    fn only_file(&self) -> PathBuf {
        let f = object_files(&self.cache_dir());
        assert_eq!(f.len(), 1, "one object stored: {f:?}");
        PathBuf::from(&f[0].0)
    }
}

fn status(r: &Response) -> &str {
    r.header("x-cache-status").unwrap_or("-")
}

/// A multipart/byteranges body's parts: (Content-Range, bytes).
fn parts(r: &Response) -> Vec<(String, Vec<u8>)> {
    let ct = r.header("content-type").unwrap();
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .unwrap_or_else(|| panic!("{ct}"));
    let sep = format!("\r\n--{boundary}");
    let body = &r.body;
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = find(&body[at..], sep.as_bytes()) {
        let start = at + i + sep.len();
        if body[start..].starts_with(b"--") {
            break;
        }
        let head_end = start + find(&body[start..], b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&body[start..head_end]).to_string();
        let range = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: "))
            .unwrap()
            .to_string();
        let (a, b) = range
            .strip_prefix("bytes ")
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .split_once('-')
            .unwrap();
        let len = b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1;
        out.push((range, body[head_end..head_end + len].to_vec()));
        at = head_end + len;
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Whole, ranged, multipart, If-Range and HEAD answers for `path` on one keep-alive
/// connection, each checked against the origin's bytes.
fn check_every_shape(n: &Node, path: &str) {
    let want = get(n.origin, path, &[]).body;
    let len = want.len();
    let mut c = Client::connect(n.addr);
    c.set_read_timeout(Duration::from_secs(20));
    let r = c.get(path, &[]);
    assert_eq!((r.status, status(&r)), (200, "HIT"), "{path}");
    assert!(r.body == want, "{path}: whole body");
    let etag = r.header("etag").unwrap().to_string();
    // Across the first write's 1 MiB and past it (a 3 MiB object), from the middle.
    for (range, a, b) in [
        ("bytes=100-2000000", 100, 2000000usize.min(len - 1)),
        ("bytes=-600000", len - 600000, len - 1),
        ("bytes=500000-", 500000, len - 1),
        ("bytes=0-99", 0, 99),
    ] {
        let r = c.get(path, &[&format!("Range: {range}")]);
        assert_eq!((r.status, status(&r)), (206, "HIT"), "{path} {range}");
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes {a}-{b}/{len}").as_str())
        );
        assert!(r.body == want[a..=b], "{path} {range}: bytes");
    }
    let m = c.get(path, &["Range: bytes=0-499999,600000-1199999,1000-1009"]);
    assert_eq!(m.status, 206, "{path} multipart");
    let got = parts(&m);
    assert_eq!(got.len(), 3, "{path}: three parts");
    let spans = [(0, 499999), (600000, 1199999.min(len - 1)), (1000, 1009)];
    for ((range, bytes), (a, b)) in got.iter().zip(spans) {
        assert_eq!(range, &format!("bytes {a}-{b}/{len}"));
        assert!(bytes[..] == want[a..=b], "{path} part {range}");
    }
    let ir = c.get(
        path,
        &["Range: bytes=0-599999", &format!("If-Range: {etag}")],
    );
    assert_eq!((ir.status, ir.body.len()), (206, 600000));
    assert!(ir.body == want[..600000]);
    let ir = c.get(path, &["Range: bytes=0-599999", "If-Range: \"other\""]);
    assert_eq!(ir.status, 200);
    assert!(
        ir.body == want,
        "{path}: If-Range mismatch sends the whole body"
    );
    let h = c.request("HEAD", path, &[]);
    assert_eq!((h.status, status(&h)), (200, "HIT"));
    assert_eq!(h.header("content-length"), Some(len.to_string().as_str()));
    assert!(h.body.is_empty());
    // The connection is still in step after all that.
    let r = c.get(path, &[]);
    assert!(
        r.status == 200 && r.body == want,
        "{path}: after the others"
    );
}

#[test]
fn large_hits_are_byte_exact_and_mapped_where_they_should_be() {
    let n = Node::start("", "");
    for path in ["/obj/1m/1", "/obj/3m/2"] {
        let r = get(n.addr, path, &[]);
        assert_eq!((r.status, status(&r)), (200, "MISS"), "{path}");
        check_every_shape(&n, path);
    }
    let mapped = n.mapped();
    match n.backend().as_str() {
        // Every send of `threads` runs on its pool: nothing is mapped.
        "threads" => assert!(mapped.is_empty(), "threads mapped {mapped:?}"),
        other => assert_eq!(
            mapped.len(),
            2,
            "{other}: one mapping per large object, kept: {mapped:?}"
        ),
    }
    // A body at or under `sendfile_max` goes by sendfile, unmapped.
    let before = n.mapped().len();
    let r = get(n.addr, "/obj/400k/3", &[]);
    assert_eq!(r.status, 200);
    let r = get(n.addr, "/obj/400k/3", &[]);
    assert_eq!(status(&r), "HIT");
    assert!(r.body == get(n.origin, "/obj/400k/3", &[]).body);
    assert_eq!(n.mapped().len(), before, "a 400 KiB body is not mapped");
}

#[test]
fn a_warm_range_over_two_slices_leaves_from_mappings() {
    // Two parts of 400 KiB, each under `sendfile_max` (448k), of an 800 KiB range: the
    // response is what TCP paces, so both parts leave from mappings of their slices.
    let n = Node::start_with("", "slice = \"1m\"", "");
    let path = "/obj/3m/5";
    let all = get(n.origin, path, &[]).body;
    let r = get(n.addr, path, &[]);
    assert_eq!((r.status, status(&r)), (200, "MISS"));
    assert!(r.body == all, "the whole sliced object");
    let (a, b) = ((1 << 20) - 400 * 1024, (1 << 20) + 400 * 1024 - 1);
    for i in 0..2 {
        let r = get(n.addr, path, &[&format!("Range: bytes={a}-{b}")]);
        assert_eq!((r.status, status(&r)), (206, "HIT"), "#{i}");
        let cr = format!("bytes {a}-{b}/{}", all.len());
        assert_eq!(r.header("content-range"), Some(cr.as_str()), "#{i}");
        assert!(
            r.body == all[a..=b],
            "#{i}: bytes {a}-{b} differ from the origin's"
        );
    }
    let mapped = n.mapped();
    match n.backend().as_str() {
        "threads" => assert!(mapped.is_empty(), "threads mapped {mapped:?}"),
        other => assert_eq!(mapped.len(), 2, "{other}: the two slices: {mapped:?}"),
    }
}

#[test]
fn pieces_of_slices_leave_mapped_whatever_auto_measures() {
    // Under "auto", the pieces of an unaligned range over two slices always leave from
    // mappings and are not the chooser's bytes: seconds of them (over its 16 MiB a
    // window) leave it measuring, with nothing sent by sendfile. Were they counted, it
    // would switch to sendfile after its first counted window.
    let n = Node::start_with("", "slice = \"1m\"", "");
    let path = "/obj/3m/6";
    let all = get(n.origin, path, &[]).body;
    assert_eq!(get(n.addr, path, &[]).status, 200, "the fill");
    let (a, b) = ((1 << 20) - 400 * 1024, (1 << 20) + 400 * 1024 - 1);
    let range = format!("Range: bytes={a}-{b}");
    let large = || -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(&get_text(n.admin, "/status")).unwrap();
        v["workers"][0]["large_hits"].clone()
    };
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed() < Duration::from_secs(4) || sent < 64 << 20 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{sent} bytes in 60 s"
        );
        let mut c = Client::connect(n.addr);
        for _ in 0..32 {
            let r = c.get(path, &[&range]);
            assert_eq!((r.status, status(&r)), (206, "HIT"));
            assert!(
                r.body == all[a..=b],
                "bytes {a}-{b} differ from the origin's"
            );
            sent += r.body.len() as u64;
        }
    }
    let l = large();
    assert_eq!(l["choice"], "measuring", "{l}");
    let metrics = get_text(n.admin, "/metrics");
    let bytes = |method: &str| {
        let series = format!("edgecache_large_hit_bytes_total{{method=\"{method}\"}}");
        common::metric_in(&metrics, &series).unwrap_or(0)
    };
    if n.backend() == "threads" {
        // Its sends all run on the pool, by sendfile: nothing is mapped there.
        assert_eq!(bytes("mapped"), 0, "{metrics}");
    } else {
        assert_eq!(bytes("sendfile"), 0, "{metrics}");
        assert!(bytes("mapped") >= sent, "{sent} sent:\n{metrics}");
    }
}

#[test]
fn sendfile_max_off_sends_every_body_by_sendfile() {
    let n = Node::start("", "[aio]\nsendfile_max = \"off\"\n");
    let r = get(n.addr, "/obj/3m/4", &[]);
    assert_eq!(r.status, 200);
    check_every_shape(&n, "/obj/3m/4");
    assert!(n.mapped().is_empty(), "{:?}", n.mapped());
}

#[test]
fn a_reload_applies_sendfile_max() {
    let n = Node::start("", "[aio]\nsendfile_max = \"off\"\n");
    let path = "/obj/1m/8";
    get(n.addr, path, &[]);
    check_every_shape(&n, path);
    assert!(n.mapped().is_empty());
    n.reload("[aio]\nsendfile = true\n"); // the default sendfile_max
    check_every_shape(&n, path);
    assert_eq!(n.mapped().len(), 1, "mapped after the reload");
}

#[test]
fn mappings_go_with_the_open_file_cache() {
    // Dropped after `inactive` without hits, and never made without the cache.
    let n = Node::start("open_file_cache = { max = 100, inactive = \"1s\" }", "");
    let path = "/obj/1m/5";
    get(n.addr, path, &[]);
    check_every_shape(&n, path);
    if n.backend() != "threads" {
        assert_eq!(n.mapped().len(), 1);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while !n.mapped().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the idle mapping was never dropped"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    check_every_shape(&n, path);

    let off = Node::start("open_file_cache = \"off\"", "");
    get(off.addr, path, &[]);
    check_every_shape(&off, path);
    assert!(off.mapped().is_empty(), "{:?}", off.mapped());
}

#[test]
fn a_cold_large_hit_is_read_off_the_loop_then_written_from_its_mapping() {
    let n = Node::start("", "[aio]\nmode = \"auto\"\n");
    let path = "/obj/3m/6";
    let want = get(n.origin, path, &[]).body;
    assert_eq!(get(n.addr, path, &[]).status, 200); // the fill; nothing mapped yet
    assert!(n.mapped().is_empty());
    if !common::evict(&n.cache_dir()) {
        edge_testkit::fallback(
            "a cold large hit",
            "the cache directory's pages cannot be dropped (tmpfs?)",
        );
        return;
    }
    let handoffs = || {
        common::metric_in(
            &get_text(n.admin, "/metrics"),
            "edgecache_aio_handoffs_total{worker=\"0\",backend=\"auto\"}",
        )
        .unwrap_or(0)
    };
    let before = handoffs();
    let r = get(n.addr, path, &[]);
    assert_eq!((r.status, status(&r)), (200, "HIT"));
    assert!(r.body == want, "the cold hit's bytes");
    assert!(
        handoffs() > before,
        "a cold body goes to the pool, not through a mapping on the loop"
    );
    assert!(n.mapped().is_empty(), "a cold object is not mapped");
    // Now cached (the pool's sendfile read it): the next hits use the mapping.
    check_every_shape(&n, path);
    assert_eq!(n.mapped().len(), 1);
}

fn checksum(body: &[u8]) -> String {
    format!("{:016x}", twox_hash::XxHash3_64::oneshot(body))
}

#[test]
fn a_mapped_body_truncated_under_the_server_is_cut_and_fetched_again() {
    // `off` writes from the mapping without asking the page cache: the copy itself
    // meets the missing pages (EFAULT). `auto` may see them first.
    for mode in ["off", "auto"] {
        let n = Node::start("", &format!("[aio]\nmode = \"{mode}\"\n"));
        let path = "/obj/1m/7";
        assert_eq!(get(n.addr, path, &[]).status, 200);
        let r = get(n.addr, path, &[]);
        assert_eq!(status(&r), "HIT");
        assert_eq!(n.mapped().len(), 1, "{mode}: mapped");
        let file = n.only_file();
        common::truncate_half(&file);
        let (status_code, body, complete, sum) = common::get_closing(n.addr, path);
        assert_eq!(status_code, 200, "{mode}");
        assert!(
            !complete || checksum(&body) == sum.unwrap(),
            "{mode}: a whole body must be the right one"
        );
        assert!(!complete, "{mode}: half the file cannot make a whole body");
        // The object was dropped: fetched again, whole and right.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (s, body, complete, sum) = common::get_closing(n.addr, path);
            if s == 200 && complete {
                assert_eq!(checksum(&body), sum.unwrap(), "{mode}: refetched bytes");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{mode}: never served whole again"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let log = n.cache.stderr();
        assert!(
            log.contains("reading the body"),
            "{mode}: the damaged object is logged:\n{log}"
        );
        if mode == "off" {
            assert!(
                log.contains("os error 14"),
                "off: the copy from the mapping failed with EFAULT:\n{log}"
            );
        }
    }
}

#[test]
fn sendfile_max_auto_measures_both_ways_then_keeps_the_cheaper() {
    // The default, "auto": large hits alternate between mapped writes and sendfile,
    // one counted second each (at least 16 MiB of them), until five of each decide;
    // every body stays byte-exact through the switches.
    let n = Node::start("", "");
    let paths: Vec<String> = (1..=4).map(|i| format!("/obj/1m/{}", 20 + i)).collect();
    let want: Vec<String> = paths
        .iter()
        .map(|p| checksum(&get(n.origin, p, &[]).body))
        .collect();
    for p in &paths {
        assert_eq!(get(n.addr, p, &[]).status, 200, "{p}: the fill");
    }
    let large = || -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(&get_text(n.admin, "/status")).unwrap();
        v["workers"][0]["large_hits"].clone()
    };
    assert_eq!(large()["choice"], "measuring");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut hits = 0u64;
    while large()["choice"] == "measuring" {
        assert!(
            Instant::now() < deadline,
            "no choice after {hits} large hits: {}",
            large()
        );
        // A connection per batch: on a fast machine the measuring outlasts one
        // connection's `keepalive_requests` (1000), whose last response closes it.
        let mut c = Client::connect(n.addr);
        for _ in 0..32 {
            let i = (hits % paths.len() as u64) as usize;
            let r = c.get(&paths[i], &[]);
            assert_eq!((r.status, status(&r)), (200, "HIT"), "{}", paths[i]);
            assert_eq!(checksum(&r.body), want[i], "{} (hit {hits})", paths[i]);
            hits += 1;
        }
    }
    let l = large();
    assert!(
        matches!(l["choice"].as_str(), Some("mapped" | "sendfile")),
        "{l}"
    );
    // `threads` sends every body on its pool by sendfile: nothing leaves mapped there.
    let threads = n.backend() == "threads";
    for k in [
        "mapped_bytes",
        "sendfile_bytes",
        "mapped_ns_per_mib",
        "sendfile_ns_per_mib",
    ] {
        let want_some = !(threads && k == "mapped_bytes");
        assert_eq!(l[k].as_u64().unwrap_or(0) > 0, want_some, "{k}: {l}");
    }
    let metrics = get_text(n.admin, "/metrics");
    let methods: &[&str] = if threads {
        &["sendfile"]
    } else {
        &["mapped", "sendfile"]
    };
    for method in methods {
        let series = format!("edgecache_large_hit_bytes_total{{method=\"{method}\"}}");
        assert!(
            common::metric_in(&metrics, &series).unwrap_or(0) >= 16 << 20,
            "{series} in:\n{metrics}"
        );
    }
}
