//! [`Zone`]: the state one cache directory shares between the workers' lookups and
//! writes, its loader and its manager: the index, the directory layout, the counters,
//! the purges issued while loading, and the signals of the background threads.
//!
//! How it fits: like nginx's cache zone (`ngx_http_file_cache.c`: the loader and the
//! manager work on one shared zone through its own functions), the [`crate::Cache`]
//! owns a `Zone` in an `Arc` and the loader ([`crate::loader`]) and the manager
//! ([`crate::manager`]) hold it too. Every change that must keep the index, the files
//! and the counters consistent is a method here:
//! - "check the purges issued while loading, then insert" ([`Zone::admit`],
//!   [`Zone::try_admit`]) against "record the purge, then purge the index"
//!   ([`Zone::purge`]), both under the loader gate;
//! - "rename, then index" and "unindex, then unlink" under the object's stripe lock
//!   ([`Zone::stripe`], [`Zone::insert_committed`], [`Zone::delete_file`]);
//! - removals that count themselves ([`Zone::expire`], [`Zone::evict`],
//!   [`Zone::drop_corrupt`]) and an insert that wakes the manager when over budget.
//!
//! Lock order: the loader gate → an object's stripe → the index's own locks (see
//! `index.rs`); no method takes the gate while holding a stripe.
//!
//! Reads (lookups, which also record accesses there, and the purge indexes) go to
//! [`Zone::index`] directly; every change of an index entry is a method here, and the
//! zone's fields are private, so no other module writes them.

use std::fs::{self, File};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, SystemTime};

use crate::index::{Index, NewEntry};
use crate::key::KeyHash;
use crate::limits::LiveLimits;
use crate::meta::ObjectMeta;
use crate::purge::{PendingRules, PurgeRule, PurgeTarget, RuleVerdict};
use crate::storage::{self, Committed, Layout, RewriteError, WriteErrors};
use crate::sync::{lock, Signal};
use crate::{CacheConfig, CacheStats, Limits, LoaderStats, Verify};

/// Stripe locks for file replacement (a power of two).
const STRIPES: usize = 64;

/// One cache directory's shared state; see the module documentation.
#[derive(Debug)]
pub struct Zone {
    /// As opened; the limits in it are the first values of `limits`, which a reload
    /// changes ([`Zone::set_limits`]): read those from `limits`, never from here.
    cfg: CacheConfig,
    limits: LiveLimits,
    layout: Layout,
    index: Index,
    /// Unique per process: temp files of this process are never removed by its loader.
    token: String,
    /// `cfg.verify`, changeable on reload ([`Zone::set_verify`]).
    verify: AtomicU8,
    write_errors: WriteErrors,
    counters: Counters,
    /// Purges issued while the loader runs, applied to what it finds later.
    pending: PendingRules,
    /// Serialises "check pending rules + insert" (loader, fallback) against "record rule
    /// + purge the index" (purges) while loading, so no purged object slips in.
    gate: Mutex<()>,
    /// Per-hash stripes serialising "rename + index" against "unindex + unlink".
    stripes: Box<[Mutex<()>]>,
    /// Wakes the manager early (over budget, loader done, new limits, shutdown).
    wake: Signal,
    /// Wakes the loader's sleep on shutdown.
    stop: Signal,
    stopping: AtomicBool,
}

/// What the zone counts (atomics, so `stats()` never blocks anyone).
#[derive(Debug, Default)]
struct Counters {
    evictions: AtomicU64,
    expired: AtomicU64,
    purged: AtomicU64,
    fallback_hits: AtomicU64,
    /// Objects dropped as corrupt (bad body checksum, short file).
    corrupt: AtomicU64,
    scanned: AtomicU64,
    loaded: AtomicU64,
    removed: AtomicU64,
    snapshot: AtomicU64,
    unseen: AtomicU64,
    loaded_all: AtomicBool,
}

