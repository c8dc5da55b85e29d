//! A reload (SIGHUP) applies what can change while the process runs, and says, one line
//! per key with its `file:line`, why it does not apply the rest (issue 29: a reload
//! from `max_size = "1g"` to `"3m"` used to leave 12 MiB on disk). The real `edgecache`
//! in front of the real `edgeorigin`, on 127.0.0.1.

mod common;

use common::{edgecache, files, json_number, object_files, origin, origin_requests, setup, Setup};
use edge_testkit::{get, Response};
use std::time::{Duration, Instant};

fn status(r: &Response) -> &str {
    r.header("x-cache-status").unwrap_or("-")
}

/// The running server's config file (written by `common::edgecache`).
fn config_path(s: &Setup) -> std::path::PathBuf {
    s.cache.dir().join("edgecache.toml")
}

/// The setup's config with `cache_extra` in its `[[cache]]`, addresses filled in.
fn config_text(s: &Setup, cache_extra: &str) -> String {
    common::fill(&s.config(cache_extra, ""), s.addr, s.admin)
}

/// Rewrites the config with `cache_extra`, sends SIGHUP, and waits for the new generation.
fn reload(s: &Setup, cache_extra: &str) {
    common::reload(&s.cache, s.addr, s.admin, &s.config(cache_extra, ""));
}

fn disk_use(s: &Setup) -> u64 {
    files(&s.dir.path().join("cache"))
        .iter()
        .map(|(_, len)| len)
        .sum()
}

