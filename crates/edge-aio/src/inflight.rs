//! The in-flight table shared by the asynchronous backends (thread pool, io_uring).
//!
//! How it fits: [`Core::submit`] puts what an operation owns (its [`Keep`]: the file
//! handle, buffer, paths, statx record) in a slot of a slab, hands a raw description
//! ([`SysOp`]) to the backend's [`Source`] (a pool queue or the ring) with the slot
//! number as its token, and returns an [`InFlight`] future that waits on the slot.
//!
//! Completions come back as `(token, result)` pairs when the backend's eventfd turns
//! readable in the worker's reactor. One driver task per engine (spawned on the
//! worker's `LocalSet` at the first operation) waits on that eventfd with
//! `tokio::io::unix::AsyncFd`, reaps the pairs, stores each result in its slot and wakes
//! the slot's waker. For io_uring the same task also submits: operations pushed during
//! one loop turn wake it once, and it enters the kernel once for all of them.
//!
//! Ownership on cancellation: dropping an [`InFlight`] only marks its slot orphaned.
//! The slot, and with it the buffer and fd the backend is using, is freed when the
//! completion arrives; an orphaned `open` has its new fd closed then. Dropping the
//! engine itself waits (blocking) for every outstanding completion before the slab
//! goes, so no pool thread or kernel write can ever land in freed memory.

use crate::buf::Buf;
use crate::file::AioFile;
use crate::gather::Gather;
use crate::stats::AioStats;
use crate::sys::{CPath, HeapStatx, SysOp};
use std::cell::RefCell;
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::task::JoinHandle;

/// What an operation owns while in flight; returned to the caller on completion.
/// Some fields are never read: holding them is their purpose.
#[allow(dead_code)]
pub(crate) enum Keep {
    None,
    File(AioFile),
    Buf(AioFile, Buf),
    Gather(AioFile, Gather),
    Stat(Option<AioFile>, Option<CPath>, HeapStatx),
    Path(CPath),
    Paths(CPath, CPath),
    /// The closure of a [`crate::sys::SysOp::Call`].
    Call(CallBox),
}

/// Owns a boxed closure through a raw pointer, so that the pointer a
/// [`crate::sys::SysOp::Call`] carries stays valid while this owner moves around (a
/// `Box` is a unique owner: moving it could invalidate pointers derived from it).
pub(crate) struct CallBox(*mut (dyn FnMut() -> i64 + Send));

impl CallBox {
    pub(crate) fn new(f: Box<dyn FnMut() -> i64 + Send>) -> CallBox {
        CallBox(Box::into_raw(f))
    }

    pub(crate) fn ptr(&self) -> *mut (dyn FnMut() -> i64 + Send) {
        self.0
    }
}

impl Drop for CallBox {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from `Box::into_raw` in `new` and is freed only here,
        // once: the op that used it has completed before its `Keep` is dropped.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

// SAFETY: the closure is `Send`; the pointer is only an owner of it.
unsafe impl Send for CallBox {}

/// Where operations go and completions come from: the thread pool or a ring.
pub(crate) trait Source: 'static {
    /// The fd that becomes readable when completions are waiting.
    type Notify: AsRawFd + 'static;

    /// A handle on the notify fd that keeps it open (for the reactor registration).
    fn notify(&self) -> Self::Notify;

    /// Hands the op over with its token. `outstanding` is how many ops are already in
    /// flight. `Ok(true)` asks for a flush this loop turn; `Err` means full: the caller
    /// runs the op inline.
    fn push(&self, token: usize, op: &SysOp, outstanding: usize) -> Result<bool, ()>;

    /// Submits what `push` queued; `true` if some must wait for the next turn.
    fn flush(&self) -> bool {
        false
    }

    /// Whether completions may be ready right after a flush, without a notification.
    const REAP_AFTER_FLUSH: bool = false;

    /// Appends finished `(token, result)` pairs to `out`, resetting the notify fd
    /// first when `reset` (so a completion that lands later notifies again).
    fn reap(&self, reset: bool, out: &mut Vec<(usize, i64)>);

    /// Blocks until a completion may be ready (only used when the engine is dropped).
    fn wait(&self);
}

enum State {
    Waiting(Option<Waker>),
    Done(i64),
    Orphaned,
}

struct Slot {
    keep: Keep,
    state: State,
    returns_fd: bool,
}

/// The slots; `outstanding` counts those whose completion has not arrived.
#[derive(Default)]
struct Slab {
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    outstanding: usize,
}

/// What to do with a completion once the slab is no longer borrowed.
enum Action {
    Wake(Option<Waker>),
    Discard(Keep, Option<RawFd>),
}

impl Slab {
    fn insert(&mut self, keep: Keep, returns_fd: bool) -> usize {
        let slot = Some(Slot {
            keep,
            state: State::Waiting(None),
            returns_fd,
        });
        self.outstanding += 1;
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, token: usize) -> Slot {
        let slot = self.slots[token].take().expect("live in-flight slot");
        self.free.push(token);
        slot
    }

