//! `slice = "64k"` end to end: real edgecache in front of edgeorigin (or, for an origin
//! that changes its object or ignores `Range`, a tiny origin here), real HTTP, bytes
//! compared with the origin's own.

mod common;

use common::*;
use edge_testkit::{get, Client};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

const K64: u64 = 64 * 1024;
const SLICE: &str = "slice = \"64k\"";

fn status(r: &edge_testkit::Response) -> &str {
    r.header("x-cache-status").unwrap_or("")
}

/// The whole object straight from the origin (no cache in between).
fn whole(origin: SocketAddr, path: &str) -> Vec<u8> {
    let r = get(origin, path, &[]);
    assert_eq!(r.status, 200, "{path} from the origin");
    r.body
}

/// `Range: bytes=a-b` through the cache: status and body.
fn range(s: &Setup, path: &str, spec: &str) -> edge_testkit::Response {
    s.get(path, &[&format!("Range: bytes={spec}")])
}

/// Object files under a cache directory (named by their key hash; the index snapshot
/// and the like aside).
fn objects_in(dir: &std::path::Path) -> Vec<(String, u64)> {
    files(dir)
        .into_iter()
        .filter(|(p, _)| {
            let name = p.rsplit('/').next().unwrap_or("");
            name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit())
        })
        .collect()
}

/// Waits (up to 10 s) until `n` objects are stored under `dir` and in the index (the
/// cache's `entries` in `/status` at `admin`): a fill's commit may come after its
/// client has every byte it asked for.
fn wait_stored(admin: SocketAddr, dir: &std::path::Path, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while objects_in(dir).len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            objects_in(dir)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let every = std::time::Duration::from_millis(20);
    wait_status_at_least(admin, "entries", n as u64, every, "objects indexed");
}

fn objects(s: &Setup) -> Vec<(String, u64)> {
    objects_in(&s.dir.path().join("cache"))
}

#[test]
fn ranges_at_every_slice_boundary() {
    let s = setup("", SLICE);
    // Four slices and a last one of 1 byte.
    let path = "/obj/262145/1";
    let all = whole(s.origin_addr, path);
    assert_eq!(all.len() as u64, 4 * K64 + 1);
    let cases: &[(&str, u16, std::ops::Range<usize>)] = &[
        ("0-0", 206, 0..1),                     // first byte
        ("262144-262144", 206, 262144..262145), // last byte, the 1-byte last slice
        ("65535-131072", 206, 65535..131073),   // across 3 slices
        ("65536-131071", 206, 65536..131072),   // exactly one slice
        ("-1", 206, 262144..262145),            // suffix
        ("-70000", 206, 192145..262145),        // suffix across slices
        ("200000-", 206, 200000..262145),       // open-ended
        ("0-999999999", 206, 0..262145),        // past the end: clipped
    ];
    for (spec, st, want) in cases {
        let r = range(&s, path, spec);
        assert_eq!(r.status, *st, "bytes={spec}");
        assert_eq!(r.body, all[want.clone()], "bytes={spec}");
        let cr = format!("bytes {}-{}/262145", want.start, want.end - 1);
        assert_eq!(r.header("content-range"), Some(cr.as_str()), "bytes={spec}");
    }
    // Past the end: 416 with the complete length.
    let r = range(&s, path, "262145-");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */262145"));
    // A seek past the end of a new object: 416 too (the length comes from slice 0).
    let r = range(&s, "/obj/262145/2", "999999-");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */262145"));
    // Past the end of an object shorter than a slice: slice 0 from its start says so.
    let r = range(&s, "/obj/1000/2", "5000-");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */1000"));
    // The whole object: 200 with its length, a HIT now that every slice is stored.
    let r = s.get(path, &[]);
    assert_eq!((r.status, status(&r)), (200, "HIT"));
    assert_eq!(r.header("content-length"), Some("262145"));
    assert_eq!(r.body, all);
    assert!(r.header("content-range").is_none());
    // Multi-range: every part's bytes.
    let r = range(&s, path, "0-1,65535-65537,262144-");
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap().to_string();
    assert!(ct.starts_with("multipart/byteranges; boundary="), "{ct}");
    let body = String::from_utf8_lossy(&r.body).into_owned();
    for cr in [
        "bytes 0-1/262145",
        "bytes 65535-65537/262145",
        "bytes 262144-262144/262145",
    ] {
        assert!(body.contains(cr), "{cr} in {body:?}");
    }
    let at = r.body.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(&r.body[at..at + 2], &all[0..2]);
}

