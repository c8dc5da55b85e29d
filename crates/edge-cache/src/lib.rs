//! edge-cache: the disk cache of edgecache. RFC 9111 policy, one file per object on
//! disk, a sharded in-memory index, a background loader and manager, purge indexes, and
//! the collapsed-miss lock whose followers stream the body as it arrives.
//!
//! How it fits: the server owns the sockets; this crate owns everything about cached
//! objects and does no networking. Per request the server:
//! 1. builds the primary key and calls [`Cache::lookup`] (pick the cache with
//!    [`select::pick`] when a location has several);
//! 2. on [`Lookup::Fresh`] sends `meta.header_block` plus the body from
//!    [`HitEntry::file`] (`sendfile`/`pread` at `body_offset`), no header parsing;
//! 3. on [`Lookup::Stale`] revalidates (and may serve stale, see
//!    [`policy::can_serve_stale_with`]); a 304 becomes [`Cache::refresh`];
//! 4. on a miss joins the collapse lock ([`Cache::inflight`]): the leader fetches,
//!    checks [`policy::storable`], writes through [`Cache::begin_write`] and publishes
//!    progress; followers stream from the same temp file.
//!
//! Module map: [`policy`] (RFC 9111), [`hit`] (304, Range, multipart on hits),
//! [`key`] (keys, Vary), [`part`] (partial objects: 206s and slices), [`local`] (a worker's RAM tier and open-file cache), [`meta`] (object metadata
//! and its encoding), [`storage`] (file format, temp+rename), [`index`] (sharded CLOCK
//! index, 44 bytes per object), [`purge`] (prefix/tag indexes, purges remembered while
//! loading), [`zone`] (the index, layout, counters and purge rules shared with the
//! background threads, behind methods that keep them consistent), [`loader`] (rebuild
//! at start), [`snapshot`] (the index saved at shutdown), [`manager`]
//! (eviction/expiry), [`inflight`] (collapse lock), [`select`] (several caches), and
//! [`cache`] (the [`Cache`] type: lookups, writes, purges and its life). Modules only
//! use those below them (`.ci/modcycles.py`): `cache` -> `loader`/`manager` -> `zone`
//! -> `index` -> `purge`. The design and the on-disk format are in `docs/cache.md`.

pub mod cache;
pub mod coded;
pub mod hit;
pub mod index;
pub mod inflight;
pub mod key;
pub mod limits;
pub mod loader;
pub mod local;
pub mod manager;
pub mod meta;
pub mod part;
pub mod policy;
pub mod purge;
pub mod select;
pub mod snapshot;
pub mod storage;
mod sync;
pub mod uses;
pub mod zone;

use std::path::PathBuf;
use std::time::Duration;

pub use cache::{
    purge_all, BlockingOpener, Cache, CommitIo, FileOpener, HitBody, HitEntry, Lookup,
    ObjectWriter, OpenedFile,
};
pub use inflight::{Fill, FillHandle, FillHead, FillState, Inflight, Join, WaitHead};
pub use key::{key_hash, variant_key, KeyHash};
pub use limits::Limits;
pub use meta::{Freshness, ObjectMeta, BODY_LEN_UNKNOWN};
pub use policy::{NoCacheReason, PolicyConfig, StaleReason, StatusMatch};
pub use select::{pick, try_pick};
pub use storage::CommitPlan;

/// One `[[cache]]` from the config. Sizes are bytes, names follow nginx
/// `proxy_cache_path`.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    pub name: String,
    /// Root directory (created if missing).
    pub path: PathBuf,
    /// Sub-directory levels, e.g. `[1, 2]` for nginx `levels=1:2`.
    pub levels: Vec<u8>,
    /// Disk bytes above which the manager evicts least recently used objects.
    pub max_size: u64,
    /// Free bytes the filesystem must keep; below it the manager evicts.
    pub min_free: u64,
    /// Objects not accessed for this long are removed, fresh or not.
    pub inactive: Duration,
    /// Index memory budget in bytes (estimated, see `index::ENTRY_OVERHEAD`).
    pub keys_zone: u64,
    /// Loader batch: files examined before sleeping `loader_sleep`.
    pub loader_files: usize,
    pub loader_sleep: Duration,
    /// Manager batch: at most this many objects removed per pass...
    pub manager_files: usize,
    /// ...or this much time spent, whichever comes first.
    pub manager_threshold: Duration,
    /// Pause between manager passes while there is work left.
    pub manager_sleep: Duration,
    /// Body checksums checked (`cache_verify`): see [`Verify`].
    pub verify: Verify,
}

