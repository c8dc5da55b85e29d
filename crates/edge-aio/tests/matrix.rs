//! Every operation on every backend: the same test body runs on `off`, `threads`
//! (mutex and lock-free queues), `io_uring` (where the kernel refuses it the test
//! fails, unless `EDGECACHE_TEST_ALLOW_FALLBACK=1`) and `auto`. Backend-specific
//! behaviour (overflow, inline hits, the small ring) is tested at the end.

mod common;

use common::*;
use edge_aio::{AlignedBuf, DirectMode, Engine, EngineConfig, Mode, OpenOptions, QueueKind};
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::rc::Rc;

/// One `#[test]` per body per backend, e.g. `io_uring::read_write_stat`.
macro_rules! matrix {
    ($($body:ident),* $(,)?) => {
        matrix!(@mod off, Off; $($body),*);
        matrix!(@mod threads_mutex, ThreadsMutex; $($body),*);
        matrix!(@mod threads_lockfree, ThreadsLockFree; $($body),*);
        matrix!(@mod io_uring, IoUring; $($body),*);
        matrix!(@mod auto, Auto; $($body),*);
    };
    (@mod $m:ident, $b:ident; $($body:ident),*) => {
        mod $m {
            $(
                #[test]
                fn $body() {
                    crate::common::run(crate::common::Backend::$b, super::$body);
                }
            )*
        }
    };
}

matrix!(
    read_write_stat,
    gathered_write,
    read_exact_and_eof,
    rename_and_unlink,
    open_errors,
    close_and_fsync,
    concurrent_reads,
    cancel_mid_flight,
    aligned_direct_read,
    direct_refused_reopens,
    stats_count_reads,
    blocking_write_runs_the_job,
);

/// A write job (a cache commit's shape: a gathered write, then a rename into place) runs
/// to its end and returns its value on every backend, a panic in it is an error, and
/// the file is where the rename put it.
async fn blocking_write_runs_the_job(e: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let (tmp, fin) = (dir.path().join("t"), dir.path().join("f"));
    let (t2, f2) = (tmp.clone(), fin.clone());
    let r = e
        .blocking_write(move || -> std::io::Result<u64> {
            let f = std::fs::File::create(&t2)?;
            edge_aio::write_all_vectored_at(&f, 0, &[&b"head"[..], &b"body"[..]])?;
            std::fs::rename(&t2, &f2)?;
            Ok(8)
        })
        .await;
    assert_eq!(r.unwrap().unwrap(), 8);
    assert_eq!(std::fs::read(&fin).unwrap(), b"headbody");
    assert!(!tmp.exists());
    let r = e.blocking_write(|| -> u8 { panic!("in the job") }).await;
    assert!(r.is_err(), "a panic is an error");
}

async fn read_write_stat(e: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data = pattern(100_000);
    let opts = OpenOptions::new().write(true).create(true).truncate(true);
    let f = e.open(&path, &opts).await.unwrap();
    assert_eq!(f.direct(), DirectMode::Off);
    let (r, back) = e.write_all_at(&f, 0, data.clone()).await;
    r.unwrap();
    assert_eq!(back, data, "the buffer comes back");
    let (r, _) = e.write_at(&f, 100_000, b"tail".to_vec()).await;
    assert_eq!(r.unwrap(), 4);
    e.fdatasync(&f).await.unwrap();

    let m = e.stat(&f).await.unwrap();
    let std_m = std::fs::metadata(&path).unwrap();
    assert_eq!(m.size, 100_004);
    assert_eq!(m.ino, std_m.ino());
    assert_eq!(m.dev, std_m.dev());
    assert_eq!(m.mtime, std_m.modified().unwrap());
    assert!(m.is_file() && !m.is_dir());
    assert_eq!(e.stat_path(&path).await.unwrap(), m);
    assert!(e.stat_path(dir.path()).await.unwrap().is_dir());

    // Reads append after what the buffer holds.
    let (r, buf) = e.read_at(&f, 1000, 500, b"head:".to_vec()).await;
    assert_eq!(r.unwrap(), 500);
    assert_eq!(&buf[..5], b"head:");
    assert_eq!(&buf[5..], &data[1000..1500]);
    let (r, buf) = e.read_at(&f, 99_998, 100, Vec::new()).await;
    assert_eq!(r.unwrap(), 6, "short at end of file");
    assert_eq!(buf, [&data[99_998..], b"tail"].concat());
}

