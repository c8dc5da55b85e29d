//! Lookups: from a request's primary key to a stored object ready to send ([`Lookup`]),
//! through a worker's [`Local`] (front, RAM tier, open files) when it has one, else the
//! zone's index and the object's header; and the disk fallback while the loader runs.
//!
//! How it fits: the server's hit path. [`Cache::lookup_hashed`] finds the variant
//! (Vary), then the object (front, or index + header read through a [`FileOpener`]),
//! then its body (RAM tier, open-file cache, or the file just opened). A file that
//! turns out gone or corrupt leaves the index here ([`crate::zone::Zone::drop_corrupt`]);
//! a file the index does not know yet is looked for by hash until the loader is done.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::sync::Arc;
use std::time::SystemTime;

use edge_http::HeaderMap;

use super::open::{read_header_with, ready, BlockingOpener, FileOpener, OpenedFile};
use super::Cache;
use crate::index::{Entry, NewEntry};
use crate::key::{key_hash, variant_key, KeyHash};
use crate::local::Local;
use crate::meta::ObjectMeta;
use crate::purge::RuleVerdict;
use crate::storage;
#[cfg(doc)]
use crate::zone::Zone;

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
    pub(crate) ino: u64,
    /// The index entry's generation (see [`crate::index::Entry::gen`]).
    pub(crate) gen: u64,
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

impl Cache {
    /// Index-only probe (vary map + entry, access recorded), without opening the file
    /// (so without checking the key): benchmarks and diagnostics.
    pub fn index_probe(&self, hash: KeyHash) -> bool {
        let _ = self.zone.index().vary_of(hash);
        self.zone.index().get(hash).is_some()
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
            let version = self.zone.index().version(ph);
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
        if self.zone.loading() {
            // Only while the loader runs (minutes after a start): the file looked for
            // by hash, through `opener` like any other.
            if let Some(hit) = Box::pin(self.disk_fallback(opener, vh, &vkey)).await {
                self.zone.note_fallback_hit();
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
            None => key(self.zone.index().vary_of(ph).as_deref()),
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
        let version = self.zone.index().version(ph);
        if let Some(names) = local.borrow().front.vary(lk, version) {
            return f(names);
        }
        let names = (self.zone.index().vary_of(ph)).map(|v| v.to_vec().into_boxed_slice());
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
            let version = self.zone.index().version(hash);
            if let Some(e) = l.borrow_mut().front.get(self.local_key(hash), key, version) {
                return Ok(Some((Found::from_front(e), None)));
            }
        }
        // Two attempts: an object replaced between the index read and the open is
        // looked up again (the index is updated right after the rename).
        for _ in 0..2 {
            let version = self.zone.index().version(hash);
            let Some(entry) = self.zone.index().get(hash) else {
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
        let opened = Box::pin(opener.open_stat(&self.zone.path_for(hash)))
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
            OpenFail::Gone(ino) => self.zone.forget(hash, ino),
            OpenFail::Corrupt(ino, why) => {
                self.zone
                    .drop_corrupt(hash, ino, || crate::key::hash_hex(hash), &why)
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
        let opened = Box::pin(opener.open_stat(&self.zone.path_for(found.hash))).await;
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
            self.zone.index().touch(h);
        }
    }

    /// The seed of this cache's keys in a worker's [`Local`] (and of [`crate::select`]).
    pub(crate) fn seed(&self) -> u64 {
        self.seed
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
    /// the event loop); then the zone indexes it, unless a purge issued while loading
    /// covers it ([`Zone::admit`]). The loader gate that takes is taken at once when it
    /// is free, else on `opener`'s pool ([`FileOpener::offload`]): the loader, or a purge
    /// with its unlinks, may hold it for a while. A file the purge covers is unlinked
    /// there too.
    async fn disk_fallback<O: FileOpener>(
        &self,
        opener: &O,
        hash: KeyHash,
        key: &str,
    ) -> Option<HitEntry> {
        let path = self.zone.path_for(hash);
        let opened = Box::pin(opener.open_stat(&path)).await.ok()?;
        let (hdr, head) = read_header_with(opener, &opened, hash).await.ok()?;
        if hdr.meta.key != key {
            return None;
        }
        let ino = storage::ino_key(opened.ino);
        let disk_size = storage::disk_size_of(opened.len);
        let new = |meta| NewEntry {
            hash,
            meta,
            disk_size,
            ino,
        };
        let verdict = match self.zone.try_admit(new(&hdr.meta)) {
            Some(a) => a.verdict,
            None => {
                let (zone, meta) = (self.zone.clone(), hdr.meta.clone());
                let job = move || {
                    zone.admit(NewEntry {
                        hash,
                        meta: &meta,
                        disk_size,
                        ino,
                    })
                    .verdict
                };
                opener.offload(job).await.ok()?
            }
        };
        if verdict == RuleVerdict::Delete {
            let zone = self.zone.clone();
            let _ = opener.offload(move || zone.unlink(hash, ino)).await;
            return None;
        }
        let entry = self.zone.index().get(hash)?;
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

    /// Whether `body` (all of `entry`'s body) matches the checksum its header carries.
    pub fn body_matches(entry: &HitEntry, body: &[u8]) -> bool {
        body.len() as u64 == entry.meta.body_len
            && twox_hash::XxHash3_64::oneshot(body) == entry.meta.body_hash
    }

    /// `entry`'s file turned out corrupt (a body checksum mismatch, a file shorter than
    /// its header says): the object leaves the index (so the next request fetches it
    /// again) and its file is deleted, if both still refer to what `entry` was. Counted
    /// and logged.
    pub fn drop_corrupt(&self, entry: &HitEntry, why: &str) {
        let what = || entry.meta.key.replace('\0', "\\0");
        self.zone.drop_corrupt(entry.hash, entry.ino, what, why);
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
