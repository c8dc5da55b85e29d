//! Response compression on the data path: what a response needs for a client
//! ([`plan`]), and the body filters that encode or decode it ([`Filter`]), on the
//! offload pool or inline.
//!
//! How it fits: a location with `compress` gets an [`edge_compress::Policy`] (in its
//! route). The cache handler stores compressed copies of objects (`handlers::cache::
//! variant`), so a hit never compresses; the proxy relay and uncached responses
//! compress on the fly through a [`Filter`]. With `compress_offload` (the default) each
//! chunk is compressed on the `[compress_pool]` threads and its completion comes back
//! through the worker's eventfd, the machinery of the file I/O pool
//! ([`edge_aio::Offload`]): the event loop never compresses. A full queue makes a
//! response that has not started go out uncompressed (counted as an overload).
//!
//! Layer: above `aio` and `metrics`, below `http`'s users (upstream, handlers).

use crate::config::{CompressPool, Location};
use crate::metrics::WorkerStats;
use crate::rt::thread_cpu_ns;
pub use edge_compress::{Accepted, Choice, Coding, Encoded, Levels, Policy};
use edge_compress::{Decoder, Encoder};
use std::cell::RefCell;
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, PoisonError};

/// Stack of a compression thread (brotli and zstd keep their tables on the heap; this
/// is room for their call depth).
const POOL_STACK: usize = 1 << 20;
/// Most decoded bytes one [`Filter::push`] may produce: 64 KiB of input expanding past
/// this is a decompression bomb from the origin, and the response is cut.
const MAX_DECODED_PER_PUSH: usize = 64 << 20;

/// The location's policy, from its config (None when it does not compress).
pub fn policy_for(loc: &Location) -> Option<Policy> {
    if loc.compress.is_empty() {
        return None;
    }
    let defaults = Levels::default();
    Some(Policy {
        codings: loc
            .compress
            .iter()
            .filter_map(|c| Coding::from_token(c))
            .collect(),
        types: match &loc.compress_types {
            Some(t) => t.iter().map(|s| s.to_ascii_lowercase()).collect(),
            None => edge_compress::DEFAULT_TYPES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        },
        min_length: loc.compress_min_length.map_or(1024, |s| s.0),
        levels: Levels {
            gzip: loc.gzip_level.map_or(defaults.gzip, |l| l as u32),
            brotli: loc.brotli_level.map_or(defaults.brotli, |l| l as u32),
            zstd: loc.zstd_level.map_or(defaults.zstd, |l| l as i32),
        },
        offload: loc.compress_offload.unwrap_or(true),
    })
}

/// What a response needs for one client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Send it as it is; `vary`: add `Vary: Accept-Encoding` (its representation
    /// depends on the request's `Accept-Encoding`, here or at the origin).
    AsIs { vary: bool },
    /// Compress it with this coding.
    Encode(Coding),
    /// It is encoded with this coding, which the client does not accept: decode it.
    Decode(Coding),
}

/// What [`plan`] needs to know about a response.
pub struct Facts<'a> {
    pub status: u16,
    pub content_type: Option<&'a [u8]>,
    pub no_transform: bool,
    pub encoded: Encoded,
    /// None: unknown (chunked).
    pub body_len: Option<u64>,
}

/// The plan for a response with `facts`, for a client that sent `accepted`.
pub fn plan(policy: &Policy, accepted: &Accepted, facts: &Facts<'_>) -> Plan {
    match facts.encoded {
        Encoded::Other => Plan::AsIs { vary: false },
        Encoded::One(c) if accepted.accepts(c) || facts.no_transform || !accepted.identity_ok() => {
            Plan::AsIs { vary: true }
        }
        // Only whole bodies can be decoded (not a 206, and a 304 has none).
        Encoded::One(_) if facts.status != 200 => Plan::AsIs { vary: true },
        Encoded::One(c) => Plan::Decode(c),
        Encoded::Identity => {
            if !policy.compressible(
                facts.status,
                facts.content_type,
                std::iter::empty(),
                Encoded::Identity,
                facts.body_len,
            ) || facts.no_transform
            {
                return Plan::AsIs { vary: false };
            }
            match accepted.choose(&policy.codings) {
                Choice::Coding(c) => Plan::Encode(c),
                Choice::Identity => Plan::AsIs { vary: true },
            }
        }
    }
}