#[test]
fn head_conditionals_and_if_range_on_a_sliced_object() {
    let s = setup("", SLICE);
    let path = "/obj/300000/3";
    let all = whole(s.origin_addr, path);
    let mut c = Client::connect(s.addr);
    let h = c.request("HEAD", path, &[]);
    assert_eq!((h.status, h.body.len()), (200, 0));
    assert_eq!(h.header("content-length"), Some("300000"));
    let etag = h.header("etag").unwrap().to_string();
    let nm = s.get(path, &[&format!("If-None-Match: {etag}")]);
    assert_eq!((nm.status, nm.body.len()), (304, 0));
    assert_eq!(nm.header("etag"), Some(etag.as_str()));
    let ir = s.get(path, &["Range: bytes=10-19", &format!("If-Range: {etag}")]);
    assert_eq!((ir.status, ir.body.as_slice()), (206, &all[10..20]));
    let ir = s.get(path, &["Range: bytes=10-19", "If-Range: \"other\""]);
    assert_eq!((ir.status, ir.body.len()), (200, 300000));
    assert_eq!(ir.body, all);
}

#[test]
fn random_ranges_match_the_whole_object_byte_for_byte() {
    let s = setup("", SLICE);
    let path = "/obj/1000003/4";
    let all = whole(s.origin_addr, path);
    let n = all.len() as u64;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..40 {
        let a = next() % n;
        let len = 1 + next() % (3 * K64);
        let b = (a + len - 1).min(n - 1);
        let r = range(&s, path, &format!("{a}-{b}"));
        assert_eq!(r.status, 206, "#{i} {a}-{b}");
        assert!(
            r.body == all[a as usize..=b as usize],
            "#{i} bytes {a}-{b} differ from the origin's"
        );
    }
    let r = s.get(path, &[]);
    assert_eq!(r.status, 200);
    assert!(r.body == all, "the whole sliced object");
}

#[test]
fn purge_reaches_every_slice() {
    let s = setup("", SLICE);
    let path = "/obj/300000/5";
    assert_eq!(status(&s.get(path, &[])), "MISS");
    assert_eq!(objects(&s).len(), 5, "300000 bytes: 5 slices");
    assert_eq!(status(&s.get(path, &[])), "HIT");
    let p = Client::connect(s.addr).request("PURGE", path, &[]);
    assert_eq!(p.body, b"{\"purged\": 5}\n");
    let before = s.origin_count();
    assert_eq!(status(&s.get(path, &[])), "MISS");
    assert_eq!(s.origin_count() - before, 5, "every slice fetched again");

    // By URL on the admin listener, by prefix and by tag.
    let r = post_form(s.admin, "/purge", "url=http://test/obj/300000/5");
    assert_eq!(r.body, b"{\"purged\": 5}\n");
    assert_eq!(status(&s.get(path, &[])), "MISS");
    let r = post_form(s.admin, "/purge", "prefix=http://test/obj/300000/");
    assert_eq!(r.body, b"{\"purged\": 5}\n");
    let tagged = "/obj/200000/6?tag=movie";
    assert_eq!(status(&s.get(tagged, &[])), "MISS");
    let r = post_form(s.admin, "/purge", "tag=movie");
    assert_eq!(r.body, b"{\"purged\": 4}\n");
    assert_eq!(status(&s.get(tagged, &[])), "MISS");

    // Soft: every slice is refetched (a stale slice is never served as a hit).
    let url = "url=http%3A%2F%2Ftest%2Fobj%2F200000%2F6%3Ftag%3Dmovie&soft=1";
    let r = post_form(s.admin, "/purge", url);
    assert_eq!(r.status, 200);
    let before = s.origin_count();
    let again = s.get(tagged, &[]);
    assert_eq!((again.status, status(&again)), (200, "MISS"));
    assert_eq!(again.body, whole(s.origin_addr, tagged));
    assert_eq!(
        s.origin_count() - before - 1,
        4,
        "4 slices, beside our own GET"
    );
}

