//! `auto` mode's buffered writes on the loop: when a fill's body write (a `pwritev` into
//! the page cache) or its commit (the header and a small body written, an `fstat`, a
//! `rename`) may run inline instead of being handed to the pool.
//!
//! Why: the hand-off (a futex wake, two context switches, an eventfd write and read) is
//! the one kernel crossing a small miss makes that nginx's does not, and it is about a
//! fifth of a 4 KiB miss's CPU (`docs/results/fill.md`). A read has a non-blocking form
//! (`RWF_NOWAIT`), so `auto` tries it inline; a buffered write has none on the
//! filesystems a cache lives on (`pwritev2(RWF_NOWAIT)` is EOPNOTSUPP on ext4 and tmpfs),
//! so the gate predicts, then checks:
//!
//! - **Predicts.** A buffered write waits for the disk when the kernel throttles its
//!   writer (`balance_dirty_pages`), which it never does below its "freerun" level,
//!   halfway between the background and the foreground dirty thresholds. The gate lets
//!   a job run inline only while the dirty and writeback pages are below the background
//!   threshold (by default 10% of the dirtyable memory, where freerun is 15%), read from
//!   `/proc/vmstat` and `/proc/sys/vm` at most every [`RECHECK`].
//! - **Checks.** The job's voluntary context switches (`getrusage(RUSAGE_THREAD)`) are
//!   read before and after it. The time of a job that slept (a directory lock held by a
//!   pool thread for a moment; or a journal commit, a directory block read from the
//!   disk, memory reclaim, a cgroup's own dirty limit) is charged to a budget of
//!   [`SLEEP_BUDGET`] per [`SLEEP_WINDOW`]; past it (one long wait, or many short ones)
//!   the gate closes for a cooldown, [`COOLDOWN_MIN`] doubling each time up to
//!   [`COOLDOWN_MAX`] (and back to the least after that long open), during which writes
//!   go to the pool. So a worker's loop spends at most about a millisecond asleep in
//!   writes per cooldown.
//!
//! The check costs two `getrusage` calls per inline write (no context switch).
//!
//! Off with `aio.inline_writes = false` (every write on the pool, as before).

use crate::stats::AioStats;
use std::cell::Cell;
use std::time::{Duration, Instant};

/// How often the dirty-page state is read again.
pub const RECHECK: Duration = Duration::from_millis(250);
/// The time inline writes may spend asleep per [`SLEEP_WINDOW`] before the gate closes:
/// a lock held for a moment costs a few µs, a read from the disk or a throttled write
/// much more.
pub const SLEEP_BUDGET: Duration = Duration::from_millis(1);
/// The window over which [`SLEEP_BUDGET`] is counted.
pub const SLEEP_WINDOW: Duration = Duration::from_secs(1);
/// The gate stays closed this long the first time it closes…
pub const COOLDOWN_MIN: Duration = Duration::from_secs(10);
/// …and twice as long each later time, up to this (back to the least after this long
/// open).
pub const COOLDOWN_MAX: Duration = Duration::from_secs(600);

/// The kernel's dirty-memory settings (`/proc/sys/vm/dirty_*`): a `_bytes` value, when
/// not zero, overrides its `_ratio`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirtyLimits {
    pub background_ratio: u64,
    pub background_bytes: u64,
    pub ratio: u64,
    pub bytes: u64,
}

impl DirtyLimits {
    /// The running kernel's, None where `/proc/sys/vm` cannot be read.
    fn read() -> Option<DirtyLimits> {
        let get = |name: &str| -> Option<u64> {
            std::fs::read_to_string(format!("/proc/sys/vm/{name}"))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        Some(DirtyLimits {
            background_ratio: get("dirty_background_ratio")?,
            background_bytes: get("dirty_background_bytes")?,
            ratio: get("dirty_ratio")?,
            bytes: get("dirty_bytes")?,
        })
    }
}

/// Whether the dirty and writeback pages of `vmstat` (the text of `/proc/vmstat`) are
/// below the background threshold that `limits` give, computed as the kernel does
/// (`domain_dirty_limits`): ratios apply to the dirtyable memory (free pages plus file
/// pages), and a background threshold not below the foreground one is halved. False
/// when a counter is missing.
pub fn below_background(vmstat: &str, limits: DirtyLimits) -> bool {
    const PAGE: u64 = 4096;
    let get = |name: &str| -> Option<u64> {
        vmstat.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == name).then(|| v.trim().parse().ok())?
        })
    };
    let (Some(dirty), Some(writeback), Some(free), Some(inactive), Some(active)) = (
        get("nr_dirty"),
        get("nr_writeback"),
        get("nr_free_pages"),
        get("nr_inactive_file"),
        get("nr_active_file"),
    ) else {
        return false;
    };
    let dirtyable = free.saturating_add(inactive).saturating_add(active);
    let pages = |bytes: u64, ratio: u64| {
        if bytes > 0 {
            bytes / PAGE
        } else {
            dirtyable.saturating_mul(ratio) / 100
        }
    };
    let thresh = pages(limits.bytes, limits.ratio);
    let mut background = pages(limits.background_bytes, limits.background_ratio);
    if background >= thresh {
        background = thresh / 2;
    }
    dirty.saturating_add(writeback) < background
}

