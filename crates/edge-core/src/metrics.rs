//! Counters: one cache-line-aligned block of relaxed atomics per worker, summed by the
//! admin listener for `/status` and `/metrics`. Workers never share a line, so counting
//! costs no cross-core traffic on the hot path. The counters a request's path bumps
//! are [`Counter`]s: only their own worker writes them, so an increment is a load and a
//! store, not a locked read-modify-write; the rest (connection events, counters other
//! threads also write) stay `AtomicU64`s.

/// Their `/metrics` families ([`Metrics::write_prom`]).
mod families;
mod quic;
pub mod top;

pub use quic::QuicStats;

use std::sync::atomic::{AtomicU64, Ordering, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// A counter only its own worker's thread writes (the admin thread reads it): an
/// increment is a Relaxed load and a Relaxed store (two `mov`s on x86) instead of a
/// `fetch_add` (a `lock`-prefixed read-modify-write, tens of cycles even uncontended).
/// A reader sees every value the writer stored, in order, as with `fetch_add`; what
/// it loses, two threads adding at once, cannot happen with one writer.
#[derive(Default, Debug)]
#[repr(transparent)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the owning worker calls this (a second writer would lose counts).
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// Adds 1 and returns the value before.
    #[inline]
    pub fn bump(&self) -> u64 {
        let n = self.0.load(Relaxed);
        self.0.store(n.wrapping_add(1), Relaxed);
        n
    }

    pub fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }
}

/// What the admin listener sums: a [`Counter`] or a plain atomic.
pub trait Read {
    fn read(&self) -> u64;
}

