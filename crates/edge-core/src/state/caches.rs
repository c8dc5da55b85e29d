//! Opening the `[[cache]]` zones. Caches live for the whole process: they are opened
//! once at startup (before any socket, so a bad cache path fails early) and carried over
//! by name on reload, because each one owns a loader, a manager and an index that must
//! not be rebuilt on every SIGHUP. A reload changes a kept zone's limits and pacing in
//! place ([`apply_live`]); its `path` and `levels` stay as opened (the server's reload
//! logs that they need a restart: `server/reload.rs`).

use super::error::StateError;
use crate::config::{validate::parse_levels, CacheZone, Config};
use edge_cache::{Cache, CacheConfig, Limits};
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