/// Whether what a client gets of this response depends on its `Accept-Encoding`
/// (compressed for some, decoded for others): its identity form then carries `Vary:
/// Accept-Encoding` too.
pub fn varies(policy: &Policy, facts: &Facts<'_>) -> bool {
    match facts.encoded {
        Encoded::One(_) => true,
        Encoded::Other => false,
        Encoded::Identity => {
            !facts.no_transform
                && policy.compressible(
                    facts.status,
                    facts.content_type,
                    std::iter::empty(),
                    Encoded::Identity,
                    facts.body_len,
                )
        }
    }
}

/// [`Facts`] of an upstream response head.
pub fn facts_of_head(h: &edge_http::ResponseHead) -> Facts<'_> {
    Facts {
        status: h.status,
        content_type: h.headers.get("content-type"),
        no_transform: edge_compress::no_transform(h.headers.get_all("cache-control")),
        encoded: edge_compress::content_encoding(h.headers.get_all("content-encoding")),
        body_len: match h.body {
            edge_http::BodyKind::Length(n) => Some(n),
            edge_http::BodyKind::Empty => Some(0),
            _ => None,
        },
    }
}

/// [`Facts`] of a stored object (its header block, as sent on hits).
pub fn facts_of_block(status: u16, block: &[u8], body_len: Option<u64>) -> Facts<'_> {
    // One pass over the lines for the three fields (every hit on a compressing
    // location asks); `Content-Encoding`, rarely stored, read again only when present.
    let mut content_type = None;
    let mut no_transform = false;
    let mut encoded = false;
    for line in block_lines(block) {
        if let Some(v) = value_of(line, "content-type") {
            content_type = content_type.or(Some(v));
        } else if let Some(v) = value_of(line, "cache-control") {
            no_transform = no_transform || edge_compress::no_transform([v]);
        } else if value_of(line, "content-encoding").is_some() {
            encoded = true;
        }
    }
    Facts {
        status,
        content_type,
        no_transform,
        encoded: if encoded {
            edge_compress::content_encoding(block_values(block, "content-encoding"))
        } else {
            edge_compress::Encoded::Identity
        },
        body_len,
    }
}

/// The values of the `name` lines of a stored header block (`Name: value\r\n` lines).
pub fn block_values<'a>(block: &'a [u8], name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
    block_lines(block).filter_map(move |line| value_of(line, name))
}

/// The lines of a header block (without their `\n`), found with `memchr`.
fn block_lines(block: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = block;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        Some(match memchr::memchr(b'\n', rest) {
            Some(i) => {
                let line = &rest[..i];
                rest = &rest[i + 1..];
                line
            }
            None => std::mem::take(&mut rest),
        })
    })
}

/// The value of `line` when it is a `name` line: a line of another name is rejected by
/// its length and first bytes, not scanned for its colon (`name` has none, so `line`
/// starts with `name:` exactly when its first colon ends a name equal to `name`).
fn value_of<'a>(line: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let name = name.as_bytes();
    if line.get(name.len()) != Some(&b':') || !line[..name.len()].eq_ignore_ascii_case(name) {
        return None;
    }
    let v = &line[name.len() + 1..];
    let v = v.strip_suffix(b"\r").unwrap_or(v);
    let start = v
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(v.len());
    Some(&v[start..])
}

/// The process-wide compression pool: its settings, and the pool once started (on the
/// first compression that offloads). Cloned into every worker.
#[derive(Clone)]
pub struct PoolSetup {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    threads: usize,
    max_queue: usize,
    cpus: Vec<usize>,
    idle_priority: bool,
    pool: Mutex<Option<Arc<edge_aio::ThreadPool>>>,
}

impl PoolSetup {
    pub fn from_config(c: &CompressPool) -> PoolSetup {
        PoolSetup {
            inner: Arc::new(PoolInner {
                threads: c.threads.unwrap_or_else(crate::affinity::num_cpus).max(1),
                max_queue: c.max_queue.max(1),
                cpus: c.cpus.clone().unwrap_or_default(),
                idle_priority: c.priority == crate::config::PoolPriority::Idle,
                pool: Mutex::new(None),
            }),
        }
    }

