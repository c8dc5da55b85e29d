//! The file I/O seam: every byte a handler takes from a file (cache hits, fills being
//! streamed to followers, static files) goes through the worker's [`FileBackend`].
//!
//! How it fits: the server builds one [`AioSetup`] from `[aio]` (the process-wide
//! thread pool, started only if a backend needs it); each worker thread then builds its
//! own [`FileBackend`] from it, once, with the backend `aio.mode` names. The engines
//! themselves (blocking calls inline, an nginx-style pool with a mutex or lock-free
//! queue, io_uring, and `auto`) are in the `edge-aio` crate; the dispatch is one `match`
//! chosen at startup, never a config branch in the hot path.
//!
//! - `off`: `pread` on the loop (nginx without `aio`).
//! - `threads`: every read goes to the pool; completions come back through the
//!   worker's eventfd.
//! - `io_uring`: every read goes to the worker's ring; a kernel that refuses io_uring
//!   (ENOSYS, EPERM, a missing opcode, or `EDGECACHE_URING_DISABLE=1`) gives `threads`,
//!   with one log line.
//! - `auto` (the default): `preadv2(RWF_NOWAIT)` on the loop; only what is not in the
//!   page cache goes to the pool, so warm hits cost what they cost with `off`.
//!
//! Bodies sent with `sendfile(2)` are the socket side of this seam (`http::send`): it
//! asks [`FileBackend::is_cached`] before a sendfile under `auto`, and reads through
//! the backend instead when the range is cold (or always, under `threads` and
//! `io_uring`, whose point is to keep the disk off the loop).

use crate::config::{Aio, AioMode, QueueKind};
use crate::prom::{Kind, Prom};
use bytes::Bytes;
use edge_aio::{AioStats, Engine, EngineConfig, Mode, SharedPool, StatsSnapshot};
use std::fs::File;
use std::io;
use std::sync::{Arc, OnceLock};

/// What every worker's backend is built from: the `[aio]` settings and the shared pool.
#[derive(Clone)]
pub struct AioSetup {
    cfg: EngineConfig,
    pool: Arc<SharedPool>,
}

impl AioSetup {
    pub fn from_config(aio: &Aio) -> AioSetup {
        let cfg = EngineConfig {
            mode: match aio.mode {
                AioMode::Off => Mode::Off,
                AioMode::Threads => Mode::Threads,
                AioMode::IoUring => Mode::IoUring,
                AioMode::Auto => Mode::Auto,
            },
            threads: aio.thread_pool.threads,
            max_queue: aio.thread_pool.max_queue,
            queue: match aio.thread_pool.queue {
                QueueKind::Mutex => edge_aio::QueueKind::Mutex,
                QueueKind::Lockfree => edge_aio::QueueKind::LockFree,
            },
            inline_writes: aio.inline_writes,
            ..EngineConfig::default()
        };
        let pool = Arc::new(SharedPool::new(&cfg));
        AioSetup { cfg, pool }
    }

    /// The thread pool's queue depth now (0 when no pool was started).
    pub fn queue_depth(&self) -> usize {
        self.pool.started().map_or(0, |p| p.queue_depth())
    }

