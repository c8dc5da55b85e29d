//! Cache tests on real temp directories: round trips, crash safety, restart, eviction,
//! expiry, purge, Vary, refresh and concurrency.

use super::open::ready;
use super::*;
use crate::index::NewEntry;
use crate::key::key_hash;
use crate::local::Local;
use crate::manager;
use crate::meta::Freshness;
use crate::meta::ObjectMeta;
use crate::storage::read_body;
use crate::storage::{self, Layout};
use crate::sync::lock;
use crate::CacheConfig;
use crate::Limits;
use edge_http::HeaderMap;
use std::cell::RefCell;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::SystemTime;

fn cfg(dir: &Path) -> CacheConfig {
    CacheConfig {
        name: "t".into(),
        path: dir.to_path_buf(),
        loader_sleep: Duration::from_millis(1),
        ..Default::default()
    }
}

/// [`cfg`] with a loader that does one file per (very long) batch: it stays loading.
fn slow_loader(dir: &Path) -> CacheConfig {
    CacheConfig {
        loader_files: 1,
        loader_sleep: Duration::from_secs(3600),
        ..cfg(dir)
    }
}

fn open(dir: &Path) -> Arc<Cache> {
    let c = Cache::open(cfg(dir)).unwrap();
    assert!(c.wait_loaded(Duration::from_secs(10)));
    c
}

/// Where `key`'s object file is in a cache at `dir` (the test config's levels).
fn layout_path(dir: &Path, key: &str) -> PathBuf {
    Layout {
        root: dir.to_path_buf(),
        levels: cfg(dir).levels,
    }
    .path_for(key_hash(key))
}

fn req(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in pairs {
        h.append(n.to_string(), v.as_bytes().to_vec());
    }
    h
}

fn meta(lifetime: u64) -> ObjectMeta {
    let mut m = ObjectMeta::new("", 200, SystemTime::now());
    m.header_block = b"Content-Type: text/plain\r\n".to_vec();
    m.freshness = Freshness {
        lifetime: Duration::from_secs(lifetime),
        ..Default::default()
    };
    m.etag = Some("\"e\"".into());
    m
}

fn put_meta(c: &Arc<Cache>, key: &str, r: &HeaderMap, mut m: ObjectMeta, body: &[u8]) {
    m.body_len = body.len() as u64;
    let mut w = c.begin_write(key, r, m).unwrap();
    for chunk in body.chunks(4000) {
        w.write(chunk).unwrap();
    }
    w.finish().unwrap();
}

fn put(c: &Arc<Cache>, key: &str, body: &[u8]) {
    put_meta(c, key, &HeaderMap::new(), meta(600), body);
}

fn body_of(hit: &HitEntry) -> Vec<u8> {
    read_body(hit.file().expect("file"), hit.body_offset, hit.body_len).unwrap()
}

fn get(c: &Arc<Cache>, key: &str) -> Option<Vec<u8>> {
    match c.lookup(key, &HeaderMap::new(), SystemTime::now()) {
        Lookup::Fresh(h) => Some(body_of(&h)),
        _ => None,
    }
}

fn is_stale(c: &Arc<Cache>, key: &str) -> bool {
    matches!(
        c.lookup(key, &HeaderMap::new(), SystemTime::now()),
        Lookup::Stale(_)
    )
}

/// Every regular file under `dir` (recursively): (path, size).
fn files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let md = e.metadata().unwrap();
            if md.is_dir() {
                stack.push(e.path());
            } else {
                out.push((e.path(), md.len()));
            }
        }
    }
    out
}

#[test]
fn miss_write_then_fresh_hit_with_ready_headers() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    assert!(matches!(
        c.lookup("http://h/a", &HeaderMap::new(), SystemTime::now()),
        Lookup::Miss
    ));
    let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    put(&c, "http://h/a", &body);
    let Lookup::Fresh(hit) = c.lookup("http://h/a", &HeaderMap::new(), SystemTime::now()) else {
        panic!("expected a fresh hit");
    };
    assert_eq!(hit.meta.header_block, b"Content-Type: text/plain\r\n");
    assert_eq!(hit.body_offset % 4096, 0);
    assert_eq!(body_of(&hit), body);
    assert_eq!(hit.meta.body_hash, storage::body_checksum(&body));
    let s = c.stats();
    assert_eq!((s.entries, s.write_errors), (1, 0));
    assert_eq!(
        s.disk_bytes,
        storage::disk_size_of(hit.body_offset + body.len() as u64)
    );
    c.shutdown();
}

#[test]
fn zero_lifetime_is_stale_and_unknown_length_works() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    let mut m = meta(0);
    m.body_len = crate::BODY_LEN_UNKNOWN;
    let mut w = c.begin_write("k", &HeaderMap::new(), m).unwrap();
    w.write(b"chunked body").unwrap();
    w.finish().unwrap();
    let Lookup::Stale(hit) = c.lookup("k", &HeaderMap::new(), SystemTime::now()) else {
        panic!("expected stale");
    };
    assert_eq!(body_of(&hit), b"chunked body");
}

