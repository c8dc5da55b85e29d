//! The tables of keys behind the zones: fixed arrays of atomic words, shared by every
//! worker, read and written with compare-and-swap, never locked.
//!
//! Geometry: a table is an array of buckets sized once from the zone's `size`. A key
//! (a 64-bit hash) has two candidate buckets (two-choice hashing): it is looked for in
//! both, and a new key takes a free slot of the one with more room. Two choices keep a
//! table usable up to a high load: a new key is turned away (or evicts, in a rate
//! table) only when both of its buckets are full.
//!
//! - [`ReqTable`]: 64-byte buckets (one cache line) of four slots, each a key and its
//!   GCRA TAT (two words). When a new key finds its eight candidate slots taken, it
//!   replaces the one whose TAT is oldest: the least recently seen key, and the one
//!   whose state is worth least (a TAT in the past is the same as no state at all, so
//!   such an eviction loses nothing).
//! - [`ConnTable`]: 128-byte buckets (two cache lines) of sixteen slots, each one word
//!   holding a 44-bit key tag and a 20-bit connection count, so that a count and its
//!   owner change together in one CAS. A slot whose count is 0 is free; one with a
//!   count is never taken by another key. With all 32 candidate slots held, a new key
//!   is refused ([`ConnRefusal::Full`]): by simulation and test, not before about 85%
//!   of the slots hold keys with connections.
//!
//! Races, and why they are harmless:
//! - A rate slot's key and TAT are separate words. A key evicted between a reader's
//!   key check and its CAS on the TAT gets that one request's interval added to the new
//!   owner's TAT (one request counted against the wrong key, once, only when the table
//!   is full and the victim was in use, which the oldest-TAT rule makes rare).
//! - Two workers seeing a new key at the same instant both claim the first free
//!   candidate slot: one CAS wins and the other finds the key there (a claim's scan
//!   that meets the key stops there too). Only when a third key's claim changes a
//!   bucket's free count between their scans can they choose different buckets and
//!   the key get two slots; lookups then use the first, and the other ages out.
//! - Two different keys with the same hash (rate tables: 64 bits; connection tables:
//!   the bucket and a 44-bit tag) share one state. With a per-process random hash seed
//!   an attacker cannot aim for a collision.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Bytes of a rate-table bucket (a cache line).
pub const REQ_BUCKET_BYTES: u64 = 64;
/// Slots per rate-table bucket.
pub const REQ_WAYS: usize = 4;
/// Bytes of a connection-table bucket (two cache lines).
pub const CONN_BUCKET_BYTES: u64 = 128;
/// Slots per connection-table bucket.
pub const CONN_WAYS: usize = 16;
/// Bits of a connection slot's count; the rest is the key's tag.
pub const COUNT_BITS: u32 = 20;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const TAG_MASK: u64 = (1 << (64 - COUNT_BITS)) - 1;
/// Times a table operation starts over after losing a race before it gives up
/// (lock-free: each lost race is another worker's progress).
const TRIES: usize = 8;

#[repr(C, align(64))]
struct ReqBucket {
    keys: [AtomicU64; REQ_WAYS],
    tats: [AtomicU64; REQ_WAYS],
}

#[repr(C, align(128))]
struct ConnBucket {
    words: [AtomicU64; CONN_WAYS],
}

/// # Safety
/// The all-zero bit pattern is a valid value of the type.
unsafe trait ZeroValid {}
// SAFETY: arrays of `AtomicU64`, which has the bit validity of `u64`: zero is valid.
unsafe impl ZeroValid for ReqBucket {}
// SAFETY: as above.
unsafe impl ZeroValid for ConnBucket {}

/// `n` zeroed values, allocated with `calloc`: a large table takes memory only as its
/// pages are first written, not all at start. None when `n` is 0 or the allocation
/// fails.
fn zeroed<T: ZeroValid>(n: usize) -> Option<Box<[T]>> {
    if n == 0 || std::mem::size_of::<T>() == 0 {
        return None;
    }
    let layout = std::alloc::Layout::array::<T>(n).ok()?;
    // SAFETY: the layout's size is not zero (n > 0, T not zero-sized).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` is a live allocation of the global allocator with the layout of
    // `[T; n]` (what `Box<[T]>` frees with), and its `n` values are all-zero, which
    // `ZeroValid` says is a valid `T`.
    Some(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) })
}