#[test]
fn concurrent_seeks_collapse_per_slice() {
    let s = setup("", SLICE);
    // Slow heads, so every client arrives while the first fetches are in flight.
    let path = "/obj/16m/7?delay_ms=400";
    let all = whole(s.origin_addr, "/obj/16m/7");
    let before = s.origin_count();
    let addr = s.addr;
    let threads: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(move || get(addr, path, &["Range: bytes=1000000-1100000"])))
        .collect();
    for t in threads {
        let r = t.join().unwrap();
        assert_eq!(r.status, 206);
        assert!(r.body == all[1000000..=1100000]);
    }
    // Bytes 1000000..=1100000 lie in slices 15 and 16: two origin requests in all.
    assert_eq!(s.origin_count() - before, 2);
}

#[test]
fn slice_prefetch_fetches_the_next_slices_of_a_sequential_reader() {
    let s = setup("", "slice = \"64k\"\nslice_prefetch = 2");
    let path = "/obj/1m/9";
    let all = whole(s.origin_addr, path);
    let before = s.origin_count();
    // Slice 0 read to its end: slices 1 and 2 are fetched in the background.
    let r = range(&s, path, "0-65535");
    assert_eq!((r.status, r.body.as_slice()), (206, &all[..65536]));
    wait_stored(s.admin, &s.dir.path().join("cache"), 3);
    assert_eq!(s.origin_count() - before, 3);
    // The next read finds slice 1 stored (a HIT), and slice 3 is fetched ahead.
    let r = range(&s, path, "65536-131071");
    assert_eq!((r.status, status(&r)), (206, "HIT"));
    assert!(r.body == all[65536..131072]);
    wait_stored(s.admin, &s.dir.path().join("cache"), 4);
    assert_eq!(s.origin_count() - before, 4);
    // A read that stops inside its slice prefetches nothing.
    let r = range(&s, path, "600000-600009");
    assert_eq!(r.body, all[600000..600010]);
    assert_eq!(s.origin_count() - before, 5);
    assert_eq!(objects(&s).len(), 5);
}

#[test]
fn a_100_gib_object_is_sparse_on_disk() {
    let s = setup("", SLICE);
    let path = "/obj/100g/8";
    let total: u64 = 100 << 30;
    let seeks = [0, 50 << 30, total - 10];
    for a in seeks {
        let spec = format!("{a}-{}", a + 9);
        let r = range(&s, path, &spec);
        assert_eq!(r.status, 206, "{spec}");
        let cr = format!("bytes {a}-{}/{total}", a + 9);
        assert_eq!(r.header("content-range"), Some(cr.as_str()));
        let direct = get(s.origin_addr, path, &[&format!("Range: bytes={spec}")]);
        assert_eq!(r.body, direct.body, "{spec}");
    }
    // Slice 0 (the first seek), the slice at 50 GiB and the last one: nothing else.
    let objs = objects(&s);
    assert_eq!(objs.len(), 3, "{objs:?}");
    let bytes: u64 = objs.iter().map(|(_, n)| n).sum();
    assert!(bytes < 3 * (K64 + 16 * 1024), "{bytes} bytes on disk");
    // The same seeks again: hits.
    let r = range(&s, path, &format!("{}-{}", 50u64 << 30, (50u64 << 30) + 9));
    assert_eq!(status(&r), "HIT");
}

// ---- A tiny origin whose object changes on demand, and that may ignore Range. ----

/// The tiny origin's object of `len` bytes at `version`: every byte depends on both.
fn versioned(len: usize, version: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 * 7 + version * 101 + (i as u64 >> 16)) as u8)
        .collect()
}

struct Tiny {
    addr: SocketAddr,
    version: Arc<AtomicU64>,
    ignore_range: Arc<AtomicBool>,
    /// Answer without a length, ending the body by closing the connection.
    close_delimited: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
}

/// Serves `/t/<len>` (keep-alive, one request at a time per connection) with
/// `ETag: "v<version>"` and single `bytes=a-b` ranges, unless told to ignore them.
fn tiny_origin() -> Tiny {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let t = Tiny {
        addr: l.local_addr().unwrap(),
        version: Arc::new(AtomicU64::new(1)),
        ignore_range: Arc::new(AtomicBool::new(false)),
        close_delimited: Arc::new(AtomicBool::new(false)),
        requests: Arc::new(AtomicU64::new(0)),
    };
    let (v, ig, cd, n) = (
        t.version.clone(),
        t.ignore_range.clone(),
        t.close_delimited.clone(),
        t.requests.clone(),
    );
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let (v, ig, cd, n) = (v.clone(), ig.clone(), cd.clone(), n.clone());
            std::thread::spawn(move || serve_tiny(conn, &v, &ig, &cd, &n));
        }
    });
    t
}

