//! The in-memory index: sharded, shared by every worker, 40 bytes per object.
//!
//! How it fits: the index knows *where* an object is and *whether* it may stay, never
//! what it says. Each object is one fixed 40-byte [`Slot`] (its key hash, inode,
//! generation, last access, size in blocks, directory and flags) in a chunked slab, found
//! through a table of 4-byte slot numbers; its metadata (key, ready-to-send headers,
//! `Vary`, tags) stays in its file and is read with the file on a lookup, checked against
//! the requested key (so a hash collision is a miss, never a wrong object). Hot objects
//! never pay that read: a worker's front ([`crate::local::front`]) remembers the decoded
//! metadata of what it served recently, and the RAM tier their bodies.
//!
//! Eviction is CLOCK per shard (a hit sets a reference bit: no list to relink, so a hit
//! writes one byte and one word of its slot), and the victim of [`Index::evict_lru`] is
//! the least recently used of the candidates that [`EVICT_SAMPLE`] shards' clock hands
//! point at. The manager asks for victims ([`Index::evict_lru`],
//! [`Index::expire_inactive`]) and deletes their files; the index itself never touches
//! the disk ("eviction only decides; the caller deletes", as in Pingora).
//!
//! What costs more than the slot, and only for the objects that need it: a primary
//! record for a primary key with `Vary` variants, a reverse tag list for a tagged
//! object, a directory record per distinct directory of keys (purge by prefix).
//!
//! Lock order (deadlock freedom): object shard → primary shard → tag map → directories.
//! Nobody takes an object shard while holding any of the others.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hashbrown::HashTable;

use crate::key::{key_hash, HashMapK, KeyHash, CODING_MARK};
use crate::meta::ObjectMeta;
use crate::purge::PurgeIndex;
use crate::sync::lock;

/// Number of shards (a power of two; hashes are uniformly distributed).
pub const SHARDS: usize = 64;
/// Version stripes (a power of two): every change to an entry or a primary record
/// bumps its hash's stripe, so a worker's front ([`crate::local::front`]) can tell,
/// with one load of a line nobody writes on hits, that what it remembers still holds.
pub const VERSION_STRIPES: usize = 4096;
/// Slots per slab chunk: a shard grows by one chunk (40 KiB) at a time, so the slab
/// never holds more than one chunk of unused slots per shard.
pub const CHUNK: usize = 1024;
/// What the `keys_zone` budget counts per object: the 40-byte slot plus its share of the
/// table (4-byte slot numbers and a control byte at a load factor between 7/16 and 7/8)
/// and of the slab's last chunk; measured at 1M objects in `docs/results/index-scale.md`.
pub const ENTRY_BYTES: u64 = 64;
/// Added to [`ENTRY_BYTES`] for an object in a primary record (a `Vary` variant).
pub const VARIANT_BYTES: u64 = 96;
/// Added per tag of a tagged object (the tag set's entry and the reverse list's).
pub const TAG_BYTES: u64 = 64;
/// Shards whose clock candidates one eviction compares (the oldest goes).
pub const EVICT_SAMPLE: usize = 16;
/// Access clock ticks per second (a `u32` of them covers 8.5 years of uptime).
pub const TICKS_PER_SEC: u64 = 16;
/// Slots one [`Index::expire_inactive`] call looks at, at least (it resumes where
/// the last call stopped): a bound on the manager's pass at any index size.
pub const INACTIVE_SCAN: usize = 65_536;

const BLOCK: u64 = crate::storage::BODY_ALIGN;

// Slot flags.
const LIVE: u8 = 1;
/// Referenced since the clock hand last passed.
const REFERENCED: u8 = 2;
const SOFT_PURGED: u8 = 4;
/// Has tags in the tag map (so removal looks there).
const TAGGED: u8 = 8;
/// Is a variant in a primary record (so removal detaches it).
const IN_RECORD: u8 = 16;
/// Has (or had) compressed copies stored (so a purge by key looks for them).
const HAS_COPIES: u8 = 32;
/// Restored from a snapshot and not yet seen on disk by the loader's walk.
const UNSEEN: u8 = 64;
/// The flags a snapshot keeps.
const KEPT_FLAGS: u8 = LIVE | SOFT_PURGED | TAGGED | IN_RECORD | HAS_COPIES;

/// One object. `align(4)`: 40 bytes, 3 of them padding after the flags.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Slot {
    hash: [u32; 4],
    /// [`crate::storage::ino_key`] of the file's inode.
    ino: u32,
    gen: u32,
    /// Last access, in [`TICKS_PER_SEC`] ticks since the index was created.
    access: u32,
    /// Size on disk in 4 KiB blocks.
    blocks: u32,
    /// The directory record of the primary key (see [`crate::purge`]).
    dir: u32,
    flags: u8,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 40);

fn split(h: KeyHash) -> [u32; 4] {
    [
        h as u32,
        (h >> 32) as u32,
        (h >> 64) as u32,
        (h >> 96) as u32,
    ]
}

fn join(w: [u32; 4]) -> KeyHash {
    u128::from(w[0]) | u128::from(w[1]) << 32 | u128::from(w[2]) << 64 | u128::from(w[3]) << 96
}