    /// The file I/O families of `/metrics`: per worker, its backend's counters
    /// (`workers`: each worker's mode and counters, once it has built its backend) and
    /// a read-latency histogram over all of them; the pool's queue depth.
    pub fn write_prom(&self, workers: &[OnceLock<(&'static str, Arc<AioStats>)>], p: &mut Prom) {
        use crate::prom::Kind::{Counter as C, Gauge as G};
        let per_worker: Vec<(usize, &'static str, StatsSnapshot)> = workers
            .iter()
            .enumerate()
            .filter_map(|(i, a)| a.get().map(|(mode, s)| (i, *mode, s.snapshot())))
            .collect();
        type Family = (&'static str, Kind, &'static str, fn(&StatsSnapshot) -> u64);
        let families: [Family; 11] = [
            (
                "edgecache_aio_reads_total",
                C,
                "File reads completed, by worker and backend.",
                |s| s.reads,
            ),
            (
                "edgecache_aio_read_bytes_total",
                C,
                "Bytes read from files.",
                |s| s.read_bytes,
            ),
            (
                "edgecache_aio_writes_total",
                C,
                "File writes completed.",
                |s| s.writes,
            ),
            (
                "edgecache_aio_errors_total",
                C,
                "File operations that failed.",
                |s| s.errors,
            ),
            (
                "edgecache_aio_in_flight",
                G,
                "Operations handed to the pool or the ring and not completed yet.",
                |s| s.in_flight,
            ),
            (
                "edgecache_aio_inline_total",
                C,
                "auto: operations served on the loop without blocking (RWF_NOWAIT).",
                |s| s.inline_hits,
            ),
            (
                "edgecache_aio_handoffs_total",
                C,
                "Operations sent to the thread pool because they would block.",
                |s| s.handoffs,
            ),
            (
                "edgecache_aio_inline_writes_total",
                C,
                "auto: buffered writes (fill bodies, cache commits) run on the event loop (aio.inline_writes).",
                |s| s.inline_writes,
            ),
            (
                "edgecache_aio_write_sleeps_total",
                C,
                "auto: inline writes that slept; each sends the worker's writes to the pool for a cooldown.",
                |s| s.write_sleeps,
            ),
            (
                "edgecache_aio_overflows_total",
                C,
                "Operations run on the loop because the pool queue or the ring was full.",
                |s| s.overflows,
            ),
            (
                "edgecache_aio_fallbacks_total",
                C,
                "io_uring asked for but unavailable: the worker uses the thread pool.",
                |s| s.uring_fallbacks,
            ),
        ];
        for (name, kind, help, get) in families {
            let mut f = p.family(name, kind, help);
            for (i, mode, s) in &per_worker {
                f.labelled(&[("worker", i), ("backend", mode)], get(s));
            }
        }
        p.gauge(
            "edgecache_aio_queue_depth",
            "Jobs waiting in the I/O thread pool's queue (all workers).",
        )
        .value(self.queue_depth() as u64);
        let mut f = p.family(
            "edgecache_aio_read_seconds",
            Kind::Histogram,
            "File read latency (inline reads included).",
        );
        let mut total = StatsSnapshot::default();
        for (_, _, s) in &per_worker {
            total.add(s);
        }
        let mut cumulative = 0u64;
        for (i, n) in total.read_latency_us.iter().enumerate() {
            cumulative += n;
            if i + 1 == total.read_latency_us.len() {
                break;
            }
            // Bucket i holds reads under 2^i µs.
            let le = (1u64 << i) as f64 / 1e6;
            f.sample("_bucket", &[("le", &le)], cumulative);
        }
        f.sample("_bucket", &[("le", &"+Inf")], cumulative);
        f.sample("_count", &[], cumulative);
    }
}

/// One worker's file I/O backend, chosen once.
pub struct FileBackend {
    engine: Engine,
}

impl FileBackend {
    /// The backend for this worker (call on the worker's own thread: it registers an
    /// eventfd or a ring in that thread's runtime on first use). A backend that cannot
    /// start (the pool's threads, the ring) degrades as the module doc says, logged
    /// once per process.
    pub fn for_worker(setup: &AioSetup) -> FileBackend {
        match Engine::new(&setup.cfg, &setup.pool) {
            Ok((engine, fallback)) => {
                if let Some(why) = fallback {
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| {
                        tracing::warn!("aio.mode = \"io_uring\": {why}; using \"threads\"")
                    });
                }
                FileBackend { engine }
            }
            Err(e) => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    tracing::error!(
                        "aio.mode = \"{}\": the I/O thread pool cannot start ({e}); file reads run on the event loop (aio = off)",
                        setup.cfg.mode.as_str()
                    )
                });
                FileBackend::off()
            }
        }
    }

    /// Reads on the loop (`aio = off`); needs no pool and no runtime.
    pub fn off() -> FileBackend {
        FileBackend {
            engine: Engine::off(),
        }
    }

    /// The backend in use (`threads` after an io_uring fallback).
    pub fn mode(&self) -> Mode {
        self.engine.mode()
    }

    /// This backend's counters.
    pub fn stats(&self) -> &Arc<edge_aio::AioStats> {
        self.engine.stats()
    }

    /// Drops `len` bytes of `file` at `offset` from the page cache (their copy lives
    /// in the RAM tier now). Clean pages are only unmapped: no I/O, no wait.
    pub fn drop_cached_pages(&self, file: &File, offset: u64, len: u64) {
        use std::os::fd::AsRawFd;
        // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is
        // valid for the duration of the call because `file` is borrowed.
        let r = unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        if r != 0 {
            tracing::debug!(
                "posix_fadvise(DONTNEED): {}",
                io::Error::from_raw_os_error(r)
            );
        }
    }

    /// Reads exactly `len` bytes of `file` at `offset`, appended to `buf`; returns the
    /// buffer in every case. A file shorter than asked is `UnexpectedEof` (the bytes
    /// read so far stay appended).
    pub async fn read_exact_append(
        &self,
        file: &File,
        offset: u64,
        len: usize,
        buf: Vec<u8>,
    ) -> (io::Result<()>, Vec<u8>) {
        self.engine.read_exact_at_file(file, offset, len, buf).await
    }

    /// The same file opened again with O_DIRECT (through `/proc/self/fd`, so no path
    /// is needed), through the backend. None when the filesystem refuses O_DIRECT.
    pub async fn open_direct(&self, file: &File) -> Option<DirectFile> {
        use std::os::fd::AsRawFd;
        let path = format!("/proc/self/fd/{}", file.as_raw_fd());
        let opts = edge_aio::OpenOptions::new().read(true).direct(true);
        let f = self.engine.open(&path, &opts).await.ok()?;
        if f.direct() != edge_aio::DirectMode::On {
            return None;
        }
        let align = self
            .engine
            .dio_alignment(&f)
            .await
            .unwrap_or(edge_aio::DioAlign::FALLBACK)
            .granule();
        Some(DirectFile { file: f, align })
    }

    /// Reads `len` bytes at `offset` of an O_DIRECT file into `buf` (cleared first);
    /// returns the window of `buf` that holds them (shorter at end of file).
    pub async fn read_direct(
        &self,
        f: &DirectFile,
        offset: u64,
        len: usize,
        buf: edge_aio::AlignedBuf,
    ) -> (io::Result<std::ops::Range<usize>>, edge_aio::AlignedBuf) {
        self.engine.read_aligned(&f.file, offset, len, buf).await
    }

    /// `stat` by path, through the backend (a cold inode waits on the disk).
    pub async fn stat_path(&self, path: &std::path::Path) -> io::Result<edge_aio::Metadata> {
        self.engine.stat_path(path).await
    }

    /// Opens `path` read-only through the backend (under `auto`, inline when the path
    /// is in the dentry cache).
    pub async fn open_read(&self, path: &std::path::Path) -> io::Result<File> {
        into_file(self.open_aio(path).await?)
    }

    async fn open_aio(&self, path: &std::path::Path) -> io::Result<edge_aio::AioFile> {
        self.engine
            .open(path, &edge_aio::OpenOptions::new().read(true))
            .await
    }

    /// Runs blocking file system work made of several calls (creating a cache object,
    /// rewriting one after a 304, a purge's unlinks) on the pool, or inline under
    /// `off`; see `edge_aio::Engine::blocking`.
    pub async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        self.engine.blocking(f).await
    }

    /// Opens the writer of `meta`'s object (its key the variant key) on one of the
    /// cache's spare temp files when one is left, with no hand-off; else the temp file
    /// is made on the pool. A low stock of spares is refilled by one pool job in the
    /// background. `None` (counted and logged by the cache): serve uncached.
    pub async fn begin_write(
        &self,
        cache: &Arc<edge_cache::Cache>,
        meta: edge_cache::ObjectMeta,
    ) -> Option<edge_cache::ObjectWriter> {
        let (spare, refill) = cache.take_spare();
        if refill {
            let (engine, c) = (self.engine.clone(), cache.clone());
            tokio::task::spawn_local(async move {
                let _ = engine.blocking(move || c.refill_spares()).await;
            });
        }
        if let Some(spare) = spare {
            return cache.begin_write_spare(meta, spare).ok();
        }
        let cache = cache.clone();
        self.blocking(move || cache.begin_write_keyed(meta))
            .await
            .ok()?
            .ok()
    }

    /// `file` (shared, e.g. from `ObjectWriter::reader`: the same descriptor, no `dup`)
    /// for the writes of a whole fill, through the backend: an op in flight keeps it
    /// open even if the fill is abandoned.
    pub fn own(&self, file: std::sync::Arc<File>) -> edge_aio::AioFile {
        edge_aio::AioFile::shared(file)
    }

    /// Writes all of `buf` at `offset` (cache fills): on the pool under `threads`
    /// (page-cache writes wait when the kernel throttles dirty pages), under `auto` on
    /// the loop while its write gate is open (`edge_aio::write_gate`) and else on the
    /// pool, the ring under `io_uring`, inline under `off`. Returns the buffer in every
    /// case.
    pub async fn write_all_at(
        &self,
        file: &edge_aio::AioFile,
        offset: u64,
        buf: Vec<u8>,
    ) -> (io::Result<()>, Vec<u8>) {
        self.engine.write_all_at(file, offset, buf).await
    }

    /// Writes every byte of `parts`, in order, at `offset` (cache fills: slices of the
    /// upstream read buffer, not copied), where [`FileBackend::write_all_at`] would.
    pub async fn write_all_gathered_at(
        &self,
        file: &edge_aio::AioFile,
        offset: u64,
        parts: Vec<Bytes>,
    ) -> (io::Result<()>, Vec<Bytes>) {
        self.engine.write_all_gathered_at(file, offset, parts).await
    }

    /// `sendfile(2)` of up to `len` bytes from `file` to the non-blocking socket `sock`
    /// on a pool thread; see `edge_aio::Engine::sendfile`.
    pub async fn sendfile(
        &self,
        sock: Arc<std::os::fd::OwnedFd>,
        file: Arc<File>,
        offset: u64,
        len: usize,
        first: bool,
    ) -> io::Result<usize> {
        self.engine.sendfile(sock, file, offset, len, first).await
    }

    /// Whether the byte at `offset` is in the page cache (see `edge_aio`).
    pub fn is_cached(&self, file: &File, offset: u64) -> bool {
        self.engine.is_cached(file, offset)
    }
}