fn serve_tiny(conn: TcpStream, v: &AtomicU64, ig: &AtomicBool, cd: &AtomicBool, n: &AtomicU64) {
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or("/").to_string();
        let mut spec = None;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
            if let Some((k, val)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("range") {
                    spec = val.trim().strip_prefix("bytes=").map(str::to_string);
                }
            }
        }
        n.fetch_add(1, SeqCst);
        let name = path.split('?').next().unwrap().rsplit('/').next().unwrap();
        let len: usize = name.parse().unwrap();
        let version = v.load(SeqCst);
        let body = versioned(len, version);
        let mut head = format!(
            "ETag: \"v{version}\"\r\nCache-Control: max-age=3600\r\nContent-Type: video/mp4\r\n"
        );
        let part = match spec.filter(|_| !ig.load(SeqCst)) {
            Some(s) => {
                let (a, b) = s.split_once('-').unwrap();
                let a: usize = a.parse().unwrap();
                let b: usize = b.parse::<usize>().unwrap().min(len - 1);
                head.push_str(&format!("Content-Range: bytes {a}-{b}/{len}\r\n"));
                Some(a..b + 1)
            }
            None => None,
        };
        let (st, bytes) = match part {
            Some(p) => ("206 Partial Content", &body[p]),
            None => ("200 OK", &body[..]),
        };
        if cd.load(SeqCst) {
            let out = format!("HTTP/1.1 {st}\r\n{head}Connection: close\r\n\r\n");
            let _ = w
                .write_all(out.as_bytes())
                .and_then(|()| w.write_all(bytes));
            return; // the close ends the body
        }
        let out = format!(
            "HTTP/1.1 {st}\r\n{head}Content-Length: {}\r\n\r\n",
            bytes.len()
        );
        if w.write_all(out.as_bytes()).is_err() || w.write_all(bytes).is_err() {
            return;
        }
    }
}

fn tiny_setup(
    t: &Tiny,
) -> (
    edge_testkit::Proc,
    SocketAddr,
    SocketAddr,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = cached_config(t.addr, &dir.path().join("cache"), "", SLICE, LOCAL);
    let (p, addr, admin) = edgecache(&cfg);
    (p, addr, admin, dir)
}

fn mismatches(admin: SocketAddr) -> u64 {
    metric_in(
        &get_text(admin, "/metrics"),
        "edgecache_slice_mismatches_total",
    )
    .unwrap()
}

#[test]
fn an_object_changed_between_slices_is_never_served_mixed() {
    let t = tiny_origin();
    let (_p, addr, admin, dir) = tiny_setup(&t);
    let cache = dir.path().join("cache");
    let len = 3 * K64 as usize + 100;
    let path = format!("/t/{len}");
    let (v1, v2, v3) = (versioned(len, 1), versioned(len, 2), versioned(len, 3));
    // Slice 0 stored at version 1; then the object changes at the origin.
    let r = get(addr, &path, &["Range: bytes=0-9"]);
    assert_eq!((r.status, r.body.as_slice()), (206, &v1[..10]));
    wait_stored(admin, &cache, 1);
    t.version.store(2, SeqCst);
    // The stored slice 0 disagrees with the slice 1 the origin now sends: found before
    // the head, every slice is purged and the request starts again.
    let r = get(addr, &path, &[]);
    assert_eq!(r.status, 200);
    assert!(
        r.body == v2,
        "the whole new version, nothing of the old one"
    );
    assert_eq!(mismatches(admin), 1);
    assert_eq!(r.header("etag"), Some("\"v2\""));

    // Another URL: slices 0 and 1 stored at version 2; the change shows at slice 2,
    // after the head: the connection is cut, and what arrived is only version 2's.
    let path = format!("/t/{len}?second");
    let _ = get(addr, &path, &["Range: bytes=0-131071"]);
    wait_stored(admin, &cache, 6); // 4 slices of the first URL, 2 of this one
    t.version.store(3, SeqCst);
    let (st, body, complete, _) = get_closing(addr, &path);
    assert_eq!(st, 200);
    assert!(!complete, "cut, not completed with another version");
    assert!(body.len() <= 2 * K64 as usize, "{} bytes", body.len());
    assert!(body == v2[..body.len()], "only version 2's bytes");
    assert_eq!(mismatches(admin), 2);
    // Every slice was purged: the next request gets version 3 whole.
    let r = get(addr, &path, &[]);
    assert_eq!(r.status, 200);
    assert!(r.body == v3);
    let status_json = get_text(admin, "/status");
    assert_eq!(json_number(&status_json, "slice_mismatches"), Some(2));
}

