//! The cache tiers' tables: `[memory_cache]` (the RAM tier, and how `size = "auto"`
//! resolves), `[open_file_cache]` and each `[[cache]]` zone.

use super::memory;
use super::{Dur, MemSize, Size};
use serde::Deserialize;
use std::path::PathBuf;
use toml::Spanned;

/// `[memory_cache]`: the RAM tier over the disk caches (one share per worker). On by
/// default (`size = "auto"`), also when the table is absent.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryCache {
    /// Bytes of RAM for bodies, over all workers (each worker gets `size / workers`):
    /// `"auto"` (default; [`memory::auto_size`]), `"off"`/`"0"`, or a size.
    #[serde(default)]
    pub size: MemSize,
    /// Larger bodies stay on disk. The default is where sending from memory stops
    /// beating `sendfile` from the page cache (`hit::INLINE_BODY`; see
    /// docs/results/tiers.md).
    #[serde(default = "default_mem_max_object")]
    pub max_object_size: Size,
    #[serde(default)]
    pub policy: MemPolicy,
}
fn default_mem_max_object() -> Size {
    Size(32 << 10)
}

impl Default for MemoryCache {
    fn default() -> Self {
        MemoryCache {
            size: MemSize::Auto,
            max_object_size: default_mem_max_object(),
            policy: MemPolicy::default(),
        }
    }
}

/// The RAM tier as it runs: `size` resolved against this machine and the disk caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedMemory {
    /// Bytes over all workers; 0: no RAM tier.
    pub size: u64,
    /// `max_object_size`, capped at `size` when `size` was `"auto"`.
    pub max_object_size: u64,
    pub policy: MemPolicy,
    /// `size = "auto"` (or no `[memory_cache]` table).
    pub auto: bool,
}

impl MemoryCache {
    /// Resolves `size` for `caches`, reading this machine's memory only for `"auto"`.
    pub fn resolve(&self, caches: &[CacheZone]) -> ResolvedMemory {
        let disk_total = caches
            .iter()
            .fold(0u64, |t, c| t.saturating_add(c.max_size.0));
        self.resolve_with(memory::physical_memory, disk_total)
    }

    /// [`resolve`](Self::resolve) with the machine's memory supplied (for tests).
    pub fn resolve_with(&self, memory: impl FnOnce() -> u64, disk_total: u64) -> ResolvedMemory {
        let (size, auto) = match self.size {
            MemSize::Off => (0, false),
            MemSize::Bytes(n) => (n, false),
            MemSize::Auto if disk_total == 0 => (0, true),
            MemSize::Auto => (memory::auto_size(memory(), disk_total), true),
        };
        ResolvedMemory {
            size,
            max_object_size: if auto {
                self.max_object_size.0.min(size)
            } else {
                self.max_object_size.0
            },
            policy: self.policy,
            auto,
        }
    }
}

/// `[memory_cache] policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemPolicy {
    /// S3-FIFO (SOSP '23): small FIFO, main CLOCK, ghost queue.
    #[default]
    S3fifo,
    /// W-TinyLFU: 1% window, segmented LRU, count-min admission.
    Tinylfu,
    Lru,
}

impl MemPolicy {
    /// The config spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            MemPolicy::S3fifo => "s3fifo",
            MemPolicy::Tinylfu => "tinylfu",
            MemPolicy::Lru => "lru",
        }
    }
}

/// `open_file_cache = { max = 1000, inactive = "20s" }` or `"off"`: descriptors of
/// cached objects kept open per worker (nginx `open_file_cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileCache {
    /// Per worker; 0 when off.
    pub max: usize,
    pub inactive: std::time::Duration,
}

impl Default for OpenFileCache {
    fn default() -> Self {
        OpenFileCache {
            max: 1000,
            inactive: std::time::Duration::from_secs(20),
        }
    }
}

impl<'de> Deserialize<'de> for OpenFileCache {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            #[serde(default = "default_ofc_max")]
            max: usize,
            #[serde(default = "default_ofc_inactive")]
            inactive: Dur,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            S(String),
            T(Table),
        }
        match Raw::deserialize(d)? {
            Raw::S(s) if s == "off" => Ok(OpenFileCache {
                max: 0,
                inactive: std::time::Duration::from_secs(20),
            }),
            Raw::S(s) => Err(serde::de::Error::custom(format!(
                "invalid value {s:?}: expected \"off\" or {{ max = N, inactive = \"20s\" }}"
            ))),
            Raw::T(t) => Ok(OpenFileCache {
                max: t.max,
                inactive: t.inactive.0,
            }),
        }
    }
}
fn default_ofc_max() -> usize {
    1000
}
fn default_ofc_inactive() -> Dur {
    Dur(std::time::Duration::from_secs(20))
}

/// A `[[cache]]` zone: one directory (one disk) with its own index budget.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheZone {
    pub name: Spanned<String>,
    pub path: PathBuf,
    #[serde(default = "default_levels")]
    pub levels: Spanned<String>,
    #[serde(default = "default_max_size")]
    pub max_size: Size,
    #[serde(default)]
    pub min_free: Size,
    #[serde(default = "default_inactive")]
    pub inactive: Dur,
    #[serde(default = "default_keys_zone")]
    pub keys_zone: Size,
    #[serde(default = "default_loader_files")]
    pub loader_files: usize,
    #[serde(default = "default_loader_sleep")]
    pub loader_sleep: Dur,
    #[serde(default = "default_manager_files")]
    pub manager_files: usize,
    #[serde(default = "default_manager_threshold")]
    pub manager_threshold: Dur,
    /// Pause between manager passes while work is left (nginx `manager_sleep`).
    #[serde(default = "default_manager_sleep")]
    pub manager_sleep: Dur,
    /// When stored bodies are checked against their checksum: `"off"` (default),
    /// `"load"` (by the loader after a start), `"always"` (also on every disk hit).
    #[serde(default, alias = "verify")]
    pub cache_verify: CacheVerify,
}

/// `[[cache]] cache_verify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheVerify {
    #[default]
    Off,
    Load,
    Always,
}

impl CacheVerify {
    pub fn to_cache(self) -> edge_cache::Verify {
        match self {
            CacheVerify::Off => edge_cache::Verify::Off,
            CacheVerify::Load => edge_cache::Verify::Load,
            CacheVerify::Always => edge_cache::Verify::Always,
        }
    }
}
fn default_levels() -> Spanned<String> {
    Spanned::new(0..0, "1:2".to_string())
}
fn default_max_size() -> Size {
    Size(10 << 30)
}
fn default_inactive() -> Dur {
    Dur(std::time::Duration::from_secs(600))
}
fn default_keys_zone() -> Size {
    Size(64 << 20)
}
fn default_loader_files() -> usize {
    100
}
fn default_loader_sleep() -> Dur {
    Dur(std::time::Duration::from_millis(50))
}
fn default_manager_files() -> usize {
    100
}
fn default_manager_threshold() -> Dur {
    Dur(std::time::Duration::from_millis(200))
}
fn default_manager_sleep() -> Dur {
    Dur(std::time::Duration::from_millis(50))
}