fn split_ino(ino: u64) -> u32 {
    crate::storage::ino_key(ino) as u32
}

fn join_ino(w: u32) -> u64 {
    u64::from(w)
}

/// The table's hash of a key hash: its high half (the shard comes from the low bits).
fn table_hash(h: KeyHash) -> u64 {
    (h >> 64) as u64
}

/// An object as inserted: its metadata is read for what the index keeps (primary key,
/// `Vary`, tags, directory) and not kept.
#[derive(Debug, Clone, Copy)]
pub struct NewEntry<'a> {
    pub hash: KeyHash,
    pub meta: &'a ObjectMeta,
    pub disk_size: u64,
    pub ino: u64,
}

/// What the index knows of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub ino: u64,
    /// Changes whenever the entry does (insert, refresh, soft purge): what a worker's
    /// RAM tier checks its copy against.
    pub gen: u64,
    pub soft_purged: bool,
    pub disk_size: u64,
}

/// An entry taken out of the index; the caller deletes its file (if `ino` still
/// matches the file on disk).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Victim {
    pub hash: KeyHash,
    pub ino: u64,
    pub disk_size: u64,
}

/// One shard: a table of slot numbers into a chunked slab, and a clock hand.
#[derive(Default)]
struct Shard {
    table: HashTable<u32>,
    chunks: Vec<Box<[Slot]>>,
    /// Slots ever used (the slab's high-water mark); `free` holds the vacant ones.
    used: u32,
    free: Vec<u32>,
    hand: u32,
    /// Variant hash → primary hash, for the slots flagged [`IN_RECORD`].
    primary_of: HashMapK<KeyHash>,
}

fn slot_in(chunks: &[Box<[Slot]>], i: u32) -> &Slot {
    &chunks[i as usize / CHUNK][i as usize % CHUNK]
}

impl Shard {
    fn slot(&self, i: u32) -> &Slot {
        slot_in(&self.chunks, i)
    }

    fn slot_mut(&mut self, i: u32) -> &mut Slot {
        &mut self.chunks[i as usize / CHUNK][i as usize % CHUNK]
    }

    fn find(&self, hash: KeyHash) -> Option<u32> {
        let w = split(hash);
        let chunks = &self.chunks;
        self.table
            .find(table_hash(hash), |&i| slot_in(chunks, i).hash == w)
            .copied()
    }

    fn get_mut(&mut self, hash: KeyHash) -> Option<&mut Slot> {
        let i = self.find(hash)?;
        Some(self.slot_mut(i))
    }

    /// Puts `slot` in a vacant place and indexes it (the hash must be absent).
    fn add(&mut self, slot: Slot) {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                if self.used as usize == self.chunks.len() * CHUNK {
                    self.chunks
                        .push(vec![Slot::default(); CHUNK].into_boxed_slice());
                }
                self.used += 1;
                self.used - 1
            }
        };
        *self.slot_mut(i) = slot;
        let chunks = &self.chunks;
        self.table
            .insert_unique(table_hash(join(slot.hash)), i, |&j| {
                table_hash(join(slot_in(chunks, j).hash))
            });
    }

    fn take(&mut self, hash: KeyHash) -> Option<Slot> {
        let w = split(hash);
        let chunks = &self.chunks;
        let (i, _) = self
            .table
            .find_entry(table_hash(hash), |&i| slot_in(chunks, i).hash == w)
            .ok()?
            .remove();
        let s = std::mem::take(self.slot_mut(i));
        self.free.push(i);
        Some(s)
    }

    /// The slot the clock hand stops at: the next live slot not referenced since the
    /// hand last passed (clearing the bits it passes). The hand stays on it, so asking
    /// again gives the same slot until it is removed or used. None when the shard is
    /// empty, or when every slot was referenced (their bits are clear now: a slot used
    /// since the last look is never the candidate of the call that saw it used).
    fn clock_candidate(&mut self) -> Option<u32> {
        let n = self.used;
        if n == 0 || self.free.len() == n as usize {
            return None;
        }
        for _ in 0..n {
            let i = self.hand % n;
            let s = self.slot_mut(i);
            if s.flags & LIVE != 0 {
                if s.flags & REFERENCED == 0 {
                    self.hand = i;
                    return Some(i);
                }
                s.flags &= !REFERENCED;
            }
            self.hand = (i + 1) % n;
        }
        None
    }
}

