//! A per-thread cache of generated object bodies, so hot objects are copied (or
//! `sendfile`d), not regenerated.
//!
//! How it fits: generating content runs at a few GB/s, about as fast as loopback TCP
//! moves it, so for a 1 MiB object generation was most of the origin's CPU per request.
//! `respond.rs` asks this cache for every object body it is about to send (objects up to
//! [`MAX_CACHED_OBJECT`]); a miss generates the whole object once, records its checksum,
//! and keeps it under a byte budget (oldest first out). Bigger objects always stream
//! from the generator, so a 1 GiB object never enters memory. One cache per serving
//! thread: no locks, and `Rc` is enough.
//!
//! Hot big objects (from [`FILE_MIN`], on their second request) move into a memfd and are
//! sent with `sendfile(2)`, as nginx sends page-cache files: the kernel takes the pages
//! by reference, saving the copy into the socket. Only on the second request, because
//! filling a memfd costs about as much as generating the object (and a fresh one several
//! times that: the kernel allocates and later frees its pages), which one-hit objects,
//! the common case behind a cache, should not pay. Evicted memfds are kept in a small
//! pool and overwritten, so their pages are reused.

use crate::content::{self, Kind};
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::rc::Rc;

/// Largest object kept whole.
pub const MAX_CACHED_OBJECT: u64 = 1 << 20;
/// Objects this big or bigger are kept in a memfd (and sent with `sendfile`); smaller
/// ones in memory. The floor also bounds the descriptors one thread holds
/// (`BUDGET_BYTES / FILE_MIN` = 128).
pub const FILE_MIN: u64 = 256 << 10;
/// Bytes of bodies one thread keeps.
pub const BUDGET_BYTES: usize = 32 << 20;
/// Evicted memfds kept for reuse.
const FILE_POOL: usize = 8;

/// A generated whole object.
#[derive(Debug, Clone)]
pub enum Cached {
    Bytes(Rc<Vec<u8>>),
    /// A memfd holding the object, and its length.
    File(Rc<File>, u64),
}

impl Cached {
    pub fn len(&self) -> u64 {
        match self {
            Cached::Bytes(b) => b.len() as u64,
            Cached::File(_, n) => *n,
        }
    }
}

type Key = (Kind, u64, u64);

/// Generated bodies of one thread, oldest evicted first.
#[derive(Default)]
pub struct BodyCache {
    map: HashMap<Key, Cached>,
    order: VecDeque<Key>,
    bytes: usize,
    /// Evicted memfds nobody else holds, to be overwritten.
    pool: Vec<File>,
}

impl BodyCache {
    /// The whole body of (kind, size, id), generated on a miss; `None` for objects above
    /// [`MAX_CACHED_OBJECT`].
    pub fn get(&mut self, kind: Kind, size: u64, id: u64) -> Option<Cached> {
        if size > MAX_CACHED_OBJECT {
            return None;
        }
        let key = (kind, size, id);
        if let Some(c) = self.map.get_mut(&key) {
            if let (Cached::Bytes(bytes), true) = (&*c, size >= FILE_MIN) {
                // Second request of a big object: move it into a memfd for sendfile.
                if let Some(f) = fill_file(self.pool.pop(), bytes) {
                    *c = Cached::File(Rc::new(f), size);
                }
            }
            return Some(c.clone());
        }
        let mut body = vec![0u8; size as usize];
        content::fill(kind, size, id, 0, &mut body);
        content::remember_checksum(kind, size, id, twox_hash::XxHash3_64::oneshot(&body));
        let cached = Cached::Bytes(Rc::new(body));
        self.bytes += size as usize;
        self.map.insert(key, cached.clone());
        self.order.push_back(key);
        while self.bytes > BUDGET_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(c) = self.map.remove(&old) {
                self.bytes -= c.len() as usize;
                if let Cached::File(f, _) = c {
                    // Reused only if no reply in flight still sends from it.
                    if let (Ok(f), true) = (Rc::try_unwrap(f), self.pool.len() < FILE_POOL) {
                        self.pool.push(f);
                    }
                }
            }
        }
        Some(cached)
    }

    /// Bytes held (for tests).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.bytes
    }
}

/// Writes `bytes` into `reuse` (an evicted memfd, trimmed to size) or a new memfd.
fn fill_file(reuse: Option<File>, bytes: &[u8]) -> Option<File> {
    use std::os::unix::fs::FileExt;
    match reuse {
        Some(f) => {
            f.set_len(bytes.len() as u64).ok()?;
            f.write_all_at(bytes, 0).ok()?;
            Some(f)
        }
        None => memfd(bytes),
    }
}