/// A key's two candidate buckets out of `n`: the first from the hash's high bits
/// (multiply-shift, no modulo), the second from a remix of it.
#[inline]
fn candidates(h: u64, n: usize) -> (usize, usize) {
    let range = |x: u64| ((u128::from(x) * n as u128) >> 64) as usize;
    let b1 = range(h);
    let b2 = range(
        (h ^ (h >> 29))
            .wrapping_mul(0xbf58_476d_1ce4_e5b9)
            .rotate_left(31),
    );
    (b1, b2)
}

/// Buckets of `bucket` bytes that fit `bytes` (at least one).
fn buckets_for(bytes: u64, bucket: u64) -> usize {
    (bytes / bucket).clamp(1, u32::MAX as u64) as usize
}

/// What [`ReqTable::take`] did besides the verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Taken {
    /// The key took a slot that had never held one.
    pub new_key: bool,
    /// The key took the slot of another key (the table was full).
    pub evicted: bool,
}

/// Keys and their TATs (see the module docs).
pub struct ReqTable {
    buckets: Box<[ReqBucket]>,
}

impl ReqTable {
    /// A table within `bytes` (None: the memory cannot be had).
    pub fn new(bytes: u64) -> Option<ReqTable> {
        Some(ReqTable {
            buckets: zeroed(buckets_for(bytes, REQ_BUCKET_BYTES))?,
        })
    }

    /// Keys it can hold.
    pub fn slots(&self) -> usize {
        self.buckets.len() * REQ_WAYS
    }

    /// Bytes of its slots.
    pub fn bytes(&self) -> u64 {
        self.buckets.len() as u64 * REQ_BUCKET_BYTES
    }

    /// The slot of `key` (never 0) among its candidates.
    #[inline]
    fn find(&self, key: u64, (b1, b2): (usize, usize)) -> Option<&AtomicU64> {
        for b in [b1, b2] {
            let bucket = &self.buckets[b];
            for i in 0..REQ_WAYS {
                if bucket.keys[i].load(Relaxed) == key {
                    return Some(&bucket.tats[i]);
                }
            }
            if b1 == b2 {
                break;
            }
        }
        None
    }

    /// Applies `step` to `key`'s TAT: `step(tat)` gives the verdict and the TAT to store,
    /// or None to leave it. A key not in the table starts from TAT 0 (no state) in a
    /// free slot, else in the slot of the candidate with the oldest TAT. Returns what
    /// `step` said (None: the table lost [`TRIES`] races in a row, the request is not
    /// counted against the key) and whether a slot was taken.
    #[inline]
    pub fn take<V: Copy>(
        &self,
        key: u64,
        mut step: impl FnMut(u64) -> (V, Option<u64>),
    ) -> (Option<V>, Taken) {
        let key = key.max(1);
        let cand = candidates(key, self.buckets.len());
        let mut taken = Taken::default();
        for _ in 0..TRIES {
            if let Some(tat) = self.find(key, cand) {
                return (Some(update(tat, &mut step)), taken);
            }
            match self.claim(key, cand) {
                Claim::Found => continue,
                Claim::Lost => continue,
                Claim::Took(tat, prev, fresh) => {
                    taken.new_key |= fresh;
                    taken.evicted |= !fresh;
                    // The slot's old TAT belongs to the key it held: start from none.
                    let (v, next) = step(0);
                    match next {
                        None => return (Some(v), taken),
                        Some(n) => {
                            if tat.compare_exchange(prev, n, Relaxed, Relaxed).is_ok() {
                                return (Some(v), taken);
                            }
                            // Another worker stored for this key already: go on from
                            // its value.
                            return (Some(update(tat, &mut step)), taken);
                        }
                    }
                }
            }
        }
        (None, taken)
    }