/// Bodies that end with the origin's close (no Content-Length) are as complete as any:
/// a slice's 206 is stored and served like one with a length.
#[test]
fn close_delimited_origin_responses_are_whole_slices() {
    let t = tiny_origin();
    t.close_delimited.store(true, SeqCst);
    let (_p, addr, admin, dir) = tiny_setup(&t);
    let cache = dir.path().join("cache");
    let len = 3 * K64 as usize + 100;
    let path = format!("/t/{len}");
    let all = versioned(len, 1);
    // A range across slices 0 and 1: each fetched with its own Range request.
    let r = get(addr, &path, &["Range: bytes=65000-66000"]);
    assert!((r.status, r.body.len()) == (206, 1001) && r.body == all[65000..66001]);
    wait_stored(admin, &cache, 2);
    // The whole object: slices 2 and 3 from the origin, the rest stored.
    let r = get(addr, &path, &[]);
    assert_eq!(r.status, 200);
    assert!(r.body == all, "every byte");
    wait_stored(admin, &cache, 4);
    let before = t.requests.load(SeqCst);
    let r = get(addr, &path, &[]);
    assert!((r.status, r.header("x-cache-status")) == (200, Some("HIT")) && r.body == all);
    assert_eq!(t.requests.load(SeqCst), before, "all four slices stored");
    t.ignore_range.store(true, SeqCst);
    let path = format!("/t/{len}?whole");
    // A 200 of unknown length ignoring Range cannot be cut (every slice carries the
    // object's total length): it is relayed whole, as the origin sent it, and not stored.
    for range in [&["Range: bytes=200000-200099"][..], &[]] {
        let before = t.requests.load(SeqCst);
        let r = get(addr, &path, range);
        assert_eq!((r.status, r.header("x-cache-status")), (200, Some("MISS")));
        assert!(r.body == all, "{} bytes", r.body.len());
        assert_eq!(t.requests.load(SeqCst), before + 1);
    }
    assert_eq!(objects_in(&cache).len(), 4, "only the first URL's slices");
}

#[test]
fn an_origin_that_ignores_range_is_cut_into_slices() {
    let t = tiny_origin();
    t.ignore_range.store(true, SeqCst);
    let (_p, addr, admin, dir) = tiny_setup(&t);
    let len = 5 * K64 as usize;
    let path = format!("/t/{len}");
    let all = versioned(len, 1);
    let r = get(addr, &path, &["Range: bytes=70000-70099"]);
    assert_eq!((r.status, r.body.as_slice()), (206, &all[70000..70100]));
    assert_eq!(t.requests.load(SeqCst), 1);
    wait_stored(admin, &dir.path().join("cache"), 2);
    // The 200 was read up to the end of the slice holding the last byte wanted, and
    // slices 0 and 1 were stored as it passed: no other request for them.
    let r = get(addr, &path, &["Range: bytes=0-131071"]);
    assert_eq!((r.status, r.body.as_slice()), (206, &all[..131072]));
    assert_eq!(r.header("x-cache-status"), Some("HIT"));
    assert_eq!(t.requests.load(SeqCst), 1);
    assert_eq!(objects_in(&dir.path().join("cache")).len(), 2);
    // The rest of the object.
    let r = get(addr, &path, &[]);
    assert_eq!(r.status, 200);
    assert!(r.body == all);
}

