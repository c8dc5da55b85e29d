//! Large file bodies written from a mapping of the file: the head and the body in one
//! `writev`, instead of the head alone and then `sendfile(2)`.
//!
//! Why: on loopback under BBR (the machine `edgebench` runs on), TCP sends a 1 MiB body
//! given to it by `sendfile` on pacing timers, about 10 per response (`tcp_pace_kick`),
//! each an interrupt and a softirq on the server's CPU; splicing from a pipe already
//! holding the whole body does the same. The same body written from memory in one call
//! leaves in a burst (about 2 timers) and costs about half the CPU, although it is a
//! copy (`docs/results/large-hits.md`, which also lists what did not help). Up to about 448 KiB there is little pacing to avoid
//! and `sendfile`'s zero copy wins (256 KiB: half the CPU of the mapped write), at
//! 512 KiB the write wins (0.56x): `aio.sendfile_max` is the switch-over (448 KiB
//! under the default `"auto"`). That was one host; on another, whose memory is slow,
//! sendfile costs less than the copy even at 1 MiB, so under `"auto"` each worker
//! measures both and keeps the cheaper ([`super::large_send`]).
//!
//! The mapping is made once per object and kept while the object is hit ([`MapCache`],
//! one per worker, bounded and swept like the open-file cache it sits beside): a fresh
//! mapping per response would cost page faults and a `munmap`, whose TLB shootdown
//! interrupts every other worker of the process. Only the kernel reads the mapped bytes
//! (`edge_aio::FileMap` says why): they go to a plain TCP (or kernel TLS) socket, never
//! to user-space TLS or HTTP/2.

use super::conn::{ClientIo, Conn};
use edge_aio::FileMap;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Bytes of mappings one worker keeps at most (virtual: the pages are the page cache's).
/// Big enough for a warm set of large slices: at 256 MiB, 640 warm 1 MiB slices were
/// mapped and unmapped on most hits (`edgebench video`: 0.82x nginx's req/s, 1.07x at
/// 2 GiB). A mapping costs page tables only for the pages it touched.
pub const CACHE_BYTES: u64 = 2 << 30;
/// Largest body that is mapped; larger ones go by `sendfile`.
pub const MAX_BODY: u64 = 16 << 20;
/// Largest single write from a mapping (the first one carries the head too): keeps one
/// connection from holding the loop for long, as `sendfile`'s 1 MiB chunks do.
const WRITE_CHUNK: usize = 1 << 20;

/// How long mappings live, from the open-file cache's settings: a mapping is kept like
/// the descriptor beside it (`open_file_cache = "off"` turns mappings off too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapLimits {
    /// Most mappings kept (0: none).
    pub max: usize,
    /// A mapping unused for this many sweeps (seconds) is dropped.
    pub inactive_ticks: u64,
}

struct Slot {
    /// Keeps the key (the `File`'s address) from being reused while the slot lives.
    _file: Arc<File>,
    offset: u64,
    map: Rc<FileMap>,
    /// Recency stamp (the least recent goes first when the cache is full).
    used: u64,
    /// The sweep count when last used.
    tick: u64,
}

/// One worker's mappings of object bodies, keyed by the open `File` they map (the
/// open-file cache hands out the same `Arc<File>` for every hit of an object while it
/// keeps its descriptor; a replaced object has a new file, hence a new key). A purged
/// or evicted object's mapping is never used again and is dropped by [`MapCache::sweep`]
/// within `inactive`, which releases its disk space, as the descriptor's close does.
#[derive(Default)]
pub struct MapCache {
    slots: HashMap<usize, Slot>,
    bytes: u64,
    clock: u64,
    tick: u64,
}

impl MapCache {
    /// The kept mapping of `len` bytes at `offset` of `file`, if there is one (it
    /// counts as used).
    pub fn get(&mut self, file: &Arc<File>, offset: u64, len: u64) -> Option<Rc<FileMap>> {
        self.clock += 1;
        let s = self.slots.get_mut(&key(file))?;
        if s.offset != offset || s.map.len() as u64 != len {
            return None;
        }
        s.used = self.clock;
        s.tick = self.tick;
        Some(s.map.clone())
    }

