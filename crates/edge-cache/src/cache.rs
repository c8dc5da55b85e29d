//! [`Cache`]: one cache directory with its index, loader, manager and collapse lock.
//!
//! How it fits: this is the type the server holds (one per `[[cache]]`, in an `Arc`
//! shared by every worker). It ties storage (files), the index (memory) and the
//! background threads together and keeps them consistent: an object is in the index
//! only after its file was renamed into place, and a hit double-checks the file it
//! opened (inode and size) against the index entry, so headers and body always belong
//! to the same object.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::SystemTime;

use edge_http::HeaderMap;

use crate::index::{Entry, Index, NewEntry};
use crate::inflight::Inflight;
use crate::key::{key_hash, variant_key, KeyHash};
use crate::local::Local;
use crate::meta::ObjectMeta;
use crate::purge::{lock, PendingRules, RuleVerdict};
use crate::storage::{self, Committed, Layout, RewriteError, TempObject, WriteErrors};
use crate::{CacheConfig, CacheStats, Limits, LoaderStats};

/// Stripe locks for file replacement (a power of two).
const STRIPES: usize = 64;

/// What a lookup found.
#[derive(Debug)]
pub enum Lookup {
    /// Servable as is.
    Fresh(HitEntry),
    /// Stored but expired, `no-cache`, or soft-purged: revalidate, or serve stale when
    /// [`crate::policy::can_serve_stale_with`] allows.
    Stale(HitEntry),
    Miss,
}

/// A stored object ready to send. The body is `body_len` bytes: at `body_offset` in a
/// file (send it with `sendfile`/`pread`, never through an intermediate copy), or the
/// whole of a RAM-tier buffer. The headers are `meta.header_block`, ready to send.
/// The open file keeps the bytes readable even if the object is evicted or purged
/// meanwhile.
#[derive(Debug)]
pub struct HitEntry {
    pub meta: Arc<ObjectMeta>,
    pub body: HitBody,
    /// Where the body starts in the file (0 for a RAM body).
    pub body_offset: u64,
    pub body_len: u64,
    /// Hash of the variant key (names the file).
    pub hash: KeyHash,
    ino: u64,
    /// The index entry's generation (see [`crate::index::Entry::gen`]).
    gen: u64,
    /// The first body bytes, when the lookup read them with the header (a packed small
    /// object's header block holds its whole body): a response within them needs no
    /// other read.
    pub body_head: Option<bytes::Bytes>,
}

/// Where a hit's body is.
#[derive(Debug, Clone)]
pub enum HitBody {
    /// The object's file (possibly from the worker's open-file cache).
    File(Arc<File>),
    /// The worker's RAM tier: exactly the body, `body_len` bytes.
    Mem(bytes::Bytes),
}

impl HitEntry {
    fn new(f: Found, body: HitBody, body_offset: u64) -> HitEntry {
        HitEntry {
            body_len: f.meta.body_len,
            meta: f.meta,
            body,
            body_offset,
            hash: f.hash,
            ino: f.ino,
            gen: f.gen,
            body_head: f.head,
        }
    }

    /// The object's file, unless the body came from RAM.
    pub fn file(&self) -> Option<&File> {
        match &self.body {
            HitBody::File(f) => Some(f),
            HitBody::Mem(_) => None,
        }
    }

    /// The body, when it came from the RAM tier.
    pub fn mem(&self) -> Option<&bytes::Bytes> {
        match &self.body {
            HitBody::Mem(b) => Some(b),
            HitBody::File(_) => None,
        }
    }
}

/// The current version of an object: what the index said of it and what its file's
/// header said (or a worker's front remembered of both).
struct Found {
    hash: KeyHash,
    meta: Arc<ObjectMeta>,
    body_offset: u64,
    ino: u64,
    gen: u64,
    /// Body bytes read with the header (see [`HitEntry::body_head`]).
    head: Option<bytes::Bytes>,
}

impl Found {
    fn from_front(e: &crate::local::front::FrontEntry) -> Found {
        Found {
            hash: e.hash,
            meta: e.meta.clone(),
            body_offset: e.body_offset,
            ino: e.ino,
            gen: e.gen,
            head: None,
        }
    }
}

/// Writes one object; see [`Cache::begin_write`]. Dropping it without
/// [`ObjectWriter::finish`] discards the temp file (a failed or aborted fetch).
#[derive(Debug)]
pub struct ObjectWriter {
    cache: Arc<Cache>,
    obj: TempObject,
}

impl ObjectWriter {
    /// Append body bytes. An error (ENOSPC, EIO) is counted and rate-limit logged; the
    /// server then keeps serving the response uncached and drops the writer.
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        let r = self.obj.write(data);
        if let Err(e) = &r {
            self.cache.note_write_error("write", e);
        }
        r
    }

    /// Body bytes written so far.
    pub fn written(&self) -> u64 {
        self.obj.written()
    }

    /// Where the next body bytes go in the file, for a caller that writes them itself
    /// (off its event loop) on a handle from [`ObjectWriter::reader`], then calls
    /// [`ObjectWriter::record_written`] or [`ObjectWriter::write_failed`].
    pub fn next_offset(&self) -> u64 {
        self.obj.next_offset()
    }

    /// The caller wrote `data` at [`ObjectWriter::next_offset`].
    pub fn record_written(&mut self, data: &[u8]) {
        self.obj.record(data);
    }

    /// The caller's write failed: counted and rate-limit logged like our own.
    pub fn write_failed(&self, e: &io::Error) {
        self.cache.note_write_error("write", e);
    }

    /// Where the body starts in the temp file (for streaming followers).
    pub fn body_offset(&self) -> u64 {
        self.obj.body_offset()
    }

    /// Metadata being written (its `key` is the variant key).
    pub fn meta(&self) -> &ObjectMeta {
        self.obj.meta()
    }

    /// A handle on the file being written (its one descriptor, shared: no `dup`);
    /// followers read from it at their own offsets, the caller may write the body
    /// through it, and it stays valid after the rename.
    pub fn reader(&self) -> io::Result<Arc<File>> {
        self.obj.reader()
    }

    /// [`ObjectWriter::finish`] with the header write, the `fstat` and the rename made
    /// by `io` (a server's file I/O backend, so they never block its event loop). The
    /// index is updated after the rename, under the object's stripe lock; should two
    /// writers of one key (only possible without the collapse lock) rename in one order
    /// and index in the other, the index names an inode the file no longer has: a
    /// lookup then sees the mismatch, answers a miss, and the next fill repairs it.
    pub async fn finish_with<W: CommitIo>(mut self, io: &W) -> io::Result<()> {
        let res = async {
            let plan = self.obj.prepare_commit()?;
            let ino = io.commit(&plan).await?;
            Ok::<_, io::Error>(ino)
        }
        .await;
        let ObjectWriter { cache, obj } = self;
        match res {
            Ok(ino) => {
                let _stripe = cache.stripe(obj.hash());
                cache.index_committed(obj.committed(ino));
                Ok(())
            }
            Err(e) => {
                cache.note_write_error("commit", &e);
                Err(e) // `obj` drops: the temp file is removed
            }
        }
    }

    /// Check the length, finalise the header, rename into place, and index the object.
    pub fn finish(self) -> io::Result<()> {
        let ObjectWriter { cache, obj } = self;
        // Rename and index under the object's stripe lock, so that two writers (or a
        // writer and a purge) of one key cannot leave the index naming the wrong file.
        let _stripe = cache.stripe(obj.hash());
        match obj.commit() {
            Ok(c) => {
                cache.index_committed(c);
                Ok(())
            }
            Err(e) => {
                cache.note_write_error("commit", &e);
                Err(e)
            }
        }
    }
}

