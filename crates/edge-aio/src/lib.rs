//! File I/O engines below the server's aio seam: `off`, `threads`, `io_uring`, `auto`.
//!
//! Every worker is one thread running a current-thread tokio runtime and a `LocalSet`.
//! It builds one [`Engine`] at start (`aio.mode`, [`EngineConfig`]) and calls every file
//! operation through it: [`Engine::open`], [`Engine::stat`], [`Engine::read_at`],
//! [`Engine::read_exact_at`], [`Engine::read_aligned`] (O_DIRECT), [`Engine::write_at`],
//! [`Engine::fsync`], [`Engine::rename`], [`Engine::unlink`], [`Engine::close`]. The
//! backend is an enum chosen once; hot paths never branch on configuration, and there
//! is no trait object.
//!
//! # Backends
//! - **off** (`off.rs`): the syscall inline on the loop. The baseline.
//! - **threads** (`pool.rs`, `queue.rs`): nginx's `aio threads`. One pool for the
//!   process ([`ThreadPool`], `aio-N` threads), a bounded queue ([`QueueKind::Mutex`]
//!   or [`QueueKind::LockFree`]); a full queue runs the op inline and counts an
//!   overflow, nothing queues without bound.
//! - **io_uring** (`uring.rs`): a ring per worker, probed at start; falls back to
//!   `threads` with a [`Fallback`] reason to log (also forced by
//!   `EDGECACHE_URING_DISABLE=1`).
//! - **auto** (`auto.rs`): `preadv2(RWF_NOWAIT)` inline, the pool only when the data
//!   is not cached. A warm read costs one syscall and no hand-off, which is what keeps
//!   small hits as fast as `off` (nginx `aio threads` halves them).
//!
//! # Why pool threads only make the syscall
//! A pool thread gets a plain description of the call (`sys.rs`: fd, pointer,
//! length, offset), runs it and stores the result or `-errno`. It touches no `Rc`, no
//! waker, no allocator, no logger: everything with meaning stays on the worker, which
//! has no locks to share with the pool except the queue and its own completion list.
//! That keeps the hand-off cheap and the pool threads interchangeable among workers.
//!
//! # How completions come back
//! Each worker engine owns one eventfd (not one per op). Pool threads append
//! `(slot, result)` to that worker's completion list and signal the eventfd when the
//! list was empty; io_uring signals it through `IORING_REGISTER_EVENTFD`. A driver task
//! on the worker's `LocalSet` waits for it with `tokio::io::unix::AsyncFd`, reaps, and
//! wakes the futures of the finished slots (`inflight.rs`). So the worker's single
//! `epoll_wait` sees sockets and disk completions alike.
//!
//! # Ownership and cancellation
//! Buffers are owned and returned ("rent" style: `read_at(.., buf) -> (Result, buf)`),
//! files are `Rc` handles ([`AioFile`]), paths are copied into owned C strings. While an
//! op is in flight, all of it lives in the engine's in-flight slot, not in the future.
//! Dropping the future merely marks the slot orphaned; the slot, the buffer and the fd
//! handle are freed when the completion arrives (an orphaned `open` has its new fd
//! closed). Dropping an engine with ops in flight blocks until they complete. So a
//! cancelled request can never leave a pool thread or the kernel writing into freed
//! memory, or reading an fd number that has been reused.
//!
//! # Batching
//! io_uring SQEs pushed during one loop turn are submitted together: the first push
//! wakes the driver task, which runs after the tasks already scheduled and makes one
//! `io_uring_enter` for all of them, then reaps at once (cached reads complete inside
//! that call). The pool needs no batching: a push is a queue insert plus, only if a
//! thread sleeps, one futex or condvar wake.
//!
//! # Requirements
//! Operations of `threads`, `io_uring` and `auto` engines must be awaited inside a
//! `tokio::task::LocalSet` of a runtime with I/O enabled (the driver task is spawned
//! there on first use). Engines and files are `!Send`: one worker each. Linux only.
//!
//! # Costs measured
//! `cargo bench -p edge-aio` (benches/warm_read.rs), warm 4 KiB reads into page-aligned
//! buffers, 2 vCPU Xeon VM, 4 pool threads; noisy, compare within one run:
//!
//! | backend | one read at a time | 32 tasks at once |
//! |---|---|---|
//! | off | 0.8 µs | 0.8 µs |
//! | auto | 0.9–1.3 µs | 1.1 µs |
//! | io_uring | 3–4.5 µs | 1.0 µs |
//! | threads (mutex or lock-free) | 30–60 µs | 1.6–2.9 µs |
//!
//! A pool hand-off round trip is two cross-CPU wake-ups; batching hides it under
//! concurrency but not for a lone request, which is why `auto` exists.
//!
//! Metrics: [`AioStats`] per engine (ops, bytes, in flight, overflows, inline hits vs
//! hand-offs, uring fallback, a log2 read-latency histogram);
//! [`ThreadPool::queue_depth`] is pool-global.