#[test]
fn dropped_writer_leaves_no_servable_object_and_no_temp_file() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    let mut m = meta(600);
    m.body_len = 10_000;
    let mut w = c.begin_write("k", &HeaderMap::new(), m).unwrap();
    w.write(&[7u8; 5000]).unwrap();
    drop(w);
    assert!(get(&c, "k").is_none());
    assert!(files(d.path()).is_empty(), "{:?}", files(d.path()));
    // A short body is refused at finish.
    let mut m = meta(600);
    m.body_len = 10;
    let mut w = c.begin_write("k", &HeaderMap::new(), m).unwrap();
    w.write(b"123").unwrap();
    assert!(w.finish().is_err());
    assert!(get(&c, "k").is_none());
    assert!(files(d.path()).is_empty());
}

#[test]
fn restart_rebuilds_index_and_removes_damaged_files() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    for i in 0..20 {
        put(&c, &format!("http://h/{i}"), format!("body {i}").as_bytes());
    }
    let flip = c.path_for(key_hash("http://h/1"));
    let cut = c.path_for(key_hash("http://h/2"));
    c.shutdown();
    drop(c);
    // Flip a header byte, cut a body, and leave a temp file from a "killed" process.
    let mut b = fs::read(&flip).unwrap();
    b[70] ^= 1;
    fs::write(&flip, &b).unwrap();
    let f = fs::OpenOptions::new().write(true).open(&cut).unwrap();
    f.set_len(f.metadata().unwrap().len() - 1).unwrap();
    let tmp = flip.with_file_name(format!(
        "{}.tmp.4294967295-1.0",
        crate::key::hash_hex(key_hash("x"))
    ));
    fs::write(&tmp, b"partial").unwrap();
    let unrelated = d.path().join("README");
    fs::write(&unrelated, b"operator notes").unwrap();

    let c = open(d.path());
    let s = c.stats();
    assert!(s.loader.done);
    assert_eq!(s.loader.loaded, 18);
    assert_eq!(s.loader.removed, 3);
    assert_eq!(s.entries, 18);
    assert!(!flip.exists() && !cut.exists() && !tmp.exists());
    assert!(unrelated.exists(), "files that are not ours are left alone");
    assert!(get(&c, "http://h/1").is_none());
    assert!(get(&c, "http://h/2").is_none());
    for i in (0..20).filter(|i| *i != 1 && *i != 2) {
        assert_eq!(
            get(&c, &format!("http://h/{i}")).unwrap(),
            format!("body {i}").as_bytes()
        );
    }
    c.shutdown();
}

#[test]
fn hits_before_the_loader_reaches_a_file() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    for i in 0..50 {
        put(&c, &format!("http://h/{i}"), b"x");
    }
    c.shutdown();
    drop(c);
    let c = Cache::open(slow_loader(d.path())).unwrap();
    for i in 0..50 {
        assert_eq!(get(&c, &format!("http://h/{i}")).unwrap(), b"x");
    }
    let s = c.stats();
    assert!(!s.loader.done);
    assert!(s.disk_fallback_hits >= 48, "{s:?}");
    // Purges issued while loading also hit objects the loader has not reached.
    assert_eq!(c.purge_prefix("http://h/4", false), 11);
    assert!(get(&c, "http://h/40").is_none());
    c.shutdown(); // interrupts the loader's sleep
}

/// A [`FileOpener`] that does every call on a thread of its own, named `test-pool`
/// (a server's backend uses its aio pool), and records where each call ran.
#[derive(Default)]
struct PoolOpener {
    threads: Arc<Mutex<Vec<(&'static str, String)>>>,
}

impl PoolOpener {
    async fn on_pool<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let threads = self.threads.clone();
        std::thread::Builder::new()
            .name("test-pool".into())
            .spawn(move || {
                let me = std::thread::current().name().unwrap_or("").to_owned();
                lock(&threads).push((what, me));
                let _ = tx.send(f());
            })?;
        rx.await.map_err(|_| io::Error::other("pool job lost"))
    }

    fn calls(&self) -> Vec<(&'static str, String)> {
        lock(&self.threads).clone()
    }
}

impl FileOpener for PoolOpener {
    async fn open_stat(&self, path: &Path) -> io::Result<OpenedFile> {
        let path = path.to_path_buf();
        self.on_pool("open", move || BlockingOpener::open_stat_now(&path))
            .await?
    }

    async fn read_exact_at(&self, file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let file = file.try_clone()?;
        self.on_pool("read", move || {
            ready(BlockingOpener.read_exact_at(&file, offset, len))
        })
        .await?
    }

    async fn offload<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        self.on_pool("offload", f).await
    }
}

