//! Partial content without `slice` (issue 28.2): with `range_fetch = "forward"` a
//! Range miss stores the origin's 206 as a partial object, later ranges inside it are
//! served from it, and a request needing other bytes fetches only those and completes
//! the object. Real edgecache, real origins on 127.0.0.1: edgeorigin (deterministic
//! bytes, `/stats` counts requests and body bytes) and, where the test must see the
//! exact `Range`/`If-Range` that reached the origin or change the object under the
//! cache, a small scripted range origin below.

mod common;

use common::{edgecache, get_text, json_number, metric_in, origin_requests, setup, Setup};
use edge_testkit::{get, Client, Response};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const FORWARD: &str = "range_fetch = \"forward\"";

/// Body bytes edgeorigin has sent so far.
fn origin_bytes(s: &Setup) -> u64 {
    origin_requests(s.origin_addr); // settles the counters
    json_number(&get_text(s.origin_addr, "/stats"), "bytes").unwrap()
}

/// The object straight from edgeorigin: the reference bytes.
fn reference(s: &Setup, path: &str) -> Vec<u8> {
    let r = get(s.origin_addr, path, &[]);
    assert_eq!(r.status, 200);
    r.body
}

fn range(s: &Setup, path: &str, spec: &str) -> Response {
    s.get(path, &[&format!("Range: bytes={spec}")])
}

fn cache_status(r: &Response) -> &str {
    r.header("x-cache-status").unwrap_or("")
}

#[test]
fn a_stored_part_is_reused_for_ranges_inside_it() {
    let s = setup("", FORWARD);
    let path = "/obj/100k/1";
    let all = reference(&s, path);
    let (n0, b0) = (s.origin_count(), origin_bytes(&s));
    let r = range(&s, path, "1000-59999");
    assert_eq!(r.status, 206);
    assert_eq!(cache_status(&r), "MISS");
    assert_eq!(r.header("content-range"), Some("bytes 1000-59999/102400"));
    assert_eq!(r.body, &all[1000..60000]);
    // Only the range came from the origin.
    assert_eq!(s.origin_count(), n0 + 1);
    assert_eq!(origin_bytes(&s), b0 + 59000);
    for (spec, want, cr) in [
        ("1000-59999", 1000..60000, "bytes 1000-59999/102400"),
        ("2000-2999", 2000..3000, "bytes 2000-2999/102400"),
        ("59999-59999", 59999..60000, "bytes 59999-59999/102400"),
    ] {
        let r = range(&s, path, spec);
        assert_eq!(r.status, 206, "{spec}");
        assert_eq!(cache_status(&r), "HIT", "{spec}");
        assert_eq!(r.header("content-range"), Some(cr), "{spec}");
        assert_eq!(r.header("content-length"), Some(&*want.len().to_string()));
        assert_eq!(r.body, &all[want], "{spec}");
    }
    assert_eq!(
        s.origin_count(),
        n0 + 1,
        "every range inside came from the cache"
    );
    // If-Range with the stored ETag: still the part; with another: the whole object.
    let etag = r.header("etag").unwrap().to_string();
    let r = s.get(
        path,
        &["Range: bytes=5000-5009", &format!("If-Range: {etag}")],
    );
    assert_eq!((r.status, cache_status(&r)), (206, "HIT"));
    assert_eq!(r.body, &all[5000..5010]);
    // 304 for its own validator, without the part's Content-Range.
    let r = s.get(path, &[&format!("If-None-Match: {etag}")]);
    assert_eq!((r.status, cache_status(&r)), (304, "HIT"));
    assert_eq!(r.header("content-range"), None);
    assert_eq!(s.origin_count(), n0 + 1);
}