mod auto;
mod borrowed;
mod buf;
mod config;
mod file;
mod gather;
mod inflight;
mod map;
mod off;
mod ops;
mod pool;
mod queue;
mod stats;
mod sys;
mod uring;
pub mod write_gate;

pub use buf::{AlignedBuf, IoBuf};
pub use config::{EngineConfig, Mode, QueueKind};
pub use file::{AioFile, DioAlign, DirectMode, Metadata, OpenOptions};
pub use gather::write_all_vectored_at;
pub use map::FileMap;
pub use pool::{SharedPool, ThreadPool};
pub use stats::{latency_bucket, AioStats, StatsSnapshot, LATENCY_BUCKETS};
pub use uring::{Fallback, URING_DISABLE_ENV};

use auto::AutoEngine;
use inflight::Keep;
use off::OffEngine;
use pool::PoolEngine;
use std::io;
use std::sync::Arc;
use sys::SysOp;
use uring::UringEngine;

/// One worker's file I/O engine. Cheap to clone (clones share the backend and stats).
#[derive(Clone)]
pub struct Engine {
    backend: Backend,
    stats: Arc<AioStats>,
    /// Where [`Engine::blocking`] closures run: the pool (`threads`, `auto`, and
    /// `io_uring`, which has no opcode for a multi-step job); None under `off`.
    blocking: Option<PoolEngine>,
}

/// The backend, chosen once in [`Engine::new`].
#[derive(Clone)]
enum Backend {
    Off(OffEngine),
    Threads(PoolEngine),
    IoUring(UringEngine),
    Auto(AutoEngine),
}

impl Engine {
    /// Builds the engine one worker uses. `pool` is the process-wide pool, started on
    /// first need. For `io_uring`, a kernel that refuses it yields a `threads` engine
    /// and `Some(reason)`, which the caller should log once.
    pub fn new(cfg: &EngineConfig, pool: &SharedPool) -> io::Result<(Engine, Option<Fallback>)> {
        let stats = Arc::new(AioStats::default());
        let threads = |stats: &Arc<AioStats>| PoolEngine::new(pool.get()?, stats.clone());
        let mut fallback = None;
        let (backend, blocking) = match cfg.mode {
            Mode::Off => (Backend::Off(OffEngine), None),
            Mode::Threads => {
                let p = threads(&stats)?;
                (Backend::Threads(p.clone()), Some(p))
            }
            Mode::Auto => {
                let p = threads(&stats)?;
                (
                    Backend::Auto(AutoEngine::new(p.clone(), cfg.inline_writes)),
                    Some(p),
                )
            }
            Mode::IoUring => match UringEngine::new(cfg.ring_entries, stats.clone()) {
                Ok(u) => (Backend::IoUring(u), Some(threads(&stats)?)),
                Err(why) => {
                    stats.uring_fallback();
                    fallback = Some(why);
                    let p = threads(&stats)?;
                    (Backend::Threads(p.clone()), Some(p))
                }
            },
        };
        Ok((
            Engine {
                backend,
                stats,
                blocking,
            },
            fallback,
        ))
    }

    /// An `off` engine (blocking syscalls inline); needs no pool and no runtime.
    pub fn off() -> Engine {
        Engine {
            backend: Backend::Off(OffEngine),
            stats: Arc::default(),
            blocking: None,
        }
    }

    /// The backend actually in use (`threads` after an io_uring fallback).
    pub fn mode(&self) -> Mode {
        match self.backend {
            Backend::Off(_) => Mode::Off,
            Backend::Threads(_) => Mode::Threads,
            Backend::IoUring(_) => Mode::IoUring,
            Backend::Auto(_) => Mode::Auto,
        }
    }

    /// This engine's counters; clone the `Arc` to read them from another thread.
    pub fn stats(&self) -> &Arc<AioStats> {
        &self.stats
    }

    /// The shared pool this engine hands work to, if any.
    pub fn pool(&self) -> Option<&Arc<ThreadPool>> {
        match &self.backend {
            Backend::Threads(p) => Some(p.pool()),
            Backend::Auto(a) => Some(a.pool().pool()),
            Backend::Off(_) | Backend::IoUring(_) => None,
        }
    }

