//! Measurements: HDR histograms and counters, per thread, merged at the end.
//!
//! How it fits: each worker thread owns one [`ThreadStats`] that its connections update
//! (single-threaded, no atomics). When the test ends the workers hand them to the main
//! thread, which merges them ([`ThreadStats::merge`]) and gives the result to the text
//! report and the JSON writer, both of which read [`Summary`]s.

use hdrhistogram::Histogram;
use std::time::Duration;

use crate::tls::HandshakeError;
use crate::verify::Verdict;

/// Significant digits of every histogram (0.1% value resolution).
pub const SIGFIG: u8 = 3;
/// Initial upper bound of a histogram in microseconds (they grow on demand).
const INITIAL_MAX_US: u64 = 100_000;
/// Status codes are counted in a flat array indexed by code (httparse allows 3 digits).
pub const STATUS_SLOTS: usize = 1000;

/// A microsecond histogram that grows when a larger value arrives.
pub fn new_histogram() -> Histogram<u64> {
    let mut h =
        Histogram::new_with_bounds(1, INITIAL_MAX_US, SIGFIG).expect("valid histogram bounds");
    h.auto(true);
    h
}

/// Records a duration in microseconds (0 allowed; never fails).
#[inline]
pub fn record(h: &mut Histogram<u64>, d: Duration) {
    let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    // Grows the histogram when needed; clamps only if it cannot grow any more.
    if h.record(us).is_err() {
        h.saturating_record(us);
    }
}

/// Error counters. `connect`, `read`, `write`, `timeout` and `status` mean what they
/// mean in wrk; the others are edgeload's additions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Errors {
    /// connect() failed (refused, unreachable...), not counting timeouts.
    pub connect: u64,
    /// Read failed: reset, early close mid-response, unparseable response.
    pub read: u64,
    pub write: u64,
    /// A request got no complete response within `--timeout`.
    pub timeout: u64,
    /// Responses with a status outside 200..=399.
    pub status: u64,
    /// Bodies that did not match their `X-Checksum`.
    pub verify: u64,
    /// connect() did not complete within `--timeout`.
    pub connect_timeout: u64,
    /// A request waited longer than `--timeout` for its connection to exist.
    pub delay_timeout: u64,
}

impl Errors {
    fn add(&mut self, o: &Errors) {
        self.connect += o.connect;
        self.read += o.read;
        self.write += o.write;
        self.timeout += o.timeout;
        self.status += o.status;
        self.verify += o.verify;
        self.connect_timeout += o.connect_timeout;
        self.delay_timeout += o.delay_timeout;
    }
}

/// Per URL class (mix line) figures.
#[derive(Debug, Clone)]
pub struct ClassStats {
    pub requests: u64,
    pub errors: u64,
    pub bytes: u64,
    pub latency: Histogram<u64>,
}

/// TLS handshakes (`https://` only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TlsCounts {
    /// Handshakes that completed (one per connection established).
    pub handshakes: u64,
    /// Of those, the ones that resumed an earlier session.
    pub resumed: u64,
    /// Handshakes that failed or timed out (also counted in `errors.connect` or
    /// `errors.connect_timeout`).
    pub failed: u64,
}

/// Verification counts (`--verify`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyCounts {
    pub ok: u64,
    pub mismatched: u64,
    pub without_checksum: u64,
}

/// Everything one thread measured.
#[derive(Debug, Clone)]
pub struct ThreadStats {
    /// Latency: completion minus intended send time (open loop) or actual send time.
    pub latency: Histogram<u64>,
    /// Service time: completion minus actual send time (equals latency in closed loop).
    pub service: Histogram<u64>,
    /// TCP handshake: connect() to writable.
    pub connect: Histogram<u64>,
    /// TLS handshake (`https://`): from the TCP connect's completion to the handshake's.
    pub tls_handshake: Histogram<u64>,
    /// How long a connection's first request waited for the connection to exist.
    pub delay: Histogram<u64>,
    /// Requests per second per thread, sampled every 100 ms (wrk's "Req/Sec" row).
    pub req_rate: Histogram<u64>,
    pub completed: u64,
    /// Bytes read from sockets (those dropped unread included).
    pub bytes: u64,
    /// Of those, body bytes dropped unread in the kernel (`recv(MSG_TRUNC)`, see
    /// `--copy-bodies`).
    pub discarded: u64,
    /// Connections established.
    pub connections: u64,
    pub errors: Errors,
    pub tls: TlsCounts,
    /// The first failed TLS handshake's reason, for stderr.
    pub tls_error: Option<String>,
    pub status: Box<[u64; STATUS_SLOTS]>,
    pub verify: VerifyCounts,
    pub classes: Vec<ClassStats>,
}