/// Cache lookups open the object's file through the backend: `open` and `fstat` of a
/// cold dentry or inode wait on the disk too. Under `auto` both run inline when they
/// cannot block (`openat2(RESOLVE_CACHED)`, fstat of an open fd), else on the pool.
impl edge_cache::FileOpener for FileBackend {
    async fn open_stat(&self, path: &std::path::Path) -> io::Result<edge_cache::OpenedFile> {
        let f = self.open_aio(path).await?;
        let md = self.engine.stat(&f).await?;
        Ok(edge_cache::OpenedFile {
            file: into_file(f)?,
            ino: md.ino,
            len: md.size,
        })
    }

    async fn read_exact_at(&self, file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let (r, buf) = self
            .read_exact_append(file, offset, len, Vec::with_capacity(len))
            .await;
        r.map(|()| buf)
    }

    /// On the pool (inline under `off`, like every file call there).
    async fn offload<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        self.blocking(f).await
    }
}

/// A handle just opened (nobody else holds it) as a plain `File`.
fn into_file(f: edge_aio::AioFile) -> io::Result<File> {
    f.into_fd()
        .map(File::from)
        .map_err(|_| io::Error::other("file handle still shared"))
}

/// A fill's commit through the backend: the final header, the `fstat` and the rename
/// (a journaled metadata update that can wait on the disk).
pub struct Committer<'a> {
    pub files: &'a FileBackend,
    /// Our handle on the temp file.
    pub out: &'a edge_aio::AioFile,
    /// On the pool even where `auto` could commit on the loop.
    pub pool: bool,
}

