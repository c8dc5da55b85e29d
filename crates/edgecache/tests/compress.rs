//! Response compression, end to end: the real edgecache in front of the real
//! edgeorigin, real HTTP on 127.0.0.1, every compressed body decoded and checked against
//! the origin's `X-Checksum` (xxh3-64 of the identity bytes).
//!
//! Negotiation (q-values, identity, `*`); stored copies made once and then served as
//! hits (no compression work, counted); one copy for concurrent first requests; Range,
//! HEAD and 304 on a copy; the origin's own coding passed through or decoded; purge and
//! revalidation over every copy; on-the-fly compression on uncached paths (HTTP/1.1
//! chunked, HTTP/1.0 close-delimited); what is never compressed; the offload threads;
//! config errors.

mod common;

use common::{cached_config, check_config, edgecache, get_text, origin, origin_requests};
use edge_compress::Coding;
use edge_testkit::{get, Client, Proc, Response};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

struct Edge {
    _origin: Proc,
    origin: SocketAddr,
    _cache: Proc,
    pid: u32,
    addr: SocketAddr,
    admin: SocketAddr,
    _dir: tempfile::TempDir,
}

/// edgeorigin and edgecache with one cached location `/` (`location_extra`: its
/// compression keys), and `top` (tables such as `[compress_pool]`).
fn edge(top: &str, location_extra: &str) -> Edge {
    let (o, oaddr) = origin();
    let dir = tempfile::tempdir().unwrap();
    let loc = format!(
        "cache_valid = {{ \"200\" = \"10m\" }}\ncache_bypass = [{{ header = \"X-Bypass\" }}]\n{location_extra}"
    );
    // `top` goes last: it may open tables of its own.
    let cfg = format!(
        "{}\n{top}\n",
        cached_config(oaddr, &dir.path().join("cache"), "", &loc, common::LOCAL)
    );
    let (p, addr, admin) = edgecache(&cfg);
    Edge {
        _origin: o,
        origin: oaddr,
        pid: p.child.id(),
        _cache: p,
        addr,
        admin,
        _dir: dir,
    }
}

const ALL: &str = "compress = [\"zstd\", \"br\", \"gzip\"]";

impl Edge {
    fn get(&self, path: &str, headers: &[&str]) -> Response {
        get(self.addr, path, headers)
    }

    fn metric(&self, name: &str) -> u64 {
        let m = get_text(self.admin, "/metrics");
        common::metric_in(&m, name).unwrap_or_else(|| panic!("no {name} in /metrics:\n{m}"))
    }

    fn origin_count(&self) -> u64 {
        origin_requests(self.origin)
    }
}

fn xcs(r: &Response) -> &str {
    r.header("x-cache-status").unwrap_or("-")
}

fn coding_of(r: &Response) -> Option<Coding> {
    r.header("content-encoding")
        .map(|v| Coding::from_token(v).unwrap_or_else(|| panic!("unknown coding {v}")))
}

/// The response's identity bytes (decoded when it has a coding), checked against its
/// `X-Checksum`.
fn identity_body(r: &Response) -> Vec<u8> {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.head_bytes));
    let body = match coding_of(r) {
        Some(c) => edge_compress::codec::decode_all(c, &r.body)
            .unwrap_or_else(|e| panic!("{c:?} body does not decode: {e}")),
        None => r.body.clone(),
    };
    let want = r.header("x-checksum").expect("X-Checksum");
    assert_eq!(
        format!("{:016x}", twox_hash::XxHash3_64::oneshot(&body)),
        want,
        "decoded bytes differ from the origin's ({} bytes)",
        body.len()
    );
    body
}

fn has_vary_ae(r: &Response) -> bool {
    r.headers
        .iter()
        .any(|(k, v)| k == "vary" && v.to_ascii_lowercase().contains("accept-encoding"))
}

