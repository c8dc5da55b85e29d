//! A per-thread cache of generated object bodies, so hot objects are copied, not
//! regenerated.
//!
//! How it fits: generating content runs at a few GB/s, about as fast as loopback TCP
//! moves it, so for a 1 MiB object generation was most of the origin's CPU per request.
//! `respond.rs` asks this cache for every object body it is about to send (objects up to
//! [`MAX_CACHED_OBJECT`]); a miss generates the whole object once, records its checksum,
//! and keeps it under a byte budget (oldest first out). Bigger objects always stream
//! from the generator, so a 1 GiB object never enters memory. One cache per serving
//! thread: no locks, and `Rc` is enough.

use crate::content::{self, Kind};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

/// Largest object kept whole in memory.
pub const MAX_CACHED_OBJECT: u64 = 1 << 20;
/// Bytes of bodies one thread keeps.
pub const BUDGET_BYTES: usize = 32 << 20;

type Key = (Kind, u64, u64);

/// Generated bodies of one thread, oldest evicted first.
#[derive(Default)]
pub struct BodyCache {
    map: HashMap<Key, Rc<Vec<u8>>>,
    order: VecDeque<Key>,
    bytes: usize,
}

impl BodyCache {
    /// The whole body of (kind, size, id), generated on a miss; `None` for objects above
    /// [`MAX_CACHED_OBJECT`].
    pub fn get(&mut self, kind: Kind, size: u64, id: u64) -> Option<Rc<Vec<u8>>> {
        if size > MAX_CACHED_OBJECT {
            return None;
        }
        let key = (kind, size, id);
        if let Some(b) = self.map.get(&key) {
            return Some(b.clone());
        }
        let mut body = vec![0u8; size as usize];
        content::fill(kind, size, id, 0, &mut body);
        content::remember_checksum(kind, size, id, xxhash_rust::xxh3::xxh3_64(&body));
        let body = Rc::new(body);
        self.bytes += body.len();
        self.map.insert(key, body.clone());
        self.order.push_back(key);
        while self.bytes > BUDGET_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(b) = self.map.remove(&old) {
                self.bytes -= b.len();
            }
        }
        Some(body)
    }

    /// Bytes held (for tests).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_return_the_same_generated_bytes() {
        let mut c = BodyCache::default();
        let a = c.get(Kind::Obj, 5000, 1).unwrap();
        let b = c.get(Kind::Obj, 5000, 1).unwrap();
        assert!(Rc::ptr_eq(&a, &b), "second get is a hit");
        let mut expect = vec![0u8; 5000];
        content::fill(Kind::Obj, 5000, 1, 0, &mut expect);
        assert_eq!(*a, expect);
        assert_eq!(
            content::checksum_of(Kind::Obj, 5000, 1),
            xxhash_rust::xxh3::xxh3_64(&expect)
        );
        assert!(c.get(Kind::Obj, MAX_CACHED_OBJECT + 1, 1).is_none());
    }

    #[test]
    fn stays_within_budget() {
        let mut c = BodyCache::default();
        let n = BUDGET_BYTES as u64 / MAX_CACHED_OBJECT + 5;
        for id in 0..n {
            c.get(Kind::Txt, MAX_CACHED_OBJECT, id).unwrap();
            assert!(c.held() <= BUDGET_BYTES);
        }
        assert!(
            !c.map.contains_key(&(Kind::Txt, MAX_CACHED_OBJECT, 0)),
            "oldest evicted"
        );
        assert!(
            c.map.contains_key(&(Kind::Txt, MAX_CACHED_OBJECT, n - 1)),
            "newest kept"
        );
    }
}
