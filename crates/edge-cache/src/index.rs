//! The in-memory index: sharded, shared by every worker, with an LRU list per shard.
//!
//! How it fits: a hit is one lookup here (two short mutex holds: the primary-key shard
//! for `Vary` names, then the object's shard; shards spread keys over 64 locks, but
//! every worker that hits the same hot key takes the same shard's lock, and the LRU
//! move on each hit is a write to that shard) and returns the parsed
//! [`ObjectMeta`] kept in memory, so a hit never reads or parses headers from disk. The
//! manager asks the index for victims ([`Index::evict_lru`], [`Index::expire_inactive`])
//! and deletes their files; the index itself never touches the disk ("eviction only
//! decides; the caller deletes", as in Pingora).
//!
//! Lock order (deadlock freedom): object shard → primary shard → tag map → prefix set.
//! Nobody takes an object shard while holding any of the others.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::key::{key_hash, KeyHash};
use crate::meta::ObjectMeta;
use crate::purge::{lock, PurgeIndex};

/// Number of shards (a power of two; hashes are uniformly distributed).
pub const SHARDS: usize = 64;
/// Version stripes (a power of two): every change to an entry or a primary record
/// bumps its hash's stripe, so a worker's front ([`crate::local::front`]) can tell,
/// with one load of a line nobody writes on hits, that what it remembers still holds.
pub const VERSION_STRIPES: usize = 4096;
/// Estimated fixed bytes per index entry (entry, LRU slot, map slots, Arc headers),
/// added to the variable parts (key twice, header block, tags) for the `keys_zone`
/// budget.
pub const ENTRY_OVERHEAD: u64 = 256;
/// Entries skipped from an LRU tail because they are in use before giving up on that
/// shard (nginx tries 20).
pub const EVICT_TRIES: usize = 20;

const NIL: u32 = u32::MAX;

/// Keys are already xxh3-128 hashes: hashing them again (SipHash) is wasted work on
/// the hit path. The shard is picked from the low bits, so the map uses the high half.
#[derive(Default, Clone, Copy)]
pub(crate) struct KeyHashHasher(u64);

impl std::hash::Hasher for KeyHashHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only reached for non-u128 keys (never in this crate); stay correct anyway.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = (v >> 64) as u64;
    }
}

pub(crate) type HashMapK<V> = HashMap<KeyHash, V, std::hash::BuildHasherDefault<KeyHashHasher>>;

/// An index entry as inserted.
#[derive(Debug, Clone)]
pub struct NewEntry {
    pub hash: KeyHash,
    pub meta: Arc<ObjectMeta>,
    pub body_offset: u64,
    pub disk_size: u64,
    pub ino: u64,
}

/// What a lookup gets: a consistent copy of the entry plus a use guard (the entry is
/// not evicted while the guard lives).
#[derive(Debug)]
pub struct Snapshot {
    pub meta: Arc<ObjectMeta>,
    pub body_offset: u64,
    pub ino: u64,
    /// Changes whenever the entry does (insert, refresh, soft purge): what a worker's
    /// RAM tier checks its copy against.
    pub gen: u64,
    pub soft_purged: bool,
    pub uses: u32,
    pub guard: UseGuard,
}

/// Marks an entry in use (open reader); dropping it releases the mark.
#[derive(Debug)]
pub struct UseGuard(Arc<AtomicU32>);

impl Drop for UseGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An entry taken out of the index; the caller deletes its file (if `ino` still
/// matches the file on disk).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Victim {
    pub hash: KeyHash,
    pub ino: u64,
    pub disk_size: u64,
}

struct Entry {
    meta: Arc<ObjectMeta>,
    gen: u64,
    primary: KeyHash,
    body_offset: u64,
    disk_size: u64,
    ino: u64,
    last_access: u64,
    uses: u32,
    readers: Arc<AtomicU32>,
    soft_purged: bool,
    mem: u64,
}

struct Slot {
    hash: KeyHash,
    entry: Option<Entry>,
    prev: u32,
    next: u32,
}

/// One shard: a hash map into a slab of LRU-linked slots (head = most recent).
#[derive(Default)]
struct Shard {
    map: HashMapK<u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
}

impl Shard {
    fn new() -> Shard {
        Shard {
            head: NIL,
            tail: NIL,
            ..Default::default()
        }
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = {
            let s = &self.slots[i as usize];
            (s.prev, s.next)
        };
        if prev != NIL {
            self.slots[prev as usize].next = next;
        } else {
            self.head = next;
        }
        if next != NIL {
            self.slots[next as usize].prev = prev;
        } else {
            self.tail = prev;
        }
    }

