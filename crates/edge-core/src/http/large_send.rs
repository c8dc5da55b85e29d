//! How a worker sends large cache-hit bodies (over `aio.sendfile_max`) under
//! `sendfile_max = "auto"`: written from a mapping of the file in one `writev`
//! ([`super::mapped`]) or sent by `sendfile(2)`, whichever this worker measures cheaper.
//!
//! Why measure: which one costs less CPU depends on the host, not on the code. A mapped
//! write copies the body into the socket, `sendfile` hands over page references, and on
//! loopback under BBR (no `fq`) TCP paces a `sendfile`'d body with timers where it lets
//! one large write leave in a burst. On one host the pacing dominated (mapped writes
//! 0.53-0.60x nginx's CPU per 1 MiB hit against about 1x by sendfile), on another,
//! whose memory is slow, the copy does (sendfile 0.63-0.96x the mapped write's CPU in
//! every repetition): `docs/results/large-hits.md`.
//!
//! How: the worker's once-a-second tick closes a window. A window in which at least
//! [`WINDOW_MIN_BYTES`] of large bodies left is a sample of the method it used: the
//! worker thread's CPU time over the window per MiB of those bodies (its other work
//! counts too, alike for both methods while the traffic is steady). While exploring,
//! the method alternates from one counted window to the next; after [`SAMPLES`] of
//! each, the one with the lower median is used for [`EXPLOIT`], then both are measured
//! again. A method must be at least [`MARGIN`] cheaper to be preferred; on a tie
//! `sendfile` is used (no copy: memory bandwidth left to the rest of the node). Windows
//! with fewer large bytes are not counted: where large bodies are rare, which method
//! sends them matters little.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

/// Large-body bytes a one-second window needs to count as a sample.
pub const WINDOW_MIN_BYTES: u64 = 16 << 20;
/// Samples of each method before choosing.
pub const SAMPLES: usize = 5;
/// How long a choice holds before both are measured again.
pub const EXPLOIT: Duration = Duration::from_secs(600);
/// The mapped write is preferred only when its median costs less than this fraction of
/// sendfile's.
pub const MARGIN: f64 = 0.95;

/// A way to send a large body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Mapped,
    Sendfile,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Mapped => "mapped",
            Method::Sendfile => "sendfile",
        }
    }

    fn other(self) -> Method {
        match self {
            Method::Mapped => Method::Sendfile,
            Method::Sendfile => Method::Mapped,
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The method as `WorkerStats::large_send_choice` holds it (0 is "measuring").
    pub fn code(self) -> u64 {
        self.index() as u64 + 1
    }
}

/// The name of a `WorkerStats::large_send_choice` value: its method's, or "measuring".
pub fn choice_name(code: u64) -> &'static str {
    [Method::Mapped, Method::Sendfile]
        .into_iter()
        .find(|m| m.code() == code)
        .map_or("measuring", Method::name)
}

/// What a choice rested on: each method's median CPU per MiB (ns).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub method: Method,
    pub mapped_ns_per_mib: f64,
    pub sendfile_ns_per_mib: f64,
}

/// One worker's choice (owned by its thread).
#[derive(Debug)]
pub struct Chooser {
    method: Cell<Method>,
    /// Some(until): the choice holds until then; None: exploring.
    holds_until: Cell<Option<Instant>>,
    /// Large-body bytes sent since the last tick.
    bytes: Cell<u64>,
    /// The worker thread's CPU time at the last tick, ns.
    last_cpu: Cell<Option<u64>>,
    /// While exploring: ns of CPU per MiB, per method (indexed by [`Method::index`]).
    samples: RefCell<[Vec<f64>; 2]>,
}

impl Default for Chooser {
    fn default() -> Self {
        Chooser {
            method: Cell::new(Method::Mapped),
            holds_until: Cell::new(None),
            bytes: Cell::new(0),
            last_cpu: Cell::new(None),
            samples: RefCell::new([Vec::new(), Vec::new()]),
        }
    }
}

impl Chooser {
    /// The method for the next large body.
    pub fn method(&self) -> Method {
        self.method.get()
    }

    /// Counts a large body's `bytes` (whichever way it left).
    pub fn sent(&self, bytes: u64) {
        self.bytes.set(self.bytes.get().saturating_add(bytes));
    }

    /// Whether both methods are being measured now.
    pub fn exploring(&self) -> bool {
        self.holds_until.get().is_none()
    }

