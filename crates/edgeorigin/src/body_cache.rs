//! A per-thread cache of generated object bodies, so hot objects are copied (or
//! `sendfile`d), not regenerated.
//!
//! How it fits: generating content runs at a few GB/s, about as fast as loopback TCP
//! moves it, so for a 1 MiB object generation was most of the origin's CPU per request.
//! `respond.rs` asks this cache for every object body it is about to send (objects up to
//! [`MAX_CACHED_OBJECT`]); a miss generates the whole object once, records its checksum,
//! and keeps it under a byte budget (oldest first out). Objects from [`FILE_MIN`] up are
//! kept in a memfd and sent with `sendfile(2)`, as nginx sends page-cache files: the
//! kernel takes the pages by reference, saving the copy into the socket. Bigger objects
//! always stream from the generator, so a 1 GiB object never enters memory. One cache
//! per serving thread: no locks, and `Rc` is enough.

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
}

impl BodyCache {
    /// The whole body of (kind, size, id), generated on a miss; `None` for objects above
    /// [`MAX_CACHED_OBJECT`].
    pub fn get(&mut self, kind: Kind, size: u64, id: u64) -> Option<Cached> {
        if size > MAX_CACHED_OBJECT {
            return None;
        }
        let key = (kind, size, id);
        if let Some(c) = self.map.get(&key) {
            return Some(c.clone());
        }
        let mut body = vec![0u8; size as usize];
        content::fill(kind, size, id, 0, &mut body);
        content::remember_checksum(kind, size, id, xxhash_rust::xxh3::xxh3_64(&body));
        let cached = match (size >= FILE_MIN).then(|| memfd(&body)).flatten() {
            Some(f) => Cached::File(Rc::new(f), size),
            None => Cached::Bytes(Rc::new(body)), // small, or no memfd: keep the bytes
        };
        self.bytes += size as usize;
        self.map.insert(key, cached.clone());
        self.order.push_back(key);
        while self.bytes > BUDGET_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(c) = self.map.remove(&old) {
                self.bytes -= c.len() as usize;
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
            assert_eq!(matches!(a, Cached::File(..)), size >= FILE_MIN, "{size}");
            let b = c.get(Kind::Obj, size, 1).unwrap();
            match (&a, &b) {
                (Cached::Bytes(x), Cached::Bytes(y)) => assert!(Rc::ptr_eq(x, y), "a hit"),
                (Cached::File(x, _), Cached::File(y, _)) => assert!(Rc::ptr_eq(x, y), "a hit"),
                _ => panic!("hit changed representation"),
            }
            let mut expect = vec![0u8; size as usize];
            content::fill(Kind::Obj, size, 1, 0, &mut expect);
            assert_eq!(bytes_of(&a), expect);
            assert_eq!(
                content::checksum_of(Kind::Obj, size, 1),
                xxhash_rust::xxh3::xxh3_64(&expect)
            );
        }
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

    #[test]
    fn memfd_holds_the_bytes() {
        let f = memfd(b"hello memfd").unwrap();
        let mut v = vec![0u8; 5];
        f.read_exact_at(&mut v, 6).unwrap();
        assert_eq!(&v, b"memfd");
        assert_eq!(f.metadata().unwrap().len(), 11);
    }
}