    fn get(&self) -> io::Result<Arc<edge_aio::ThreadPool>> {
        let mut p = self
            .inner
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(pool) = p.as_ref() {
            return Ok(pool.clone());
        }
        let cpus = self.inner.cpus.clone();
        let idle = self.inner.idle_priority;
        let start: Arc<dyn Fn(usize) + Send + Sync> = Arc::new(move |i: usize| {
            if let Some(&cpu) = cpus.get(i % cpus.len().max(1)) {
                if let Err(e) = crate::affinity::pin_current_thread(cpu) {
                    tracing::warn!("compress-{i}: cannot pin to CPU {cpu}: {e}");
                }
            }
            if idle {
                if let Err(e) = crate::affinity::idle_priority_current_thread() {
                    tracing::warn!("compress-{i}: cannot enter SCHED_IDLE: {e}");
                }
            }
        });
        let pool = edge_aio::ThreadPool::named_with(
            "compress",
            POOL_STACK,
            self.inner.threads,
            self.inner.max_queue,
            edge_aio::QueueKind::LockFree,
            Some(start),
        )?;
        *p = Some(pool.clone());
        Ok(pool)
    }

    /// Jobs waiting for a compression thread (0 before the pool started).
    pub fn queue_depth(&self) -> usize {
        self.inner
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or(0, |p| p.queue_depth())
    }

    /// The pool's family of `/metrics` (the workers' compression counters are
    /// `metrics/families.rs`'s).
    pub fn write_prom(&self, p: &mut crate::prom::Prom) {
        p.gauge(
            "edgecache_compress_queue_depth",
            "Compression jobs waiting for a pool thread (all workers).",
        )
        .value(self.queue_depth() as u64);
    }

    /// Threads of the pool (started or not).
    pub fn threads(&self) -> usize {
        self.inner.threads
    }
}

/// One worker's compression: its handle on the pool (made on first need).
pub struct Compressor {
    setup: PoolSetup,
    offload: RefCell<Option<edge_aio::Offload>>,
}

impl Compressor {
    pub fn new(setup: PoolSetup) -> Compressor {
        Compressor {
            setup,
            offload: RefCell::new(None),
        }
    }

    fn offload(&self, stats: &WorkerStats) -> Option<edge_aio::Offload> {
        if let Some(o) = self.offload.borrow().as_ref() {
            return Some(o.clone());
        }
        match self.setup.get().and_then(edge_aio::Offload::new) {
            Ok(o) => {
                *self.offload.borrow_mut() = Some(o.clone());
                Some(o)
            }
            Err(e) => {
                // Counted; compression then runs inline (correct, only slower).
                stats.compress_overloads.fetch_add(1, Relaxed);
                tracing::error!("compression pool: {e}; compressing inline");
                None
            }
        }
    }

    /// A filter that compresses with `coding` at the policy's level, on the pool when
    /// the policy offloads. None when the pool's queue is full: the caller sends the
    /// response uncompressed (an overload, counted).
    pub fn encoder(&self, policy: &Policy, coding: Coding, stats: &WorkerStats) -> Option<Filter> {
        let offload = self.pool_for(policy.offload, stats)?;
        let enc = Encoder::new(coding, &policy.levels).ok()?;
        Some(Filter::new(Codec::Enc(Box::new(enc)), coding, offload))
    }

    /// A filter that decodes `coding` for a client that cannot take it: on the pool
    /// when the policy offloads and the pool has room, else inline (the client cannot
    /// use the encoded bytes, so there is no uncompressed fallback).
    pub fn decoder(&self, policy: &Policy, coding: Coding, stats: &WorkerStats) -> Option<Filter> {
        let offload = self.pool_for(policy.offload, stats).unwrap_or(None);
        let dec = Decoder::new(coding).ok()?;
        Some(Filter::new(Codec::Dec(Box::new(dec)), coding, offload))
    }

    /// The filter a plan needs (None for [`Plan::AsIs`], and for an encoding the pool
    /// has no room for: then the response goes as it is).
    pub fn filter_for(&self, policy: &Policy, plan: Plan, stats: &WorkerStats) -> Option<Filter> {
        match plan {
            Plan::AsIs { .. } => None,
            Plan::Encode(c) => self.encoder(policy, c, stats),
            Plan::Decode(c) => self.decoder(policy, c, stats),
        }
    }