    /// Closes a window: called once a second with the time and the worker thread's CPU
    /// time (ns). Returns the decision when one was just made.
    pub fn tick(&self, now: Instant, cpu_ns: u64) -> Option<Decision> {
        let bytes = self.bytes.replace(0);
        let prev = self.last_cpu.replace(Some(cpu_ns));
        if let Some(until) = self.holds_until.get() {
            if now >= until {
                // Measure both again, starting with the one not in use.
                self.holds_until.set(None);
                self.method.set(self.method.get().other());
            }
            return None;
        }
        let prev = prev?;
        if bytes < WINDOW_MIN_BYTES {
            return None;
        }
        let cost = cpu_ns.saturating_sub(prev) as f64 * (1u64 << 20) as f64 / bytes as f64;
        let mut samples = self.samples.borrow_mut();
        let m = self.method.get();
        samples[m.index()].push(cost);
        if samples.iter().any(|s| s.len() < SAMPLES) {
            self.method.set(m.other());
            return None;
        }
        let mapped = median(&mut samples[Method::Mapped.index()]);
        let sendfile = median(&mut samples[Method::Sendfile.index()]);
        for s in samples.iter_mut() {
            s.clear();
        }
        let method = if mapped < sendfile * MARGIN {
            Method::Mapped
        } else {
            Method::Sendfile
        };
        self.method.set(method);
        self.holds_until.set(Some(now + EXPLOIT));
        Some(Decision {
            method,
            mapped_ns_per_mib: mapped,
            sendfile_ns_per_mib: sendfile,
        })
    }
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Drives `c` through windows in which large bodies cost `mapped` or `sendfile` ns
    /// of CPU per MiB (by the method in use), `mib` MiB a window; returns the decisions.
    fn run(
        c: &Chooser,
        t0: Instant,
        from: u64,
        windows: u64,
        mib: u64,
        mut cost: impl FnMut(Method, u64) -> u64,
    ) -> Vec<(u64, Decision)> {
        let mut cpu = 1_000_000;
        let mut out = Vec::new();
        c.tick(t0 + Duration::from_secs(from), cpu);
        for s in from + 1..=from + windows {
            let m = c.method();
            c.sent(mib * MIB);
            cpu += cost(m, s) * mib;
            if let Some(d) = c.tick(t0 + Duration::from_secs(s), cpu) {
                out.push((s, d));
            }
        }
        out
    }

    #[test]
    fn a_choice_reads_back_by_name() {
        assert_eq!(choice_name(0), "measuring");
        for m in [Method::Mapped, Method::Sendfile] {
            assert_ne!(m.code(), 0);
            assert_eq!(choice_name(m.code()), m.name());
        }
    }

    #[test]
    fn the_cheaper_method_is_chosen_after_five_windows_of_each() {
        for (mapped, sendfile, want) in [
            (300_000, 200_000, Method::Sendfile),
            (200_000, 300_000, Method::Mapped),
            // Within the margin: sendfile, which copies nothing.
            (196_000, 200_000, Method::Sendfile),
        ] {
            let c = Chooser::default();
            let t0 = Instant::now();
            assert!(c.exploring());
            let mut seen = Vec::new();
            let d = run(&c, t0, 0, 30, 64, |m, _| {
                seen.push(m);
                match m {
                    Method::Mapped => mapped,
                    Method::Sendfile => sendfile,
                }
            });
            // Alternating from the first counted window: ten windows decide.
            assert_eq!(d.len(), 1, "{d:?}");
            assert_eq!(d[0].0, 10);
            assert_eq!(d[0].1.method, want);
            assert_eq!(d[0].1.mapped_ns_per_mib, mapped as f64);
            assert_eq!(d[0].1.sendfile_ns_per_mib, sendfile as f64);
            assert_eq!(
                &seen[..4],
                &[
                    Method::Mapped,
                    Method::Sendfile,
                    Method::Mapped,
                    Method::Sendfile
                ]
            );
            assert!(seen[10..].iter().all(|&m| m == want), "{seen:?}");
            assert!(!c.exploring());
        }
    }

    #[test]
    fn medians_shrug_off_a_noisy_window() {
        let c = Chooser::default();
        // Sendfile is cheaper, but two of its windows are 10x off (a neighbour's burst).
        let d = run(&c, Instant::now(), 0, 10, 64, |m, s| match m {
            Method::Mapped => 300_000,
            Method::Sendfile if s == 2 || s == 6 => 3_000_000,
            Method::Sendfile => 200_000,
        });
        assert_eq!(d[0].1.method, Method::Sendfile);
    }

    #[test]
    fn windows_with_few_large_bytes_are_not_samples() {
        let c = Chooser::default();
        let t0 = Instant::now();
        // 8 MiB a window: under WINDOW_MIN_BYTES, nothing is learned, nothing changes.
        assert!(run(&c, t0, 0, 100, 8, |_, _| 1_000_000).is_empty());
        assert!(c.exploring());
        assert_eq!(c.method(), Method::Mapped);
        assert!(c.samples.borrow().iter().all(Vec::is_empty));
    }

    #[test]
    fn a_choice_holds_then_both_are_measured_again() {
        let c = Chooser::default();
        let t0 = Instant::now();
        let d = run(&c, t0, 0, 10, 64, |m, _| match m {
            Method::Mapped => 100_000,
            Method::Sendfile => 200_000,
        });
        assert_eq!(d[0].1.method, Method::Mapped);
        // Held through EXPLOIT whatever the costs say.
        let later = EXPLOIT.as_secs();
        assert!(run(&c, t0, 10, later - 1, 64, |_, _| 1).is_empty());
        assert_eq!(c.method(), Method::Mapped);
        // Then measured again, the other method first; now sendfile is cheaper.
        let d = run(&c, t0, 10 + later, 12, 64, |m, _| match m {
            Method::Mapped => 300_000,
            Method::Sendfile => 100_000,
        });
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].1.method, Method::Sendfile);
    }
}
