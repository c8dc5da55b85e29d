//! Writes: a miss's response stored as a new object ([`ObjectWriter`]: temp file,
//! rename, index), and a revalidation's new headers stored over an object's
//! ([`Cache::refresh`]).
//!
//! How it fits: the server's fill path. The file work is [`crate::storage`]'s; the
//! rename and the index update happen under the object's stripe lock
//! ([`crate::zone::Zone::stripe`]), and the zone wakes its manager when a new object
//! puts it over budget.

use bytes::Bytes;
use std::fs::File;
use std::hash::Hasher as _;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use edge_http::HeaderMap;

use super::lookup::HitEntry;
use super::Cache;
use crate::key::{key_hash, variant_key};
use crate::meta::ObjectMeta;
use crate::storage::{self, Committed, RewriteError, SpareFile, TempObject};
use crate::sync::lock;

/// Spare temp files a cache keeps ready for misses ([`Cache::take_spare`]): a miss then
/// starts its object with no file system call, where making the temp file would be a
/// round trip to the file I/O pool. When fewer than this are left, one pool job tops
/// them up to `SPARE_LOW` + [`SPARE_BATCH`].
pub const SPARE_LOW: usize = 16;
/// Spare temp files a refill makes at least (it tops up to `SPARE_LOW` + this).
pub const SPARE_BATCH: usize = 32;
/// How long a failed refill (a full disk, say) keeps the next one from being tried.
pub const SPARE_RETRY: Duration = Duration::from_secs(1);

/// Writes one object; see [`Cache::begin_write`]. Dropping it without
/// [`ObjectWriter::finish`] discards the temp file (a failed or aborted fetch).
#[derive(Debug)]
pub struct ObjectWriter {
    cache: Arc<Cache>,
    /// Boxed: a temp object is near a kilobyte (its streaming body hasher alone is 576
    /// bytes, 64-byte aligned), and a writer is moved through every future of a fill
    /// (each move a copy, each future as large as what it holds).
    obj: Box<TempObject>,
}

impl ObjectWriter {
    /// The cache this object goes to.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// Append body bytes. An error (ENOSPC, EIO) is counted and rate-limit logged; the
    /// server then keeps serving the response uncached and drops the writer.
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        let r = self.obj.write(data);
        if let Err(e) = &r {
            self.cache.zone.note_write_error("write", e);
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
        self.cache.zone.note_write_error("write", e);
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
    ///
    /// `held`: empty, or the whole body in parts, kept in memory by the caller instead
    /// of written (each part passed to [`ObjectWriter::record_written`]): the commit's
    /// one write carries the header and them. `held` comes back as it was whatever the
    /// outcome, for a caller whose readers still need the body.
    pub async fn finish_with<W: CommitIo>(
        mut self,
        io: &W,
        held: &mut Vec<Bytes>,
    ) -> io::Result<()> {
        // On an error here `held` is untouched; past it, its parts are in the plan's.
        let res = match self.obj.prepare_commit(held) {
            Ok(plan) => {
                let body_parts = plan.body_parts;
                let (r, mut parts) = io.commit(plan).await;
                *held = parts.split_off(parts.len().saturating_sub(body_parts));
                r
            }
            Err(e) => Err(e),
        };
        let ObjectWriter { cache, obj } = self;
        match res {
            Ok(ino) => {
                let _stripe = cache.zone.stripe(obj.hash());
                cache.index_committed(obj.committed(ino));
                Ok(())
            }
            Err(e) => {
                cache.zone.note_write_error("commit", &e);
                Err(e) // `obj` drops: the temp file is removed
            }
        }
    }

    /// Check the length, finalise the header, rename into place, and index the object.
    pub fn finish(self) -> io::Result<()> {
        let ObjectWriter { cache, obj } = self;
        // Rename and index under the object's stripe lock, so that two writers (or a
        // writer and a purge) of one key cannot leave the index naming the wrong file.
        let _stripe = cache.zone.stripe(obj.hash());
        match obj.commit() {
            Ok(c) => {
                cache.index_committed(c);
                Ok(())
            }
            Err(e) => {
                cache.zone.note_write_error("commit", &e);
                Err(e)
            }
        }
    }
}

impl Cache {
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
    /// file), so a server can run it off its event loop.
    pub fn begin_write_keyed(self: &Arc<Self>, meta: ObjectMeta) -> io::Result<ObjectWriter> {
        self.begin_with(meta, |layout, hash, meta, token, seq| {
            TempObject::create(layout, hash, meta, token, seq)
        })
    }

    /// [`Cache::begin_write_keyed`] on a spare temp file from [`Cache::take_spare`]:
    /// no file system call, so it runs on the event loop.
    pub fn begin_write_spare(
        self: &Arc<Self>,
        meta: ObjectMeta,
        spare: SpareFile,
    ) -> io::Result<ObjectWriter> {
        self.begin_with(meta, |layout, hash, meta, _, _| {
            TempObject::on_spare(layout, hash, meta, spare)
        })
    }

    fn begin_with(
        self: &Arc<Self>,
        mut meta: ObjectMeta,
        make: impl FnOnce(
            &storage::Layout,
            crate::KeyHash,
            ObjectMeta,
            &str,
            u64,
        ) -> io::Result<TempObject>,
    ) -> io::Result<ObjectWriter> {
        let hash = key_hash(&meta.key);
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        if meta.body_id == 0 {
            // A new body: an id no other body of this cache has had (process token,
            // sequence number and key; 0 is reserved for "none").
            let mut h = twox_hash::XxHash3_64::new();
            h.write(self.zone.token().as_bytes());
            h.write(&seq.to_le_bytes());
            h.write(&hash.to_le_bytes());
            meta.body_id = h.finish().max(1);
        }
        match make(self.zone.layout(), hash, meta, self.zone.token(), seq) {
            Ok(obj) => Ok(ObjectWriter {
                cache: self.clone(),
                obj: Box::new(obj),
            }),
            Err(e) => {
                self.zone.note_write_error("create", &e);
                Err(e)
            }
        }
    }

