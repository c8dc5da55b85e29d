//! The file I/O backends (`[aio] mode`), end to end: the real `edgecache` in front of
//! the real `edgeorigin`, with cached objects pushed out of the page cache
//! (`fsync` + `posix_fadvise(DONTNEED)`, no root needed) so that hits really read from
//! the disk. Every backend must serve the same bytes; `threads` must run its pool,
//! `io_uring` its ring (or fall back to `threads` with one log line), `auto` must hand
//! cold reads off; and a client that leaves mid-read must leak nothing.
//!
//! The rest of the integration tests run once per backend too: `./test` sets
//! `EDGECACHE_TEST_AIO` (see `common::edgecache`).

mod common;

use common::{cached_config, edgecache_env, origin, LOCAL};
use edge_testkit::{get, Proc, Response};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

struct Node {
    _origin: Proc,
    origin: SocketAddr,
    cache: Proc,
    addr: SocketAddr,
    admin: SocketAddr,
    dir: tempfile::TempDir,
}

fn start(aio: &str, env: &[(&str, &str)]) -> Node {
    let (o, origin_addr) = origin();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    // The shared caching config, with this test's `[aio]` table (its own, so the
    // EDGECACHE_TEST_AIO matrix leaves it alone), and no RAM tier: these tests are
    // about reading the disk tier's files, which a hit answered from RAM never does.
    let cfg = format!(
        "{}\n[memory_cache]\nsize = \"off\"\n[aio]\n{aio}\n",
        cached_config(origin_addr, &cache, "", "", LOCAL)
    );
    let (cache, addr, admin) = edgecache_env(&cfg, env);
    Node {
        _origin: o,
        origin: origin_addr,
        cache,
        addr,
        admin,
        dir,
    }
}

fn status(r: &Response) -> &str {
    r.header("x-cache-status").unwrap_or("-")
}

/// Whether the page holding byte `offset` of `path` is in the page cache.
fn cached(path: &str, offset: usize) -> bool {
    let pages = common::resident_pages(&std::fs::File::open(path).unwrap());
    pages.get(offset / 4096).copied().unwrap_or(false)
}

/// A sample of `/metrics` (the line starting with `series`).
fn metric(admin: SocketAddr, series: &str) -> Option<u64> {
    common::get_text(admin, "/metrics").lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

fn fill_and_check(n: &Node, paths: &[&str]) {
    for p in paths {
        let a = get(n.addr, p, &[]);
        assert_eq!(a.status, 200, "{p}");
        let b = get(n.addr, p, &[]);
        assert_eq!(status(&b), "HIT", "{p}");
    }
}

/// Cold hits on every backend, with and without sendfile, small (read with the head)
/// and large (sent by chunks), whole and ranged: the origin's exact bytes.
#[test]
fn every_backend_serves_cold_hits_byte_for_byte() {
    let paths = ["/obj/10k/1", "/obj/3m/2"];
    for mode in ["off", "threads", "io_uring", "auto"] {
        for sendfile in [true, false] {
            // sendfile_max off: the 3 MiB body goes by sendfile (chunks on the loop or
            // the pool), not from a mapping, whose pages eviction would leave in place
            // (the mapped path's cold hit is tests/large_hits.rs's).
            let n = start(
                &format!("mode = \"{mode}\"\nsendfile = {sendfile}\nsendfile_max = \"off\""),
                &[],
            );
            fill_and_check(&n, &paths);
            let cold = common::evict(n.dir.path());
            for p in paths {
                let direct = get(n.origin, p, &[]);
                let r = get(n.addr, p, &[]);
                assert_eq!((r.status, status(&r)), (200, "HIT"), "{mode} {p}");
                assert!(
                    r.body == direct.body,
                    "{mode} sendfile={sendfile} {p}: body differs"
                );
                assert_eq!(r.header("x-checksum"), direct.header("x-checksum"));
            }
            common::evict(n.dir.path());
            let r = get(n.addr, "/obj/3m/2", &["Range: bytes=1048570-2097160"]);
            let direct = get(n.origin, "/obj/3m/2", &[]);
            assert_eq!(r.status, 206, "{mode}");
            assert!(
                r.body == direct.body[1048570..=2097160],
                "{mode}: range bytes"
            );
            let backend = if mode == "io_uring" && n.cache.stderr().contains("using \"threads\"") {
                edge_testkit::fallback(
                    "cold hits on io_uring",
                    "this kernel refuses io_uring; the reads ran on the thread pool",
                );
                "threads"
            } else {
                mode
            };
            let reads = metric(
                n.admin,
                &format!("edgecache_aio_reads_total{{worker=\"0\",backend=\"{backend}\"}}"),
            )
            .unwrap_or_else(|| panic!("{mode}: no aio reads metric"));
            assert!(reads > 0, "{mode}: reads went through the backend");
            if mode == "auto" && cold {
                let handoffs = metric(
                    n.admin,
                    "edgecache_aio_handoffs_total{worker=\"0\",backend=\"auto\"}",
                )
                .unwrap();
                assert!(handoffs > 0, "auto: cold reads were handed to the pool");
            } else if mode == "auto" {
                println!("the cache directory cannot be evicted (tmpfs?): hand-offs not checked");
            }
        }
    }
}

fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect()
}

