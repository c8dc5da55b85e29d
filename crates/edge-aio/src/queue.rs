//! The hand-off queue between the workers and the pool threads, pluggable
//! (`aio.thread_pool.queue`): nginx's mutex + condition variable, or a lock-free bounded
//! ring. Both are bounded; a full queue refuses the item (`Err(item)`), and the engine
//! runs that operation inline instead.
//!
//! **Lock-free parking.** Idle pool threads must sleep, and a push must never be lost
//! to a thread that is just falling asleep. The scheme is a futex on an `epoch` counter
//! paired with a `sleepers` counter:
//!
//! - a consumer that finds the queue empty reads `epoch`, increments `sleepers`, issues
//!   a SeqCst fence, and tries the queue again; only if it is still empty does it
//!   `futex_wait(epoch, seen)`, which sleeps only while `epoch` still equals `seen`;
//! - a producer pushes, issues a SeqCst fence and reads `sleepers`; if anyone announced
//!   sleep, it increments `epoch` and `futex_wake`s one thread.
//!
//! The two fences make it impossible for both sides to miss each other: either the
//! consumer's second try sees the item, or the producer sees the consumer's announce
//! and bumps `epoch` after the consumer read it, so the consumer's futex_wait returns
//! at once or is woken. A producer that finds no sleeper pays no syscall at all, which
//! is the point: under load the pool threads are busy and pushes are a CAS each.

use crossbeam_queue::ArrayQueue;
use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, Mutex, PoisonError};

/// Which hand-off queue the pool uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueKind {
    /// `Mutex<VecDeque>` + `Condvar`, as nginx's `ngx_thread_pool`.
    #[default]
    Mutex,
    /// `crossbeam_queue::ArrayQueue` (bounded MPMC) with futex parking.
    LockFree,
}

impl std::str::FromStr for QueueKind {
    type Err = String;
    fn from_str(s: &str) -> Result<QueueKind, String> {
        match s {
            "mutex" => Ok(QueueKind::Mutex),
            "lockfree" | "lock_free" => Ok(QueueKind::LockFree),
            _ => Err(format!("unknown queue {s:?} (mutex | lockfree)")),
        }
    }
}

/// A bounded multi-producer multi-consumer queue whose consumers block.
// One per process, inside an `Arc`; the lock-free variant's size is crossbeam's cache
// padding of head and tail, which is the point.
#[allow(clippy::large_enum_variant)]
pub(crate) enum JobQueue<T> {
    Mutex(MutexQueue<T>),
    LockFree(LockFreeQueue<T>),
}

impl<T> JobQueue<T> {
    /// A queue of at most `cap` items (at least 1).
    pub(crate) fn new(kind: QueueKind, cap: usize) -> JobQueue<T> {
        let cap = cap.max(1);
        match kind {
            QueueKind::Mutex => JobQueue::Mutex(MutexQueue {
                q: Mutex::new(VecDeque::with_capacity(cap.min(4096))),
                cv: Condvar::new(),
                cap,
            }),
            QueueKind::LockFree => JobQueue::LockFree(LockFreeQueue {
                q: ArrayQueue::new(cap),
                sleepers: AtomicUsize::new(0),
                epoch: AtomicU32::new(0),
            }),
        }
    }

    /// Adds an item, or gives it back if the queue is full.
    pub(crate) fn push(&self, item: T) -> Result<(), T> {
        match self {
            JobQueue::Mutex(q) => q.push(item),
            JobQueue::LockFree(q) => q.push(item),
        }
    }

    /// Takes an item, sleeping while the queue is empty. `None` once `stop` is set and
    /// the queue is empty.
    pub(crate) fn pop(&self, stop: &AtomicBool) -> Option<T> {
        match self {
            JobQueue::Mutex(q) => q.pop(stop),
            JobQueue::LockFree(q) => q.pop(stop),
        }
    }

    /// Wakes every sleeping consumer (after `stop` was set).
    pub(crate) fn wake_all(&self) {
        match self {
            JobQueue::Mutex(q) => {
                // Taking the lock orders this after any consumer's check of `stop`.
                drop(q.q.lock().unwrap_or_else(PoisonError::into_inner));
                q.cv.notify_all();
            }
            JobQueue::LockFree(q) => {
                q.epoch.fetch_add(1, SeqCst);
                futex_wake(&q.epoch, i32::MAX);
            }
        }
    }

    /// Items waiting (not yet taken by a thread).
    pub(crate) fn len(&self) -> usize {
        match self {
            JobQueue::Mutex(q) => q.q.lock().unwrap_or_else(PoisonError::into_inner).len(),
            JobQueue::LockFree(q) => q.q.len(),
        }
    }
}

pub(crate) struct MutexQueue<T> {
    q: Mutex<VecDeque<T>>,
    cv: Condvar,
    cap: usize,
}

impl<T> MutexQueue<T> {
    fn push(&self, item: T) -> Result<(), T> {
        let mut q = self.q.lock().unwrap_or_else(PoisonError::into_inner);
        if q.len() >= self.cap {
            return Err(item);
        }
        q.push_back(item);
        drop(q);
        self.cv.notify_one();
        Ok(())
    }