    /// A spare temp file for [`Cache::begin_write_spare`], if one is left, and whether
    /// the caller should now refill them (as [`Cache::spares_low`] says, from the same
    /// look at the stock: a miss takes the lock once).
    pub fn take_spare(&self) -> (Option<SpareFile>, bool) {
        let (spare, left) = {
            let mut files = lock(&self.spares.files);
            (files.pop(), files.len())
        };
        (spare, self.refill_due(left))
    }

    /// Whether the spare temp files should be refilled now: true for one caller at a
    /// time (until its [`Cache::refill_spares`] returns), and not within
    /// [`SPARE_RETRY`] of a refill that failed (a full disk).
    pub fn spares_low(&self) -> bool {
        let left = lock(&self.spares.files).len();
        self.refill_due(left)
    }

    /// Whether a [`Cache::refill_spares`] is running: it creates files in the cache's
    /// root, whose directory lock a commit's rename out of the root then waits for.
    pub fn refilling_spares(&self) -> bool {
        self.spares.refilling.load(Ordering::Acquire)
    }

    fn refill_due(&self, left: usize) -> bool {
        if left >= SPARE_LOW {
            return false;
        }
        if lock(&self.spares.retry_at).is_some_and(|t| Instant::now() < t) {
            return false;
        }
        !self.spares.refilling.swap(true, Ordering::AcqRel)
    }

    /// Makes spare temp files up to [`SPARE_LOW`] + [`SPARE_BATCH`] in the cache's
    /// root. Blocking (a file creation can wait on the disk): run it off the event
    /// loop, after [`Cache::take_spare`] (or [`Cache::spares_low`]) said so.
    pub fn refill_spares(&self) {
        let have = lock(&self.spares.files).len();
        let n = (SPARE_LOW + SPARE_BATCH).saturating_sub(have) as u64;
        let seq = self.seq.fetch_add(n, Ordering::Relaxed);
        let root = &self.zone.layout().root;
        let (made, res) = storage::make_spares(root, self.zone.token(), seq, n);
        lock(&self.spares.files).extend(made);
        if let Err(e) = res {
            self.zone.note_write_error("create", &e);
            *lock(&self.spares.retry_at) = Some(Instant::now() + SPARE_RETRY);
        }
        self.spares.refilling.store(false, Ordering::Release);
    }

    /// Removes the spare temp files (at shutdown).
    pub(super) fn drop_spares(&self) {
        lock(&self.spares.files).clear();
    }

    /// Indexes an object just renamed into place (the caller holds its stripe); the
    /// `cache_min_uses` count of its key is done with.
    fn index_committed(&self, c: Committed) {
        self.uses.forget(key_hash(c.meta.primary_key()));
        self.zone.insert_committed(c);
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
        if !self.zone.index().has_copies(key_hash(&identity.key)) {
            return;
        }
        for coding in crate::coded::CODINGS {
            let h = key_hash(&crate::key::coded_key(
                &identity.key,
                coding,
                identity.body_id(),
            ));
            let Some(entry) = self.zone.index().peek(h) else {
                continue;
            };
            let Some((copy, body_offset)) = self.zone.stored_meta(h) else {
                continue;
            };
            let Some(m) = crate::coded::refreshed_coded_meta(identity, &copy) else {
                continue;
            };
            let stripe = self.zone.stripe(h);
            if self
                .zone
                .rewrite_header(h, entry.ino, &m, body_offset)
                .is_err()
            {
                self.zone.discard(&stripe, h, entry.ino);
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
        match self
            .zone
            .rewrite_header(entry.hash, entry.ino, &new_meta, entry.body_offset)
        {
            Ok(()) => Ok(new_meta),
            Err(RewriteError::NoRoom) => {
                let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                let _stripe = self.zone.stripe(entry.hash);
                // A RAM body (never stale, so rare here): read the body from the file.
                let reopened;
                let file = match entry.file() {
                    Some(f) => f,
                    None => {
                        reopened = File::open(self.zone.path_for(entry.hash))?;
                        &reopened
                    }
                };
                let c = storage::rewrite_whole(
                    self.zone.layout(),
                    entry.hash,
                    new_meta,
                    file,
                    entry.body_offset,
                    self.zone.token(),
                    seq,
                )
                .inspect_err(|e| self.zone.note_write_error("refresh", e))?;
                let stored = c.meta.clone();
                if !self.zone.follow_rewrite(entry.hash, entry.ino, &c) {
                    self.index_committed(c);
                }
                Ok(stored)
            }
            Err(RewriteError::Replaced) => Err(io::Error::other("object replaced during refresh")),
            Err(RewriteError::Io(e)) => {
                self.zone.note_write_error("refresh", &e);
                Err(e)
            }
        }
    }
}

/// The I/O of a commit ([`ObjectWriter::finish_with`]): write `plan.parts` in order at
/// offset 0 of the temp file, `fstat` it, rename it to `plan.final_path`; returns its
/// inode, and the parts back (none if they were lost on the way).
#[allow(async_fn_in_trait)]
pub trait CommitIo {
    async fn commit(&self, plan: storage::CommitPlan) -> (io::Result<u64>, Vec<Bytes>);
}