impl ThreadStats {
    pub fn new(classes: usize) -> Self {
        ThreadStats {
            latency: new_histogram(),
            service: new_histogram(),
            connect: new_histogram(),
            tls_handshake: new_histogram(),
            delay: new_histogram(),
            req_rate: new_histogram(),
            completed: 0,
            bytes: 0,
            discarded: 0,
            connections: 0,
            errors: Errors::default(),
            tls: TlsCounts::default(),
            tls_error: None,
            status: Box::new([0; STATUS_SLOTS]),
            verify: VerifyCounts::default(),
            classes: (0..classes)
                .map(|_| ClassStats {
                    requests: 0,
                    errors: 0,
                    bytes: 0,
                    latency: new_histogram(),
                })
                .collect(),
        }
    }

    /// Records one complete response of `class`.
    #[inline]
    pub fn response(
        &mut self,
        class: usize,
        status: u16,
        bytes: u64,
        verdict: Verdict,
        latency: Duration,
        service: Duration,
    ) {
        self.completed += 1;
        record(&mut self.latency, latency);
        record(&mut self.service, service);
        self.status[usize::from(status).min(STATUS_SLOTS - 1)] += 1;
        let mut failed = false;
        if !(200..400).contains(&status) {
            self.errors.status += 1;
            failed = true;
        }
        match verdict {
            Verdict::Skipped => {}
            Verdict::Ok => self.verify.ok += 1,
            Verdict::NoChecksum => self.verify.without_checksum += 1,
            Verdict::Mismatch => {
                self.verify.mismatched += 1;
                self.errors.verify += 1;
                failed = true;
            }
        }
        if let Some(c) = self.classes.get_mut(class) {
            c.requests += 1;
            c.bytes += bytes;
            c.errors += u64::from(failed);
            record(&mut c.latency, latency);
        }
    }

    /// Counts a TLS handshake that did not complete (a connect error, or a connect
    /// timeout); keeps the first reason.
    pub fn tls_failure(&mut self, e: HandshakeError) {
        self.tls.failed += 1;
        let reason = match e {
            HandshakeError::Timeout => {
                self.errors.connect_timeout += 1;
                "TLS handshake timed out (--timeout)".to_string()
            }
            HandshakeError::Failed(m) => {
                self.errors.connect += 1;
                m
            }
        };
        self.tls_error.get_or_insert(reason);
    }

    /// Counts an error against a class (timeouts and read errors of in-flight requests).
    pub fn class_error(&mut self, class: usize) {
        if let Some(c) = self.classes.get_mut(class) {
            c.errors += 1;
        }
    }

    /// Adds `o` into `self`.
    pub fn merge(&mut self, o: &ThreadStats) {
        for (a, b) in [
            (&mut self.latency, &o.latency),
            (&mut self.service, &o.service),
            (&mut self.connect, &o.connect),
            (&mut self.tls_handshake, &o.tls_handshake),
            (&mut self.delay, &o.delay),
            (&mut self.req_rate, &o.req_rate),
        ] {
            a.add(b).expect("auto-resizing histograms always merge");
        }
        self.completed += o.completed;
        self.bytes += o.bytes;
        self.discarded += o.discarded;
        self.connections += o.connections;
        self.errors.add(&o.errors);
        self.tls.handshakes += o.tls.handshakes;
        self.tls.resumed += o.tls.resumed;
        self.tls.failed += o.tls.failed;
        if self.tls_error.is_none() {
            self.tls_error.clone_from(&o.tls_error);
        }
        for (a, b) in self.status.iter_mut().zip(o.status.iter()) {
            *a += b;
        }
        self.verify.ok += o.verify.ok;
        self.verify.mismatched += o.verify.mismatched;
        self.verify.without_checksum += o.verify.without_checksum;
        for (a, b) in self.classes.iter_mut().zip(&o.classes) {
            a.requests += b.requests;
            a.errors += b.errors;
            a.bytes += b.bytes;
            a.latency
                .add(&b.latency)
                .expect("auto-resizing histograms always merge");
        }
    }
}

