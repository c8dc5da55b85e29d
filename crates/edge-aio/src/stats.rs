//! Per-engine counters, readable from any thread.
//!
//! How it fits: each worker's engine owns an `Arc<AioStats>`; the server keeps a clone
//! per worker and sums [`AioStats::snapshot`]s for its metrics page. Only the owning
//! worker writes, so a counter is bumped with a relaxed load and store (two plain
//! moves, no locked instruction); readers on other threads see values that are at
//! most a moment old. The thread pool's queue depth is pool-global and lives on
//! [`crate::ThreadPool`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Buckets of the read-latency histogram: bucket 0 counts reads under 1 µs, bucket
/// `i` those in `[2^(i-1), 2^i)` µs, and the last one everything longer (~18 min).
pub const LATENCY_BUCKETS: usize = 32;

/// Counters of one engine (one worker). See the module doc for the write discipline.
#[derive(Debug, Default)]
pub struct AioStats {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    /// open, stat, fsync, rename, unlink, close.
    other_ops: AtomicU64,
    errors: AtomicU64,
    in_flight: AtomicU64,
    overflows: AtomicU64,
    inline_hits: AtomicU64,
    handoffs: AtomicU64,
    inline_writes: AtomicU64,
    write_sleeps: AtomicU64,
    uring_fallbacks: AtomicU64,
    direct_refused: AtomicU64,
    read_latency_us: [AtomicU64; LATENCY_BUCKETS],
}

/// A plain copy of [`AioStats`], which adds up across workers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Completed reads and the bytes they returned.
    pub reads: u64,
    pub read_bytes: u64,
    /// Completed writes and the bytes they wrote.
    pub writes: u64,
    pub write_bytes: u64,
    /// Completed open, stat, fsync, rename, unlink and close operations.
    pub other_ops: u64,
    /// Operations that returned an error (of any kind).
    pub errors: u64,
    /// Operations handed to the pool or the ring whose completion has not been reaped
    /// yet, including those whose future was dropped (a gauge).
    pub in_flight: u64,
    /// Operations run inline because the pool queue (or the ring) was full.
    pub overflows: u64,
    /// `auto` mode: operations served inline without blocking (RWF_NOWAIT read,
    /// RESOLVE_CACHED open, fstat).
    pub inline_hits: u64,
    /// `auto` mode: operations sent to the pool (reads and opens that would have
    /// blocked, and every kind of op it never tries inline).
    pub handoffs: u64,
    /// `auto` mode: buffered writes and cache commits ([`crate::Engine::blocking_write`])
    /// run on the loop (`write_gate.rs`).
    pub inline_writes: u64,
    /// Of those, the ones that slept (each closes the gate for a cooldown).
    pub write_sleeps: u64,
    /// io_uring was asked for but unavailable, so this engine uses the pool (0 or 1).
    pub uring_fallbacks: u64,
    /// Opens that asked for O_DIRECT and were reopened without it (EINVAL).
    pub direct_refused: u64,
    /// Read latency histogram, see [`LATENCY_BUCKETS`].
    pub read_latency_us: [u64; LATENCY_BUCKETS],
}

/// Adds `n` to a counter only its owning thread writes (see the module doc).
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

/// The histogram bucket of a latency.
pub fn latency_bucket(d: Duration) -> usize {
    let us = d.as_micros().min(u64::MAX as u128) as u64;
    ((u64::BITS - us.leading_zeros()) as usize).min(LATENCY_BUCKETS - 1)
}

impl AioStats {
    pub(crate) fn read_done(&self, res: &std::io::Result<usize>, took: Duration) {
        bump(&self.reads, 1);
        match res {
            Ok(n) => bump(&self.read_bytes, *n as u64),
            Err(_) => bump(&self.errors, 1),
        }
        bump(&self.read_latency_us[latency_bucket(took)], 1);
    }

    pub(crate) fn write_done(&self, res: &std::io::Result<usize>) {
        bump(&self.writes, 1);
        match res {
            Ok(n) => bump(&self.write_bytes, *n as u64),
            Err(_) => bump(&self.errors, 1),
        }
    }

