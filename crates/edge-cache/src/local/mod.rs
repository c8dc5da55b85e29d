//! What one worker keeps of the cache for itself, with no lock and no atomic: a front
//! of the shared index ([`front::Front`]), the RAM tier ([`mem::MemTier`],
//! `[memory_cache]`) and the open-file cache ([`files::OpenFiles`], `open_file_cache`).
//!
//! How it fits: the index (shared by every worker) stays the single source of truth;
//! [`crate::Cache::lookup_local`] asks it which version of an object is current, then
//! asks the worker's [`Local`] for that version's body in RAM, or for its file already
//! open, before it opens the file. Both answer only for the exact version the index
//! names (the entry's generation, and for files its inode), so purge, refresh,
//! replacement, expiry and Vary stay coherent without any message between workers. The price is that a
//! hot object may sit in the RAM of several workers, each with `size / workers` bytes.

pub mod files;
pub mod front;
pub(crate) mod list;
pub mod mem;
#[doc(hidden)]
pub mod sim;

pub use files::{FilesConfig, FilesStats, OpenFiles};
pub use front::{Front, FrontStats, FRONT_ENTRIES};
pub use mem::{MemConfig, MemStats, MemTier, Policy};

use crate::key::KeyHash;

/// One worker's RAM tier and open-file cache, for every cache zone (keys are mixed with
/// the zone's seed, see [`crate::Cache::local_key`]).
#[derive(Debug)]
pub struct Local {
    /// What the worker remembers of the shared index and the headers it read.
    pub front: Front,
    /// `None` without `[memory_cache]`.
    pub mem: Option<MemTier>,
    pub files: OpenFiles,
}

impl Local {
    pub fn new(mem: Option<MemConfig>, files: FilesConfig) -> Local {
        Local {
            front: Front::new(FRONT_ENTRIES),
            mem: mem.map(MemTier::new),
            files: OpenFiles::new(files),
        }
    }

    /// Nothing kept (tests, tools).
    pub fn disabled() -> Local {
        Local::new(
            None,
            FilesConfig {
                max: 0,
                inactive_ticks: 1,
            },
        )
    }

    /// The index no longer has `key`: drop its body and close its file.
    pub fn forget(&mut self, key: KeyHash) {
        self.front.remove(key);
        if let Some(m) = &mut self.mem {
            m.remove(key);
        }
        self.files.remove(key);
    }
}