    fn pop(&self, stop: &AtomicBool) -> Option<T> {
        let mut q = self.q.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(item) = q.pop_front() {
                return Some(item);
            }
            if stop.load(SeqCst) {
                return None;
            }
            q = self.cv.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

pub(crate) struct LockFreeQueue<T> {
    q: ArrayQueue<T>,
    sleepers: AtomicUsize,
    epoch: AtomicU32,
}

impl<T> LockFreeQueue<T> {
    fn push(&self, item: T) -> Result<(), T> {
        self.q.push(item)?;
        fence(SeqCst);
        if self.sleepers.load(SeqCst) > 0 {
            self.epoch.fetch_add(1, SeqCst);
            futex_wake(&self.epoch, 1);
        }
        Ok(())
    }

    fn pop(&self, stop: &AtomicBool) -> Option<T> {
        loop {
            if let Some(item) = self.q.pop() {
                return Some(item);
            }
            let seen = self.epoch.load(SeqCst);
            self.sleepers.fetch_add(1, SeqCst);
            fence(SeqCst);
            if let Some(item) = self.q.pop() {
                self.sleepers.fetch_sub(1, SeqCst);
                return Some(item);
            }
            if stop.load(SeqCst) {
                self.sleepers.fetch_sub(1, SeqCst);
                return None;
            }
            futex_wait(&self.epoch, seen);
            self.sleepers.fetch_sub(1, SeqCst);
        }
    }
}

/// Sleeps while `*word == expected` (spurious returns are fine: callers loop).
fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: `word` is a live, aligned u32 borrowed for the whole call; FUTEX_WAIT only
    // reads it atomically. A null timeout means no timespec is read.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

/// Wakes up to `n` threads sleeping on `word`.
fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE does not access its memory
    // beyond using the address as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn both() -> [QueueKind; 2] {
        [QueueKind::Mutex, QueueKind::LockFree]
    }

    #[test]
    fn bounded_fifo() {
        for kind in both() {
            let q = JobQueue::new(kind, 2);
            let stop = AtomicBool::new(false);
            assert!(q.push(1).is_ok());
            assert!(q.push(2).is_ok());
            assert_eq!(q.push(3), Err(3), "{kind:?}: full queue refuses");
            assert_eq!(q.len(), 2);
            assert_eq!(q.pop(&stop), Some(1));
            assert_eq!(q.pop(&stop), Some(2));
            stop.store(true, SeqCst);
            assert_eq!(q.pop(&stop), None);
        }
    }

    #[test]
    fn stop_wakes_sleepers_and_drains_first() {
        for kind in both() {
            let q = Arc::new(JobQueue::<u32>::new(kind, 8));
            let stop = Arc::new(AtomicBool::new(false));
            let threads: Vec<_> = (0..3)
                .map(|_| {
                    let (q, stop) = (q.clone(), stop.clone());
                    std::thread::spawn(move || {
                        let mut n = 0;
                        while q.pop(&stop).is_some() {
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            std::thread::sleep(std::time::Duration::from_millis(20));
            q.push(7).unwrap();
            stop.store(true, SeqCst);
            q.wake_all();
            let total: i32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
            assert_eq!(total, 1, "{kind:?}: the queued item still ran");
        }
    }

    /// Many producers, few consumers, a tiny queue: every accepted item is taken
    /// exactly once and nobody sleeps through a push (the test would hang).
    #[test]
    fn no_lost_wakeups_under_contention() {
        for kind in both() {
            let q = Arc::new(JobQueue::<u64>::new(kind, 4));
            let stop = Arc::new(AtomicBool::new(false));
            let consumers: Vec<_> = (0..3)
                .map(|_| {
                    let (q, stop) = (q.clone(), stop.clone());
                    std::thread::spawn(move || {
                        let mut sum = 0u64;
                        while let Some(x) = q.pop(&stop) {
                            sum += x;
                        }
                        sum
                    })
                })
                .collect();
            let producers: Vec<_> = (0..3u64)
                .map(|p| {
                    let q = q.clone();
                    std::thread::spawn(move || {
                        let mut sum = 0u64;
                        for i in 0..20_000u64 {
                            let mut x = p * 1_000_000 + i;
                            while let Err(back) = q.push(x) {
                                x = back;
                                std::thread::yield_now();
                            }
                            sum += x;
                        }
                        sum
                    })
                })
                .collect();
            let pushed: u64 = producers.into_iter().map(|t| t.join().unwrap()).sum();
            stop.store(true, SeqCst);
            q.wake_all();
            let popped: u64 = consumers.into_iter().map(|t| t.join().unwrap()).sum();
            assert_eq!(pushed, popped, "{kind:?}");
        }
    }

    #[test]
    fn parse_kind() {
        assert_eq!("mutex".parse::<QueueKind>(), Ok(QueueKind::Mutex));
        assert_eq!("lockfree".parse::<QueueKind>(), Ok(QueueKind::LockFree));
        assert!("x".parse::<QueueKind>().is_err());
    }
}