/// The figures printed for one distribution (all in the histogram's unit, µs).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Summary {
    pub count: u64,
    pub min: u64,
    pub mean: f64,
    pub stdev: f64,
    pub max: u64,
    pub p50: u64,
    pub p75: u64,
    pub p90: u64,
    pub p99: u64,
    #[serde(rename = "p99.9")]
    pub p99_9: u64,
    #[serde(rename = "p99.99")]
    pub p99_99: u64,
    /// Share of samples within mean ± stdev, in percent (wrk's "+/- Stdev").
    #[serde(skip)]
    pub within_stdev: f64,
}

impl Summary {
    pub fn of(h: &Histogram<u64>) -> Summary {
        if h.is_empty() {
            return Summary::default();
        }
        let mean = h.mean();
        let stdev = h.stdev();
        let (lo, hi) = (mean - stdev, mean + stdev);
        let within: u64 = h
            .iter_recorded()
            .filter(|v| {
                // The same "median equivalent" value that `mean()` uses.
                let x = h.median_equivalent(v.value_iterated_to()) as f64;
                x >= lo && x <= hi
            })
            .map(|v| v.count_at_value())
            .sum();
        Summary {
            count: h.len(),
            min: h.min(),
            mean,
            stdev,
            max: h.max(),
            p50: h.value_at_quantile(0.50),
            p75: h.value_at_quantile(0.75),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p99_9: h.value_at_quantile(0.999),
            p99_99: h.value_at_quantile(0.9999),
            within_stdev: within as f64 * 100.0 / h.len() as f64,
        }
    }

    /// The six percentiles the report prints, with their labels.
    pub fn percentiles(&self) -> [(&'static str, u64); 6] {
        [
            ("50", self.p50),
            ("75", self.p75),
            ("90", self.p90),
            ("99", self.p99),
            ("99.9", self.p99_9),
            ("99.99", self.p99_99),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_values() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v).unwrap();
        }
        let s = Summary::of(&h);
        assert_eq!((s.count, s.min, s.max), (1000, 1, 1000));
        assert_eq!(s.p50, 500);
        assert_eq!(s.p99, 990);
        assert!((s.mean - 500.5).abs() < 0.5);
        // Uniform: about 57.7% within one standard deviation.
        assert!((57.0..58.5).contains(&s.within_stdev), "{}", s.within_stdev);
        assert_eq!(Summary::of(&new_histogram()), Summary::default());
    }

    #[test]
    fn merge_adds_everything() {
        let mut a = ThreadStats::new(2);
        let mut b = ThreadStats::new(2);
        a.response(
            0,
            200,
            10,
            Verdict::Ok,
            Duration::from_micros(100),
            Duration::from_micros(90),
        );
        b.response(
            1,
            503,
            20,
            Verdict::Mismatch,
            Duration::from_secs(200),
            Duration::from_micros(5),
        );
        b.class_error(1);
        b.tls = TlsCounts {
            handshakes: 3,
            resumed: 2,
            failed: 0,
        };
        b.tls_failure(HandshakeError::Failed("bad cert".into()));
        b.tls_failure(HandshakeError::Timeout);
        record(&mut b.tls_handshake, Duration::from_micros(700));
        a.merge(&b);
        assert_eq!(
            a.tls,
            TlsCounts {
                handshakes: 3,
                resumed: 2,
                failed: 2
            }
        );
        assert_eq!(
            (a.errors.connect, a.errors.connect_timeout),
            (1, 1),
            "failed handshakes are connect errors"
        );
        assert_eq!(a.tls_error.as_deref(), Some("bad cert"));
        assert_eq!(a.tls_handshake.len(), 1);
        assert_eq!(a.completed, 2);
        assert_eq!(a.status[200] + a.status[503], 2);
        assert_eq!((a.errors.status, a.errors.verify), (1, 1));
        assert_eq!((a.verify.ok, a.verify.mismatched), (1, 1));
        assert_eq!(
            (
                a.classes[1].requests,
                a.classes[1].errors,
                a.classes[1].bytes
            ),
            (1, 2, 20)
        );
        // Grew past the initial bound to hold 200 s.
        assert!(a.latency.max() >= 199_000_000);
    }
}