/// Primary key record (only for a primary key with `Vary` variants): the `Vary` names
/// of its latest stored response and the hashes of its stored variants.
#[derive(Debug, Clone)]
struct PrimaryRec {
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
    /// Where the next eviction starts sampling shards.
    evict_cursor: AtomicUsize,
    /// Where the next inactive sweep resumes: shard and slot.
    sweep: Mutex<(usize, u32)>,
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

fn blocks_of(disk_size: u64) -> u32 {
    u32::try_from(disk_size.div_ceil(BLOCK)).unwrap_or(u32::MAX)
}

/// Whether a key names a compressed copy (see [`crate::key::coded_key`]).
fn is_copy(key: &str) -> bool {
    key.contains(CODING_MARK)
}

/// The hash of the identity object a copy's key was made from.
fn identity_of_copy(key: &str) -> Option<KeyHash> {
    let (identity, _) = key.rsplit_once(CODING_MARK)?;
    let identity = identity
        .strip_suffix(crate::key::VARIANT_SEP)
        .filter(|i| !i.contains(crate::key::VARIANT_SEP))
        .unwrap_or(identity);
    Some(key_hash(identity))
}

fn victim(hash: KeyHash, s: &Slot) -> Victim {
    Victim {
        hash,
        ino: join_ino(s.ino),
        disk_size: u64::from(s.blocks) * BLOCK,
    }
}

fn entry_of(s: &Slot) -> Entry {
    Entry {
        ino: join_ino(s.ino),
        gen: u64::from(s.gen),
        soft_purged: s.flags & SOFT_PURGED != 0,
        disk_size: u64::from(s.blocks) * BLOCK,
    }
}

impl Index {
    pub fn new() -> Index {
        Index {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
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
            evict_cursor: AtomicUsize::new(0),
            sweep: Mutex::new((0, 0)),
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

    fn new_gen(&self) -> u32 {
        // Never 0 (a RAM tier's "none").
        (self.next_gen.fetch_add(1, Ordering::Relaxed) as u32).max(1)
    }

    /// The access clock: [`TICKS_PER_SEC`] ticks since the index was created.
    pub fn now_ticks(&self) -> u32 {
        let t = self.epoch.elapsed().as_millis() as u64 * TICKS_PER_SEC / 1000;
        u32::try_from(t).unwrap_or(u32::MAX)
    }

    /// `d` in access clock ticks, rounded up.
    pub fn ticks_of(d: Duration) -> u32 {
        let t = (d.as_millis() as u64 * TICKS_PER_SEC).div_ceil(1000);
        u32::try_from(t).unwrap_or(u32::MAX)
    }

    /// Record an access to `hash` made without [`Index::get`] (a worker's front
    /// answered it): its clock bit and last access, at most once per second per object
    /// and worker.
    pub fn touch(&self, hash: KeyHash) {
        let now = self.now_ticks();
        let mut shard = lock(&self.shards[shard_of(hash)]);
        if let Some(s) = shard.get_mut(hash) {
            s.flags |= REFERENCED;
            s.access = now;
        }
    }

    pub fn entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// Index memory as the `keys_zone` budget counts it ([`ENTRY_BYTES`] per object,
    /// plus [`VARIANT_BYTES`] per `Vary` variant and [`TAG_BYTES`] per tag).
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

    /// Hashes of every stored object of a primary key except compressed copies (its
    /// `Vary` variants, and itself when stored: a response without `Vary` stored
    /// before one with it stays under the primary key beside the variants).
    pub fn variants_of(&self, primary: KeyHash) -> Vec<KeyHash> {
        let rec = {
            let p = lock(&self.primaries[shard_of(primary)]);
            p.get(&primary).map(|r| r.variants.clone())
        };
        match rec {
            Some(mut v) => {
                if !v.contains(&primary) && self.contains(primary) {
                    v.push(primary);
                }
                v
            }
            None if self.contains(primary) => vec![primary],
            None => Vec::new(),
        }
    }

    /// Whether `hash` has (or had) compressed copies stored.
    pub fn has_copies(&self, hash: KeyHash) -> bool {
        let shard = lock(&self.shards[shard_of(hash)]);
        shard
            .find(hash)
            .is_some_and(|i| shard.slot(i).flags & HAS_COPIES != 0)
    }

    /// An entry by hash (no access recorded): for maintenance.
    pub fn peek(&self, hash: KeyHash) -> Option<Entry> {
        let shard = lock(&self.shards[shard_of(hash)]);
        let i = shard.find(hash)?;
        Some(entry_of(shard.slot(i)))
    }

    /// Whether an entry exists (no access recorded).
    pub fn contains(&self, hash: KeyHash) -> bool {
        lock(&self.shards[shard_of(hash)]).find(hash).is_some()
    }

    /// Find an entry and record the access. The caller checks the key in the file.
    pub fn get(&self, hash: KeyHash) -> Option<Entry> {
        let now = self.now_ticks();
        let mut shard = lock(&self.shards[shard_of(hash)]);
        let s = shard.get_mut(hash)?;
        s.flags |= REFERENCED;
        s.access = now;
        Some(entry_of(s))
    }

    /// Insert or replace. Returns the replaced entry as a victim (its file was already
    /// replaced by the rename, so the caller only fixes accounting: nothing to delete).
    pub fn insert(&self, new: NewEntry<'_>) -> Option<Victim> {
        self.insert_inner(new, true, false).1
    }

    /// Insert only when absent (the loader must never overwrite a newer entry).
    /// `soft_purged` marks it stale at once. Returns true if inserted.
    pub fn insert_if_absent(&self, new: NewEntry<'_>, soft_purged: bool) -> bool {
        self.insert_inner(new, false, soft_purged).0
    }

    fn insert_inner(
        &self,
        new: NewEntry<'_>,
        replace: bool,
        soft_purged: bool,
    ) -> (bool, Option<Victim>) {
        let meta = new.meta;
        let primary_key = meta.primary_key();
        let primary = key_hash(primary_key);
        let copy = is_copy(&meta.key);
        // Taken before the shard (lock order); given back if the entry is not inserted.
        let dir = self.purge.dir_acquire(primary_key);
        let mut flags = LIVE;
        if soft_purged || meta.soft_purged {
            flags |= SOFT_PURGED;
        }
        if !meta.tags.is_empty() {
            flags |= TAGGED;
        }
        let mut slot = Slot {
            hash: split(new.hash),
            ino: split_ino(new.ino),
            gen: self.new_gen(),
            access: self.now_ticks(),
            blocks: blocks_of(new.disk_size),
            dir,
            flags,
        };
        let mut shard = lock(&self.shards[shard_of(new.hash)]);
        let found = shard.find(new.hash);
        if found.is_some() && !replace {
            drop(shard);
            self.purge.dir_release(dir);
            return (false, None);
        }
        let old = found.map(|i| *shard.slot(i));
        let old_primary = match &old {
            Some(o) if o.flags & IN_RECORD != 0 => shard.primary_of.remove(&new.hash),
            _ => None,
        };
        if let Some(o) = &old {
            // Before the tags go: the accounting counts them.
            self.forget_accounting(o);
            if o.flags & TAGGED != 0 {
                self.purge.remove_tags(new.hash);
            }
        }
        // A variant in its primary's record: a `Vary` response, or one without `Vary`
        // under a primary that has a record (until it goes). Copies never are.
        if !copy {
            let mut p = lock(&self.primaries[shard_of(primary)]);
            if !meta.vary.is_empty() || p.contains_key(&primary) {
                let vary: Arc<[String]> = meta.vary.clone().into();
                let rec = p.entry(primary).or_insert_with(|| PrimaryRec {
                    vary: vary.clone(),
                    variants: Vec::new(),
                });
                if replace || rec.variants.is_empty() {
                    rec.vary = vary;
                }
                if !rec.variants.contains(&new.hash) {
                    rec.variants.push(new.hash);
                }
                self.bump(primary);
                slot.flags |= IN_RECORD;
            }
        }
        if slot.flags & IN_RECORD != 0 {
            shard.primary_of.insert(new.hash, primary);
        }
        if let Some(p) = old_primary.filter(|&p| p != primary) {
            // Same hash, different primary: only on a hash collision.
            self.detach_primary(p, new.hash);
        }
        match found {
            Some(i) => *shard.slot_mut(i) = slot,
            None => shard.add(slot),
        }
        if !meta.tags.is_empty() {
            self.purge.add_tags(new.hash, &meta.tags);
        }
        self.bump(new.hash);
        self.disk_bytes
            .fetch_add(u64::from(slot.blocks) * BLOCK, Ordering::Relaxed);
        self.mem_bytes
            .fetch_add(self.mem_of(&slot), Ordering::Relaxed);
        let victim = match &old {
            Some(o) => Some(victim(new.hash, o)),
            None => {
                self.entries.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        let identity = if copy {
            identity_of_copy(&meta.key)
        } else {
            None
        };
        match identity {
            Some(id) if shard_of(id) == shard_of(new.hash) => {
                if let Some(s) = shard.get_mut(id) {
                    s.flags |= HAS_COPIES;
                }
                drop(shard);
            }
            Some(id) => {
                drop(shard);
                if let Some(s) = lock(&self.shards[shard_of(id)]).get_mut(id) {
                    s.flags |= HAS_COPIES;
                }
            }
            None => drop(shard),
        }
        if let Some(o) = &old {
            self.purge.dir_release(o.dir);
        }
        (true, victim)
    }

    fn forget_accounting(&self, s: &Slot) {
        self.mem_bytes.fetch_sub(self.mem_of(s), Ordering::Relaxed);
        self.disk_bytes
            .fetch_sub(u64::from(s.blocks) * BLOCK, Ordering::Relaxed);
    }

    /// What [`Index::mem_bytes`] counted for `s` (its tags are counted from the map,
    /// which still holds them).
    fn mem_of(&self, s: &Slot) -> u64 {
        let mut m = ENTRY_BYTES;
        if s.flags & IN_RECORD != 0 {
            m += VARIANT_BYTES;
        }
        if s.flags & TAGGED != 0 {
            m += TAG_BYTES * self.purge.tags_of(join(s.hash)) as u64;
        }
        m
    }

    fn detach_primary(&self, primary: KeyHash, hash: KeyHash) {
        let mut p = lock(&self.primaries[shard_of(primary)]);
        if let Some(rec) = p.get_mut(&primary) {
            rec.variants.retain(|&h| h != hash);
            self.bump(primary);
            if rec.variants.is_empty() {
                p.remove(&primary);
            }
        }
    }

    /// Remove an entry; with `ino` given, only if it still refers to that file (so a
    /// stale decision never removes a newer object).
    pub fn remove(&self, hash: KeyHash, ino: Option<u64>) -> Option<Victim> {
        let mut shard = lock(&self.shards[shard_of(hash)]);
        if let Some(want) = ino {
            if join_ino(shard.get_mut(hash)?.ino) != crate::storage::ino_key(want) {
                return None;
            }
        }
        let s = shard.take(hash)?;
        let dir = self.take_out(&mut shard, hash, &s);
        drop(shard);
        self.purge.dir_release(dir);
        Some(victim(hash, &s))
    }

    /// Bookkeeping for a slot just taken out of its shard (shard lock held); returns
    /// the directory to release once the shard lock is dropped.
    fn take_out(&self, shard: &mut Shard, hash: KeyHash, s: &Slot) -> u32 {
        self.bump(hash);
        self.entries.fetch_sub(1, Ordering::Relaxed);
        self.forget_accounting(s);
        if s.flags & TAGGED != 0 {
            self.purge.remove_tags(hash);
        }
        if s.flags & IN_RECORD != 0 {
            if let Some(p) = shard.primary_of.remove(&hash) {
                self.detach_primary(p, hash);
            }
        }
        s.dir
    }

    /// Mark an entry soft-purged (a new generation); returns it (the caller persists
    /// the flag in the file's header).
    pub fn set_soft_purged(&self, hash: KeyHash) -> Option<Entry> {
        let gen = self.new_gen();
        let mut shard = lock(&self.shards[shard_of(hash)]);
        let s = shard.get_mut(hash)?;
        s.flags |= SOFT_PURGED;
        s.gen = gen;
        let e = entry_of(s);
        self.bump(hash);
        Some(e)
    }

    /// After a refresh (same body): a new generation and the soft purge flag as given;
    /// with a new inode and size when the refresh had to rewrite the whole file.
    pub fn update(
        &self,
        hash: KeyHash,
        expect_ino: u64,
        soft_purged: bool,
        new_file: Option<(u64, u64)>,
    ) -> bool {
        let gen = self.new_gen();
        let mut shard = lock(&self.shards[shard_of(hash)]);
        let Some(s) = shard.get_mut(hash) else {
            return false;
        };
        if join_ino(s.ino) != crate::storage::ino_key(expect_ino) {
            return false;
        }
        let old_blocks = s.blocks;
        s.gen = gen;
        if soft_purged {
            s.flags |= SOFT_PURGED;
        } else {
            s.flags &= !SOFT_PURGED;
        }
        if let Some((ino, disk)) = new_file {
            s.ino = split_ino(ino);
            s.blocks = blocks_of(disk);
        }
        let new_blocks = s.blocks;
        self.bump(hash);
        self.disk_bytes
            .fetch_add(u64::from(new_blocks) * BLOCK, Ordering::Relaxed);
        self.disk_bytes
            .fetch_sub(u64::from(old_blocks) * BLOCK, Ordering::Relaxed);
        true
    }

    /// Take up to `max` entries out of the index, each the least recently used of the
    /// clock candidates of [`EVICT_SAMPLE`] shards (approximate global LRU with second
    /// chances).
    pub fn evict_lru(&self, max: usize) -> Vec<Victim> {
        let mut out = Vec::new();
        let mut released = Vec::new();
        // A candidate used between the sampling and the removal is passed over; bounded
        // so that a storm of hits cannot keep the manager here.
        let mut tries = max.saturating_mul(4).saturating_add(SHARDS);
        'victims: while out.len() < max && tries > 0 {
            tries -= 1;
            let start = self.evict_cursor.fetch_add(1, Ordering::Relaxed);
            // The oldest access wins; within one tick, the oldest generation.
            let mut best: Option<(usize, KeyHash, (u32, u32))> = None;
            let mut sampled = 0;
            for k in 0..SHARDS {
                let si = (start + k) % SHARDS;
                let mut shard = lock(&self.shards[si]);
                if let Some(i) = shard.clock_candidate() {
                    let s = shard.slot(i);
                    let age = (s.access, s.gen);
                    if best.is_none_or(|(_, _, a)| age < a) {
                        best = Some((si, join(s.hash), age));
                    }
                    sampled += 1;
                    if sampled == EVICT_SAMPLE {
                        break;
                    }
                }
            }
            let Some((si, h, _)) = best else { break };
            let mut shard = lock(&self.shards[si]);
            // Re-check under the lock: it may have been used or removed meanwhile.
            let still = shard
                .clock_candidate()
                .is_some_and(|i| join(shard.slot(i).hash) == h);
            if !still {
                continue 'victims;
            }
            if let Some(s) = shard.take(h) {
                released.push(self.take_out(&mut shard, h, &s));
                out.push(victim(h, &s));
            }
        }
        for d in released {
            self.purge.dir_release(d);
        }
        out
    }

    /// Take up to `max` entries not accessed since `older_than` (see
    /// [`Index::now_ticks`]) out of the index: the `inactive` expiry. Looks at
    /// [`INACTIVE_SCAN`] slots at least (and `max` × 16), resuming where the last call
    /// stopped, so a pass stays bounded at any index size; every object is looked at
    /// within entries / [`INACTIVE_SCAN`] passes.
    pub fn expire_inactive(&self, older_than: u32, max: usize) -> Vec<Victim> {
        let mut out = Vec::new();
        let mut released = Vec::new();
        let mut budget = INACTIVE_SCAN.max(max.saturating_mul(16));
        let mut sweep = lock(&self.sweep);
        let (mut si, mut pos) = *sweep;
        let mut shards_done = 0;
        while budget > 0 && out.len() < max && shards_done <= SHARDS {
            let mut shard = lock(&self.shards[si]);
            while pos < shard.used && budget > 0 && out.len() < max {
                let s = *shard.slot(pos);
                pos += 1;
                budget -= 1;
                if s.flags & LIVE == 0 || s.access >= older_than {
                    continue;
                }
                // In use (an open reader) is fine to expire: the reader keeps its fd.
                let h = join(s.hash);
                if shard.take(h).is_some() {
                    released.push(self.take_out(&mut shard, h, &s));
                    out.push(victim(h, &s));
                }
            }
            if pos >= shard.used {
                si = (si + 1) % SHARDS;
                pos = 0;
                shards_done += 1;
            }
        }
        *sweep = (si, pos);
        drop(sweep);
        for d in released {
            self.purge.dir_release(d);
        }
        out
    }

    /// Hashes of the live objects whose directory `pick` says yes to: the in-memory
    /// walk behind a purge by prefix (see [`crate::purge`]). Each shard is locked for
    /// its own walk only.
    pub fn in_dirs(&self, pick: &dyn Fn(u32) -> bool) -> Vec<(KeyHash, u32)> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            let shard = lock(s);
            for chunk in &shard.chunks {
                for slot in chunk.iter() {
                    if slot.flags & LIVE != 0 && pick(slot.dir) {
                        out.push((join(slot.hash), slot.dir));
                    }
                }
            }
        }
        out
    }

    /// The loader's walk found `hash`'s file with inode `ino` (from its directory
    /// entry). True when the index has it with that inode (now marked seen); an entry
    /// with another inode is dropped, and the file is then to be loaded like an
    /// unknown one (false).
    pub fn mark_seen(&self, hash: KeyHash, ino: u64) -> bool {
        let mut shard = lock(&self.shards[shard_of(hash)]);
        let Some(s) = shard.get_mut(hash) else {
            return false;
        };
        if join_ino(s.ino) == crate::storage::ino_key(ino) {
            s.flags &= !UNSEEN;
            return true;
        }
        drop(shard);
        self.remove(hash, None);
        false
    }

    /// After the loader's walk: drops what a snapshot named but the disk no longer has.
    pub fn drop_unseen(&self) -> usize {
        let mut n = 0;
        let mut released = Vec::new();
        for s in self.shards.iter() {
            let mut shard = lock(s);
            for i in 0..shard.used {
                let slot = *shard.slot(i);
                if slot.flags & LIVE != 0 && slot.flags & UNSEEN != 0 {
                    let h = join(slot.hash);
                    if shard.take(h).is_some() {
                        released.push(self.take_out(&mut shard, h, &slot));
                        n += 1;
                    }
                }
            }
        }
        for d in released {
            self.purge.dir_release(d);
        }
        n
    }

    /// Everything a snapshot needs, least recently used objects first.
    pub(crate) fn export(&self) -> crate::snapshot::Image {
        let (dirs, dir_ids) = self.purge.dir_table();
        let mut objects = Vec::with_capacity(self.entries() as usize);
        for s in self.shards.iter() {
            let shard = lock(s);
            for chunk in &shard.chunks {
                for slot in chunk.iter().filter(|s| s.flags & LIVE != 0) {
                    let Some(&dir) = dir_ids.get(&slot.dir) else {
                        continue;
                    };
                    objects.push((
                        (slot.access, slot.gen),
                        crate::snapshot::ObjectRec {
                            hash: join(slot.hash),
                            ino: join_ino(slot.ino),
                            blocks: slot.blocks,
                            dir,
                            flags: slot.flags & KEPT_FLAGS,
                        },
                    ));
                }
            }
        }
        objects.sort_unstable_by_key(|(age, _)| *age);
        let mut records = Vec::new();
        for p in self.primaries.iter() {
            for (h, r) in lock(p).iter() {
                records.push((*h, r.vary.to_vec(), r.variants.clone()));
            }
        }
        crate::snapshot::Image {
            dirs,
            objects: objects.into_iter().map(|(_, o)| o).collect(),
            tags: self.purge.tag_table(),
            records,
        }
    }

    /// Fills an empty index from a snapshot; returns the objects restored. Each is
    /// marked unseen until the loader's walk finds its file ([`Index::mark_seen`]).
    pub(crate) fn import(&self, img: crate::snapshot::Image) -> usize {
        let mut tagged: HashMapK<Vec<String>> = img.tags.into_iter().collect();
        let now = self.now_ticks();
        let mut n = 0;
        for o in img.objects {
            let dir = self.purge.dir_acquire(&img.dirs[o.dir as usize]);
            let mut flags = (o.flags & KEPT_FLAGS) | LIVE | UNSEEN;
            let tags = tagged.remove(&o.hash);
            if tags.is_none() {
                flags &= !TAGGED;
            }
            let slot = Slot {
                hash: split(o.hash),
                ino: split_ino(o.ino),
                gen: self.new_gen(),
                access: now,
                blocks: o.blocks,
                dir,
                flags,
            };
            let mut shard = lock(&self.shards[shard_of(o.hash)]);
            if shard.find(o.hash).is_some() {
                drop(shard);
                self.purge.dir_release(dir);
                continue;
            }
            shard.add(slot);
            if let Some(t) = tags {
                self.purge.add_tags(o.hash, &t);
            }
            self.entries.fetch_add(1, Ordering::Relaxed);
            self.disk_bytes
                .fetch_add(u64::from(slot.blocks) * BLOCK, Ordering::Relaxed);
            self.mem_bytes
                .fetch_add(self.mem_of(&slot), Ordering::Relaxed);
            n += 1;
        }
        // Records keep the variants that came back (none: no record).
        for (p, vary, mut variants) in img.records {
            variants.retain(|&v| self.contains(v));
            if variants.is_empty() {
                continue;
            }
            for &v in &variants {
                lock(&self.shards[shard_of(v)]).primary_of.insert(v, p);
            }
            let rec = PrimaryRec {
                vary: vary.into(),
                variants,
            };
            lock(&self.primaries[shard_of(p)]).insert(p, rec);
            // A worker's front may have remembered "no Vary" for `p`.
            self.bump(p);
        }
        n
    }

    /// Bytes the index's structures hold (slabs, tables, free lists, variant maps):
    /// what [`ENTRY_BYTES`] estimates, for tests and benchmarks.
    pub fn allocated_bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                let s = lock(s);
                (s.chunks.len() * CHUNK * std::mem::size_of::<Slot>()
                    + s.table.allocation_size()
                    + s.free.capacity() * 4
                    + s.chunks.capacity() * std::mem::size_of::<Box<[Slot]>>())
                    as u64
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn meta(key: &str) -> ObjectMeta {
        ObjectMeta::new(key, 200, SystemTime::now())
    }

    fn put(idx: &Index, key: &str, disk: u64) -> Option<Victim> {
        let m = meta(key);
        idx.insert(NewEntry {
            hash: key_hash(key),
            meta: &m,
            disk_size: disk,
            ino: 1,
        })
    }

    #[test]
    fn slots_are_40_bytes_and_round_trip_hashes() {
        assert_eq!(std::mem::size_of::<Slot>(), 40);
        let h = key_hash("http://h/x");
        assert_eq!(join(split(h)), h);
        assert_eq!(join_ino(split_ino(u64::MAX - 3)), u64::from(u32::MAX - 3));
    }

    #[test]
    fn insert_get_remove_accounting() {
        let idx = Index::new();
        assert!(put(&idx, "a", 8192).is_none());
        assert!(put(&idx, "b", 4096).is_none());
        assert_eq!(idx.entries(), 2);
        assert_eq!(idx.disk_bytes(), 12288);
        assert_eq!(idx.mem_bytes(), 2 * ENTRY_BYTES);
        let v = put(&idx, "a", 4096).expect("replaced");
        assert_eq!(v.disk_size, 8192);
        assert_eq!(idx.entries(), 2);
        assert_eq!(idx.disk_bytes(), 8192);
        let e = idx.get(key_hash("a")).unwrap();
        assert_eq!(e.ino, 1);
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
        assert_eq!(idx.purge_index().dir_count(), 0, "directories released");
    }

    #[test]
    fn insert_if_absent_never_overwrites() {
        let idx = Index::new();
        put(&idx, "a", 8192);
        let m = meta("a");
        let e = NewEntry {
            hash: key_hash("a"),
            meta: &m,
            disk_size: 4096,
            ino: 2,
        };
        assert!(!idx.insert_if_absent(e, false));
        assert_eq!(idx.disk_bytes(), 8192);
        assert_eq!(idx.purge_index().dir_count(), 1);
    }

    #[test]
    fn eviction_takes_the_least_recently_used_and_gives_second_chances() {
        let idx = Index::new();
        for i in 0..10 {
            put(&idx, &format!("k{i}"), 4096);
            std::thread::sleep(Duration::from_millis(70));
        }
        // k0 is used again: the newest access, and a reference bit.
        assert!(idx.get(key_hash("k0")).is_some());
        let got: Vec<KeyHash> = idx.evict_lru(3).iter().map(|v| v.hash).collect();
        let want: Vec<KeyHash> = ["k1", "k2", "k3"].iter().map(|k| key_hash(k)).collect();
        assert_eq!(got, want);
        let got: Vec<KeyHash> = idx.evict_lru(7).iter().map(|v| v.hash).collect();
        let want: Vec<KeyHash> = ["k4", "k5", "k6", "k7", "k8", "k9", "k0"]
            .iter()
            .map(|k| key_hash(k))
            .collect();
        assert_eq!(got, want);
        assert_eq!(idx.entries(), 0);
        assert!(idx.evict_lru(1).is_empty());
    }

    #[test]
    fn clock_hand_clears_reference_bits_then_stops() {
        let mut shard = Shard::default();
        for i in 0..3u128 {
            shard.add(Slot {
                hash: split(i << 6),
                flags: LIVE | REFERENCED,
                ..Slot::default()
            });
        }
        // Every slot referenced: one round clears them and names none; the next stops
        // at slot 0.
        assert_eq!(shard.clock_candidate(), None);
        assert_eq!(shard.clock_candidate(), Some(0));
        assert_eq!(shard.clock_candidate(), Some(0), "the hand stays put");
        shard.take(0);
        assert_eq!(shard.clock_candidate(), Some(1));
        shard.slot_mut(1).flags |= REFERENCED;
        assert_eq!(
            shard.clock_candidate(),
            Some(2),
            "a referenced slot is passed"
        );
    }

    #[test]
    fn hashes_sharing_their_table_hash_and_shard_stay_apart() {
        // Two keys whose hashes share the 64 bits the table hashes and the 6 bits that
        // pick the shard: the table finds both, each by its full 128-bit hash.
        let mut shard = Shard::default();
        let (a, b) = ((0xabcd_u128 << 64) | 0x40, (0xabcd_u128 << 64) | 0x80);
        assert_eq!((table_hash(a), shard_of(a)), (table_hash(b), shard_of(b)));
        shard.add(Slot {
            hash: split(a),
            ino: split_ino(1),
            flags: LIVE,
            ..Slot::default()
        });
        assert!(shard.find(b).is_none(), "a shared prefix is not a match");
        shard.add(Slot {
            hash: split(b),
            ino: split_ino(2),
            flags: LIVE,
            ..Slot::default()
        });
        let ino = |s: &Shard, h| join_ino(s.slot(s.find(h).unwrap()).ino);
        assert_eq!((ino(&shard, a), ino(&shard, b)), (1, 2));
        assert_eq!(join_ino(shard.take(a).unwrap().ino), 1);
        assert!(shard.find(a).is_none());
        assert_eq!(ino(&shard, b), 2);
    }

    #[test]
    fn inactive_expiry() {
        let idx = Index::new();
        put(&idx, "old", 4096);
        std::thread::sleep(Duration::from_millis(200));
        let cut = idx.now_ticks();
        put(&idx, "new", 4096);
        let v = idx.expire_inactive(cut, 100);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].hash, key_hash("old"));
        assert!(idx.contains(key_hash("new")));
    }

