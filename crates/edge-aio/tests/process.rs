//! Tests that count process-wide things (fds, threads, rings). They hold one lock, so
//! no two of them run at once; this binary has no other tests.

mod common;

use common::*;
use edge_aio::{Engine, EngineConfig, Mode, OpenOptions, SharedPool};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn one_thread(b: Backend) -> EngineConfig {
    EngineConfig {
        threads: 1,
        ..config(b)
    }
}

#[test]
fn pool_threads_are_named_and_joined() {
    let _g = serial();
    let before = aio_threads();
    let cfg = EngineConfig {
        mode: Mode::Threads,
        threads: 3,
        ..EngineConfig::default()
    };
    let pool = SharedPool::new(&cfg);
    assert_eq!(
        aio_threads(),
        before,
        "nothing starts before the first engine"
    );
    let (a, _) = Engine::new(&cfg, &pool).unwrap();
    // The pool is whole when the engine is: every thread runs and bears its name.
    assert_eq!(aio_threads(), before + 3);
    let (b, _) = Engine::new(&cfg, &pool).unwrap();
    assert_eq!(aio_threads(), before + 3, "a second worker shares the pool");
    assert!(Arc::ptr_eq(a.pool().unwrap(), b.pool().unwrap()));
    let off = EngineConfig {
        mode: Mode::Off,
        ..cfg
    };
    let (o, _) = Engine::new(&off, &SharedPool::new(&off)).unwrap();
    assert!(o.pool().is_none() && Engine::off().pool().is_none());
    assert_eq!(Engine::off().mode(), Mode::Off);
    drop((a, b, pool));
    assert_eq!(aio_threads(), before, "threads joined with the last handle");
}

/// Under io_uring the worker owns a ring (an `anon_inode:[io_uring]` fd); dropping the
/// engine with reads still queued in the SQ submits them, waits for their CQEs, then
/// closes the ring.
#[test]
fn io_uring_owns_a_ring_and_drop_drains_it() {
    let _g = serial();
    let (rings, fds) = (ring_fds(), fd_count());
    let data = pattern(64 * 1024);
    let (_dir, path) = file_with(&data, "f");
    let ran = run_cfg(config(Backend::IoUring), |e| async move {
        assert_eq!(ring_fds(), rings + 1);
        let f = e.open(&path, &OpenOptions::new()).await.unwrap();
        let mut started = Vec::new();
        for i in 0..16u64 {
            started.push(start(e.read_at(&f, i * 4096, 4096, Vec::new())).await);
        }
        assert_eq!(e.stats().in_flight(), 16, "pushed, not yet submitted");
        drop(started);
        drop(f);
        drop(e); // blocks until the 16 CQEs are in
        assert_eq!(ring_fds(), rings);
    });
    if ran {
        assert_eq!(fd_count(), fds, "ring, eventfd and files all closed");
    }
}

/// Futures dropped mid-flight leak nothing: the reads' fd is closed once their
/// completions arrive, and opens that complete for nobody have their fd closed.
fn cancel_leaks_no_fd(b: Backend) {
    let _g = serial();
    let data = pattern(256 * 1024);
    let (dir, path) = file_with(&data, "f");
    let pool_based = matches!(b, Backend::ThreadsMutex | Backend::ThreadsLockFree);
    run_cfg(one_thread(b), |e| async move {
        let ro = OpenOptions::new();
        // Warm up: the driver task and its eventfd registration exist from now on.
        let w = e.open(&path, &OpenOptions::new()).await.unwrap();
        let (r, _) = e.read_at(&w, 0, 10, Vec::new()).await;
        r.unwrap();
        e.close(w).await.unwrap();
        let base = fd_count();
        let f = e.open(&path, &ro).await.unwrap();

        // With the single pool thread held in a FIFO open, everything below is still
        // queued when its future is dropped.
        let mut fifo = pool_based.then(|| Fifo::new(dir.path()));
        let mut blocker = None;
        if let Some(fifo) = &fifo {
            let pool = e.pool().unwrap().clone();
            blocker = Some(start(e.open(fifo.path.clone(), &ro)).await);
            until("the pool thread to block", || pool.queue_depth() == 0).await;
        }
        let mut reads = Vec::new();
        let mut opens = Vec::new();
        for i in 0..16u64 {
            reads.push(start(e.read_at(&f, i * 8192, 8192, Vec::new())).await);
            opens.push(start(e.open(&path, &ro)).await);
        }
        let in_flight = e.stats().in_flight();
        if pool_based {
            assert_eq!(in_flight, 1 + 32, "all queued behind the FIFO open");
        }
        drop((reads, opens, blocker));
        drop(f);
        if let Some(fifo) = &mut fifo {
            fifo.release();
        }
        drained(&e).await;
        assert_eq!(
            fd_count(),
            base,
            "{b:?}: no fd leaked ({in_flight} were in flight)"
        );

        // And the engine still reads the right bytes.
        let f = e.open(&path, &OpenOptions::new()).await.unwrap();
        let (r, buf) = e.read_exact_at(&f, 100_000, 5000, Vec::new()).await;
        r.unwrap();
        assert_eq!(buf, &data[100_000..105_000]);
    });
}

#[test]
fn cancel_leaks_no_fd_off() {
    cancel_leaks_no_fd(Backend::Off);
}

#[test]
fn cancel_leaks_no_fd_threads_mutex() {
    cancel_leaks_no_fd(Backend::ThreadsMutex);
}

#[test]
fn cancel_leaks_no_fd_threads_lockfree() {
    cancel_leaks_no_fd(Backend::ThreadsLockFree);
}

#[test]
fn cancel_leaks_no_fd_io_uring() {
    cancel_leaks_no_fd(Backend::IoUring);
}

#[test]
fn cancel_leaks_no_fd_auto() {
    cancel_leaks_no_fd(Backend::Auto);
}

/// Dropping a pool engine whose (orphaned) ops are still queued blocks until the pool
/// thread has run them: their buffers must outlive the syscalls.
#[test]
fn threads_engine_drop_waits_for_the_pool() {
    let _g = serial();
    let fds = fd_count();
    let data = pattern(64 * 1024);
    let (dir, path) = file_with(&data, "f");
    run_cfg(one_thread(Backend::ThreadsMutex), |e| async move {
        let ro = OpenOptions::new();
        let f = e.open(&path, &OpenOptions::new()).await.unwrap();
        let fifo = Fifo::new(dir.path());
        let pool = e.pool().unwrap().clone();
        let blocker = start(e.open(fifo.path.clone(), &ro)).await;
        until("the pool thread to block", || pool.queue_depth() == 0).await;
        let mut reads = Vec::new();
        for i in 0..8u64 {
            reads.push(start(e.read_at(&f, i * 4096, 4096, Vec::new())).await);
        }
        drop((reads, blocker));
        drop(f);
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(fifo); // releases the FIFO open
        });
        let t0 = Instant::now();
        drop(e);
        assert!(t0.elapsed() >= Duration::from_millis(50), "the drop waited");
        assert_eq!(pool.queue_depth(), 0);
        releaser.join().unwrap();
    });
    assert_eq!(fd_count(), fds);
}