/// Background thread coordination: wake the manager early, or stop everything.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    pub(crate) flag: Mutex<bool>,
    pub(crate) cv: Condvar,
}

/// Loader counters (atomics so `stats()` never blocks the loader).
#[derive(Debug, Default)]
pub(crate) struct LoaderCounters {
    pub(crate) scanned: AtomicU64,
    pub(crate) loaded: AtomicU64,
    pub(crate) removed: AtomicU64,
    pub(crate) snapshot: AtomicU64,
    pub(crate) unseen: AtomicU64,
    pub(crate) done: AtomicBool,
}

/// One cache directory. Create with [`Cache::open`]; share as `Arc<Cache>`.
#[derive(Debug)]
pub struct Cache {
    /// As opened; the limits in it are the first values of `limits`, which a reload
    /// changes ([`Cache::set_limits`]): read those from `limits`, never from here.
    pub(crate) cfg: CacheConfig,
    pub(crate) limits: crate::limits::LiveLimits,
    pub(crate) layout: Layout,
    pub(crate) index: Index,
    /// Unique per process: temp files of this process are never removed by its loader.
    pub(crate) token: String,
    seq: AtomicU64,
    pub(crate) seed: u64,
    write_errors: WriteErrors,
    pub(crate) loader: LoaderCounters,
    /// Purges issued while the loader runs, applied to what it finds later.
    pub(crate) pending: PendingRules,
    /// Serialises "check pending rules + insert" (loader, fallback) against "record rule
    /// + purge the index" (purges) while loading, so no purged object slips in.
    pub(crate) loader_gate: Mutex<()>,
    pub(crate) evictions: AtomicU64,
    pub(crate) expired: AtomicU64,
    pub(crate) purged: AtomicU64,
    fallback_hits: AtomicU64,
    /// Objects dropped as corrupt (bad body checksum, short file).
    pub(crate) corrupt: AtomicU64,
    /// `cfg.verify`, changeable on reload ([`Cache::set_verify`]).
    verify: std::sync::atomic::AtomicU8,
    /// Per-hash stripes serialising "rename + index" against "unindex + unlink".
    stripes: Box<[Mutex<()>]>,
    pub(crate) wake: Signal,
    /// Wakes the loader's sleep on shutdown.
    pub(crate) stop: Signal,
    pub(crate) stopping: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    inflight: Inflight,
    uses: crate::uses::UseCounter,
}

impl Cache {
    /// Create the directory, start the loader and the manager threads, and return at
    /// once: lookups work immediately (objects not yet loaded are found on disk).
    pub fn open(cfg: CacheConfig) -> io::Result<Arc<Cache>> {
        storage::validate_levels(&cfg.levels)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        fs::create_dir_all(&cfg.path)
            .map_err(|e| io::Error::new(e.kind(), format!("mkdir {}: {e}", cfg.path.display())))?;
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let cache = Arc::new(Cache {
            layout: Layout {
                root: cfg.path.clone(),
                levels: cfg.levels.clone(),
            },
            token: format!("{}-{nanos:x}", std::process::id()),
            seq: AtomicU64::new(0),
            seed: xxhash_rust::xxh3::xxh3_64(cfg.name.as_bytes()),
            index: Index::new(),
            write_errors: WriteErrors::default(),
            loader: LoaderCounters::default(),
            pending: PendingRules::default(),
            loader_gate: Mutex::new(()),
            evictions: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            purged: AtomicU64::new(0),
            fallback_hits: AtomicU64::new(0),
            corrupt: AtomicU64::new(0),
            verify: std::sync::atomic::AtomicU8::new(cfg.verify.to_u8()),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            wake: Signal::default(),
            stop: Signal::default(),
            stopping: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            inflight: Inflight::new(),
            uses: crate::uses::UseCounter::default(),
            limits: crate::limits::LiveLimits::new(&Limits::of(&cfg)),
            cfg,
        });
        cache.restore_snapshot();
        let loader = crate::loader::spawn(&cache)?;
        let manager = crate::manager::spawn(&cache)?;
        lock(&cache.threads).extend([loader, manager]);
        Ok(cache)
    }

    /// The config the cache was opened with: its name, path and levels hold for the
    /// life of the cache; its limits are those of the start ([`Cache::limits`] has the
    /// values in force).
    pub fn config(&self) -> &CacheConfig {
        &self.cfg
    }

    /// The size limits and background pacing in force.
    pub fn limits(&self) -> Limits {
        self.limits.load()
    }

    /// A reload's size limits and pacing: they apply from the manager's next pass,
    /// which starts now (a smaller `max_size` is evicted down to in bounded batches of
    /// `manager_files`/`manager_threshold`), and from the loader's next batch.
    pub fn set_limits(&self, l: Limits) {
        self.limits.store(&l);
        crate::manager::wake(self);
    }

    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The collapse lock for misses in this cache.
    pub fn inflight(&self) -> &Inflight {
        &self.inflight
    }