/// Issue 29: before the loader is done, a lookup that misses the index looks for the
/// file by hash. That used to open, read and `fstat` it, and wait for the loader gate,
/// on the calling thread (a worker's event loop). Now the file calls go through the
/// opener, and a gate held elsewhere (here by this very thread, which a blocking lookup
/// would deadlock on) is waited for on the opener's pool: the lookup stays pending,
/// and ends once the gate is free.
#[test]
fn disk_fallback_runs_through_the_opener_and_waits_for_the_gate_off_the_loop() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    for i in 0..4 {
        put(&c, &format!("http://h/{i}"), format!("body {i}").as_bytes());
    }
    c.shutdown();
    drop(c);
    let c = Cache::open(slow_loader(d.path())).unwrap();
    // The loader indexes one file, then sleeps: wait for that one, so that the key
    // chosen is not the one it is about to index (on a busy machine it may not have
    // started yet).
    let keys: Vec<String> = (0..4).map(|i| format!("http://h/{i}")).collect();
    let indexed = || {
        keys.iter()
            .filter(|k| c.zone.index().contains(key_hash(k)))
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while indexed() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the loader indexes its first file"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let key = keys
        .iter()
        .find(|k| !c.zone.index().contains(key_hash(k)))
        .expect("the loader stops after one file")
        .clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let opener = PoolOpener::default();
    let none = HeaderMap::new();
    let gate = c.zone.hold_gate();
    let mut fut = Box::pin(c.lookup_with(&opener, &key, &none, SystemTime::now()));
    let waited =
        rt.block_on(async { tokio::time::timeout(Duration::from_millis(300), &mut fut).await });
    assert!(waited.is_err(), "the lookup waits while the gate is held");
    assert_eq!(c.stats().disk_fallback_hits, 0);
    drop(gate);
    let hit = match rt.block_on(fut) {
        Lookup::Fresh(h) => h,
        other => panic!("a fallback hit, got {other:?}"),
    };
    let want = format!("body {}", &key["http://h/".len()..]);
    assert_eq!(body_of(&hit), want.as_bytes());
    assert_eq!(c.stats().disk_fallback_hits, 1);
    assert!(
        c.zone.index().contains(key_hash(&key)),
        "indexed by the fallback"
    );
    let calls = opener.calls();
    let kinds: Vec<&str> = calls.iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, ["open", "read", "offload"], "{calls:?}");
    assert!(calls.iter().all(|(_, t)| t == "test-pool"), "{calls:?}");

    // Indexed now: found without the fallback (and without the pool for the gate).
    let before = opener.calls().len();
    assert!(matches!(
        rt.block_on(c.lookup_with(&opener, &key, &HeaderMap::new(), SystemTime::now())),
        Lookup::Fresh(_)
    ));
    assert!(!opener.calls()[before..]
        .iter()
        .any(|(k, _)| *k == "offload"));
    assert_eq!(c.stats().disk_fallback_hits, 1);

    // A free gate is taken on the spot; a purge issued while loading still wins, its
    // unlink done on the pool.
    let other = (0..4)
        .map(|i| format!("http://h/{i}"))
        .find(|k| *k != key && !c.zone.index().contains(key_hash(k)))
        .unwrap();
    // Not indexed: the purge only remembers a rule for the loader and the fallback.
    assert_eq!(c.purge_key(&other, false), 0);
    let before = opener.calls().len();
    let r = rt.block_on(c.lookup_with(&opener, &other, &HeaderMap::new(), SystemTime::now()));
    assert!(matches!(r, Lookup::Miss), "{r:?}");
    let kinds: Vec<&str> = opener.calls()[before..].iter().map(|(k, _)| *k).collect();
    assert_eq!(
        kinds,
        ["open", "read", "offload"],
        "the unlink is offloaded"
    );
    assert!(
        !layout_path(d.path(), &other).exists(),
        "purged file removed"
    );
    c.shutdown();
}

#[test]
fn purge_while_loading_applies_to_files_found_later() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    let mut m = meta(600);
    m.tags = vec!["red".into()];
    put_meta(&c, "http://h/red", &HeaderMap::new(), m, b"r");
    put(&c, "http://h/keep", b"k");
    put(&c, "http://h/soft", b"s");
    c.shutdown();
    drop(c);
    let slow = CacheConfig {
        loader_files: 1,
        loader_sleep: Duration::from_millis(100),
        ..cfg(d.path())
    };
    let c = Cache::open(slow).unwrap();
    c.purge_tag("red", false);
    c.purge_key("http://h/soft", true);
    assert!(c.wait_loaded(Duration::from_secs(10)));
    assert!(get(&c, "http://h/red").is_none());
    assert!(is_stale(&c, "http://h/soft"));
    assert_eq!(get(&c, "http://h/keep").unwrap(), b"k");
    assert_eq!(files(d.path()).len(), 2);
}

#[test]
fn eviction_keeps_disk_use_under_max_size() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(CacheConfig {
        max_size: 200 * 1024,
        ..cfg(d.path())
    })
    .unwrap();
    assert!(c.wait_loaded(Duration::from_secs(10)));
    for i in 0..100 {
        put(&c, &format!("http://h/{i}"), &[i as u8; 8000]);
        if i == 50 {
            // Keep an early object hot.
            assert!(get(&c, "http://h/0").is_some());
        }
        if i % 10 == 9 {
            // The index's access clock ticks 16 times a second: let this use be later.
            std::thread::sleep(Duration::from_millis(70));
            let s = c.stats();
            assert!(
                get(&c, "http://h/0").is_some(),
                "i={i} {s:?} {:?}",
                c.lookup("http://h/0", &HeaderMap::new(), SystemTime::now())
            );
        }
    }
    while manager::pass(&c.zone).more {}
    // Stop the background manager first: an eviction it is making (index first, then
    // the unlink) would otherwise be half seen by the counts below.
    c.shutdown();
    let s = c.stats();
    let on_disk: u64 = files(d.path())
        .iter()
        .map(|(_, l)| storage::disk_size_of(*l))
        .sum();
    assert!(s.disk_bytes <= 200 * 1024, "{s:?}");
    assert!(on_disk <= 200 * 1024, "on disk {on_disk}");
    assert_eq!(on_disk, s.disk_bytes);
    assert!(s.evictions >= 80, "{s:?}");
    assert!(get(&c, "http://h/0").is_some(), "recently used object kept");
    assert!(get(&c, "http://h/99").is_some(), "newest object kept");
    assert!(get(&c, "http://h/1").is_none(), "old unused object evicted");
}

