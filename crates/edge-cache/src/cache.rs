//! [`Cache`]: one cache directory as the server sees it: lookups, writes, purges, and
//! the zone with its loader and manager threads.
//!
//! How it fits: this is the type the server holds (one per `[[cache]]`, in an `Arc`
//! shared by every worker). It owns the [`Zone`] (the index, layout, counters and
//! purge rules, shared with its loader and manager threads, which it also owns) and
//! keeps the rest per cache: the collapse lock, the `cache_min_uses` counter and the
//! worker-local key seed. An object is in the index only after its file was renamed
//! into place, and a hit double-checks the file it opened (inode and size) against the
//! index entry, so headers and body always belong to the same object. The methods are
//! in one file per job:
//! - `cache/lookup.rs`: [`Cache::lookup_hashed`] and the other lookups ([`Lookup`],
//!   [`HitEntry`]), through `cache/open.rs`'s [`FileOpener`];
//! - `cache/write.rs`: [`Cache::begin_write`] ([`ObjectWriter`]) and [`Cache::refresh`];
//! - `cache/purge.rs`: [`Cache::purge_key`], `purge_prefix`, `purge_tag`...;
//! - `cache/lifecycle.rs`: [`Cache::open`], reloads, [`Cache::stats`],
//!   [`Cache::shutdown`].

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::inflight::Inflight;
use crate::uses::UseCounter;
use crate::zone::Zone;

mod lifecycle;
mod lookup;
mod open;
mod purge;
mod write;

pub use lookup::{HitBody, HitEntry, Lookup};
pub use open::{BlockingOpener, FileOpener, OpenedFile};
pub use purge::purge_all;
pub use write::{CommitIo, ObjectWriter, SPARE_BATCH, SPARE_LOW, SPARE_RETRY};

/// One cache directory. Create with [`Cache::open`]; share as `Arc<Cache>`.
#[derive(Debug)]
pub struct Cache {
    zone: Arc<Zone>,
    /// Numbers new bodies and temp files.
    seq: AtomicU64,
    /// Mixed into this cache's keys in a worker's `Local` ([`Cache::local_key`]).
    seed: u64,
    threads: Mutex<Vec<JoinHandle<()>>>,
    inflight: Inflight,
    uses: UseCounter,
    spares: Spares,
}

/// A cache's spare temp files (`cache/write.rs`: [`SPARE_LOW`]).
#[derive(Debug, Default)]
struct Spares {
    files: Mutex<Vec<crate::storage::SpareFile>>,
    /// A refill is under way.
    refilling: AtomicBool,
    /// After a failed refill, none before this.
    retry_at: Mutex<Option<std::time::Instant>>,
}

#[cfg(test)]
mod tests;