    #[test]
    fn inactive_sweep_is_bounded_and_resumes() {
        let idx = Index::new();
        let n = INACTIVE_SCAN + 5000;
        for i in 0..n {
            put(&idx, &format!("k{i}"), 4096);
        }
        let all = u32::MAX;
        let first = idx.expire_inactive(all, usize::MAX).len();
        assert!(first <= INACTIVE_SCAN.max(n), "bounded: {first}");
        let mut total = first;
        for _ in 0..4 {
            total += idx.expire_inactive(all, usize::MAX).len();
        }
        assert_eq!(total, n, "every object reached within a few passes");
        assert_eq!(idx.entries(), 0);
    }

    #[test]
    fn variants_and_vary_names() {
        let idx = Index::new();
        let mut m = meta("p\0gzip");
        m.vary = vec!["accept-encoding".into()];
        let e = NewEntry {
            hash: key_hash("p\0gzip"),
            meta: &m,
            disk_size: 4096,
            ino: 1,
        };
        idx.insert(e);
        let mut m2 = meta("p\0br");
        m2.vary = m.vary.clone();
        idx.insert(NewEntry {
            hash: key_hash("p\0br"),
            meta: &m2,
            ..e
        });
        let p = key_hash("p");
        assert_eq!(&*idx.vary_of(p).unwrap(), &["accept-encoding".to_string()]);
        assert_eq!(idx.variants_of(p).len(), 2);
        assert_eq!(idx.mem_bytes(), 2 * (ENTRY_BYTES + VARIANT_BYTES));
        idx.remove(key_hash("p\0gzip"), None);
        assert_eq!(idx.variants_of(p), vec![key_hash("p\0br")]);
        idx.remove(key_hash("p\0br"), None);
        assert!(idx.vary_of(p).is_none());
        assert!(idx.variants_of(p).is_empty());
        assert_eq!(idx.mem_bytes(), 0);
    }