#[test]
fn the_manager_thread_evicts_on_its_own() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(CacheConfig {
        max_size: 64 * 1024,
        ..cfg(d.path())
    })
    .unwrap();
    for i in 0..40 {
        put(&c, &format!("http://h/{i}"), &[1u8; 4000]);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while c.stats().disk_bytes > 64 * 1024 {
        assert!(
            std::time::Instant::now() < deadline,
            "manager never evicted"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    c.shutdown();
}

/// A reload that lowers `max_size` (issue 29: the old zone's limits were kept): the
/// running manager evicts down to the new limit, woken by `set_limits`.
#[test]
fn lowered_limits_apply_to_the_running_manager() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(CacheConfig {
        max_size: 1 << 30,
        ..cfg(d.path())
    })
    .unwrap();
    for i in 0..40 {
        put(&c, &format!("http://h/{i}"), &[1u8; 4000]);
    }
    assert!(c.stats().disk_bytes > 64 * 1024);
    assert_eq!(c.stats().evictions, 0);
    let limits = Limits {
        max_size: 64 * 1024,
        ..c.limits()
    };
    c.set_limits(limits);
    assert_eq!(c.limits(), limits);
    assert_eq!(c.stats().max_size, 64 * 1024);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while c.stats().disk_bytes > 64 * 1024 {
        assert!(
            std::time::Instant::now() < deadline,
            "the new max_size was never applied: {:?}",
            c.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(c.stats().evictions > 0);
    // The opened config is unchanged: only the live limits moved.
    assert_eq!(c.config().max_size, 1 << 30);
    c.shutdown();
}

#[test]
fn keys_zone_budget_is_enforced() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(CacheConfig {
        keys_zone: 8 * 1024,
        ..cfg(d.path())
    })
    .unwrap();
    for i in 0..200 {
        put(&c, &format!("http://h/{i}"), b"x");
    }
    while manager::pass(&c.zone).more {}
    // Stop the background manager first: it may still be deleting while we count.
    c.shutdown();
    let s = c.stats();
    assert!(s.mem_bytes <= 8 * 1024, "{s:?}");
    assert!(s.entries > 10 && s.entries < 200, "{s:?}");
    assert_eq!(files(d.path()).len() as u64, s.entries);
}

#[test]
fn inactive_objects_expire() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(CacheConfig {
        inactive: Duration::from_millis(100),
        ..cfg(d.path())
    })
    .unwrap();
    put(&c, "http://h/old", b"o");
    // Past `inactive` by more than two ticks of the index's access clock (1/16 s).
    std::thread::sleep(Duration::from_millis(300));
    put(&c, "http://h/new", b"n");
    // The manager thread may get there first; either way the end state is the same.
    manager::pass(&c.zone);
    assert!(get(&c, "http://h/old").is_none());
    assert!(get(&c, "http://h/new").is_some());
    assert_eq!(c.stats().expired, 1);
    assert_eq!(files(d.path()).len(), 1);
}

#[test]
fn vary_variants_are_stored_separately() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    let mut m = meta(600);
    m.vary = vec!["accept-encoding".into()];
    let gz = req(&[("Accept-Encoding", "gzip")]);
    let br = req(&[("Accept-Encoding", "br")]);
    put_meta(&c, "http://h/v", &gz, m.clone(), b"gzip body");
    put_meta(&c, "http://h/v", &br, m.clone(), b"br body");
    let body = |r: &HeaderMap| match c.lookup("http://h/v", r, SystemTime::now()) {
        Lookup::Fresh(h) => Some(body_of(&h)),
        _ => None,
    };
    assert_eq!(body(&gz).unwrap(), b"gzip body");
    assert_eq!(
        body(&req(&[("accept-encoding", " gzip ")])).unwrap(),
        b"gzip body"
    );
    assert_eq!(body(&br).unwrap(), b"br body");
    assert!(body(&req(&[("Accept-Encoding", "zstd")])).is_none());
    assert!(body(&HeaderMap::new()).is_none());
    // Purging the URL removes every variant.
    assert_eq!(c.purge_key("http://h/v", false), 2);
    assert!(body(&gz).is_none() && body(&br).is_none());
    assert!(files(d.path()).is_empty());
}

/// A URL first stored without `Vary`, then with it: its plain object stays indexed
/// under the primary key beside the variants, and purging the URL must remove it too
/// (it used to stay, and be served again once the `Vary` record went with the purge).
#[test]
fn purging_a_url_removes_its_plain_object_stored_before_a_vary() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    let k = "http://h/pv";
    put(&c, k, b"plain");
    let mut m = meta(600);
    m.vary = vec!["accept-encoding".into()];
    let gz = req(&[("Accept-Encoding", "gzip")]);
    put_meta(&c, k, &gz, m, b"gzip body");
    assert_eq!(c.stats().entries, 2);
    assert_eq!(c.purge_key(k, false), 2);
    assert_eq!(c.stats().entries, 0);
    for r in [HeaderMap::new(), gz] {
        assert!(
            !matches!(c.lookup(k, &r, SystemTime::now()), Lookup::Fresh(_)),
            "a purged object is served"
        );
    }
    assert!(files(d.path()).is_empty());
}