    /// Whether a new compression would have to wait for the pool past its bound.
    pub fn saturated(&self, policy: &Policy) -> bool {
        policy.offload
            && self
                .offload
                .borrow()
                .as_ref()
                .is_some_and(|o| o.saturated())
    }

    /// `Some(None)`: inline; `Some(Some(pool))`; None: saturated (overload).
    #[allow(clippy::option_option)]
    fn pool_for(&self, offload: bool, stats: &WorkerStats) -> Option<Option<edge_aio::Offload>> {
        if !offload {
            return Some(None);
        }
        let o = self.offload(stats);
        if o.as_ref().is_some_and(|o| o.saturated()) {
            stats.compress_overloads.fetch_add(1, Relaxed);
            return None;
        }
        Some(o)
    }
}

enum Codec {
    Enc(Box<Encoder>),
    Dec(Box<Decoder>),
}

/// A body transform in progress: feed it the body with [`Filter::push`], end it with
/// [`Filter::finish`], and count it with [`Filter::account`].
pub struct Filter {
    /// None while a chunk is on the pool (and for good if that job was lost).
    codec: Option<Codec>,
    coding: Coding,
    offload: Option<edge_aio::Offload>,
    bytes_in: u64,
    bytes_out: u64,
    cpu_ns: u64,
}

impl Filter {
    fn new(codec: Codec, coding: Coding, offload: Option<edge_aio::Offload>) -> Filter {
        Filter {
            codec: Some(codec),
            coding,
            offload,
            bytes_in: 0,
            bytes_out: 0,
            cpu_ns: 0,
        }
    }

    pub fn coding(&self) -> Coding {
        self.coding
    }

    pub fn is_encoder(&self) -> bool {
        matches!(self.codec, Some(Codec::Enc(_)))
    }

    /// Transforms `data` (all of it), appending the output to `out`.
    pub async fn push(&mut self, data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        self.bytes_in += data.len() as u64;
        let input = data.to_vec();
        self.run(Some(input), out).await
    }

    /// Ends the stream: the rest of the output, and the coding's trailer.
    pub async fn finish(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        self.run(None, out).await
    }

    /// One step (`input` None: finish), on the pool or inline.
    async fn run(&mut self, input: Option<Vec<u8>>, out: &mut Vec<u8>) -> io::Result<()> {
        let codec = self
            .codec
            .take()
            .ok_or_else(|| io::Error::other("compression state lost"))?;
        let buf = Vec::new();
        let (codec, res, buf, ns) = match &self.offload {
            Some(o) => o.run(move || step(codec, input, buf)).await?,
            None => step(codec, input, buf),
        };
        self.codec = Some(codec);
        self.cpu_ns += ns;
        res?;
        self.bytes_out += buf.len() as u64;
        if out.is_empty() {
            *out = buf;
        } else {
            out.extend_from_slice(&buf);
        }
        Ok(())
    }

    /// Adds this response's figures to the worker's counters.
    pub fn account(&self, stats: &WorkerStats) {
        let c = self.coding.index();
        if self.is_encoder() {
            stats.compress_responses[c].fetch_add(1, Relaxed);
            stats.compress_bytes_in.fetch_add(self.bytes_in, Relaxed);
            stats.compress_bytes_out.fetch_add(self.bytes_out, Relaxed);
        } else {
            stats.decompress_responses[c].fetch_add(1, Relaxed);
        }
        stats.compress_cpu_ns.fetch_add(self.cpu_ns, Relaxed);
    }
}

/// The work of one chunk: runs on a pool thread (or inline) and gives the codec back
/// with its output and the thread CPU time it took.
fn step(
    mut codec: Codec,
    input: Option<Vec<u8>>,
    mut out: Vec<u8>,
) -> (Codec, io::Result<()>, Vec<u8>, u64) {
    let t0 = thread_cpu_ns();
    let res = match (&mut codec, input) {
        (Codec::Enc(e), Some(data)) => e.write(&data, &mut out),
        (Codec::Enc(e), None) => e.finish(&mut out),
        (Codec::Dec(d), Some(data)) => decode_all_of(d, &data, &mut out),
        (Codec::Dec(d), None) => d.finish(&mut out),
    };
    let ns = thread_cpu_ns().saturating_sub(t0);
    (codec, res, out, ns)
}

