//! Hit-path micro benchmark: `cargo bench -p edge-cache --bench lookup`.
//!
//! Measures, on a real temp directory (page cache warm): the index alone
//! (`Index::get`), a full `Cache::lookup` (index + open + fstat, the file closed on
//! drop), and a 1 KiB object write (temp file, write, rename, index). Each is run on 1
//! thread and on N threads (N = available cores) to show the sharded index scales.
//! Numbers are ns per operation per thread; the machine is shared, so compare ratios.

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
    cache.shutdown();
}

/// The index part of a lookup without the file open (what an fd cache would leave).
fn cache_index_get(cache: &Cache, key: &str, _req: &HeaderMap, _now: SystemTime) -> bool {
    cache.index_probe(key_hash(key), key)
}