#[test]
fn a_part_is_completed_with_exactly_the_missing_bytes() {
    let s = setup("", FORWARD);
    let path = "/obj/100k/2";
    let all = reference(&s, path);
    let (n0, b0) = (s.origin_count(), origin_bytes(&s));
    assert_eq!(range(&s, path, "0-39999").status, 206);
    // The whole object: only bytes 40000.. are fetched, and the stored object becomes
    // the whole one, byte-exact.
    let r = s.get(path, &[]);
    assert_eq!((r.status, cache_status(&r)), (200, "MISS"));
    assert_eq!(r.header("content-range"), None);
    assert_eq!(r.body, all);
    assert_eq!(s.origin_count(), n0 + 2);
    assert_eq!(origin_bytes(&s), b0 + 102400, "each byte fetched once");
    let r = s.get(path, &[]);
    assert_eq!((r.status, cache_status(&r)), (200, "HIT"));
    assert_eq!(r.body, all);
    assert_eq!(
        r.header("x-checksum"),
        get(s.origin_addr, path, &[]).header("x-checksum")
    );
    let r = range(&s, path, "-10");
    assert_eq!((r.status, cache_status(&r)), (206, "HIT"));
    assert_eq!(r.body, &all[102390..]);
    assert_eq!(s.origin_count(), n0 + 3, "the reference GET only");
    let m = get_text(s.admin, "/metrics");
    assert_eq!(
        metric_in(&m, "edgecache_cache_partial_total{result=\"combined\"}"),
        Some(1)
    );
}

#[test]
fn a_range_next_to_the_part_extends_it_on_either_side() {
    let s = setup("", FORWARD);
    let path = "/obj/100k/3";
    let all = reference(&s, path);
    let b0 = origin_bytes(&s);
    assert_eq!(range(&s, path, "40000-49999").status, 206);
    // After the part (open-ended), then before it (overlapping): each fetch is only
    // the bytes the cache lacks.
    let r = range(&s, path, "45000-");
    assert_eq!((r.status, cache_status(&r)), (206, "MISS"));
    assert_eq!(r.header("content-range"), Some("bytes 45000-102399/102400"));
    assert_eq!(r.body, &all[45000..]);
    assert_eq!(origin_bytes(&s), b0 + 10000 + 52400);
    let r = range(&s, path, "30000-40999");
    assert_eq!((r.status, cache_status(&r)), (206, "MISS"));
    assert_eq!(r.body, &all[30000..41000]);
    assert_eq!(origin_bytes(&s), b0 + 72400);
    // Suffix and open-ended ranges inside the union: hits.
    let r = range(&s, path, "-100");
    assert_eq!((r.status, cache_status(&r)), (206, "HIT"));
    assert_eq!(r.body, &all[102300..]);
    let r = range(&s, path, "30000-");
    assert_eq!((r.status, cache_status(&r)), (206, "HIT"));
    assert_eq!(r.body, &all[30000..]);
    // The first 30000 bytes complete it: a whole 200 object from then on.
    let r = s.get(path, &[]);
    assert_eq!((r.status, cache_status(&r)), (200, "MISS"));
    assert_eq!(r.body, all);
    assert_eq!(origin_bytes(&s), b0 + 102400);
    let r = s.get(path, &[]);
    assert_eq!((r.status, cache_status(&r)), (200, "HIT"));
    assert_eq!(r.body, all);
}

#[test]
fn head_and_416_are_answered_from_a_part() {
    let s = setup("", FORWARD);
    let path = "/obj/10k/4";
    assert_eq!(range(&s, path, "-100").status, 206);
    let n0 = s.origin_count();
    let mut c = Client::connect(s.addr);
    let r = c.request("HEAD", path, &[]);
    assert_eq!((r.status, cache_status(&r)), (200, "HIT"));
    assert_eq!(r.header("content-length"), Some("10240"));
    assert_eq!(r.header("content-range"), None);
    assert!(r.body.is_empty());
    let r = c.request("HEAD", path, &["Range: bytes=10200-10209"]);
    assert_eq!(r.status, 200, "HEAD ignores Range (RFC 9110 14.2)");
    let r = range(&s, path, "20000-");
    assert_eq!((r.status, cache_status(&r)), (416, "HIT"));
    assert_eq!(r.header("content-range"), Some("bytes */10240"));
    assert_eq!(s.origin_count(), n0);
}