async fn gathered_write(e: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let opts = OpenOptions::new().write(true).create(true).truncate(true);
    let f = e.open(&path, &opts).await.unwrap();
    // Slices of one buffer (as a fill's read buffer is split), an empty part, and more
    // parts than one pwritev takes (1,024), so the write continues in a second call.
    let whole = bytes::Bytes::from(pattern(300_000));
    let mut parts = vec![
        whole.slice(..5),
        bytes::Bytes::new(),
        whole.slice(5..200_000),
    ];
    parts.extend((0..1500).map(|i| whole.slice(200_000 + i * 60..200_000 + (i + 1) * 60)));
    parts.push(whole.slice(290_000..));
    let (r, back) = e.write_all_gathered_at(&f, 4096, parts.clone()).await;
    r.unwrap();
    assert_eq!(back, parts, "the parts come back");
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len(), 4096 + 300_000);
    assert!(on_disk[..4096].iter().all(|&b| b == 0));
    assert!(on_disk[4096..] == whole[..], "every part in order");
    // An error comes back with the parts (a read-only descriptor).
    let ro = e.open(&path, &OpenOptions::new()).await.unwrap();
    let (r, back) = e.write_all_gathered_at(&ro, 0, parts.clone()).await;
    assert!(r.is_err());
    assert_eq!(back.len(), parts.len());
}

async fn read_exact_and_eof(e: Engine) {
    let data = pattern(10_000);
    let (_dir, path) = file_with(&data, "f");
    let f = e.open(&path, &OpenOptions::new()).await.unwrap();
    let (r, buf) = e.read_exact_at(&f, 123, 9000, Vec::with_capacity(16)).await;
    r.unwrap();
    assert_eq!(buf, &data[123..9123]);
    let (r, buf) = e.read_exact_at(&f, 9000, 2000, Vec::new()).await;
    assert_eq!(r.unwrap_err().kind(), ErrorKind::UnexpectedEof);
    assert_eq!(buf, &data[9000..], "what was read stays");
    let (r, buf) = e.read_at(&f, 20_000, 10, Vec::new()).await;
    assert_eq!(r.unwrap(), 0, "past the end");
    assert!(buf.is_empty());
    let (r, _) = e.read_exact_at(&f, 0, 0, Vec::new()).await;
    r.unwrap();
}