#[test]
fn a_smaller_max_size_is_evicted_down_to_after_a_reload() {
    const MIB: u64 = 1 << 20;
    let s = setup("max_size = \"1g\"", "");
    for i in 0..12 {
        let r = s.get(&format!("/obj/1m/{i}"), &[]);
        assert_eq!((r.status, status(&r), r.body.len()), (200, "MISS", 1 << 20));
    }
    // Stored (the last fill commits as its response ends).
    let deadline = Instant::now() + Duration::from_secs(10);
    while json_number(&s.status_json(), "disk_bytes").unwrap() < 12 * MIB {
        assert!(Instant::now() < deadline, "{}", s.status_json());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(disk_use(&s) >= 12 * MIB, "{} bytes cached", disk_use(&s));

    reload(&s, "max_size = \"3m\"");
    let st = s.status_json();
    assert_eq!(json_number(&st, "max_size"), Some(3 * MIB), "{st}");
    // The manager evicts down to the new limit; bounded, polled (no speed claim).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = s.status_json();
        let indexed = json_number(&st, "disk_bytes").expect("disk_bytes");
        let on_disk = disk_use(&s);
        if indexed <= 3 * MIB && on_disk <= 3 * MIB {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {on_disk} bytes on disk ({indexed} indexed) 20 s after max_size = \"3m\"; /status: {st}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(json_number(&s.status_json(), "evictions").unwrap() >= 9);
    // A live key needs no restart: nothing to warn about; and the cache still works.
    assert!(
        !s.cache.stderr().contains("restart"),
        "{}",
        s.cache.stderr()
    );
    assert_eq!(
        status(&s.get("/obj/1m/11", &[])),
        "HIT",
        "the newest object kept"
    );
    let r = s.get("/obj/1m/0", &[]);
    assert_eq!((r.status, status(&r)), (200, "MISS"), "the oldest evicted");
}

#[test]
fn a_restart_only_key_logs_one_line_with_file_and_line_and_keeps_serving() {
    let s = setup("levels = \"1:2\"", "");
    assert_eq!(status(&s.get("/obj/10k/1", &[])), "MISS");

    let extra = "levels = \"2\"\nmax_size = \"5m\"";
    reload(&s, extra);
    let text = config_text(&s, extra);
    let line = text.lines().position(|l| l == "levels = \"2\"").unwrap() + 1;
    let want = format!(
        "{}:{line}: cache.levels: cache \"c1\": changed, but it is read only at start: restart (or `edgecache -s upgrade`) to apply it; still running with \"1:2\"",
        config_path(&s).display()
    );
    let count = |want: &str| s.cache.stderr().matches(want).count();
    assert_eq!(count(&want), 1, "stderr:\n{}", s.cache.stderr());
    assert_eq!(count("cache.levels"), 1, "one line for the one key");
    // The live key in the same file was applied.
    let st = s.status_json();
    assert_eq!(json_number(&st, "max_size"), Some(5 << 20), "{st}");
    // Still serving, with the old layout: the object stored before is a hit, and a new
    // one is stored under the old levels (1:2: two directories deep).
    assert_eq!(status(&s.get("/obj/10k/1", &[])), "HIT");
    assert_eq!(status(&s.get("/obj/10k/2", &[])), "MISS");
    let root = s.dir.path().join("cache");
    for (path, _) in object_files(&root) {
        let depth = std::path::Path::new(&path)
            .strip_prefix(&root)
            .unwrap()
            .components()
            .count();
        assert_eq!(depth, 3, "{path} not under the running levels 1:2");
    }
    // Still pending: the next reload of the same file says it again.
    reload(&s, extra);
    assert_eq!(count(&want), 2, "stderr:\n{}", s.cache.stderr());
    // Back to the running value: nothing more to say.
    reload(&s, "levels = \"1:2\"\nmax_size = \"5m\"");
    assert_eq!(count("cache.levels"), 2, "stderr:\n{}", s.cache.stderr());
}

/// `cache_lock_timeout` is each location's own wait: a location with 300 ms that shares
/// its cache with a default (5 s) one gives up after 300 ms (it used to wait as long
/// as the longest of the locations sharing the cache).
#[test]
fn cache_lock_timeout_is_per_location() {
    let (_origin, origin_addr) = origin();
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        r#"workers = 1
worker_cpu_affinity = "off"

[[listen]]
addr = "{{listen}}"

[[cache]]
name = "c1"
path = "{dir}"

[[upstream]]
name = "origin"
servers = ["{origin_addr}"]

[[location]]
prefix = "/"
proxy = "origin"
cache = ["c1"]

[[location]]
prefix = "/obj/4k/"
proxy = "origin"
cache = ["c1"]
cache_lock_timeout = "300ms"

[admin]
listen = "{{admin}}"
"#,
        dir = dir.path().join("cache").display()
    );
    let (_p, addr, _admin) = edgecache(&cfg);
    let requests = || origin_requests(origin_addr);
    // Under the 300 ms location: the follower gives up and fetches on its own.
    let before = requests();
    let path = "/obj/4k/42?delay_ms=1500";
    let leader = std::thread::spawn(move || get(addr, path, &[]));
    std::thread::sleep(Duration::from_millis(100));
    let follower = get(addr, path, &[]);
    assert_eq!((follower.status, status(&follower)), (200, "MISS"));
    let l = leader.join().unwrap();
    assert_eq!(l.body, follower.body);
    assert_eq!(requests() - before, 2, "the follower fetched on its own");
    // Under the default (5 s) location of the same cache: the follower waits.
    let before = requests();
    let path = "/obj/8k/43?delay_ms=1500";
    let leader = std::thread::spawn(move || get(addr, path, &[]));
    std::thread::sleep(Duration::from_millis(100));
    let follower = get(addr, path, &[]);
    assert_eq!((follower.status, status(&follower)), (200, "HIT"));
    assert_eq!(leader.join().unwrap().body, follower.body);
    assert_eq!(requests() - before, 1, "one origin fetch for both");
}

/// Reordering `[[listen]]` tables on a reload keeps each address with its own servers:
/// connections kept alive across the reload (which carry the listener index they were
/// accepted under) and new ones are answered by the same server as before, and no
/// restart-only line is logged for a pure reorder.
#[test]
fn reordered_listeners_keep_their_servers_across_a_reload() {
    let b = edge_testkit::free_addr();
    let text = |first: &str, second: &str| {
        format!(
            "workers = 1\n{first}\n{second}\n[admin]\nlisten = \"{{admin}}\"\n\
             [[server]]\ndefault = true\nlisten = [\"{{listen}}\"]\n[[server.location]]\nprefix = \"/\"\nreturn = {{ status = 200, body = \"A\" }}\n\
             [[server]]\ndefault = true\nlisten = [\"{b}\"]\n[[server.location]]\nprefix = \"/\"\nreturn = {{ status = 200, body = \"B\" }}\n"
        )
    };
    let la = "[[listen]]\naddr = \"{listen}\"";
    let lb = format!("[[listen]]\naddr = \"{b}\"");
    let (p, a, admin) = edgecache(&text(la, &lb));
    let mut ca = edge_testkit::Client::connect(a);
    let mut cb = edge_testkit::Client::connect(b);
    assert_eq!(ca.get("/", &[]).body, b"A");
    assert_eq!(cb.get("/", &[]).body, b"B");
    common::reload(&p, a, admin, &text(&lb, la));
    assert_eq!(ca.get("/", &[]).body, b"A", "kept-alive connection on A");
    assert_eq!(cb.get("/", &[]).body, b"B", "kept-alive connection on B");
    assert_eq!(get(a, "/", &[]).body, b"A");
    assert_eq!(get(b, "/", &[]).body, b"B");
    assert!(!p.stderr().contains("read only at start"), "{}", p.stderr());
}

/// Each worker checks the config generation per request and takes the new state only
/// when it moved: the first request after a reload, on connections kept alive across
/// it (spread over two workers), already gets the new state, reload after reload.
#[test]
fn every_worker_takes_each_reload_on_its_next_request() {
    let text = |body: &str| {
        format!(
            "workers = 2\n[[listen]]\naddr = \"{{listen}}\"\n[admin]\nlisten = \"{{admin}}\"\n\
             [[location]]\nprefix = \"/\"\nreturn = {{ status = 200, body = \"{body}\" }}\n"
        )
    };
    let (p, a, admin) = edgecache(&text("g1"));
    // Enough connections that both workers hold some (the kernel spreads them).
    let mut conns: Vec<_> = (0..8).map(|_| edge_testkit::Client::connect(a)).collect();
    for c in &mut conns {
        assert_eq!(c.get("/", &[]).body, b"g1");
    }
    for g in 2..5 {
        let body = format!("g{g}");
        common::reload(&p, a, admin, &text(&body));
        for (i, c) in conns.iter_mut().enumerate() {
            assert_eq!(
                String::from_utf8_lossy(&c.get("/", &[]).body),
                body,
                "connection {i}, first request after reload {g}"
            );
        }
        assert_eq!(get(a, "/", &[]).body, body.as_bytes());
    }
}
