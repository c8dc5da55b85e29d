//! Writing an object while clients stream it: the object writer, the collapse
//! handle that tells followers, and the worker's file I/O backend for the writes.
//!
//! How it fits: a miss ([`super::fill`]) and the production of a compressed copy
//! ([`super::variant`]) both open an `ObjectWriter`, [`publish`] its head to the
//! followers of the fill, and feed the body through [`Store::write`]; every client of
//! the fill streams the temp file as it grows ([`super::stream`]).

use crate::aio::FileBackend;
use bytes::{Bytes, BytesMut};
use edge_cache::{FillHandle, ObjectWriter};
use std::sync::Arc;

/// Where a fill's body goes besides the client: the object file, and the followers
/// when this request leads a collapsed fill.
pub struct Store {
    pub writer: ObjectWriter,
    pub handle: Option<FillHandle>,
    /// Our handle on the temp file for body writes through the worker's file I/O
    /// backend (taken on the first write).
    out: Option<edge_aio::AioFile>,
    /// The buffer each copied write hands to the backend and gets back.
    scratch: Vec<u8>,
    /// The parts list each gathered write hands to the backend and gets back.
    parts: Vec<Bytes>,
    /// A body of a known length up to [`HOLD_MAX`]: kept here, as it came, and written
    /// after the header in the commit's one write, instead of a write per read and a
    /// header write. Followers learn of it when it is done.
    pending: Option<Held>,
}

/// Bodies of a known length up to this are held in memory and written with their
/// header in the commit's one write: a small miss makes one file I/O hand-off for its
/// body and commit instead of two or more (each a pool thread's wake-up and a switch
/// back, on the worker's CPU). A fill's upstream read buffer is already up to 256 KiB,
/// so holding at most 128 KiB until the body is whole adds no new order of memory per
/// fill. The leader's client is not delayed (it gets the origin's bytes through the
/// relay as they come); followers get the body when it is committed, as every follower
/// does under nginx's `proxy_cache_lock`.
pub const HOLD_MAX: u64 = 128 * 1024;

/// Held pieces smaller than this are copied together (`Held::tail`) rather than kept
/// as parts of their own, so a body that came in many small chunks is still a few
/// parts (at most `HOLD_MAX / PART_MIN` large ones and a tail between each), far under
/// what one `pwritev` takes.
const PART_MIN: usize = 4096;

/// A held body: its parts as they came (slices of the upstream read buffer, shared,
/// not copied), small pieces gathered in `tail`.
#[derive(Default)]
struct Held {
    parts: Vec<Bytes>,
    tail: BytesMut,
    len: u64,
}

impl Held {
    fn push(&mut self, data: Bytes) {
        self.len += data.len() as u64;
        if data.len() < PART_MIN {
            self.tail.extend_from_slice(&data);
        } else {
            self.seal();
            self.parts.push(data);
        }
    }

    fn push_slice(&mut self, data: &[u8]) {
        self.len += data.len() as u64;
        self.tail.extend_from_slice(data);
    }

    fn seal(&mut self) {
        if !self.tail.is_empty() {
            self.parts.push(self.tail.split().freeze());
        }
    }

    fn into_parts(mut self) -> Vec<Bytes> {
        self.seal();
        self.parts
    }
}

/// What [`Store::put`] writes: bytes to copy, or shared bytes to write as they are.
enum Data<'a> {
    Copy(&'a [u8]),
    Shared(Bytes),
}

impl Data<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Data::Copy(d) => d,
            Data::Shared(b) => b,
        }
    }
}

impl Store {
    /// Append body bytes (through the file I/O backend, so a throttled write never
    /// stalls the loop) and tell followers; on a write error (ENOSPC, EIO, EFBIG) the
    /// fill fails (followers abort) and the caller continues uncached. The bytes are
    /// copied once (into the held body or the write's buffer); [`Store::write_bytes`]
    /// takes shared bytes without a copy.
    pub(super) async fn write(&mut self, files: &FileBackend, data: &[u8]) -> bool {
        self.put(files, Data::Copy(data)).await
    }

    /// [`Store::write`] of bytes the caller already shares (a slice of its read
    /// buffer): held or written as they are.
    pub(super) async fn write_bytes(&mut self, files: &FileBackend, data: Bytes) -> bool {
        self.put(files, Data::Shared(data)).await
    }