fn fd_links(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .map(|p| p.to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn threads_backend_runs_its_pool() {
    let n = start(
        "mode = \"threads\"\nthread_pool = { threads = 3, queue = \"lockfree\" }",
        &[],
    );
    fill_and_check(&n, &["/obj/10k/1"]);
    let names = thread_names(n.cache.child.id());
    let pool = names.iter().filter(|t| t.starts_with("aio-")).count();
    assert_eq!(pool, 3, "threads: {names:?}");
    let off = start("mode = \"off\"", &[]);
    fill_and_check(&off, &["/obj/10k/1"]);
    let names = thread_names(off.cache.child.id());
    assert!(
        !names.iter().any(|t| t.starts_with("aio-")),
        "off starts no pool: {names:?}"
    );
}

#[test]
fn io_uring_backend_has_a_ring_or_falls_back_once() {
    let n = start("mode = \"io_uring\"", &[]);
    fill_and_check(&n, &["/obj/10k/1"]);
    let rings = fd_links(n.cache.child.id())
        .iter()
        .filter(|l| l.contains("io_uring"))
        .count();
    if n.cache.stderr().contains("using \"threads\"") {
        edge_testkit::fallback(
            "io_uring's ring",
            "this kernel refuses io_uring: checked the fallback only",
        );
        assert_eq!(rings, 0);
    } else {
        assert_eq!(rings, 1, "one ring for the one worker");
    }

    // Forced fallback (what a kernel without io_uring, or a seccomp sandbox, gives).
    let f = start("mode = \"io_uring\"", &[("EDGECACHE_URING_DISABLE", "1")]);
    fill_and_check(&f, &["/obj/10k/1", "/obj/100k/1"]);
    let log = f.cache.stderr();
    assert_eq!(
        log.matches("using \"threads\"").count(),
        1,
        "one log line: {log}"
    );
    assert_eq!(
        metric(
            f.admin,
            "edgecache_aio_fallbacks_total{worker=\"0\",backend=\"threads\"}"
        ),
        Some(1)
    );
    assert!(fd_links(f.cache.child.id())
        .iter()
        .all(|l| !l.contains("io_uring")));
}

/// Clients that leave while their cold reads are on the pool: nothing leaks (no fd,
/// no op left in flight) and later reads are whole and right.
#[test]
fn clients_leaving_mid_read_leak_nothing() {
    // sendfile = false: pool reads into buffers; true: sendfile jobs on the pool, which
    // hold duplicates of the socket and the file.
    for sendfile in [false, true] {
        clients_leave_mid_body(sendfile);
    }
}

fn clients_leave_mid_body(sendfile: bool) {
    let n = start(
        &format!("mode = \"threads\"\nsendfile = {sendfile}\nthread_pool = {{ threads = 2 }}"),
        &[],
    );
    let path = "/obj/8m/7";
    fill_and_check(&n, &[path]);
    let pid = n.cache.child.id();
    let fds_before = fd_links(pid).len();
    for _ in 0..3 {
        common::evict(n.dir.path());
        let mut conns = Vec::new();
        for _ in 0..16 {
            let mut c = TcpStream::connect(n.addr).unwrap();
            c.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
                .unwrap();
            conns.push(c);
        }
        for c in &mut conns {
            let mut b = [0u8; 4096];
            let _ = c.read(&mut b);
        }
        drop(conns); // gone mid-body
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let in_flight = metric(
            n.admin,
            "edgecache_aio_in_flight{worker=\"0\",backend=\"threads\"}",
        );
        let fds = fd_links(pid).len();
        if in_flight == Some(0) && fds <= fds_before + 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sendfile={sendfile}: in flight {in_flight:?}, fds {fds} (before {fds_before})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let direct = get(n.origin, path, &[]);
    let r = get(n.addr, path, &[]);
    assert_eq!(status(&r), "HIT");
    assert!(
        r.body == direct.body,
        "sendfile={sendfile}: the object is intact"
    );
}

/// `directio`: bodies of objects at least that big are read with O_DIRECT on every
/// backend: right bytes, and the page cache stays empty (a buffered read would fill
/// it). Smaller objects keep the page cache.
#[test]
fn directio_bypasses_the_page_cache() {
    for mode in ["off", "threads", "io_uring", "auto"] {
        let n = start(&format!("mode = \"{mode}\"\ndirectio = \"1m\""), &[]);
        fill_and_check(&n, &["/obj/3m/2", "/obj/100k/3"]);
        if !common::evict(n.dir.path()) {
            println!("the cache directory cannot be evicted (tmpfs?): skipped");
            return;
        }
        let big = common::files(n.dir.path())
            .into_iter()
            .find(|(_, len)| *len > 3 << 20)
            .unwrap()
            .0;
        for (p, whole) in [("/obj/3m/2", 3u64 << 20), ("/obj/100k/3", 100 << 10)] {
            let direct = get(n.origin, p, &[]);
            let r = get(n.addr, p, &[]);
            assert_eq!(status(&r), "HIT");
            assert!(r.body == direct.body, "{mode} {p}");
            assert_eq!(r.body.len() as u64, whole);
        }
        let r = get(n.addr, "/obj/3m/2", &["Range: bytes=5000-1200000"]);
        let direct = get(n.origin, "/obj/3m/2", &[]);
        assert!(
            r.body == direct.body[5000..=1200000],
            "{mode}: an unaligned range"
        );
        for off in [8192, 1 << 20, 3 << 20] {
            assert!(
                !cached(&big, off),
                "{mode}: O_DIRECT left page {off} uncached"
            );
        }
        // The check can tell: a buffered read of the same pages caches them.
        let mut b = vec![0u8; 65536];
        let f = std::fs::File::open(&big).unwrap();
        std::os::unix::fs::FileExt::read_at(&f, &mut b, 8192).unwrap();
        assert!(cached(&big, 8192), "{mode}: mincore sees a buffered read");
    }
}

/// `aio.inline_writes` (on by default under `auto`): a fill's commit runs on the
/// worker's loop while the kernel is far from throttling writers; the object is stored
/// all the same and its hits are byte-exact. Off: every commit goes to the pool.
#[test]
fn auto_commits_on_the_loop_unless_told_not_to() {
    let inline = |n: &Node| {
        metric(
            n.admin,
            "edgecache_aio_inline_writes_total{worker=\"0\",backend=\"auto\"}",
        )
        .expect("the inline commits series")
    };
    for (cfg, on) in [("mode = \"auto\"", true), ("inline_writes = false", false)] {
        let n = start(cfg, &[]);
        // The first miss starts the spare temp files' refill, during which commits go
        // to the pool (it holds the cache root's directory lock that a rename takes):
        // let it finish, then count.
        fill_and_check(&n, &["/obj/4k/9"]);
        std::thread::sleep(Duration::from_millis(500));
        let first = inline(&n);
        let paths = ["/obj/4k/1", "/obj/100k/2", "/obj/4k/3"];
        fill_and_check(&n, &paths);
        for p in paths {
            let direct = get(n.origin, p, &[]);
            let r = get(n.addr, p, &[]);
            assert_eq!(status(&r), "HIT", "{cfg} {p}");
            assert!(r.body == direct.body, "{cfg} {p}: bytes");
        }
        let commits = inline(&n) - first;
        if on {
            let slept = metric(
                n.admin,
                "edgecache_aio_write_sleeps_total{worker=\"0\",backend=\"auto\"}",
            )
            .unwrap();
            if commits == 0 {
                // Right only while this host's dirty pages are above the kernel's
                // background threshold (a CI machine writing its build can be).
                assert!(
                    !edge_aio::write_gate::host_has_room(),
                    "no commit on the loop, though the host has room for dirty pages"
                );
                eprintln!("the host's dirty pages are above its background threshold");
            } else {
                // One per fill at most; all three unless the gate shut meanwhile: a write
                // slept past its budget, or the host's dirty pages crossed the threshold
                // (re-read every 250 ms; a CI machine writing its build can be near it).
                assert!(commits <= 3, "{commits} inline, {slept} slept");
            }
        } else {
            assert_eq!(
                commits, 0,
                "inline_writes = false: every commit on the pool"
            );
        }
    }
}