    /// The op was never handed over: take its belongings back.
    fn unsubmit(&mut self, token: usize) -> Keep {
        self.outstanding -= 1;
        self.remove(token).keep
    }

    fn complete(&mut self, token: usize, res: i64) -> Action {
        self.outstanding -= 1;
        let slot = self.slots[token]
            .as_mut()
            .expect("completion for a live slot");
        match std::mem::replace(&mut slot.state, State::Done(res)) {
            State::Waiting(w) => Action::Wake(w),
            State::Orphaned => {
                let slot = self.remove(token);
                let fd = (slot.returns_fd && res >= 0).then_some(res as RawFd);
                Action::Discard(slot.keep, fd)
            }
            State::Done(_) => unreachable!("one completion per operation"),
        }
    }

    fn poll(&mut self, token: usize, waker: &Waker) -> Option<(i64, Keep)> {
        let slot = self.slots[token].as_mut().expect("polled a live slot");
        match &mut slot.state {
            State::Done(res) => {
                let res = *res;
                Some((res, self.remove(token).keep))
            }
            State::Waiting(w) => {
                if !w.as_ref().is_some_and(|w| w.will_wake(waker)) {
                    *w = Some(waker.clone());
                }
                None
            }
            State::Orphaned => unreachable!("an orphaned slot has no future"),
        }
    }

    /// The future was dropped: free now if done, else when the completion arrives.
    fn orphan(&mut self, token: usize) -> Option<Action> {
        let slot = self.slots[token].as_mut().expect("dropped a live slot");
        match slot.state {
            State::Done(res) => {
                let slot = self.remove(token);
                let fd = (slot.returns_fd && res >= 0).then_some(res as RawFd);
                Some(Action::Discard(slot.keep, fd))
            }
            _ => {
                slot.state = State::Orphaned;
                None
            }
        }
    }
}

/// Runs an action outside any borrow: wakes a future, or frees an orphan's belongings
/// and closes the fd an orphaned open produced.
fn act(a: Action) {
    match a {
        Action::Wake(w) => {
            if let Some(w) = w {
                w.wake();
            }
        }
        Action::Discard(keep, fd) => {
            if let Some(fd) = fd {
                // SAFETY: `fd` is the result of an open whose future was dropped; the
                // kernel gave it to us and nothing else refers to it.
                drop(unsafe { OwnedFd::from_raw_fd(fd) });
            }
            drop(keep);
        }
    }
}

/// One worker's asynchronous engine: a source, the in-flight slab, the driver task.
pub(crate) struct Core<S: Source> {
    pub(crate) source: S,
    slab: RefCell<Slab>,
    scratch: RefCell<Vec<(usize, i64)>>,
    pub(crate) stats: Arc<AioStats>,
    driver: RefCell<Option<JoinHandle<()>>>,
    driver_waker: RefCell<Option<Waker>>,
}

impl<S: Source> Core<S> {
    pub(crate) fn new(source: S, stats: Arc<AioStats>) -> Core<S> {
        Core {
            source,
            slab: RefCell::default(),
            scratch: RefCell::default(),
            stats,
            driver: RefCell::default(),
            driver_waker: RefCell::default(),
        }
    }

    /// Operations whose completion has not been reaped.
    pub(crate) fn outstanding(&self) -> usize {
        self.slab.borrow().outstanding
    }

    /// Runs `op` through the source and returns its result (`-errno` on failure) with
    /// its belongings. A full source runs it inline, counted as an overflow.
    pub(crate) async fn submit(self: &Rc<Self>, op: SysOp, keep: Keep) -> (i64, Keep) {
        if let Err(e) = self.ensure_driver() {
            // The eventfd could not join the reactor (epoll_ctl failed): no completion
            // could ever be delivered, so fail the op rather than hang it.
            return (-(e.raw_os_error().unwrap_or(libc::EIO) as i64), keep);
        }
        let (token, outstanding) = {
            let mut slab = self.slab.borrow_mut();
            let before = slab.outstanding;
            (slab.insert(keep, op.returns_fd()), before)
        };
        let fut = InFlight {
            core: self.clone(),
            token,
            done: false,
        };
        match self.source.push(token, &op, outstanding) {
            Ok(flush) => {
                self.stats.set_in_flight(outstanding + 1);
                if flush {
                    self.wake_driver();
                }
                fut.await
            }
            Err(()) => {
                self.stats.overflow();
                let keep = fut.unsubmit();
                // SAFETY: the op was not handed over; its pointers point into `keep`,
                // which this frame owns for the whole call.
                (unsafe { op.run() }, keep)
            }
        }
    }

    fn wake_driver(&self) {
        if let Some(w) = self.driver_waker.borrow().as_ref() {
            w.wake_by_ref();
        }
    }