    fn push_front(&mut self, i: u32) {
        let old = self.head;
        {
            let s = &mut self.slots[i as usize];
            s.prev = NIL;
            s.next = old;
        }
        if old != NIL {
            self.slots[old as usize].prev = i;
        } else {
            self.tail = i;
        }
        self.head = i;
    }

    fn insert(&mut self, hash: KeyHash, entry: Entry) -> Option<Entry> {
        if let Some(&i) = self.map.get(&hash) {
            let old = self.slots[i as usize].entry.replace(entry);
            self.unlink(i);
            self.push_front(i);
            return old;
        }
        let slot = Slot {
            hash,
            entry: Some(entry),
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.map.insert(hash, i);
        self.push_front(i);
        None
    }

    fn remove(&mut self, hash: KeyHash) -> Option<Entry> {
        let i = self.map.remove(&hash)?;
        self.unlink(i);
        self.free.push(i);
        self.slots[i as usize].entry.take()
    }

    fn get_mut(&mut self, hash: KeyHash) -> Option<&mut Entry> {
        let i = *self.map.get(&hash)?;
        self.slots[i as usize].entry.as_mut()
    }

    fn touch(&mut self, hash: KeyHash, now: u64) -> Option<&mut Entry> {
        let i = *self.map.get(&hash)?;
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
        let e = self.slots[i as usize].entry.as_mut()?;
        e.last_access = now;
        Some(e)
    }

    /// The least recently used entry that is not in use, walking at most
    /// [`EVICT_TRIES`] from the tail: (hash, last access).
    fn lru_candidate(&self) -> Option<(KeyHash, u64)> {
        let mut i = self.tail;
        let mut tries = 0;
        while i != NIL && tries < EVICT_TRIES {
            let s = &self.slots[i as usize];
            if let Some(e) = &s.entry {
                if e.readers.load(Ordering::Acquire) == 0 {
                    return Some((s.hash, e.last_access));
                }
            }
            i = s.prev;
            tries += 1;
        }
        None
    }
}

/// Primary key record: the `Vary` names of its latest stored response and the hashes
/// of every stored variant (for purge by key).
#[derive(Debug, Clone)]
struct PrimaryRec {
    key: String,
    vary: Arc<[String]>,
    variants: Vec<KeyHash>,
}

/// The sharded index.
pub struct Index {
    shards: Box<[Mutex<Shard>]>,
    versions: Box<[AtomicU64]>,
    next_gen: AtomicU64,
    primaries: Box<[Mutex<HashMapK<PrimaryRec>>]>,
    purge: PurgeIndex,
    epoch: Instant,
    entries: AtomicU64,
    mem_bytes: AtomicU64,
    disk_bytes: AtomicU64,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("entries", &self.entries())
            .field("disk_bytes", &self.disk_bytes())
            .finish()
    }
}

impl Default for Index {
    fn default() -> Self {
        Self::new()
    }
}

fn shard_of(hash: KeyHash) -> usize {
    (hash as usize) & (SHARDS - 1)
}

fn stripe_of(hash: KeyHash) -> usize {
    ((hash >> 64) as usize) & (VERSION_STRIPES - 1)
}

fn mem_estimate(m: &ObjectMeta) -> u64 {
    ENTRY_OVERHEAD
        + 2 * m.key.len() as u64
        + m.header_block.len() as u64
        + m.etag.as_ref().map_or(0, |e| e.len() as u64)
        + m.tags.iter().map(|t| t.len() as u64 + 48).sum::<u64>()
        + m.vary.iter().map(|v| v.len() as u64 + 24).sum::<u64>()
}