#[test]
fn config_test_rejects_bad_slice_keys() {
    let base = |extra: &str| {
        format!(
            "[[listen]]\naddr = \"127.0.0.1:1\"\n[[cache]]\nname = \"c\"\npath = \"/tmp/edgecache-slice-t\"\n[[upstream]]\nname = \"o\"\nservers = [\"127.0.0.1:1\"]\n[[location]]\nprefix = \"/\"\nproxy = \"o\"\n{extra}\n"
        )
    };
    for (extra, says) in [
        (
            "cache = [\"c\"]\nslice = \"65535\"",
            "multiple of 4k from 64k",
        ),
        (
            "cache = [\"c\"]\nslice = \"32k\"",
            "multiple of 4k from 64k",
        ),
        ("cache = [\"c\"]\nslice = \"2g\"", "multiple of 4k from 64k"),
        ("slice = \"1m\"", "cached proxied locations"),
        (
            "cache = [\"c\"]\nslice = \"1m\"\ncompress = [\"gzip\"]",
            "serves identity",
        ),
        (
            "cache = [\"c\"]\nslice = \"1m\"\nslice_prefetch = 17",
            "at most 16",
        ),
        (
            "cache = [\"c\"]\nslice_prefetch = 2",
            "no effect without slice",
        ),
        (
            "cache = [\"c\"]\nslice = \"1m\"\ncache_lock = false",
            "location.cache_lock: does not apply to a sliced location",
        ),
        (
            "cache = [\"c\"]\nslice = \"1m\"\nuse_stale = [\"error\"]",
            "location.use_stale: does not apply",
        ),
        (
            "cache = [\"c\"]\nslice = \"1m\"\nrange_fetch = \"forward\"",
            "location.range_fetch: does not apply",
        ),
    ] {
        let (code, stderr, path) = check_config(&base(extra));
        assert_eq!(code, Some(2), "{extra}: {stderr}");
        assert!(
            stderr.contains(&path) && stderr.contains(says),
            "{extra}: {stderr}"
        );
    }
    let (code, stderr, _) = check_config(&base("cache = [\"c\"]\nslice = \"1m\""));
    assert_eq!(code, Some(0), "{stderr}");
}

/// Body bytes edgeorigin has sent so far (its `/stats`), read until two reads 50 ms
/// apart agree.
fn origin_bytes(origin: SocketAddr) -> u64 {
    let read = || json_number(&get_text(origin, "/stats"), "bytes").expect("origin /stats");
    let mut last = read();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let now = read();
        if now == last {
            return now;
        }
        last = now;
    }
}

#[test]
fn a_seek_fetches_only_the_bytes_it_reads() {
    let s = setup("", SLICE);
    let path = "/obj/1m/11";
    let all = whole(s.origin_addr, path);
    // A player seeks to an unaligned offset and reads 4 slices' worth in slice-sized
    // ranges: each range ends inside a slice and the next starts there.
    let seek = 100_000u64;
    let before = origin_bytes(s.origin_addr);
    for i in 0..4 {
        let a = seek + i * K64;
        let r = range(&s, path, &format!("{a}-{}", a + K64 - 1));
        assert_eq!(r.status, 206, "read {i}");
        assert!(r.body == all[a as usize..(a + K64) as usize], "read {i}");
    }
    // Whole-slice fetches would have cost 5 slices (the first and the last touched in
    // part); only the bytes read came from the origin, each once.
    assert_eq!(origin_bytes(s.origin_addr) - before, 4 * K64);
    // Read again: every byte is stored, so nothing more is fetched.
    for i in 0..4 {
        let a = seek + i * K64;
        let r = range(&s, path, &format!("{a}-{}", a + K64 - 1));
        assert_eq!((r.status, status(&r)), (206, "HIT"), "read {i} again");
        assert!(
            r.body == all[a as usize..(a + K64) as usize],
            "read {i} again"
        );
    }
    assert_eq!(origin_bytes(s.origin_addr) - before, 4 * K64);
}