impl Read for Counter {
    fn read(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

impl Read for AtomicU64 {
    fn read(&self) -> u64 {
        self.load(Relaxed)
    }
}

/// Per-worker counters.
#[repr(align(64))]
#[derive(Default)]
pub struct WorkerStats {
    pub accepted: AtomicU64,
    pub active: AtomicU64,
    /// Of `active`, idle keep-alive connections parked without a task (updated once a
    /// second).
    pub parked: AtomicU64,
    pub requests: Counter,
    /// New connections accepted and closed at once: `worker_connections` were open and
    /// none of them idle.
    pub refused: AtomicU64,
    /// Idle keep-alive connections closed to make room for new ones at
    /// `worker_connections`.
    pub reclaimed: AtomicU64,
    /// Connections of `proxy_protocol` listeners closed without a valid PROXY header
    /// (none, malformed, too long, or not in time).
    pub proxy_protocol_errors: AtomicU64,
    /// Requests refused with 508: they had already passed through this node (`Via`).
    pub loops: AtomicU64,
    /// Requests refused with 403 by a location's `allow`/`deny` rules.
    pub access_denied: AtomicU64,
    pub status: [Counter; 5], // 1xx..5xx
    pub bytes_in: Counter,
    pub bytes_out: Counter,
    pub upstream_requests: AtomicU64,
    pub upstream_connect_errors: AtomicU64,
    pub upstream_timeouts: AtomicU64,
    pub upstream_bad_responses: AtomicU64,
    pub upstream_reused: AtomicU64,
    pub bad_requests: AtomicU64,
    /// Responses of cached locations by `X-Cache-Status`, indexed like
    /// [`CACHE_STATUSES`].
    pub cache_status: [Counter; CACHE_STATUSES.len()],
    /// Body bytes sent from the cache (hits, stale, collapsed followers).
    pub cache_bytes_hit: Counter,
    /// Body bytes of cached locations relayed from the origin (misses, bypass).
    pub cache_bytes_origin: AtomicU64,
    /// Stored partial objects completed: the missing bytes combined with the stored
    /// ones, and origin answers that could not be (another representation, no strong
    /// validator, another range) and replaced the part instead.
    pub partial_combined: AtomicU64,
    pub partial_not_combined: AtomicU64,
    /// The worker's RAM tier and open-file cache (copied from their plain counters
    /// after each lookup: stores, no read-modify-write).
    pub local: LocalStats,
    /// Responses compressed, by coding (`edge_compress::Coding::index`): on the fly,
    /// and the production of stored copies.
    pub compress_responses: [AtomicU64; 3],
    /// Responses decoded for a client that does not accept the origin's coding.
    pub decompress_responses: [AtomicU64; 3],
    pub compress_bytes_in: AtomicU64,
    pub compress_bytes_out: AtomicU64,
    /// Thread CPU time spent compressing and decoding (pool threads or inline).
    pub compress_cpu_ns: AtomicU64,
    /// Responses sent uncompressed because the compression pool's queue was full.
    pub compress_overloads: AtomicU64,
    /// Hits answered with a stored compressed copy (no compression work).
    pub compress_variant_hits: Counter,
    /// Compressed copies stored.
    pub compress_variants_stored: AtomicU64,
    /// Sliced objects found changed between slices (`slice`): every slice purged.
    pub slice_mismatches: AtomicU64,
    /// Cache-hit body bytes over `aio.sendfile_max`, by how they left: written from a
    /// mapping, or sent by sendfile (`http::large_send`).
    pub large_mapped_bytes: Counter,
    pub large_sendfile_bytes: Counter,
    /// `sendfile_max = "auto"`: the method this worker chose (0: measuring both, 1:
    /// mapped, 2: sendfile) and each one's median CPU per MiB (ns) at that choice.
    pub large_send_choice: AtomicU64,
    pub large_send_mapped_ns_per_mib: AtomicU64,
    pub large_send_sendfile_ns_per_mib: AtomicU64,
    /// Requests by HTTP version, indexed like [`HTTP_VERSIONS`].
    pub http_versions: [Counter; HTTP_VERSIONS.len()],
    /// TLS handshakes and their failures.
    pub tls: crate::tls::TlsStats,
    /// HTTP/2 connections, streams and the defences' counters.
    pub h2: H2Stats,
    /// QUIC handshakes, HTTP/3 streams and the defences' counters.
    pub quic: QuicStats,
    /// The worker's most requested objects over the last minute (published once a
    /// second by the worker, see [`top`]).
    pub top: top::Published,
}

/// The `version` label values of `edgecache_http_requests_total`.
pub const HTTP_VERSIONS: [&str; 4] = ["1.0", "1.1", "2", "3"];

impl WorkerStats {
    /// Counts a request by its version.
    pub fn count_version(&self, v: edge_http::Version) {
        let i = match v {
            edge_http::Version::Http10 => 0,
            edge_http::Version::Http11 => 1,
            edge_http::Version::Http2 => 2,
            edge_http::Version::Http3 => 3,
        };
        self.http_versions[i].add(1);
    }
}

/// HTTP/2 counters of one worker.
#[derive(Default)]
pub struct H2Stats {
    pub connections: AtomicU64,
    pub streams: AtomicU64,
    /// Streams the client reset before their response was complete.
    pub client_resets: AtomicU64,
    /// Connections closed with GOAWAY ENHANCE_YOUR_CALM for resetting streams faster
    /// than they are answered (rapid reset, CVE-2023-44487).
    pub rapid_reset_goaways: AtomicU64,
    /// Connections that ended on a protocol error, indexed like [`H2_ERRORS`].
    pub errors: [AtomicU64; H2_ERRORS.len()],
}

/// The `reason` label values of `edgecache_h2_connection_errors_total`: the HTTP/2
/// error code the connection ended with (`enhance_your_calm`: the h2 crate's defences
/// against floods of resets before accept, of CONTINUATION frames, and HPACK bombs far
/// over the header list limit; `io`: a broken socket). A header list just over the limit
/// is answered 431 on its stream and counted nowhere here.
pub const H2_ERRORS: [&str; 7] = [
    "protocol_error",
    "flow_control_error",
    "frame_size_error",
    "compression_error",
    "enhance_your_calm",
    "other",
    "io",
];

/// A worker's RAM tier and open-file cache counters, see `edge_cache::local`.
#[derive(Default)]
pub struct LocalStats {
    pub mem_hits: AtomicU64,
    pub mem_hit_bytes: AtomicU64,
    pub mem_misses: AtomicU64,
    pub mem_admissions: AtomicU64,
    pub mem_rejections: AtomicU64,
    pub mem_evictions: AtomicU64,
    pub mem_invalidations: AtomicU64,
    pub mem_bytes: AtomicU64,
    pub mem_objects: AtomicU64,
    pub files_hits: AtomicU64,
    pub files_misses: AtomicU64,
    pub files_closed: AtomicU64,
    pub files_open: AtomicU64,
}

impl LocalStats {
    /// Publish a worker's current counters.
    pub fn publish(&self, l: &edge_cache::local::Local) {
        // Without a RAM tier (or after a reload removed it) every figure is 0.
        {
            let s = l.mem.as_ref().map(|m| m.stats()).unwrap_or_default();
            for (a, v) in [
                (&self.mem_hits, s.hits),
                (&self.mem_hit_bytes, s.hit_bytes),
                (&self.mem_misses, s.misses),
                (&self.mem_admissions, s.admissions),
                (&self.mem_rejections, s.rejections),
                (&self.mem_evictions, s.evictions),
                (&self.mem_invalidations, s.invalidations),
                (&self.mem_bytes, s.bytes),
                (&self.mem_objects, s.objects),
            ] {
                a.store(v, Relaxed);
            }
        }
        let f = l.files.stats();
        for (a, v) in [
            (&self.files_hits, f.hits),
            (&self.files_misses, f.misses),
            (&self.files_closed, f.closed),
            (&self.files_open, f.open),
        ] {
            a.store(v, Relaxed);
        }
    }
}

/// The `status` label values of `edgecache_cache_requests_total`, in the order of
/// [`WorkerStats::cache_status`].
pub const CACHE_STATUSES: [&str; 7] = [
    "hit",
    "miss",
    "expired",
    "stale",
    "updating",
    "revalidated",
    "bypass",
];

impl WorkerStats {
    pub fn count_status(&self, status: u16) {
        let class = (status / 100).clamp(1, 5) as usize - 1;
        self.status[class].add(1);
    }
}

/// All workers' counters.
pub struct Metrics {
    pub workers: Vec<WorkerStats>,
    pub started: Instant,
    /// Each worker's file I/O backend counters and mode, set once when the worker has
    /// built its backend (written only by that worker, read by the admin thread).
    pub aio: Vec<OnceLock<(&'static str, Arc<edge_aio::AioStats>)>>,
}

impl Metrics {
    pub fn new(workers: usize) -> Metrics {
        Metrics {
            workers: (0..workers).map(|_| WorkerStats::default()).collect(),
            started: Instant::now(),
            aio: (0..workers).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Sum of one counter over all workers.
    pub fn sum<C: Read + ?Sized>(&self, f: impl Fn(&WorkerStats) -> &C) -> u64 {
        self.workers.iter().map(|w| f(w).read()).sum()
    }

    pub fn active(&self) -> u64 {
        self.sum(|w| &w.active)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes_and_sums() {
        let m = Metrics::new(2);
        m.workers[0].count_status(200);
        m.workers[1].count_status(204);
        m.workers[1].count_status(502);
        m.workers[0].count_status(999); // clamped into 5xx, never a panic
        m.workers[0].count_status(0); // clamped into 1xx
        assert_eq!(m.sum(|w| &w.status[1]), 2);
        assert_eq!(m.sum(|w| &w.status[4]), 2);
        assert_eq!(m.sum(|w| &w.status[0]), 1);
        assert_eq!(std::mem::align_of::<WorkerStats>(), 64);
    }

    #[test]
    fn single_writer_counters_count_and_read_like_atomics() {
        let m = Arc::new(Metrics::new(2));
        // Each worker's thread writes only its own counters; the reader sums them.
        let writers: Vec<_> = (0..2)
            .map(|i| {
                let m = m.clone();
                std::thread::spawn(move || {
                    let w = &m.workers[i];
                    for n in 0..10_000u64 {
                        assert_eq!(w.requests.bump(), n);
                        w.bytes_out.add(3);
                        w.count_version(edge_http::Version::Http11);
                    }
                })
            })
            .collect();
        for t in writers {
            t.join().unwrap();
        }
        assert_eq!(m.sum(|w| &w.requests), 20_000);
        assert_eq!(m.sum(|w| &w.bytes_out), 60_000);
        assert_eq!(m.sum(|w| &w.http_versions[1]), 20_000);
        assert_eq!(m.workers[1].requests.load(Relaxed), 10_000);
        // Plain atomics sum through the same `Read`.
        m.workers[0].accepted.fetch_add(5, Relaxed);
        assert_eq!(m.sum(|w| &w.accepted), 5);
    }
}