impl Index {
    pub fn new() -> Index {
        Index {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::new())).collect(),
            versions: (0..VERSION_STRIPES).map(|_| AtomicU64::new(0)).collect(),
            next_gen: AtomicU64::new(1),
            primaries: (0..SHARDS)
                .map(|_| Mutex::new(HashMapK::default()))
                .collect(),
            purge: PurgeIndex::default(),
            epoch: Instant::now(),
            entries: AtomicU64::new(0),
            mem_bytes: AtomicU64::new(0),
            disk_bytes: AtomicU64::new(0),
        }
    }

    /// The version of `hash`'s stripe (see [`VERSION_STRIPES`]). Read before a lookup
    /// whose result is remembered; equal later means nothing of that stripe changed.
    pub fn version(&self, hash: KeyHash) -> u64 {
        self.versions[stripe_of(hash)].load(Ordering::Acquire)
    }

    /// Called with the shard lock held, after any change to `hash`'s entry or record.
    fn bump(&self, hash: KeyHash) {
        self.versions[stripe_of(hash)].fetch_add(1, Ordering::Release);
    }

    fn new_gen(&self) -> u64 {
        self.next_gen.fetch_add(1, Ordering::Relaxed)
    }

    /// Record an access to `hash` made without [`Index::get`] (a worker's front
    /// answered it): its LRU position and last access move, at most once per second
    /// per object and worker.
    pub fn touch(&self, hash: KeyHash) {
        let now = self.now_ns();
        let mut shard = lock(&self.shards[shard_of(hash)]);
        if let Some(e) = shard.touch(hash, now) {
            e.uses = e.uses.saturating_add(1);
        }
    }

    /// Monotonic nanoseconds since the index was created: the LRU clock (fine enough
    /// that entries touched in the same millisecond still have an order).
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    pub fn entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// Estimated index memory (the `keys_zone` budget is checked against this).
    pub fn mem_bytes(&self) -> u64 {
        self.mem_bytes.load(Ordering::Relaxed)
    }

    /// Bytes on disk of all indexed objects.
    pub fn disk_bytes(&self) -> u64 {
        self.disk_bytes.load(Ordering::Relaxed)
    }

    pub fn purge_index(&self) -> &PurgeIndex {
        &self.purge
    }

    /// The `Vary` names stored for a primary key (None: nothing stored, or no Vary).
    pub fn vary_of(&self, primary: KeyHash) -> Option<Arc<[String]>> {
        let p = lock(&self.primaries[shard_of(primary)]);
        p.get(&primary)
            .map(|r| r.vary.clone())
            .filter(|v| !v.is_empty())
    }

    /// Hashes of every stored variant of a primary key.
    pub fn variants_of(&self, primary: KeyHash) -> Vec<KeyHash> {
        let p = lock(&self.primaries[shard_of(primary)]);
        p.get(&primary)
            .map(|r| r.variants.clone())
            .unwrap_or_default()
    }

    /// An entry's metadata, inode and body offset by hash alone (no key check, no LRU
    /// update, not marked in use): for maintenance that walks a primary key's variants.
    pub fn peek(&self, hash: KeyHash) -> Option<(Arc<ObjectMeta>, u64, u64)> {
        let shard = lock(&self.shards[shard_of(hash)]);
        let i = *shard.map.get(&hash)?;
        let e = shard.slots[i as usize].entry.as_ref()?;
        Some((e.meta.clone(), e.ino, e.body_offset))
    }

    /// Whether an entry exists (no LRU update).
    pub fn contains(&self, hash: KeyHash) -> bool {
        lock(&self.shards[shard_of(hash)]).map.contains_key(&hash)
    }

    /// Find an entry, verify its key (hash collisions), bump its LRU position and use
    /// count, and mark it in use.
    pub fn get(&self, hash: KeyHash, key: &str) -> Option<Snapshot> {
        let now = self.now_ns();
        let mut shard = lock(&self.shards[shard_of(hash)]);
        let e = shard.get_mut(hash)?;
        if e.meta.key != key {
            return None;
        }
        let e = shard.touch(hash, now)?;
        e.uses = e.uses.saturating_add(1);
        e.readers.fetch_add(1, Ordering::AcqRel);
        Some(Snapshot {
            meta: e.meta.clone(),
            body_offset: e.body_offset,
            ino: e.ino,
            gen: e.gen,
            soft_purged: e.soft_purged,
            uses: e.uses,
            guard: UseGuard(e.readers.clone()),
        })
    }

    /// Insert or replace. Returns the replaced entry as a victim (its file was already
    /// replaced by the rename, so the caller only fixes accounting: nothing to delete).
    pub fn insert(&self, new: NewEntry) -> Option<Victim> {
        self.insert_inner(new, true, false).1
    }

    /// Insert only when absent (the loader must never overwrite a newer entry).
    /// `soft_purged` marks it stale at once. Returns true if inserted.
    pub fn insert_if_absent(&self, new: NewEntry, soft_purged: bool) -> bool {
        self.insert_inner(new, false, soft_purged).0
    }

    fn insert_inner(
        &self,
        new: NewEntry,
        replace: bool,
        soft_purged: bool,
    ) -> (bool, Option<Victim>) {
        let mut new = new;
        if soft_purged && !new.meta.soft_purged {
            Arc::make_mut(&mut new.meta).soft_purged = true;
        }
        let primary_key = new.meta.primary_key().to_owned();
        let primary = key_hash(&primary_key);
        let mem = mem_estimate(&new.meta);
        let entry = Entry {
            soft_purged: new.meta.soft_purged,
            gen: self.new_gen(),
            meta: new.meta,
            primary,
            body_offset: new.body_offset,
            disk_size: new.disk_size,
            ino: new.ino,
            last_access: self.now_ns(),
            uses: 0,
            readers: Arc::new(AtomicU32::new(0)),
            mem,
        };
        let mut shard = lock(&self.shards[shard_of(new.hash)]);
        if !replace && shard.map.contains_key(&new.hash) {
            return (false, None);
        }
        let tags = entry.meta.tags.clone();
        let vary: Arc<[String]> = entry.meta.vary.clone().into();
        let disk = entry.disk_size;
        let old = shard.insert(new.hash, entry);
        self.bump(new.hash);
        self.mem_bytes.fetch_add(mem, Ordering::Relaxed);
        self.disk_bytes.fetch_add(disk, Ordering::Relaxed);
        let victim = match &old {
            Some(o) => {
                self.forget_accounting(o);
                self.purge.remove_tags(new.hash, &o.meta.tags);
                if o.primary != primary {
                    // Same hash, different primary: only on a hash collision.
                    self.detach_primary(o.primary, new.hash);
                }
                Some(Victim {
                    hash: new.hash,
                    ino: o.ino,
                    disk_size: o.disk_size,
                })
            }
            None => {
                self.entries.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        self.purge.add_tags(new.hash, &tags);
        {
            let mut p = lock(&self.primaries[shard_of(primary)]);
            let rec = p.entry(primary).or_insert_with(|| {
                self.purge.add_primary(&primary_key);
                PrimaryRec {
                    key: primary_key,
                    vary: vary.clone(),
                    variants: Vec::new(),
                }
            });
            if replace || rec.variants.is_empty() {
                rec.vary = vary;
            }
            if !rec.variants.contains(&new.hash) {
                rec.variants.push(new.hash);
            }
            self.bump(primary);
        }
        drop(shard);
        (true, victim)
    }

    fn forget_accounting(&self, e: &Entry) {
        self.mem_bytes.fetch_sub(e.mem, Ordering::Relaxed);
        self.disk_bytes.fetch_sub(e.disk_size, Ordering::Relaxed);
    }

    fn detach_primary(&self, primary: KeyHash, hash: KeyHash) {
        let mut p = lock(&self.primaries[shard_of(primary)]);
        if let Some(rec) = p.get_mut(&primary) {
            rec.variants.retain(|&h| h != hash);
            self.bump(primary);
            if rec.variants.is_empty() {
                let rec = p.remove(&primary).expect("present");
                self.purge.remove_primary(&rec.key);
            }
        }
    }

    /// Remove an entry; with `ino` given, only if it still refers to that file (so a
    /// stale decision never removes a newer object).
    pub fn remove(&self, hash: KeyHash, ino: Option<u64>) -> Option<Victim> {
        let mut shard = lock(&self.shards[shard_of(hash)]);
        if let Some(want) = ino {
            if shard.get_mut(hash)?.ino != want {
                return None;
            }
        }
        let e = shard.remove(hash)?;
        self.take_out(hash, &e);
        drop(shard);
        Some(Victim {
            hash,
            ino: e.ino,
            disk_size: e.disk_size,
        })
    }

    /// Bookkeeping for an entry just removed from its shard (shard lock held).
    fn take_out(&self, hash: KeyHash, e: &Entry) {
        self.bump(hash);
        self.entries.fetch_sub(1, Ordering::Relaxed);
        self.forget_accounting(e);
        self.purge.remove_tags(hash, &e.meta.tags);
        self.detach_primary(e.primary, hash);
    }

    /// Mark an entry soft-purged; returns what the caller needs to persist the flag.
    pub fn set_soft_purged(&self, hash: KeyHash) -> Option<(Arc<ObjectMeta>, u64, u64)> {
        let mut shard = lock(&self.shards[shard_of(hash)]);
        let e = shard.get_mut(hash)?;
        e.soft_purged = true;
        let mut m = (*e.meta).clone();
        m.soft_purged = true;
        e.meta = Arc::new(m);
        e.gen = self.new_gen();
        let out = (e.meta.clone(), e.body_offset, e.ino);
        self.bump(hash);
        Some(out)
    }

    /// Replace an entry's metadata after a refresh (same file, same body). With a new
    /// inode and offset when the refresh had to rewrite the whole file.
    pub fn update_meta(
        &self,
        hash: KeyHash,
        expect_ino: u64,
        meta: Arc<ObjectMeta>,
        new_file: Option<(u64, u64, u64)>,
    ) -> bool {
        let mut shard = lock(&self.shards[shard_of(hash)]);
        let Some(e) = shard.get_mut(hash) else {
            return false;
        };
        if e.ino != expect_ino {
            return false;
        }
        let mem = mem_estimate(&meta);
        let old_mem = e.mem;
        let old_disk = e.disk_size;
        e.soft_purged = meta.soft_purged;
        e.meta = meta;
        e.mem = mem;
        e.gen = self.new_gen();
        if let Some((ino, off, disk)) = new_file {
            e.ino = ino;
            e.body_offset = off;
            e.disk_size = disk;
        }
        let new_disk = e.disk_size;
        self.bump(hash);
        self.mem_bytes.fetch_add(mem, Ordering::Relaxed);
        self.mem_bytes.fetch_sub(old_mem, Ordering::Relaxed);
        self.disk_bytes.fetch_add(new_disk, Ordering::Relaxed);
        self.disk_bytes.fetch_sub(old_disk, Ordering::Relaxed);
        true
    }

    /// Take up to `max` least recently used entries out of the index (approximate
    /// global LRU: each victim comes from the shard whose evictable tail is oldest).
    /// Entries in use are skipped.
    pub fn evict_lru(&self, max: usize) -> Vec<Victim> {
        let mut out = Vec::new();
        while out.len() < max {
            let mut best: Option<(usize, KeyHash, u64)> = None;
            for (i, s) in self.shards.iter().enumerate() {
                if let Some((h, t)) = lock(s).lru_candidate() {
                    if best.is_none_or(|(_, _, bt)| t < bt) {
                        best = Some((i, h, t));
                    }
                }
            }
            let Some((i, h, _)) = best else { break };
            let mut shard = lock(&self.shards[i]);
            // Re-check under the lock: it may have been used or removed meanwhile.
            if shard.lru_candidate().map(|(c, _)| c) != Some(h) {
                continue;
            }
            if let Some(e) = shard.remove(h) {
                self.take_out(h, &e);
                out.push(Victim {
                    hash: h,
                    ino: e.ino,
                    disk_size: e.disk_size,
                });
            }
        }
        out
    }

    /// Take up to `max` entries not accessed since `older_than` (monotonic ns, see
    /// [`Index::now_ns`]) out of the index: the `inactive` expiry.
    pub fn expire_inactive(&self, older_than: u64, max: usize) -> Vec<Victim> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            let mut shard = lock(s);
            while out.len() < max {
                let t = shard.tail;
                if t == NIL {
                    break;
                }
                let slot = &shard.slots[t as usize];
                let h = slot.hash;
                match &slot.entry {
                    Some(e) if e.last_access < older_than => {}
                    _ => break,
                }
                // In use (an open reader) is fine to expire: the reader keeps its fd.
                if let Some(e) = shard.remove(h) {
                    self.take_out(h, &e);
                    out.push(Victim {
                        hash: h,
                        ino: e.ino,
                        disk_size: e.disk_size,
                    });
                }
            }
            if out.len() >= max {
                break;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn entry(key: &str, disk: u64) -> NewEntry {
        let mut m = ObjectMeta::new(key, 200, SystemTime::now());
        m.body_len = disk;
        NewEntry {
            hash: key_hash(key),
            meta: Arc::new(m),
            body_offset: 4096,
            disk_size: disk,
            ino: 1,
        }
    }

    #[test]
    fn insert_get_remove_accounting() {
        let idx = Index::new();
        assert!(idx.insert(entry("a", 100)).is_none());
        assert!(idx.insert(entry("b", 50)).is_none());
        assert_eq!(idx.entries(), 2);
        assert_eq!(idx.disk_bytes(), 150);
        let v = idx.insert(entry("a", 10)).expect("replaced");
        assert_eq!(v.disk_size, 100);
        assert_eq!(idx.entries(), 2);
        assert_eq!(idx.disk_bytes(), 60);
        let s = idx.get(key_hash("a"), "a").unwrap();
        assert_eq!(s.uses, 1);
        assert!(
            idx.get(key_hash("a"), "not-a").is_none(),
            "key mismatch is a miss"
        );
        drop(s);
        assert!(
            idx.remove(key_hash("a"), Some(999)).is_none(),
            "wrong inode kept"
        );
        assert!(idx.remove(key_hash("a"), Some(1)).is_some());
        assert!(idx.remove(key_hash("b"), None).is_some());
        assert_eq!(
            (idx.entries(), idx.disk_bytes(), idx.mem_bytes()),
            (0, 0, 0)
        );
        assert!(idx.purge_index().primaries_with_prefix("").is_empty());
    }

    #[test]
    fn insert_if_absent_never_overwrites() {
        let idx = Index::new();
        idx.insert(entry("a", 100));
        assert!(!idx.insert_if_absent(entry("a", 1), false));
        assert_eq!(idx.disk_bytes(), 100);
    }

    #[test]
    fn lru_order_and_in_use_skipping() {
        let idx = Index::new();
        for i in 0..10 {
            idx.insert(entry(&format!("k{i}"), 1));
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        // Touch k0 so that it becomes the most recent; hold k1 in use.
        drop(idx.get(key_hash("k0"), "k0"));
        let held = idx.get(key_hash("k1"), "k1").unwrap();
        let v = idx.evict_lru(3);
        let got: Vec<KeyHash> = v.iter().map(|v| v.hash).collect();

        assert_eq!(got, vec![key_hash("k2"), key_hash("k3"), key_hash("k4")]);
        drop(held);
        // k1 is evictable again once released, in LRU order (its lookup touched it).
        let v = idx.evict_lru(7);
        let got: Vec<KeyHash> = v.iter().map(|v| v.hash).collect();
        let want: Vec<KeyHash> = ["k5", "k6", "k7", "k8", "k9", "k0", "k1"]
            .iter()
            .map(|k| key_hash(k))
            .collect();
        assert_eq!(got, want);
        assert_eq!(idx.entries(), 0);
    }

    #[test]
    fn inactive_expiry() {
        let idx = Index::new();
        idx.insert(entry("old", 1));
        std::thread::sleep(std::time::Duration::from_millis(30));
        let cut = idx.now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        idx.insert(entry("new", 1));
        let v = idx.expire_inactive(cut, 100);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].hash, key_hash("old"));
        assert!(idx.contains(key_hash("new")));
    }

    #[test]
    fn variants_and_vary_names() {
        let idx = Index::new();
        let mut e = entry("p\0gzip", 1);
        Arc::get_mut(&mut e.meta).unwrap().vary = vec!["accept-encoding".into()];
        idx.insert(e);
        let mut e = entry("p\0br", 1);
        Arc::get_mut(&mut e.meta).unwrap().vary = vec!["accept-encoding".into()];
        idx.insert(e);
        let p = key_hash("p");
        assert_eq!(&*idx.vary_of(p).unwrap(), &["accept-encoding".to_string()]);
        assert_eq!(idx.variants_of(p).len(), 2);
        idx.remove(key_hash("p\0gzip"), None);
        assert_eq!(idx.variants_of(p), vec![key_hash("p\0br")]);
        idx.remove(key_hash("p\0br"), None);
        assert!(idx.vary_of(p).is_none());
    }

    #[test]
    fn concurrent_lookups_and_inserts() {
        let idx = Arc::new(Index::new());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let idx = idx.clone();
                std::thread::spawn(move || {
                    for i in 0..2000 {
                        let k = format!("k{}", (i * 7 + t) % 500);
                        if i % 3 == 0 {
                            idx.insert(entry(&k, 10));
                        } else if i % 11 == 0 {
                            idx.remove(key_hash(&k), None);
                        } else if let Some(s) = idx.get(key_hash(&k), &k) {
                            assert_eq!(s.meta.key, k);
                        }
                        if i % 97 == 0 {
                            idx.evict_lru(2);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Accounting stays exact under concurrency.
        let mut n = 0;
        for i in 0..500 {
            if idx.contains(key_hash(&format!("k{i}"))) {
                n += 1;
            }
        }
        assert_eq!(idx.entries(), n);
        assert_eq!(idx.disk_bytes(), n * 10);
        assert_eq!(idx.purge_index().primaries_with_prefix("k").len() as u64, n);
    }
}