#[test]
fn a_partial_slice_is_completed_by_a_request_for_its_earlier_bytes() {
    let s = setup("", SLICE);
    let path = "/obj/1m/12";
    let all = whole(s.origin_addr, path);
    let bytes0 = origin_bytes(s.origin_addr);
    // Slice 1 holds 65536..131072; a request for 100 bytes inside it stores only those.
    let r = range(&s, path, "100000-100099");
    assert_eq!((r.status, r.body.as_slice()), (206, &all[100000..100100]));
    assert_eq!(origin_bytes(s.origin_addr) - bytes0, 100);
    wait_stored(s.admin, &s.dir.path().join("cache"), 1);
    // Inside the part: a HIT, nothing fetched.
    let r = range(&s, path, "100010-100019");
    assert_eq!((r.status, status(&r)), (206, "HIT"));
    assert_eq!(r.body, all[100010..100020]);
    assert_eq!(origin_bytes(s.origin_addr) - bytes0, 100);
    // Earlier bytes up into the part: only the missing ones are fetched, and the part
    // and them are stored as one.
    let r = range(&s, path, "70000-100049");
    assert_eq!(r.status, 206);
    assert!(r.body == all[70000..100050]);
    assert_eq!(origin_bytes(s.origin_addr) - bytes0, 100 + 30000);
    let r = range(&s, path, "70000-100099");
    assert_eq!((r.status, status(&r)), (206, "HIT"));
    assert!(r.body == all[70000..100100]);
    assert_eq!(origin_bytes(s.origin_addr) - bytes0, 100 + 30000);
    // The rest of the slice, after it: the slice is now whole.
    let r = range(&s, path, "90000-131071");
    assert!(r.body == all[90000..131072]);
    assert_eq!(origin_bytes(s.origin_addr) - bytes0, 100 + 30000 + 30972);
    // Its first bytes, before it: the slice is whole.
    let r = range(&s, path, "65536-131071");
    assert!(r.body == all[65536..131072]);
    assert_eq!(origin_bytes(s.origin_addr) - bytes0, 65536);
    let r = range(&s, path, "65536-131071");
    assert_eq!((r.status, status(&r)), (206, "HIT"));
    assert!(r.body == all[65536..131072]);
    assert_eq!(
        objects(&s).len(),
        1,
        "one object for the slice: {:?}",
        objects(&s)
    );
}

#[test]
fn concurrent_requests_for_different_parts_of_one_slice() {
    let s = setup("", SLICE);
    // Slow heads, so every client arrives while the first fetch is in flight.
    let path = "/obj/1m/13?delay_ms=300";
    let all = Arc::new(whole(s.origin_addr, "/obj/1m/13"));
    let addr = s.addr;
    // Slice 3 holds 196608..262144: eight clients, each wanting other bytes of it.
    let threads: Vec<_> = (0..8u64)
        .map(|i| {
            let a = 196_608 + 1000 + i * 7000;
            let b = a + 999 + (i % 3) * 20_000;
            std::thread::spawn(move || {
                let r = get(addr, path, &[&format!("Range: bytes={a}-{b}")]);
                (a as usize, b as usize, r)
            })
        })
        .collect();
    for t in threads {
        let (a, b, r) = t.join().unwrap();
        assert_eq!(r.status, 206, "{a}-{b}");
        assert!(r.body == all[a..=b], "{a}-{b}: the origin's bytes");
    }
    // Every byte of the slice, then, is the origin's.
    let r = range(&s, path, "196608-262143");
    assert_eq!(r.status, 206);
    assert!(r.body == all[196608..262144]);
}

#[test]
fn a_partial_slice_of_a_changed_object_is_never_completed_with_new_bytes() {
    let t = tiny_origin();
    let (_p, addr, admin, dir) = tiny_setup(&t);
    let len = 2 * K64 as usize;
    let path = format!("/t/{len}");
    let (v1, v2) = (versioned(len, 1), versioned(len, 2));
    // Slice 0 stored partially (bytes 100..200) at version 1; then the object changes.
    let r = get(addr, &path, &["Range: bytes=100-199"]);
    assert_eq!((r.status, r.body.as_slice()), (206, &v1[100..200]));
    wait_stored(admin, &dir.path().join("cache"), 1);
    t.version.store(2, SeqCst);
    // Bytes 50..150 need the part completed: the origin's bytes 50..100 are version
    // 2's, so nothing is combined; every slice is purged and the request starts again.
    let r = get(addr, &path, &["Range: bytes=50-149"]);
    assert_eq!(r.status, 206);
    assert!(r.body == v2[50..150], "version 2's bytes only");
    assert_eq!(r.header("etag"), Some("\"v2\""));
    assert_eq!(mismatches(admin), 1);
    // What is stored now is version 2's.
    let r = get(addr, &path, &["Range: bytes=120-139"]);
    assert_eq!((r.status, r.body.as_slice()), (206, &v2[120..140]));
}
