//! The order and the deadlines of a worker's parked connections: one slab threaded by
//! two intrusive lists, so every operation costs O(1) whatever the number parked.
//!
//! How it fits: [`super::parking::Parking`] keeps its idle keep-alive connections here
//! (up to `worker_connections`, 65,536 by default, per worker). Two questions are asked
//! of them all the time:
//! - *which has been idle the longest?* (`worker_connections` reached: close it to make
//!   room, nginx's reusable-connections queue). The **LRU list** threads the entries in
//!   the order they were parked; the oldest is its head, a new one goes to its tail, and
//!   an entry resumed from the middle is unlinked in place. nginx keeps the same queue
//!   (`ngx_reusable_connection` in `src/core/ngx_connection.c`).
//! - *which are past their idle timeout?* (every second). A **hashed timer wheel**
//!   ([`WHEEL`] buckets of [`RESOLUTION`]) threads each entry into the bucket of its
//!   deadline; a tick walks only the buckets whose time has come, so it costs what
//!   expires (plus, for timeouts longer than one turn of the wheel, a look at entries
//!   due in a later turn), not a scan of everything parked (Pingora's timers bucket
//!   deadlines the same way: `pingora-timeout/src/timer.rs`).
//!
//! Before, `close_oldest` collected and partially sorted every parked connection to
//! close 32, and the tick scanned them all: both O(parked); docs/results/idle-parking.md
//! measures the difference. Links are `u32` slab indices (no `unsafe`, no pointers); an
//! entry is named by its slot and a generation, so a stale name (a wake-up for a
//! connection closed since, whose slot was reused) finds nothing.

use std::time::{Duration, Instant};

/// The wheel's granularity: a deadline is rounded up to it, so an entry expires at the
/// first tick at or after its deadline plus at most this much.
pub const RESOLUTION: Duration = Duration::from_millis(100);

/// Buckets in the wheel (one turn: 409.6 s at [`RESOLUTION`], past the default
/// `keepalive_timeout` of 75 s and `client_header_timeout` of 60 s).
pub const WHEEL: usize = 4096;

const NIL: u32 = u32::MAX;

/// An entry's name: its slot, and the generation the slot had when it was inserted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub slot: u32,
    pub gen: u32,
}

#[derive(Clone, Copy)]
struct Links {
    prev: u32,
    next: u32,
}

const UNLINKED: Links = Links {
    prev: NIL,
    next: NIL,
};

struct Node<T> {
    item: Option<T>,
    gen: u32,
    /// The deadline, in wheel ticks since `origin`.
    due: u64,
    lru: Links,
    timer: Links,
}

/// Entries in LRU order with a deadline each. Not thread-safe (one per worker).
pub struct IdleQueue<T> {
    nodes: Vec<Node<T>>,
    free: Vec<u32>,
    len: usize,
    /// The oldest entry (closed first) and the newest.
    head: u32,
    tail: u32,
    /// The first entry of each bucket's list.
    wheel: Box<[u32]>,
    /// Tick 0.
    origin: Instant,
    /// Every tick up to this one has been expired.
    done: u64,
}

impl<T> Default for IdleQueue<T> {
    fn default() -> Self {
        IdleQueue::new(Instant::now())
    }
}

