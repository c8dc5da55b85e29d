//! The `threads` backend: an nginx-style pool shared by all workers.
//!
//! How it fits: one [`ThreadPool`] per process (`aio.thread_pool`), held by `Arc` in
//! every worker's engine. A worker pushes a job (a [`SysOp`], its slot token, and the
//! worker's [`CompletionPort`]) onto the bounded queue (`queue.rs`); a full queue is an
//! explicit overflow and the engine runs the op inline. A pool thread only makes the
//! syscall and stores the result or errno: no allocation, no logging, no Rust object of
//! the worker's is touched. It appends `(token, result)` to the submitting worker's
//! completion list and signals that worker's eventfd, one per worker (not per op), and
//! only when the list was empty, so a burst of completions costs one wake-up.

use crate::config::EngineConfig;
use crate::inflight::{Core, Keep, Source};
use crate::queue::{JobQueue, QueueKind};
use crate::stats::AioStats;
use crate::sys::{self, SysOp};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

/// Stack of a pool thread: it only makes syscalls.
const POOL_STACK: usize = 128 * 1024;

/// One operation for a pool thread.
pub(crate) struct Job {
    op: SysOp,
    token: usize,
    port: Arc<CompletionPort>,
}

struct PoolShared {
    queue: JobQueue<Job>,
    stop: AtomicBool,
}

/// The process-wide blocking-I/O pool: `threads` threads named `aio-N` and a bounded
/// queue of `max_queue` jobs. Dropping the last `Arc` stops and joins the threads.
pub struct ThreadPool {
    shared: Arc<PoolShared>,
    threads: Vec<JoinHandle<()>>,
    max_queue: usize,
    kind: QueueKind,
    /// One message from each thread once it has run `on_start`; taken by
    /// [`ThreadPool::wait_started`].
    started: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl ThreadPool {
    /// Starts the pool (at least one thread, queue of at least one).
    pub fn new(threads: usize, max_queue: usize, queue: QueueKind) -> io::Result<Arc<ThreadPool>> {
        Self::named("aio", POOL_STACK, threads, max_queue, queue)
    }

    /// [`ThreadPool::new`] with threads named `<name>-N` and `stack` bytes of stack each
    /// (a compute pool, such as compression, needs more than syscalls do).
    pub fn named(
        name: &str,
        stack: usize,
        threads: usize,
        max_queue: usize,
        queue: QueueKind,
    ) -> io::Result<Arc<ThreadPool>> {
        Self::named_with(name, stack, threads, max_queue, queue, None)
    }

    /// [`ThreadPool::named`] with `on_start(i)` run first on thread `i` (to pin it to a
    /// CPU, say). Returns at once: see [`ThreadPool::wait_started`].
    pub fn named_with(
        name: &str,
        stack: usize,
        threads: usize,
        max_queue: usize,
        queue: QueueKind,
        on_start: Option<Arc<dyn Fn(usize) + Send + Sync>>,
    ) -> io::Result<Arc<ThreadPool>> {
        let max_queue = max_queue.max(1);
        let shared = Arc::new(PoolShared {
            queue: JobQueue::new(queue, max_queue),
            stop: AtomicBool::new(false),
        });
        let (ready_tx, ready) = std::sync::mpsc::channel::<()>();
        let mut pool = ThreadPool {
            shared: shared.clone(),
            threads: Vec::new(),
            max_queue,
            kind: queue,
            started: Mutex::new(Some(ready)),
        };
        for i in 0..threads.max(1) {
            let shared = shared.clone();
            let on_start = on_start.clone();
            let ready_tx = ready_tx.clone();
            let t = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .stack_size(stack)
                .spawn(move || {
                    if let Some(f) = on_start {
                        f(i);
                    }
                    // The creator may have given up (a later thread failed to start).
                    let _ = ready_tx.send(());
                    drop(ready_tx);
                    pool_thread(&shared)
                })
                .map_err(|e| io::Error::new(e.kind(), format!("pthread_create() failed: {e}")))?;
            // On error, dropping `pool` stops and joins the threads started so far.
            pool.threads.push(t);
        }
        Ok(Arc::new(pool))
    }

    /// Waits until every thread has run `on_start` and is taking jobs, so that the
    /// pool is whole: names, pinning and count in place (a thread not yet scheduled
    /// still bears its creator's name). For start-up only, never on an event loop: a
    /// thread's `on_start` may lower its own priority (SCHED_IDLE), and such a thread
    /// may wait long for a CPU.
    pub fn wait_started(&self) {
        let Some(ready) = self
            .started
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        // One message per thread; a thread that died in `on_start` drops its sender
        // unsent, and the loop ends early instead of waiting for it forever.
        for _ in 0..self.threads.len() {
            if ready.recv().is_err() {
                break;
            }
        }
    }

    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    pub fn max_queue(&self) -> usize {
        self.max_queue
    }

    pub fn queue_kind(&self) -> QueueKind {
        self.kind
    }

    /// Jobs queued and not yet taken by a thread (pool-global, all workers).
    pub fn queue_depth(&self) -> usize {
        self.shared.queue.len()
    }

    fn try_push(&self, job: Job) -> Result<(), Job> {
        self.shared.queue.push(job)
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        // Engines hold the pool and drain their in-flight jobs before letting go of it,
        // so nothing queued here points into freed memory; any job left still runs.
        self.shared.stop.store(true, SeqCst);
        self.shared.queue.wake_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &self.threads.len())
            .field("max_queue", &self.max_queue)
            .field("queue", &self.kind)
            .finish()
    }
}