    /// `cache_min_uses`: count a request for a key that missed; returns how many
    /// times it was requested (store the response once this reaches the minimum).
    pub fn note_use(&self, hash: KeyHash) -> u32 {
        self.uses.note(hash)
    }

    /// Index-only probe (vary map + entry, access recorded), without opening the file
    /// (so without checking the key): benchmarks and diagnostics.
    pub fn index_probe(&self, hash: KeyHash) -> bool {
        let _ = self.index.vary_of(hash);
        self.index.get(hash).is_some()
    }

    /// Where the object with this hash lives on disk.
    pub fn path_for(&self, hash: KeyHash) -> PathBuf {
        self.layout.path_for(hash)
    }

    /// Find the stored response for a request. `now` is the wall clock used for
    /// freshness (RFC 9111 ages are wall-clock based). Opens the object's file with
    /// blocking calls on the calling thread; a server's event loop uses
    /// [`Cache::lookup_with`] and its own [`FileOpener`] instead.
    pub fn lookup(self: &Arc<Self>, primary_key: &str, req: &HeaderMap, now: SystemTime) -> Lookup {
        ready(self.lookup_with(&BlockingOpener, primary_key, req, now))
    }

    /// [`Cache::lookup`] through a worker's [`Local`] (front, RAM tier, open files),
    /// with blocking opens: benchmarks, tests and tools.
    pub fn lookup_in(
        self: &Arc<Self>,
        local: &RefCell<Local>,
        primary_key: &str,
        req: &HeaderMap,
        now: SystemTime,
    ) -> Lookup {
        ready(self.lookup_local(Some(local), &BlockingOpener, primary_key, req, now))
    }

    /// [`Cache::lookup`] with the object's file opened (and `fstat`ed) by `opener`, so
    /// that a cold dentry or inode can be waited for off the event loop. The index part
    /// is memory only.
    pub async fn lookup_with<O: FileOpener>(
        self: &Arc<Self>,
        opener: &O,
        primary_key: &str,
        req: &HeaderMap,
        now: SystemTime,
    ) -> Lookup {
        self.lookup_local(None, opener, primary_key, req, now).await
    }

    /// [`Cache::lookup_with`] through a worker's [`Local`]: an object without `Vary`
    /// that the worker's front remembers, at an unchanged version, is found without
    /// touching the shared index; then a fresh object's body comes from the worker's
    /// RAM tier when it holds that version, and otherwise its file from the worker's
    /// open-file cache when that holds the same inode, before anything is opened.
    pub async fn lookup_local<O: FileOpener>(
        self: &Arc<Self>,
        local: Option<&RefCell<Local>>,
        opener: &O,
        primary_key: &str,
        req: &HeaderMap,
        now: SystemTime,
    ) -> Lookup {
        let ph = key_hash(primary_key);
        self.lookup_hashed(local, opener, primary_key, ph, req, now)
            .await
    }

    /// [`Cache::lookup_local`] with the primary key's hash already computed (`ph`
    /// = [`key_hash`]`(primary_key)`): a server hashes the key once per request.
    pub async fn lookup_hashed<O: FileOpener>(
        self: &Arc<Self>,
        local: Option<&RefCell<Local>>,
        opener: &O,
        primary_key: &str,
        ph: KeyHash,
        req: &HeaderMap,
        now: SystemTime,
    ) -> Lookup {
        debug_assert_eq!(ph, key_hash(primary_key));
        if let Some(l) = local {
            let version = self.index.version(ph);
            let remembered = l
                .borrow_mut()
                .front
                .get(self.local_key(ph), primary_key, version)
                .map(Found::from_front);
            if let Some(found) = remembered {
                // Replaced or gone since (an error): the index knows better.
                if let Ok(hit) = self.finish_lookup(local, opener, found, None, now).await {
                    return hit;
                }
            }
        }
        let (vkey, vh) = self.variant_of(local, primary_key, ph, req);
        let front_checked = local.is_some() && vh == ph;
        match self.find(local, opener, &vkey, vh, front_checked).await {
            Ok(Some((found, file))) => {
                match self.finish_lookup(local, opener, found, file, now).await {
                    Ok(hit) => return hit,
                    Err(fail) => {
                        self.drop_failed(vh, fail);
                        return Lookup::Miss;
                    }
                }
            }
            Ok(None) => {}
            Err(fail) => {
                self.drop_failed(vh, fail);
                return Lookup::Miss;
            }
        }
        if !self.loader.done.load(Ordering::Acquire) {
            // Only while the loader runs (minutes after a start): the file looked for
            // by hash, through `opener` like any other.
            if let Some(hit) = Box::pin(self.disk_fallback(opener, vh, &vkey)).await {
                self.fallback_hits.fetch_add(1, Ordering::Relaxed);
                return classify(hit, now);
            }
        }
        Lookup::Miss
    }