impl<T> IdleQueue<T> {
    /// An empty queue whose clock starts at `origin` (deadlines before it count as due).
    pub fn new(origin: Instant) -> IdleQueue<T> {
        IdleQueue {
            nodes: Vec::new(),
            free: Vec::new(),
            len: 0,
            head: NIL,
            tail: NIL,
            wheel: vec![NIL; WHEEL].into_boxed_slice(),
            origin,
            done: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Adds `item` as the newest entry, due at `deadline`.
    pub fn insert(&mut self, item: T, deadline: Instant) -> Key {
        // Rounded up (never early), and never into a tick already expired.
        let due = self.ticks_ceil(deadline).max(self.done + 1);
        let node = Node {
            item: Some(item),
            gen: 0,
            due,
            lru: UNLINKED,
            timer: UNLINKED,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                let n = &mut self.nodes[s as usize];
                let gen = n.gen.wrapping_add(1);
                *n = Node { gen, ..node };
                s
            }
            None => {
                assert!(self.nodes.len() < NIL as usize, "idle queue full");
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.len += 1;
        self.lru_push_back(slot);
        self.timer_push(slot, due);
        Key {
            slot,
            gen: self.nodes[slot as usize].gen,
        }
    }

    /// The entry `key` names, if it is still here.
    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        let n = self.nodes.get_mut(key.slot as usize)?;
        if n.gen != key.gen {
            return None;
        }
        n.item.as_mut()
    }

    /// Takes out the entry `key` names (None: gone already, or its slot was reused).
    pub fn remove(&mut self, key: Key) -> Option<T> {
        let n = self.nodes.get(key.slot as usize)?;
        if n.gen != key.gen || n.item.is_none() {
            return None;
        }
        Some(self.take(key.slot))
    }

    /// Takes out the oldest entry.
    pub fn pop_oldest(&mut self) -> Option<T> {
        (self.head != NIL).then(|| self.take(self.head))
    }

    /// Takes out every entry due at `now` (rounded down to the wheel's resolution),
    /// handing each to `f`; returns how many. Walks only the buckets whose time came
    /// since the last call.
    pub fn expire(&mut self, now: Instant, mut f: impl FnMut(T)) -> usize {
        let now_tick = self.ticks_floor(now);
        if now_tick <= self.done {
            return 0;
        }
        // A whole turn (or more) passed: every bucket once.
        let from = self.done + 1;
        let from = from.max(now_tick.saturating_sub(WHEEL as u64 - 1));
        let mut n = 0;
        for t in from..=now_tick {
            let mut at = self.wheel[(t % WHEEL as u64) as usize];
            while at != NIL {
                let node = &self.nodes[at as usize];
                let next = node.timer.next;
                if node.due <= now_tick {
                    f(self.take(at));
                    n += 1;
                }
                at = next;
            }
        }
        self.done = now_tick;
        n
    }

    /// Takes out one slot's entry, unlinking it from both lists.
    fn take(&mut self, slot: u32) -> T {
        self.lru_unlink(slot);
        self.timer_unlink(slot);
        self.free.push(slot);
        self.len -= 1;
        self.nodes[slot as usize]
            .item
            .take()
            .expect("a linked slot holds an entry")
    }

    fn lru_push_back(&mut self, slot: u32) {
        self.nodes[slot as usize].lru = Links {
            prev: self.tail,
            next: NIL,
        };
        match self.tail {
            NIL => self.head = slot,
            t => self.nodes[t as usize].lru.next = slot,
        }
        self.tail = slot;
    }

    fn lru_unlink(&mut self, slot: u32) {
        let Links { prev, next } = std::mem::replace(&mut self.nodes[slot as usize].lru, UNLINKED);
        match prev {
            NIL => self.head = next,
            p => self.nodes[p as usize].lru.next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.nodes[n as usize].lru.prev = prev,
        }
    }

    fn bucket(due: u64) -> usize {
        (due % WHEEL as u64) as usize
    }

    fn timer_push(&mut self, slot: u32, due: u64) {
        let b = Self::bucket(due);
        let first = self.wheel[b];
        self.nodes[slot as usize].timer = Links {
            prev: NIL,
            next: first,
        };
        if first != NIL {
            self.nodes[first as usize].timer.prev = slot;
        }
        self.wheel[b] = slot;
    }

    fn timer_unlink(&mut self, slot: u32) {
        let node = &mut self.nodes[slot as usize];
        let Links { prev, next } = std::mem::replace(&mut node.timer, UNLINKED);
        let b = Self::bucket(node.due);
        match prev {
            NIL => self.wheel[b] = next,
            p => self.nodes[p as usize].timer.next = next,
        }
        if next != NIL {
            self.nodes[next as usize].timer.prev = prev;
        }
    }

    fn ticks_floor(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.origin);
        (d.as_nanos() / RESOLUTION.as_nanos()) as u64
    }

    fn ticks_ceil(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.origin);
        d.as_nanos().div_ceil(RESOLUTION.as_nanos()) as u64
    }
}

#[cfg(test)]
mod tests;