    /// Takes a slot for `key`: the first free one of the candidate bucket with more
    /// free slots, else the oldest-TAT one.
    fn claim(&self, key: u64, (b1, b2): (usize, usize)) -> Claim<'_> {
        let both = if b1 == b2 { &[b1][..] } else { &[b1, b2][..] };
        // (bucket, first free slot, free slots)
        let mut roomiest: Option<(usize, usize, usize)> = None;
        for &b in both {
            let keys = &self.buckets[b].keys;
            let (mut free, mut first) = (0, None);
            for (i, k) in keys.iter().enumerate() {
                match k.load(Relaxed) {
                    0 => {
                        free += 1;
                        first.get_or_insert(i);
                    }
                    // Another worker took a slot for this key since `find` looked: use
                    // it (without this check a racer that saw the other bucket roomier
                    // took a second slot, and a burst of 0 admitted two).
                    k if k == key => return Claim::Found,
                    _ => {}
                }
            }
            if let Some(i) = first {
                if roomiest.is_none_or(|(_, _, f)| free > f) {
                    roomiest = Some((b, i, free));
                }
            }
        }
        if let Some((b, i, _)) = roomiest {
            let bucket = &self.buckets[b];
            return match bucket.keys[i].compare_exchange(0, key, Relaxed, Relaxed) {
                Ok(_) => Claim::Took(&bucket.tats[i], bucket.tats[i].load(Relaxed), true),
                Err(k) if k == key => Claim::Found,
                Err(_) => Claim::Lost,
            };
        }
        // Full: the least recently seen of the candidates goes.
        let mut victim: Option<(&ReqBucket, usize, u64, u64)> = None;
        for &b in both {
            let bucket = &self.buckets[b];
            for i in 0..REQ_WAYS {
                let k = bucket.keys[i].load(Relaxed);
                let t = bucket.tats[i].load(Relaxed);
                if k == key {
                    return Claim::Found;
                }
                if victim.is_none_or(|(_, _, _, vt)| t < vt) {
                    victim = Some((bucket, i, k, t));
                }
            }
        }
        let Some((bucket, i, k, _)) = victim else {
            return Claim::Lost;
        };
        match bucket.keys[i].compare_exchange(k, key, Relaxed, Relaxed) {
            Ok(_) => Claim::Took(&bucket.tats[i], bucket.tats[i].load(Relaxed), false),
            Err(now) if now == key => Claim::Found,
            Err(_) => Claim::Lost,
        }
    }

    /// Moves `key`'s TAT back by `by` (a request counted by one zone and refused by
    /// another is given back, as nginx accounts a request only when every zone takes
    /// it). A key no longer in the table has nothing to give back.
    pub fn give_back(&self, key: u64, by: u64) {
        let key = key.max(1);
        if let Some(tat) = self.find(key, candidates(key, self.buckets.len())) {
            let _ = tat.fetch_update(Relaxed, Relaxed, |t| Some(t.saturating_sub(by)));
        }
    }

    /// The TAT of `key`, if it is in the table (for tests and `/status`).
    pub fn tat(&self, key: u64) -> Option<u64> {
        let key = key.max(1);
        self.find(key, candidates(key, self.buckets.len()))
            .map(|t| t.load(Relaxed))
    }

    /// Slots holding a key (a scan: for tests and reports, not the request path).
    pub fn occupied(&self) -> usize {
        self.buckets
            .iter()
            .map(|b| b.keys.iter().filter(|k| k.load(Relaxed) != 0).count())
            .sum()
    }
}

enum Claim<'a> {
    /// The key is in the table now (another worker put it there): look again.
    Found,
    /// A slot changed under the scan: start over.
    Lost,
    /// This slot is the key's now: its TAT word, the TAT read when it was taken, and
    /// whether it was free (else another key was evicted).
    Took(&'a AtomicU64, u64, bool),
}

/// The CAS loop on one TAT.
#[inline]
fn update<V: Copy>(tat: &AtomicU64, step: &mut impl FnMut(u64) -> (V, Option<u64>)) -> V {
    let mut cur = tat.load(Relaxed);
    loop {
        let (v, next) = step(cur);
        let Some(next) = next else {
            return v;
        };
        match tat.compare_exchange_weak(cur, next, Relaxed, Relaxed) {
            Ok(_) => return v,
            Err(now) => cur = now,
        }
    }
}

/// Why [`ConnTable::acquire`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnRefusal {
    /// The key holds `max` connections already.
    Over,
    /// Every candidate slot of the key is held by other keys: the table is full of
    /// keys with open connections (refused: a limit that cannot count lets nothing
    /// through).
    Full,
}