    async fn put(&mut self, files: &FileBackend, data: Data<'_>) -> bool {
        if let Some(h) = &mut self.pending {
            let len = data.bytes().len() as u64;
            if h.len + len <= self.writer.meta().body_len {
                self.writer.record_written(data.bytes());
                match data {
                    Data::Copy(d) => h.push_slice(d),
                    Data::Shared(b) => h.push(b),
                }
                return true;
            }
            // More than its length said (the commit's length check fails it anyway):
            // what is held goes to the file where it belongs (it is recorded already),
            // and the rest is written like any body.
            let held = self
                .pending
                .take()
                .map(Held::into_parts)
                .unwrap_or_default();
            let at = self.writer.next_offset() - len_of(&held);
            if !self
                .write_at(files, at, Data::Shared(Bytes::new()), held)
                .await
            {
                return false;
            }
        }
        let at = self.writer.next_offset();
        let parts = std::mem::take(&mut self.parts);
        self.write_at(files, at, data, parts).await
    }

    /// Writes `parts` (bytes recorded already: a held body that ran past its length;
    /// or none), then `data` (recorded here), at `at`, and tells the followers.
    async fn write_at(
        &mut self,
        files: &FileBackend,
        at: u64,
        data: Data<'_>,
        mut parts: Vec<Bytes>,
    ) -> bool {
        if self.out.is_none() {
            match self.writer.reader().map(|f| files.own(f)) {
                Ok(f) => self.out = Some(f),
                Err(e) => {
                    self.writer.write_failed(&e);
                    return false;
                }
            }
        }
        let Some(out) = &self.out else {
            return false;
        };
        let res = match (&data, parts.is_empty()) {
            (Data::Copy(d), true) => {
                let mut buf = std::mem::take(&mut self.scratch);
                buf.clear();
                buf.extend_from_slice(d);
                let (res, buf) = files.write_all_at(out, at, buf).await;
                self.scratch = buf;
                res
            }
            _ => {
                match &data {
                    Data::Copy(d) => parts.push(Bytes::copy_from_slice(d)),
                    Data::Shared(b) if !b.is_empty() => parts.push(b.clone()),
                    Data::Shared(_) => {}
                }
                let (res, mut back) = files.write_all_gathered_at(out, at, parts).await;
                back.clear();
                self.parts = back;
                res
            }
        };
        let data = data.bytes();
        match res {
            Ok(()) => {
                self.writer.record_written(data);
                if let Some(h) = &self.handle {
                    // The last byte of a known-length body is published by `finish`,
                    // after the commit: a client that has the whole body can count on
                    // the object being in the index (a PURGE right after finds it).
                    let written = self.writer.written();
                    let declared = self.writer.meta().body_len;
                    if declared != edge_cache::BODY_LEN_UNKNOWN && written >= declared {
                        h.progress(written.saturating_sub(1));
                    } else {
                        h.progress(written);
                    }
                }
                true
            }
            Err(e) => {
                self.writer.write_failed(&e); // counted and rate-limit logged
                false
            }
        }
    }

    /// Writes the body to the file as it comes (each write tells the followers)
    /// instead of holding it, unless it is packed in the header's block: for a fill
    /// whose own client reads the file (a slice's), so that its first byte does not
    /// wait for the whole body.
    pub fn streamed(mut self) -> Store {
        let len = self.writer.meta().body_len;
        let packed =
            self.writer.body_offset().saturating_add(len) <= edge_cache::storage::BODY_ALIGN;
        if !packed {
            self.pending = None;
        }
        self
    }

    /// Commit the object (through the file I/O backend) and release followers.
    /// Returns whether the object was stored.
    pub(super) async fn finish(self, files: &FileBackend) -> bool {
        self.commit(files).await.is_ok()
    }