/// What [`Zone::admit`] did with an object found on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admitted {
    /// What the purges issued while loading say of it.
    pub(crate) verdict: RuleVerdict,
    /// Whether it went into the index (not when purged, nor over an indexed entry).
    pub(crate) inserted: bool,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Zone {
    /// Checks the levels and creates the directory. Nothing runs yet: the cache reads
    /// the snapshot and starts the threads.
    pub(crate) fn open(cfg: CacheConfig) -> io::Result<Zone> {
        storage::validate_levels(&cfg.levels)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        fs::create_dir_all(&cfg.path)
            .map_err(|e| io::Error::new(e.kind(), format!("mkdir {}: {e}", cfg.path.display())))?;
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Ok(Zone {
            layout: Layout {
                root: cfg.path.clone(),
                levels: cfg.levels.clone(),
            },
            token: format!("{}-{nanos:x}", std::process::id()),
            index: Index::new(),
            verify: AtomicU8::new(cfg.verify.to_u8()),
            write_errors: WriteErrors::default(),
            counters: Counters::default(),
            pending: PendingRules::default(),
            gate: Mutex::new(()),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            wake: Signal::default(),
            stop: Signal::default(),
            stopping: AtomicBool::new(false),
            limits: LiveLimits::new(&Limits::of(&cfg)),
            cfg,
        })
    }

    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The config the zone was opened with (see [`crate::Cache::config`]).
    pub fn config(&self) -> &CacheConfig {
        &self.cfg
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The index, for reads (every change with an invariant is a method of the zone).
    pub(crate) fn index(&self) -> &Index {
        &self.index
    }

    /// This process's temp file token.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Where the object with this hash lives on disk.
    pub fn path_for(&self, hash: KeyHash) -> PathBuf {
        self.layout.path_for(hash)
    }

    /// The size limits and background pacing in force.
    pub fn limits(&self) -> Limits {
        self.limits.load()
    }

    /// A reload's limits: stored, and the manager woken to apply them.
    pub(crate) fn set_limits(&self, l: Limits) {
        self.limits.store(&l);
        self.wake_manager();
    }

    /// When bodies are checked (`cache_verify`).
    pub fn verify(&self) -> Verify {
        Verify::from_u8(self.verify.load(Ordering::Relaxed))
    }

    pub(crate) fn set_verify(&self, v: Verify) {
        self.verify.store(v.to_u8(), Ordering::Relaxed);
    }

    fn over_budget(&self) -> bool {
        self.index.disk_bytes() > self.limits.max_size()
            || self.index.mem_bytes() > self.limits.keys_zone()
    }

    // ---- The background threads' signals ----

    /// Whether the loader is still walking the directories.
    pub(crate) fn loading(&self) -> bool {
        !self.counters.loaded_all.load(Ordering::Acquire)
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Tells the loader and the manager to stop (they end within one batch).
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.wake_manager();
        self.stop.raise();
    }

    /// Sleep up to `d`, returning early when the zone is stopping (the loader).
    pub(crate) fn sleep_unless_stopping(&self, d: Duration) {
        self.stop.wait_unless_raised(d);
    }

    /// Sleep up to `d`, returning early when woken (the manager).
    pub(crate) fn wait_for_work(&self, d: Duration) {
        self.wake.wait_and_lower(d);
    }

    /// Wake the manager now.
    pub(crate) fn wake_manager(&self) {
        self.wake.raise();
    }

    // ---- Files ----

    /// The stripe lock for an object hash (held around rename+index and unlink).
    pub(crate) fn stripe(&self, hash: KeyHash) -> MutexGuard<'_, ()> {
        lock(&self.stripes[(hash >> 64) as usize & (STRIPES - 1)])
    }

    /// Unlink `hash`'s file if it is still the file with inode `ino`.
    pub(crate) fn unlink(&self, hash: KeyHash, ino: u64) -> io::Result<()> {
        let path = self.layout.path_for(hash);
        let _stripe = self.stripe(hash);
        storage::remove_if_ino(&path, ino)
    }

    /// Delete an object's file if it is still the one the index knew (logged if that
    /// fails for another reason than its absence).
    pub(crate) fn delete_file(&self, hash: KeyHash, ino: u64) {
        if let Err(e) = self.unlink(hash, ino) {
            if e.kind() != io::ErrorKind::NotFound {
                let path = self.layout.path_for(hash);
                tracing::warn!(cache = %self.cfg.name, "unlink {} failed: {e}", path.display());
            }
        }
    }

    /// The header of `hash`'s file, read now with blocking calls (purges and refreshes,
    /// which run off the event loop): its metadata and body offset.
    pub(crate) fn stored_meta(&self, hash: KeyHash) -> Option<(ObjectMeta, u64)> {
        let file = File::open(self.layout.path_for(hash)).ok()?;
        let hdr = storage::read_header(&file, hash).ok()?;
        Some((hdr.meta, hdr.body_offset))
    }

    // ---- Index changes ----

    /// Indexes an object just renamed into place (the caller holds its stripe), and
    /// wakes the manager when that puts the zone over budget.
    pub(crate) fn insert_committed(&self, c: Committed) {
        self.index.insert(NewEntry {
            hash: c.hash,
            meta: &c.meta,
            disk_size: c.disk_size,
            ino: c.ino,
        });
        if self.over_budget() {
            self.wake_manager();
        }
    }

    /// Stores `meta` (a revalidation's) over the header of `hash`'s file in place, if
    /// it fits before the body and the file is still inode `ino`; the index entry
    /// follows (its soft purge flag as `meta`'s).
    pub(crate) fn rewrite_header(
        &self,
        hash: KeyHash,
        ino: u64,
        meta: &ObjectMeta,
        body_offset: u64,
    ) -> Result<(), RewriteError> {
        let path = self.layout.path_for(hash);
        storage::rewrite_header_in_place(&path, hash, meta, body_offset, ino)?;
        self.index.update(hash, ino, meta.soft_purged, None);
        Ok(())
    }

    /// An object rewritten whole (`c`, renamed over inode `old_ino` under the stripe
    /// the caller holds): the index entry now names the new file. False when the entry
    /// is gone or names another file (the caller then indexes `c` anew).
    pub(crate) fn follow_rewrite(&self, hash: KeyHash, old_ino: u64, c: &Committed) -> bool {
        self.index
            .update(hash, old_ino, false, Some((c.ino, c.disk_size)))
    }

    /// Unindexes `hash` and unlinks its file, if both still name inode `ino`; the
    /// caller holds the object's stripe (`_stripe`, from [`Zone::stripe`]).
    pub(crate) fn discard(&self, _stripe: &MutexGuard<'_, ()>, hash: KeyHash, ino: u64) {
        if let Some(v) = self.index.remove(hash, Some(ino)) {
            let _ = storage::remove_if_ino(&self.layout.path_for(hash), v.ino);
        }
    }

    /// An entry whose file is gone: unindexed (if it still names inode `ino`).
    pub(crate) fn forget(&self, hash: KeyHash, ino: u64) {
        self.index.remove(hash, Some(ino));
    }

    /// An object found corrupt (a bad header or body checksum, a file of the wrong
    /// size): it leaves the index and its file is deleted, if both still refer to inode
    /// `ino`; counted, and logged naming `what()`.
    pub(crate) fn drop_corrupt(
        &self,
        hash: KeyHash,
        ino: u64,
        what: impl FnOnce() -> String,
        why: &str,
    ) {
        if let Some(v) = self.index.remove(hash, Some(ino)) {
            self.delete_file(v.hash, v.ino);
            bump(&self.counters.corrupt, 1);
            tracing::warn!(cache = %self.cfg.name, "dropped corrupt object {}: {why}", what());
        }
    }

    /// Removes up to `max` objects not accessed since tick `older_than` (a bounded sweep,
    /// resumed by the next call): unindexed, unlinked, counted. Returns how many.
    pub(crate) fn expire(&self, older_than: u32, max: usize) -> usize {
        let victims = self.index.expire_inactive(older_than, max);
        for v in &victims {
            self.delete_file(v.hash, v.ino);
        }
        bump(&self.counters.expired, victims.len() as u64);
        victims.len()
    }

    /// Evicts up to `max` least recently used objects: unindexed, unlinked, counted.
    /// Returns how many, and their bytes on disk.
    pub(crate) fn evict(&self, max: usize) -> (usize, u64) {
        let victims = self.index.evict_lru(max);
        bump(&self.counters.evictions, victims.len() as u64);
        let freed = victims.iter().map(|v| v.disk_size).sum();
        for v in &victims {
            self.delete_file(v.hash, v.ino);
        }
        (victims.len(), freed)
    }

    // ---- Loading: "check pending purges, then insert" ----

    /// Indexes an object found on disk while loading (by the loader or a lookup's disk
    /// fallback) unless a purge issued meanwhile covers it, atomically against
    /// [`Zone::purge`] (the loader gate). Never replaces an indexed entry. On
    /// [`RuleVerdict::Delete`] nothing is indexed; the file is the caller's to unlink
    /// ([`Zone::unlink`]).
    pub(crate) fn admit(&self, new: NewEntry<'_>) -> Admitted {
        let gate = lock(&self.gate);
        self.admit_gated(&gate, new)
    }

    /// [`Zone::admit`] if the loader gate is free now; None if it is held (the loader
    /// or a purge may hold it for a while: call `admit` where blocking is fine).
    pub(crate) fn try_admit(&self, new: NewEntry<'_>) -> Option<Admitted> {
        match self.gate.try_lock() {
            Ok(gate) => Some(self.admit_gated(&gate, new)),
            Err(TryLockError::Poisoned(p)) => Some(self.admit_gated(&p.into_inner(), new)),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    fn admit_gated(&self, _gate: &MutexGuard<'_, ()>, new: NewEntry<'_>) -> Admitted {
        let verdict = self.pending.verdict(new.meta);
        let inserted = verdict != RuleVerdict::Delete
            && self
                .index
                .insert_if_absent(new, verdict == RuleVerdict::MarkStale);
        Admitted { verdict, inserted }
    }

    /// The loader found `hash`'s file (inode `ino`) where the index already has it (a
    /// fill, or the snapshot, which this confirms): true, and nothing to read. A
    /// snapshot entry naming another inode is dropped (false: the file is loaded).
    pub(crate) fn seen_on_disk(&self, hash: KeyHash, ino: u64) -> bool {
        self.index.mark_seen(hash, ino)
    }

    /// The loader's walk is over: what a snapshot named that the walk did not find is
    /// dropped, and the purges remembered while loading are forgotten (everything is
    /// indexed now), atomically against [`Zone::purge`]. Wakes the manager.
    pub(crate) fn finish_loading(&self) {
        {
            let _gate = lock(&self.gate);
            let unseen = self.index.drop_unseen();
            self.counters.unseen.store(unseen as u64, Ordering::Relaxed);
            self.counters.loaded_all.store(true, Ordering::Release);
            self.pending.clear();
        }
        self.wake_manager();
    }

    /// Counters of the loader's walk: a file examined, an object loaded, a file removed
    /// (`corrupt`: for a bad body checksum).
    pub(crate) fn note_scanned(&self) {
        bump(&self.counters.scanned, 1);
    }

    pub(crate) fn note_loaded(&self) {
        bump(&self.counters.loaded, 1);
    }

    pub(crate) fn note_removed(&self, corrupt: bool) {
        bump(&self.counters.removed, 1);
        if corrupt {
            bump(&self.counters.corrupt, 1);
        }
    }

    /// A lookup answered by the disk fallback.
    pub(crate) fn note_fallback_hit(&self) {
        bump(&self.counters.fallback_hits, 1);
    }

    /// A failed object write: counted, and logged at most every
    /// [`storage::WRITE_ERROR_LOG_INTERVAL`].
    pub(crate) fn note_write_error(&self, context: &str, e: &io::Error) {
        if self.write_errors.record(context, e) {
            tracing::warn!(cache = %self.cfg.name, "cache {context} failed: {e} (serving uncached; further errors logged at most every {:?})", storage::WRITE_ERROR_LOG_INTERVAL);
        }
    }

    // ---- Purges ----

    /// Purges what `hashes` finds, found after the loader gate is taken: while loading,
    /// an object is either indexed before the purge looks (and found) or checked
    /// against the purge's rule by the loader (never neither). A hard purge unindexes
    /// and unlinks; a soft one marks stale, in the index and (best effort, so that a
    /// restart does not resurrect the object as fresh) in the file's header. Returns
    /// the objects affected.
    pub(crate) fn purge(
        &self,
        target: PurgeTarget,
        soft: bool,
        hashes: impl FnOnce() -> Vec<KeyHash>,
    ) -> usize {
        // While loading, remember the purge for files not indexed yet; the gate makes
        // "record + purge" atomic against the loader's "check + insert".
        let _gate = if self.loading() {
            let g = lock(&self.gate);
            if self.loading() {
                self.pending.push(PurgeRule {
                    target,
                    soft,
                    at: SystemTime::now(),
                });
            }
            Some(g)
        } else {
            None
        };
        let mut n = 0;
        for h in hashes() {
            if soft {
                if let Some(e) = self.index.set_soft_purged(h) {
                    if let Some((mut meta, body_offset)) = self.stored_meta(h) {
                        meta.soft_purged = true;
                        let path = self.layout.path_for(h);
                        let _ =
                            storage::rewrite_header_in_place(&path, h, &meta, body_offset, e.ino);
                    }
                    n += 1;
                }
            } else if let Some(v) = self.index.remove(h, None) {
                self.delete_file(v.hash, v.ino);
                n += 1;
            }
        }
        bump(&self.counters.purged, n as u64);
        n
    }

    // ---- The index snapshot ----

    /// Reads (and deletes) the index snapshot of the last clean shutdown, if any; see
    /// [`crate::snapshot`]. Not with `cache_verify` (the loader then reads every body
    /// anyway, which a snapshot would skip).
    pub(crate) fn restore_snapshot(&self) {
        let root = &self.layout.root;
        let Some(read) = crate::snapshot::take(root) else {
            return;
        };
        let t0 = std::time::Instant::now();
        let name = &self.cfg.name;
        let bytes = match read {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(cache = %name, "index snapshot: read failed ({e}); loading from the files");
                return;
            }
        };
        if self.verify() != Verify::Off {
            tracing::info!(cache = %name, "index snapshot ignored: cache_verify checks every body on load");
            return;
        }
        match crate::snapshot::decode(&bytes, &self.layout.levels) {
            Ok(img) => {
                let n = self.index.import(img);
                self.counters.snapshot.store(n as u64, Ordering::Relaxed);
                tracing::info!(cache = %name, "index snapshot: {n} objects restored in {:?}; the loader checks them against the directories", t0.elapsed());
            }
            Err(e) => {
                tracing::warn!(cache = %name, "index snapshot ignored: {e}; loading from the files");
            }
        }
    }

    /// Writes the index snapshot (see [`crate::Cache::write_snapshot`]).
    pub(crate) fn write_snapshot(&self) -> io::Result<usize> {
        let img = self.index.export();
        let n = img.objects.len();
        let bytes = crate::snapshot::encode(&img, &self.layout.levels);
        crate::snapshot::write(&self.layout.root, &bytes)?;
        Ok(n)
    }

    /// Counters for metrics and status pages (`inflight` is the cache's: 0 here).
    pub(crate) fn stats(&self) -> CacheStats {
        let c = &self.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CacheStats {
            name: self.cfg.name.clone(),
            entries: self.index.entries(),
            disk_bytes: self.index.disk_bytes(),
            max_size: self.limits.max_size(),
            mem_bytes: self.index.mem_bytes(),
            keys_zone: self.limits.keys_zone(),
            evictions: r(&c.evictions),
            expired: r(&c.expired),
            purged: r(&c.purged),
            disk_fallback_hits: r(&c.fallback_hits),
            write_errors: self.write_errors.count(),
            last_write_error: self.write_errors.last(),
            corrupt: r(&c.corrupt),
            inflight: 0,
            loader: LoaderStats {
                scanned: r(&c.scanned),
                loaded: r(&c.loaded),
                removed: r(&c.removed),
                snapshot: r(&c.snapshot),
                unseen: r(&c.unseen),
                done: c.loaded_all.load(Ordering::Acquire),
            },
        }
    }

    /// Holds the loader gate (tests: a purge or the loader holding it a long time).
    #[cfg(test)]
    pub(crate) fn hold_gate(&self) -> MutexGuard<'_, ()> {
        lock(&self.gate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::key_hash;

    fn zone(dir: &std::path::Path) -> Zone {
        Zone::open(CacheConfig {
            name: "z".into(),
            path: dir.to_path_buf(),
            ..Default::default()
        })
        .unwrap()
    }

    fn meta(key: &str, age: u64) -> ObjectMeta {
        ObjectMeta::new(key, 200, SystemTime::now() - Duration::from_secs(age))
    }

    fn admit(z: &Zone, m: &ObjectMeta, ino: u64) -> Admitted {
        z.admit(NewEntry {
            hash: key_hash(&m.key),
            meta: m,
            disk_size: 4096,
            ino,
        })
    }

    /// The invariant the loader and the disk fallback rely on: a purge issued while
    /// loading is remembered, and an object stored before it is never indexed later;
    /// one stored after it is. Once loading is over, the rules are gone.
    #[test]
    fn a_purge_while_loading_keeps_older_objects_out_until_loading_ends() {
        let d = tempfile::tempdir().unwrap();
        let z = zone(d.path());
        assert!(z.loading());
        let old = meta("http://h/a", 60);
        let soft = meta("http://h/s", 60);
        assert_eq!(
            z.purge(PurgeTarget::Key(old.key.clone()), false, Vec::new),
            0
        );
        assert_eq!(
            z.purge(PurgeTarget::Key(soft.key.clone()), true, Vec::new),
            0
        );
        let a = admit(&z, &old, 1);
        assert_eq!((a.verdict, a.inserted), (RuleVerdict::Delete, false));
        assert!(!z.index().contains(key_hash(&old.key)));
        let s = admit(&z, &soft, 2);
        assert_eq!((s.verdict, s.inserted), (RuleVerdict::MarkStale, true));
        assert!(z.index().get(key_hash(&soft.key)).unwrap().soft_purged);
        // Fetched after the purge: kept.
        let mut newer = meta("http://h/a", 0);
        newer.response_time = SystemTime::now() + Duration::from_secs(1);
        let n = admit(&z, &newer, 3);
        assert_eq!((n.verdict, n.inserted), (RuleVerdict::Keep, true));
        // Never over an indexed entry.
        assert!(!admit(&z, &newer, 4).inserted);

        z.finish_loading();
        assert!(!z.loading());
        let other = meta("http://h/b", 60);
        assert_eq!(
            z.purge(PurgeTarget::Key(other.key.clone()), false, Vec::new),
            0
        );
        assert_eq!(
            admit(&z, &other, 5).verdict,
            RuleVerdict::Keep,
            "no rule after loading"
        );
        let st = z.stats();
        assert!(st.loader.done);
        assert_eq!(st.entries, 3);
    }

    /// The gate is what makes "record + purge" and "check + insert" atomic: while it is
    /// held, an admission waits (try_admit says so instead of blocking).
    #[test]
    fn admission_waits_for_the_gate() {
        let d = tempfile::tempdir().unwrap();
        let z = zone(d.path());
        let m = meta("http://h/x", 1);
        let new = || NewEntry {
            hash: key_hash(&m.key),
            meta: &m,
            disk_size: 4096,
            ino: 7,
        };
        let gate = z.hold_gate();
        assert!(z.try_admit(new()).is_none());
        drop(gate);
        assert!(z.try_admit(new()).unwrap().inserted);
    }

    /// Removals count themselves: the manager's expiry and eviction, and purges, each
    /// in their own counter, and the index shrinks with them.
    #[test]
    fn removals_are_counted_where_they_happen() {
        let d = tempfile::tempdir().unwrap();
        let z = zone(d.path());
        z.finish_loading();
        for i in 0..6u64 {
            assert!(admit(&z, &meta(&format!("http://h/{i}"), 1), 10 + i).inserted);
        }
        let (evicted, freed) = z.evict(2);
        assert_eq!(evicted, 2);
        assert!(freed >= 2 * 4096, "{freed}");
        let expired = z.expire(z.index().now_ticks() + 1, 1);
        assert_eq!(expired, 1);
        let h = key_hash("http://h/5");
        let purged = if z.index().contains(h) { 1 } else { 0 };
        assert_eq!(
            z.purge(PurgeTarget::Key("http://h/5".into()), false, || vec![h]),
            purged
        );
        let s = z.stats();
        assert_eq!((s.evictions, s.expired, s.purged), (2, 1, purged as u64));
        assert_eq!(s.entries, 6 - 3 - purged as u64);
    }
}