    /// Runs `f` (blocking work made of several calls, such as a cache commit) on the
    /// pool, or inline under `off`; a full queue runs it inline (counted as an
    /// overflow). If the caller's future is dropped, `f` still runs to its end and its
    /// result is dropped. A panic in `f` is caught and returned as an error.
    pub async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        let r = run_job(self.blocking.as_ref(), f).await;
        self.stats.other_done(true);
        r
    }

    /// [`Engine::blocking`] for a job of buffered writes and a rename into place (a
    /// cache commit): under `auto`, while the worker's [`write_gate::WriteGate`] is open
    /// the job runs on the loop, without the hand-off (the time of a job that slept is
    /// charged to the gate's budget). Other backends, and a closed gate, run it as
    /// `blocking` does (under `auto`, counted as a hand-off).
    pub async fn blocking_write<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        if let Backend::Auto(a) = &self.backend {
            if let Some(gate) = a.open_gate() {
                let r = gate.run(&self.stats, || {
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                        .map_err(|_| io::Error::other("blocking job panicked"))
                });
                self.stats.other_done(r.is_ok());
                return r;
            }
            self.stats.handoff();
        }
        self.blocking(f).await
    }

    /// The one place that dispatches on the backend. Returns the syscall's result
    /// (`-errno` on failure) with what the op owned.
    async fn submit(&self, op: SysOp, keep: Keep) -> (i64, Keep) {
        match &self.backend {
            Backend::Off(e) => e.run(op, keep),
            Backend::Threads(e) => e.submit(op, keep).await,
            Backend::IoUring(e) => e.submit(op, keep).await,
            Backend::Auto(e) => e.submit(op, keep).await,
        }
    }
}

/// Runs `f` on `pool`, or inline without one; see [`Engine::blocking`].
async fn run_job<T: Send + 'static>(
    pool: Option<&PoolEngine>,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    let slot: Arc<std::sync::Mutex<Option<std::thread::Result<T>>>> = Arc::default();
    let out = slot.clone();
    let mut f = Some(f);
    let call = inflight::CallBox::new(Box::new(move || {
        if let Some(f) = f.take() {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            *out.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        }
        0
    }));
    // The pointer stays valid while `keep` (which owns the closure) is held by the
    // in-flight table, i.e. until the op has completed.
    let op = SysOp::Call { f: call.ptr() };
    let keep = Keep::Call(call);
    let (_, keep) = match pool {
        Some(p) => p.submit(op, keep).await,
        None => OffEngine.run(op, keep),
    };
    drop(keep);
    let r = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    match r {
        Some(Ok(v)) => Ok(v),
        Some(Err(_)) => Err(io::Error::other("blocking job panicked")),
        None => Err(io::Error::other("blocking job did not run")),
    }
}

/// One worker's handle on a compute pool (the compression offload): jobs run on the
/// pool's threads and their completions come back through this worker's own eventfd in
/// its reactor, by the same machinery as file I/O (one mechanism, a second pool so that
/// compression never queues behind disk reads or the reverse). Cheap to clone.
#[derive(Clone)]
pub struct Offload {
    engine: PoolEngine,
}

impl Offload {
    pub fn new(pool: Arc<ThreadPool>) -> io::Result<Offload> {
        Ok(Offload {
            engine: PoolEngine::new(pool, Arc::new(AioStats::default()))?,
        })
    }

    /// Runs `f` on the pool and waits for it; a full queue runs it inline (counted as
    /// an overflow in [`Offload::stats`]). Dropping the future lets `f` finish and drops
    /// its result. A panic in `f` is returned as an error.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        let r = run_job(Some(&self.engine), f).await;
        self.engine.stats().other_done(true);
        r
    }

    /// Whether the queue is at its bound (new work would run inline): callers that can
    /// do without (send uncompressed) should.
    pub fn saturated(&self) -> bool {
        let p = self.engine.pool();
        p.queue_depth() >= p.max_queue()
    }

    pub fn pool(&self) -> &Arc<ThreadPool> {
        self.engine.pool()
    }

    /// This worker's counters for the pool (overflows, in flight).
    pub fn stats(&self) -> &Arc<AioStats> {
        self.engine.stats()
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("mode", &self.mode())
            .field("pool", &self.pool())
            .finish()
    }
}

/// A current-thread runtime with I/O and timers, and a `LocalSet` to run on it: where
/// the engines' driver tasks live in unit tests.
#[cfg(test)]
pub(crate) fn test_runtime() -> (tokio::runtime::Runtime, tokio::task::LocalSet) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    (rt, tokio::task::LocalSet::new())
}

#[cfg(test)]
mod offload_tests {
    use super::*;

    /// Jobs run on the pool's own named threads and come back to the worker; a panic is
    /// an error, not a crash.
    #[test]
    fn offload_jobs_run_on_the_named_pool_and_come_back() {
        let (rt, local) = crate::test_runtime();
        let pool = ThreadPool::named("ztest", 1 << 20, 2, 8, QueueKind::LockFree).unwrap();
        let off = Offload::new(pool).unwrap();
        local.block_on(&rt, async {
            let name = off
                .run(|| std::thread::current().name().map(str::to_owned))
                .await
                .unwrap();
            assert!(name.unwrap().starts_with("ztest-"));
            let many: Vec<_> = (0..32u64).map(|i| off.run(move || i * 2)).collect();
            let mut sum = 0;
            for f in many {
                sum += f.await.unwrap();
            }
            assert_eq!(sum, (0..32u64).map(|i| i * 2).sum::<u64>());
            assert!(off.run(|| panic!("boom")).await.is_err());
            assert!(!off.saturated());
            assert_eq!(off.stats().in_flight(), 0);
        });
    }
}