    /// Maps `len` bytes at `offset` of `file` and keeps the mapping (replacing one of
    /// another extent of the same file, and making room least recently used first).
    /// None when mappings are off, the body is larger than [`MAX_BODY`], or `mmap`
    /// failed (the caller then sends by `sendfile`).
    pub fn insert(
        &mut self,
        file: &Arc<File>,
        offset: u64,
        len: u64,
        limits: MapLimits,
    ) -> Option<Rc<FileMap>> {
        if limits.max == 0 || len == 0 || len > MAX_BODY {
            return None;
        }
        self.remove(file);
        let map = Rc::new(FileMap::new(file, offset, len as usize).ok()?);
        while !self.slots.is_empty()
            && (self.slots.len() >= limits.max || self.bytes + len > CACHE_BYTES)
        {
            self.evict_lru();
        }
        self.clock += 1;
        self.bytes += len;
        self.slots.insert(
            key(file),
            Slot {
                _file: file.clone(),
                offset,
                map: map.clone(),
                used: self.clock,
                tick: self.tick,
            },
        );
        Some(map)
    }

    /// Drops the mapping of `file`, if kept (a response writing from it keeps it until
    /// done).
    pub fn remove(&mut self, file: &Arc<File>) {
        if let Some(s) = self.slots.remove(&key(file)) {
            self.bytes -= s.map.len() as u64;
        }
    }

    fn evict_lru(&mut self) {
        if let Some((&key, _)) = self.slots.iter().min_by_key(|(_, s)| s.used) {
            let s = self.slots.remove(&key).expect("just found");
            self.bytes -= s.map.len() as u64;
        }
    }

    /// Once a second: drops the mappings unused for `inactive_ticks` sweeps, and all
    /// of them when mappings are off. A response still writing from one keeps it (an
    /// `Rc`) until it is done.
    pub fn sweep(&mut self, limits: MapLimits) {
        self.tick += 1;
        let tick = self.tick;
        if limits.max == 0 {
            self.slots.clear();
        } else {
            self.slots
                .retain(|_, s| tick.saturating_sub(s.tick) < limits.inactive_ticks);
            while self.slots.len() > limits.max {
                self.evict_lru();
            }
        }
        self.bytes = self.slots.values().map(|s| s.map.len() as u64).sum();
    }

    /// Mappings kept.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Bytes mapped.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// A kept mapping's key: the address of the `File` it maps (the slot holds the `Arc`,
/// so the address is not reused while the slot lives).
fn key(file: &Arc<File>) -> usize {
    Arc::as_ptr(file) as usize
}

/// Writes `head`, then bytes `range` of `map`, to a plain TCP connection (or one whose
/// TLS the kernel does): the head and the first MiB in one `writev`, the rest a MiB at
/// a time; each write must make progress within `limit`. `EFAULT` means the file
/// shrank under the mapping (the caller treats it as a damaged object); other errors
/// are the client's. A connection whose bytes user-space code would read (TLS in
/// rustls, HTTP/2) is refused with `Unsupported` before anything is written.
pub async fn write_mapped(
    conn: &mut Conn,
    head: &[u8],
    map: &FileMap,
    range: Range<usize>,
    limit: Duration,
) -> io::Result<()> {
    if !matches!(conn.io, ClientIo::Tcp(_)) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a mapped body goes only to a kernel socket",
        ));
    }
    // SAFETY: the bytes go only to writev(2)/write(2) on a kernel socket (checked
    // above: `ClientIo::Tcp` writes are plain syscalls, kernel TLS included), which
    // copy them and report a page that cannot be read as EFAULT; no code here reads
    // them. `map` outlives every write below.
    let body = unsafe { map.kernel_bytes(range) };
    let first = body.len().min(WRITE_CHUNK);
    conn.write_two(head, &body[..first], limit).await?;
    for piece in body[first..].chunks(WRITE_CHUNK) {
        conn.write_all(piece, limit).await?;
    }
    Ok(())
}

