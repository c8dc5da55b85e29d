//! The loader: rebuilds the index from disk at start, in the background, in batches.
//!
//! How it fits: [`crate::Cache::open`] starts one loader thread and returns at once, so
//! the server serves while the index fills. The loader walks the `levels` directories
//! and reads only each file's header (never the body), checking magic, version,
//! checksum, key and size ([`crate::storage::read_header`]). Valid objects go into the
//! index (never over a newer entry); corrupt, truncated, old-version and misplaced
//! files, and temp files left by earlier processes, are deleted. Like nginx
//! (`loader_files`/`loader_sleep`) it sleeps between batches so a large cache does not
//! steal the disk from hits. Until it is done, lookups also open files directly by
//! hash, so restarted caches give hits at once.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::cache::Cache;
use crate::index::NewEntry;
use crate::key::parse_hash_hex;
use crate::purge::{lock, RuleVerdict};
use crate::storage::{self, StorageError, TMP_MARKER};

/// Start the loader thread for `cache`.
pub(crate) fn spawn(cache: &Arc<Cache>) -> io::Result<JoinHandle<()>> {
    let weak = Arc::downgrade(cache);
    let root = cache.layout.root.clone();
    let depth = cache.layout.levels.len();
    std::thread::Builder::new()
        .name(format!("cache-loader-{}", cache.cfg.name))
        .spawn(move || run(weak, root, depth))
        .map_err(|e| io::Error::new(e.kind(), format!("spawn loader thread: {e}")))
}

/// What the walk found at one path.
enum Item {
    Dir(PathBuf, usize),
    /// A file, its depth and the inode its directory entry gave.
    File(PathBuf, usize, u64),
}

