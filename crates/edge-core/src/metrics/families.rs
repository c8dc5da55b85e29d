//! The `/metrics` families of the per-worker counters ([`WorkerStats`], its
//! [`LocalStats`] and [`H2Stats`]), summed over workers or labelled by worker.
//!
//! How it fits: the counter structs are in `metrics.rs`; this file renders them
//! through [`Prom`], and `admin` calls [`Metrics::write_prom`] for `GET /metrics`. A
//! counter is read only through [`read`] (and [`Metrics::sum`]), so a change of the
//! counters' type is a change here in one place.

use super::{H2Stats, LocalStats, Metrics, WorkerStats, CACHE_STATUSES, H2_ERRORS, HTTP_VERSIONS};
use crate::prom::Prom;
use std::sync::atomic::AtomicU64;

/// One worker counter, as read here (with single-writer counters beside atomics, this
/// becomes the trait both read through).
type Counter = dyn super::Read;

/// The value of one worker counter: the one place a counter is read.
fn read(c: &Counter) -> u64 {
    c.read()
}

/// One counter of a worker's block.
type Get = fn(&WorkerStats) -> &Counter;

impl Metrics {
    /// Every family of the worker counters, grouped: requests, connections,
    /// protocols (HTTP versions, TLS, HTTP/2), bytes and upstream requests, cache
    /// responses, the RAM tier and open files, compression.
    pub fn write_prom(&self, p: &mut Prom) {
        self.write_requests(p);
        self.write_connections(p);
        self.write_protocols(p);
        self.write_traffic(p);
        self.write_cache(p);
        self.write_local(p);
        self.write_compress(p);
    }