fn pool_thread(shared: &PoolShared) {
    while let Some(job) = shared.queue.pop(&shared.stop) {
        // SAFETY: the submitting engine keeps the memory `job.op` points to in its
        // in-flight slot until it has reaped this job's completion, and waits for that
        // completion even when it is dropped (`inflight.rs`).
        let res = unsafe { job.op.run() };
        job.port.complete(job.token, res);
    }
}

/// The pool, created on first need and shared by all workers: `threads` and `auto`
/// need it, `io_uring` only if the ring is unavailable, `off` never.
#[derive(Debug)]
pub struct SharedPool {
    threads: usize,
    max_queue: usize,
    queue: QueueKind,
    pool: Mutex<Option<Arc<ThreadPool>>>,
}

impl SharedPool {
    /// Remembers the pool's settings; starts nothing yet.
    pub fn new(cfg: &EngineConfig) -> SharedPool {
        SharedPool {
            threads: cfg.threads,
            max_queue: cfg.max_queue,
            queue: cfg.queue,
            pool: Mutex::new(None),
        }
    }

    /// Uses an already started pool.
    pub fn with_pool(pool: Arc<ThreadPool>) -> SharedPool {
        SharedPool {
            threads: pool.threads(),
            max_queue: pool.max_queue(),
            queue: pool.queue_kind(),
            pool: Mutex::new(Some(pool)),
        }
    }

    /// The pool, started now if it was not.
    pub fn get(&self) -> io::Result<Arc<ThreadPool>> {
        let mut p = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pool) = p.as_ref() {
            return Ok(pool.clone());
        }
        let pool = ThreadPool::new(self.threads, self.max_queue, self.queue)?;
        // Engines are made when workers start, before they serve: the pool is whole
        // before the first read.
        pool.wait_started();
        *p = Some(pool.clone());
        Ok(pool)
    }

    /// The pool if some engine started it.
    pub fn started(&self) -> Option<Arc<ThreadPool>> {
        self.pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Where one worker's pool completions land: a list plus the worker's eventfd.
pub(crate) struct CompletionPort {
    done: Mutex<Vec<(usize, i64)>>,
    efd: OwnedFd,
}

impl CompletionPort {
    fn complete(&self, token: usize, res: i64) {
        let was_empty = {
            let mut d = self.done.lock().unwrap_or_else(PoisonError::into_inner);
            d.push((token, res));
            d.len() == 1
        };
        // The worker resets the eventfd *before* taking the list, so a push into an
        // empty list is always followed by a signal it has not consumed yet.
        if was_empty {
            sys::eventfd_signal(&self.efd);
        }
    }
}

/// The notify-fd handle the reactor holds; keeps the eventfd open.
pub(crate) struct PortFd(Arc<CompletionPort>);

impl AsRawFd for PortFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.efd.as_raw_fd()
    }
}