fn run(weak: Weak<Cache>, root: PathBuf, depth: usize) {
    let start = Instant::now();
    let mut stack = vec![Item::Dir(root.clone(), 0)];
    let mut in_batch = 0usize;
    while let Some(item) = stack.pop() {
        let Some(cache) = weak.upgrade() else { return };
        if cache.stopping.load(Ordering::Acquire) {
            return;
        }
        match item {
            Item::Dir(dir, d) => match fs::read_dir(&dir) {
                Ok(rd) => {
                    for ent in rd.flatten() {
                        let is_dir = ent.file_type().map(|t| t.is_dir()).unwrap_or(false);
                        if is_dir {
                            if d < depth {
                                stack.push(Item::Dir(ent.path(), d + 1));
                            }
                        } else {
                            use std::os::unix::fs::DirEntryExt;
                            let ino = storage::ino_key(ent.ino());
                            stack.push(Item::File(ent.path(), d, ino));
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(cache = %cache.cfg.name, "loader: opendir {} failed: {e}", dir.display());
                }
            },
            Item::File(path, d, ino) => {
                load_file(&cache, &path, d == depth, ino);
                in_batch += 1;
                // Read per batch: a reload's `loader_*` apply to the rest of the walk.
                let l = cache.limits();
                if in_batch >= l.loader_files.max(1) {
                    in_batch = 0;
                    cache.sleep_unless_stopping(l.loader_sleep);
                }
            }
        }
    }
    let Some(cache) = weak.upgrade() else { return };
    {
        let _gate = lock(&cache.loader_gate);
        // What a snapshot named that the walk did not find is gone from the disk.
        let unseen = cache.index.drop_unseen();
        cache.loader.unseen.store(unseen as u64, Ordering::Relaxed);
        cache.loader.done.store(true, Ordering::Release);
        cache.pending.clear();
    }
    crate::manager::wake(&cache);
    let s = cache.stats().loader;
    tracing::info!(
        cache = %cache.cfg.name,
        "cache loader done in {:?}: {} files scanned, {} objects loaded, {} removed; of {} restored from the index snapshot, {} were gone from the disk",
        start.elapsed(), s.scanned, s.loaded, s.removed, s.snapshot, s.unseen
    );
}

/// Examine one file: index it, skip it, or delete it.
fn load_file(cache: &Cache, path: &Path, at_leaf: bool, ino: u64) {
    cache.loader.scanned.fetch_add(1, Ordering::Relaxed);
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return;
    };
    if let Some(pos) = name.find(TMP_MARKER) {
        let token = name[pos + TMP_MARKER.len()..]
            .rsplit_once('.')
            .map(|(t, _)| t);
        if parse_hash_hex(&name[..pos]).is_some() && token != Some(cache.token.as_str()) {
            remove(cache, path, "leftover temp file");
        }
        return;
    }
    // Files that are not ours (no hash name) are left alone.
    let Some(hash) = parse_hash_hex(name) else {
        return;
    };
    if !at_leaf || cache.layout.path_for(hash) != path {
        remove(cache, path, "misplaced (levels changed?)");
        return;
    }
    // Indexed already (by a fill, or by the snapshot, which this confirms): done, with
    // no read. A snapshot entry naming another inode is dropped and the file loaded.
    if cache.index.mark_seen(hash, ino) {
        return;
    }
    let file = match File::open(path) {
        Ok(f) => f,
        Err(_) => return, // removed meanwhile
    };
    let hdr = match storage::read_header(&file, hash) {
        Ok(h) => h,
        Err(StorageError::Io(e)) => {
            tracing::warn!(cache = %cache.cfg.name, "loader: read {} failed: {e}", path.display());
            return;
        }
        Err(e) => {
            // Another writer may have renamed a new object in meanwhile; only delete the
            // file we judged.
            if cache.index.contains(hash) {
                return;
            }
            if let Ok(md) = file.metadata() {
                let _stripe = cache.stripe(hash);
                let _ = storage::remove_if_ino(path, md.ino());
            }
            cache.loader.removed.fetch_add(1, Ordering::Relaxed);
            tracing::info!(cache = %cache.cfg.name, "loader: removed {}: {e}", path.display());
            return;
        }
    };
    let Ok(md) = file.metadata() else { return };
    if cache.verify() != crate::Verify::Off {
        match storage::body_checksum_of(&file, hdr.body_offset, hdr.meta.body_len) {
            Ok(sum) if sum == hdr.meta.body_hash => {}
            Ok(_) => {
                let _stripe = cache.stripe(hash);
                let _ = storage::remove_if_ino(path, md.ino());
                cache.loader.removed.fetch_add(1, Ordering::Relaxed);
                cache.corrupt.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(cache = %cache.cfg.name, "loader: removed {}: body checksum mismatch", path.display());
                return;
            }
            Err(e) => {
                tracing::warn!(cache = %cache.cfg.name, "loader: read {} failed: {e}", path.display());
                return;
            }
        }
    }
    let disk_size = storage::disk_size_of(md.len());
    let _gate = lock(&cache.loader_gate);
    match cache.pending.verdict(&hdr.meta) {
        RuleVerdict::Delete => {
            let _stripe = cache.stripe(hash);
            let _ = storage::remove_if_ino(path, md.ino());
            cache.loader.removed.fetch_add(1, Ordering::Relaxed);
        }
        v => {
            let inserted = cache.index.insert_if_absent(
                NewEntry {
                    hash,
                    meta: &hdr.meta,
                    disk_size,
                    ino: storage::ino_key(md.ino()),
                },
                v == RuleVerdict::MarkStale,
            );
            if inserted {
                cache.loader.loaded.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn remove(cache: &Cache, path: &Path, why: &str) {
    match fs::remove_file(path) {
        Ok(()) => {
            cache.loader.removed.fetch_add(1, Ordering::Relaxed);
            tracing::info!(cache = %cache.cfg.name, "loader: removed {}: {why}", path.display());
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(cache = %cache.cfg.name, "loader: unlink {} failed: {e}", path.display());
        }
    }
}