#[test]
fn whole_is_the_default_and_fetches_the_object() {
    let s = setup("", "");
    let path = "/obj/100k/5";
    let all = reference(&s, path);
    let b0 = origin_bytes(&s);
    let r = range(&s, path, "0-99");
    assert_eq!((r.status, cache_status(&r)), (206, "MISS"));
    assert_eq!(r.body, &all[..100]);
    assert_eq!(origin_bytes(&s), b0 + 102400);
    let r = s.get(path, &[]);
    assert_eq!((r.status, cache_status(&r)), (200, "HIT"));
}

#[test]
fn range_fetch_is_checked_by_t() {
    let (code, stderr, file) = common::check_config(
        "[[listen]]\naddr = \"127.0.0.1:1\"\n[[upstream]]\nname = \"o\"\nservers = [\"127.0.0.1:2\"]\n[[location]]\nprefix = \"/\"\nproxy = \"o\"\nrange_fetch = \"some\"\n",
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("{file}:")), "{stderr}");
    assert!(stderr.contains("range_fetch"), "{stderr}");
}

// ---- A scripted origin: one object whose version the test changes. ----

/// What the scripted origin saw and serves.
struct Scripted {
    version: AtomicU32,
    /// Answer ranges whatever `If-Range` says (a broken origin).
    ignore_if_range: AtomicBool,
    heads: Mutex<Vec<String>>,
}

const LEN: u64 = 1000;

fn scripted_byte(version: u32, i: u64) -> u8 {
    (i.wrapping_mul(7).wrapping_add(version as u64 * 101) % 251) as u8
}

fn scripted_origin() -> (SocketAddr, Arc<Scripted>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let st = Arc::new(Scripted {
        version: AtomicU32::new(1),
        ignore_if_range: AtomicBool::new(false),
        heads: Mutex::new(Vec::new()),
    });
    let st2 = st.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let st = st2.clone();
            std::thread::spawn(move || serve_scripted(c, &st));
        }
    });
    (addr, st)
}

/// `bytes=a-b`, `bytes=a-` or `bytes=-n` of a LEN-byte object (what the tests send).
fn parse_spec(v: &str) -> (u64, u64) {
    let spec = v.trim().strip_prefix("bytes=").unwrap();
    let (a, b) = spec.split_once('-').unwrap();
    match (a, b) {
        ("", n) => (LEN - n.parse::<u64>().unwrap(), LEN),
        (a, "") => (a.parse().unwrap(), LEN),
        (a, b) => (a.parse().unwrap(), b.parse::<u64>().unwrap() + 1),
    }
}

fn serve_scripted(mut c: TcpStream, st: &Scripted) {
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
        st.heads.lock().unwrap().push(head.clone());
        let v = st.version.load(Ordering::SeqCst);
        let etag = format!("\"v{v}\"");
        let range = common::head_field(&head, "range");
        let if_range = common::head_field(&head, "if-range");
        let blind = st.ignore_if_range.load(Ordering::SeqCst);
        let partial = range.filter(|_| blind || if_range.as_ref().is_none_or(|t| *t == etag));
        let (status, lo, hi) = match partial {
            Some(r) => {
                let (lo, hi) = parse_spec(&r);
                (206, lo, hi)
            }
            None => (200, 0, LEN),
        };
        let body: Vec<u8> = (lo..hi).map(|i| scripted_byte(v, i)).collect();
        let mut resp = format!(
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nETag: {etag}\r\nCache-Control: max-age=600\r\n",
            body.len()
        );
        if status == 206 {
            resp.push_str(&format!("Content-Range: bytes {lo}-{}/{LEN}\r\n", hi - 1));
        }
        resp.push_str("\r\n");
        let mut out = resp.into_bytes();
        out.extend_from_slice(&body);
        if c.write_all(&out).is_err() {
            return;
        }
    }
}

