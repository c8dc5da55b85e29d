//! Warm 4 KiB reads (page cache hits) through each backend: the cost of the hand-off
//! that `auto` exists to avoid. `cargo bench -p edge-aio` prints ns per read, one read
//! at a time (latency) and 32 tasks at once (throughput on one worker).
//!
//! Buffers are page-aligned [`AlignedBuf`]s: with plain `Vec`s (16-byte aligned from
//! malloc) the kernel's copy out of the page cache was 2-3x slower here (2.2-3.4 µs
//! instead of 0.8 µs per inline 4 KiB read), which would drown the hand-off costs
//! this measures. Worth remembering for the server's read buffers.

use edge_aio::{AlignedBuf, Engine, EngineConfig, Mode, OpenOptions, QueueKind, SharedPool};
use std::time::Instant;

const FILE: usize = 1 << 20;
const READ: usize = 4096;

fn bench(name: &str, cfg: EngineConfig, path: &std::path::Path) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pool = SharedPool::new(&cfg);
    let (e, fallback) = Engine::new(&cfg, &pool).unwrap();
    if let Some(why) = fallback {
        println!("{name:<18} skipped: {why}");
        return;
    }
    tokio::task::LocalSet::new().block_on(&rt, async {
        let f = e.open(path, &OpenOptions::new()).await.unwrap();
        let n = 20_000usize;
        let mut buf = AlignedBuf::new(READ, 4096);
        let t = Instant::now();
        for i in 0..n {
            buf.clear();
            let off = ((i * 7 * READ) % FILE) as u64;
            let (r, b) = e.read_at(&f, off, READ, buf).await;
            assert_eq!(r.unwrap(), READ);
            buf = b;
        }
        let seq = t.elapsed().as_nanos() as f64 / n as f64;

        let (tasks, per) = (32usize, 1000usize);
        let t = Instant::now();
        let handles: Vec<_> = (0..tasks)
            .map(|k| {
                let (e, f) = (e.clone(), f.clone());
                tokio::task::spawn_local(async move {
                    let mut buf = AlignedBuf::new(READ, 4096);
                    for i in 0..per {
                        buf.clear();
                        let off = (((k * per + i) * 3 * READ) % FILE) as u64;
                        let (r, b) = e.read_at(&f, off, READ, buf).await;
                        assert_eq!(r.unwrap(), READ);
                        buf = b;
                    }
                })
            })
            .collect();
        for h in handles {
            h.await.unwrap();
        }
        let conc = t.elapsed().as_nanos() as f64 / (tasks * per) as f64;
        let s = e.stats().snapshot();
        println!(
            "{name:<18} {seq:>8.0} ns/read sequential {conc:>8.0} ns/read 32 tasks  (inline {} handed off {} overflows {})",
            s.inline_hits, s.handoffs, s.overflows
        );
    });
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, vec![7u8; FILE]).unwrap();
    let _ = std::fs::read(&path).unwrap(); // warm the page cache
    let base = EngineConfig {
        threads: 4,
        ..EngineConfig::default()
    };
    let cases = [
        ("off", Mode::Off, QueueKind::Mutex),
        ("threads mutex", Mode::Threads, QueueKind::Mutex),
        ("threads lockfree", Mode::Threads, QueueKind::LockFree),
        ("io_uring", Mode::IoUring, QueueKind::Mutex),
        ("auto", Mode::Auto, QueueKind::Mutex),
    ];
    for (name, mode, queue) in cases {
        let cfg = EngineConfig {
            mode,
            queue,
            ..base
        };
        bench(name, cfg, &path);
    }
}