/// When stored bodies are checked against the xxh3-64 in their header (written with
/// the object): a flipped bit on disk is then never served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Verify {
    /// Never (the header, the file's size and inode are still checked).
    #[default]
    Off,
    /// By the loader after a start: every stored body is read once (slower loading).
    Load,
    /// By the loader, and on every hit read from disk (the body is read and hashed
    /// before it is sent: no sendfile; RAM-tier hits are not re-read).
    Always,
}

impl Verify {
    pub fn as_str(self) -> &'static str {
        match self {
            Verify::Off => "off",
            Verify::Load => "load",
            Verify::Always => "always",
        }
    }

    pub(crate) fn to_u8(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_u8(v: u8) -> Verify {
        match v {
            1 => Verify::Load,
            2 => Verify::Always,
            _ => Verify::Off,
        }
    }
}

impl Default for CacheConfig {
    /// nginx defaults where nginx has one (`inactive=10m`, `loader_files=100`,
    /// `loader_sleep=50ms`, `manager_files=100`, `manager_threshold=200ms`,
    /// `manager_sleep=50ms`). `cache_lock_timeout` is a location's, not the cache's:
    /// see [`Fill::wait_head`].
    fn default() -> Self {
        CacheConfig {
            name: "cache".into(),
            path: PathBuf::from("./edgecache-data/cache"),
            levels: vec![1, 2],
            max_size: 1 << 30,
            min_free: 0,
            inactive: Duration::from_secs(600),
            keys_zone: 64 << 20,
            loader_files: 100,
            loader_sleep: Duration::from_millis(50),
            manager_files: 100,
            manager_threshold: Duration::from_millis(200),
            manager_sleep: Duration::from_millis(50),
            verify: Verify::Off,
        }
    }
}

/// Loader progress counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoaderStats {
    /// Files examined (objects and temp files).
    pub scanned: u64,
    /// Objects put into the index.
    pub loaded: u64,
    /// Corrupt, truncated, old-version, misplaced or leftover temp files deleted.
    pub removed: u64,
    /// Objects restored from the index snapshot of the last clean shutdown.
    pub snapshot: u64,
    /// Snapshot entries whose file the loader's walk did not find (dropped).
    pub unseen: u64,
    pub done: bool,
}

/// A snapshot of a cache's counters for `/metrics` and `/status`.
#[derive(Debug, Clone, Default)]
pub struct CacheStats {
    pub name: String,
    pub entries: u64,
    /// Bytes on disk of indexed objects (block-rounded).
    pub disk_bytes: u64,
    pub max_size: u64,
    /// Estimated index memory against `keys_zone`.
    pub mem_bytes: u64,
    pub keys_zone: u64,
    /// Objects removed to respect `max_size`, `min_free` or `keys_zone`.
    pub evictions: u64,
    /// Objects removed by `inactive`.
    pub expired: u64,
    /// Objects removed or marked stale by purges.
    pub purged: u64,
    /// Lookups answered by opening a file before the loader reached it.
    pub disk_fallback_hits: u64,
    /// Failed object writes (ENOSPC, EIO...), and the last one's message.
    pub write_errors: u64,
    /// Objects dropped because their body did not match its checksum or the file was
    /// shorter than its header says (found by the loader or by a hit).
    pub corrupt: u64,
    pub last_write_error: Option<String>,
    /// Misses currently being filled (collapse lock entries).
    pub inflight: u64,
    pub loader: LoaderStats,
}