/// Connection counts per key (see the module docs).
pub struct ConnTable {
    buckets: Box<[ConnBucket]>,
}

/// A key's tag in a connection slot: its low 44 bits, never 0.
#[inline]
fn tag(h: u64) -> u64 {
    (h & TAG_MASK).max(1)
}

impl ConnTable {
    /// A table within `bytes` (None: the memory cannot be had).
    pub fn new(bytes: u64) -> Option<ConnTable> {
        Some(ConnTable {
            buckets: zeroed(buckets_for(bytes, CONN_BUCKET_BYTES))?,
        })
    }

    pub fn slots(&self) -> usize {
        self.buckets.len() * CONN_WAYS
    }

    pub fn bytes(&self) -> u64 {
        self.buckets.len() as u64 * CONN_BUCKET_BYTES
    }

    fn word(&self, slot: usize) -> Option<&AtomicU64> {
        self.buckets
            .get(slot / CONN_WAYS)
            .map(|b| &b.words[slot % CONN_WAYS])
    }

    /// Counts one more connection for `key`, if it holds fewer than `max` (at most
    /// 2^20 - 1); the slot to [`release`](Self::release) it with.
    pub fn acquire(&self, key: u64, max: u64) -> Result<usize, ConnRefusal> {
        let t = tag(key);
        let max = max.min(COUNT_MASK);
        let (b1, b2) = candidates(key, self.buckets.len());
        let both = if b1 == b2 { &[b1][..] } else { &[b1, b2][..] };
        'again: for _ in 0..TRIES {
            // The first free slot of the candidate bucket with more free slots.
            let mut free: Option<(usize, usize, u64)> = None;
            let mut most_free = 0;
            for &b in both {
                let mut first: Option<(usize, u64)> = None;
                let mut n_free = 0;
                for i in 0..CONN_WAYS {
                    let w = self.buckets[b].words[i].load(Relaxed);
                    let count = w & COUNT_MASK;
                    if count == 0 {
                        n_free += 1;
                        first.get_or_insert((i, w));
                        continue;
                    }
                    if w >> COUNT_BITS != t {
                        continue;
                    }
                    if count >= max {
                        return Err(ConnRefusal::Over);
                    }
                    match self.buckets[b].words[i].compare_exchange(w, w + 1, Relaxed, Relaxed) {
                        Ok(_) => return Ok(b * CONN_WAYS + i),
                        Err(_) => continue 'again,
                    }
                }
                if let Some((i, w)) = first {
                    if n_free > most_free {
                        most_free = n_free;
                        free = Some((b, i, w));
                    }
                }
            }
            let Some((b, i, w)) = free else {
                return Err(ConnRefusal::Full);
            };
            let mine = (t << COUNT_BITS) | 1;
            if self.buckets[b].words[i]
                .compare_exchange(w, mine, Relaxed, Relaxed)
                .is_ok()
            {
                return Ok(b * CONN_WAYS + i);
            }
        }
        // Lost every race: refuse (fail closed, as when full).
        Err(ConnRefusal::Full)
    }

    /// Gives back one connection of the slot `acquire` returned.
    pub fn release(&self, slot: usize) {
        if let Some(w) = self.word(slot) {
            // The slot holds this connection's count: it is at least 1 and no other
            // key can take the slot meanwhile.
            let _ = w.fetch_update(Relaxed, Relaxed, |w| (w & COUNT_MASK != 0).then(|| w - 1));
        }
    }

    /// Connections counted in a slot.
    pub fn count(&self, slot: usize) -> u64 {
        self.word(slot).map_or(0, |w| w.load(Relaxed) & COUNT_MASK)
    }

    /// Whether `slot` holds `key`'s count.
    pub fn holds(&self, slot: usize, key: u64) -> bool {
        self.word(slot).is_some_and(|w| {
            let w = w.load(Relaxed);
            w & COUNT_MASK != 0 && w >> COUNT_BITS == tag(key)
        })
    }

    /// Keys with connections (a scan: for tests and reports).
    pub fn occupied(&self) -> usize {
        self.buckets
            .iter()
            .map(|b| {
                b.words
                    .iter()
                    .filter(|w| w.load(Relaxed) & COUNT_MASK != 0)
                    .count()
            })
            .sum()
    }
}