#[test]
fn negotiation_follows_q_values_identity_and_star() {
    let e = edge("", ALL);
    // Stored once (no Accept-Encoding: identity).
    let plain = e.get("/txt/20k/1", &[]);
    assert_eq!(coding_of(&plain), None);
    assert!(has_vary_ae(&plain), "the identity form varies too");
    let plain = identity_body(&plain);
    let cases: &[(&str, Option<Coding>)] = &[
        ("gzip, deflate, br, zstd", Some(Coding::Zstd)),
        ("gzip", Some(Coding::Gzip)),
        ("x-gzip", Some(Coding::Gzip)),
        ("br;q=0.5, gzip", Some(Coding::Gzip)),
        ("br;q=0.9, gzip;q=0.8, zstd;q=0.1", Some(Coding::Br)),
        ("*", Some(Coding::Zstd)),
        ("zstd;q=0, *", Some(Coding::Br)),
        ("*;q=0, gzip", Some(Coding::Gzip)),
        ("gzip;q=0", None),
        ("identity", None),
        ("identity, gzip;q=0.5", None),
        ("deflate", None),
        ("", None),
        ("gzip;q=nonsense, br", Some(Coding::Br)),
    ];
    for (ae, want) in cases {
        let r = e.get("/txt/20k/1", &[&format!("Accept-Encoding: {ae}")]);
        assert_eq!(coding_of(&r), *want, "Accept-Encoding: {ae:?}");
        assert!(has_vary_ae(&r), "Accept-Encoding: {ae:?}");
        assert_eq!(identity_body(&r), plain, "Accept-Encoding: {ae:?}");
        if want.is_some() {
            let etag = r.header("etag").unwrap();
            assert!(
                etag.ends_with(&format!("-{}\"", want.unwrap().token())),
                "a coded ETag of its own: {etag}"
            );
        }
    }
    assert_eq!(e.origin_count(), 1, "one origin fetch for every form");
}

#[test]
fn a_copy_is_made_once_and_hits_never_compress_again() {
    let e = edge("", ALL);
    let ae = "Accept-Encoding: gzip";
    let first = e.get("/txt/100k/2", &[ae]);
    assert_eq!(
        (xcs(&first), coding_of(&first)),
        ("MISS", Some(Coding::Gzip))
    );
    assert_eq!(
        first.header("transfer-encoding"),
        Some("chunked"),
        "made while sent"
    );
    let body = identity_body(&first);
    for _ in 0..5 {
        let r = e.get("/txt/100k/2", &[ae]);
        assert_eq!((xcs(&r), coding_of(&r)), ("HIT", Some(Coding::Gzip)));
        assert_eq!(r.body, first.body, "the stored copy's bytes");
        assert_eq!(
            r.header("content-length"),
            Some(first.body.len().to_string().as_str()),
            "a stored copy has its length"
        );
        assert_eq!(identity_body(&r), body);
    }
    let gz = r#"edgecache_compress_responses_total{coding="gzip"}"#;
    assert_eq!(e.metric(gz), 1, "compressed once");
    assert_eq!(e.metric("edgecache_compress_variants_stored_total"), 1);
    assert_eq!(e.metric("edgecache_compress_variant_hits_total"), 5);
    assert_eq!(e.origin_count(), 1);
    assert!(e.metric("edgecache_compress_bytes_in_total") >= 100 * 1024);
    assert!(e.metric("edgecache_compress_bytes_out_total") < 50 * 1024);
}

#[test]
fn concurrent_first_requests_make_one_copy() {
    // Normal priority: at idle priority a copy made while the machine is saturated
    // (a loaded test machine) waits for spare CPU (docs/compression.md).
    let e = edge("[compress_pool]\npriority = \"normal\"\n", ALL);
    let warm = e.get("/txt/1m/3", &[]);
    let plain = identity_body(&warm);
    let addr = e.addr;
    let threads: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(move || get(addr, "/txt/1m/3", &["Accept-Encoding: br"])))
        .collect();
    for t in threads {
        let r = t.join().unwrap();
        assert_eq!(coding_of(&r), Some(Coding::Br));
        assert_eq!(identity_body(&r), plain);
    }
    assert_eq!(
        e.metric(r#"edgecache_compress_responses_total{coding="br"}"#),
        1
    );
    assert_eq!(e.metric("edgecache_compress_variants_stored_total"), 1);
}