/// Decodes every byte of `data`, refusing more than [`MAX_DECODED_PER_PUSH`] of output.
fn decode_all_of(d: &mut Decoder, data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    let mut rest = data;
    while !rest.is_empty() || d.pending() {
        let n = d.write(rest, out, MAX_DECODED_PER_PUSH)?;
        rest = &rest[n..];
        if out.len() >= MAX_DECODED_PER_PUSH {
            return Err(io::Error::other(
                "decoded body expands beyond 64 MiB per read (decompression bomb?)",
            ));
        }
    }
    Ok(())
}

/// The head of a transformed response, from the headers it would have had: framing
/// lines removed (`Content-Length`), the coding lines set for the plan (`Content-
/// Encoding` added or removed, the `ETag` of the encoded bytes or a weak one for
/// decoded bytes) and `Vary: Accept-Encoding`. `lines` are `Name: value\r\n` lines
/// (a stored header block, or forwarded upstream headers).
pub fn transform_block(lines: &[u8], plan: Plan) -> Vec<u8> {
    match plan {
        Plan::AsIs { vary: false } => lines.to_vec(),
        Plan::AsIs { vary: true } => {
            edge_cache::coded::with_vary_accept_encoding(lines).unwrap_or_else(|| lines.to_vec())
        }
        Plan::Encode(c) => {
            let mut m = edge_cache::ObjectMeta::new("", 200, std::time::SystemTime::UNIX_EPOCH);
            m.header_block = without(lines, &["content-length"]);
            m.etag = block_values(lines, "etag")
                .next()
                .map(|e| String::from_utf8_lossy(e).into_owned());
            edge_cache::coded::coded_meta(&m, c.token()).header_block
        }
        Plan::Decode(_) => {
            let mut out = without(lines, &["content-length", "content-encoding", "etag"]);
            if let Some(e) = block_values(lines, "etag").next() {
                // The origin's tag names the encoded bytes: weak for the decoded ones
                // (same content, other bytes; RFC 9110 8.8.1).
                out.extend_from_slice(b"ETag: ");
                if !e.starts_with(b"W/") {
                    out.extend_from_slice(b"W/");
                }
                out.extend_from_slice(e);
                out.extend_from_slice(b"\r\n");
            }
            edge_cache::coded::with_vary_accept_encoding(&out).unwrap_or(out)
        }
    }
}

/// The plan and filter for relaying an upstream response to this client: the plan
/// falls back to sending as is (with `Vary`) when no filter can be had.
pub fn for_relay(
    compress: Option<(&Policy, &Compressor)>,
    req: &edge_http::HeaderMap,
    head: &edge_http::ResponseHead,
    is_head: bool,
    stats: &WorkerStats,
) -> (Plan, Option<Filter>) {
    let Some((policy, comp)) = compress else {
        return (Plan::AsIs { vary: false }, None);
    };
    let accepted = Accepted::parse(req.get_all("accept-encoding"));
    let plan = plan(policy, &accepted, &facts_of_head(head));
    if matches!(plan, Plan::AsIs { .. }) || head.body == edge_http::BodyKind::Empty {
        let vary = !matches!(plan, Plan::AsIs { vary: false });
        return (Plan::AsIs { vary }, None);
    }
    if is_head {
        // The head a GET would get, without doing the work.
        return (plan, None);
    }
    match comp.filter_for(policy, plan, stats) {
        Some(f) => (plan, Some(f)),
        None => (Plan::AsIs { vary: true }, None),
    }
}

/// `lines` without the lines named in `skip` (lowercase).
fn without(lines: &[u8], skip: &[&str]) -> Vec<u8> {
    let mut out = Vec::with_capacity(lines.len());
    for line in lines.split_inclusive(|&b| b == b'\n') {
        let name_end = line.iter().position(|&b| b == b':').unwrap_or(0);
        if skip
            .iter()
            .any(|s| line[..name_end].eq_ignore_ascii_case(s.as_bytes()))
        {
            continue;
        }
        out.extend_from_slice(line);
    }
    out
}

#[cfg(test)]
mod tests;
