//! Hit-path micro benchmark: `cargo bench -p edge-cache --bench lookup`.
//!
//! Measures, on a real temp directory (page cache warm): the index alone
//! (`Index::get`), a full `Cache::lookup` (index + open + fstat, the file closed on
//! drop), and a 1 KiB object write (temp file, write, rename, index). Each is run on 1
//! thread and on N threads (N = available cores) to show the sharded index scales.
//! Numbers are ns per operation per thread; the machine is shared, so compare ratios.
//!
//! The hot-key part: every thread looks up the same object, as every worker does for a
//! viral object. Through the shared index alone (mutex + LRU move per lookup) and
//! through each thread's own front ([`edge_cache::local::Local`]: a version load and a
//! thread-local map), reported as the rate of N threads over the rate of 1.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use edge_cache::{key_hash, Cache, CacheConfig, Lookup, ObjectMeta};
use edge_http::HeaderMap;

const OBJECTS: usize = 10_000;
const OPS: usize = 200_000;

fn per_op(threads: usize, ops: usize, f: impl Fn(usize) + Sync) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let f = &f;
            s.spawn(move || {
                for i in 0..ops {
                    f(i * 7919 + t * 104_729);
                }
            });
        }
    });
    start.elapsed().as_nanos() as f64 / ops as f64
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::open(CacheConfig {
        path: dir.path().to_path_buf(),
        max_size: 1 << 40,
        ..Default::default()
    })
    .expect("open");
    assert!(cache.wait_loaded(Duration::from_secs(10)));
    let keys: Vec<String> = (0..OBJECTS)
        .map(|i| format!("http://bench/obj/1k/{i}"))
        .collect();
    let body = vec![7u8; 1024];
    let write = |cache: &Arc<Cache>, k: &str| {
        let mut m = ObjectMeta::new("", 200, SystemTime::now());
        m.header_block = b"Content-Type: application/octet-stream\r\nETag: \"x\"\r\n".to_vec();
        m.freshness.lifetime = Duration::from_secs(3600);
        m.body_len = 1024;
        let mut w = cache.begin_write(k, &HeaderMap::new(), m).expect("begin");
        w.write(&body).expect("write");
        w.finish().expect("finish");
    };
    let t = Instant::now();
    for k in &keys {
        write(&cache, k);
    }
    let write_ns = t.elapsed().as_nanos() as f64 / OBJECTS as f64;
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let req = HeaderMap::new();
    let now = SystemTime::now();
    let index_get = |i: usize| {
        let k = &keys[i % OBJECTS];
        let _ = std::hint::black_box(cache_index_get(&cache, k, &req, now));
    };
    let lookup = |i: usize| {
        let k = &keys[i % OBJECTS];
        match cache.lookup(k, &req, now) {
            Lookup::Fresh(h) => {
                std::hint::black_box(h.body_len);
            }
            _ => panic!("expected a hit"),
        }
    };
    println!("edge-cache hit path, {OBJECTS} objects of 1 KiB, ns/op per thread (shared machine: compare ratios)");
    println!("write 1 KiB object (create+write+rename+index): {write_ns:.0} ns");
    for n in [1, threads] {
        println!(
            "threads={n}: primary-key hash + vary check + index get: {:.0} ns | full lookup (index+open+fstat+close): {:.0} ns",
            per_op(n, OPS, index_get),
            per_op(n, OPS / 4, lookup)
        );
    }
    hot_key(&cache, &keys[0], threads.max(2));
    cache.shutdown();
}

/// Lookups per second of `n` threads together on one key, over 1 thread's.
fn hot_key(cache: &Arc<Cache>, key: &str, n: usize) {
    use edge_cache::local::{FilesConfig, Local};
    use std::cell::RefCell;
    let req = HeaderMap::new();
    let now = SystemTime::now();
    let rate = |threads: usize, front: bool| -> f64 {
        let start = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    let local = RefCell::new(Local::new(
                        None,
                        FilesConfig {
                            max: 16,
                            inactive_ticks: 1000,
                        },
                    ));
                    for _ in 0..OPS {
                        if front {
                            match cache.lookup_in(&local, key, &req, now) {
                                Lookup::Fresh(h) => {
                                    std::hint::black_box(h.body_len);
                                }
                                _ => panic!("expected a hit"),
                            }
                        } else {
                            std::hint::black_box(cache.index_probe(key_hash(key)));
                        }
                    }
                });
            }
        });
        (threads * OPS) as f64 / start.elapsed().as_secs_f64()
    };
    for (name, front) in [
        ("shared index (mutex, LRU move)", false),
        ("worker front + fd cache", true),
    ] {
        let one = rate(1, front);
        let many = rate(n, front);
        println!(
            "hot key, {name}: 1 thread {:.1} M/s, {n} threads {:.1} M/s = {:.2}x",
            one / 1e6,
            many / 1e6,
            many / one
        );
    }
    index_at_scale();
}

/// The index alone at a million objects: its memory per object, and the in-memory walk
/// behind a purge by prefix (one directory of 64 selected).
fn index_at_scale() {
    const N: usize = 1_000_000;
    let rss0 = rss_bytes();
    let idx = edge_cache::index::Index::new();
    let t = Instant::now();
    for i in 0..N {
        let key = format!("http://bench/dir{}/obj/{i}", i % 64);
        let m = ObjectMeta::new(key.as_str(), 200, SystemTime::now());
        idx.insert(edge_cache::index::NewEntry {
            hash: key_hash(&key),
            meta: &m,
            disk_size: 4096,
            ino: i as u64,
        });
    }
    let insert_ns = t.elapsed().as_nanos() as f64 / N as f64;
    let rss1 = rss_bytes();
    edge_cache::manager::trim_heap();
    let rss2 = rss_bytes();
    println!(
        "index at {N} objects: resident {:.1} bytes per object, {:.1} after returning freed heap",
        (rss1 - rss0) as f64 / N as f64,
        (rss2 - rss0) as f64 / N as f64
    );
    let pick = idx.purge_index().pick_dirs("http://bench/dir7/");
    let t = Instant::now();
    let found = idx.in_dirs(&|d| pick.wants(d)).len();
    let walk = t.elapsed();
    println!(
        "index at {N} objects: {:.1} bytes per object allocated, insert {insert_ns:.0} ns, \
         prefix walk {:.1} ms ({found} objects in the directory)",
        idx.allocated_bytes() as f64 / N as f64,
        walk.as_secs_f64() * 1e3
    );
}

/// The index part of a lookup without the file open (what an fd cache would leave).
fn cache_index_get(cache: &Cache, key: &str, _req: &HeaderMap, _now: SystemTime) -> bool {
    cache.index_probe(key_hash(key))
}

/// This process's resident set (statm), in bytes.
fn rss_bytes() -> i64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: i64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}