/// Whether an error of [`write_mapped`] says the file shrank under the mapping.
pub fn is_file_fault(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EFAULT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn file_of(len: usize) -> (Arc<File>, Vec<u8>) {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..len).map(|i| (i * 13 % 251) as u8).collect();
        f.write_all(&data).unwrap();
        (Arc::new(f), data)
    }

    const ON: MapLimits = MapLimits {
        max: 3,
        inactive_ticks: 2,
    };

    #[test]
    fn a_file_is_mapped_once_and_kept_while_used() {
        let mut c = MapCache::default();
        let (f, _) = file_of(3 * 4096);
        assert!(c.get(&f, 4096, 8192).is_none());
        let a = c.insert(&f, 4096, 8192, ON).unwrap();
        let b = c.get(&f, 4096, 8192).unwrap();
        assert!(Rc::ptr_eq(&a, &b));
        assert_eq!((c.len(), c.bytes()), (1, 8192));
        // Another body extent of the same file is not that mapping; it replaces it.
        assert!(c.get(&f, 0, 4096).is_none());
        let d = c.insert(&f, 0, 4096, ON).unwrap();
        assert!(!Rc::ptr_eq(&a, &d));
        assert_eq!((c.len(), c.bytes()), (1, 4096));
        // Used within `inactive`: kept; then idle for it: dropped.
        c.sweep(ON);
        assert!(c.get(&f, 0, 4096).is_some());
        c.sweep(ON);
        assert_eq!(c.len(), 1);
        c.sweep(ON);
        c.sweep(ON);
        assert!(c.is_empty());
        assert_eq!(c.bytes(), 0);
        // Dropped on request; a response still holding it keeps it mapped.
        let e = c.insert(&f, 0, 4096, ON).unwrap();
        c.remove(&f);
        assert!(c.is_empty() && c.get(&f, 0, 4096).is_none());
        assert_eq!(e.len(), 4096);
    }

    #[test]
    fn bounded_by_count_least_recent_first_and_off_with_the_file_cache() {
        let mut c = MapCache::default();
        let files: Vec<_> = (0..4).map(|_| file_of(4096).0).collect();
        let first = c.insert(&files[0], 0, 4096, ON).unwrap();
        for f in &files[1..3] {
            c.insert(f, 0, 4096, ON).unwrap();
        }
        c.get(&files[0], 0, 4096).unwrap(); // the most recent now
        c.insert(&files[3], 0, 4096, ON).unwrap(); // evicts files[1]
        assert_eq!(c.len(), 3);
        assert!(c.get(&files[1], 0, 4096).is_none());
        assert!(Rc::ptr_eq(&first, &c.get(&files[0], 0, 4096).unwrap()));
        let off = MapLimits {
            max: 0,
            inactive_ticks: 2,
        };
        assert!(c.insert(&files[1], 0, 4096, off).is_none());
        c.sweep(off);
        assert!(c.is_empty());
        // Too large, or nothing to map: not mapped.
        assert!(c.insert(&files[0], 0, MAX_BODY + 1, ON).is_none());
        assert!(c.insert(&files[0], 0, 0, ON).is_none());
    }

    #[test]
    fn head_and_body_arrive_in_order() {
        let rt = crate::testutil::rt();
        rt.block_on(async {
            let (f, data) = file_of(3 << 20);
            let map = FileMap::new(&f, 100, (3 << 20) - 100).unwrap();
            let (s, mut c) = crate::testutil::tcp_pair().await;
            let reader = std::thread::spawn(move || {
                let mut got = Vec::new();
                c.read_to_end(&mut got).unwrap();
                got
            });
            let peer = "127.0.0.1:1".parse().unwrap();
            let mut conn = Conn::new(crate::net::Sock::registered(s), peer, Default::default());
            let range = 10..(3 << 20) - 200;
            write_mapped(&mut conn, b"HEAD", &map, range, Duration::from_secs(5))
                .await
                .unwrap();
            drop(conn);
            let got = reader.join().unwrap();
            assert_eq!(&got[..4], b"HEAD");
            assert!(got[4..] == data[110..(3 << 20) - 100], "body bytes");
        });
    }
}