impl edge_cache::CommitIo for Committer<'_> {
    async fn commit(&self, plan: edge_cache::CommitPlan) -> (io::Result<u64>, Vec<Bytes>) {
        let e = &self.files.engine;
        // `plan.parts` are the header, then a held body (`Store`: a known length up to
        // `HOLD_MAX`, kept as the slices of the upstream reads): one `pwritev`.
        let edge_cache::CommitPlan {
            parts,
            file,
            tmp_path,
            final_path,
            ..
        } = plan;
        if self.files.mode() != Mode::IoUring {
            // On the pool (or inline under `off`), the write, the fstat and the rename
            // are one hand-off, not three round trips (on the plan's shared handle).
            use std::os::unix::fs::MetadataExt;
            let job = move || {
                let r = (|| {
                    edge_aio::write_all_vectored_at(&*file, 0, &parts)?;
                    let ino = file.metadata()?.ino();
                    edge_cache::storage::rename_into_place(&tmp_path, &final_path)?;
                    Ok(ino)
                })();
                (r, parts)
            };
            // Under `auto`, on the loop while the kernel is far from throttling writers
            // (`aio.inline_writes`, `edge_aio::write_gate`).
            let r = if self.pool {
                e.blocking(job).await
            } else {
                e.blocking_write(job).await
            };
            return match r {
                Ok(done) => done,
                Err(err) => (Err(err), Vec::new()),
            };
        }
        let (r, parts) = e.write_all_gathered_at(self.out, 0, parts).await;
        if let Err(err) = r {
            return (Err(err), parts);
        }
        let ino = match e.stat(self.out).await {
            Ok(md) => md.ino,
            Err(err) => return (Err(err), parts),
        };
        let r = match e.rename(&tmp_path, &final_path).await {
            // A spare temp file's object whose directories are not made yet.
            Err(err) if err.kind() == io::ErrorKind::NotFound => self
                .files
                .blocking(move || edge_cache::storage::rename_making_dirs(&tmp_path, &final_path))
                .await
                .and_then(|r| r),
            r => r,
        };
        (r.map(|()| ino), parts)
    }
}