    /// The variant key (and its hash) a request for `primary_key` (`ph`) looks up: the
    /// primary key itself unless the stored response varies.
    fn variant_of<'k>(
        &self,
        local: Option<&RefCell<Local>>,
        primary_key: &'k str,
        ph: KeyHash,
        req: &HeaderMap,
    ) -> (Cow<'k, str>, KeyHash) {
        let key = |vary: Option<&[String]>| vary.map(|v| variant_key(primary_key, v, req));
        let vkey = match local {
            Some(l) => self.with_vary(l, ph, key),
            None => key(self.index.vary_of(ph).as_deref()),
        };
        match vkey {
            Some(k) => {
                let h = key_hash(&k);
                (Cow::Owned(k), h)
            }
            None => (Cow::Borrowed(primary_key), ph),
        }
    }

    /// `f` of the `Vary` names stored for primary `ph`: from the worker's front while
    /// the primary's stripe is unchanged (no shared lock, no shared reference count),
    /// else from the index (then remembered as the worker's own copy).
    fn with_vary<R>(
        &self,
        local: &RefCell<Local>,
        ph: KeyHash,
        f: impl FnOnce(Option<&[String]>) -> R,
    ) -> R {
        let lk = self.local_key(ph);
        let version = self.index.version(ph);
        if let Some(names) = local.borrow().front.vary(lk, version) {
            return f(names);
        }
        let names = (self.index.vary_of(ph)).map(|v| v.to_vec().into_boxed_slice());
        let r = f(names.as_deref());
        local.borrow_mut().front.remember_vary(lk, version, names);
        r
    }

    /// The object stored under exactly `key` (`hash`): from the worker's front when it
    /// remembers it at an unchanged version (unless the caller just asked it:
    /// `front_checked`), else from the index and the header of its file, opened and read
    /// through `opener` and checked against `key` (another key with the same hash is
    /// not this object: None). What the file said is then remembered in the front;
    /// the file comes back with it.
    async fn find<O: FileOpener>(
        &self,
        local: Option<&RefCell<Local>>,
        opener: &O,
        key: &str,
        hash: KeyHash,
        front_checked: bool,
    ) -> Result<Option<(Found, Option<Arc<File>>)>, OpenFail> {
        if let (Some(l), false) = (local, front_checked) {
            let version = self.index.version(hash);
            if let Some(e) = l.borrow_mut().front.get(self.local_key(hash), key, version) {
                return Ok(Some((Found::from_front(e), None)));
            }
        }
        // Two attempts: an object replaced between the index read and the open is
        // looked up again (the index is updated right after the rename).
        for _ in 0..2 {
            let version = self.index.version(hash);
            let Some(entry) = self.index.get(hash) else {
                if let Some(l) = local {
                    l.borrow_mut().forget(self.local_key(hash));
                }
                return Ok(None);
            };
            match self.load(opener, hash, key, entry).await {
                Ok((found, file)) => {
                    if let Some(l) = local {
                        let e = crate::local::front::FrontEntry {
                            version,
                            seed: self.seed,
                            hash,
                            meta: found.meta.clone(),
                            body_offset: found.body_offset,
                            ino: found.ino,
                            gen: found.gen,
                            touched: false,
                        };
                        l.borrow_mut().front.insert(self.local_key(hash), e);
                    }
                    return Ok(Some((found, Some(file))));
                }
                Err(OpenFail::Replaced) => continue,
                Err(OpenFail::OtherKey) => return Ok(None),
                Err(fail) => return Err(fail),
            }
        }
        Ok(None)
    }

    /// Opens the file of the index entry `entry` and reads and checks its header (two
    /// reads at most; one for a header that fits in the first block, which for a packed
    /// small object holds the body too).
    async fn load<O: FileOpener>(
        &self,
        opener: &O,
        hash: KeyHash,
        key: &str,
        entry: Entry,
    ) -> Result<(Found, Arc<File>), OpenFail> {
        // Boxed: the backend's futures are large; inline, every RAM or front hit
        // would carry (and copy) their state. An open is a syscall anyway.
        let opened = Box::pin(opener.open_stat(&self.layout.path_for(hash)))
            .await
            .map_err(|_| OpenFail::Gone(entry.ino))?;
        if storage::ino_key(opened.ino) != entry.ino {
            return Err(OpenFail::Replaced);
        }
        let (hdr, head) = read_header_with(opener, &opened, hash)
            .await
            .map_err(|why| OpenFail::Corrupt(entry.ino, why))?;
        if hdr.meta.key != key {
            return Err(OpenFail::OtherKey);
        }
        let mut meta = hdr.meta;
        if entry.soft_purged {
            // Persisting the flag in the header is best effort; the index's is the truth.
            meta.soft_purged = true;
        }
        let found = Found {
            hash,
            meta: Arc::new(meta),
            body_offset: hdr.body_offset,
            ino: entry.ino,
            gen: entry.gen,
            head,
        };
        Ok((found, Arc::new(opened.file)))
    }

    /// The copy in `coding` (a content-coding token) of the object this request would
    /// get (see [`crate::coded`]), when that object is stored and fresh and the copy is
    /// stored, and `wanted` says the object has copies: None otherwise (the caller then
    /// looks the object up as usual and may make the copy). Only the copy's file is opened (or found in the worker's RAM tier
    /// or open-file cache); the object itself is found in memory.
    #[allow(clippy::too_many_arguments)]
    pub async fn lookup_coded<O: FileOpener>(
        &self,
        local: Option<&RefCell<Local>>,
        opener: &O,
        primary_key: &str,
        ph: KeyHash,
        req: &HeaderMap,
        now: SystemTime,
        coding: &str,
        wanted: impl FnOnce(&ObjectMeta) -> bool,
    ) -> Option<HitEntry> {
        let identity = self
            .identity_meta(local, opener, primary_key, ph, req)
            .await?;
        if identity.status != 200 || !crate::policy::is_fresh(&identity, now) {
            return None;
        }
        // The caller's policy: objects it never compresses have no copy to look for.
        if !wanted(&identity) {
            return None;
        }
        let ck = crate::key::coded_key(&identity.key, coding, identity.body_id());
        let ch = key_hash(&ck);
        let (found, file) = match self.find(local, opener, &ck, ch, false).await {
            Ok(Some(f)) => f,
            Ok(None) => return None,
            Err(fail) => {
                self.drop_failed(ch, fail);
                return None;
            }
        };
        match self.finish_lookup(local, opener, found, file, now).await {
            // The identity's freshness governs the copy's.
            Ok(Lookup::Fresh(hit)) | Ok(Lookup::Stale(hit)) => Some(hit),
            Ok(Lookup::Miss) | Err(OpenFail::Replaced) => None,
            Err(fail) => {
                self.drop_failed(ch, fail);
                None
            }
        }
    }

    /// An entry whose file is missing (unindexed) or corrupt: a bad header, or a size
    /// other than its header says (unindexed, deleted, and counted as corrupt).
    fn drop_failed(&self, hash: KeyHash, fail: OpenFail) {
        match fail {
            OpenFail::Gone(ino) => {
                self.index.remove(hash, Some(ino));
            }
            OpenFail::Corrupt(ino, why) => {
                if let Some(v) = self.index.remove(hash, Some(ino)) {
                    self.delete_file(v.hash, v.ino);
                    self.corrupt.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(cache = %self.cfg.name, "dropped corrupt object {}: {why}", crate::key::hash_hex(hash));
                }
            }
            OpenFail::Replaced | OpenFail::OtherKey => {}
        }
    }

    /// The metadata of the object a request for `primary_key` would get (the worker's
    /// front, else the index and the object's header).
    async fn identity_meta<O: FileOpener>(
        &self,
        local: Option<&RefCell<Local>>,
        opener: &O,
        primary_key: &str,
        ph: KeyHash,
        req: &HeaderMap,
    ) -> Option<Arc<ObjectMeta>> {
        let (key, hash) = self.variant_of(local, primary_key, ph, req);
        match self.find(local, opener, &key, hash, false).await {
            Ok(found) => found.map(|(f, _)| f.meta),
            Err(fail) => {
                self.drop_failed(hash, fail);
                None
            }
        }
    }

    /// The body of `found`: the worker's RAM tier (fresh objects only), the file its
    /// header was just read from (`file`), the worker's open-file cache, or the file
    /// opened now (and checked against `found`).
    async fn finish_lookup<O: FileOpener>(
        &self,
        local: Option<&RefCell<Local>>,
        opener: &O,
        found: Found,
        file: Option<Arc<File>>,
        now: SystemTime,
    ) -> Result<Lookup, OpenFail> {
        let lk = self.local_key(found.hash);
        if let Some(l) = local {
            let mut l = l.borrow_mut();
            if let Some(m) = l.mem.as_mut() {
                if crate::policy::is_fresh(&found.meta, now) {
                    if let Some(body) = m.get(lk, found.gen) {
                        let hit = HitEntry::new(found, HitBody::Mem(body), 0);
                        return Ok(Lookup::Fresh(hit));
                    }
                }
            }
            if let Some(file) = file {
                l.files.insert(lk, found.ino, file.clone());
                let off = found.body_offset;
                return Ok(classify(
                    HitEntry::new(found, HitBody::File(file), off),
                    now,
                ));
            }
            if let Some(file) = l.files.get(lk, found.ino) {
                let off = found.body_offset;
                return Ok(classify(
                    HitEntry::new(found, HitBody::File(file), off),
                    now,
                ));
            }
        }
        if let Some(file) = file {
            let off = found.body_offset;
            return Ok(classify(
                HitEntry::new(found, HitBody::File(file), off),
                now,
            ));
        }
        // Boxed: the backend's open future is large; inline, every RAM or cached-fd hit
        // would carry (and copy) its state. An open is a syscall anyway.
        let opened = Box::pin(opener.open_stat(&self.layout.path_for(found.hash))).await;
        let hit = self.check_opened(found, opened)?;
        if let (Some(l), HitBody::File(f)) = (local, &hit.body) {
            l.borrow_mut().files.insert(lk, hit.ino, f.clone());
        }
        Ok(classify(hit, now))
    }

    /// Report the accesses that workers' fronts answered since the last call to the
    /// index (LRU order and `inactive`); a worker calls this once a second per zone.
    pub fn flush_touches(&self, local: &RefCell<Local>) {
        let touched = local.borrow_mut().front.take_touched(self.seed);
        for h in touched {
            self.index.touch(h);
        }
    }

    /// This cache's keys in a worker's [`Local`] (shared by every cache zone): the
    /// object hash mixed with the zone's seed.
    pub fn local_key(&self, hash: KeyHash) -> KeyHash {
        hash ^ (u128::from(self.seed) << 64 | u128::from(self.seed))
    }

    /// Whether the worker's RAM tier would take `entry`'s body (read from disk for a
    /// fresh hit): it has one, the body is in a file, and it is not too large.
    pub fn memory_wants(&self, local: &RefCell<Local>, entry: &HitEntry) -> bool {
        entry.file().is_some()
            && local
                .borrow()
                .mem
                .as_ref()
                .is_some_and(|m| m.admissible(entry.body_len))
    }

    /// Offer `entry`'s body, read from its file, to the worker's RAM tier.
    pub fn offer_to_memory(&self, local: &RefCell<Local>, entry: &HitEntry, body: bytes::Bytes) {
        if body.len() as u64 != entry.body_len {
            return;
        }
        if let Some(m) = local.borrow_mut().mem.as_mut() {
            m.insert(self.local_key(entry.hash), entry.gen, body);
        }
    }

    /// The file opened for `found` must be the one it names (inode) and whole.
    fn check_opened(
        &self,
        found: Found,
        opened: io::Result<OpenedFile>,
    ) -> Result<HitEntry, OpenFail> {
        let body_len = found.meta.body_len;
        let Ok(OpenedFile { file, ino, len }) = opened else {
            return Err(OpenFail::Gone(found.ino));
        };
        if storage::ino_key(ino) != found.ino {
            return Err(OpenFail::Replaced);
        }
        if len != found.body_offset + body_len {
            // Cut short or grown behind our back: never serve it.
            let why = format!(
                "file size {len}, its header says {}",
                found.body_offset + body_len
            );
            return Err(OpenFail::Corrupt(found.ino, why));
        }
        let off = found.body_offset;
        Ok(HitEntry::new(found, HitBody::File(Arc::new(file)), off))
    }

    /// Before the loader is done: the object's file, looked for directly by hash. Its
    /// open, `fstat` and header reads go through `opener` (a cold disk is waited for off
    /// the event loop); then it is indexed under the loader gate, unless a purge issued
    /// while loading covers it. The gate is taken at once when it is free, else on
    /// `opener`'s pool ([`FileOpener::offload`]): the loader, or a purge with its
    /// unlinks, may hold it for a while. A file the purge covers is unlinked there too.
    async fn disk_fallback<O: FileOpener>(
        self: &Arc<Self>,
        opener: &O,
        hash: KeyHash,
        key: &str,
    ) -> Option<HitEntry> {
        let path = self.layout.path_for(hash);
        let opened = Box::pin(opener.open_stat(&path)).await.ok()?;
        let (hdr, head) = read_header_with(opener, &opened, hash).await.ok()?;
        if hdr.meta.key != key {
            return None;
        }
        let ino = storage::ino_key(opened.ino);
        let disk_size = storage::disk_size_of(opened.len);
        let verdict = match self.loader_gate.try_lock() {
            Ok(gate) => self.index_fallback(&gate, hash, &hdr.meta, disk_size, ino),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                self.index_fallback(&p.into_inner(), hash, &hdr.meta, disk_size, ino)
            }
            Err(std::sync::TryLockError::WouldBlock) => {
                let (cache, meta) = (self.clone(), hdr.meta.clone());
                let job = move || {
                    let gate = lock(&cache.loader_gate);
                    cache.index_fallback(&gate, hash, &meta, disk_size, ino)
                };
                opener.offload(job).await.ok()?
            }
        };
        if verdict == RuleVerdict::Delete {
            let cache = self.clone();
            let job = move || {
                let _stripe = cache.stripe(hash);
                let _ = storage::remove_if_ino(&cache.layout.path_for(hash), ino);
            };
            let _ = opener.offload(job).await;
            return None;
        }
        let entry = self.index.get(hash)?;
        if entry.ino != ino {
            return None;
        }
        let mut meta = hdr.meta;
        meta.soft_purged |= entry.soft_purged;
        let found = Found {
            hash,
            meta: Arc::new(meta),
            body_offset: hdr.body_offset,
            ino,
            gen: entry.gen,
            head,
        };
        Some(HitEntry::new(
            found,
            HitBody::File(Arc::new(opened.file)),
            hdr.body_offset,
        ))
    }

    /// The disk fallback's "check the purges issued while loading + insert", atomic
    /// against a purge's "record + purge the index" by the loader gate (`_gate`, held).
    /// Memory only: a file to delete is left to the caller.
    fn index_fallback(
        &self,
        _gate: &std::sync::MutexGuard<'_, ()>,
        hash: KeyHash,
        meta: &ObjectMeta,
        disk_size: u64,
        ino: u64,
    ) -> RuleVerdict {
        let verdict = self.pending.verdict(meta);
        if verdict != RuleVerdict::Delete {
            self.index.insert_if_absent(
                NewEntry {
                    hash,
                    meta,
                    disk_size,
                    ino,
                },
                verdict == RuleVerdict::MarkStale,
            );
        }
        verdict
    }

    /// The header of `hash`'s file, read now with blocking calls (purges and refreshes,
    /// which run off the event loop): its metadata and body offset.
    pub(crate) fn stored_meta(&self, hash: KeyHash) -> Option<(ObjectMeta, u64)> {
        let file = File::open(self.layout.path_for(hash)).ok()?;
        let hdr = storage::read_header(&file, hash).ok()?;
        Some((hdr.meta, hdr.body_offset))
    }

    /// Start writing an object. `primary_key` is the request's cache key; `meta` comes
    /// from [`crate::policy::build_meta`] (its `vary` names pick the variant from
    /// `req`). Errors mean "serve uncached".
    pub fn begin_write(
        self: &Arc<Self>,
        primary_key: &str,
        req: &HeaderMap,
        mut meta: ObjectMeta,
    ) -> io::Result<ObjectWriter> {
        meta.key = variant_key(primary_key, &meta.vary, req);
        self.begin_write_keyed(meta)
    }

    /// [`Cache::begin_write`] with `meta.key` already the variant key (see
    /// [`crate::variant_key`]): only file system work is left (directories, the temp
    /// file, its provisional header), so a server can run it off its event loop.
    pub fn begin_write_keyed(self: &Arc<Self>, mut meta: ObjectMeta) -> io::Result<ObjectWriter> {
        let hash = key_hash(&meta.key);
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        if meta.body_id == 0 {
            // A new body: an id no other body of this cache has had (process token,
            // sequence number and key; 0 is reserved for "none").
            let mut h = xxhash_rust::xxh3::Xxh3::new();
            h.update(self.token.as_bytes());
            h.update(&seq.to_le_bytes());
            h.update(&hash.to_le_bytes());
            meta.body_id = h.digest().max(1);
        }
        match TempObject::create(&self.layout, hash, meta, &self.token, seq) {
            Ok(obj) => Ok(ObjectWriter {
                cache: self.clone(),
                obj,
            }),
            Err(e) => {
                self.note_write_error("create", &e);
                Err(e)
            }
        }
    }

    /// The stripe lock for an object hash (held around rename+index and unlink).
    pub(crate) fn stripe(&self, hash: KeyHash) -> std::sync::MutexGuard<'_, ()> {
        lock(&self.stripes[(hash >> 64) as usize & (STRIPES - 1)])
    }

    pub(crate) fn index_committed(&self, c: Committed) {
        self.uses.forget(key_hash(c.meta.primary_key()));
        self.index.insert(NewEntry {
            hash: c.hash,
            meta: &c.meta,
            disk_size: c.disk_size,
            ino: c.ino,
        });
        if self.over_budget() {
            crate::manager::wake(self);
        }
    }

    pub(crate) fn over_budget(&self) -> bool {
        self.index.disk_bytes() > self.limits.max_size()
            || self.index.mem_bytes() > self.limits.keys_zone()
    }

    /// After a 304: store `new_meta` (from [`crate::policy::refresh_meta`]) for the
    /// object, rewriting only the header in place when it fits before the body;
    /// otherwise the whole object is written to a new file (the body read and written
    /// through a 64 KiB user-space buffer, on the calling thread) and renamed over the
    /// old one. Clears a soft purge.
    pub fn refresh(&self, entry: &HitEntry, new_meta: ObjectMeta) -> io::Result<()> {
        let stored = self.refresh_object(entry, new_meta)?;
        self.refresh_coded(&stored);
        Ok(())
    }

    /// Carries a revalidation of `identity` over to its encoded copies (same body, so
    /// their bytes stay valid): their headers, times and freshness follow the identity's,
    /// rewritten in place; a copy whose header no longer fits is removed (the next
    /// request makes it again).
    fn refresh_coded(&self, identity: &ObjectMeta) {
        if !self.index.has_copies(key_hash(&identity.key)) {
            return;
        }
        for coding in crate::coded::CODINGS {
            let h = key_hash(&crate::key::coded_key(
                &identity.key,
                coding,
                identity.body_id(),
            ));
            let Some(entry) = self.index.peek(h) else {
                continue;
            };
            let Some((copy, body_offset)) = self.stored_meta(h) else {
                continue;
            };
            let Some(m) = crate::coded::refreshed_coded_meta(identity, &copy) else {
                continue;
            };
            let path = self.layout.path_for(h);
            let _stripe = self.stripe(h);
            match storage::rewrite_header_in_place(&path, h, &m, body_offset, entry.ino) {
                Ok(()) => {
                    self.index.update(h, entry.ino, m.soft_purged, None);
                }
                Err(_) => {
                    if let Some(v) = self.index.remove(h, Some(entry.ino)) {
                        let _ = storage::remove_if_ino(&path, v.ino);
                    }
                }
            }
        }
    }

    /// Stores the refreshed metadata of `entry`'s object; returns it as stored.
    fn refresh_object(&self, entry: &HitEntry, mut new_meta: ObjectMeta) -> io::Result<ObjectMeta> {
        new_meta.key = entry.meta.key.clone();
        new_meta.vary = entry.meta.vary.clone();
        new_meta.body_len = entry.meta.body_len;
        new_meta.body_hash = entry.meta.body_hash;
        new_meta.body_id = entry.meta.body_id;
        new_meta.soft_purged = false;
        let path = self.layout.path_for(entry.hash);
        match storage::rewrite_header_in_place(
            &path,
            entry.hash,
            &new_meta,
            entry.body_offset,
            entry.ino,
        ) {
            Ok(()) => {
                self.index.update(entry.hash, entry.ino, false, None);
                Ok(new_meta)
            }
            Err(RewriteError::NoRoom) => {
                let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                let _stripe = self.stripe(entry.hash);
                // A RAM body (never stale, so rare here): read the body from the file.
                let reopened;
                let file = match entry.file() {
                    Some(f) => f,
                    None => {
                        reopened = File::open(&path)?;
                        &reopened
                    }
                };
                let c = storage::rewrite_whole(
                    &self.layout,
                    entry.hash,
                    new_meta,
                    file,
                    entry.body_offset,
                    &self.token,
                    seq,
                )
                .inspect_err(|e| self.note_write_error("refresh", e))?;
                let stored = c.meta.clone();
                let file = Some((c.ino, c.disk_size));
                if !self.index.update(entry.hash, entry.ino, false, file) {
                    self.index_committed(c);
                }
                Ok(stored)
            }
            Err(RewriteError::Replaced) => Err(io::Error::other("object replaced during refresh")),
            Err(RewriteError::Io(e)) => {
                self.note_write_error("refresh", &e);
                Err(e)
            }
        }
    }

    /// When bodies are checked (`cache_verify`).
    pub fn verify(&self) -> crate::Verify {
        crate::Verify::from_u8(self.verify.load(Ordering::Relaxed))
    }

    /// A reload's `cache_verify` (the loader's part applies at the next start).
    pub fn set_verify(&self, v: crate::Verify) {
        self.verify.store(v.to_u8(), Ordering::Relaxed);
    }

    /// Whether `body` (all of `entry`'s body) matches the checksum its header carries.
    pub fn body_matches(entry: &HitEntry, body: &[u8]) -> bool {
        body.len() as u64 == entry.meta.body_len
            && xxhash_rust::xxh3::xxh3_64(body) == entry.meta.body_hash
    }

    /// `entry`'s file turned out corrupt (a body checksum mismatch, a file shorter than
    /// its header says): the object leaves the index (so the next request fetches it
    /// again) and its file is deleted, if both still refer to what `entry` was. Counted
    /// and logged.
    pub fn drop_corrupt(&self, entry: &HitEntry, why: &str) {
        if let Some(v) = self.index.remove(entry.hash, Some(entry.ino)) {
            self.delete_file(v.hash, v.ino);
            self.corrupt.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(cache = %self.cfg.name, "dropped corrupt object {}: {why}", entry.meta.key.replace('\0', "\\0"));
        }
    }

    pub(crate) fn note_write_error(&self, context: &str, e: &io::Error) {
        if self.write_errors.record(context, e) {
            tracing::warn!(cache = %self.cfg.name, "cache {context} failed: {e} (serving uncached; further errors logged at most every {:?})", storage::WRITE_ERROR_LOG_INTERVAL);
        }
    }

    /// Delete an object's file if it is still the one the index knew.
    pub(crate) fn delete_file(&self, hash: KeyHash, ino: u64) {
        let path = self.layout.path_for(hash);
        let _stripe = self.stripe(hash);
        if let Err(e) = storage::remove_if_ino(&path, ino) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(cache = %self.cfg.name, "unlink {} failed: {e}", path.display());
            }
        }
    }

    /// Reads (and deletes) the index snapshot of the last clean shutdown, if any; see
    /// [`crate::snapshot`]. Not with `cache_verify` (the loader then reads every body
    /// anyway, which a snapshot would skip).
    fn restore_snapshot(&self) {
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
        if self.verify() != crate::Verify::Off {
            tracing::info!(cache = %name, "index snapshot ignored: cache_verify checks every body on load");
            return;
        }
        match crate::snapshot::decode(&bytes, &self.layout.levels) {
            Ok(img) => {
                let n = self.index.import(img);
                self.loader.snapshot.store(n as u64, Ordering::Relaxed);
                tracing::info!(cache = %name, "index snapshot: {n} objects restored in {:?}; the loader checks them against the directories", t0.elapsed());
            }
            Err(e) => {
                tracing::warn!(cache = %name, "index snapshot ignored: {e}; loading from the files");
            }
        }
    }

    /// Writes the index snapshot that the next [`Cache::open`] of this directory starts
    /// from. Call after [`Cache::shutdown`], once nothing writes to the cache any more
    /// (the server does, when every worker has stopped). Returns the objects written.
    pub fn write_snapshot(&self) -> io::Result<usize> {
        let img = self.index.export();
        let n = img.objects.len();
        let bytes = crate::snapshot::encode(&img, &self.layout.levels);
        crate::snapshot::write(&self.layout.root, &bytes)?;
        Ok(n)
    }

    /// Counters for metrics and status pages.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            name: self.cfg.name.clone(),
            entries: self.index.entries(),
            disk_bytes: self.index.disk_bytes(),
            max_size: self.limits.max_size(),
            mem_bytes: self.index.mem_bytes(),
            keys_zone: self.limits.keys_zone(),
            evictions: self.evictions.load(Ordering::Relaxed),
            expired: self.expired.load(Ordering::Relaxed),
            purged: self.purged.load(Ordering::Relaxed),
            disk_fallback_hits: self.fallback_hits.load(Ordering::Relaxed),
            write_errors: self.write_errors.count(),
            last_write_error: self.write_errors.last(),
            corrupt: self.corrupt.load(Ordering::Relaxed),
            inflight: self.inflight.len() as u64,
            loader: LoaderStats {
                scanned: self.loader.scanned.load(Ordering::Relaxed),
                loaded: self.loader.loaded.load(Ordering::Relaxed),
                removed: self.loader.removed.load(Ordering::Relaxed),
                snapshot: self.loader.snapshot.load(Ordering::Relaxed),
                unseen: self.loader.unseen.load(Ordering::Relaxed),
                done: self.loader.done.load(Ordering::Acquire),
            },
        }
    }

    /// Stop the loader and manager threads and wait for them (bounded by one batch).
    /// Lookups and writes keep working; nothing is evicted afterwards.
    pub fn shutdown(&self) {
        self.stopping.store(true, Ordering::Release);
        crate::manager::wake(self);
        *lock(&self.stop.flag) = true;
        self.stop.cv.notify_all();
        let threads: Vec<JoinHandle<()>> = lock(&self.threads).drain(..).collect();
        let me = std::thread::current().id();
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }

    /// Sleep up to `d`, returning early when the cache is shutting down.
    pub(crate) fn sleep_unless_stopping(&self, d: std::time::Duration) {
        let g = lock(&self.stop.flag);
        if !*g {
            let _ = self.stop.cv.wait_timeout(g, d);
        }
    }

    /// Wait until the loader has finished (tests, tools and orderly startups).
    pub fn wait_loaded(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while !self.loader.done.load(Ordering::Acquire) {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        true
    }
}