#[test]
fn purge_by_key_prefix_and_tag() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    for i in 0..5 {
        put(&c, &format!("http://h/a/{i}"), b"a");
    }
    put(&c, "http://h/ab", b"ab");
    put(&c, "http://h/b/1", b"b");
    let mut m = meta(600);
    m.tags = vec!["t1".into(), "t2".into()];
    put_meta(&c, "http://h/tagged1", &HeaderMap::new(), m.clone(), b"t");
    put_meta(&c, "http://h/tagged2", &HeaderMap::new(), m, b"t");

    assert_eq!(c.purge_key("http://h/b/1", false), 1);
    assert_eq!(c.purge_key("http://h/b/1", false), 0);
    assert_eq!(c.purge_prefix("http://h/a/", false), 5);
    assert!(get(&c, "http://h/ab").is_some(), "prefix is exact");
    assert_eq!(c.purge_tag("t2", false), 2);
    assert_eq!(c.purge_tag("t1", false), 0, "tag index follows removals");
    assert_eq!(c.stats().entries, 1);
    assert_eq!(c.stats().purged, 8);
    assert_eq!(files(d.path()).len(), 1);
}

#[test]
fn purging_an_objects_url_reaches_its_slices() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    let k = "http://h/v.mp4";
    put(&c, k, b"whole");
    for n in 0..3 {
        let mut m = meta(600);
        m.tags = vec![crate::key::slice_tag(k), "movie".into()];
        put_meta(
            &c,
            &crate::key::slice_key(k, 65536, n),
            &HeaderMap::new(),
            m,
            b"s",
        );
    }
    let mut other = meta(600);
    other.tags = vec![crate::key::slice_tag("http://h/v.mp")];
    put_meta(
        &c,
        &crate::key::slice_key("http://h/v.mp", 65536, 0),
        &HeaderMap::new(),
        other,
        b"o",
    );
    assert_eq!(c.slices_of(k).len(), 3);
    // The object and its three slices; another object's slice stays.
    assert_eq!(c.purge_key(k, false), 4);
    assert!(c.slices_of(k).is_empty());
    assert_eq!(c.stats().entries, 1);
    // Slices' keys start with the object's: a prefix purge reaches them.
    put(&c, k, b"whole");
    put_meta(
        &c,
        &crate::key::slice_key(k, 65536, 9),
        &HeaderMap::new(),
        meta(600),
        b"s",
    );
    assert_eq!(c.purge_prefix("http://h/v.mp4", false), 2);
}

#[test]
fn soft_purge_marks_stale_persists_and_refresh_clears_it() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    put(&c, "http://h/s", b"soft");
    assert_eq!(c.purge_prefix("http://h/", true), 1);
    let Lookup::Stale(hit) = c.lookup("http://h/s", &HeaderMap::new(), SystemTime::now()) else {
        panic!("soft purge must give stale");
    };
    assert_eq!(body_of(&hit), b"soft");
    drop(hit);
    c.shutdown();
    drop(c);
    // The flag survives a restart.
    let c = open(d.path());
    let Lookup::Stale(hit) = c.lookup("http://h/s", &HeaderMap::new(), SystemTime::now()) else {
        panic!("soft purge must survive restart");
    };
    // A 304 revalidation clears it without touching the body.
    let mut m = (*hit.meta).clone();
    m.header_block.extend_from_slice(b"X-Revalidated: 1\r\n");
    c.refresh(&hit, m).unwrap();
    drop(hit);
    let Lookup::Fresh(hit) = c.lookup("http://h/s", &HeaderMap::new(), SystemTime::now()) else {
        panic!("refreshed object must be fresh");
    };
    assert!(hit.meta.header_block.ends_with(b"X-Revalidated: 1\r\n"));
    assert_eq!(body_of(&hit), b"soft");
}

#[test]
fn refresh_with_a_header_too_big_for_the_slot_rewrites_the_file() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    let body = vec![5u8; 50_000];
    put_meta(&c, "k", &HeaderMap::new(), meta(0), &body);
    let Lookup::Stale(hit) = c.lookup("k", &HeaderMap::new(), SystemTime::now()) else {
        panic!("expected stale");
    };
    let mut m = meta(600);
    m.header_block = vec![b'h'; 9000];
    c.refresh(&hit, m).unwrap();
    drop(hit);
    let Lookup::Fresh(hit) = c.lookup("k", &HeaderMap::new(), SystemTime::now()) else {
        panic!("expected fresh");
    };
    assert_eq!(hit.meta.header_block.len(), 9000);
    assert_eq!(body_of(&hit), body);
    assert_eq!(files(d.path()).len(), 1);
    assert_eq!(
        c.stats().disk_bytes,
        storage::disk_size_of(hit.body_offset + 50_000)
    );
}

#[test]
fn a_file_damaged_behind_our_back_is_never_served() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    put(&c, "k", &[1u8; 1000]);
    let p = c.path_for(key_hash("k"));
    let f = fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(100).unwrap();
    assert!(matches!(
        c.lookup("k", &HeaderMap::new(), SystemTime::now()),
        Lookup::Miss
    ));
    assert_eq!(c.stats().entries, 0);
    // Deleted file: also a miss.
    put(&c, "k2", b"x");
    fs::remove_file(c.path_for(key_hash("k2"))).unwrap();
    assert!(matches!(
        c.lookup("k2", &HeaderMap::new(), SystemTime::now()),
        Lookup::Miss
    ));
}