fn scripted_setup() -> (
    edge_testkit::Proc,
    SocketAddr,
    SocketAddr,
    Arc<Scripted>,
    tempfile::TempDir,
) {
    let (up, st) = scripted_origin();
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::cached_config(up, &dir.path().join("c"), "", FORWARD, common::LOCAL);
    let (p, addr, admin) = edgecache(&cfg);
    (p, addr, admin, st, dir)
}

fn sent_ranges(st: &Scripted) -> Vec<(Option<String>, Option<String>)> {
    let heads = st.heads.lock().unwrap();
    heads
        .iter()
        .map(|h| {
            (
                common::head_field(h, "range"),
                common::head_field(h, "if-range"),
            )
        })
        .collect()
}

#[test]
fn the_origin_sees_the_client_range_then_the_missing_bytes_with_if_range() {
    let (_p, addr, _admin, st, _dir) = scripted_setup();
    let r = get(addr, "/o", &["Range: bytes=-300"]);
    assert_eq!(r.status, 206);
    let r = get(addr, "/o", &[]);
    assert_eq!((r.status, cache_status(&r)), (200, "MISS"));
    let want: Vec<u8> = (0..LEN).map(|i| scripted_byte(1, i)).collect();
    assert_eq!(r.body, want);
    assert_eq!(
        sent_ranges(&st),
        vec![
            (Some("bytes=-300".into()), None),
            (Some("bytes=0-699".into()), Some("\"v1\"".into())),
        ]
    );
    let r = get(addr, "/o", &[]);
    assert_eq!((r.status, cache_status(&r)), (200, "HIT"));
    assert_eq!(r.body, want);
}

#[test]
fn a_changed_object_is_not_combined() {
    let (_p, addr, admin, st, _dir) = scripted_setup();
    assert_eq!(get(addr, "/o", &["Range: bytes=0-499"]).status, 206);
    st.version.store(2, Ordering::SeqCst);
    // The If-Range fails at the origin: its whole new object replaces the part; no
    // byte of version 1 is served with version 2's.
    let r = get(addr, "/o", &[]);
    let v2: Vec<u8> = (0..LEN).map(|i| scripted_byte(2, i)).collect();
    assert_eq!((r.status, r.header("etag")), (200, Some("\"v2\"")));
    assert_eq!(r.body, v2);
    let r = get(addr, "/o", &["Range: bytes=0-9"]);
    assert_eq!((r.status, cache_status(&r)), (206, "HIT"));
    assert_eq!(r.body, &v2[..10]);
    let m = get_text(admin, "/metrics");
    assert_eq!(
        metric_in(&m, "edgecache_cache_partial_total{result=\"combined\"}"),
        Some(0)
    );
}

#[test]
fn a_206_of_another_version_is_dropped_and_the_request_refetched() {
    let (_p, addr, admin, st, _dir) = scripted_setup();
    assert_eq!(get(addr, "/o", &["Range: bytes=0-499"]).status, 206);
    // An origin that ignores If-Range answers the missing bytes 500-599 of version 3:
    // not combined with version 1's; the client's own range is fetched instead.
    st.version.store(3, Ordering::SeqCst);
    st.ignore_if_range.store(true, Ordering::SeqCst);
    st.heads.lock().unwrap().clear();
    let r = get(addr, "/o", &["Range: bytes=400-599"]);
    let v3: Vec<u8> = (0..LEN).map(|i| scripted_byte(3, i)).collect();
    assert_eq!(r.status, 206);
    assert_eq!(r.header("etag"), Some("\"v3\""));
    assert_eq!(r.body, &v3[400..600], "never v1's bytes 400-499 with v3's");
    assert_eq!(
        sent_ranges(&st),
        vec![
            (Some("bytes=500-599".into()), Some("\"v1\"".into())),
            (Some("bytes=400-599".into()), None),
        ]
    );
    let m = get_text(admin, "/metrics");
    assert_eq!(
        metric_in(&m, "edgecache_cache_partial_total{result=\"not_combined\"}"),
        Some(1)
    );
    assert_eq!(
        metric_in(&m, "edgecache_cache_partial_total{result=\"combined\"}"),
        Some(0)
    );
    // The new part replaced the old: a range of it is a hit of version 3.
    let r = get(addr, "/o", &["Range: bytes=450-459"]);
    assert_eq!((r.status, cache_status(&r)), (206, "HIT"));
    assert_eq!(r.body, &v3[450..460]);
}