/// The I/O of a commit ([`ObjectWriter::finish_with`]): write `plan.header` at offset 0
/// of the temp file, `fstat` it, rename it to `plan.final_path`; returns its inode.
#[allow(async_fn_in_trait)]
pub trait CommitIo {
    async fn commit(&self, plan: &storage::CommitPlan) -> io::Result<u64>;
}

/// A file opened for reading, with what `fstat` said of it.
#[derive(Debug)]
pub struct OpenedFile {
    pub file: File,
    pub ino: u64,
    pub len: u64,
}

/// How [`Cache::lookup_with`] opens an object's file (`open(O_RDONLY)` then `fstat`)
/// and reads its header. A server implements it with its file I/O backend (a thread
/// pool, io_uring, or a non-blocking attempt first), so neither blocks its event loop.
#[allow(async_fn_in_trait)]
pub trait FileOpener {
    async fn open_stat(&self, path: &std::path::Path) -> io::Result<OpenedFile>;
    /// Exactly `len` bytes of `file` at `offset` (`UnexpectedEof` if it ends first).
    async fn read_exact_at(&self, file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// Runs `f`, which may block (file system calls, or a wait on a lock the cache's
    /// loader or a purge holds), where it cannot block the event loop: a server's
    /// thread pool. Only lookups made while the loader runs need it (the disk
    /// fallback). An error: `f` could not run (or panicked).
    async fn offload<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T>;
}

/// Reads and decodes the header of `opened` (the file of `hash`) through `opener`: two
/// reads at most, one when the header fits in the first block. Also returns the body
/// bytes that block held (a packed small object's whole body, often). Errors say why
/// the file is unusable.
async fn read_header_with<O: FileOpener>(
    opener: &O,
    opened: &OpenedFile,
    hash: KeyHash,
) -> Result<(storage::StoredHeader, Option<bytes::Bytes>), String> {
    let first = opened.len.min(storage::BODY_ALIGN) as usize;
    let mut buf = Box::pin(opener.read_exact_at(&opened.file, 0, first))
        .await
        .map_err(|e| format!("header read: {e}"))?;
    let need = storage::header_len(&buf).map_err(|e| e.to_string())?;
    if need > buf.len() {
        let have = buf.len();
        let rest = Box::pin(opener.read_exact_at(&opened.file, have as u64, need - have))
            .await
            .map_err(|e| format!("header read: {e}"))?;
        buf.extend_from_slice(&rest);
    }
    let hdr = storage::decode_header(&buf, hash, opened.len).map_err(|e| e.to_string())?;
    // A packed small object: the block just read holds (part of) its body too.
    let start = (hdr.body_offset as usize).min(buf.len());
    let end = (hdr.body_offset.saturating_add(hdr.meta.body_len) as usize).min(buf.len());
    let head = (end > start).then(|| bytes::Bytes::from(buf).slice(start..end));
    Ok((hdr, head))
}

/// Blocking `open` + `fstat` on the calling thread (and [`FileOpener::offload`]
/// runs there too).
pub struct BlockingOpener;

impl BlockingOpener {
    fn open_stat_now(path: &std::path::Path) -> io::Result<OpenedFile> {
        let file = File::open(path)?;
        let md = file.metadata()?;
        Ok(OpenedFile {
            ino: md.ino(),
            len: md.len(),
            file,
        })
    }
}

impl FileOpener for BlockingOpener {
    async fn open_stat(&self, path: &std::path::Path) -> io::Result<OpenedFile> {
        Self::open_stat_now(path)
    }

    async fn read_exact_at(&self, file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        if storage::read_full_at(file, &mut buf, offset)? != len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(buf)
    }

    async fn offload<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        Ok(f())
    }
}

/// Runs a future that never waits (its opener is [`BlockingOpener`]) to completion.
fn ready<T>(fut: impl std::future::Future<Output = T>) -> T {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => unreachable!("a blocking opener never returns Pending"),
    }
}

enum OpenFail {
    /// A newer file took the name: look the index up again.
    Replaced,
    /// Missing: drop the entry (if it still has this inode).
    Gone(u64),
    /// A bad header, or not the size its header says: drop the entry and the file.
    Corrupt(u64, String),
    /// The file holds another key with the same hash: a miss (nothing is dropped).
    OtherKey,
}

fn classify(hit: HitEntry, now: SystemTime) -> Lookup {
    if crate::policy::is_fresh(&hit.meta, now) {
        Lookup::Fresh(hit)
    } else {
        Lookup::Stale(hit)
    }
}

#[cfg(test)]
mod tests;
