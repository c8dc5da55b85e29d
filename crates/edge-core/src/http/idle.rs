//! Coarse timers for connections waiting between requests, and the worker's drain
//! signal: one per worker, no lock, no atomic.
//!
//! How it fits: a keep-alive connection waits for its next request under
//! `keepalive_timeout` (or `client_header_timeout` for its first). With a tokio timer
//! per wait, every request armed and disarmed an entry in the runtime's timer wheel
//! (~700 instructions of a ~10k-instruction hit). Here a wait is a slot in a
//! worker-local slab holding a deadline in ticks and a waker; the worker's ticker
//! advances the clock every [`TICK`] and wakes what expired, so a wait costs a slab
//! insert and remove. A timeout fires between its duration and one tick later, which
//! is all an idle timeout needs (nginx rounds its timers too). Draining wakes every
//! waiter at once.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// The clock's resolution.
pub const TICK: Duration = Duration::from_millis(100);

/// Why an idle wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleEnd {
    Expired,
    Draining,
}

#[derive(Default)]
struct Slot {
    deadline: u64,
    waker: Option<Waker>,
}

/// A worker's idle timers and drain flag.
#[derive(Default)]
pub struct IdleTimers {
    now: Cell<u64>,
    draining: Cell<bool>,
    slots: RefCell<Vec<Slot>>,
    free: RefCell<Vec<u32>>,
    /// Slots in use (for tests and `/status`).
    waiting: Cell<usize>,
}

impl IdleTimers {
    pub fn is_draining(&self) -> bool {
        self.draining.get()
    }

    /// Connections waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting.get()
    }

    /// Start draining: every wait that stops on drain ends now.
    pub fn start_draining(&self) {
        self.draining.set(true);
        self.wake(|_| true);
    }

    /// One tick of the clock: wake the waits that expired.
    pub fn tick(&self) {
        let now = self.now.get() + 1;
        self.now.set(now);
        self.wake(|deadline| deadline <= now);
    }

    fn wake(&self, due: impl Fn(u64) -> bool) {
        // Wakers are taken out first: waking never re-enters this slab here (tasks run
        // later), but keep the borrow short anyway.
        let mut woken = Vec::new();
        for s in self.slots.borrow_mut().iter_mut() {
            if s.waker.is_some() && due(s.deadline) {
                woken.extend(s.waker.take());
            }
        }
        for w in woken {
            w.wake();
        }
    }

    /// A wait of at least `limit` (at most one [`TICK`] more); with `stop_on_drain` it
    /// also ends when draining starts.
    pub fn wait(&self, limit: Duration, stop_on_drain: bool) -> IdleWait<'_> {
        let ticks = limit.as_nanos().div_ceil(TICK.as_nanos()) as u64;
        IdleWait {
            timers: self,
            deadline: self.now.get().saturating_add(ticks).saturating_add(1),
            stop_on_drain,
            slot: None,
        }
    }

    fn insert(&self, deadline: u64, waker: Waker) -> u32 {
        let mut slots = self.slots.borrow_mut();
        self.waiting.set(self.waiting.get() + 1);
        let slot = Slot {
            deadline,
            waker: Some(waker),
        };
        match self.free.borrow_mut().pop() {
            Some(i) => {
                slots[i as usize] = slot;
                i
            }
            None => {
                slots.push(slot);
                (slots.len() - 1) as u32
            }
        }
    }

    fn remove(&self, i: u32) {
        self.slots.borrow_mut()[i as usize] = Slot::default();
        self.free.borrow_mut().push(i);
        self.waiting.set(self.waiting.get() - 1);
    }
}

/// See [`IdleTimers::wait`].
pub struct IdleWait<'a> {
    timers: &'a IdleTimers,
    deadline: u64,
    stop_on_drain: bool,
    slot: Option<u32>,
}

impl Future for IdleWait<'_> {
    type Output = IdleEnd;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<IdleEnd> {
        let t = self.timers;
        if self.stop_on_drain && t.is_draining() {
            return Poll::Ready(IdleEnd::Draining);
        }
        if t.now.get() >= self.deadline {
            return Poll::Ready(IdleEnd::Expired);
        }
        match self.slot {
            None => {
                let i = t.insert(self.deadline, cx.waker().clone());
                self.slot = Some(i);
            }
            Some(i) => {
                let mut slots = t.slots.borrow_mut();
                let s = &mut slots[i as usize];
                if !s.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    s.waker = Some(cx.waker().clone());
                }
            }
        }
        Poll::Pending
    }
}

impl Drop for IdleWait<'_> {
    fn drop(&mut self) {
        if let Some(i) = self.slot.take() {
            self.timers.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(w: &mut Pin<Box<IdleWait<'_>>>) -> Poll<IdleEnd> {
        w.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn expires_after_its_ticks_not_before() {
        let t = IdleTimers::default();
        let mut w = Box::pin(t.wait(Duration::from_millis(250), false)); // 3 ticks + 1
        for _ in 0..3 {
            assert_eq!(poll(&mut w), Poll::Pending);
            t.tick();
        }
        assert_eq!(poll(&mut w), Poll::Pending, "at least the full duration");
        assert_eq!(t.waiting(), 1);
        t.tick();
        assert_eq!(poll(&mut w), Poll::Ready(IdleEnd::Expired));
        drop(w);
        assert_eq!(t.waiting(), 0, "a finished wait leaves its slot");
    }

    #[test]
    fn draining_ends_only_the_waits_that_stop_on_it() {
        let t = IdleTimers::default();
        let mut a = Box::pin(t.wait(Duration::from_secs(60), true));
        let mut b = Box::pin(t.wait(Duration::from_secs(60), false));
        assert_eq!(poll(&mut a), Poll::Pending);
        assert_eq!(poll(&mut b), Poll::Pending);
        t.start_draining();
        assert!(t.is_draining());
        assert_eq!(poll(&mut a), Poll::Ready(IdleEnd::Draining));
        assert_eq!(poll(&mut b), Poll::Pending);
        drop((a, b));
        assert_eq!(t.waiting(), 0);
    }

    #[test]
    fn slots_are_reused() {
        let t = IdleTimers::default();
        for _ in 0..100 {
            let mut w = Box::pin(t.wait(Duration::from_secs(1), true));
            assert_eq!(poll(&mut w), Poll::Pending);
        }
        assert_eq!(t.slots.borrow().len(), 1);
    }
}
