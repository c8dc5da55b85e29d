//! Idle keep-alive connections parked outside any task.
//!
//! How it fits: a session idle past its grace period returns its connection as a
//! [`Parked`] (socket, peer, requests served, what is left of the idle timeout) and its
//! task ends, freeing the task's state (about 4 KiB). The worker keeps the socket here,
//! with the runtime's readiness registration pointed at a small waker that names the
//! slot. When bytes arrive the waker queues the slot, the worker's parker task takes it
//! out and starts a new session task with [`crate::http::session::Start::Resume`]. Parked
//! connections past their idle deadline are closed by the worker's once-a-second tick,
//! the longest parked first when the worker needs room, and all of them when it
//! drains; [`super::idle_queue`] keeps both orders, each operation O(1). An idle connection then costs its
//! slot, its socket's registration and the waker: a few hundred bytes (nginx keeps a
//! connection structure and an event).

use super::idle_queue::{IdleQueue, Key};
use crate::http::session::Parked;
use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

/// Entries woken by readiness, and the parker task's waker. Wakers run on the worker's
/// own thread (the runtime is single-threaded), so the mutex is never contended; it is
/// there because a `Waker` must be `Send + Sync`.
#[derive(Default)]
struct ReadyList {
    inner: Mutex<ReadyInner>,
}

#[derive(Default)]
struct ReadyInner {
    keys: Vec<Key>,
    parker: Option<Waker>,
}

fn lock(m: &Mutex<ReadyInner>) -> std::sync::MutexGuard<'_, ReadyInner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The waker a parked socket's registration holds: its entry's key.
struct SlotWaker {
    key: Key,
    list: Arc<ReadyList>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut inner = lock(&self.list.inner);
        inner.keys.push(self.key);
        if let Some(w) = inner.parker.take() {
            drop(inner);
            w.wake();
        }
    }
}

/// A worker's parked connections, oldest first, each with its idle deadline (see
/// [`IdleQueue`]: parking, resuming, making room and expiring are O(1) each).
#[derive(Default)]
pub struct Parking {
    queue: RefCell<IdleQueue<Parked>>,
    ready: Arc<ReadyList>,
}

impl Parking {
    /// Connections parked now.
    pub fn len(&self) -> usize {
        self.queue.borrow().len()
    }

    /// Park `conn` as the newest. Returns it back when it is readable already (the
    /// caller resumes it at once).
    pub fn park(&self, conn: Parked) -> Option<Parked> {
        let deadline = Instant::now() + conn.idle_left;
        let mut queue = self.queue.borrow_mut();
        let key = queue.insert(conn, deadline);
        let waker = Waker::from(Arc::new(SlotWaker {
            key,
            list: self.ready.clone(),
        }));
        // Registers `waker` for the socket's next readiness (or says it is ready now).
        // Parked connections are TCP or TLS, both with a socket (an HTTP/2 stream is
        // never parked, and would count as readable: served at once). The waker only
        // queues its key: it never touches `queue`.
        let conn = queue.get_mut(key).expect("just inserted");
        let ready = conn
            .io
            .poll_read_ready(&mut Context::from_waker(&waker))
            .is_ready();
        if ready {
            return queue.remove(key);
        }
        None
    }

    /// Waits until parked connections became readable; returns them (taken out).
    pub async fn readable(&self) -> Vec<Parked> {
        std::future::poll_fn(|cx| {
            let woken = {
                let mut inner = lock(&self.ready.inner);
                if inner.keys.is_empty() {
                    inner.parker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                std::mem::take(&mut inner.keys)
            };
            let out: Vec<Parked> = {
                let mut queue = self.queue.borrow_mut();
                woken.into_iter().filter_map(|k| queue.remove(k)).collect()
            };
            if out.is_empty() {
                // Stale wake-ups only (slots closed or reused since): wait again.
                lock(&self.ready.inner).parker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            Poll::Ready(out)
        })
        .await
    }

    /// Close the parked connections whose idle timeout has passed (within the queue's
    /// resolution); returns how many. Costs what expires, not what is parked.
    pub fn expire(&self, now: Instant) -> usize {
        let mut closed = Vec::new();
        self.queue.borrow_mut().expire(now, |c| closed.push(c));
        closed.len() // dropped (closed) here, outside the borrow
    }

    /// Close up to `n` parked connections, those parked the longest ago first, to make
    /// room for new ones at `worker_connections`, as nginx reuses its keep-alive
    /// connections; returns how many.
    pub fn close_oldest(&self, n: usize) -> usize {
        let closed: Vec<Parked> = {
            let mut queue = self.queue.borrow_mut();
            std::iter::from_fn(|| queue.pop_oldest()).take(n).collect()
        };
        closed.len()
    }

    /// Close every parked connection (the worker drains); returns how many.
    pub fn close_all(&self) -> usize {
        self.close_oldest(usize::MAX)
    }
}