#[test]
fn write_errors_are_counted_and_reported() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    // Block the level directory of "k" with a regular file: create fails (ENOTDIR).
    let dir = c.zone.layout().dir_for(key_hash("k"));
    let top = dir.parent().unwrap();
    fs::create_dir_all(top).unwrap();
    fs::write(&dir, b"not a dir").unwrap();
    assert!(c.begin_write("k", &HeaderMap::new(), meta(600)).is_err());
    let s = c.stats();
    assert_eq!(s.write_errors, 1);
    assert!(s.last_write_error.unwrap().starts_with("create"));
}

#[test]
fn replacing_an_object_keeps_accounting_exact() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    put(&c, "k", &[1u8; 10_000]);
    put(&c, "k", &[2u8; 100]);
    assert_eq!(get(&c, "k").unwrap(), vec![2u8; 100]);
    let s = c.stats();
    assert_eq!(s.entries, 1);
    let on_disk: u64 = files(d.path())
        .iter()
        .map(|(_, l)| storage::disk_size_of(*l))
        .sum();
    assert_eq!(s.disk_bytes, on_disk);
}

#[test]
fn concurrent_lookups_writes_and_purges() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(CacheConfig {
        max_size: 400 * 1024,
        ..cfg(d.path())
    })
    .unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..300 {
                    let n = (i * 13 + t * 7) % 60;
                    let k = format!("http://h/{n}");
                    let body = vec![n as u8; 1000 + n * 10];
                    match i % 5 {
                        0 | 1 => put(&c, &k, &body),
                        4 if i % 20 == 4 => {
                            c.purge_key(&k, false);
                        }
                        _ => {
                            if let Some(b) = get(&c, &k) {
                                // Headers and body always belong to the same object.
                                assert_eq!(b, body, "torn hit for {k}");
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    while manager::pass(&c.zone).more {}
    // Stop the background manager first: an eviction it is making (index first, then
    // the unlink) would otherwise be half seen by the counts below.
    c.shutdown();
    let s = c.stats();
    let on_disk: u64 = files(d.path())
        .iter()
        .map(|(_, l)| storage::disk_size_of(*l))
        .sum();
    assert_eq!(s.disk_bytes, on_disk, "{s:?}");
    assert!(s.disk_bytes <= 400 * 1024);
}

/// Stores the gzip copy of the object `key` names now.
fn put_coded(c: &Arc<Cache>, key: &str, body: &[u8]) {
    let Lookup::Fresh(id) = c.lookup(key, &HeaderMap::new(), SystemTime::now()) else {
        panic!("identity stored");
    };
    let mut m = crate::coded::coded_meta(&id.meta, "gzip");
    m.body_len = body.len() as u64;
    let mut w = c.begin_write_keyed(m).unwrap();
    w.write(body).unwrap();
    w.finish().unwrap();
}

fn coded(c: &Cache, key: &str) -> Option<HitEntry> {
    let ph = key_hash(key);
    ready(c.lookup_coded(
        None,
        &BlockingOpener,
        key,
        ph,
        &HeaderMap::new(),
        SystemTime::now(),
        "gzip",
        |_| true,
    ))
}

#[test]
fn coded_copies_follow_their_identity_through_purge_refresh_and_new_bodies() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    let key = "http://h/page";
    assert!(coded(&c, key).is_none(), "nothing stored");
    put(&c, key, b"identity body one");
    assert!(coded(&c, key).is_none(), "no copy yet");
    put_coded(&c, key, b"GZ1");
    let hit = coded(&c, key).expect("the copy");
    assert_eq!(body_of(&hit), b"GZ1");
    assert!(hit
        .meta
        .header_block
        .ends_with(b"Vary: Accept-Encoding\r\n"));
    assert_eq!(hit.meta.etag.as_deref(), Some("\"e-gzip\""));
    drop(hit);
    assert!(
        ready(c.lookup_coded(
            None,
            &BlockingOpener,
            key,
            key_hash(key),
            &HeaderMap::new(),
            SystemTime::now(),
            "br",
            |_| true
        ))
        .is_none(),
        "another coding is another copy"
    );

    // A revalidation of the identity carries over to the copy.
    let Lookup::Fresh(id) = c.lookup(key, &HeaderMap::new(), SystemTime::now()) else {
        panic!()
    };
    let mut m = (*id.meta).clone();
    m.header_block.extend_from_slice(b"X-Revalidated: 1\r\n");
    c.refresh(&id, m).unwrap();
    drop(id);
    let hit = coded(&c, key).expect("still there");
    let block = String::from_utf8(hit.meta.header_block.clone()).unwrap();
    assert!(block.contains("X-Revalidated: 1\r\n"), "{block}");
    assert!(block.contains("Content-Encoding: gzip\r\n"), "{block}");
    assert_eq!(body_of(&hit), b"GZ1", "same bytes");
    drop(hit);

    // Soft purge of the URL: the identity is stale, so the copy is not served.
    assert_eq!(c.purge_key(key, true), 2, "both objects marked");
    assert!(coded(&c, key).is_none());

    // A new identity body: the old copy never answers for it.
    put(&c, key, b"identity body two");
    assert!(coded(&c, key).is_none(), "the copy belongs to the old body");
    put_coded(&c, key, b"GZ2");
    assert_eq!(body_of(&coded(&c, key).unwrap()), b"GZ2");

    // A purge of the URL removes every copy with the identity.
    assert!(c.purge_key(key, false) >= 2);
    assert!(coded(&c, key).is_none());
    assert!(get(&c, key).is_none());
}

#[test]
fn coded_copies_survive_a_restart() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    put(&c, "http://h/r", b"identity");
    put_coded(&c, "http://h/r", b"GZ");
    c.shutdown();
    drop(c);
    let c = open(d.path());
    assert_eq!(body_of(&coded(&c, "http://h/r").expect("reloaded")), b"GZ");
}

#[test]
fn a_file_holding_another_key_is_never_served() {
    // The index names a file by hash only; the key is checked against the file's header
    // on every lookup the worker's front does not answer. Here the index entry for B
    // points at a file that holds A (what a hash collision, or a file moved behind our
    // back, looks like): B is a miss, the entry is dropped, A is untouched.
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    put(&c, "http://h/a", b"object a");
    let (ha, hb) = (key_hash("http://h/a"), key_hash("http://h/b"));
    let pb = c.path_for(hb);
    fs::create_dir_all(pb.parent().unwrap()).unwrap();
    fs::copy(c.path_for(ha), &pb).unwrap();
    let ino = fs::metadata(&pb).unwrap().ino();
    let (ma, _) = c.zone.stored_meta(ha).unwrap();
    let mut mb = ma.clone();
    mb.key = "http://h/b".into();
    c.zone.index().insert(NewEntry {
        hash: hb,
        meta: &mb,
        disk_size: 4096,
        ino,
    });
    assert!(
        get(&c, "http://h/b").is_none(),
        "another key's bytes are never served"
    );
    assert!(!c.zone.index().contains(hb), "the bad entry is dropped");
    assert_eq!(c.stats().corrupt, 1);
    assert_eq!(get(&c, "http://h/a").as_deref(), Some(&b"object a"[..]));
}

#[test]
fn hits_read_the_header_once_then_the_front_answers() {
    // Without a worker's front, every lookup reads the header (the index keeps no
    // metadata); through a front, the first lookup reads it and the rest do not, and a
    // purge makes the front ask again.
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    put(&c, "http://h/f", b"front");
    let local = RefCell::new(Local::disabled());
    let now = SystemTime::now();
    for _ in 0..3 {
        match c.lookup_in(&local, "http://h/f", &HeaderMap::new(), now) {
            Lookup::Fresh(h) => assert_eq!(body_of(&h), b"front"),
            other => panic!("{other:?}"),
        }
    }
    let st = local.borrow().front.stats();
    assert_eq!((st.misses, st.hits), (1, 2), "{st:?}");
    assert_eq!(c.purge_key("http://h/f", false), 1);
    assert!(matches!(
        c.lookup_in(&local, "http://h/f", &HeaderMap::new(), now),
        Lookup::Miss
    ));
}

#[test]
fn a_front_follows_the_primarys_vary_list() {
    // The worker's front remembers each primary's `Vary` names (none included) by its
    // stripe's version: a new `Vary`, another `Vary` and a purge must each be seen by
    // the next lookup through the same front, not the names it remembered.
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    let local = RefCell::new(Local::disabled());
    let k = "http://h/w";
    let lookup = |r: &HeaderMap| match c.lookup_in(&local, k, r, SystemTime::now()) {
        Lookup::Fresh(h) => Some(body_of(&h)),
        _ => None,
    };
    let gz = req(&[("Accept-Encoding", "gzip")]);
    let fr_gz = req(&[("Accept-Language", "fr"), ("Accept-Encoding", "gzip")]);
    // Nothing stored: remembered as "no Vary".
    assert!(lookup(&gz).is_none());
    // Now a response that varies on Accept-Encoding.
    let mut ae = meta(600);
    ae.vary = vec!["accept-encoding".into()];
    put_meta(&c, k, &gz, ae, b"gzip body");
    for _ in 0..2 {
        assert_eq!(lookup(&gz).as_deref(), Some(&b"gzip body"[..]));
    }
    // Then on Accept-Language: the gzip variant is still stored, but the key now
    // takes the language, not the coding.
    let mut al = meta(600);
    al.vary = vec!["accept-language".into()];
    put_meta(&c, k, &fr_gz, al, b"fr body");
    for _ in 0..2 {
        assert_eq!(lookup(&fr_gz).as_deref(), Some(&b"fr body"[..]));
    }
    // Purged, then stored again without Vary: the plain key again.
    assert_eq!(c.purge_key(k, false), 2);
    assert!(lookup(&fr_gz).is_none());
    put(&c, k, b"plain again");
    assert_eq!(lookup(&fr_gz).as_deref(), Some(&b"plain again"[..]));
}

#[test]
fn a_snapshot_restores_the_index_and_the_walk_corrects_a_stale_one() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    assert!(c.wait_loaded(Duration::from_secs(10)));
    for i in 0..30 {
        put(
            &c,
            &format!("http://h/s/{i}"),
            format!("body {i}").as_bytes(),
        );
    }
    let mut m = meta(600);
    m.vary = vec!["accept-encoding".into()];
    let gz = req(&[("Accept-Encoding", "gzip")]);
    put_meta(&c, "http://h/v", &gz, m.clone(), b"gzip body");
    let mut t = meta(600);
    t.tags = vec!["red".into()];
    put_meta(&c, "http://h/t", &HeaderMap::new(), t, b"tagged");
    c.shutdown();
    assert_eq!(c.write_snapshot().unwrap(), 32);
    let disk = c.stats().disk_bytes;
    drop(c);
    // While stopped: one object's file disappears, and a file the snapshot never saw
    // appears (written by a cache that is then dropped without a snapshot).
    fs::remove_file(layout_path(d.path(), "http://h/s/0")).unwrap();
    let other = tempfile::tempdir().unwrap();
    let o = open(other.path());
    put(&o, "http://h/new", b"new");
    o.shutdown();
    let from = layout_path(other.path(), "http://h/new");
    let to = layout_path(d.path(), "http://h/new");
    fs::create_dir_all(to.parent().unwrap()).unwrap();
    fs::copy(from, &to).unwrap();

    let c = open(d.path());
    assert!(!d.path().join(crate::snapshot::FILE).exists(), "taken");
    // The whole index at once, before the loader's walk.
    assert_eq!(c.stats().loader.snapshot, 32);
    assert!(c.stats().disk_bytes >= disk);
    assert_eq!(
        c.zone
            .index()
            .vary_of(key_hash("http://h/v"))
            .map(|v| v.len()),
        Some(1)
    );
    assert_eq!(c.zone.index().purge_index().tagged("red").len(), 1);
    assert!(c.wait_loaded(Duration::from_secs(10)));
    let s = c.stats();
    assert_eq!(
        (s.loader.snapshot, s.loader.unseen, s.loader.loaded),
        (32, 1, 1),
        "{s:?}"
    );
    assert_eq!(get(&c, "http://h/s/7").as_deref(), Some(&b"body 7"[..]));
    assert!(get(&c, "http://h/s/0").is_none());
    assert_eq!(get(&c, "http://h/new").as_deref(), Some(&b"new"[..]));
    assert_eq!(c.purge_tag("red", false), 1);
    assert_eq!(c.purge_key("http://h/v", false), 1);
    assert_eq!(c.purge_prefix("http://h/s/", false), 29);
    assert_eq!(c.stats().entries, 1);
}