/// The voluntary context switches of the calling thread so far (it slept that many
/// times), None where `getrusage` fails.
pub fn voluntary_switches() -> Option<i64> {
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a live, writable rusage for the whole call.
    let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    (r == 0).then_some(ru.ru_nvcsw)
}

/// One worker's gate (single-threaded: `Cell`s).
pub struct WriteGate {
    /// Reads the dirty-page state: `below_background` of the live files (a test gives
    /// its own).
    room: fn() -> bool,
    /// The last answer of `room`, and when it is to be asked again.
    has_room: Cell<bool>,
    recheck_at: Cell<Option<Instant>>,
    /// Closed until then, after writes that slept past the budget.
    closed_until: Cell<Option<Instant>>,
    /// Time asleep in the current window, and when the window began.
    asleep: Cell<Duration>,
    window_start: Cell<Option<Instant>>,
    /// The next cooldown.
    cooldown: Cell<Duration>,
}

impl Default for WriteGate {
    fn default() -> Self {
        WriteGate::with_room(host_has_room)
    }
}

/// Whether this host's dirty and writeback pages are below the kernel's background
/// threshold now ([`below_background`] of the live files); false when unreadable. What
/// an open gate's prediction rests on.
pub fn host_has_room() -> bool {
    let Some(limits) = DirtyLimits::read() else {
        return false;
    };
    std::fs::read_to_string("/proc/vmstat").is_ok_and(|v| below_background(&v, limits))
}

impl WriteGate {
    /// A gate that asks `room` for the dirty-page state.
    pub fn with_room(room: fn() -> bool) -> WriteGate {
        WriteGate {
            room,
            has_room: Cell::new(false),
            recheck_at: Cell::new(None),
            closed_until: Cell::new(None),
            asleep: Cell::new(Duration::ZERO),
            window_start: Cell::new(None),
            cooldown: Cell::new(COOLDOWN_MIN),
        }
    }

    /// Whether a write job may run on the loop now.
    pub fn open(&self, now: Instant) -> bool {
        if self.closed_until.get().is_some_and(|t| now < t) {
            return false;
        }
        if self.recheck_at.get().is_none_or(|t| now >= t) {
            self.has_room.set((self.room)());
            self.recheck_at.set(Some(now + RECHECK));
        }
        self.has_room.get()
    }

    /// Runs `f` on this thread (the gate was [`WriteGate::open`]), counts it in `stats`
    /// and, if it slept, charges the time to the budget (logging once when that closes
    /// the gate).
    pub(crate) fn run<T>(&self, stats: &AioStats, f: impl FnOnce() -> T) -> T {
        let t0 = Instant::now();
        let before = voluntary_switches();
        let t = f();
        // Unknown (getrusage failed): counted as slept, the safe side.
        let slept = before.is_none_or(|b| voluntary_switches() != Some(b));
        stats.inline_write(slept);
        if slept {
            let now = Instant::now();
            if let Some(d) = self.slept(now - t0, now) {
                tracing::info!(
                    "aio: writes on the event loop slept for over {} µs within {} s (the \
                     disk, the journal or a lock): this worker's writes go to the thread \
                     pool for {} s",
                    SLEEP_BUDGET.as_micros(),
                    SLEEP_WINDOW.as_secs(),
                    d.as_secs()
                );
            }
        }
        t
    }