/// A file opened with O_DIRECT, and the alignment its reads need.
pub struct DirectFile {
    file: edge_aio::AioFile,
    align: usize,
}

impl DirectFile {
    /// A buffer for reads of up to `chunk` bytes at any offset.
    pub fn buffer(&self, chunk: usize) -> edge_aio::AlignedBuf {
        edge_aio::AlignedBuf::new(chunk + 2 * self.align, self.align)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Every mode the config names reads the same bytes through the seam.
    #[test]
    fn every_configured_mode_reads() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"0123456789").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        for mode in [
            AioMode::Off,
            AioMode::Threads,
            AioMode::IoUring,
            AioMode::Auto,
        ] {
            let aio = Aio {
                mode,
                ..Aio::default()
            };
            let setup = AioSetup::from_config(&aio);
            local.block_on(&rt, async {
                let files = FileBackend::for_worker(&setup);
                let (r, buf) = files.read_exact_append(&f, 2, 5, b"head:".to_vec()).await;
                r.unwrap();
                assert_eq!(buf, b"head:23456", "{mode:?}");
                let (r, buf) = files.read_exact_append(&f, 8, 5, b"x".to_vec()).await;
                assert_eq!(r.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
                assert_eq!(buf, b"x89", "{mode:?}: the bytes read are kept");
            });
        }
    }
}