#[test]
fn range_head_and_304_on_a_copy() {
    let e = edge("", ALL);
    let ae = "Accept-Encoding: gzip";
    // Before the copy exists a range is the identity's, marked as varying.
    let r0 = e.get("/txt/50k/4", &[ae, "Range: bytes=0-99"]);
    assert_eq!((r0.status, coding_of(&r0)), (206, None));
    assert!(has_vary_ae(&r0));
    // HEAD before the copy: the coded head, no length.
    let h0 = Client::connect(e.addr).request("HEAD", "/txt/50k/4", &[ae]);
    assert_eq!(coding_of(&h0), Some(Coding::Gzip));
    assert_eq!(h0.header("content-length"), None);
    let full = e.get("/txt/50k/4", &[ae]);
    identity_body(&full);
    let n = full.body.len();
    // A range of the copy's bytes.
    let r = e.get("/txt/50k/4", &[ae, "Range: bytes=10-109"]);
    assert_eq!((r.status, coding_of(&r)), (206, Some(Coding::Gzip)));
    assert_eq!(r.body, &full.body[10..110]);
    let want_cr = format!("bytes 10-109/{n}");
    assert_eq!(r.header("content-range"), Some(want_cr.as_str()));
    // HEAD: the copy's head, with its length.
    let h = Client::connect(e.addr).request("HEAD", "/txt/50k/4", &[ae]);
    assert_eq!(coding_of(&h), Some(Coding::Gzip));
    assert_eq!(h.header("content-length"), Some(n.to_string().as_str()));
    // Its own ETag revalidates it.
    let etag = full.header("etag").unwrap().to_string();
    let nm = e.get("/txt/50k/4", &[ae, &format!("If-None-Match: {etag}")]);
    assert_eq!(nm.status, 304);
    assert_eq!(coding_of(&nm), Some(Coding::Gzip));
    assert_eq!(
        e.metric(r#"edgecache_compress_responses_total{coding="gzip"}"#),
        1
    );
}

#[test]
fn the_origins_coding_passes_through_and_is_decoded_for_others() {
    let e = edge("", ALL);
    let path = "/txt/30k/5?ce=gzip";
    let direct = get(e.origin, path, &[]);
    assert_eq!(coding_of(&direct), Some(Coding::Gzip));
    let gz = e.get(path, &["Accept-Encoding: gzip, br"]);
    assert_eq!(coding_of(&gz), Some(Coding::Gzip), "the client takes gzip");
    assert_eq!(gz.body, direct.body, "the origin's bytes, untouched");
    identity_body(&gz);
    for ae in ["Accept-Encoding: br", "Accept-Encoding: identity"] {
        let r = e.get(path, &[ae]);
        assert_eq!((xcs(&r), coding_of(&r)), ("HIT", None), "{ae}");
        identity_body(&r);
        let etag = r.header("etag").unwrap();
        assert!(
            etag.starts_with("W/"),
            "decoded bytes get a weak tag: {etag}"
        );
        assert!(has_vary_ae(&r));
    }
    // No Accept-Encoding at all: decoded too.
    let none = e.get(path, &[]);
    assert_eq!(coding_of(&none), None);
    identity_body(&none);
    assert_eq!(
        e.metric(r#"edgecache_decompress_responses_total{coding="gzip"}"#),
        3
    );
    // Uncached (bypass): the same on the fly.
    let by = e.get(path, &["X-Bypass: 1", "Accept-Encoding: zstd"]);
    assert_eq!((xcs(&by), coding_of(&by)), ("BYPASS", None));
    identity_body(&by);
    let by = e.get(path, &["X-Bypass: 1", "Accept-Encoding: gzip"]);
    assert_eq!(by.body, direct.body);
    assert_eq!(
        e.origin_count(),
        4,
        "the direct fetch, one fill, two bypasses"
    );
}

#[test]
fn purge_removes_every_copy_and_revalidation_keeps_them() {
    let e = edge("", ALL);
    let path = "/txt/40k/6?max_age=1";
    identity_body(&e.get(path, &[]));
    for ae in ["gzip", "br"] {
        identity_body(&e.get(path, &[&format!("Accept-Encoding: {ae}")]));
    }
    assert_eq!(e.metric("edgecache_compress_variants_stored_total"), 2);
    // Expired: the identity is revalidated (304 from the origin) and the copy follows
    // it: served without compressing again.
    std::thread::sleep(Duration::from_millis(2100));
    let r = e.get(path, &["Accept-Encoding: gzip"]);
    assert_eq!(coding_of(&r), Some(Coding::Gzip));
    assert_eq!(xcs(&r), "REVALIDATED");
    identity_body(&r);
    // Hits (or, on a machine slow enough for max-age=1 to pass again, revalidations):
    // either way from the stored copies.
    let fresh = |r: &Response| ["HIT", "REVALIDATED"].contains(&xcs(r));
    let r = e.get(path, &["Accept-Encoding: gzip"]);
    assert!(fresh(&r), "{}", xcs(&r));
    assert_eq!(coding_of(&r), Some(Coding::Gzip));
    let br = e.get(path, &["Accept-Encoding: br"]);
    assert!(fresh(&br), "{}", xcs(&br));
    assert_eq!(coding_of(&br), Some(Coding::Br));
    assert_eq!(
        e.metric("edgecache_compress_variants_stored_total"),
        2,
        "no new copy"
    );
    // PURGE of the URL: every copy goes with the object.
    let before = e.origin_count();
    let p = Client::connect(e.addr).request("PURGE", path, &[]);
    assert_eq!(p.status, 200, "{}", String::from_utf8_lossy(&p.body));
    let gz = e.get(path, &["Accept-Encoding: gzip"]);
    assert_eq!((xcs(&gz), coding_of(&gz)), ("MISS", Some(Coding::Gzip)));
    identity_body(&gz);
    // The br copy of the old body is gone too: a new one is made from the new object.
    let br = e.get(path, &["Accept-Encoding: br"]);
    assert_eq!(coding_of(&br), Some(Coding::Br));
    identity_body(&br);
    assert_eq!(e.metric("edgecache_compress_variants_stored_total"), 4);
    // Refetched once; on a slow machine the new object (max-age=1) may expire before
    // the br request, which then revalidates it: the header says so.
    let revalidated = u64::from(xcs(&br) == "REVALIDATED");
    assert_eq!(
        e.origin_count(),
        before + 1 + revalidated,
        "refetched once ({})",
        xcs(&br)
    );
}

#[test]
fn uncached_responses_compress_on_the_fly_for_http_1_1_and_1_0() {
    let e = edge("", ALL);
    let r = e.get("/txt/64k/7", &["X-Bypass: 1", "Accept-Encoding: br"]);
    assert_eq!((xcs(&r), coding_of(&r)), ("BYPASS", Some(Coding::Br)));
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    identity_body(&r);
    // Not stored (no-store): compressed for this client only.
    let ns = e.get("/txt/64k/8?no_store=1", &["Accept-Encoding: zstd"]);
    assert_eq!(coding_of(&ns), Some(Coding::Zstd));
    identity_body(&ns);
    // HTTP/1.0: no chunked; the body ends with the connection.
    let mut s = TcpStream::connect(e.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /txt/64k/7 HTTP/1.0\r\nX-Bypass: 1\r\nAccept-Encoding: gzip\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    assert!(head.contains("content-encoding: gzip"), "{head}");
    assert!(
        !head.contains("chunked") && !head.contains("content-length"),
        "{head}"
    );
    let body = edge_compress::codec::decode_all(Coding::Gzip, &raw[split..]).unwrap();
    assert_eq!(body.len(), 64 * 1024);
    assert!(e.metric(r#"edgecache_compress_responses_total{coding="gzip"}"#) >= 1);
}

#[test]
fn what_is_never_compressed() {
    let e = edge("", &format!("{ALL}\ncompress_min_length = \"2k\""));
    let ae = "Accept-Encoding: gzip, br, zstd";
    // Incompressible media type.
    let obj = e.get("/obj/20k/1", &[ae]);
    assert_eq!(coding_of(&obj), None);
    assert!(!has_vary_ae(&obj), "never compressed: does not vary");
    identity_body(&obj);
    // Under compress_min_length.
    let small = e.get("/txt/1k/1", &[ae]);
    assert_eq!(coding_of(&small), None);
    identity_body(&small);
    // Not a 200.
    let err = e.get("/txt/20k/2?status=503", &[ae]);
    assert_eq!(err.status, 503);
    assert_eq!(err.header("content-encoding"), None);
    // A 206 from the origin (uncached path) is passed as it is.
    let part = e.get("/txt/20k/3", &["X-Bypass: 1", ae, "Range: bytes=0-9"]);
    assert_eq!((part.status, coding_of(&part)), (206, None));
    assert_eq!(
        e.metric(r#"edgecache_compress_responses_total{coding="zstd"}"#),
        0
    );
    // A location that lists only text/css.
    let css = edge("", &format!("{ALL}\ncompress_types = [\"text/css\"]"));
    let html = css.get("/txt/20k/1", &[ae]);
    assert_eq!(coding_of(&html), None);
}

/// The names of a process's threads.
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect()
}

#[test]
fn offload_runs_on_the_compress_threads_and_inline_does_not() {
    let off = edge(
        "[compress_pool]\nthreads = 2\nmax_queue = 64\ncpus = [0]\n",
        ALL,
    );
    identity_body(&off.get("/txt/64k/9", &["Accept-Encoding: gzip"]));
    // The pool starts on the first compression without waiting for its threads (the
    // worker must not: they may run at idle priority). Each names itself and pins
    // itself to CPU 0 (`cpus = [0]`) as it starts: allow them a moment.
    let allowed = |t: &std::path::Path| {
        let status = std::fs::read_to_string(t.join("status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|c| c.trim().to_string())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let pool: Vec<Option<String>> = std::fs::read_dir(format!("/proc/{}/task", off.pid))
            .unwrap()
            .flatten()
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.trim().starts_with("compress-"))
            })
            .map(|t| allowed(&t.path()))
            .collect();
        if pool.len() == 2 && pool.iter().all(|c| c.as_deref() == Some("0")) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{pool:?} in {:?}",
            thread_names(off.pid)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(off.metric("edgecache_compress_cpu_nanoseconds_total") > 0);

    let inline = edge("", &format!("{ALL}\ncompress_offload = false"));
    identity_body(&inline.get("/txt/64k/9", &["Accept-Encoding: gzip"]));
    let names = thread_names(inline.pid);
    assert!(
        !names.iter().any(|n| n.starts_with("compress-")),
        "inline: no pool: {names:?}"
    );
    assert!(inline.metric("edgecache_compress_cpu_nanoseconds_total") > 0);
}

#[test]
fn bad_compression_settings_are_config_errors() {
    const BASE: &str = "workers = 1\n[[listen]]\naddr = \"127.0.0.1:1\"\n[[upstream]]\nname = \"o\"\nservers = [\"127.0.0.1:2\"]\n[[location]]\nprefix = \"/\"\nproxy = \"o\"\n";
    let good = check_config(&format!(
        "{BASE}compress = [\"br\", \"gzip\"]\ncompress_types = [\"text/*\", \"application/*+json\"]\ncompress_min_length = \"512\"\ngzip_level = 9\nbrotli_level = 11\nzstd_level = 19\ncompress_offload = false\n[compress_pool]\nthreads = 2\nmax_queue = 10\n"
    ));
    assert_eq!(good.0, Some(0), "{}", good.1);
    // (extra text, key, words of the message); errors name the location's line, 8.
    let cases: &[(&str, &str, &str)] = &[
        ("compress = [\"deflate\"]\n", "location.compress", "deflate"),
        (
            "compress = [\"gzip\", \"gzip\"]\n",
            "location.compress",
            "twice",
        ),
        (
            "gzip_level = 5\n",
            "location.gzip_level",
            "without compress",
        ),
        (
            "compress_offload = true\n",
            "location.compress_offload",
            "without compress",
        ),
        (
            "compress = [\"gzip\"]\ngzip_level = 10\n",
            "location.gzip_level",
            "out of range",
        ),
        (
            "compress = [\"br\"]\nbrotli_level = 12\n",
            "location.brotli_level",
            "out of range",
        ),
        (
            "compress = [\"zstd\"]\nzstd_level = 0\n",
            "location.zstd_level",
            "out of range",
        ),
        (
            "compress = [\"gzip\"]\ncompress_types = [\"html\"]\n",
            "location.compress_types",
            "media type",
        ),
    ];
    for (extra, key, words) in cases {
        let (code, err, path) = check_config(&format!("{BASE}{extra}"));
        assert_eq!(code, Some(2), "{extra}: {err}");
        assert!(err.contains(&format!("{path}:8: {key}:")), "{extra}: {err}");
        assert!(err.contains(words), "{extra}: {err}");
    }
    let (code, err, _) = check_config(
        "workers = 1\n[[listen]]\naddr = \"127.0.0.1:1\"\n[[location]]\nprefix = \"/\"\nstatic = \"/tmp\"\ncompress = [\"gzip\"]\n",
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("location.compress:") && err.contains("proxied"),
        "{err}"
    );
    let (code, err, _) = check_config(&format!("{BASE}[compress_pool]\nthreads = 0\n"));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("compress_pool.threads"), "{err}");
    let (code, err, _) = check_config(&format!("{BASE}[compress_pool]\ncpus = [4096]\n"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("compress_pool.cpus") && err.contains("4096"),
        "{err}"
    );
}