    /// Spawns the driver task on the current `LocalSet` if it is not running.
    fn ensure_driver(self: &Rc<Self>) -> std::io::Result<()> {
        let mut d = self.driver.borrow_mut();
        if d.as_ref().is_some_and(|h| !h.is_finished()) {
            return Ok(());
        }
        // SAFETY: the notify handle owns (through an `Arc` or `Rc`) the eventfd it
        // returns, so the fd stays open and the same for the AsyncFd's whole life.
        let afd =
            unsafe { AsyncFd::register_with_interest(self.source.notify(), Interest::READABLE) }
                .map_err(|e| e.into_parts().1)?;
        *d = Some(tokio::task::spawn_local(drive(Rc::downgrade(self), afd)));
        Ok(())
    }

    /// Reaps and delivers completions.
    fn reap(&self, reset: bool) {
        let mut done = std::mem::take(&mut *self.scratch.borrow_mut());
        self.source.reap(reset, &mut done);
        if done.is_empty() {
            *self.scratch.borrow_mut() = done;
            return;
        }
        for (token, res) in done.drain(..) {
            let action = self.slab.borrow_mut().complete(token, res);
            act(action);
        }
        *self.scratch.borrow_mut() = done;
        self.stats.set_in_flight(self.outstanding());
    }

    fn driver_poll(&self, afd: &AsyncFd<S::Notify>, cx: &mut Context<'_>) -> Poll<()> {
        {
            let mut w = self.driver_waker.borrow_mut();
            if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *w = Some(cx.waker().clone());
            }
        }
        if self.source.flush() {
            cx.waker().wake_by_ref();
        }
        if S::REAP_AFTER_FLUSH {
            self.reap(false);
        }
        loop {
            match afd.poll_read_ready(cx) {
                Poll::Ready(Ok(mut guard)) => {
                    guard.clear_ready();
                    self.reap(true);
                }
                Poll::Ready(Err(e)) => panic!("aio completion eventfd in the reactor: {e}"),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// The driver task: holds the engine weakly, so dropping the engine ends it.
async fn drive<S: Source>(core: Weak<Core<S>>, afd: AsyncFd<S::Notify>) {
    std::future::poll_fn(|cx| match core.upgrade() {
        Some(core) => core.driver_poll(&afd, cx),
        None => Poll::Ready(()),
    })
    .await
}

impl<S: Source> Drop for Core<S> {
    fn drop(&mut self) {
        if let Some(h) = self.driver.get_mut().take() {
            h.abort();
        }
        // Slots may still own memory a pool thread or the kernel is writing: wait for
        // every completion before the slab (and the ring) go.
        while self.slab.get_mut().outstanding > 0 {
            self.source.flush();
            self.source.wait();
            self.reap(true);
        }
    }
}

/// Waits for one slot; dropping it orphans the slot (see the module doc).
pub(crate) struct InFlight<S: Source> {
    core: Rc<Core<S>>,
    token: usize,
    done: bool,
}

impl<S: Source> InFlight<S> {
    fn unsubmit(mut self) -> Keep {
        self.done = true;
        let keep = self.core.slab.borrow_mut().unsubmit(self.token);
        keep
    }
}

impl<S: Source> Future for InFlight<S> {
    type Output = (i64, Keep);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<(i64, Keep)> {
        let polled = self.core.slab.borrow_mut().poll(self.token, cx.waker());
        match polled {
            Some(out) => {
                self.done = true;
                Poll::Ready(out)
            }
            None => Poll::Pending,
        }
    }
}

impl<S: Source> Drop for InFlight<S> {
    fn drop(&mut self) {
        if !self.done {
            let action = self.core.slab.borrow_mut().orphan(self.token);
            if let Some(a) = action {
                act(a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    fn noop_waker() -> Waker {
        Waker::from(Arc::new(Noop))
    }

    #[test]
    fn slab_complete_then_poll() {
        let mut s = Slab::default();
        let t = s.insert(Keep::None, false);
        assert!(s.poll(t, &noop_waker()).is_none());
        assert!(matches!(s.complete(t, 5), Action::Wake(Some(_))));
        assert_eq!(s.outstanding, 0);
        let (res, _) = s.poll(t, &noop_waker()).unwrap();
        assert_eq!(res, 5);
        assert_eq!(s.insert(Keep::None, false), t, "slot reused");
    }

    #[test]
    fn orphaned_open_closes_its_fd() {
        let mut s = Slab::default();
        let t = s.insert(Keep::None, true);
        assert!(s.orphan(t).is_none(), "still in flight");
        // SAFETY: a plain dup of stdin; the test owns the result.
        let fd = unsafe { libc::dup(0) };
        assert!(fd >= 0);
        match s.complete(t, fd as i64) {
            Action::Discard(_, Some(f)) => {
                assert_eq!(f, fd);
                act(Action::Discard(Keep::None, Some(f)));
            }
            _ => panic!("orphan must be discarded with its fd"),
        }
        // SAFETY: querying flags of a (now closed) fd number.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_GETFD) }, -1, "fd closed");
        assert_eq!(s.outstanding, 0);
    }

    #[test]
    fn orphan_after_done_frees_now() {
        let mut s = Slab::default();
        let t = s.insert(Keep::None, false);
        let _ = s.complete(t, 0);
        assert!(matches!(s.orphan(t), Some(Action::Discard(_, None))));
        assert_eq!(s.free, vec![t]);
    }
}