    /// Sums of one counter over workers, a family each.
    fn write_sums(&self, p: &mut Prom, families: &[(&'static str, &str, Get)]) {
        for (name, help, get) in families {
            p.counter(name, help).value(self.sum(get));
        }
    }

    fn write_requests(&self, p: &mut Prom) {
        let mut f = p.counter(
            "edgecache_requests_total",
            "Requests answered, by status class.",
        );
        for (i, class) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().enumerate() {
            f.labelled(&[("class", class)], self.sum(|w| &w.status[i]));
        }
        let mut f = p.counter(
            "edgecache_worker_requests_total",
            "Requests read, by worker.",
        );
        for (i, w) in self.workers.iter().enumerate() {
            f.labelled(&[("worker", &i)], read(&w.requests));
        }
        self.write_sums(
            p,
            &[
                (
                    "edgecache_loops_total",
                    "Requests refused with 508: they had already passed through this node (Via).",
                    |w| &w.loops,
                ),
                (
                    "edgecache_access_denied_total",
                    "Requests refused with 403 by allow/deny rules.",
                    |w| &w.access_denied,
                ),
                (
                    "edgecache_bad_requests_total",
                    "Requests rejected by the HTTP parser.",
                    |w| &w.bad_requests,
                ),
            ],
        );
    }

    fn write_connections(&self, p: &mut Prom) {
        self.write_sums(
            p,
            &[
                (
                    "edgecache_connections_accepted_total",
                    "Client connections accepted.",
                    |w| &w.accepted,
                ),
                (
                    "edgecache_connections_refused_total",
                    "New connections closed at once: worker_connections open and none idle.",
                    |w| &w.refused,
                ),
                (
                    "edgecache_proxy_protocol_errors_total",
                    "Connections of proxy_protocol listeners closed without a valid PROXY header.",
                    |w| &w.proxy_protocol_errors,
                ),
                (
                    "edgecache_connections_reclaimed_total",
                    "Idle keep-alive connections closed to make room at worker_connections.",
                    |w| &w.reclaimed,
                ),
            ],
        );
        let mut f = p.counter(
            "edgecache_worker_connections_accepted_total",
            "Client connections accepted, by worker (how the accept strategy spreads them).",
        );
        for (i, w) in self.workers.iter().enumerate() {
            f.labelled(&[("worker", &i)], read(&w.accepted));
        }
        p.gauge(
            "edgecache_connections_active",
            "Client connections open now.",
        )
        .value(self.active());
    }

    /// Requests by HTTP version, TLS handshakes and the HTTP/2 counters.
    fn write_protocols(&self, p: &mut Prom) {
        let mut f = p.counter(
            "edgecache_http_requests_total",
            "Client requests by HTTP version.",
        );
        for (i, v) in HTTP_VERSIONS.iter().enumerate() {
            f.labelled(&[("version", v)], self.sum(|w| &w.http_versions[i]));
        }
        crate::tls::TlsStats::write_prom(self.workers.iter().map(|w| &w.tls), p);
        H2Stats::write_prom(self, p);
        super::QuicStats::write_prom(self.workers.iter().map(|w| &w.quic), p);
    }

    /// Bytes to and from clients, and the requests sent upstream.
    fn write_traffic(&self, p: &mut Prom) {
        self.write_sums(
            p,
            &[
                (
                    "edgecache_bytes_sent_total",
                    "Response body bytes sent to clients.",
                    |w| &w.bytes_out,
                ),
                (
                    "edgecache_bytes_received_total",
                    "Bytes read from clients.",
                    |w| &w.bytes_in,
                ),
                (
                    "edgecache_upstream_requests_total",
                    "Requests sent to upstreams.",
                    |w| &w.upstream_requests,
                ),
                (
                    "edgecache_upstream_reused_total",
                    "Upstream requests on a reused keep-alive connection.",
                    |w| &w.upstream_reused,
                ),
            ],
        );
        let mut f = p.counter(
            "edgecache_upstream_errors_total",
            "Upstream failures, by kind.",
        );
        let kinds: [(&str, Get); 3] = [
            ("connect", |w| &w.upstream_connect_errors),
            ("timeout", |w| &w.upstream_timeouts),
            ("bad_response", |w| &w.upstream_bad_responses),
        ];
        for (kind, get) in kinds {
            f.labelled(&[("kind", &kind)], self.sum(get));
        }
    }

    /// The responses of cached locations (the zones' own families are
    /// `state::caches`'s).
    fn write_cache(&self, p: &mut Prom) {
        let mut f = p.counter(
            "edgecache_cache_requests_total",
            "Responses of cached locations, by X-Cache-Status.",
        );
        for (i, st) in CACHE_STATUSES.iter().enumerate() {
            f.labelled(&[("status", st)], self.sum(|w| &w.cache_status[i]));
        }
        p.counter(
            "edgecache_cache_bytes_total",
            "Body bytes of cached locations, by source (byte hit ratio = cache / (cache + origin)).",
        )
        .labelled(&[("source", &"cache")], self.sum(|w| &w.cache_bytes_hit))
        .labelled(&[("source", &"origin")], self.sum(|w| &w.cache_bytes_origin));
        p.counter(
            "edgecache_large_hit_bytes_total",
            "Cache-hit body bytes over aio.sendfile_max, by how they left: written from a mapping of the file, or by sendfile.",
        )
        .labelled(&[("method", &"mapped")], self.sum(|w| &w.large_mapped_bytes))
        .labelled(&[("method", &"sendfile")], self.sum(|w| &w.large_sendfile_bytes));
        p.counter(
            "edgecache_slice_mismatches_total",
            "Sliced objects whose slices disagreed (ETag, Last-Modified or length): every slice purged, never served mixed.",
        )
        .value(self.sum(|w| &w.slice_mismatches));
        p.counter(
            "edgecache_cache_partial_total",
            "Stored partial objects completed from the origin, by result.",
        )
        .labelled(
            &[("result", &"combined")],
            self.sum(|w| &w.partial_combined),
        )
        .labelled(
            &[("result", &"not_combined")],
            self.sum(|w| &w.partial_not_combined),
        );
    }

    /// The RAM tier and open-file cache families.
    fn write_local(&self, p: &mut Prom) {
        LocalStats::write_prom(self, p);
    }

    /// The compression counters (the pool's queue is `compress`'s family).
    fn write_compress(&self, p: &mut Prom) {
        use edge_compress::Coding;
        type ByCoding = fn(&WorkerStats) -> &[AtomicU64; 3];
        let by_coding: [(&str, &str, ByCoding); 2] = [
            (
                "edgecache_compress_responses_total",
                "Responses compressed (on the fly, or while storing a compressed copy), by coding.",
                |w| &w.compress_responses,
            ),
            (
                "edgecache_decompress_responses_total",
                "Responses decoded for clients that do not accept the origin's coding, by coding.",
                |w| &w.decompress_responses,
            ),
        ];
        for (name, help, get) in by_coding {
            let mut f = p.counter(name, help);
            for c in Coding::ALL {
                f.labelled(&[("coding", &c.token())], self.sum(|w| &get(w)[c.index()]));
            }
        }
        self.write_sums(
            p,
            &[
                (
                    "edgecache_compress_bytes_in_total",
                    "Bytes given to compressors.",
                    |w| &w.compress_bytes_in,
                ),
                (
                    "edgecache_compress_bytes_out_total",
                    "Bytes compressors produced.",
                    |w| &w.compress_bytes_out,
                ),
                (
                    "edgecache_compress_overloads_total",
                    "Responses sent uncompressed because the compression pool's queue was full.",
                    |w| &w.compress_overloads,
                ),
                (
                    "edgecache_compress_variant_hits_total",
                    "Hits answered with a stored compressed copy (no compression work).",
                    |w| &w.compress_variant_hits,
                ),
                (
                    "edgecache_compress_variants_stored_total",
                    "Compressed copies stored in the cache.",
                    |w| &w.compress_variants_stored,
                ),
                (
                    "edgecache_compress_cpu_nanoseconds_total",
                    "Thread CPU time spent compressing and decoding.",
                    |w| &w.compress_cpu_ns,
                ),
            ],
        );
    }
}

impl H2Stats {
    /// The HTTP/2 families, summed over the workers of `m`.
    fn write_prom(m: &Metrics, p: &mut Prom) {
        m.write_sums(
            p,
            &[
                (
                    "edgecache_h2_connections_total",
                    "HTTP/2 connections.",
                    |w| &w.h2.connections,
                ),
                (
                    "edgecache_h2_streams_total",
                    "HTTP/2 streams (requests).",
                    |w| &w.h2.streams,
                ),
                (
                    "edgecache_h2_client_resets_total",
                    "HTTP/2 streams the client reset before their response was complete.",
                    |w| &w.h2.client_resets,
                ),
                (
                    "edgecache_h2_rapid_reset_goaways_total",
                    "HTTP/2 connections closed for resetting streams faster than they are answered (CVE-2023-44487).",
                    |w| &w.h2.rapid_reset_goaways,
                ),
            ],
        );
        let mut f = p.counter(
            "edgecache_h2_connection_errors_total",
            "HTTP/2 connections ended by an error, by HTTP/2 error code.",
        );
        for (i, r) in H2_ERRORS.iter().enumerate() {
            f.labelled(&[("reason", r)], m.sum(|w| &w.h2.errors[i]));
        }
    }
}

impl LocalStats {
    /// The RAM tier and open-file cache families, summed over the workers of `m`.
    fn write_prom(m: &Metrics, p: &mut Prom) {
        use crate::prom::Kind::{Counter as C, Gauge as G};
        type LocalGet = fn(&LocalStats) -> &Counter;
        let families: [(&'static str, crate::prom::Kind, &str, LocalGet); 13] = [
            ("edgecache_memory_cache_hits_total", C, "Fresh hits answered from a worker's RAM tier.", |l| &l.mem_hits),
            ("edgecache_memory_cache_hit_bytes_total", C, "Body bytes of the objects answered from RAM.", |l| &l.mem_hit_bytes),
            ("edgecache_memory_cache_misses_total", C, "Fresh lookups the RAM tier could not answer.", |l| &l.mem_misses),
            ("edgecache_memory_cache_admissions_total", C, "Objects taken into the RAM tier.", |l| &l.mem_admissions),
            ("edgecache_memory_cache_rejections_total", C, "Objects refused by the RAM tier (too large, or less popular than what they would evict).", |l| &l.mem_rejections),
            ("edgecache_memory_cache_evictions_total", C, "Objects evicted from the RAM tier by its policy.", |l| &l.mem_evictions),
            ("edgecache_memory_cache_invalidations_total", C, "RAM entries dropped because the index names another version (purge, refresh, replacement).", |l| &l.mem_invalidations),
            ("edgecache_memory_cache_bytes", G, "Bytes held by the RAM tier (bodies plus per-entry overhead).", |l| &l.mem_bytes),
            ("edgecache_memory_cache_objects", G, "Objects held by the RAM tier.", |l| &l.mem_objects),
            ("edgecache_open_file_cache_hits_total", C, "Disk hits that found their file already open.", |l| &l.files_hits),
            ("edgecache_open_file_cache_misses_total", C, "Disk hits that had to open their file.", |l| &l.files_misses),
            ("edgecache_open_file_cache_closed_total", C, "Cached descriptors closed (LRU, inactive, stale inode).", |l| &l.files_closed),
            ("edgecache_open_file_cache_open", G, "Descriptors held open by the open-file cache.", |l| &l.files_open),
        ];
        for (name, kind, help, get) in families {
            p.family(name, kind, help).value(m.sum(|w| get(&w.local)));
        }
    }
}