/// Spare temp files: made in the root by one refill, an object begun on one (no file
/// system call) is committed into directories that did not exist yet, and what is
/// left is removed at shutdown.
#[test]
fn an_object_begun_on_a_spare_commits_into_new_directories() {
    let d = tempfile::tempdir().unwrap();
    let c = open(d.path());
    let (none, refill) = c.take_spare();
    assert!(none.is_none(), "none before a refill");
    assert!(refill, "the first taker refills");
    assert!(!c.spares_low(), "one refill at a time");
    c.refill_spares();
    let spares = |dir: &Path| {
        files(dir)
            .into_iter()
            .filter(|(p, _)| {
                p.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with("spare.tmp.")
            })
            .count()
    };
    assert_eq!(spares(d.path()), SPARE_LOW + SPARE_BATCH);
    assert!(!c.spares_low(), "full");
    let key = "http://h/spare";
    let dir = c.path_for(key_hash(key)).parent().unwrap().to_path_buf();
    assert!(!dir.exists());
    let mut m = meta(600);
    m.key = key.into();
    m.body_len = 5;
    let mut w = c.begin_write_spare(m, c.take_spare().0.unwrap()).unwrap();
    w.write(b"hello").unwrap();
    w.finish().unwrap();
    assert_eq!(get(&c, key).unwrap(), b"hello");
    assert!(dir.exists());
    assert_eq!(
        spares(d.path()),
        SPARE_LOW + SPARE_BATCH - 1,
        "renamed away"
    );
    // An object begun on a spare and dropped takes its spare's name with it.
    let mut m = meta(600);
    m.key = "http://h/dropped".into();
    drop(c.begin_write_spare(m, c.take_spare().0.unwrap()).unwrap());
    assert_eq!(spares(d.path()), SPARE_LOW + SPARE_BATCH - 2);
    c.shutdown();
    assert_eq!(spares(d.path()), 0, "shutdown removes the rest");
    assert_eq!(get(&c, key).unwrap(), b"hello");
}

/// A killed process's spare temp files are removed by the next one's loader; those of
/// a process still running (the old one of a binary upgrade) are left to it.
#[test]
fn the_loader_removes_spares_of_earlier_processes() {
    let d = tempfile::tempdir().unwrap();
    // Pid 4294967295 cannot exist: a process that is gone.
    let old = d.path().join("spare.tmp.4294967295-1.7");
    fs::write(&old, b"").unwrap();
    let c = open(d.path());
    assert!(!old.exists());
    assert!(c.spares_low());
    c.refill_spares();
    let before = files(d.path()).len();
    // A second open of the directory (another token, as a restarted process has)
    // removes them: what a crash of this one would leave.
    let c2 = open(d.path());
    assert_eq!(files(d.path()).len(), before - SPARE_LOW - SPARE_BATCH);
    c2.shutdown();
    c.shutdown();
    // A live process's: this test's parent (cargo, or the shell) is running.
    let parent = std::os::unix::process::parent_id();
    let live = d.path().join(format!("spare.tmp.{parent}-1.7"));
    fs::write(&live, b"").unwrap();
    let c3 = open(d.path());
    assert!(live.exists(), "a running process's spare is left alone");
    c3.shutdown();
}
