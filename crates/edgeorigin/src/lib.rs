//! edgeorigin: the origin object generator of the edgecache benchmark kit.
//!
//! It serves `GET|HEAD /obj/<size>/<id>` (deterministic, incompressible bytes) and
//! `/txt/<size>/<id>` (deterministic, compressible HTML-like text) with `ETag`,
//! `Last-Modified`, `Cache-Control` and `X-Checksum` (xxh3-64 of the body), answers
//! conditional and range requests, and injects faults and cache behaviours through query
//! parameters. `/stats` counts origin traffic. See `docs/edgeorigin.md`.
//!
//! How it fits: it is the origin of every experiment (the `edgeorigin` binary) and the
//! built-in demo origin of edgecache's default config, which calls [`start`] in-process.
//! The layers, bottom up:
//! - `size`, `content`: what the objects are ([`parse_size`], [`object_bytes`],
//!   [`checksum`]); pure functions, any slice of any object without its prefix.
//! - `request`, `query`, `range`, `body`, `respond`: sans-I/O HTTP: parse a request
//!   head, decide the reply (head bytes plus a body plan).
//! - `conn`, `server`: sockets. One tokio `current_thread` runtime per OS thread, a
//!   listener per thread, bodies streamed in 64 KiB pieces.
//! - `body_cache`: hot objects (up to 1 MiB) generated once per thread, then copied.
//! - `stats`, `pick`, `date`: counters, `/obj/rand` distributions, the cached `Date`.

mod body;
mod body_cache;
mod conn;
pub mod content;
mod date;
mod pick;
mod query;
mod range;
mod request;
mod respond;
mod server;
mod size;
mod stats;

pub use server::{start, OriginHandle};
pub use size::{format_size, parse_size};
pub use stats::StatsSnapshot;

use std::net::SocketAddr;

/// How `/obj/rand` picks objects from `sizes` × `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ObjDist {
    /// Every object has the first size; ids uniform (one origin per object size).
    #[default]
    Fixed,
    /// Size uniform over `sizes`, id uniform over `0..count`.
    Uniform,
    /// Id with Zipf popularity (s = 1, id 0 most popular); each id keeps one size.
    Zipf,
}

impl std::str::FromStr for ObjDist {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fixed" => Ok(ObjDist::Fixed),
            "uniform" => Ok(ObjDist::Uniform),
            "zipf" => Ok(ObjDist::Zipf),
            _ => Err(format!(
                "unknown distribution {s:?} (expected fixed, uniform or zipf)"
            )),
        }
    }
}

impl std::fmt::Display for ObjDist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ObjDist::Fixed => "fixed",
            ObjDist::Uniform => "uniform",
            ObjDist::Zipf => "zipf",
        })
    }
}

/// How to run an origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Address to listen on (port 0 picks a free one; see [`OriginHandle::local_addr`]).
    pub listen: SocketAddr,
    /// Object sizes `/obj/rand` picks from.
    pub sizes: Vec<u64>,
    /// Ids per size for `/obj/rand` (`0..count`).
    pub count: u64,
    /// How `/obj/rand` picks.
    pub obj_dist: ObjDist,
    /// `Cache-Control: max-age` of every object (a request's `?max_age=` overrides it).
    pub max_age: u64,
    /// Serving threads (each its own runtime and `SO_REUSEPORT` listener).
    pub threads: usize,
}

impl Default for Options {
    /// 127.0.0.1:8081, sizes 1k,10k,100k,1m, count 1000, fixed, max-age 3600, 1 thread.
    fn default() -> Self {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            sizes: vec![1 << 10, 10 << 10, 100 << 10, 1 << 20],
            count: 1000,
            obj_dist: ObjDist::Fixed,
            max_age: 3600,
            threads: 1,
        }
    }
}

/// Writes bytes `[offset, offset + out.len())` of `/obj/<size>/<id>` into `out`: the
/// deterministic content, any slice of it, without generating the prefix. Keep
/// `offset + out.len() <= size` (bytes past the end are not part of the object).
pub fn object_bytes(size: u64, id: u64, offset: u64, out: &mut [u8]) {
    content::fill(content::Kind::Obj, size, id, offset, out)
}

/// xxh3-64 of the whole body of `/obj/<size>/<id>` (the `X-Checksum` header value, as
/// a number). Computed streaming (never the whole body in memory) and cached per thread.
pub fn checksum(size: u64, id: u64) -> u64 {
    content::checksum_of(content::Kind::Obj, size, id)
}

/// Like [`object_bytes`], for the text of `/txt/<size>/<id>`.
pub fn text_bytes(size: u64, id: u64, offset: u64, out: &mut [u8]) {
    content::fill(content::Kind::Txt, size, id, offset, out)
}

/// Like [`checksum`], for `/txt/<size>/<id>`.
pub fn text_checksum(size: u64, id: u64) -> u64 {
    content::checksum_of(content::Kind::Txt, size, id)
}
