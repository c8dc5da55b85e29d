//! Idle keep-alive connections parked outside any task.
//!
//! How it fits: a session idle past its grace period returns its connection as a
//! [`Parked`] (socket, peer, requests served, what is left of the idle timeout) and its
//! task ends, freeing the task's state (about 4 KiB). The worker keeps the socket here,
//! with the runtime's readiness registration pointed at a small waker that names the
//! slot. When bytes arrive the waker queues the slot, the worker's parker task takes it
//! out and starts a new session task with [`crate::http::session::Start::Resume`]. Parked
//! connections past their idle deadline are closed by the worker's once-a-second tick;
//! all of them are closed when the worker drains. An idle connection then costs its
//! slot, its socket's registration and the waker: a few hundred bytes (nginx keeps a
//! connection structure and an event).

use crate::http::session::Parked;
use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

/// Slots woken by readiness, and the parker task's waker. Wakers run on the worker's
/// own thread (the runtime is single-threaded), so the mutex is never contended; it is
/// there because a `Waker` must be `Send + Sync`.
#[derive(Default)]
struct ReadyList {
    inner: Mutex<ReadyInner>,
}

#[derive(Default)]
struct ReadyInner {
    slots: Vec<(u32, u32)>,
    parker: Option<Waker>,
}

fn lock(m: &Mutex<ReadyInner>) -> std::sync::MutexGuard<'_, ReadyInner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The waker a parked socket's registration holds: slot and generation.
struct SlotWaker {
    slot: u32,
    gen: u32,
    list: Arc<ReadyList>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut inner = lock(&self.list.inner);
        inner.slots.push((self.slot, self.gen));
        if let Some(w) = inner.parker.take() {
            drop(inner);
            w.wake();
        }
    }
}

struct Entry {
    conn: Parked,
    deadline: Instant,
    gen: u32,
}

/// A worker's parked connections.
#[derive(Default)]
pub struct Parking {
    slots: RefCell<Vec<Option<Entry>>>,
    gens: RefCell<Vec<u32>>,
    free: RefCell<Vec<u32>>,
    ready: Arc<ReadyList>,
}

impl Parking {
    /// Connections parked now.
    pub fn len(&self) -> usize {
        self.slots.borrow().len() - self.free.borrow().len()
    }

    /// Park `conn`. Returns it back when it is readable already (the caller resumes it
    /// at once).
    pub fn park(&self, mut conn: Parked) -> Option<Parked> {
        let slot = match self.free.borrow_mut().pop() {
            Some(i) => i,
            None => {
                self.slots.borrow_mut().push(None);
                self.gens.borrow_mut().push(0);
                (self.slots.borrow().len() - 1) as u32
            }
        };
        let gen = {
            let mut gens = self.gens.borrow_mut();
            gens[slot as usize] = gens[slot as usize].wrapping_add(1);
            gens[slot as usize]
        };
        let waker = Waker::from(Arc::new(SlotWaker {
            slot,
            gen,
            list: self.ready.clone(),
        }));
        // Registers `waker` for the socket's next readiness (or says it is ready now).
        // Parked connections are TCP or TLS, both with a socket (an HTTP/2 stream is
        // never parked, and would count as readable: served at once).
        let ready = conn
            .io
            .poll_read_ready(&mut Context::from_waker(&waker))
            .is_ready();
        if ready {
            self.free.borrow_mut().push(slot);
            return Some(conn);
        }
        let deadline = Instant::now() + conn.idle_left;
        self.slots.borrow_mut()[slot as usize] = Some(Entry {
            conn,
            deadline,
            gen,
        });
        None
    }

    /// Waits until parked connections became readable; returns them (taken out).
    pub async fn readable(&self) -> Vec<Parked> {
        std::future::poll_fn(|cx| {
            let woken = {
                let mut inner = lock(&self.ready.inner);
                if inner.slots.is_empty() {
                    inner.parker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                std::mem::take(&mut inner.slots)
            };
            let mut out = Vec::with_capacity(woken.len());
            for (slot, gen) in woken {
                if let Some(conn) = self.take(slot, Some(gen)) {
                    out.push(conn);
                }
            }
            if out.is_empty() {
                // Stale wake-ups only (slots closed or reused since): wait again.
                lock(&self.ready.inner).parker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            Poll::Ready(out)
        })
        .await
    }

    fn take(&self, slot: u32, gen: Option<u32>) -> Option<Parked> {
        let mut slots = self.slots.borrow_mut();
        let e = slots.get_mut(slot as usize)?;
        if gen.is_some_and(|g| e.as_ref().is_none_or(|e| e.gen != g)) {
            return None;
        }
        let e = e.take()?;
        self.free.borrow_mut().push(slot);
        Some(e.conn)
    }

    /// Close the parked connections whose idle timeout has passed; returns how many.
    pub fn expire(&self, now: Instant) -> usize {
        let due: Vec<u32> = self
            .slots
            .borrow()
            .iter()
            .enumerate()
            .filter(|(_, e)| e.as_ref().is_some_and(|e| e.deadline <= now))
            .map(|(i, _)| i as u32)
            .collect();
        due.into_iter()
            .filter(|&i| self.take(i, None).is_some())
            .count()
    }

    /// Close up to `n` parked connections, those idle the longest first (their idle
    /// deadline is the nearest), to make room for new ones at `worker_connections`, as
    /// nginx reuses its keep-alive connections; returns how many.
    pub fn close_oldest(&self, n: usize) -> usize {
        let mut due: Vec<(Instant, u32)> = self
            .slots
            .borrow()
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (e.deadline, i as u32)))
            .collect();
        let n = n.min(due.len());
        if n == 0 {
            return 0;
        }
        due.select_nth_unstable(n - 1);
        due[..n]
            .iter()
            .filter(|&&(_, i)| self.take(i, None).is_some())
            .count()
    }

    /// Close every parked connection (the worker drains); returns how many.
    pub fn close_all(&self) -> usize {
        let n = self.slots.borrow().len();
        (0..n as u32)
            .filter(|&i| self.take(i, None).is_some())
            .count()
    }
}