    /// [`Store::finish`], giving back a held body that is not in the file (the fill
    /// failed, so a client reading the file needs it from elsewhere).
    pub(super) async fn commit(self, files: &FileBackend) -> Result<(), Option<Vec<u8>>> {
        let len = self.writer.written();
        let declared = self.writer.meta().body_len;
        let body_offset = self.writer.body_offset();
        let Store {
            writer,
            handle,
            out,
            pending,
            ..
        } = self;
        let out = match out {
            Some(o) => Some(o),
            None => writer.reader().map(|f| files.own(f)).ok(),
        };
        let mut held = pending.map(Held::into_parts);
        let res = match (&out, &mut held) {
            (Some(out), held) => {
                let mut none = Vec::new();
                let held = held.as_mut().unwrap_or(&mut none);
                // While spare temp files are being made in the cache's root (a pool
                // job holding the root's directory lock, for a disk read at worst), the
                // rename out of the root would wait for it: not on the loop.
                let pool = writer.cache().refilling_spares();
                writer
                    .finish_with(&crate::aio::Committer { files, out, pool }, held)
                    .await
            }
            (None, None) => writer.finish(),
            (None, Some(_)) => Err(std::io::Error::other("no handle on the temp file")),
        };
        let Err(e) = res else {
            if let Some(h) = handle {
                h.done(len);
            }
            return Ok(());
        };
        // Counted and rate-limit logged by the cache. A whole body still reaches every
        // client (from the open file) when it is there; it is only not stored.
        tracing::debug!("cache commit failed: {e}");
        let in_file = match (held.take(), &out) {
            (None, _) => true,
            // A whole held body: the commit's write may not have happened (a failed
            // rename comes after it), so it is written again for the file's readers,
            // at the body offset (nothing reads a temp file's header).
            (Some(parts), Some(out)) if declared == len && len_of(&parts) == len => {
                let (r, parts) = files.write_all_gathered_at(out, body_offset, parts).await;
                held = r.is_err().then_some(parts);
                r.is_ok()
            }
            (Some(parts), _) => {
                held = Some(parts);
                false
            }
        };
        if let Some(h) = handle {
            if in_file && (declared == edge_cache::BODY_LEN_UNKNOWN || declared == len) {
                h.done(len);
            } else {
                h.fail();
            }
        }
        // The body in one piece (a failure's rare copy).
        Err(held.map(|parts| parts.concat()))
    }
}

/// Total bytes of `parts`.
fn len_of(parts: &[Bytes]) -> u64 {
    parts.iter().map(|p| p.len() as u64).sum()
}

