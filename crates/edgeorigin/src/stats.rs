//! Origin traffic counters: requests and body bytes per path class and per status.
//!
//! How it fits: every serving thread records into its own cache-line-aligned shard
//! (relaxed atomics, no sharing on the hot path); `/stats` and
//! [`crate::OriginHandle::stats`] sum the shards. Experiments read it to count origin
//! traffic ("100 collapsed misses made one origin request"). `/stats` requests are not
//! counted themselves, and a reset zeroes every shard.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Which family of paths a request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `/obj/...` (including `/obj/rand`).
    Obj = 0,
    /// `/txt/...`.
    Txt = 1,
    /// Everything else (`/burn`, 404s, bad requests).
    Other = 2,
}

const CLASSES: [(Class, &str); 3] = [
    (Class::Obj, "obj"),
    (Class::Txt, "txt"),
    (Class::Other, "other"),
];
/// Statuses 100..=599 are counted one by one.
const STATUS_MIN: u16 = 100;
const STATUS_SLOTS: usize = 500;

/// One thread's counters. Aligned so two threads never write the same cache line.
#[repr(align(128))]
struct Shard {
    requests: [AtomicU64; 3],
    bytes: [AtomicU64; 3],
    status: Box<[AtomicU64]>,
}

impl Shard {
    fn new() -> Shard {
        Shard {
            requests: Default::default(),
            bytes: Default::default(),
            status: (0..STATUS_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// Counters for one origin (all its threads).
pub struct Stats {
    shards: Box<[Shard]>,
}

/// Summed counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Requests answered (all classes).
    pub requests: u64,
    /// Response body bytes written (all classes; HEAD and 304 count 0).
    pub bytes: u64,
    /// `(requests, bytes)` for `obj`, `txt`, `other`.
    pub obj: (u64, u64),
    pub txt: (u64, u64),
    pub other: (u64, u64),
    /// `(status, requests)` for every status seen, ascending.
    pub by_status: Vec<(u16, u64)>,
}

impl Stats {
    /// Counters for `threads` serving threads (at least one shard).
    pub fn new(threads: usize) -> Stats {
        Stats {
            shards: (0..threads.max(1)).map(|_| Shard::new()).collect(),
        }
    }

    /// Records one answered request on shard `thread`.
    pub fn record(&self, thread: usize, class: Class, status: u16, body_bytes: u64) {
        let s = &self.shards[thread % self.shards.len()];
        s.requests[class as usize].fetch_add(1, Relaxed);
        s.bytes[class as usize].fetch_add(body_bytes, Relaxed);
        if let Some(slot) = status.checked_sub(STATUS_MIN).map(usize::from) {
            if let Some(c) = s.status.get(slot) {
                c.fetch_add(1, Relaxed);
            }
        }
    }

    /// Counts `body_bytes` more sent on shard `thread` by a reply still going out (a
    /// long body counts as it is written, so `/stats` follows a 2 GiB transfer, and a
    /// client that leaves midway is charged what it was sent); [`Stats::record`] adds
    /// the rest and the request when the reply is done.
    pub fn add_bytes(&self, thread: usize, class: Class, body_bytes: u64) {
        let s = &self.shards[thread % self.shards.len()];
        s.bytes[class as usize].fetch_add(body_bytes, Relaxed);
    }

    /// Sums every shard.
    pub fn snapshot(&self) -> StatsSnapshot {
        let mut per = [(0u64, 0u64); 3];
        let mut status = vec![0u64; STATUS_SLOTS];
        for s in self.shards.iter() {
            for (c, _) in CLASSES {
                per[c as usize].0 += s.requests[c as usize].load(Relaxed);
                per[c as usize].1 += s.bytes[c as usize].load(Relaxed);
            }
            for (i, c) in s.status.iter().enumerate() {
                status[i] += c.load(Relaxed);
            }
        }
        StatsSnapshot {
            requests: per.iter().map(|p| p.0).sum(),
            bytes: per.iter().map(|p| p.1).sum(),
            obj: per[0],
            txt: per[1],
            other: per[2],
            by_status: status
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(i, &n)| (i as u16 + STATUS_MIN, n))
                .collect(),
        }
    }

    /// Zeroes every counter (counts racing with the reset may land on either side).
    pub fn reset(&self) {
        for s in self.shards.iter() {
            s.requests
                .iter()
                .chain(s.bytes.iter())
                .chain(s.status.iter())
                .for_each(|c| c.store(0, Relaxed));
        }
    }
}

impl StatsSnapshot {
    /// The `/stats` JSON document.
    pub fn to_json(&self) -> String {
        let class = |(r, b): (u64, u64)| format!("{{\"requests\":{r},\"bytes\":{b}}}");
        let statuses: Vec<String> = self
            .by_status
            .iter()
            .map(|(s, n)| format!("\"{s}\":{n}"))
            .collect();
        format!(
            "{{\"requests\":{},\"bytes\":{},\"by_class\":{{\"obj\":{},\"txt\":{},\"other\":{}}},\"by_status\":{{{}}}}}\n",
            self.requests,
            self.bytes,
            class(self.obj),
            class(self.txt),
            class(self.other),
            statuses.join(",")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_sums_and_resets() {
        let s = Stats::new(2);
        s.record(0, Class::Obj, 200, 100);
        s.record(1, Class::Obj, 206, 10);
        s.record(1, Class::Txt, 200, 5);
        s.record(0, Class::Other, 404, 9);
        s.record(7, Class::Other, 999, 1); // odd status and thread: counted, never a panic
        s.add_bytes(1, Class::Obj, 1000); // a reply still going out: bytes, no request
        s.add_bytes(0, Class::Obj, 0);
        let snap = s.snapshot();
        assert_eq!(snap.requests, 5);
        assert_eq!(snap.bytes, 1125);
        assert_eq!(snap.obj, (2, 1110));
        assert_eq!(snap.txt, (1, 5));
        assert_eq!(snap.other, (2, 10));
        assert_eq!(snap.by_status, vec![(200, 2), (206, 1), (404, 1)]);
        assert_eq!(
            snap.to_json(),
            "{\"requests\":5,\"bytes\":1125,\"by_class\":{\"obj\":{\"requests\":2,\"bytes\":1110},\
             \"txt\":{\"requests\":1,\"bytes\":5},\"other\":{\"requests\":2,\"bytes\":10}},\
             \"by_status\":{\"200\":2,\"206\":1,\"404\":1}}\n"
        );
        s.reset();
        assert_eq!(s.snapshot(), StatsSnapshot::default());
    }
}