    #[test]
    fn plain_objects_have_no_record_and_copies_flag_their_identity() {
        let idx = Index::new();
        put(&idx, "http://h/a", 4096);
        let p = key_hash("http://h/a");
        assert!(idx.vary_of(p).is_none());
        assert_eq!(idx.variants_of(p), vec![p]);
        assert!(!idx.has_copies(p));
        let ck = crate::key::coded_key("http://h/a", "gzip", 7);
        put(&idx, &ck, 4096);
        assert!(idx.has_copies(p));
        assert_eq!(idx.variants_of(p), vec![p], "copies are not variants");
    }

    #[test]
    fn memory_per_object_is_within_the_budget() {
        let idx = Index::new();
        let n = 200_000;
        for i in 0..n {
            put(&idx, &format!("http://h/obj/{}/{i}", i % 4), 4096);
        }
        let per = idx.allocated_bytes() as f64 / n as f64;
        assert!(per <= ENTRY_BYTES as f64, "{per:.1} bytes per object");
        assert_eq!(idx.purge_index().dir_count(), 4);
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
                            put(&idx, &k, 4096);
                        } else if i % 11 == 0 {
                            idx.remove(key_hash(&k), None);
                        } else {
                            let _ = idx.get(key_hash(&k));
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
        assert_eq!(idx.disk_bytes(), n * 4096);
        assert_eq!(idx.mem_bytes(), n * ENTRY_BYTES);
        assert_eq!(idx.purge_index().dir_count(), usize::from(n > 0));
    }
}