    /// A write that ran inline slept, and took `took`: charged to the window's budget.
    /// Past the budget the gate closes for the next cooldown, which is returned.
    pub fn slept(&self, took: Duration, now: Instant) -> Option<Duration> {
        if self
            .window_start
            .get()
            .is_none_or(|t| now.saturating_duration_since(t) >= SLEEP_WINDOW)
        {
            self.window_start.set(Some(now));
            self.asleep.set(Duration::ZERO);
        }
        let asleep = self.asleep.get() + took;
        if asleep < SLEEP_BUDGET {
            self.asleep.set(asleep);
            return None;
        }
        self.asleep.set(Duration::ZERO);
        self.window_start.set(None);
        // After [`COOLDOWN_MAX`] open since the last closing, start over.
        if self
            .closed_until
            .get()
            .is_some_and(|t| now.saturating_duration_since(t) >= COOLDOWN_MAX)
        {
            self.cooldown.set(COOLDOWN_MIN);
        }
        let d = self.cooldown.get();
        self.closed_until.set(Some(now + d));
        self.cooldown.set((d * 2).min(COOLDOWN_MAX));
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: DirtyLimits = DirtyLimits {
        background_ratio: 10,
        background_bytes: 0,
        ratio: 20,
        bytes: 0,
    };

    fn vmstat(dirty: u64, writeback: u64, free: u64, file: u64) -> String {
        format!(
            "nr_free_pages {free}\nnr_zone_inactive_file 1\nnr_inactive_file {}\n\
             nr_active_file {}\nnr_dirty {dirty}\nnr_writeback {writeback}\n\
             nr_dirty_threshold 9\n",
            file / 2,
            file - file / 2
        )
    }

    #[test]
    fn the_background_threshold_is_the_kernels() {
        // 1M dirtyable pages: background 10% = 100,000 pages.
        assert!(below_background(
            &vmstat(99_000, 999, 600_000, 400_000),
            DEFAULTS
        ));
        assert!(!below_background(
            &vmstat(99_000, 1_000, 600_000, 400_000),
            DEFAULTS
        ));
        // Bytes override ratios: 40 MB background = 9,765 pages.
        let bytes = DirtyLimits {
            background_bytes: 40_000_000,
            ..DEFAULTS
        };
        assert!(below_background(&vmstat(9_764, 0, 600_000, 400_000), bytes));
        assert!(!below_background(
            &vmstat(9_765, 0, 600_000, 400_000),
            bytes
        ));
        // A background threshold at or above the foreground one is halved: 20% / 2.
        let inverted = DirtyLimits {
            background_ratio: 30,
            ..DEFAULTS
        };
        assert!(below_background(
            &vmstat(99_999, 0, 600_000, 400_000),
            inverted
        ));
        assert!(!below_background(
            &vmstat(100_000, 0, 600_000, 400_000),
            inverted
        ));
        // Missing counters: no room.
        assert!(!below_background("nr_dirty 0\n", DEFAULTS));
        assert!(!below_background("", DEFAULTS));
    }

    #[test]
    fn the_live_files_parse() {
        // Whatever the state, reading it must work on Linux.
        assert!(DirtyLimits::read().is_some());
        let v = std::fs::read_to_string("/proc/vmstat").unwrap();
        for k in [
            "nr_dirty ",
            "nr_writeback ",
            "nr_free_pages ",
            "nr_inactive_file ",
        ] {
            assert!(v.lines().any(|l| l.starts_with(k)), "{k}");
        }
        assert!(voluntary_switches().is_some());
    }

    #[test]
    fn a_sleep_counts_as_one_voluntary_switch_at_least() {
        let before = voluntary_switches().unwrap();
        std::thread::sleep(Duration::from_millis(1));
        assert!(voluntary_switches().unwrap() > before);
    }

    #[test]
    fn sleeps_past_the_budget_close_the_gate_for_a_doubling_cooldown() {
        let ms = Duration::from_millis;
        let g = WriteGate::with_room(|| true);
        let t0 = Instant::now();
        assert!(g.open(t0));
        // Short sleeps (a lock) within the budget leave it open.
        assert_eq!(g.slept(Duration::from_micros(300), t0), None);
        assert_eq!(g.slept(Duration::from_micros(300), t0 + ms(10)), None);
        assert!(g.open(t0 + ms(10)));
        // A new window forgets them.
        assert_eq!(g.slept(Duration::from_micros(600), t0 + SLEEP_WINDOW), None);
        assert!(g.open(t0 + SLEEP_WINDOW));
        // Many short ones add up past the budget within a window.
        let t1 = t0 + SLEEP_WINDOW + ms(1);
        assert_eq!(g.slept(Duration::from_micros(600), t1), Some(COOLDOWN_MIN));
        assert!(!g.open(t1 + COOLDOWN_MIN - ms(1)));
        // One long one closes it at once, for twice as long.
        let t2 = t1 + COOLDOWN_MIN;
        assert!(g.open(t2));
        assert_eq!(g.slept(ms(5), t2), Some(COOLDOWN_MIN * 2));
        assert!(!g.open(t2 + COOLDOWN_MIN));
        assert!(g.open(t2 + COOLDOWN_MIN * 2));
        // Doubling stops at the cap.
        let mut t = t2 + COOLDOWN_MIN * 2;
        for _ in 0..20 {
            let d = g.slept(ms(5), t).unwrap();
            assert!(d <= COOLDOWN_MAX);
            t += d;
        }
        assert_eq!(g.slept(ms(5), t), Some(COOLDOWN_MAX));
        // Open for COOLDOWN_MAX since: the next cooldown is the least again.
        let t = t + COOLDOWN_MAX * 2;
        assert_eq!(g.slept(ms(5), t), Some(COOLDOWN_MIN));
    }

    #[test]
    fn no_room_keeps_the_gate_shut_until_rechecked() {
        use std::sync::atomic::{AtomicBool, Ordering};
        static ROOM: AtomicBool = AtomicBool::new(false);
        let g = WriteGate::with_room(|| ROOM.load(Ordering::Relaxed));
        let t0 = Instant::now();
        assert!(!g.open(t0));
        ROOM.store(true, Ordering::Relaxed);
        // The answer is kept until RECHECK has passed.
        assert!(!g.open(t0 + RECHECK - Duration::from_millis(1)));
        assert!(g.open(t0 + RECHECK));
    }
}