/// The pool as an in-flight [`Source`].
pub(crate) struct PoolSource {
    pool: Arc<ThreadPool>,
    port: Arc<CompletionPort>,
}

impl Source for PoolSource {
    type Notify = PortFd;

    fn notify(&self) -> PortFd {
        PortFd(self.port.clone())
    }

    fn push(&self, token: usize, op: &SysOp, _outstanding: usize) -> Result<bool, ()> {
        let job = Job {
            op: *op,
            token,
            port: self.port.clone(),
        };
        self.pool.try_push(job).map(|()| false).map_err(drop)
    }

    fn reap(&self, reset: bool, out: &mut Vec<(usize, i64)>) {
        if reset {
            sys::eventfd_reset(&self.port.efd);
        }
        let mut d = self
            .port
            .done
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if out.is_empty() {
            std::mem::swap(&mut *d, out);
        } else {
            out.append(&mut d);
        }
    }

    fn wait(&self) {
        sys::wait_readable(&self.port.efd);
    }
}

/// One worker's `threads` engine.
#[derive(Clone)]
pub(crate) struct PoolEngine {
    core: Rc<Core<PoolSource>>,
}

impl PoolEngine {
    pub(crate) fn new(pool: Arc<ThreadPool>, stats: Arc<AioStats>) -> io::Result<PoolEngine> {
        let port = Arc::new(CompletionPort {
            done: Mutex::new(Vec::new()),
            efd: sys::eventfd()?,
        });
        Ok(PoolEngine {
            core: Rc::new(Core::new(PoolSource { pool, port }, stats)),
        })
    }

    pub(crate) async fn submit(&self, op: SysOp, keep: Keep) -> (i64, Keep) {
        self.core.submit(op, keep).await
    }

    pub(crate) fn pool(&self) -> &Arc<ThreadPool> {
        &self.core.source.pool
    }

    pub(crate) fn stats(&self) -> &Arc<AioStats> {
        &self.core.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_run_jobs_and_signal_once_per_batch() {
        let pool = ThreadPool::new(2, 16, QueueKind::Mutex).unwrap();
        let port = Arc::new(CompletionPort {
            done: Mutex::new(Vec::new()),
            efd: sys::eventfd().unwrap(),
        });
        for token in 0..8 {
            let job = Job {
                op: SysOp::Fsync {
                    fd: -1,
                    datasync: false,
                },
                token,
                port: port.clone(),
            };
            assert!(pool.try_push(job).is_ok());
        }
        let src = PoolSource {
            pool: pool.clone(),
            port,
        };
        let mut got = Vec::new();
        while got.len() < 8 {
            src.wait();
            src.reap(true, &mut got);
        }
        got.sort();
        assert_eq!(got.len(), 8);
        assert!(got.iter().all(|&(_, r)| r == -(libc::EBADF as i64)));
        assert_eq!(
            got.iter().map(|p| p.0).collect::<Vec<_>>(),
            (0..8).collect::<Vec<_>>()
        );
        assert_eq!(pool.queue_depth(), 0);
    }

    #[test]
    fn shared_pool_starts_once() {
        let cfg = EngineConfig {
            threads: 1,
            max_queue: 4,
            ..EngineConfig::default()
        };
        let s = SharedPool::new(&cfg);
        assert!(s.started().is_none());
        let a = s.get().unwrap();
        let b = s.get().unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.threads(), 1);
        assert_eq!(a.max_queue(), 4);
    }
}
