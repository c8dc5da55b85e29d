//! The loader: rebuilds the index from disk at start, in the background, in batches.
//!
//! How it fits: [`crate::Cache::open`] starts one loader thread on the cache's
//! [`Zone`] and returns at once, so the server serves while the index fills. The
//! loader walks the `levels` directories and reads only each file's header (never the
//! body), checking magic, version, checksum, key and size
//! ([`crate::storage::read_header`]). Valid objects go into the
//! index (never over a newer entry); corrupt, truncated, old-version and misplaced
//! files, and temp files left by earlier processes, are deleted. The zone indexes what
//! is found ([`Zone::admit`]) unless a purge issued while loading covers it. Like nginx
//! (`loader_files`/`loader_sleep`) it sleeps between batches so a large cache does not
//! steal the disk from hits. Until it is done, lookups also open files directly by
//! hash, so restarted caches give hits at once.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::index::NewEntry;
use crate::key::parse_hash_hex;
use crate::purge::RuleVerdict;
use crate::storage::{self, StorageError, TMP_MARKER};
use crate::zone::Zone;

/// Start the loader thread for `zone` (it ends when the walk does, when the zone stops,
/// or when the zone is dropped).
pub(crate) fn spawn(zone: &Arc<Zone>) -> io::Result<JoinHandle<()>> {
    let weak = Arc::downgrade(zone);
    let root = zone.layout().root.clone();
    let depth = zone.layout().levels.len();
    std::thread::Builder::new()
        .name(format!("cache-loader-{}", zone.name()))
        .spawn(move || run(weak, root, depth))
        .map_err(|e| io::Error::new(e.kind(), format!("spawn loader thread: {e}")))
}

/// What the walk found at one path.
enum Item {
    Dir(PathBuf, usize),
    /// A file, its depth and the inode its directory entry gave.
    File(PathBuf, usize, u64),
}

fn run(weak: Weak<Zone>, root: PathBuf, depth: usize) {
    let start = Instant::now();
    let mut stack = vec![Item::Dir(root.clone(), 0)];
    let mut in_batch = 0usize;
    while let Some(item) = stack.pop() {
        let Some(zone) = weak.upgrade() else { return };
        if zone.stopping() {
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
                    tracing::warn!(cache = %zone.name(), "loader: opendir {} failed: {e}", dir.display());
                }
            },
            Item::File(path, d, ino) => {
                load_file(&zone, &path, d == depth, ino);
                in_batch += 1;
                // Read per batch: a reload's `loader_*` apply to the rest of the walk.
                let l = zone.limits();
                if in_batch >= l.loader_files.max(1) {
                    in_batch = 0;
                    zone.sleep_unless_stopping(l.loader_sleep);
                }
            }
        }
    }
    let Some(zone) = weak.upgrade() else { return };
    // What a snapshot named that the walk did not find is gone from the disk.
    zone.finish_loading();
    let s = zone.stats().loader;
    tracing::info!(
        cache = %zone.name(),
        "cache loader done in {:?}: {} files scanned, {} objects loaded, {} removed; of {} restored from the index snapshot, {} were gone from the disk",
        start.elapsed(), s.scanned, s.loaded, s.removed, s.snapshot, s.unseen
    );
}

/// Whether a temp file token (`<pid>-<nanos>`, see `Zone`) names another process that
/// is still running: during a binary upgrade the old process keeps serving (its fills
/// in progress, its spare temp files) while the new one loads the same directory. A
/// zombie is not running; a pid reused by an unrelated process keeps that file until
/// the next start's loader, which is harmless.
fn another_live_process(token: &str) -> bool {
    let Some(pid) = token
        .split_once('-')
        .and_then(|(p, _)| p.parse::<u32>().ok())
    else {
        return false;
    };
    if pid == std::process::id() {
        return false; // an earlier cache of this process (a test, a reload)
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Examine one file: index it, skip it, or delete it.
fn load_file(zone: &Zone, path: &Path, at_leaf: bool, ino: u64) {
    zone.note_scanned();
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return;
    };
    if let Some(pos) = name.find(TMP_MARKER) {
        let token = name[pos + TMP_MARKER.len()..]
            .rsplit_once('.')
            .map(|(t, _)| t);
        let ours = parse_hash_hex(&name[..pos]).is_some() || &name[..pos] == storage::SPARE_PREFIX;
        if ours && token != Some(zone.token()) && !token.is_some_and(another_live_process) {
            remove(zone, path, "leftover temp file");
        }
        return;
    }
    // Files that are not ours (no hash name) are left alone.
    let Some(hash) = parse_hash_hex(name) else {
        return;
    };
    if !at_leaf || zone.path_for(hash) != path {
        remove(zone, path, "misplaced (levels changed?)");
        return;
    }
    // Indexed already (by a fill, or by the snapshot, which this confirms): done, with
    // no read. A snapshot entry naming another inode is dropped and the file loaded.
    if zone.seen_on_disk(hash, ino) {
        return;
    }
    let file = match File::open(path) {
        Ok(f) => f,
        Err(_) => return, // removed meanwhile
    };
    let hdr = match storage::read_header(&file, hash) {
        Ok(h) => h,
        Err(StorageError::Io(e)) => {
            tracing::warn!(cache = %zone.name(), "loader: read {} failed: {e}", path.display());
            return;
        }
        Err(e) => {
            // Another writer may have renamed a new object in meanwhile; only delete the
            // file we judged.
            if zone.index().contains(hash) {
                return;
            }
            if let Ok(md) = file.metadata() {
                let _ = zone.unlink(hash, md.ino());
            }
            zone.note_removed(false);
            tracing::info!(cache = %zone.name(), "loader: removed {}: {e}", path.display());
            return;
        }
    };
    let Ok(md) = file.metadata() else { return };
    if zone.verify() != crate::Verify::Off {
        match storage::body_checksum_of(&file, hdr.body_offset, hdr.meta.body_len) {
            Ok(sum) if sum == hdr.meta.body_hash => {}
            Ok(_) => {
                let _ = zone.unlink(hash, md.ino());
                zone.note_removed(true);
                tracing::warn!(cache = %zone.name(), "loader: removed {}: body checksum mismatch", path.display());
                return;
            }
            Err(e) => {
                tracing::warn!(cache = %zone.name(), "loader: read {} failed: {e}", path.display());
                return;
            }
        }
    }
    let disk_size = storage::disk_size_of(md.len());
    let admitted = zone.admit(NewEntry {
        hash,
        meta: &hdr.meta,
        disk_size,
        ino: storage::ino_key(md.ino()),
    });
    if admitted.verdict == RuleVerdict::Delete {
        let _ = zone.unlink(hash, md.ino());
        zone.note_removed(false);
    } else if admitted.inserted {
        zone.note_loaded();
    }
}

fn remove(zone: &Zone, path: &Path, why: &str) {
    match fs::remove_file(path) {
        Ok(()) => {
            zone.note_removed(false);
            tracing::info!(cache = %zone.name(), "loader: removed {}: {why}", path.display());
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(cache = %zone.name(), "loader: unlink {} failed: {e}", path.display());
        }
    }
}