async fn rename_and_unlink(e: Engine) {
    let (dir, a) = file_with(b"x", "a");
    let b = dir.path().join("b");
    e.rename(&a, &b).await.unwrap();
    assert_eq!(
        e.stat_path(&a).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(e.stat_path(&b).await.unwrap().size, 1);
    e.unlink(&b).await.unwrap();
    assert_eq!(e.unlink(&b).await.unwrap_err().kind(), ErrorKind::NotFound);
    let err = e.rename(&a, &b).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

async fn open_errors(e: Engine) {
    let (dir, path) = file_with(b"x", "f");
    let missing = e.open(dir.path().join("nope"), &OpenOptions::new()).await;
    assert_eq!(missing.unwrap_err().kind(), ErrorKind::NotFound);
    let excl = OpenOptions::new().write(true).create_new(true);
    assert_eq!(
        e.open(&path, &excl).await.unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    let nul = e.open("a\0b", &OpenOptions::new()).await;
    assert_eq!(nul.unwrap_err().kind(), ErrorKind::InvalidInput);
    // A read of a directory fails with EISDIR, through every backend.
    let d = e.open(dir.path(), &OpenOptions::new()).await.unwrap();
    let (r, buf) = e.read_at(&d, 0, 10, vec![1]).await;
    assert!(r.is_err());
    assert_eq!(buf, vec![1], "buffer unchanged on error");
}

async fn close_and_fsync(e: Engine) {
    let (_dir, path) = file_with(b"abc", "f");
    let opts = OpenOptions::new().write(true);
    let f = e.open(&path, &opts).await.unwrap();
    e.fsync(&f).await.unwrap();
    let g = f.clone();
    e.close(f).await.unwrap(); // a clone remains: only drops this handle
    let (r, buf) = e.read_at(&g, 0, 3, Vec::new()).await;
    assert_eq!(r.unwrap(), 3);
    assert_eq!(buf, b"abc");
    e.close(g).await.unwrap(); // the last one: closes the fd
}

/// Many tasks read overlapping ranges of one file at once; each checks its bytes.
async fn concurrent_reads(e: Engine) {
    let data = Rc::new(pattern(1 << 20));
    let (_dir, path) = file_with(&data, "f");
    let f = e.open(&path, &OpenOptions::new()).await.unwrap();
    let tasks: Vec<_> = (0..64u64)
        .map(|i| {
            let (e, f, data) = (e.clone(), f.clone(), data.clone());
            tokio::task::spawn_local(async move {
                let mut buf = Vec::new();
                for j in 0..8u64 {
                    let off = ((i * 7919 + j * 104_729) % (1 << 20)) as usize;
                    let len = (((i + 1) * (j + 3) * 997) as usize % 65536).min((1 << 20) - off);
                    buf.clear();
                    let (r, b) = e.read_exact_at(&f, off as u64, len, buf).await;
                    r.unwrap();
                    assert_eq!(b, &data[off..off + len], "task {i} read {j}");
                    buf = b;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(e.stats().in_flight(), 0);
}

/// Reads and opens whose futures are dropped while in flight: the engine keeps their
/// buffers, fds and paths until the completions arrive, then frees the slots; later
/// reads return the right bytes. (fd leaks are counted in tests/process.rs, where no
/// other test runs at the same time.)
async fn cancel_mid_flight(e: Engine) {
    let data = pattern(256 * 1024);
    let (_dir, path) = file_with(&data, "f");
    let f = e.open(&path, &OpenOptions::new()).await.unwrap();
    let mut started = Vec::new();
    for i in 0..32u64 {
        let fut = e.read_at(&f, i * 4096, 64 * 1024, Vec::with_capacity(64 * 1024));
        started.push(start(fut).await);
    }
    let ro = OpenOptions::new();
    let mut opens = Vec::new();
    for _ in 0..8 {
        opens.push(start(e.open(&path, &ro)).await);
    }
    drop(started);
    drop(opens);
    drop(f); // the in-flight reads still hold the fd
    drained(&e).await;
    let f = e.open(&path, &OpenOptions::new()).await.unwrap();
    for i in 0..8usize {
        let (r, buf) = e
            .read_exact_at(&f, (i * 30_000) as u64, 4096, Vec::new())
            .await;
        r.unwrap();
        assert_eq!(buf, &data[i * 30_000..i * 30_000 + 4096]);
    }
}

/// O_DIRECT where the filesystem supports it (the test dir's); the read is widened to
/// the alignment and the requested window returned.
async fn aligned_direct_read(e: Engine) {
    let data = pattern(3 * 4096 + 100);
    let (_dir, path) = file_with(&data, "f");
    let f = e
        .open(&path, &OpenOptions::new().direct(true))
        .await
        .unwrap();
    println!("O_DIRECT on the temp dir: {:?}", f.direct());
    let align = e.dio_alignment(&f).await.unwrap();
    let buf = AlignedBuf::new(8192, align.granule());
    let (r, buf) = e.read_aligned(&f, 1000, 5000, buf).await;
    let w = r.unwrap();
    assert_eq!(&buf[w], &data[1000..6000]);
    // At the end of the file the window is shortened.
    let (r, buf) = e.read_aligned(&f, 3 * 4096 + 50, 4096, buf).await;
    let w = r.unwrap();
    assert_eq!(&buf[w], &data[3 * 4096 + 50..]);
    // Past the end: empty.
    let (r, buf) = e.read_aligned(&f, 1 << 20, 10, buf).await;
    assert!(r.unwrap().is_empty());
    assert_eq!(buf.align(), align.granule());
}

/// procfs refuses O_DIRECT with EINVAL: the open retries without it and says so.
async fn direct_refused_reopens(e: Engine) {
    let f = e
        .open("/proc/self/status", &OpenOptions::new().direct(true))
        .await
        .unwrap();
    if f.direct() == DirectMode::On {
        println!("this kernel accepts O_DIRECT on procfs; nothing to test");
        return;
    }
    assert_eq!(f.direct(), DirectMode::Refused);
    assert_eq!(e.stats().snapshot().direct_refused, 1);
    let (r, buf) = e.read_at(&f, 0, 4096, Vec::new()).await;
    assert!(r.unwrap() > 0);
    assert!(buf.starts_with(b"Name:"));
}

async fn stats_count_reads(e: Engine) {
    let data = pattern(8192);
    let (_dir, path) = file_with(&data, "f");
    let f = e.open(&path, &OpenOptions::new()).await.unwrap();
    for i in 0..10 {
        let (r, _) = e.read_at(&f, i * 100, 100, Vec::new()).await;
        r.unwrap();
    }
    let (r, _) = e.write_at(&f, 0, vec![0u8; 10]).await;
    assert!(r.is_err(), "opened read-only");
    let s = e.stats().snapshot();
    assert_eq!(s.reads, 10);
    assert_eq!(s.read_bytes, 1000);
    assert_eq!(s.writes, 1);
    assert_eq!(s.errors, 1);
    assert_eq!(s.other_ops, 1, "the open");
    assert_eq!(s.read_latency_us.iter().sum::<u64>(), 10);
    assert_eq!(s.in_flight, 0);
}

// ---- backend-specific ----

/// nginx's rule: a full pool queue is an error the caller handles; here the engine
/// runs the read inline and counts an overflow. The single pool thread is held busy in
/// open(2) of a FIFO, so the queue (max_queue = 1) fills deterministically.
fn overflow_runs_inline(queue: QueueKind) {
    let cfg = EngineConfig {
        mode: Mode::Threads,
        threads: 1,
        max_queue: 1,
        queue,
        ..EngineConfig::default()
    };
    run_cfg(cfg, |e| async move {
        let data = Rc::new(pattern(64 * 1024));
        let (dir, path) = file_with(&data, "f");
        let f = e.open(&path, &OpenOptions::new()).await.unwrap();
        let mut fifo = Fifo::new(dir.path());
        let pool = e.pool().unwrap().clone();
        let ro = OpenOptions::new();
        let blocker = start(e.open(fifo.path.clone(), &ro)).await;
        until("the pool thread to take the FIFO open", || {
            pool.queue_depth() == 0
        })
        .await;
        let tasks: Vec<_> = (0..8u64)
            .map(|i| {
                let (e, f, data) = (e.clone(), f.clone(), data.clone());
                tokio::task::spawn_local(async move {
                    let off = (i * 4096) as usize;
                    let (r, buf) = e.read_exact_at(&f, off as u64, 4096, Vec::new()).await;
                    r.unwrap();
                    assert_eq!(buf, &data[off..off + 4096]);
                })
            })
            .collect();
        until("seven reads to run inline", || {
            e.stats().snapshot().overflows == 7
        })
        .await;
        assert_eq!(pool.queue_depth(), 1, "one read waits in the queue");
        fifo.release();
        for t in tasks {
            t.await.unwrap();
        }
        assert!(blocker.await.is_ok());
        let s = e.stats().snapshot();
        assert_eq!((s.overflows, s.reads, s.in_flight), (7, 8, 0));
    });
}

#[test]
fn threads_mutex_overflow_runs_inline() {
    overflow_runs_inline(QueueKind::Mutex);
}

#[test]
fn threads_lockfree_overflow_runs_inline() {
    overflow_runs_inline(QueueKind::LockFree);
}

/// Warm reads never leave the loop in auto mode: each is one RWF_NOWAIT preadv2.
#[test]
fn auto_warm_reads_are_inline() {
    run(Backend::Auto, |e| async move {
        let data = pattern(64 * 1024);
        let (_dir, path) = file_with(&data, "f");
        let f = e.open(&path, &OpenOptions::new()).await.unwrap();
        let before = e.stats().snapshot();
        for i in 0..16u64 {
            let (r, buf) = e.read_at(&f, i * 4096, 4096, Vec::new()).await;
            assert_eq!(r.unwrap(), 4096);
            assert_eq!(buf, &data[(i * 4096) as usize..][..4096]);
        }
        // Reading across the end: the remainder is EOF, learnt inline too.
        let (r, _) = e.read_at(&f, 60_000, 10_000, Vec::new()).await;
        assert_eq!(r.unwrap(), 64 * 1024 - 60_000);
        let s = e.stats().snapshot();
        assert_eq!(s.inline_hits - before.inline_hits, 17);
        assert_eq!(s.handoffs, before.handoffs, "nothing went to the pool");
        // An open of a just-used path is served from the dentry cache inline too.
        let _g = e.open(&path, &OpenOptions::new()).await.unwrap();
        assert_eq!(e.stats().snapshot().inline_hits, s.inline_hits + 1);
    });
}

/// tmpfs refuses RWF_NOWAIT (EOPNOTSUPP), but its pages are memory: `auto` reads a file
/// there on the loop (owned and borrowed reads, and `is_cached`), never on the pool. A
/// cache kept on tmpfs would otherwise send every hit through a pool thread.
#[test]
fn auto_reads_files_in_memory_inline() {
    let shm = std::path::Path::new("/dev/shm");
    // SAFETY: `statfs` is plain data, for which all-zero bytes are a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated literal path; writes one `statfs` into a live local.
    let rc = unsafe { libc::statfs(c"/dev/shm".as_ptr(), &mut st) };
    if rc != 0 || st.f_type != 0x0102_1994 {
        edge_testkit::fallback("the tmpfs read test did not run", "/dev/shm is not tmpfs");
        return;
    }
    run(Backend::Auto, |e| async move {
        let data = pattern(256 * 1024);
        let dir = tempfile::tempdir_in(shm).unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, &data).unwrap();
        let std_f = std::fs::File::open(&path).unwrap();
        let f = e.open(&path, &OpenOptions::new()).await.unwrap();
        let before = e.stats().snapshot();
        for i in 0..8u64 {
            let (r, buf) = e.read_at(&f, i * 32768, 32768, Vec::new()).await;
            assert_eq!(r.unwrap(), 32768);
            assert_eq!(buf, &data[(i * 32768) as usize..][..32768]);
        }
        let (r, buf) = e
            .read_exact_at_file(&std_f, 1000, 200_000, Vec::new())
            .await;
        r.unwrap();
        assert_eq!(buf, &data[1000..201_000]);
        assert!(e.is_cached(&std_f, 255 * 1024));
        let s = e.stats().snapshot();
        assert_eq!(s.inline_hits - before.inline_hits, 9);
        assert_eq!(s.handoffs, before.handoffs, "nothing went to the pool");
    });
}

/// After the pages are evicted, RWF_NOWAIT says EAGAIN and the read goes to the pool;
/// the pool's read brings the pages back, so the next read is inline again.
#[test]
fn auto_cold_reads_go_to_the_pool() {
    run(Backend::Auto, |e| async move {
        let data = pattern(256 * 1024);
        let (_dir, path) = file_with(&data, "f");
        let std_f = std::fs::File::open(&path).unwrap();
        std_f.sync_all().unwrap();
        // The kernel may keep a page a moment longer (a folio still in another CPU's
        // LRU batch, under a parallel test's load): drop the pages until a
        // non-blocking read of the one this test reads says it is gone.
        let evicted = (0..100).any(|_| {
            use std::os::fd::AsRawFd;
            // SAFETY: advisory call on a live fd; clean pages are dropped from the cache.
            let rc =
                unsafe { libc::posix_fadvise(std_f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            assert_eq!(rc, 0);
            let mut b = [0u8; 1];
            let iov = libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: 1,
            };
            // SAFETY: one iovec over a live 1-byte buffer; the fd is open.
            let r =
                unsafe { libc::preadv2(std_f.as_raw_fd(), &iov, 1, 128 * 1024, libc::RWF_NOWAIT) };
            let gone =
                r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN);
            if !gone {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            gone
        });
        assert!(
            evicted,
            "the file's pages could not be dropped from the page cache"
        );
        let f = e.open(&path, &OpenOptions::new()).await.unwrap();
        let before = e.stats().snapshot();
        let (r, buf) = e.read_exact_at(&f, 128 * 1024, 8192, Vec::new()).await;
        r.unwrap();
        assert_eq!(buf, &data[128 * 1024..][..8192]);
        let s = e.stats().snapshot();
        assert!(
            s.handoffs > before.handoffs,
            "a cold read was handed off: {s:?}"
        );
        let (r, _) = e.read_at(&f, 128 * 1024, 4096, Vec::new()).await;
        r.unwrap();
        assert_eq!(
            e.stats().snapshot().inline_hits,
            s.inline_hits + 1,
            "warm again"
        );
    });
}

/// `auto` runs a write job on the calling thread (the loop) while its gate is open and
/// counts it; `inline_writes = false` and the other backends never do.
#[test]
fn auto_runs_write_jobs_inline_unless_told_not_to() {
    for inline in [true, false] {
        let cfg = EngineConfig {
            inline_writes: inline,
            ..config(Backend::Auto)
        };
        run_cfg(cfg, move |e| async move {
            let me = std::thread::current().id();
            let before = e.stats().snapshot();
            let r = e.blocking_write(|| std::thread::current().id()).await;
            let s = e.stats().snapshot();
            let counted = s.inline_writes - before.inline_writes;
            if !inline {
                assert_ne!(r.unwrap(), me, "inline_writes = false: on the pool");
                assert_eq!(counted, 0);
            } else if counted == 0 {
                // The gate was shut, which is right only while this host's dirty pages
                // are above the kernel's background threshold.
                assert!(
                    !edge_aio::write_gate::host_has_room(),
                    "the gate shut with room"
                );
                eprintln!("the host's dirty pages are above its background threshold");
                assert_ne!(r.unwrap(), me);
            } else {
                assert_eq!(r.unwrap(), me, "ran on the loop's thread");
                assert_eq!(counted, 1);
            }
            // A body write: inline too (counted), or a hand-off.
            let dir = tempfile::tempdir().unwrap();
            let opts = OpenOptions::new().write(true).create(true).truncate(true);
            let f = e.open(&dir.path().join("w"), &opts).await.unwrap();
            let before = e.stats().snapshot();
            let (w, _) = e.write_all_at(&f, 0, pattern(10_000)).await;
            w.unwrap();
            let s = e.stats().snapshot();
            let (inl, off) = (
                s.inline_writes - before.inline_writes,
                s.handoffs - before.handoffs,
            );
            // One of the two (the gate re-reads the host's dirty pages every 250 ms, so
            // it may have shut since the job above).
            assert_eq!(inl + off, 1, "a write on the loop or handed off");
            if !inline {
                assert_eq!((inl, off), (0, 1), "a write handed off");
            }
            assert_eq!(
                std::fs::read(dir.path().join("w")).unwrap(),
                pattern(10_000)
            );
        });
    }
    run(Backend::ThreadsMutex, |e| async move {
        let me = std::thread::current().id();
        let r = e.blocking_write(|| std::thread::current().id()).await;
        assert_ne!(r.unwrap(), me, "threads: on the pool");
        assert_eq!(e.stats().snapshot().inline_writes, 0);
    });
}

/// procfs has no RWF_NOWAIT (EOPNOTSUPP): reads are handed off and still work.
#[test]
fn auto_without_nowait_support_hands_off() {
    run(Backend::Auto, |e| async move {
        let f = e
            .open("/proc/self/stat", &OpenOptions::new())
            .await
            .unwrap();
        let before = e.stats().snapshot().handoffs;
        let (r, buf) = e.read_at(&f, 0, 4096, Vec::new()).await;
        assert!(r.unwrap() > 0);
        assert!(buf.contains(&b'('), "{buf:?}");
        assert_eq!(e.stats().snapshot().handoffs, before + 1);
    });
}

/// A ring of 2 SQEs (4 CQEs) under 64 concurrent reads: a full SQ is submitted and
/// the push retried; beyond 4 in flight, reads run inline as overflows. All correct.
#[test]
fn io_uring_small_ring_overflows_inline() {
    let cfg = EngineConfig {
        ring_entries: 2,
        ..config(Backend::IoUring)
    };
    run_cfg(cfg, |e| async move {
        let data = Rc::new(pattern(256 * 1024));
        let (_dir, path) = file_with(&data, "f");
        let f = e.open(&path, &OpenOptions::new()).await.unwrap();
        let tasks: Vec<_> = (0..64u64)
            .map(|i| {
                let (e, f, data) = (e.clone(), f.clone(), data.clone());
                tokio::task::spawn_local(async move {
                    let off = (i * 4000) as usize;
                    let (r, buf) = e.read_exact_at(&f, off as u64, 3000, Vec::new()).await;
                    r.unwrap();
                    assert_eq!(buf, &data[off..off + 3000]);
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let s = e.stats().snapshot();
        assert!(s.overflows > 0, "{s:?}");
        assert_eq!(s.in_flight, 0);
    });
}