/// An anonymous in-memory file (`memfd_create`) holding `bytes`; `None` if the kernel
/// refuses (then the caller keeps the bytes in memory).
pub fn memfd(bytes: &[u8]) -> Option<File> {
    // SAFETY: the name is a NUL-terminated static C string; memfd_create only reads it
    // and returns a new descriptor or -1.
    let fd = unsafe { libc::memfd_create(c"edgeorigin-body".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just returned by memfd_create, is open, and nothing else owns it;
    // the File takes sole ownership and closes it on drop.
    let mut f = unsafe { File::from_raw_fd(fd) };
    f.write_all(bytes).ok()?;
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn bytes_of(c: &Cached) -> Vec<u8> {
        match c {
            Cached::Bytes(b) => b.to_vec(),
            Cached::File(f, n) => {
                let mut v = vec![0u8; *n as usize];
                f.read_exact_at(&mut v, 0).unwrap();
                v
            }
        }
    }

    #[test]
    fn hits_return_the_same_generated_bytes() {
        let mut c = BodyCache::default();
        for size in [5000u64, FILE_MIN, MAX_CACHED_OBJECT] {
            let a = c.get(Kind::Obj, size, 1).unwrap();
            assert!(matches!(a, Cached::Bytes(_)), "first request: bytes");
            let b = c.get(Kind::Obj, size, 1).unwrap();
            assert_eq!(
                matches!(b, Cached::File(..)),
                size >= FILE_MIN,
                "second: memfd if big"
            );
            let b2 = c.get(Kind::Obj, size, 1).unwrap();
            match (&b, &b2) {
                (Cached::Bytes(x), Cached::Bytes(y)) => assert!(Rc::ptr_eq(x, y), "a hit"),
                (Cached::File(x, _), Cached::File(y, _)) => assert!(Rc::ptr_eq(x, y), "a hit"),
                _ => panic!("hit changed representation"),
            }
            let mut expect = vec![0u8; size as usize];
            content::fill(Kind::Obj, size, 1, 0, &mut expect);
            assert_eq!(bytes_of(&a), expect);
            assert_eq!(bytes_of(&b), expect);
            assert_eq!(
                content::checksum_of(Kind::Obj, size, 1),
                twox_hash::XxHash3_64::oneshot(&expect)
            );
        }
        assert!(c.get(Kind::Obj, MAX_CACHED_OBJECT + 1, 1).is_none());
    }

    #[test]
    fn evicted_memfds_are_reused_only_when_free() {
        let mut c = BodyCache::default();
        let n = BUDGET_BYTES as u64 / MAX_CACHED_OBJECT;
        // Promote every object (two requests each); hold on to object 0's memfd.
        let mut held = None;
        for id in 0..n {
            c.get(Kind::Obj, MAX_CACHED_OBJECT, id).unwrap();
            let f = c.get(Kind::Obj, MAX_CACHED_OBJECT, id).unwrap();
            if id == 0 {
                held = Some(f);
            }
        }
        // Two more objects evict objects 0 and 1: 1 goes to the pool, 0 is still in use.
        c.get(Kind::Obj, MAX_CACHED_OBJECT, n).unwrap();
        c.get(Kind::Obj, MAX_CACHED_OBJECT, n + 1).unwrap();
        assert_eq!(c.pool.len(), 1);
        let mut expect = vec![0u8; MAX_CACHED_OBJECT as usize];
        content::fill(Kind::Obj, MAX_CACHED_OBJECT, 0, 0, &mut expect);
        assert_eq!(
            bytes_of(&held.unwrap()),
            expect,
            "an in-flight body is never overwritten"
        );
        // A promotion now overwrites the pooled memfd with the right bytes.
        let f = c.get(Kind::Obj, MAX_CACHED_OBJECT, n).unwrap();
        assert!(matches!(f, Cached::File(..)));
        assert!(c.pool.is_empty());
        content::fill(Kind::Obj, MAX_CACHED_OBJECT, n, 0, &mut expect);
        assert_eq!(bytes_of(&f), expect);
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

    #[test]
    fn memfd_holds_the_bytes() {
        let f = memfd(b"hello memfd").unwrap();
        let mut v = vec![0u8; 5];
        f.read_exact_at(&mut v, 6).unwrap();
        assert_eq!(&v, b"memfd");
        assert_eq!(f.metadata().unwrap().len(), 11);
    }
}