/// Publishes the head to the followers (or tells them to fetch on their own).
pub fn publish(writer: Option<ObjectWriter>, handle: Option<FillHandle>) -> Option<Store> {
    let Some(writer) = writer else {
        if let Some(h) = handle {
            h.uncacheable();
        }
        return None;
    };
    let handle = match handle {
        Some(mut h) => match writer.reader() {
            Ok(file) => {
                h.publish_head(Arc::new(writer.meta().clone()), file, writer.body_offset());
                Some(h)
            }
            Err(e) => {
                tracing::warn!("cache: cannot reopen the object being written: {e}");
                h.uncacheable();
                return None;
            }
        },
        None => None,
    };
    let len = writer.meta().body_len;
    let held = len != edge_cache::BODY_LEN_UNKNOWN && len <= HOLD_MAX;
    Some(Store {
        writer,
        handle,
        out: None,
        scratch: Vec::new(),
        parts: Vec::new(),
        pending: held.then(Held::default),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    /// Runs `f` to completion on a runtime of its own.
    fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// One body write through the `off` backend, to completion.
    fn rt_write(store: &mut Store, data: &[u8]) -> bool {
        block_on(store.write(&FileBackend::off(), data))
    }

    /// One shared-bytes body write through the `off` backend, to completion.
    fn rt_write_bytes(store: &mut Store, data: Bytes) -> bool {
        block_on(store.write_bytes(&FileBackend::off(), data))
    }

    /// The commit through the `off` backend, to completion.
    fn rt_finish(store: Store) {
        block_on(store.finish(&FileBackend::off()));
    }
    use edge_cache::{Cache, CacheConfig, Fill, FillState, Join, ObjectMeta};

    fn cache(dir: &std::path::Path) -> Arc<Cache> {
        Cache::open(CacheConfig {
            path: dir.to_path_buf(),
            ..CacheConfig::default()
        })
        .unwrap()
    }

    fn leader(c: &Cache, key: &str) -> (FillHandle, Arc<Fill>) {
        let h = edge_cache::key_hash(key);
        let Join::Leader(handle) = c.inflight().join(h) else {
            panic!("first join leads")
        };
        let Join::Follower(f) = c.inflight().join(h) else {
            panic!("second join follows")
        };
        (handle, f)
    }

    fn meta(key: &str, len: u64) -> ObjectMeta {
        let mut m = ObjectMeta::new(key, 200, SystemTime::now());
        m.freshness.lifetime = std::time::Duration::from_secs(60);
        m.body_len = len;
        m
    }

    /// A writer of `len` body bytes for `key`.
    fn new_writer(c: &Arc<Cache>, key: &str, len: u64) -> ObjectWriter {
        c.begin_write(key, &edge_http::HeaderMap::new(), meta(key, len))
            .unwrap()
    }

    #[test]
    fn a_stored_fill_streams_to_followers_and_commits() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        let key = "http://h/a";
        let (handle, f) = leader(&c, key);
        // Larger than a held body: it streams to followers as it is written.
        let (first, rest) = (3000, HOLD_MAX as usize);
        let writer = new_writer(&c, key, (first + rest) as u64);
        let mut store = publish(Some(writer), Some(handle)).expect("storing");
        assert!(store.pending.is_none());
        assert!(matches!(f.state(), FillState::Streaming { written: 0, .. }));
        assert!(rt_write(&mut store, &vec![b'a'; first]));
        assert!(matches!(
            f.state(),
            FillState::Streaming { written: 3000, .. }
        ));
        // Shared bytes (a slice of a fill's read buffer) are written as they are.
        assert!(rt_write_bytes(&mut store, Bytes::from(vec![b'b'; rest])));
        assert!(matches!(
            f.state(),
            FillState::Streaming { written, .. } if written == (first + rest - 1) as u64
        ));
        rt_finish(store);
        let total = (first + rest) as u64;
        assert!(matches!(f.state(), FillState::Done { len, .. } if len == total));
        let now = SystemTime::now();
        match c.lookup(key, &edge_http::HeaderMap::new(), now) {
            edge_cache::Lookup::Fresh(hit) => {
                let file = hit.file().expect("on disk");
                let got = edge_cache::storage::read_body(file, hit.body_offset, total).unwrap();
                assert!(got[..first].iter().all(|&b| b == b'a'));
                assert!(got[first..].iter().all(|&b| b == b'b'));
            }
            other => panic!("{other:?}"),
        }
        c.shutdown();
    }

    /// A body up to `HOLD_MAX` is held, then written with its header in one write:
    /// packed in the header's block when it fits there, else at the aligned offset.
    #[test]
    fn a_held_body_is_written_once_with_its_header() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        for (key, len) in [
            ("http://h/held", 10_000usize),
            ("http://h/max", HOLD_MAX as usize),
        ] {
            let (handle, f) = leader(&c, key);
            let writer = new_writer(&c, key, len as u64);
            let mut store = publish(Some(writer), Some(handle)).expect("storing");
            assert!(store.pending.is_some(), "{len} bytes are held");
            let body: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            // Copied bytes, then shared ones as a fill gives them (slices of one read
            // buffer): many small pieces, gathered, and large ones kept as they are.
            let (a, b) = body.split_at(len / 3);
            assert!(rt_write(&mut store, a));
            let shared = Bytes::copy_from_slice(b);
            let mut at = 0;
            for n in [1, 100, 4095, 4096, 10, 3000].into_iter().cycle() {
                let n = n.min(b.len() - at);
                if n == 0 {
                    break;
                }
                assert!(rt_write_bytes(&mut store, shared.slice(at..at + n)));
                at += n;
            }
            let held = store.pending.as_ref().unwrap();
            assert!(held.parts.len() <= 2 * (len / PART_MIN + 1), "few parts");
            // Nothing in the file yet, so nothing published: followers wait for the end.
            assert!(matches!(f.state(), FillState::Streaming { written: 0, .. }));
            rt_finish(store);
            assert!(matches!(f.state(), FillState::Done { len: l, .. } if l == len as u64));
            let now = SystemTime::now();
            match c.lookup(key, &edge_http::HeaderMap::new(), now) {
                edge_cache::Lookup::Fresh(hit) => {
                    let file = hit.file().expect("on disk");
                    assert_eq!(hit.body_offset % 4096, 0, "aligned");
                    assert_eq!(file.metadata().unwrap().len(), hit.body_offset + len as u64);
                    let got =
                        edge_cache::storage::read_body(file, hit.body_offset, len as u64).unwrap();
                    assert!(got == body, "{key}: body bytes");
                }
                other => panic!("{other:?}"),
            }
        }
        c.shutdown();
    }

    #[test]
    fn a_packed_fill_is_written_once_with_its_header() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        let key = "http://h/small";
        let (handle, f) = leader(&c, key);
        let writer = new_writer(&c, key, 5);
        let mut store = publish(Some(writer), Some(handle)).expect("storing");
        assert!(store.pending.is_some(), "5 bytes fit beside the header");
        assert!(rt_write(&mut store, b"hel"));
        assert!(rt_write(&mut store, b"lo"));
        // Nothing in the file yet, so nothing published: followers wait for the end.
        assert!(matches!(f.state(), FillState::Streaming { written: 0, .. }));
        rt_finish(store);
        assert!(matches!(f.state(), FillState::Done { len: 5, .. }));
        let now = SystemTime::now();
        match c.lookup(key, &edge_http::HeaderMap::new(), now) {
            edge_cache::Lookup::Fresh(hit) => {
                let file = hit.file().expect("on disk");
                assert!(hit.body_offset + 5 <= 4096, "packed");
                assert_eq!(file.metadata().unwrap().len(), hit.body_offset + 5);
                let body = edge_cache::storage::read_body(file, hit.body_offset, 5).unwrap();
                assert_eq!(body, b"hello");
            }
            other => panic!("{other:?}"),
        }
        c.shutdown();
    }

    /// A held body whose commit fails (here the rename: the object's directory name is
    /// taken by a plain file) is written to the temp file all the same: followers and a
    /// leader's client reading the file get the whole body; it is only not stored.
    #[test]
    fn a_held_body_whose_commit_fails_still_reaches_the_files_readers() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        let key = "http://h/blocked";
        let level1 = c.path_for(edge_cache::key_hash(key));
        let level1 = level1
            .strip_prefix(dir.path())
            .unwrap()
            .components()
            .next()
            .unwrap();
        std::fs::write(dir.path().join(level1), b"not a directory").unwrap();
        let (handle, f) = leader(&c, key);
        assert!(c.spares_low());
        c.refill_spares();
        let spare = c.take_spare().0.unwrap();
        let mut m = meta(key, 6000);
        m.key = key.into();
        let writer = c.begin_write_spare(m, spare).unwrap();
        let mut store = publish(Some(writer), Some(handle)).expect("storing");
        let body: Vec<u8> = (0..6000).map(|i| (i % 199) as u8).collect();
        assert!(rt_write(&mut store, &body));
        let res = block_on(store.commit(&FileBackend::off()));
        assert!(matches!(res, Err(None)), "not stored, but in the file");
        let FillState::Done { head, len } = f.state() else {
            panic!("{:?}", f.state())
        };
        assert_eq!(len, 6000);
        let got = edge_cache::storage::read_body(&head.file, head.body_offset, len).unwrap();
        assert!(got == body, "the body bytes, from the open temp file");
        assert!(matches!(
            c.lookup(
                key,
                &edge_http::HeaderMap::new(),
                std::time::SystemTime::now()
            ),
            edge_cache::Lookup::Miss
        ));
        c.shutdown();
    }

    #[test]
    fn no_writer_tells_followers_to_fetch_alone() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        let (handle, f) = leader(&c, "http://h/b");
        assert!(publish(None, Some(handle)).is_none());
        assert!(matches!(f.state(), FillState::Uncacheable));
        c.shutdown();
    }

    #[test]
    fn a_short_body_fails_the_fill_instead_of_committing() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        let key = "http://h/c";
        let (handle, f) = leader(&c, key);
        let writer = new_writer(&c, key, 10);
        let mut store = publish(Some(writer), Some(handle)).unwrap();
        assert!(rt_write(&mut store, b"only 7!"));
        rt_finish(store); // Content-Length said 10: the commit refuses
        assert!(matches!(f.state(), FillState::Failed { head: Some(_) }));
        let now = SystemTime::now();
        assert!(matches!(
            c.lookup(key, &edge_http::HeaderMap::new(), now),
            edge_cache::Lookup::Miss
        ));
        c.shutdown();
    }

    /// A held body that runs past its length goes to the file where it belongs (each
    /// byte once, in order) before the rest is written, and the commit refuses it.
    #[test]
    fn a_held_body_past_its_length_is_written_in_place_then_refused() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        let key = "http://h/long";
        let (handle, f) = leader(&c, key);
        let writer = new_writer(&c, key, 10);
        let file = writer.reader().unwrap();
        let off = writer.body_offset();
        let mut store = publish(Some(writer), Some(handle)).unwrap();
        assert!(rt_write_bytes(&mut store, Bytes::from_static(b"012345")));
        assert!(store.pending.is_some());
        assert!(rt_write(&mut store, b"6789ab"));
        assert!(store.pending.is_none(), "no longer held");
        assert_eq!(store.writer.written(), 12);
        let mut got = vec![0u8; 12];
        std::os::unix::fs::FileExt::read_exact_at(&*file, &mut got, off).unwrap();
        assert_eq!(got, b"0123456789ab");
        assert_eq!(file.metadata().unwrap().len(), off + 12);
        rt_finish(store);
        assert!(matches!(f.state(), FillState::Failed { head: Some(_) }));
        c.shutdown();
    }
}
