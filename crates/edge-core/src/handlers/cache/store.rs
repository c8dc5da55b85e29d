//! Writing an object while clients stream it: the object writer, the collapse
//! handle that tells followers, and the worker's file I/O backend for the writes.
//!
//! How it fits: a miss ([`super::fill`]) and the production of a compressed copy
//! ([`super::variant`]) both open an `ObjectWriter`, [`publish`] its head to the
//! followers of the fill, and feed the body through [`Store::write`]; every client of
//! the fill streams the temp file as it grows ([`super::stream`]).

use crate::aio::FileBackend;
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
    /// The buffer each write hands to the backend and gets back.
    scratch: Vec<u8>,
    /// A body that will be packed in the header's block (its length is known and fits):
    /// kept here and written with the final header in one write at the commit, instead
    /// of a body write and a header write. Followers learn of it when it is done.
    pending: Option<Vec<u8>>,
}

impl Store {
    /// Append body bytes (through the file I/O backend, so a throttled write never
    /// stalls the loop) and tell followers; on a write error (ENOSPC, EIO, EFBIG) the
    /// fill fails (followers abort) and the caller continues uncached.
    pub(super) async fn write(&mut self, files: &FileBackend, data: &[u8]) -> bool {
        if let Some(p) = &mut self.pending {
            if p.len() + data.len() <= edge_cache::storage::BODY_ALIGN as usize {
                p.extend_from_slice(data);
                self.writer.record_written(data);
                return true;
            }
            // More than its length said (the commit's length check fails it anyway):
            // written out like any body.
            let held = std::mem::take(p);
            self.pending = None;
            if !held.is_empty() && !Box::pin(self.write(files, &held)).await {
                return false;
            }
        }
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
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.extend_from_slice(data);
        let (res, buf) = files
            .write_all_at(out, self.writer.next_offset(), buf)
            .await;
        self.scratch = buf;
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

    /// Commit the object (through the file I/O backend) and release followers.
    /// Returns whether the object was stored.
    pub(super) async fn finish(self, files: &FileBackend) -> bool {
        let len = self.writer.written();
        let declared = self.writer.meta().body_len;
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
        let res = match (&out, &pending) {
            (Some(out), _) => {
                let body = pending.as_deref();
                writer
                    .finish_with(&crate::aio::Committer { files, out, body })
                    .await
            }
            (None, None) => writer.finish(),
            (None, Some(_)) => Err(std::io::Error::other("no handle on the temp file")),
        };
        let stored = res.is_ok();
        match (res, handle) {
            (Ok(()), Some(h)) => h.done(len),
            (Err(e), h) => {
                // Counted and rate-limit logged by the cache. A whole body still
                // reaches every client (from the open file) when it was written
                // there; it is only not stored.
                tracing::debug!("cache commit failed: {e}");
                if let Some(h) = h {
                    let in_file = pending.is_none();
                    if in_file && (declared == edge_cache::BODY_LEN_UNKNOWN || declared == len) {
                        h.done(len);
                    } else {
                        h.fail();
                    }
                }
            }
            (Ok(()), None) => {}
        }
        stored
    }
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
    let m = writer.meta();
    let packed = m.body_len != edge_cache::BODY_LEN_UNKNOWN
        && writer.body_offset().saturating_add(m.body_len) <= edge_cache::storage::BODY_ALIGN;
    Some(Store {
        writer,
        handle,
        out: None,
        scratch: Vec::new(),
        pending: packed.then(Vec::new),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    /// One body write through the `off` backend, to completion.
    fn rt_write(store: &mut Store, data: &[u8]) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(store.write(&FileBackend::off(), data))
    }

    /// The commit through the `off` backend, to completion.
    fn rt_finish(store: Store) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(store.finish(&FileBackend::off()));
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

    #[test]
    fn a_stored_fill_streams_to_followers_and_commits() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        let key = "http://h/a";
        let (handle, f) = leader(&c, key);
        // Larger than a block: the body streams to followers as it is written.
        let writer = c
            .begin_write(key, &edge_http::HeaderMap::new(), meta(key, 10_000))
            .unwrap();
        let mut store = publish(Some(writer), Some(handle)).expect("storing");
        assert!(store.pending.is_none());
        assert!(matches!(f.state(), FillState::Streaming { written: 0, .. }));
        assert!(rt_write(&mut store, &[b'a'; 3000]));
        assert!(matches!(
            f.state(),
            FillState::Streaming { written: 3000, .. }
        ));
        assert!(rt_write(&mut store, &[b'b'; 7000]));
        rt_finish(store);
        assert!(matches!(f.state(), FillState::Done { len: 10_000, .. }));
        let now = SystemTime::now();
        assert!(matches!(
            c.lookup(key, &edge_http::HeaderMap::new(), now),
            edge_cache::Lookup::Fresh(_)
        ));
        c.shutdown();
    }

    #[test]
    fn a_packed_fill_is_written_once_with_its_header() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        let key = "http://h/small";
        let (handle, f) = leader(&c, key);
        let writer = c
            .begin_write(key, &edge_http::HeaderMap::new(), meta(key, 5))
            .unwrap();
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
        let writer = c
            .begin_write(key, &edge_http::HeaderMap::new(), meta(key, 10))
            .unwrap();
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
}