#[test]
fn a_stale_part_is_fetched_again_not_revalidated() {
    let s = setup("", FORWARD);
    let path = "/obj/10k/6?max_age=1";
    let all = reference(&s, path);
    assert_eq!(range(&s, path, "0-99").status, 206);
    let n0 = s.origin_count();
    std::thread::sleep(Duration::from_millis(2100)); // past max-age=1
    let r = range(&s, path, "0-99");
    assert_eq!((r.status, cache_status(&r)), (206, "MISS"));
    assert_eq!(r.body, &all[..100]);
    assert_eq!(s.origin_count(), n0 + 1);
}

#[test]
fn concurrent_misses_of_other_ranges_each_get_their_bytes() {
    let s = setup("", FORWARD);
    let path = "/obj/100k/7?delay_ms=300";
    let all = reference(&s, path);
    let addr = s.addr;
    // Slow origin: these all miss at once. None may wait on another's range or get
    // its bytes; the whole GET among them gets the whole object.
    let specs = ["0-999", "50000-50999", "-10", "0-999", ""];
    let threads: Vec<_> = specs
        .iter()
        .map(|spec| {
            let spec = spec.to_string();
            std::thread::spawn(move || {
                let h = format!("Range: bytes={spec}");
                let headers: Vec<&str> = if spec.is_empty() { vec![] } else { vec![&h] };
                (spec.clone(), get(addr, path, &headers))
            })
        })
        .collect();
    for t in threads {
        let (spec, r) = t.join().unwrap();
        let want = match spec.as_str() {
            "" => 0..102400,
            "-10" => 102390..102400,
            s => {
                let (a, b) = s.split_once('-').unwrap();
                a.parse().unwrap()..b.parse::<usize>().unwrap() + 1
            }
        };
        let status = if spec.is_empty() { 200 } else { 206 };
        assert_eq!(r.status, status, "{spec}");
        assert_eq!(r.body, &all[want], "{spec}");
    }
}

#[test]
fn a_completed_object_is_compressed_like_one_fetched_whole() {
    let s = setup("", "range_fetch = \"forward\"\ncompress = [\"gzip\"]");
    let path = "/txt/100k/8";
    let all = reference(&s, path);
    let r = range(&s, path, "0-999");
    assert_eq!(r.status, 206);
    assert_eq!(
        r.header("content-encoding"),
        None,
        "a part is never compressed"
    );
    let r = s.get(path, &[]);
    assert_eq!((r.status, cache_status(&r)), (200, "MISS"));
    assert_eq!(r.body, all);
    let r = s.get(path, &[]);
    assert_eq!((r.status, cache_status(&r)), (200, "HIT"));
    let vary = r.headers_all("vary").join(",").to_ascii_lowercase();
    assert!(vary.contains("accept-encoding"), "{vary:?}");
    let r = s.get(path, &["Accept-Encoding: gzip"]);
    assert_eq!(
        (r.status, r.header("content-encoding")),
        (200, Some("gzip"))
    );
    assert!(r.body.len() < all.len() / 2);
}