    pub(crate) fn other_done(&self, ok: bool) {
        bump(&self.other_ops, 1);
        if !ok {
            bump(&self.errors, 1);
        }
    }

    pub(crate) fn set_in_flight(&self, n: usize) {
        self.in_flight.store(n as u64, Relaxed);
    }

    pub(crate) fn overflow(&self) {
        bump(&self.overflows, 1);
    }

    pub(crate) fn inline_hit(&self) {
        bump(&self.inline_hits, 1);
    }

    pub(crate) fn inline_write(&self, slept: bool) {
        bump(&self.inline_writes, 1);
        if slept {
            bump(&self.write_sleeps, 1);
        }
    }

    pub(crate) fn handoff(&self) {
        bump(&self.handoffs, 1);
    }

    pub(crate) fn uring_fallback(&self) {
        bump(&self.uring_fallbacks, 1);
    }

    pub(crate) fn direct_refused(&self) {
        bump(&self.direct_refused, 1);
    }

    /// Operations in flight right now (see [`StatsSnapshot::in_flight`]).
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Relaxed)
    }

    /// A copy of every counter.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            reads: self.reads.load(Relaxed),
            read_bytes: self.read_bytes.load(Relaxed),
            writes: self.writes.load(Relaxed),
            write_bytes: self.write_bytes.load(Relaxed),
            other_ops: self.other_ops.load(Relaxed),
            errors: self.errors.load(Relaxed),
            in_flight: self.in_flight.load(Relaxed),
            overflows: self.overflows.load(Relaxed),
            inline_hits: self.inline_hits.load(Relaxed),
            handoffs: self.handoffs.load(Relaxed),
            inline_writes: self.inline_writes.load(Relaxed),
            write_sleeps: self.write_sleeps.load(Relaxed),
            uring_fallbacks: self.uring_fallbacks.load(Relaxed),
            direct_refused: self.direct_refused.load(Relaxed),
            read_latency_us: std::array::from_fn(|i| self.read_latency_us[i].load(Relaxed)),
        }
    }
}

impl StatsSnapshot {
    /// Adds another worker's counters to these.
    pub fn add(&mut self, o: &StatsSnapshot) {
        self.reads += o.reads;
        self.read_bytes += o.read_bytes;
        self.writes += o.writes;
        self.write_bytes += o.write_bytes;
        self.other_ops += o.other_ops;
        self.errors += o.errors;
        self.in_flight += o.in_flight;
        self.overflows += o.overflows;
        self.inline_hits += o.inline_hits;
        self.handoffs += o.handoffs;
        self.inline_writes += o.inline_writes;
        self.write_sleeps += o.write_sleeps;
        self.uring_fallbacks += o.uring_fallbacks;
        self.direct_refused += o.direct_refused;
        for (a, b) in self.read_latency_us.iter_mut().zip(o.read_latency_us) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_log2_microseconds() {
        assert_eq!(latency_bucket(Duration::from_nanos(999)), 0);
        assert_eq!(latency_bucket(Duration::from_micros(1)), 1);
        assert_eq!(latency_bucket(Duration::from_micros(3)), 2);
        assert_eq!(latency_bucket(Duration::from_micros(4)), 3);
        assert_eq!(latency_bucket(Duration::from_millis(1)), 10);
        assert_eq!(
            latency_bucket(Duration::from_secs(1 << 40)),
            LATENCY_BUCKETS - 1
        );
    }

    #[test]
    fn snapshots_add_up() {
        let s = AioStats::default();
        s.read_done(&Ok(10), Duration::from_micros(5));
        s.read_done(&Err(std::io::Error::other("x")), Duration::ZERO);
        s.write_done(&Ok(3));
        s.other_done(true);
        s.overflow();
        let mut total = s.snapshot();
        total.add(&s.snapshot());
        assert_eq!(total.reads, 4);
        assert_eq!(total.read_bytes, 20);
        assert_eq!(total.errors, 2);
        assert_eq!(total.write_bytes, 6);
        assert_eq!(total.other_ops, 2);
        assert_eq!(total.overflows, 2);
        assert_eq!(total.read_latency_us[3], 2);
        assert_eq!(total.read_latency_us[0], 2);
    }
}
