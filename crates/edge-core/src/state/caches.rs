//! Opening the `[[cache]]` zones. Caches live for the whole process: they are opened
//! once at startup (before any socket, so a bad cache path fails early) and carried over
//! by name on reload, because each one owns a loader, a manager and an index that must
//! not be rebuilt on every SIGHUP. A reload changes a kept zone's limits and pacing in
//! place ([`apply_live`]); its `path` and `levels` stay as opened (the server's reload
//! logs that they need a restart: `server/reload.rs`). The zones' `/metrics` families
//! are written here too ([`write_prom`]).

use super::error::StateError;
use crate::config::{validate::parse_levels, CacheZone, Config};
use crate::prom::{Kind, Prom};
use edge_cache::{Cache, CacheConfig, CacheStats, Limits};
use std::collections::HashMap;
use std::sync::Arc;

pub type Caches = HashMap<String, Arc<Cache>>;

/// The cache's config for a `[[cache]]` zone.
pub fn cache_config(z: &CacheZone) -> Result<CacheConfig, StateError> {
    Ok(CacheConfig {
        levels: parse_levels(z.levels.get_ref())?,
        ..settings(z)
    })
}

/// [`cache_config`] but for `levels`, left empty: the one place a zone's fields map to
/// the cache's, [`apply_live`]'s [`Limits`] included.
fn settings(z: &CacheZone) -> CacheConfig {
    CacheConfig {
        name: z.name.get_ref().clone(),
        path: z.path.clone(),
        levels: Vec::new(),
        max_size: z.max_size.0,
        min_free: z.min_free.0,
        inactive: z.inactive.0,
        keys_zone: z.keys_zone.0,
        loader_files: z.loader_files,
        loader_sleep: z.loader_sleep.0,
        manager_files: z.manager_files,
        manager_threshold: z.manager_threshold.0,
        manager_sleep: z.manager_sleep.0,
        verify: z.cache_verify.to_cache(),
    }
}

/// Opens every zone of `cfg`, reusing the already open ones from `existing` by name
/// (as they are: [`apply_live`] changes their limits once the new config is in force).
pub fn open_caches(cfg: &Config, existing: Option<&Caches>) -> Result<Caches, StateError> {
    let mut out = HashMap::new();
    for z in &cfg.cache {
        let name = z.name.get_ref().clone();
        if let Some(c) = existing.and_then(|e| e.get(&name)) {
            out.insert(name, c.clone());
            continue;
        }
        let cc = cache_config(z)?;
        let cache = Cache::open(cc).map_err(|source| StateError::CacheOpen {
            name: name.clone(),
            path: z.path.clone(),
            source,
        })?;
        out.insert(name, cache);
    }
    Ok(out)
}

/// A reload's live cache settings: each zone of `cfg` open in `caches` gets its limits
/// and pacing (`max_size`, `min_free`, `inactive`, `keys_zone`, `loader_*`,
/// `manager_*`) and `cache_verify`, where they differ from what it runs with. Returns
/// the zones whose limits changed.
pub fn apply_live(cfg: &Config, caches: &Caches) -> Vec<String> {
    let mut changed = Vec::new();
    for z in &cfg.cache {
        let Some(c) = caches.get(z.name.get_ref()) else {
            continue;
        };
        let want = Limits::of(&settings(z));
        if c.limits() != want {
            c.set_limits(want);
            changed.push(c.name().to_string());
        }
        c.set_verify(z.cache_verify.to_cache());
    }
    changed
}

/// The cache zones' families of `/metrics`, a series per zone by name (the responses
/// of cached locations are the workers' counters, `metrics/families.rs`).
pub fn write_prom(caches: &Caches, p: &mut Prom) {
    use crate::prom::Kind::{Counter as C, Gauge as G};
    let mut caches: Vec<_> = caches.values().collect();
    caches.sort_by(|a, b| a.name().cmp(b.name()));
    let stats: Vec<_> = caches.iter().map(|c| c.stats()).collect();
    type Family = (&'static str, Kind, &'static str, fn(&CacheStats) -> u64);
    let families: [Family; 9] = [
        ("edgecache_cache_entries", G, "Objects in the index.", |s| s.entries),
        (
            "edgecache_cache_disk_bytes",
            G,
            "Disk bytes used by indexed objects.",
            |s| s.disk_bytes,
        ),
        (
            "edgecache_cache_evictions_total",
            C,
            "Objects evicted for max_size, min_free or keys_zone.",
            |s| s.evictions,
        ),
        (
            "edgecache_cache_loader_done",
            G,
            "1 once the start-up loader has finished.",
            |s| u64::from(s.loader.done),
        ),
        (
            "edgecache_cache_loader_loaded",
            G,
            "Objects indexed by the start-up loader.",
            |s| s.loader.loaded,
        ),
        (
            "edgecache_cache_loader_snapshot",
            G,
            "Objects restored from the index snapshot of the last clean shutdown.",
            |s| s.loader.snapshot,
        ),
        (
            "edgecache_cache_disk_fallback_hits_total",
            C,
            "Hits found on disk by hash before the start-up loader had indexed them.",
            |s| s.disk_fallback_hits,
        ),
        (
            "edgecache_cache_write_errors_total",
            C,
            "Failed object writes (ENOSPC, EIO...); those responses were served uncached.",
            |s| s.write_errors,
        ),
        (
            "edgecache_cache_corrupt_total",
            C,
            "Objects dropped as corrupt (body checksum mismatch with cache_verify, or a file shorter than its header).",
            |s| s.corrupt,
        ),
    ];
    for (name, kind, help, get) in families {
        let mut f = p.family(name, kind, help);
        for s in &stats {
            f.labelled(&[("cache", &s.name)], get(s));
        }
    }
    let collapsed: u64 = caches.iter().map(|c| c.inflight().collapsed()).sum();
    p.counter(
        "edgecache_cache_collapsed_total",
        "Requests that followed another request's origin fetch instead of making their own.",
    )
    .value(collapsed);
}
